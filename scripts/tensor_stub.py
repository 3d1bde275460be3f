"""Regenerate frontend/tensor.pyi: every public name of `fusegrad.tensor` and every method,
property and operator of `Tensor`, one `def` line each, so `grep "def sinh"` finds it.

    .venv/bin/python scripts/tensor_stub.py           # rewrites frontend/tensor.pyi
    .venv/bin/python scripts/tensor_stub.py --check   # exit 1 where the file is out of date

Most of Tensor's methods are not written in tensor.py: they are the functions of the op
family modules, put into the class by tables (`MathMixin`'s `METHODS`, the in-place
variants of `inplace_methods.py`, ...). The stub gives each one's signature, from
`inspect.signature` of the function Tensor really has, the first paragraph of its
docstring, and on the `def` line a comment naming where it is written:

    def round(x, decimals: int = 0):  # frontend/mathops.py: round_
    def mul(a, b): ...  # frontend/mathops.py: METHODS["mul"]
    def exp(x):  # frontend/mathops.py: _primitive
    def sqrt_(self, *args, **kwargs) -> Tensor:  # frontend/inplace_methods.py: _same_shape
    def sum(  # frontend/shapeops.py: sum_ (through with_numpy_names)

An annotation is kept where each name in it means in the function's module what it means
in tensor.py (so the stub, which imports as tensor.py does, reads it alike); other
annotations are left out, and defaults other than plain literals are written `...`. In a
class body, where `int` is the method Tensor.int, the builtin is written `builtins.int`;
`x: T = None` is written `x: T | None = None`. Methods are in the groups of PyTorch's
documentation (`GROUPS`), sorted by name within each, so the file diffs cleanly.
tests/frontend/test_tensor_stub.py fails when the file is not what this script writes.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import math
import re
import sys
import textwrap
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "frontend" / "tensor.pyi"
COMMAND = ".venv/bin/python scripts/tensor_stub.py"
WIDTH = 100
SUMMARY = 180  # characters of a docstring's paragraph kept whole; longer, its sentence

# Tensor's methods in the groups of PyTorch's documentation. A name in no list goes by
# its module (FALLBACK), or to "In-place" where it ends in "_".
GROUPS = {
    "Attributes": (
        "T data device dtype is_cpu is_cuda is_mps is_xpu mT ndim node shape dim size "
        "numel nelement element_size stride is_contiguous is_floating_point"
    ),
    "Creation (new_*)": "new_empty new_full new_ones new_tensor new_zeros",
    "Conversion, dtype and device": (
        "bfloat16 bool byte cast char clone cpu cuda double float half int item long numpy "
        "realize short to tolist type type_as"
    ),
    "Autograd": (
        "backward detach detach_ grad grad_fn is_leaf register_hook "
        "register_post_accumulate_grad_hook requires_grad "
        "requires_grad_ retain_grad retains_grad"
    ),
    "Pointwise math": (
        "abs absolute neg negative relu sigmoid tanh square rsqrt reciprocal clamp clip "
        "clamp_min clamp_max addcmul addcdiv logical_not"
    ),
    "Comparison": (
        "allclose argsort eq equal fmax fmin ge greater greater_equal gt isclose isfinite "
        "isinf isnan isneginf isposinf isreal kthvalue le less less_equal lt maximum "
        "minimum msort ne not_equal sort topk"
    ),
    "Reductions": (
        "all amax amin aminmax any argmax argmin count_nonzero dist log_softmax logsumexp "
        "max mean median min mode nanmean nanmedian nanquantile nansum norm prod quantile "
        "softmax std std_mean sum unique var var_mean"
    ),
    "Matrices (BLAS and LAPACK)": "addbmm addmm addmv baddbmm bmm dot matmul mm outer",
    "Shape and views": (
        "broadcast_to chunk contiguous expand expand_as flatten movedim moveaxis narrow pad "
        "permute ravel repeat reshape reshape_as split squeeze sum_to_size swapaxes "
        "swapdims t tensor_split tile transpose unbind unflatten unfold unsqueeze view "
        "view_as"
    ),
    "Indexing, slicing, joining": (
        "argwhere gather index_add index_copy index_fill index_put index_select "
        "masked_fill masked_scatter masked_select nonzero scatter scatter_add "
        "scatter_reduce take take_along_dim where where_"
    ),
    "Other operations": (
        "bincount cross cummax cummin cumprod cumsum diag diag_embed diagonal diff flip "
        "fliplr flipud histc kron logcumsumexp repeat_interleave roll rot90 trace tril triu"
    ),
    "In-place random sampling": "bernoulli_ exponential_ normal_ random_ uniform_",
    "In-place": "assign_",
}
FALLBACK = {
    "creation.py": "Creation (new_*)",
    "indexing.py": "Indexing, slicing, joining",
    "mathops.py": "Pointwise math",
    "movement.py": "Shape and views",
    "reduce.py": "Reductions",
    "searching.py": "Other operations",
    "shapeops.py": "Other operations",
}
OPERATORS = (
    "abs add and eq floordiv ge getitem gt iadd imul invert isub itruediv le lshift lt "
    "matmul mod mul ne neg or pos pow radd rand rfloordiv rlshift rmatmul rmod rmul ror "
    "rpow rrshift rshift rsub rtruediv rxor setitem sub truediv xor"
).split()
ORDER = [*GROUPS, "In-place", "Operators", "Python protocols", "Other"]
GROUP_OF = {name: group for group, names in GROUPS.items() for name in names.split()}

# what a class says about itself, not members to declare
SKIP = {
    "__annotations__",
    "__dict__",
    "__doc__",
    "__firstlineno__",
    "__module__",
    "__qualname__",
    "__slots__",
    "__static_attributes__",
    "__weakref__",
}
# slots have no annotation to read: their types, where known for certain
SLOT_TYPES = {"node": "N.Node", "requires_grad": "bool"}


def group_of(name: str, home: str) -> str:
    """The documentation group of Tensor's `name`, defined in the file `home`."""
    if name.startswith("__"):
        return "Operators" if name.strip("_") in OPERATORS else "Python protocols"
    if name in GROUP_OF:
        return GROUP_OF[name]
    if name.endswith("_"):
        return "In-place"
    return FALLBACK.get(Path(home).name, "Other")


