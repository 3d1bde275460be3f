"""The compiler's driver: a graph to a `Plan`, stage by stage (`compile_plan`).

The stages run in order: macros expanded under the backend's layout options
(`pipeline/layout.py`), schedule (`pipeline/schedule.py`), then, by the device's backend
(`runtime/backend_registry.py`'s interface), lower each kernel (`pipeline/lower.py`), render
it (`pipeline/llvm.py`, `pipeline/cuda.py`) and compile it (`pipeline/compiler.py`); the
kernels' records (`pipeline/plan.py`) are built here. The engine (`runtime/engine.py`) calls
`compile_plan` on a miss of its plan cache and runs what it returns.

>>> import fusegrad as fg
>>> from fusegrad.ir.ops import Ops
>>> from fusegrad.pipeline.driver import compile_plan
>>> y = (fg.ones(3) * 2).exp()
>>> plan = compile_plan([y.node], [], lambda n: n.op is Ops.BUFFER)
>>> len(plan.steps)
1
"""

from __future__ import annotations

import math
import sys

from ..ir.macro import expand_all
from ..ir.node import Node
from ..ir.ops import LEAF, Ops
from ..runtime import phases
from ..runtime.backend_registry import HOST, get_backend
from ..runtime.config import config
from ..runtime.dump import kernel_graph
from ..runtime.launch import runs_parallel
from .layout import layout_for
from .lower import record_steps
from .plan import KernelRecord, Plan, Step, timed_copy
from .schedule import ScheduleItem, schedule, without_values


def _log(msg: str) -> None:
    print(f"fusegrad: {msg}", file=sys.stderr)


def compile_plan(todo: list[Node], leaves: list[Node], has_value, device: str = HOST) -> Plan:
    """Schedule the graph under `todo`, and lower, render and compile every kernel for
    `device`. Macros (`ir/macro.py`) are scheduled as their expansions, built under the
    backend's layout options (`pipeline/layout.py`: the CPU's packed and padded copies).

    Only `leaves` count as values: an expansion may share a node with a graph computed
    earlier (`F.linear(x, w)` after `x @ w.T`), but the plan is cached under the graph as
    written, whose inputs are `leaves`, so such a node is computed again, not read."""
    leaf_ids = {id(n) for n in leaves}
    buffer = Ops.BUFFER

    def has_value(n: Node) -> bool:  # (shadows the caller's: see above)
        return n.op is buffer or id(n) in leaf_ids

    backend = get_backend(device)
    with phases.timed("schedule"):
        todo = expand_all(todo, has_value, layout=layout_for(backend))
        items = schedule(
            todo,
            has_value,
            expanded=True,
            disabled=config.disable_rules,
            **backend.schedule_options,
        )
    if config.debug >= 2:
        off = config.disable_rules
        _log(
            f"schedule: {len(items)} kernel(s)"
            + (f", without rules {', '.join(sorted(off))}" if off else "")
        )
    position = {id(n): ("leaf", i) for i, n in enumerate(leaves)}
    slots = 0
    for item in items:
        for n in item.outputs:
            position[id(n)] = ("tmp", slots)
            slots += 1
    last_read: dict[int, int] = {}
    for k, item in enumerate(items):
        for n in item.inputs:
            last_read[id(n)] = k
            if id(n) not in position:  # (a bug, named here rather than as a KeyError below)
                raise AssertionError(
                    f"kernel {k} ({' '.join(item.ops[:6])} ...) reads a {n.op.name} {n.shape} "
                    "that is neither a plan input nor an earlier kernel's output: a macro's "
                    "expansion may read no buffer but its sources'"
                )
    wanted = {id(n) for n in todo}
    # lowered and compiled side by side, or read from a cache, where the backend can
    loops, compiled = backend.lower_and_compile(items)
    steps: list[Step] = []
    for k, item in enumerate(items):
        rec, extent, work = item_record(item, loops[k], compiled[k])
        if config.debug >= 2:  # named as its launch line, dump file and profile name it
            _log(f"  [{k}] {rec.name}: {' '.join(item.ops)} -> {item.root.shape} ({item.reason})")
            for line, labels in _ops_by_line(item.sites).items():
                _log(f"        from {line} ({', '.join(labels)})")
        # memory planning: an intermediate's buffer goes back to the pool after its last reader
        frees = [
            position[id(n)][1]
            for n in item.inputs
            if last_read[id(n)] == k and position[id(n)][0] == "tmp" and id(n) not in wanted
        ]
        outs = [(position[id(n)][1], n.numel, n.dtype) for n in item.outputs]
        steps.append(Step(rec, extent, work, outs, [position[id(n)] for n in item.inputs], frees))
    plan = Plan(steps, [position[id(n)][1] for n in todo], slots, len(leaves), device)
    # kernels with a provisional tile are tuned once the plan has run a few times
    # (copies that keep no value alive: `without_values`)
    plan.tune_items = {
        k: without_values(item) for k, item in enumerate(items) if loops[k].tile_provisional
    }
    plan.tune_at = config.autotune_after if plan.tune_items else 0
    return finish_plan(plan)


