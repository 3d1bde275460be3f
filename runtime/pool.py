"""The worker pool's native half: threads that wait for kernels without Python.

Each worker is a Python thread that calls `fg_pool_worker` once and never comes back
to Python: it waits in native code for a job, runs its slice, and waits again, so
handing it a kernel costs no GIL hand-over, no Python on the worker, and no lock
object. A caller hands over a job in one native call, `fg_pool_run`, which also runs
the caller's own slice and waits for the workers' (spinning, then yielding).

A worker that has nothing to do spins for a short while (`JOB_SPIN_US`: a training
step's next kernel usually comes within it), then sleeps on a futex. Waking a
sleeping thread of a virtual machine's idle CPU takes tens to hundreds of
microseconds, so the engine calls `fg_pool_prewake` as soon as it knows that the
plan it is about to run has a parallel kernel: the workers wake while the caller's
Python prepares the run, and spin (at most `WAKE_SPIN_US`) until it arrives.

The memory the three functions share is one array of 64-bit words (`Layout`): the
futex word, settings, the job's arguments (one set for all threads: only each
thread's slice differs), the cancel word, and a slot per worker (the job's sequence
number, the one it has finished, whether it sleeps, the function, the thread count, the
loop length, its thread id and the fewest and the most iterations a chunk holds).

A nonzero cancel word stops a job early: every thread looks at it before claiming a
chunk (one load per chunk) and claims no more once it is set, and a program skips its
remaining kernels (runtime/program.py). The caller sets it when Ctrl-C interrupts a
long run (runtime/launch.py) and clears it once the threads have returned; the
outputs are then incomplete, and the caller raises instead of using them.

A null function is the pool closing: the worker returns to Python, and its thread
ends. A job's function is called as `fn(start, end, a0, ..., a61)`: a kernel's own
signature is `(start, end, ptr...)` with at most MAX_ARGS pointers, and reads only
those (the C calling conventions of x86-64 and AArch64 let a caller pass more
arguments than the callee reads). A program (runtime/program.py) is called as
`fn(tid, nthreads, buffers, kernels, barrier, cancel)`: `extent` -1 selects that form.

Linux only (futexes); elsewhere `available()` is False and kernels run on the
calling thread.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys
import threading
import time

from . import forksafe
from .compiler import compile_kernel

MAX_ARGS = 62  # pointer arguments a kernel run by the pool may take (64 in all)
MAX_WORKERS = 255
JOB_SPIN_US = 50  # a worker spins this long after a job before it sleeps
WAKE_SPIN_US = 1000  # and this long after a pre-wake, waiting for the job it announced
# a kernel's loop is claimed in about this many chunks per thread (a late thread then
# holds the others up by at most a chunk), each at least CHUNK_MIN_WORK inner iterations
# (so claiming costs little next to running one)
CHUNKS_PER_THREAD = 32
CHUNK_MIN_WORK = 1 << 14
# and at most this many (where a row of the loop is shorter), so that a cancelled run
# stops within a few milliseconds even when 1/CHUNKS_PER_THREAD of its loop takes seconds
CHUNK_MAX_WORK = 1 << 24
# near the end of a loop the chunks shrink, so that the threads finish together: a claim
# takes at most 1 / (TAIL_PARTS_PER_THREAD * threads) of what is left (but never less
# than its least), so the last eighth of a loop goes in ever smaller chunks instead of a
# whole chunk that one thread runs while the others wait
TAIL_PARTS_PER_THREAD = 4
CALLER_SPINS = 4000  # pauses the caller spins waiting for a worker before it yields


class Layout:
    """Word offsets in the shared array."""

    GEN = 0  # the futex word (its low 32 bits): bumped to wake sleeping workers
    PLACED_CPU = 1  # the CPU the caller ran on when the workers were placed off it
    JOB_SPIN = 2  # cycles a worker spins after a job
    WAKE_SPIN = 3  # cycles a worker spins after being woken
    SYSCALL = 4  # libc's syscall(), sched_getcpu() and sched_yield() addresses
    GETCPU = 5
    YIELD = 6
    FUTEX_NR = 7  # the futex system call's number on this architecture
    ARGS = 8  # MAX_ARGS words: the job's arguments
    CANCEL = 70  # nonzero: claim no more chunks (read-mostly, beside the arguments)
    NEXT = 72  # the next chunk of a kernel's loop to claim (a cache line of its own)
    SLOTS = 80  # then a slot per worker
    SLOT_WORDS = 16  # 128 bytes, so two workers' slots never share a cache line
    SEQ, DONE, SLEEPING, FN, N, EXTENT, TID, LEAST, MOST = range(9)
    WORDS = SLOTS + SLOT_WORDS * MAX_WORKERS


_FUTEX_NR = {"x86_64": 202, "aarch64": 98}
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129


def available() -> bool:
    """Whether this platform has the native pool (Linux on x86-64 or AArch64)."""
    return sys.platform.startswith("linux") and platform.machine() in _FUTEX_NR


def _slot(name: str, index: str, field: int = 0) -> list[str]:
    """%{name} = the address of word `field` of worker `index`'s slot."""
    L = Layout
    return [
        f"  %{name}.o1 = mul i64 {index}, {L.SLOT_WORDS}",
        f"  %{name}.o2 = add i64 %{name}.o1, {L.SLOTS + field}",
        f"  %{name} = getelementptr inbounds i64, ptr %pool, i64 %{name}.o2",
    ]


