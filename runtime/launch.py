"""Run a compiled CPU kernel over its parallel loop on a pool of threads.

Every kernel takes `(start, end, *buffers)`, the slice of its outermost loop
to run. The pool cuts that loop into one contiguous slice per thread; ctypes
releases the GIL during the native call, so the slices really run at once.
Small kernels run on the calling thread: waking a worker costs more than
they do.
"""

from __future__ import annotations

import threading

from .config import config

# below this many inner iterations in total, one thread is faster than waking others
PARALLEL_MIN_WORK = 1 << 15


class _Pool:
    def __init__(self):
        self.workers: list[threading.Thread] = []
        self.jobs: list[tuple | None] = []
        self.start_events: list[threading.Event] = []
        self.done = threading.Semaphore(0)
        self.errors: list[BaseException] = []

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

    def run(self, fn, slices: list[tuple[int, int]], ptrs: list[int]) -> None:
        helpers = slices[1:]
        self.ensure(len(helpers))
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
