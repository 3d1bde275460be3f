"""The launcher's watcher: one rank runs as its child, and a rank that ends without a word
is named, with its exit code or signal.

A rank that leaves through Python (`sys.exit`, SystemExit, Ctrl-C, the end of its
script, an uncaught exception) tells the other ranks how and with which code
(exits.py, liveness.py). One that ends without running any Python, by
`os._exit(7)`, a signal (the kernel's OOM killer's SIGKILL) or a crash in native
code, cannot; mpiexec then ends the job, but names the rank `[[4711,1],1]` and,
for `os._exit(0)`, not the code at all. Only a parent learns how a process ended,
so `python -m fusegrad.distributed.run` starts each rank as

    python .../fusegrad/distributed/watch.py script.py args...

which runs `python script.py args...` as its child, forwards the signals mpiexec
sends it, and once the child ends, unless the rank said it was leaving (a byte
on the pipe named by FUSEGRAD_WATCH_FD, written by `tell_watcher`), prints

    [fusegrad.distributed] rank 1 (pid 4242) ended without leaving the process group:
    exit code 7 (os._exit(7), or a crash in native code); the job ends

then ends the same way (the code, or the signal), for mpiexec to see. It is run
as a file, so it imports nothing of fusegrad; the child dies with it (Linux's
parent-death signal) if mpiexec kills it outright.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

ENV = "FUSEGRAD_WATCH_FD"
# what the rank writes: joined a group, leaving it through Python, aborting (and printed why)
JOINED, LEAVING, ABORTING = b"j", b"l", b"a"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _notice_fd() -> int | None:
    """The pipe to this rank's watcher, if it has one; taken out of the environment so that
    the rank's own subprocesses do not write to an unrelated descriptor of that number."""
    value = os.environ.pop(ENV, None)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


_fd = _notice_fd()
_pid = os.getpid()  # a forked child of the rank is not the rank


def tell_watcher(word: bytes) -> None:
    """Tell this rank's watcher, if it has one, what the rank is doing (one byte)."""
    if _fd is None or os.getpid() != _pid:
        return
    try:
        os.write(_fd, word)
    except OSError:  # no watcher any more: nobody to tell
        pass


def _rank() -> str:
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if name in os.environ:
            return os.environ[name]
    return "?"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)  # the rank's forked children may hold the pipe open
    words = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return words
        if not chunk:
            return words
        words += chunk


def describe_end(rank: str, pid: int, status: int) -> str:
    """How a rank ended without a word, from its wait status (negative: a signal).

    >>> describe_end("1", 42, 7)[:78]
    'rank 1 (pid 42) ended without leaving the process group: exit code 7 (os._exit'
    """
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "?"
        how = f"killed by signal {-status} ({name}; no exit message: killed, or crashed?)"
    else:
        how = f"exit code {status} (os._exit({status}), or a crash in native code)"
    return f"rank {rank} (pid {pid}) ended without leaving the process group: {how}"


def main(argv: list[str]) -> int:
    """Run `python *argv` as this rank; return (or die by) what it ended with."""
    r, w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, *argv],
        env={**os.environ, ENV: str(w)},
        pass_fds=(w,),
        preexec_fn=_die_with_parent,
    )
    os.close(w)
    from_outside: list[int] = []  # signals mpiexec (or the user) sent: the job is ending

    def forward(sig, _frame):
        from_outside.append(sig)
        try:
            child.send_signal(sig)
        except OSError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    status = child.wait()
    words = _read_all(r)
    said = LEAVING in words or ABORTING in words
    # (a rank that ends by its own KeyboardInterrupt leaves through Python, then SIGINT)
    quiet = from_outside or (said and (status >= 0 or status == -signal.SIGINT))
    if JOINED in words and not quiet:
        sys.stderr.write(f"[fusegrad.distributed] {describe_end(_rank(), child.pid, status)}; ")
        sys.stderr.write("the job ends\n")
        sys.stderr.flush()
    if status < 0:  # end as the rank did (SIGKILL's disposition is already the default)
        if -status != signal.SIGKILL:
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