def _slot_fields(lines: list[str], slot: str, names: dict[str, int]) -> None:
    """%name = the address of each named field of the slot at `slot`."""
    for name, field in names.items():
        lines.append(f"  %{name} = getelementptr inbounds i64, ptr {slot}, i64 {field}")


def _word(lines: list[str], name: str, word: int) -> None:
    lines.append(f"  %{name} = getelementptr inbounds i64, ptr %pool, i64 {word}")


def claim_loop_ir(
    p: str, counter: str, extent, least, most, n, call: str, done: str, cancel: str
) -> list[str]:
    """Blocks {p}claim, {p}size and {p}run, for `n` threads sharing a loop of `extent`:
    claim iterations from the shared counter at `counter`, about CHUNKS_PER_THREAD chunks
    per thread but at least `least` (>= 1) and at most `most` (>= least) each, and near
    the end 1 / (TAIL_PARTS_PER_THREAD * n) of what is left but at least `least` (a
    chunk's size depends only on where it starts, so the chunks are the same whichever
    thread claims them); run each (`call`: the call's text, with `{}` where the chunk's
    start and end go), and branch to `done` once none is left, or before a claim once
    the word at `cancel` is nonzero. Shared by the pool's launches and the programs'
    kernels (runtime/program.py)."""
    return [
        f"  %{p}parts = mul i64 {n}, {CHUNKS_PER_THREAD}",
        f"  %{p}c0 = udiv i64 {extent}, %{p}parts",
        f"  %{p}big = icmp ugt i64 %{p}c0, {least}",
        f"  %{p}c1 = select i1 %{p}big, i64 %{p}c0, i64 {least}",
        f"  %{p}huge = icmp ugt i64 %{p}c1, {most}",
        f"  %{p}chunk = select i1 %{p}huge, i64 {most}, i64 %{p}c1",
        f"  br label %{p}claim",
        f"{p}claim:",
        f"  %{p}stop = load atomic i64, ptr {cancel} monotonic, align 8",
        f"  %{p}halt = icmp ne i64 %{p}stop, 0",
        f"  br i1 %{p}halt, label %{done}, label %{p}load",
        f"{p}load:",
        f"  %{p}s0 = load atomic i64, ptr {counter} monotonic, align 8",
        f"  br label %{p}try",
        f"{p}try:",
        f"  %{p}s = phi i64 [%{p}s0, %{p}load], [%{p}seen, %{p}size]",
        f"  %{p}left = icmp slt i64 %{p}s, {extent}",
        f"  br i1 %{p}left, label %{p}size, label %{done}",
        f"{p}size:",
        f"  %{p}rest = sub i64 {extent}, %{p}s",
        f"  %{p}tparts = mul i64 {n}, {TAIL_PARTS_PER_THREAD}",
        f"  %{p}t0 = udiv i64 %{p}rest, %{p}tparts",
        f"  %{p}tbig = icmp ugt i64 %{p}t0, {least}",
        f"  %{p}t = select i1 %{p}tbig, i64 %{p}t0, i64 {least}",
        f"  %{p}tsmall = icmp ult i64 %{p}t, %{p}chunk",
        f"  %{p}take = select i1 %{p}tsmall, i64 %{p}t, i64 %{p}chunk",
        f"  %{p}e0 = add i64 %{p}s, %{p}take",
        f"  %{p}pair = cmpxchg ptr {counter}, i64 %{p}s, i64 %{p}e0 monotonic monotonic",
        f"  %{p}seen = extractvalue {{ i64, i1 }} %{p}pair, 0",
        f"  %{p}won = extractvalue {{ i64, i1 }} %{p}pair, 1",
        f"  br i1 %{p}won, label %{p}run, label %{p}try",
        f"{p}run:",
        f"  %{p}over = icmp sgt i64 %{p}e0, {extent}",
        f"  %{p}e = select i1 %{p}over, i64 {extent}, i64 %{p}e0",
        "  " + call.format(f"%{p}s", f"%{p}e"),
        f"  br label %{p}claim",
    ]


