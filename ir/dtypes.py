"""Data types: one frozen record each, with the names every layer needs.

>>> float32.itemsize, float32.np, float32.is_float
(4, 'float32', True)
>>> promote(int32, float32) is float32
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)  # one object per dtype: identity is equality, hashing is cheap
class DType:
    """A tensor element type: its name and how numpy, LLVM and CUDA spell it."""

    name: str
    itemsize: int
    kind: str  # "f" float, "i" signed integer, "b" bool
    priority: int  # promotion order within and across kinds
    llvm: str  # the type in registers
    cuda: str

    @property
    def np(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"fusegrad.{self.name}"


bool_ = DType("bool", 1, "b", 0, "i1", "bool")
int32 = DType("int32", 4, "i", 1, "i32", "int")
int64 = DType("int64", 8, "i", 2, "i64", "long long")
float32 = DType("float32", 4, "f", 3, "float", "float")
float64 = DType("float64", 8, "f", 4, "double", "double")

ALL_DTYPES = (bool_, int32, int64, float32, float64)
DEFAULT_FLOAT = float32
DEFAULT_INT = int64
_BY_NAME = {d.name: d for d in ALL_DTYPES}


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
    raise TypeError(
        f"unsupported dtype {name}: fusegrad has {', '.join(d.name for d in ALL_DTYPES)}"
    )


def to_dtype(dt) -> DType:
    """Accept a DType, a numpy dtype, a Python type or a name."""
    if isinstance(dt, DType):
        return dt
    if dt is float:
        return float32
    if dt is int:
        return int64
    if dt is bool:
        return bool_
    if isinstance(dt, str) and dt in _BY_NAME:
        return _BY_NAME[dt]
    return from_numpy(dt)


def promote(a: DType, b: DType) -> DType:
    """The result type of a binary op on two tensors (PyTorch's rule for these five types)."""
    return a if a.priority >= b.priority else b


def scalar_dtype(value) -> DType:
    """The category a Python scalar belongs to (it never widens a tensor within its kind)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64
    return float32


def promote_scalar(t: DType, value) -> DType:
    """Tensor dtype combined with a Python scalar: the scalar only lifts the kind.

    >>> promote_scalar(int32, 2) is int32, promote_scalar(int32, 2.5) is float32
    (True, True)
    """
    s = scalar_dtype(value)
    kinds = "bif"
    if kinds.index(s.kind) > kinds.index(t.kind):
        return DEFAULT_FLOAT if s.kind == "f" else (DEFAULT_INT if s.kind == "i" else s)
    return t
