"""The folders import only what docs/ARCHITECTURE.md ("What each folder may import")
allows: ir nothing of the others; codegen the ir; runtime the codegen and the ir, never
nn; the frontend never codegen; nn the frontend only (never ir, codegen or runtime)."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FOLDERS = {"ir": "ir", "codegen": "codegen", "runtime": "runtime", "nn": "nn"}
SUBPACKAGES = {"ir", "codegen", "runtime", "nn", "distributed"}

# folder -> the layers it must not import ("frontend": fusegrad's own top-level modules)
FORBIDDEN = {
    "ir": {"codegen", "runtime", "nn", "frontend", "distributed"},
    "codegen": {"runtime", "nn", "frontend", "distributed"},
    "runtime": {"nn", "distributed"},
    "frontend": {"codegen"},
    "nn": {"ir", "codegen", "runtime"},
}


def _layer(module: str) -> str | None:
    """The layer of an absolute module name inside fusegrad (None: outside it)."""
    parts = module.split(".")
    if parts[0] != "fusegrad":
        return None
    if len(parts) == 1:
        return "frontend"
    return parts[1] if parts[1] in SUBPACKAGES else "frontend"


def _imports(path: str, package: str):
    """(line, absolute module) of every import in a file of `package` (relative ones
    resolved), function-level imports included."""
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [module] if node.module else [f"{module}.{a.name}" for a in node.names]
            for name in names:
                yield node.lineno, name


def _files():
    for folder in ["frontend", *FOLDERS]:
        package = "fusegrad" if folder == "frontend" else f"fusegrad.{folder}"
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                yield folder, package, os.path.join(ROOT, folder, name)


@pytest.mark.parametrize(("folder", "package", "path"), list(_files()), ids=lambda v: str(v))
def test_imports_follow_the_layers(folder, package, path):
    bad = []
    for line, module in _imports(path, package):
        layer = _layer(module)
        if layer is not None and layer in FORBIDDEN[folder]:
            bad.append(f"{os.path.relpath(path, ROOT)}:{line}: imports {module} ({layer})")
    assert not bad, "\n".join(bad)
