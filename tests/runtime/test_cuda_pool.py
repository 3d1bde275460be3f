"""The PyCUDA backend's device memory pool and context handling, against a fake driver.

CI has no GPU, so these tests give `_PyCudaBackend` a stand-in for `pycuda.driver` that
records every call. What they pin: a freed block is reused by the next allocation of
its size class without calling CUDA; freeing calls no CUDA at all (so any thread may
drop a tensor: PyCUDA's own pool needs a current context there and ends the process
without one); every CUDA call runs with the context pushed and leaves it popped (PyCUDA
aborts when a thread ends with a context pushed); out of memory, the held blocks go
back to CUDA and the allocation is tried again. The same backend ran the suite on an
H100 (benchmarks/HISTORY.md).
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir.dtypes import float32
from fusegrad.runtime import cuda as runtime_cuda
from fusegrad.runtime.engine import engine


class FakeAllocation:
    def __init__(self, nbytes: int, log: list):
        self.nbytes, self.log, self.freed = nbytes, log, False

    def free(self):
        self.log.append(("free", self.nbytes))
        self.freed = True

    def __int__(self):
        return id(self)


class FakeContext:
    """Counts pushes and pops per thread; every driver call checks one is pushed."""

    def __init__(self, log: list):
        self.log = log
        self.depth: dict[int, int] = {}

    def push(self):
        me = threading.get_ident()
        self.depth[me] = self.depth.get(me, 0) + 1

    def pop(self):
        me = threading.get_ident()
        assert self.depth.get(me, 0) > 0, "pop without a push"
        self.depth[me] -= 1

    def current(self) -> bool:
        return self.depth.get(threading.get_ident(), 0) > 0


class FakeDriver:
    class MemoryError(Exception):
        pass

    def __init__(self, log: list, context: FakeContext):
        self.log, self.context, self.fail_next_alloc = log, context, False

    def mem_alloc(self, nbytes):
        assert self.context.current(), "mem_alloc without a current context"
        if self.fail_next_alloc:
            self.fail_next_alloc = False
            raise self.MemoryError("out of memory")
        self.log.append(("alloc", nbytes))
        return FakeAllocation(nbytes, self.log)

    def memcpy_htod(self, mem, host):
        assert self.context.current()
        self.log.append(("htod", host.nbytes))


def fake_backend():
    log: list = []
    context = FakeContext(log)
    b = object.__new__(runtime_cuda._PyCudaBackend)
    b.drv = FakeDriver(log, context)
    b.context = context
    b.active = runtime_cuda._Active(context)
    b._held, b._held_lock, b._freed_later = {}, threading.Lock(), []
    return b, log, context


def test_size_classes_are_four_per_power_of_two_and_waste_under_a_quarter():
    assert runtime_cuda._pool_bytes(0) == runtime_cuda._pool_bytes(1) == 256
    assert runtime_cuda._pool_bytes(256) == 256
    assert runtime_cuda._pool_bytes(257) == 320  # 256 + 64
    assert runtime_cuda._pool_bytes(1 << 20) == 1 << 20
    for n in list(range(1, 5000)) + [10**6 + k for k in range(0, 5000, 7)]:
        c = runtime_cuda._pool_bytes(n)
        assert c >= n and (c <= 256 or (c - n) / n < 0.25)


def test_a_freed_block_is_reused_by_its_size_class_without_calling_cuda():
    b, log, context = fake_backend()
    first = b.alloc(1000, float32)  # 4000 bytes -> the 4096 class
    assert log == [("alloc", 4096)]
    b.free(first, 1000, float32)
    again = b.alloc(900, float32)  # 3600 bytes: also the 4096 class
    assert again is first and log == [("alloc", 4096)]
    other = b.alloc(10, float32)  # another class: a new allocation
    assert other is not first and log[-1] == ("alloc", 256)
    assert all(d == 0 for d in context.depth.values())  # nothing left pushed


def test_freeing_on_a_thread_that_never_used_the_gpu_calls_no_cuda():
    b, log, context = fake_backend()
    mems = [b.alloc(100, float32) for _ in range(3)]
    before = list(log)
    worker = threading.Thread(target=lambda: [b.free(m, 100, float32) for m in mems])
    worker.start()
    worker.join()
    assert log == before  # no driver call
    assert context.depth.get(worker.ident, 0) == 0
    assert {id(b.alloc(100, float32)) for _ in range(3)} == {id(m) for m in mems}


def test_a_free_while_the_pool_s_lock_is_held_waits_for_no_one():
    """A DeviceBuffer's finalizer frees its block, and a cyclic collection may run it on
    a thread that holds the pool's lock (one started by an allocation in there): `free`
    never waits for the lock. The block is held from the lock's next holder on."""
    b, log, _ = fake_backend()
    mem = b.alloc(1000, float32)
    done = threading.Event()

    def free_under_the_lock():
        with b._held_lock:  # (as a finalizer run by a collection started in `alloc`)
            b.free(mem, 1000, float32)
        done.set()

    threading.Thread(target=free_under_the_lock, daemon=True).start()
    assert done.wait(30), "free waited for the lock its own thread held"
    assert b.alloc(1000, float32) is mem and log == [("alloc", 4096)]  # held, then reused
    b.free(mem, 1000, float32)
    small = b.alloc(10, float32)
    with b._held_lock:
        b.free(small, 10, float32)  # (another class, left for later)
    b.release_held()  # what was left for later goes back to CUDA too
    assert sorted(e for e in log if e[0] == "free") == [("free", 256), ("free", 4096)]


