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

import hashlib
import io
import json
import math
import os
import re
import struct
from collections import OrderedDict

import numpy as np

from .checkpoint_files import PLAIN_DTYPES, SerializationError, write_atomically
from .creation import over_host_array
from .devices import names_host
from .errors import DeviceError, FusegradError
from .runtime.buffer import aligned_bytes
from .tensor import Tensor
from .torch_files import Unspellable, is_torch_zip, load_torch_zip, torch_zip

MAGIC = b"FGSAVE01"
PICKLE_MAGIC = b"FGPICKL1"  # a whole module, pickled (fg.save(model))
_DIGEST = 32
# containers (lists, tuples, dicts) within each other that save writes and load reads; in
# the JSON description each takes up to 3 levels (a dict is {"dict": [[key, value], ...]}),
# with one for the header and one for a tensor's entry
MAX_NESTING = 100
_MAX_JSON_DEPTH = 3 * MAX_NESTING + 2
_MAX_DIMS = 32  # numpy 1's limit (numpy 2 holds 64); fusegrad's tensors have far fewer


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
        root = _encode(obj, arrays, named={})
    except TypeError:
        if not _is_module(obj):
            raise
        payload = _pickled(obj)  # a whole model, as torch.save pickles it
    else:
        payload = _data_file(root, arrays)
    if hasattr(f, "write"):
        f.write(payload)
        return
    write_atomically(f, lambda out: out.write(payload))


def save_for_torch(obj, f, pickle_module=None, pickle_protocol=2, **_torch_options) -> None:
    """torch.save under `python -m fusegrad` (frontend/torch_shim.py): `obj` in torch's
    zip format (`torch_files.torch_zip`), so torch.load reads what the script saved; an
    object that format cannot spell here (a whole module, numpy arrays) is written as
    `save` writes it, which `load` reads."""
    stem = "archive" if hasattr(f, "write") else os.path.splitext(os.path.basename(f))[0]
    try:
        payload = torch_zip(obj, stem if stem.isidentifier() else "archive")
    except Unspellable:
        save(obj, f)
        return
    if hasattr(f, "write"):
        f.write(payload)
        return
    write_atomically(f, lambda out: out.write(payload))


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


# globals a whole module's pickle may name under weights_only=True besides fusegrad's own
# layer and tensor classes: functions that rebuild plain data and run nothing else
_SAFE_REBUILDERS = frozenset(
    {
        ("collections", "OrderedDict"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "slice"),
        ("builtins", "complex"),
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("fusegrad.nn.module", "_rebuild_parameter"),
        ("fusegrad.copying", "rebuild_tensor"),
    }
)
_user_safe: dict[tuple[str, str], object] = {}  # add_safe_globals


def add_safe_globals(safe_globals: list) -> None:
    """Allow the classes and functions in `safe_globals` in whole modules that `fg.load`
    reads with weights_only=True (a model class of the user's own, saved with
    `fg.save(model)`), as torch.serialization.add_safe_globals."""
    for obj in safe_globals:
        if isinstance(obj, tuple):  # torch's (object, "module.name") form
            obj, qualified = obj
            module, _, name = qualified.rpartition(".")
        else:
            module, name = obj.__module__, obj.__qualname__
        _user_safe[(module, name)] = obj


def get_safe_globals() -> list:
    """The classes and functions `add_safe_globals` allowed."""
    return list(_user_safe.values())


def clear_safe_globals() -> None:
    """Forget every class and function `add_safe_globals` allowed."""
    _user_safe.clear()


class safe_globals:  # noqa: N801 (torch's name: a context manager)
    """`with safe_globals([MyModel]):` allows them for the loads inside only, as
    torch.serialization.safe_globals."""

    def __init__(self, safe_globals: list):
        self.safe_globals = safe_globals

    def __enter__(self):
        self.saved = dict(_user_safe)
        add_safe_globals(self.safe_globals)

    def __exit__(self, *exc) -> None:
        _user_safe.clear()
        _user_safe.update(self.saved)


def _fusegrad_class(module: str, name: str):
    """fusegrad's own tensor class `module.name` (a Parameter's, a Tensor's), or None. Layer
    classes are not allowed by default, as torch allows none of its own: a whole module
    loads with weights_only=True once its classes are allowed (`add_safe_globals`)."""
    if module != "fusegrad" and not module.startswith("fusegrad."):
        return None
    import importlib

    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    if isinstance(obj, type) and issubclass(obj, Tensor):
        return obj
    return None


