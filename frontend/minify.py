"""`python -m fusegrad.minify script.py [args]`: shrink a failing graph to a small repro script.

When a script's result is wrong or compiling it raises, the graph behind it is usually
hundreds of nodes and a dozen kernels, and the bug is one op in one of them. The
minifier finds that op, as torch's `TORCHDYNAMO_REPRO_AFTER` accuracy minifier does:

1. **Record.** The script runs (as `python script.py args` would) with a hook on the
   engine: every graph a realize computes is compared with the reference evaluator
   (`ir/reference.py`) on the same inputs, and a realize whose compiler raises is caught.
   The first failing graph (macros expanded, the values it reads saved as numpy) is the
   *case*, and the script stops there.
2. **Shrink.** Candidates smaller than the case are tried, each kept only if it still
   fails the same way (a mismatch, or the same exception type): its kernels alone
   (each kernel's graph with its inputs as saved values: the split); a node replaced by a
   fresh input holding its reference value (which cuts off the graph under it), or by one
   of its sources of the same shape and dtype; outputs dropped; an input replaced by a
   constant; a size shrunk everywhere it occurs (inputs sliced; a graph that no longer
   builds is skipped). Passes repeat until none helps, or `--time-limit` seconds or
   `--max-steps` candidates are spent; a progress line says where it is. Last, each node
   is cut from its readers in turn (`ir/steering.py`'s cut, what `fg.debug.cut` asks):
   where that makes the failure go, it needs that fusion, and the repro says so.
3. **Emit.** A standalone script builds the small graph with fusegrad's public ops
   (`a * b`, `x.exp()`, `x.sum(axes, keepdim=True)`, ...), and the IR node constructors
   (`fusegrad.ir.node`) wrapped in a `Tensor` for nodes no public op builds exactly
   (constants, pads, gathers); its inputs are inline, or in an `.npz` beside it when
   large. It ends with the check, compiled against the reference (`check`), and exits
   1 while the failure remains, 0 once it is fixed.

The oracle is the reference evaluator, not a saved expected value: a script whose only
symptom is its own assertion, with every realize matching the reference, has nothing to
minify. Every realize is checked, a plan found in the cache too; the runs that bypass
realizing (an optimizer's cached step, `frontend/stepcache.py`, and a `fg.jit` function's
replays) are checked on the run that made their plan, not on later ones.

>>> import fusegrad as fg
>>> x = fg.tensor([1.0, -2.0, 3.0])
>>> check([(x * x).exp()])
[]
"""

from __future__ import annotations

import math
import os
import runpy
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from .creation import tensor
from .ir import node as N
from .ir import steering
from .ir.dtypes import DType
from .ir.macro import expand_all
from .ir.node import Node, toposort
from .ir.ops import BINARY, LEAF, MATH, REDUCE, UNARY, Ops
from .ir.reference import evaluate_many
from .ir.schedule import schedule
from .replay import _difference
from .runtime.backend import get_backend
from .runtime.engine import engine
from .tensor import Tensor

USAGE = (
    "usage: python -m fusegrad.minify script.py [args ...] [--out repro.py] "
    "[--time-limit 300] [--max-steps 1000]"
)

# ---------------------------------------------------------------- a case


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
    return _mismatches(got, want)


def _mismatches(got, want) -> list[str]:
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
        failure = Failure("exception", type(e).__name__, _first_line(e))
    else:
        if not bad:
            return None
        failure = Failure("mismatch", "", "; ".join(bad))
    return failure, built.case()


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


# ---------------------------------------------------------------- record


class _Found(BaseException):
    """Stops the script at its first failing realize (not an Exception: a script's own
    `except Exception` must not swallow it)."""

    def __init__(self, case: Case, failure: Failure):
        super().__init__(str(failure))
        self.case, self.failure = case, failure


