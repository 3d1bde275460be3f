"""The CPU backend: kernels compiled to machine code by LLVM, run on the worker pool, a
cached plan of several kernels as one native program per thread (`runtime/program.py`).
"""

from __future__ import annotations

import ctypes
import functools
import re
import sys
import time

import numpy as np

from ..ir.ops import REDUCE
from ..pipeline import item_cache, plan_store, templates
from ..pipeline.compiler import (
    CompiledKernel,
    code_of,
    compile_kernels,
    compile_workers,
    new_object,
    run_jobs,
    shared_forms,
    side_by_side,
)
from ..pipeline.llvm import reads_cancel_word, render_llvm
from ..pipeline.lower import kernel_symbol, lower
from ..pipeline.plan import KernelRecord, Plan, timed_copy
from ..pipeline.schedule import without_values
from . import autotune, forksafe, phases, pool
from .amx import amx_ready, dpbf16_ready
from .backend_registry import Backend, register_backend
from .buffer import Buffer, clear_pool, give_scratch, take_scratch, touch_pages
from .config import config
from .launch import effective_threads, launch, run_threads
from .program import compile_program, counter_words, program_words

SCRATCH_ALIGN = 64  # bytes: each value inside a program's scratch starts on a cache line


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
    plan.counters = counter_words(steps)
    # a kernel run through a generic kernel reads its literals after its buffers: their
    # address is a word of the buffers' table after the counters (`_program_arrays`)
    first = n + plan.slots + len(plan.steps) + 1 + plan.counters
    lits = []
    for s, (_, _, slots) in zip(plan.steps, steps):
        if s.record.compiled.lits is not None:
            slots.append(first + len(lits))
            lits.append(s.record.compiled.lits_address)
    plan.lits_words = np.array(lits, dtype=np.uint64)
    with phases.timed("program"):
        program = compile_program(steps)
    plan.work = sum(s.work for s in plan.steps)
    addresses = [s.record.compiled.address for s in plan.steps]
    plan.fns = program_words(steps, addresses, _sched_yield_address())
    plan.fns_address = plan.fns.ctypes.data
    # values that die inside the program share one scratch allocation: slot -> offset
    returned = set(plan.outputs)
    plan.returned = [out for s in plan.steps for out in s.outs if out[0] in returned]
    layout = _layout_of(plan)
    scratch = [n + g for g, _, _ in layout]
    offsets = [offset for _, offset, _ in layout]
    size = arena_bytes(layout)
    plan.scratch = (np.array(scratch, dtype=np.int64), np.array(offsets, dtype=np.uint64), size)
    plan.program = program


def _layout_of(plan: Plan) -> list[tuple[int, int, int]]:
    """The plan's scratch layout, made once (`Plan.scratch_layout`: a plan read from disk
    comes with it)."""
    if plan.scratch_layout is None:
        plan.scratch_layout = _scratch_layout(plan)
    return plan.scratch_layout


