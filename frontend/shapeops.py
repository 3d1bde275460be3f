"""Tensor methods built from views and reductions: einsum, tril, split, repeat, prod, cumsum,
sort, ... (PyTorch's names and arguments).

>>> import fusegrad as fg
>>> x = fg.arange(6).reshape(2, 3)
>>> fg.einsum("ij->ji", x).tolist()
[[0, 3], [1, 4], [2, 5]]
>>> x.cumsum(1).tolist(), x.prod(1).tolist()
([[0, 1, 3], [3, 7, 12]], [0, 60])

Scans (cumsum, cumprod, cummax, cummin, logcumsumexp) take log2(n) shifted
steps along the axis (O(n log n) work, no new primitive). Sorting (sort,
argsort, topk, kthvalue, median) ranks each element by comparing it with every
other one on its row, so a row of n elements costs n^2 comparisons: above
SORT_LIMIT compared pairs they raise rather than run out of memory.
"""

from __future__ import annotations

import functools
import itertools
import math
import string
from collections import namedtuple

import numpy as np

from . import autograd_state
from .autocast import autocast_op
from .creation_nodes import host_table, index_arange, tensor_like
from .errors import (
    ArgumentError,
    DimError,
    DTypeError,
    DTypeNotImplementedError,
    IndexingError,
    ShapeError,
    fail,
)
from .extend import custom_gradient
from .indexing import _scattered_sum, flip, values_for_shape
from .ir import node as N
from .ir.autodiff import own_node, with_vjp
from .ir.dtypes import bool_, default_float, float64, int64, promote
from .ir.ops import Ops
from .mathops import isinf, isnan, logaddexp
from .movement import cat, sliding_windows, stack
from .reduce import (
    ReduceMixin,  # (at the top: an import in a function runs each call)
    _nans_share,
)
from .tensor_base import TensorBase, as_tensor_like, broadcast_shapes, where

SORT_LIMIT = 1 << 24  # compared pairs (rows * n * n) a sort may build

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _where(c, a, b):
    return where(c, a, b)


def _arange_along(like, n: int, dim: int, ndim: int):
    """0..n-1 along axis `dim` of `ndim` (an index table of `like`'s class)."""
    shape = [1] * ndim
    shape[dim] = n
    return index_arange(like, n).reshape(shape)


# ---------------------------------------------------------------- reductions


def _tree_reduce(x, dim: int, combine, identity):
    """Combine the elements along `dim` pairwise: pad to a power of two with `identity`,
    then halve log2(n) times. Each step is exact where `combine` is (max, *)."""
    n = x.shape[dim]
    size = 1 << max(n - 1, 0).bit_length()
    if size != n:
        pads = [(0, 0)] * x.ndim
        pads[dim] = (0, size - n)
        fill = x._make(N.pad(N.const(True, x.shape, bool_), tuple(pads)))
        x = _where(fill, x._make(N.pad(x.node, tuple(pads))), identity)
    while x.shape[dim] > 1:
        half = x.shape[dim] // 2
        lo = x.narrow(dim, 0, half)
        hi = x.narrow(dim, half, half)
        x = combine(lo, hi)
    return x


@autocast_op("prod")
def prod(x, dim=None, keepdim: bool = False, dtype=None):
    """The product over `dim` (all elements if None); bools and ints multiply as int64.

    Multiplied pairwise (log2(n) steps). The gradient is torch's: result / x where the
    tensor holds no zero (NaN at an infinite or NaN element, as torch's), else the
    product of the other elements (exclusive running products both ways); a full prod()
    over more than one zero has gradient 0, as torch's backward.

    >>> import fusegrad as fg
    >>> x = fg.tensor([2.0, 0.0, 3.0], requires_grad=True)
    >>> x.prod().backward()
    >>> x.grad.tolist()
    [0.0, 6.0, 0.0]
    """
    if dtype is not None:
        x = x.cast(dtype)
    elif not x.dtype.is_float:
        x = x.cast(int64)
    if dim is None:
        out = _prod_along(x.reshape(-1), 0, True, full=True) if x.ndim else x
        return out.reshape((1,) * x.ndim) if keepdim else out.reshape(())
    d = x._dim(dim, "prod")
    if x.ndim == 0:
        return x
    return _prod_along(x, d, keepdim, full=False)


def _prod_along(x, d: int, keepdim: bool, full: bool):
    """The product along `d` (`full`: of all of x, flattened), with torch's gradient."""
    if x.shape[d] == 0:
        shape = x.shape[:d] + (1,) + x.shape[d + 1 :]
        out = x._make(N.const(1, shape, x.dtype))
        return out if keepdim else out.squeeze(d)
    out = _tree_reduce(x, d, lambda a, b: a * b, 1)
    if out.requires_grad:
        out = _with_prod_gradient(out, x, d, full)
    return out if keepdim else out.squeeze(d)


def _with_prod_gradient(out, x, d: int, full: bool):
    """`out`, the product of `x` along `d` (kept), with torch's prod_backward as its rule."""
    xn, rn = x.node, out.node  # now: an in-place update would rebind x.node
    plain = x._plain  # (the class: the rule must not hold a tensor)

    def rule(g):
        xs, res, g = plain(xn), plain(rn), plain(g)
        zeros = (xs == 0).sum()
        others = g * _exclusive_products(xs, d)
        if full:  # torch's backward takes a full product over two zeros to be 0 outright
            others = _where(zeros > 1, 0.0, others)
        return [(xn, _where(zeros == 0, g * (res / xs), others).node)]

    node = own_node(rn)
    return out._make(with_vjp(node, rule))


def _exclusive_products(x, d: int):
    """The product of the other elements along `d` at each place, without division:
    [b c, a c, a b] for [a, b, c] (running products from either end, as torch's)."""
    n = x.shape[d]
    ones = x._make(N.const(1, narrow(x, d, 0, 1).shape, x.dtype))
    before = cumprod(cat([ones, narrow(x, d, 0, n - 1)], d), d)
    after = flip(cumprod(cat([ones, flip(narrow(x, d, 1, n - 1), [d])], d), d), [d])
    return before * after


def all_(x, dim=None, keepdim: bool = False):
    """True where every element along `dim` is nonzero (True for an empty reduction); of a
    uint8 tensor, 1 or 0 as uint8, as torch keeps its old behaviour there."""
    if x.numel() == 0:
        return _as_uint8_if(x, _empty_logical(x, dim, keepdim, True))
    return _as_uint8_if(x, _logical_reduce(x, dim, keepdim, "all"))


def any_(x, dim=None, keepdim: bool = False):
    """True where some element along `dim` is nonzero (uint8 for a uint8 tensor, as all)."""
    if x.numel() == 0:
        return _as_uint8_if(x, _empty_logical(x, dim, keepdim, False))
    return _as_uint8_if(x, _logical_reduce(x, dim, keepdim, "any"))


def _logical_reduce(x, dim, keepdim: bool, op: str):
    """`any`: the max over `dim` of x as 0/1; `all`: not any of not x. Built as nodes, one
    tensor in all (a distribution's every argument and sample check reads one, at every
    step of a policy's episode)."""
    axes = x._dims(dim, op)
    n = x.node if x.dtype.is_bool else N.cast(x.node, bool_)
    if op == "all":
        n = N.unary(Ops.NEG, n)  # (on bools: not)
    n = N.cast(N.reduce(Ops.REDUCE_MAX, N.cast(n, int64), axes), bool_)
    if op == "all":
        n = N.unary(Ops.NEG, n)
    if not keepdim:
        n = N.reshape(n, tuple(s for i, s in enumerate(x.shape) if i not in axes))
    return x._make(n)


def _as_uint8_if(x, out):
    return out.cast(x.dtype) if x.dtype.name == "uint8" else out


def _empty_logical(x, dim, keepdim, value):
    axes = x._dims(dim, "all")
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    if not keepdim:
        shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return x._make(N.const(value, shape, bool_))


@autocast_op("norm")
def norm(x, p="fro", dim=None, keepdim: bool = False):
    """The vector p-norm over `dim` (all elements if None): p in fro, 2, 1, inf, -inf, 0 or a
    number. The 2-norm's gradient at zero is 0, as PyTorch's."""
    if not x.dtype.is_float:
        fail(DTypeError, "norm", f"needs a float tensor, got {x.dtype.name}")
    if p == "fro" or p == 2:
        n = (x * x).sum(dim, keepdim=True).sqrt()
        out = x._make(N.contiguous(n.node, "norm with its own gradient"), x)
        if out.requires_grad:
            safe = _where(n == 0, 1, n).detach()
            share = _where(n == 0, 0, x / safe)
            xn, sn = x.node, share.node  # now: an in-place update would rebind x.node
            with_vjp(out.node, lambda g: [(xn, N.mul(N.expand(g, xn.shape), sn))])
        return out if keepdim else out.squeeze(dim if dim is not None else None)
    a = x.abs()
    if p == math.inf or p == "inf":  # (torch's gradient: shared among NaNs, as max()'s)
        return _nans_share(a, a.amax(dim, keepdim), dim)
    if p == -math.inf:
        return _nans_share(a, a.amin(dim, keepdim), dim)
    if p == 0:
        return (a != 0).cast(x.dtype).sum(dim, keepdim)
    if p == 1:
        return a.sum(dim, keepdim)
    if isinstance(p, (int, float)):
        out = (a**p).sum(dim, keepdim) ** (1.0 / p)
        return _with_norm_gradient(out, x, p, dim) if out.requires_grad else out
    fail(ShapeError, "norm", f"unsupported p {p!r}")


def _with_norm_gradient(out, x, p: float, dim):
    """`out`, the p-norm of x over `dim` (p not 0, 1, 2 or inf), with torch's gradient:
    x |x|^(p-2) g / norm^(p-1) (sgn(x) |x|^(p-1) ... for p < 2), 0 where the norm is 0
    (the chain rule through the root gives 0 * inf = NaN there)."""
    axes = x._dims(dim, "norm")
    kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))

    def rule(g, x, norm):
        g, norm = g.reshape(kept), norm.reshape(kept)
        a = x.abs()
        if p < 1:  # torch: |x|^(p - 1) is 0 at x = 0, and no division by the norm
            scaled = x.sign() * _where(x == 0, 0.0, a ** (p - 1))
            return [scaled * g * norm ** (1 - p), None]
        scaled = x.sign() * a ** (p - 1) if p < 2 else x * a ** (p - 2)
        return [scaled * _where(norm == 0, 0.0, g / norm ** (p - 1)), None]

    return custom_gradient(out, [x, out], rule, own_node=True)  # (out: for 2nd derivatives)


