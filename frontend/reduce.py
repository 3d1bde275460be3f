"""Reductions and the composites built on them: sum, mean, max, argmax, softmax, matmul.

Each is a composition of the two reduction primitives (`SUM`, `REDUCE_MAX`)
with elementwise ops and views; the scheduler decides how they fuse.

>>> import fusegrad as fg
>>> x = fg.tensor([[1.0, 5.0], [7.0, 3.0]])
>>> x.sum(dim=1).tolist(), x.argmax(dim=1).tolist()
([6.0, 10.0], [1, 0])
"""

from __future__ import annotations

from collections import namedtuple

from .codegen.lower import PANEL_CACHE_BYTES, TILE_COLS
from .errors import DimError, DTypeError, ShapeError, fail
from .ir import node as N
from .ir.autodiff import with_vjp
from .ir.dtypes import int64
from .ir.ops import Ops

MaxResult = namedtuple("MaxResult", ["values", "indices"])


class ReduceMixin:
    """Reduction methods of Tensor."""

    __slots__ = ()

    def _reduce(self, ir_op: Ops, dim, keepdim: bool, op: str):
        axes = self._dims(dim, op)
        node = N.reduce(ir_op, self.node, axes)
        if self.numel() == 0 and node.numel:  # a sum of no elements is 0, as in torch
            assert ir_op is Ops.SUM, "amax checks that it reduces no empty axis"
            node = N.const(0, node.shape, node.dtype)
        out = self._make(node)
        if not keepdim:
            out = out._make(
                N.reshape(node, tuple(s for i, s in enumerate(self.shape) if i not in axes))
            )
        return out

    def sum(self, dim=None, keepdim: bool = False, dtype=None):
        """Sum over `dim` (an int, a tuple, or None for all); bools and ints sum as int64."""
        x = self.cast(dtype) if dtype is not None else self
        if not x.dtype.is_float:
            x = x.cast(int64)
        if x.node.op is Ops.EXPAND:
            return _sum_of_broadcast(x, dim, keepdim)
        return x._reduce(Ops.SUM, dim, keepdim, "sum")

    def mean(self, dim=None, keepdim: bool = False):
        if not self.dtype.is_float:
            fail(
                DTypeError,
                "mean",
                f"needs a float tensor, got {self.dtype.name}; use .float() first",
            )
        axes = self._dims(dim, "mean")
        count = 1
        for a in axes:
            count *= self.shape[a]
        return self.sum(dim, keepdim) / count

    def var(self, dim=None, keepdim: bool = False, correction: int = 1):
        axes = self._dims(dim, "var")
        count = 1
        for a in axes:
            count *= self.shape[a]
        centered = self - self.mean(dim, keepdim=True)
        return (centered * centered).sum(dim, keepdim) / max(count - correction, 0)

    def std(self, dim=None, keepdim: bool = False, correction: int = 1):
        return self.var(dim, keepdim, correction).sqrt()

    def amax(self, dim=None, keepdim: bool = False):
        empty = [a for a in self._dims(dim, "max") if self.shape[a] == 0]
        if empty or (self.numel() == 0 and dim is None):
            fail(
                DimError,
                "max",
                f"cannot reduce an empty axis (axis {empty[0] if empty else 0} of "
                f"shape {self.shape}): a max of nothing has no value",
            )
        x = self.cast(int64) if self.dtype.is_bool else self
        out = x._reduce(Ops.REDUCE_MAX, dim, keepdim, "max")
        return out.bool() if self.dtype.is_bool else out

    def amin(self, dim=None, keepdim: bool = False):
        if self.dtype.is_bool:
            return self.logical_not().amax(dim, keepdim).logical_not()
        return self._order_flip().amax(dim, keepdim)._order_flip()

    def max(self, dim=None, keepdim: bool = False):
        """The largest element; with an int `dim`, a (values, indices) pair as in PyTorch.

        As torch: the gradient of max() and amax() is split evenly between tied maxima,
        that of max(dim).values goes to the index max(dim) returns (the first maximum).
        """
        if dim is None or isinstance(dim, (tuple, list)):
            return self.amax(dim, keepdim)
        d = self._dim(dim, "max")
        index = self.argmax(d, keepdim=True)
        values = _at_index(self, self.amax(d, keepdim=True), index, d)
        return _pair(values, index, dim, keepdim)

    def min(self, dim=None, keepdim: bool = False):
        if dim is None or isinstance(dim, (tuple, list)):
            return self.amin(dim, keepdim)
        d = self._dim(dim, "min")
        index = self.argmin(d, keepdim=True)
        values = _at_index(self, self.amin(d, keepdim=True), index, d)
        return _pair(values, index, dim, keepdim)

    def argmax(self, dim=None, keepdim: bool = False):
        """Index of the first largest element along `dim` (of the flattened tensor if None);
        a NaN counts as the largest, as in torch."""
        if dim is None:
            return self.reshape(-1).argmax(0, keepdim=False)
        from .creation import index_arange as arange

        d = self._dim(dim, "argmax")
        n = self.shape[d]
        best = self.amax(d, keepdim=True)  # NaN where the row holds a NaN
        shape = [1] * self.ndim
        shape[d] = n
        idx = arange(n).reshape(shape)
        # first occurrence: the smallest index among the maxima
        from .tensor import where

        hit = self == best
        if self.dtype.is_float:
            hit = hit | (self != self)  # no NaN in the row unless best is NaN
        cand = where(hit, idx, n)
        return cand.amin(d, keepdim)

    def argmin(self, dim=None, keepdim: bool = False):
        if self.dtype.is_bool:
            return self.logical_not().argmax(dim, keepdim)
        return self._order_flip().argmax(dim, keepdim)

    def logsumexp(self, dim, keepdim: bool = False):
        m = self.amax(dim, keepdim=True).detach()
        out = (self - m).exp().sum(dim, keepdim=True).log() + m
        return out if keepdim else out.squeeze(dim)

    def softmax(self, dim: int):
        """exp(x - max) / sum(exp(x - max)) along `dim`: three kernels for a row softmax."""
        dim = self._dim(dim, "softmax")
        x = self._float()
        if x.numel() == 0:  # nothing to normalize (torch returns the empty tensor)
            return x
        e = (x - x.amax(dim, keepdim=True).detach()).exp()
        return e / e.sum(dim, keepdim=True)

    def log_softmax(self, dim: int):
        dim = self._dim(dim, "log_softmax")
        x = self._float()
        if x.numel() == 0:
            return x
        shifted = x - x.amax(dim, keepdim=True).detach()
        return shifted - shifted.exp().sum(dim, keepdim=True).log()

    def matmul(self, other):
        return matmul(self, other)

    def dot(self, other):
        if self.ndim != 1 or other.ndim != 1:
            fail(ShapeError, "dot", f"expects 1-D tensors, got {self.shape} and {other.shape}")
        return matmul(self, other)


