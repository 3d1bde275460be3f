"""`nn.save` / `nn.load` (and `Module.save` / `Module.load`): a state dict as an `.npz`
archive, one `.npy` entry per dotted name, as `np.savez` writes it.

Saving replaces the file at once, as `fg.save` does: a save that fails half way (a
full disk) leaves the old checkpoint whole. Loading reads the zip itself rather than
through `np.load`, so that a crafted archive costs no more memory than the arrays it
should hold: each entry's declared size is checked before a byte of it is
decompressed, against the model's own array of that name (`Module.load`) or, with no
model, against its compressed size (at most 100 times it); then exactly the bytes its
`.npy` header declares are read, so an entry that lies about its size cannot
decompress more. A malformed archive raises `fg.SerializationError`.

>>> import os, tempfile
>>> import fusegrad as fg
>>> from fusegrad import nn
>>> path = os.path.join(tempfile.mkdtemp(), "net")
>>> nn.save({"w": fg.ones(2)}, path)  # writes net.npz, as numpy would
>>> nn.load(path)["w"].tolist()
[1.0, 1.0]
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections import OrderedDict

import numpy as np

from ..nnapi import (
    PLAIN_DTYPES,
    FusegradError,
    SerializationError,
    Tensor,
    from_numpy,
    write_atomically,
)

# bytes an entry's .npy header may take (numpy's own reader refuses more than 10,000)
_NPY_HEADER_BYTES = 10_000 + 16
# the widest plain dtype: a checkpoint's array may be float64 for a float32 model
# (load_state_dict casts), so its entry may hold 8 bytes per element of the model's
_WIDEST_ITEM = 8
# with no model to size entries by, an entry may decompress to at most this many times
# its compressed size (np.savez stores entries uncompressed: 1 time; deflated float
# weights shrink little; only long runs of zeros compress further)
_MAX_RATIO = 100


def save(state: dict, path) -> None:
    """Save a dict of tensors (a `state_dict`) as an `.npz` archive (numpy adds the
    suffix), replacing the file at once: a failed save leaves the old one whole.
    `path` may also be a binary file object, written where it stands."""
    arrays = {k: v.numpy() if isinstance(v, Tensor) else np.asarray(v) for k, v in state.items()}
    if hasattr(path, "write"):  # a file object, as np.savez takes
        np.savez(path, **arrays)
        return
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"  # as np.savez does for a path
    write_atomically(path, lambda out: np.savez(out, **arrays))


def load(path, like: dict | None = None) -> OrderedDict:
    """Read an `.npz` archive written by `save` into a dict of tensors.

    With `like` (a state dict: `Module.load` passes the module's own), each entry may
    hold at most an array of its namesake's shape, and an entry `like` has no name
    for is listed with the value None, never decompressed (`load_state_dict` only
    names such keys). `path` may be a binary file object that can seek. A malformed or
    oversized archive raises `fg.SerializationError`.
    """
    if hasattr(path, "read"):  # a file object, as np.load takes
        here = path.tell()
        archive_size = path.seek(0, os.SEEK_END) - here
        path.seek(here)
    else:
        path = os.fspath(path)
        if not os.path.exists(path) and os.path.exists(path + ".npz"):
            path += ".npz"
        archive_size = os.path.getsize(path)
    out = OrderedDict()
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
            names = [_key(info.filename) for info in entries]
            if len(set(names)) != len(names):
                _bad(path, "two of its entries have the same name")
            for key, info in zip(names, entries):
                if like is not None and key not in like:
                    out[key] = None
                    continue
                expected = None if like is None else like[key]
                limit = _entry_limit(info, expected, archive_size)
                if info.file_size > limit:
                    _bad(path, _oversized(key, info.file_size, limit, expected))
                with archive.open(info) as stream:
                    array = _read_npy(stream, info.file_size, key, path)
                try:
                    out[key] = from_numpy(array)
                except FusegradError as e:
                    _bad(path, f"entry {key!r} cannot be a tensor: {e}")
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        _bad(path, f"its zip archive is damaged or unsupported ({e})")
    except RuntimeError as e:
        if isinstance(e, SerializationError):
            raise
        _bad(path, f"it cannot be read ({e})")  # zipfile: an encrypted entry
    return out


def _bad(path, why: str):
    raise SerializationError(f"nn.load: {path} is not a valid .npz checkpoint: {why}")


def _key(filename: str) -> str:
    return filename[: -len(".npy")] if filename.endswith(".npy") else filename


def _entry_limit(info: zipfile.ZipInfo, expected, archive_size: int) -> int:
    """The most bytes entry `info` may decompress to: an .npy header and an array of
    `expected`'s shape in the widest dtype, or, with no `expected`, 100 times the
    compressed bytes (which cannot be more than the archive)."""
    if expected is not None:
        return _NPY_HEADER_BYTES + math.prod(expected.shape) * _WIDEST_ITEM
    return _MAX_RATIO * min(info.compress_size, archive_size) + _NPY_HEADER_BYTES


def _oversized(key: str, size: int, limit: int, expected) -> str:
    if expected is None:
        return (
            f"entry {key!r} declares {size} bytes, more than {_MAX_RATIO} times its compressed "
            "size (a zip bomb?); load it into its module with Module.load, which sizes "
            "each entry by the module's arrays"
        )
    return (
        f"entry {key!r} declares {size} bytes, more than any array of the model's shape "
        f"{tuple(expected.shape)} takes ({limit} bytes at most): a zip bomb, or another "
        "model's checkpoint"
    )


def _read_npy(stream, declared: int, key: str, path) -> np.ndarray:
    """The array of one `.npy` entry, whose header must account for exactly the
    `declared` bytes: no more than those are read, whatever the stream would give."""
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            _bad(path, f"entry {key!r} is .npy version {version}, not 1.0 or 2.0")
    except ValueError as e:
        _bad(path, f"entry {key!r} has no valid .npy header ({e})")
    if dtype.hasobject or dtype.name not in PLAIN_DTYPES:
        _bad(path, f"entry {key!r} has dtype {dtype}, not a plain numeric dtype")
    if any(s < 0 for s in shape):
        _bad(path, f"entry {key!r} has a negative dimension {shape}")
    nbytes = math.prod(shape) * dtype.itemsize
    if stream.tell() + nbytes != declared:
        _bad(
            path,
            f"entry {key!r} declares {declared} bytes, but its header and an array of shape "
            f"{shape} and dtype {dtype} take {stream.tell() + nbytes}",
        )
    array = np.empty(shape[::-1] if fortran else shape, dtype)
    view = memoryview(array.reshape(-1).view(np.uint8))
    done = 0
    while done < nbytes:
        chunk = stream.read(min(nbytes - done, 1 << 20))
        if not chunk:
            _bad(path, f"entry {key!r} ends {nbytes - done} bytes before its array does")
        view[done : done + len(chunk)] = chunk
        done += len(chunk)
    if stream.read(1):
        _bad(path, f"entry {key!r} holds more bytes than it declares")
    array = array.T if fortran else array
    return array.astype(dtype.newbyteorder("="), copy=False)
