"""The Python values a jitted call may have baked into its graph, and a check they still hold.

A replay does not run the function's Python, so a Python number the call read
(`x * cfg.lr`) is a constant of the recorded kernels. `fusegrad.jit` keeps, for
each recording, a snapshot of every such value it can find, and records again
when one has changed. It finds them in the function's bytecode (and that of its
nested functions and comprehensions): a name it loads, global, closure variable
or argument, followed by constant attribute and subscript reads:

>>> state = {"scale": 2.0, "n": {"k": 3}}
>>> def f(x):
...     return x * state["scale"] * state["n"]["k"]
>>> sorted(str(r) for r in reads_of(f))  # (x is a tensor: no value to keep)
["state['n']['k']", "state['scale']", 'x']

A read is guarded when its value is a Python number, flag, string or None, an
enum member, a numpy scalar, or a tuple, list, set or dict of those (a list read
with a computed index, `vals[i]`, is guarded whole). What it cannot see is not guarded: a value
reached through a call (`cfg.get_lr()`, a method other than a dict's or list's
reading ones), through a local alias (`c = cfg; c.lr`), read by another
function the step calls (a module's `forward` reading a global: module
attributes themselves are guarded, by `jit._python_values`), or held in a
container of more than `_MAX_LEAVES` values (snapshotting it every call would
cost more than the replay saves). Nor are objects other than these values: a
global list of modules that grows is not seen.
"""

from __future__ import annotations

import dis
import enum
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .tensor import Tensor

_SCALARS = (int, float, bool, str, type(None))
_MAX_LEAVES = 1000  # a bigger container is not snapshotted (not guarded) on every call
# methods that read a container without changing it: `cfg.get("lr")` guards `cfg` whole
_READING_METHODS = frozenset(
    {"get", "keys", "values", "items", "index", "count", "copy", "__getitem__", "__contains__"}
)
_CONST_LOADS = ("LOAD_CONST", "LOAD_SMALL_INT")
_FAST_LOADS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW")
_MISSING = object()
NOT_A_VALUE = object()  # what `snapshot` gives for something it does not guard


