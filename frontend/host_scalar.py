"""One integer worked out on the host: `int(i + 1)` without a kernel.

A program that indexes with tensors does arithmetic on one-element integer tensors and
reads the result back at once: nanoGPT's `get_batch` slices `data[i + 1 : i + 1 + n]`
for each `i` of a `randint` draw. Each read would otherwise schedule and run a plan for
one number. When `item()` (and so `int()`, `bool()`,
`__index__`) asks for one element of a small graph of integer or bool ops over values in
host memory, the value is computed here with numpy, op by op as the reference evaluator
computes it (`ir/numpy_ops.py`), which is what the kernel computes: integer arithmetic
wraps alike, comparisons and selects are exact, and casts between integer types truncate
alike. Floats never come here (a kernel may contract a multiply and an add into one
rounding), nor random numbers, reductions or divisions; such graphs run as plans.

>>> import fusegrad as fg
>>> i = fg.tensor([7, 9])[1]
>>> int(i + 1), bool(i > 8), (i * -3).item()
(10, True, -27)
"""

from __future__ import annotations

import numpy as np

from .ir.node import Node
from .ir.numpy_ops import NUMPY_OPS, wide
from .ir.ops import Ops
from .runtime.buffer import HOST_BUFFERS
from .runtime.engine import engine

# the ops computed here: exact on integers and bools, as the kernels compute them
OPS = frozenset(
    {
        Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.CMPLT, Ops.CMPEQ, Ops.WHERE, Ops.CAST,
        Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.DETACH,
    }
)  # fmt: skip
MAX_NODES = 16  # a bigger graph runs as a plan
MAX_ELEMENTS = 1 << 16  # elements of a host value read here (a slice of a batch's indices)


def value(root: Node):
    """The Python number of one-element `root`, or None where it is not computed here
    (see the module's docstring)."""
    if root.dtype.is_float or root.op is Ops.CONST:
        return None
    values: dict[int, np.ndarray] = {}
    order: list[Node] = []  # operations, sources before users
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        n, ready = stack.pop()
        k = id(n)
        if k in values:
            continue
        if ready:
            order.append(n)
            values[k] = None  # (placeholder: computed below, in order)
            continue
        leaf = _leaf(n)
        if leaf is _REFUSED:
            return None
        if leaf is not None:
            values[k] = leaf
            continue
        if n.op not in OPS or n.dtype.is_float or len(values) + len(stack) > MAX_NODES:
            return None
        stack.append((n, True))
        for s in n.srcs:
            if s.dtype.is_float:  # (a float cast to an integer: the kernel's rounding)
                return None
            stack.append((s, False))
    with np.errstate(all="ignore"):
        for n in order:
            out = NUMPY_OPS[n.op](n, *(values[id(s)] for s in n.srcs))
            values[id(n)] = np.asarray(out, dtype=wide(n.dtype)).reshape(n.shape)
    return values[id(root)].astype(root.dtype.np, copy=False).reshape(()).item()


def _leaf(n: Node) -> np.ndarray | None:
    """The value of `n` where it is an input here (a constant, or a value in host memory),
    as the reference evaluator holds it; None for a node to compute."""
    if n.op is Ops.CONST:
        return np.full(n.shape, n.arg, dtype=wide(n.dtype))
    buf = n.arg if n.op is Ops.BUFFER else engine.value(n)
    if buf is None:
        return None
    if type(buf) not in HOST_BUFFERS or buf.size > MAX_ELEMENTS or n.dtype.is_float:
        return _REFUSED
    return np.asarray(buf.numpy()).reshape(n.shape).astype(wide(n.dtype), copy=False)


_REFUSED = np.empty(0)  # (a leaf this module does not read: a marker, never computed with)
