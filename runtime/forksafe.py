"""Locks and process-wide state that a forked child starts afresh.

`os.fork()` copies the memory of every thread but keeps only the one that forked: a
lock another thread held at that moment stays held in the child for ever, and the
child's next `with lock:` never returns (DataLoader workers fork while the parent's
threads compute). So every lock fusegrad makes comes from here, and is made free again
in the child:

>>> from fusegrad.runtime import forksafe
>>> _lock = forksafe.Lock()          # instead of threading.Lock()
>>> @forksafe.at_fork
... def _forget_workers():           # state the child must rebuild: called in the child
...     pass

Locks whose data may be mid-change at the fork take one more step: an
`RLock(held_across_fork=True)` is acquired before the fork (by the forking thread, so
the fork waits until the data is whole) and released after it. The compile lock is
one: LLVM must not be forked halfway through adding a kernel to an engine; llvmlite's
lock around every LLVM call is taken after it (`hold_across_fork`), since some calls
(the host's features) are made outside a compile.

Thread-locals need nothing: the child's one thread keeps its own values, and the other
threads' are gone with them. Caches that only the GIL guards (`functools.lru_cache`,
dicts) cannot be copied mid-change: the forking thread holds the GIL.

`ir/` imports nothing of the runtime, so its module-level locks are tracked from here.

Other libraries' threads are another matter: a fork while a user's thread is inside a
numpy matmul shuts OpenBLAS's pool down under it (OpenBLAS's own fork handler), and that
matmul, and every later one in the process, waits for ever. fusegrad therefore forks
(to compile, `pipeline/compiler.py`) only while `may_fork()`: no Python thread runs but the
caller and fusegrad's own, which are made by `Thread` (or declared by `own`) and call into
no other library.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable

from ..ir import macro, sites, steering

_locks: weakref.WeakSet = weakref.WeakSet()  # made free again in a child
_resets: list[Callable[[], None]] = []  # run in a child, in the order registered
_held: list = []  # acquired before a fork, released after it
_threads: weakref.WeakSet = weakref.WeakSet()  # fusegrad's own threads (`Thread`)


def track(lock):
    """Make `lock` (a Lock, RLock, Condition or Event) free again in a forked child."""
    _locks.add(lock)
    return lock


def tracked(lock) -> bool:
    """Whether a forked child gets `lock` free."""
    return lock in _locks


def Lock() -> threading.Lock:
    """A `threading.Lock` that a forked child gets unlocked."""
    return track(threading.Lock())


def RLock(held_across_fork: bool = False) -> threading.RLock:
    """A `threading.RLock` that a forked child gets unlocked. `held_across_fork`: the
    forking thread also waits for it and holds it through the fork, so whatever it guards
    is never copied into a child mid-change (re-entrant, so a thread that holds it may
    fork)."""
    lock = track(threading.RLock())
    if held_across_fork:
        _held.append(lock)
    return lock


def hold_across_fork(lock) -> None:
    """Have the forking thread take `lock` (a Lock or RLock made elsewhere: a library's)
    before every fork, after the locks held so far, and give a child it free. For a lock
    that code holding one of those takes inside them (llvmlite's lock around every call
    into LLVM, inside the compile lock): so no fork copies LLVM mid-call, whichever
    thread is in it."""
    track(lock)
    _held.append(lock)


def Event() -> threading.Event:
    """A `threading.Event` whose lock a forked child gets free (it keeps its flag)."""
    return track(threading.Event())


def Thread(**kwargs) -> threading.Thread:
    """A `threading.Thread` (same arguments) that runs only fusegrad's code (the worker
    pool, the Ctrl-C watch, the profiler's sampler): one `may_fork` forks beside."""
    return own(threading.Thread(**kwargs))


def own(thread: threading.Thread | None = None) -> threading.Thread:
    """Count `thread` (the calling one by default) as fusegrad's for `may_fork`: one whose
    work no fork breaks, since it calls into no library with fork handlers of its own (no
    numpy matmul, no OpenMP). A pool's initializer, for threads that only wait on other
    processes: `ThreadPoolExecutor(initializer=forksafe.own)`."""
    thread = thread or threading.current_thread()
    _threads.add(thread)
    return thread


def _only_sleeps(thread: threading.Thread) -> bool:
    """A library's thread that only sleeps and looks at Python objects, which no fork
    breaks: tqdm's monitor of its progress bars (`tqdm.tqdm.monitor_interval`), started by
    the first bar a program draws (fusegrad's own, or the user's)."""
    kind = type(thread)
    return kind.__name__ == "TMonitor" and kind.__module__.startswith("tqdm")


def may_fork() -> bool:
    """Whether this process may fork now without leaving another thread's library
    broken: no thread runs Python (or native code called from Python, such as a numpy
    matmul) but the calling one and fusegrad's own (`Thread`): False while a user's
    data-loading or metrics thread lives, even idle, since it may call into numpy at
    any moment. A native thread that never entered Python (a C library's own) is not
    seen."""
    # (alive: an ended thread's ident is given to the next one started)
    own = {thread.ident for thread in _threads if thread.is_alive()}
    own |= {thread.ident for thread in threading.enumerate() if _only_sleeps(thread)}
    me = threading.get_ident()
    return all(ident == me or ident in own for ident in sys._current_frames())


def at_fork(reset: Callable[[], None]) -> Callable[[], None]:
    """Call `reset()` in every forked child (after its locks are free again); a
    decorator."""
    _resets.append(reset)
    return reset


def _before() -> None:
    for lock in _held:
        lock.acquire()


def _after_in_parent() -> None:
    for lock in reversed(_held):
        lock.release()


def _after_in_child() -> None:
    for lock in list(_locks):
        lock._at_fork_reinit()  # what the standard library does for its own locks
    for reset in _resets:
        reset()


# the ir's own locks (the sites table, macro expansion, steering requests): ir imports
# nothing of the runtime, so the runtime tracks them
for _lock in (sites._sweeping, macro._lock, steering._lock):
    track(_lock)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