def _scratch_layout(plan: Plan) -> list[tuple[int, int, int]]:
    """(slot, byte offset, bytes reserved) of each value that dies inside the plan's
    program, in one scratch allocation, each on cache lines of its own. A value's place
    is free again once the kernel that reads it last has run (`Step.frees`: a barrier
    follows every kernel but the last, so no thread still reads it), and a later value
    takes the lowest free place it fits in (first fit); a kernel's outputs never share
    with its inputs, which are freed after it."""
    returned = set(plan.outputs)
    free: list[tuple[int, int]] = []  # (offset, bytes) of free places, by offset
    layout, placed, end = [], {}, 0
    for s in plan.steps:
        for g, numel, dtype in s.outs:
            if g in returned:
                continue
            reserved = -(-max(numel * dtype.itemsize, 1) // SCRATCH_ALIGN) * SCRATCH_ALIGN
            for i, (offset, size) in enumerate(free):
                if size >= reserved:
                    if size == reserved:
                        del free[i]
                    else:
                        free[i] = (offset + reserved, size - reserved)
                    break
            else:
                offset, end = end, end + reserved
            layout.append((g, offset, reserved))
            placed[g] = (offset, reserved)
        for g in s.frees:
            if g in placed:
                _give_back(free, *placed.pop(g))
    return layout


def _give_back(free: list[tuple[int, int]], offset: int, size: int) -> None:
    """Put a place back in the sorted free list, merged with its free neighbours."""
    i = 0
    while i < len(free) and free[i][0] < offset:
        i += 1
    if i < len(free) and offset + size == free[i][0]:  # the next place follows it
        size += free.pop(i)[1]
    if i > 0 and free[i - 1][0] + free[i - 1][1] == offset:  # it follows the previous
        offset, size = free[i - 1][0], free[i - 1][1] + size
        i -= 1
        free.pop(i)
    free.insert(i, (offset, size))


def arena_bytes(layout: list[tuple[int, int, int]]) -> int:
    """The size of the allocation a layout needs: where its last place ends."""
    return max((offset + reserved for _, offset, reserved in layout), default=0)


def _run_one(plan: Plan, leaves: list[Buffer]) -> tuple[list[Buffer], list[KernelRecord]]:
    """Run a cached CPU plan of one kernel (`_execute_steps` without what only several
    kernels, a first run or FUSEGRAD_DEBUG need: a sum or an elementwise chain on its own
    runs this way); timed inside `fusegrad.profile()` (`kernel_times`), else its records
    are the plan's, as a program's run gives them."""
    step = plan.steps[0]
    outs = [Buffer(size, dtype) for _, size, dtype in step.outs]  # slots 0, 1, ... in order
    ptrs = [b.ptr for b in outs]
    for _, i in step.inputs:  # a first kernel reads only the plan's inputs
        ptrs.append(leaves[i].ptr)
    if not config.kernel_times:  # (as a program's run: its records, untimed, shared)
        launch(step.record.compiled, step.extent, step.work, ptrs)
        return [outs[k] for k in plan.outputs], plan.records
    # the record is copied before the kernel runs, while what it touches is still in the
    # cache (a kernel streaming a large array through evicts it): afterwards only its time
    rec = timed_copy(plan.records[0], None, None)
    t0 = time.perf_counter()
    launch(step.record.compiled, step.extent, step.work, ptrs)
    rec.seconds, rec.started = time.perf_counter() - t0, t0
    return [outs[k] for k in plan.outputs], [rec]


def _run_program(
    plan: Plan, leaves: list[Buffer], first: bool = False
) -> tuple[list[Buffer], list[KernelRecord]]:
    """Run a cached schedule as one native call per thread (`first`: the plan's first run,
    reported with each kernel's time and the records its compile made)."""
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
    started = time.perf_counter()
    try:
        run_threads(plan.program, effective_threads() if plan.parallel else 1, args, plan.work)
        if first:  # (the compile's records, timed)
            records = _kernel_times(plan, view, started, [s.record for s in plan.steps])
        elif config.kernel_times and pool.available():  # (the cycle counter's rate)
            records = _kernel_times(plan, view, started)
        else:
            records = plan.records
    finally:
        if scratch is not None:
            give_scratch(scratch)
        plan.ready.append(arrays)
    return [outs[k] for k in plan.outputs], records


def _kernel_times(
    plan: Plan, view: np.ndarray, started: float, records: list[KernelRecord] | None = None
) -> list[KernelRecord]:
    """The plan's records (otherwise shared by every run, untimed; or `records`) copied,
    each with the time its kernel took in the run that just ended: from thread 0's cycle
    counter readings between the barriers (`runtime/program.py`)."""
    at = plan.nleaves + plan.slots
    clock = view[at : at + len(plan.steps) + 1].astype(np.int64) / (pool.cycles_per_us() * 1e6)
    seconds = np.diff(clock)
    starts = started + (clock[:-1] - clock[0])
    return [
        timed_copy(rec, float(s), float(t))
        for rec, s, t in zip(records or plan.records, seconds, starts, strict=True)
    ]


PLAN_SCRATCH_KEPT = 1 << 20  # bytes: a program whose scratch is this small keeps its own


def _program_arrays(plan: Plan) -> tuple:
    """The arrays one run of a plan's program reads, made once and reused run after run:
    its buffers' addresses (the plan's inputs, its slots, then the cycle counter's
    readings as each kernel starts and at the end, then the barrier's count and the
    kernels' chunk counters, which every run leaves at zero, and the barrier's generation,
    which a thread only compares with what it read on arriving), a numpy view of them,
    the program's four arguments, and its scratch memory when that is small (bigger
    scratch comes from the pool each run: a training step's intermediates are not worth
    keeping per plan)."""
    n, slots = plan.nleaves, plan.slots
    clock = len(plan.steps) + 1
    at = n + slots + clock + plan.counters
    ptrs = (ctypes.c_uint64 * (at + len(plan.lits_words)))()
    view = np.frombuffer(ptrs, dtype=np.uint64)
    view[at:] = plan.lits_words
    base = ctypes.addressof(ptrs)
    where, offsets, nbytes = plan.scratch
    kept = None
    if len(where) and nbytes <= PLAN_SCRATCH_KEPT:
        kept = np.empty(nbytes, dtype=np.uint8)
        view[where] = offsets + np.uint64(kept.ctypes.data)
    times = base + 8 * (n + slots)
    return ptrs, view, [base, plan.fns_address, times + 8 * clock, times], kept


@functools.lru_cache(maxsize=1)
def _sched_yield_address() -> int:
    """libc's sched_yield, which the program calls through a pointer (no symbol to link)."""
    return ctypes.cast(ctypes.CDLL(None).sched_yield, ctypes.c_void_p).value


PLANS_AHEAD_MAX = 32  # plans `load_ahead` reads, and `plans_used` names
_ahead: dict[str, Plan] = {}  # disk key -> a plan `load_ahead` read, not yet asked for
_used: dict[str, None] = {}  # the disk keys of the plans read or kept, in order (a set)
_ahead_lock = forksafe.Lock()


def _read_plan(disk_key: str) -> Plan | None:
    return plan_store.load(disk_key, lambda loop, source: _job(loop, source)[2])


def _note_used(disk_key: str) -> None:
    """Note a plan read or kept on disk (under `_ahead_lock`)."""
    if len(_used) < PLANS_AHEAD_MAX:
        _used[disk_key] = None


@forksafe.at_fork
def _no_plans_ahead_in_child() -> None:
    """A forked child reads its own plans (its parent's loaded kernels are not its)."""
    _ahead.clear()


class CpuBackend(Backend):
    """The host: buffers are pooled numpy arrays, kernels LLVM-compiled machine code run on
    the worker pool; a cached plan of one kernel runs without the step loop (`_run_one`),
    one of several as a native program (`_run_program`)."""

    name = "cpu"
    indexed = False
    is_host = True
    is_host_memory = True
    supports_fork = True
    uses_worker_pool = True
    stores_at_source = True
    packs_panels = True

    @property
    def packs_bf16_pairs(self) -> bool:
        return amx_ready() or dpbf16_ready()

    @property
    def description(self) -> str:
        return f"the CPU ({effective_threads()} thread(s))"

    @property
    def bandwidth(self) -> float:
        return _measured_limits()[0]

    @property
    def peak(self) -> float:
        return _measured_limits()[1]

    def plan_key(self, device: str, key: tuple) -> tuple:
        # the structure, and whether bfloat16 products are packed for AMX or `vdpbf16ps`
        # (FUSEGRAD_AMX, FUSEGRAD_DPBF16): the layout a plan's macros are expanded under
        # (pipeline/layout.py) is not in the graph, and those settings may change
        return (key, self.packs_bf16_pairs)

    def disk_plan_key(self, key: tuple, device: str) -> str | None:
        # (not the autotuner's choices: a plan is kept only once its tiles are final, and
        # other shape classes tuned later leave it as right and as fast)
        options = repr(sorted(_lower_options().items()))
        return plan_store.plan_key(
            key, device, options + repr(sorted(self.schedule_options.items()))
        )

    def load_plan(self, disk_key: str) -> Plan | None:
        with _ahead_lock:  # (one `load_ahead` is reading now: waited for, not read twice)
            plan = _ahead.pop(disk_key, None)
            _note_used(disk_key)  # (and from now on `load_ahead` leaves it to this thread)
        if plan is None:
            with phases.timed("llvm"):  # loading the kernels' object files
                plan = _read_plan(disk_key)
        if plan is not None and effective_threads() > 1:
            pool.compile_ahead()
        return plan

    def store_plan(self, disk_key: str, plan: Plan) -> None:
        if len(plan.steps) > 1:  # (its scratch layout is kept with it on disk)
            _layout_of(plan)
        plan_store.store(disk_key, plan)
        with _ahead_lock:
            _note_used(disk_key)

    def plans_used(self) -> list[str]:
        """The disk keys of the plans this process read or kept on disk, the first used
        first (at most `PLANS_AHEAD_MAX`): what the next run of the program reads ahead."""
        with _ahead_lock:
            return list(_used)

    def load_ahead(self, disk_keys: list[str]) -> int:
        """Read the plans of `disk_keys` from the disk cache now (those an earlier run of
        the program used, first used first), so that `load_plan` finds each in memory;
        how many were read. A thread of fusegrad's own calls it at import
        (`runtime/engine.py`): unpickling a plan and loading its kernels' object files
        (LLVM, without the GIL) then happen while the program builds its model."""
        read = 0
        for disk_key in disk_keys[:PLANS_AHEAD_MAX]:
            with _ahead_lock:
                if disk_key in _ahead or disk_key in _used:
                    continue  # (read already, or the program asked for it first)
                plan = _read_plan(disk_key)
                if plan is not None:
                    _ahead[disk_key] = plan
                    read += 1
        if read and effective_threads() > 1:
            pool.compile_ahead()
        return read

    def alloc(self, size: int, dtype, device: str) -> Buffer:
        return Buffer(size, dtype)

    def free(self) -> None:
        clear_pool()

    def from_host(self, array: np.ndarray, dtype, device: str) -> Buffer:
        return Buffer.from_numpy(array, dtype)

    def lower(self, item):
        return lower(item, **_lower_options(), tuner=autotune.tuner_for_config(self.compile))

    def kernel_symbol(self, loop) -> str:
        return kernel_symbol(render_llvm(loop, "KERNEL"), loop.name)

    def compile(self, loop) -> CompiledKernel:
        return self.compile_many([loop])[0]

    def compile_many(self, loops: list) -> list[CompiledKernel]:
        with phases.timed("render"):
            jobs = [_job(loop, _render(loop)) for loop in loops]
        with phases.timed("llvm"):
            return compile_kernels(jobs)

    def lower_and_compile(self, items: list) -> tuple[list, list[CompiledKernel]]:
        """Each item's loop IR and LLVM source from the disk cache of scheduled kernels
        (`pipeline/item_cache.py`) where they are there, the others lowered and rendered
        side by side (`_lowered`) and saved there; then the machine code of all of them
        (`_compiled`). Items with the same key (a layer's kernels repeated) are made once;
        kernels that are the same up to their sizes share one generic kernel
        (`compiler.shared_forms`). Where none may (`_may_share`), each item is lowered,
        rendered and compiled by the process that claims it, in one round."""
        if type(self).compile_many is not CpuBackend.compile_many:
            # (a subclass that compiles its own way gets the kernels through it)
            with phases.timed("lower"):
                loops = [self.lower(item) for item in items]
            return loops, self.compile_many(loops)
        loops: list = [None] * len(items)
        sources: list = [None] * len(items)
        with phases.timed("lower"):  # the cache's look-ups count as lowering
            # what `lower` is told besides the item (AMX on or off, the autotuner's
            # choices) is in the key too
            options = _options_key()
            # (without a cache folder too: items with the same key are made once)
            texts = [item_cache.describe(item) for item in items]
            keys = [item_cache.key_of(text, options) for text in texts]
            for i, key in enumerate(keys):
                found = item_cache.load(key) if key and config.cache else None
                if found is not None:
                    loops[i], sources[i] = found
        first_of: dict[str, int] = {}  # item key -> the first missing item with it
        missing, same = [], {}  # items to make; an item -> the one made for it
        for i in range(len(items)):
            if loops[i] is not None:
                continue
            if keys[i] is not None and keys[i] in first_of:
                same[i] = first_of[keys[i]]
                continue
            if keys[i] is not None:
                first_of[keys[i]] = i
            missing.append(i)
        # two rounds where two of the plan's kernels may share a generic kernel: every
        # source is needed before anything is compiled
        one_round = not _may_share(items, texts)
        made = self._lowered([items[i] for i in missing], one_round) if missing else []
        ready = {}
        for i, (loop, source, groups, obj) in zip(missing, made):
            loops[i], sources[i] = loop, source
            if obj is not None:
                ready[i] = obj
            if groups is not None:  # (a forked copy made it generic: here too)
                _, symbol, _, opt = _job(loop, source)
                templates.registry.predict(code_of(source, symbol, opt)[0], opt, groups)
                if config.debug >= 2:
                    _say_predicted(symbol, groups)
        for i, j in same.items():
            loops[i], sources[i] = loops[j], sources[j]
        shareable = [
            not _reduces(item) and not loop.tile_note and not loop.uses_tiles
            for item, loop in zip(items, loops)
        ]
        compiled = self._compiled(loops, sources, shareable, ready if one_round else None)
        if config.cache:
            made_with = _options_key()  # with the choices the autotuner has just made
            for i in missing:
                if loops[i].tile_provisional:  # a later run tunes those
                    continue
                # (the key looked up, unless the autotuner's choices changed it)
                key = keys[i] if made_with == options else item_cache.item_key(items[i], made_with)
                if key is not None:  # (an item `describe` cannot spell is not kept)
                    item_cache.store(key, loops[i], sources[i])
        if not missing and effective_threads() > 1:
            pool.compile_ahead()
        return loops, compiled

    def _compiled(
        self, loops: list, sources: list, shareable: list[bool], ready: dict | None
    ) -> list[CompiledKernel]:
        """The machine code of rendered kernels: found in the caches, given (`ready`: index
        -> object file made with its lowering, `_lowered`), else compiled by this process
        and forked copies of it side by side (`side_by_side`: each claims the next code
        when done with its last), or by `compile_kernels`' spawned helpers while this
        process must not fork. The `shareable` kernels (those that compute no reduction
        and are not register-tiled: a sum's generic loops cost LLVM more than the kernels
        they would serve, and a register tile runs slower without its trip counts) whose
        shape another of them has with other literals (a network's normalizations and
        activations at each stage's sizes) run one generic kernel between them
        (`shared_forms`), outside a plan whose sizes vary (whose generic kernels
        `compile_kernels` finds in its registry)."""
        with phases.timed("llvm"):
            jobs = [_job(loop, source) for loop, source in zip(loops, sources)]
            shared = {}
            if config.share_forms and not templates.active():
                shared = shared_forms(jobs, shareable)
            if ready is not None:  # (made with their lowering: `_may_share` saw no pair)
                ready = {i: obj for i, obj in ready.items() if i not in shared}
                return compile_kernels(jobs, ready, shared)
            run = run_jobs(jobs, shared)
            first: dict[str, int] = {}  # code symbol -> the first job that compiles it
            for i, (source, symbol, _, opt) in enumerate(run):
                first.setdefault(code_of(source, symbol, opt)[1], i)
            todo = list(first.values())
            ready = {}
            if compile_workers(len(todo)) > 1 and forksafe.may_fork():

                def emit(k: int):
                    source, symbol, _, opt = run[todo[k]]
                    return new_object(source, symbol, opt)

                objects = side_by_side(len(todo), emit, compile_workers(len(todo)), _forked)
                ready = {i: obj for i, obj in zip(todo, objects) if obj is not None}
            return compile_kernels(jobs, ready, shared)

    def _lowered(self, items: list, compiled: bool) -> list[tuple]:
        """(loop IR, LLVM source, the literals its generic kernel reads where this made it
        (`_predicted`, else None), its object file where `compiled` and it is not at hand
        (`new_object`), else None) for each item: lowered and rendered (and compiled) by
        this process and forked copies of it side by side (`compiler.side_by_side`: each
        claims the next item when done with its last, so the work splits by what each
        kernel costs, and the Python of lowering runs side by side too). The worker
        pool's code is compiled on a thread here meanwhile (`pool.compile_ahead`), once
        the copies are forked. Phases: this process's own lowering, rendering and LLVM,
        and the wait for the copies as `llvm` where they compile, else `lower`.

        While a thread other than fusegrad's runs, this process must not fork
        (`forksafe.may_fork`): it lowers and renders every item itself, and leaves the
        objects to `compile_kernels`, whose spawned helpers compile them side by side."""
        claimed: set[str] = set()  # codes compiled by this process (a forked copy: its own)

        def make(k: int) -> tuple:
            with phases.timed("lower"):
                loop = self.lower(items[k])
            with phases.timed("render"):
                source = _render(loop)
            opt = _job(loop, source)[3]
            groups = self._predicted(items[k], loop, source, opt)
            if not compiled:
                return loop, source, groups, None
            with phases.timed("llvm"):
                return loop, source, groups, new_object(source, loop.name, opt, claimed)

        tuner = autotune.tuner_for_config(self.compile)
        # with FUSEGRAD_AUTOTUNE_AFTER=n a new plan's untuned contractions keep the fixed
        # tile, provisional, until the plan has run n times (the engine tunes it then)
        later = config.autotune_after > 0
        workers = compile_workers(len(items))
        if templates.active() and len(items) < VARYING_FORK_MIN_ITEMS:
            # a size met anew: its few items lowered here, cheaper than in a forked copy;
            # what they compile (rarely: generic kernels serve the most) is compiled side by
            # side by `compile_kernels`
            workers, compiled = 1, False
        if workers > 1 and not forksafe.may_fork():
            _forked()
            compiled = False
            with autotune.deferred(tuner if later else None):
                return _kept_for_later([make(k) for k in range(len(items))])
        before = sum(phases.seconds[p] for p in ("lower", "render", "llvm"))
        t0 = time.perf_counter()
        with autotune.deferred(tuner):  # (a candidate timed beside the copies: their load)
            made = side_by_side(len(items), make, workers, _forked)
        if later:
            made = _kept_for_later(made)
        for k, (loop, *_) in enumerate(made):
            if loop.tune_later:  # the copies are done: its tiles are timed now, alone
                made[k] = make(k)
        own = sum(phases.seconds[p] for p in ("lower", "render", "llvm")) - before
        waited = max(0.0, time.perf_counter() - t0 - own)
        phases.seconds["llvm" if compiled else "lower"] += waited
        return made

    def _predicted(self, item, loop, source: str, opt: int):
        """In a plan whose sizes vary (`templates.varying`), a kernel of a shape not seen
        before is lowered again at other sizes (`templates.probes`, copies of its item
        through `without_values`), and the literals that moved (`templates.moved`) are
        those its generic kernel reads, made now (`registry.predict`): the sizes to come
        then run it, where waiting for a second kernel of its shape would compile one for
        each. Those groups, or None (sizes that never vary, a shape seen before, or no
        literal that moved in a probe of the same shape)."""
        sizes, kept = templates.varying_sizes()
        if not sizes or not config.size_templates:
            return None
        code = code_of(source, loop.name, opt)[0]
        shape = templates.shape_of(code)
        if not templates.registry.unseen(shape, opt):
            return None
        probes = templates.probes(sizes, kept)
        moving = probes[0].keys()
        if not any(d in moving for n in (*item.inputs, *item.nodes) for d in n.shape):
            return None  # (no size of it moves: an optimizer's update of a weight)
        tuner = autotune.tuner_for_config(self.compile)
        others = []
        for other in probes:
            with phases.timed("lower"), autotune.deferred(tuner):  # (nothing timed for it)
                try:
                    probe = self.lower(without_values(item, other))
                    others.append(code_of(_render(probe), probe.name, opt)[0])
                except Exception:  # noqa: BLE001 (a copy whose sizes do not fit: no probe)
                    # (the copy is not a graph anything checked: a view whose size is a
                    # product of the one that moved keeps its old one, and its lowering
                    # may refuse it; the kernel itself compiles as it would without)
                    continue
        groups = templates.moved(shape, others)
        if groups is not None:
            templates.registry.predict(code, opt, groups)
        return groups

    def prepare(self, plan: Plan) -> None:
        if config.program:
            _build_program(plan)  # now, so that later runs compile nothing

    def rebuild(self, plan: Plan) -> None:
        """After `plan`'s kernels were replaced (tuned): a new native program. The old one's
        arrays and kernel table stay alive (a run on another thread may be using them)."""
        plan.retired.append((plan.program, plan.fns, plan.ready))
        plan.program, plan.ready = None, []
        self.prepare(plan)

    def run(self, plan: Plan, leaves: list[Buffer]):
        if len(plan.steps) == 1:
            return _run_one(plan, leaves)
        if config.program:
            return _run_program(plan, leaves)
        return None

    def run_first(self, plan: Plan, leaves: list[Buffer]):
        """A new plan of several kernels runs its native program at once, as its later runs
        do, rather than a kernel at a time from Python (thousands of launches); each
        kernel's time is read from the cycle counter the program keeps (`_kernel_times`),
        its page faults on fresh memory included. None (the engine's loop) for one kernel,
        without the program, or where the cycle counter's rate is not known (no native
        pool)."""
        if len(plan.steps) < 2 or not config.program or not pool.available():
            return None
        return _run_program(plan, leaves, first=True)

    def arena_layout(self, plan: Plan) -> list[tuple[int, int, int]] | None:
        """A plan of several kernels runs as a native program (with FUSEGRAD_PROGRAM on):
        its intermediates lie in one scratch allocation, a value's place taken by later
        ones once it is dead (`_scratch_layout`)."""
        if len(plan.steps) < 2 or not config.program:
            return None
        return _layout_of(plan)

    def first_touch(self, outs: list[Buffer]) -> None:
        for b in outs:
            touch_pages(b)

    def launch(self, step, outs: list[Buffer], inputs: list[Buffer], timed: bool) -> None:
        ptrs = [b.ptr for b in outs] + [b.ptr for b in inputs]
        launch(step.record.compiled, step.extent, step.work, ptrs)


def _say_predicted(symbol: str, groups) -> None:
    """`FUSEGRAD_DEBUG=2`'s line for a kernel made generic at its first sighting."""
    slots = len(groups)
    print(
        f"fusegrad: {symbol}: a form met first at these sizes, lowered at two others too;"
        f" its generic kernel reads the {sum(map(len, groups))} literal(s) that moved"
        f" ({slots} slot{'s' * (slots != 1)}), so the next sizes of its form compile nothing",
        file=sys.stderr,
    )


def _may_share(items: list, texts: list) -> bool:
    """Whether two of a plan's items may lower to kernels that share a generic kernel
    (`compiler.shared_forms`): two that compute no reduction (`_reduces`) and whose
    descriptions (`texts`, `item_cache.describe`) are the same with every number left out. A
    guess made before lowering, so that a plan where none can share is lowered and
    compiled in one round; a pair it misses still shares (the generic kernel compiled
    after the round: its kernels' own objects made for nothing, never a kernel wrong)."""
    if not config.share_forms or templates.active():
        return False
    seen = set()
    for item, text in zip(items, texts):
        if text is not None and not _reduces(item):
            form = _DIGITS.sub("#", text)
            if form in seen:
                return True
            seen.add(form)
    return False


_DIGITS = re.compile(r"\d+")


def _reduces(item) -> bool:
    """Whether a schedule item computes a reduction (its kernel's name starts `r_`)."""
    return any(n.op in REDUCE for n in item.nodes)


def _forked() -> None:
    """Called once `side_by_side` has forked its copies: the worker pool's code is compiled
    on a thread beside them (`pool.compile_ahead`)."""
    if effective_threads() > 1:
        pool.compile_ahead()


def _kept_for_later(made: list[tuple]) -> list[tuple]:
    """`made` with the kernels marked `tune_later` kept as they are, with the fixed tile,
    provisional: the engine tunes them once their plan has run `config.autotune_after`
    times (`Engine.tune`), so a first step waits for no timing."""
    for loop, *_ in made:
        loop.tune_later = False
    return made


def _render(loop) -> str:
    """A loop-IR kernel's LLVM source, its function named by its symbol, which `loop.name`
    becomes (one name in the listing, launch line, dump and profile)."""
    source = render_llvm(loop, "KERNEL")
    symbol = kernel_symbol(source, loop.name)
    loop.name = symbol
    return source.replace("@KERNEL(", f"@{symbol}(")


def _lower_options() -> dict:
    """What `lower` is told besides the item, on this host and configuration: one place,
    so the disk cache's key (`lower_and_compile`) cannot miss an option `lower` gets."""
    return {"amx": amx_ready(), "dpbf16": dpbf16_ready()}


def _options_key() -> str:
    """`_lower_options` and, with the autotuner on, the choices it has on disk for this
    host: a kernel lowered with one set of choices is never loaded under another."""
    options = repr(sorted(_lower_options().items()))
    tuner = autotune.tuner_for_config(None)
    return options if tuner is None else options + " autotune " + tuner.digest()


MOVEMENT_OPT = 2  # the LLVM level of a kernel that only moves values (no arithmetic)

# In a plan whose sizes vary, fewer new items than this are lowered by this process alone:
# their kernels mostly run generic kernels compiled already (`compiler.compile_kernels`),
# so each is a few milliseconds of lowering, and a forked copy's start and pickled results
# cost more than it saves (a sentence classifier's new lengths, ten items each: 25-30 ms of
# `_lowered` forked, 22 alone)
VARYING_FORK_MIN_ITEMS = 24


def _job(loop, source: str) -> tuple[str, str, int, int]:
    """The compile job of a rendered kernel: (source, symbol, parameters, level). O3 for
    kernels that compute; MOVEMENT_OPT for those that only move values (copies, pads,
    permutes: `flops` 0), whose short peeled loops O3's unroller can take half a second
    over (LeNet's padded 64x16x10^2 input: 563 ms of its first step's 1.56 s of LLVM on a
    Zen 4, 28 ms at O2, the kernel as fast). The parameters count the cancel word's
    address of a kernel that reads it (pipeline/llvm.py), after its buffers."""
    params = len(loop.params) + reads_cancel_word(source)
    return source, loop.name, params, 3 if loop.flops else MOVEMENT_OPT


@functools.lru_cache(maxsize=1)
def _measured_limits() -> tuple[float, float]:
    """This machine's measured limits, once per process: memory bandwidth (GB/s, a 64 MB
    copy by numpy, bytes read plus written) and arithmetic (GFLOP/s, numpy's float32
    matrix product of 1024 x 1024, a practical peak). Best of three runs each."""
    a = np.ones(1 << 24, np.float32)
    b = np.empty_like(a)
    copy = min(_timed(lambda: np.copyto(b, a)) for _ in range(3))
    m = np.ones((1024, 1024), np.float32)
    matmul = min(_timed(lambda: m @ m) for _ in range(3))
    return 2 * a.nbytes / copy / 1e9, 2 * 1024**3 / matmul / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


register_backend("cpu", CpuBackend)
