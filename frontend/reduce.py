"""Reductions and the composites built on them: sum, mean, max, argmax, softmax, matmul.

Each is a composition of the two reduction primitives (`SUM`, `REDUCE_MAX`)
with elementwise ops and views; the scheduler decides how they fuse.

>>> import fusegrad as fg
>>> x = fg.tensor([[1.0, 5.0], [7.0, 3.0]])
>>> x.sum(dim=1).tolist(), x.argmax(dim=1).tolist()
([6.0, 10.0], [1, 0])
"""

from __future__ import annotations

import functools
import math
import warnings
import weakref
from collections import namedtuple

from .autocast import autocast_op
from .creation_nodes import index_arange
from .errors import DimError, DTypeError, DTypeNotImplementedError, ShapeError, checked_dtype, fail
from .ir import layout
from .ir import node as N
from .ir.autodiff import max_grad_shared, own_node, with_vjp
from .ir.dtypes import int64, promote
from .ir.macro import macro, register
from .ir.ops import Ops
from .pipeline.tiling import PANEL_CACHE_BYTES, TILE_COLS
from .runtime import attribution as sites
from .runtime.attribution import one_site
from .tensor_base import (
    TensorBase,
    _broadcast_node,
    as_macro,
    as_tensor_like,
    broadcast_shapes,
    where,
)

MaxResult = namedtuple("MaxResult", ["values", "indices"])
AminmaxResult = namedtuple("AminmaxResult", ["min", "max"])


def sum_node(xn, axes: tuple[int, ...]):
    """The SUM of node `xn` over `axes` (kept as size 1), with torch's sign of zero: torch's
    sums start from +0.0, so a sum of -0.0s is +0.0. Where the IR folds a sum over size-1
    axes to its input, `+ 0.0` makes -0.0 +0.0 and changes nothing else (the kernels'
    accumulators do the same, pipeline/llvm.py).

    >>> import fusegrad as fg
    >>> fg.tensor([-0.0]).sum().item()
    0.0
    """
    node = N.reduce(Ops.SUM, xn, axes)
    if node is xn and xn.dtype.is_float:
        node = N.add(node, N.const(0.0, node.shape, node.dtype))
    return node


def _warn_no_degrees_of_freedom(op: str) -> None:
    """torch's UserWarning for var/std with correction >= N (the result is nan or inf),
    at the user's line."""
    message = (
        f"{op}(): degrees of freedom is <= 0. Correction should be strictly less than the "
        "reduction factor (input numel divided by output numel)."
    )
    site = sites.capture()
    if site is None:
        warnings.warn(message, UserWarning, stacklevel=3)
    else:
        warnings.warn_explicit(message, UserWarning, site.path, site.line)


def argmax_composed(x, d: int, keepdim: bool):
    """The index of the first largest element of `x` along axis `d`, a NaN counting as the
    largest (torch's), composed: the macro's expansion."""
    n = x.shape[d]
    best = x.amax(d, keepdim=True)  # NaN where the row holds a NaN
    shape = [1] * x.ndim
    shape[d] = n
    idx = index_arange(x, n).reshape(shape)
    # first occurrence: the smallest index among the maxima
    hit = x == best
    if x.dtype.is_float:
        hit = hit | (x != x)  # no NaN in the row unless best is NaN
    cand = where(hit, idx, n)
    return cand.amin(d, keepdim)


def logsumexp_composed(x, axes: tuple[int, ...], keepdim: bool):
    """`Tensor.logsumexp` of float `x` over `axes`, composed (the macro's expansion)."""
    if any(x.shape[a] == 0 for a in axes):  # log(0): the sum of no exponentials is 0
        m = 0.0
    else:
        m = x.amax(axes, keepdim=True).detach()
        m = where(m.abs() == math.inf, 0.0, m)
    out = (x - m).exp().sum(axes, keepdim=True).log() + m
    return out if keepdim else out.squeeze(axes)