@autocast_op("var")
def var(x, dim=None, unbiased=None, keepdim: bool = False, correction=None, *, _op="var"):
    """Variance with PyTorch's `correction` (default 1) or the older `unbiased` flag."""
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if isinstance(dim, bool):  # var(True): the old positional unbiased
        dim, correction = None, int(dim)
    return ReduceMixin.var(x, dim, keepdim, correction, op=_op)


@autocast_op("std")
def std(x, dim=None, unbiased=None, keepdim: bool = False, correction=None, *, _op="std"):
    return ReduceMixin._std_of_var(var(x, dim, unbiased, keepdim, correction, _op=_op))


@autocast_op("var_mean")
def var_mean(x, dim=None, unbiased=None, keepdim: bool = False, correction=None):
    """(var, mean) over `dim`, as torch.var_mean (its mean is Welford's: see std_mean)."""
    return var(x, dim, unbiased, keepdim, correction, _op="var_mean"), _welford_mean(
        x, dim, keepdim
    )


@autocast_op("std_mean")
def std_mean(x, dim=None, unbiased=None, keepdim: bool = False, correction=None):
    """(std, mean) over `dim`, as torch.std_mean.

    The mean is torch's, which takes it by Welford's update m += (x - m) / k in the
    order of the elements: NaN where an infinity is followed by any element (inf - inf),
    inf where only the last is infinite, and +0.0 for a mean of -0.0s. Its gradient is
    the mean's, 1 / N.

    >>> import fusegrad as fg
    >>> [m.item() for m in (fg.tensor([1.0, 2.0, float("inf")]).std_mean()[1],
    ...                     fg.tensor([float("inf"), 1.0, 2.0]).std_mean()[1])]
    [inf, nan]
    """
    return std(x, dim, unbiased, keepdim, correction, _op="std_mean"), _welford_mean(
        x, dim, keepdim
    )


def _welford_mean(x, dim, keepdim: bool):
    """x.mean(dim), with the NaNs and zero signs of Welford's update (std_mean's)."""
    mean = x.mean(dim, keepdim)
    if x.ndim == 0 or x.numel() == 0:
        return mean

    axes = x._dims(dim, "mean")
    last = None  # the last element of each reduction, in the order of the elements
    for a in axes:
        at_end = _arange_along(x, x.shape[a], a, x.ndim) == x.shape[a] - 1
        last = at_end if last is None else last & at_end
    followed = (isinf(x) & ~last).any(dim, keepdim)
    # (+ 0.0: -0.0 becomes 0.0, as Welford's; the scalars keep the mean's dtype)
    return _where(followed, math.nan, mean + 0.0)


@autocast_op("sum")
def sum_(x, dim=None, keepdim: bool = False, dtype=None, axis=None):
    """Sum over `dim` (`axis` is accepted as numpy's name)."""
    if axis is not None:
        if dim is not None:
            fail(ShapeError, "sum", "give dim or axis, not both")
        dim = axis
    return ReduceMixin.sum(x, dim, keepdim, dtype)


# ---------------------------------------------------------------- matrices


