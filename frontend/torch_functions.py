"""torch's smaller top-level functions: index arithmetic (`unravel_index`), runs
(`unique_consecutive`), products (`vdot`, `addr`, `chain_matmul`), integrals
(`cumulative_trapezoid`), float and integer bits (`frexp`, `nextafter`, `gcd`, `lcm`),
`rsub`, `histogram`, `index_reduce` and `renorm`.

>>> import fusegrad as fg
>>> fg.unravel_index(fg.tensor([4, 1]), (2, 3))
(tensor([1, 0]), tensor([1, 1]))
>>> fg.unique_consecutive(fg.tensor([1, 1, 2, 2, 1]), return_counts=True)
(tensor([1, 2, 1]), tensor([2, 2, 1]))

Those whose results are integers or bits fusegrad has no primitive for (`unique_consecutive`,
`frexp`'s exponent, `nextafter`, `gcd`, `lcm`, `histogram`) are computed on the host from
the realized inputs, as torch's CPU kernels compute them; the rest are tensor ops with
torch's gradients.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections import namedtuple

import numpy as np

from .creation_nodes import tensor_like
from .errors import (
    ArgumentError,
    DTypeError,
    DTypeNotImplementedError,
    IndexingError,
    ShapeError,
    fail,
    warn_user,
)
from .indexing import scatter_reduce, values_for_shape
from .ir.dtypes import TORCH_SCALAR_TYPES, bool_, int32, int64, promote
from .shapeops import _scaled_sum, diag, outer
from .tensor_base import TensorBase, where

FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])
HistogramResult = namedtuple("histogram", ["hist", "bin_edges"])


def _torch_name(dtype) -> str:
    return TORCH_SCALAR_TYPES.get(dtype.name, dtype.name)


def _tensor_arg(op: str, value, name: str, position: int) -> None:
    if not isinstance(value, TensorBase):
        raise TypeError(
            f"{op}(): argument '{name}' (position {position}) must be Tensor, "
            f"not {type(value).__name__}"
        )


def _host(x: TensorBase, what: str) -> np.ndarray:
    """x's values on the host (16-bit floats as float32, which holds them exactly)."""
    x = x.detach()
    return values_for_shape(x.float() if x.dtype.is_half else x, what)


# ---------------------------------------------------------------- indices and runs


def unravel_index(indices, shape) -> tuple:
    """The coordinates in a tensor of `shape` of the flat (row-major) `indices`, one int64
    tensor of indices' shape per dim, as torch.unravel_index; an index past the end, or
    negative, wraps as torch's floor division and remainder make it."""
    _tensor_arg("unravel_index", indices, "indices", 1)
    if indices.dtype.is_float or indices.dtype.is_bool:
        fail(
            DTypeError,
            "unravel_index",
            f"expected 'indices' to be integer dtype, but got {indices.dtype}",
        )
    if isinstance(shape, bool) or not isinstance(shape, (int, tuple, list)):
        fail(
            DTypeError,
            "unravel_index",
            f"expected 'shape' to be int or sequence of ints, but got {type(shape)}",
        )
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int):
            fail(
                DTypeError,
                "unravel_index",
                f"expected 'shape' sequence to only contain ints, but got {type(d)}",
            )
    if any(d < 0 for d in shape):
        fail(ShapeError, "unravel_index", f"'shape' cannot have negative values, but got {shape}")
    if not all(shape) and indices.numel():
        fail(
            ShapeError,
            "unravel_index",
            f"'shape' cannot have zero dimensions when 'indices' is non-empty, but got {shape}",
        )
    if not shape:
        return ()
    flat = indices.cast(int64)
    if not all(shape):  # (no elements: nothing to divide)
        return tuple(flat for _ in shape)
    coefs = list(itertools.accumulate(reversed(shape[1:] + (1,)), operator.mul))[::-1]
    return tuple(flat.floor_divide(c) % d for c, d in zip(coefs, shape))