class _Recorder:
    """While installed, `engine.plan_for` saves each graph it plans as a case (its input
    values copied before anything runs), and `engine.run` compares that plan's outputs
    with the reference evaluator's; a compiler exception or a mismatch raises `_Found`."""

    def __init__(self):
        self.pending: tuple | None = None  # (plan, case) planned, not run yet

    def __enter__(self) -> _Recorder:
        self.plan_for, self.run = engine.plan_for, engine.run
        engine.plan_for, engine.run = self._plan_for, self._run
        return self

    def __exit__(self, *exc) -> None:
        del engine.plan_for, engine.run  # (the class's methods again)

    def _plan_for(self, todo, has_value=None):
        has_value = has_value or engine.has_value_predicate()
        case = record(expand_all(todo, has_value), has_value, _saved_value)
        try:
            plan, leaves, fresh = self.plan_for(todo, has_value)
        except Exception as e:
            raise _Found(case, Failure("exception", type(e).__name__, _first_line(e))) from e
        self.pending = (plan, case)
        return plan, leaves, fresh

    def _run(self, plan, leaves, nodes, targets, timed=False):
        pending, self.pending = self.pending, None
        try:
            outs = self.run(plan, leaves, nodes, targets, timed)
        except Exception as e:
            if pending is None:
                raise
            raise _Found(pending[1], Failure("exception", type(e).__name__, _first_line(e))) from e
        if pending is not None and pending[0] is plan:
            case = pending[1]
            built = build(case)
            # the plan's outputs are its graph's roots, in order (`compile_plan`)
            checked = [(j, built.nodes[k]) for j, k in enumerate(case.roots)]
            checked = [(j, n) for j, n in checked if n.op not in LEAF and 0 not in n.shape]
            want = evaluate_many([n for _, n in checked])
            bad = _mismatches([outs[j].numpy() for j, _ in checked], want)
            if bad:
                raise _Found(case, Failure("mismatch", "", "; ".join(bad)))
        return outs


def _saved_value(n: Node) -> np.ndarray:
    """A copy of the value in memory of `n` (an input of the graph being planned)."""
    return np.array(engine.value(n).numpy()).reshape(n.shape)


def record_failure(script: str, args: list[str] = ()) -> tuple[Case, Failure] | None:
    """Run `script` with `args` as `python script.py args` would, until its first realize
    whose compiled result differs from the reference or whose compiler raises: that
    graph and how it failed (None if every realize matched). An exception the script
    raises elsewhere is a `ValueError` saying so."""
    saved_argv, saved_path0 = sys.argv, sys.path[0]
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        with _Recorder():
            runpy.run_path(script, run_name="__main__")
    except _Found as found:
        return found.case, found.failure
    except SystemExit:
        pass
    except Exception as e:  # the script's own error, every realize before it matching
        raise ValueError(
            f"{script} raised {type(e).__name__} ({_first_line(e)}) outside the compiler, "
            "every graph it computed before matching the reference evaluator"
        ) from e
    finally:
        sys.argv, sys.path[0] = saved_argv, saved_path0
    return None


# ---------------------------------------------------------------- shrink


