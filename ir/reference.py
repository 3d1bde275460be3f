"""The reference evaluator: runs any IR graph op by op with numpy.

It is the oracle the compiled kernels are tested against, so it is written to
be obviously right, not fast: one line per primitive.

float16 and bfloat16 values are computed in float32, as the compiled kernels compute
them, and rounded (to nearest even) only where the graph casts to them and at the
roots: one rounding per result, what a graph fused into one kernel gives (PyTorch,
one op at a time, rounds after each op; docs/NUMERICS.md says where that differs).

>>> from fusegrad.ir import node as N
>>> from fusegrad.ir.dtypes import float32
>>> evaluate(N.add(N.const(1.0, (2,), float32), N.const(2.0, (2,), float32)))
array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from . import rand
from .node import Node, toposort
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


def _scatter_add(values, index, rows):
    k = index.ndim
    flat_index = index.reshape(-1)
    flat_values = values.reshape((flat_index.size,) + values.shape[k:])
    out = np.zeros((rows,) + values.shape[k:], dtype=values.dtype)
    inside = (flat_index >= 0) & (flat_index < rows)
    np.add.at(out, flat_index[inside], flat_values[inside])
    return out


def _pad(x, pads):
    return np.pad(x, pads)


def _shrink(x, bounds):
    return x[tuple(slice(b, e) for b, e in bounds)]


_ELEMENTWISE = {
    Ops.NEG: lambda n, x: np.negative(x) if not n.dtype.is_bool else np.logical_not(x),
    Ops.EXP: lambda n, x: np.exp(x),
    Ops.LOG: lambda n, x: np.log(x),
    Ops.SIN: lambda n, x: np.sin(x),
    Ops.COS: lambda n, x: np.cos(x),
    Ops.SQRT: lambda n, x: np.sqrt(x),
    Ops.RECIP: lambda n, x: np.reciprocal(x),
    Ops.CAST: lambda n, x: (x != 0) if n.dtype.is_bool else _rounded(x, n.dtype),
    Ops.ADD: lambda n, a, b: (a | b) if n.dtype.is_bool else a + b,
    Ops.MUL: lambda n, a, b: (a & b) if n.dtype.is_bool else a * b,
    Ops.DIV: lambda n, a, b: _int_div(a, b) if not n.dtype.is_float else a / b,
    Ops.MAX: lambda n, a, b: np.maximum(a, b),
    Ops.CMPLT: lambda n, a, b: a < b,
    Ops.CMPEQ: lambda n, a, b: a == b,
    Ops.WHERE: lambda n, c, a, b: np.where(c, a, b),
    Ops.RAND: lambda n, key: rand.uniform_from_key(
        int(key), np.arange(n.numel, dtype=np.int64).reshape(n.shape), rand.uniform_bits(n.dtype)
    ),
    Ops.SUM: lambda n, x: np.sum(x, axis=n.arg, keepdims=True, dtype=_wide(n.dtype)),
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


def _wide(dt) -> str:
    """The numpy dtype a value of `dt` is computed in: float32 for the 16-bit floats."""
    return "float32" if dt.is_half else dt.np


def _rounded(x: np.ndarray, dt) -> np.ndarray:
    """`x` converted to `dt` (rounded once; 16-bit floats then held as float32 again)."""
    return x.astype(dt.np).astype(_wide(dt))


def fold_constant(op: Ops, values: list, dtypes: list, out_dtype):
    """The Python value of elementwise `op` on scalar constants, computed as numpy would."""

    class _Scalar:  # the fields the table's lambdas read
        def __init__(self, dtype):
            self.dtype, self.arg = dtype, None

    args = [np.asarray(v, dtype=_wide(d)) for v, d in zip(values, dtypes)]
    with np.errstate(all="ignore"):
        out = _ELEMENTWISE[op](_Scalar(out_dtype), *args)
    return np.asarray(out, dtype=_wide(out_dtype)).item()


def _leaf(n: Node) -> np.ndarray:
    if n.op is Ops.BUFFER:
        return np.asarray(n.arg.numpy()).reshape(n.shape).astype(_wide(n.dtype), copy=False)
    if n.op is Ops.CONST:
        return np.full(n.shape, n.arg, dtype=_wide(n.dtype))
    raise AssertionError(f"not a leaf: {n}")


def evaluate_many(roots: list[Node]) -> list[np.ndarray]:
    """Values of several nodes, sharing the work on common subgraphs.

    Everything is computed from the graph's leaves (buffers and constants), op by op, in
    one pass over a topological order: no recursion, so any depth works.
    """
    from .macro import expand_all

    roots = expand_all(roots)
    values: dict[int, np.ndarray] = {}
    for n in toposort(roots):
        if not n.srcs:
            values[id(n)] = _leaf(n)
            continue
        with np.errstate(all="ignore"):
            out = _ELEMENTWISE[n.op](n, *(values[id(s)] for s in n.srcs))
        values[id(n)] = np.asarray(out, dtype=_wide(n.dtype)).reshape(n.shape)
    return [values[id(r)].astype(r.dtype.np, copy=False) for r in roots]


def evaluate(root: Node) -> np.ndarray:
    """The value of one node as a numpy array of its shape and dtype."""
    return evaluate_many([root])[0]