class ReduceMixin:
    """Reduction methods of Tensor."""

    __slots__ = ()

    def _reduce(self, ir_op: Ops, dim, keepdim: bool, op: str):
        return self._reduce_axes(ir_op, self._dims(dim, op), keepdim)

    def _reduce_axes(self, ir_op: Ops, axes: tuple[int, ...], keepdim: bool):
        if ir_op is Ops.SUM:
            node = sum_node(self.node, axes)
        else:
            node = N.reduce(ir_op, self.node, axes)
        if self.numel() == 0 and node.numel:  # a sum of no elements is 0, as in torch
            assert ir_op is Ops.SUM, "amax checks that it reduces no empty axis"
            node = N.const(0, node.shape, node.dtype)
        if not keepdim:
            shape = self.shape
            if len(axes) == 1:  # the usual case, without a generator
                a = axes[0]
                node = N.reshape(node, shape[:a] + shape[a + 1 :])
            else:
                node = N.reshape(node, tuple(s for i, s in enumerate(shape) if i not in axes))
        return self._make(node)

    def sum(self, dim=None, keepdim: bool = False, dtype=None):
        """Sum over `dim` (an int, a tuple, or None for all); bools and ints sum as int64
        unless `dtype` says otherwise (`dtype=fg.uint8` wraps, as torch's)."""
        x = self.cast(dtype) if dtype is not None else self
        if not x.dtype.is_float and (dtype is None or x.dtype.is_bool):
            x = x.cast(int64)
        if x.node.op is Ops.EXPAND:
            return _sum_of_broadcast(x, dim, keepdim)
        axes = x._dims(dim, "sum")
        if x.numel() >= SPLIT_MIN_ELEMENTS:  # long sums only (told without the call)
            split = _sum_in_parts(x, axes, keepdim)
            if split is not None:
                return split
        return x._reduce_axes(Ops.SUM, axes, keepdim)

    @autocast_op("mean")
    def mean(self, dim=None, keepdim: bool = False, dtype=None):
        """The mean over `dim`; `dtype` casts the input first (as torch's: an integer
        tensor needs one, `t.mean(dtype=fg.float32)`)."""
        if dtype is not None:
            return self.cast(dtype).mean(dim, keepdim)
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

    def var(self, dim=None, keepdim: bool = False, correction: int = 1, *, op: str = "var"):
        """Variance over `dim` with torch's `correction`; where N - correction <= 0 it
        warns as torch does (`op`: the name the warning gives) and divides by 0."""
        axes = self._dims(dim, op)
        count = 1
        for a in axes:
            count *= self.shape[a]
        centered = self - self.mean(dim, keepdim=True)
        denom = max(count - correction, 0)
        if denom == 0:
            _warn_no_degrees_of_freedom(op)
        out = (centered * centered).sum(dim, keepdim) / denom
        if not out.requires_grad or out.node.op is not Ops.DIV:  # (empty: a constant)
            return out
        # torch's 2 (x - mean) / (N - correction): the chain rule through the mean adds
        # a sum of those terms, which is 0 in exact arithmetic but NaN with an inf element
        c, x = centered.node, self.node
        kept = tuple(1 if i in axes else n for i, n in enumerate(self.shape))
        scale = N.const(2 / denom if denom else math.inf, c.shape, c.dtype)

        def rule(g):
            return [(x, N.mul(N.expand(N.reshape(g, kept), x.shape), N.mul(c, scale)))]

        with_vjp(out.node, rule)
        return out

    def std(self, dim=None, keepdim: bool = False, correction: int = 1):
        """sqrt(var); as torch, its gradient is 0 where it is 0 (not 1 / 0 times 0)."""
        return ReduceMixin._std_of_var(ReduceMixin.var(self, dim, keepdim, correction, op="std"))

    @staticmethod
    def _std_of_var(var):
        """sqrt(var), with torch's gradient: 0 where it is 0."""
        out = var.sqrt()
        if out.requires_grad and out.node.op is Ops.SQRT:
            ref, vn = weakref.ref(out.node), var.node

            def rule(g):
                y = ref()
                zero = N.const(0, y.shape, y.dtype)
                half = N.binary(Ops.DIV, g, N.add(y, y))
                return [(vn, N.where(N.binary(Ops.CMPEQ, y, zero), zero, half))]

            with_vjp(out.node, rule)
        return out

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

    def aminmax(self, *, dim=None, keepdim: bool = False):
        """(min, max): amin and amax over `dim` (every axis when None, kept as 1s with
        `keepdim`), as torch.aminmax, with their gradients; an empty axis raises.

        >>> import fusegrad as fg
        >>> fg.tensor([[1.0, 5.0], [3.0, -2.0]]).aminmax(dim=0)
        AminmaxResult(min=tensor([ 1., -2.]), max=tensor([3., 5.]))
        """
        if dim is not None and (isinstance(dim, bool) or not hasattr(dim, "__index__")):
            raise TypeError(f"aminmax(): argument 'dim' must be int, not {type(dim).__name__}")
        if self.numel() == 0 and (dim is None or self.shape[self._dim(dim, "aminmax")] == 0):
            fail(
                DimError,
                "aminmax",
                "cannot compute aminmax over an empty dimension as the operation has no "
                f"identity (shape {self.shape})",
            )
        return AminmaxResult(self.amin(dim, keepdim), self.amax(dim, keepdim))

    def sum_to_size(self, *size):
        """Summed down to `size`, which must expand to this tensor's shape (as
        torch.Tensor.sum_to_size: the leading axes it lacks and its 1s are summed; an
        integer or bool tensor sums to int64, as `sum`). At its own shape: itself.

        >>> import fusegrad as fg
        >>> fg.ones(2, 3).sum_to_size(1, 3).tolist()
        [[2.0, 2.0, 2.0]]
        """
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        size = tuple(int(s) for s in size)
        lead = self.ndim - len(size)
        if lead < 0 or any(s not in (d, 1) for s, d in zip(size, self.shape[lead:])):
            fail(
                ShapeError,
                "sum_to_size",
                f"size {list(size)} is not expandable to size {list(self.shape)}",
            )
        if size == self.shape:
            return self
        dims = list(range(lead)) + [
            lead + i for i, (s, d) in enumerate(zip(size, self.shape[lead:])) if s == 1 != d
        ]
        out = self.sum(dims, keepdim=True) if dims else self.cast(promote(self.dtype, int64))
        return out.reshape(size)

    def max(self, dim=None, keepdim: bool = False):
        """The largest element; with an int `dim`, a (values, indices) pair as in PyTorch.

        As torch: the gradient of max() and amax() is split evenly between tied maxima
        (max() shares it among the NaNs where the maximum is NaN, amax's is NaN there), that
        of max(dim).values goes to the index max(dim) returns (the first maximum). With a
        tensor, max(other) is maximum(self, other), as torch's.
        """
        if isinstance(dim, type(self)):
            return self.maximum(dim) if not keepdim else _no_keepdim("max")
        if dim is None:
            return _nans_share(self, self.amax(None, keepdim), None)
        if isinstance(dim, (tuple, list)):
            return self.amax(dim, keepdim)
        if self.ndim == 0:  # torch: the value itself, at index 0
            self._dim(dim, "max")
            return _pair(self.reshape(1).max(0, True)[0].reshape(()), self._index0(), dim, True)
        d = self._dim(dim, "max")
        if self.ndim == 0:  # torch: the value and index 0, 0-d whatever keepdim
            return MaxResult(*self.reshape(1).max(0))
        index = self._argmax(d, keepdim=True)
        values = _at_index(self, self.amax(d, keepdim=True), index, d)
        return _pair(values, index, dim, keepdim)

    def min(self, dim=None, keepdim: bool = False):
        """The smallest element; with an int `dim`, (values, indices); min(other) is
        minimum(self, other). As max()."""
        if isinstance(dim, type(self)):
            return self.minimum(dim) if not keepdim else _no_keepdim("min")
        if dim is None:
            return _nans_share(self, self.amin(None, keepdim), None)
        if isinstance(dim, (tuple, list)):
            return self.amin(dim, keepdim)
        if self.ndim == 0:
            self._dim(dim, "min")
            return _pair(self.reshape(1).min(0, True)[0].reshape(()), self._index0(), dim, True)
        d = self._dim(dim, "min")
        if self.ndim == 0:
            return MaxResult(*self.reshape(1).min(0))
        index = self._argmin(d, keepdim=True)
        values = _at_index(self, self.amin(d, keepdim=True), index, d)
        return _pair(values, index, dim, keepdim)

    def _index0(self):
        return self._make(N.const(0, (), int64))

    def argmax(self, dim=None, keepdim: bool = False):
        """Index of the first largest element along `dim` (of the flattened tensor if None);
        a NaN counts as the largest, as in torch. Not of a bool tensor, as torch's."""
        if self.dtype.is_bool:
            fail(DTypeError, "argmax", "does not support bool input (as in PyTorch)")
        return self._argmax(dim, keepdim)

    def _argmax(self, dim=None, keepdim: bool = False):
        """argmax, bools too (max(dim)'s index)."""
        if dim is None:
            return self.reshape(-1)._argmax(0, keepdim=False)

        d = self._dim(dim, "argmax")
        if self.ndim == 0:  # index 0, 0-d whatever keepdim, as torch
            return self.reshape(1)._argmax(0)
        if 0 in self.shape:
            return argmax_composed(self, d, keepdim)
        shape = list(self.shape)
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
        return as_macro("argmax", (self,), (d, keepdim), shape, int64, argmax_composed)

    def argmin(self, dim=None, keepdim: bool = False):
        if self.dtype.is_bool:
            fail(DTypeError, "argmin", "does not support bool input (as in PyTorch)")
        return self._argmin(dim, keepdim)

    def _argmin(self, dim=None, keepdim: bool = False):
        if self.dtype.is_bool:
            return self.logical_not()._argmax(dim, keepdim)
        return self._order_flip()._argmax(dim, keepdim)

    @autocast_op("logsumexp")
    def logsumexp(self, dim, keepdim: bool = False):
        """log(sum(exp(x))) along `dim`, shifted by the maximum so that it does not overflow.

        As torch: an infinite maximum shifts by 0 instead (so [inf, 1] gives inf and
        [-inf, -inf] gives -inf, not inf - inf), and an empty `dim` gives -inf.

        >>> import fusegrad as fg
        >>> fg.tensor([float("-inf"), float("-inf")]).logsumexp(0).item()
        -inf
        """
        x = self._float()
        axes = x._dims(dim, "logsumexp")
        if any(x.shape[a] == 0 for a in axes):
            return logsumexp_composed(x, axes, keepdim)
        shape = [1 if a in axes else n for a, n in enumerate(x.shape)]
        if not keepdim:
            shape = [n for a, n in enumerate(shape) if a not in axes]
        return as_macro("logsumexp", (x,), (axes, keepdim), shape, x.dtype, logsumexp_composed)

    @autocast_op("softmax")
    @one_site
    def softmax(self, dim: int, dtype=None):
        """exp(x - max) / sum(exp(x - max)) along `dim`: three kernels for a row softmax.
        `dtype`: the input is cast to it first (an integer input needs one, as in PyTorch)."""
        dim = self._dim(dim, "softmax")
        x = _softmax_input(self, dtype, "softmax")
        if x.ndim == 0:  # a row of one: 1, as torch
            return x.reshape(1).softmax(0).reshape(())
        if x.numel() == 0:  # nothing to normalize (torch returns the empty tensor)
            return x
        if sum_is_one_reduce(x.shape, (dim,)):  # one macro node
            return x._make(macro("softmax", (x.node,), (dim,), x.shape, x.dtype))
        e = (x - x.amax(dim, keepdim=True).detach()).exp()
        return e / e.sum(dim, keepdim=True)

    @autocast_op("log_softmax")
    @one_site
    def log_softmax(self, dim: int, dtype=None):
        """x - max - log(sum(exp(x - max))) along `dim`; `dtype` as softmax's."""
        dim = self._dim(dim, "log_softmax")
        x = _softmax_input(self, dtype, "log_softmax")
        if x.ndim == 0:  # a row of one: 0, as torch
            return x.reshape(1).log_softmax(0).reshape(())
        if x.numel() == 0:
            return x
        if x.ndim == 0:  # one element along no axis, as torch: log(1) = 0
            return x.reshape(1).log_softmax(0).reshape(())
        if sum_is_one_reduce(x.shape, (dim,)):  # build the nodes at once
            return x._make(log_softmax_node(x.node, dim))
        shifted = x - x.amax(dim, keepdim=True).detach()
        return shifted - shifted.exp().sum(dim, keepdim=True).log()

    def matmul(self, other):
        return matmul(self, other)

    @autocast_op("dot")
    def dot(self, other):
        if self.ndim != 1 or other.ndim != 1:
            fail(ShapeError, "dot", f"expects 1-D tensors, got {self.shape} and {other.shape}")
        return matmul(self, other)