def _weights_only_unpickler(body: bytes, name):
    """An unpickler that finds only the globals that rebuild plain data and tensors
    (`_SAFE_REBUILDERS`, fusegrad's tensor classes) and those the user allowed
    (`add_safe_globals`); any other global refuses the file, naming it."""
    import importlib
    import pickle

    class Restricted(pickle.Unpickler):
        def find_class(self, module: str, qualname: str):
            key = (module, qualname)
            if key in _user_safe:
                return _user_safe[key]
            if key in _SAFE_REBUILDERS:
                return getattr(importlib.import_module(module), qualname)
            found = _fusegrad_class(module, qualname)
            if found is not None:
                return found
            raise SerializationError(
                f"fg.load: {name} names {module}.{qualname}, which weights_only=True does not "
                f"allow by default: allow it with fg.serialization.add_safe_globals([{qualname}]) "
                "or `with fg.serialization.safe_globals([...]):` if you trust the file, or load "
                "it with weights_only=False (unpickling then runs code)"
            )

    return Restricted(io.BytesIO(body))


def _unpickled(raw: bytes, name, weights_only: bool):
    import pickle

    body, digest = raw[:-_DIGEST], raw[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        _bad(name, "its checksum does not match (the file is truncated or was altered)")
    body = body[len(PICKLE_MAGIC) :]
    if not weights_only:
        return pickle.loads(body)
    try:
        return _weights_only_unpickler(body, name).load()
    except SerializationError:
        raise
    except Exception as e:  # a malformed pickle: what pickle raises, named as a bad file
        _bad(name, f"its pickle does not load ({type(e).__name__}: {e})")


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


def _names_host(spec) -> bool:
    """Whether a `map_location` names the host device ('cpu', `fg.device("cpu")`)."""
    try:
        return names_host(spec)
    except DeviceError:
        return False


def load(f, map_location=None, weights_only: bool = True):
    """Read an object written by `save` (or by torch.save: its tensors, parameters and
    containers, see fusegrad/torch_files.py) from a path or a binary file object.

    Only the saved data is rebuilt: tensors (with their requires_grad), numpy
    arrays, numbers, strings, None, lists, tuples and dicts. `map_location`
    may be None or 'cpu'. A file of a whole module (`fg.save(model)`) is a pickle: as
    torch.load, it loads with weights_only=True only where every class it names is allowed
    (`add_safe_globals`, `safe_globals`; tensors and plain containers are), or with
    weights_only=False (unpickling then runs code); other files never run code.

    The digest has no key, so a file may have been crafted to pass it: every file
    that is not one `save` could have written raises `SerializationError`, which
    says what is wrong, and loading takes no more memory than the file's arrays
    plus its largest array (an array named twice is one object, as torch's
    pickle memo makes it; each array is read into its own buffer once).
    """
    if map_location is not None and not _names_host(map_location):
        raise ValueError(f"fg.load: map_location must be None or 'cpu', got {map_location!r}")
    if hasattr(f, "read"):
        return _load_stream(f, getattr(f, "name", "the file"), weights_only)
    with open(os.fspath(f), "rb") as fh:
        return _load_stream(fh, os.fspath(f), weights_only)


def _bad(name, why: str):
    raise SerializationError(f"fg.load: {name} is not a valid fusegrad save file: {why}")


def _load_stream(f, name, weights_only: bool):
    f, size = _sized(f)
    magic = f.read(len(MAGIC))
    if magic == PICKLE_MAGIC and size > len(PICKLE_MAGIC) + _DIGEST:
        return _unpickled(magic + f.read(), name, weights_only)
    if is_torch_zip(magic):  # torch.save's format: its tensors and containers
        f.seek(f.tell() - len(magic))
        return load_torch_zip(f, name)
    if magic != MAGIC or size < len(MAGIC) + 8 + _DIGEST:
        if magic[:2] == b"\x80\x02" and magic[2:3] == b"\x8a":
            _bad(
                name,
                "it is in torch's legacy format (before torch 1.6), which fg.load does not read",
            )
        if magic[:1] == b"\x80":
            _bad(name, "it looks like a pickle file, not fg.save's or torch.save's")
        _bad(name, "it is too short or does not start with the fusegrad header (truncated?)")
    reader = _Reader(f, size - len(MAGIC), name)
    reader.hash.update(magic)
    try:
        header, arrays = _read_contents(reader)
        error = None
    except SerializationError as e:
        error = e  # reported as it is only if the checksum matches: else the file is damaged
    if not reader.digest_matches():
        _bad(name, "its checksum does not match (the file is truncated or was altered)")
    if error is not None:
        raise error
    return _Decoder(arrays, name).decode(header.get("root"))


def _sized(f):
    """`f` and the number of bytes left in it; a stream that cannot seek is read whole."""
    if getattr(f, "seekable", lambda: False)():
        here = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(here)
        return f, end - here
    raw = f.read()
    return io.BytesIO(raw), len(raw)


class _Reader:
    """A save file read once, front to back, into the digest: every byte read is
    hashed, and no read may reach the digest (the file's last 32 bytes), so a length
    in the header is checked against the file before anything of that length exists."""

    def __init__(self, f, size: int, name):
        self.f, self.name = f, name
        self.left = size - _DIGEST  # bytes before the digest not read yet
        self.hash = hashlib.sha256()

    def read(self, n: int) -> bytes:
        if n > self.left:
            _bad(self.name, f"it ends {n - self.left} bytes too early (truncated?)")
        data = self.f.read(n)
        if len(data) != n:
            _bad(self.name, "it ended while being read (was it being written?)")
        self.left -= n
        self.hash.update(data)
        return data

    def read_into(self, out: np.ndarray) -> None:
        """Fill `out`, a contiguous array, with the file's next bytes."""
        view = memoryview(out.reshape(-1).view(np.uint8))
        if len(view) > self.left:
            _bad(self.name, f"it ends {len(view) - self.left} bytes too early (truncated?)")
        done = 0
        while done < len(view):
            if hasattr(self.f, "readinto"):
                got = self.f.readinto(view[done:])
            else:
                chunk = self.f.read(min(len(view) - done, 1 << 20))
                got = len(chunk)
                view[done : done + got] = chunk
            if not got:
                _bad(self.name, "it ended while being read (was it being written?)")
            done += got
        self.left -= len(view)
        self.hash.update(view)

    def digest_matches(self) -> bool:
        """Whether the bytes not read yet (hashed 1 MiB at a time) end in the digest of all."""
        while self.left:
            self.read(min(self.left, 1 << 20))
        return self.f.read(_DIGEST) == self.hash.digest()


def _read_contents(reader: _Reader) -> tuple[dict, list[np.ndarray]]:
    """The header and the arrays of a save file, each checked before it is used."""
    name = reader.name
    (head_len,) = struct.unpack("<Q", reader.read(8))
    if head_len > reader.left:
        _bad(name, f"its header ({head_len} bytes) runs past the end of the file")
    header = _parse_header(reader.read(head_len), name)
    table = _array_table(header.get("arrays", []), reader.left, name)
    arrays = []
    for dtype, shape in table:
        # into memory a CPU tensor can keep as it is (a fresh, cache-line aligned buffer's:
        # `creation.over_host_array`), so the load holds one copy of the payload
        raw = aligned_bytes(math.prod(shape) * dtype.itemsize)
        out = raw.view(dtype.newbyteorder("<")).reshape(shape)
        reader.read_into(out)
        arrays.append(out.astype(dtype, copy=False))  # a no-op on little-endian hosts
    return header, arrays


def _parse_header(text: bytes, name) -> dict:
    depth = _json_depth(text)
    if depth > _MAX_JSON_DEPTH:
        _bad(
            name,
            f"its description nests {depth} levels deep; fg.save writes at most "
            f"{_MAX_JSON_DEPTH} ({MAX_NESTING} containers within each other)",
        )
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:  # ValueError: also a number of 4,300+ digits
        _bad(name, f"its header cannot be read as JSON ({e})")
    if not isinstance(header, dict) or header.get("format") != "fusegrad":
        _bad(name, "its header does not describe a fusegrad save")
    if header.get("version") != 1:
        _bad(name, f"version {header.get('version')!r} is not supported (this fusegrad reads 1)")
    return header


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_OPENS, _CLOSES = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def _json_depth(text: bytes) -> int:
    """How deeply `text`'s brackets nest, strings left out: measured before json.loads,
    which recurses once per level (a 10,000-deep file raised RecursionError).

    >>> _json_depth(b'{"a": [[1], "]]]"]}')
    3
    """
    codes = np.frombuffer(_JSON_STRING.sub(b"", text), np.uint8)
    steps = np.isin(codes, _OPENS).astype(np.int32) - np.isin(codes, _CLOSES)
    return int(np.cumsum(steps).max(initial=0))


def _is_int(value) -> bool:
    """Whether a JSON value is a whole number (not a bool, float or list)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_count(value) -> bool:
    return _is_int(value) and value >= 0


def _array_table(specs, data_size: int, name) -> list[tuple[np.dtype, tuple[int, ...]]]:
    """Each array's dtype and shape, once all are known to lie end to end, in order,
    over exactly the `data_size` bytes of the file that hold arrays (as `save` writes
    them): no array overlaps another, and none is larger than the file."""
    if not isinstance(specs, list):
        _bad(name, f"its array table is a {type(specs).__name__}, not a list")
    table, end = [], 0
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict) or not {"dtype", "shape", "offset", "nbytes"} <= set(spec):
            _bad(name, f"array {i}'s entry is malformed: {str(spec)[:80]}")
        dtype, shape, offset, nbytes = (spec[k] for k in ("dtype", "shape", "offset", "nbytes"))
        if not isinstance(dtype, str) or dtype not in PLAIN_DTYPES:
            _bad(name, f"array {i}'s dtype {str(dtype)[:40]!r} is not a plain numeric dtype")
        if not isinstance(shape, list) or not all(_is_int(s) for s in shape):
            _bad(name, f"array {i}'s shape {str(shape)[:80]} is not a list of whole numbers")
        if not all(_is_count(s) for s in shape):
            _bad(name, f"array {i} has a negative dimension {tuple(shape)}")
        if len(shape) > _MAX_DIMS:
            _bad(name, f"array {i} has {len(shape)} dimensions (numpy holds {_MAX_DIMS})")
        if not _is_count(offset) or not _is_count(nbytes):
            _bad(name, f"array {i}'s offset {offset!r} or size {nbytes!r} is not a byte count")
        if nbytes != math.prod(shape) * np.dtype(dtype).itemsize:
            _bad(name, f"array {i}'s size {nbytes} is not that of its shape and dtype {dtype}")
        if offset != end:
            _bad(name, f"array {i} starts at byte {offset}, not where the one before ends ({end})")
        end += nbytes
        if end > data_size:
            _bad(
                name,
                f"an array of shape {tuple(shape)} and dtype {dtype} does not fit in the file "
                f"(its arrays need {end} bytes or more; it holds {data_size})",
            )
        table.append((np.dtype(dtype), tuple(shape)))
    if end != data_size:
        _bad(name, f"it holds {data_size - end} bytes after its last array")
    return table


# ---------------------------------------------------------------- the object description


def _encode(obj, arrays: list, named: dict, depth: int = 0):
    """`obj`'s JSON description; its arrays are appended to `arrays`, and a tensor or
    numpy array met again is named by its first index (`named`: id -> entry), as
    torch's pickle memo writes one storage for a tensor saved twice."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        if isinstance(obj, int) and not isinstance(obj, bool) and abs(obj) >= 2**63:
            return {"bigint": str(obj)}
        return obj
    if id(obj) in named:
        return named[id(obj)]
    if isinstance(obj, Tensor):
        arrays.append(np.asarray(obj._host()))  # (bfloat16 has no .numpy(), as in torch)
        entry = {"tensor": len(arrays) - 1, "requires_grad": bool(obj.requires_grad)}
        named[id(obj)] = entry
        return entry
    if isinstance(obj, (np.ndarray, np.generic)):
        a = np.asarray(obj)
        if a.dtype.name not in PLAIN_DTYPES:
            raise TypeError(f"fg.save: cannot save numpy arrays of dtype {a.dtype}")
        arrays.append(a)
        if isinstance(obj, np.generic):  # a scalar: a value, not an object to share
            return {"npscalar": len(arrays) - 1}
        named[id(obj)] = {"ndarray": len(arrays) - 1}
        return named[id(obj)]
    if isinstance(obj, (list, tuple, dict)) and depth == MAX_NESTING:
        raise ValueError(
            f"fg.save: containers nest more than {MAX_NESTING} deep in the object, "
            "deeper than fg.load reads"
        )
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, arrays, named, depth + 1) for v in obj]
        return {"tuple": items} if isinstance(obj, tuple) else {"list": items}
    if isinstance(obj, dict):
        kind = "odict" if isinstance(obj, OrderedDict) else "dict"
        pairs = [
            [_encode(k, arrays, named, depth + 1), _encode(v, arrays, named, depth + 1)]
            for k, v in obj.items()
        ]
        return {kind: pairs}
    raise TypeError(
        f"fg.save: cannot save an object of type {type(obj).__name__}; save its state_dict() "
        "(tensors, numbers, strings, and lists, tuples and dicts of them)"
    )