# ---------------------------------------------------------------- where a function lives


def innermost(f):
    """`f` without the decorators that wrapped it (functools.wraps's `__wrapped__`)."""
    while hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    return f


def source_path(f) -> str:
    """The file defining `f`, relative to its checkout (`frontend/mathops.py`), whichever
    checkout the fusegrad imported here comes from."""
    path = Path(inspect.getsourcefile(f)).resolve()
    root = next((p for p in path.parents if (p / "pyproject.toml").exists()), ROOT)
    return path.relative_to(root).as_posix()


def _encloses(code, target) -> bool:
    """Whether the code object `target` is `code`'s or that of a function nested in it (or
    a copy of one renamed by `code.replace`, as mathops's primitives are: the same file
    and first line)."""
    same = code is target or (
        code.co_filename == target.co_filename and code.co_firstlineno == target.co_firstlineno
    )
    return same or any(
        isinstance(c, types.CodeType) and _encloses(c, target) for c in code.co_consts
    )


def _module_of(code):
    """The loaded module whose file holds the code object `code`."""
    path = str(Path(code.co_filename).resolve())
    if path not in _FILES:
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if file:
                _FILES.setdefault(str(Path(file).resolve()), module)
    return _FILES[path]


_FILES: dict = {}  # resolved file path -> module


def _written_in(f):
    """The module whose names `f`'s annotations use (the innermost function's)."""
    code = getattr(innermost(f), "__code__", None)
    return _module_of(code) if code is not None else builtins


def _maker(f) -> str | None:
    """The module-level function of `f`'s module whose body makes `f` (`_same_shape` for
    `sqrt_`, `with_numpy_names` for `sum`)."""
    module = _module_of(f.__code__)  # (not f.__module__: functools.wraps copies it)
    for name, value in sorted(vars(module).items()):
        code = getattr(value, "__code__", None)
        if isinstance(code, types.CodeType) and code is not f.__code__:
            if _encloses(code, f.__code__):
                return name
    return None