def _softmax_input(x, dtype, op: str):
    """softmax's input cast to `dtype`, which must be a float type; without one, the input
    itself, which must be float: PyTorch has no integer or bool softmax kernel."""
    if dtype is not None:
        dt = checked_dtype(dtype, op)
        if not dt.is_float:
            fail(DTypeNotImplementedError, op, f"not implemented for {dt.name}")
        return x.cast(dt)
    if not x.dtype.is_float:
        fail(
            DTypeNotImplementedError,
            op,
            f"not implemented for {x.dtype.name} (as in PyTorch); pass dtype=, or cast first",
        )
    return x


def log_softmax_node(xn, dim: int):
    """The nodes of `shifted - shifted.exp().sum(dim, keepdim=True).log()`, where `shifted`
    is `x - x.amax(dim, keepdim=True).detach()`, for a float node whose sum along `dim` is
    one reduce (`sum_is_one_reduce`): what a loss builds every step,
    without the 7 tensors' worth of checks of that form."""
    shape = xn.shape
    top = N.detach(N.reduce(Ops.REDUCE_MAX, xn, (dim,)))
    shifted = N.binary(Ops.ADD, xn, N.unary(Ops.NEG, N.expand(top, shape)))
    total = sum_node(N.unary(Ops.EXP, shifted), (dim,))
    lse = N.unary(Ops.LOG, total)
    return N.binary(Ops.ADD, shifted, N.unary(Ops.NEG, N.expand(lse, shape)))


