"""A compiled schedule and the records of its kernels: what the engine and every backend
share (`Plan`, `Step`, `KernelRecord`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .compiler import CompiledKernel
from .cuda import render_cuda
from .llvm import render_llvm
from .loopir import Kernel, gpu_only


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
    # where the ops inside were written, by line and module: (file:line, module path,
    # primitives), "(no user line)" and "" where there is none; `fg.profile()` shares a
    # kernel's time among its lines and modules by primitives
    places: list[tuple[str, str, int]] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)  # dtype names, as `input_shapes`
    outputs: list[tuple[tuple[int, ...], str]] = field(default_factory=list)  # (shape, dtype)
    # under FUSEGRAD_DUMP_INPUTS: the kernel's nodes, buffer-free (`dump.kernel_graph`), and
    # on the first run the values of its inputs, until the dump has written them
    graph: object = field(default=None, repr=False)
    input_values: list | None = field(default=None, repr=False)

    @property
    def loop_ir(self) -> str:
        return str(self.loop)

    @property
    def llvm_ir(self) -> str:
        if self.compiled.language != "LLVM IR":  # ran as CUDA C: render on request
            if gpu_only(self.loop.body):
                return (
                    f"; kernel {self.loop.name}: no LLVM IR: its GPU loop nest holds statements"
                    " only the CUDA C renderer has (an online softmax's statistics)\n"
                )
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
        if self.compiled.language == "CUDA C":  # the source that ran
            return self.compiled.source
        if self.loop.uses_tiles:
            what = "an AMX tile" if "tdpbf16ps" in self.asm else "a vdpbf16ps"
            return f"// {what} kernel: CUDA C has no such instructions; it runs on the CPU\n"
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


@dataclass
class Step:
    """One kernel of a plan, with its inputs as positions instead of nodes."""

    record: KernelRecord  # names, code, lines, and how it was compiled
    extent: int  # the parallel loop's length
    work: int  # inner iterations in all (decides whether threads help)
    outs: list[tuple[int, int, object]]  # (slot, size, dtype) of each buffer it writes
    inputs: list[tuple[str, int]]  # ("leaf", i): the plan's i-th input; ("tmp", g): slot g
    frees: list[int]  # slots whose buffers are dead once this step has run


@dataclass(eq=False)  # a plan is one object: `fusegrad.jit` tells calls apart by which plan ran
class Plan:
    """A compiled schedule: kernels, where each reads and writes, what it returns."""

    steps: list[Step]
    outputs: list[int]  # for each requested node, the slot that holds it
    slots: int  # kernel outputs in all
    nleaves: int  # inputs it is run on
    device: str = "cpu"
    backend: object = None  # the device's (runtime/backend.py): compiles and runs the plan
    program: object = None  # the native program, built once the plan is cached
    fns: object = None  # kernel addresses and the table of steps, as the program reads them
    fns_address: int = 0  # where `fns` lies
    records: list = field(default_factory=list)  # what a run through the program reports
    returned: list = field(default_factory=list)  # (slot, size, dtype) of the outputs returned
    scratch: tuple = ()  # (program slots, byte offsets, bytes) of values that die inside
    # the backend's layout of those values, once made: kept with the plan on disk
    scratch_layout: list | None = None
    # whether any kernel is shared among threads: a program of small kernels only runs on
    # thread 0 whatever the thread count (waking the workers would only make them arrive
    # at its first barrier and leave), and no worker is woken ahead of its run
    parallel: bool = True
    ready: list = field(default_factory=list)  # `_program_arrays` sets no run is using
    counters: int = 2  # words of the program's barrier argument (runtime/program.py)
    # where the literals of the kernels run through generic kernels lie, in step order:
    # the buffers' table holds them after the counters (`cpu_backend._build_program`)
    lits_words: object = None
    work: int = 0  # the program's inner iterations in all: a long run is interruptible
    # kernels compiled with a provisional tile (runtime/autotune.py): step index -> its
    # schedule item, tuned once the plan has run `tune_at` times (`Engine.tune`)
    tune_items: dict = field(default_factory=dict)
    tune_at: int = 0  # 0: nothing to tune
    runs: int = 0  # runs counted while something is left to tune
    # whether the engine looks at the plan after each run (`Engine._count_run`): while
    # kernels are left to tune, and after the first run of a plan read from disk
    counting: bool = False
    from_disk: bool = False  # read from disk, not run yet: its first run's records say so
    key: tuple | None = None  # the engine's cache key (the plan is kept on disk under it)
    retired: list = field(default_factory=list)  # replaced kernels and programs, kept alive


def timed_copy(base: KernelRecord, seconds: float, started: float) -> KernelRecord:
    """A copy of `base` with one run's time: a plain attribute copy, since
    `dataclasses.replace` runs `__init__` and costs more than launching a small kernel."""
    rec = object.__new__(KernelRecord)
    rec.__dict__.update(base.__dict__)
    rec.seconds, rec.started = seconds, started
    return rec
