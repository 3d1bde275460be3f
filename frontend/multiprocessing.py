"""`torch.multiprocessing` for fusegrad: Python's multiprocessing, processes started by fork,
and `spawn` (torch's helper that starts `nprocs` processes running `fn(i, *args)`).

A tensor moved into shared memory (`share_memory_()`, `Module.share_memory()`) is shared
with the processes started here: Hogwild training (pytorch/examples' mnist_hogwild), each
process's optimizer steps landing in the one copy (frontend/shared_memory.py).

Where fusegrad differs on purpose: every process starts by **fork**. torch pickles its
shared tensors to a spawned child as handles to their memory; a forked child maps the
same memory (and everything else the parent had), so `set_start_method("spawn")`,
`get_context("spawn")` and `spawn(..., start_method="spawn")` fork too, saying so once in
a warning. A spawned child would import the script again without the `python -m
fusegrad` import hook, its `import torch` reaching a real torch or nothing.

>>> import fusegrad.multiprocessing as mp
>>> mp.get_start_method()
'fork'
"""

from __future__ import annotations

import multiprocessing as _mp
import warnings
from collections.abc import Callable

from .errors import FusegradError

START_METHOD = "fork"
_warned = False


def _forking(method: str | None) -> None:
    """Check `method` (a start method asked for) and warn once where it is not fork."""
    global _warned
    if START_METHOD not in _mp.get_all_start_methods():
        raise NotImplementedError(
            "fusegrad.multiprocessing starts processes by fork, which this platform lacks"
        )
    if method is None or method == START_METHOD:
        return
    if method not in _mp.get_all_start_methods():
        raise ValueError(f"cannot find context for {method!r}")
    if not _warned:
        _warned = True
        warnings.warn(
            f"fusegrad.multiprocessing: start method {method!r} runs as 'fork' (a forked "
            "child shares the parent's shared tensors, as a spawned one does under torch; "
            "see docs/TORCH_SCRIPTS.md)",
            stacklevel=3,
        )


_context = _mp.get_context(START_METHOD) if START_METHOD in _mp.get_all_start_methods() else None


def get_context(method: str | None = None):
    """The fork context (whatever `method` names: module docstring)."""
    _forking(method)
    return _context


def set_start_method(method: str | None, force: bool = False) -> None:
    """Accepted for torch's sake; processes are started by fork all the same."""
    _forking(method)


def get_start_method(allow_none: bool = False) -> str:
    return START_METHOD


def get_all_start_methods() -> list[str]:
    return [START_METHOD]


if _context is not None:
    Process = _context.Process
    Queue = _context.Queue
    SimpleQueue = _context.SimpleQueue
    JoinableQueue = _context.JoinableQueue
    Pool = _context.Pool
    Manager = _context.Manager
    Pipe = _context.Pipe
    Event = _context.Event
    Lock = _context.Lock
    RLock = _context.RLock
    Semaphore = _context.Semaphore
    BoundedSemaphore = _context.BoundedSemaphore
    Condition = _context.Condition
    Barrier = _context.Barrier
    Value = _context.Value
    Array = _context.Array
cpu_count = _mp.cpu_count
current_process = _mp.current_process
active_children = _mp.active_children
parent_process = _mp.parent_process
TimeoutError = _mp.TimeoutError  # noqa: A001 (multiprocessing's name)
ProcessError = _mp.ProcessError


class ProcessRaisedException(FusegradError, RuntimeError):
    """A process started by `spawn` ended with an exception (its traceback in the message)."""

    def __init__(self, msg: str, error_index: int, error_pid: int):
        super().__init__(msg)
        self.error_index, self.error_pid = error_index, error_pid


class ProcessExitedException(FusegradError, RuntimeError):
    """A process started by `spawn` ended with a nonzero exit code or a signal."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int):
        super().__init__(msg)
        self.error_index, self.error_pid, self.exit_code = error_index, error_pid, exit_code


def _run(fn: Callable, i: int, args: tuple, errors) -> None:
    import traceback

    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except BaseException:
        errors.put((i, traceback.format_exc()))
        raise SystemExit(1) from None


class ProcessContext:
    """The processes `spawn(..., join=False)` started: `join()` waits for them and raises
    for the first that failed."""

    def __init__(self, processes: list, errors):
        self.processes, self._errors = processes, errors

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for every process (up to `timeout` seconds each); True once all have ended
        well. A process that failed: the others are stopped and its error raised."""
        for p in self.processes:
            p.join(timeout)
        failed = [(i, p) for i, p in enumerate(self.processes) if p.exitcode not in (None, 0)]
        if failed:
            for p in self.processes:
                if p.is_alive():
                    p.terminate()
            i, p = failed[0]
            reported = {}
            while not self._errors.empty():
                index, text = self._errors.get()
                reported[index] = text
            if i in reported:
                raise ProcessRaisedException(
                    f"\n\n-- Process {i} terminated with the following error:\n{reported[i]}",
                    i,
                    p.pid,
                )
            raise ProcessExitedException(
                f"process {i} terminated with exit code {p.exitcode}", i, p.pid, p.exitcode
            )
        return all(p.exitcode == 0 for p in self.processes)


def start_processes(
    fn: Callable,
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
):
    """`nprocs` processes, process `i` running `fn(i, *args)`, as torch's (by fork: module
    docstring); with `join`, waits for them (raising ProcessRaisedException for one that
    raised), else returns their ProcessContext."""
    context = get_context(start_method)
    errors = context.SimpleQueue()
    processes = []
    for i in range(nprocs):
        p = context.Process(target=_run, args=(fn, i, tuple(args), errors), daemon=daemon)
        p.start()
        processes.append(p)
    done = ProcessContext(processes, errors)
    if not join:
        return done
    done.join()
    return None


def spawn(fn: Callable, args: tuple = (), nprocs: int = 1, join: bool = True,
          daemon: bool = False, start_method: str = "spawn"):  # fmt: skip
    """torch.multiprocessing.spawn: `start_processes` (by fork)."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