def where_written(f) -> str:
    """`file: name` for the function `f`: its name in its module (`sinh`, `Tensor.clamp`),
    the table entry holding it (`METHODS["mul"]`), or the function that makes it, with
    the wrappers that add parameters to it (`sum_ (through with_numpy_names)`)."""
    inner = innermost(f)
    module = sys.modules[inner.__module__]
    where = None
    if "<" not in inner.__qualname__:  # not a lambda nor made in a function
        obj = module
        for part in inner.__qualname__.split("."):
            obj = getattr(obj, part, None)
            obj = obj.fget if isinstance(obj, property) else obj
        if callable(obj) and innermost(getattr(obj, "__func__", obj)) is inner:
            where = inner.__qualname__
    if where is None:  # a table's entry written out (in the smallest table), or its maker
        chain = [f]
        while hasattr(chain[-1], "__wrapped__"):
            chain.append(chain[-1].__wrapped__)
        source = inspect.getsource(module)
        tables = sorted(
            (len(table), f'{name}["{key}"]')
            for name, table in vars(module).items()
            if isinstance(table, dict) and not name.startswith("__")
            for key, value in table.items()
            if isinstance(key, str) and f'"{key}"' in source and any(value is c for c in chain)
        )
        where = tables[0][1] if tables else _maker(inner) or inner.__qualname__
    wrappers = []
    while hasattr(f, "__wrapped__"):
        if _added_keywords(f, []):  # a wrapper that adds parameters (with_numpy_names)
            wrappers.append(_maker(f) or f.__code__.co_name)
        f = f.__wrapped__
    through = f" (through {', '.join(wrappers)})" if wrappers else ""
    return f"{source_path(inner)}: {where}{through}"


# ---------------------------------------------------------------- signatures


MISSING = object()


def _type_checking_names(module) -> dict:
    """The names `module` imports under `if TYPE_CHECKING:` (`Tensor`), resolved."""
    names = {}
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    package = module.__name__.rsplit(".", stmt.level)[0] if stmt.level else ""
                    source = importlib.import_module(
                        (package + "." + stmt.module) if stmt.module else package
                    )
                    for alias in stmt.names:
                        names[alias.asname or alias.name] = getattr(source, alias.name)
    return names


_TC_CACHE: dict = {}


def _meaning(name: str, module):
    """What `name` means in `module`: a global, an import under TYPE_CHECKING or a builtin."""
    if name in vars(module):
        return vars(module)[name]
    if module.__name__ not in _TC_CACHE:
        _TC_CACHE[module.__name__] = _type_checking_names(module)
    if name in _TC_CACHE[module.__name__]:
        return _TC_CACHE[module.__name__][name]
    return getattr(builtins, name, MISSING)


def _base():
    """The class the op families annotate their results with (`frontend/tensor_base.py`)."""
    return importlib.import_module("fusegrad.tensor_base").TensorBase


