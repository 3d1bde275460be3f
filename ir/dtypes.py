"""Data types: one frozen record each, with the names every layer needs.

>>> float32.itemsize, float32.np, float32.is_float
(4, 'float32', True)
>>> promote(int32, float32) is float32
True
>>> promote(uint8, int8) is int16  # as torch: the smallest signed type holding both ranges
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

try:
    import ml_dtypes  # registers numpy's "bfloat16" dtype
except ImportError:  # (a machine that has not installed it): bfloat16 is refused, by name
    ml_dtypes = None


@dataclass(frozen=True, eq=False)  # one object per dtype: identity is equality, hashing is cheap
class DType:
    """A tensor element type: its name and how numpy, LLVM and CUDA spell it."""

    name: str
    itemsize: int
    kind: str  # "f" float, "i" integer (signed or not), "b" bool
    priority: int  # promotion order within and across kinds
    llvm: str  # the type in registers
    cuda: str
    unsigned: bool = False  # uint8: compares, divides, widens and converts as unsigned
    # how LLVM stores it when that differs from `llvm`: the 16-bit floats live in float32
    # registers (arithmetic in float32, rounded once when stored, as PyTorch's opmath)
    storage: str = ""

    # what the graph-building paths ask of a dtype on every op, worked out once (plain
    # attributes: a property is a Python call each time)
    np: str = field(init=False)  # numpy's name of it
    is_float: bool = field(init=False)
    is_int: bool = field(init=False)
    is_bool: bool = field(init=False)
    is_half: bool = field(
        init=False
    )  # float16 or bfloat16: 2 bytes in memory, float32 in registers
    is_floating_point: bool = field(init=False)  # torch.dtype's name for is_float
    is_signed: bool = field(init=False)  # floats and signed integers; not uint8, not bool (torch)
    is_complex: bool = field(init=False)  # always False: fusegrad has no complex dtypes
    # 0 bool, 1 integer, 2 float: what a 0-d tensor or a Python scalar can lift a tensor to
    # (PyTorch's promotion compares categories first)
    category: int = field(init=False)

    def __post_init__(self):
        kind = self.kind
        for name, value in (
            ("np", self.name),
            ("is_float", kind == "f"),
            ("is_int", kind == "i"),
            ("is_bool", kind == "b"),
            ("is_half", kind == "f" and self.itemsize == 2),
            ("is_floating_point", kind == "f"),
            ("is_signed", kind != "b" and not self.unsigned),
            ("is_complex", False),
            ("category", "bif".index(kind)),
        ):
            object.__setattr__(self, name, value)  # (frozen: set once, here)

    def __reduce__(self):  # unpickled as the one object of its name (identity is equality)
        return (_named, (self.name,))

    @property
    def finfo(self):
        """numpy's finfo of a float dtype (bfloat16's through ml_dtypes)."""
        return ml_dtypes.finfo(self.np) if ml_dtypes is not None else np.finfo(self.np)

    def wrap(self, value: int) -> int:
        """An integer brought into this type's range as its arithmetic wraps (uint8: mod 256).

        >>> uint8.wrap(300), int8.wrap(200), int8.wrap(-1)
        (44, -56, -1)
        """
        bits = 8 * self.itemsize
        value &= (1 << bits) - 1
        return value - (1 << bits) if not self.unsigned and value >> (bits - 1) else value

    def __repr__(self) -> str:
        return f"fusegrad.{self.name}"


bool_ = DType("bool", 1, "b", 0, "i1", "bool")
uint8 = DType("uint8", 1, "i", 1, "i8", "unsigned char", unsigned=True)
int8 = DType("int8", 1, "i", 2, "i8", "signed char")
int16 = DType("int16", 2, "i", 3, "i16", "short")
int32 = DType("int32", 4, "i", 4, "i32", "int")
int64 = DType("int64", 8, "i", 5, "i64", "long long")
# bfloat16: numpy knows it through ml_dtypes (imported below), with rounding to nearest even
float16 = DType("float16", 2, "f", 6, "float", "float", storage="half")
bfloat16 = DType("bfloat16", 2, "f", 6, "float", "float", storage="i16")
float32 = DType("float32", 4, "f", 7, "float", "float")
float64 = DType("float64", 8, "f", 8, "double", "double")

ALL_DTYPES = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)

# torch's C++ scalar type names (its messages say "Float", "Long"; `x.type()` too)
TORCH_SCALAR_TYPES = {
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
}
DEFAULT_FLOAT = float32  # the default default: `default_float()` is the one in force
DEFAULT_INT = int64
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update({"byte": uint8, "char": int8, "short": int16, "half": float16})  # torch's names
_default_float = [float32]  # a list so that `set_default_float` changes it for every importer


def _named(name: str) -> DType:
    """The dtype of this name: what a pickled dtype becomes."""
    return _BY_NAME[name]


def default_float() -> DType:
    """The dtype Python floats make (torch.get_default_dtype): float32 unless set."""
    return _default_float[0]


def set_default_float(dt: DType) -> None:
    """Make `dt` (a float dtype) the default, as torch.set_default_dtype."""
    if not dt.is_float:
        raise TypeError(
            f"only floating-point types are supported as the default type, not {dt.name}"
        )
    _default_float[0] = dt


# dtypes numpy and torch have that fusegrad has not (yet): refused by name, with the way out,
# never converted silently
_NOT_YET = {
    "complex64": "complex numbers are not supported; use the real and imaginary parts",
    "complex128": "complex numbers are not supported; use the real and imaginary parts",
}
for _u in ("uint16", "uint32", "uint64"):  # torch has them, with few ops; fg.tensor(a) makes int64
    _NOT_YET[_u] = f"there is no {_u} here; fusegrad.tensor(a) makes an int64 tensor of it"


_BY_NUMPY: dict = {}  # numpy dtype (or type, or name) -> DType, as looked up so far


def from_numpy(dt) -> DType:
    """The fusegrad dtype of a numpy dtype; raises TypeError for ones we do not support."""
    hit = _BY_NUMPY.get(dt)
    if hit is not None:
        return hit
    name = np.dtype(dt).name
    if name in _BY_NAME:
        _BY_NUMPY[dt] = _BY_NAME[name]
        return _BY_NAME[name]
    raise TypeError(unsupported(name))


def unsupported(name: str) -> str:
    """Why dtype `name` is refused, and what to do instead."""
    have = ", ".join(d.name for d in ALL_DTYPES)
    why = _NOT_YET.get(name)
    if why is None and name.startswith("complex"):
        why = _NOT_YET["complex64"]
    if why is None and (name == "object" or name.startswith(("datetime", "timedelta"))):
        why = "only numeric data converts to a tensor"
    return f"dtype {name} is not supported: {why or 'no such dtype here'} (fusegrad has {have})"


_NO_ML_DTYPES = "bfloat16 needs numpy's bfloat16 from the ml_dtypes package: pip install ml_dtypes"
# the dtypes numpy knows here (bfloat16 only through ml_dtypes)
NUMPY_DTYPES = tuple(d for d in ALL_DTYPES if d is not bfloat16 or ml_dtypes is not None)


def to_dtype(dt) -> DType:
    """Accept a DType, a numpy dtype, a Python type or a name."""
    if isinstance(dt, DType):
        if dt is bfloat16 and ml_dtypes is None:
            raise TypeError(_NO_ML_DTYPES)
        return dt
    if dt is float:
        return float32
    if dt is int:
        return int64
    if dt is bool:
        return bool_
    if isinstance(dt, str):
        name = dt.removeprefix("torch.").removeprefix("fusegrad.")
        if name in _BY_NAME:
            return to_dtype(_BY_NAME[name])
        if name in _NOT_YET:
            raise TypeError(unsupported(name))
    if getattr(dt, "__module__", None) == "torch":  # torch.float32 and the like
        return to_dtype(str(dt))
    return from_numpy(dt)


def promote(a: DType, b: DType) -> DType:
    """The result type of a binary op on two tensors, PyTorch's table: the higher kind
    (bool < integer < float), else the wider type; uint8 with a signed integer gives a
    signed type that holds both ranges (int16 at least), as in torch.

    >>> promote(uint8, bool_), promote(uint8, int8), promote(uint8, int32)
    (fusegrad.uint8, fusegrad.int16, fusegrad.int32)
    """
    if a is b:
        return a
    if a.is_half and b.is_half:  # float16 with bfloat16: neither holds the other
        return float32
    if a.is_int and b.is_int and a.unsigned != b.unsigned:
        signed = b if a.unsigned else a
        return signed if signed.itemsize > 1 else int16
    return a if a.priority >= b.priority else b


def scalar_dtype(value) -> DType:
    """The category a Python scalar belongs to (it never widens a tensor within its kind)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64
    return default_float()


def promote_scalar(t: DType, value) -> DType:
    """Tensor dtype combined with a Python scalar: the scalar only lifts the kind.

    >>> promote_scalar(int32, 2) is int32, promote_scalar(int32, 2.5) is float32
    (True, True)
    """
    kind, scalar = t.kind, type(value)
    if (scalar is float and kind == "f") or (scalar is int and kind != "b"):
        return t  # (the common cases, without the categories' lookups)
    s = scalar_dtype(value)
    if s.category > t.category:
        return default_float() if s.kind == "f" else (DEFAULT_INT if s.kind == "i" else s)
    return t
