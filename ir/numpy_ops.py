"""One numpy line per primitive: the table the reference evaluator runs a graph with,
and constant folding (`fold_constant`) computes a constant op with, so both compute
exactly as numpy does in the node's dtype. Knows ops, not nodes: each entry takes
anything with the node's `dtype` and `arg`, and the values of its sources.

>>> from fusegrad.ir.dtypes import float32
>>> from fusegrad.ir.ops import Ops
>>> fold_constant(Ops.ADD, [1.5, 2.0], [float32, float32], float32)
3.5
"""

from __future__ import annotations

import math

import numpy as np

from . import rand
from .ops import Ops


def _int_div(a, b):
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    return np.where(b == 0, 0, np.where((a < 0) != (safe < 0), -q, q)).astype(a.dtype)


def _gather(table, index):
    inside = (index >= 0) & (index < table.shape[0])
    rows = table[np.where(inside, index, 0)]
    return np.where(inside.reshape(inside.shape + (1,) * (table.ndim - 1)), rows, 0).astype(
        table.dtype
    )


def _scatter_add(values, index, arg):
    rows, from_negative_zero = arg
    k = index.ndim
    flat_index = index.reshape(-1)
    flat_values = values.reshape((flat_index.size,) + values.shape[k:])
    out = np.full((rows,) + values.shape[k:], -0.0 if from_negative_zero else 0, values.dtype)
    inside = (flat_index >= 0) & (flat_index < rows)
    np.add.at(out, flat_index[inside], flat_values[inside])
    return out


def _pad(x, pads):
    return np.pad(x, pads)


def _shrink(x, bounds):
    return x[tuple(slice(b, e) for b, e in bounds)]


NUMPY_OPS = {
    Ops.NEG: lambda n, x: np.negative(x) if not n.dtype.is_bool else np.logical_not(x),
    Ops.EXP: lambda n, x: np.exp(x),
    Ops.LOG: lambda n, x: np.log(x),
    Ops.SIN: lambda n, x: np.sin(x),
    Ops.COS: lambda n, x: np.cos(x),
    Ops.SQRT: lambda n, x: np.sqrt(x),
    Ops.ERFC: lambda n, x: np.vectorize(math.erfc, otypes=[x.dtype])(x),  # numpy has none
    Ops.RECIP: lambda n, x: np.reciprocal(x),
    Ops.CAST: lambda n, x: (
        (_seen(n, x) != 0) if n.dtype.is_bool else _rounded(_seen(n, x), n.dtype)
    ),
    Ops.ADD: lambda n, a, b: (a | b) if n.dtype.is_bool else a + b,
    Ops.MUL: lambda n, a, b: (a & b) if n.dtype.is_bool else a * b,
    Ops.DIV: lambda n, a, b: _int_div(a, b) if not n.dtype.is_float else a / b,
    Ops.MAX: lambda n, a, b: np.maximum(a, b),
    Ops.FMOD: lambda n, a, b: np.fmod(a, b),
    Ops.CMPLT: lambda n, a, b: _seen(n, a) < _seen(n, b),
    Ops.CMPEQ: lambda n, a, b: _seen(n, a) == _seen(n, b),
    Ops.WHERE: lambda n, c, a, b: np.where(c, a, b),
    Ops.RAND: lambda n, key: rand.uniform_from_key(
        int(key), np.arange(n.numel, dtype=np.int64).reshape(n.shape), rand.uniform_bits(n.dtype)
    ),
    Ops.SUM: lambda n, x: np.sum(x, axis=n.arg, keepdims=True, dtype=wide(n.dtype)),
    Ops.REDUCE_MAX: lambda n, x: np.max(x, axis=n.arg, keepdims=True),
    Ops.RESHAPE: lambda n, x: x.reshape(n.arg),
    Ops.PERMUTE: lambda n, x: x.transpose(n.arg),
    Ops.EXPAND: lambda n, x: np.broadcast_to(x, n.arg),
    Ops.PAD: lambda n, x: _pad(x, n.arg),
    Ops.SHRINK: lambda n, x: _shrink(x, n.arg),
    Ops.FLIP: lambda n, x: np.flip(x, n.arg),
    Ops.CONTIGUOUS: lambda n, x: np.ascontiguousarray(x),
    Ops.DETACH: lambda n, x: x,
    Ops.GATHER: lambda n, table, index: _gather(table, index),
    Ops.SCATTER_ADD: lambda n, values, index: _scatter_add(values, index, n.arg),
}


def wide(dt) -> str:
    """The numpy dtype a value of `dt` is computed in: float32 for the 16-bit floats."""
    return "float32" if dt.is_half else dt.np


def _rounded(x: np.ndarray, dt) -> np.ndarray:
    """`x` converted to `dt` (rounded once; 16-bit floats then held as float32 again)."""
    return x.astype(dt.np).astype(wide(dt))


def _seen(n, x: np.ndarray) -> np.ndarray:
    """A comparison's or a cast's operand as its 16-bit type holds it: a value computed in
    float32 and compared with a stored copy of itself (a max's gradient finding its ties)
    must equal it, and `.float()` of it must give the 16-bit value, as in PyTorch, where
    every 16-bit result is rounded."""
    srcs = getattr(n, "srcs", None)
    dt = srcs[0].dtype if srcs else None
    return _rounded(x, dt) if dt is not None and dt.is_half else x


class _Scalar:
    """The fields of a node that the table's lambdas read, for a folded constant."""

    __slots__ = ("dtype", "arg")

    def __init__(self, dtype):
        self.dtype, self.arg = dtype, None


def fold_constant(op: Ops, values: list, dtypes: list, out_dtype):
    """The Python value of elementwise `op` on scalar constants, computed as numpy would."""
    args = [np.asarray(v, dtype=wide(d)) for v, d in zip(values, dtypes)]
    with np.errstate(all="ignore"):
        out = NUMPY_OPS[op](_Scalar(out_dtype), *args)
    return np.asarray(out, dtype=wide(out_dtype)).item()
