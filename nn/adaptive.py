"""Adaptive pooling (`F.adaptive_avg_pool1d/2d`, `F.adaptive_max_pool1d/2d` and their
modules), as torch: output cell i reduces the input from floor(i * n / out) to
ceil((i + 1) * n / out), so the cells cover the input whatever the sizes (they overlap
where out does not divide n).

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> nn.AdaptiveAvgPool2d(1)(fg.arange(16.0).reshape(1, 1, 4, 4)).tolist()
[[[[7.5]]]]
>>> nn.functional.adaptive_avg_pool1d(fg.arange(5.0).reshape(1, 1, 5), 2).tolist()
[[[1.0, 3.0]]]
>>> values, indices = nn.functional.adaptive_max_pool1d(
...     fg.tensor([[[3.0, 1.0, 4.0, 1.0, 5.0]]]), 2, return_indices=True)
>>> values.tolist(), indices.tolist()
([[[4.0, 5.0]]], [[[2, 4]]])
"""

from __future__ import annotations

import math

import numpy as np

from ..nnapi import ShapeError, Tensor, autocast_op, cat, fail, host_table, where
from .conv import first_max_gradient
from .module import Module


def _sizes(output_size, n: int, spatial: tuple[int, ...], op: str) -> tuple[int, ...]:
    sizes = (output_size,) * n if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != n:
        fail(ShapeError, op, f"output_size must have {n} elements, got {output_size!r}")
    # None keeps the input's size along that axis, as torch
    return tuple(s if o is None else int(o) for o, s in zip(sizes, spatial))


def _pool_axis(x: Tensor, axis: int, out: int) -> Tensor:
    """Adaptive average over `axis` of x into `out` cells."""
    n = x.shape[axis]
    if out == n:
        return x
    if n % out == 0:  # equal windows side by side: one reshape and one mean
        shape = x.shape[:axis] + (out, n // out) + x.shape[axis + 1 :]
        return x.reshape(shape).mean(axis + 1)
    starts = [i * n // out for i in range(out)]
    ends = [math.ceil((i + 1) * n / out) for i in range(out)]
    return cat(
        [x.narrow(axis, a, b - a).mean(axis, keepdim=True) for a, b in zip(starts, ends)], axis
    )


def _adaptive_avg_pool(x: Tensor, output_size, n: int, op: str) -> Tensor:
    if x.ndim not in (n + 1, n + 2):
        fail(ShapeError, op, f"expects a {n + 1}-d or {n + 2}-d input, got shape {x.shape}")
    sizes = _sizes(output_size, n, x.shape[-n:], op)
    if any(s <= 0 for s in sizes) or any(s == 0 for s in x.shape[-n:]):
        fail(ShapeError, op, f"output size {sizes} and input {x.shape} must be positive")
    pooled = x
    for k, out in enumerate(sizes):
        pooled = _pool_axis(pooled, x.ndim - n + k, out)
    return pooled if pooled is not x else x.clone()  # (a new tensor, as torch's)


def _window_table(spatial: tuple[int, ...], sizes: tuple[int, ...]) -> np.ndarray:
    """For each output cell, the flat positions (into the input plane) of its window, in
    row-major order, padded with `plane` (one past the end) to the largest window's size:
    shape (*sizes, cells of the largest window)."""
    plane = math.prod(spatial)
    axes = []  # per axis: positions (out, k) and whether each is inside its window
    for n, out in zip(spatial, sizes):
        starts = np.array([i * n // out for i in range(out)])
        ends = np.array([-(-(i + 1) * n // out) for i in range(out)])
        k = np.arange(int((ends - starts).max()))
        pos = starts[:, None] + k[None, :]
        axes.append((pos, pos < ends[:, None]))
    d = len(axes)
    flat = np.zeros((1,) * (2 * d), dtype=np.int64)
    valid = np.ones((1,) * (2 * d), dtype=bool)
    stride = plane
    for a, (pos, ok) in enumerate(axes):
        stride //= spatial[a]
        shape = [1] * (2 * d)
        shape[a], shape[d + a] = pos.shape
        flat = flat + pos.reshape(shape) * stride
        valid = valid & ok.reshape(shape)
    table = np.where(valid, flat, plane)
    return table.reshape(*sizes, -1)


def _adaptive_max_pool(x: Tensor, output_size, n: int, return_indices: bool, op: str):
    if x.ndim not in (n + 1, n + 2):
        fail(ShapeError, op, f"expects a {n + 1}-d or {n + 2}-d input, got shape {x.shape}")
    spatial = tuple(x.shape[-n:])
    sizes = _sizes(output_size, n, spatial, op)
    if any(s <= 0 for s in sizes) or any(s == 0 for s in spatial):
        fail(ShapeError, op, f"output size {sizes} and input {x.shape} must be positive")
    plane = math.prod(spatial)
    lead = tuple(x.shape[:-n])
    # one more cell past the plane, the smallest value: where a smaller window is padded
    fill = float("-inf") if x.dtype.is_float else int(np.iinfo(x.dtype.np).min)
    flat = x.reshape(*lead, plane).pad((0, 1), value=fill)
    table = _window_table(spatial, sizes)
    win = flat[..., host_table(table)]  # (*lead, *sizes, window)
    best = win.amax(-1)
    if best.requires_grad:  # all of it to the first maximum, or to the last NaN (torch's)
        best = first_max_gradient(win, best, 1)
    if not return_indices:
        return best
    positions = host_table(table)
    first = where(win == best[..., None], positions, plane).amin(-1)
    last_nan = where(win != win, positions, -1).amax(-1)
    return best, where(best != best, last_nan, first)


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    """Max over (N, C, L) or (C, L) into `output_size` cells along L; with
    `return_indices`, also each maximum's index along L (the first one on ties)."""
    return _adaptive_max_pool(input, output_size, 1, return_indices, "adaptive_max_pool1d")


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    """Max over (N, C, H, W) or (C, H, W) into an `output_size` grid; with
    `return_indices`, also each maximum's flat index into its H*W plane."""
    return _adaptive_max_pool(input, output_size, 2, return_indices, "adaptive_max_pool2d")


@autocast_op("adaptive_max_pool3d")
def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False):
    """Max over (N, C, D, H, W) or (C, D, H, W) into an `output_size` grid; with
    `return_indices`, also each maximum's flat index into its D*H*W volume."""
    return _adaptive_max_pool(input, output_size, 3, return_indices, "adaptive_max_pool3d")


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Average over (N, C, L) or (C, L) into `output_size` cells along L."""
    return _adaptive_avg_pool(input, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average over (N, C, H, W) or (C, H, W) into an `output_size` grid (an int, a pair,
    or a pair with None to keep that size)."""
    return _adaptive_avg_pool(input, output_size, 2, "adaptive_avg_pool2d")


@autocast_op("adaptive_avg_pool3d")
def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    """Average over (N, C, D, H, W) or (C, D, H, W) into an `output_size` grid."""
    return _adaptive_avg_pool(input, output_size, 3, "adaptive_avg_pool3d")


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool3d(AdaptiveAvgPool2d):
    def forward(self, input):
        return adaptive_avg_pool3d(input, self.output_size)


class AdaptiveMaxPool1d(Module):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input):
        return adaptive_max_pool1d(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool2d(AdaptiveMaxPool1d):
    def forward(self, input):
        return adaptive_max_pool2d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool3d(AdaptiveMaxPool1d):
    def forward(self, input):
        return adaptive_max_pool3d(input, self.output_size, self.return_indices)
