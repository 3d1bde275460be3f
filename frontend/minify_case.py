"""The minifier's cases: a graph standing alone, rebuilt on fresh inputs, and its check.

A *case* (`Case`) is a graph as plain data: its entries (op, sources by position, arg,
shape, dtype), sources first, the values of its inputs (numpy arrays), and its outputs.
`record` makes one from live nodes, stopping at the nodes taken as inputs; `build` makes
the nodes again, each input a fresh buffer (so nothing is computed already) and every
other node through the constructors of `ir/node.py` (so a case with shrunk sizes gets
its shapes from the shape rules, and a graph no rule allows fails to build); `check`
realizes outputs and compares them with the reference evaluator (`ir/reference.py`).
`frontend/minify.py` shrinks cases; `frontend/minify_script.py` writes them out.

>>> from fusegrad.ir.ops import Ops
>>> x = tensor([1.0, 2.0]).node
>>> case = record([N.unary(Ops.EXP, N.mul(x, x))], lambda n: n.op is Ops.BUFFER,
...               lambda n: n.arg.numpy())
>>> case.ops(), len(case), failure_of(case) is None
(['MUL', 'EXP'], 3, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .creation import tensor
from .ir import node as N
from .ir.dtypes import DType
from .ir.node import Node, toposort
from .ir.ops import BINARY, LEAF, REDUCE, UNARY, Ops
from .ir.reference import evaluate_many
from .replay import _difference
from .runtime.engine import engine
from .tensor import Tensor


@dataclass(frozen=True)
class Entry:
    """One node of a case: op, sources (positions of earlier entries), arg, shape, dtype
    and device. An input (`BUFFER`) has no arg: its value is the case's, by position."""

    op: Ops
    srcs: tuple[int, ...]
    arg: object
    shape: tuple[int, ...]
    dtype: DType
    device: str | None


@dataclass
class Case:
    """A graph standing alone: its entries, sources first; the values of its inputs; the
    positions of its outputs."""

    entries: list[Entry]
    values: dict[int, np.ndarray]
    roots: list[int]

    def __len__(self) -> int:
        return len(self.entries)

    def ops(self) -> list[str]:
        """The names of its computed nodes' ops, sources first."""
        return [e.op.name for e in self.entries if e.op not in LEAF]


@dataclass(frozen=True)
class Failure:
    """How a graph fails: `kind` "mismatch" (compiled != reference) or "exception" (the
    compiler raised `error`, an exception type's name), and what was seen."""

    kind: str
    error: str
    message: str

    def same_as(self, other: Failure | None) -> bool:
        return other is not None and (self.kind, self.error) == (other.kind, other.error)

    def __str__(self) -> str:
        return self.message if self.kind == "mismatch" else f"{self.error}: {self.message}"


def record(roots: list[Node], is_input: Callable[[Node], bool], value_of) -> Case:
    """The case of the graph under `roots` (no macros), stopping at the nodes `is_input`
    picks, whose values `value_of(node)` gives (numpy arrays of their shapes)."""
    entries: list[Entry] = []
    values: dict[int, np.ndarray] = {}
    at: dict[int, int] = {}
    for n in toposort(roots, stop=is_input):
        at[id(n)] = len(entries)
        if is_input(n):
            values[len(entries)] = np.asarray(value_of(n)).reshape(n.shape)
            entries.append(Entry(Ops.BUFFER, (), None, n.shape, n.dtype, n.device))
        else:
            srcs = tuple(at[id(s)] for s in n.srcs)
            entries.append(Entry(n.op, srcs, n.arg, n.shape, n.dtype, n.device))
    return Case(entries, values, [at[id(r)] for r in roots])


# how each op is built again from its entry and its sources' new nodes; the constructors
# apply the shape rules, so a graph with shrunk sizes gets its shapes from its inputs
_BUILD: dict[Ops, Callable[[Entry, list[Node]], Node]] = {
    Ops.CONST: lambda e, s: N.const(e.arg, e.shape, e.dtype, e.device),
    Ops.INDEX: lambda e, s: N.index(e.shape, e.dtype),
    Ops.RAND: lambda e, s: N.rand(s[0], e.shape, e.dtype),
    Ops.CAST: lambda e, s: N.cast(s[0], e.dtype),
    Ops.WHERE: lambda e, s: N.where(*s),
    Ops.RESHAPE: lambda e, s: N.reshape(s[0], e.arg),
    Ops.PERMUTE: lambda e, s: N.permute(s[0], e.arg),
    Ops.EXPAND: lambda e, s: N.expand(s[0], e.arg),
    Ops.PAD: lambda e, s: N.pad(s[0], e.arg),
    Ops.SHRINK: lambda e, s: N.shrink(s[0], e.arg),
    Ops.FLIP: lambda e, s: N.flip(s[0], e.arg),
    Ops.CONTIGUOUS: lambda e, s: N.contiguous(s[0], e.arg),
    Ops.DETACH: lambda e, s: N.detach(s[0]),
    Ops.GATHER: lambda e, s: N.gather(*s),
    Ops.SCATTER_ADD: lambda e, s: N.scatter_add(s[0], s[1], *e.arg),
}
for _op in UNARY - {Ops.CAST}:
    _BUILD[_op] = lambda e, s: N.unary(e.op, s[0])
