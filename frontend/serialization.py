"""`fg.save` / `fg.load`: tensors, state dicts and nested containers, with no code in the file.

A file is a plain JSON description of the object (containers, numbers,
strings, and references to arrays) followed by the arrays' raw bytes, and a
SHA-256 digest of everything before it. `load` rebuilds only those types
(no pickle, nothing is imported or called), checks every array's dtype
against a list of plain numeric ones and every length against the file, so a
truncated or altered file raises `SerializationError` instead of loading.

    MAGIC (8 bytes) | header length (8 bytes, little-endian) | header (JSON, UTF-8)
    | array bytes | SHA-256 of all the above (32 bytes)

>>> import io
>>> import fusegrad as fg
>>> buf = io.BytesIO()
>>> fg.save({"w": fg.tensor([1.0, 2.0]), "step": 3, "betas": (0.9, 0.999)}, buf)
>>> _ = buf.seek(0)
>>> state = fg.load(buf)
>>> state["w"].tolist(), state["step"], state["betas"]
([1.0, 2.0], 3, (0.9, 0.999))
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import struct
import tempfile
from collections import OrderedDict

import numpy as np

from . import core
from .creation import from_numpy
from .devices import names_host
from .errors import DeviceError, FusegradError

MAGIC = b"FGSAVE01"
PICKLE_MAGIC = b"FGPICKL1"  # a whole module, pickled (fg.save(model))
_DIGEST = 32
# plain numeric dtypes only: an object dtype could not be read safely, so it is never accepted
_DTYPES = {
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


class SerializationError(FusegradError, RuntimeError):
    """A file that is not a complete, unaltered fusegrad save file."""


def save(obj, f) -> None:
    """Write `obj` (tensors, numpy arrays, numbers, strings, None, and lists, tuples and
    dicts of them, nested) to a path or a binary file object, as torch.save. A whole
    `nn.Module` is pickled, as torch pickles it: `fg.load(f, weights_only=False)` reads it
    back (the default, weights_only=True, refuses it, as torch's does).

    >>> import fusegrad as fg, io
    >>> fg.save([fg.ones(2)], io.BytesIO())
    """
    arrays: list[np.ndarray] = []
    try:
        root = _encode(obj, arrays)
    except TypeError:
        if not _is_module(obj):
            raise
        payload = _pickled(obj)  # a whole model, as torch.save pickles it
    else:
        payload = _data_file(root, arrays)
    if hasattr(f, "write"):
        f.write(payload)
        return
    _write_atomically(os.fspath(f), payload)


def _is_module(obj) -> bool:
    # deferred: nn is the layer above (it imports the frontend, and fusegrad/__init__.py
    # loads it last); only saving a whole model asks
    from .nn.module import Module

    return isinstance(obj, Module)


def _pickled(obj) -> bytes:
    """A whole module's file: PICKLE_MAGIC, the pickle, and its SHA-256 (loaded only
    with weights_only=False, as torch: unpickling runs code)."""
    import pickle

    body = PICKLE_MAGIC + pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return body + hashlib.sha256(body).digest()


def _unpickled(raw: bytes, name, weights_only: bool):
    import pickle

    if weights_only:
        raise SerializationError(
            f"fg.load: {name} holds a whole pickled module (fg.save(model)); loading it runs "
            "code, so as torch.load it needs weights_only=False, given only for a file you "
            "trust (or save and load model.state_dict() instead)"
        )
    body, digest = raw[:-_DIGEST], raw[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        _bad(name, "its checksum does not match (the file is truncated or was altered)")
    return pickle.loads(body[len(PICKLE_MAGIC) :])


def _data_file(root, arrays: list[np.ndarray]) -> bytes:
    header = {"format": "fusegrad", "version": 1, "root": root, "arrays": []}
    blobs = []
    offset = 0
    for a in arrays:
        a = np.ascontiguousarray(a).reshape(a.shape)
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header["arrays"].append(
            {"dtype": a.dtype.name, "shape": list(a.shape), "offset": offset, "nbytes": len(data)}
        )
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, allow_nan=True).encode("utf-8")
    body = MAGIC + struct.pack("<Q", len(head)) + head + b"".join(blobs)
    return body + hashlib.sha256(body).digest()


def _write_atomically(path: str, payload: bytes) -> None:
    """Put `payload` under `path` all at once: a reader sees the old file or the new one,
    never a part, even with other processes saving to the same path at the same time.

    The bytes go to a temporary file of a unique name in the same folder (a fixed
    `path + ".tmp"` would be shared by two writers), reach the disk (fsync), and
    then replace `path` in one rename; the folder is synced so the rename survives
    a crash. On any failure the temporary file is removed.
    """
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            if hasattr(os, "fchmod"):  # as open() would, not mkstemp's 0o600
                os.fchmod(out.fileno(), 0o666 & ~_umask())
            out.write(payload)
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


def _names_host(spec) -> bool:
    """Whether a `map_location` names the host device ('cpu', `fg.device("cpu")`)."""
    try:
        return names_host(spec)
    except DeviceError:
        return False


def load(f, map_location=None, weights_only: bool = True):
    """Read an object written by `save` from a path or a binary file object.

    Only the saved data is rebuilt: tensors (with their requires_grad), numpy
    arrays, numbers, strings, None, lists, tuples and dicts. `map_location`
    may be None or 'cpu'. A file of a whole module (`fg.save(model)`) is a pickle:
    as torch.load, it loads only with weights_only=False (unpickling runs code);
    other files never run code.
    """
    if map_location is not None and not _names_host(map_location):
        raise ValueError(f"fg.load: map_location must be None or 'cpu', got {map_location!r}")
    if hasattr(f, "read"):
        raw, name = f.read(), getattr(f, "name", "the file")
    else:
        with open(os.fspath(f), "rb") as fh:
            raw, name = fh.read(), os.fspath(f)
    if raw.startswith(PICKLE_MAGIC) and len(raw) > len(PICKLE_MAGIC) + _DIGEST:
        return _unpickled(raw, name, weights_only)
    return _decode_file(raw, name)


def _bad(name, why: str):
    raise SerializationError(f"fg.load: {name} is not a valid fusegrad save file: {why}")


def _decode_file(raw: bytes, name):
    if len(raw) < len(MAGIC) + 8 + _DIGEST or not raw.startswith(MAGIC):
        if raw[:2] == b"PK" or raw[:1] == b"\x80":
            _bad(name, "it looks like a zip or pickle file (torch.save / np.savez?), not fg.save")
        _bad(name, "it is too short or does not start with the fusegrad header (truncated?)")
    body, digest = raw[:-_DIGEST], raw[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        _bad(name, "its checksum does not match (the file is truncated or was altered)")
    (head_len,) = struct.unpack("<Q", body[len(MAGIC) : len(MAGIC) + 8])
    start = len(MAGIC) + 8
    if start + head_len > len(body):
        _bad(name, "its header runs past the end of the file")
    try:
        header = json.loads(body[start : start + head_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        _bad(name, f"its header is not valid JSON ({e})")
    if not isinstance(header, dict) or header.get("format") != "fusegrad":
        _bad(name, "its header does not describe a fusegrad save")
    if header.get("version") != 1:
        _bad(name, f"version {header.get('version')!r} is not supported (this fusegrad reads 1)")
    data = memoryview(body)[start + head_len :]
    arrays = [_read_array(spec, data, name) for spec in header.get("arrays", [])]
    return _decode(header.get("root"), arrays, name)


def _read_array(spec, data, name) -> np.ndarray:
    try:
        dtype, shape = spec["dtype"], tuple(int(s) for s in spec["shape"])
        offset, nbytes = int(spec["offset"]), int(spec["nbytes"])
    except (KeyError, TypeError, ValueError):
        _bad(name, f"an array entry is malformed: {spec!r}")
    if dtype not in _DTYPES:
        _bad(name, f"array dtype {dtype!r} is not a plain numeric dtype")
    dt = np.dtype(dtype).newbyteorder("<")
    count = 1
    for s in shape:
        if s < 0:
            _bad(name, f"an array has a negative dimension {shape}")
        count *= s
    if nbytes != count * dt.itemsize or offset < 0 or offset + nbytes > len(data):
        _bad(name, f"an array of shape {shape} and dtype {dtype} does not fit in the file")
    a = np.frombuffer(data[offset : offset + nbytes], dtype=dt).reshape(shape)
    return a.astype(np.dtype(dtype), copy=True)


# ---------------------------------------------------------------- the object description


def _encode(obj, arrays: list):
    if obj is None or isinstance(obj, (bool, int, float, str)):
        if isinstance(obj, int) and not isinstance(obj, bool) and abs(obj) >= 2**63:
            return {"bigint": str(obj)}
        return obj
    if isinstance(obj, core.Tensor):
        arrays.append(np.asarray(obj._host()))  # (bfloat16 has no .numpy(), as in torch)
        return {"tensor": len(arrays) - 1, "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, (np.ndarray, np.generic)):
        a = np.asarray(obj)
        if a.dtype.name not in _DTYPES:
            raise TypeError(f"fg.save: cannot save numpy arrays of dtype {a.dtype}")
        arrays.append(a)
        kind = "ndarray" if isinstance(obj, np.ndarray) else "npscalar"
        return {kind: len(arrays) - 1}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, arrays) for v in obj]
        return {"tuple": items} if isinstance(obj, tuple) else {"list": items}
    if isinstance(obj, dict):
        kind = "odict" if isinstance(obj, OrderedDict) else "dict"
        return {kind: [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    raise TypeError(
        f"fg.save: cannot save an object of type {type(obj).__name__}; save its state_dict() "
        "(tensors, numbers, strings, and lists, tuples and dicts of them)"
    )


def _decode(node, arrays: list, name):
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict) or len(node) not in (1, 2):
        _bad(name, f"unexpected entry {str(node)[:80]!r} in its description")
    if "tensor" in node:
        t = from_numpy(_array(node["tensor"], arrays, name))
        return t.requires_grad_() if node.get("requires_grad") and t.dtype.is_float else t
    (kind, value), = node.items()  # fmt: skip
    if kind == "ndarray":
        return _array(value, arrays, name)
    if kind == "npscalar":
        return _array(value, arrays, name)[()]
    if kind == "bigint" and isinstance(value, str):
        return int(value)
    if kind in ("list", "tuple") and isinstance(value, list):
        items = [_decode(v, arrays, name) for v in value]
        return tuple(items) if kind == "tuple" else items
    if kind in ("dict", "odict") and isinstance(value, list):
        pairs = []
        for pair in value:
            if not isinstance(pair, list) or len(pair) != 2:
                _bad(name, "a dict entry is not a key-value pair")
            key = _decode(pair[0], arrays, name)
            try:
                hash(key)
            except TypeError:
                _bad(name, f"a dict key of type {type(key).__name__} cannot be a key")
            pairs.append((key, _decode(pair[1], arrays, name)))
        return OrderedDict(pairs) if kind == "odict" else dict(pairs)
    _bad(name, f"unknown entry kind {kind!r}")


def _array(index, arrays: list, name) -> np.ndarray:
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(arrays):
        _bad(name, f"it refers to array {index!r}, which is not in the file")
    return arrays[index]


def dumps(obj) -> bytes:
    """`save` into bytes."""
    buf = io.BytesIO()
    save(obj, buf)
    return buf.getvalue()
