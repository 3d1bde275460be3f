"""The engine: the one runtime object that computes values of IR nodes.

Everything that outlives a single call lives here, in one place:

- `values`: node -> buffer, for the nodes computed so far. Weak in the node: when
  the last reference to a node goes, so does its entry (nodes themselves never
  change after they are made).
- `plans`: compiled schedules keyed by graph structure, least recently used first,
  bounded by `config.plan_cache_size` (kernels: `runtime/compiler.py`, bounded too). A
  plan holds its kernels' machine code: an evicted kernel's code is freed once no
  cached plan (and no run in progress) uses it.
- the observers of every run, called with the plan and its kernels' records
  (`FUSEGRAD_DUMP` writes kernels through one, `fusegrad.profile` collects through one).
- `recompiles`: per user line, the last structure compiled there, to say what changed.
- per-thread recording of the realizes a call makes (`fusegrad.jit`).

Realizing is one path: find the graph's structural key, compile a plan on a miss
(schedule -> lower -> render -> compile every kernel), then `execute(plan, leaves)`.
A plan runs kernel by kernel (timed: the first run, and under `FUSEGRAD_DEBUG`) or as
one native program per thread (`runtime/program.py`). A plan names its device: a
plan for "cuda:N" renders CUDA C and runs through `runtime/cuda.py` (PyCUDA, or the
CPU emulator under FUSEGRAD_CUDA=emulate).

>>> import fusegrad as fg
>>> from fusegrad.runtime.engine import engine
>>> y = fg.ones(3) * 2
>>> _ = engine.realize([y.node])
>>> engine.value(y.node).numpy().tolist()
[2.0, 2.0, 2.0]
"""

from __future__ import annotations

import ctypes
import functools
import math
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ..codegen.cuda import render_cuda
from ..codegen.llvm import render_llvm
from ..codegen.loopir import Kernel
from ..codegen.lower import kernel_symbol, lower
from ..ir import phases
from ..ir.macro import expand_all
from ..ir.node import Node
from ..ir.ops import Ops
from ..ir.schedule import ScheduleItem, schedule, structural_key
from . import cuda, forksafe
from .buffer import Buffer, give_scratch, take_scratch
from .compiler import CompiledKernel, compile_kernel
from .compiler import batch as compiler_batch
from .config import config
from .dump import dump_new_plans, kernel_header
from .launch import effective_threads, launch, prewake, run_threads, runs_parallel
from .program import compile_program, counter_words
from .recompile import RecompileLog
from .recompile import warn as warn_recompile


@dataclass
class KernelRecord:
    """One kernel that ran: what it fused, why it is a kernel, and its code at every level."""

    name: str
    ops: list[str]
    lines: list[str]  # the user's file:line of the ops inside
    user_ops: list[str]  # the user-level ops inside, with their lines: "linear (train.py:9)"
    roles: list[str]  # "forward", "backward", "optimizer": what the ops inside belong to
    op_groups: list[tuple[str, list[str]]]  # each user-level op with its primitives
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
    started: float | None = None  # time.perf_counter() at launch, when timed alone

    @property
    def loop_ir(self) -> str:
        return str(self.loop)

    @property
    def llvm_ir(self) -> str:
        if isinstance(self.compiled, cuda.CompiledCudaKernel):  # ran as CUDA C: render on request
            return render_llvm(self.loop, self.compiled.symbol)
        return self.compiled.source

    @property
    def llvm_ir_optimized(self) -> str:
        return self.compiled.optimized_ir

    @property
    def asm(self) -> str:
        return self.compiled.asm

    @functools.cached_property
    def cuda_c(self) -> str:
        if isinstance(self.compiled, cuda.CompiledCudaKernel):  # the source that ran
            return self.compiled.source
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
class Step:
    """One kernel of a plan, with its inputs as positions instead of nodes."""

    record: KernelRecord  # names, code, lines, and how it was compiled
    extent: int  # the parallel loop's length
    work: int  # inner iterations in all (decides whether threads help)
    outs: list[tuple[int, int, object]]  # (slot, size, dtype) of each buffer it writes
    inputs: list[tuple[str, int]]  # ("leaf", i): the plan's i-th input; ("tmp", g): slot g
    frees: list[int]  # slots whose buffers are dead once this step has run