class Renderer:
    """Writes signatures whose annotations the stub can read, noting the names they need."""

    def __init__(self, home):
        self.home = home  # the module the stub stands for (fusegrad.tensor)
        self.used: set[str] = set()  # home's names that the annotations written use
        # the members of the class being written: in its body `int` is Tensor.int, so
        # the builtin is written `builtins.int`
        self.shadowed: set[str] = set()

    def annotation(self, annotation, module) -> str | None:
        """`annotation`, read in `module`, as stub text, or None where it would not read
        the same in the stub."""
        if annotation is inspect.Parameter.empty:
            return None
        if not isinstance(annotation, str):  # (no `from __future__ import annotations`)
            name = getattr(annotation, "__name__", "")
            builtin = vars(builtins).get(name) is annotation
            return self.annotation(name, builtins) if builtin else None
        try:
            tree = ast.parse(annotation, mode="eval")
        except SyntaxError:
            return None
        names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
        plain = [n for n in names if n.id == "TensorBase" and _meaning(n.id, module) is _base()]
        for node in plain:  # an op family's result: the plain Tensor it builds (`_plain`)
            node.id = "Tensor"
        if plain:
            annotation = ast.unparse(tree)
        for node in names:
            there = (
                _meaning(node.id, module) if node not in plain else _meaning("Tensor", self.home)
            )
            if there is MISSING or there is not _meaning(node.id, self.home):
                return None
        self.used |= {n.id for n in names if n.id in vars(self.home)}
        shadowed = [n for n in names if n.id in self.shadowed and n.id not in vars(self.home)]
        if not shadowed:
            return annotation
        self.used.add("builtins")
        for node in shadowed:
            node.id = "builtins." + node.id
        return ast.unparse(tree)

    def attribute(self, annotation: str | None, module) -> str:
        """The annotation of an attribute: `annotation`, read in `module`, or `Any`."""
        text = self.annotation(annotation, module) if annotation else None
        if text is None:
            self.used.add("Any")
        return text or "Any"

    @staticmethod
    def default(value) -> str:
        """A default as stub text: plain literals as they are, anything else `...`."""
        if isinstance(value, str) and value.isprintable() and '"' not in value + "\\":
            return f'"{value}"' if len(value) <= 30 else "..."
        plain = (type(None), bool, int)
        if isinstance(value, plain) and len(repr(value)) <= 30:
            return repr(value)
        if isinstance(value, float) and math.isfinite(value):
            return repr(value)
        if isinstance(value, tuple) and all(isinstance(v, plain) for v in value):
            return repr(value)
        return "..."

    def parameters(self, f, name: str) -> tuple[list[str], str | None]:
        """(`f`'s parameters as stub text, its return annotation) or `(self, *args,
        **kwargs)` where `f` has no signature."""
        try:
            sig = inspect.signature(f)
        except (TypeError, ValueError):
            return ["self", "*args", "**kwargs"], None
        params = _with_wrapper_keywords(f, list(sig.parameters.values()))
        out, star = [], False
        P = inspect.Parameter
        for i, p in enumerate(params):
            if p.kind is P.KEYWORD_ONLY and not star:
                out.append("*")
            star = star or p.kind in (P.KEYWORD_ONLY, P.VAR_POSITIONAL)
            text = {P.VAR_POSITIONAL: "*", P.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
            annotation = self.annotation(p.annotation, _written_in(f))
            if annotation and p.default is None and not re.search(r"None|Optional|Any", annotation):
                annotation += " | None"  # (PEP 484 has no implicit Optional)
            if annotation:
                text += ": " + annotation
            if p.default is not P.empty:
                text += (" = " if annotation else "=") + self.default(p.default)
            out.append(text)
            last_positional = i + 1 == len(params) or params[i + 1].kind is not P.POSITIONAL_ONLY
            if p.kind is P.POSITIONAL_ONLY and last_positional:
                out.append("/")
        return out, self.annotation(sig.return_annotation, _written_in(f))


def _added_keywords(wrapper, params: list) -> list:
    """The keyword-only parameters of `wrapper`'s own signature not among `params`."""
    own = inspect.signature(wrapper, follow_wrapped=False).parameters.values()
    names = {p.name for p in params}
    return [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in names]


def _with_wrapper_keywords(f, params: list) -> list:
    """`params` (the wrapped function's) plus the keyword-only parameters that a wrapper
    `(self, *args, axis=None, **kwargs)` adds on the way (`with_numpy_names`)."""
    P = inspect.Parameter
    while hasattr(f, "__wrapped__"):
        extra = _added_keywords(f, params)
        if extra:
            tail = [p for p in params if p.kind is P.VAR_KEYWORD]
            head = [p for p in params if p.kind is not P.VAR_KEYWORD]
            params = head + extra + tail
        f = f.__wrapped__
    return params


# ---------------------------------------------------------------- the stub's text


def summary(f) -> str | None:
    """The first paragraph of `f`'s docstring on one line (up to an example), or its first
    sentence where the paragraph is long."""
    doc = getattr(f, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    lines = []
    for line in inspect.cleandoc(doc).splitlines():
        if not line.strip() or line.lstrip().startswith(">>>"):
            break
        lines.append(line)
    text = " ".join(" ".join(lines).split())
    sentence = re.match(r"(.+?[.!?])\s+(?=[A-Z(`])", text)
    if len(text) > SUMMARY and sentence:
        return sentence.group(1)
    return text or None


def docstring(text: str | None, indent: str) -> list[str]:
    """A docstring of `text`, wrapped to the stub's width."""
    if not text:
        return []
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    one = f'{indent}"""{text}"""'
    if len(one) <= WIDTH:
        return [one]
    width = WIDTH - len(indent) - 3  # (the first line holds the quotes)
    lines = textwrap.wrap(text, width, break_on_hyphens=False)
    if len(lines) == 1:  # too long with its quotes: two lines (one would be joined back)
        lines = textwrap.wrap(text, len(text) - 12, break_on_hyphens=False)
    lines[0] = '"""' + lines[0]
    return [indent + line for line in lines] + [indent + '"""']


def define(
    renderer: Renderer, name: str, f, indent: str, decorators=(), where: str | None = None
) -> list[str]:
    """`def name(...)` for the function `f`, on one line with where it is written (the
    parameters on lines of their own where it would be too long), then its docstring."""
    params, returns = renderer.parameters(f, name)
    where = where or where_written(f)
    doc = docstring(summary(f), indent + "    ")
    body = "" if doc else " ..."
    arrow = f" -> {returns}" if returns else ""
    lines = [indent + d for d in decorators]
    one = f"{indent}def {name}({', '.join(params)}){arrow}:{body}  # {where}"
    if len(one) <= WIDTH:
        return [*lines, one, *doc]
    head = f"{indent}def {name}(  # {where}"
    if len(head) > WIDTH:  # a name too long to fit with where it is written
        head += "  # noqa: E501"
    lines.append(head)
    inner = indent + "    " + ", ".join(params) + ("," if len(params) == 1 else "")
    if len(inner) <= WIDTH:
        lines.append(inner)
    else:
        lines += [f"{indent}    {p}," for p in params]
    return [*lines, f"{indent}){arrow}:{body}", *doc]


def _defined_in(cls, name: str):
    """The class of `cls`'s MRO whose body has `name`."""
    return next(k for k in cls.__mro__ if name in k.__dict__)


def member(renderer: Renderer, cls, name: str, indent: str) -> list[str]:
    """The stub lines of `cls`'s member `name`."""
    value = _defined_in(cls, name).__dict__[name]
    if isinstance(value, property):
        lines = define(renderer, name, value.fget, indent, ["@property"])
        if value.fset is not None:
            lines += define(renderer, name, value.fset, indent, [f"@{name}.setter"])
        return lines
    if isinstance(value, staticmethod):
        return define(renderer, name, value.__func__, indent, ["@staticmethod"])
    if isinstance(value, types.FunctionType):
        return define(renderer, name, value, indent)
    if callable(value):  # a slot wrapper: `__hash__ = object.__hash__`
        where = f"{source_path(cls)}: {cls.__name__}.{name} = {value.__qualname__}"
        return define(renderer, name, value, indent, where=where)
    if isinstance(value, types.MemberDescriptorType):  # a slot
        return [f"{indent}{name}: {renderer.attribute(SLOT_TYPES.get(name), renderer.home)}"]
    return [f"{indent}{name}: {renderer.attribute(type(value).__name__, builtins)}"]


def members(cls, own: bool) -> list[str]:
    """The public names and dunders of `cls` to declare: all of its MRO's but object's,
    or (`own`) only those of its class body."""
    names = vars(cls) if own else dir(cls)
    out = []
    for name in sorted(names):
        if name in SKIP or (name.startswith("_") and not name.startswith("__")):
            continue
        if _defined_in(cls, name) is object:
            continue
        out.append(name)
    return out


def home_file(cls, name: str) -> str:
    """The file where Tensor's `name` is written (for its group)."""
    value = _defined_in(cls, name).__dict__[name]
    f = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
    if isinstance(f, types.FunctionType):
        return source_path(innermost(f))
    return ""


def tensor_class(renderer: Renderer, cls) -> list[str]:
    """`class Tensor:` with every member, in groups, sorted within each."""
    grouped: dict[str, list[str]] = {}
    for name in members(cls, own=False):
        grouped.setdefault(group_of(name, home_file(cls, name)), []).append(name)
    lines = [f"class {cls.__name__}:", *docstring(summary(cls), "    ")]
    renderer.shadowed = set(dir(cls))
    for group in ORDER:
        if group in grouped:
            lines += ["", f"    # {group}"]
            for name in grouped.pop(group):
                lines += member(renderer, cls, name, "    ")
    assert not grouped, grouped
    renderer.shadowed = set()
    return lines


def other_class(renderer: Renderer, cls) -> list[str]:
    """A class of tensor.py besides Tensor, with the members of its own body."""
    bases = ", ".join(b.__name__ for b in cls.__bases__ if b is not object)
    lines = [f"class {cls.__name__}({bases}):" if bases else f"class {cls.__name__}:"]
    lines += docstring(summary(cls), "    ")
    renderer.shadowed = set(dir(cls))
    for name in members(cls, own=True):
        lines += member(renderer, cls, name, "    ")
    renderer.shadowed = set()
    return lines if len(lines) > 1 else [lines[0] + " ..."]


def _imports(module) -> dict[str, tuple[int, str, str]]:
    """tensor.py's top-level imports: bound name -> (level, module, imported name); an
    `import x as y` is (0, "", x)."""
    out = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for a in node.names:
                out[a.asname or a.name] = (node.level, node.module or "", a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = (0, "", a.name)
    return out


def _import_lines(home, reexported: set[str], used: set[str]) -> tuple[list[str], list[str]]:
    """(the stub's import statements, sorted as isort sorts them, and the assignments that
    re-export a name tensor.py imports under another: `inplace_variants = variants`): the
    names to re-export and those the annotations use."""
    imports = _imports(home)
    plain: dict[tuple, list[str]] = {(0, "typing"): ["Any"]} if "Any" in used else {}
    statements, assigned = [], []
    if "builtins" in used:  # `builtins.int` where a class has a method `int`
        statements.append((0, "builtins", None, "import builtins"))
    for name in sorted(reexported | (used & set(imports))):
        level, source, original = imports[name]
        if not level and not source:  # import numpy as np
            statements.append((0, original, None, f"import {original} as {name}"))
        elif name in reexported and original != name:  # re-exported below, by assignment
            plain.setdefault((level, source), []).append(original)
            assigned.append(f"{name} = {original}")
        elif name in reexported or original != name:  # `X as X` is a re-export in a stub
            line = f"from {'.' * level}{source} import {original} as {name}"
            statements.append((level, source, original, line))
        else:
            plain.setdefault((level, source), []).append(name)
    for (level, source), names in plain.items():
        names = sorted(set(names), key=_isort_key)
        line = f"from {'.' * level}{source} import {', '.join(names)}"
        statements.append((level, source, names[0], line))
    return sorted_imports(statements), assigned


def _isort_key(name: str) -> tuple:
    """isort's order of names: CONSTANTS, then Classes, then the rest, each by name."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return (kind, name.lower(), name)


def sorted_imports(statements: list[tuple]) -> list[str]:
    """The lines of `statements` (level, module, first name imported or None for `import
    x`, line) in isort's sections (standard library, third party, ours), each `import x`
    first, then `from x import y` by module and by the first name."""
    sections: dict[int, list[tuple]] = {0: [], 1: [], 2: []}
    for level, source, first, line in statements:
        top = source.split(".")[0]
        section = 2 if level else 0 if top in sys.stdlib_module_names else 1
        key = (first is not None, -level, source.lower(), _isort_key(first or ""))
        sections[section].append((key, line))
    out = []
    for section in sections.values():
        if section:
            out += [line for _, line in sorted(section)] + [""]
    return out


def render() -> str:
    """The text of frontend/tensor.pyi."""
    import fusegrad  # noqa: F401  (binds fusegrad.tensor; the name itself is the function)

    home = sys.modules["fusegrad.tensor"]
    renderer = Renderer(home)
    imports = _imports(home)
    public = sorted(n for n in vars(home) if not n.startswith("_") and n != "annotations")
    ours = {n for n in public if inspect.getmodule(vars(home)[n]) is home or n not in imports}
    reexported = {
        n
        for n in public
        if n in imports and imports[n][0] > 0 and not isinstance(vars(home)[n], types.ModuleType)
    }

    body: list[str] = []
    for name in sorted(ours):
        value = vars(home)[name]
        if isinstance(value, types.UnionType):
            body.append(f"{name} = {value!r}")
        elif not isinstance(value, (type, types.FunctionType)):
            body.append(f"{name}: {type(value).__name__}")
    classes = [vars(home)[n] for n in sorted(ours) if isinstance(vars(home)[n], type)]
    body += [""]
    body += tensor_class(renderer, home.Tensor)
    for cls in classes:
        if cls is not home.Tensor:
            body += ["", *other_class(renderer, cls)]
    body += [""]
    for name in sorted(ours):
        if isinstance(vars(home)[name], types.FunctionType):
            lines = define(renderer, name, vars(home)[name], "")
            body += lines + ([""] if lines[-1].endswith('"""') else [])  # after a docstring

    import_lines, assigned = _import_lines(home, reexported, renderer.used)
    header = [
        f"# Generated by `{COMMAND}`: do not edit.",
        "# Every public name of fusegrad.tensor and every method of Tensor, with the file and the",
        "# function that implement it after each `def`. Names tensor.py imports from elsewhere in",
        "# fusegrad are re-exported; the standard library's, numpy's and modules are not.",
        "",
    ]
    text = header + import_lines + assigned + ([""] if assigned else []) + body
    return "\n".join(text).rstrip("\n").replace("\n\n\n", "\n\n") + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if STUB.read_text() != text:
            print(f"{STUB.relative_to(ROOT)} is out of date: run `{COMMAND}`")
            return 1
        return 0
    STUB.write_text(text)
    print(f"wrote {STUB.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
