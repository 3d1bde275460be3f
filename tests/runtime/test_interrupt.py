"""Ctrl-C during a long native run (runtime/launch.py, runtime/pool.py, runtime/program.py).

A kernel runs in native code, where Python's SIGINT handler cannot run; a long run is
handed to a runner thread while the main thread waits in Python, and a
KeyboardInterrupt there sets the pool's cancel word, which every thread reads before
claiming a chunk. These tests interrupt a computation of many minutes in a child
process, kernel by kernel (one kernel's plan) and as a native program (a plan of
several kernels, from its first run), and check that it stops within seconds and that
the same process then computes correctly.
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

import fusegrad as fg
import fusegrad.runtime.launch as launch_module
from fusegrad.pipeline.compiler import compile_kernel
from fusegrad.pipeline.llvm import reads_cancel_word
from fusegrad.runtime import pool as native
from fusegrad.runtime.engine import engine

pytestmark = pytest.mark.skipif(not native.available(), reason="the native pool is Linux-only")

# Python's own Ctrl-C handler, as an interpreter started from a terminal has it: a process
# started in the background of a non-interactive shell (`pytest ... &`) inherits SIGINT
# ignored, and Python then installs no handler, so there is no Ctrl-C to test
_WITH_CTRL_C = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"


@pytest.fixture(autouse=True)
def ctrl_c_handler():
    """This process with Python's Ctrl-C handler for each test (see `_WITH_CTRL_C`)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


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


# the children's first lines: they say "running" when their long kernel starts
ANNOUNCE = textwrap.dedent(
    """
    from fusegrad.runtime import cpu_backend

    def announced(run, work_at):
        def call(*args):  # tell the parent when the long kernel starts
            if args[work_at] > 1 << 38:
                print("running", flush=True)
            return run(*args)

        return call

    cpu_backend.launch = announced(cpu_backend.launch, 2)  # (kernel, extent, work, ptrs)
    cpu_backend.run_threads = announced(cpu_backend.run_threads, 3)  # (..., args, work)
    """
)


CHILD = ANNOUNCE + textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import fusegrad as fg
    from fusegrad.runtime import launch, pool as native


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
    counters = view[len(view) - plan.counters :]
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

    armed = False  # (the first run is not announced, whichever way it runs)

    def announced(run):
        def call(program, threads, args, work=0):  # the cached plan's program starts
            if armed and 1 << 24 <= work < launch.LONG_WORK:
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

    want = many().numpy()  # the first run caches the plan
    armed = True
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
        _ctrl_c(proc, next_line, 0.5, "interrupted", 1.5, 30)
        assert next_line(120) == "running"  # the check run
        assert next_line(120) == "computes"
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_kernel_with_long_rows_reads_the_cancel_word_as_it_goes():
    """A max over 2^22 values has no parallel loop: the claim loop cannot stop it, so it
    takes the cancel word's address and returns at once when the word is set (its output
    untouched), computing the max when it is not; a short row reads no word."""
    values = np.random.default_rng(0).random(1 << 22, dtype=np.float32)
    engine.forget_plans(lambda key: True)  # (other tests' maxima: not these)
    assert fg.tensor(values).max().item() == values.max()
    assert fg.tensor(values[:1024]).max().item() == values[:1024].max()
    kernels = {
        s.record.compiled.symbol: s.record.compiled
        for plan in engine.plans.values()
        for s in plan.steps
        if s.record.compiled.symbol.startswith("r_max_scalar")
    }
    polls = [k for k in kernels.values() if reads_cancel_word(k.source)]
    assert len(polls) == 1 and len(kernels) == 2, list(kernels)
    kernel = polls[0]
    assert kernel.nparams == 3  # out, in, the cancel word
    out, word = np.full(1, -7.0, np.float32), np.ones(1, np.int64)
    kernel.fn(0, 1, out.ctypes.data, values.ctypes.data, word.ctypes.data)
    assert out[0] == -7.0  # cancelled before its first block
    word[0] = 0
    kernel.fn(0, 1, out.ctypes.data, values.ctypes.data, word.ctypes.data)
    assert out[0] == values.max()


LONG_ROWS = ANNOUNCE + textwrap.dedent(
    """
    import fusegrad as fg
    from fusegrad.runtime import launch, pool as native

    # 10^12 random numbers: a sum of 125 x 4 partials of 2 x 10^9 each, kernel by kernel
    # and then as a native program; a max, one kernel with no parallel loop (hours)
    for attempt in ("sum", "sum program", "max"):
        try:
            x = fg.randn(10**6, 10**6)
            (x.max() if attempt == "max" else x.sum()).item()
            print("not interrupted", flush=True)
        except KeyboardInterrupt:
            print("interrupted", attempt, flush=True)
        assert launch._pool.words is None or launch._pool.words[native.Layout.CANCEL] == 0
        y = fg.tensor([1.0, 2.0, 3.0])
        assert abs((y - y.sum()).softmax(0).sum().item() - 1.0) < 1e-6
        assert fg.ones(1 << 22).sum().item() == 1 << 22
        print("computes", flush=True)
    print("done", flush=True)
    """
)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_ctrl_c_stops_a_kernel_whose_rows_are_long(threads):
    """Issue 55.4: `fg.randn(10**6, 10**6).sum()` ran on for 24 s after Ctrl-C (its
    partials, one per chunk at least, are 8 x 10^9 numbers each), and the max never
    stopped: such kernels read the cancel word inside their rows (pipeline/llvm.py)."""
    proc, next_line = _child(LONG_ROWS, threads)
    _interrupt_each(proc, next_line, ("sum", "sum program", "max"), 0.2, 1.0)


