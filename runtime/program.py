"""A cached schedule as one native call per thread.

Launching kernel after kernel from Python costs tens of microseconds each
(waking the worker threads, ctypes), so a training step with 50 kernels would
spend milliseconds in Python. Once a schedule is cached, its kernels are
strung together in one generated function that every thread calls once:

    void program(i64 tid, i64 nthreads, ptr buffers, ptr kernels, ptr barrier, ptr cancel)
      for each kernel: claim chunks of its parallel loop until none is left;
                       wait at the barrier

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

from .compiler import CompiledKernel, compile_kernel
from .launch import chunk_least, chunk_most, runs_parallel
from .pool import claim_loop_ir


def render_program(steps: list[tuple[int, int, list[int]]], name: str) -> str:
    """LLVM IR of a program over kernels given as (extent, work, buffer slots) each.

    Slot 0 of each kernel is its output; the slots index the `buffers` array.
    """
    pause = "x86_64" in llvm.get_process_triple()
    lines = [
        f"define void @{name}(i64 %tid, i64 %n, ptr %bufs, ptr %fns, ptr %bar, ptr %cancel) "
        "nounwind {",
        "entry:",
        "  %gen.ptr = getelementptr inbounds i64, ptr %bar, i64 1",
        "  %last.tid = sub i64 %n, 1",
        "  %is0 = icmp eq i64 %tid, 0",
        "  %own = alloca i64",  # the chunk counter of a thread that runs the program alone
        "  br label %k0",
    ]
    parallel = [runs_parallel(extent, work) for extent, work, _ in steps]
    # from step `alone` on, thread 0 runs every kernel by itself: the other threads leave
    # once they have arrived at the barrier before it, and no barrier follows it (the
    # caller joins the threads), so they never wait for work they take no part in
    alone = len(steps)
    while alone > 0 and not parallel[alone - 1]:
        alone -= 1
    counter = 2  # words after %bar: the barrier's two, then two per parallel kernel
    for j, (extent, work, slots) in enumerate(steps):
        lines.append(f"k{j}:")
        args = []
        for s, slot in enumerate(slots):
            lines.append(f"  %p{j}.{s}.at = getelementptr inbounds ptr, ptr %bufs, i64 {slot}")
            lines.append(f"  %p{j}.{s} = load ptr, ptr %p{j}.{s}.at")
            args.append(f"ptr %p{j}.{s}")
        lines.append(f"  %f{j}.at = getelementptr inbounds ptr, ptr %fns, i64 {j}")
        lines.append(f"  %f{j} = load ptr, ptr %f{j}.at")
        sig = ", ".join(["i64", "i64"] + ["ptr"] * len(slots))
        if parallel[j]:  # the threads claim chunks of its loop
            least, most = chunk_least(extent, work), chunk_most(extent, work)
            lines += _claim_chunks(j, extent, (least, most), counter, sig, args)
            counter += 2
        else:  # thread 0 runs it whole, unless cancelled
            lines += [
                f"  %z{j} = load atomic i64, ptr %cancel monotonic, align 8",
                f"  %go{j} = icmp eq i64 %z{j}, 0",
                f"  %t{j} = and i1 %is0, %go{j}",
                f"  %a{j} = add i64 0, 0",
                f"  %b{j} = select i1 %t{j}, i64 {extent}, i64 0",
            ]
            call_args = ", ".join([f"i64 %a{j}", f"i64 %b{j}"] + args)
            lines.append(f"  call void ({sig}) %f{j}({call_args})")
        nxt = f"k{j + 1}" if j + 1 < len(steps) else "end"
        if j + 1 < alone:
            lines += _barrier(j, nxt, pause, len(steps))
        elif j + 1 == alone and j + 1 < len(steps):
            lines += _barrier(j, nxt, pause, len(steps), others_leave=True)
        else:
            lines.append(f"  br label %{nxt}")
    lines += ["end:", "  ret void", "}"]
    head = "declare void @llvm.x86.sse2.pause()\n" if pause else ""
    return head + "\n".join(lines) + "\n"


def counter_words(steps: list[tuple[int, int, list[int]]]) -> int:
    """Words a program's barrier argument points to: the barrier's count and generation,
    then a claim counter and a finished counter per parallel kernel (all zero between
    runs: see `_claim_chunks`)."""
    return 2 + 2 * sum(runs_parallel(extent, work) for extent, work, _ in steps)


def _claim_chunks(
    j: int, extent: int, sizes: tuple[int, int], counter: int, sig: str, args: list[str]
) -> list[str]:
    """Kernel j run in chunks each thread claims from a shared counter (`%bar` + counter),
    sized and claimed as the pool's launches are (runtime/pool.py), `sizes` = (least,
    most) iterations each: a thread that starts late, or is preempted, takes fewer chunks
    instead of holding up the others at the next barrier. Alone (n = 1) a thread claims
    from a counter of its own (so that it, too, stops when cancelled) and the shared
    counters stay untouched. Each thread, once it finds nothing left, counts itself out;
    the last one out zeroes both counters for the next run (every thread has stopped
    claiming by then)."""
    call = f"call void ({sig}) %f{j}"
    rest = ", ".join(args)
    least, most = sizes
    return [
        f"  %q{j}.one = icmp eq i64 %n, 1",
        f"  br i1 %q{j}.one, label %k{j}.all, label %k{j}.chunks",
        f"k{j}.all:",
        "  store i64 0, ptr %own",
        *claim_loop_ir(
            f"o{j}.",
            "%own",
            extent,
            least,
            most,
            "1",
            call + "(i64 {}, i64 {}, " + rest + ")",
            f"k{j}.ran",
            "%cancel",
        ),
        f"k{j}.chunks:",
        f"  %q{j}.next = getelementptr inbounds i64, ptr %bar, i64 {counter}",
        f"  %q{j}.out = getelementptr inbounds i64, ptr %bar, i64 {counter + 1}",
        *claim_loop_ir(
            f"q{j}.",
            f"%q{j}.next",
            extent,
            least,
            most,
            "%n",
            call + "(i64 {}, i64 {}, " + rest + ")",
            f"k{j}.out",
            "%cancel",
        ),
        f"k{j}.out:",
        f"  %q{j}.gone = atomicrmw add ptr %q{j}.out, i64 1 acq_rel",
        f"  %q{j}.last = icmp eq i64 %q{j}.gone, %last.tid",
        f"  br i1 %q{j}.last, label %k{j}.reset, label %k{j}.ran",
        f"k{j}.reset:",
        f"  store atomic i64 0, ptr %q{j}.next monotonic, align 8",
        f"  store atomic i64 0, ptr %q{j}.out monotonic, align 8",
        f"  br label %k{j}.ran",
        f"k{j}.ran:",
    ]


SPINS_BEFORE_YIELD = 4000


def _barrier(j: int, nxt: str, pause: bool, yield_slot: int, others_leave=False) -> list[str]:
    """All threads wait here until the last one arrives (which resets the count).

    A waiting thread spins briefly, then gives its core away (sched_yield, whose address
    sits after the kernels' in `fns`) so that an overloaded machine still makes progress.
    With `others_leave`, only thread 0 waits: the others arrive and return.
    """
    after = f"%{nxt}"
    if others_leave:
        after = f"%k{j}.after"
    lines = [
        f"  %g{j} = load atomic i64, ptr %gen.ptr acquire, align 8",
        f"  %c{j} = atomicrmw add ptr %bar, i64 1 acq_rel",
        f"  %l{j} = icmp eq i64 %c{j}, %last.tid",
        f"  br i1 %l{j}, label %rel{j}, label %k{j}.arrive",
        f"k{j}.arrive:",
        f"  br i1 %is0, label %wait{j}, label %end" if others_leave else f"  br label %wait{j}",
        f"rel{j}:",
        "  store atomic i64 0, ptr %bar release, align 8",
        f"  %g{j}.n = add i64 %g{j}, 1",
        f"  store atomic i64 %g{j}.n, ptr %gen.ptr release, align 8",
        f"  br label {after}",
    ]
    if others_leave:
        lines += [f"k{j}.after:", f"  br i1 %is0, label %{nxt}, label %end"]
    return lines + [
        f"wait{j}:",
        f"  %i{j} = phi i64 [0, %k{j}.arrive], [%i{j}.n, %pause{j}], [%i{j}.n, %yield{j}]",
        f"  %w{j} = load atomic i64, ptr %gen.ptr acquire, align 8",
        f"  %s{j} = icmp eq i64 %w{j}, %g{j}",
        f"  br i1 %s{j}, label %spin{j}, label %{nxt}",
        f"spin{j}:",
        f"  %i{j}.n = add i64 %i{j}, 1",
        f"  %long{j} = icmp ugt i64 %i{j}, {SPINS_BEFORE_YIELD}",
        f"  br i1 %long{j}, label %yield{j}, label %pause{j}",
        f"pause{j}:",
        "  call void @llvm.x86.sse2.pause()" if pause else "  fence seq_cst",
        f"  br label %wait{j}",
        f"yield{j}:",
        f"  %y{j}.at = getelementptr inbounds ptr, ptr %fns, i64 {yield_slot}",
        f"  %y{j} = load ptr, ptr %y{j}.at",
        f"  call i32 %y{j}()",
        f"  br label %wait{j}",
    ]


def compile_program(steps: list[tuple[int, int, list[int]]]) -> CompiledKernel:
    """Compile (or fetch from the caches) the program for these kernels. At O0: it is
    control flow around calls, which LLVM's O3 takes seconds over for a training step's
    ~40 kernels (0.05 s at O0) and makes no faster that matters next to the kernels."""
    text = render_program(steps, "PROGRAM")
    name = "program_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return compile_kernel(text.replace("@PROGRAM(", f"@{name}("), name, 4, opt=0)
