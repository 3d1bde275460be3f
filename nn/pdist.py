"""`F.pdist`: the p-norm distances between every two rows of a matrix, as torch's (its
values, its order and its gradient, written out as torch's kernel writes it).

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> F.pdist(fg.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])).tolist()
[5.0, 1.0, 4.2426...]
"""

from __future__ import annotations

import math

import numpy as np

from ..nnapi import DTypeError, ShapeError, Tensor, custom_gradient, fail, tensor, where


def _distance(diff: Tensor, p: float) -> Tensor:
    """The p-norm of each row of `diff`, by torch's formulas (p = 0 counts nonzeros)."""
    if p == 0:  # torch's min(ceil(|diff|), 1): NaN stays NaN
        return diff.abs().ceil().clamp_max(1.0).sum(1)
    if p == 1:
        return diff.abs().sum(1)
    if p == 2:
        return (diff * diff).sum(1).sqrt()
    if math.isinf(p):
        return diff.abs().amax(1)
    return (diff.abs() ** p).sum(1) ** (1.0 / p)


def _sign(x: Tensor) -> Tensor:
    """torch's pdist kernel's sign: clamp(ceil(x), 0, 1) + clamp(floor(x), -1, 0), NaN at NaN."""
    return x.ceil().clamp(0.0, 1.0) + x.floor().clamp(-1.0, 0.0)


def _distance_gradient(g: Tensor, diff: Tensor, p: float) -> Tensor:
    """d(dist)/d(diff) times g, as torch's pdist backward (DistanceOpsKernel.cpp): 0 where a
    distance is 0, and for p = inf the whole gradient to every tied largest |diff|."""
    dist = _distance(diff, p)[:, None]
    g = g[:, None]
    if p == 0:
        return where(diff != 0, 0.0, 0.0)  # zeros, at NaN too
    if p == 1:
        return g * _sign(diff)
    if math.isinf(p):  # 1 where |diff| is the largest (NaN where either is NaN or inf)
        largest = 1.0 - (diff.abs() - dist).abs().ceil().clamp_max(1.0)
        return g * _sign(diff) * largest
    if p == 2:
        return where(dist == 0, 0.0, g * diff / dist)
    if p < 2:
        step = _sign(diff) * diff.abs() ** (p - 1) * g / dist ** (p - 1)
        step = where((diff == 0) & (p < 1), 0.0, step)
    else:
        step = diff * diff.abs() ** (p - 2) * g / dist ** (p - 1)
    return where(dist == 0, 0.0, step)


def pdist(input: Tensor, p: float = 2) -> Tensor:
    """||input[i] - input[j]||_p for every pair of rows i < j of an (N, M) input, in the
    order (0, 1), (0, 2), ..., (1, 2), ...: N (N - 1) / 2 distances, as torch's.

    Unlike `F.pairwise_distance`, no eps is added: where two rows are equal the distance
    is 0 and so is its gradient (torch's rule); for p = inf every tied largest element
    takes the whole gradient, as torch's.
    """
    if input.ndim != 2:
        fail(ShapeError, "pdist", f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not input.dtype.is_float:
        fail(DTypeError, "pdist", "pdist only supports floating-point dtypes")
    if p < 0:
        fail(ShapeError, "pdist", "pdist only supports non-negative p values")
    rows, cols = np.triu_indices(input.shape[0], 1)
    first = input.index_select(0, tensor(rows.astype(np.int64), device=input.device))
    second = input.index_select(0, tensor(cols.astype(np.int64), device=input.device))
    diff = first - second
    p = float(p)
    return custom_gradient(
        _distance(diff, p), [diff], lambda g, d: [_distance_gradient(g, d, p)], own_node=True
    )
