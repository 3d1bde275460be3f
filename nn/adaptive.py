"""Adaptive average pooling (`F.adaptive_avg_pool1d/2d`, `nn.AdaptiveAvgPool1d/2d`), as torch:
output cell i averages the input from floor(i * n / out) to ceil((i + 1) * n / out), so
the cells cover the input whatever the sizes (they overlap where out does not divide n).

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> nn.AdaptiveAvgPool2d(1)(fg.arange(16.0).reshape(1, 1, 4, 4)).tolist()
[[[[7.5]]]]
>>> nn.functional.adaptive_avg_pool1d(fg.arange(5.0).reshape(1, 1, 5), 2).tolist()
[[[1.0, 3.0]]]
"""

from __future__ import annotations

import math

from ..nnapi import (
    ShapeError,
    Tensor,
    cat,
    fail,
)
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
    for k, out in enumerate(sizes):
        x = _pool_axis(x, x.ndim - n + k, out)
    return x


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Average over (N, C, L) or (C, L) into `output_size` cells along L."""
    return _adaptive_avg_pool(input, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average over (N, C, H, W) or (C, H, W) into an `output_size` grid (an int, a pair,
    or a pair with None to keep that size)."""
    return _adaptive_avg_pool(input, output_size, 2, "adaptive_avg_pool2d")


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
