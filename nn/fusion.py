"""Folding an eval-mode BatchNorm into the convolution or linear layer before it, as
torch.nn.utils.fusion: `fuse_conv_bn_eval`, `fuse_conv_bn_weights`, `fuse_linear_bn_eval`,
`fuse_linear_bn_weights`. The fused layer computes what the two did in eval mode, with
one weight and one bias.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> conv, bn = nn.Conv2d(2, 3, 3).eval(), nn.BatchNorm2d(3).eval()
>>> fused = nn.utils.fuse_conv_bn_eval(conv, bn)
>>> x = fg.randn(1, 2, 5, 5)
>>> bool(fg.allclose(fused(x), bn(conv(x)), atol=1e-6))
True
"""

from __future__ import annotations

import copy

from ..nnapi import Tensor, ones_like, zeros_like
from .module import Module, Parameter

__all__ = [
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
]


def fuse_conv_bn_eval(conv: Module, bn: Module, transpose: bool = False) -> Module:
    """A copy of `conv` (eval mode) whose weight and bias also apply `bn` (eval mode, its
    running statistics); `transpose` for a transposed convolution (the output channels
    are the weight's dim 1)."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused_conv = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused_conv.weight, fused_conv.bias = fuse_conv_bn_weights(
        fused_conv.weight,
        fused_conv.bias,
        bn.running_mean,
        bn.running_var,
        bn.eps,
        bn.weight,
        bn.bias,
        transpose,
    )
    return fused_conv


def fuse_conv_bn_weights(
    conv_w: Tensor,
    conv_b: Tensor | None,
    bn_rm: Tensor,
    bn_rv: Tensor,
    bn_eps: float,
    bn_w: Tensor | None,
    bn_b: Tensor | None,
    transpose: bool = False,
) -> tuple[Parameter, Parameter]:
    """The fused convolution's (weight, bias), as new Parameters in the convolution's
    dtypes: w * gamma / sqrt(var + eps) per output channel, and
    (b - mean) * gamma / sqrt(var + eps) + beta."""
    conv_weight_dtype = conv_w.dtype
    conv_bias_dtype = conv_b.dtype if conv_b is not None else conv_weight_dtype
    if conv_b is None:
        conv_b = zeros_like(bn_rm)
    if bn_w is None:
        bn_w = ones_like(bn_rm)
    if bn_b is None:
        bn_b = zeros_like(bn_rm)
    bn_var_rsqrt = (bn_rv + bn_eps).rsqrt()
    rest = [1] * (len(conv_w.shape) - 2)
    shape = [1, -1, *rest] if transpose else [-1, 1, *rest]
    fused_conv_w = (conv_w * (bn_w * bn_var_rsqrt).reshape(shape)).to(dtype=conv_weight_dtype)
    fused_conv_b = ((conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b).to(dtype=conv_bias_dtype)
    return (
        Parameter(fused_conv_w, conv_w.requires_grad),
        Parameter(fused_conv_b, conv_b.requires_grad),
    )


def fuse_linear_bn_eval(linear: Module, bn: Module) -> Module:
    """A copy of `linear` (eval mode) whose weight and bias also apply `bn` (eval mode;
    `bn.num_features` is the linear's `out_features`, or 1)."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused_linear = copy.deepcopy(linear)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError(
            "To fuse, linear.out_features == bn.num_features or bn.num_features == 1, "
            f"got linear.out_features={linear.out_features} and "
            f"bn.num_features={bn.num_features}"
        )
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused_linear.weight, fused_linear.bias = fuse_linear_bn_weights(
        fused_linear.weight,
        fused_linear.bias,
        bn.running_mean,
        bn.running_var,
        bn.eps,
        bn.weight,
        bn.bias,
    )
    return fused_linear


def fuse_linear_bn_weights(
    linear_w: Tensor,
    linear_b: Tensor | None,
    bn_rm: Tensor,
    bn_rv: Tensor,
    bn_eps: float,
    bn_w: Tensor,
    bn_b: Tensor,
) -> tuple[Parameter, Parameter]:
    """The fused linear layer's (weight, bias), as new Parameters in the layer's dtypes."""
    linear_weight_dtype = linear_w.dtype
    linear_bias_dtype = linear_b.dtype if linear_b is not None else linear_weight_dtype
    if linear_b is None:
        linear_b = zeros_like(bn_rm)
    bn_scale = bn_w * (bn_rv + bn_eps).rsqrt()
    fused_w = linear_w * bn_scale.unsqueeze(-1).to(dtype=linear_weight_dtype)
    fused_b = ((linear_b - bn_rm) * bn_scale + bn_b).to(dtype=linear_bias_dtype)
    return Parameter(fused_w, linear_w.requires_grad), Parameter(fused_b, linear_b.requires_grad)
