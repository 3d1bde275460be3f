"""A cached schedule as one native call per thread.

Launching kernel after kernel from Python costs tens of microseconds each
(waking the worker threads, ctypes), so a training step with 50 kernels would
spend milliseconds in Python. Once a schedule is cached, its kernels are
strung together in one generated function that every thread calls once:

    void program(i64 tid, i64 nthreads, ptr buffers, ptr kernels, ptr barrier, ptr times,
                 ptr cancel)
      for each kernel (a row of the plan's table of steps, `step_rows`):
          thread 0: times[kernel] = the cycle counter
          claim chunks of its parallel loop until none is left; wait at the barrier
      thread 0: times[kernels] = the cycle counter

The chunks come from a counter per kernel (after the barrier's words), so a thread
that starts late (its CPU was asleep) or is preempted takes fewer of them instead
of holding the others up. Small kernels run on thread 0 alone (the others go
straight to the barrier).
Once only such kernels remain (a full sum's last, tiny step), the other threads
arrive at the barrier before them and return; no barrier follows the last kernel
(the caller joins the threads), so no thread waits for work it takes no part in.
The barrier is a counter and a generation number updated with atomics. So the
Python cost of a cached step no longer grows with the number of kernels.

Once the word at `cancel` is nonzero (Ctrl-C, see runtime/launch.py) the threads claim
no more chunks and thread 0 runs no more kernels of its own, but every thread still
passes every barrier and counts itself out of every kernel: the program returns soon,
its counters zero, and no kernel runs on the incomplete output of one that was cut
short (the barrier orders a thread's sight of the word before the next kernel's).
"""

from __future__ import annotations

import hashlib

import llvmlite.binding as llvm
import numpy as np

from ..pipeline import templates
from ..pipeline.compiler import CompiledKernel, compile_kernel
from .launch import chunk_least, chunk_most, runs_parallel
from .pool import claim_loop_ir

# words of a step's row before its slots: parallel, slots, extent, least, most, counter
ROW_HEAD = 6


# words of the `kernels` argument before the kernels' addresses: sched_yield's address, the
# table of steps' address, the number of steps, and the first step thread 0 runs alone
FNS_HEAD = 4


def program_words(steps: list[tuple[int, int, list[int]]], addresses: list[int], cede: int):
    """The `kernels` argument of the program for `steps`: `FNS_HEAD` words (`cede`, the
    address of sched_yield; where the table of steps lies; the number of steps; the first
    step from which thread 0 runs every kernel alone), the kernels' addresses, then the
    table itself (`step_rows`), in one array that holds it all.

    >>> words = program_words([(64, 1, [2, 0])], [0xABC], 0xDEF)
    >>> hex(words[0]), words[2:].tolist()
    ('0xdef', [1, 0, 2748, 0, 2, 64, 0, 0, 0, 2, 0])
    >>> int(words[1]) == words.ctypes.data + 8 * (FNS_HEAD + 1)
    True
    """
    head = [cede, 0, len(steps), _alone_from(steps)]
    words = np.array(head + list(addresses) + step_rows(steps), dtype=np.uint64)
    words[1] = words.ctypes.data + 8 * (FNS_HEAD + len(addresses))
    return words


