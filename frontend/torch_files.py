"""Reading files `torch.save` wrote (its zip format), without torch: `fg.load` of a `.pt`.

A torch file is a zip holding `<name>/data.pkl`, a pickle of the saved object, and each
tensor's storage as raw bytes in `<name>/data/<key>` (`<name>/byteorder` says their byte
order). The pickle names storages by key (pickle's persistent ids) and rebuilds tensors
through `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`. Here the
pickle is read by an unpickler that knows only the globals that rebuild tensors,
parameters, dtypes, sizes and plain containers (and numpy arrays, as fusegrad's own
files allow), each answered by fusegrad's own code; any other global refuses the file,
naming it, as torch's `weights_only=True` does. Nothing in the file is run.

Every storage is checked against the zip (stored, not compressed: what torch writes, so
a small file cannot claim a huge one) and every tensor against its storage (offset,
sizes and strides inside it) before anything is built, so a damaged or crafted file
raises `SerializationError`. Tensors that shared a storage in torch (tied weights, a
view and its base) are separate copies here.

>>> import io, zipfile, pickle
>>> buf = io.BytesIO()  # what torch.save({"w": torch.tensor([1.0, 2.0])}) writes, in small
>>> with zipfile.ZipFile(buf, "w") as z:
...     z.writestr("f/data.pkl", _example_pickle())
...     z.writestr("f/data/0", np.array([1.0, 2.0], np.float32).tobytes())
>>> load_torch_zip(io.BytesIO(buf.getvalue()), "f.pt")["w"].tolist()
[1.0, 2.0]
"""

from __future__ import annotations

import importlib
import io
import pickle
import zipfile
from collections import OrderedDict

import numpy as np

from .checkpoint_files import SerializationError
from .creation import from_numpy
from .ir import dtypes as D
from .tensor import Tensor

# torch's storage classes, as its pickles name them, and the numpy dtype of their bytes
_STORAGES = {
    "FloatStorage": np.dtype(np.float32),
    "DoubleStorage": np.dtype(np.float64),
    "HalfStorage": np.dtype(np.float16),
    "BFloat16Storage": D.bfloat16.np,  # (ml_dtypes' bfloat16: a name until it is read)
    "LongStorage": np.dtype(np.int64),
    "IntStorage": np.dtype(np.int32),
    "ShortStorage": np.dtype(np.int16),
    "CharStorage": np.dtype(np.int8),
    "ByteStorage": np.dtype(np.uint8),
    "BoolStorage": np.dtype(np.bool_),
}
# torch's dtypes by the name its pickles give them (`torch.float32`), as fusegrad's
_DTYPES = {
    "float32": D.float32,
    "float": D.float32,
    "float64": D.float64,
    "double": D.float64,
    "float16": D.float16,
    "half": D.float16,
    "bfloat16": D.bfloat16,
    "int64": D.int64,
    "long": D.int64,
    "int32": D.int32,
    "int": D.int32,
    "int16": D.int16,
    "short": D.int16,
    "int8": D.int8,
    "uint8": D.uint8,
    "bool": D.bool_,
}
# numpy's and Python's rebuilders of plain data that a torch file may hold besides tensors
_PLAIN = frozenset(
    {
        ("collections", "OrderedDict"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "slice"),
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
    }
)


def is_torch_zip(head: bytes) -> bool:
    """Whether a file starting with `head` may be a zip (torch.save's format)."""
    return head[:4] == b"PK\x03\x04"


def from_numpy_dtype(spec) -> np.dtype:
    """numpy's dtype `spec` ("bfloat16" needs ml_dtypes: its error says how to get it)."""
    if isinstance(spec, np.dtype):
        return spec
    if spec == D.bfloat16.np:
        return np.dtype(spec) if D.ml_dtypes is not None else _no_bf16()
    return np.dtype(spec)


def _no_bf16():
    raise SerializationError(
        "fg.load: the file holds bfloat16 tensors, which need ml_dtypes (pip install ml_dtypes)"
    )


class _Storage:
    """A storage read from the zip: its elements as a 1-d numpy array."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array


class _StorageType:
    """What the pickle's `torch.FloatStorage` (and the others) stand for: a dtype."""

    def __init__(self, name: str, dtype: np.dtype):
        self.name, self.dtype = name, dtype