def unique_consecutive(
    input: TensorBase,  # noqa: A002
    return_inverse: bool = False,
    return_counts: bool = False,
    dim: int | None = None,
):
    """The first element of each run of equal consecutive elements (of the flattened
    tensor, or slices along `dim`), with torch's optional inverse (each element's run) and
    counts (each run's length); NaNs are each a run of their own. Computed on the host,
    with no gradient, as torch's.

    >>> import fusegrad as fg
    >>> fg.tensor([3, 3, 1, 3]).unique_consecutive(return_inverse=True)
    (tensor([3, 1, 3]), tensor([0, 0, 1, 2]))
    """
    x = input.detach()
    if dim is None:
        a = _host(x, "unique_consecutive").reshape(-1)
        flat, d, inverse_shape = x.reshape(-1), 0, x.shape
        changed = a[1:] != a[:-1]
    else:
        d = x._dim(dim, "unique_consecutive")
        if x.numel() == 0 and x.shape[d] != 0:
            fail(
                ArgumentError,
                "unique_consecutive",
                "There are 0 sized dimensions, and they aren't selected, so unique cannot be "
                "applied",
            )
        rest = x.numel() // x.shape[d] if x.shape[d] else 0
        a = np.moveaxis(_host(x, "unique_consecutive"), d, 0).reshape(x.shape[d], rest)
        flat, inverse_shape = x, (x.shape[d],)
        changed = (a[1:] != a[:-1]).any(axis=1)
    n = a.shape[0]
    starts = np.flatnonzero(np.concatenate([[n > 0], changed])).astype(np.int64)
    values = flat.index_select(d, tensor_like(x, starts, int64, x.device))
    out = [values]
    if return_inverse:
        runs = np.cumsum(np.concatenate([[0], changed])).astype(np.int64)[:n]
        out.append(tensor_like(x, runs.reshape(inverse_shape), int64, x.device))
    if return_counts:
        counts = np.diff(np.append(starts, n)).astype(np.int64)
        out.append(tensor_like(x, counts, int64, x.device))
    return out[0] if len(out) == 1 else tuple(out)


def diagflat(input: TensorBase, offset: int = 0):  # noqa: A002
    """A square matrix with input's elements, flattened, on the diagonal `offset` (above
    the main one for a positive offset), zeros elsewhere, as torch.diagflat."""
    return diag(input.reshape(-1), offset)


# ---------------------------------------------------------------- products


def vdot(input: TensorBase, other: TensorBase):  # noqa: A002
    """The dot product of two 1-d tensors of one dtype (torch.vdot conjugates the first;
    fusegrad's tensors are real, so it is `dot`)."""
    _tensor_arg("vdot", other, "other", 2)
    if input.ndim != 1 or other.ndim != 1:
        fail(
            ShapeError,
            "vdot",
            f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors",
        )
    if input.dtype is not other.dtype:
        fail(
            DTypeError,
            "vdot",
            f"dot : expected both vectors to have same dtype, but found "
            f"{_torch_name(input.dtype)} and {_torch_name(other.dtype)}",
        )
    if input.shape != other.shape:
        n, m = input.shape[0], other.shape[0]
        fail(
            ShapeError,
            "vdot",
            f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to have the same "
            f"number of elements, but got {n} and {m} elements respectively",
        )
    return input.dot(other)


