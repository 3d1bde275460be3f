"""The native worker pool (runtime/pool.py): the chunks its threads claim, its futex
sleep and wake, pre-waking, and the jobs it refuses.

A recorder function compiled for the test stands in for a kernel: each call
writes its chunk's end at its start (or, called as a program, the thread count
at its thread id), so the test reads back exactly which chunks ran.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad.runtime.launch as launch_module
from fusegrad.pipeline.compiler import compile_kernel
from fusegrad.runtime import pool as native

pytestmark = pytest.mark.skipif(not native.available(), reason="the native pool is Linux-only")

RECORDER = """\
define void @test_pool_recorder(i64 %start, i64 %end, ptr %out) nounwind {
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


@pytest.fixture(scope="module")
def recorder():
    kernel = compile_kernel(RECORDER, "test_pool_recorder", 1)
    yield kernel.address  # held meanwhile: its machine code lives as long as the kernel


# as RECORDER, and at out[4097 + start] the chunk's place in the order of the claims (a
# counter at out[2 * 4097], bumped atomically by each call): for loops of 4096 at most
ORDERED_RECORDER = RECORDER.replace("@test_pool_recorder", "@test_pool_ordered").replace(
    "  store i64 %end, ptr %at\n",
    "  store i64 %end, ptr %at\n"
    "  %count = getelementptr inbounds i64, ptr %out, i64 8194\n"
    "  %k = atomicrmw add ptr %count, i64 1 seq_cst\n"
    "  %place = add i64 %start, 4097\n"
    "  %at2 = getelementptr inbounds i64, ptr %out, i64 %place\n"
    "  store i64 %k, ptr %at2\n",
)


@pytest.fixture(scope="module")
def ordered_recorder():
    kernel = compile_kernel(ORDERED_RECORDER, "test_pool_ordered", 1)
    yield kernel.address


@pytest.fixture
def new_pool():
    """A pool of the test's own, closed after it (its workers return and end)."""
    pools = []

    def make():
        pools.append(launch_module._Pool())
        return pools[-1]

    yield make
    for pool in pools:
        workers = list(pool.workers)
        pool.close()
        assert all(not t.is_alive() for t in workers)


def slices_run(out: np.ndarray, extent: int) -> list[tuple[int, int]]:
    """The (start, end) pairs the recorder wrote, following each end to the next start:
    they must cover range(extent), each element once."""
    got, start = [], 0
    while start < extent:
        end = int(out[start])
        assert end > start, (start, out[: extent + 1])
        got.append((start, end))
        start = end
    return got


@pytest.fixture(scope="module")
def shared_pool():
    pool = launch_module._Pool()
    yield pool
    pool.close()


@settings(max_examples=60, deadline=None)
@given(extent=st.integers(2, 5000), threads=st.integers(2, 4), least=st.integers(1, 300))
def test_the_chunks_cover_the_loop_once(recorder, shared_pool, extent, threads, least):
    out = np.full(extent + 1, -1, dtype=np.int64)
    threads = min(threads, extent)
    assert shared_pool.run(recorder, threads, extent, [out.ctypes.data], least)
    assert slices_run(out, extent) == chunks(extent, threads, least)
    assert (out[extent:] == -1).all()


def chunks(extent: int, threads: int, least: int = 1) -> list[tuple[int, int]]:
    """The chunks the pool's threads claim, whichever claims which: one size, about
    CHUNKS_PER_THREAD a thread but at least `least` iterations, the last cut at the
    loop's end."""
    size = max(1, least, extent // (threads * native.CHUNKS_PER_THREAD))
    return [(s, min(s + size, extent)) for s in range(0, extent, size)]


def test_two_threads_claim_from_both_ends(ordered_recorder, shared_pool):
    """Thread 0 claims chunks from the loop's start onwards, thread 1 from its end
    backwards: in the order they were claimed, the chunks below where they met run
    upwards and those above it downwards; the chunks are the same in every run,
    wherever the threads met; in some of the runs thread 1 takes part (its worker was
    awake in time: woken ahead of each run, and runs are made until it took part, or
    for a few seconds, on a machine too busy to wake it at once)."""
    from_the_end, deadline = 0, time.monotonic() + 10
    for k in range(2000):
        if k >= 20 and (from_the_end or time.monotonic() > deadline):
            break
        out = np.full(2 * 4097 + 1, -1, dtype=np.int64)
        shared_pool.prewake(2)
        assert shared_pool.run(ordered_recorder, 2, 4096, [out.ctypes.data], 1)
        got = slices_run(out, 4096)
        assert got == chunks(4096, 2)
        order = [int(out[4097 + s]) for s, _ in got]  # when each chunk was claimed
        meet = order.index(max(order))  # the chunk claimed last lies where they met
        assert order[:meet] == sorted(order[:meet])
        assert order[meet:] == sorted(order[meet:], reverse=True)
        from_the_end += meet < len(got) - 1
    assert from_the_end > 0


def test_a_plan_computes_the_same_bits_every_run_on_two_threads():
    """The chunks do not depend on where the threads met, so neither do the tiles nor the
    order of any sum: a parallel product's and row sum's values are the same bits run
    after run (a near-cancelling float32 dot drew a different rounding when the chunks
    followed the threads' timing)."""
    import fusegrad as fg

    rng = np.random.default_rng(5)
    a = fg.tensor(rng.standard_normal((520, 256)).astype(np.float32))
    b = fg.tensor(rng.standard_normal((256, 264)).astype(np.float32))
    with fg.config.override(threads=2):
        runs = {(((a @ b) * 0.5).sum(1) - (a * a).sum(1)).numpy().tobytes() for _ in range(30)}
    assert len(runs) == 1


def test_a_program_is_called_with_its_thread_id_and_count(recorder, new_pool):
    pool = new_pool()
    out = np.full(8, -1, dtype=np.int64)
    assert pool.run(recorder, 3, -1, [out.ctypes.data])  # fn(tid, 3, out) on each thread
    assert out[:3].tolist() == [3, 3, 3] and (out[3:] == -1).all()


def test_a_job_posted_before_a_new_worker_got_going_still_runs(recorder, new_pool):
    """The first run of a fresh pool starts its workers and posts at once: a worker that
    starts after the post must still take the job (or the caller would wait forever)."""
    for _ in range(20):
        pool = new_pool()
        out = np.full(101, -1, dtype=np.int64)
        assert pool.run(recorder, 2, 100, [out.ctypes.data])
        assert slices_run(out, 100) == chunks(100, 2)


def test_sleeping_workers_wake_for_a_job_and_after_a_prewake(recorder, new_pool):
    pool = new_pool()
    out = np.full(65, -1, dtype=np.int64)
    assert pool.run(recorder, 2, 64, [out.ctypes.data])  # one worker
    sleeping = native.Layout.SLOTS + native.Layout.SLEEPING

    def wait_until(asleep: bool, prewake: bool = False) -> bool:
        deadline = time.monotonic() + 5
        while bool(pool.words[sleeping]) != asleep and time.monotonic() < deadline:
            if prewake:  # (again: a woken worker spins, then sleeps again, and on a busy
                pool.prewake(2)  # machine this thread may not run at all in that window)
            time.sleep(0)
        return bool(pool.words[sleeping]) == asleep

    for rounds in range(3):
        assert wait_until(True), "the worker never went to sleep after its spin"
        if rounds == 1:
            assert wait_until(False, prewake=True), "a pre-wake left the worker asleep"
        out[:] = -1
        assert pool.run(recorder, 2, 64, [out.ctypes.data])
        assert slices_run(out, 64) == chunks(64, 2)


def test_many_runs_back_to_back_each_run_every_slice(recorder, new_pool):
    pool = new_pool()
    out = np.full(1001, -1, dtype=np.int64)
    for k in range(2000):
        extent = 2 + k % 999
        threads = 2 + k % 2
        out[: extent + 1] = -1
        assert pool.run(recorder, threads, extent, [out.ctypes.data])
        assert slices_run(out, extent) == chunks(extent, threads)


def test_a_kernel_with_more_arguments_than_the_pool_passes_is_refused(recorder):
    """Refused runs run on the calling thread (`launch` calls the kernel itself)."""
    pool = launch_module._Pool()
    assert not pool.run(recorder, 2, 10, [0] * (native.MAX_ARGS + 1))
    assert pool.workers == []  # nothing started, nothing run


def test_the_workers_spin_settings_are_in_cycles_of_the_counter_they_read(new_pool):
    pool = new_pool()
    pool.ensure(1)
    per_us = native.cycles_per_us()
    assert per_us > 1
    assert pool.words[native.Layout.JOB_SPIN] == int(native.JOB_SPIN_US * per_us)
    assert pool.words[native.Layout.WAKE_SPIN] == int(native.WAKE_SPIN_US * per_us)


# ---------------------------------------------------------------- compiled ahead

AHEAD = """\
import json, os, sys, threading
import numpy as np
import fusegrad as fg
from fusegrad.pipeline import compiler
from fusegrad.runtime import pool
assert pool._ahead is None
x = fg.tensor(np.linspace(-4, 4, 1 << 16, dtype=np.float32))
y = ((x * 0.5).exp() + 1.0).numpy()  # a new plan: its lowering starts the pool's compile
assert pool._ahead is not None
pool._ahead.join(60)
assert not pool._ahead.is_alive()
before = dict(compiler.stats)
fns = pool.functions()  # compiled already: nothing more
assert dict(compiler.stats) == before, (before, compiler.stats)
assert all(fns.values())
want = np.exp(np.linspace(-4, 4, 1 << 16, dtype=np.float32).astype(np.float64) * 0.5) + 1.0
np.testing.assert_allclose(y, want, rtol=1e-5)
print(json.dumps(compiler.stats))
"""


def test_a_new_plan_compiles_the_pools_code_ahead_once(tmp_path):
    """The worker pool's code is compiled on a thread of its own when the first plan is
    lowered (with more than one thread), and the pool's own call then compiles nothing."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGRAD_")}
    env.update(FUSEGRAD_CACHE=str(tmp_path / "cache"), FUSEGRAD_THREADS="2")
    proc = subprocess.run(
        [sys.executable, "-c", AHEAD], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_rendered_ir_fills_every_placeholder_and_drops_the_comments(monkeypatch, machine):
    """runtime/pool.ll's `${NAME}` placeholders are all filled (a missing one raises), its
    `;` comment lines stay out of the IR, and the spin-wait pause is the machine's: x86's
    `pause` intrinsic, declared once, or a fence elsewhere."""
    monkeypatch.setattr(native.platform, "machine", lambda: machine)
    text = native.render()
    assert "$" not in text
    assert not any(line.startswith(";") for line in text.splitlines())
    x86 = machine == "x86_64"
    assert text.count("declare void @llvm.x86.sse2.pause()") == (1 if x86 else 0)
    assert text.count("  call void @llvm.x86.sse2.pause()\n") == (2 if x86 else 0)
    assert text.count("  fence seq_cst\n") == (2 if x86 else 4)  # (two more: wake, sleep)
    for name in ("worker", "run", "prewake", "close", "cycles"):
        assert (
            text.count(f"define i64 @fg_pool_{name}(") + text.count(f"define void @fg_pool_{name}(")
            == 1
        ), name
    slot = f"%slot.o2 = add i64 %slot.o1, {native.Layout.SLOTS}\n"
    assert slot in text  # a worker's slot from the Layout's offsets
    args = [f"%a{k} = load i64, ptr %a{k}.at" for k in range(native.MAX_ARGS)]
    assert all(a in text for a in args) and f"%a{native.MAX_ARGS} " not in text


def test_the_pools_ir_is_package_data():
    """An installed (not editable) package has runtime/pool.ll, which `render` reads:
    pyproject.toml names it among fusegrad.runtime's package data."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    section = text[text.index("[tool.setuptools.package-data]") :]
    (files,) = re.findall(r'^"fusegrad\.runtime" = \[(.*)\]$', section, re.M)
    assert '"pool.ll"' in files.split(", ")