def _do_job() -> list[str]:
    """fg_pool_do(pool, fn, tid, n, ext, least, most): one thread's part of a job. A
    kernel's loop is claimed in chunks from the shared counter (`claim_loop_ir`), so a
    thread that starts late (a sleeping CPU takes long to wake) or is preempted takes
    fewer chunks instead of holding up the others; a program (ext -1) is called once as
    fn(tid, n, ...)."""
    args, lines = (
        [],
        [
            "define internal void @fg_pool_do(ptr %pool, ptr %fn, i64 %tid, i64 %n, i64 %ext, "
            "i64 %least, i64 %most) nounwind {",
            "entry:",
        ],
    )
    for k in range(MAX_ARGS):
        lines.append(f"  %a{k}.at = getelementptr inbounds i64, ptr %pool, i64 {Layout.ARGS + k}")
        lines.append(f"  %a{k} = load i64, ptr %a{k}.at")
        args.append(f"i64 %a{k}")
    sig = ", ".join(["i64"] * (MAX_ARGS + 2))
    rest = ", ".join(args)
    lines += [
        f"  %next = getelementptr inbounds i64, ptr %pool, i64 {Layout.NEXT}",
        f"  %cancel = getelementptr inbounds i64, ptr %pool, i64 {Layout.CANCEL}",
        "  %prog = icmp slt i64 %ext, 0",
        "  br i1 %prog, label %program, label %chunks",
        "program:",
        f"  call void ({sig}) %fn(i64 %tid, i64 %n, {rest})",
        "  ret void",
        "chunks:",
        *claim_loop_ir(
            "c.",
            "%next",
            "%ext",
            "%least",
            "%most",
            "%n",
            f"call void ({sig}) %fn(i64 {{}}, i64 {{}}, {rest})",
            "done",
            "%cancel",
        ),
        "done:",
        "  ret void",
        "}",
    ]
    return lines


