"""torch's `*_with_indices` pooling functions: the max pools with `return_indices=True`,
always a (values, indices) pair (their `return_indices` argument is ignored, as torch's).

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> values, indices = F.max_pool1d_with_indices(fg.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2)
>>> values.tolist(), indices.tolist()
([[[3.0, 2.0]]], [[[1, 2]]])
"""

from __future__ import annotations

from ..nnapi import Tensor
from .adaptive import adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d
from .conv import max_pool1d, max_pool2d
from .conv3d import max_pool3d


def max_pool1d_with_indices(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> tuple[Tensor, Tensor]:
    """`F.max_pool1d(..., return_indices=True)`."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> tuple[Tensor, Tensor]:
    """`F.max_pool2d(..., return_indices=True)`."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> tuple[Tensor, Tensor]:
    """`F.max_pool3d(..., return_indices=True)`."""
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def adaptive_max_pool1d_with_indices(
    input: Tensor, output_size, return_indices: bool = False
) -> tuple[Tensor, Tensor]:
    """`F.adaptive_max_pool1d(..., return_indices=True)`."""
    return adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(
    input: Tensor, output_size, return_indices: bool = False
) -> tuple[Tensor, Tensor]:
    """`F.adaptive_max_pool2d(..., return_indices=True)`."""
    return adaptive_max_pool2d(input, output_size, True)


def adaptive_max_pool3d_with_indices(
    input: Tensor, output_size, return_indices: bool = False
) -> tuple[Tensor, Tensor]:
    """`F.adaptive_max_pool3d(..., return_indices=True)`."""
    return adaptive_max_pool3d(input, output_size, True)
