"""LPPool1d / LPPool2d / LPPool3d (F.lp_pool1d / 2d / 3d): values and gradients as torch
2.13's and 2.14's (float64, written in), a zero window's zero gradient, a negative sum's
NaN, norm_type 0's refusal, and the reprs. The 1d and 2d special points are swept in
tests/frontend/test_special_points.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

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


def test_lp_pool3d_values_gradients_and_a_zero_window():
    x = fg.tensor(
        [[[[[1.0, -2.0], [0.0, 0.5]], [[2.0, 0.0], [0.0, 0.0]], [[1.0, 3.0], [-1.0, 1.5]]]]],
        dtype=fg.float64,
        requires_grad=True,
    )
    y = F.lp_pool3d(x, 2, (2, 2, 1), stride=1)
    y.sum().backward()
    assert y.shape == (1, 1, 2, 1, 2)
    # torch 2.14's, float64
    want = [2.23606797749979, 2.0615528128088303, 2.449489742783178, 3.3541019662496847]
    np.testing.assert_allclose(y.numpy().ravel(), want, rtol=1e-14)
    gx = [0.4472135954999579, -0.9701425001453319, 0.0, 0.24253562503633297]
    gx += [1.710923771927642, 0.0, 0.0, 0.0]
    gx += [0.4082482904638631, 0.894427190999916, -0.4082482904638631, 0.447213595499958]
    np.testing.assert_allclose(x.grad.numpy().ravel(), gx, rtol=1e-14)
    zero = fg.zeros(1, 1, 2, 2, 2, dtype=fg.float64, requires_grad=True)
    nn.LPPool3d(2, 2)(zero).sum().backward()
    assert zero.grad.tolist() == np.zeros((1, 1, 2, 2, 2)).tolist()


def test_lp_pool3d_against_numpy_infinite_norms_and_refusals():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4, 5, 3))
    x = fg.tensor(a)
    y = F.lp_pool3d(x, 3, (2, 3, 1), stride=(2, 1, 1), ceil_mode=True)
    assert y.shape == (2, 3, 2, 3, 3)
    ref = np.empty((2, 3, 2, 3, 3))
    for d in range(2):
        for h in range(3):
            for w in range(3):
                s = (a[:, :, 2 * d : 2 * d + 2, h : h + 3, w] ** 3).sum((2, 3))
                ref[:, :, d, h, w] = np.where(s > 0, np.abs(s) ** (1 / 3), np.nan)
    got = y.numpy()
    np.testing.assert_allclose(got[ref == ref], ref[ref == ref], rtol=1e-12)
    assert np.isnan(got[np.isnan(ref)]).all()
    inf = F.lp_pool3d(x, math.inf, 2).numpy()
    blocks = np.abs(a)[:, :, :4, :4, :2].reshape(2, 3, 2, 2, 2, 2, 1, 2)
    np.testing.assert_allclose(inf, blocks.max((3, 5, 7)))
    assert repr(nn.LPPool3d(3, (2, 1, 2), stride=1, ceil_mode=True)) == (
        "LPPool3d(norm_type=3, kernel_size=(2, 1, 2), stride=1, ceil_mode=True)"
    )
    for pool in (F.lp_pool1d, F.lp_pool2d, F.lp_pool3d):
        with pytest.raises(ValueError, match="^norm_type must be a non-zero value, but got 0$"):
            pool(fg.ones(1, 1, 2, 2, 2), 0, 2)
