"""Run a compiled CPU kernel over its parallel loop on a pool of threads.

Every kernel takes `(start, end, *buffers)`, a slice of its outermost loop to
run. The pool's threads claim the loop in chunks, about CHUNKS_PER_THREAD each,
from a shared counter, and run them at once: the workers wait for jobs in native
code (runtime/pool.py), so handing them a kernel is a few stores and, when they
sleep, a futex wake; no Python runs on a worker. Each output element is computed
by one thread with the same code, whichever thread that is, so results do not
depend on the thread count. Small kernels run on the calling thread: waking a
worker costs more than they do.

Ctrl-C: a native call cannot be interrupted (Python runs its SIGINT handler only once
the call returns), so a long run (LONG_WORK inner iterations or more) started on the
main thread is handed to the pool's runner thread while the main thread waits, in
Python, for it to finish. When the wait raises (KeyboardInterrupt, or whatever the SIGINT
handler raises), the pool's cancel word is set: the threads claim no more chunks (each
at most CHUNK_MAX_WORK iterations, milliseconds), the run returns, the word is cleared
and the exception goes on. The outputs are then incomplete; the engine binds nothing
(the exception leaves `execute` first) and every counter is back at zero.

A shorter run (from WATCHED_WORK inner iterations) can still take seconds when each
iteration is costly (a fused chain of transcendental functions, a sort): it runs on
the main thread itself, through the claim loop, while a thread that reads Python's
signal wakeup pipe (`signal.set_wakeup_fd`, when nobody else uses it) sets the cancel
word on SIGINT; the run returns within a chunk and the KeyboardInterrupt is raised
there (`_CtrlC`). With a SIGINT handler of the user's, nothing is cancelled.
"""

from __future__ import annotations

import _signal
import ctypes
import functools
import os
import queue
import signal
import threading

import numpy as np

from . import forksafe
from . import pool as native
from .config import config

# below this many inner iterations in total, one thread is faster than waking others
PARALLEL_MIN_WORK = 1 << 15
# from this many on, a run started on the main thread can be interrupted with Ctrl-C: it
# takes milliseconds at least, next to which handing it to the runner thread (25-50 us
# on a virtual machine) costs little; a shorter run ends within a second or so anyway
LONG_WORK = 1 << 28
# from this many on, a shorter run on the main thread notices Ctrl-C as it goes (see the
# module's docstring): its chunks are claimed through the pool's loop, costing 1-2 us
WATCHED_WORK = 1 << 20
WAIT_SLICE_S = 0.05  # the main thread returns to Python this often while a long run runs


def runs_parallel(extent: int, work: int) -> bool:
    """Whether a kernel's parallel loop is shared among the threads, or run by one: a
    launch alone and a kernel of a native program (runtime/program.py) alike."""
    return work >= PARALLEL_MIN_WORK and extent > 1