@dataclass
class Plan:
    """A compiled schedule: kernels, where each reads and writes, what it returns."""

    steps: list[Step]
    outputs: list[int]  # for each requested node, the slot that holds it
    slots: int  # kernel outputs in all
    nleaves: int  # inputs it is run on
    device: str = "cpu"
    program: object = None  # the native program, built once the plan is cached
    fns: object = None  # kernel addresses, as the program reads them
    fns_address: int = 0  # where `fns` lies
    records: list = field(default_factory=list)  # what a run through the program reports
    returned: list = field(default_factory=list)  # (slot, size, dtype) of the outputs returned
    scratch: tuple = ()  # (program slots, byte offsets, bytes) of values that die inside
    # whether any kernel is shared among threads: a program of small kernels only runs on
    # thread 0 whatever the thread count (waking the workers would only make them arrive
    # at its first barrier and leave), and no worker is woken ahead of its run
    parallel: bool = True
    ready: list = field(default_factory=list)  # `_program_arrays` sets no run is using
    counters: int = 2  # words of the program's barrier argument (runtime/program.py)
    work: int = 0  # the program's inner iterations in all: a long run is interruptible


@dataclass
class _Recording:
    """A thread's realizes while `fusegrad.jit` records a call."""

    realizes: list = field(default_factory=list)  # (plan, requested nodes, leaves)
    fresh: set = field(default_factory=set)  # ids of the nodes computed during the call


