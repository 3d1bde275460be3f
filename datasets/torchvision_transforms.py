"""torchvision's geometric transforms for the stand-in (`datasets/torchvision_shim.py`):
`Resize`, `CenterCrop`, `RandomCrop`, `RandomHorizontalFlip` and `InterpolationMode`.

Each takes what the stand-in's datasets hand a transform where torchvision hands a PIL
image, a numpy image (uint8, H x W or H x W x C, as `np.asarray` of the PIL image gives),
and returns one; or a tensor image (..., C, H, W), and returns a tensor.

`Resize` resamples as PIL's bilinear `Image.resize` does (which torchvision calls on a
PIL image): each output pixel a triangle filter's weighted mean of the input pixels, the
filter widened by the scale when shrinking (antialiasing), one axis at a time, the width
first. On uint8 values PIL's fixed-point arithmetic (22-bit weights), each pass rounded
to uint8 (torch's `interpolate(..., antialias=True)` on uint8 rounds its weights to 16
bits: it differs from PIL, and from this, by 1 at a few pixels). A float tensor is
resampled by two products with the filters' weights, as `interpolate(mode="bilinear",
antialias=True)` (torchvision's tensor path): lazy, on its device, differentiable.

The random transforms draw on the host from fusegrad's seeded stream (`manual_seed`): a
run is repeatable, but its draws are not torch's.

>>> import numpy as np
>>> Resize(4)(np.array([[0, 255]], np.uint8)).shape  # the shorter side to 4
(4, 8)
>>> CenterCrop(2)(np.arange(16, dtype=np.uint8).reshape(4, 4)).tolist()
[[5, 6], [9, 10]]
"""

from __future__ import annotations

import enum
import functools
import numbers
from collections.abc import Sequence

import numpy as np

from fusegrad import Tensor, as_tensor

from ..nnapi import host_rng

PRECISION_BITS = 32 - 8 - 2  # PIL's fixed point for 8-bit resampling


class InterpolationMode(enum.Enum):
    """torchvision's interpolation modes; `Resize` does BILINEAR (its default) only."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


@functools.lru_cache(maxsize=64)  # (a data loader resizes every item to the same sizes)
def filter_weights(in_size: int, out_size: int) -> np.ndarray:
    """The (out_size, in_size) weights of PIL's bilinear resampling along one axis (its
    `precompute_coeffs`): output pixel i centred at (i + 0.5) * scale in the input, a
    triangle filter of half-width max(scale, 1) around it, each row normalized to sum 1.

    >>> filter_weights(2, 1).tolist()  # shrinking 2 -> 1: the mean
    [[0.5, 0.5]]
    >>> filter_weights(1, 2).tolist()
    [[1.0], [1.0]]
    """
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = filterscale  # (the triangle's support, 1, widened)
    weights = np.zeros((out_size, in_size))
    for i in range(out_size):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)  # (C's truncation, as PIL's)
        hi = min(int(center + support + 0.5), in_size)
        x = np.arange(lo, hi)
        w = np.maximum(1.0 - np.abs((x - center + 0.5) / filterscale), 0.0)
        total = w.sum()
        weights[i, lo:hi] = w / total if total != 0.0 else w
    weights.setflags(write=False)  # (shared by every call: cached)
    return weights


@functools.lru_cache(maxsize=64)
def _fixed_point(in_size: int, out_size: int) -> np.ndarray:
    """PIL's 8-bit weights of `filter_weights`: each scaled by 2**PRECISION_BITS and
    rounded half away from 0."""
    scaled = filter_weights(in_size, out_size) * (1 << PRECISION_BITS)
    kk = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int64)
    kk.setflags(write=False)  # (cached)
    return kk


def _resample_uint8(image: np.ndarray, axis: int, out_size: int) -> np.ndarray:
    """One of PIL's 8-bit passes: `image` (uint8) resampled along `axis`, rounded."""
    kk = _fixed_point(image.shape[axis], out_size)
    moved = np.moveaxis(image.astype(np.int64), axis, -1)
    acc = moved @ kk.T + (1 << (PRECISION_BITS - 1))
    out = np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)
    return np.moveaxis(out, -1, axis)


def resize_uint8(image: np.ndarray, height: int, width: int, h_axis: int) -> np.ndarray:
    """A uint8 image resampled to (height, width) as PIL's bilinear resize: the width's
    pass first, then the height's, each only where that size changes."""
    w_axis = h_axis + 1
    if image.shape[w_axis] != width:
        image = _resample_uint8(image, w_axis, width)
    if image.shape[h_axis] != height:
        image = _resample_uint8(image, h_axis, height)
    return image