def render_program(steps: list[tuple[int, int, list[int]]], name: str) -> str:
    """LLVM IR of a program over kernels given as (extent, work, buffer slots) each.

    Slot 0 of each kernel is its output; the slots index the `buffers` array. The steps
    are data, not code: a table (`step_rows`) that one loop walks, calling for each step
    the function that runs a kernel of that many parameters (`fg_step_{k}`, one per count
    the program needs). The table, its length and where thread 0 goes on alone come with
    the kernels' addresses at run time (`program_words`), so the code depends only on
    the counts of parameters: every plan whose kernels take the same counts runs the
    same program, compiled once (a new batch size, a new sentence length: a new plan,
    not a new program). A 256-kernel training step's program is ~30 KB of IR, compiled
    in milliseconds, where written out kernel by kernel it was 1.1 MB and 0.15-0.3 s of
    LLVM on a first step.
    """
    pause = "x86_64" in llvm.get_process_triple()
    arities = sorted({len(slots) for _, _, slots in steps})
    lines = [
        f"define void @{name}(i64 %tid, i64 %n, ptr %bufs, ptr %fns, ptr %bar, ptr %times, "
        "ptr %cancel) nounwind {",
        "entry:",
        "  %sink = alloca i64",  # where the threads but thread 0 write their clock readings
        "  %gen.ptr = getelementptr inbounds i64, ptr %bar, i64 1",
        "  %last.tid = sub i64 %n, 1",
        "  %is0 = icmp eq i64 %tid, 0",
        "  %own = alloca i64",  # the chunk counter of a thread that runs the program alone
        "  %yield = load ptr, ptr %fns",  # (`program_words`: the head of `fns`)
        "  %table.at = getelementptr inbounds ptr, ptr %fns, i64 1",
        "  %table = load ptr, ptr %table.at",
        "  %count.at = getelementptr inbounds i64, ptr %fns, i64 2",
        "  %count = load i64, ptr %count.at",
        "  %alone.at = getelementptr inbounds i64, ptr %fns, i64 3",
        "  %alone = load i64, ptr %alone.at",
        "  br label %step",
        "step:",
        "  %j = phi i64 [0, %entry], [%j.1, %barrier], [%j.1, %go.on], [%j.1, %resume]",
        "  %at = phi i64 [0, %entry], [%at.1, %barrier], [%at.1, %go.on], [%at.1, %resume]",
        *_clock_reading("%j", "step"),
        "  %row = getelementptr inbounds i64, ptr %table, i64 %at",
        "  %k.at = getelementptr inbounds i64, ptr %row, i64 1",
        "  %k = load i64, ptr %k.at",
        "  switch i64 %k, label %called ["
        + " ".join(f"i64 {a}, label %run{a}" for a in arities)
        + " ]",
    ]
    for a in arities:
        lines += [
            f"run{a}:",
            f"  call void @fg_step_{a}(ptr %bufs, ptr %fns, i64 %j, ptr %bar, ptr %own, i64 %n, "
            "i64 %last.tid, i1 %is0, ptr %cancel, ptr %row, i64 %tid)",
            "  br label %called",
        ]
    # from step `alone` on, thread 0 runs every kernel by itself: the other threads leave
    # once they have arrived at the barrier before it, and no barrier follows it (the
    # caller joins the threads), so they never wait for work they take no part in
    lines += [
        "called:",
        "  %j.1 = add i64 %j, 1",
        f"  %w = add i64 %k, {ROW_HEAD}",
        "  %at.1 = add i64 %at, %w",
        "  %meet = icmp ult i64 %j.1, %alone",
        "  br i1 %meet, label %barrier, label %tail",
        "barrier:",
        "  call void @fg_barrier(ptr %bar, i64 %last.tid, ptr %yield)",
        "  br label %step",
        "tail:",
        "  %fin = icmp eq i64 %j.1, %count",
        "  br i1 %fin, label %end, label %tail.more",
        "tail.more:",
        "  %leave = icmp eq i64 %j.1, %alone",
        "  br i1 %leave, label %k.last, label %go.on",
        "go.on:",
        "  br label %step",
        "k.last:",
        *_barrier_others_leave("resume", pause),
        "resume:",
        "  br label %step",
        "end:",
        *_clock_reading("%count", "end"),
        "  ret void",
        "}",
    ]
    head = ["declare i64 @llvm.readcyclecounter()"]
    head += ["declare void @llvm.x86.sse2.pause()"] if pause else []
    head += _barrier_function(pause)
    for a in arities:
        head += _step_function(a)
    return "\n".join(head + lines) + "\n"


def _clock_reading(at: str, name: str) -> list[str]:
    """Thread 0 writes the cycle counter to times[at] (the others to their own `%sink`):
    read as each step starts, after the barrier that ends the step before, and once
    more at the end, so that kernel j took times[j + 1] - times[j] cycles."""
    return [
        f"  %now.{name} = call i64 @llvm.readcyclecounter()",
        f"  %t.at.{name} = getelementptr inbounds i64, ptr %times, i64 {at}",
        f"  %t.to.{name} = select i1 %is0, ptr %t.at.{name}, ptr %sink",
        f"  store i64 %now.{name}, ptr %t.to.{name}",
    ]


def step_rows(steps: list[tuple[int, int, list[int]]]) -> list[int]:
    """The program's table: per step, whether its loop is shared among the threads, its
    number of slots, extent, least and most iterations per chunk, the first of its two
    counter words after the barrier's (see `counter_words`), then its slots.

    >>> step_rows([(64, 1, [2, 0])])  # a small kernel: thread 0 runs it whole
    [0, 2, 64, 0, 0, 0, 2, 0]
    """
    rows, counter = [], 2  # words after %bar: the barrier's two, then two per parallel one
    for extent, work, slots in steps:
        if runs_parallel(extent, work):
            least, most = chunk_least(extent, work), chunk_most(extent, work)
            rows += [1, len(slots), extent, least, most, counter, *slots]
            counter += 2
        else:
            rows += [0, len(slots), extent, 0, 0, 0, *slots]
    return rows


