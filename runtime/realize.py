"""Realize nodes: schedule, lower, render, compile, launch, and report.

This is the one place the layers meet at run time: the scheduler (ir) cuts the
graph, codegen turns each kernel into loop IR and LLVM IR, the compiler turns
that into machine code and the launcher runs it. Each kernel run leaves a
`KernelRecord`, which is what `fusegrad.kernels()`, `FUSEGRAD_DEBUG` and
`FUSEGRAD_DUMP` show.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..codegen.cuda import render_cuda
from ..codegen.llvm import render_llvm
from ..codegen.loopir import Kernel
from ..codegen.lower import kernel_symbol, lower
from ..ir import phases
from ..ir.node import Node
from ..ir.schedule import ScheduleItem, schedule, structural_key
from .buffer import Buffer
from .compiler import CompiledKernel, compile_kernel
from .config import config
from .launch import launch, run_threads
from .program import compile_program

_manifests: dict[str, list[dict]] = {}  # dump folder -> its manifest entries


@dataclass
class KernelRecord:
    """One kernel that ran: what it fused, why it is a kernel, and its code at every level."""

    name: str
    ops: list[str]
    lines: list[str]  # the user's file:line of the ops inside
    reason: str  # why this kernel's output is materialized
    shape: tuple[int, ...]
    input_shapes: list[tuple[int, ...]]
    bytes: int  # bytes read and written
    flops: int
    # None when the kernel ran inside a native program (a cached schedule of several
    # kernels runs as one call per thread): the program is timed as a whole, not each
    # kernel. FUSEGRAD_DEBUG=1 launches kernels one by one and times each.
    seconds: float | None
    compile_seconds: float
    cache: str  # "compiled", "disk" or "memory"
    loop: Kernel = field(repr=False)
    compiled: CompiledKernel = field(repr=False)

    @property
    def loop_ir(self) -> str:
        return str(self.loop)

    @property
    def llvm_ir(self) -> str:
        return self.compiled.source

    @property
    def llvm_ir_optimized(self) -> str:
        return self.compiled.optimized_ir

    @property
    def asm(self) -> str:
        return self.compiled.asm

    @functools.cached_property
    def cuda_c(self) -> str:
        return render_cuda(self.loop, self.compiled.symbol)

    def summary(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        if self.seconds is None:
            return f"{self.name:<40} {shape:>16}  (ran inside a program: not timed alone)"
        ms = self.seconds * 1e3
        gbs = self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0
        gfl = self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0
        cache = (
            self.cache
            if self.cache == "memory"
            else f"{self.cache} {self.compile_seconds * 1e3:.1f} ms"
        )
        rate = f"{gbs:7.1f} GB/s {gfl:7.1f} GFLOP/s"
        return f"{self.name:<40} {shape:>16} {ms:9.3f} ms {rate}  [{cache}]"


def _log(msg: str) -> None:
    print(f"fusegrad: {msg}", file=sys.stderr)


@dataclass
class _Step:
    """One kernel of a cached schedule, with its inputs as positions instead of nodes."""

    record: KernelRecord  # the first run's record: names, code, lines
    extent: int
    work: int
    outs: list[tuple[int, int, object]]  # (slot, size, dtype) of each buffer it writes
    inputs: list[tuple[str, int]]  # ("leaf", i): the i-th realized input; ("tmp", g): slot g
    frees: list[int]  # slots whose buffers are dead once this step has run


@dataclass
class _Plan:
    steps: list[_Step]
    outputs: list[int]  # for each requested node, the slot that holds it
    slots: int = 0  # kernel outputs in all
    program: object = None  # the native program, built on the first cache hit
    fns: object = None  # kernel addresses, as the program reads them
    barrier: object = None
    records: list = field(default_factory=list)  # what a run through the program reports


PLAN_CACHE_SIZE = 512
_plans: dict[tuple, _Plan] = {}
stats = {"scheduled": 0, "schedule_hits": 0}

# While `fusegrad.jit` records a call, every realize appends (plan, requested nodes, leaves)
# here, so the call can later be replayed as these plans alone (frontend/jit.py).
capture: list | None = None


def realize(nodes: list[Node]) -> list[KernelRecord]:
    """Compute every node in `nodes` that has no buffer yet; return the kernels that ran.

    Scheduling and compiling happen once per graph *structure*: the plan is
    cached under the graph's structural key (realized values are its
    parameters), so the second step of a training loop only launches kernels.
    """
    todo = list({id(n): n for n in nodes if n.realized is None}.values())
    for n in [n for n in todo if n.numel == 0]:  # nothing to compute
        n.realized = Buffer(0, n.dtype)
        todo.remove(n)
    if not todo:
        return []
    with phases.timed("key"):
        key, leaves = structural_key(todo)
    plan = _plans.get(key)
    if plan is None:
        stats["scheduled"] += 1
        before = phases.snapshot() if config.debug >= 1 else None
        records, plan = _schedule_and_run(todo, leaves)
        if config.program:
            _build_program(plan, len(leaves))  # now, so that later steps compile nothing
        if before is not None:
            _log_phases(before, records)
        if len(_plans) >= PLAN_CACHE_SIZE:
            _plans.pop(next(iter(_plans)))
        _plans[key] = plan
    else:
        stats["schedule_hits"] += 1
        if config.debug >= 1:
            _log(f"schedule cache hit: {len(plan.steps)} kernel(s), nothing scheduled or compiled")
        outs, records = run_plan(plan, [n.realized for n in leaves])
        for n, out in zip(todo, outs):
            n.realized = out
    if capture is not None:
        capture.append((plan, todo, leaves))
    for n in todo:
        n.realized.kernels = records
    _dump(records)
    return records


def _schedule_and_run(todo: list[Node], leaves: list[Node]) -> tuple[list[KernelRecord], _Plan]:
    with phases.timed("schedule"):
        items = schedule(todo)
    if config.debug >= 2:
        _log(f"schedule: {len(items)} kernel(s)")
        for i, item in enumerate(items):
            _log(f"  [{i}] {' '.join(item.ops)} -> {item.root.shape} ({item.reason})")
            for site in item.sites:
                _log(f"        from {site}")
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
    wanted = {id(n) for n in todo}
    steps: list[_Step] = []
    records = []
    for k, item in enumerate(items):
        rec, extent, work = _run(item)
        records.append(rec)
        # memory planning: an intermediate's buffer goes back to the pool after its last reader
        frees = []
        for n in item.inputs:
            where = position[id(n)]
            if last_read[id(n)] == k and where[0] == "tmp" and id(n) not in wanted:
                n.realized = None
                frees.append(where[1])
        outs = [(position[id(n)][1], n.numel, n.dtype) for n in item.outputs]
        steps.append(_Step(rec, extent, work, outs, [position[id(n)] for n in item.inputs], frees))
    return records, _Plan(steps, [position[id(n)][1] for n in todo], slots)


def _build_program(plan: _Plan, nleaves: int) -> None:
    """String a plan's kernels into one native program (see runtime/program.py)."""
    if plan.program is None and len(plan.steps) > 1:
        steps = [
            (
                s.extent,
                s.work,
                [nleaves + g for g, _, _ in s.outs]
                + [i if kind == "leaf" else nleaves + i for kind, i in s.inputs],
            )
            for s in plan.steps
        ]
        with phases.timed("program"):
            plan.program = compile_program(steps)
        fns = [s.record.compiled.address for s in plan.steps] + [_sched_yield_address()]
        plan.fns = np.array(fns, dtype=np.uint64)
        plan.barrier = np.zeros(2, dtype=np.int64)
        plan.records = [
            replace(s.record, seconds=None, cache="memory", compile_seconds=0.0) for s in plan.steps
        ]


