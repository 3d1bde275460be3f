"""fusegrad's modules import one another in one direction (issue 29).

Every .py of the package (frontend/, frontend/distributed/, ir/, pipeline/, runtime/,
nn/) is parsed with ast, and each import of a fusegrad module becomes an edge of a
graph, imports inside functions included: an import moved into a function to dodge a
cycle still makes the cycle, only later. The graph must have no cycle, and at most
`MAX_FUNCTION_IMPORTS` of the package's own modules may be imported inside a function,
each with a comment saying why (on its line, or the comment line just above it): an
optional dependency deferred, or a heavy module kept off `import fusegrad`'s path.

Imports under `if TYPE_CHECKING:` never run and are left out of that graph; a second graph
counts them too, and must have no cycle either (issue 57): a module that names a type of a
module above it only for annotations is still a cycle in the design, which a late-bound
service module or a string annotation would only hide.
"""

from __future__ import annotations

import ast
import functools
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {
    "frontend": "fusegrad",
    "frontend/distributed": "fusegrad.distributed",
    "ir": "fusegrad.ir",
    "pipeline": "fusegrad.pipeline",
    "runtime": "fusegrad.runtime",
    "nn": "fusegrad.nn",
}
MAX_FUNCTION_IMPORTS = 10


def _modules() -> dict[str, tuple[str, bool]]:
    """Absolute module name -> (path, is a package's __init__)."""
    out = {}
    for folder, package in PACKAGES.items():
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                init = name == "__init__.py"
                module = package if init else f"{package}.{name[:-3]}"
                out[module] = (os.path.join(ROOT, folder, name), init)
    return out


MODULES = _modules()


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, in_function: bool = False, type_only: bool = False):
    """(import node, inside a function) for every import that can run, and with
    `type_only` those under `if TYPE_CHECKING:` too."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child.test) and not type_only:
            for sub in child.orelse:
                yield from _walk_one(sub, in_function, type_only)
            continue
        yield from _walk_one(child, in_function, type_only)


def _walk_one(node: ast.AST, in_function: bool, type_only: bool):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, in_function
        return
    inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    yield from _walk(node, inner, type_only)


def _targets(node: ast.Import | ast.ImportFrom, module: str, init: bool) -> set[str]:
    """The fusegrad modules an import statement of `module` loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        return {n for n in names if n in MODULES}
    package = module if init else module.rpartition(".")[0]
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1])
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    out = set()
    for alias in node.names:
        # `from . import x`: x is a module when there is one by that name
        sub = f"{source}.{alias.name}"
        out.add(sub if sub in MODULES else source)
    return {m for m in out if m in MODULES}


@functools.cache  # parsed once for the tests below
def _graph(type_only: bool = False):
    """(edges: module -> imported modules, function-level imports: (module, line, text,
    commented)); with `type_only`, the imports under `if TYPE_CHECKING:` are edges too."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    function_level = []
    for module, (path, init) in MODULES.items():
        source = open(path).read()
        lines = source.splitlines()
        for node, in_function in _walk(ast.parse(source, path), type_only=type_only):
            targets = _targets(node, module, init) - {module}
            edges[module] |= targets
            if in_function and targets:
                span = lines[node.lineno - 1 : node.end_lineno]
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                commented = any("#" in s for s in span) or above.startswith("#")
                function_level.append((module, node.lineno, span[0].strip(), commented))
    return edges, function_level


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan's)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _path(edges, component):
    """One cycle through a component, as `a -> b -> ... -> a`."""
    start = min(component)
    seen, path, v = {start: 0}, [start], start
    while True:
        v = min(w for w in edges[v] if w in component)
        if v in seen:
            return " -> ".join(path[seen[v] :] + [v])
        seen[v] = len(path)
        path.append(v)


def test_the_graph_sees_function_level_and_relative_imports():
    edges, _ = _graph()
    assert "fusegrad.tensor" in edges["fusegrad"]  # `from . import tensor as _tensor`
    assert "fusegrad.ir.node" in edges["fusegrad.tensor"]  # `from .ir import node as N`
    assert "fusegrad.nn.module" in edges["fusegrad.serialization"]  # inside a function
    tree = ast.parse(
        "def f():\n    from . import tensor  # why\nif TYPE_CHECKING:\n    from .jit import jit\n"
    )
    (node, in_function), *rest = list(_walk(tree))
    assert in_function and not rest  # the TYPE_CHECKING import never runs
    assert len(list(_walk(tree, type_only=True))) == 2  # but it is a type-only edge
    assert _targets(node, "fusegrad.jit", False) == {"fusegrad.tensor"}
    assert _targets(node, "fusegrad", True) == {"fusegrad.tensor"}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [frozenset({"a", "b"})]


def test_no_import_cycle():
    edges, _ = _graph()
    found = _cycles(edges)
    assert not found, "import cycles (imports inside functions count):\n" + "\n".join(
        f"  {sorted(c)}\n    e.g. {_path(edges, c)}" for c in found
    )


def test_no_import_cycle_counting_type_only_imports():
    """`if TYPE_CHECKING: from .tensor import Tensor` in a module tensor.py imports is a
    cycle too: the op modules take the class from the tensors they receive, or test
    against `tensor_base.TensorBase`, and never name the class above them."""
    edges, _ = _graph(type_only=True)
    found = _cycles(edges)
    assert not found, "import cycles (type-only imports count):\n" + "\n".join(
        f"  {sorted(c)}\n    e.g. {_path(edges, c)}" for c in found
    )


def test_few_function_level_imports_each_explained():
    _, function_level = _graph()
    listing = "\n".join(
        f"  {m}:{line}: {text}{'' if ok else '   <- no comment says why'}"
        for m, line, text, ok in function_level
    )
    assert len(function_level) <= MAX_FUNCTION_IMPORTS, (
        f"{len(function_level)} function-level imports of fusegrad modules "
        f"(at most {MAX_FUNCTION_IMPORTS}):\n{listing}"
    )
    assert all(ok for *_, ok in function_level), f"say why in a comment:\n{listing}"