def _sum_of_broadcast(x, dim, keepdim: bool):
    """A sum over axes that an expand grew is the smaller sum times an exact count:
    `ones(1).expand(n).sum()` is n (rounded once), not n ones accumulated in float."""
    axes = x._dims(dim, "sum")
    src = x.node.srcs[0]
    grown = [a for a in axes if src.shape[a] == 1 and x.shape[a] != 1]
    count = 1
    for a in grown:
        count *= x.shape[a]
    small = tuple(1 if a in grown else s for a, s in enumerate(x.shape))
    y = x._make(N.expand(src, small))
    return y._reduce(Ops.SUM, axes, keepdim, "sum") * count


def _at_index(x, values, index, d: int):
    """`values` (keepdim) whose gradient goes to `x` at `index` along `d` alone, as torch's
    max(dim)/min(dim) do at ties (amax splits it instead: a rule of its own on a node of
    its own, values * 1, which is exact for every value)."""
    if not values.requires_grad:
        return values
    from .creation import index_arange as arange
    from .tensor import Tensor, where

    node = N.mul(values.node, N.const(1, values.shape, values.dtype))
    shape = [1] * x.ndim
    shape[d] = x.shape[d]
    picked = arange(x.shape[d]).reshape(shape) == index

    def rule(g):
        return [(x.node, where(picked, Tensor(g).expand(x.shape), 0.0).node)]

    return values._make(with_vjp(node, rule))


def _pair(values, index, dim, keepdim: bool) -> MaxResult:
    if not keepdim:
        values, index = values.squeeze(dim), index.squeeze(dim)
    return MaxResult(values, index)


PANEL = TILE_COLS[0]  # the widest vector a matmul tile uses: one panel is one tile's columns


def matmul(a, b):
    """Matrix product with PyTorch's rules for 1-D, 2-D and batched operands.

    The product is one broadcast multiply and one sum over the shared axis,
    which the scheduler fuses into a single kernel.
    """
    from .tensor import Tensor, as_tensor, broadcast_shapes

    a, b = as_tensor(a, "matmul"), as_tensor(b, "matmul")
    if not isinstance(a, Tensor) or a.ndim == 0 or b.ndim == 0:
        fail(
            ShapeError, "matmul", f"both operands need at least 1 dim, got {a.shape} and {b.shape}"
        )
    if a.dtype is not b.dtype:
        fail(
            DTypeError,
            "matmul",
            f"expected both operands to have the same dtype, got {a.dtype.name} and {b.dtype.name}",
        )
    if a.dtype.is_bool:
        fail(DTypeError, "matmul", "not supported on bool tensors")
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(1) if b.ndim == 1 else b
    k1, k2 = a2.shape[-1], b2.shape[-2]
    if k1 != k2:
        fail(
            ShapeError,
            "matmul",
            f"shapes {a.shape} and {b.shape} cannot be multiplied "
            f"(inner dimensions {k1} and {k2} differ)",
        )
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2], "matmul")
    m, n = a2.shape[-2], b2.shape[-1]
    if (
        b2.ndim == 2
        and n % PANEL == 0
        and n > PANEL
        and k2 * n * b2.dtype.itemsize >= PANEL_CACHE_BYTES
    ):
        # a right operand too big for cache is copied once into panels of PANEL columns, rows
        # adjacent: the kernel then streams one panel (its vector loads) from memory in order
        panels = N.contiguous(
            b2.reshape(k2, n // PANEL, PANEL).permute(1, 0, 2).node,
            f"matmul: a large right operand packed in panels of {PANEL} columns",
        )
        b2 = b2._make(panels, b2).permute(1, 0, 2).reshape(k2, n)
    # (..., M, 1, K) * (..., 1, N, K) summed over K
    x = a2.reshape(a2.shape[:-2] + (m, 1, k1)).expand(batch + (m, n, k1))
    y = b2.mT.reshape(b2.shape[:-2] + (1, n, k1)).expand(batch + (m, n, k1))
    out = (x * y)._reduce(Ops.SUM, -1, False, "matmul")  # ints keep their width, as torch
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out
