"""Spatial transformers' sampling, as torch's: `affine_grid` (the sampling grid of a batch of
2 x 3 affine maps) and `grid_sample` (an image read at a grid's points, bilinearly or at
the nearest pixel, with zeros, border or reflection padding), 4-d inputs.

Both are compositions: the grid's points become source pixel coordinates, their corners'
values are gathered from the flattened image, and the weights are the distances to the
corners, so the gradients reach the image (the gathers' scatter) and the grid (the
weights) as torch's do.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> theta = fg.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])  # the identity
>>> image = fg.arange(6.0).reshape(1, 1, 2, 3)
>>> grid = F.affine_grid(theta, (1, 1, 2, 3), align_corners=False)
>>> F.grid_sample(image, grid, align_corners=False).tolist()
[[[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]]]
"""

from __future__ import annotations

import warnings

import numpy as np

from ..nnapi import DTypeError, ShapeError, Tensor, tensor, where
from ..nnapi import fail as _fail

_MODES = ("bilinear", "nearest")
_PADDINGS = ("zeros", "border", "reflection")


def _corners(align_corners, op: str) -> bool:
    if align_corners is None:
        warnings.warn(
            f"Default {op} behavior has changed to align_corners=False since 1.3.0. Please "
            "specify align_corners=True if the old behavior is desired. See the "
            "documentation of grid_sample for details.",
            UserWarning,
            stacklevel=3,
        )
        return False
    return bool(align_corners)


def _base(n: int, align_corners: bool) -> np.ndarray:
    """The normalized coordinates of n pixels: their centers (or, aligned, their corners)."""
    if n == 1:
        return np.zeros(1)
    points = np.linspace(-1.0, 1.0, n)
    return points if align_corners else points * (n - 1) / n


def affine_grid(theta: Tensor, size, align_corners=None) -> Tensor:
    """The (N, H, W, 2) grid of points (x, y) that `theta`'s N affine maps (N, 2, 3) send
    the normalized pixel coordinates of an (N, C, H, W) output to, as torch's."""
    align = _corners(align_corners, "affine_grid")
    size = tuple(int(s) for s in size)
    if len(size) != 4:
        _fail(
            ShapeError,
            "affine_grid",
            f"only 4-d sizes (N, C, H, W) are supported here, got {size} (5-d: not yet)",
        )
    if not theta.dtype.is_float:
        _fail(DTypeError, "affine_grid", f"expected theta to be floating point, got {theta.dtype}")
    n, _, h, w = size
    if theta.shape != (n, 2, 3):
        _fail(
            ShapeError,
            "affine_grid",
            f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {list(size)}. "
            f"Got {list(theta.shape)}.",
        )
    xs, ys = _base(w, align), _base(h, align)
    base = np.stack(np.broadcast_arrays(xs[None, :], ys[:, None], np.ones((h, w))), -1)
    points = tensor(base.reshape(1, h * w, 3), dtype=theta.dtype, device=theta.device)
    return (points @ theta.transpose(1, 2)).reshape(n, h, w, 2)


def _reflect(coord: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """`coord` reflected into [twice_low / 2, twice_high / 2] at its ends, as torch's."""
    if twice_low == twice_high:
        return coord * 0.0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    distance = (coord - low).abs()
    extra = distance.fmod(span)
    flips = (distance / span).floor()
    return where(flips.fmod(2) == 0, extra + low, span - extra + low)


def _source(coord: Tensor, n: int, padding: str, align: bool) -> Tensor:
    """A normalized coordinate as a pixel coordinate of an axis of n pixels, padded."""
    pixel = (coord + 1) / 2 * (n - 1) if align else ((coord + 1) * n - 1) / 2
    if padding == "reflection":
        pixel = _reflect(pixel, 0, 2 * (n - 1)) if align else _reflect(pixel, -1, 2 * n - 1)
    if padding == "zeros":
        return pixel
    # clipped to the image, with torch's gradient: 0 at and beyond its edges
    inside = (pixel > 0) & (pixel < n - 1)
    return where(inside, pixel, pixel.detach().clamp(0, n - 1))


def grid_sample(
    input: Tensor,
    grid: Tensor,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners=None,
) -> Tensor:
    """`input` (N, C, H, W) read at `grid`'s (N, Ho, Wo, 2) points (x, y in [-1, 1]):
    bilinearly or at the nearest pixel (half to even), as torch's; points outside read
    zeros, the border or the image reflected (`padding_mode`)."""
    align = _corners(align_corners, "grid_sample")
    if mode not in _MODES:
        if mode == "bicubic":
            _fail(ShapeError, "grid_sample", "mode='bicubic' is not supported yet")
        raise ValueError(
            f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or "
            f"'bicubic', but got: '{mode}'"
        )
    if padding_mode not in _PADDINGS:
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', "
            f"or 'reflection', but got: '{padding_mode}'"
        )
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2:
        _fail(
            ShapeError,
            "grid_sample",
            f"expects a 4-d input (N, C, H, W) and a grid (N, Ho, Wo, 2), got {input.shape} "
            f"and {grid.shape} (5-d: not yet)",
        )
    if grid.shape[0] != input.shape[0]:
        _fail(
            ShapeError,
            "grid_sample",
            f"grid and input must have the same batch size, got {grid.shape[0]} and "
            f"{input.shape[0]}",
        )
    n, c, h, w = input.shape
    _, ho, wo, _ = grid.shape
    grid = grid.to(input.dtype)
    x = _source(grid[..., 0], w, padding_mode, align)
    y = _source(grid[..., 1], h, padding_mode, align)
    flat = input.reshape(n, c, h * w)

    def pick(yi: Tensor, xi: Tensor) -> Tensor:
        """The pixels at whole coordinates (yi, xi); zeros where outside the image."""
        inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        index = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long()
        index = index.reshape(n, 1, ho * wo).expand(n, c, ho * wo)
        values = flat.gather(2, index).reshape(n, c, ho, wo)
        return where(inside.unsqueeze(1), values, 0.0)

    if mode == "nearest":  # (no gradient reaches the grid: torch's is zeros)
        return pick(y.detach().round(), x.detach().round())
    x0, y0 = x.detach().floor(), y.detach().floor()
    x1, y1 = x0 + 1, y0 + 1
    wx1, wy1 = (x - x0).unsqueeze(1), (y - y0).unsqueeze(1)
    wx0, wy0 = 1 - wx1, 1 - wy1
    return (
        pick(y0, x0) * (wy0 * wx0)
        + pick(y0, x1) * (wy0 * wx1)
        + pick(y1, x0) * (wy1 * wx0)
        + pick(y1, x1) * (wy1 * wx1)
    )
