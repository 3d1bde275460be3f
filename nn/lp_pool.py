"""Power-average pooling, as torch's: `F.lp_pool1d`, `F.lp_pool2d`, `F.lp_pool3d`,
`LPPool1d`, `LPPool2d`, `LPPool3d`.

Each window's (sum of x^p)^(1/p), written as torch writes it: the average pool of x^p,
times the window's size, to the power 1/p, through sign(s) relu(|s|), so that a window
whose sum of powers is 0 (or negative) gets a zero gradient; p = inf is the max pool of
|x|, p = -inf minus the max pool of -|x|; p = 0 raises ValueError.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> F.lp_pool1d(fg.tensor([[[3.0, 4.0, 1.0, 0.0]]]), 2, 2).tolist()
[[[5.0, 1.0]]]
"""

from __future__ import annotations

import math

from ..nnapi import Tensor
from .conv import avg_pool1d, avg_pool2d, max_pool1d, max_pool2d
from .conv3d import avg_pool3d, max_pool3d
from .module import Module


def _root_of_sum(avg: Tensor, size: int, norm_type: float) -> Tensor:
    return (avg.sign() * avg.abs().relu()).mul(size).pow(1.0 / norm_type)


def _check_norm_type(norm_type: float) -> None:
    if norm_type == 0:
        raise ValueError(f"norm_type must be a non-zero value, but got {norm_type}")


def lp_pool1d(
    input: Tensor, norm_type: float, kernel_size: int, stride=None, ceil_mode: bool = False
) -> Tensor:
    """(sum of x^p over each window of the last axis)^(1/p), as torch.nn.functional.lp_pool1d
    (stride defaults to kernel_size; no padding)."""
    _check_norm_type(norm_type)
    if norm_type == math.inf:
        return max_pool1d(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -math.inf:
        return -max_pool1d(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    avg = avg_pool1d(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return _root_of_sum(avg, kernel_size, norm_type)


def lp_pool2d(
    input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False
) -> Tensor:
    """(sum of x^p over each window of the last two axes)^(1/p), as
    torch.nn.functional.lp_pool2d (stride defaults to kernel_size; no padding)."""
    kw, kh = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    _check_norm_type(norm_type)
    if norm_type == math.inf:
        return max_pool2d(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -math.inf:
        return -max_pool2d(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    avg = avg_pool2d(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return _root_of_sum(avg, kw * kh, norm_type)


def lp_pool3d(
    input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False
) -> Tensor:
    """(sum of x^p over each window of the last three axes)^(1/p), as
    torch.nn.functional.lp_pool3d (stride defaults to kernel_size; no padding)."""
    kd, kh, kw = (kernel_size,) * 3 if isinstance(kernel_size, int) else kernel_size
    _check_norm_type(norm_type)
    if norm_type == math.inf:
        return max_pool3d(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -math.inf:
        return -max_pool3d(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    avg = avg_pool3d(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return _root_of_sum(avg, kd * kh * kw, norm_type)


class _LPPool(Module):
    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, ceil_mode={self.ceil_mode}"
        )


class LPPool1d(_LPPool):
    """`F.lp_pool1d` as a module, as torch.nn.LPPool1d."""

    def forward(self, input):
        return lp_pool1d(input, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


class LPPool2d(_LPPool):
    """`F.lp_pool2d` as a module, as torch.nn.LPPool2d."""

    def forward(self, input):
        return lp_pool2d(input, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


class LPPool3d(_LPPool):
    """`F.lp_pool3d` as a module, as torch.nn.LPPool3d."""

    def forward(self, input):
        return lp_pool3d(input, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)
