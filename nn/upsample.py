"""`F.interpolate` (nearest, nearest-exact, linear, bilinear) and `nn.Upsample`.

Each spatial axis is resampled on its own: the source positions are computed
on the host (PyTorch's formulas, `align_corners` included), and the rows at
those positions are gathered (the GATHER primitive that `F.embedding` uses,
whose gradient scatters back), then blended with fixed weights for the
linear modes.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> x = fg.tensor([[[1.0, 2.0]]])
>>> F.interpolate(x, scale_factor=2, mode="nearest").tolist()
[[[1.0, 1.0, 2.0, 2.0]]]
>>> F.interpolate(x, size=3, mode="linear", align_corners=True).tolist()
[[[1.0, 1.5, 2.0]]]
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..nnapi import (
    ShapeError,
    Tensor,
    autocast_op,
    fail,
    tensor,
)
from .dense import embedding
from .module import Module

_MODES = {
    "nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2, "bicubic": 2,
    "trilinear": 3,
}  # fmt: skip
_CUBIC_A = -0.75  # torch's (and OpenCV's) cubic convolution coefficient


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """The four taps' weights at fractions `t` of the way from the second tap to the third."""

    def near(x):  # |x| <= 1
        return ((_CUBIC_A + 2) * x - (_CUBIC_A + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((_CUBIC_A * x - 5 * _CUBIC_A) * x + 8 * _CUBIC_A) * x - 4 * _CUBIC_A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _take_rows(x: Tensor, dim: int, index: np.ndarray) -> Tensor:
    """x's slices at positions `index` along `dim` (a gather; its gradient scatter-adds)."""
    moved = x.transpose(0, dim) if dim else x
    rest = moved.shape[1:]
    table = moved.reshape(moved.shape[0], -1)
    picked = embedding(tensor(index.astype(np.int64), device=x.device), table)
    out = picked.reshape(len(index), *rest)
    return out.transpose(0, dim) if dim else out


def _scale(in_size: int, out_size: int, scale_factor, align_corners: bool) -> float:
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    return 1.0 / scale_factor if scale_factor is not None else in_size / out_size


@autocast_op("interpolate")
def interpolate(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial axes (all but N and C) of `input`, as torch.nn.functional.interpolate.

    Give either `size` or `scale_factor`. 'nearest' takes floor(dst * scale)
    (PyTorch's legacy rule), 'nearest-exact' rounds to the nearest centre;
    'linear' (3-D input), 'bilinear' (4-D) and 'trilinear' (5-D) blend the two
    neighbours along each axis, with corner pixels aligned when `align_corners=True`;
    'bicubic' (4-D, float) blends four with torch's cubic convolution (A = -0.75, the
    taps clamped to the image). An integer input keeps its dtype (each axis's blend is
    rounded), as PyTorch's.
    """
    if mode not in _MODES:
        raise NotImplementedError(
            f"interpolate: mode '{mode}' is not supported (supported: {', '.join(_MODES)})"
        )
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    linear = _MODES[mode]
    if linear is None and align_corners is not None:
        raise ValueError(
            "align_corners option can only be set with the interpolating modes: "
            "linear | bilinear | bicubic | trilinear"
        )
    n = input.ndim - 2
    if n < 1:
        fail(
            ShapeError, "interpolate", f"expected a 3-D to 5-D input (N, C, ...), got {input.shape}"
        )
    if linear is not None and linear != n:
        raise NotImplementedError(
            f"Got {input.ndim}D input, but {mode} mode needs {linear + 2}D input"
        )
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    spatial = input.shape[2:]
    if size is not None:
        sizes = (size,) * n if isinstance(size, int) else tuple(int(s) for s in size)
        if len(sizes) != n:
            raise ValueError(
                f"Input and output must have the same number of spatial dimensions, but got "
                f"input with spatial dimensions of {list(spatial)} and output size of {size}."
            )
        scales = (None,) * n
    else:
        scales = (
            (float(scale_factor),) * n
            if isinstance(scale_factor, (int, float))
            else tuple(float(s) for s in scale_factor)
        )
        if len(scales) != n:
            raise ValueError(
                f"Input and scale_factor must have the same number of spatial dimensions, but "
                f"got input with spatial dimensions of {list(spatial)} and scale_factor of "
                f"shape {scale_factor}."
            )
        sizes = tuple(math.floor(i * s) for i, s in zip(spatial, scales))
        if recompute_scale_factor:
            scales = (None,) * n
    if any(s <= 0 for s in sizes):
        fail(ShapeError, "interpolate", f"output size {sizes} must be positive")
    # nearest copies values (any dtype); the blends run in float32 for integer inputs and
    # round back to the input's dtype, as torch's (a uint8 image stays uint8)
    x = input
    # last axis first, an integer input rounded back after each pass: torch's separable
    # kernel for uint8 images does the same
    for k, (i, o, sf) in reversed(list(enumerate(zip(spatial, sizes, scales)))):
        dim = 2 + k
        dst = np.arange(o, dtype=np.float64)
        if linear is None:
            scale = _scale(i, o, sf, False)
            offset = 0.5 if mode == "nearest-exact" else 0.0
            src = np.minimum(np.floor((dst + offset) * scale), i - 1).astype(np.int64)
            x = _take_rows(x, dim, src)
            continue
        corners = bool(align_corners)
        scale = _scale(i, o, sf, corners)
        if mode == "bicubic":
            if not x.dtype.is_float:
                raise NotImplementedError(
                    f"interpolate: mode 'bicubic' of a {x.dtype.name} input is not supported "
                    "here (convert it to float first)"
                )
            pos = dst * scale if corners else (dst + 0.5) * scale - 0.5  # (not clamped)
            start = np.floor(pos).astype(np.int64)
            weights = _cubic_weights(pos - start)
            shape = [1] * x.ndim
            shape[dim] = o
            taps = []
            for j, w in enumerate(weights):
                index = np.clip(start - 1 + j, 0, i - 1)
                w_t = tensor(w.astype(x.dtype.np).reshape(shape), dtype=x.dtype, device=x.device)
                taps.append(_take_rows(x, dim, index) * w_t)
            x = taps[0] + taps[1] + taps[2] + taps[3]
            continue
        pos = dst * scale if corners else np.maximum((dst + 0.5) * scale - 0.5, 0.0)
        lo = np.minimum(np.floor(pos), i - 1).astype(np.int64)
        hi = np.minimum(lo + 1, i - 1)
        if not x.dtype.is_float:
            x = x.float()
        frac = (pos - lo).astype(x.dtype.np)
        shape = [1] * x.ndim
        shape[dim] = o
        w_hi = tensor(frac.reshape(shape), dtype=x.dtype, device=x.device)
        x = _take_rows(x, dim, lo) * (1.0 - w_hi) + _take_rows(x, dim, hi) * w_hi
        if x.dtype is not input.dtype:
            x = x.round().cast(input.dtype)
    return x


def _deprecated(name: str) -> None:
    warnings.warn(
        f"`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate` instead.",
        stacklevel=3,
    )


def upsample(input: Tensor, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """`F.interpolate` under its deprecated name, with torch's warning."""
    _deprecated("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """`F.interpolate(mode='nearest')` under its deprecated name, with torch's warning."""
    _deprecated("upsample_nearest")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """`F.interpolate(mode='bilinear', align_corners=True)` (note: align_corners, unlike
    interpolate's default) under its deprecated name, with torch's warning."""
    _deprecated("upsample_bilinear")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def _factor_check(op: str, input: Tensor, r: int, what: str) -> int:
    if not isinstance(r, int) or isinstance(r, bool) or r <= 0:
        fail(ShapeError, op, f"{what} must be a positive integer, got {r!r}")
    if input.ndim < 3:
        fail(ShapeError, op, f"expects its input to have at least 3 dimensions, got {input.shape}")
    return r


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C r^2, H, W) -> (*, C, H r, W r): each channel group's r x r values become a
    block of pixels, as torch.nn.functional.pixel_shuffle (a view's reshape and permute).

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> F.pixel_shuffle(fg.arange(4.0).reshape(1, 4, 1, 1), 2)[0, 0].tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """
    r = _factor_check("pixel_shuffle", input, upscale_factor, "upscale_factor")
    *lead, c, h, w = input.shape
    if c % (r * r):
        fail(
            ShapeError,
            "pixel_shuffle",
            f"expects its input's 'channel' dimension to be divisible by the square of "
            f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}",
        )
    n = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H r, W r) -> (*, C r^2, H, W), pixel_shuffle's inverse, as torch's."""
    r = _factor_check("pixel_unshuffle", input, downscale_factor, "downscale_factor")
    *lead, c, h, w = input.shape
    if h % r or w % r:
        fail(
            ShapeError,
            "pixel_unshuffle",
            f"expects height and width to be divisible by downscale_factor, but got "
            f"{h} x {w} and {r}",
        )
    n = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class Upsample(Module):
    """Resize with `F.interpolate`, as torch.nn.Upsample."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
        super().__init__()
        if isinstance(scale_factor, tuple):  # kept as floats, as torch's (and its repr)
            scale_factor = tuple(float(f) for f in scale_factor)
        elif scale_factor:
            scale_factor = float(scale_factor)
        self.size, self.scale_factor = size, scale_factor or None
        self.mode, self.align_corners = mode, align_corners

    def forward(self, input):
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """`Upsample(mode='nearest')` of an image, as torch's."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """`Upsample(mode='bilinear', align_corners=True)` of an image, as torch's (its repr, as
    torch's, does not name align_corners)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
