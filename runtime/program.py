"""A cached schedule as one native call per thread.

Launching kernel after kernel from Python costs tens of microseconds each
(waking the worker threads, ctypes), so a training step with 50 kernels would
spend milliseconds in Python. Once a schedule is cached, its kernels are
strung together in one generated function that every thread calls once:

    void program(i64 tid, i64 nthreads, ptr buffers, ptr kernels, ptr barrier)
      for each kernel: run my slice of its parallel loop; wait at the barrier

Small kernels run on thread 0 alone (the others go straight to the barrier).
Once only such kernels remain (a full sum's last, tiny step), the other threads
arrive at the barrier before them and return; no barrier follows the last kernel
(the caller joins the threads), so no thread waits for work it takes no part in.
The barrier is a counter and a generation number updated with atomics. So the
Python cost of a cached step no longer grows with the number of kernels.
"""

from __future__ import annotations

import hashlib

import llvmlite.binding as llvm

from .compiler import CompiledKernel, compile_kernel
from .launch import runs_parallel


def render_program(steps: list[tuple[int, int, list[int]]], name: str) -> str:
    """LLVM IR of a program over kernels given as (extent, work, buffer slots) each.

    Slot 0 of each kernel is its output; the slots index the `buffers` array.
    """
    pause = "x86_64" in llvm.get_process_triple()
    lines = [
        f"define void @{name}(i64 %tid, i64 %n, ptr %bufs, ptr %fns, ptr %bar) nounwind {{",
        "entry:",
        "  %gen.ptr = getelementptr inbounds i64, ptr %bar, i64 1",
        "  %last.tid = sub i64 %n, 1",
        "  %is0 = icmp eq i64 %tid, 0",
        "  br label %k0",
    ]
    parallel = [runs_parallel(extent, work) for extent, work, _ in steps]
    # from step `alone` on, thread 0 runs every kernel by itself: the other threads leave
    # once they have arrived at the barrier before it, and no barrier follows it (the
    # caller joins the threads), so they never wait for work they take no part in
    alone = len(steps)
    while alone > 0 and not parallel[alone - 1]:
        alone -= 1
    for j, (extent, _, slots) in enumerate(steps):
        lines.append(f"k{j}:")
        args = []
        for s, slot in enumerate(slots):
            lines.append(f"  %p{j}.{s}.at = getelementptr inbounds ptr, ptr %bufs, i64 {slot}")
            lines.append(f"  %p{j}.{s} = load ptr, ptr %p{j}.{s}.at")
            args.append(f"ptr %p{j}.{s}")
        lines.append(f"  %f{j}.at = getelementptr inbounds ptr, ptr %fns, i64 {j}")
        lines.append(f"  %f{j} = load ptr, ptr %f{j}.at")
        if parallel[j]:  # every thread takes an even slice
            lines += [
                f"  %a{j}.m = mul i64 %tid, {extent}",
                f"  %a{j} = sdiv i64 %a{j}.m, %n",
                f"  %b{j}.t = add i64 %tid, 1",
                f"  %b{j}.m = mul i64 %b{j}.t, {extent}",
                f"  %b{j} = sdiv i64 %b{j}.m, %n",
            ]
        else:  # thread 0 runs it whole
            lines += [f"  %a{j} = add i64 0, 0", f"  %b{j} = select i1 %is0, i64 {extent}, i64 0"]
        call_args = ", ".join([f"i64 %a{j}", f"i64 %b{j}"] + args)
        sig = ", ".join(["i64", "i64"] + ["ptr"] * len(slots))
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
    """Compile (or fetch from the caches) the program for these kernels."""
    text = render_program(steps, "PROGRAM")
    name = "program_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return compile_kernel(text.replace("@PROGRAM(", f"@{name}("), name, 3)
