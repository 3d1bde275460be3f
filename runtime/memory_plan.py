"""What a plan holds in memory, and what each of its kernels moves: `plan_memory(plan)`.

A plan's own buffers are its kernels' outputs (its inputs, the leaves, are tensors that
exist already). How long each lives depends on how the plan runs:

- kernel by kernel (the engine's loop: FUSEGRAD_PROGRAM=0, FUSEGRAD_DEBUG; a cuda
  plan's first run and runs inside `fg.profile()`; a backend without an arena): each value is
  allocated before the kernel that writes it and dropped after its last reader
  (`Step.frees`), so the peak is the largest sum of values alive during one kernel;
- with an arena (`Backend.arena_layout`: a cached CPU plan of several kernels run as one
  native program, a cached cuda plan's launch list): every value that dies inside the
  plan has a place in one allocation held for the whole run (on the CPU a dead value's
  place is taken by later ones; on cuda each has its own), so the peak is the arena's
  size plus the outputs the plan returns; the values alive at the peak are those alive
  during the kernel at which the arena's values add up to the most (with the returned
  outputs), which can be less than the arena where its places leave holes.

>>> import fusegrad as fg
>>> from fusegrad.runtime.engine import engine
>>> x = fg.ones(256).realize()
>>> plan, _, _ = engine.plan_for([((x * 2).exp().sum()).node])
>>> m = plan_memory(plan, arena=None)
>>> m.peak_bytes == sum(b.bytes for b in m.live_at_peak)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir.symbolic import Var
from ..pipeline.loopir import Load, LoadRow, Loop, ScatterAdd, Store, TileLoad

_ARENA = object()  # plan_memory's default: ask the plan's backend


@dataclass
class PlannedBuffer:
    """One value a plan's kernel writes, and where it lives."""

    slot: int | None  # the plan's slot (None: a kernel's own scratch array in the arena)
    bytes: int  # what it occupies (in an arena: its place, rounded up to the alignment)
    numel: int
    dtype: object
    shape: tuple[int, ...]
    step: int  # the kernel (its index in the plan) that writes it
    kernel: str  # that kernel's name
    user_ops: list[str]  # that kernel's user-level ops: "linear (train.py:9)"
    lines: list[str]  # that kernel's user lines: "train.py:9"
    returned: bool  # a value the plan returns (it lives on as a tensor's value)
    in_arena: bool = False


@dataclass
class KernelTraffic:
    """One kernel's memory traffic next to the least it could move."""

    name: str
    user_ops: list[str]
    bytes_moved: int  # what its loop nest reads and writes (`bytes_moved`)
    min_bytes: int  # every input read once, every output written once

    @property
    def ratio(self) -> float:
        """Bytes moved over the minimum (1.0: each byte once)."""
        return self.bytes_moved / self.min_bytes if self.min_bytes else 1.0


@dataclass
class PlanMemory:
    """One plan's memory: its peak, the buffers alive then, and each kernel's traffic."""

    mode: str  # "arena" or "kernel by kernel" (see the module docstring)
    peak_bytes: int
    live_at_peak: list[PlannedBuffer]
    peak_step: int  # the kernel running at the peak (-1: the arena, the whole run)
    arena_bytes: int  # 0 kernel by kernel
    stepwise_peak_bytes: int  # the peak the same plan has kernel by kernel
    input_bytes: int  # the plan's inputs (tensors that exist already; not in the peak)
    kernels: list[KernelTraffic] = field(default_factory=list)


def plan_memory(plan, arena=_ARENA) -> PlanMemory:
    """`plan`'s memory as a cached run holds it (the module docstring says how);
    `arena`: a layout to use instead of the backend's (None: kernel by kernel)."""
    if arena is _ARENA:
        arena = plan.backend.arena_layout(plan)
    returned = set(plan.outputs)
    made: dict[int, PlannedBuffer] = {}
    for k, s in enumerate(plan.steps):
        for g, numel, dtype in s.outs:
            made[g] = _buffer(g, numel * dtype.itemsize, numel, dtype, k, s.record, g in returned)
    stepwise, step, live = _stepwise_peak(plan, made)
    inputs = _input_bytes(plan)
    kernels = [
        KernelTraffic(s.record.name, s.record.user_ops, bytes_moved(s.record), s.record.bytes)
        for s in plan.steps
    ]
    if arena is None:
        return PlanMemory("kernel by kernel", stepwise, live, step, 0, stepwise, inputs, kernels)
    placed, held = set(), []
    for g, _, reserved in arena:
        if g is None:  # a kernel's scratch array: the kernel is not recorded in the layout
            held.append(_buffer(None, reserved, reserved, None, -1, None, False))
        else:
            placed.add(g)
            held.append(
                _buffer(
                    g,
                    reserved,
                    made[g].numel,
                    made[g].dtype,
                    made[g].step,
                    plan.steps[made[g].step].record,
                    False,
                )
            )
            held[-1].in_arena = True
    apart = [b for g, b in made.items() if g not in placed]  # returned, or apart
    # places in the arena may be shared by values whose lives do not overlap (the CPU's):
    # the arena is as large as its last place's end, and the values alive at the peak are
    # those alive during the kernel at which the arena's values add up to the most
    arena_bytes = max((offset + reserved for _, offset, reserved in arena), default=0)
    peak = arena_bytes + sum(b.bytes for b in apart)
    _, _, most = _stepwise_peak(plan, {b.slot: b for b in held if b.slot is not None})
    live = [b for b in held if b.slot is None] + most + apart
    return PlanMemory("arena", peak, live, -1, arena_bytes, stepwise, inputs, kernels)


