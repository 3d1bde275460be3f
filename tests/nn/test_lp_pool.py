"""LPPool1d / LPPool2d (F.lp_pool1d / F.lp_pool2d): values and gradients as torch 2.13's
(float64, written in), a zero window's zero gradient, a negative sum's NaN, and the reprs.
Their special points are swept in tests/frontend/test_special_points.py."""

from __future__ import annotations

import math

import numpy as np

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn


def test_lp_pool1d_module_values_and_gradients():
    x = fg.tensor([[[3.0, 4.0, 0.0, 0.0, -1.0, 2.0, 1.0]]], dtype=fg.float64, requires_grad=True)
    y = nn.LPPool1d(2, 2)(x)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), [[[5.0, 0.0, 2.23606797749979]]], rtol=1e-15)
    # a window of zeros: gradient 0, not NaN (sign(s) relu(|s|), as torch's); the last
    # element is in no window
    want = [0.6, 0.8, 0.0, 0.0, -0.4472135954999579, 0.8944271909999159, 0.0]
    np.testing.assert_allclose(x.grad.numpy(), [[want]], rtol=1e-15)


def test_lp_pool2d_ceil_mode_and_a_negative_sum():
    x = fg.tensor(
        [[[[1.0, -2.0, 0.0], [2.0, 0.5, 0.0], [1.0, 1.0, 3.0]]]],
        dtype=fg.float64,
        requires_grad=True,
    )
    y = nn.LPPool2d(3, (2, 2), stride=1, ceil_mode=True)(x)
    y.sum().backward()
    nan = math.nan
    want = [[[[1.040041911525952, nan], [2.1633743554611127, 3.0411009977867]]]]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-14)
    gx = [[0.9244816991341795, nan, nan], [4.5525932085707375, nan, nan]]
    gx += [[0.2136666030085049, 0.3217946384853653, 0.9731523192917437]]
    np.testing.assert_allclose(x.grad.numpy(), [[gx]], rtol=1e-14)


def test_lp_pool_infinite_norms_and_reprs():
    x = fg.tensor([[[3.0, -4.0, 0.5, -0.25]]])
    assert F.lp_pool1d(x, math.inf, 2).tolist() == [[[4.0, 0.5]]]
    assert F.lp_pool1d(x, -math.inf, 2).tolist() == [[[3.0, 0.25]]]
    assert F.lp_pool2d(x.unsqueeze(0), math.inf, (1, 4)).tolist() == [[[[4.0]]]]
    assert (
        repr(nn.LPPool1d(2, 3))
        == "LPPool1d(norm_type=2, kernel_size=3, stride=None, ceil_mode=False)"
    )
    want = "LPPool2d(norm_type=2, kernel_size=(2, 3), stride=1, ceil_mode=True)"
    assert repr(nn.LPPool2d(2, (2, 3), 1, True)) == want
