"""Run a compiled CPU kernel over its parallel loop on a pool of threads.

Every kernel takes `(start, end, *buffers)`, the slice of its outermost loop
to run. The pool cuts that loop into one contiguous slice per thread; ctypes
releases the GIL during the native call, so the slices really run at once.
Small kernels run on the calling thread: waking a worker costs more than
they do.
"""

from __future__ import annotations

import _thread
import ctypes
import functools
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


def runs_parallel(extent: int, work: int) -> bool:
    """Whether a kernel's parallel loop is shared among the threads, or run by one: a
    launch alone and a kernel of a native program (runtime/program.py) alike."""
    return work >= PARALLEL_MIN_WORK and extent > 1


class _Pool:
    """Worker threads that run slices of one native call at a time.

    One caller at a time owns the workers (`lock`); a Python thread that finds them busy
    runs its call alone on its own thread instead of waiting, so threads never deadlock
    on the pool and never see another call's jobs. Each call has its own error list.

    A worker waits on, and signals with, bare locks (`_thread.allocate_lock`): `go[i]`
    is held while worker i has nothing to do, and the caller releases it to hand over a
    job; `done[i]` is held until the worker has finished it. Acquiring and releasing
    one is a single C call, where `threading.Event` and `Semaphore` run a dozen lines of
    Python each, holding the GIL that the other thread needs to start or return.
    """

    def __init__(self):
        self.workers: list[threading.Thread] = []
        self.inboxes: list[list] = []  # per worker: the job handed to it
        self.go: list = []  # per worker: released to start its job
        self.done: list = []  # per worker: released when its job has run
        self.lock = threading.Lock()
        self.placed_for = (-1, 0)  # (the caller's CPU, workers) when workers were last placed

    def ensure(self, n: int) -> None:
        while len(self.workers) < n:
            i = len(self.workers)
            go, done = _thread.allocate_lock(), _thread.allocate_lock()
            go.acquire()
            done.acquire()
            self.inboxes.append([None])
            self.go.append(go)
            self.done.append(done)
            t = threading.Thread(target=self._work, args=(i,), daemon=True, name=f"fusegrad-{i}")
            self.workers.append(t)
            t.start()

    def _work(self, i: int) -> None:
        go, done, inbox = self.go[i], self.done[i], self.inboxes[i]
        while True:
            go.acquire()
            fn, args, errors = inbox[0]
            try:
                fn(*args)
            except BaseException as e:  # pragma: no cover - native code does not raise
                errors.append(e)
            done.release()

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

    def run(self, fn, slices: list[tuple], ptrs: list[int]) -> bool:
        """Run fn(*slice, *ptrs) for every slice, the first on this thread; False (and
        nothing run) if another thread is using the workers."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            helpers = len(slices) - 1
            self.ensure(helpers)
            self.place(helpers)
            errors: list[BaseException] = []
            for i in range(helpers):
                self.inboxes[i][0] = (fn, (*slices[i + 1], *ptrs), errors)
                self.go[i].release()
            try:
                fn(*slices[0], *ptrs)
            finally:  # the workers' jobs are this call's: wait for them whatever happens
                for i in range(helpers):
                    self.done[i].acquire()
            if errors:  # pragma: no cover - native code does not raise
                raise errors[0]
            return True
        finally:
            self.lock.release()


_pool = _Pool()


def _reset_after_fork() -> None:
    """A forked child has only the thread that forked: the parent's workers do not exist
    there, and its lock may be held. Start from a new, empty pool."""
    global _pool
    _pool = _Pool()
    _usable_cpus.cache_clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


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


def effective_threads() -> int:
    """The threads a native program runs on: FUSEGRAD_THREADS, but never more than the
    CPUs this process may use. Threads meet at a barrier after every kernel, and a thread
    waiting there for one that has no CPU to run on spins (then yields) for a whole time
    slice: more threads than CPUs would turn every barrier into a scheduler round trip."""
    return max(1, min(config.threads, _usable_cpus()))


@functools.lru_cache(maxsize=1)
def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_threads(fn, threads: int, args: list[int]) -> None:
    """Call fn(tid, n, *args) once on each of n threads (this one is tid 0): n is `threads`,
    or 1 when another Python thread is using the pool (the call then runs here alone)."""
    if threads <= 1 or not _pool.run(fn, [(t, threads) for t in range(threads)], args):
        fn(0, 1, *args)


def launch(fn, extent: int, work: int, ptrs: list[int]) -> None:
    """Run `fn` over range(extent) of its parallel loop; `work` is its total inner iterations."""
    threads = config.threads if runs_parallel(extent, work) else 1
    if threads <= 1 or not _pool.run(fn, split(extent, threads), ptrs):
        fn(0, extent, *ptrs)
