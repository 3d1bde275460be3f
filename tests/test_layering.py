"""The folders import only what docs/ARCHITECTURE.md ("What each folder may import")
allows: ir nothing of the others; codegen the ir; runtime the codegen and the ir, never
nn; the frontend never codegen; `frontend/distributed/` and nn the frontend only (never
ir, codegen or runtime). nn sees the frontend through a declared interface: the public
names of `fusegrad` and its one internal interface module `fusegrad.nnapi`, nothing
else. No private name (`_x`) is imported across a package boundary, nor between nn's
own modules."""

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
    "codegen": ("fusegrad.codegen", "codegen"),
    "runtime": ("fusegrad.runtime", "runtime"),
    "nn": ("fusegrad.nn", "nn"),
    "datasets": ("fusegrad.datasets", "datasets"),
}
SUBPACKAGES = {"ir", "codegen", "runtime", "nn", "distributed", "datasets"}

# layer -> the layers it must not import ("frontend": fusegrad's own top-level modules)
FORBIDDEN = {
    "ir": {"codegen", "runtime", "nn", "frontend", "distributed", "datasets"},
    "codegen": {"runtime", "nn", "frontend", "distributed", "datasets"},
    "runtime": {"nn", "frontend", "distributed", "datasets"},
    "frontend": {"codegen", "datasets"},
    "distributed": {"ir", "codegen", "runtime", "nn", "datasets"},
    "nn": {"ir", "codegen", "runtime", "distributed", "datasets"},
    # the examples' data: what nn may import, and nn; nothing of the library imports it
    "datasets": {"ir", "codegen", "runtime", "distributed"},
}
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
            if other is not None and other in FORBIDDEN[layer]:
                bad.append(f"{_where(path, line)}: imports {reached} ({other})")
    assert not bad, "\n".join(bad)


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
    for top in ("frontend", "ir", "codegen", "runtime", "nn", "datasets"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            rel = os.path.relpath(dirpath, ROOT)
            if "__pycache__" not in rel and any(f.endswith(".py") for f in files):
                assert rel in seen, f"{rel} has no layering rules in tests/test_layering.py"