def _softmax_rule(srcs, params):
    """The expansion of a "softmax" macro: the nodes of `e / e.sum(dim, keepdim=True)`,
    `e` being `(x - x.amax(dim, keepdim=True).detach()).exp()` (a row softmax's every
    call builds and keys one node instead of 8)."""
    (xn,), (dim,) = srcs, params
    shape = xn.shape
    top = N.detach(N.reduce(Ops.REDUCE_MAX, xn, (dim,)))
    e = N.unary(Ops.EXP, N.binary(Ops.ADD, xn, N.unary(Ops.NEG, _broadcast_node(top, shape))))
    return N.binary(Ops.DIV, e, _broadcast_node(sum_node(e, (dim,)), shape))


register("softmax", _softmax_rule)


def fits_class_cross_entropy(input, target) -> bool:
    """Whether `class_cross_entropy` builds cross_entropy(input, target): (N, C) float
    logits, N integer class indices, one reduce per row (fewer than SPLIT_MIN_ELEMENTS)."""
    xs, ts, tdtype = input.node.shape, target.node.shape, target.node.dtype  # (every step)
    return (
        len(xs) == 2
        and input.node.dtype.is_float
        and len(ts) == 1
        and ts[0] == xs[0]
        and not (tdtype.is_float or tdtype.is_bool)
        and xs[0] * xs[1] < SPLIT_MIN_ELEMENTS
    )


def class_cross_entropy(input, target, reduction: str):
    """cross_entropy of (N, C) logits and class indices that the caller has read and found
    to be all classes, without weight or smoothing (`fits_class_cross_entropy` holds):
    every classifier's every step.

    One macro node (ir/macro.py) that expands to the very nodes of the general form in
    nn.functional (log_softmax, then nll_loss's picked log-probabilities): a cached
    training step builds and keys one node instead of 27."""
    batch, classes = input.shape
    srcs = (input.node, target.node, index_arange(input, classes).node)
    shape = () if reduction != "none" else (batch,)
    return input._make(macro("cross_entropy", srcs, (reduction,), shape, input.dtype))


def _cross_entropy_rule(srcs, params):
    """The expansion of a "cross_entropy" macro: log_softmax, then nll_loss's picked
    log-probabilities of the targets, reduced as `params[0]` says."""
    logits, target, arange = srcs
    (reduction,) = params
    batch, classes = logits.shape
    x = log_softmax_node(logits, 1)
    t = N.reshape(target, (batch, 1))
    if t.dtype is not arange.dtype:
        dtype = promote(t.dtype, arange.dtype)
        t, arange = N.cast(t, dtype), N.cast(arange, dtype)
    shape = (batch, classes)
    hit = N.binary(Ops.CMPEQ, _broadcast_node(t, shape), _broadcast_node(arange, shape))
    picked = N.where(hit, x, N.const(0.0, shape, x.dtype))
    loss = N.unary(Ops.NEG, N.reshape(sum_node(picked, (1,)), (batch,)))
    if reduction != "none":
        loss = N.reshape(sum_node(loss, (0,)), ())
        if reduction == "mean":
            loss = N.binary(Ops.DIV, loss, N.const(batch, (), x.dtype))
    return loss


register("cross_entropy", _cross_entropy_rule)


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


SPLIT_MIN_ELEMENTS = 1 << 21  # a sum this long into few outputs is cut into parts...
SPLIT_MIN_PART = 1 << 15  # ...of at least this many elements each...
SPLIT_MAX_PARTS = 512  # ...and at most this many parts (a divisor of the split axis)
SPLIT_MAX_OUTPUTS = 16  # fewer outputs than this leave threads idle: their sums are split


def _sum_in_parts(x, axes: tuple[int, ...], keepdim: bool):
    """A long sum into few outputs as two sums: `parts` partial sums of contiguous slices
    of the first reduced axis that divides well, then the sum of the parts.

    A kernel is parallel over its outputs, so `x.sum()` would run on one thread; its
    partial sums are outputs of their own (one kernel, every thread), and the second sum
    is a tiny kernel. The parts depend on the shape alone, never on the thread count, so
    the result is the same on every machine. Below SPLIT_MIN_ELEMENTS (8 MB of float32)
    the second kernel and the larger graph cost more than the threads save. None where
    the sum is short, has many outputs, or no reduced axis has a divisor in
    [2, SPLIT_MAX_PARTS]. The result is one `sum_parts` macro node (ir/macro.py): a
    cached step builds one node for it, and the scheduler sees the two sums.

    >>> import fusegrad as fg
    >>> fg.ones(1 << 21).sum().item()
    2097152.0
    """
    params = _parts_of(x.shape, axes, keepdim)
    if params is None:
        return None
    return x._make(macro("sum_parts", (x.node,), params, params[3], x.dtype))


def sum_is_one_reduce(shape: tuple, axes: tuple) -> bool:
    """Whether `Tensor.sum` over `axes` of a `shape` (not a broadcast) builds one reduce,
    not `_sum_in_parts`' two: what a macro whose expansion holds `sum_node` over those axes
    needs, so that its nodes are the composed form's (softmax and layer norm over rows of a
    tensor of any size: a row is never split; a sum into few outputs is).

    >>> sum_is_one_reduce((4096, 4096), (1,)), sum_is_one_reduce((4, 1 << 21), (1,))
    (True, False)
    """
    return math.prod(shape) < SPLIT_MIN_ELEMENTS or _parts_of(shape, axes, True) is None


