"""Pareto, InverseGamma, Kumaraswamy, GeneralizedPareto and FisherSnedecor
(frontend/distributions_tails.py): log_prob, entropy, cdf and moments against closed forms
and torch 2.14.1's values (literals), gradients against hand derivatives, moments of many
seeded draws within tolerant bounds, reparameterized gradients, validation errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distributions import (
    FisherSnedecor,
    GeneralizedPareto,
    InverseGamma,
    Kumaraswamy,
    Pareto,
    TransformedDistribution,
)


def _t(values, grad=False):
    return fg.tensor(values, dtype=fg.float64, requires_grad=grad)


def _close(got, want, rtol=1e-10):
    got = np.asarray(got.tolist() if hasattr(got, "tolist") else got, dtype=float)
    assert np.allclose(got, np.asarray(want, dtype=float), rtol=rtol, atol=1e-12), (got, want)


def test_pareto_is_the_closed_form_with_its_gradients():
    scale, alpha = _t([1.0, 2.5], True), _t([3.0, 0.7], True)
    x = np.array([1.5, 3.0])
    d = Pareto(scale, alpha)
    assert isinstance(d, TransformedDistribution) and d.support.lower_bound is d.scale
    lp = d.log_prob(_t(x.tolist()))
    s, a = np.array([1.0, 2.5]), np.array([3.0, 0.7])
    _close(lp, np.log(a) + a * np.log(s) - (a + 1) * np.log(x))
    lp.sum().backward()
    _close(alpha.grad, 1 / a + np.log(s) - np.log(x))
    _close(scale.grad, a / s)
    _close(d.cdf(_t(x.tolist())), 1 - (s / x) ** a)
    _close(d.icdf(_t([0.3, 0.8])), s * (1 - np.array([0.3, 0.8])) ** (-1 / a))
    _close(d.entropy(), np.log(s / a) + 1 + 1 / a)
    _close(d.mean, [1.5, math.inf])
    _close(d.variance, [0.75, math.inf])


def test_values_equal_torchs():
    k = Kumaraswamy(_t([2.0, 0.5]), _t([3.0, 1.5]))
    _close(k.log_prob(_t([0.3, 0.9])), [0.3991653059596364, -1.7198713174874123])
    _close(k.entropy(), [-0.2084261358947218, -0.6593568997616617])
    _close(k.mean, [0.457142857142857, 0.2285714285714285])
    _close(k.variance, [0.04102040816326541, 0.05857761286332713], rtol=1e-8)
    ig = InverseGamma(_t([3.0, 0.5]), _t([2.0, 1.5]))
    _close(ig.log_prob(_t([0.7, 2.0])), [-0.044148720268036956, -2.1593531597105358])
    _close(ig.entropy(), [0.6951570207260227, 4.423095090064999])
    _close(ig.mean, [1.0, math.inf])
    f = FisherSnedecor(_t([1.0, 6.0]), _t([6.0, 9.0]))
    _close(f.log_prob(_t([0.5, 1.0])), [-0.8939941423290034, -0.6601070172130776])
    _close(f.variance, [11.25, 1.4326530612244899])
    assert np.isnan(FisherSnedecor(_t(4.0), _t(2.0)).mean.item())
    assert np.isnan(FisherSnedecor(_t(2.0), _t(5.0)).mode.item())


def test_kumaraswamy_cdf_is_the_closed_form():
    a, b = np.array([2.0, 0.5]), np.array([3.0, 1.5])
    x = np.array([0.3, 0.9])
    k = Kumaraswamy(_t(a.tolist()), _t(b.tolist()))
    _close(k.cdf(_t(x.tolist())), 1 - (1 - x**a) ** b)
    _close(k.icdf(_t((1 - (1 - x**a) ** b).tolist())), x)


def test_generalized_pareto_is_the_closed_form():
    loc, scale, xi = np.array([0.1, 0.0, -1.0]), np.array([2.0, 1.0, 0.5]), [0.4, 0.0, -0.5]
    x = np.array([1.0, 2.0, -0.9])
    d = GeneralizedPareto(_t(loc.tolist()), _t(scale.tolist()), _t(xi))
    z = (x - loc) / scale
    xi = np.array(xi)
    safe = np.where(xi == 0, 1.0, xi)
    log_surv = np.where(xi == 0, -z, -np.log1p(safe * z) / safe)
    log_pdf = -np.log(scale) - np.where(xi == 0, z, (1 / safe + 1) * np.log1p(safe * z))
    _close(d.log_prob(_t(x.tolist())), log_pdf)
    _close(d.log_survival_function(_t(x.tolist())), log_surv)
    _close(d.cdf(_t(x.tolist())), -np.expm1(log_surv))
    _close(d.icdf(_t((-np.expm1(log_surv)).tolist())), x)
    _close(d.entropy(), np.log(scale) + xi + 1)
    _close(d.mean, loc + scale / (1 - xi))
    assert d.support.upper_bound.tolist()[2] == -1.0 + 0.5 / 0.5  # loc - scale / xi
    assert math.isinf(d.support.upper_bound.tolist()[0])
    # in float32 as well (torch's compares xi with a default-dtype zero there)
    f32 = GeneralizedPareto(fg.tensor(0.0), fg.tensor(1.0), fg.tensor(0.0))
    assert f32.log_prob(fg.tensor(2.0)).item() == -2.0


def test_shapes_and_expand():
    assert Pareto(1.0, 2.0).batch_shape == ()
    d = Pareto(_t([[1.0], [2.0]]), _t([1.0, 2.0, 3.0]))
    assert d.batch_shape == (2, 3) and d.sample((4,)).shape == (4, 2, 3)
    e = Kumaraswamy(_t(2.0), _t(3.0)).expand((3, 2))
    assert e.batch_shape == (3, 2) and e.rsample().shape == (3, 2)
    assert InverseGamma(_t([1.0, 2.0]), 1.0).expand((4, 2)).sample().shape == (4, 2)
    assert GeneralizedPareto(0.0, 1.0, _t([0.1, 0.2])).expand((2, 2)).batch_shape == (2, 2)
    f = FisherSnedecor(_t([3.0, 4.0]), 5.0).expand((3, 2))
    assert f.batch_shape == (3, 2) and f.rsample().shape == (3, 2)


@pytest.mark.parametrize(
    ("dist", "mean", "var"),
    [
        (lambda: Pareto(_t([1.0, 2.0]), _t([5.0, 6.0])), [1.25, 2.4], [5 / 48, 4 * 6 / (25 * 4)]),
        (lambda: InverseGamma(_t([6.0]), _t([5.0])), [1.0], [25 / (25 * 4)]),
        (
            lambda: Kumaraswamy(_t([1.0, 2.0]), _t([1.0, 1.0])),
            [0.5, 2 / 3],
            [1 / 12, 0.5 - 4 / 9],
        ),
        (lambda: GeneralizedPareto(_t([0.0]), _t([1.0]), _t([0.1])), [1 / 0.9], [1 / (0.81 * 0.8)]),
        (lambda: FisherSnedecor(_t([5.0]), _t([20.0])), [20 / 18], [2 * 400 * 23 / (5 * 324 * 16)]),
    ],
)
def test_draws_have_the_moments(dist, mean, var):
    fg.manual_seed(0)
    n = 40000
    x = dist().sample((n,)).numpy()
    se = np.sqrt(np.asarray(var) / n)
    assert np.all(np.abs(x.mean(0) - mean) <= 6 * se), (x.mean(0), mean)
    assert np.allclose(x.var(0), var, rtol=0.15), (x.var(0), var)


def test_rsample_gradients():
    fg.manual_seed(1)
    scale, alpha = _t(2.0, True), _t(3.0, True)
    x = Pareto(scale, alpha).rsample((1000,))
    x.sum().backward()
    xs = x.detach().numpy()
    # x = scale exp(E / alpha): dx/dscale = x / scale, dx/dalpha = -x log(x / scale) / alpha
    _close(scale.grad, (xs / 2.0).sum())
    _close(alpha.grad, (-xs * np.log(xs / 2.0) / 3.0).sum())
    a, b = _t(2.0, True), _t(3.0, True)
    Kumaraswamy(a, b).rsample((40000,)).mean().backward()
    # E = b B(1 + 1/a, b); its derivatives by central differences of that closed form

    def mean(a, b):
        return b * math.exp(math.lgamma(1 + 1 / a) + math.lgamma(b) - math.lgamma(1 + 1 / a + b))

    h = 1e-6
    da = (mean(2 + h, 3) - mean(2 - h, 3)) / (2 * h)
    db = (mean(2, 3 + h) - mean(2, 3 - h)) / (2 * h)
    assert abs(a.grad.item() - da) < 0.01 and abs(b.grad.item() - db) < 0.01
    c, r = _t(6.0, True), _t(5.0, True)
    InverseGamma(c, r).rsample((40000,)).mean().backward()  # E = r / (c - 1)
    assert abs(c.grad.item() + 0.2) < 0.02 and abs(r.grad.item() - 0.2) < 0.02
    xi = _t(0.2, True)
    GeneralizedPareto(_t(0.0), _t(1.0), xi).rsample((40000,)).mean().backward()  # 1 / (1 - xi)
    assert abs(xi.grad.item() - 1 / 0.64) < 0.15


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: Pareto(_t(-1.0), _t(1.0)), "scale"),
        (lambda: Pareto(_t(1.0), _t(0.0)), "parameter rate"),  # its Exponential's, as torch's
        (lambda: Pareto(_t(2.0), _t(1.0)).log_prob(_t(1.0)), "GreaterThanEq(lower_bound=2.0)"),
        (lambda: InverseGamma(_t(-1.0), _t(1.0)), "concentration"),
        (lambda: InverseGamma(_t(1.0), _t(1.0)).log_prob(_t(-1.0)), "GreaterThan"),
        (lambda: Kumaraswamy(_t(1.0), _t(-1.0)), "concentration0"),
        (lambda: Kumaraswamy(_t(1.0), _t(1.0)).log_prob(_t(1.5)), "Interval"),
        (lambda: GeneralizedPareto(_t(0.0), _t(-1.0), _t(0.0)), "scale"),
        (lambda: GeneralizedPareto(_t(0.0), _t(1.0), _t(-0.5)).log_prob(_t(3.0)), "Interval"),
        (lambda: FisherSnedecor(_t(1.0), _t(0.0)), "Gamma(concentration: 0.0"),  # as torch's
        (lambda: FisherSnedecor(_t(1.0), _t(1.0)).log_prob(_t(-1.0)), "GreaterThan"),
    ],
)
def test_validation_raises_torchs_value_errors(make, where):
    with pytest.raises(ValueError) as info:
        make()
    assert where in str(info.value)