SLOW_COMPILE = textwrap.dedent(
    """
    import threading
    import numpy as np
    import fusegrad as fg
    from fusegrad.pipeline import compiler

    emit, said = compiler._emit_here, []

    def announced(source, opt):  # the chain's kernel, on the main thread's compile thread
        here = threading.current_thread().name == "fusegrad-compile"
        # (its code has no name in it, `compiler.code_of`, but is 30 times the other kernel's)
        if len(source) > 10_000 and here and not said:
            print("compiling", flush=True)
            said.append(source)
        return emit(source, opt)

    compiler._emit_here = announced

    def chain(n):
        # one kernel of 2n transcendental functions: LLVM's O3 takes seconds over 320
        y = fg.tensor(np.linspace(0.1, 0.9, 1024, dtype=np.float32))
        for _ in range(n):
            y = (y.sin() + 1.5).log()
        return y

    x = fg.tensor([1.0, 2.0, 3.0])
    assert (x * 2 + 1).tolist() == [3.0, 5.0, 7.0]  # compiled before the long compile
    try:
        chain(160).numpy()
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    assert (x * 2 + 1).tolist() == [3.0, 5.0, 7.0]
    print("computes", flush=True)
    """
)


def test_ctrl_c_stops_a_long_compile_of_one_kernel(tmp_path):
    """Issue 55.4: one large kernel compiled in this process (no forked compilers for a
    single kernel) held Ctrl-C for as long as LLVM took (seconds): the main thread now
    waits in Python while LLVM runs on a thread of its own (pipeline/compiler.py's
    `_emit`), and computes right after. (A new kernel's compile would wait for LLVM to
    finish the chain: the child is not waited for.)"""
    proc, next_line = _child(SLOW_COMPILE, "2", cache=str(tmp_path))
    try:
        assert next_line(60) == "compiling"
        _ctrl_c(proc, next_line, 0.2, "interrupted", 0.5, 10)
        assert next_line(10) == "computes"
    finally:
        proc.kill()
        proc.wait()


def _ctrl_c(proc, next_line, settle: float, want: str, within: float, patience: float) -> None:
    """Ctrl-C to the child `settle` seconds from now: its next line (within `patience`
    seconds) must be `want`, and come within `within` seconds of the signal."""
    time.sleep(settle)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    line = next_line(patience)
    waited = time.perf_counter() - sent
    assert line == want, line
    assert waited < within, f"{want}: KeyboardInterrupt came {waited:.1f} s after Ctrl-C"


def _child(script: str, threads: str, cache: str | None = None):
    """`script` running in a fresh interpreter with FUSEGRAD_THREADS=`threads`, and a
    function giving its next line of output (or saying none came within the timeout)."""
    env = dict(os.environ, FUSEGRAD_THREADS=threads)
    if cache is not None:  # (a compile the test needs to happen)
        env["FUSEGRAD_CACHE"] = cache
    proc = subprocess.Popen(
        [sys.executable, "-c", _WITH_CTRL_C + script],
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
    """Ctrl-C the child's slow kernel, run kernel by kernel and then as a native program."""
    _interrupt_each(proc, next_line, ("kernel by kernel", "native program"), settle, within)


def _interrupt_each(proc, next_line, attempts, settle: float, within: float) -> None:
    """Ctrl-C each of the child's `attempts` (it says "running" as each starts): each time
    KeyboardInterrupt comes within `within` seconds, and the engine computes after."""
    try:
        for attempt in attempts:
            assert next_line(120) == "running", attempt
            _ctrl_c(proc, next_line, settle, f"interrupted {attempt}", within, 10)
            assert next_line(60) == "computes"
        assert next_line(60) == "done"
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_ctrl_c_raised_already_that_cancels_a_later_run_is_not_raised_twice(monkeypatch):
    """The byte Python's C-level handler writes reaches the reading thread late (starved on
    a loaded machine) while a later watched run is on: that run is cancelled, but no signal
    is pending (Python raised this Ctrl-C's KeyboardInterrupt already). No second
    KeyboardInterrupt (it would come outside the user's `except` and end the program): the
    run is done again, whole, with the right values."""
    c = launch_module._ctrl_c
    with c:
        with c.lock:  # what the reading thread does with the late byte
            c.hit, c.cancel[0] = True, 1
    assert c.cancel[0] == 0 and c.take_stale() and not c.take_stale()

    real_run, cancelled = launch_module._pool.run, []

    def cancelled_run(*args, **kw):  # the run stops at once, its outputs incomplete
        if not cancelled and c.running:
            cancelled.append(True)
            with c.lock:
                c.hit = True
            return True
        return real_run(*args, **kw)

    monkeypatch.setattr(launch_module._pool, "run", cancelled_run)
    values = np.random.default_rng(5).random((1 << 21) + 3, dtype=np.float32)
    got = (fg.tensor(values) * 2).sum().item()  # a watched run (2^21 values, main thread)
    assert cancelled, "the run was not a watched one"
    np.testing.assert_allclose(got, 2 * values.astype(np.float64).sum(), rtol=1e-5)
