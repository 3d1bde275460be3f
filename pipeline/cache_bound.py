"""The disk cache's bound: FUSEGRAD_CACHE_LIMIT megabytes (default 4096; 0: no bound).

Every file in FUSEGRAD_CACHE can be made again: an object file, a lowered kernel, a plan,
a cubin, an emulator library. So the folder is kept under its bound by dropping the
entries used least recently. A read refreshes an entry's time (`used`, at most once an
hour per file, so a warm start costs no more writes than that), and a process that writes
to the folder looks at its size (`wrote`) on a thread of its own:

- at its first write, if no look has ended in the last hour (the stamp file's time,
  written when a look is done, so one cut short by its process's end is taken up again);
- again each time it has written an eighth of the bound since it last looked.

Looking walks the folder (about a second for half a million files, on a low-priority
thread). Over the bound, the least recently used entries go until the folder is at three
quarters of it; an entry used or written in the last ten minutes stays, so a plan being
read now never loses its kernels. A file another process is reading when it goes is a
miss there, compiled again (every reader checks its entry's seal anyway).

The autotuner's choices (`autotune/`, a few kilobytes) and the CUDA emulator's runtime
library and precompiled header are never dropped. Unfinished
temporary files older than an hour (a process killed while writing) go at every look.

`trim(folder, limit)` does one look at once, for tests and for `python -m fusegrad cache`.
"""

from __future__ import annotations

import os
import threading
import time

from ..runtime import forksafe
from ..runtime.config import config

STAMP = ".last-trim"  # the time a process last looked at the folder's size
KEEP = ("autotune",)  # folders never trimmed
# the emulator's runtime library and precompiled header (cuda_emu/), loaded by path
# once per process: kept, as the autotuner's choices are (a few megabytes)
KEEP_PREFIXES = ("runtime-", "pch-")
REFRESH_SECONDS = 3600.0  # a read refreshes its entry's time once this old
LOOK_SECONDS = 3600.0  # a process's first write looks if no one looked for this long
RECENT_SECONDS = 600.0  # an entry this recent is never dropped
TARGET = 0.75  # a trim leaves the folder at this share of its bound

_written = 0  # bytes this process wrote since it last looked
_looked = False  # whether this process has considered looking yet
_thread = None  # the trimming thread while it may run
_lock = forksafe.Lock()
_main_pid = os.getpid()  # (a forked child leaves the looking to its parent)


@forksafe.at_fork
def _forget() -> None:
    global _written, _thread
    _written, _thread = 0, None


def limit_bytes() -> int:
    """The bound in bytes (0: none)."""
    return max(0, config.cache_limit_mb) * 1024 * 1024


def used(fd: int) -> None:
    """An entry was just read through the open file `fd`: make its time now if it is an hour old, so
    that trimming keeps what is being used."""
    try:
        if time.time() - os.fstat(fd).st_mtime > REFRESH_SECONDS:
            os.utime(fd)
    except OSError:
        pass  # (a read-only folder: its entries are never trimmed by this process)


def touched(path: str) -> None:
    """`used` for an entry read by path (the emulator's libraries, loaded by the loader)."""
    try:
        if time.time() - os.stat(path).st_mtime > REFRESH_SECONDS:
            os.utime(path)
    except OSError:
        pass


def wrote(nbytes: int) -> None:
    """This process wrote `nbytes` into the cache folder: look at its size if it is time."""
    global _written, _looked, _thread
    limit = limit_bytes()
    folder = config.cache
    if not limit or not folder or os.getpid() != _main_pid:
        return
    with _lock:
        _written += nbytes
        if _thread is not None and _thread.is_alive():
            return
        first = not _looked
        _looked = True
        if first:
            try:
                if time.time() - os.stat(os.path.join(folder, STAMP)).st_mtime < LOOK_SECONDS:
                    return
            except OSError:
                pass  # never looked
        elif _written < limit // 8:
            return
        _written = 0
        _thread = forksafe.Thread(
            target=_look, args=(folder, limit), name="fusegrad-cache-trim", daemon=True
        )
        _thread.start()


def _look(folder: str, limit: int) -> None:
    try:  # below the program's own threads: the walk is bookkeeping
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError):
        pass
    try:
        trim(folder, limit)
    except OSError:
        pass  # a folder that cannot be walked or written: it stays as it is


def trim(folder: str, limit: int) -> tuple[int, int]:
    """Drop the least recently used entries of `folder` until it holds at most
    `TARGET * limit` bytes, if it holds more than `limit`; returns (bytes before, bytes
    after). Temporary files older than an hour go whatever the size."""
    now = time.time()
    entries: list[tuple[float, int, str]] = []
    total = 0
    for path, st in _files(folder):
        if path.endswith(".tmp"):
            if now - st.st_mtime > REFRESH_SECONDS:
                _remove(path)
            continue
        total += st.st_size
        entries.append((st.st_mtime, st.st_size, path))
    before = total
    if total > limit:
        entries.sort()
        goal = int(limit * TARGET)
        for mtime, size, path in entries:
            if total <= goal or now - mtime < RECENT_SECONDS:
                break
            if _remove(path):
                total -= size
    # stamped once done: a look cut short (its process ended: the thread is a daemon) is
    # taken up by the next process that writes
    try:  # (its time says when; its text too, for a reader of the folder)
        with open(os.path.join(folder, STAMP), "w") as f:
            f.write(time.strftime("%Y-%m-%d %H:%M:%S\n", time.localtime(now)))
    except OSError:
        pass
    return before, total


def _files(folder: str):
    """(path, stat) of every file under `folder` but the stamp and the kept folders."""
    stack = [folder]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as it:
                for entry in it:
                    if entry.name.startswith(KEEP_PREFIXES):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        if not (here == folder and entry.name in KEEP):
                            stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and entry.name != STAMP:
                        try:
                            yield entry.path, entry.stat(follow_symlinks=False)
                        except OSError:
                            pass  # gone meanwhile
        except OSError:
            pass


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