def render() -> str:
    """The LLVM IR of fg_pool_worker, fg_pool_run, fg_pool_prewake, fg_pool_close and
    fg_pool_cycles."""
    x86 = platform.machine() == "x86_64"
    pause = "  call void @llvm.x86.sse2.pause()" if x86 else "  fence seq_cst"
    L = Layout
    out = ["declare i64 @llvm.readcyclecounter()"]
    if x86:
        out.append("declare void @llvm.x86.sse2.pause()")
    out += _do_job()

    # ---- the worker: wait for a job, run it, say so; until a null job (closing)
    w = [
        "define void @fg_pool_worker(ptr %pool, i64 %w) nounwind {",
        "entry:",
        "  %seen.a = alloca i64",
        "  %until.a = alloca i64",
        *_slot("slot", "%w"),
    ]
    fields = {"seq.p": L.SEQ, "done.p": L.DONE, "sleep.p": L.SLEEPING, "fn.p": L.FN}
    fields.update({"n.p": L.N, "ext.p": L.EXTENT, "tid.p": L.TID, "least.p": L.LEAST})
    fields["most.p"] = L.MOST
    _slot_fields(w, "%slot", fields)
    for name, word in (
        ("jobspin.p", L.JOB_SPIN),
        ("wakespin.p", L.WAKE_SPIN),
        ("sys.p", L.SYSCALL),
        ("nr.p", L.FUTEX_NR),
    ):
        _word(w, name, word)
    w += [
        # the jobs it has seen are those it has done: a job posted before this thread got
        # going is still new to it
        "  %s0 = load atomic i64, ptr %done.p acquire, align 8",
        "  store i64 %s0, ptr %seen.a",
        "  %t0 = call i64 @llvm.readcyclecounter()",
        "  %js0 = load i64, ptr %jobspin.p",
        "  %u0 = add i64 %t0, %js0",
        "  store i64 %u0, ptr %until.a",
        "  br label %poll",
        "poll:",
        "  %seen = load i64, ptr %seen.a",
        "  %q = load atomic i64, ptr %seq.p acquire, align 8",
        "  %new = icmp ne i64 %q, %seen",
        "  br i1 %new, label %job, label %idle",
        "idle:",
        "  %now = call i64 @llvm.readcyclecounter()",
        "  %until = load i64, ptr %until.a",
        "  %early = icmp ult i64 %now, %until",
        "  br i1 %early, label %pause, label %sleep",
        "pause:",
        pause,
        "  br label %poll",
        # sleeping: say so, then look once more (the caller, having posted a job, looks at
        # `sleeping` after a fence: one of the two sees the other's store)
        "sleep:",
        "  %g = load atomic i32, ptr %pool acquire, align 8",
        "  store atomic i64 1, ptr %sleep.p seq_cst, align 8",
        "  fence seq_cst",
        "  %q2 = load atomic i64, ptr %seq.p seq_cst, align 8",
        "  %still = icmp eq i64 %q2, %seen",
        "  br i1 %still, label %futex, label %woke",
        "futex:",
        "  %sys = load ptr, ptr %sys.p",
        "  %nr = load i64, ptr %nr.p",
        "  %g64 = zext i32 %g to i64",
        f"  %r = call i64 (i64, ...) %sys(i64 %nr, ptr %pool, i64 {FUTEX_WAIT_PRIVATE}, "
        "i64 %g64, ptr null, ptr null, i64 0)",
        "  br label %woke",
        "woke:",
        "  store atomic i64 0, ptr %sleep.p seq_cst, align 8",
        "  %t1 = call i64 @llvm.readcyclecounter()",
        "  %ws = load i64, ptr %wakespin.p",
        "  %u1 = add i64 %t1, %ws",
        "  store i64 %u1, ptr %until.a",
        "  br label %poll",
        "job:",
        "  store i64 %q, ptr %seen.a",
        "  %fn = load ptr, ptr %fn.p",
        "  %quit = icmp eq ptr %fn, null",  # a null function: the pool is closing
        "  br i1 %quit, label %exit, label %run",
        "exit:",
        "  store atomic i64 %q, ptr %done.p release, align 8",
        "  ret void",
        "run:",
        "  %n = load i64, ptr %n.p",
        "  %ext = load i64, ptr %ext.p",
        "  %tid = load i64, ptr %tid.p",
        "  %least = load i64, ptr %least.p",
        "  %most = load i64, ptr %most.p",
        "  call void @fg_pool_do(ptr %pool, ptr %fn, i64 %tid, i64 %n, i64 %ext, i64 %least, "
        "i64 %most)",
    ]
    w += [
        "  store atomic i64 %q, ptr %done.p release, align 8",
        "  %t2 = call i64 @llvm.readcyclecounter()",
        "  %js = load i64, ptr %jobspin.p",
        "  %u2 = add i64 %t2, %js",
        "  store i64 %u2, ptr %until.a",
        "  br label %poll",
        "}",
    ]
    out += w

    # ---- waking every sleeping worker among the first %k (shared by run and prewake)
    wake = [
        "define internal void @fg_pool_wake(ptr %pool, i64 %k) nounwind {",
        "entry:",
        "  fence seq_cst",
        "  br label %test",
        "test:",
        "  %i = phi i64 [0, %entry], [%i.n, %next]",
        "  %more = icmp ult i64 %i, %k",
        "  br i1 %more, label %look, label %none",
        "look:",
        *_slot("sp", "%i", L.SLEEPING),
        "  %s = load atomic i64, ptr %sp seq_cst, align 8",
        "  %i.n = add i64 %i, 1",
        "  %asleep = icmp ne i64 %s, 0",
        "  br i1 %asleep, label %wake, label %next",
        "next:",
        "  br label %test",
        "wake:",
        "  %old = atomicrmw add ptr %pool, i32 1 seq_cst",
    ]
    _word(wake, "sys.p", L.SYSCALL)
    _word(wake, "nr.p", L.FUTEX_NR)
    wake += [
        "  %sys = load ptr, ptr %sys.p",
        "  %nr = load i64, ptr %nr.p",
        f"  %r = call i64 (i64, ...) %sys(i64 %nr, ptr %pool, i64 {FUTEX_WAKE_PRIVATE}, "
        "i64 2147483647, ptr null, ptr null, i64 0)",
        "  ret void",
        "none:",
        "  ret void",
        "}",
    ]
    out += wake

    out += [
        # pre-waking: refused (1) when the caller has moved to another CPU, as a run is:
        # a worker woken on the caller's CPU would spin there, in the caller's way
        "define i64 @fg_pool_prewake(ptr %pool, i64 %k) nounwind {",
        "entry:",
        f"  %getcpu.p = getelementptr inbounds i64, ptr %pool, i64 {L.GETCPU}",
        f"  %placed.p = getelementptr inbounds i64, ptr %pool, i64 {L.PLACED_CPU}",
        "  %getcpu = load ptr, ptr %getcpu.p",
        "  %cpu = call i32 %getcpu()",
        "  %cpu64 = sext i32 %cpu to i64",
        "  %placed = load i64, ptr %placed.p",
        "  %moved = icmp ne i64 %cpu64, %placed",
        "  br i1 %moved, label %refuse, label %wake",
        "refuse:",
        "  ret i64 1",
        "wake:",
        "  call void @fg_pool_wake(ptr %pool, i64 %k)",
        "  ret i64 0",
        "}",
        # closing: a null job for each of the first %k workers, then wake them all
        "define void @fg_pool_close(ptr %pool, i64 %k) nounwind {",
        "entry:",
        "  br label %test",
        "test:",
        "  %i = phi i64 [0, %entry], [%i.n, %body]",
        "  %more = icmp ult i64 %i, %k",
        "  br i1 %more, label %body, label %wake",
        "body:",
        *_slot("s", "%i"),
        f"  %fnp = getelementptr inbounds i64, ptr %s, i64 {L.FN}",
        "  store ptr null, ptr %fnp",
        "  %sq = load atomic i64, ptr %s monotonic, align 8",
        "  %sq.n = add i64 %sq, 1",
        "  store atomic i64 %sq.n, ptr %s release, align 8",
        "  %i.n = add i64 %i, 1",
        "  br label %test",
        "wake:",
        "  call void @fg_pool_wake(ptr %pool, i64 %k)",
        "  ret void",
        "}",
        "define i64 @fg_pool_cycles() nounwind {",
        "entry:",
        "  %c = call i64 @llvm.readcyclecounter()",
        "  ret i64 %c",
        "}",
    ]

    # ---- the caller: post the job to workers 0 .. n-2, run slice 0, wait for the rest.
    # Returns 1 (and runs nothing) when the caller is no longer on the CPU the workers
    # were placed off.
    r = [
        "define i64 @fg_pool_run(ptr %pool, ptr %fn, i64 %n, i64 %ext, i64 %least, i64 %most) "
        "nounwind {",
        "entry:",
    ]
    _word(r, "getcpu.p", L.GETCPU)
    _word(r, "placed.p", L.PLACED_CPU)
    _word(r, "yield.p", L.YIELD)
    r += [
        "  %getcpu = load ptr, ptr %getcpu.p",
        "  %cpu = call i32 %getcpu()",
        "  %cpu64 = sext i32 %cpu to i64",
        "  %placed = load i64, ptr %placed.p",
        "  %moved = icmp ne i64 %cpu64, %placed",
        "  br i1 %moved, label %refuse, label %post",
        "refuse:",
        "  ret i64 1",
        "post:",
        f"  %next = getelementptr inbounds i64, ptr %pool, i64 {L.NEXT}",
        "  store i64 0, ptr %next",  # published to the workers by each slot's release store
        "  %workers = sub i64 %n, 1",
        "  br label %ptest",
        "ptest:",
        "  %i = phi i64 [0, %post], [%i.n, %pbody]",
        "  %pmore = icmp ult i64 %i, %workers",
        "  br i1 %pmore, label %pbody, label %posted",
        "pbody:",
        *_slot("ps", "%i"),
    ]
    fields = {"pseq": L.SEQ, "pfn": L.FN, "pn": L.N, "pext": L.EXTENT, "ptid": L.TID}
    _slot_fields(r, "%ps", {**fields, "pleast": L.LEAST, "pmost": L.MOST})
    r += [
        "  store ptr %fn, ptr %pfn",
        "  store i64 %n, ptr %pn",
        "  store i64 %ext, ptr %pext",
        "  store i64 %least, ptr %pleast",
        "  store i64 %most, ptr %pmost",
        "  %i.n = add i64 %i, 1",
        "  store i64 %i.n, ptr %ptid",
        "  %sq = load atomic i64, ptr %pseq monotonic, align 8",
        "  %sq.n = add i64 %sq, 1",
        "  store atomic i64 %sq.n, ptr %pseq release, align 8",
        "  br label %ptest",
        "posted:",
        "  call void @fg_pool_wake(ptr %pool, i64 %workers)",
    ]
    r.append(
        "  call void @fg_pool_do(ptr %pool, ptr %fn, i64 0, i64 %n, i64 %ext, i64 %least, "
        "i64 %most)"
    )
    r += [
        "  br label %jtest",
        "jtest:",
        "  %j = phi i64 [0, %posted], [%j.n, %jdone]",
        "  %jmore = icmp ult i64 %j, %workers",
        "  br i1 %jmore, label %jbody, label %joined",
        "jbody:",
        *_slot("js", "%j"),
    ]
    _slot_fields(r, "%js", {"jseq": L.SEQ, "jdonep": L.DONE})
    r += [
        "  %want = load atomic i64, ptr %jseq monotonic, align 8",
        "  br label %jwait",
        "jwait:",
        "  %spins = phi i64 [0, %jbody], [%spins.n, %jpause], [0, %jyield]",
        "  %d = load atomic i64, ptr %jdonep acquire, align 8",
        "  %finished = icmp eq i64 %d, %want",
        "  br i1 %finished, label %jdone, label %jspin",
        "jspin:",
        "  %spins.n = add i64 %spins, 1",
        f"  %long = icmp ugt i64 %spins.n, {CALLER_SPINS}",
        "  br i1 %long, label %jyield, label %jpause",
        "jpause:",
        pause,
        "  br label %jwait",
        "jyield:",
        "  %yield = load ptr, ptr %yield.p",
        "  %y = call i32 %yield()",
        "  br label %jwait",
        "jdone:",
        "  %j.n = add i64 %j, 1",
        "  br label %jtest",
        "joined:",
        "  ret i64 0",
        "}",
    ]
    out += r
    return "\n".join(out) + "\n"