def output_size(height: int, width: int, size, max_size: int | None) -> tuple[int, int]:
    """torchvision's `Resize` size rule: (h, w) as given, or the shorter side made `size`
    and the longer scaled to keep the aspect ratio (truncated), capped by `max_size`."""
    if isinstance(size, Sequence) and len(size) == 2:
        if max_size is not None:
            raise ValueError(
                "max_size should only be passed if size specifies the length of the smaller "
                f"edge, i.e. size should be an int or a sequence of length 1; got size={size}"
            )
        return int(size[0]), int(size[1])
    requested = int(size[0] if isinstance(size, Sequence) else size)
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = requested, int(requested * long / short)
    if max_size is not None:
        if max_size <= requested:
            raise ValueError(
                f"max_size = {max_size} must be strictly greater than the requested size "
                f"for the smaller edge size = {size}"
            )
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


def _check_image(image, op: str) -> None:
    if isinstance(image, Tensor):
        if image.ndim < 2:
            raise ValueError(f"{op}: a tensor image has at least 2 dimensions (..., H, W)")
        return
    if not isinstance(image, np.ndarray):
        raise TypeError(
            f"{op}: img should be a numpy image (H x W or H x W x C, where torchvision takes "
            f"a PIL Image) or a Tensor. Got {type(image).__name__}"
        )
    if image.ndim not in (2, 3):
        raise ValueError(f"{op}: a numpy image is H x W or H x W x C, got shape {image.shape}")


def _size_of(image) -> tuple[int, int]:
    """(height, width) of a numpy image (H x W [x C]) or a tensor image (..., H, W)."""
    if isinstance(image, Tensor):
        return image.shape[-2], image.shape[-1]
    return image.shape[0], image.shape[1]


def _pair(size, name: str) -> tuple[int, int]:
    if isinstance(size, numbers.Number):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 1:
        return int(size[0]), int(size[0])
    if isinstance(size, Sequence) and len(size) == 2:
        return int(size[0]), int(size[1])
    raise ValueError(f"{name}: please provide only two dimensions (h, w) for size, got {size}")


class Resize:
    """torchvision's `transforms.Resize(size, interpolation=BILINEAR, max_size=None,
    antialias=True)`: `size` (h, w), or an int the shorter side becomes (the aspect ratio
    kept). Bilinear with antialiasing only, as PIL's resize (module docstring); another
    interpolation, or `antialias=False` on a tensor that shrinks, raises
    NotImplementedError naming it."""

    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                 antialias=True):  # fmt: skip
        if not isinstance(size, (int, Sequence)) or (
            isinstance(size, Sequence) and len(size) not in (1, 2)
        ):
            raise TypeError(f"Size should be int or sequence of one or two ints. Got {size!r}")
        mode = interpolation
        if isinstance(mode, int) and not isinstance(mode, bool) and mode == 2:
            mode = InterpolationMode.BILINEAR  # (PIL's code for bilinear)
        if mode is not InterpolationMode.BILINEAR:
            raise NotImplementedError(
                f"transforms.Resize(interpolation={interpolation}) is not in fusegrad's "
                "torchvision stand-in: bilinear only"
            )
        self.size, self.interpolation = size, mode
        self.max_size, self.antialias = max_size, antialias

    def __call__(self, image):
        _check_image(image, "Resize")
        height, width = _size_of(image)
        new_h, new_w = output_size(height, width, self.size, self.max_size)
        if (new_h, new_w) == (height, width):
            return image
        if not isinstance(image, Tensor):
            if image.dtype == np.uint8:
                return resize_uint8(image, new_h, new_w, 0)
            return _resize_array(image, new_h, new_w)
        if image.dtype.name == "uint8":
            flat = image.numpy()
            out = resize_uint8(flat, new_h, new_w, flat.ndim - 2)
            return as_tensor(out, device=image.device)
        if not image.is_floating_point():
            raise TypeError(f"Resize: a tensor image is uint8 or float, got {image.dtype}")
        if not self.antialias and (new_h < height or new_w < width):
            raise NotImplementedError(
                "transforms.Resize(antialias=False) shrinking a tensor is not in fusegrad's "
                "torchvision stand-in: antialias=True only"
            )
        return _resize_float(image, new_h, new_w)

    def __repr__(self) -> str:
        return (
            f"Resize(size={self.size}, interpolation={self.interpolation.value}, "
            f"max_size={self.max_size}, antialias={self.antialias})"
        )


def _resize_float(image: Tensor, height: int, width: int) -> Tensor:
    """A float tensor image (..., H, W) resampled by the filters' weights, the width's
    first: two products, lazy and differentiable."""
    rows = as_tensor(filter_weights(image.shape[-2], height), dtype=image.dtype,
                     device=image.device)  # fmt: skip
    cols = as_tensor(filter_weights(image.shape[-1], width), dtype=image.dtype,
                     device=image.device)  # fmt: skip
    return rows @ (image @ cols.t())