def snapshot(v, budget: list[int] | None = None):
    """A comparable copy of `v` when it is a Python value a graph may bake in (see the
    module doc), else NOT_A_VALUE. Types are part of it (1, 1.0 and True differ, as a graph
    of `x * 1` and one of `x * 1.0` may), and floats are compared by their bits (NaN equals
    NaN, -0.0 is not 0.0)."""
    budget = [_MAX_LEAVES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        return NOT_A_VALUE
    t = type(v)
    if t is float:
        return (float, v.hex())
    if t in _SCALARS:
        return (t, v)
    if isinstance(v, np.generic):
        return (t, v.tobytes())
    if isinstance(v, enum.Enum):  # (an IntEnum too: its members are not plain ints)
        return (t, v.name)
    if t in (tuple, list):
        items = tuple(snapshot(x, budget) for x in v)
        return NOT_A_VALUE if any(x is NOT_A_VALUE for x in items) else (t, items)
    if t in (set, frozenset):
        items = frozenset(snapshot(x, budget) for x in v)
        return NOT_A_VALUE if NOT_A_VALUE in items else (t, items)
    if t is dict:
        items = tuple((snapshot(k, budget), snapshot(x, budget)) for k, x in v.items())
        if any(k is NOT_A_VALUE or x is NOT_A_VALUE for k, x in items):
            return NOT_A_VALUE
        return (t, items)
    return NOT_A_VALUE


@dataclass(frozen=True)
class Read:
    """`root` (a global, closure variable or argument of the function) followed by
    constant reads: ("attr", name) or ("item", key)."""

    kind: str  # "global", "cell" or "arg"
    root: str
    steps: tuple[tuple[str, object], ...]

    def __str__(self) -> str:
        return self.root + "".join(f".{k}" if s == "attr" else f"[{k!r}]" for s, k in self.steps)

    def follow(self, v):
        for step, key in self.steps:
            v = getattr(v, key) if step == "attr" else v[key]
        return v


def reads_of(fn) -> list[Read]:
    """The constant-path reads of globals, closure variables and arguments that `fn`'s
    bytecode makes (see the module doc); the ends of mutating method calls left out."""
    fn = unwrap(fn)[0]
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    args = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    outer_cells = set(code.co_cellvars)
    found: dict[Read, None] = {}
    stack = [code]
    while stack:
        c = stack.pop()
        stack.extend(k for k in c.co_consts if hasattr(k, "co_code"))
        ins = [i for i in dis.get_instructions(c) if i.opname not in ("CACHE", "EXTENDED_ARG")]
        stored = {i.argval for i in ins if i.opname in ("STORE_FAST", "DELETE_FAST")}
        for k, i in enumerate(ins):
            if i.opname == "LOAD_GLOBAL":
                kind = "global"
            elif i.opname == "LOAD_DEREF" and i.argval in code.co_freevars:
                # in a nested function, a name of the function's own cells is not a closure
                # variable of the function
                if c is not code and i.argval in outer_cells:
                    continue
                kind = "cell"
            elif i.opname in _FAST_LOADS and c is code and i.argval in args - stored:
                kind = "arg"
            else:
                continue
            read = _chain(kind, i.argval, ins, k + 1)
            if read is not None:
                found[read] = None
    return list(found)


def _chain(kind: str, root: str, ins: list, j: int) -> Read | None:
    steps = []
    while j < len(ins):
        i = ins[j]
        if i.opname == "LOAD_ATTR" and not _loads_method(i):
            steps.append(("attr", i.argval))
            j += 1
        elif i.opname in _CONST_LOADS and j + 1 < len(ins) and _subscript(ins[j + 1]):
            steps.append(("item", i.argval))
            j += 2
        else:
            break
    end = ins[j] if j < len(ins) else None
    if end is not None and (end.opname == "LOAD_METHOD" or _loads_method(end)):
        if end.argval not in _READING_METHODS:  # `log.append(...)`: not a read
            return None
    return Read(kind, root, tuple(steps))


def _loads_method(i) -> bool:
    # Python 3.12 on: LOAD_ATTR's low bit says "load a method for a call"
    return i.opname == "LOAD_ATTR" and sys.version_info >= (3, 12) and bool(i.arg & 1)


def _subscript(i) -> bool:
    return i.opname == "BINARY_SUBSCR" or (i.opname == "BINARY_OP" and i.argrepr == "[]")


def read_guard(fn, args: tuple) -> Callable[[], bool]:
    """A check that every guardable read of `fn` (see `reads_of`) still gives the value it
    gives now, for a call with these arguments (a recording is kept per argument values,
    so an argument's reads are followed from the same object)."""
    func, bound = unwrap(fn)
    fn_args = bound + list(args)
    code = getattr(func, "__code__", None)
    names = code.co_varnames[: len(fn_args)] if code is not None else ()
    cells = dict(zip(code.co_freevars, func.__closure__ or ())) if code is not None else {}
    g = getattr(func, "__globals__", {})
    watched = []
    for read in reads_of(fn):
        if read.kind == "global":
            root = lambda name=read.root: g.get(name, _MISSING)  # noqa: E731
        elif read.kind == "cell":
            root = lambda cell=cells[read.root]: cell.cell_contents  # noqa: E731
        elif read.root in names:
            value = fn_args[names.index(read.root)]
            if isinstance(value, Tensor):  # its shape and dtype key the recording already
                continue
            root = lambda value=value: value  # noqa: E731
        else:  # an argument left to its default
            continue
        value = _value(read, root)
        if value is not NOT_A_VALUE and value is not _MISSING:
            watched.append((read, root, value))

    def holds() -> bool:
        for read, root, value in watched:
            if _value(read, root) != value:
                holds.changed = str(read)  # (said under FUSEGRAD_DEBUG)
                return False
        return True

    return holds


def unwrap(fn) -> tuple[object, list]:
    """The plain function behind `fn` (a bound method, a functools.partial) and the
    positional arguments bound to it."""
    bound: list = []
    while True:
        if isinstance(fn, functools.partial):
            bound = list(fn.args) + bound
            fn = fn.func
        elif getattr(fn, "__self__", None) is not None and hasattr(fn, "__func__"):
            bound = [fn.__self__] + bound
            fn = fn.__func__
        else:
            return fn, bound


def _value(read: Read, root):
    try:
        return snapshot(read.follow(root()))
    except Exception:  # noqa: BLE001  (gone, or raising now: not the recorded value)
        return _MISSING