_kept = []  # the pool's compiled code: its workers run it as long as the process lives


def functions() -> dict[str, int]:
    """The five functions' addresses (compiled once per process, or read from the cache)."""
    with _functions_lock:  # (one compile, if `compile_ahead`'s thread is at it)
        return _functions()


def compile_ahead() -> None:
    """Compile the pool's code on a thread of its own, once per process, while this one
    goes on (a new plan's lowering and rendering: LLVM runs without the GIL), so a cold
    first step does not wait for it when its first kernel starts the pool. A failure is
    left for `functions()` to raise where it is needed."""
    global _ahead
    if _ahead is None:
        # not a daemon: the interpreter waits for it at exit rather than unloading LLVM
        # under a thread still inside it
        _ahead = forksafe.Thread(target=_compile_quietly, name="fusegrad-pool-compile")
        _ahead.start()


def _compile_quietly() -> None:
    try:
        functions()
    except Exception:  # said again, where it matters, by the pool's own call
        pass


_functions_lock = forksafe.Lock()
_ahead: threading.Thread | None = None


@functools.lru_cache(maxsize=1)
def _functions() -> dict[str, int]:
    source = render()
    compiled = compile_kernel(source, "fg_pool_run", 2)
    # the workers live until the process ends, parked in this code: its library must never
    # be disposed of, not even when the interpreter clears module globals at exit (a worker
    # still spinning there would jump into unmapped memory)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(compiled))
    _kept.append(compiled)
    out = {"fg_pool_run": compiled.address}
    for name in ("fg_pool_worker", "fg_pool_prewake", "fg_pool_close", "fg_pool_cycles"):
        out[name] = compiled.library.address_of(name)
        if not out[name]:
            raise RuntimeError(f"the worker pool's {name} did not load")
    return out


@functools.lru_cache(maxsize=1)
def cycles_per_us() -> float:
    """How fast the cycle counter the workers time their spinning with ticks."""
    cycles = ctypes.CFUNCTYPE(ctypes.c_uint64)(functions()["fg_pool_cycles"])
    t0, c0 = time.perf_counter(), cycles()
    while time.perf_counter() - t0 < 2e-3:
        pass
    t1, c1 = time.perf_counter(), cycles()
    return max((c1 - c0) / ((t1 - t0) * 1e6), 1.0)


def libc_addresses() -> tuple[int, int, int, int]:
    """(syscall, sched_getcpu, sched_yield, the futex call's number) for the shared words."""
    libc = ctypes.CDLL(None)

    def address(name):
        return ctypes.cast(getattr(libc, name), ctypes.c_void_p).value

    nr = _FUTEX_NR[platform.machine()]
    return address("syscall"), address("sched_getcpu"), address("sched_yield"), nr
