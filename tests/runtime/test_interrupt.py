"""Ctrl-C during a long native run (runtime/launch.py, runtime/pool.py, runtime/program.py).

A kernel runs in native code, where Python's SIGINT handler cannot run; a long run is
handed to a runner thread while the main thread waits in Python, and a
KeyboardInterrupt there sets the pool's cancel word, which every thread reads before
claiming a chunk. These tests interrupt a computation of many minutes in a child
process, kernel by kernel (a plan's first run) and as a native program (a cached
plan), and check that it stops within seconds and that the same process then computes
correctly.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import fusegrad.runtime.launch as launch_module
from fusegrad.runtime import pool as native
from fusegrad.runtime.compiler import compile_kernel

pytestmark = pytest.mark.skipif(not native.available(), reason="the native pool is Linux-only")

RECORDER = """\
define void @test_interrupt_recorder(i64 %start, i64 %end, ptr %out) nounwind {
entry:
  %empty = icmp sge i64 %start, %end
  br i1 %empty, label %done, label %write
write:
  %at = getelementptr inbounds i64, ptr %out, i64 %start
  store i64 %end, ptr %at
  br label %done
done:
  ret void
}
"""


def test_a_set_cancel_word_stops_the_claim_loop():
    """No chunk is claimed while the word is set; cleared, the same run covers the loop."""
    kernel = compile_kernel(RECORDER, "test_interrupt_recorder", 1)  # held: its code lives
    recorder = kernel.address
    pool = launch_module._Pool()
    try:
        out = np.zeros(4097, dtype=np.int64)
        pool.ensure(1)
        pool.words[native.Layout.CANCEL] = 1
        assert pool.run(recorder, 2, 4096, [out.ctypes.data], 4)
        assert not out.any()
        pool.words[native.Layout.CANCEL] = 0
        assert pool.run(recorder, 2, 4096, [out.ctypes.data], 4)
        start = 0
        while start < 4096:  # the chunks' ends, written at their starts, cover the loop
            assert out[start] > start
            start = int(out[start])
    finally:
        pool.close()


def test_chunks_are_capped_so_a_cancel_takes_effect_soon():
    # a kernel of 2^34 inner iterations over 1024 rows: rows of 2^24, one row a chunk
    assert launch_module.chunk_most(1024, 1 << 34) == 1
    assert launch_module.chunk_most(1 << 20, 1 << 40) == 16
    # never below the least: a row longer than the cap is still one chunk
    assert launch_module.chunk_most(8, 1 << 40) >= launch_module.chunk_least(8, 1 << 40)


CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import fusegrad as fg
    from fusegrad.runtime import launch, pool as native

    from fusegrad.runtime import cpu_backend

    def announced(run, work_at):
        def call(*args):  # tell the parent when the long kernel starts
            if args[work_at] > 1 << 38:
                print("running", flush=True)
            return run(*args)

        return call

    cpu_backend.launch = announced(cpu_backend.launch, 2)  # (kernel, extent, work, ptrs)
    cpu_backend.run_threads = announced(cpu_backend.run_threads, 3)  # (..., args, work)

    def big():
        # 2^19 rows of 2^20 sines summed: about half an hour on two cores, and little memory
        a = fg.tensor(np.linspace(0, 1, 1 << 19, dtype=np.float32))
        b = fg.tensor(np.linspace(0, 1, 1 << 20, dtype=np.float32))
        y = (a[:, None] * b[None, :]).sin().sum(1)
        return y + y.sum()  # several kernels: once its plan is cached, a native program

    for attempt in ("kernel by kernel", "native program"):
        t0 = time.perf_counter()
        try:
            big().numpy()
            print("not interrupted", flush=True)
        except KeyboardInterrupt:
            print("interrupted", attempt, flush=True)
        assert launch._pool.words[native.Layout.CANCEL] == 0
        # the engine is usable: a small computation of several kernels and one of one
        x = fg.tensor([1.0, 2.0, 3.0])
        assert abs((x - x.sum()).softmax(0).sum().item() - 1.0) < 1e-6
        assert (x * 2).tolist() == [2.0, 4.0, 6.0]
        print("computes", flush=True)
    from fusegrad.runtime.engine import engine
    plan = [p for p in engine.plans.values() if p.program is not None and p.work > 1 << 38][0]
    ptrs, view, args, kept = plan.ready[-1]
    counters = view[plan.nleaves + plan.slots :]
    assert counters[0] == 0 and not counters[2:].any(), counters  # all back at zero
    print("done", flush=True)
    """
)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_ctrl_c_stops_a_long_kernel_and_the_engine_goes_on(threads):
    proc, next_line = _child(CHILD, threads)
    _interrupt_both_ways(proc, next_line, settle=1.0, within=3.0)


