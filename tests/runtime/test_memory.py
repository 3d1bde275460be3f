"""Memory stays bounded when shapes keep changing: compiling frees what llvmlite's own
calls leave (each O3 pipeline, each LLVM context), evicted kernels free their machine
code (one MCJIT engine per batch of kernels, `pipeline/compiler.py`), the plan cache is
bounded in kernels as well as plans, the buffer pool keeps only sizes allocated more
than once, within bounds (`runtime/buffer.py`), and the tables `arange` shares are
weakly held (the last few kept).

The measuring runs are fresh processes with small caches (FUSEGRAD_PLAN_CACHE=16,
FUSEGRAD_KERNEL_CACHE=64). RSS is read after a garbage collection, with the buffer pool
emptied (what it held is reported apart) and glibc's free pages given back
(`malloc_trim`), so what is measured is memory still held.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir.dtypes import float32
from fusegrad.pipeline import compiler
from fusegrad.runtime import buffer
from fusegrad.runtime.engine import engine

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/maps") or not sys.platform.startswith("linux"),
    reason="reads /proc/self/statm and /proc/self/maps",
)

_MEASURE = r"""
import ctypes, gc, json, os, sys
import fusegrad as fg
from fusegrad import nn
from fusegrad.pipeline import compiler
from fusegrad.runtime import buffer

fg.manual_seed(0)
mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

def rss_mb():
    global pooled
    gc.collect()
    pooled = buffer._pooled_bytes  # what the pool held, before it is emptied
    buffer.clear_pool()
    ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

def jit_code_kb():  # anonymous executable mappings: the JIT's code pages
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 5 and "x" in parts[1]:
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                total += hi - lo
    return total / 1024

def step(kind, n):
    if kind == "softmax":  # a sum, a division and the program stringing them together
        x = fg.ones(n, 3)
        s = (x.exp() + x.sin()).sum(1, keepdim=True)
        (x / s).numpy()
    elif kind == "chain":  # one elementwise kernel
        x = fg.ones(n, 3)
        ((x.exp() + x.sin()) * n).numpy()
    elif kind == "arange":
        fg.arange(n)
    elif kind == "compile":  # one new kernel through the compiler alone: O3, emit, load
        compiler.compile_kernel(KERNEL.format(n=n), f"mem_probe_{n}", 1)
    elif kind == "mlp":  # a new batch size: three kernels and the program running them
        mlp(fg.ones(n, 16)).numpy()

# a kernel with constants of its own, as every new shape's kernel has (its loop bounds)
KERNEL = "define void @mem_probe_{n}(i64 %lo, i64 %hi, ptr %p) {{\n%v0 = add i64 %lo, 0\n"
KERNEL += "".join(f"%v{k + 1} = xor i64 %v{k}, {{n}}{k:03d}\n" for k in range(32))
KERNEL += "store i64 %v32, ptr %p\nret void\n}}\n"

