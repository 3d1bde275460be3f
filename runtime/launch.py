"""Run a compiled CPU kernel over its parallel loop on a pool of threads.

Every kernel takes `(start, end, *buffers)`, the slice of its outermost loop
to run. The pool cuts that loop into one contiguous slice per thread; ctypes
releases the GIL during the native call, so the slices really run at once.
Small kernels run on the calling thread: waking a worker costs more than
they do.
"""

from __future__ import annotations

import ctypes
import os
import threading

from .config import config

try:
    _sched_getcpu = ctypes.CDLL(None).sched_getcpu  # the CPU the calling thread runs on
    _sched_getcpu.restype = ctypes.c_int
except (AttributeError, OSError):  # pragma: no cover - not glibc
    _sched_getcpu = None

# below this many inner iterations in total, one thread is faster than waking others
PARALLEL_MIN_WORK = 1 << 15


class _Pool:
    def __init__(self):
        self.workers: list[threading.Thread] = []
        self.jobs: list[tuple | None] = []
        self.start_events: list[threading.Event] = []
        self.done = threading.Semaphore(0)
        self.errors: list[BaseException] = []
        self.placed_for = (-1, 0)  # (the caller's CPU, workers) when workers were last placed

    def ensure(self, n: int) -> None:
        while len(self.workers) < n:
            i = len(self.workers)
            self.jobs.append(None)
            self.start_events.append(threading.Event())
            t = threading.Thread(target=self._work, args=(i,), daemon=True, name=f"fusegrad-{i}")
            self.workers.append(t)
            t.start()

    def _work(self, i: int) -> None:
        ev = self.start_events[i]
        while True:
            ev.wait()
            ev.clear()
            fn, args = self.jobs[i]
            try:
                fn(*args)
            except BaseException as e:  # pragma: no cover - native code does not raise
                self.errors.append(e)
            self.done.release()

    def place(self, n: int) -> None:
        """Keep the workers off the CPU the calling thread runs on.

        Left alone, the scheduler may wake a worker on its waker's CPU (to share a warm
        cache); the two then take turns on one core, and threads that meet at a spinning
        barrier between kernels (runtime/program.py) wait for the other's time slice:
        measured on a 2-core VM, a 0.5 ms step took 3.7 ms. The main thread is never
        pinned; its CPU is checked each run and the workers move only when it moved.
        """
        if _sched_getcpu is None or not hasattr(os, "sched_setaffinity"):
            return
        here = _sched_getcpu()
        if here == self.placed_for[0] and n <= self.placed_for[1]:
            return
        allowed = os.sched_getaffinity(0)
        others = (allowed - {here}) or allowed  # the scheduler spreads them over the rest
        for t in self.workers:
            try:
                os.sched_setaffinity(t.native_id, others)
            except OSError:  # pragma: no cover - a CPU went offline: let the scheduler place it
                return
        self.placed_for = (here, len(self.workers))

    def run(self, fn, slices: list[tuple[int, int]], ptrs: list[int]) -> None:
        helpers = slices[1:]
        self.ensure(len(helpers))
        self.place(len(helpers))
        for i, (a, b) in enumerate(helpers):
            self.jobs[i] = (fn, (a, b, *ptrs))
            self.start_events[i].set()
        a, b = slices[0]
        fn(a, b, *ptrs)
        for _ in helpers:
            self.done.acquire()
        if self.errors:
            raise self.errors.pop()


_pool = _Pool()


def split(extent: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous slices of range(extent), as even as possible."""
    parts = max(1, min(parts, extent))
    base, extra = divmod(extent, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def run_threads(fn, threads: int, args: list[int]) -> None:
    """Call fn(tid, threads, *args) once on each of `threads` threads (this one is tid 0)."""
    if threads <= 1:
        fn(0, 1, *args)
        return
    _pool.run(fn, [(t, threads) for t in range(threads)], args)


def launch(fn, extent: int, work: int, ptrs: list[int]) -> None:
    """Run `fn` over range(extent) of its parallel loop; `work` is its total inner iterations."""
    threads = config.threads if work >= PARALLEL_MIN_WORK else 1
    if threads <= 1 or extent <= 1:
        fn(0, extent, *ptrs)
        return
    _pool.run(fn, split(extent, threads), ptrs)
