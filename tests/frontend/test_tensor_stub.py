"""frontend/tensor.pyi, the stub that makes every Tensor method findable by `grep "def name"`:
it is what scripts/tensor_stub.py writes today, it declares every public name of Tensor and
of fusegrad.tensor, each `def` names a place where the method is written, and it is Python
that the house's ruff accepts."""

from __future__ import annotations

import ast
import difflib
import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from _files import load_file

import fusegrad
from fusegrad.mathops import MathMixin

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "frontend" / "tensor.pyi"
generator = load_file("tensor_stub", ROOT / "scripts" / "tensor_stub.py")
MODULE = sys.modules["fusegrad.tensor"]  # (fusegrad.tensor itself is the function tensor())


def stub_tree(text: str) -> ast.Module:
    return ast.parse(text, filename=str(STUB))


def declared(body: list[ast.stmt]) -> set[str]:
    """The names a stub's module or class body declares: defs, classes, annotated or
    assigned names, and `from x import y as y` re-exports."""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.name for a in node.names if a.asname == a.name}
    return names


def undeclared_members(cls: type, text: str) -> list[str]:
    """The public attributes of `cls` (dir() without the private ones) that the stub's
    class of that name declares by no `def` and no annotation."""
    tree = stub_tree(text)
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    return sorted(n for n in dir(cls) if not n.startswith("_") and n not in declared(body.body))


def test_the_stub_is_what_the_generator_writes():
    text, written = generator.render(), STUB.read_text()
    diff = "".join(
        list(difflib.unified_diff(written.splitlines(True), text.splitlines(True), n=1))[:40]
    )
    assert written == text, (
        f"frontend/tensor.pyi is out of date: run `{generator.COMMAND}` and commit it\n{diff}"
    )


def test_every_public_attribute_of_tensor_has_a_def_or_an_annotation():
    text = STUB.read_text()
    assert undeclared_members(fusegrad.Tensor, text) == []
    for name in dir(fusegrad.Tensor):  # `grep "def name"` finds each method
        value = getattr(fusegrad.Tensor, name)
        if not name.startswith("_") and callable(value) and not isinstance(value, type):
            assert re.search(rf"^    def {name}\(", text, re.M), name


def test_operator_dunders_are_declared():
    text = STUB.read_text()
    for name in ("__add__", "__radd__", "__getitem__", "__setitem__", "__matmul__", "__mod__"):
        assert re.search(rf"^    def {name}\(self", text, re.M) or re.search(
            rf"^    def {name}\(x", text, re.M
        ), name
    tree = stub_tree(text)
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    ours = {
        n
        for n in dir(fusegrad.Tensor)
        if n.startswith("__") and generator._defined_in(fusegrad.Tensor, n) is not object
    }
    assert ours - generator.SKIP <= declared(body.body)


def test_a_method_added_to_a_class_without_regenerating_fails_the_checks(monkeypatch):
    text = STUB.read_text()
    monkeypatch.setattr(MathMixin, "brand_new_op", lambda x: x, raising=False)
    assert undeclared_members(fusegrad.Tensor, text) == ["brand_new_op"]
    regenerated = generator.render()
    assert regenerated != text
    assert undeclared_members(fusegrad.Tensor, regenerated) == []


def test_every_public_name_of_the_module_is_declared():
    """A .pyi beside tensor.py replaces it for type checkers: `from fusegrad.tensor import
    GradFn` must find GradFn there. Modules, and what tensor.py imports from outside
    fusegrad (numpy, the standard library), are not the module's to declare."""
    outside = set()
    for node in ast.parse((ROOT / "frontend" / "tensor.py").read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            outside |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            outside |= {a.asname or a.name for a in node.names}
    public = {
        name
        for name, value in vars(MODULE).items()
        if not name.startswith("_")
        and name not in outside
        and not isinstance(value, types.ModuleType)
    }
    assert {"Tensor", "realize", "where", "GradFn", "broadcast_shapes"} <= public
    assert sorted(public - declared(stub_tree(STUB.read_text()).body)) == []


def _defines(path: Path, where: str) -> bool:
    """Whether the file at `path` has what a stub comment names: a function or method
    (`sinh`, `Tensor.clamp`), a table's entry (`BASE["eq"]`) or the function that makes it."""
    text = path.read_text()
    entry = re.fullmatch(r"(\w+)\[\"(\w+)\"\]", where)
    if entry:
        table, key = entry.groups()
        return bool(re.search(rf"^{table}\b.*=", text, re.M)) and f'"{key}"' in text
    *classes, name = where.split(".")
    has_class = all(re.search(rf"^class {c}\b", text, re.M) for c in classes)
    return has_class and bool(re.search(rf"^\s*def {name}\(", text, re.M))


def test_each_def_names_a_file_and_a_function_that_exist():
    lines = [line for line in STUB.read_text().splitlines() if re.match(r"\s*def \w+\(", line)]
    assert len(lines) > 400
    for line in lines:
        found = re.search(r"# (\S+\.py): (\S+)", line)
        assert found, f"no place named: {line}"
        path, where = found.groups()
        if "=" in line.split("#", 1)[1]:  # `__hash__ = object.__hash__`
            continue
        assert _defines(ROOT / path, where), line


def test_sinh_leads_from_the_stub_to_its_definition():
    line = next(s for s in STUB.read_text().splitlines() if s.strip().startswith("def sinh("))
    assert line.endswith("# frontend/mathops.py: sinh")
    assert "def sinh(x" in (ROOT / "frontend" / "mathops.py").read_text()


def test_the_stub_is_python_that_ruff_accepts():
    text = STUB.read_text()
    stub_tree(text)
    assert text.startswith(f"# Generated by `{generator.COMMAND}`")
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed")
    for command in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command, str(STUB)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_packaging_ships_the_stub_beside_tensor_py():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["fusegrad"] == "frontend"
    assert "tensor.pyi" in config["package-data"]["fusegrad"]
