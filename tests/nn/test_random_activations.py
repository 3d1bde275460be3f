"""gumbel_softmax and rrelu / RReLU: the properties of their random draws (sums, one-hots,
the sampled distribution, slopes within their bounds, repeats under fg.manual_seed), the
gradients each draw implies, and torch 2.14's values where nothing is random (rrelu
outside training), written in as literals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

NAN, INF = math.nan, math.inf


def _seeded(seed, f, *args, **kwargs):
    fg.manual_seed(seed)
    return f(*args, **kwargs)


@pytest.mark.parametrize("dtype", [fg.float32, fg.float64])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_gumbel_softmax_is_a_distribution_along_dim(dtype, dim):
    logits = fg.tensor(np.linspace(-2, 2, 24).reshape(2, 3, 4), dtype=dtype)
    y = _seeded(1, F.gumbel_softmax, logits, tau=0.7, dim=dim)
    assert y.shape == (2, 3, 4) and y.dtype == dtype
    v = y.numpy()
    assert (v >= 0).all() and (v <= 1).all()
    np.testing.assert_allclose(v.sum(dim), 1.0, rtol=1e-6)
    h = _seeded(1, F.gumbel_softmax, logits, tau=0.7, hard=True, dim=dim).numpy()
    np.testing.assert_allclose(h.sum(dim), 1.0, rtol=1e-6)
    np.testing.assert_allclose(h, np.round(h), atol=1e-6)  # one-hot, up to y - y + 1's rounding
    # the one-hot marks the soft sample's argmax (the same draw: the same seed)
    np.testing.assert_array_equal(h.argmax(dim), v.argmax(dim))


def test_gumbel_softmax_repeats_under_manual_seed():
    logits = fg.zeros(4, 6)
    a = _seeded(7, F.gumbel_softmax, logits).numpy()
    b = _seeded(7, F.gumbel_softmax, logits).numpy()
    c = _seeded(8, F.gumbel_softmax, logits).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert not np.allclose(a[0], a[1])  # a draw per element, not per call


@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_gumbel_softmax_gradients(tau):
    x = fg.tensor([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0]], dtype=fg.float64)
    w = fg.tensor([[1.0, -1.0, 0.0, 2.0], [0.5, 0.0, -1.0, 1.0]], dtype=fg.float64)
    grads = {}
    for hard in (False, True):
        leaf = x.clone().requires_grad_()
        y = _seeded(3, F.gumbel_softmax, leaf, tau=tau, hard=hard)
        (y * w).sum().backward()
        grads[hard] = leaf.grad.numpy()
        if not hard:
            s = y.detach().numpy()
    # the soft sample: the softmax's Jacobian over tau, at the sampled point
    wn = w.numpy()
    want = s * (wn - (s * wn).sum(-1, keepdims=True)) / tau
    np.testing.assert_allclose(grads[False], want, rtol=1e-12, atol=1e-15)
    # straight through: the hard sample's gradient is the soft one's
    np.testing.assert_allclose(grads[True], grads[False], rtol=1e-12, atol=1e-15)


def test_gumbel_softmax_samples_the_softmax_of_its_logits():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    logits = fg.tensor(np.log(np.tile(p, (20000, 1))))
    h = _seeded(11, F.gumbel_softmax, logits, tau=5.0, hard=True).numpy()
    np.testing.assert_allclose(h.mean(0), p, atol=0.015)  # argmax(log p + g) ~ p, any tau
    soft = _seeded(11, F.gumbel_softmax, logits, tau=100.0).numpy()
    np.testing.assert_allclose(soft.mean(0), 0.25, atol=0.01)  # a large tau: near uniform


def test_gumbel_softmax_eps_is_deprecated():
    with pytest.warns(UserWarning, match="`eps` parameter is deprecated and has no effect"):
        F.gumbel_softmax(fg.zeros(3), eps=1e-3)


# torch 2.14: F.rrelu(x, 0.2, 0.4) outside training, x (float64) and the gradient of sum(y)
RRELU_X = [-2.0, -0.0, 0.0, 1.0, -1.0, NAN, -INF]
RRELU_EVAL = (
    [-0.6000000000000001, -0.0, 0.0, 1.0, -0.30000000000000004, NAN, -INF],
    [0.30000000000000004] * 3 + [1.0] + [0.30000000000000004] * 3,
)


def test_rrelu_outside_training_is_leaky_relu_with_the_mean_slope():
    x = fg.tensor(RRELU_X, dtype=fg.float64, requires_grad=True)
    y = F.rrelu(x, 0.2, 0.4)
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy(), RRELU_EVAL[0])
    np.testing.assert_array_equal(np.signbit(y.numpy()), np.signbit(RRELU_EVAL[0]))
    np.testing.assert_array_equal(x.grad.numpy(), RRELU_EVAL[1])
    m = nn.RReLU(0.2, 0.4).eval()
    np.testing.assert_array_equal(m(x).numpy(), RRELU_EVAL[0])


def test_rrelu_in_training_draws_a_slope_per_element():
    x = fg.tensor(RRELU_X, dtype=fg.float64, requires_grad=True)
    y = _seeded(5, F.rrelu, x, 0.2, 0.4, training=True)
    w = fg.tensor([1.0, 2.0, 3.0, 1.0, 1.0, 1.0, 1.0], dtype=fg.float64)
    (y * w).sum().backward()
    v, g = y.numpy(), x.grad.numpy() / w.numpy()
    slopes = v[[0, 4]] / np.array([-2.0, -1.0])
    assert ((0.2 <= slopes) & (slopes <= 0.4)).all()
    np.testing.assert_allclose(g[[0, 4]], slopes, rtol=1e-15)  # the gradient is the slope
    assert ((0.2 <= g[[1, 2, 6]]) & (g[[1, 2, 6]] <= 0.4)).all()  # at 0 too (x <= 0), -inf
    assert len(set(g[[0, 1, 2, 4, 6]].tolist())) == 5  # one draw per element
    assert v[1] == 0 and np.signbit(v[1]) and v[2] == 0 and not np.signbit(v[2])
    assert v[3] == 1.0 and g[3] == 1.0
    assert math.isnan(v[5]) and g[5] == 1.0  # NaN takes the identity branch, as torch's
    assert v[6] == -INF
    again = _seeded(5, F.rrelu, x.detach(), 0.2, 0.4, training=True).numpy()
    np.testing.assert_array_equal(again, v)


def test_rrelu_slopes_are_uniform():
    x = -fg.ones(40000)
    slopes = -_seeded(2, F.rrelu, x, 0.1, 0.5, training=True).numpy()
    assert 0.1 <= slopes.min() and slopes.max() <= 0.5
    assert slopes.mean() == pytest.approx(0.3, abs=0.005)
    assert slopes.var() == pytest.approx(0.4**2 / 12, rel=0.05)
    fixed = F.rrelu(fg.tensor([-1.0, 2.0]), 0.3, 0.3, training=True).tolist()
    assert fixed == pytest.approx([-0.3, 2.0], rel=1e-7)


def test_rrelu_module_inplace_and_refusals():
    m = nn.RReLU()
    assert repr(m) == "RReLU(lower=0.125, upper=0.3333333333333333)"
    assert repr(nn.RReLU(0.1, 0.3, True)) == "RReLU(lower=0.1, upper=0.3, inplace=True)"
    x = -fg.ones(1000)
    slopes = -m(x).numpy()
    assert slopes.min() >= 0.125 and slopes.max() <= 1 / 3 and slopes.std() > 0.03
    np.testing.assert_allclose(-m.eval()(x).numpy(), (0.125 + 1 / 3) / 2, rtol=1e-6)
    t = fg.tensor([-1.0, 2.0])
    out = F.rrelu(t, 0.1, 0.3, inplace=True)
    assert out is t and t.tolist() == pytest.approx([-0.2, 2.0])
    t = fg.tensor([-1.0, 2.0])
    nn.RReLU(0.1, 0.2, inplace=True)(t)
    assert 0.1 <= -t.tolist()[0] <= 0.2
    for training in (True, False):
        with pytest.raises(RuntimeError, match="Lower bound should be less than or equal to"):
            F.rrelu(fg.ones(2), 0.5, 0.2, training=training)


def test_rrelu_underscore_writes_into_its_input():
    t = fg.tensor([-1.0, 2.0])
    assert F.rrelu_(t, 0.1, 0.3) is t and t.tolist() == pytest.approx([-0.2, 2.0])
    t = -fg.ones(500)
    F.rrelu_(t, 0.1, 0.2, training=True)
    slopes = -t.numpy()
    assert slopes.min() >= 0.1 and slopes.max() <= 0.2 and slopes.std() > 0.01
    assert F.rrelu_(fg.tensor([-3.0])).tolist() == pytest.approx([-3 * (1 / 8 + 1 / 3) / 2])
    with pytest.raises(RuntimeError, match="Lower bound should be less than or equal to"):
        F.rrelu_(fg.ones(2), 0.5, 0.1)