def _alone_from(steps: list[tuple[int, int, list[int]]]) -> int:
    """The first step from which on thread 0 runs every kernel alone."""
    alone = len(steps)
    while alone > 0 and not runs_parallel(*steps[alone - 1][:2]):
        alone -= 1
    return alone


def counter_words(steps: list[tuple[int, int, list[int]]]) -> int:
    """Words a program's barrier argument points to: the barrier's count and generation,
    then a claim counter and a finished counter per parallel kernel (all zero between
    runs: see `_step_function`)."""
    return 2 + 2 * sum(runs_parallel(extent, work) for extent, work, _ in steps)


def _step_function(arity: int) -> list[str]:
    """fg_step_{arity}(bufs, fns, j, bar, own, n, last tid, is thread 0, cancel, row, tid): run
    kernel j (of `arity` parameters) as its table row says.

    A parallel kernel's loop runs in chunks each thread claims from a shared counter (the
    row's two counter words after `bar`), sized and claimed as the pool's launches are
    (`claim_loop_ir`, runtime/pool.py), (least, most) iterations each: a thread that
    starts late, or is preempted, takes fewer chunks instead of holding up the others at
    the next barrier. Alone (n = 1) a thread claims from a counter of its own (`own`, so
    that it, too, stops when cancelled) and the shared counters stay untouched. Each
    thread, once it finds nothing left, counts itself out; the last one out zeroes both
    counters for the next run (every thread has stopped claiming by then).

    Any other kernel thread 0 runs whole, unless cancelled (the other threads call it on
    an empty range)."""
    lines = [
        f"define internal void @fg_step_{arity}(ptr %bufs, ptr %fns, i64 %j, ptr %bar, "
        "ptr %own, i64 %n, i64 %last.tid, i1 %is0, ptr %cancel, ptr %row, i64 %tid) nounwind {",
        "entry:",
        f"  %fn.k = add i64 %j, {FNS_HEAD}",
        "  %fn.at = getelementptr inbounds ptr, ptr %fns, i64 %fn.k",
        "  %fn = load ptr, ptr %fn.at",
    ]
    for field, at in (("par", 0), ("extent", 2), ("least", 3), ("most", 4), ("counter", 5)):
        lines.append(f"  %{field}.at = getelementptr inbounds i64, ptr %row, i64 {at}")
        lines.append(f"  %{field} = load i64, ptr %{field}.at")
    for k in range(arity):
        lines += [
            f"  %s{k}.at = getelementptr inbounds i64, ptr %row, i64 {ROW_HEAD + k}",
            f"  %s{k} = load i64, ptr %s{k}.at",
            f"  %a{k}.at = getelementptr inbounds ptr, ptr %bufs, i64 %s{k}",
            f"  %a{k} = load ptr, ptr %a{k}.at",
        ]
    sig = ", ".join(["i64", "i64"] + ["ptr"] * arity)
    # every kernel is passed the cancel word's address after its buffers: one that reads
    # it inside a long iteration takes it (pipeline/llvm.py), the others ignore it
    call = f"call void ({sig}, ptr) %fn(i64 {{}}, i64 {{}}" + "".join(
        f", ptr %a{k}" for k in range(arity)
    )
    call += ", ptr %cancel)"
    return lines + [
        "  %shared = icmp ne i64 %par, 0",
        "  br i1 %shared, label %chunks, label %whole",
        "whole:",
        "  %z = load atomic i64, ptr %cancel monotonic, align 8",
        "  %go = icmp eq i64 %z, 0",
        "  %t = and i1 %is0, %go",
        "  %b = select i1 %t, i64 %extent, i64 0",
        "  " + call.format("0", "%b"),
        "  ret void",
        "chunks:",
        "  %next = getelementptr inbounds i64, ptr %bar, i64 %counter",
        "  %out.at = add i64 %counter, 1",
        "  %out = getelementptr inbounds i64, ptr %bar, i64 %out.at",
        "  %one = icmp eq i64 %n, 1",
        "  store i64 0, ptr %own",
        "  %from = select i1 %one, ptr %own, ptr %next",
        *claim_loop_ir(
            "c.", "%from", "%extent", "%least", "%most", "%n", call, "done", "%cancel", "%tid"
        ),
        "done:",
        "  br i1 %one, label %ran, label %count",
        "count:",
        "  %gone = atomicrmw add ptr %out, i64 1 acq_rel",
        "  %last = icmp eq i64 %gone, %last.tid",
        "  br i1 %last, label %reset, label %ran",
        "reset:",
        "  store atomic i64 0, ptr %next monotonic, align 8",
        "  store atomic i64 0, ptr %out monotonic, align 8",
        "  br label %ran",
        "ran:",
        "  ret void",
        "}",
    ]


