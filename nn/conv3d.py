"""3-D convolution, transposed convolution and pooling over (N, C, D, H, W): conv.py's
and conv_transpose.py's n-dimensional builders with n = 3, and their modules, as torch's.

>>> import fusegrad as fg
>>> from fusegrad.nn.conv3d import avg_pool3d, conv3d
>>> conv3d(fg.ones(1, 1, 3, 3, 3), fg.ones(1, 1, 2, 2, 2)).shape
(1, 1, 2, 2, 2)
>>> avg_pool3d(fg.arange(8.0).reshape(1, 1, 2, 2, 2), 2).item()
3.5
"""

from __future__ import annotations

from ..nnapi import Tensor, autocast_op, one_site
from .conv import AvgPoolNd, ConvNd, PoolNd, convnd, poolnd
from .conv_transpose import ConvTransposeNd, conv_transposend


@autocast_op("conv3d")
@one_site
def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """3-D convolution over (N, C, D, H, W) with PyTorch's semantics (padding may be 'same')."""
    return convnd(x, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


@autocast_op("conv_transpose3d")
@one_site
def conv_transpose3d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1
) -> Tensor:
    """3-D transposed convolution over (N, C, D, H, W); weight is (in, out/groups, kd, kh, kw)."""
    return conv_transposend(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 3,
        "conv_transpose3d",
    )  # fmt: skip


@autocast_op("max_pool3d")
@one_site
def max_pool3d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """Max over sliding windows of the last three axes; with `return_indices`, also each
    maximum's flat index into its D*H*W volume (the first one on ties)."""
    return poolnd(
        x,
        kernel_size,
        stride,
        padding,
        3,
        "max",
        "max_pool3d",
        dilation=dilation,
        ceil_mode=ceil_mode,
        return_indices=return_indices,
    )


@autocast_op("avg_pool3d")
@one_site
def avg_pool3d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """Mean over sliding windows of the last three axes (stride defaults to kernel_size)."""
    return poolnd(
        x,
        kernel_size,
        stride,
        padding,
        3,
        "avg",
        "avg_pool3d",
        count_include_pad,
        ceil_mode=ceil_mode,
        divisor_override=divisor_override,
    )


class Conv3d(ConvNd):
    """3-D convolution layer over (N, C, D, H, W), as torch.nn.Conv3d."""

    n = 3

    def forward(self, x):
        x, padding = self._padded_input(x)
        return conv3d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class ConvTranspose3d(ConvTransposeNd):
    """3-D transposed convolution layer, as torch.nn.ConvTranspose3d."""

    n = 3
    function = staticmethod(conv_transpose3d)


class MaxPool3d(PoolNd):
    """Max over sliding windows of the last three axes, as torch.nn.MaxPool3d."""

    n = 3

    def forward(self, x):
        return max_pool3d(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            self.return_indices,
        )


class AvgPool3d(AvgPoolNd):
    """Mean over sliding windows of the last three axes, as torch.nn.AvgPool3d."""

    n = 3

    def forward(self, x):
        return avg_pool3d(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )
