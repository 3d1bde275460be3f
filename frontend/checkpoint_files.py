"""What the two checkpoint formats share: `fg.save`'s own file and `nn.Module.save`'s `.npz`.

Both are written through `write_atomically`: a reader of the path sees the old file
or the new one, never a part, not while another process saves to the same path and
not after a save that failed half way (a full disk), which leaves the old file as it
was. Both hold only `PLAIN_DTYPES`, and a malformed file of either raises
`SerializationError` when loaded.

>>> import os, tempfile
>>> from fusegrad.checkpoint_files import write_atomically
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

from .errors import FusegradError

# plain numeric dtypes only: an object dtype could not be read safely, so it is never accepted
PLAIN_DTYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
    }
)


class SerializationError(FusegradError, RuntimeError):
    """A checkpoint that is not a complete, well-formed file of its format: truncated,
    altered, or crafted (a RuntimeError, as torch.load's for a damaged archive)."""


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
