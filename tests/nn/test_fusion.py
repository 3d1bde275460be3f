"""nn.utils.fuse_conv_bn_eval / fuse_conv_bn_weights / fuse_linear_bn_eval /
fuse_linear_bn_weights: the fused layer computes the convolution (or linear layer) then
the eval-mode BatchNorm, with new Parameters in the layer's dtypes, and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn


def bn_with_statistics(n: int, affine: bool = True):
    bn = nn.BatchNorm2d(n, affine=affine).eval()
    bn.running_mean.data = fg.linspace(-0.5, 0.5, n)
    bn.running_var.data = fg.linspace(0.5, 2.0, n)
    if affine:
        bn.weight.data = fg.linspace(0.5, 1.5, n)
        bn.bias.data = fg.linspace(-0.2, 0.3, n)
    return bn


@pytest.mark.parametrize("bias", [True, False])
def test_conv_and_batchnorm_fold_into_one_convolution(bias):
    conv = nn.Conv2d(2, 3, 3, bias=bias).eval()
    bn = bn_with_statistics(3)
    fused = nn.utils.fuse_conv_bn_eval(conv, bn)
    assert type(fused) is nn.Conv2d and fused is not conv
    x = fg.randn(2, 2, 6, 6)
    np.testing.assert_allclose(fused(x).numpy(), bn(conv(x)).numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(fused.weight, nn.Parameter) and isinstance(fused.bias, nn.Parameter)
    assert fused.weight.requires_grad and fused.bias.requires_grad is bias
    # the conv is left as it was
    assert (conv.bias is None) is (not bias)


def test_a_transposed_convolution_scales_its_dim_1():
    conv = nn.ConvTranspose2d(3, 2, 3).eval()
    bn = bn_with_statistics(2, affine=False)
    fused = nn.utils.fuse_conv_bn_eval(conv, bn, transpose=True)
    x = fg.randn(1, 3, 4, 4)
    np.testing.assert_allclose(fused(x).numpy(), bn(conv(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_fuse_conv_bn_weights_values():
    w, b = fg.ones(2, 1, 1, 1), fg.tensor([1.0, 2.0])
    rm, rv = fg.tensor([0.5, 1.0]), fg.tensor([3.0, 0.0])
    fw, fb = nn.utils.fuse_conv_bn_weights(w, b, rm, rv, 1.0, fg.tensor([2.0, 3.0]), None)
    np.testing.assert_allclose(fw.numpy().reshape(-1), [1.0, 3.0])
    np.testing.assert_allclose(fb.numpy(), [0.5, 3.0])
    assert not fw.requires_grad and not fb.requires_grad


def test_linear_and_batchnorm_fold_into_one_linear():
    lin = nn.Linear(3, 4).eval()
    bn = nn.BatchNorm1d(4).eval()
    bn.running_mean.data, bn.running_var.data = fg.linspace(-1, 1, 4), fg.linspace(0.5, 2, 4)
    fused = nn.utils.fuse_linear_bn_eval(lin, bn)
    x = fg.randn(5, 3)
    np.testing.assert_allclose(fused(x).numpy(), bn(lin(x)).numpy(), rtol=1e-5, atol=1e-6)
    fw, fb = nn.utils.fuse_linear_bn_weights(
        fg.ones(1, 1),
        None,
        fg.tensor([1.0]),
        fg.tensor([3.0]),
        1.0,
        fg.tensor([4.0]),
        fg.tensor([0.5]),
    )
    assert fw.tolist() == [[2.0]] and fb.tolist() == [-1.5]


def test_torchs_refusals():
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        nn.utils.fuse_conv_bn_eval(nn.Conv2d(1, 1, 1), nn.BatchNorm2d(1).eval())
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        nn.utils.fuse_linear_bn_eval(nn.Linear(1, 1).eval(), nn.BatchNorm1d(1))
    with pytest.raises(AssertionError, match="linear.out_features=3 and bn.num_features=2"):
        nn.utils.fuse_linear_bn_eval(nn.Linear(2, 3).eval(), nn.BatchNorm1d(2).eval())
    untracked = nn.BatchNorm2d(1, track_running_stats=False).eval()
    with pytest.raises(AssertionError, match="must not be None"):
        nn.utils.fuse_conv_bn_eval(nn.Conv2d(1, 1, 1).eval(), untracked)