class Engine:
    """Computes node values, keeps them, and caches the plans that computed them."""

    def __init__(self):
        self._values: dict[int, tuple[weakref.ref, Buffer]] = {}
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()
        self._plans_lock = forksafe.Lock()
        self.stats = {"scheduled": 0, "schedule_hits": 0}
        # called after every run with the plan and its kernels' records
        self.observers: list[Callable[[Plan, list[KernelRecord]], None]] = [dump_new_plans]
        self._local = threading.local()
        self.recompiles = RecompileLog()  # what changed when a user line compiles again
        # where nodes of no device (fusegrad's own constants) are computed: the frontend's
        # default device (`fusegrad.set_default_device`)
        self.default_device = "cpu"
        self.last_parallel = False  # whether the last CPU plan run had a parallel kernel
        self._has_value = _predicate(self._values)  # made once: every realize asks

    # ---------------------------------------------------------------- values
    def value(self, n: Node) -> Buffer | None:
        """The buffer holding n's value, or None if it has not been computed."""
        if n.op is Ops.BUFFER:
            return n.arg
        e = self._values.get(id(n))
        return e[1] if e is not None else None

    def bind(self, n: Node, buf: Buffer) -> None:
        """Record `buf` as n's value (for as long as n lives)."""
        if n.op is Ops.BUFFER:
            return
        key = id(n)
        values = self._values

        def forget(ref, key=key):
            e = values.get(key)
            if e is not None and e[0] is ref:
                del values[key]

        values[key] = (weakref.ref(n, forget), buf)

    def has_value_predicate(self) -> Callable[[Node], bool]:
        """Whether a node is an input to kernels (its value is in memory) rather than
        something to compute. Constants are always computed inline. While a jit call is
        recorded, only values computed during the call count, so the recording holds
        every kernel a replay must run."""
        return self._predicate_for(getattr(self._local, "recording", None))

    def _predicate_for(self, rec: _Recording | None) -> Callable[[Node], bool]:
        return self._has_value if rec is None else _predicate(rec.fresh)

    # ---------------------------------------------------------------- realize
    def realize(self, nodes: list[Node]) -> list[KernelRecord]:
        """Compute every node in `nodes` that has no value yet; return the kernels that ran.

        Scheduling and compiling happen once per graph *structure*: the plan is
        cached under the graph's structural key (values already in memory are its
        parameters), so the second step of a training loop only runs kernels.
        """
        rec = getattr(self._local, "recording", None)
        has_value = self._predicate_for(rec)
        if len(nodes) == 1:  # the usual case, without the dictionary
            todo = [] if has_value(nodes[0]) else list(nodes)
        else:
            todo = list({id(n): n for n in nodes if not has_value(n)}.values())
        for n in [n for n in todo if 0 in n.shape]:  # nothing to compute
            self.bind(n, _empty(0, n.dtype, n.device or self.default_device))
            todo.remove(n)
        if not todo:
            return []
        # wake sleeping workers while this thread prepares the run (runtime/pool.py): at
        # once when the last plan run was parallel (a loop runs one plan over and over),
        # else as soon as the plan says so
        woken = self.last_parallel
        if woken:
            prewake(effective_threads())
        for group in self._by_device(todo):
            plan, leaves, fresh = self.plan_for(group, has_value)
            if plan.device == "cpu":
                self.last_parallel = plan.parallel
                if plan.parallel and not woken:
                    prewake(effective_threads())
            self.run(plan, [self.value(x) for x in leaves], group, range(len(group)), timed=fresh)
            if rec is not None:
                rec.realizes.append((plan, group, leaves))
                rec.fresh.update(id(n) for n in group)
        return self.value(todo[0]).kernels

    def _by_device(self, todo: list[Node]) -> list[list[Node]]:
        """`todo` split into one list per device (a plan runs on one device)."""
        first = todo[0].device
        if len(todo) == 1 or all(n.device == first for n in todo):  # the usual case
            return [todo]
        groups: dict[str, list[Node]] = {}
        for n in todo:
            groups.setdefault(n.device or self.default_device, []).append(n)
        return list(groups.values())

    def run(self, plan: Plan, leaves: list[Buffer], nodes, targets, timed=False) -> list[Buffer]:
        """Execute `plan` on `leaves`; node `nodes[k]` takes output `targets[k]` as its value.
        Returns the plan's output buffers; the observers see the kernels' records."""
        outs, records = self.execute(plan, leaves, timed=timed)
        for out in outs:
            out.kernels = records
        for n, j in zip(nodes, targets):
            self.bind(n, outs[j])
        for observe in self.observers:
            observe(plan, records)
        return outs

    def plan_for(self, todo: list[Node], has_value=None) -> tuple[Plan, list[Node], bool]:
        """The plan computing `todo`, the nodes it takes as inputs, and whether it is new."""
        has_value = has_value or self.has_value_predicate()
        device = todo[0].device or self.default_device
        t0 = time.perf_counter()  # (phases.timed, written out: this runs every realize)
        key, leaves = structural_key(todo, has_value)
        phases.add("key", t0, time.perf_counter())
        if device != "cpu":  # a device plan's kernels belong to the backend they were built by
            key = (device, config.cuda, config.allow_tf32, key)
        with self._plans_lock:
            plan = self.plans.get(key)
            if plan is not None:
                self.plans.move_to_end(key)
        if plan is not None:
            self.stats["schedule_hits"] += 1
            if config.debug >= 1:
                _log(f"schedule cache hit: {len(plan.steps)} kernel(s), nothing compiled")
            return plan, leaves, False
        self.stats["scheduled"] += 1
        if config.debug >= 1 or config.recompile_warning > 0:
            said = self.recompiles.explain(key, todo, has_value)
            if said is not None:
                text, count, site = said
                if config.debug >= 1:
                    _log(text)
                if self.recompiles.should_warn(count, config.recompile_warning):
                    warn_recompile(f"fusegrad: {text}", site)
        before = phases.snapshot() if config.debug >= 1 else None
        with compiler_batch():  # one engine for the plan's new kernels, freed with them
            plan = compile_plan(todo, leaves, has_value, device)
            if config.program and device == "cpu":
                _build_program(plan)  # now, so that later runs compile nothing
        if before is not None:
            _log_phases(before, [s.record for s in plan.steps])
        with self._plans_lock:
            # another thread may have compiled the same structure meanwhile: keep one plan
            # per structure (`fusegrad.jit` tells two recorded calls apart by their plans)
            plan = self.plans.setdefault(key, plan)
            while len(self.plans) > max(1, config.plan_cache_size):
                self.plans.popitem(last=False)
        return plan, leaves, True

    # ---------------------------------------------------------------- execute
    def execute(
        self, plan: Plan, leaves: list[Buffer], timed: bool = False
    ) -> tuple[list[Buffer], list[KernelRecord]]:
        """Run `plan` on these input buffers; its outputs' buffers and the kernels' records.

        Kernel by kernel (each timed) when `timed`, under FUSEGRAD_DEBUG or with
        FUSEGRAD_PROGRAM=0; otherwise as one native program per thread.
        """
        if plan.device != "cpu":
            return self._execute_on_device(plan, leaves, timed)
        if not timed and config.debug == 0:
            if len(plan.steps) == 1:
                return _run_one(plan, leaves)
            if config.program:
                return _run_program(plan, leaves)
        return self._execute_steps(plan, leaves, timed)

    def _execute_on_device(self, plan, leaves, timed):
        leaves = [b if b.device == plan.device else _on_device(b, plan.device) for b in leaves]
        cuda.check_backend(leaves)  # once per run, not per kernel: only inputs can be foreign
        outs, records = self._execute_steps(plan, leaves, timed)
        cuda.synchronize()
        return outs, records

    def _execute_steps(self, plan, leaves, timed):
        device = plan.device
        bufs: list = [None] * plan.slots
        records = []
        for k, step in enumerate(plan.steps):
            outs = [_empty(size, dtype, device) for _, size, dtype in step.outs]
            inputs = [leaves[i] if kind == "leaf" else bufs[i] for kind, i in step.inputs]
            t0 = time.perf_counter()
            if device == "cpu":
                ptrs = [b.ptr for b in outs] + [b.ptr for b in inputs]
                launch(step.record.compiled, step.extent, step.work, ptrs)
            else:
                cuda.launch(step.record.compiled, outs + inputs, timed or config.debug >= 1)
            seconds = time.perf_counter() - t0
            # a cached plan's record says nothing was compiled for this run
            rec = _ran(step.record if timed else plan.records[k], seconds, t0)
            records.append(rec)
            if config.debug >= 1:
                _log(rec.summary())
                if config.debug >= 3 and timed:
                    code = (
                        ("optimized LLVM IR", rec.llvm_ir_optimized)
                        if device == "cpu"
                        else ("CUDA C", rec.cuda_c)
                    )
                    _log(f"\n{kernel_header(rec)}loop IR:\n{rec.loop_ir}\n{code[0]}:\n{code[1]}")
            for (g, _, _), out in zip(step.outs, outs):
                bufs[g] = out
            for f in step.frees:
                bufs[f] = None
        return [bufs[k] for k in plan.outputs], records

    # ---------------------------------------------------------------- recording
    def start_recording(self) -> _Recording:
        """Record this thread's realizes (see `fusegrad.jit`) until `stop_recording`."""
        if getattr(self._local, "recording", None) is not None:
            raise RuntimeError("already recording on this thread")
        rec = self._local.recording = _Recording()
        return rec

    def stop_recording(self) -> None:
        self._local.recording = None

    def recording(self) -> bool:
        return getattr(self._local, "recording", None) is not None


