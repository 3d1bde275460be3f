"""`F.pad` with PyTorch's four modes, and the padding modules.

The pad tuple is PyTorch's: (before the last axis, after it, before the axis
before it, after it, ...). 'constant' is the tensor's own `pad` view; the other
modes are views too (slices, a flip, an expand) joined with `cat`, so their
gradients come from the movement primitives' rules.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> x = fg.tensor([[[1.0, 2.0, 3.0]]])
>>> F.pad(x, (2, 1), mode="reflect").tolist()
[[[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]]]
>>> F.pad(x, (1, 2), mode="circular").tolist()
[[[3.0, 1.0, 2.0, 3.0, 1.0, 2.0]]]
"""

from __future__ import annotations

from ..nnapi import (
    ShapeError,
    Tensor,
    cat,
    fail,
)
from .module import Module

_MODES = ("constant", "reflect", "replicate", "circular")


def _flip(x: Tensor, dim: int) -> Tensor:
    """x reversed along `dim` (a view)."""
    return x.flip(dim)


def _take(x: Tensor, dim: int, start: int, stop: int) -> Tensor:
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, stop)
    return x[tuple(index)]


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad `input` as torch.nn.functional.pad: `pad` lists (before, after) from the last axis back.

    mode 'constant' fills with `value` (0 by default; negative amounts crop);
    'reflect' mirrors without repeating the edge, 'replicate' repeats the edge
    and 'circular' wraps around. Those three pad the last 1 to 3 axes of a
    2-D to 5-D input (PyTorch's rule). A negative amount crops, as torch's: 'reflect' and
    'replicate' pad the whole axis and then crop, 'circular' crops and then wraps the rest
    (`pad([1, 2, 3, 4], (-1, 2), 'circular')` is [2, 3, 4, 2, 3]).
    """
    if mode not in _MODES:
        raise NotImplementedError(
            f"Unrecognised padding mode {mode}; expected one of {', '.join(_MODES)}"
        )
    if len(pad) % 2:
        fail(ShapeError, "pad", f"padding length must be divisible by 2, got {tuple(pad)}")
    if len(pad) // 2 > input.ndim:
        fail(
            ShapeError,
            "pad",
            f"padding length {len(pad)} is too large for a {input.ndim}-D input of shape "
            f"{input.shape}",
        )
    if mode == "constant":
        return input.pad(pad, 0.0 if value is None else value)
    if value is not None and value != 0:
        fail(ShapeError, "pad", f"padding mode '{mode}' doesn't take in value argument")
    n = len(pad) // 2
    if not 1 <= n <= 3 or not n + 1 <= input.ndim <= n + 2:
        raise NotImplementedError(
            f"pad: mode '{mode}' pads the last 1 to 3 dims of a 2-D to 5-D input "
            f"(({n}+1)-D or ({n}+2)-D for {len(pad)} pad values), got shape {input.shape}"
        )
    out = input
    for k in range(n):
        dim = input.ndim - 1 - k
        before, after = int(pad[2 * k]), int(pad[2 * k + 1])
        out = _pad_axis(out, dim, before, after, mode)
    return out


def _pad_axis(x: Tensor, dim: int, before: int, after: int, mode: str) -> Tensor:
    size = x.shape[dim]
    if not before and not after:
        return x
    if before < 0 or after < 0:
        return _crop_and_pad_axis(x, dim, before, after, mode)
    if mode == "reflect" and (before >= size or after >= size):
        fail(
            ShapeError,
            "pad",
            f"padding ({before}, {after}) with mode 'reflect' should be less than the size "
            f"{size} of dim {dim} of input shape {x.shape}",
        )
    if mode == "circular" and (before > size or after > size):
        fail(
            ShapeError,
            "pad",
            f"padding ({before}, {after}) with mode 'circular' can wrap around only once "
            f"(at most the size {size} of dim {dim} of input shape {x.shape})",
        )
    if mode == "replicate" and size == 0:
        fail(ShapeError, "pad", f"cannot replicate an empty dim {dim} of shape {x.shape}")
    pieces = []
    if before:
        if mode == "reflect":
            pieces.append(_flip(_take(x, dim, 1, before + 1), dim))
        elif mode == "replicate":
            edge = _take(x, dim, 0, 1)
            pieces.append(edge.expand(*[before if i == dim else s for i, s in enumerate(x.shape)]))
        else:
            pieces.append(_take(x, dim, size - before, size))
    pieces.append(x)
    if after:
        if mode == "reflect":
            pieces.append(_flip(_take(x, dim, size - 1 - after, size - 1), dim))
        elif mode == "replicate":
            edge = _take(x, dim, size - 1, size)
            pieces.append(edge.expand(*[after if i == dim else s for i, s in enumerate(x.shape)]))
        else:
            pieces.append(_take(x, dim, 0, after))
    return cat(pieces, dim)


def _crop_and_pad_axis(x: Tensor, dim: int, before: int, after: int, mode: str) -> Tensor:
    """A pad with a negative amount, which crops that side (torch's order of the two)."""
    size = x.shape[dim]
    if mode == "circular":  # crop, then wrap what is left
        if size + min(before, 0) + min(after, 0) < 0:
            fail(
                ShapeError,
                "pad",
                f"Negative padding value is resulting in an empty dimension: padding "
                f"({before}, {after}) of dim {dim} of shape {x.shape}",
            )
        kept = _take(x, dim, max(-before, 0), size - max(-after, 0))
        return _pad_axis(kept, dim, max(before, 0), max(after, 0), mode)
    if size + before + after <= 0:
        fail(
            ShapeError,
            "pad",
            f"input (W: {size}) is too small. Calculated output W: {size + before + after} "
            f"(padding ({before}, {after}) of dim {dim} of shape {x.shape})",
        )
    # pad the whole axis, then crop
    padded = _pad_axis(x, dim, max(before, 0), max(after, 0), mode)
    full = padded.shape[dim]
    return _take(padded, dim, max(-before, 0), full - max(-after, 0))


# ---------------------------------------------------------------- modules


def _pairs(padding, n: int) -> tuple[int, ...]:
    if isinstance(padding, int):
        return (padding,) * (2 * n)
    padding = tuple(int(p) for p in padding)
    if len(padding) != 2 * n:
        raise ValueError(f"padding must be an int or a {2 * n}-tuple, got {padding}")
    return padding


class _PadNd(Module):
    n, mode = 1, "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = _pairs(padding, self.n)

    def forward(self, input):
        return pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pad the last axis with a constant, as torch.nn.ConstantPad1d."""


class ConstantPad2d(_ConstantPadNd):
    """Pad the last two axes with a constant, as torch.nn.ConstantPad2d."""

    n = 2


class ZeroPad1d(ConstantPad1d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:  # torch's: the padding alone
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    """Pad the last two axes with zeros, as torch.nn.ZeroPad2d."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    extra_repr = ZeroPad1d.extra_repr


class ConstantPad3d(_ConstantPadNd):
    """Pad the last three axes with a constant, as torch.nn.ConstantPad3d."""

    n = 3


class ZeroPad3d(ConstantPad3d):
    """Pad the last three axes with zeros, as torch.nn.ZeroPad3d."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    extra_repr = ZeroPad1d.extra_repr


class ReflectionPad1d(_PadNd):
    mode = "reflect"


class ReflectionPad2d(_PadNd):
    """Mirror padding of the last two axes, as torch.nn.ReflectionPad2d."""

    n, mode = 2, "reflect"


class ReplicationPad1d(_PadNd):
    mode = "replicate"


class ReplicationPad2d(_PadNd):
    """Edge-repeating padding of the last two axes, as torch.nn.ReplicationPad2d."""

    n, mode = 2, "replicate"


class CircularPad1d(_PadNd):
    mode = "circular"


class CircularPad2d(_PadNd):
    """Wrap-around padding of the last two axes, as torch.nn.CircularPad2d."""

    n, mode = 2, "circular"


class ReflectionPad3d(_PadNd):
    """Mirror padding of the last three axes, as torch.nn.ReflectionPad3d."""

    n, mode = 3, "reflect"


class ReplicationPad3d(_PadNd):
    """Edge-repeating padding of the last three axes, as torch.nn.ReplicationPad3d."""

    n, mode = 3, "replicate"


class CircularPad3d(_PadNd):
    """Wrap-around padding of the last three axes, as torch.nn.CircularPad3d."""

    n, mode = 3, "circular"