def load_torch_zip(f, name) -> object:
    """The object in a file torch.save wrote (see the module's docstring)."""
    try:
        archive = zipfile.ZipFile(f)
    except zipfile.BadZipFile as e:
        _bad(name, f"it is not a zip file torch.save wrote ({e})")
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pickles) != 1:
            _bad(name, "it is a zip file but not torch.save's (no single data.pkl in it)")
        root = pickles[0][: -len("data.pkl")]
        order = _read(archive, root + "byteorder", name, optional=True) or b"little"
        if order not in (b"little", b"big"):
            _bad(name, f"its byteorder entry says {order[:20]!r}")
        unpickler = _Unpickler(io.BytesIO(_read(archive, pickles[0], name)), archive, root, name)
        unpickler.swap = order == b"big"
        try:
            return unpickler.load()
        except SerializationError:
            raise
        except Exception as e:  # a malformed pickle: what pickle raises, named as a bad file
            _bad(name, f"its pickle does not load ({type(e).__name__}: {e})")


def _read(archive: zipfile.ZipFile, entry: str, name, optional: bool = False) -> bytes | None:
    try:
        info = archive.getinfo(entry)
    except KeyError:
        if optional:
            return None
        _bad(name, f"it has no entry {entry}")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > 64 * max(
        info.compress_size, 1
    ):
        _bad(name, f"its entry {entry} is compressed over 64 times (torch.save stores entries)")
    return archive.read(entry)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive, root: str, name):
        super().__init__(file)
        self.archive, self.root, self.name = archive, root, name
        self.storages: dict[str, _Storage] = {}
        self.swap = False

    def find_class(self, module: str, qualname: str):
        if module == "torch" and qualname in _STORAGES:
            return _StorageType(qualname, _STORAGES[qualname])
        if module == "torch" and qualname in _DTYPES:
            return _DTYPES[qualname]
        found = _REBUILDERS.get((module, qualname))
        if found is not None:
            return found
        if (module, qualname) in _PLAIN:
            return getattr(importlib.import_module(module), qualname)
        raise SerializationError(
            f"fg.load: {self.name} (a torch.save file) names {module}.{qualname}, which fusegrad "
            "does not read: it reads torch's tensors, parameters, dtypes and plain containers "
            "(a state_dict, a checkpoint dict), not pickled torch classes (save the model's "
            "state_dict() in torch instead)"
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            _bad(self.name, f"its pickle names a storage as {str(pid)[:80]}")
        _, kind, key, location, numel = pid
        if not isinstance(kind, _StorageType):
            _bad(self.name, f"its storage {key!r} has an unknown type ({kind!r})")
        if not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            _bad(self.name, f"its storage {str(key)[:40]!r} is described wrongly")
        found = self.storages.get(key)
        if found is not None:
            return found
        raw = _read(self.archive, f"{self.root}data/{key}", self.name)
        itemsize = from_numpy_dtype(kind.dtype).itemsize
        if len(raw) != numel * itemsize:
            _bad(
                self.name,
                f"its storage {key} holds {len(raw)} bytes, not the {numel} x {itemsize} its "
                "pickle says",
            )
        array = np.frombuffer(raw, dtype=from_numpy_dtype(kind.dtype))
        if self.swap:
            array = array.byteswap()
        self.storages[key] = storage = _Storage(array)
        return storage


def _rebuild_tensor(storage, storage_offset, size, stride, requires_grad=False, *_hooks):
    """torch._utils._rebuild_tensor_v2: elements of `storage` from `storage_offset`, in
    `size` with `stride` (in elements), copied into a fusegrad tensor once checked."""
    if not isinstance(storage, _Storage):
        raise SerializationError(f"fg.load: a tensor's storage is {type(storage).__name__}")
    size, stride = tuple(size), tuple(stride)
    n = storage.array.size
    ok = (
        isinstance(storage_offset, int)
        and len(size) == len(stride)
        and all(isinstance(v, int) and v >= 0 for v in (*size, *stride))
        and 0 <= storage_offset
    )
    last = storage_offset + sum((s - 1) * t for s, t in zip(size, stride)) if ok else n
    if not ok or (0 not in size and last >= n) or storage_offset > n:
        raise SerializationError(
            f"fg.load: a tensor of size {size[:8]}, stride {stride[:8]} and offset "
            f"{storage_offset} does not fit its storage of {n} elements"
        )
    itemsize = storage.array.itemsize
    if 0 in size:
        values = np.zeros(size, dtype=storage.array.dtype)
    else:
        view = np.lib.stride_tricks.as_strided(
            storage.array[storage_offset:],
            shape=size,
            strides=tuple(t * itemsize for t in stride),
            writeable=False,
        )
        values = np.ascontiguousarray(view).reshape(size)  # (a 0-d array stays 0-d)
    return from_numpy(values, requires_grad=bool(requires_grad))


def _rebuild_tensor_v1(storage, storage_offset, size, stride):
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _parameter_class():
    # deferred: nn is the layer above the frontend; only a file holding parameters asks
    return importlib.import_module("fusegrad.nn.module").Parameter


def _rebuild_parameter(data, requires_grad, *_hooks):
    """torch._utils._rebuild_parameter: an nn.Parameter of `data`."""
    if not isinstance(data, Tensor):
        raise SerializationError(f"fg.load: a parameter's data is {type(data).__name__}")
    return _parameter_class()(data, requires_grad=bool(requires_grad))


def _rebuild_parameter_with_state(data, requires_grad, hooks, state):
    """torch._utils._rebuild_parameter_with_state: the parameter; its Python attributes
    (`state`) are not set (fusegrad's Parameter has none of torch's)."""
    return _rebuild_parameter(data, requires_grad)


def _rebuild_from_type(func, cls, args, state):
    """torch._tensor._rebuild_from_type_v2: a tensor subclass rebuilt by `func` (one of the
    rebuilders here); fusegrad keeps the tensor (or parameter) it gives."""
    if func not in _REBUILDERS.values():
        raise SerializationError("fg.load: a tensor subclass rebuilt by an unknown function")
    return func(*args)


def _size(*dims):
    """torch.Size: a tuple of ints."""
    return tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims


def _device(*args):
    """torch.device: its name (fusegrad's state dicts hold devices as names)."""
    return ":".join(str(a) for a in args)


def _encode(text, encoding="utf-8", errors="strict"):
    """_codecs.encode, as protocol 2 pickles rebuild bytes (`encode(text, "latin1")`)."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise SerializationError("fg.load: the pickle encodes something other than bytes")
    return text.encode("latin1", errors)


_REBUILDERS = {
    ("_codecs", "encode"): _encode,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor_v1,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch", "Size"): _size,
    ("torch", "device"): _device,
}


def _bad(name, why: str):
    raise SerializationError(f"fg.load: {name} is not a valid torch.save file: {why}")


def _example_pickle() -> bytes:
    """The pickle torch.save writes for {"w": a float32 tensor of 2 elements in storage
    "0"} (the module docstring's example), byte by byte."""
    return (
        b"\x80\x02}X\x01\x00\x00\x00w"
        b"ctorch._utils\n_rebuild_tensor_v2\n"
        b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
        b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89"
        b"ccollections\nOrderedDict\n)RtRs."
    )


# ---------------------------------------------------------------- writing torch's format

_TORCH_DTYPE_NAMES = {
    D.float32: "float32",
    D.float64: "float64",
    D.float16: "float16",
    D.bfloat16: "bfloat16",
    D.int64: "int64",
    D.int32: "int32",
    D.int16: "int16",
    D.int8: "int8",
    D.uint8: "uint8",
    D.bool_: "bool",
}


class Unspellable(TypeError):
    """An object `torch_zip` cannot write in torch's format (the caller writes its own)."""


def torch_zip(obj, name: str = "archive") -> bytes:
    """`obj` (tensors, parameters, dtypes, numbers, strings, bytes, None, and dicts,
    OrderedDicts, lists and tuples of them) as the zip torch.save writes, which torch.load
    reads with its default `weights_only=True`: the pickle written opcode by opcode with the
    globals torch allows (its tensor and parameter rebuilders, OrderedDict, its dtypes),
    each tensor's values a storage of its own. Anything else raises `Unspellable`."""
    writer = _PickleWriter()
    body = writer.pickle(obj)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", body)
        z.writestr(f"{name}/byteorder", b"little")
        for key, data in enumerate(writer.storages):
            z.writestr(f"{name}/data/{key}", data)
        z.writestr(f"{name}/version", b"3\n")
    return out.getvalue()


class _PickleWriter:
    """A protocol-2 pickle of plain data and tensors, in torch.save's spelling."""

    def __init__(self):
        self.storages: list[bytes] = []
        self.out = io.BytesIO()

    def pickle(self, obj) -> bytes:
        self.out.write(b"\x80\x02")
        self.save(obj, 0)
        self.out.write(b".")
        return self.out.getvalue()

    def save(self, obj, depth: int) -> None:
        if depth > 100:
            raise Unspellable("containers nested more than 100 deep")
        w = self.out.write
        if obj is None:
            w(b"N")
        elif obj is True or obj is False:
            w(b"\x88" if obj else b"\x89")
        elif isinstance(obj, D.DType):
            if obj not in _TORCH_DTYPE_NAMES:
                raise Unspellable(obj.name)
            self.global_("torch", _TORCH_DTYPE_NAMES[obj])
        elif isinstance(obj, Tensor):
            self.tensor(obj)
        elif type(obj) is int:
            if -(2**31) <= obj < 2**31:
                w(b"J" + obj.to_bytes(4, "little", signed=True))
            else:
                data = obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True)
                if len(data) > 255:
                    raise Unspellable("an int of more than 2,000 bits")
                w(b"\x8a" + bytes([len(data)]) + data)
        elif type(obj) is float:
            w(b"G" + np.array(obj, ">f8").tobytes())
        elif type(obj) is str:
            self.text(obj)
        elif type(obj) is bytes:
            self.global_("_codecs", "encode")
            w(b"(")
            self.text(obj.decode("latin1"))
            self.text("latin1")
            w(b"tR")
        elif type(obj) in (dict, OrderedDict):
            if type(obj) is OrderedDict:
                self.global_("collections", "OrderedDict")
                w(b")R")
            else:
                w(b"}")
            if obj:
                w(b"(")
                for k, v in obj.items():
                    self.save(k, depth + 1)
                    self.save(v, depth + 1)
                w(b"u")
        elif type(obj) is list:
            w(b"]")
            if obj:
                w(b"(")
                for v in obj:
                    self.save(v, depth + 1)
                w(b"e")
        elif type(obj) is tuple:
            w(b"(")
            for v in obj:
                self.save(v, depth + 1)
            w(b"t")
        else:
            raise Unspellable(type(obj).__name__)

    def global_(self, module: str, name: str) -> None:
        self.out.write(b"c" + module.encode() + b"\n" + name.encode() + b"\n")

    def text(self, s: str) -> None:
        data = s.encode("utf-8", "surrogatepass")
        self.out.write(b"X" + len(data).to_bytes(4, "little") + data)

    def tensor(self, t: Tensor) -> None:
        w = self.out.write
        is_parameter = type(t).__name__ == "Parameter"
        if t.dtype not in _TORCH_DTYPE_NAMES:
            raise Unspellable(t.dtype.name)
        values = np.ascontiguousarray(np.asarray(t.detach()._host())).reshape(t.shape)
        storage = {
            "float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
            "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage",
            "int16": "ShortStorage", "int8": "CharStorage", "uint8": "ByteStorage",
            "bool": "BoolStorage",
        }[t.dtype.name]  # fmt: skip
        key = len(self.storages)
        self.storages.append(values.astype(values.dtype.newbyteorder("<")).tobytes())
        if is_parameter:
            self.global_("torch._utils", "_rebuild_parameter")
            w(b"(")
        self.global_("torch._utils", "_rebuild_tensor_v2")
        w(b"((")
        self.text("storage")
        self.global_("torch", storage)
        self.text(str(key))
        self.text("cpu")
        self.save(int(values.size), 1)
        w(b"tQ")  # the persistent id
        self.save(0, 1)
        self.save(tuple(int(s) for s in values.shape), 1)
        strides = [1] * values.ndim
        for d in range(values.ndim - 2, -1, -1):
            strides[d] = strides[d + 1] * values.shape[d + 1]
        self.save(tuple(strides), 1)
        self.save(bool(t.requires_grad and not is_parameter), 1)
        self.global_("collections", "OrderedDict")
        w(b")RtR")  # (backward hooks: none) _rebuild_tensor_v2(...)
        if is_parameter:
            self.save(bool(t.requires_grad), 1)
            self.global_("collections", "OrderedDict")
            w(b")RtR")  # _rebuild_parameter(tensor, requires_grad, hooks)