def _predicate(values) -> Callable[[Node], bool]:
    """`has_value` over `values` (ids of computed nodes), for `has_value_predicate`."""
    buffer, const = Ops.BUFFER, Ops.CONST

    def has_value(n: Node) -> bool:
        return n.op is buffer or (n.op is not const and id(n) in values)

    has_value.values = values  # structural_key tests ids against it inline
    return has_value


def _ran(base: KernelRecord, seconds: float, started: float) -> KernelRecord:
    """A copy of `base` with one run's time: a plain attribute copy, since
    `dataclasses.replace` runs `__init__` and costs more than launching a small kernel."""
    rec = object.__new__(KernelRecord)
    rec.__dict__.update(base.__dict__)
    rec.seconds, rec.started = seconds, started
    return rec


def compile_plan(todo: list[Node], leaves: list[Node], has_value, device: str = "cpu") -> Plan:
    """Schedule the graph under `todo`, and lower, render and compile every kernel for
    `device`. Macros (`ir/macro.py`) are scheduled as their expansions."""
    with phases.timed("schedule"):
        todo = expand_all(todo, has_value)
        items = schedule(todo, has_value, expanded=True)
    if config.debug >= 2:
        _log(f"schedule: {len(items)} kernel(s)")
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
    steps: list[Step] = []
    for k, item in enumerate(items):
        rec, extent, work = _compile_item(item, device)
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
    plan.parallel = any(runs_parallel(s.extent, s.work) for s in steps)
    plan.records = [
        replace(s.record, seconds=None, cache="memory", compile_seconds=0.0) for s in steps
    ]
    return plan


def kernel_names(items: list[ScheduleItem], device: str = "cpu") -> list[str]:
    """The name each item's kernel has when it runs on `device` (lowered and rendered as
    `_compile_item` does, not compiled): for pictures of a graph not run yet."""
    if device != "cpu":
        return [cuda.symbol_of(_lower_for(item, device)) for item in items]
    out = []
    for item in items:
        loop = _lower_for(item, device)
        out.append(kernel_symbol(render_llvm(loop, "KERNEL"), loop.name))
    return out


