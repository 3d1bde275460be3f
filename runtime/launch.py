"""Run a compiled CPU kernel over its parallel loop on a pool of threads.

Every kernel takes `(start, end, *buffers)`, a slice of its outermost loop to
run. The pool's threads claim the loop in chunks, about CHUNKS_PER_THREAD each,
from a shared counter, and run them at once: the workers wait for jobs in native
code (runtime/pool.py), so handing them a kernel is a few stores and, when they
sleep, a futex wake; no Python runs on a worker. Each output element is computed
by one thread with the same code, whichever thread that is, so results do not
depend on the thread count. Small kernels run on the calling thread: waking a
worker costs more than they do.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

import numpy as np

from . import forksafe
from . import pool as native
from .config import config

# below this many inner iterations in total, one thread is faster than waking others
PARALLEL_MIN_WORK = 1 << 15


def runs_parallel(extent: int, work: int) -> bool:
    """Whether a kernel's parallel loop is shared among the threads, or run by one: a
    launch alone and a kernel of a native program (runtime/program.py) alike."""
    return work >= PARALLEL_MIN_WORK and extent > 1


_RUN = ctypes.CFUNCTYPE(  # (pool, fn, threads, extent, least iterations per chunk)
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
)
_PREWAKE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)
_WORKER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)


class _Pool:
    """Worker threads that run slices of one native call at a time.

    One caller at a time owns the workers (`lock`); a Python thread that finds them busy
    runs its call alone on its own thread instead of waiting, so threads never deadlock
    on the pool and never see another call's jobs. The owner writes the job's arguments
    into the shared words and calls `fg_pool_run` (see runtime/pool.py).
    """

    def __init__(self):
        self.workers: list[threading.Thread] = []
        self.lock = forksafe.Lock()
        self.words = None  # the shared words (runtime/pool.py's Layout), made on first use

    def _start(self) -> None:
        fns = native.functions()
        words = np.zeros(native.Layout.WORDS + 8, dtype=np.int64)
        skip = (-words.ctypes.data % 64) // 8  # the slots on cache-line boundaries
        words = words[skip : skip + native.Layout.WORDS]
        self.address = words.ctypes.data
        L, per_us = native.Layout, native.cycles_per_us()
        words[L.PLACED_CPU] = -1
        words[L.JOB_SPIN] = int(native.JOB_SPIN_US * per_us)
        words[L.WAKE_SPIN] = int(native.WAKE_SPIN_US * per_us)
        words[L.SYSCALL : L.FUTEX_NR + 1] = native.libc_addresses()
        self.args = (ctypes.c_uint64 * native.MAX_ARGS).from_address(self.address + 8 * L.ARGS)
        self._run = _RUN(fns["fg_pool_run"])
        self._prewake = _PREWAKE(fns["fg_pool_prewake"])
        self._close = _WORKER(fns["fg_pool_close"])  # the same signature
        self._worker = _WORKER(fns["fg_pool_worker"])
        # last: `prewake` on another thread reads the words as soon as they are set
        self.words = words

    def ensure(self, n: int) -> None:
        if self.words is None:
            self._start()
        while len(self.workers) < n:
            i = len(self.workers)
            # the thread enters native code and stays there (ctypes released the GIL)
            t = threading.Thread(
                target=self._worker, args=(self.address, i), daemon=True, name=f"fusegrad-{i}"
            )
            t.words = self.words  # a running thread keeps the words it reads alive
            self.workers.append(t)
            t.start()

    def place(self, n: int) -> None:
        """Keep the workers off the CPU the calling thread runs on.

        Left alone, the scheduler may wake a worker on its waker's CPU (to share a warm
        cache); the two then take turns on one core, and threads that meet at a spinning
        barrier between kernels (runtime/program.py) wait for the other's time slice:
        measured on a 2-core VM, a 0.5 ms step took 3.7 ms. The main thread is never
        pinned; `fg_pool_run` checks its CPU on every run (a vDSO call) and refuses the
        run when it moved, and the workers move then.
        """
        here = _sched_getcpu() if _sched_getcpu is not None else -1
        if here >= 0 and hasattr(os, "sched_setaffinity"):
            allowed = os.sched_getaffinity(0)
            others = (allowed - {here}) or allowed  # the scheduler spreads them over the rest
            for t in self.workers:
                try:
                    os.sched_setaffinity(t.native_id, others)
                except OSError:  # pragma: no cover - a CPU went offline: let it place them
                    break
        self.words[native.Layout.PLACED_CPU] = here  # what `fg_pool_run` compares with

    def close(self) -> None:
        """Stop the workers (each returns from native code) and wait for them."""
        with self.lock:
            if not self.workers:
                return
            self._close(self.address, len(self.workers))
            for t in self.workers:
                t.join()
            self.workers = []

    def prewake(self, threads: int) -> None:
        """Wake the workers a run on `threads` threads will use, if they sleep (and first
        move them off this thread's CPU if it moved: they would spin in its way)."""
        if self.words is None or threads <= 1:
            return
        k = min(threads - 1, len(self.workers))
        if self._prewake(self.address, k) and self.lock.acquire(blocking=False):
            try:  # placing them is the pool owner's business: skip it when it is busy
                self.place(k)
                self._prewake(self.address, k)
            finally:
                self.lock.release()

    def run(self, address: int, threads: int, extent: int, ptrs, least: int = 1) -> bool:
        """Run the function at `address` on `threads` threads, the first this one: over
        chunks of range(extent) they claim, or once each as fn(t, threads, ...) when
        extent is -1 (a program), `least` iterations a chunk at least; False (and nothing
        run) if another thread is using the workers or the function takes more arguments
        than the pool passes."""
        if len(ptrs) > native.MAX_ARGS or not self.lock.acquire(blocking=False):
            return False
        try:
            helpers = threads - 1
            if len(self.workers) < helpers:
                self.ensure(helpers)
                self.place(helpers)
            self.args[: len(ptrs)] = ptrs
            while self._run(self.address, address, threads, extent, least):
                self.place(helpers)  # the caller moved to another CPU: move the workers
            return True
        finally:
            self.lock.release()


try:
    _sched_getcpu = ctypes.CDLL(None).sched_getcpu  # the CPU the calling thread runs on
    _sched_getcpu.restype = ctypes.c_int
except (AttributeError, OSError):  # pragma: no cover - not glibc
    _sched_getcpu = None

_pool = _Pool()


@forksafe.at_fork
def _reset_after_fork() -> None:
    """A forked child has only the thread that forked: the parent's workers do not exist
    there. Start from a new, empty pool (and count the CPUs the child may use)."""
    global _pool
    _pool = _Pool()
    _usable_cpus.cache_clear()


def effective_threads() -> int:
    """The threads a native program runs on: FUSEGRAD_THREADS, but never more than the
    CPUs this process may use. Threads meet at a barrier after every kernel, and a thread
    waiting there for one that has no CPU to run on spins (then yields) for a whole time
    slice: more threads than CPUs would turn every barrier into a scheduler round trip."""
    return max(1, min(config.threads, _usable_cpus(), native.MAX_WORKERS + 1))


@functools.lru_cache(maxsize=1)
def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def prewake(threads: int) -> None:
    """Wake sleeping workers now, because a parallel run on `threads` threads is coming:
    they wake while the caller prepares it (runtime/pool.py)."""
    if threads > 1 and _POOL_OK:
        _pool.prewake(threads)


def run_threads(program, threads: int, args: list[int]) -> None:
    """Call program(tid, n, *args) once on each of n threads (this one is tid 0): n is
    `threads`, or 1 when another Python thread is using the pool (the call then runs here
    alone). `program` is a CompiledKernel."""
    if threads <= 1 or not _POOL_OK or not _pool.run(program.address, threads, -1, args):
        program.fn(0, 1, *args)


def launch(kernel, extent: int, work: int, ptrs: list[int]) -> None:
    """Run `kernel` (a CompiledKernel) over range(extent) of its parallel loop; `work` is
    its total inner iterations."""
    threads = (
        min(config.threads, extent, native.MAX_WORKERS + 1) if runs_parallel(extent, work) else 1
    )
    if (
        threads <= 1
        or not _POOL_OK
        or not _pool.run(kernel.address, threads, extent, ptrs, chunk_least(extent, work))
    ):
        kernel.fn(0, extent, *ptrs)


def chunk_least(extent: int, work: int) -> int:
    """The fewest iterations of a kernel's parallel loop a chunk claimed by one thread
    holds: enough for native.CHUNK_MIN_WORK inner iterations."""
    return max(1, -(-extent * native.CHUNK_MIN_WORK // max(work, 1)))


_POOL_OK = native.available() and _sched_getcpu is not None  # (the pool checks the CPU)
