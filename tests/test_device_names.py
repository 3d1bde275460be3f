"""No code outside the backend modules branches on a device's name.

What a device does differently is asked of its backend (`runtime/backend.py`:
`get_backend(name).is_host`, `.lower`, `.run`, ...), so a third device is one module plus
its registration. This reads every module of `frontend/`, `nn/`, `pipeline/` and `ir/`,
and the engine's (`runtime/engine.py`), and fails on:

- a comparison with a device name ("cpu", "cuda", "cuda:N"), also inside a tuple or set
  (`device == "cpu"`, `device not in ("cpu", None)`), or `.startswith` of one;
- an `isinstance` test of a backend's class (`DeviceBuffer`, `CompiledCudaKernel`, ...);
- a read of `config.cuda` (which implementation runs cuda is the cuda backend's business);
- an import of a backend's own module (`runtime/cuda.py`, `cuda_emulator.py`,
  `cpu_backend.py`, `cuda_backend.py`): only the registry imports those.

Naming a device as a value (`Tensor.cuda()` is `self.to("cuda")`) is not a branch.
`ALLOWED` lists the exceptions, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["frontend", "nn", "pipeline", "ir", "runtime/engine.py"]
DEVICE_NAMES = {"cpu", "cuda"}
BACKEND_CLASSES = {"DeviceBuffer", "CompiledCudaKernel", "CudaBackend", "CpuBackend"}
BACKEND_MODULES = {"cuda", "cuda_emulator", "cpu_backend", "cuda_backend"}

# (file, function) -> why it may test a device name. (Parsing the user's string,
# frontend/devices.py, names "cuda" only as the type of a bare ordinal: a value.)
ALLOWED: dict[tuple[str, str], str] = {
    ("frontend/tensor.py", "is_cuda"): "torch's Tensor.is_cuda asks for one device type by name",
}


def _is_device_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        v = node.value
        return v in DEVICE_NAMES or v.startswith("cuda:")
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_device_name(e) for e in node.elts)
    return False


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def device_branches(source: str, path: str = "<string>") -> list[tuple[int, str, str]]:
    """(line, enclosing function, what) for each device-name branch in `source`.

    >>> device_branches("def f(d):\\n    return 1 if d == 'cpu' else 2\\n")
    [(2, 'f', "compares with 'cpu'")]
    """
    tree = ast.parse(source, path)
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        what = None
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                if _is_device_name(operand):
                    what = f"compares with {ast.unparse(operand)}"
        elif isinstance(node, ast.Call):
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "startswith"
                and node.args
                and _is_device_name(node.args[0])
            ):
                what = f"startswith {ast.unparse(node.args[0])}"
            if _name(f) == "isinstance" and len(node.args) == 2:
                classes = node.args[1]
                elts = classes.elts if isinstance(classes, ast.Tuple) else [classes]
                hit = [_name(c) for c in elts if _name(c) in BACKEND_CLASSES]
                if hit:
                    what = f"isinstance of {', '.join(hit)}"
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "cuda"
            and _name(node.value) == "config"
        ):
            what = "reads config.cuda"
        elif isinstance(node, ast.ImportFrom):
            # the module's path from the package root: `from . import cuda` in runtime/ is
            # runtime/cuda.py, in frontend/ it is fusegrad.cuda (frontend/cuda.py)
            here = ["runtime"] if path.startswith("runtime/") and node.level == 1 else []
            full = here + (node.module.split(".") if node.module else [])
            names = set()
            if full and full[-1] == "runtime":
                names = {a.name for a in node.names} & BACKEND_MODULES
            elif len(full) > 1 and full[-2] == "runtime" and full[-1] in BACKEND_MODULES:
                names = {full[-1]}
            if names:
                what = f"imports the backend module {', '.join(sorted(names))}"
        if what is not None:
            found.append((node.lineno, func, what))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(tree, "<module>")
    return found


def _files() -> list[Path]:
    out = []
    for entry in SCANNED:
        p = ROOT / entry
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


def test_no_device_name_branches_outside_the_backends():
    bad = []
    for path in _files():
        rel = str(path.relative_to(ROOT))
        for line, func, what in device_branches(path.read_text(), rel):
            if (rel, func) not in ALLOWED:
                bad.append(f"{rel}:{line} ({func}): {what}")
    assert not bad, (
        "ask the device's backend (runtime/backend.py) instead of testing its name:\n"
        + "\n".join(bad)
    )


@pytest.mark.parametrize(
    "code, path, what",
    [
        ("if device == 'cpu': pass", "x.py", "compares with 'cpu'"),
        ("x = d not in ('cpu', None)", "x.py", "compares with ('cpu', None)"),
        ("x = 'cuda:0' != d", "x.py", "compares with 'cuda:0'"),
        ("x = d.startswith('cuda')", "x.py", "startswith 'cuda'"),
        ("x = isinstance(c, cuda.CompiledCudaKernel)", "x.py", "isinstance of CompiledCudaKernel"),
        ("key = (d, config.cuda)", "x.py", "reads config.cuda"),
        ("from .runtime import cuda", "frontend/x.py", "imports the backend module cuda"),
        ("from .runtime.cuda import to_device", "frontend/x.py", "imports the backend module cuda"),
        ("from . import cuda", "runtime/engine.py", "imports the backend module cuda"),
        (
            "from .cpu_backend import f",
            "runtime/engine.py",
            "imports the backend module cpu_backend",
        ),
    ],
)
def test_the_scan_finds_each_kind_of_branch(code, path, what):
    assert [w for _, _, w in device_branches(code, path)] == [what]


@pytest.mark.parametrize(
    "code",
    [
        "t.to(device='cuda')",  # naming a device as a value
        "x = b.is_host and d == other",
        "from . import cuda",  # in frontend/: fusegrad.cuda (frontend/cuda.py)
        "x = dt.cuda",
    ],
)
def test_the_scan_leaves_values_and_capabilities_alone(code):
    assert device_branches(code, "frontend/x.py") == []