_RUN = ctypes.CFUNCTYPE(  # (pool, fn, threads, extent, least and most iterations per chunk)
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
)
NO_LIMIT = 1 << 62  # a chunk size no loop reaches
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
        self.runner = None  # the jobs of the thread that runs interruptible runs

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
            t = forksafe.Thread(
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

    def run(
        self,
        address: int,
        threads: int,
        extent: int,
        ptrs,
        least: int = 1,
        most: int = NO_LIMIT,
        interruptible: bool = False,
    ) -> bool:
        """Run the function at `address` on `threads` threads, the first this one: over
        chunks of range(extent) they claim, `least` to `most` iterations each, as
        fn(start, end, *ptrs, cancel), or once each as fn(t, threads, *ptrs, cancel) when
        extent is -1 (a program); `cancel` is the cancel word's address, which a kernel
        reads only if it takes it (pipeline/llvm.py), and a program always. False (and
        nothing run) if another thread is using the workers or the function takes more
        arguments than the pool passes.
        `interruptible`: run on a thread of its own while this one (the main thread)
        waits in Python, so that Ctrl-C cancels the run (see the module's docstring)."""
        program = extent < 0
        if len(ptrs) + program > native.MAX_ARGS or not self.lock.acquire(blocking=False):
            return False
        try:
            helpers = threads - 1
            if self.words is None or len(self.workers) < helpers:
                self.ensure(helpers)
                self.place(helpers)
            self.args[: len(ptrs)] = ptrs
            if len(ptrs) < native.MAX_ARGS:  # (a program always has the room: see above)
                self.args[len(ptrs)] = self.address + 8 * native.Layout.CANCEL
            job = (address, threads, extent, least, most)
            if interruptible:
                self._run_interruptible(job)
            else:
                self._run_job(job)
            return True
        finally:
            self.lock.release()

    def _run_job(self, job: tuple) -> None:
        helpers = job[1] - 1
        while self._run(self.address, *job):
            self.place(helpers)  # the caller moved to another CPU: move the workers

    def _run_interruptible(self, job: tuple) -> None:
        """`_run_job` on the pool's runner thread; this thread waits in Python, where the
        SIGINT handler runs. If the wait raises, cancel the run, wait for it to stop, and
        raise.

        The runner starts the job only under `gate`, unless this thread has given it up
        there first: an exception raised while the thread is being started leaves no
        run behind that writes into buffers the caller is about to free."""
        gate, done = forksafe.Lock(), forksafe.Event()
        state = {"begun": False, "abandoned": False}

        def run():
            with gate:
                if state["abandoned"]:
                    return
                state["begun"] = True
            try:
                self._run_job(job)
            finally:
                done.set()

        def settle():  # after an exception: no run, or the cancelled run has returned
            with gate:
                state["abandoned"] = True
            if state["begun"]:
                done.wait()

        try:
            if self.runner is None:
                self.runner = queue.SimpleQueue()
                forksafe.Thread(
                    target=_serve, args=(self.runner,), daemon=True, name="fusegrad-runner"
                ).start()
            self.runner.put(run)
            while not done.wait(WAIT_SLICE_S):  # (a signal another thread took shows here)
                pass
        except BaseException:
            self.words[native.Layout.CANCEL] = 1
            _through_signals(settle)
            self.words[native.Layout.CANCEL] = 0
            raise


def _serve(jobs: queue.SimpleQueue) -> None:
    """The runner thread: call each function put in `jobs`, for good (a daemon thread
    that waits on the queue costs nothing; starting one per run costs 0.1 ms)."""
    while True:
        jobs.get()()


def _through_signals(wait) -> None:
    """Call `wait` until it returns: a cancelled run stops within milliseconds, but its
    threads still write into buffers the caller owns. A second Ctrl-C meanwhile is
    dropped; the first is already on its way."""
    while True:
        try:
            wait()
            return
        except BaseException:  # (see the docstring)
            continue


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


def run_threads(program, threads: int, args: list[int], work: int = 0) -> None:
    """Call program(tid, n, *args, cancel) once on each of n threads (this one is tid 0):
    n is `threads`, or 1 when another Python thread is using the pool (the call then runs
    here alone, never cancelled). `program` is a CompiledKernel; `work`, its kernels'
    inner iterations in all, tells whether Ctrl-C may interrupt it (`LONG_WORK`)."""
    long = _interruptible(work)
    if not long and _ctrl_c.arm(work):
        with _ctrl_c:
            if threads <= 1 or not _POOL_OK or not _pool.run(program.address, threads, -1, args):
                program.fn(0, 1, *args, _ctrl_c.cancel_address)
        if _ctrl_c.take_stale():  # cancelled by a Ctrl-C already raised: again, whole
            program.fn(0, 1, *args, _NEVER_CANCELLED)
    elif (threads <= 1 and not long) or not _POOL_OK:
        program.fn(0, 1, *args, _NEVER_CANCELLED)
    elif not _pool.run(program.address, threads, -1, args, 1, NO_LIMIT, long):
        program.fn(0, 1, *args, _NEVER_CANCELLED)


def launch(kernel, extent: int, work: int, ptrs: list[int]) -> None:
    """Run `kernel` (a CompiledKernel) over range(extent) of its parallel loop; `work` is
    its total inner iterations. A kernel run through a generic kernel is given its
    literals after the buffers (`CompiledKernel.lits`)."""
    if kernel.lits is not None:
        ptrs = [*ptrs, kernel.lits_address]
    if work < PARALLEL_MIN_WORK and work < WATCHED_WORK and work < LONG_WORK:
        # a small kernel (most of a step's): one thread, not watched, not interruptible, so
        # whole here, without the checks below (each of them would say so)
        _run_whole(kernel, extent, ptrs, kernel.arity > len(ptrs))
        return
    threads = (
        min(config.threads, extent, native.MAX_WORKERS + 1) if runs_parallel(extent, work) else 1
    )
    # a run can stop early between chunks, and inside an iteration if the kernel reads
    # the cancel word as it goes (it takes the word's address after its buffers)
    polls = kernel.arity > len(ptrs)
    stops = (extent > 1 or polls) and kernel.arity <= native.MAX_ARGS
    long = _interruptible(work) and stops
    if not long and stops and _POOL_OK and _ctrl_c.arm(work):
        least, most = chunk_least(extent, work), chunk_most(extent, work)
        with _ctrl_c:  # (one thread too: its chunks are claimed, so it can stop)
            ran = _pool.run(kernel.address, max(threads, 1), extent, ptrs, least, most)
        if ran and not _ctrl_c.take_stale():
            return
        # the pool was busy, or a Ctrl-C already raised cancelled the run: here, whole
        _run_whole(kernel, extent, ptrs, polls)
        return
    if (
        (threads <= 1 and not long)
        or not _POOL_OK
        or kernel.arity > native.MAX_ARGS
        or not _pool.run(
            kernel.address,
            threads,
            extent,
            ptrs,
            chunk_least(extent, work),
            chunk_most(extent, work),
            long,
        )
    ):
        _run_whole(kernel, extent, ptrs, polls)


def _run_whole(kernel, extent: int, ptrs: list[int], polls: bool) -> None:
    """Run `kernel` over its whole loop on this thread, never cancelled."""
    if polls:
        kernel.fn(0, extent, *ptrs, _NEVER_CANCELLED)
    else:
        kernel.fn(0, extent, *ptrs)


def _interruptible(work: int) -> bool:
    """Whether a run of `work` inner iterations is long enough to be worth making
    interruptible, and runs on the main thread (the only one Python signals reach)."""
    return work >= LONG_WORK and threading.current_thread() is threading.main_thread()


def chunk_least(extent: int, work: int) -> int:
    """The fewest iterations of a kernel's parallel loop a chunk claimed by one thread
    holds: enough for native.CHUNK_MIN_WORK inner iterations."""
    return max(1, -(-extent * native.CHUNK_MIN_WORK // max(work, 1)))


def chunk_most(extent: int, work: int) -> int:
    """The most iterations a chunk holds: about native.CHUNK_MAX_WORK inner iterations
    (but never fewer than `chunk_least`), so that a cancelled run stops soon."""
    return max(chunk_least(extent, work), extent * native.CHUNK_MAX_WORK // max(work, 1))


class _CtrlC:
    """SIGINT during a run on the main thread shorter than LONG_WORK: a thread reads the
    byte Python's C-level handler writes to the wakeup pipe and, while such a run is on
    (`with _ctrl_c:`), sets the cancel words; the run returns early, and leaving the
    `with` raises the KeyboardInterrupt (see the module's docstring)."""

    def __init__(self):
        self.fd = None  # the pipe's write end, once armed; -1: someone else's pipe
        self.lock = forksafe.Lock()
        self.running = False
        self.hit = False
        self.stale = False  # the last run was cancelled by a Ctrl-C Python had raised already
        self.cancel = np.zeros(1, dtype=np.int64)  # a program run alone reads this one
        self.cancel_address = self.cancel.ctypes.data

    def arm(self, work: int) -> bool:
        """Whether a run of `work` inner iterations here can be watched (then it must be
        run inside `with self:`)."""
        if work < WATCHED_WORK or threading.current_thread() is not threading.main_thread():
            return False
        if _getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False  # a handler of the user's may not raise: cancel nothing
        if self.fd is None:
            r, w = os.pipe()
            os.set_blocking(w, False)
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            if old != -1:  # asyncio's, or the user's: leave it alone, for good
                signal.set_wakeup_fd(old)
                os.close(r), os.close(w)
                self.fd = -1
                return False
            self.fd = w
            forksafe.Thread(
                target=self._read, args=(r,), daemon=True, name="fusegrad-sigint"
            ).start()
        # (should someone replace the pipe later, no byte comes, and nothing is cancelled)
        return self.fd >= 0

    def _read(self, r: int) -> None:
        while True:
            try:
                got = os.read(r, 512)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            if not got:
                return
            if signal.SIGINT in got:
                with self.lock:
                    if self.running:
                        self.hit = True
                        self.cancel[0] = 1
                        if _pool.words is not None:
                            _pool.words[native.Layout.CANCEL] = 1

    def __enter__(self):
        with self.lock:
            self.running, self.hit = True, False

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.running = False
            hit, self.hit = self.hit, False
            if hit:
                self.cancel[0] = 0
                if _pool.words is not None:
                    _pool.words[native.Layout.CANCEL] = 0
        if hit and exc[0] is None:  # the outputs are incomplete: raise here, not later
            ctypes.pythonapi.PyErr_CheckSignals()  # Python's handler: KeyboardInterrupt
            # No signal was pending: Python raised this Ctrl-C's KeyboardInterrupt before the
            # run (a long run polls for it; code between runs takes it), and the byte it wrote
            # reached the reading thread late, starved on a loaded machine. Raising again would
            # make one Ctrl-C two KeyboardInterrupts (the second one outside the user's
            # `except`): the caller runs the work again, whole (`take_stale`; every kernel
            # writes its own outputs, so a second run computes the same values).
            self.stale = True

    def take_stale(self) -> bool:
        """Whether the last run was cancelled by a Ctrl-C already raised (and must run again);
        the flag is cleared."""
        stale, self.stale = self.stale, False
        return stale


_ctrl_c = _CtrlC()
# the handler as the C function returns it: `signal.getsignal` also turns an int into an
# enum member (a Python call that took ~1.6 us of every run); a handler object is the same
_getsignal = getattr(_signal, "getsignal", signal.getsignal)


@forksafe.at_fork
def _no_ctrl_c_watch_after_fork() -> None:
    """The reading thread is gone in a child: its pipe would fill, and nobody cancel."""
    global _ctrl_c
    if _ctrl_c.fd is not None and _ctrl_c.fd >= 0:
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:  # pragma: no cover - forked from another thread
            pass
    _ctrl_c = _CtrlC()


_POOL_OK = native.available() and _sched_getcpu is not None  # (the pool checks the CPU)
# the cancel word of a program run alone, outside the pool: never set
_never = np.zeros(1, dtype=np.int64)
_NEVER_CANCELLED = _never.ctypes.data
