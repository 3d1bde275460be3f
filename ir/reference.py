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

from .macro import expand_all
from .node import Node, toposort
from .numpy_ops import NUMPY_OPS, wide
from .ops import Ops


def _leaf(n: Node) -> np.ndarray:
    if n.op is Ops.BUFFER:
        return np.asarray(n.arg.numpy()).reshape(n.shape).astype(wide(n.dtype), copy=False)
    if n.op is Ops.CONST:
        return np.full(n.shape, n.arg, dtype=wide(n.dtype))
    if n.op is Ops.INDEX:
        return np.arange(n.numel, dtype=wide(n.dtype)).reshape(n.shape)
    raise AssertionError(f"not a leaf: {n}")


def evaluate_many(roots: list[Node]) -> list[np.ndarray]:
    """Values of several nodes, sharing the work on common subgraphs.

    Everything is computed from the graph's leaves (buffers and constants), op by op, in
    one pass over a topological order: no recursion, so any depth works.
    """
    roots = expand_all(roots)
    values: dict[int, np.ndarray] = {}
    for n in toposort(roots):
        if not n.srcs:
            values[id(n)] = _leaf(n)
            continue
        with np.errstate(all="ignore"):
            out = NUMPY_OPS[n.op](n, *(values[id(s)] for s in n.srcs))
        values[id(n)] = np.asarray(out, dtype=wide(n.dtype)).reshape(n.shape)
    return [values[id(r)].astype(r.dtype.np, copy=False) for r in roots]


def evaluate(root: Node) -> np.ndarray:
    """The value of one node as a numpy array of its shape and dtype."""
    return evaluate_many([root])[0]