class _Shrinker:
    """Tries smaller cases within a budget, keeping each that fails as `failure` does."""

    def __init__(self, case, failure, time_limit, max_steps, log):
        self.case, self.failure = case, failure
        self.deadline = time.monotonic() + time_limit
        self.start = time.monotonic()
        self.max_steps, self.steps = max_steps, 0
        self.log = log
        self.redraws = log is not None and _is_terminal(log)
        self.first = len(case)
        self.refs: tuple[Case, dict[int, np.ndarray]] | None = None

    def spent(self) -> bool:
        return self.steps >= self.max_steps or time.monotonic() >= self.deadline

    def attempt(self, candidate: Case | None) -> bool:
        """Whether `candidate` fails the same way; if so it is the case from now on."""
        if candidate is None or self.spent():
            return False
        self.steps += 1
        got = failure_of(candidate)
        kept = got is not None and got[0].same_as(self.failure) and len(got[1]) <= len(self.case)
        if kept:
            self.failure, self.case = got
        if self.log is not None and (kept or self.redraws):
            seconds = time.monotonic() - self.start
            line = (
                f"minify: {self.steps} candidates, {len(self.case)} nodes (from {self.first}), "
                f"{seconds:.1f} s"
            )
            # a terminal's line is redrawn; a log gets a line per graph kept
            print(
                f"\r{line} " if self.redraws else line,
                end="" if self.redraws else "\n",
                file=self.log,
                flush=True,
            )
        return kept

    def run(self) -> Case:
        self.split_kernels()
        passes = [self.drop_roots, self.cut, self.bypass, self.constants, self.sizes]
        while not self.spent():
            before = (len(self.case), _total_size(self.case))
            for shrink_pass in passes:
                shrink_pass()
            if (len(self.case), _total_size(self.case)) == before:
                break
        if self.redraws:
            print(file=self.log)
        return self.case

    def split_kernels(self) -> None:
        """Each kernel of the case's schedule alone, smallest first (its inputs read as
        the reference computes them): the first that fails is the case."""
        built = build(self.case)
        device = built.roots[0].device or engine.default_device
        options = get_backend(device).schedule_options
        try:
            items = schedule(built.roots, lambda n: n.op is Ops.BUFFER, expanded=True, **options)
        except Exception:  # the scheduler is what fails: no kernels to split into
            return
        if len(items) < 2:
            return
        inner = list(
            {id(n): n for it in items for n in it.inputs if n.op is not Ops.BUFFER}.values()
        )
        ref = dict(zip(map(id, inner), evaluate_many(inner))) if inner else {}
        ref.update(built.values)
        for item in sorted(items, key=lambda it: len(it.nodes)):
            inputs = {id(n) for n in item.inputs}
            is_input = lambda n, inputs=inputs: id(n) in inputs  # noqa: E731
            candidate = record(item.outputs, is_input, lambda n: ref[id(n)])
            if self.attempt(candidate):
                return

    def drop_roots(self) -> None:
        """One output alone, else each output dropped in turn."""
        for k in list(self.case.roots):
            if len(self.case.roots) > 1 and self.attempt(replace(self.case, roots=[k])):
                return
        for k in list(self.case.roots):
            if len(self.case.roots) > 1:
                self.attempt(replace(self.case, roots=[r for r in self.case.roots if r != k]))

    def reference_values(self) -> dict[int, np.ndarray]:
        """`_reference_values` of the case now (computed once per case)."""
        if self.refs is None or self.refs[0] is not self.case:
            self.refs = (self.case, _reference_values(self.case))
        return self.refs[1]

    def cut(self) -> None:
        """Each computed node, outputs first, replaced by an input holding its value."""
        k = len(self.case) - 1
        while k >= 0 and not self.spent():
            case = self.case
            if case.entries[k].op not in LEAF and k not in case.roots:
                value = self.reference_values().get(k)
                if value is not None:
                    entries = list(case.entries)
                    e = entries[k]
                    entries[k] = Entry(Ops.BUFFER, (), None, e.shape, e.dtype, e.device)
                    if self.attempt(Case(entries, {**case.values, k: value}, case.roots)):
                        k = len(self.case)  # renumbered: start again from the outputs
            k -= 1

    def bypass(self) -> None:
        """Each computed node replaced, where its readers read it, by a source of its
        shape and dtype."""
        k = len(self.case) - 1
        while k >= 0 and not self.spent():
            case = self.case
            e = case.entries[k]
            for i in dict.fromkeys(e.srcs):
                s = case.entries[i]
                if (s.shape, s.dtype) != (e.shape, e.dtype):
                    continue
                entries = [
                    replace(d, srcs=tuple(i if j == k else j for j in d.srcs)) for d in case.entries
                ]
                roots = [i if r == k else r for r in case.roots]
                if self.attempt(Case(entries, case.values, roots)):
                    k = len(self.case)
                    break
            k -= 1

    def constants(self) -> None:
        """Each input replaced by a constant (its first element)."""
        for k in sorted(self.case.values, reverse=True):
            case = self.case
            if k >= len(case) or case.entries[k].op is not Ops.BUFFER or self.spent():
                continue
            e, value = case.entries[k], case.values[k]
            first = value.reshape(-1)[0].item() if value.size else 0
            if e.dtype.is_float:
                first = float(first)
            entries = list(case.entries)
            entries[k] = Entry(Ops.CONST, (), first, e.shape, e.dtype, e.device)
            values = {j: v for j, v in case.values.items() if j != k}
            self.attempt(Case(entries, values, case.roots))

    def sizes(self) -> None:
        """Each size above 1, largest first, made 1, 2 or half of it wherever it occurs
        (shapes, the shapes views are given, inputs sliced)."""
        for size in sorted({d for e in self.case.entries for d in e.shape if d > 1}, reverse=True):
            for smaller in dict.fromkeys((1, 2, size // 2)):
                if smaller < size and self.attempt(_resized(self.case, size, smaller)):
                    break

    def fusion_needed(self) -> list[int]:
        """The computed nodes whose value, cut from its readers into a kernel of its own
        (a `fg.debug.cut`), makes the failure go away."""
        needed = []
        for k, e in enumerate(self.case.entries):
            if e.op in LEAF or k in self.case.roots or self.spent():
                continue
            built = build(self.case)
            steering.request(built.nodes[k], steering.CUT, "python -m fusegrad.minify")
            self.steps += 1
            try:
                bad = check(built.roots)
            except Exception as err:
                still = (
                    self.failure.kind == "exception" and type(err).__name__ == self.failure.error
                )
            else:
                still = bool(bad) and self.failure.kind == "mismatch"
            if not still:
                needed.append(k)
        return needed


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _reference_values(case: Case) -> dict[int, np.ndarray]:
    """Each computed position's value as the reference evaluator computes it."""
    built = build(case)
    inner = [k for k, n in built.nodes.items() if n.op not in LEAF]
    values = evaluate_many([built.nodes[k] for k in inner]) if inner else []
    return dict(zip(inner, values))


def _total_size(case: Case) -> int:
    return sum(math.prod(e.shape) for e in case.entries)


def _resized(case: Case, size: int, smaller: int) -> Case:
    """`case` with every axis of `size` elements made `smaller` (inputs keep their first
    elements), in shapes and in the shapes RESHAPE and EXPAND are given."""

    def shape(dims) -> tuple[int, ...]:
        return tuple(smaller if d == size else d for d in dims)

    entries = []
    for e in case.entries:
        arg = shape(e.arg) if e.op in (Ops.RESHAPE, Ops.EXPAND) else e.arg
        entries.append(replace(e, arg=arg, shape=shape(e.shape)))
    values = {
        k: v[tuple(slice(0, smaller) if d == size else slice(None) for d in v.shape)]
        for k, v in case.values.items()
    }
    return Case(entries, values, case.roots)


def shrink(
    case: Case, failure: Failure, time_limit: float = 300.0, max_steps: int = 1000, log=None
) -> tuple[Case, Failure, list[int]]:
    """The smallest case found that fails as `failure` says `case` does, how it fails, and
    the positions of its nodes whose fusion the failure needs (see the module's text);
    `log` (a stream) gets a progress line."""
    shrinker = _Shrinker(case, failure, time_limit, max_steps, log)
    small = shrinker.run()
    return small, shrinker.failure, shrinker.fusion_needed()


# ---------------------------------------------------------------- emit

INLINE = 64  # inputs of at most this many elements are written into the script

# public ops that build exactly one primitive: `{0}`... the sources, `{arg}` the arg
_PUBLIC: dict[Ops, str] = {
    Ops.NEG: "-{0}",
    Ops.RECIP: "{0}.reciprocal()",
    **{op: f"{{0}}.{m.name}()" for op, m in MATH.items() if op is not Ops.ERFC},
    Ops.ADD: "{0} + {1}",
    Ops.MUL: "{0} * {1}",
    Ops.DIV: "{0} / {1}",
    Ops.MAX: "fg.maximum({0}, {1})",
    Ops.CMPLT: "{0} < {1}",
    Ops.CMPEQ: "{0} == {1}",
    Ops.WHERE: "fg.where({0}, {1}, {2})",
    Ops.SUM: "{0}.sum({arg}, keepdim=True)",
    Ops.REDUCE_MAX: "{0}.amax({arg}, keepdim=True)",
    Ops.RESHAPE: "{0}.reshape({arg})",
    Ops.PERMUTE: "{0}.permute({arg})",
    Ops.EXPAND: "{0}.expand({arg})",
    Ops.FLIP: "{0}.flip({arg})",
    Ops.CAST: "{0}.to({dtype})",
}

# the IR node constructors, for the rest (and wherever the public spelling built otherwise)
_IR: dict[Ops, str] = {
    Ops.CONST: "N.const({arg}, {shape}, {dtype})",
    Ops.INDEX: "N.index({shape}, {dtype})",
    Ops.RAND: "N.rand({0}, {shape}, {dtype})",
    Ops.CAST: "N.cast({0}, {dtype})",
    Ops.WHERE: "N.where({0}, {1}, {2})",
    **{op: f"N.{op.name.lower()}({{0}}, {{arg}})" for op in (Ops.RESHAPE, Ops.PERMUTE)},
    **{op: f"N.{op.name.lower()}({{0}}, {{arg}})" for op in (Ops.EXPAND, Ops.PAD, Ops.SHRINK)},
    Ops.FLIP: "N.flip({0}, {arg})",
    Ops.CONTIGUOUS: "N.contiguous({0}, {arg})",
    Ops.DETACH: "N.detach({0})",
    Ops.GATHER: "N.gather({0}, {1})",
    Ops.SCATTER_ADD: "N.scatter_add({0}, {1}, *{arg})",
    **{op: f"N.unary(Ops.{op.name}, {{0}})" for op in UNARY - {Ops.CAST}},
    **{op: f"N.binary(Ops.{op.name}, {{0}}, {{1}})" for op in BINARY},
    **{op: f"N.reduce(Ops.{op.name}, {{0}}, {{arg}})" for op in REDUCE},
}


def _literal(v) -> str:
    """Python source for a number or a tuple of them (non-finite floats spelled out)."""
    if isinstance(v, tuple):
        inner = ", ".join(_literal(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, float) and not math.isfinite(v):
        return f'float("{v}")'
    return repr(v)


def _statement(k: int, e: Entry, public: bool) -> str:
    """The line of the repro that makes entry `k` (an input's value comes from `_input`)."""
    spelling = _PUBLIC.get(e.op) if public else None
    if spelling is not None and e.op in (Ops.DIV, Ops.SUM) and not e.dtype.is_float:
        spelling = None  # torch's integer division and sum change the dtype
    dtype = f"fg.{e.dtype.name}"
    if spelling is not None:
        srcs = [f"v{i}" for i in e.srcs]
        return f"v{k} = " + spelling.format(*srcs, arg=_literal(e.arg), dtype=dtype)
    srcs = [f"v{i}.node" for i in e.srcs]
    text = _IR[e.op].format(*srcs, arg=_literal(e.arg), shape=_literal(e.shape), dtype=dtype)
    return f"v{k} = fg.Tensor({text})"


def _input(k: int, e: Entry, value: np.ndarray, npz: dict) -> str:
    """The line making input `k`: its value inline, or from the .npz (`npz` collects)."""
    device = f", device={e.device!r}" if e.device not in (None, "cpu") else ""
    if e.dtype.is_float and e.dtype.itemsize < 4:
        value = value.astype(np.float32)  # (float16 and bfloat16: exact in float32)
    if value.size <= INLINE:
        flat = ", ".join(_literal(x) for x in value.reshape(-1).tolist())
        data = f"np.array([{flat}]).reshape({_literal(value.shape)})"
    else:
        npz[f"v{k}"] = value
        data = f'DATA["v{k}"]'
    return f"v{k} = fg.tensor({data}, dtype=fg.{e.dtype.name}{device})"


def emit(
    case: Case, failure: Failure, path: str, source: str = "", needs_fusion=(), public=True
) -> str:
    """Write the repro script of `case` to `path` (and its large inputs to an .npz
    beside it); returns the script's text."""
    npz: dict[str, np.ndarray] = {}
    body = []
    for k, e in enumerate(case.entries):
        if e.op is Ops.BUFFER:
            body.append(_input(k, e, case.values[k], npz))
        else:
            body.append(_statement(k, e, public))
    outputs = ", ".join(f"v{k}" for k in case.roots)
    what = (
        "its compiled result differs from the reference evaluator (ir/reference.py)"
        if failure.kind == "mismatch"
        else f"compiling it raises {failure.error}"
    )
    fused = ""
    if needs_fusion:
        named = ", ".join(f"v{k} ({case.entries[k].op.name})" for k in needs_fusion)
        fused = _wrap(
            f"It fails only fused: cutting {named} into a kernel of its own (what "
            "fg.debug.cut asks) makes it pass."
        )
    name = os.path.basename(path)
    npz_name = os.path.splitext(name)[0] + ".npz"
    doc = [
        f'"""A failing graph of {len(case)} nodes, found by `python -m fusegrad.minify'
        f"{' ' + source if source else ''}`.",
        "",
        _wrap(f"`python {name}` exits 1 while {what}, 0 once that is fixed."),
        f"Seen: {_wrap(str(failure))}",
        *(["", *fused.strip().splitlines()] if fused else []),
        "",
        "Ops without a public fusegrad spelling are built with the IR node constructors",
        '(fusegrad.ir.node) and wrapped in a Tensor."""',
    ]
    imports = [
        *(["import os"] if npz else []),
        "import sys",
        "",
        "import numpy as np",
        "",
        "import fusegrad as fg",
        "from fusegrad.ir import node as N",
        "from fusegrad.ir.ops import Ops",
        "from fusegrad.minify import check",
    ]
    if npz:
        imports += ["", f'DATA = np.load(os.path.join(os.path.dirname(__file__), "{npz_name}"))']
    functions = [
        "def build() -> list:",
        '    """The graph; returns the outputs the check compares."""',
        *(f"    {line}" for line in body),
        f"    return [{outputs}]",
        "",
        "",
        "def main() -> int:",
        "    bad = check(build())  # compiled by fusegrad, against the reference evaluator",
        '    print("\\n".join(bad) if bad else "matches the reference evaluator")',
        "    return 1 if bad else 0",
        "",
        "",
        'if __name__ == "__main__":',
        "    sys.exit(main())",
    ]
    text = "\n".join([*doc, "", *imports, "", "", *functions]) + "\n"
    with open(path, "w") as f:
        f.write(text)
    if npz:
        np.savez(os.path.join(os.path.dirname(os.path.abspath(path)), npz_name), **npz)
    return text


def _wrap(text: str, width: int = 88) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    text = "\n".join([*lines, line])
    return text.replace("\\", "\\\\").replace('"""', "'''")  # (for the repro's docstring)


def builds(path: str) -> Case:
    """The case the repro script at `path` builds (its `build()` run here)."""
    namespace = runpy.run_path(path, run_name="fusegrad_minify_repro")
    outputs = namespace["build"]()
    built = Built([t.node for t in outputs])
    for n in toposort(built.roots, stop=lambda n: n.op is Ops.BUFFER):
        if n.op is Ops.BUFFER:
            built.values[id(n)] = _saved_value(n)
    return built.case()


def _same_graph(a: Case, b: Case) -> bool:
    def key(c: Case):
        return [(e.op, e.srcs, repr(e.arg), e.shape, e.dtype) for e in c.entries], c.roots

    return key(a) == key(b)


# ---------------------------------------------------------------- the command


@dataclass
class Minified:
    """What `minify` found: the small case, how it fails, the repro's path and text."""

    case: Case
    failure: Failure
    recorded_nodes: int
    path: str
    script: str
    needs_fusion: list[int]
    reproduces: bool  # whether the written script builds the case and still fails


def minify(
    script: str,
    args: list[str] = (),
    out: str = "repro.py",
    time_limit: float = 300.0,
    max_steps: int = 1000,
    log=sys.stderr,
) -> Minified | None:
    """Run `script`, shrink its first failing graph and write the repro to `out`; None
    if every realize matched the reference. Raises `ValueError` where the script raises
    outside the compiler first, or where the recorded graph, rebuilt from its saved
    inputs, does not fail (a failure that depends on more than the graph and its values)."""
    found = record_failure(script, list(args))
    if found is None:
        return None
    case, failure = found
    if log is not None:
        said = str(failure)
        said = said if len(said) < 240 else said[:237] + "..."
        print(f"minify: {script}: a graph of {len(case)} nodes fails: {said}", file=log)
    again = failure_of(case)
    if again is None or not again[0].same_as(failure):
        raise ValueError(
            f"the failing graph of {len(case)} nodes does not fail when rebuilt from its "
            f"saved inputs ({again[0] if again else 'it matches the reference'})"
        )
    small, failure, needs_fusion = shrink(again[1], again[0], time_limit, max_steps, log)
    source = _wrap(" ".join([os.path.basename(script), *args]), width=10_000)
    text = emit(small, failure, out, source, needs_fusion)
    reproduces = _same_graph(builds(out), small)
    if not reproduces:  # a public op built more or other nodes: the constructors throughout
        text = emit(small, failure, out, source, needs_fusion, public=False)
        reproduces = _same_graph(builds(out), small)
    return Minified(small, failure, len(case), out, text, needs_fusion, reproduces)


def main(argv: list[str] | None = None) -> int:
    """The command: exit status 1 when a repro was written, 0 when nothing failed, 2 for
    a bad command line or a failure the minifier cannot reproduce."""
    argv = sys.argv[1:] if argv is None else argv
    options = {"--out": "repro.py", "--time-limit": "300", "--max-steps": "1000"}
    rest: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--":
            rest += list(it)
        elif a in options:
            options[a] = next(it, None)
        else:
            rest.append(a)
    if rest[:1] in (["-h"], ["--help"]):
        print(USAGE + "\n\n" + __doc__.split("\n\n", 1)[1].split(">>>")[0].strip())
        return 0
    try:
        time_limit, max_steps = float(options["--time-limit"]), int(options["--max-steps"])
    except (TypeError, ValueError):
        rest = []
    if not rest or options["--out"] is None:
        print(USAGE, file=sys.stderr)
        return 2
    if not os.path.isfile(rest[0]):
        print(f"python -m fusegrad.minify: can't open file {rest[0]!r}", file=sys.stderr)
        return 2
    try:
        got = minify(rest[0], rest[1:], options["--out"], time_limit, max_steps)
    except ValueError as e:
        print(f"python -m fusegrad.minify: {e}", file=sys.stderr)
        return 2
    if got is None:
        print("minify: every graph computed matched the reference evaluator: nothing to minify")
        return 0
    print(
        f"minify: wrote {got.path}: {len(got.case)} nodes (from {got.recorded_nodes}): "
        f"{' '.join(got.case.ops())}; {got.failure}"
    )
    if not got.reproduces:
        print("minify: the script does not build the minimized graph exactly", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