def _lower_for(item: ScheduleItem, device: str):
    """The item's loop IR for `device`: the GPU gets the plain loop nest, since
    codegen/gpu.py tiles contractions through shared memory itself (the CPU's register
    tiles would stand in its way)."""
    return lower(item) if device == "cpu" else lower(item, tile=False)


def _compile_item(item: ScheduleItem, device: str = "cpu") -> tuple[KernelRecord, int, int]:
    with phases.timed("lower"):
        loop = _lower_for(item, device)
    if device == "cpu":
        with phases.timed("render"):
            source = render_llvm(loop, "KERNEL")
        symbol = kernel_symbol(source, loop.name)
        source = source.replace("@KERNEL(", f"@{symbol}(")
        loop.name = symbol  # one name in the listing, the launch line, the dump and the profile
        with phases.timed("llvm"):
            compiled = compile_kernel(source, symbol, len(loop.params))
    else:
        compiled = cuda.compile_loop(loop)
        symbol = loop.name = compiled.symbol  # one name everywhere, as on the CPU
    root = item.root
    work = root.numel * (
        math.prod(item.reduce.srcs[0].shape) // item.reduce.numel if item.reduce else 1
    )
    nbytes = sum(n.numel * n.dtype.itemsize for n in item.outputs + item.inputs)
    rec = KernelRecord(
        name=symbol,
        ops=item.ops,
        lines=list(dict.fromkeys(str(s) for s in item.sites)),
        user_ops=[s.describe() for s in item.sites],
        op_groups=[(s.describe() if s else "(no user line)", ops) for s, ops in item.op_groups()],
        roles=[
            r for r in ("forward", "backward", "optimizer") if r in {s.role for s in item.sites}
        ],
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
    )
    return rec, loop.parallel_extent, work


def _ops_by_line(sites) -> dict[str, list[str]]:
    """file:line -> the user-level ops written on it ("linear", "relu backward")."""
    out: dict[str, list[str]] = {}
    for s in sites:
        labels = out.setdefault(str(s), [])
        if s.label not in labels:
            labels.append(s.label)
    return out


SCRATCH_ALIGN = 64  # bytes: each value inside a program's scratch starts on a cache line


def _on_device(buf, device: str):
    """A leaf for a `device` plan: a host table's copy there; anything else is a bug (the
    frontend refuses ops mixing devices when they are written)."""
    if buf.device is None:
        return buf.on(device)
    raise RuntimeError(f"a {buf.device} buffer given to a {device} plan")


def _empty(size: int, dtype, device: str):
    """A new buffer of `size` elements on `device`."""
    return Buffer(size, dtype) if device == "cpu" else cuda.DeviceBuffer(size, dtype, device)