kind, count = sys.argv[1], int(sys.argv[2])
marks = {}
for n in range(1, count + 1):
    step(kind, n)
    if n in (count // 2, count):
        marks[n] = {"rss": rss_mb(), "code": jit_code_kb()}
    if n == count:
        marks["pool"] = pooled
half, end = marks[count // 2], marks[count]
print(json.dumps({"rss": end["rss"] - half["rss"], "code": end["code"] - half["code"],
                  "pool": marks["pool"] / 2**20}))
"""


def _measure(kind: str, count: int, cache: str) -> dict:
    """Growth (RSS in MB, JIT code in KB) over the second half of `count` distinct
    shapes, in a fresh process."""
    env = dict(
        os.environ, FUSEGRAD_CACHE=cache, FUSEGRAD_PLAN_CACHE="16", FUSEGRAD_KERNEL_CACHE="64"
    )
    env.pop("FUSEGRAD_TEST_DEVICE", None)
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, kind, str(count)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ran_in_fresh_process(name: str) -> bool:
    """Run test `name` of this file in a fresh interpreter (what it counts, the buffers
    and libraries alive, depends on what earlier tests left alive in this one); False
    inside that interpreter, where the test runs its body."""
    if os.environ.get("FUSEGRAD_TEST_FRESH_PROCESS"):
        return False
    env = dict(os.environ, FUSEGRAD_TEST_FRESH_PROCESS="1")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{name}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return True


def test_evicted_kernels_free_their_machine_code():
    """120 shapes, a kernel each: once the caches are full, each new kernel's code
    replaces an evicted one's (before: 4 KB more executable memory per kernel, for ever)."""
    got = _measure("chain", 120, "off")
    assert got["code"] <= 32, f"JIT code grew {got['code']:.0f} KB over the last 60 kernels"


def test_compiling_2000_new_kernels_keeps_rss_flat():
    """Each compile's O3 pipeline is freed (llvmlite's `close()` leaves it: about 60 MB
    over these 1,000 kernels), and so is the LLVM context it parsed into (the global one
    kept every constant: 4.5 MB more). What is left is llvmlite's pass instrumentation,
    about 1.5 KB a kernel, which no call of its API frees."""
    got = _measure("compile", 2000, "off")
    assert got["rss"] < 3, f"RSS grew {got['rss']:.1f} MB over the last 1,000 new kernels"


def test_an_mlp_over_160_batch_sizes_keeps_memory_flat():
    """A model run on a new batch size each call (three new kernels each): the second
    80 add under 4 MB (before: 26 MB, 70 KB a kernel compiled), and the buffer
    pool keeps none of the sizes (before: every one)."""
    got = _measure("mlp", 160, "off")
    assert got["rss"] < 4, f"RSS grew {got['rss']:.1f} MB over the last 80 batch sizes"
    assert got["pool"] < 1, f"the buffer pool held {got['pool']:.1f} MB"


def test_rss_stays_flat_over_distinct_shapes_once_compiled(tmp_path):
    """240 shapes of a three-kernel plan, their object files in the disk cache (a first
    process compiles them: compiling itself leaks inside llvmlite, see
    pipeline/compiler.py): the second half adds under 1.5 MB (before: about 4 MB, every
    object file loaded staying loaded)."""
    cache = str(tmp_path / "cache")
    _measure("softmax", 240, cache)
    got = _measure("softmax", 240, cache)
    assert got["rss"] < 1.5, f"RSS grew {got['rss']:.1f} MB over the last 120 shapes"


def test_arange_of_20000_distinct_lengths_keeps_memory_bounded():
    """Every distinct arange was kept for ever (1.5 GB for these 20,000); now only while
    a tensor holds it, and the last 64 asked for."""
    got = _measure("arange", 20_000, "off")
    assert got["rss"] < 40, f"RSS grew {got['rss']:.0f} MB over the last 10,000 aranges"


def test_arange_shares_one_buffer_while_held_and_the_recent_ones_after():
    if _ran_in_fresh_process("test_arange_shares_one_buffer_while_held_and_the_recent_ones_after"):
        return
    from fusegrad import creation

    a, b = fg.arange(1234), fg.arange(1234)
    assert a.node.arg is b.node.arg
    first = a.node.arg
    del a, b
    assert fg.arange(1234).node.arg is first  # among the recent: kept though dropped
    for n in range(2000, 2000 + 2 * creation._SHARED_RECENT):
        fg.arange(n)
    gc.collect()
    assert len(creation._recent_shared) == creation._SHARED_RECENT
    assert len(creation._shared_buffers) <= creation._SHARED_RECENT + 1
    np.testing.assert_array_equal(fg.arange(1234).numpy(), np.arange(1234))


def _softmax_rows(x):
    return (x.exp() / x.exp().sum(1, keepdim=True)) * 3


def _want(a):
    e = np.exp(a.astype(np.float64))
    return e / e.sum(1, keepdims=True) * 3


def test_a_plan_whose_kernels_were_evicted_still_runs_right():
    """A cached plan keeps its kernels' code after the kernel cache dropped them, and a
    plan evicted from the plan cache while held (a run in progress, a jit recording)
    still runs: the code is freed only with the last plan that uses it."""
    rng = np.random.default_rng(0)
    with fg.config.override(kernel_cache_size=2, plan_cache_size=4, cache=None):
        a = rng.standard_normal((7, 13)).astype(np.float32)
        y = _softmax_rows(fg.tensor(a))
        plan, leaves, _ = engine.plan_for([y.node])
        old = (plan, [engine.value(n) for n in leaves])
        first = engine.execute(*old)[0][0].numpy().reshape(7, 13).copy()
        np.testing.assert_allclose(first, _want(a), rtol=1e-5)
        for n in range(20, 40):  # other shapes: both caches drop the old plan and kernels
            _softmax_rows(fg.ones(n, 5)).numpy()
        assert all(id(v) != id(old[0]) for v in engine.plans.values())
        gc.collect()
        compiler.compile_kernel(  # a load disposes of the engines nothing uses
            "define void @test_memory_probe(i64 %a, i64 %b) {\nret void\n}\n",
            "test_memory_probe",
            0,
        )
        b = rng.standard_normal((7, 13)).astype(np.float32)
        tb = fg.tensor(b)
        assert len(old[1]) == 1  # x is the plan's one input
        again = engine.execute(old[0], [tb.node.arg])[0][0].numpy().reshape(7, 13)
        np.testing.assert_allclose(again, _want(b), rtol=1e-5)
        # the same shape asked for again: the kernels the held plan keeps are reused
        np.testing.assert_allclose(_softmax_rows(fg.tensor(b)).numpy(), _want(b), rtol=1e-5)


def test_libraries_nothing_uses_are_disposed_of():
    if _ran_in_fresh_process("test_libraries_nothing_uses_are_disposed_of"):
        return
    with fg.config.override(kernel_cache_size=2, plan_cache_size=2, cache=None):
        for n in range(50, 70):
            _softmax_rows(fg.ones(n, 3)).numpy()
        gc.collect()
        compiler.compile_kernel(
            "define void @test_memory_probe2(i64 %a, i64 %b) {\nret void\n}\n",
            "test_memory_probe2",
            0,
        )
        live = {id(lib) for lib in compiler._live.values()}
    # what the two cached plans and two cached kernels use (a plan: a batch), and the
    # worker pool's own code; not the twenty plans made
    assert len(live) <= 6, len(live)
    assert not compiler._retired


def test_the_pool_keeps_the_sizes_a_loop_reuses_not_every_size_ever_freed():
    """A training loop allocates the same sizes every step; a program whose shapes keep
    changing allocates new sizes, each once. Before, the pool kept every size freed
    until it held 1 GiB, then refused all (the loop's too)."""
    gc.collect()  # an earlier test's garbage freed mid-loop would pool a second block
    buffer.clear_pool()
    try:
        for n in range(1, 2001):  # a new size each "step", and the loop's own size again
            buffer.Buffer(n * 64 + 1, float32)
            again = buffer.Buffer(1000, float32)
            if n == 2:
                ptr = again.ptr
            elif n > 2:  # from its second allocation on, the loop's size is pooled
                assert again.ptr == ptr
            del again
        assert list(buffer._pool) == [4000] and buffer._pooled_bytes == 4000
        # sizes allocated twice and never again are pooled, and bounded: the oldest go
        for n in range(1, 2001):
            a, b = buffer.Buffer(n * 64 + 1, float32), buffer.Buffer(n * 64 + 1, float32)
            del a, b
        assert len(buffer._pool) <= buffer.POOL_SIZES
        assert buffer._pooled_bytes <= buffer.POOL_LIMIT_BYTES
        held = sum(size * len(free) for size, free in buffer._pool.items())
        assert held == buffer._pooled_bytes
        assert (2000 * 64 + 1) * 4 in buffer._pool and 4000 not in buffer._pool
    finally:
        buffer.clear_pool()


def test_a_full_pool_drops_its_oldest_memory_for_new(monkeypatch):
    monkeypatch.setattr(buffer, "POOL_LIMIT_BYTES", 1 << 20)
    buffer.clear_pool()
    try:
        old = [buffer.Buffer(64 << 10, float32) for _ in range(4)]  # 256 KiB each
        del old
        assert buffer._pooled_bytes == 1 << 20  # the pool is full
        buffer.Buffer(1000, float32)
        b = buffer.Buffer(1000, float32)  # its size's second allocation: worth pooling
        ptr = b.ptr
        del b  # pooled (before: refused, the pool being full of memory nothing reuses)
        assert 4000 in buffer._pool and len(buffer._pool[256 << 10]) == 3  # one went
        assert buffer.Buffer(1000, float32).ptr == ptr
        assert buffer._pooled_bytes <= 1 << 20
        big = [buffer.Buffer(1 << 20, float32) for _ in range(2)]  # each more than the pool
        del big
        assert buffer._pooled_bytes <= 1 << 20 and (4 << 20) not in buffer._pool
    finally:
        buffer.clear_pool()


def test_the_kernel_cache_keeps_object_files_not_loaded_code():
    """A kernel in the memory cache whose plan is gone holds its object file (a few KB),
    not its library (about 40 KB of engine and target machine, whatever it holds): the
    libraries alive are those cached plans use. Asked for again, it loads without
    compiling."""
    if _ran_in_fresh_process("test_the_kernel_cache_keeps_object_files_not_loaded_code"):
        return
    with fg.config.override(kernel_cache_size=1000, plan_cache_size=2, cache=None):
        for n in range(50, 70):
            _softmax_rows(fg.ones(n, 3)).numpy()
        gc.collect()
        compiler.compile_kernel(
            "define void @test_memory_probe3(i64 %a, i64 %b) {\nret void\n}\n",
            "test_memory_probe3",
            0,
        )
        live = {id(lib) for lib in compiler._live.values()}
        assert len(live) <= 6, len(live)  # before: the twenty plans' libraries, and more
        compiled = compiler.stats["compiled"]
        y = _softmax_rows(fg.ones(50, 3))  # the first shape again
        np.testing.assert_allclose(y.numpy(), _want(np.ones((50, 3))), rtol=1e-5)
        assert compiler.stats["compiled"] == compiled
        assert {r.cache for r in engine.value(y.node).kernels} == {"memory"}


def test_cached_plans_keep_at_most_the_kernel_cache_s_kernels_loaded():
    """The plan cache is bounded in kernels too: a big training step's plans hold tens of
    kernels each, and `plan_cache_size` of them would keep that many times more code."""
    with fg.config.override(kernel_cache_size=7, plan_cache_size=100, cache=None):
        for n in range(30, 50):
            _softmax_rows(fg.ones(n, 3)).numpy()
        kernels = [len(p.steps) for p in engine.plans.values()]
        assert 1 < len(kernels) < 20 and sum(kernels) <= 7, kernels  # before: 20 plans
        a = np.linspace(-2, 2, 49 * 3, dtype=np.float32).reshape(49, 3)
        np.testing.assert_allclose(_softmax_rows(fg.tensor(a)).numpy(), _want(a), rtol=1e-5)


@pytest.mark.parametrize(("ram_gib", "limit_gib"), [(24, 4), (48, 4), (6, 1), (3, 0.5)])
def test_the_pool_holds_at_most_4_gib_or_a_sixth_of_ram(monkeypatch, ram_gib, limit_gib):
    # 1 GiB was too little for six convolutions' training steps run one after another
    # (their buffers left the pool every call: 0.30 of the sgemm's rate against 0.89)
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": int(ram_gib * (1 << 30)) // 4096}
    monkeypatch.setattr(buffer.os, "sysconf", pages.__getitem__)
    assert buffer._pool_limit() == int(limit_gib * (1 << 30))
