"""The reference evaluator: runs any IR graph op by op with numpy.

It is the oracle the compiled kernels are tested against, so it is written to
be obviously right, not fast: one line per primitive.

>>> from fusegrad.ir import node as N
>>> from fusegrad.ir.dtypes import float32
>>> evaluate(N.add(N.const(1.0, (2,), float32), N.const(2.0, (2,), float32)))
array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from .macro import expand_all
from .node import Node, toposort
from .numpy_ops import NUMPY_OPS
from .ops import Ops


def _leaf(n: Node) -> np.ndarray:
    if n.op is Ops.BUFFER:
        return np.asarray(n.arg.numpy()).reshape(n.shape)
    if n.op is Ops.CONST:
        return np.full(n.shape, n.arg, dtype=n.dtype.np)
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
        values[id(n)] = np.asarray(out, dtype=n.dtype.np).reshape(n.shape)
    return [values[id(r)] for r in roots]


def evaluate(root: Node) -> np.ndarray:
    """The value of one node as a numpy array of its shape and dtype."""
    return evaluate_many([root])[0]