def _build_program(plan: Plan) -> None:
    """String a plan's kernels into one native program (see runtime/program.py)."""
    if plan.program is not None or len(plan.steps) < 2:
        return
    n = plan.nleaves
    steps = [
        (
            s.extent,
            s.work,
            [n + g for g, _, _ in s.outs]
            + [i if kind == "leaf" else n + i for kind, i in s.inputs],
        )
        for s in plan.steps
    ]
    with phases.timed("program"):
        program = compile_program(steps)
    plan.counters = counter_words(steps)
    plan.work = sum(s.work for s in plan.steps)
    fns = [s.record.compiled.address for s in plan.steps] + [_sched_yield_address()]
    plan.fns = np.array(fns, dtype=np.uint64)
    plan.fns_address = plan.fns.ctypes.data
    # values that die inside the program share one scratch allocation: slot -> offset
    returned = set(plan.outputs)
    scratch, offsets, size = [], [], 0
    plan.returned = []
    for s in plan.steps:
        for g, numel, dtype in s.outs:
            if g in returned:
                plan.returned.append((g, numel, dtype))
            else:
                scratch.append(n + g)
                offsets.append(size)
                size += -(-max(numel * dtype.itemsize, 1) // SCRATCH_ALIGN) * SCRATCH_ALIGN
    plan.scratch = (np.array(scratch, dtype=np.int64), np.array(offsets, dtype=np.uint64), size)
    plan.program = program


def _run_one(plan: Plan, leaves: list[Buffer]) -> tuple[list[Buffer], list[KernelRecord]]:
    """Run a cached CPU plan of one kernel, timed (`_execute_steps` without what only
    several kernels, a first run or FUSEGRAD_DEBUG need: a sum or an elementwise chain on its own
    runs this way)."""
    step = plan.steps[0]
    outs = [Buffer(size, dtype) for _, size, dtype in step.outs]  # slots 0, 1, ... in order
    ptrs = [b.ptr for b in outs]
    for _, i in step.inputs:  # a first kernel reads only the plan's inputs
        ptrs.append(leaves[i].ptr)
    # the record is copied before the kernel runs, while what it touches is still in the
    # cache (a kernel streaming a large array through evicts it): afterwards only its time
    rec = _ran(plan.records[0], None, None)
    t0 = time.perf_counter()
    launch(step.record.compiled, step.extent, step.work, ptrs)
    rec.seconds, rec.started = time.perf_counter() - t0, t0
    return [outs[k] for k in plan.outputs], [rec]


def _run_program(plan: Plan, leaves: list[Buffer]) -> tuple[list[Buffer], list[KernelRecord]]:
    """Run a cached schedule as one native call per thread."""
    _build_program(plan)
    try:  # a set of arrays no other call of this plan is using (two threads may run it)
        arrays = plan.ready.pop()
    except IndexError:
        arrays = _program_arrays(plan)
    ptrs, view, args, kept = arrays
    n = plan.nleaves
    ptrs[:n] = [b.ptr for b in leaves]
    outs: dict[int, Buffer] = {}
    for g, size, dtype in plan.returned:
        outs[g] = b = Buffer(size, dtype)
        ptrs[n + g] = b.ptr
    where, offsets, nbytes = plan.scratch
    scratch = take_scratch(nbytes) if len(where) and kept is None else None
    if scratch is not None:
        view[where] = offsets + np.uint64(scratch[1])
    try:
        run_threads(plan.program, effective_threads() if plan.parallel else 1, args, plan.work)
    finally:
        if scratch is not None:
            give_scratch(scratch)
        plan.ready.append(arrays)
    return [outs[k] for k in plan.outputs], plan.records


PLAN_SCRATCH_KEPT = 1 << 20  # bytes: a program whose scratch is this small keeps its own


def _program_arrays(plan: Plan) -> tuple:
    """The arrays one run of a plan's program reads, made once and reused run after run:
    its buffers' addresses (the plan's inputs, its slots, then the barrier's count and the
    kernels' chunk counters, which every run leaves at zero, and the barrier's generation,
    which a thread only compares with what it read on arriving), a numpy view of them,
    the program's three arguments, and its scratch memory when that is small (bigger
    scratch comes from the pool each run: a training step's intermediates are not worth
    keeping per plan)."""
    n, slots = plan.nleaves, plan.slots
    ptrs = (ctypes.c_uint64 * (n + slots + plan.counters))()
    view = np.frombuffer(ptrs, dtype=np.uint64)
    base = ctypes.addressof(ptrs)
    where, offsets, nbytes = plan.scratch
    kept = None
    if len(where) and nbytes <= PLAN_SCRATCH_KEPT:
        kept = np.empty(nbytes, dtype=np.uint8)
        view[where] = offsets + np.uint64(kept.ctypes.data)
    return ptrs, view, [base, plan.fns_address, base + 8 * (n + slots)], kept


def _log_phases(before: dict[str, float], records: list[KernelRecord]) -> None:
    """One line: the compile time a new schedule cost, phase by phase."""
    spent = {k: v - before[k] for k, v in phases.seconds.items() if k not in ("autodiff", "key")}
    how = {c: sum(r.cache == c for r in records) for c in ("compiled", "disk", "memory")}
    parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in spent.items())
    _log(
        f"new schedule, {len(records)} kernel(s) ({how['compiled']} compiled, {how['disk']} "
        f"from disk, {how['memory']} in memory): {parts}"
    )


@functools.lru_cache(maxsize=1)
def _sched_yield_address() -> int:
    """libc's sched_yield, which the program calls through a pointer (no symbol to link)."""
    return ctypes.cast(ctypes.CDLL(None).sched_yield, ctypes.c_void_p).value


engine = Engine()
stats = engine.stats


def realize(nodes: list[Node]) -> list[KernelRecord]:
    """`engine.realize(nodes)`."""
    return engine.realize(nodes)
