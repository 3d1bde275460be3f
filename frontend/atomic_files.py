"""Files replaced all at once: `fg.save` and `nn.Module.save` write through `write_atomically`.

A reader of the path sees the old file or the new one, never a part: not while
another process saves to the same path, and not after a save that failed half
way (a full disk), which leaves the old file as it was.

>>> import os, tempfile
>>> from fusegrad.atomic_files import write_atomically
>>> path = os.path.join(tempfile.mkdtemp(), "state.bin")
>>> write_atomically(path, lambda out: out.write(b"new"))
>>> open(path, "rb").read()
b'new'
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Call `write(out)` on a new file, then put that file under `path` at once.

    The bytes go to a temporary file of a unique name in the same folder (a fixed
    `path + ".tmp"` would be shared by two writers), reach the disk (fsync), and
    then replace `path` in one rename; the folder is synced so the rename survives
    a crash. On any failure the temporary file is removed and `path` is untouched.
    """
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            if hasattr(os, "fchmod"):  # as open() would, not mkstemp's 0o600
                os.fchmod(out.fileno(), 0o666 & ~_umask())
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):  # POSIX: a folder can be opened and synced
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # some file systems cannot sync a folder (EINVAL): the file itself is on disk
            with contextlib.suppress(OSError):
                os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, for every thread)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022