def test_every_cuda_call_leaves_the_context_popped_on_every_thread():
    b, log, context = fake_backend()

    def work():
        mem = b.alloc(64, float32)
        b.upload(mem, np.ones(64, np.float32))
        b.free(mem, 64, float32)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    work()
    assert ("htod", 256) in log
    assert all(d == 0 for d in context.depth.values())


def test_out_of_memory_gives_held_blocks_back_and_tries_again():
    b, log, context = fake_backend()
    held = b.alloc(1 << 20, float32)
    b.free(held, 1 << 20, float32)
    b.drv.fail_next_alloc = True
    mem = b.alloc(3 << 20, float32)  # another class: must allocate, fails once
    assert held.freed and ("free", 4 << 20) in log
    assert isinstance(mem, FakeAllocation) and log[-1] == ("alloc", 12 << 20)
    assert all(d == 0 for d in context.depth.values())


@pytest.fixture
def emulated():
    with fg.config.override(cuda="emulate"):
        runtime_cuda.reset()
        yield
    runtime_cuda.reset()


def test_a_tensor_from_another_backend_is_refused_by_name(emulated):
    x = fg.ones(8, device="cuda").realize()
    buf = engine.value(x.node)

    class Elsewhere:
        name = "pycuda"

    buf.owner = Elsewhere()
    with pytest.raises(runtime_cuda.CudaUnavailable, match="pycuda backend.*now emulate"):
        (x * 3).realize()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_told_that_the_gpu_does_not_survive_the_fork(monkeypatch):
    b, log, context = fake_backend()
    monkeypatch.setattr(runtime_cuda, "_backend", b)
    monkeypatch.setattr(runtime_cuda, "_backend_kind", fg.config.cuda)
    monkeypatch.setattr(runtime_cuda, "_failure", None)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only for the clear refusal
        code = 1
        try:
            runtime_cuda.backend()
        except runtime_cuda.CudaUnavailable as e:
            code = 0 if "forked" in str(e) and "spawn" in str(e) and b.forked else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert runtime_cuda.backend() is b and not getattr(b, "forked", False)  # the parent's GPU


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_of_a_gpu_process_still_computes_on_the_cpu(monkeypatch):
    """Only the GPU is refused after a fork: the child's CPU tensors run on its own new
    worker pool, and never ask the cuda backend for anything."""
    b, log, context = fake_backend()
    monkeypatch.setattr(runtime_cuda, "_backend", b)
    monkeypatch.setattr(runtime_cuda, "_backend_kind", fg.config.cuda)
    monkeypatch.setattr(runtime_cuda, "_failure", None)
    calls = len(log)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only when the CPU answer is right, GPU untouched
        code = 1
        try:
            with fg.config.override(threads=2):
                x = fg.ones(1 << 20, device="cpu")
                ok = (x * 3).sum().item() == 3 * (1 << 20)
            code = 0 if ok and b.forked and len(log) == calls else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_empty_cache_gives_held_blocks_back_and_keeps_live_ones(monkeypatch):
    b, log, context = fake_backend()
    monkeypatch.setattr(runtime_cuda, "_backend", b)
    live = b.alloc(1000, float32)
    held = b.alloc(1000, float32)
    b.free(held, 1000, float32)
    fg.cuda.empty_cache()
    assert held.freed and not live.freed
    assert b.alloc(1000, float32) is not held  # a new block: nothing was held any more
    assert all(d == 0 for d in context.depth.values())


def test_empty_cache_is_harmless_without_a_gpu(monkeypatch):
    monkeypatch.setattr(runtime_cuda, "_backend", None)
    fg.cuda.empty_cache()  # the cuda device never ran: nothing to give back


def test_a_host_tables_device_copy_is_made_once_per_backend(emulated, monkeypatch):
    """fusegrad's own tables (the `arange` an index op compares against) are copied to the
    device on first use; a copy made by one backend is not handed to another."""
    from fusegrad.runtime.buffer import HostTable
    from fusegrad.runtime.cuda_backend import CudaBackend

    table = HostTable(4, float32, np.arange(4, dtype=np.float32))
    on_emulator = table.on("cuda:0")
    assert table.on("cuda:0") is on_emulator  # made once
    elsewhere = object()
    monkeypatch.setattr(CudaBackend, "from_host", lambda self, array, dtype, device: elsewhere)
    with fg.config.override(cuda="pycuda"):
        assert table.on("cuda:0") is elsewhere
    assert table.on("cuda:0") is on_emulator