@functools.lru_cache(maxsize=256)
def _parts_of(shape: tuple, axes: tuple, keepdim: bool) -> tuple | None:
    """How `_sum_in_parts` cuts a sum of `shape` over `axes`: (the shape with the part
    axis, the axes the partial sums reduce, the part axis, the result's shape), or None."""
    count = 1
    for a in axes:
        count *= shape[a]
    if count < SPLIT_MIN_ELEMENTS or math.prod(shape) // count >= SPLIT_MAX_OUTPUTS:
        return None
    most = min(SPLIT_MAX_PARTS, count // SPLIT_MIN_PART)
    for a in sorted(axes):
        parts = next((p for p in range(most, 1, -1) if shape[a] % p == 0), None)
        if parts is not None:
            break
    else:
        return None
    split = shape[:a] + (parts, shape[a] // parts) + shape[a + 1 :]
    inner = tuple(b + 1 if b >= a else b for b in axes)  # the part axis a is kept
    out = tuple(1 if i in axes else s for i, s in enumerate(shape))
    if not keepdim:
        out = tuple(s for i, s in enumerate(shape) if i not in axes)
    return split, inner, a, out


def _sum_parts_rule(srcs, params):
    """The `sum_parts` macro: the partial sums, their sum, the result's shape."""
    split, inner, a, out = params
    partial = N.reduce(Ops.SUM, N.reshape(srcs[0], split), inner)
    return N.reshape(N.reduce(Ops.SUM, partial, (a,)), out)


register("sum_parts", _sum_parts_rule)


def _at_index(x, values, index, d: int):
    """`values` (keepdim) whose gradient goes to `x` at `index` along `d` alone, as torch's
    max(dim)/min(dim) do at ties (amax splits it instead: a rule of its own on a node of
    its own, values * 1, which is exact for every value)."""
    if not values.requires_grad:
        return values

    node = N.mul(values.node, N.const(1, values.shape, values.dtype))
    shape = [1] * x.ndim
    shape[d] = x.shape[d]
    picked = index_arange(x, x.shape[d]).reshape(shape) == index
    xn = x.node  # now, not at backward(): an in-place update rebinds x.node
    plain = values._plain  # (the class: the rule must not hold a tensor)

    def rule(g):
        return [(xn, where(picked, plain(g).expand(xn.shape), 0.0).node)]

    return values._make(with_vjp(node, rule))


def _no_keepdim(op: str):
    fail(DTypeError, op, "with a tensor argument it is elementwise and takes no keepdim")


def _nans_share(x, out, dim):
    """`out`, a max or min of `x` over `dim`, whose gradient is split among the elements
    equal to it and, where it is NaN, among the NaNs: torch's for max(), min() and
    norm(p=inf) (amax's own rule gives NaN there)."""
    if not out.requires_grad or not x.dtype.is_float:
        return out
    axes = x._dims(dim, "max")
    kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    xn, on = x.node, out.node  # now: an in-place update would rebind x.node
    node = own_node(on)

    def rule(g):
        y, gk = N.reshape(on, kept), N.reshape(g, kept)
        return [(xn, max_grad_shared(xn, y, gk, axes, nan_shares=True))]

    return out._make(with_vjp(node, rule))


def _pair(values, index, dim, keepdim: bool) -> MaxResult:
    if not keepdim:
        values, index = values.squeeze(dim), index.squeeze(dim)
    return MaxResult(values, index)


PANEL = TILE_COLS[0]  # the widest vector a matmul tile uses: one panel is one tile's columns


@autocast_op("linear")
@one_site
def linear(x, weight, bias=None):
    """x @ weight.T + bias (nn.Linear, weight stored (out_features, in_features)).

    A 2-D float input, weight and 1-D bias of one dtype (every Linear layer of a
    training step) make one macro node (ir/macro.py) that expands to the same nodes
    `x @ weight.T + bias` makes (matmul's `_product`): a cached training step builds
    and keys one node instead of 13; an input of more dims is taken as its rows, 2-D.
    Anything else takes that form.
    """
    return _linear(x, weight, bias)


@autocast_op("linear")
@one_site
def shared_weight_linear(x, weight, bias=None):
    """`linear` whose weight many products of one step read (a recurrence's hidden
    projection, one per time step): under the CPU's layout its transposed weight is
    packed into panels whatever the rows (`_product`'s `shared`), as a step's 16 rows
    alone would not pay for the copy; the copies of every step are one node (hash-consed),
    made once. The same values as `linear`."""
    return _linear(x, weight, bias, shared=True)


def _linear(x, weight, bias, shared: bool = False):
    """`linear` on its checked arguments (under its site and autocast); `shared`: see
    `shared_weight_linear`."""
    tensor = TensorBase
    if (
        isinstance(x, tensor)
        and isinstance(weight, tensor)
        and (bias is None or isinstance(bias, tensor))
    ):
        # (read on the nodes: this runs for every layer of every step)
        xn, wn = x.node, weight.node
        xs, ws, dtype = xn.shape, wn.shape, xn.dtype
        if (
            len(xs) > 2
            and len(ws) == 2
            and xs[-1] == ws[1]
            and 0 not in xs
            and wn.dtype is dtype
            and dtype.is_float
        ):
            # (..., in) as (rows, in): one GEMM over every row (a transformer's batch x
            # tokens), whose operands are packed and whose gradients are GEMMs too
            # (`_product`, PACK_FROM_ROWS), where batched each batch's rows made a
            # product of their own
            flat = _linear(x.reshape(-1, xs[-1]), weight, bias, shared)
            return flat.reshape(*xs[:-1], ws[0])
        if (
            len(xs) == 2
            and len(ws) == 2
            and xs[1] == ws[1]
            and wn.dtype is dtype
            and dtype.is_float
            and (bias is None or (bias.node.dtype is dtype and bias.node.shape == (ws[0],)))
        ):
            shape, params = (xs[0], ws[0]), ("shared",) if shared else ()
            if bias is None:
                return x._make(macro("linear", (xn, wn), params, shape, dtype), weight)
            node = macro("linear", (xn, wn, bias.node), params, shape, dtype)
            return x._make(node, weight, bias)
    out = matmul(x, weight.T)
    return out if bias is None else out + bias


def _linear_rule(srcs, params):
    """The expansion of a "linear" macro: matmul's product of x and weight.T, plus the
    bias broadcast over the rows (the nodes `x @ weight.T + bias` builds); params
    ("shared",): `shared_weight_linear`'s."""
    bias = srcs[2] if len(srcs) == 3 else None
    return _product(srcs[0], N.permute(srcs[1], (1, 0)), (), shared=bool(params), bias=bias)


register("linear", _linear_rule)


def fused_layer_norm(x, k: int, eps, weight, bias):
    """layer_norm of `x` over its last `k` axes as one macro node (ir/macro.py), or None
    where the composed form must be built (nn/normalization.py's `_normalized`).

    A float32 or float64 input that is not a broadcast, shorter than a split sum, with
    weight and bias (if any) of its dtype and of the normalized shape (every LayerNorm of a
    transformer step): the expansion is the very nodes the composed form builds, so the
    kernels are the same; a step builds and keys one node instead of 14 (a layer norm's
    host time through the cuda device was 5x its kernel's on an H100)."""
    xn = x.node
    dt, shape = xn.dtype, xn.shape
    if dt.name not in ("float32", "float64") or xn.op is Ops.EXPAND:
        return None
    if not xn.numel or not sum_is_one_reduce(shape, tuple(range(len(shape) - k, len(shape)))):
        return None
    others = [t for t in (weight, bias) if t is not None]
    normalized = shape[len(shape) - k :]
    for t in others:
        if not isinstance(t, TensorBase) or t.node.dtype is not dt or t.node.shape != normalized:
            return None
    srcs = (xn, *(t.node for t in others))
    params = (k, eps, weight is not None, bias is not None)
    return x._make(macro("layer_norm", srcs, params, shape, dt), *others)


def _layer_norm_rule(srcs, params):
    """The expansion of a "layer_norm" macro: (x - mean) * rsqrt(var + eps) * w + b, node
    for node as the Tensor operators build it (mean: a sum divided by the count)."""
    k, eps, has_weight, has_bias = params
    xn = srcs[0]
    shape, dt = xn.shape, xn.dtype
    axes = tuple(range(len(shape) - k, len(shape)))
    count = math.prod(shape[a] for a in axes)

    def mean(n):
        total = sum_node(n, axes)
        return N.binary(Ops.DIV, total, N.const(count, total.shape, dt))

    centered = N.binary(Ops.ADD, xn, N.unary(Ops.NEG, _broadcast_node(mean(xn), shape)))
    var = mean(N.binary(Ops.MUL, centered, centered))
    shifted = N.binary(Ops.ADD, var, N.const(eps, var.shape, dt))
    scale = N.unary(Ops.RECIP, N.unary(Ops.SQRT, shifted))
    out = N.binary(Ops.MUL, centered, _broadcast_node(scale, shape))
    rest = list(srcs[1:])
    if has_weight:
        out = N.binary(Ops.MUL, out, _broadcast_node(rest.pop(0), shape))
    if has_bias:
        out = N.binary(Ops.ADD, out, _broadcast_node(rest.pop(0), shape))
    return out


register("layer_norm", _layer_norm_rule)


@autocast_op("matmul")
@one_site
def matmul(a, b):
    """Matrix product with PyTorch's rules for 1-D, 2-D and batched operands.

    The product is one broadcast multiply and one sum over the shared axis,
    which the scheduler fuses into a single kernel.
    """
    a = as_tensor_like(a, b, "matmul")
    b = as_tensor_like(b, a, "matmul")
    if not isinstance(a, TensorBase) or a.ndim == 0 or b.ndim == 0:
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
    # built on nodes, not tensors: matmul runs in every layer of every step
    an = N.reshape(a.node, (1,) + a.shape) if a.ndim == 1 else a.node
    bn = N.reshape(b.node, b.shape + (1,)) if b.ndim == 1 else b.node
    k1, k2 = an.shape[-1], bn.shape[-2]
    if k1 != k2:
        fail(
            ShapeError,
            "matmul",
            f"shapes {a.shape} and {b.shape} cannot be multiplied "
            f"(inner dimensions {k1} and {k2} differ)",
        )
    batch = broadcast_shapes(an.shape[:-2], bn.shape[:-2], "matmul")
    node = product_node(an, bn, batch)
    m, n = an.shape[-2], bn.shape[-1]
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    return a._make(N.reshape(node, shape), b)


def product_node(an, bn, batch: tuple[int, ...]):
    """The (*batch, M, N) product of (..., M, K) and (..., K, N) nodes whose shapes matmul
    has checked, as one "matmul" macro node (ir/macro.py): its expansion (`_product`) is
    built when a plan is compiled, with the operand copies the device's kernels want
    (ir/layout.py), so the graph is the same for every device."""
    shape = batch + (an.shape[-2], bn.shape[-1])
    return macro("matmul", (an, bn), (batch,), shape, an.dtype)


register("matmul", lambda srcs, params: _product(srcs[0], srcs[1], params[0]))


AMX_BLOCK = 32  # pipeline/amx.py's (and pipeline/dpbf16.py's): M, K and N multiples of it


def _amx_shaped(an, bn) -> bool:
    """A bfloat16 product that `pipeline/amx.py` runs on AMX tiles once B is packed (or
    `pipeline/dpbf16.py` on `vdpbf16ps` register tiles, where the CPU has no AMX)."""
    (m, k), n = an.shape[-2:], bn.shape[-1]
    return (
        len(bn.shape) == 2
        and an.dtype.name == "bfloat16"
        and bn.dtype.name == "bfloat16"
        and m % AMX_BLOCK == 0
        and k % AMX_BLOCK == 0
        and n % AMX_BLOCK == 0
        and min(m, k, n) > 0
    )


def _pack_bf16_pairs(bn):
    """B (K, N) copied once into AMX's layout, read back through a view as (K, N): for each
    32 rows of K (one reduction step) and each 32 columns, 16 rows of 32 pairs
    (B[32s + 2a, 32c + d], B[32s + 2a + 1, 32c + d]): a 32 x 16 tile of B is 16 rows of 64
    contiguous bytes (`tdpbf16ps`'s VNNI operand) 128 bytes apart, the block's other tile
    in between, and a step of one 32-column block is 2 KiB in one piece. The copy walks
    K's steps outermost, so each step of it reads 32 rows of B from the same 32 pages
    (a row of 2048 bfloat16 is a page) and writes 2 KiB in order: at 2048^2 half the time
    of a copy into 32-column panels along K, which walked down each panel two new pages a
    step. The kernel reads a block's steps a step apart, which `_step_padding` keeps off
    multiples of L2's period (130 KiB at N = 2048, not 128)."""
    return _pairs_view(_pair_copy(bn), *bn.shape)


def _pair_copy(bn):
    """The copy of B (K, N) that `_pack_bf16_pairs` reads: a node of shape
    (K/32, N/32 + pad, 16, 32, 2), (step, column block, pair, column, of the pair), where
    `pad` is `_step_padding`'s block of zeros after each step's blocks."""
    k, n = bn.shape
    steps = N.reshape(bn, (k // AMX_BLOCK, AMX_BLOCK // 2, 2, n // AMX_BLOCK, AMX_BLOCK))
    blocks = N.permute(steps, (0, 3, 1, 4, 2))
    pad = _step_padding(n // AMX_BLOCK)
    return N.contiguous(
        N.pad(blocks, ((0, 0), (0, pad), (0, 0), (0, 0), (0, 0))),
        "matmul: a bfloat16 right operand packed in pairs along K for AMX tiles",
    )


def _step_padding(blocks: int) -> int:
    """The unused 32-column blocks after each step of B's packed copy (2 KiB each): one
    where the step's blocks are even in number, so that a step is an odd multiple of 2 KiB.
    The kernel walks a block's steps one step apart, and a step a multiple of 8 KiB apart
    maps them to a few of L2's sets: at N = 2048 a step is 128 KiB, L2's period (2 MiB,
    16 ways), so a group's panel (1 MiB, `pipeline/amx.py`) all fell in one 64th of the
    sets, 64 lines for 16 ways, and came back from memory for every M block; 130 KiB
    apart the steps fall in every set.

    >>> [_step_padding(b) for b in (1, 2, 5, 64)]
    [0, 1, 0, 1]
    """
    return 1 - blocks % 2


def _pairs_view(packed, k: int, n: int):
    """The (K, N) view of B's copy packed in pairs (`_pair_copy`), its padding left out."""
    steps, blocks, pairs, cols, two = packed.shape
    used = N.shrink(packed, ((0, steps), (0, n // AMX_BLOCK), (0, pairs), (0, cols), (0, two)))
    return N.reshape(N.permute(used, (0, 2, 4, 1, 3)), (k, n))


def _rows_in_place(an) -> bool:
    """Whether A's 16 x 32 tiles are read where A is, rows K apart: A is a buffer, or a copy
    the scheduler makes anyway, row-major (reshapes of it too). Anything else (a transposed
    view, a slice, a computed value that could fuse into the product) is copied into tiles
    first, as the kernel takes its operands only as plain loads with K adjacent."""
    while an.op is Ops.RESHAPE:
        an = an.srcs[0]
    return an.op in (Ops.BUFFER, Ops.CONTIGUOUS)


def _pack_bf16_rows(an):
    """A (..., M, K) copied once into AMX's tiles, read back through a view as (..., M, K):
    for each 16 rows, blocks of 32 along K, each 16 rows of 32 adjacent, so a 16 x 32 tile
    of A is 1 KiB in one piece. (A row-major A is read in place instead, `_rows_in_place`:
    its rows K apart, a multiple of 4 KiB at K = 2048, fall in one set of the L1 cache and
    the kernel takes about 6% longer, about what the copy costs, so the two are even in
    time and the in-place read saves a pass over A and its copy's memory.)"""
    *lead, m, k = an.shape
    nb = len(lead)
    blocks = N.reshape(an, (*lead, m // 16, 16, k // 32, 32))
    order = (*range(nb), nb, nb + 2, nb + 1, nb + 3)  # (..., m/16, k/32, 16, 32)
    packed = N.contiguous(
        N.permute(blocks, order),
        "matmul: a bfloat16 left operand packed in 16 x 32 tiles for AMX",
    )
    return N.reshape(N.permute(packed, order), an.shape)


# A product of at least this many rows packs a right operand read along K (a transposed
# weight, `x @ W.T`: every Linear) into panels whatever its size, and takes its gradients as
# products of its own (`_product_gradients`): read in place, such a B makes the tile a
# dot product along K, ending in horizontal sums, at half the packed sgemm's rate; the
# copy of K x N costs less than the rows save from about this many on. (Fewer rows, as a
# LeNet's or an MLP's batch of 64, keep the fused forms: their steps gained nothing.)
PACK_FROM_ROWS = 256


def _read_along_k(bn) -> bool:
    """Whether a 2-D right operand is a transposed view (its rows contiguous along K)."""
    return bn.op is Ops.PERMUTE and bn.arg == (1, 0)


# The rows of a left operand's panel (`_left_panels`): a float32 register tile's rows, so a
# tile's step along K reads one 32-byte piece of its panel.
LEFT_PANEL = 8


def _left_panels_pay(an, n: int) -> bool:
    """Whether a 2-D float32 left operand is copied into panels of LEFT_PANEL rows
    (`_left_panels`): a transposed view (a weight gradient's X^T, its K a whole row of X
    apart) with at least PACK_FROM_ROWS rows (each step along K at least 1 KiB further)
    and as many steps along K, for at least one panel of columns. Read in place, every
    step of a tile down K lands on a new page, out of the prefetcher's reach: X^T @ G with
    X 1024 x 1024 ran at 144 GFLOP/s, and at 268 with the copy (Intel Xeon, 2 threads)."""
    m, k = an.shape[-2:]
    return (
        len(an.shape) == 2
        and an.dtype.name == "float32"
        and _read_along_k(an)  # (its columns are X's rows: M adjacent, K strided)
        and m % LEFT_PANEL == 0
        and min(m, k) >= PACK_FROM_ROWS
        and n >= PANEL
    )


def _left_panels(an):
    """A (M, K) transposed view copied into panels of LEFT_PANEL rows, K adjacent within a
    panel (M/8, K, 8), read back through a view as (M, K)."""
    m, k = an.shape
    rows = N.permute(an, (1, 0))  # (K, M): the rows as the copy reads them, in order
    panels = N.contiguous(
        N.permute(N.reshape(rows, (k, m // LEFT_PANEL, LEFT_PANEL)), (1, 0, 2)),
        f"matmul: a transposed left operand packed in panels of {LEFT_PANEL} rows",
    )
    return N.reshape(N.permute(panels, (0, 2, 1)), (m, k))


# A right operand whose columns are no multiple of PANEL, from this many columns, is packed
# with its last panel padded with zeros, and the product computed over the padded columns
# (the padding's products are zeros, cut off after): a vocabulary's 5000 columns otherwise
# take 16-lane tiles unpacked (an LSTM language model's decoder and its weight gradient ran
# at 180 and 155 GFLOP/s).
PAD_PANELS_FROM = 16 * PANEL


def _product(an, bn, batch: tuple[int, ...], shared: bool = False, bias=None):
    """The expansion of a "matmul" macro: the (*batch, M, N) product node of (..., M, K)
    and (..., K, N) nodes, one broadcast multiply and one sum over K, which the scheduler
    fuses into a single kernel. The operands are first copied where the layout the plan
    is compiled for asks (ir/layout.py `current()`: the CPU's): an AMX-shaped bfloat16
    product's into AMX's tiles and pairs, a float32 right operand too big for cache (or
    read along K by enough rows) into panels of columns; where such a product is 2-D and
    big enough, its gradients are products too (`_takes_product_gradients`). Its
    gradients are derived from this expansion under the same layout (ir/autodiff.py
    "layout_grad"). `shared`: a right operand read along K is packed whatever the rows
    (`shared_weight_linear`). `bias`: a (N,) node added to every row (a linear layer's),
    inside the padded columns where those are (`PAD_PANELS_FROM`)."""
    (m, k), n = an.shape[-2:], bn.shape[-1]
    big = k * n * bn.dtype.itemsize >= PANEL_CACHE_BYTES
    sources = (an, bn)
    wide = n  # the columns computed: n, or n padded to whole panels
    if _amx_shaped(an, bn) and layout.current().pack_bf16_pairs:
        an = an if _rows_in_place(an) else _pack_bf16_rows(an)
        bn = _pack_bf16_pairs(bn)
    elif (
        len(bn.shape) == 2
        and ((n % PANEL == 0 and n > PANEL) or n >= PAD_PANELS_FROM)
        and (big or ((m >= PACK_FROM_ROWS or shared) and _read_along_k(bn)))
        and layout.current().pack_panels
    ):
        # a right operand too big for cache is copied once into panels of PANEL columns, rows
        # adjacent: the kernel then streams one panel (its vector loads) from memory in order
        wide = -(-n // PANEL) * PANEL
        padded = N.pad(bn, ((0, 0), (0, wide - n)))
        panels = N.contiguous(
            N.permute(N.reshape(padded, (k, wide // PANEL, PANEL)), (1, 0, 2)),
            f"matmul: a large right operand packed in panels of {PANEL} columns",
        )
        bn = N.reshape(N.permute(panels, (1, 0, 2)), (k, wide))
    # (the layout asked last: a product that would pack nothing stays one expansion for
    # every layout, its gradients derived at once: ir/autodiff.py `depends_on_layout`)
    if _left_panels_pay(an, n) and layout.current().pack_panels:
        an = _left_panels(an)
    # (..., M, 1, K) * (..., 1, N, K) summed over K
    full = batch + (m, wide, k)
    nd = len(bn.shape)
    bt = N.permute(bn, tuple(range(nd - 2)) + (nd - 1, nd - 2))
    x = _broadcast_node(N.reshape(an, an.shape[:-2] + (m, 1, k)), full)
    y = _broadcast_node(N.reshape(bt, bn.shape[:-2] + (1, wide, k)), full)
    # ints keep their width, as torch
    node = N.reduce(Ops.SUM, N.binary(Ops.MUL, x, y), (len(full) - 1,))
    if k == 0:  # a sum of no products is 0, as in torch
        node = N.const(0, node.shape, node.dtype)
    elif _takes_product_gradients(*sources, batch):
        rule = _product_gradients(*sources)
        if wide != n:  # (the padded columns' gradient is dropped: they are cut off)
            rule = functools.partial(_of_columns, rule, batch + (m, wide), n)
        with_vjp(node, rule)
    out = N.reshape(node, batch + (m, wide))
    if bias is not None:
        if wide != n:
            bias = N.pad(bias, ((0, wide - n),))
        out = N.binary(Ops.ADD, out, _broadcast_node(bias, out.shape))
    if wide != n:
        out = N.shrink(out, tuple((0, s) for s in batch) + ((0, m), (0, n)))
    return out


def _of_columns(rule, shape: tuple[int, ...], n: int, g):
    """`rule` (a product's gradient rule) applied to the first n columns of the gradient
    `g` of a product computed over padded columns (`PAD_PANELS_FROM`)."""
    g = N.reshape(g, shape)
    return rule(N.shrink(g, tuple((0, s) for s in shape[:-1]) + ((0, n),)))


def _takes_product_gradients(an, bn, batch: tuple[int, ...]) -> bool:
    """Whether a product's gradients are products of their own (`_product_gradients`),
    where the layout packs them as any product (ir/layout.py): a 2-D AMX-shaped bfloat16
    one where bfloat16 pairs are packed (its operands copied into tiles and pairs,
    whatever their strides), or a 2-D float32 one of at least PACK_FROM_ROWS rows where
    panels are (its right operands read along K packed in panels). Elsewhere the
    broadcast multiply's generic rule, whose contractions read B and A across their rows
    (a GPU's tiles stage them through shared memory as they are)."""
    (m, k), n = an.shape[-2:], bn.shape[-1]
    if len(an.shape) == 2 and _amx_shaped(an, bn):
        return layout.current().pack_bf16_pairs
    return (
        not batch
        and an.dtype.name == "float32"
        and m >= PACK_FROM_ROWS
        and min(n, k) >= PANEL
        and layout.current().pack_panels
    )


def _product_gradients(an, bn):
    """The gradient rule of a 2-D product A @ B: both gradients as products, G @ B^T and
    A^T @ G (or (G^T @ A)^T: below), `product_node`s expanded at once inside an expansion,
    which the CPU packs and tiles as any product (A^T and G^T as left operands in panels
    of rows, `_left_panels`), instead of the broadcast multiply's generic rule."""
    (m, k), n = an.shape, bn.shape[1]

    def rule(g):
        g2 = N.reshape(g, (m, n))
        # B's gradient A^T @ G, or (G^T @ A)^T where A is the wider: the wider operand on
        # the right, where its columns are the tile's lanes (packed where big), the
        # narrower one the left, broadcast (a Linear's W then gets G^T @ X, in its layout)
        if k > n:
            grad_b = N.permute(product_node(N.permute(g2, (1, 0)), an, ()), (1, 0))
        else:
            grad_b = product_node(N.permute(an, (1, 0)), g2, ())
        return [(an, product_node(g2, N.permute(bn, (1, 0)), ())), (bn, grad_b)]

    return rule