def finish_plan(plan: Plan, records: list[KernelRecord] | None = None) -> Plan:
    """What a plan derives from its steps: its backend, whether it runs in parallel, and the
    records a run through its native program reports (`records`, or a cached run's)."""
    plan.backend = get_backend(plan.device)
    plan.parallel = any(runs_parallel(s.extent, s.work) for s in plan.steps)
    plan.records = cached_records(plan) if records is None else records
    plan.counting = plan.tune_at > 0
    return plan


def cached_records(plan: Plan) -> list[KernelRecord]:
    """The records a cached run of `plan` reports: nothing compiled, not timed alone."""
    records = []
    for s in plan.steps:  # (`timed_copy`'s plain attribute copy: a big plan has thousands)
        rec = timed_copy(s.record, None, s.record.started)
        rec.cache, rec.compile_seconds = "memory", 0.0
        records.append(rec)
    return records


def expand_for(
    roots: list[Node], has_value, device: str = HOST, replaced: dict | None = None
) -> list[Node]:
    """`roots` with their macros expanded as `compile_plan` expands them for `device`
    (under its backend's layout options, `pipeline/layout.py`): for pictures of a graph
    not run yet, whose kernels are then the ones that run (`expand_all`'s `replaced`)."""
    return expand_all(roots, has_value, replaced, layout=layout_for(get_backend(device)))


def kernel_names(items: list[ScheduleItem], device: str = HOST) -> list[str]:
    """The name each item's kernel has when it runs on `device` (lowered and rendered as
    `compile_plan` does, not compiled): for pictures of a graph not run yet."""
    backend = get_backend(device)
    return [backend.kernel_symbol(backend.lower(item)) for item in items]


def lowering_steps(item: ScheduleItem, device: str = HOST) -> list[tuple[str, str]]:
    """(step, loop IR after it) for each step of lowering `item` as `device`'s backend
    lowers it (`pipeline/lower.py`, `record_steps`), lowered again for the purpose: the
    loop nest with its loops merged, then its tile, peeling and unrolling, where taken."""
    with record_steps() as steps:
        get_backend(device).lower(item)
    return list(steps)


def _compile_item(item: ScheduleItem, device: str = HOST) -> tuple[KernelRecord, int, int]:
    """One item lowered and compiled alone (`compile_plan` does a plan's together)."""
    backend = get_backend(device)
    with phases.timed("lower"):
        loop = backend.lower(item)
    return item_record(item, loop, backend.compile(loop))


def item_record(item: ScheduleItem, loop, compiled) -> tuple[KernelRecord, int, int]:
    """A compiled item's record, its parallel extent and its work (iterations)."""
    symbol = compiled.symbol
    root = item.root
    work = root.numel * (
        math.prod(item.reduce.srcs[0].shape) // item.reduce.numel if item.reduce else 1
    )
    nbytes = sum(n.numel * n.dtype.itemsize for n in item.outputs + item.inputs)
    where = item.node_sites()  # (once: a plan of an LSTM's 64 steps has 3,000 items)
    groups = item.op_groups(where)
    sites = [s for s, _ in groups if s is not None]  # as `item.sites`
    rec = KernelRecord(
        name=symbol,
        ops=item.ops,
        lines=list(dict.fromkeys(str(s) for s in sites)),
        user_ops=[s.describe() for s in sites],
        op_groups=[(s.describe() if s else NO_LINE, ops) for s, ops in groups],
        roles=[r for r in ("forward", "backward", "optimizer") if r in {s.role for s in sites}],
        reason=item.reason,
        shape=root.shape,
        input_shapes=[n.shape for n in item.inputs],
        bytes=nbytes,
        flops=loop.flops,
        seconds=None,
        compile_seconds=compiled.compile_seconds,
        cache=compiled.cache,
        loop=loop,
        compiled=compiled,
        places=_places(item, where),
        input_dtypes=[n.dtype.name for n in item.inputs],
        outputs=[(n.shape, n.dtype.name) for n in item.outputs],
        graph=kernel_graph(item) if config.dump_inputs else None,
    )
    return rec, loop.parallel_extent, work


def _places(item: ScheduleItem, where: dict) -> list[tuple[str, str, int]]:
    """(file:line, module path, primitives) of the ops inside, as `op_groups` finds their
    sites (`where`: `item.node_sites()`) but told apart by module too (one line of a
    block's forward, run by two blocks fused into one kernel, is two places)."""
    counts: dict[tuple[str, str], int] = {}
    for n in item.nodes:
        if n.op not in LEAF:
            s = where.get(id(n))
            key = (str(s), getattr(s, "module", None) or "") if s is not None else (NO_LINE, "")
            counts[key] = counts.get(key, 0) + 1
    return [(line, module, count) for (line, module), count in counts.items()]


NO_LINE = "(no user line)"  # the place of ops no user line made (fusegrad's own constants)


def _ops_by_line(sites) -> dict[str, list[str]]:
    """file:line -> the user-level ops written on it ("linear", "relu backward")."""
    out: dict[str, list[str]] = {}
    for s in sites:
        labels = out.setdefault(str(s), [])
        if s.label not in labels:
            labels.append(s.label)
    return out