def _buffer(slot, nbytes, numel, dtype, step, rec, returned) -> PlannedBuffer:
    shape: tuple[int, ...] = (numel,)
    if rec is not None and math.prod(rec.shape) == numel:
        shape = tuple(rec.shape)
    return PlannedBuffer(
        slot,
        nbytes,
        numel,
        dtype,
        shape,
        step,
        rec.name if rec is not None else "(a kernel's scratch)",
        list(rec.user_ops) if rec is not None else [],
        list(rec.lines) if rec is not None else [],
        returned,
    )


def _stepwise_peak(plan, made: dict[int, PlannedBuffer]) -> tuple[int, int, list]:
    """The engine's kernel-by-kernel loop (`Engine._execute_steps`), counted: each kernel's
    outputs are allocated before it runs, the values it read last are dropped after; the
    values of `made` only (an arena's: its places, not the outputs returned apart)."""
    alive: dict[int, PlannedBuffer] = {}
    best, at, snapshot = 0, -1, []
    for k, s in enumerate(plan.steps):
        for g, _, _ in s.outs:
            if g in made:
                alive[g] = made[g]
        total = sum(b.bytes for b in alive.values())
        if total > best:
            best, at, snapshot = total, k, list(alive.values())
        for g in s.frees:
            alive.pop(g, None)
    return best, at, snapshot


def _input_bytes(plan) -> int:
    """Bytes of the plan's inputs, as its kernels' parameters size them."""
    sizes: dict[int, int] = {}
    for s in plan.steps:
        params = [p for p in s.record.loop.params if not p.output]
        for (kind, i), p in zip(s.inputs, params):
            if kind == "leaf":
                sizes[i] = p.size * p.dtype.itemsize
    return sum(sizes.values())


def bytes_moved(rec) -> int:
    """The bytes a kernel's loop nest reads and writes: a cuda kernel's own count
    (`pipeline/gpu.py` `traffic`); on the CPU, each distinct access expression (a load or a
    store of one parameter at one index) counted once over its loops' ranges, a gather or
    a scatter-add once per iteration, at most the parameter's size each. Caches aside: a
    row read by two passes (a softmax's) counts twice, though the second pass usually
    finds it in cache."""
    traffic = getattr(getattr(rec.compiled, "kernel", None), "traffic", None)
    if traffic is not None:
        return traffic.bytes
    params = {p.name for p in rec.loop.params}
    seen: set = set()
    total = 0

    def walk(body: list, loops: int) -> None:
        nonlocal total
        for s in body:
            if isinstance(s, Loop):
                walk(s.body, loops * s.extent)
                continue
            param = getattr(s, "param", None)
            if param is not None and param.name in params:
                if isinstance(s, (Load, Store, TileLoad)):
                    key = (type(s) is Store, param.name, s.index)
                    if key not in seen:
                        seen.add(key)
                        per = 16 * (64 // param.dtype.itemsize) if isinstance(s, TileLoad) else 1
                        total += min(param.size, _reach(s.index) * per) * param.dtype.itemsize
                elif isinstance(s, (LoadRow, ScatterAdd)):
                    twice = 2 if isinstance(s, ScatterAdd) else 1  # read, add, write back
                    total += twice * min(param.size, loops) * param.dtype.itemsize
                elif param.name not in seen:  # another access: the parameter once
                    seen.add(param.name)
                    total += param.size * param.dtype.itemsize
            for value in vars(s).values() if hasattr(s, "__dict__") else ():
                if isinstance(value, list) and value and hasattr(value[0], "__dict__"):
                    walk(value, loops)  # a statement holding statements

    walk(rec.loop.body, 1)
    return total


def _reach(index) -> int:
    """Distinct elements `index` can touch over its loop variables' ranges."""
    return math.prod(v.max - v.min + 1 for v in index.atoms() if isinstance(v, Var))