def _run_program(plan: _Plan, leaves: list[Buffer]) -> tuple[list[Buffer], list[KernelRecord]]:
    """Run a cached schedule as one native call per thread."""
    _build_program(plan, len(leaves))
    outs: list = [None] * plan.slots
    for s in plan.steps:
        for g, size, dtype in s.outs:
            outs[g] = Buffer(size, dtype)
    ptrs = np.array([b.ptr for b in leaves] + [b.ptr for b in outs], dtype=np.uint64)
    plan.barrier[:] = 0
    args = [ptrs.ctypes.data, plan.fns.ctypes.data, plan.barrier.ctypes.data]
    threads = max(1, config.threads)
    run_threads(plan.program.fn, threads, args)
    return [outs[k] for k in plan.outputs], plan.records


def _log_phases(before: dict[str, float], records: list[KernelRecord]) -> None:
    """One line: the compile time a new schedule cost, phase by phase."""
    spent = {k: v - before[k] for k, v in phases.seconds.items() if k not in ("autodiff", "key")}
    how = {c: sum(r.cache == c for r in records) for c in ("compiled", "disk", "memory")}
    parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in spent.items())
    _log(
        f"new schedule, {len(records)} kernel(s) ({how['compiled']} compiled, {how['disk']} "
        f"from disk, {how['memory']} in memory): {parts}"
    )