class _Decoder:
    """The object a description names, built from the file's arrays.

    An array named twice gives one object both times, as torch's pickle memo does
    (`save` names an array twice only for one tensor saved twice), so a file of one
    array named 3,000 times loads one array, not 3,000 copies; the second name must
    ask for the same kind of object (a tensor, with the same requires_grad).
    """

    def __init__(self, arrays: list[np.ndarray | None], name):
        self.arrays, self.name = arrays, name
        self.built: dict[int, tuple[tuple, object]] = {}  # array index -> (how named, object)

    def decode(self, node):
        name = self.name
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not isinstance(node, dict) or not node:
            _bad(name, f"unexpected entry {str(node)[:80]!r} in its description")
        if "tensor" in node and set(node) <= {"tensor", "requires_grad"}:
            return self.array(node["tensor"], ("tensor", bool(node.get("requires_grad"))))
        if len(node) != 1:
            _bad(name, f"unexpected entry {str(node)[:80]!r} in its description")
        (kind, value), = node.items()  # fmt: skip
        if kind in ("ndarray", "npscalar"):
            return self.array(value, (kind,))
        if kind == "bigint" and isinstance(value, str) and re.fullmatch("-?[0-9]+", value):
            try:
                return int(value)
            except ValueError as e:  # more digits than Python converts (4,300), as save
                _bad(name, f"a whole number in it is too long ({e})")
        if kind in ("list", "tuple") and isinstance(value, list):
            items = [self.decode(v) for v in value]
            return tuple(items) if kind == "tuple" else items
        if kind in ("dict", "odict") and isinstance(value, list):
            pairs = []
            for pair in value:
                if not isinstance(pair, list) or len(pair) != 2:
                    _bad(name, "a dict entry is not a key-value pair")
                key = self.decode(pair[0])
                try:
                    hash(key)
                except TypeError:
                    _bad(name, f"a dict key of type {type(key).__name__} cannot be a key")
                pairs.append((key, self.decode(pair[1])))
            return OrderedDict(pairs) if kind == "odict" else dict(pairs)
        _bad(name, f"unknown entry kind {str(kind)[:40]!r}")

    def array(self, index, how: tuple):
        """Array `index` as `how` asks: ("tensor", requires_grad), ("ndarray",) or
        ("npscalar",); built once, its numpy copy dropped once it is a tensor."""
        name = self.name
        if not isinstance(index, int) or isinstance(index, bool):
            _bad(name, f"it refers to array {str(index)[:40]!r}, which is not in the file")
        if not 0 <= index < len(self.arrays):
            _bad(name, f"it refers to array {index!r}, which is not in the file")
        if index in self.built:
            first, obj = self.built[index]
            if first != how:
                _bad(name, f"array {index} is named as {_kind(first)} and as {_kind(how)}")
            return obj
        a = self.arrays[index]
        if how[0] == "tensor":
            try:
                obj = over_host_array(a)
            except FusegradError as e:
                _bad(name, f"array {index} cannot be a tensor: {e}")
            if how[1] and obj.dtype.is_float:
                obj.requires_grad_()
            self.arrays[index] = None  # the tensor holds its own copy
        elif how[0] == "npscalar":
            if a.shape != ():
                _bad(name, f"array {index} of shape {a.shape} is named as a numpy scalar")
            obj = a[()]
        else:
            obj = a
        self.built[index] = (how, obj)
        return obj


def _kind(how: tuple) -> str:
    if how[0] == "tensor":
        return "a tensor that requires grad" if how[1] else "a tensor"
    return "a numpy array" if how[0] == "ndarray" else "a numpy scalar"


def dumps(obj) -> bytes:
    """`save` into bytes."""
    buf = io.BytesIO()
    save(obj, buf)
    return buf.getvalue()
