"""Why a new schedule was compiled: what changed since the last one at the same user line.

Each line of the user's code that realizes (`loss.item()`, `opt.step()`) remembers the
structure of the graph it compiled last. When it compiles another, the two are
compared and the difference said in words: a Python number that changed value (and
where it was written), an input's shape or dtype, or the graph's ops. A Python
number that changes every step compiles a new schedule every step; the message
suggests a 0-d tensor, which is data, not structure:

    fusegrad: recompiling at train.py:31 (3rd schedule here): the Python number 0.73
    at train.py:24 (mul) was 0.71; pass a changing number as a 0-d tensor
    (fg.tensor(0.73)) so the schedule is reused

`FUSEGRAD_DEBUG=1` prints it at every recompile; `fg.config.recompile_warning = N` makes
it a Python warning (`RecompileWarning`) once a line has compiled N schedules.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

from ..ir.node import Node, toposort
from ..ir.ops import Ops
from ..ir.sites import site_of
from ..pipeline.schedule import const_key
from . import forksafe
from .attribution import capture

_KEEP = 256  # user lines remembered


class RecompileWarning(UserWarning):
    """One line of the user's code keeps compiling new schedules."""


class _LineHistory:
    __slots__ = ("parts", "consts", "count", "warned")

    def __init__(self):
        self.parts: tuple = ()
        self.consts: dict[int, Node] = {}
        self.count = 0
        self.warned = False


class RecompileLog:
    """The last graph structure compiled at each user line, and how many there were."""

    def __init__(self):
        self._lines: OrderedDict = OrderedDict()
        self._lock = forksafe.Lock()

    def explain(self, key: tuple, todo: list[Node], has_value):
        """Note a new schedule for `todo` (structural key `key`); if the same user line
        compiled one before, (what changed in words, schedules compiled at that line, the
        line's Site)."""
        site = capture()
        where = (site.code, site.line) if site is not None else None
        graph = toposort(todo, stop=has_value)
        parts = _parts(graph, has_value)
        with self._lock:
            hist = self._lines.get(where)
            if hist is None:
                hist = self._lines[where] = _LineHistory()
                while len(self._lines) > _KEEP:
                    self._lines.popitem(last=False)
            self._lines.move_to_end(where)
            old_parts, old_consts = hist.parts, hist.consts
            hist.parts = parts
            hist.consts = {i: n for i, n in enumerate(graph) if n.op is Ops.CONST}
            hist.count += 1
            if hist.count < 2:
                return None
            count = hist.count
        change = _difference(old_parts, parts, old_consts, graph, has_value)
        return f"recompiling at {site} ({_ordinal(count)} schedule here): {change}", count, site

    def should_warn(self, count: int, limit: int) -> bool:
        return limit > 0 and count >= limit

    def clear(self) -> None:
        with self._lock:
            self._lines.clear()


def _parts(graph: list[Node], has_value) -> tuple:
    """One entry per node, in `graph`'s order: a constant's value, an input's shape and
    dtype, or an op with its argument, shape, dtype and sources' positions (what the
    structural key holds, node by node, so two graphs can be compared node by node)."""
    index = {id(n): i for i, n in enumerate(graph)}
    out = []
    for n in graph:
        if n.op is Ops.CONST:
            out.append((n.op, n.dtype, n.shape, const_key(n.arg)))
        elif has_value(n):
            out.append((n.shape, n.dtype))
        else:
            out.append((n.op, n.arg, n.shape, n.dtype, tuple(index[id(s)] for s in n.srcs)))
    return tuple(out)


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _difference(old: tuple, new: tuple, old_consts: dict, graph: list[Node], has_value) -> str:
    """What differs between two structural keys' parts, in words."""
    if len(old) == len(new):
        numbers, inputs, other = [], [], []
        leaf = 0
        for i, (a, b) in enumerate(zip(old, new)):
            n = graph[i]
            is_leaf = n.op is not Ops.CONST and has_value(n)
            if a != b:
                if n.op is Ops.CONST and i in old_consts:
                    numbers.append((old_consts[i].arg, n))
                elif is_leaf and len(a) == 2:
                    inputs.append((leaf, a, b))
                else:
                    other.append((i, a, b))
            leaf += is_leaf
        if inputs:  # the nodes computed from them change shape too: say the cause
            leaves = [n for n in graph if n.op is not Ops.CONST and has_value(n)]
            return "; ".join(_input_changed(k, a, b, leaves[k]) for k, a, b in inputs[:3])
        if numbers and not other:
            return _numbers_changed(numbers)
        i, a, b = other[0] if other else (0, (), ())
        if a[:1] == b[:1] and a[2:3] != b[2:3]:  # the same op at another shape
            site = site_of(graph[i])
            at = f" made at {site} ({site.label})" if site is not None else ""
            return f"the {graph[i].op.name} node{at} has shape {b[2]}, was {a[2]}"
    return (
        f"the graph changed ({len(old)} nodes before, {len(new)} now): a different "
        "computation, not only different numbers or shapes"
    )


def _numbers_changed(numbers: list) -> str:
    said: dict[str, str] = {}
    for before, n in numbers:
        site = site_of(n)
        where = f" at {site} ({site.label})" if site is not None else ""
        said.setdefault(where, f"the Python number {n.arg!r}{where} was {before!r}")
    text = "; ".join(list(said.values())[:3])
    value = numbers[0][1].arg
    return (
        f"{text}; pass a number that changes from step to step as a 0-d tensor "
        f"(fg.tensor({value!r})) so the schedule is reused"
    )


def _input_changed(k: int, a: tuple, b: tuple, leaf: Node) -> str:
    (shape_a, dtype_a), (shape_b, dtype_b) = a, b
    site = site_of(leaf)
    what = f"input {k}" + (f" (made at {site})" if site is not None else "")
    if shape_a != shape_b:
        return f"{what} has shape {shape_b}, was {shape_a}"
    return f"{what} has dtype {dtype_b.name}, was {dtype_a.name}"


def warn(message: str, site) -> None:
    """A RecompileWarning pointing at the user's line (not at fusegrad's)."""
    if site is None:
        warnings.warn(message, RecompileWarning, stacklevel=2)
    else:
        warnings.warn_explicit(message, RecompileWarning, site.path, site.line)
