"""The folders import only what docs/ARCHITECTURE.md ("What each folder may import")
allows: ir nothing of the others; the pipeline the ir and, of the runtime, only its base
modules (`RUNTIME_BASE`, which themselves import no other runtime module); the runtime
the pipeline and the ir, never nn; the frontend, of the pipeline, only the scheduler,
the compiler and the tile constants (`FRONTEND_FROM_PIPELINE`), never lowering or
rendering; `frontend/distributed/` and nn the frontend only (never ir, pipeline or
runtime). nn sees the frontend through a declared interface: the public names of
`fusegrad` and its one internal interface module `fusegrad.nnapi`, nothing else. No
private name (`_x`) is imported across a package boundary, nor between nn's own
modules."""

from __future__ import annotations

import ast
import os
import types

import pytest

import fusegrad

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# folder -> its package (and layer name)
FOLDERS = {
    "frontend": ("fusegrad", "frontend"),
    "frontend/distributed": ("fusegrad.distributed", "distributed"),
    "ir": ("fusegrad.ir", "ir"),
    "pipeline": ("fusegrad.pipeline", "pipeline"),
    "runtime": ("fusegrad.runtime", "runtime"),
    "nn": ("fusegrad.nn", "nn"),
    "datasets": ("fusegrad.datasets", "datasets"),
}
SUBPACKAGES = {"ir", "pipeline", "runtime", "nn", "distributed", "datasets"}

# layer -> the layers it must not import ("frontend": fusegrad's own top-level modules)
FORBIDDEN = {
    "ir": {"pipeline", "runtime", "nn", "frontend", "distributed", "datasets"},
    # the runtime: its base modules only (ALLOWED)
    "pipeline": {"runtime", "nn", "frontend", "distributed", "datasets"},
    "runtime": {"nn", "frontend", "distributed", "datasets"},
    # the pipeline: its scheduler, compiler and tile constants only (ALLOWED)
    "frontend": {"pipeline", "datasets"},
    "distributed": {"ir", "pipeline", "runtime", "nn", "datasets"},
    "nn": {"ir", "pipeline", "runtime", "distributed", "datasets"},
    # the examples' data: what nn may import, and nn; nothing of the library imports it
    "datasets": {"ir", "pipeline", "runtime", "distributed"},
}
# the runtime's base modules: what the pipeline may import of the runtime (settings,
# fork safety, phase timers, call sites, compile helpers, the backends' interface, the
# thread pool, the dump). They import no other runtime module, so the pipeline never
# reaches the engine or a backend, which import the pipeline.
RUNTIME_BASE = {
    f"fusegrad.runtime.{m}"
    for m in (
        "attribution",
        "backend_registry",
        "compile_servers",
        "config",
        "dump",
        "forksafe",
        "launch",
        "phases",
        "pool",
    )
} | {"fusegrad.runtime"}  # (an empty __init__)
# what the frontend reads of the pipeline, as it did before they were the pipeline's: the
# scheduler (debug views, steering's rule names, the step cache's structural key), the
# tile constants its matmul panel packing and nn's convolutions agree with, and the
# compiler (replaying a dumped kernel). Never the lowering or the renderers.
FRONTEND_FROM_PIPELINE = {
    "fusegrad.pipeline.compiler",
    "fusegrad.pipeline.schedule",
    "fusegrad.pipeline.tiling",
}
# layer -> the modules of a forbidden layer it may import all the same
ALLOWED = {"pipeline": RUNTIME_BASE, "frontend": FRONTEND_FROM_PIPELINE}
# nn's declared interface to the frontend: besides `fusegrad`'s public names, this module
NN_INTERFACE = "fusegrad.nnapi"


def _layer(module: str) -> str | None:
    """The layer of an absolute module name inside fusegrad (None: outside it)."""
    parts = module.split(".")
    if parts[0] != "fusegrad":
        return None
    if len(parts) == 1:
        return "frontend"
    return parts[1] if parts[1] in SUBPACKAGES else "frontend"


def _package_of(module: str) -> str:
    """The package (the folder) a module of fusegrad belongs to: `fusegrad.nn` for
    `fusegrad.nn.conv`, `fusegrad` for `fusegrad.tensor`."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in SUBPACKAGES:
        return ".".join(parts[:2])
    return "fusegrad"


def _imports(path: str, package: str):
    """(line, absolute module, names or None) of every import in a file of `package`
    (relative ones resolved), function-level imports included. `names` are the names a
    `from m import a, b` takes from `m`; None for a plain `import m`."""
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module, [a.name for a in node.names]


def _imports_of_text(source: str, package: str):
    """`_imports` of a module's source text (for the tests of the rules themselves)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    try:
        return list(_imports(f.name, package))
    finally:
        os.unlink(f.name)


def _base_module(path: str) -> str:
    """The runtime module a path of runtime/ is: `fusegrad.runtime.config`."""
    return "fusegrad.runtime." + os.path.basename(path)[:-3]


def _modules_of(module: str, names: list[str] | None):
    """The modules an import reaches: `from fusegrad import nn` reaches fusegrad.nn."""
    if names is None:
        return [module]
    return [module] + [f"{module}.{n}" for n in names if _is_submodule(f"{module}.{n}")]