@autocast_op("bmm")
def bmm(a, b):
    """Batched matrix product of (b, n, m) and (b, m, p)."""
    if a.ndim != 3 or b.ndim != 3:
        fail(ShapeError, "bmm", f"expects 3-D tensors, got {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0]:
        fail(ShapeError, "bmm", f"batch sizes differ: {a.shape} and {b.shape}")
    return a @ b


def _scaled_sum(op: str, inp, product, beta, alpha):
    """beta * inp + alpha * product, as torch's addmm family (its operands checked by
    `_product_of`): inp broadcast to the product's shape; beta 0 ignores inp and alpha 0 the
    product (their NaN and inf too: the term is 0, its cotangent 0, as torch's); with
    integer tensors an integral beta and alpha (PyTorch truncates a fractional one: refused
    here)."""
    inp = as_tensor_like(inp, product, op)
    for name, v in (("beta", beta), ("alpha", alpha)):
        if not product.dtype.is_float and not float(v).is_integer():
            fail(
                DTypeError,
                op,
                f"{name}={v!r} with {product.dtype.name} tensors: PyTorch truncates it, "
                "fusegrad refuses; cast the tensors to a float type first",
            )
    shape = product.shape
    if broadcast_shapes(inp.shape, shape, op) != shape:
        fail(ShapeError, op, f"input of shape {inp.shape} does not broadcast to {shape}")
    if not product.dtype.is_float:  # (2.0 is 2: the product stays an integer)
        beta, alpha = int(beta), int(alpha)
    nothing = product._make(N.const(False, (), bool_))
    if alpha == 0:  # the product ignored, its cotangent 0 (a where's: not g * 0)
        term = _where(nothing, product, 0)
    else:
        term = product if alpha == 1 else product * alpha
    if beta == 0:
        return term + _where(nothing, inp, 0)
    return (inp if beta == 1 else inp * beta) + term


def _product_of(op: str, input, *operands) -> None:
    """Check the operands of `op`'s product, (name, tensor, ndim) each: their ranks, that
    they multiply (the batch too), and that they and `input` have one dtype."""
    for name, t, ndim in operands:
        if t.ndim != ndim:
            what = {1: "a vector", 2: "a matrix", 3: "a batch of matrices"}[ndim]
            fail(ShapeError, op, f"{name} must be {what}, got a {t.ndim}-D tensor {t.shape}")
    (na, a, _), (nb, b, _) = operands
    inner = b.shape[0] if b.ndim < 3 else b.shape[1]
    if a.shape[-1] != inner or (a.ndim == 3 and a.shape[0] != b.shape[0]):
        fail(ShapeError, op, f"{na} and {nb} shapes cannot be multiplied ({a.shape} and {b.shape})")
    dtypes = {t.dtype for t in (as_tensor_like(input, a, op), a, b)}
    if len(dtypes) > 1:  # (torch's rule: no promotion)
        names = ", ".join(sorted(d.name for d in dtypes))
        fail(DTypeError, op, f"expects tensors of one dtype, got {names}")


@autocast_op("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta * input + alpha * (mat1 @ mat2), as torch.addmm (input broadcast to the
    product; beta 0 ignores input, NaN and inf included).

    >>> import fusegrad as fg
    >>> fg.addmm(fg.ones(2), fg.eye(2), fg.tensor([[1.0, 2.0], [3.0, 4.0]]), beta=2).tolist()
    [[3.0, 4.0], [5.0, 6.0]]
    """
    _product_of("addmm", input, ("mat1", mat1, 2), ("mat2", mat2, 2))
    return _scaled_sum("addmm", input, mat1 @ mat2, beta, alpha)


@autocast_op("addmv")
def addmv(input, mat, vec, *, beta=1, alpha=1):
    """beta * input + alpha * (mat @ vec), as torch.addmv."""
    _product_of("addmv", input, ("mat", mat, 2), ("vec", vec, 1))
    return _scaled_sum("addmv", input, mat @ vec, beta, alpha)


def _batched(op: str, input, batch1, batch2) -> None:
    _product_of(op, input, ("batch1", batch1, 3), ("batch2", batch2, 3))


@autocast_op("baddbmm")
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * (batch1 @ batch2), batch by batch, as torch.baddbmm."""
    _batched("baddbmm", input, batch1, batch2)
    return _scaled_sum("baddbmm", input, batch1 @ batch2, beta, alpha)


@autocast_op("addbmm")
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * (the sum over the batch of batch1 @ batch2), as torch.addbmm."""
    _batched("addbmm", input, batch1, batch2)
    return _scaled_sum("addbmm", input, (batch1 @ batch2).sum(0), beta, alpha)


def _tri(x, diagonal: int, upper: bool, op: str):
    if x.ndim < 2:
        fail(ShapeError, op, f"input tensor must have at least 2 dimensions, got {x.shape}")
    n, m = x.shape[-2:]
    r = _arange_along(x, n, 0, 2)
    c = _arange_along(x, m, 1, 2)
    keep = (c - r >= diagonal) if upper else (c - r <= diagonal)
    zero = x._make(N.const(0, (), x.dtype))
    return _where(keep, x, zero)


def tril(x, diagonal: int = 0):
    """The lower triangle (elements with col - row <= diagonal); the rest is 0.

    >>> import fusegrad as fg
    >>> fg.ones(2, 2).tril().tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    return _tri(x, diagonal, False, "tril")


def triu(x, diagonal: int = 0):
    return _tri(x, diagonal, True, "triu")


def diagonal(x, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal of the (dim1, dim2) planes, as a last axis (a view: a strided slice)."""
    a, b = x._dim(dim1, "diagonal"), x._dim(dim2, "diagonal")
    if a == b:
        fail(ShapeError, "diagonal", f"dim1 and dim2 cannot be the same axis ({dim1})")
    rest = [k for k in range(x.ndim) if k not in (a, b)]
    y = x.permute(rest + [a, b])
    n, m = y.shape[-2:]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    flat = y.reshape(y.shape[:-2] + (n * m,))
    if length == 0:
        return flat[..., 0:0]
    return flat[..., start : start + (length - 1) * (m + 1) + 1 : m + 1]


def diag(x, diagonal: int = 0):
    """A 1-D tensor's square matrix with it on a diagonal, or a 2-D tensor's diagonal (a new
    tensor, as torch's, where `diagonal()` is a view)."""
    if x.ndim == 2:
        return diagonal_(x, diagonal).clone()
    if x.ndim != 1:
        fail(ShapeError, "diag", f"expects a 1-D or 2-D tensor, got shape {x.shape}")
    n, k = x.shape[0], abs(diagonal)
    size = n + k
    r = _arange_along(x, size, 0, 2)
    c = _arange_along(x, size, 1, 2)
    if diagonal >= 0:
        v = x.reshape(n, 1).pad((0, 0, 0, k)).expand(size, size)
    else:
        v = x.reshape(1, n).pad((0, k)).expand(size, size)
    zero = x._make(N.const(0, (), x.dtype))
    return _where(c - r == diagonal, v, zero)


diagonal_ = diagonal


def diag_embed(x, offset: int = 0):
    """Each last-axis vector of x on the `offset` diagonal of a square matrix (zeros
    elsewhere), as torch.diag_embed: (..., n) -> (..., n + |offset|, n + |offset|). One
    `where` over the whole batch, whatever its size.

    >>> import fusegrad as fg
    >>> fg.diag_embed(fg.tensor([[1.0, 2.0], [3.0, 4.0]]), 1)[1].tolist()
    [[0.0, 3.0, 0.0], [0.0, 0.0, 4.0], [0.0, 0.0, 0.0]]
    """
    if x.ndim == 0:
        fail(ShapeError, "diag_embed", "expects a tensor of at least 1 dimension, got a 0-d one")
    n, k, lead = x.shape[-1], abs(offset), x.shape[:-1]
    size = n + k
    r = _arange_along(x, size, 0, 2)
    c = _arange_along(x, size, 1, 2)
    if offset >= 0:  # row i holds x_i (rows past n: padding, off the diagonal)
        v = x.reshape(*lead, n, 1).pad((0, 0, 0, k)).expand(*lead, size, size)
    else:  # column j holds x_j
        v = x.reshape(*lead, 1, n).pad((0, k)).expand(*lead, size, size)
    zero = x._make(N.const(0, (), x.dtype))
    return _where(c - r == offset, v, zero)


@autocast_op("trace")
def trace(x):
    if x.ndim != 2:
        fail(ShapeError, "trace", f"expects a matrix, got shape {x.shape}")
    return diagonal(x).sum()


def outer(a, b):
    if a.ndim != 1 or b.ndim != 1:
        fail(ShapeError, "outer", f"expects 1-D tensors, got {a.shape} and {b.shape}")
    return a.reshape(-1, 1) * b.reshape(1, -1)


def tensordot(a, b, dims=2):
    """Sum of products over axes of `a` and `b`, as torch.tensordot: `dims` an int n (a's
    last n axes with b's first n) or two lists of axes; the result's axes are a's others
    then b's. A matmul of the two reshaped (so autocast treats it as one).

    >>> import fusegrad as fg
    >>> fg.tensordot(fg.ones(2, 3, 4), fg.ones(3, 4, 5)).shape
    (2, 5)
    """
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase):
        bad = b if isinstance(a, TensorBase) else a
        raise TypeError(f"tensordot(): argument must be Tensor, not {type(bad).__name__}")
    if isinstance(dims, TensorBase):
        dims = dims.tolist()
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        if dims < 0:
            fail(ArgumentError, "tensordot", f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > min(a.ndim, b.ndim):
            fail(
                ArgumentError,
                "tensordot",
                f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}",
            )
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
        if len(da) != len(db):
            fail(
                ArgumentError,
                "tensordot",
                f"both dimension lists should have same length, got {len(da)} and {len(db)}",
            )
        da = [a._dim(d, "tensordot") for d in da]
        db = [b._dim(d, "tensordot") for d in db]
    if a.dtype is not b.dtype:
        fail(
            DTypeError,
            "tensordot",
            f"both inputs should have same dtype, got {a.dtype.name} and {b.dtype.name}",
        )
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            fail(
                ShapeError,
                "tensordot",
                f"contracted dimensions need to match, but first has size {a.shape[i]} in dim "
                f"{i} and second has size {b.shape[j]} in dim {j}",
            )
    keep_a = [d for d in range(a.ndim) if d not in da]
    keep_b = [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    left = a.permute(*keep_a, *da).reshape(math.prod(a.shape[d] for d in keep_a), k)
    right = b.permute(*db, *keep_b).reshape(k, math.prod(b.shape[d] for d in keep_b))
    shape = tuple(a.shape[d] for d in keep_a) + tuple(b.shape[d] for d in keep_b)
    return (left @ right).reshape(shape)


@autocast_op("einsum")
def einsum(equation: str, *operands):
    """Einstein summation: one broadcast product of all operands, summed over the letters
    that are not in the output (`...` and implicit outputs as in numpy).

    >>> import fusegrad as fg
    >>> a, b = fg.ones(2, 3), fg.ones(3, 4)
    >>> fg.einsum("ij,jk->ik", a, b).shape
    (2, 4)
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        fail(
            ShapeError,
            "einsum",
            f"{equation!r} names {len(terms)} operands, got {len(operands)}",
        )
    letters = [c for c in string.ascii_letters if c not in eq]
    nd_ell = 0
    for term, t in zip(terms, operands):
        if "..." in term:
            nd_ell = max(nd_ell, t.ndim - (len(term) - 3))
    ell = "".join(letters[:nd_ell])
    expanded = []
    for term, t in zip(terms, operands):
        if "..." in term:
            k = t.ndim - (len(term) - 3)
            term = term.replace("...", ell[nd_ell - k :] if k else "")
        if len(term) != t.ndim or not all(c.isalpha() for c in term):
            fail(
                ShapeError,
                "einsum",
                f"subscripts {term!r} do not fit an operand of shape {t.shape}",
            )
        expanded.append(term)
    if arrow:
        out = out.replace("...", ell)
    else:
        counts = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    sizes: dict[str, int] = {}
    for term, t in zip(expanded, operands):
        for c, s in zip(term, t.shape):
            if c in sizes and sizes[c] != s and s != 1 and sizes[c] != 1:
                fail(
                    ShapeError,
                    "einsum",
                    f"subscript {c!r} has size {s} in one operand and {sizes[c]} in another",
                )
            sizes[c] = max(sizes.get(c, 1), s)
    for c in out:
        if c not in sizes:
            fail(ShapeError, "einsum", f"output subscript {c!r} is in no operand")
    order = list(out) + [c for c in sizes if c not in out]
    full = tuple(sizes[c] for c in order)
    product = None
    for term, t in zip(expanded, operands):
        # a letter twice in one term is a diagonal
        while len(set(term)) != len(term):
            c = next(c for c in term if term.count(c) > 1)
            i = term.index(c)
            j = term.index(c, i + 1)
            t = diagonal(t, 0, i, j)
            term = "".join(x for k, x in enumerate(term) if k not in (i, j)) + c
        perm = sorted(range(len(term)), key=lambda k: order.index(term[k]))
        t = t.permute(perm) if term else t
        shape = [1] * len(order)
        for k in perm:
            shape[order.index(term[k])] = t.shape[perm.index(k)]
        t = t.reshape(shape).expand(full)
        product = t if product is None else product * t
    summed = tuple(range(len(out), len(order)))
    return product.sum(summed) if summed else product


def kron(a, b):
    out = a.reshape(tuple(v for s in a.shape for v in (s, 1))) * b.reshape(
        tuple(v for s in b.shape for v in (1, s))
    )
    return out.reshape(tuple(x * y for x, y in zip(a.shape, b.shape)))


# ---------------------------------------------------------------- pieces


def narrow(x, dim: int, start: int, length: int):
    d = x._dim(dim, "narrow")
    if start < 0:
        start += x.shape[d]
    if not 0 <= start <= start + length <= x.shape[d]:
        fail(
            IndexingError,
            "narrow",
            f"start {start} + length {length} exceeds axis {d} of size {x.shape[d]}",
        )
    return x[(slice(None),) * d + (slice(start, start + length),)]


def split(x, split_size_or_sections, dim: int = 0):
    """Pieces of `split_size` along `dim` (the last may be shorter), or of the given sizes.

    >>> import fusegrad as fg
    >>> [t.tolist() for t in fg.arange(5).split(2)]
    [[0, 1], [2, 3], [4]]
    """
    d = x._dim(dim, "split")
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        if s <= 0 and n:
            fail(ShapeError, "split", f"split_size must be positive, got {s}")
        sizes = [min(s, n - k) for k in range(0, n, s)] if n else [0]
    else:
        sizes = [int(v) for v in split_size_or_sections]
        if sum(sizes) != n or any(v < 0 for v in sizes):
            fail(
                ShapeError,
                "split",
                f"split sizes {sizes} do not sum to the axis's size {n} (dim {dim})",
            )
    out, start = [], 0
    for s in sizes:
        out.append(narrow(x, d, start, s))
        start += s
    return tuple(out)


def chunk(x, chunks: int, dim: int = 0):
    """At most `chunks` pieces of ceil(n / chunks) along `dim`."""
    if chunks <= 0:
        fail(ShapeError, "chunk", f"chunks must be positive, got {chunks}")
    n = x.shape[x._dim(dim, "chunk")]
    return split(x, max(-(-n // chunks), 1), dim)


def tensor_split(x, indices_or_sections, dim: int = 0):
    d = x._dim(dim, "tensor_split")
    n = x.shape[d]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    else:
        cuts = [0] + [min(max(int(i), 0), n) for i in indices_or_sections] + [n]
        sizes = [max(b - a, 0) for a, b in zip(cuts, cuts[1:])]
        starts = cuts[:-1]
        return tuple(narrow(x, d, min(s, n), z) for s, z in zip(starts, sizes))
    return split(x, sizes, d)


def unbind(x, dim: int = 0):
    """The slices along `dim`, each without that axis."""
    d = x._dim(dim, "unbind")
    return tuple(x[(slice(None),) * d + (i,)] for i in range(x.shape[d]))


def movedim(x, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [x._dim(s, "movedim") for s in src]
    dst = [x._dim(s, "movedim") for s in dst]
    order = [k for k in range(x.ndim) if k not in src]
    for s, t in sorted(zip(dst, src)):
        order.insert(s, t)
    return x.permute(order)


def swapaxes(x, a, b):
    return x.transpose(a, b)


def unflatten(x, dim: int, sizes):
    """Split axis `dim` into `sizes` (one may be -1), with torch's errors: no sizes, more
    than one -1, a -1 beside a 0, and sizes that do not multiply to the axis's size.

    >>> import fusegrad as fg
    >>> fg.zeros(4, 6).unflatten(1, (2, -1)).shape
    (4, 2, 3)
    """
    sizes = tuple(int(s) for s in sizes)
    if not sizes:
        fail(ShapeError, "unflatten", "sizes must be non-empty")
    if x.ndim == 0:
        fail(DimError, "unflatten", f"dim {dim} is out of range: the tensor has no dimensions")
    d = x._dim(dim, "unflatten")
    if sizes.count(-1) > 1:
        fail(ShapeError, "unflatten", f"only one dimension can be inferred, got sizes {sizes}")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes and not known:
        fail(
            ShapeError,
            "unflatten",
            f"cannot unflatten dim {dim} of size {x.shape[d]} into {sizes}: the size -1 "
            "stands for is ambiguous beside a 0",
        )
    if -1 in sizes and x.shape[d] % known == 0:
        sizes = tuple(x.shape[d] // known if s == -1 else s for s in sizes)
    if math.prod(sizes) != x.shape[d]:
        fail(
            ShapeError,
            "unflatten",
            f"Provided sizes {list(sizes)} don't multiply up to the size of dim {dim} "
            f"({x.shape[d]}) in the input tensor",
        )
    return x.reshape(x.shape[:d] + sizes + x.shape[d + 1 :])


def unfold(x, dimension: int, size: int, step: int):
    """Windows of `size` every `step` along `dimension`, as a new last axis (a view)."""
    d = x._dim(dimension, "unfold") if x.ndim else 0
    if x.ndim == 0:
        x = x.reshape(1)
    if size > x.shape[d] or size < 0 or step <= 0:
        fail(
            ShapeError,
            "unfold",
            f"size {size} (step {step}) does not fit axis {d} of size {x.shape[d]}",
        )
    moved = movedim(x, d, -1)
    win = sliding_windows(moved, (size,), (step,), (1,))  # (..., windows, size)
    out = movedim(win, -2, d)
    if out.numel() == 0 and out.requires_grad:  # (empty windows: keep x upstream, for grad)
        autograd_state.link_empty(out.node, (x,))
    return out


def repeat(x, *sizes):
    """Tile x: `sizes` gives the copies along each axis (more axes than x adds leading ones).

    >>> import fusegrad as fg
    >>> fg.tensor([1, 2]).repeat(2).tolist(), fg.tensor([1, 2]).repeat_interleave(2).tolist()
    ([1, 2, 1, 2], [1, 1, 2, 2])
    """
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < x.ndim:
        fail(
            ShapeError,
            "repeat",
            f"number of repeat dims {len(sizes)} can not be smaller than the tensor's {x.ndim}",
        )
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    y = x.reshape(tuple(v for s in shape for v in (1, s)))
    y = y.expand(tuple(v for r, s in zip(sizes, shape) for v in (r, s)))
    return y.reshape(tuple(r * s for r, s in zip(sizes, shape)))


def tile(x, dims):
    """x repeated `dims` times along its last dims (an int or a tuple), as torch.tile."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return repeat(x, (1,) * (x.ndim - len(dims)) + dims)


def repeat_interleave(x, repeats, dim=None):
    """Each element `repeats` times in a row along `dim` (flattened if None); a tensor of
    repeats is read on the host."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    d = x._dim(dim, "repeat_interleave")
    if isinstance(repeats, TensorBase) and repeats.numel() == 1:
        repeats = int(values_for_shape(repeats, "repeat_interleave with tensor repeats").item())
    if isinstance(repeats, int):
        if repeats < 0:
            fail(ShapeError, "repeat_interleave", f"repeats must be >= 0, got {repeats}")
        y = x.unsqueeze(d + 1)
        y = y.expand(x.shape[: d + 1] + (repeats,) + x.shape[d + 1 :])
        return y.flatten(d, d + 1)
    if isinstance(repeats, TensorBase):
        reps = np.asarray(values_for_shape(repeats, "repeat_interleave with tensor repeats"))
    else:
        reps = np.asarray(repeats)
    if reps.shape != (x.shape[d],) or (reps < 0).any():
        fail(
            ShapeError,
            "repeat_interleave",
            f"repeats must be non-negative with shape ({x.shape[d]},), got {reps.shape}",
        )

    idx = host_table(x, np.repeat(np.arange(x.shape[d]), reps).astype(np.int64))
    return x.index_select(d, idx)


def roll(x, shifts, dims=None):
    """Elements shifted cyclically along `dims` (the flattened tensor if None): always a new
    tensor, as torch's, also where every shift is a whole turn (a write into it leaves `x`)."""
    if dims is None:
        flat = x.reshape(-1)
        out = roll(flat, shifts, 0)
        return (out if out is not flat else x.clone()).reshape(x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        fail(ShapeError, "roll", f"shifts {shifts} and dims {dims} differ in length")
    first = x
    for s, dm in zip(shifts, dims):
        d = x._dim(dm, "roll")
        if x.ndim == 0:  # torch refuses a dim for a 0-d tensor here (dims=None rolls it)
            fail(DimError, "roll", f"dimension specified as {dm} but tensor has no dimensions")
        n = x.shape[d]
        if n == 0:
            continue
        s %= n
        if s:
            x = cat([narrow(x, d, n - s, s), narrow(x, d, 0, n - s)], d)
    return x if x is not first else x.clone()


def rot90(x, k: int = 1, dims=(0, 1)):
    """x turned by k quarter turns in the plane of `dims`, from dims[0] toward dims[1], as
    torch.rot90 (k taken mod 4; a view here: flips and a transpose).

    >>> import fusegrad as fg
    >>> fg.arange(4).reshape(2, 2).rot90().tolist()
    [[1, 3], [0, 2]]
    """
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise TypeError(f"rot90(): argument 'k' (position 2) must be int, not {type(k).__name__}")
    dims = tuple(dims)
    if len(dims) != 2:
        fail(
            ArgumentError, "rot90", f"expected total rotation dims == 2, but got dims = {len(dims)}"
        )
    if x.ndim < 2:
        fail(ShapeError, "rot90", f"expected total dims >= 2, but got total dims = {x.ndim}")
    d0, d1 = x._dim(dims[0], "rot90"), x._dim(dims[1], "rot90")
    if d0 == d1:
        fail(
            ArgumentError,
            "rot90",
            f"expected rotation dims to be different, but got dim0 = {dims[0]} and "
            f"dim1 = {dims[1]}",
        )
    k %= 4
    if k == 1:
        return flip(x, d1).transpose(d0, d1)
    if k == 2:
        return flip(x, (d0, d1))
    if k == 3:
        return flip(x, d0).transpose(d0, d1)
    return x.clone()


def diff(x, n: int = 1, dim: int = -1, prepend=None, append=None):
    """The n-th forward difference along `dim`, x[i + 1] - x[i] applied n times, after
    `prepend` and `append` are joined to x along `dim` (promoted as by cat), as torch.diff:
    bools take logical_xor; integers wrap; n >= the length gives an empty axis.

    >>> import fusegrad as fg
    >>> x = fg.tensor([1, 3, 6, 10])
    >>> x.diff().tolist(), x.diff(n=2).tolist(), x.diff(prepend=fg.tensor([0])).tolist()
    ([2, 3, 4], [1, 1], [1, 2, 3, 4])
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"diff(): argument 'n' must be int, not {type(n).__name__}")
    if x.ndim == 0:
        fail(ShapeError, "diff", "diff expects input to be at least one-dimensional")
    if n < 0:
        fail(ArgumentError, "diff", f"order must be non-negative but got {n}")
    d = x._dim(dim, "diff")
    pieces = [x]
    for name, extra in (("prepend", prepend), ("append", append)):
        if extra is None:
            continue
        if not isinstance(extra, TensorBase):
            raise TypeError(f"diff(): argument '{name}' must be Tensor, not {type(extra).__name__}")
        _joinable_for_diff(x, extra, d)
        pieces.insert(0 if name == "prepend" else len(pieces), extra)
    out = cat(pieces, d) if len(pieces) > 1 else x.clone()
    for _ in range(n):
        length = out.shape[d]
        if length == 0:
            break
        later, earlier = narrow(out, d, 1, length - 1), narrow(out, d, 0, length - 1)
        out = later != earlier if out.dtype is bool_ else later - earlier
    return out


def gradient(x, *, spacing=1, dim=None, edge_order: int = 1) -> tuple:
    """The partial derivatives of the function sampled by x, one tensor per dimension of
    `dim` (every dimension when None; none for a 0-d x), as torch.gradient and
    numpy.gradient: central differences inside, first- or second-order one-sided
    differences at the ends (`edge_order` 1 or 2). `spacing`: one number for every
    dimension, a number per dimension, or per dimension a 1-d tensor of the coordinates
    of its samples (uneven steps). Integers give the default float dtype; differentiable.

    >>> import fusegrad as fg
    >>> t = fg.tensor([1.0, 2.0, 4.0, 7.0, 11.0, 16.0])
    >>> fg.gradient(t)[0].tolist()
    [1.0, 1.5, 2.5, 3.5, 4.5, 5.0]
    >>> coords = fg.tensor([0.0, 1.0, 1.5, 3.5, 4.0, 6.0])
    >>> [round(v, 4) for v in fg.gradient(t, spacing=(coords,))[0].tolist()]
    [1.0, 3.0, 3.5, 6.7, 6.9, 2.5]
    """
    if edge_order not in (1, 2) or isinstance(edge_order, bool):
        fail(
            ArgumentError, "gradient", "torch.gradient only supports edge_order=1 and edge_order=2."
        )
    if x.dtype is bool_:
        fail(
            DTypeNotImplementedError,
            "gradient",
            "subtraction of two bool tensors is not supported; convert the input to a number "
            "dtype first",
        )
    dims = list(range(x.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [x._dim(d, "gradient") for d in dims]
    for d in dims:
        if dims.count(d) > 1:
            fail(ArgumentError, "gradient", f"dim {d} appears multiple times in the list of dims")
    steps = _gradient_spacing(x, spacing, dims, dim is None)
    for d in dims:
        if x.shape[d] < edge_order + 1:
            fail(
                ShapeError,
                "gradient",
                "torch.gradient expected each dimension size to be at least edge_order+1",
            )
    f = x if x.dtype.is_float else x.to(default_float())
    return tuple(_gradient_along(f, d, h, edge_order) for d, h in zip(dims, steps))


def _gradient_spacing(x, spacing, dims: list[int], every: bool) -> list:
    """`gradient`'s spacing as one step (a number) or coordinates (a 1-d tensor) per dim."""
    if isinstance(spacing, (int, float, np.number)) and not isinstance(spacing, bool):
        return [spacing] * len(dims)
    if isinstance(spacing, TensorBase) and spacing.ndim == 0:
        return [spacing.item()] * len(dims)
    if not isinstance(spacing, (list, tuple)):
        raise TypeError(
            "gradient(): argument 'spacing' must be a number, a list of numbers or a list of "
            f"tensors, not {type(spacing).__name__}"
        )
    if len(spacing) != len(dims):
        against = f"'self.dim() = {x.ndim}'" if every else f"the {len(dims)} dim(s) given"
        fail(
            ArgumentError,
            "gradient",
            "torch.gradient expected spacing to be unspecified, a scalar, or a list of length "
            f"equal to {against}, but got a list of length {len(spacing)}",
        )
    out = []
    for d, h in zip(dims, spacing):
        if isinstance(h, TensorBase) and h.ndim == 0:
            h = h.item()
        if isinstance(h, TensorBase):
            if h.ndim != 1 or h.shape[0] != x.shape[d]:
                fail(
                    ShapeError,
                    "gradient",
                    f"torch.gradient expected the coordinates of dim {d} to be a 1-d tensor of "
                    f"its size {x.shape[d]}, but got shape {tuple(h.shape)}",
                )
            if h.device != x.device:
                fail(
                    ArgumentError,
                    "gradient",
                    f"torch.gradient expected the coordinates on the input's device "
                    f"{x.device}, but got {h.device}",
                )
        elif isinstance(h, bool) or not isinstance(h, (int, float, np.number)):
            raise TypeError(
                f"gradient(): a spacing must be a number or a 1-d tensor, not {type(h).__name__}"
            )
        out.append(h)
    return out


def _gradient_along(f, d: int, h, edge_order: int):
    """The derivative of f along d, its samples `h` apart (a number) or at the coordinates
    `h` (a 1-d tensor): numpy.gradient's formulas, the same additions in the same order."""
    n = f.shape[d]

    def part(start: int, length: int):
        return narrow(f, d, start, length)

    if not isinstance(h, TensorBase):
        inside = (part(2, n - 2) - part(0, n - 2)) / (2.0 * h)
        if edge_order == 1:
            first = (part(1, 1) - part(0, 1)) / h
            last = (part(n - 1, 1) - part(n - 2, 1)) / h
        else:
            first = (-1.5 * part(0, 1) + 2.0 * part(1, 1) - 0.5 * part(2, 1)) / h
            last = (0.5 * part(n - 3, 1) - 2.0 * part(n - 2, 1) + 1.5 * part(n - 1, 1)) / h
        return cat([first, inside, last], d)
    shape = [1] * f.ndim
    shape[d] = n
    coords = h.to(promote(h.dtype, f.dtype) if h.dtype.is_float else f.dtype).reshape(shape)
    if coords.dtype is not f.dtype:  # (float64 coordinates make a float64 result, as torch)
        f = f.to(coords.dtype)
    dx = narrow(coords, d, 1, n - 1) - narrow(coords, d, 0, n - 1)
    left, right = narrow(dx, d, 0, n - 2), narrow(dx, d, 1, n - 2)
    a = -right / (left * (left + right))
    b = (right - left) / (left * right)
    c = left / (right * (left + right))
    inside = a * part(0, n - 2) + b * part(1, n - 2) + c * part(2, n - 2)
    if edge_order == 1:
        first = (part(1, 1) - part(0, 1)) / narrow(dx, d, 0, 1)
        last = (part(n - 1, 1) - part(n - 2, 1)) / narrow(dx, d, n - 2, 1)
    else:
        h1, h2 = narrow(dx, d, 0, 1), narrow(dx, d, 1, 1)
        first = (
            -(2.0 * h1 + h2) / (h1 * (h1 + h2)) * part(0, 1)
            + (h1 + h2) / (h1 * h2) * part(1, 1)
            - h1 / (h2 * (h1 + h2)) * part(2, 1)
        )
        h1, h2 = narrow(dx, d, n - 3, 1), narrow(dx, d, n - 2, 1)
        last = (
            h2 / (h1 * (h1 + h2)) * part(n - 3, 1)
            - (h2 + h1) / (h1 * h2) * part(n - 2, 1)
            + (2.0 * h2 + h1) / (h2 * (h1 + h2)) * part(n - 1, 1)
        )
    return cat([first, inside, last], d)


def _joinable_for_diff(x, extra, d: int) -> None:
    if extra.ndim != x.ndim:
        fail(ShapeError, "diff", "diff expects prepend or append to be the same dimension as input")
    for i, (a, b) in enumerate(zip(x.shape, extra.shape)):
        if i != d and a != b:
            fail(
                ShapeError,
                "diff",
                "diff expects the shape of tensor to prepend or append to match that of input "
                f"except along the differencing dimension; input.size({i}) = {a}, but got "
                f"tensor.size({i}) = {b}",
            )


@autocast_op("dist")
def dist(x, other, p=2):
    """The p-norm of x - other (broadcast), as torch.dist: norm's p values and gradients
    (0 at x == other for p = 2).

    >>> import fusegrad as fg
    >>> fg.dist(fg.tensor([1.0, 2.0]), fg.tensor([4.0, 6.0])).item()
    5.0
    """
    if not isinstance(other, TensorBase):
        raise TypeError(
            f"dist(): argument 'other' (position 2) must be Tensor, not {type(other).__name__}"
        )
    if isinstance(p, bool) or not isinstance(p, (int, float, np.number)):
        raise TypeError(f"dist(): argument 'p' must be Number, not {type(p).__name__}")
    return norm(x - other, float(p))


def cross(x, other, dim=None):
    """The cross product of 3-vectors along `dim` (the first axis of size 3 when None, with
    torch's deprecation warning; broadcast), as torch.cross and torch.linalg.cross.

    >>> import fusegrad as fg
    >>> fg.cross(fg.tensor([1.0, 0.0, 0.0]), fg.tensor([0.0, 1.0, 0.0]), dim=0).tolist()
    [0.0, 0.0, 1.0]
    """
    if not isinstance(other, TensorBase):
        raise TypeError(
            f"cross(): argument 'other' (position 2) must be Tensor, not {type(other).__name__}"
        )
    if x.ndim != other.ndim:
        fail(
            ShapeError,
            "cross",
            f"linalg.cross: inputs must have the same number of dimensions, got {x.ndim} "
            f"and {other.ndim}",
        )
    shape = broadcast_shapes(x.shape, other.shape, "cross")
    if dim is None:
        import warnings

        d = next((i for i, n in enumerate(shape) if n == 3), None)
        if d is None:
            fail(ShapeError, "cross", f"no dimension of size 3 in input {x.shape}")
        warnings.warn(
            "Using torch.cross without specifying the dim arg is deprecated.",
            UserWarning,
            stacklevel=2,
        )
    else:
        d = x._dim(dim, "cross")
    if x.shape[d] != 3 or other.shape[d] != 3:
        fail(
            ShapeError,
            "cross",
            f"linalg.cross: inputs dimension {d} must have length 3. Got {x.shape[d]} and "
            f"{other.shape[d]}",
        )
    a, b = x.expand(*shape), other.expand(*shape)
    ai = [narrow(a, d, i, 1) for i in range(3)]
    bi = [narrow(b, d, i, 1) for i in range(3)]
    parts = [
        ai[(i + 1) % 3] * bi[(i + 2) % 3] - ai[(i + 2) % 3] * bi[(i + 1) % 3] for i in range(3)
    ]
    return cat(parts, d)


def cov(x, *, correction: int = 1, fweights=None, aweights=None):
    """The covariance of the rows of `x` (variables) over its columns (observations), as
    torch.cov: `correction` (1: Bessel's), integer frequency and float observation
    weights; a 1-D input is one variable (a 0-d result); no degrees of freedom: NaN.

    >>> import fusegrad as fg
    >>> fg.cov(fg.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])).tolist()
    [[1.0, -1.0], [-1.0, 1.0]]
    """
    if x.ndim > 2:
        fail(
            ShapeError,
            "cov",
            f"cov(): expected input to have two or fewer dimensions but got an input with "
            f"{x.ndim} dimensions",
        )
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    if not rows.dtype.is_float:
        rows = rows.cast(default_float())
    n = rows.shape[1]
    w = None
    if fweights is not None:
        w = fweights
    if aweights is not None:
        w = aweights if w is None else w * aweights
    if w is None:
        avg = rows.mean(1, keepdim=True)
        norm = float(n - correction)
        centred = rows - avg
        out = (centred @ centred.transpose(0, 1)) / max(norm, 0.0)
    else:
        w = w.cast(rows.dtype)
        w_sum = w.sum()
        avg = (rows * w).sum(1, keepdim=True) / w_sum
        if aweights is None or correction == 0:
            norm = w_sum - correction
        else:
            norm = w_sum - correction * (w * aweights).sum() / w_sum
        norm = _where(norm < 0, 0.0, norm)
        centred = rows - avg
        out = ((centred * w) @ centred.transpose(0, 1)) / norm
    return out.reshape(()) if x.ndim < 2 else out


def corrcoef(x):
    """Pearson's correlation coefficients of the rows of `x`, as torch.corrcoef: cov over
    the outer product of the standard deviations, clamped to [-1, 1].

    >>> import fusegrad as fg
    >>> fg.corrcoef(fg.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])).tolist()
    [[1.0, -1.0], [-1.0, 1.0]]
    """
    c = cov(x)
    if c.ndim == 0:
        return c / c
    std = diagonal(c).sqrt()
    c = c / std.reshape(-1, 1) / std.reshape(1, -1)
    return c.clamp(-1.0, 1.0)


def meshgrid(*tensors, indexing: str = "ij"):
    """Coordinate grids from 1-D tensors ('ij': matrix indexing, 'xy': Cartesian)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        fail(ShapeError, "meshgrid", f"indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = [t.reshape(-1) for t in tensors]
    shape = tuple(t.shape[0] for t in ts)
    out = []
    for k, t in enumerate(ts):
        view = [1] * len(ts)
        view[k] = shape[k]
        out.append(t.reshape(view).expand(shape))
    if indexing == "xy" and len(ts) >= 2:  # Cartesian: the first two axes swap
        out = [o.transpose(0, 1) for o in out]
    return tuple(out)


# ---------------------------------------------------------------- scans


def _shift(x, d: int, s: int, fill):
    """x moved s places forward along d, the first s places `fill`."""
    n = x.shape[d]
    pads = [(0, 0)] * x.ndim
    pads[d] = (s, 0)
    body = narrow(x, d, 0, n - s)
    moved = x._make(N.pad(body.node, tuple(pads)), body)
    if fill == 0:
        return moved
    inside = x._make(N.pad(N.const(True, body.shape, bool_), tuple(pads)))
    return _where(inside, moved, fill)


def _scan(x, dim, combine, fill, op: str):
    """The running `combine` along `dim`: a new tensor, also with one element along it."""
    d = x._dim(dim, op)
    if x.ndim == 0:
        return x.clone()
    n, s, out = x.shape[d], 1, x.clone()
    while s < n:
        out = combine(out, _shift(out, d, s, fill))
        s *= 2
    return out


@autocast_op("cumsum")
def cumsum(x, dim: int, dtype=None):
    """Running sums along `dim` (ints and bools sum as int64): log2(n) shifted adds.

    >>> import fusegrad as fg
    >>> fg.tensor([1, 2, 3]).cumsum(0).tolist()
    [1, 3, 6]
    """
    x = x.cast(dtype) if dtype is not None else (x if x.dtype.is_float else x.cast(int64))
    out = _scan(x, dim, lambda a, b: a + b, 0, "cumsum")
    if x.ndim and x.dtype.is_float:  # torch's running sums start from +0.0: never -0.0
        out = out + 0.0  # (a 0-d cumsum is its input, -0.0 included, as torch's)
    return out


@autocast_op("cumprod")
def cumprod(x, dim: int, dtype=None):
    """Running products along `dim`, with torch's gradient: a reversed running sum of
    out * g, divided by x, where the tensor holds no zero (NaN at an infinite or NaN
    element, as torch's); with zeros, each row's elements before its first zero take
    that form, the first zero the sum of the products after it up to the next zero,
    and the elements after it 0.

    >>> import fusegrad as fg
    >>> x = fg.tensor([2.0, 0.0, 3.0], requires_grad=True)
    >>> x.cumprod(0).sum().backward()
    >>> x.grad.tolist()
    [1.0, 8.0, 0.0]
    """
    x = x.cast(dtype) if dtype is not None else (x if x.dtype.is_float else x.cast(int64))
    out = _scan(x, dim, lambda a, b: a * b, 1, "cumprod")
    if not out.requires_grad or x.ndim == 0 or x.shape[x._dim(dim, "cumprod")] <= 1:
        return out  # (one element along dim: its gradient is g, the scan's own)

    d = x._dim(dim, "cumprod")
    xn, on = x.node, out.node  # now: an in-place update would rebind x.node
    plain = x._plain  # (the class: the rule must not hold a tensor)

    def rule(g):
        return [(xn, _cumprod_backward(plain(xn), plain(g), plain(on), d).node)]

    node = own_node(on)
    return out._make(with_vjp(node, rule))


def _cumprod_backward(x, g, out, d: int):
    """torch's cumprod_backward (its first-order form) for x, the gradient g of out."""

    def reversed_cumsum(w):
        return flip(cumsum(flip(w, [d]), d), [d])

    w = out * g
    is_zero = x == 0
    simple = reversed_cumsum(w) / x
    zeros = is_zero.cast(int64).cumsum(d)  # how many zeros up to each place
    before = zeros == 0
    grad = _where(before, reversed_cumsum(_where(before, w, 0.0)) / x, 0.0)
    # at the first zero: sum over k up to the next zero of (x[z1+1] ... x[k]) g[k],
    # times the product before it
    first = (zeros == 1) & is_zero
    between = (zeros == 1) & ~is_zero
    running = _scan(_where(between, x, 1.0), d, lambda a, b: a * b, 1, "cumprod")
    term = (running * _where(zeros == 1, g, 0.0)).sum(d, keepdim=True)
    ones = x._make(N.const(1, narrow(x, d, 0, 1).shape, x.dtype))
    prior = cat([ones, narrow(out, d, 0, x.shape[d] - 1)], d)
    grad = _where(first, term * prior, grad)
    return _where(is_zero.any(), grad, simple)


@autocast_op("logcumsumexp")
def logcumsumexp(x, dim: int):
    """log(cumsum(exp(x))) along `dim`, by log2(n) shifted logaddexps.

    The gradient is torch's: the positive and negative parts of g, in log space,
    through a reversed logcumsumexp (so at an infinite or NaN element, NaN or inf
    where torch's is)."""
    x = x._float()
    out = _scan(x, dim, lambda a, b: logaddexp(a, b), -math.inf, "logcumsumexp")
    if not out.requires_grad or x.ndim == 0 or x.numel() == 0:
        return out

    d = x._dim(dim, "logcumsumexp")
    xn, on = x.node, out.node  # now: an in-place update would rebind x.node
    plain = x._plain  # (the class: the rule must not hold a tensor)

    def rule(g):
        return [(xn, _logcumsumexp_backward(plain(xn), plain(g), plain(on), d).node)]

    node = own_node(on)
    return out._make(with_vjp(node, rule))


def _logcumsumexp_backward(x, g, out, d: int):
    """torch's logcumsumexp_backward: exp(reversed logcumsumexp(log g+ - out) + x), less
    the same of g-, with log 0 taken as the dtype's lowest finite value."""
    lowest = float(x.dtype.finfo.min)
    log_g = g.abs().log()
    parts = []
    for side in (g > 0, g < 0):
        shifted = _where(side, log_g, lowest) - out
        parts.append((flip(logcumsumexp(flip(shifted, [d]), d), [d]) + x).exp())
    return parts[0] - parts[1]


def _cum_extreme(x, dim, largest: bool, op: str):
    d = x._dim(dim, op)  # a 0-d tensor takes dim 0 or -1 only, as torch's
    if x.ndim == 0:
        return ValuesIndices(x, x._make(N.const(0, (), int64)))
    if largest:
        key = x
    elif x.dtype.is_bool:
        key = x.logical_not()
    else:  # -x of a uint8, or of an int8 -128, would wrap: negate in int64
        key = -(x.cast(int64) if x.dtype.is_int and x.dtype.itemsize < 8 else x)
    low = -math.inf if key.dtype.is_float else int(np.iinfo(np.int64).min)
    k = key if not key.dtype.is_bool else key.cast(int64)
    run = _scan(k.detach(), d, lambda a, b: a.maximum(b), low, op)
    # the index of the last element on which the running extreme was reached; as torch, a
    # NaN is reached where it stands, and from the first NaN on the running value is NaN
    pos = _arange_along(x, x.shape[d], d, x.ndim).expand(x.shape)
    hit = k.detach() == run
    if k.dtype.is_float:
        hit = hit | (k.detach() != k.detach())
    at = _where(hit, pos, -1)
    idx = _scan(at, d, lambda a, b: a.maximum(b), -1, op)
    return ValuesIndices(x.gather(d, idx), idx)


def cummax(x, dim: int):
    """(running maxima, their indices) along `dim`; the gradient goes to the index. As
    torch: a NaN propagates (the index is then the latest NaN's), ties take the later index.

    >>> import fusegrad as fg
    >>> v, i = fg.tensor([1.0, float("nan"), 3.0]).cummax(0)
    >>> v.tolist(), i.tolist()
    ([1.0, nan, nan], [0, 1, 1])
    """
    return _cum_extreme(x, dim, True, "cummax")


def cummin(x, dim: int):
    return _cum_extreme(x, dim, False, "cummin")


# ---------------------------------------------------------------- sorting


def _ranks(x, d: int, descending: bool, op: str):
    """Each element's place in the stable sort along d: how many sort before it."""
    n = x.shape[d]
    rows = x.numel() // max(n, 1)
    if rows * n * n > SORT_LIMIT:
        fail(
            ShapeError,
            op,
            f"sorting compares every pair on a row: {rows} rows of {n} need "
            f"{rows * n * n} comparisons, above SORT_LIMIT = {SORT_LIMIT}",
        )
    y = movedim(x.detach(), d, -1)
    a = y.unsqueeze(-1)  # element i
    b = y.unsqueeze(-2)  # element j
    if y.dtype.is_bool or (y.dtype.is_int and y.dtype.itemsize < 8):
        a, b = a.cast(int64), b.cast(int64)  # so that -a cannot wrap (uint8, int8 -128)
    if descending:
        a, b = -a if not a.dtype.is_bool else a, -b if not b.dtype.is_bool else b
    # NaN sorts as the largest, as in torch: last ascending, first descending
    an, bn = isnan(a), isnan(b)
    before = (b < a) | ((bn & ~an) if descending else (an & ~bn))
    tie = (b == a) | (an & bn)
    i = _arange_along(a, n, a.ndim - 2, a.ndim)
    j = _arange_along(a, n, a.ndim - 1, a.ndim)
    ahead = before | (tie & (j < i))
    return ahead.cast(int64).sum(-1)  # (..., n): the rank of element i


def sort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """(sorted values, indices) along `dim`, stable; NaN sorts as the largest value (last,
    or first when `descending`), as in torch; see SORT_LIMIT.

    >>> import fusegrad as fg
    >>> v, i = fg.tensor([3.0, 1.0, 2.0]).sort()
    >>> v.tolist(), i.tolist()
    ([1.0, 2.0, 3.0], [1, 2, 0])
    """
    if x.ndim == 0:
        return ValuesIndices(x, x._make(N.const(0, (), int64)))
    d = x._dim(dim, "sort")
    n = x.shape[d]
    if n == 0:
        return ValuesIndices(x, x._make(N.const(0, x.shape, int64)))
    rank = _ranks(x, d, descending, "sort")  # (..., n) with d moved last
    pos = _arange_along(rank, n, rank.ndim - 1, rank.ndim).expand(rank.shape)
    # indices[..., rank[i]] = i: a permutation, so a scatter-add places each exactly once
    zeros = rank._make(N.const(0, rank.shape, int64))
    idx = _scattered_sum(zeros, rank.ndim - 1, rank, pos)
    idx = movedim(idx, -1, d)
    return ValuesIndices(x.gather(d, idx), idx)


def argsort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    return sort(x, dim, descending).indices


def msort(x):
    return sort(x, 0).values


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The k largest (or smallest) along `dim`, with their indices; NaN counts as the
    largest, as in torch.

    >>> import fusegrad as fg
    >>> fg.tensor([3.0, 1.0, 2.0]).topk(2).values.tolist()
    [3.0, 2.0]
    """
    if x.dtype.is_bool:
        fail(DTypeError, "topk", "not implemented for bool (as in PyTorch)")
    d = x._dim(dim, "topk") if x.ndim else 0
    n = x.shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        fail(IndexingError, "topk", f"k ({k}) is out of range for dimension {d} of size {n}")
    if x.ndim == 0:  # as torch: the value and index 0, 0-d
        vals, idx = topk(x.reshape(1), max(k, 1), 0, largest, sorted)
        return ValuesIndices(vals.reshape(()), idx.reshape(()))
    vals, idx = sort(x, d, descending=largest)
    return ValuesIndices(narrow(vals, d, 0, k), narrow(idx, d, 0, k))


def kthvalue(x, k: int, dim: int = -1, keepdim: bool = False):
    """The k-th smallest element along `dim` (k from 1), with its index; NaN counts as
    the largest. Which of equal elements it picks is torch's CPU quickselect's on rows of
    up to 3 (there a fixed network of compare-and-swaps), the first in a stable sort on
    longer rows (torch's choice there depends on the data's order in its partitioning).

    >>> import fusegrad as fg
    >>> v, i = fg.tensor([0.0, 0.0, 0.0]).kthvalue(2)
    >>> v.item(), i.item()
    (0.0, 0)
    """
    _refuse_bool_selection(x, "kthvalue")
    return _kthvalue(x, k, dim, keepdim, as_torch_ties=True)


def _refuse_bool_selection(x, op: str) -> None:
    if x.dtype.is_bool:
        fail(DTypeNotImplementedError, op, "not implemented for bool (as in PyTorch)")


def _kthvalue(x, k: int, dim, keepdim: bool, as_torch_ties: bool):
    d = x._dim(dim, "kthvalue") if x.ndim else 0
    n = x.shape[d] if x.ndim else 1
    if not 1 <= k <= n:
        fail(IndexingError, "kthvalue", f"k ({k}) is out of range for dimension {d} of size {n}")
    if x.ndim == 0:  # as torch: the value and index 0, 0-d whatever keepdim
        vals, idx = kthvalue(x.reshape(1), k, 0)
        return ValuesIndices(vals, idx)
    if as_torch_ties and n == 3:
        i = _quickselect3(x, d)[k - 1]
        v = x.gather(d, i)
    else:
        vals, idx = sort(x, d)
        v, i = narrow(vals, d, k - 1, 1), narrow(idx, d, k - 1, 1)
    return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))


def _quickselect3(x, d: int):
    """The indices, in order, of the 3 elements along `d` as torch's quick_select_template
    leaves them: on 3 elements its median-of-three steps are compare-and-swaps of places
    (1, 2), (0, 2), (1, 0) and then a swap of places 0 and 1, where "greater" is
    a > b or a NaN over a number (kthvalue([0, 0, 0], 1) is index 1, as torch's)."""
    xs = x.detach()
    vals = [narrow(xs, d, i, 1) for i in range(3)]
    idxs = [x._make(N.const(i, vals[0].shape, int64)) for i in range(3)]

    def exchange(i, j, swap):
        vals[i], vals[j] = _where(swap, vals[j], vals[i]), _where(swap, vals[i], vals[j])
        idxs[i], idxs[j] = _where(swap, idxs[j], idxs[i]), _where(swap, idxs[i], idxs[j])

    def greater(a, b):
        return (a > b) | (isnan(a) & ~isnan(b))

    exchange(1, 2, greater(vals[1], vals[2]))
    exchange(0, 2, greater(vals[0], vals[2]))
    exchange(0, 1, ~greater(vals[1], vals[0]))  # (the swap after the partition, folded in)
    return idxs


def median(x, dim=None, keepdim: bool = False):
    """The lower median (NaN if the row has a NaN); with `dim`, also its index."""
    _refuse_bool_selection(x, "median")
    if dim is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0 and x.dtype.is_float:  # the median of nothing is NaN, as torch's
            return x._make(N.const(math.nan, (), x.dtype))
        v = _kthvalue(flat, (flat.shape[0] + 1) // 2, 0, False, as_torch_ties=False).values
        if not x.dtype.is_float:
            return v
        return _shared_by_ties(_where(isnan(flat).any(), math.nan, v), flat)
    d = x._dim(dim, "median")
    n = x.shape[d]
    v, i = _kthvalue(x, (n + 1) // 2, d, True, as_torch_ties=False)  # (nth_element's)
    if x.dtype.is_float:
        bad = isnan(x).any(d, keepdim=True)
        # the first NaN's index, as PyTorch, and the value read there (so that its
        # gradient goes to that NaN)
        first = _where(isnan(x), _arange_along(x, n, d, x.ndim), n).amin(d, keepdim=True)
        i = _where(bad, first, i)
        v = x.take_along_dim(i, d)
    return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))


def nanmedian(x, dim=None, keepdim: bool = False):
    """The lower median of the elements that are not NaN (NaN where all are), as
    torch.nanmedian; with `dim`, also its index (the first NaN's, for a row of NaNs).

    >>> import fusegrad as fg
    >>> fg.tensor([[2.0, float("nan"), 1.0]]).nanmedian(1).values.tolist()
    [1.0]
    """
    _refuse_bool_selection(x, "nanmedian")
    if not x.dtype.is_float:  # no NaN to leave out
        return median(x, dim, keepdim)
    if dim is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0:
            return x._make(N.const(math.nan, (), x.dtype))
        vals, _ = sort(flat, 0)  # NaNs last
        count = (~isnan(flat)).sum()
        k = _where(count > 0, (count - 1) // 2, 0).reshape(1)
        v = vals.take_along_dim(k, 0).reshape(())
        return _shared_by_ties(_where(count > 0, v, math.nan), flat)
    if x.ndim == 0:  # as torch: the value and index 0
        v, i = nanmedian(x.reshape(1), 0)
        return ValuesIndices(v.reshape(()), i.reshape(()))
    d = x._dim(dim, "nanmedian")
    vals, idx = sort(x, d)  # NaNs last, in their order
    count = (~isnan(x)).sum(d, keepdim=True)
    k = _where(count > 0, (count - 1) // 2, 0)
    i = idx.take_along_dim(k, d)
    v = x.take_along_dim(i, d)  # read where it lies, so that its gradient goes there
    return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))


QUANTILE_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile(x, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
    """The q-th quantiles of `x` along `dim` (of all elements when None), as torch.quantile:
    the sorted row read at rank q (n - 1), between its neighbours as `interpolation` says;
    a row holding a NaN gives NaN. `q` a number in [0, 1] or a 1-D tensor of them (its
    axis first in the result). The gradient reaches the one or two elements read.

    >>> import fusegrad as fg
    >>> fg.tensor([1.0, 4.0, 2.0, 3.0]).quantile(0.5).item()
    2.5
    """
    return _quantile(x, q, dim, keepdim, interpolation, "quantile")


def nanquantile(x, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
    """`quantile` of the elements that are not NaN (NaN where a row has none), as
    torch.nanquantile.

    >>> import fusegrad as fg
    >>> fg.tensor([1.0, float("nan"), 3.0]).nanquantile(0.5).item()
    2.0
    """
    return _quantile(x, q, dim, keepdim, interpolation, "nanquantile")


def _quantile(x, q, dim, keepdim: bool, interpolation: str, op: str):
    if x.dtype.name not in ("float32", "float64"):
        fail(DTypeError, op, f"{op}() input tensor must be either float or double dtype")
    if interpolation not in QUANTILE_INTERPOLATIONS:
        fail(
            ArgumentError,
            op,
            f"{op}() interpolation must be one of linear, lower, higher, midpoint or "
            f"nearest, but got {interpolation}",
        )
    scalar_q = not isinstance(q, TensorBase)
    if not scalar_q:
        if q.ndim > 1:
            fail(ShapeError, op, f"{op}() q must be a scalar or 1D tensor")
        if q.dtype is not x.dtype:
            fail(DTypeError, op, f"{op}() q tensor must be same dtype as the input tensor")
        scalar_q = q.ndim == 0
        qs = [float(v) for v in np.asarray(q.numpy(), dtype=np.float64).reshape(-1)]
    else:
        qs = [float(q)]
    for v in qs:
        if not 0.0 <= v <= 1.0:
            fail(ArgumentError, op, f"{op}() q must be in the range [0, 1] but got {v}")
    if x.numel() == 0:
        fail(ShapeError, op, f"{op}() input tensor must be non-empty")
    if x.ndim == 0:  # one element: its own quantiles, 0-d whatever dim and keepdim say
        if dim is not None:
            x._dim(dim, op)  # (0 and -1 are its only dims)
        return _quantile(x.reshape(1), q, None, False, interpolation, op)
    shape = x.shape
    rows = x.reshape(-1) if dim is None else movedim(x, x._dim(dim, op), -1)
    n = rows.shape[-1]
    vals, _ = sort(rows, -1)  # NaNs last
    nan = isnan(rows)
    outs = []
    for v in qs:
        # rank q (n - 1) as torch (2.14) computes it: q rounded to x's dtype, the product
        # in float64 (torch 2.13 and earlier rounded the product to x's dtype too)
        q_x = x._make(N.const(float(np.asarray(v, x.dtype.np)), (), float64))
        if op == "nanquantile":  # a row of NaNs: rank -1, read at 0 (a NaN)
            rank = q_x * ((~nan).sum(-1, keepdim=True) - 1).cast(float64)
            rank = _where(rank < 0, 0.0, rank)
        else:  # a row holding a NaN reads it, sorted last
            last = x._make(N.const(n - 1, (), float64))
            rank = _where(nan.any(-1, keepdim=True), last, q_x * (n - 1))
        below, above = rank.floor(), rank.ceil()
        if interpolation == "lower":
            above = below
        elif interpolation == "higher":
            below = above
        elif interpolation == "nearest":
            below = above = rank.round()
        lo = vals.take_along_dim(below.cast(int64), -1)
        hi = vals.take_along_dim(above.cast(int64), -1)
        weight = 0.5 if interpolation == "midpoint" else (rank - below).cast(x.dtype)
        outs.append(lo.lerp(hi, weight) if interpolation in ("linear", "midpoint") else lo)
    out = stack(outs, 0).squeeze(-1)  # (q, *rows' leading axes)
    if keepdim:
        if dim is None:
            out = out.reshape(len(qs), *([1] * len(shape)))
        else:
            d = x._dim(dim, op)
            out = out.unsqueeze(1 + d)
    elif dim is None:
        out = out.reshape(len(qs))
    return out[0] if scalar_q else out


@autocast_op("nansum")
def nansum(x, dim=None, keepdim: bool = False, dtype=None):
    """sum, counting NaNs as zero (torch.nansum); an integer tensor has none. The gradient
    is torch's: the incoming one times (x is not NaN), so 0 at a NaN (NaN if it is inf).

    >>> import fusegrad as fg
    >>> fg.tensor([1.0, float("nan"), 2.0]).nansum().item()
    3.0
    """
    if not x.dtype.is_float:
        return x.sum(dim, keepdim, dtype=dtype)
    nan = isnan(x)
    clean = _where(nan, 0.0, x)
    if clean.requires_grad and clean.node.op is Ops.WHERE:
        keep, xn = (~nan).cast(x.dtype).node, x.node
        with_vjp(clean.node, lambda g: [(xn, N.mul(g, keep))])
    return clean.sum(dim, keepdim, dtype=dtype)


@autocast_op("nanmean")
def nanmean(x, dim=None, keepdim: bool = False):
    """mean of the elements that are not NaN (NaN where all are), as torch.nanmean.

    >>> import fusegrad as fg
    >>> fg.tensor([1.0, float("nan"), 2.0]).nanmean().item()
    1.5
    """
    if not x.dtype.is_float:
        fail(DTypeError, "nanmean", f"needs a float tensor, got {x.dtype.name}; use .float()")
    return nansum(x, dim, keepdim) / (~isnan(x)).sum(dim, keepdim)


def _shared_by_ties(out, flat):
    """`out`, a value picked from `flat`, with torch's gradient for a full median: shared
    evenly by the elements equal to it (by the NaNs, where it is NaN)."""
    if not out.requires_grad or out.node.op is not Ops.WHERE:
        return out

    hit = ((flat == out) | (isnan(flat) & isnan(out))).cast(flat.dtype)
    share = (hit / hit.sum()).node
    fn = flat.node
    with_vjp(out.node, lambda g: [(fn, N.mul(N.expand(N.reshape(g, (1,)), fn.shape), share))])
    return out


def count_nonzero(x, dim=None):
    """How many elements are not zero (int64), over all of x or along `dim` (an int or a
    tuple).

    >>> import fusegrad as fg
    >>> fg.count_nonzero(fg.tensor([[0, 1], [2, 3]]), dim=0).tolist()
    [1, 2]
    """
    return (x != 0).cast("int64").sum(dim)


METHODS = {
    "count_nonzero": count_nonzero,
    "prod": prod,
    "all": all_,
    "any": any_,
    "norm": norm,
    "var": var,
    "std": std,
    "var_mean": var_mean,
    "std_mean": std_mean,
    "sum": sum_,
    "bmm": bmm,
    "addmm": addmm,
    "addmv": addmv,
    "baddbmm": baddbmm,
    "addbmm": addbmm,
    "tril": tril,
    "triu": triu,
    "diagonal": diagonal,
    "diag": diag,
    "diag_embed": diag_embed,
    "trace": trace,
    "outer": outer,
    "kron": kron,
    "narrow": narrow,
    "split": split,
    "chunk": chunk,
    "tensor_split": tensor_split,
    "unbind": unbind,
    "movedim": movedim,
    "moveaxis": movedim,
    "swapaxes": swapaxes,
    "swapdims": swapaxes,
    "unflatten": unflatten,
    "unfold": unfold,
    "repeat": repeat,
    "tile": tile,
    "repeat_interleave": repeat_interleave,
    "roll": roll,
    "rot90": rot90,
    "cross": cross,
    "diff": diff,
    "dist": dist,
    "cumsum": cumsum,
    "cumprod": cumprod,
    "logcumsumexp": logcumsumexp,
    "cummax": cummax,
    "cummin": cummin,
    "sort": sort,
    "argsort": argsort,
    "msort": msort,
    "topk": topk,
    "kthvalue": kthvalue,
    "median": median,
    "nanmedian": nanmedian,
    "quantile": quantile,
    "nanquantile": nanquantile,
    "nansum": nansum,
    "nanmean": nanmean,
}


# methods that take numpy's keyword names too, as torch's do: axis= for dim=, keepdims= for
# keepdim= (`x.mean(axis=0, keepdims=True)`)
NUMPY_NAMED = (
    "sum", "mean", "std", "var", "prod", "amax", "amin", "max", "min", "argmax", "argmin",
    "logsumexp", "any", "all", "median", "nansum", "nanmean", "count_nonzero", "cumsum",
    "cumprod", "softmax", "log_softmax",
)  # fmt: skip


def with_numpy_names(fn):
    """`fn` (a method taking dim=/keepdim=) also taking numpy's axis=/keepdims=."""

    @functools.wraps(fn)
    def wrapper(self, *args, axis=None, keepdims=None, **kwargs):  # (a name ir/sites passes)
        if axis is not None:
            if args or "dim" in kwargs:
                raise TypeError(f"{fn.__name__}() got an unexpected keyword argument 'axis'")
            kwargs["dim"] = axis
        if keepdims is not None:
            if "keepdim" in kwargs:
                raise TypeError(f"{fn.__name__}() got both keepdim and keepdims")
            kwargs["keepdim"] = keepdims
        return fn(self, *args, **kwargs)

    return wrapper


class ShapeMixin:
    """Tensor's methods of this module (`METHODS`), and those of `NUMPY_NAMED` (here or
    reduce.py's) taking numpy's names too. Before `ReduceMixin` among Tensor's bases."""

    __slots__ = ()
    locals().update(METHODS)  # t.cumsum(), t.sort(), ...: the functions above
    locals().update(
        {
            name: with_numpy_names(METHODS[name] if name in METHODS else getattr(ReduceMixin, name))
            for name in NUMPY_NAMED
        }
    )


# ---------------------------------------------------------------- torch's smaller shape helpers


def _tensors_of(args) -> tuple[list, bool]:
    """The tensors of `f(a, b)` or `f([a, b])`, and whether one tensor was given alone
    (then `f` returns a tensor, not a tuple, as torch's atleast_* do)."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0]), False
    return list(args), len(args) == 1


def _atleast(args, ndim: int, shape):
    tensors, alone = _tensors_of(args)
    out = [t if t.ndim >= ndim else t.reshape(shape(t)) for t in tensors]
    return out[0] if alone else tuple(out)


def atleast_1d(*tensors):
    """Each tensor with at least one axis (a 0-d one as (1,)), as torch.atleast_1d."""
    return _atleast(tensors, 1, lambda t: (1,))


def atleast_2d(*tensors):
    """Each tensor with at least two axes: (n,) as (1, n), 0-d as (1, 1)."""
    return _atleast(tensors, 2, lambda t: (1, t.numel()))


def atleast_3d(*tensors):
    """Each tensor with at least three axes: (n,) as (1, n, 1), (m, n) as (m, n, 1)."""
    return _atleast(tensors, 3, lambda t: (*t.shape, 1) if t.ndim == 2 else (1, t.numel(), 1))


def broadcast_tensors(*tensors):
    """The tensors expanded to their common broadcast shape (views), as a tuple."""
    tensors, _ = _tensors_of(tensors)
    shape = functools.reduce(
        lambda a, b: broadcast_shapes(a, b, "broadcast_tensors"), [t.shape for t in tensors], ()
    )
    return tuple(t.expand(shape) for t in tensors)


def column_stack(tensors):
    """Join as columns: 0-d and 1-d tensors become columns, as torch.column_stack."""
    return cat([t.reshape(-1, 1) if t.ndim < 2 else t for t in tensors], 1)


def dstack(tensors):
    """Join along the third axis, each tensor `atleast_3d` first (torch.dstack)."""
    return cat([atleast_3d(t) for t in tensors], 2)


def _split_even(x, sections, dim: int, op: str):
    """`tensor_split` along `dim`, where an int number of sections must divide it evenly."""
    if isinstance(sections, int) and x.shape[dim] % sections:
        fail(
            ShapeError,
            op,
            f"attempted to split along dimension {dim}, but the size of the dimension "
            f"{x.shape[dim]} is not divisible by the split_size {sections}!",
        )
    return tensor_split(x, sections, dim)


def hsplit(x, sections):
    """Split along the second axis (the first of a 1-d tensor), as torch.hsplit."""
    if x.ndim < 1:
        fail(ShapeError, "hsplit", "requires a tensor with at least 1 dimension, got 0")
    return _split_even(x, sections, 0 if x.ndim == 1 else 1, "hsplit")


def vsplit(x, sections):
    """Split along the first axis of a tensor of at least two, as torch.vsplit."""
    if x.ndim < 2:
        fail(ShapeError, "vsplit", f"requires a tensor with at least 2 dimension, got {x.ndim}")
    return _split_even(x, sections, 0, "vsplit")


def inner(a, b):
    """Sums of products over the last axes of both (a * b where one is 0-d), the result's
    axes a's others then b's, as torch.inner."""
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        fail(
            ShapeError,
            "inner",
            f"inner() the last dimension must match on both input tensors but got shapes "
            f"{tuple(a.shape)} and {tuple(b.shape)}",
        )
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def mv(matrix, vector):
    """matrix @ vector for a 2-d matrix and a 1-d vector, as torch.mv."""
    if matrix.ndim != 2 or vector.ndim != 1:
        fail(
            ShapeError,
            "mv",
            f"vector + matrix @ vector expected, got {matrix.ndim}, {vector.ndim} dims",
        )
    return matrix @ vector


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False):
    """Whether each element is among `test_elements` (NaN never is), as torch.isin."""
    like = test_elements if isinstance(test_elements, TensorBase) else None
    e = as_tensor_like(elements, like, "isin")
    t = as_tensor_like(test_elements, e, "isin").reshape(-1)
    found = (e.unsqueeze(-1) == t).any(-1)
    return ~found if invert else found


def cartesian_prod(*tensors):
    """The rows of every combination of the 1-d tensors' elements (the first varying
    slowest), as torch.cartesian_prod; one tensor is itself."""
    tensors, _ = _tensors_of(tensors)
    if len(tensors) == 1:
        return tensors[0]
    return stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], 1)


def combinations(input, r: int = 2, with_replacement: bool = False):
    """The r-element combinations of a 1-d tensor's elements, in itertools' order (rows of
    a (k, r) tensor; with replacement, each element may repeat), as torch.combinations.
    Its values are the elements picked, so gradients reach them."""
    if input.ndim != 1:
        fail(ShapeError, "combinations", f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        fail(ArgumentError, "combinations", f"Expect a non-negative number, but got {r}")
    if r == 0:
        return input[:0]
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = list(pick(range(input.shape[0]), r))
    if not rows:
        return input[:0].reshape(0, 1).expand(0, r).contiguous()
    return input[tensor_like(input, np.array(rows, dtype=np.int64))]


def vander(x, N: int | None = None, increasing: bool = False):
    """The Vandermonde matrix of a 1-d tensor: columns x^(N-1) ... x^0 (`increasing`: x^0
    first), N = len(x) by default, as torch.vander (bools become int64). Built as running
    products, so its gradient is exact (torch's backward raises)."""
    if x.ndim != 1:
        fail(ShapeError, "vander", "x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        fail(ArgumentError, "vander", "N must be non-negative.")
    if x.dtype.is_bool:
        x = x.cast(int64)
    if n == 0:
        return x.reshape(-1, 1)[:, :0]
    ones = x.reshape(-1, 1)[:, :1] * 0 + 1
    powers = cumprod(cat([ones, x.reshape(-1, 1).expand(x.shape[0], n - 1)], 1), 1)
    return powers if increasing else flip(powers, [1])


def block_diag(*tensors):
    """The tensors (0-d, 1-d as one row, 2-d) on a block diagonal, zeros elsewhere, as
    torch.block_diag."""
    tensors, _ = _tensors_of(tensors)
    blocks = [t.reshape(1, -1) if t.ndim < 2 else t for t in tensors]
    if any(t.ndim != 2 for t in blocks):
        fail(ShapeError, "block_diag", "Input tensors must have 2 or fewer dimensions")
    dtype = functools.reduce(promote, [t.dtype for t in blocks])
    width = sum(t.shape[1] for t in blocks)
    rows, left = [], 0
    for t in blocks:
        right = width - left - t.shape[1]
        rows.append(t.cast(dtype).pad((left, right)) if width else t.cast(dtype))
        left += t.shape[1]
    return cat(rows, 0)


def trapezoid(y, x=None, *, dx=None, dim: int = -1):
    """The trapezoid rule's integral of `y` along `dim`: at spacing `dx` (1 by default)
    or at the points `x`, as torch.trapezoid."""
    d = y._dim(dim, "trapezoid")
    n = y.shape[d]
    if n == 0:
        return y.sum(d)
    mid = y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)
    if x is None:
        return mid.sum(d) * ((1.0 if dx is None else dx) / 2)
    xd = x._dim(dim if x.ndim > 1 else 0, "trapezoid")
    steps = x.narrow(xd, 1, n - 1) - x.narrow(xd, 0, n - 1)
    if x.ndim == 1:  # (the points of every row: along `dim`)
        steps = steps.reshape([n - 1 if i == d else 1 for i in range(y.ndim)])
    return (mid * steps).sum(d) / 2


def trapz(y, x=None, *, dx=None, dim: int = -1):
    """torch.trapz, another name of `trapezoid`."""
    return trapezoid(y, x, dx=dx, dim=dim)


def select(x, dim: int, index: int):
    """x's slice at `index` along `dim`, that axis gone (a view), as torch.select."""
    d = x._dim(dim, "select")
    size = x.shape[d]
    if not -size <= index < size:
        fail(
            IndexingError,
            "select",
            f"index {index} out of range for tensor of size {tuple(x.shape)} at dimension {d}",
        )
    return x.narrow(d, index % size, 1).squeeze(d)