def addr(input: TensorBase, vec1: TensorBase, vec2: TensorBase, *, beta=1, alpha=1):  # noqa: A002
    """beta * input + alpha * outer(vec1, vec2), as torch.addr: input broadcast to
    (len(vec1), len(vec2)), the dtypes promoted; beta 0 ignores input (its NaN and inf
    too), where alpha 0 multiplies the product (inf * 0 is NaN), as torch's; bool tensors
    take `or` and `and`. With integer tensors a fractional beta or alpha raises, as torch's."""
    for name, v in (("vec1", vec1), ("vec2", vec2)):
        if v.ndim != 1:
            fail(ShapeError, "addr", f"Expected 1-D argument {name}, but got {v.ndim}-D")
    dtype = functools.reduce(promote, [t.dtype for t in (input, vec1, vec2)])
    if not dtype.is_float:
        for name, v in (("beta", beta), ("alpha", alpha)):
            if isinstance(v, float):
                fail(
                    ArgumentError,
                    "addr",
                    f"For integral input tensors, argument {name} must not be a floating "
                    "point number.",
                )
    if dtype is bool_:
        term = vec1.reshape(-1, 1) & vec2.reshape(1, -1)
        term = term if alpha else term & False
        return term | (input & False if not beta else input)
    inp, a, b = (t.cast(dtype) for t in (input, vec1, vec2))
    product = outer(a, b) if alpha == 1 else outer(a, b) * alpha  # (alpha 0: inf * 0 is NaN)
    return _scaled_sum("addr", inp, product, beta, 1)


def chain_matmul(*matrices):
    """The product of the 2-d `matrices`, in the cheapest order (torch's deprecated
    chain_matmul, with its warning: `fg.linalg.multi_dot` of the list)."""
    warn_user(
        "torch.chain_matmul is deprecated and will be removed in a future PyTorch release. "
        "Use torch.linalg.multi_dot instead, which accepts a list of two or more tensors "
        "rather than multiple parameters."
    )
    if not matrices:
        fail(ArgumentError, "chain_matmul", "chain_matmul(): Expected one or more matrices")
    for m in matrices:
        if m.ndim != 2:
            fail(ShapeError, "chain_matmul", f"Tensor dimension is {m.ndim}, expected 2 instead.")
    if len(matrices) == 1:
        return matrices[0]
    return matrices[0]._linalg.multi_dot(list(matrices))


def renorm(input: TensorBase, p, dim: int, maxnorm):  # noqa: A002
    """Each slice of `input` along `dim` (its other dims together) whose p-norm is above
    `maxnorm` scaled to `maxnorm / (norm + 1e-7)` of itself, the others unchanged, as
    torch.renorm; the scale is differentiable where it applies.

    >>> import fusegrad as fg
    >>> fg.renorm(fg.tensor([[3.0, 4.0], [0.3, 0.4]]), 2, 0, 1.0).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """
    if input.ndim < 2:
        fail(ArgumentError, "renorm",
             f"input needs at least 2 dimensions, got {input.ndim} dimensions")  # fmt: skip
    if not input.dtype.is_float:
        got = _torch_name(input.dtype)
        fail(DTypeError, "linalg.vector_norm",
             f"Expected a floating point or complex tensor as input. Got {got}")  # fmt: skip
    if not float(p) > 0:
        fail(ArgumentError, "renorm", "non-positive-norm not supported")
    if not float(maxnorm) >= 0:
        fail(ArgumentError, "renorm", f"expected maxnorm to be >= 0 but got {maxnorm}")
    d = input._dim(dim, "renorm")
    others = tuple(k for k in range(input.ndim) if k != d)
    norm = input._linalg.vector_norm(input, p, dim=others, keepdim=True)
    scale = where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0)
    return input * scale.to(input.dtype)


# ---------------------------------------------------------------- integrals


def cumulative_trapezoid(y: TensorBase, x: TensorBase | None = None, *, dx=None, dim: int = -1):
    """The trapezoid rule's running integral of `y` along `dim` (one element fewer than y
    there): at spacing `dx` (1 by default) or at the points `x` (1-d along `dim`, or y's
    shape), as torch.cumulative_trapezoid; integer y gives the default float."""
    if y.ndim == 0:
        fail(IndexingError, "cumulative_trapezoid", "slice() cannot be applied to a 0-dim tensor.")
    d = y._dim(dim, "cumulative_trapezoid")
    n = y.shape[d]
    if n == 0:
        return y.narrow(d, 0, 0) / 2
    sums = y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)
    if x is None:
        return (sums * ((1.0 if dx is None else dx) / 2)).cumsum(d)
    xd = x._dim(dim if x.ndim > 1 else 0, "cumulative_trapezoid")
    if x.shape[xd] != n:
        fail(
            ShapeError,
            "cumulative_trapezoid",
            "There must be one `x` value for each sample point",
        )
    steps = x.narrow(xd, 1, n - 1) - x.narrow(xd, 0, n - 1)
    if x.ndim == 1:  # (the points of every row: along `dim`)
        steps = steps.reshape([n - 1 if i == d else 1 for i in range(y.ndim)])
    return (steps * sums / 2).cumsum(d)