def _is_submodule(module: str) -> bool:
    parts = module.split(".")
    if parts[0] != "fusegrad":
        return False
    for folder, (package, _) in FOLDERS.items():
        if module == package:
            return True
        if module.startswith(package + ".") and module.count(".") == package.count(".") + 1:
            tail = module.rsplit(".", 1)[1]
            base = os.path.join(ROOT, folder, tail)
            if os.path.exists(base + ".py") or os.path.isdir(base):
                return True
    return False


def _files():
    for folder, (package, layer) in FOLDERS.items():
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                yield folder, layer, package, os.path.join(ROOT, folder, name)


FILES = list(_files())


def _where(path: str, line: int) -> str:
    return f"{os.path.relpath(path, ROOT)}:{line}"


@pytest.mark.parametrize(("folder", "layer", "package", "path"), FILES, ids=lambda v: str(v))
def test_imports_follow_the_layers(folder, layer, package, path):
    bad = []
    for line, module, names in _imports(path, package):
        for reached in _modules_of(module, names):
            other = _layer(reached)
            if reached in ALLOWED.get(layer, ()):
                continue
            if other is not None and other in FORBIDDEN[layer]:
                bad.append(f"{_where(path, line)}: imports {reached} ({other})")
    assert not bad, "\n".join(bad)


BASE_FILES = [f for f in FILES if f[2] == "fusegrad.runtime" and _base_module(f[3]) in RUNTIME_BASE]


def test_the_runtime_base_is_closed():
    """A base module of the runtime imports no runtime module outside the base: what the
    pipeline imports of the runtime never reaches the engine or a backend."""
    assert len(BASE_FILES) == len(RUNTIME_BASE) - 1, "a module named in RUNTIME_BASE is gone"
    bad = []
    for _, _, package, path in BASE_FILES:
        for line, module, names in _imports(path, package):
            for reached in _modules_of(module, names):
                if reached.startswith("fusegrad.runtime") and reached not in RUNTIME_BASE:
                    bad.append(f"{_where(path, line)}: imports {reached} (not a base module)")
    assert not bad, "\n".join(bad)


def test_the_allowed_exceptions_are_checked():
    """The exceptions to FORBIDDEN are not the whole of a layer: the pipeline importing
    the engine, or the frontend the lowering, is refused."""
    source = "from ..runtime import engine\nfrom ..runtime.config import config\n"
    reached = [
        r
        for _, m, names in _imports_of_text(source, "fusegrad.pipeline")
        for r in _modules_of(m, names)
    ]
    assert "fusegrad.runtime.engine" in reached and "fusegrad.runtime.engine" not in RUNTIME_BASE
    assert "fusegrad.runtime.config" in RUNTIME_BASE
    assert "fusegrad.pipeline.lower" not in FRONTEND_FROM_PIPELINE


def _public_names() -> set[str]:
    """`fusegrad`'s public names that are not modules (a module is not an interface)."""
    return {
        n for n in fusegrad.__all__ if not isinstance(getattr(fusegrad, n, None), types.ModuleType)
    }


# datasets/ sees the frontend as nn does (and nn itself)
NN_FILES = [f for f in FILES if f[1] in ("nn", "datasets")]


@pytest.mark.parametrize(("folder", "layer", "package", "path"), NN_FILES, ids=lambda v: str(v))
def test_nn_sees_the_frontend_through_its_interface(folder, layer, package, path):
    """An nn module imports its siblings, `fusegrad.nnapi`, and `fusegrad`'s public
    (non-module) names: nothing else of the package."""
    public = _public_names()
    bad = []
    for line, module, names in _imports(path, package):
        if _layer(module) is None or module == NN_INTERFACE:
            continue
        if _package_of(module) in (package, "fusegrad.nn"):
            continue
        if module == "fusegrad" and names is not None:
            for name in names:
                if name not in public and f"fusegrad.{name}" != NN_INTERFACE:
                    bad.append(f"{_where(path, line)}: takes fusegrad.{name} (not public)")
            continue
        bad.append(f"{_where(path, line)}: imports {module} (not nn's interface)")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(("folder", "layer", "package", "path"), FILES, ids=lambda v: str(v))
def test_no_private_names_across_packages(folder, layer, package, path):
    """`from m import _x` only inside one package (nn: not even there)."""
    bad = []
    for line, module, names in _imports(path, package):
        if names is None or _layer(module) is None:
            continue
        crosses = _package_of(module) != package or layer in ("nn", "datasets")
        for name in names:
            if crosses and name.startswith("_") and not name.startswith("__"):
                bad.append(f"{_where(path, line)}: takes {module}.{name} (private)")
    assert not bad, "\n".join(bad)


def test_the_rules_see_every_folder():
    """Every folder with Python files under the package's roots has its rules here."""
    seen = set(FOLDERS)
    for top in ("frontend", "ir", "pipeline", "runtime", "nn", "datasets"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            rel = os.path.relpath(dirpath, ROOT)
            if "__pycache__" not in rel and any(f.endswith(".py") for f in files):
                assert rel in seen, f"{rel} has no layering rules in tests/test_layering.py"