def _resize_array(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """A float numpy image (H x W [x C]) resampled by the filters' weights, unrounded."""
    cols = np.moveaxis(image.astype(np.float64), 1, -1) @ filter_weights(image.shape[1], width).T
    out = filter_weights(image.shape[0], height) @ np.moveaxis(cols, -1, 1).reshape(
        image.shape[0], -1
    )
    return out.reshape((height, width) + image.shape[2:]).astype(image.dtype)


def _crop(image, top: int, left: int, height: int, width: int):
    """`image`'s window of (height, width) at (top, left); where it reaches past the image,
    zeros there (torchvision's `crop` pads so)."""
    h, w = _size_of(image)
    pads = (max(-top, 0), max(top + height - h, 0), max(-left, 0), max(left + width - w, 0))
    if any(pads):
        image = _pad(image, pads, 0)
        top, left = top + pads[0], left + pads[2]
    if isinstance(image, Tensor):
        return image[..., top : top + height, left : left + width]
    return image[top : top + height, left : left + width]


def _pad(image, pads: tuple[int, int, int, int], fill):
    """`image` with (top, bottom, left, right) pixels of `fill` around it."""
    top, bottom, left, right = pads
    if isinstance(image, Tensor):
        return image.pad((left, right, top, bottom), fill)
    spec = [(top, bottom), (left, right)] + [(0, 0)] * (image.ndim - 2)
    return np.pad(image, spec, constant_values=fill)


class CenterCrop:
    """torchvision's `transforms.CenterCrop(size)`: the central (h, w) window (an int: a
    square), zeros around an image smaller than it; the offset rounded as torchvision's
    (`round`, to even)."""

    def __init__(self, size):
        self.size = _pair(size, "CenterCrop")

    def __call__(self, image):
        _check_image(image, "CenterCrop")
        h, w = _size_of(image)
        th, tw = self.size
        if tw > w or th > h:  # padded evenly first, as torchvision's center_crop
            pads = ((th - h) // 2 if th > h else 0, (th - h + 1) // 2 if th > h else 0,
                    (tw - w) // 2 if tw > w else 0, (tw - w + 1) // 2 if tw > w else 0)  # fmt: skip
            image = _pad(image, pads, 0)
            h, w = _size_of(image)
            if (h, w) == (th, tw):
                return image
        top, left = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
        return _crop(image, top, left, th, tw)

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


class RandomCrop:
    """torchvision's `transforms.RandomCrop(size, padding=None, pad_if_needed=False,
    fill=0, padding_mode="constant")`: a window of `size` at a place drawn uniformly,
    after `padding` (an int, (left/right, top/bottom) or (left, top, right, bottom)) and,
    with `pad_if_needed`, what the image lacks of the size. Constant padding only."""

    def __init__(self, size, padding=None, pad_if_needed=False, fill=0,
                 padding_mode="constant"):  # fmt: skip
        self.size = _pair(size, "RandomCrop")
        if padding_mode != "constant":
            raise NotImplementedError(
                f"transforms.RandomCrop(padding_mode={padding_mode!r}) is not in fusegrad's "
                "torchvision stand-in: constant padding only"
            )
        self.padding, self.pad_if_needed, self.fill = padding, pad_if_needed, fill
        self.padding_mode = padding_mode

    def _paddings(self) -> tuple[int, int, int, int]:
        p = self.padding
        if isinstance(p, numbers.Number):
            return int(p), int(p), int(p), int(p)
        if len(p) == 1:
            return (int(p[0]),) * 4
        if len(p) == 2:  # (left/right, top/bottom)
            return int(p[1]), int(p[1]), int(p[0]), int(p[0])
        if len(p) == 4:  # (left, top, right, bottom)
            return int(p[1]), int(p[3]), int(p[0]), int(p[2])
        raise ValueError(f"Padding must be an int or a 1, 2, or 4 element tuple, not {p}")

    def __call__(self, image):
        _check_image(image, "RandomCrop")
        if self.padding is not None:
            image = _pad(image, self._paddings(), self.fill)
        h, w = _size_of(image)
        th, tw = self.size
        if self.pad_if_needed and (w < tw or h < th):
            image = _pad(image, (max(th - h, 0),) * 2 + (max(tw - w, 0),) * 2, self.fill)
            h, w = _size_of(image)
        if h < th or w < tw:
            raise ValueError(
                f"Required crop size {(th, tw)} is larger than input image size {(h, w)}"
            )
        rng = host_rng()
        top = int(rng.integers(0, h - th + 1))
        left = int(rng.integers(0, w - tw + 1))
        return _crop(image, top, left, th, tw)

    def __repr__(self) -> str:
        return f"RandomCrop(size={self.size}, padding={self.padding})"


class RandomHorizontalFlip:
    """torchvision's `transforms.RandomHorizontalFlip(p=0.5)`: the image mirrored left to
    right with probability `p`."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, image):
        _check_image(image, "RandomHorizontalFlip")
        if host_rng().random() >= self.p:
            return image
        if isinstance(image, Tensor):
            return image.flip(-1)
        return np.ascontiguousarray(image[:, ::-1])

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


__all__ = [
    "CenterCrop",
    "InterpolationMode",
    "RandomCrop",
    "RandomHorizontalFlip",
    "Resize",
]