# ---------------------------------------------------------------- bits of floats and integers


def frexp(input: TensorBase):  # noqa: A002
    """(mantissa, exponent) with input = mantissa * 2 ** exponent, |mantissa| in [0.5, 1)
    (0, inf and NaN keep themselves with exponent 0), as torch.frexp: the exponent int32,
    found on the host; the mantissa `input * 2 ** -exponent`, so its gradient is
    2 ** -exponent, torch's."""
    if not input.dtype.is_float:
        fail(
            DTypeError,
            "frexp",
            "torch.frexp() only supports floating-point dtypes",
        )
    e = np.frexp(_host(input, "frexp"))[1].astype(np.int32)
    exponent = tensor_like(input, e, int32, input.device)
    # two factors, each a power of two in range: 2 ** -e alone overflows below 2 ** -1024
    half = -e // 2
    first = tensor_like(input, np.ldexp(1.0, half), input.dtype, input.device)
    second = tensor_like(input, np.ldexp(1.0, -e - half), input.dtype, input.device)
    return FrexpResult(input * first * second, exponent)


def _integer_pair(op: str, input, other):
    _tensor_arg(op, other, "other", 2)
    dtype = promote(input.dtype, other.dtype)
    if dtype.is_float or dtype.is_bool:
        fail(
            DTypeNotImplementedError,
            op,
            f"\"{op}_cpu\" not implemented for '{_torch_name(dtype)}'",
        )
    a = _host(input.cast(dtype), op)
    b = _host(other.cast(dtype), op)
    return np.broadcast_arrays(a, b), dtype


def gcd(input: TensorBase, other: TensorBase):  # noqa: A002
    """The greatest common divisor of each pair of integers (non-negative; gcd(0, 0) is 0),
    broadcast and promoted as torch.gcd; computed on the host (numpy's, which wraps as
    torch's: gcd(-128, 0) of int8 is -128)."""
    (a, b), dtype = _integer_pair("gcd", input, other)
    return tensor_like(input, np.gcd(a, b), dtype, input.device)


def lcm(input: TensorBase, other: TensorBase):  # noqa: A002
    """The least common multiple of each pair of integers (non-negative; 0 where either is
    0), as torch.lcm; computed on the host (wrapping where it overflows, as torch's)."""
    (a, b), dtype = _integer_pair("lcm", input, other)
    with np.errstate(over="ignore"):
        return tensor_like(input, np.lcm(a, b), dtype, input.device)


def nextafter(input: TensorBase, other: TensorBase):  # noqa: A002
    """The next float after each of input's elements toward other's, in their promoted
    float dtype (NaN if either is NaN), as torch.nextafter; computed on the host, with no
    gradient (torch's raises on backward, here the result does not require grad). Not for
    bfloat16 (numpy has no nextafter of it)."""
    _tensor_arg("nextafter", other, "other", 2)
    dtype = promote(input.dtype, other.dtype)
    if not dtype.is_float or dtype.name == "bfloat16":
        fail(
            DTypeNotImplementedError,
            "nextafter",
            f"\"nextafter_cpu\" not implemented for '{_torch_name(dtype)}'",
        )
    a = values_for_shape(input.detach().cast(dtype), "nextafter")
    b = values_for_shape(other.detach().cast(dtype), "nextafter")
    return tensor_like(input, np.nextafter(a, b), dtype, input.device)


