"""Python numbers written into tensors: refused where torch refuses them, never wrapped silently.

torch checks a number against the dtype it is written into (`c10::overflows`): 300 into
uint8 is a RuntimeError, while -1 into uint8 wraps to 255 (an unsigned type takes
negative integers down to -max, as two's complement); a float must lie within the
type's range (NaN never does for an integer type). Arithmetic is different: `u8 + 300`
wraps in both libraries, and so does casting a tensor or a numpy array (`dtype=` on an
array is a cast).

>>> import fusegrad as fg
>>> fg.full((2,), -1, dtype=fg.uint8).tolist()
[255, 255]
>>> fg.full((2,), 300, dtype=fg.uint8)  # doctest: +ELLIPSIS
Traceback (most recent call last):
  ...
fusegrad.errors.ArgumentError: full: value cannot be converted to type uint8_t without overflow...
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ArgumentError, FusegradError, fail
from .ir.dtypes import DType

# the C++ names torch's fill ops (full, fill_, setitem, masked_fill) say in their message;
# tensor() says the dtype's own name
C_NAMES = {
    "uint8": "uint8_t",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int",
    "int64": "int64_t",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "float32": "float",
    "float64": "double",
}

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class NumberOverflowError(FusegradError, OverflowError, ValueError):
    """A Python int too large for any tensor type (torch: OverflowError from `full`,
    ValueError "Overflow when unpacking long long" from `tensor`; this is both)."""


def overflows(value, dt: DType) -> bool:
    """Whether number `value` does not fit `dt` by torch's rule (see the module docstring).

    >>> from fusegrad.ir.dtypes import uint8, int8, float32
    >>> overflows(300, uint8), overflows(-1, uint8), overflows(-129, int8)
    (True, False, True)
    >>> overflows(1e300, float32), overflows(float("inf"), float32)
    (True, False)
    """
    if dt.is_bool:
        return False
    if dt.is_float:
        if isinstance(value, (int, np.integer)) or not math.isfinite(value):
            return False
        return abs(float(value)) > float(dt.finfo.max)
    info = np.iinfo(dt.np)
    if isinstance(value, (int, np.integer)):
        low = -int(info.max) if dt.unsigned else int(info.min)
        return not low <= int(value) <= int(info.max)
    return not (math.isfinite(value) and int(info.min) <= value <= int(info.max))


def checked_fill(value, dt: DType, op: str):
    """`value` (a Python or numpy number) as a constant of `dt`, raising as torch's `full`,
    `fill_` and `x[i] = v` do where it does not fit."""
    if isinstance(value, (bool, np.bool_)):
        return value
    if isinstance(value, (int, np.integer)) and not INT64_MIN <= int(value) < (1 << 64):
        fail(NumberOverflowError, op, f"int {value} is too big to convert to {dt.name}")
    if overflows(value, dt):
        fail(
            ArgumentError,
            op,
            f"value cannot be converted to type {C_NAMES[dt.name]} without overflow "
            f"(got {value!r} for a {dt.name} tensor)",
        )
    if dt.is_half:  # what the tensor holds: a fused kernel would not round a constant
        return float(np.asarray(value, dtype=np.float32).astype(dt.np))
    return value


def check_data(arr: np.ndarray, dt: DType | None, data) -> np.ndarray:
    """Check the numbers of Python data (`arr` is numpy's reading of `data`) that
    `tensor(data, dtype=dt)` will hold, as torch.tensor does: an int beyond int64 raises
    unless the tensor is float; a number outside an integer `dt` raises. Returns `arr`,
    as float64 where numpy kept huge ints as objects and the tensor will be float."""
    if arr.dtype == object:
        values = list(arr.flat)
        floats = (dt is None and any(isinstance(v, float) for v in values)) or (
            dt is not None and dt.is_float
        )
        for v in values:
            if isinstance(v, int) and not isinstance(v, bool) and not floats:
                if not INT64_MIN <= v <= INT64_MAX:
                    fail(NumberOverflowError, "tensor", f"Overflow when unpacking long long: {v}")
        numbers = all(isinstance(v, (int, float, np.number)) for v in values)
        return arr.astype(np.float64) if floats and numbers else arr
    target_float = dt is not None and dt.is_float
    if arr.dtype == np.uint64 and not target_float:  # ints in [2**63, 2**64) read by numpy
        big = int(arr.max())
        fail(NumberOverflowError, "tensor", f"Overflow when unpacking long long: {big}")
    if dt is None or dt.is_bool or dt.is_float or arr.size == 0:
        return arr
    for v in (arr.min().item(), arr.max().item()):
        if overflows(v, dt):  # (a NaN anywhere is the min and the max)
            fail(
                ArgumentError,
                "tensor",
                f"value cannot be converted to type {dt.name} without overflow "
                f"(data of {type(data).__name__} holds {v!r})",
            )
    return arr