def _sched_yield_address() -> int:
    """libc's sched_yield, which the program calls through a pointer (no symbol to link)."""
    return ctypes.cast(ctypes.CDLL(None).sched_yield, ctypes.c_void_p).value


def run_plan(plan: _Plan, leaves: list[Buffer]) -> tuple[list[Buffer], list[KernelRecord]]:
    """Run a cached schedule on these leaf buffers; return its outputs' buffers and records.

    The outputs come in the order of the nodes the plan was made for.
    """
    if config.program and config.debug == 0 and len(plan.steps) > 1:
        return _run_program(plan, leaves)
    bufs: list[Buffer | None] = [None] * plan.slots
    records = []
    for step in plan.steps:
        outs = [Buffer(size, dtype) for _, size, dtype in step.outs]
        inputs = [leaves[i] if kind == "leaf" else bufs[i] for kind, i in step.inputs]
        ptrs = [b.ptr for b in outs] + [b.ptr for b in inputs]
        t0 = time.perf_counter()
        launch(step.record.compiled.fn, step.extent, step.work, ptrs)
        rec = replace(
            step.record, seconds=time.perf_counter() - t0, cache="memory", compile_seconds=0.0
        )
        records.append(rec)
        if config.debug >= 1:
            _log(rec.summary())
        for (g, _, _), out in zip(step.outs, outs):
            bufs[g] = out
        for f in step.frees:
            bufs[f] = None
    return [bufs[k] for k in plan.outputs], records


def _run(item: ScheduleItem) -> tuple[KernelRecord, int, int]:
    with phases.timed("lower"):
        loop = lower(item)
    with phases.timed("render"):
        source = render_llvm(loop, "KERNEL")
    symbol = kernel_symbol(source, loop.name)
    source = source.replace("@KERNEL(", f"@{symbol}(")
    with phases.timed("llvm"):
        compiled = compile_kernel(source, symbol, len(loop.params))
    root = item.root
    outs = [Buffer(n.numel, n.dtype) for n in item.outputs]
    inputs = [n.realized for n in item.inputs]
    ptrs = [b.ptr for b in outs] + [b.ptr for b in inputs]
    work = root.numel * (
        math.prod(item.reduce.srcs[0].shape) // item.reduce.numel if item.reduce else 1
    )
    t0 = time.perf_counter()
    launch(compiled.fn, loop.parallel_extent, work, ptrs)
    seconds = time.perf_counter() - t0
    for n, out in zip(item.outputs, outs):
        n.realized = out
    nbytes = sum(b.size * b.dtype.itemsize for b in outs + inputs)
    rec = KernelRecord(
        name=loop.name,
        ops=item.ops,
        lines=item.sites,
        reason=item.reason,
        shape=root.shape,
        input_shapes=[n.shape for n in item.inputs],
        bytes=nbytes,
        flops=loop.flops,
        seconds=seconds,
        compile_seconds=compiled.compile_seconds,
        cache=compiled.cache,
        loop=loop,
        compiled=compiled,
    )
    if config.debug >= 1:
        _log(rec.summary())
    if config.debug >= 3:
        _log(f"loop IR:\n{rec.loop_ir}\nLLVM IR:\n{rec.llvm_ir}")
    return rec, loop.parallel_extent, work


def _dump(records: list[KernelRecord]) -> None:
    if not config.dump:
        return
    os.makedirs(config.dump, exist_ok=True)
    manifest = _manifests.setdefault(os.path.abspath(config.dump), [])
    for rec in records:
        stem = f"{len(manifest):03d}_{rec.name}"
        for ext, text in ((".loop", rec.loop_ir), (".ll", rec.llvm_ir), (".cu", rec.cuda_c)):
            with open(os.path.join(config.dump, stem + ext), "w") as f:
                f.write(text)
        manifest.append(
            {
                "file": stem,
                "name": rec.name,
                "ops": rec.ops,
                "lines": rec.lines,
                "reason": rec.reason,
                "shape": list(rec.shape),
                "input_shapes": [list(s) for s in rec.input_shapes],
                "bytes": rec.bytes,
                "flops": rec.flops,
                "compile_ms": round(rec.compile_seconds * 1e3, 3),
                "cache": rec.cache,
            }
        )
    with open(os.path.join(config.dump, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
