"""Counting and searching in sorted data: bincount, histc, searchsorted, bucketize, mode,
and the pairwise distances cdist.

bincount, histc, searchsorted, bucketize and mode give integer answers with no gradient, and
are computed on the host from the realized inputs (as torch's CPU kernels compute them);
mode's values are gathered from the input, so they carry its gradient. cdist is built of
tensor ops (a broadcast difference and a norm) and so has torch's gradient, 0 where two
points coincide.

>>> import fusegrad as fg
>>> fg.bincount(fg.tensor([0, 1, 1, 3])).tolist()
[1, 2, 0, 1]
>>> fg.bucketize(fg.tensor([3, 6, 9]), fg.tensor([1, 3, 5, 7])).tolist()
[1, 3, 4]
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .autocast import autocast_op
from .creation_nodes import tensor_like
from .errors import ArgumentError, DTypeError, DTypeNotImplementedError, ShapeError, fail
from .indexing import gather
from .ir.dtypes import float32, float64, int32, int64
from .tensor_base import TensorBase

ModeResult = namedtuple("ModeResult", ["values", "indices"])


def _made(array: np.ndarray, dtype, like: TensorBase) -> TensorBase:
    return tensor_like(like, array, dtype, like.device)


def bincount(
    input: TensorBase, weights: TensorBase | None = None, minlength: int = 0
) -> TensorBase:
    """How often each value 0..max occurs in a 1-d non-negative integer tensor (int64),
    or the sum of `weights` at each value (float32 weights give float32, others float64,
    as torch's); at least `minlength` long.

    >>> import fusegrad as fg
    >>> fg.bincount(fg.tensor([0, 1, 1]), weights=fg.tensor([0.5, 1.0, 2.0])).tolist()
    [0.5, 3.0]
    """
    if input.dtype.is_float or input.dtype.is_bool:
        fail(DTypeError, "bincount", f"needs an integer tensor, got {input.dtype.name}")
    x = input.numpy()
    if x.ndim != 1 or (x.size and x.min() < 0):
        fail(ArgumentError, "bincount", "only supports 1-d non-negative integral inputs.")
    if weights is None:
        return _made(np.bincount(x, minlength=minlength), int64, input)
    w = weights.detach().numpy() if isinstance(weights, TensorBase) else np.asarray(weights)
    if w.shape != x.shape:
        fail(ShapeError, "bincount", f"weights of shape {w.shape} for input {x.shape}")
    out = np.bincount(x, weights=w.astype(np.float64), minlength=minlength)
    is_f32 = isinstance(weights, TensorBase) and weights.dtype is float32
    return _made(out, float32 if is_f32 else float64, input)


def histc(input: TensorBase, bins: int = 100, min: float = 0.0, max: float = 0.0) -> TensorBase:  # noqa: A002
    """A histogram of `input`'s elements in `bins` equal bins over [min, max], as torch.histc:
    elements outside are left out (NaN too), max falls in the last bin; min == max takes the
    data's smallest and largest (widened by 1 each way where those are equal too). An
    element's bin is (x - min) * bins / (max - min) rounded down, in the input's dtype (as
    torch's). Float inputs only; the counts are of its dtype, with no gradient.

    >>> import fusegrad as fg
    >>> fg.histc(fg.tensor([0.0, 1.0, 2.0, 2.0, 3.0, 5.0]), bins=4, min=0, max=3).tolist()
    [1.0, 1.0, 2.0, 1.0]
    """
    if not input.dtype.is_float:
        fail(
            DTypeNotImplementedError,
            "histc",
            f"not implemented for {input.dtype.name} (floats only)",
        )
    if isinstance(bins, bool) or not isinstance(bins, int) or bins <= 0:
        fail(ArgumentError, "histc", f"bins must be a positive int, got {bins!r}")
    host = input.detach().cpu()  # (counted on the host, from any device)
    x = (host.float() if input.dtype.is_half else host).numpy().reshape(-1)
    dt = x.dtype.type
    lo, hi = dt(min), dt(max)
    if lo == hi and x.size:
        lo, hi = x.min(), x.max()
    if lo == hi:
        lo, hi = lo - dt(1), hi + dt(1)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        fail(ArgumentError, "histc", f"range of [{lo}, {hi}] is not finite")
    if lo > hi:
        fail(ArgumentError, "histc", "max must be larger than min")
    with np.errstate(invalid="ignore", over="ignore"):
        inside = (x >= lo) & (x <= hi)
        v = x[inside]
        pos = (v - lo) * dt(bins) / (hi - lo)  # (in the input's dtype, as torch's)
    index = np.minimum(np.floor(pos).astype(np.int64), bins - 1)
    return _made(np.bincount(index, minlength=bins).astype(x.dtype), input.dtype, input)


def searchsorted(
    sorted_sequence: TensorBase,
    values,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: TensorBase | None = None,
) -> TensorBase:
    """For each of `values`, the index in the last dim of `sorted_sequence` where it
    would be inserted to keep it sorted: the first such place, or the last with
    `right=True` / `side="right"` (int64, int32 with out_int32), as torch.searchsorted.
    A 1-d sequence serves all values; an n-d one has a row per row of values.

    >>> import fusegrad as fg
    >>> fg.searchsorted(fg.tensor([1, 3, 5, 7]), fg.tensor([3, 6, 9])).tolist()
    [1, 3, 4]
    """
    if side is not None:
        if side not in ("left", "right") or (right and side == "left"):
            fail(ArgumentError, "searchsorted", f"side must be 'left' or 'right', got {side!r}")
        right = side == "right"
    seq = sorted_sequence.detach().numpy()
    if sorter is not None:
        seq = np.take_along_axis(seq, sorter.numpy().astype(np.int64), axis=-1)
    scalar = not isinstance(values, TensorBase)
    vals = np.asarray(values) if scalar else values.detach().numpy()
    how = "right" if right else "left"
    if seq.ndim == 1:
        out = np.searchsorted(seq, vals, side=how)
    else:
        if vals.shape[:-1] != seq.shape[:-1]:
            fail(
                ShapeError,
                "searchsorted",
                f"boundaries {seq.shape} and input {vals.shape} differ in their leading "
                "dims (all but the last must match)",
            )
        rows_s, rows_v = seq.reshape(-1, seq.shape[-1]), vals.reshape(-1, vals.shape[-1])
        out = np.stack([np.searchsorted(s, v, side=how) for s, v in zip(rows_s, rows_v)])
        out = out.reshape(vals.shape)
    return _made(np.asarray(out), int32 if out_int32 else int64, sorted_sequence)


def bucketize(input, boundaries: TensorBase, *, out_int32: bool = False, right: bool = False):
    """The bucket of each element of `input` among the sorted 1-d `boundaries`:
    i with boundaries[i-1] < x <= boundaries[i] (right=True: boundaries[i-1] <= x <
    boundaries[i]), as torch.bucketize.

    >>> import fusegrad as fg
    >>> fg.bucketize(fg.tensor([3.0, 6.0]), fg.tensor([1.0, 3.0, 5.0]), right=True).tolist()
    [2, 3]
    """
    if boundaries.ndim != 1:
        fail(ShapeError, "bucketize", f"boundaries must be 1-d, got shape {boundaries.shape}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def mode(input: TensorBase, dim: int = -1, keepdim: bool = False) -> ModeResult:
    """The most frequent value along `dim` (the smallest of equally frequent ones) and
    the index of its last occurrence, as torch.mode on the CPU.

    >>> import fusegrad as fg
    >>> fg.mode(fg.tensor([3, 1, 3, 1]))
    ModeResult(values=tensor(1), indices=tensor(3))
    """
    d = input._dim(dim, "mode") if input.ndim else 0
    x = np.moveaxis(input.detach().numpy().reshape(input.shape or (1,)), d, -1)
    if x.shape[-1] == 0:
        fail(ShapeError, "mode", f"cannot take the mode of an empty dim (shape {input.shape})")
    rows = x.reshape(-1, x.shape[-1])
    index = np.empty(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        uniq, counts = np.unique(row, return_counts=True)
        value = uniq[np.argmax(counts)]  # the first of the most frequent: the smallest
        same = row == value if value == value else row != row  # (NaNs count as one value)
        index[i] = np.flatnonzero(same)[-1]
    idx = np.moveaxis(index.reshape(x.shape[:-1] + (1,)), -1, d)
    if not input.ndim:
        idx = idx.reshape(())
    indices = _made(idx, int64, input)
    values = gather(input, d, indices) if input.ndim else input.clone()
    if not keepdim and input.ndim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return ModeResult(values, indices)


@autocast_op("cdist")
def cdist(x1: TensorBase, x2: TensorBase, p: float = 2.0, compute_mode=None) -> TensorBase:
    """The p-norm distance between each row of x1 (..., P, M) and each row of x2
    (..., R, M): shape (..., P, R), as torch.cdist (its gradient is 0 where two rows
    coincide).

    >>> import fusegrad as fg
    >>> fg.cdist(fg.tensor([[0.0, 0.0]]), fg.tensor([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[5.0, 0.0]]
    """
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        fail(
            ShapeError,
            "cdist",
            f"needs (..., P, M) and (..., R, M) with the same M, got {x1.shape} and {x2.shape}",
        )
    if not x1.dtype.is_float or not x2.dtype.is_float:
        fail(DTypeError, "cdist", f"needs float tensors, got {x1.dtype.name}, {x2.dtype.name}")
    if p < 0:
        fail(ArgumentError, "cdist", f"only supports non-negative p values, got {p}")
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return diff.norm(p=p, dim=-1)


METHODS = {"bincount": bincount, "histc": histc, "mode": mode}
FUNCTIONS = {
    "bincount": bincount,
    "histc": histc,
    "searchsorted": searchsorted,
    "bucketize": bucketize,
    "mode": mode,
    "cdist": cdist,
}


class SearchingMixin:
    """Tensor's methods of this module (`METHODS`)."""

    __slots__ = ()
    locals().update(METHODS)
