"""ContinuousBernoulli and VonMises (frontend/distributions_bounded.py) and NegativeBinomial
(frontend/distributions_categorical.py): log_prob, entropy, cdf and moments against torch
2.14.1's values (literals) and closed forms (numpy), the Taylor region near p = 1/2,
moments of many seeded draws, reparameterized gradients, validation errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distributions import ContinuousBernoulli, NegativeBinomial, VonMises


def _t(values, grad=False):
    return fg.tensor(values, dtype=fg.float64, requires_grad=grad)


def _close(got, want, rtol=1e-10):
    got = np.asarray(got.tolist() if hasattr(got, "tolist") else got, dtype=float)
    assert np.allclose(got, np.asarray(want, dtype=float), rtol=rtol, atol=1e-12), (got, want)


def _cb_reference(p: float, x: float) -> tuple[float, float, float]:
    """(log density, mean, cdf) of the continuous Bernoulli in closed form (p != 1/2)."""
    c = 2 * math.atanh(1 - 2 * p) / (1 - 2 * p)
    log_pdf = math.log(c) + x * math.log(p) + (1 - x) * math.log1p(-p)
    mean = p / (2 * p - 1) + 1 / (2 * math.atanh(1 - 2 * p))
    cdf = (p**x * (1 - p) ** (1 - x) + p - 1) / (2 * p - 1)
    return log_pdf, mean, cdf


def test_continuous_bernoulli_is_the_closed_form():
    probs, x = [0.2, 0.9, 0.3], [0.3, 1.0, 0.6]
    d = ContinuousBernoulli(_t(probs))
    ref = np.array([_cb_reference(p, v) for p, v in zip(probs, x)])
    _close(d.log_prob(_t(x)), ref[:, 0])
    _close(d.mean, ref[:, 1])
    _close(d.cdf(_t(x)), ref[:, 2])
    _close(d.icdf(_t(ref[:, 2].tolist())), x)


def test_continuous_bernoulli_equals_torchs():
    d = ContinuousBernoulli(_t([0.2, 0.4995, 0.9]))  # the middle one in the Taylor region
    _close(
        d.log_prob(_t([0.3, 0.6, 1.0])),
        [0.19842802409409477, -0.00020016673343892233, 0.9049780438330277],
    )
    _close(d.entropy(), [-0.07641445280335896, -1.666667611699424e-07, -0.17963111600005544])
    _close(d.mean, [0.3880141871111483, 0.4998333332888889, 0.6698803866865813])
    _close(d.variance, [0.0758978008069574, 0.08333331666667512, 0.0665088624225558])
    _close(d.cdf(_t([0.3, 0.6, 0.99])), [0.45366139281807033, 0.6, 0.9755508089453174])
    _close(d.icdf(_t([0.3, 0.6, 0.99])), [0.18386589225024355, 0.6, 0.9959364050282353])
    assert ContinuousBernoulli(0.3).batch_shape == ()
    # logits parameterize the same distribution
    lg = ContinuousBernoulli(logits=_t([math.log(0.2 / 0.8)]))
    _close(lg.log_prob(_t([0.3])), [0.19842802409409477])


def test_continuous_bernoulli_gradients_and_draws():
    p = _t([0.2, 0.9], True)
    d = ContinuousBernoulli(p)
    d.log_prob(_t([0.3, 0.6])).sum().backward()
    h = 1e-6
    want = [
        (_cb_reference(q + h, x)[0] - _cb_reference(q - h, x)[0]) / (2 * h)
        for q, x in [(0.2, 0.3), (0.9, 0.6)]
    ]
    _close(p.grad, want, rtol=1e-7)
    fg.manual_seed(0)
    n = 40000
    x = ContinuousBernoulli(_t([0.2, 0.5, 0.9])).sample((n,)).numpy()
    assert ((x >= 0) & (x <= 1)).all()
    mean = [_cb_reference(0.2, 0)[1], 0.5, _cb_reference(0.9, 0)[1]]
    assert np.all(np.abs(x.mean(0) - mean) < 6 * np.sqrt(1 / 12 / n))
    q = _t(0.2, True)
    ContinuousBernoulli(q).rsample((n,)).mean().backward()  # d mean / dp
    dm = (_cb_reference(0.2 + h, 0)[1] - _cb_reference(0.2 - h, 0)[1]) / (2 * h)
    assert abs(q.grad.item() - dm) < 0.01


def _log_i0(k: float) -> float:
    """log I0(k) by its power series."""
    return math.log(sum((k / 2) ** (2 * j) / math.factorial(j) ** 2 for j in range(60)))


def test_von_mises_values():
    d = VonMises(_t([0.0, 1.0]), _t([0.5, 5.0]))
    _close(d.log_prob(_t([0.3, -2.0])), [-1.4217585158819206, -10.092521327832886])
    _close(d.variance, [0.7575003832967004, 0.10661687617139548])
    # torch's polynomial I0 is good to about 1e-7 of the series
    want = [0.5 * math.cos(0.3) - math.log(2 * math.pi) - _log_i0(0.5)]
    _close(VonMises(_t(0.0), _t(0.5)).log_prob(_t(0.3)), want, rtol=1e-6)
    k = _t(2.0, True)
    VonMises(_t(0.0), k).log_prob(_t(1.0)).backward()  # cos(1) - I1(2) / I0(2)
    assert abs(k.grad.item() - (math.cos(1.0) - 0.6977746579640081)) < 1e-6


def test_von_mises_draws():
    fg.manual_seed(1)
    n = 40000
    d = VonMises(_t([0.5, -3.0, 0.0]), _t([4.0, 1.0, 1e-6]))
    x = d.sample((n,)).numpy()
    assert x.dtype == np.float64 and ((x > -math.pi - 1e-12) & (x <= math.pi + 1e-12)).all()
    # the circular mean is loc; E[cos(x - loc)] = I1(k) / I0(k) = 1 - variance
    c = np.cos(x - np.array([0.5, -3.0, 0.0])).mean(0)
    s = np.sin(x - np.array([0.5, -3.0, 0.0])).mean(0)
    assert np.all(np.abs(s) < 0.02)
    assert np.all(np.abs(c - (1 - d.variance.numpy())) < 0.02)
    assert VonMises(fg.tensor([0.0]), fg.tensor([2.0])).sample((3,)).dtype == fg.float32


def test_negative_binomial_is_the_closed_form():
    r, p, k = np.array([3.0, 2.5]), np.array([0.3, 0.8]), np.array([0.0, 4.0])
    d = NegativeBinomial(_t(r.tolist()), _t(p.tolist()))
    lgamma = np.vectorize(math.lgamma)
    want = lgamma(k + r) - lgamma(k + 1) - lgamma(r) + r * np.log1p(-p) + k * np.log(p)
    _close(d.log_prob(_t(k.tolist())), want)
    _close(d.log_prob(_t(k.tolist())), [-1.070024831816197, -2.716343627305813])
    _close(d.mean, r * p / (1 - p))
    _close(d.variance, r * p / (1 - p) ** 2)
    _close(d.mode, np.floor(np.maximum((r - 1) * p / (1 - p), 0)))
    assert NegativeBinomial(_t(0.0), _t(0.5)).log_prob(_t(0.0)).item() == 0.0  # empty count
    lg = NegativeBinomial(_t([3.0]), logits=_t([math.log(0.3 / 0.7)]))
    _close(lg.log_prob(_t([0.0])), [-1.070024831816197])
    pr = _t([0.3], True)
    NegativeBinomial(_t([3.0]), pr).log_prob(_t([2.0])).sum().backward()
    _close(pr.grad, [2 / 0.3 - 3 / 0.7])  # k / p - r / (1 - p)


def test_negative_binomial_draws():
    fg.manual_seed(2)
    n = 40000
    r, p = np.array([3.0, 0.5]), np.array([0.4, 0.7])
    x = NegativeBinomial(_t(r.tolist()), _t(p.tolist())).sample((n,)).numpy()
    assert (x == np.round(x)).all() and (x >= 0).all()
    mean, var = r * p / (1 - p), r * p / (1 - p) ** 2
    assert np.all(np.abs(x.mean(0) - mean) < 6 * np.sqrt(var / n))
    assert np.allclose(x.var(0), var, rtol=0.1)


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: ContinuousBernoulli(_t(1.5), validate_args=True), "probs has invalid values"),
        (lambda: ContinuousBernoulli(_t(0.3)).log_prob(_t(1.5)), "Interval"),
        (lambda: ContinuousBernoulli(_t(0.3), _t(0.1)), "Either `probs` or `logits`"),
        (lambda: VonMises(_t(0.0), _t(0.0)), "concentration"),
        (lambda: NegativeBinomial(_t(-1.0), _t(0.5)), "total_count"),
        (lambda: NegativeBinomial(_t(1.0), _t(1.0)), "HalfOpenInterval"),
        (lambda: NegativeBinomial(_t(1.0), _t(0.5)).log_prob(_t(0.5)), "IntegerGreaterThan"),
    ],
)
def test_validation_raises_torchs_value_errors(make, where):
    with pytest.raises(ValueError) as info:
        make()
    assert where in str(info.value)


def test_continuous_bernoulli_clamps_probs_as_torch():
    # out-of-range probs pass the default validation (torch clamps them first)
    assert ContinuousBernoulli(_t(1.5)).probs.item() == 1 - np.finfo(np.float64).eps