for _op in BINARY:
    _BUILD[_op] = lambda e, s: N.binary(e.op, *s)
for _op in REDUCE:
    _BUILD[_op] = lambda e, s: N.reduce(e.op, s[0], e.arg)


@dataclass
class Built:
    """A case's graph as nodes: its outputs (those not inputs), each input's value, and
    the node each position of the case became."""

    roots: list[Node]
    values: dict[int, np.ndarray] = field(default_factory=dict)  # id(input node) -> value
    nodes: dict[int, Node] = field(default_factory=dict)  # position -> node

    def case(self) -> Case:
        """The case of these nodes (entries renumbered, what no output reads left out)."""
        return record(self.roots, lambda n: n.op is Ops.BUFFER, lambda n: self.values[id(n)])


def build(case: Case) -> Built:
    """The nodes of `case`'s graph, each input a fresh buffer (so nothing is computed
    already); raises where the graph no longer builds (a shrunk size a view refuses)."""
    out = Built([])
    made = out.nodes
    for k in _reachable(case):
        e = case.entries[k]
        if e.op is Ops.BUFFER:
            value = case.values[k]
            n = tensor(value, dtype=e.dtype, device=e.device).node
            out.values[id(n)] = value
        else:
            n = _BUILD[e.op](e, [made[i] for i in e.srcs])
        made[k] = n
    for k in case.roots:
        n = made[k]
        if n.op not in LEAF and 0 not in n.shape and all(n is not r for r in out.roots):
            out.roots.append(n)
    return out


def _reachable(case: Case) -> list[int]:
    """Positions of the entries the outputs read, in order."""
    seen, todo = set(), list(case.roots)
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.add(k)
            todo.extend(case.entries[k].srcs)
    return sorted(seen)


# ---------------------------------------------------------------- the check


def mismatch(k: int, got: np.ndarray, want: np.ndarray) -> str | None:
    """None if output `k`'s compiled value `got` matches the reference's `want` (floats
    within 1e-4 relative, 1e-2 for 16-bit ones, of the largest magnitude), else where
    and by how much it differs (as `python -m fusegrad.replay` says it)."""
    return _difference(k, np.asarray(got).reshape(np.shape(want)), want)


def check(outputs: list) -> list[str]:
    """Realize `outputs` (tensors or nodes) and compare each with the reference
    evaluator on the same inputs: one line per output that differs ([] if none).
    An exception the compiler raises goes through."""
    nodes = [t.node if isinstance(t, Tensor) else t for t in outputs]
    return _compiled_against(nodes, evaluate_many(nodes))


def _compiled_against(nodes: list[Node], want: list[np.ndarray]) -> list[str]:
    """Realize `nodes`: a line per node whose value is not its `want`."""
    engine.realize(nodes)
    got = [engine.value(n).numpy() for n in nodes]
    return mismatches(got, want)


def mismatches(got: list[np.ndarray], want: list[np.ndarray]) -> list[str]:
    """`mismatch` of each pair: the lines of the outputs that differ."""
    return [m for k, (a, b) in enumerate(zip(got, want)) if (m := mismatch(k, a, b))]


def failure_of(case: Case) -> tuple[Failure, Case] | None:
    """How `case` fails when built and compiled afresh, and the case as built (renumbered,
    folded by the constructors); None if it passes, or no longer builds or evaluates."""
    try:
        built = build(case)
        if not built.roots:
            return None
        want = evaluate_many(built.roots)  # (a graph the reference refuses is no candidate)
    except Exception:
        return None
    try:
        bad = _compiled_against(built.roots, want)
    except Exception as e:
        failure = Failure("exception", type(e).__name__, first_line(e))
    else:
        if not bad:
            return None
        failure = Failure("mismatch", "", "; ".join(bad))
    return failure, built.case()


def first_line(e: BaseException) -> str:
    """The first line of what an exception says (how a failure names it)."""
    text = str(e).strip().splitlines()
    return text[0] if text else ""