SPINS_BEFORE_YIELD = 4000


def _barrier_function(pause: bool) -> list[str]:
    """fg_barrier(bar, last tid, sched_yield): all threads wait here until the last one
    arrives (which resets the count and moves the generation on).

    A waiting thread spins briefly, then gives its core away (sched_yield, whose address
    heads `fns`) so that an overloaded machine still makes progress.
    """
    return [
        "define internal void @fg_barrier(ptr %bar, i64 %last.tid, ptr %yield) nounwind {",
        "entry:",
        "  %gen.ptr = getelementptr inbounds i64, ptr %bar, i64 1",
        "  %g = load atomic i64, ptr %gen.ptr acquire, align 8",
        "  %c = atomicrmw add ptr %bar, i64 1 acq_rel",
        "  %l = icmp eq i64 %c, %last.tid",
        "  br i1 %l, label %rel, label %wait",
        "rel:",
        "  store atomic i64 0, ptr %bar release, align 8",
        "  %g.n = add i64 %g, 1",
        "  store atomic i64 %g.n, ptr %gen.ptr release, align 8",
        "  ret void",
        *_wait_for_generation("", "%entry", "%g", "done", pause),
        "done:",
        "  ret void",
        "}",
    ]


def _barrier_others_leave(nxt: str, pause: bool) -> list[str]:
    """The barrier before the kernels thread 0 runs alone: every thread arrives, only
    thread 0 waits for the others (then goes on to `nxt`), the others return."""
    return [
        "  %g.l = load atomic i64, ptr %gen.ptr acquire, align 8",
        "  %c.l = atomicrmw add ptr %bar, i64 1 acq_rel",
        "  %l.l = icmp eq i64 %c.l, %last.tid",
        "  br i1 %l.l, label %rel.l, label %arrive.l",
        "arrive.l:",
        "  br i1 %is0, label %wait.l, label %end",
        "rel.l:",
        "  store atomic i64 0, ptr %bar release, align 8",
        "  %g.l.n = add i64 %g.l, 1",
        "  store atomic i64 %g.l.n, ptr %gen.ptr release, align 8",
        f"  br i1 %is0, label %{nxt}, label %end",
        *_wait_for_generation(".l", "%arrive.l", "%g.l", nxt, pause),
    ]


def _wait_for_generation(j: str, came_from: str, seen: str, nxt: str, pause: bool) -> list[str]:
    """Blocks wait{j}...: spin (pausing, then yielding the core) until the barrier's
    generation is no longer `seen`, then branch to `nxt`."""
    return [
        f"wait{j}:",
        f"  %i{j} = phi i64 [0, {came_from}], [%i{j}.n, %pause{j}], [%i{j}.n, %cede{j}]",
        f"  %w{j} = load atomic i64, ptr %gen.ptr acquire, align 8",
        f"  %s{j} = icmp eq i64 %w{j}, {seen}",
        f"  br i1 %s{j}, label %spin{j}, label %{nxt}",
        f"spin{j}:",
        f"  %i{j}.n = add i64 %i{j}, 1",
        f"  %long{j} = icmp ugt i64 %i{j}, {SPINS_BEFORE_YIELD}",
        f"  br i1 %long{j}, label %cede{j}, label %pause{j}",
        f"pause{j}:",
        "  call void @llvm.x86.sse2.pause()" if pause else "  fence seq_cst",
        f"  br label %wait{j}",
        f"cede{j}:",
        "  call i32 %yield()",
        f"  br label %wait{j}",
    ]


def compile_program(steps: list[tuple[int, int, list[int]]]) -> CompiledKernel:
    """Compile (or fetch from the caches) the program for these kernels: the code for
    their counts of parameters, which every plan with those counts shares. At O0: it is
    control flow around calls, which LLVM's O3 takes seconds over for a training step's
    ~40 kernels (0.05 s at O0) and makes no faster that matters next to the kernels."""
    text = render_program(steps, "PROGRAM")
    name = "program_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    with templates.fixed():  # (called as itself: never through a generic kernel)
        return compile_kernel(text.replace("@PROGRAM(", f"@{name}("), name, 5, opt=0)
