"""OneHotCategorical (and OneHotCategoricalStraightThrough), Multinomial, Binomial and
Geometric (frontend/distributions_categorical.py): log_prob, entropy and their gradients
against torch 2.14.1's values (literals) and float64 central differences, moments of
seeded draws within tolerant bounds, support boundaries (p = 1, logits far out, counts
past total_count), 0-d parameters, broadcast batch shapes, expand, enumerate_support and
validation errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distributions import (
    Binomial,
    Geometric,
    Multinomial,
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
)

INF = math.inf
# torch 2.14.1's (the same calls under torch, float64)
EXPECTED = {
    "onehot": {
        "log_prob": [-1.2039728043259361, -0.2231435513142097],
        "entropy": [1.0296530140645737, 0.639031859650177],
        "grad": [[-1.0, 2.3333333333333335, -1.0], [-1.0, -1.0, 0.25]],
    },
    "multinomial": {
        "log_prob": [-1.8971199848858809, -3.4657359027997265],
        "entropy": 2.5918085962714987,
    },
    "multinomial_logits": {
        "entropy": 1.6719389474418673,
        "grad": [0.19837193095586414, 0.2503485636595765, -0.4487204946154417],
    },
    "binomial": {
        "log_prob": [
            [-1.070024831816197, -1.0536051565782643],
            [-3.6119184129778077, -2.8577871458048776],
        ],
        "mode": [1.0, 9.0],
    },
    "binomial_logits": {
        "entropy": [1.6173633156271288, 1.299298948531909, 1.6399053531328302e-11],
        "grad": [-2.220446049250313e-16, -0.39010810584915045, 1.5837553490882783e-11],
    },
    "geometric": {
        "log_prob": [[-1.2039728043259361, 0.0], [-2.6306725800808657, -INF]],
        "entropy": [2.0362143401829784, 2.220446049250318e-16],
    },
    "geometric_logits": {"grad": [-0.927299238213181, -1.049442560754151]},
}


def _t(values, grad=False):
    return fg.tensor(values, dtype=fg.float64, requires_grad=grad)


def _close(got, want, rtol=1e-10):
    got = np.asarray(got.tolist() if hasattr(got, "tolist") else got, dtype=float)
    np.testing.assert_allclose(got, np.asarray(want, dtype=float), rtol=rtol, atol=1e-12)


def test_one_hot_categorical_equals_torchs():
    p = _t([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], grad=True)
    d = OneHotCategorical(p)
    lp = d.log_prob(_t([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    want = EXPECTED["onehot"]
    _close(lp, want["log_prob"])
    _close(d.entropy(), want["entropy"])
    lp.sum().backward()
    _close(p.grad, want["grad"])
    _close(d.mode, [[0, 0, 1], [0, 0, 1]])
    _close(d.variance, (p * (1 - p)).detach())
    assert (d.batch_shape, d.event_shape) == ((2,), (3,))
    support = d.enumerate_support()
    assert support.shape == (3, 2, 3) and d.enumerate_support(False).shape == (3, 1, 3)
    _close(support[:, 1], np.eye(3))
    assert d.expand((4, 2)).batch_shape == (4, 2)
    assert repr(d) == "OneHotCategorical()"


def test_one_hot_draws_have_the_probabilities():
    fg.manual_seed(0)
    x = OneHotCategorical(_t([0.2, 0.3, 0.5])).sample((20000,)).numpy()
    assert x.shape == (20000, 3) and (x.sum(-1) == 1).all()
    assert np.abs(x.mean(0) - [0.2, 0.3, 0.5]).max() < 0.015


def test_straight_through_rsample_takes_the_gradient_of_probs():
    logits = _t([0.0, 1.0, -1.0], grad=True)
    d = OneHotCategoricalStraightThrough(logits=logits)
    fg.manual_seed(1)
    x = d.rsample((3,))
    assert x.shape == (3, 3) and (x.detach().numpy().sum(-1) == 1).all()
    (x * _t([1.0, 2.0, 3.0])).sum().backward()
    probs = np.exp([0.0, 1.0, -1.0]) / np.exp([0.0, 1.0, -1.0]).sum()
    w = np.array([1.0, 2.0, 3.0])
    _close(logits.grad, 3 * probs * (w - (probs * w).sum()))  # d/dlogits of 3 (probs . w)
    assert OneHotCategoricalStraightThrough.has_rsample and not OneHotCategorical.has_rsample


def test_multinomial_equals_torchs():
    d = Multinomial(5, _t([0.2, 0.3, 0.5]))
    _close(d.log_prob(_t([[1.0, 1.0, 3.0], [0.0, 0.0, 5.0]])), EXPECTED["multinomial"]["log_prob"])
    _close(d.entropy(), EXPECTED["multinomial"]["entropy"])
    _close(d.mean, [1.0, 1.5, 2.5])
    _close(d.variance, [0.8, 1.05, 1.25])
    logits = _t([0.1, -2.0, 1.0], grad=True)
    e = Multinomial(4, logits=logits).entropy()
    _close(e, EXPECTED["multinomial_logits"]["entropy"])
    e.backward()
    _close(logits.grad, EXPECTED["multinomial_logits"]["grad"])
    # a zero probability's zero count adds nothing (logits -inf times 0)
    _close(Multinomial(2, _t([0.0, 1.0])).log_prob(_t([0.0, 2.0])), 0.0)


def test_multinomial_draws_count_total_count():
    fg.manual_seed(2)
    d = Multinomial(10, _t([[0.1, 0.9], [0.5, 0.5]]))
    x = d.sample((4000,)).numpy()
    assert x.shape == (4000, 2, 2) and (x.sum(-1) == 10).all()
    assert np.abs(x.mean(0) - [[1, 9], [5, 5]]).max() < 0.15
    assert d.expand((3, 2)).sample().shape == (3, 2, 2)
    with pytest.raises(NotImplementedError, match="inhomogeneous total_count"):
        Multinomial(_t(3.0), _t([0.5, 0.5]))
    with pytest.raises(ValueError, match="within the support"):
        d.log_prob(_t([[5.0, 6.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="within the support"):
        d.log_prob(_t([[-1.0, 2.0], [1.0, 1.0]]))


def test_binomial_equals_torchs():
    d = Binomial(_t([3.0, 10.0]), _t([0.3, 0.9]))
    _close(d.log_prob(_t([[0.0, 10.0], [3.0, 7.0]])), EXPECTED["binomial"]["log_prob"])
    _close(d.mode, EXPECTED["binomial"]["mode"])
    _close(d.mean, [0.9, 9.0])
    _close(d.variance, [0.63, 0.9])
    logits = _t([0.0, 1.5, -30.0], grad=True)
    e = Binomial(6, logits=logits).entropy()
    _close(e, EXPECTED["binomial_logits"]["entropy"])
    e.sum().backward()
    _close(logits.grad, EXPECTED["binomial_logits"]["grad"])
    with pytest.raises(NotImplementedError, match="Inhomogeneous total count"):
        d.entropy()
    with pytest.raises(ValueError, match="within the support"):
        d.log_prob(_t([4.0, 1.0]))
    with pytest.raises(ValueError, match="Expected parameter total_count"):
        Binomial(_t(2.5), _t(0.5))
    assert Binomial(4, _t(0.5)).batch_shape == () and repr(Binomial(4, _t(0.5))) == (
        "Binomial(total_count: 4.0, probs: 0.5)"
    )


def test_binomial_log_prob_gradient_is_central_differences():
    def f(x):
        return Binomial(_t([5.0, 8.0]), logits=x).log_prob(_t([2.0, 8.0])).sum()

    x = _t([0.3, -1.2], grad=True)
    f(x).backward()
    h = 1e-6
    for i in range(2):
        up, down = [0.3, -1.2], [0.3, -1.2]
        up[i] += h
        down[i] -= h
        numeric = (f(_t(up)).item() - f(_t(down)).item()) / (2 * h)
        assert abs(x.grad.numpy()[i] - numeric) < 1e-7


def test_binomial_draws():
    fg.manual_seed(3)
    d = Binomial(_t([[4.0], [20.0]]), _t([0.25, 0.5]))
    assert d.batch_shape == (2, 2)
    x = d.sample((5000,)).numpy()
    assert x.shape == (5000, 2, 2) and x.dtype == np.float64
    assert (x >= 0).all() and (x <= [[4], [20]]).all() and (x % 1 == 0).all()
    assert np.abs(x.mean(0) - [[1, 2], [5, 10]]).max() < 0.15
    support = Binomial(3, _t([0.5, 0.2])).enumerate_support()
    _close(support, [[0, 0], [1, 1], [2, 2], [3, 3]])


def test_geometric_equals_torchs():
    d = Geometric(_t([0.3, 1.0]))
    _close(d.log_prob(_t([[0.0, 0.0], [4.0, 2.0]])), EXPECTED["geometric"]["log_prob"])
    _close(d.entropy(), EXPECTED["geometric"]["entropy"])
    _close(d.mean, [1 / 0.3 - 1, 0.0])
    _close(d.variance, [(1 / 0.3 - 1) / 0.3, 0.0])
    logits = _t([-1.0, 2.0], grad=True)
    g = Geometric(logits=logits)
    (g.log_prob(_t([3.0, 1.0])).sum() + g.entropy().sum()).backward()
    _close(logits.grad, EXPECTED["geometric_logits"]["grad"])
    with pytest.raises(ValueError, match="to be positive but found invalid values"):
        Geometric(_t([0.0, 0.5]))
    with pytest.raises(ValueError, match="within the support"):
        d.log_prob(_t([0.5, 1.0]))
    assert Geometric(0.5).batch_shape == () and d.expand((3, 2)).batch_shape == (3, 2)


def test_geometric_draws_have_the_moments():
    fg.manual_seed(4)
    x = Geometric(_t(0.2)).sample((40000,)).numpy()
    assert (x >= 0).all() and (x % 1 == 0).all()
    assert abs(x.mean() - 4.0) < 0.1 and abs(x.var() / 20.0 - 1) < 0.06
    assert (Geometric(_t(1.0)).sample((10,)).numpy() == 0).all()
