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

Here: recording, shrinking and the command; a case, how it is rebuilt and checked, in
`frontend/minify_case.py`; the script written, in `frontend/minify_script.py`.

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
from dataclasses import dataclass, replace

import numpy as np

from .ir import steering
from .ir.node import Node
from .ir.ops import LEAF, Ops
from .ir.reference import evaluate_many
from .minify_case import Case, Entry, Failure, build, failure_of, first_line, mismatches, record
from .minify_case import check as check  # (the repro scripts' check: fusegrad.minify.check)
from .minify_case import mismatch as mismatch
from .minify_script import builds, emit, same_graph
from .pipeline.schedule import schedule
from .runtime.backend import get_backend
from .runtime.engine import engine, expand_for

USAGE = (
    "usage: python -m fusegrad.minify script.py [args ...] [--out repro.py] "
    "[--time-limit 300] [--max-steps 1000]"
)

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

    def _plan_for(self, todo, has_value=None, lift=False):
        has_value = has_value or engine.has_value_predicate()
        device = todo[0].device or engine.default_device  # (as compile_plan expands it)
        case = record(expand_for(todo, has_value, device), has_value, _saved_value)
        try:
            plan, leaves, fresh = self.plan_for(todo, has_value, lift)
        except Exception as e:
            raise _Found(case, Failure("exception", type(e).__name__, first_line(e))) from e
        self.pending = (plan, case)
        return plan, leaves, fresh

    def _run(self, plan, leaves, nodes, targets, timed=False):
        pending, self.pending = self.pending, None
        try:
            outs = self.run(plan, leaves, nodes, targets, timed)
        except Exception as e:
            if pending is None:
                raise
            raise _Found(pending[1], Failure("exception", type(e).__name__, first_line(e))) from e
        if pending is not None and pending[0] is plan:
            case = pending[1]
            built = build(case)
            # the plan's outputs are its graph's roots, in order (`compile_plan`)
            checked = [(j, built.nodes[k]) for j, k in enumerate(case.roots)]
            checked = [(j, n) for j, n in checked if n.op not in LEAF and 0 not in n.shape]
            want = evaluate_many([n for _, n in checked])
            bad = mismatches([outs[j].numpy() for j, _ in checked], want)
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
            f"{script} raised {type(e).__name__} ({first_line(e)}) outside the compiler, "
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
    source = " ".join([os.path.basename(script), *args])
    text = emit(small, failure, out, source, needs_fusion)
    reproduces = same_graph(builds(out), small)
    if not reproduces:  # a public op built more or other nodes: the constructors throughout
        text = emit(small, failure, out, source, needs_fusion, public=False)
        reproduces = same_graph(builds(out), small)
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