def rsub(input: TensorBase, other, *, alpha=1):  # noqa: A002
    """other - alpha * input (a tensor or a number `other`), as torch.rsub: bool operands
    raise, and a fractional alpha with integer operands, as torch's."""
    kinds = [input.dtype] + ([other.dtype] if isinstance(other, TensorBase) else [])
    floaty = any(d.is_float for d in kinds) or isinstance(other, float)
    if isinstance(alpha, float) and not floaty:
        fail(
            ArgumentError,
            "rsub",
            "For integral input tensors, argument alpha must not be a floating point number.",
        )
    if isinstance(other, TensorBase):
        return other.sub(input, alpha=alpha)
    return input.__rsub__(other) if alpha == 1 else (input * alpha).__rsub__(other)


# ---------------------------------------------------------------- counting


def _linspace(lo, hi, steps: int, dt) -> np.ndarray:
    """torch.linspace's values in dtype `dt`: from the start for the first half, from the
    end for the second."""
    lo, hi = dt(lo), dt(hi)
    step = (hi - lo) / dt(steps - 1) if steps > 1 else dt(0)
    i = np.arange(steps)
    head = lo + step * i.astype(dt)
    tail = hi - step * (steps - 1 - i).astype(dt)
    return np.where(i < steps // 2, head, tail).astype(dt)


def histogram(
    input: TensorBase,  # noqa: A002
    bins=100,
    *,
    range=None,  # noqa: A002
    weight: TensorBase | None = None,
    density: bool = False,
):
    """(hist, bin_edges) of input's elements, as torch.histogram: `bins` equal bins over
    `range` (the data's smallest and largest by default, widened by 0.5 each way where they
    are equal; [0, 1] for no data) or the edges of a 1-d tensor; bin i holds edges[i] <= x
    < edges[i + 1], the last one its right edge too; elements outside are left out. Each
    element counts 1 or its `weight`; `density` divides by the total and the bins' widths.
    Float inputs; computed on the host, with no gradient."""
    op = "histogram"
    if not input.dtype.is_float:
        fail(DTypeNotImplementedError, op, f"\"histogramdd\" not implemented for "
             f"'{_torch_name(input.dtype)}'")  # fmt: skip
    x = _host(input, op).reshape(-1)
    dt = x.dtype.type
    if weight is not None:
        if tuple(weight.shape) != tuple(input.shape):
            fail(
                ShapeError,
                op,
                "if weight tensor is provided it should have the same shape as the input "
                f"tensor, but got input with shape {list(input.shape)} and weight with shape "
                f"{list(weight.shape)}",
            )
        if weight.dtype is not input.dtype:
            fail(
                DTypeError,
                op,
                "if weight tensor is provided, input tensor and weight tensor should have the "
                f"same dtype, but got input({input.dtype.name}), and weight({weight.dtype.name})",
            )
    if isinstance(bins, TensorBase):
        if bins.dtype is not input.dtype:
            fail(
                DTypeError,
                op,
                "input tensor and bins tensors should have the same dtype, but got input with "
                f"dtype {input.dtype.name} and bins with dtype {bins.dtype.name}",
            )
        if bins.ndim != 1 or bins.numel() < 2:
            fail(
                ArgumentError,
                op,
                f"bins must be a 1-d tensor of at least 2 edges, got shape {tuple(bins.shape)}",
            )
        edges = _host(bins, op).astype(dt)
        if (np.diff(edges) < 0).any():
            fail(ArgumentError, op, "bin edges must be in increasing order")
    else:
        if isinstance(bins, bool) or not isinstance(bins, int) or bins <= 0:
            fail(ArgumentError, op, f"bins must be > 0, but got {bins} for dimension 0")
        if range is not None:
            lo, hi = dt(range[0]), dt(range[1])
        elif x.size:
            lo, hi = x.min(), x.max()
        else:
            lo, hi = dt(0), dt(1)
        if not (np.isfinite(lo) and np.isfinite(hi)):
            fail(ArgumentError, op, f"range [{lo}, {hi}] is not finite")
        if lo > hi:
            fail(ArgumentError, op, f"min should not exceed max, but got min {lo} max {hi}")
        if lo == hi:
            lo, hi = lo - dt(0.5), hi + dt(0.5)
        edges = _linspace(lo, hi, bins + 1, dt)
    n = edges.size - 1
    with np.errstate(invalid="ignore"):
        inside = (x >= edges[0]) & (x <= edges[-1])
    index = np.minimum(np.searchsorted(edges, x[inside], side="right") - 1, n - 1)
    w = None if weight is None else _host(weight, op).reshape(-1)[inside].astype(np.float64)
    hist = np.bincount(index, weights=w, minlength=n)[:n].astype(np.float64)
    if density:
        with np.errstate(invalid="ignore", divide="ignore"):
            hist = hist / (hist.sum() * np.diff(edges.astype(np.float64)))
    like = tensor_like(input, hist.astype(dt), input.dtype, input.device)
    return HistogramResult(like, tensor_like(input, edges, input.dtype, input.device))


# ---------------------------------------------------------------- reductions through an index


def index_reduce(
    input: TensorBase,  # noqa: A002
    dim: int,
    index: TensorBase,
    source: TensorBase,
    reduce: str,
    *,
    include_self: bool = True,
):
    """input with source's slices along `dim` reduced into the slices `index` names
    (prod, mean, amax, amin; with input's own values unless `include_self=False`), as
    torch.index_reduce: a `scatter_reduce` with the index spread along the other dims, so
    the gradients are scatter_reduce's (torch's: ties share amax's and amin's); the index
    is read on the host, to refuse one out of range as torch does."""
    op = "index_reduce"
    if reduce not in ("prod", "mean", "amax", "amin"):
        fail(
            ArgumentError,
            op,
            f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got "
            f"{reduce}.",
        )
    d = input._dim(dim, op)
    if index.dtype not in (int32, int64):
        fail(
            DTypeError,
            op,
            f"index_reduce_(): Expected dtype int32/int64 for index but got: "
            f"{_torch_name(index.dtype)}",
        )
    if source.dtype is not input.dtype:
        fail(
            DTypeError,
            op,
            f"index_reduce_(): self ({_torch_name(input.dtype)}) and source "
            f"({_torch_name(source.dtype)}) must have the same scalar type",
        )
    if index.ndim > 1:
        fail(ShapeError, op, "index_reduce_(): Index is supposed to be a vector")
    count = index.numel()
    if source.ndim != input.ndim:
        fail(
            ShapeError,
            op,
            "source tensor shape must match self tensor shape, excluding the specified "
            f"dimension. Got self.shape = {list(input.shape)} source.shape = "
            f"{list(source.shape)}",
        )
    src = source if source.ndim else source.reshape(1)
    sd = d if source.ndim else 0
    if src.shape[sd] != count:
        fail(
            ShapeError,
            op,
            f"index_reduce_(): Number of indices ({count}) should be equal to "
            f"source.size(dim): ({src.shape[sd] if src.ndim > sd else 0}), for dim: {d}",
        )
    base = input if input.ndim else input.reshape(1)
    for k in range(src.ndim):
        if k != sd and src.shape[k] != base.shape[k]:
            fail(
                ShapeError,
                op,
                f"index_reduce_(): source's size {tuple(src.shape)} and self's "
                f"{tuple(base.shape)} differ outside dim {d}",
            )
    size = base.shape[sd]
    where = _host(index, op)
    if where.size and (where.min() < 0 or where.max() >= size):
        fail(IndexingError, op, "index out of range in self")
    places = index.cast(int64).reshape([-1 if k == sd else 1 for k in range(src.ndim)])
    out = scatter_reduce(base, sd, places.expand(src.shape), src, reduce, include_self)
    return out if input.ndim else out.reshape(())