SHORT_BUT_SLOW = textwrap.dedent(
    """
    import numpy as np
    import fusegrad as fg
    from fusegrad.runtime import cpu_backend, launch

    def announced(run, work_at):
        def call(*args):  # tell the parent when the slow kernel starts
            if 1 << 26 <= args[work_at] < launch.LONG_WORK:
                print("running", flush=True)
            return run(*args)

        return call

    cpu_backend.launch = announced(cpu_backend.launch, 2)
    cpu_backend.run_threads = announced(cpu_backend.run_threads, 3)

    def slow():
        # 2^27 inner iterations (under LONG_WORK), each 24 transcendental functions: tens
        # of seconds in one kernel
        a = fg.tensor(np.linspace(0, 1, 1 << 7, dtype=np.float32))
        b = fg.tensor(np.linspace(0, 1, 1 << 20, dtype=np.float32))
        x = a[:, None] * b[None, :]
        for _ in range(12):
            x = (x.sin() + 1.0).log()
        return x.sum(1)

    for attempt in ("kernel by kernel", "native program"):
        try:
            slow().numpy()
            print("not interrupted", flush=True)
        except KeyboardInterrupt:
            print("interrupted", attempt, flush=True)
        x = fg.tensor([1.0, 2.0, 3.0])
        assert abs((x - x.sum()).softmax(0).sum().item() - 1.0) < 1e-6
        assert (x * 2).tolist() == [2.0, 4.0, 6.0]
        print("computes", flush=True)
    print("done", flush=True)
    """
)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_ctrl_c_stops_a_slow_kernel_of_few_iterations(threads):
    """A kernel under LONG_WORK inner iterations whose iterations are costly runs on the
    main thread, watched: Ctrl-C stops it within a second or so (launch.py's _CtrlC)."""
    proc, next_line = _child(SHORT_BUT_SLOW, threads)
    _interrupt_both_ways(proc, next_line, settle=0.5, within=2.0)


MANY_MEDIUM = textwrap.dedent(
    """
    import numpy as np
    import fusegrad as fg
    from fusegrad.runtime import cpu_backend, launch

    def announced(run):
        def call(program, threads, args, work=0):  # the cached plan's program starts
            if 1 << 24 <= work < launch.LONG_WORK:
                print("running", flush=True)
            return run(program, threads, args, work)

        return call

    cpu_backend.run_threads = announced(cpu_backend.run_threads)

    def many():
        # 40 kernels of 2^19 inner iterations (each under WATCHED_WORK), 144 transcendental
        # functions each: seconds in all as one native program, under LONG_WORK (48 took
        # 0.8 s on an AMD Zen 5, where the interrupt, 0.5 s in, could come too late)
        y = fg.tensor(np.linspace(0, 1, 1 << 9, dtype=np.float32))
        b = fg.tensor(np.linspace(0, 1, 1 << 10, dtype=np.float32))
        for _ in range(40):
            x = y[:, None] * b[None, :]
            for _ in range(72):
                x = (x.sin() + 1.5).log()  # (never log 0: no NaN to compare)
            y = x.sum(1) * 1e-3 + y
        return y

    want = many().numpy()  # the first run, kernel by kernel, caches the plan
    try:
        many().numpy()
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    assert np.array_equal(many().numpy(), want)  # the same program, whole, once more
    print("computes", flush=True)
    """
)


def test_ctrl_c_stops_a_program_of_many_medium_kernels():
    """A cached plan of many kernels, each short, runs as one native program for seconds:
    Ctrl-C stops it between kernels (or in a kernel's claim loop) within about a second."""
    proc, next_line = _child(MANY_MEDIUM, "1")
    try:
        assert next_line(180) == "running"
        time.sleep(0.5)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        line = next_line(30)
        waited = time.perf_counter() - sent
        assert line == "interrupted", line
        assert waited < 1.5, f"KeyboardInterrupt came {waited:.1f} s after Ctrl-C"
        assert next_line(120) == "running"  # the check run
        assert next_line(120) == "computes"
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _child(script: str, threads: str):
    """`script` running in a fresh interpreter with FUSEGRAD_THREADS=`threads`, and a
    function giving its next line of output (or saying none came within the timeout)."""
    env = dict(os.environ, FUSEGRAD_THREADS=threads)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(x.strip()) for x in proc.stdout], daemon=True
    ).start()

    def next_line(timeout: float) -> str:
        try:
            return lines.get(timeout=timeout)
        except queue.Empty:
            return f"nothing within {timeout} s"

    return proc, next_line


def _interrupt_both_ways(proc, next_line, settle: float, within: float) -> None:
    """Ctrl-C the child's slow kernel, run kernel by kernel and then as a native program:
    each time KeyboardInterrupt comes `within` seconds and the engine computes after."""
    try:
        for attempt in ("kernel by kernel", "native program"):
            assert next_line(120) == "running"
            time.sleep(settle)
            sent = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            line = next_line(10)
            waited = time.perf_counter() - sent
            assert line == f"interrupted {attempt}", line
            assert waited < within, f"{attempt}: KeyboardInterrupt came {waited:.1f} s after Ctrl-C"
            assert next_line(60) == "computes"
        assert next_line(60) == "done"
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
