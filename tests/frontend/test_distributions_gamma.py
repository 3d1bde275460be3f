"""Gamma, Beta, Dirichlet, Exponential, Poisson, Laplace and LogNormal
(frontend/distributions_gamma.py): log_prob, entropy, cdf and KL against torch 2.14.1's
values (literals), moments of many seeded draws within tolerant bounds, the gamma draws'
reparameterization gradient against mpmath's derivative of the incomplete gamma function
(literals), support boundaries and validation errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distributions import (
    Beta,
    Dirichlet,
    Exponential,
    Gamma,
    Laplace,
    LogNormal,
    Poisson,
    kl_divergence,
)
from fusegrad.distributions_gamma import _digamma_host, _gamma_draw_grad


def _t(values):
    return fg.tensor(values, dtype=fg.float64)


def _close(got, want, rtol=1e-10):
    got = np.asarray(got.tolist() if hasattr(got, "tolist") else got, dtype=float)
    assert np.allclose(got, np.asarray(want, dtype=float), rtol=rtol, atol=1e-12), (got, want)


def test_log_prob_and_entropy_equal_torchs():
    g = Gamma(_t([0.5, 2.0]), _t([1.5, 0.7]))
    _close(g.log_prob(_t([0.0, 2.0])), [math.inf, -1.4202027073175194])
    _close(g.log_prob(_t([0.3, 0.0])), [-0.21764598670764979, -math.inf])
    _close(g.entropy(), [-0.31485517819417574, 1.9338906088402654])
    _close(Gamma(_t(1.0), _t(2.0)).log_prob(_t(0.0)), math.log(2))  # rate e^0 at 0
    b = Beta(_t([1.0, 0.5, 2.0]), _t([1.0, 2.0, 0.5]))
    _close(b.log_prob(_t([0.0, 0.0, 1.0])), [0.0, math.inf, math.inf])
    _close(b.log_prob(_t([1.0, 1.0, 0.0])), [0.0, -math.inf, -math.inf])
    _close(b.entropy(), [0.0, -0.7652789553347761, -0.7652789553347761])
    _close(
        Poisson(_t([0.0, 0.0, 3.5])).log_prob(_t([0.0, 2.0, 4.0])),
        [0, -math.inf, -1.6670019563664735],
    )
    d = Dirichlet(_t([0.5, 1.0, 2.5]))
    _close(d.log_prob(_t([0.2, 0.3, 0.5])), 0.6997098412075679)
    _close(d.entropy(), -1.7150839613772115)
    lap = Laplace(_t(1.0), _t(2.0))
    _close(lap.log_prob(_t(-1.0)), -2.386294361119891)
    _close(lap.cdf(_t(-1.0)), 0.18393972058572117)
    _close(lap.icdf(lap.cdf(_t(-1.0))), -1.0)
    ln = LogNormal(0.5, 0.8)
    _close(ln.log_prob(fg.tensor(2.0)), -1.4180873447615459, rtol=1e-6)
    _close(ln.entropy(), 1.695794981890463, rtol=1e-6)
    _close(ln.cdf(fg.tensor(2.0)), 0.5953906086792149, rtol=1e-6)
    e = Exponential(_t([2.0]))
    _close(e.log_prob(_t([1.5])), math.log(2) - 3)
    _close(e.entropy(), 1 - math.log(2))
    _close(e.icdf(e.cdf(_t([1.5]))), [1.5])


def test_kl_pairs_equal_torchs():
    _close(kl_divergence(Gamma(_t(2.0), _t(3.0)), Gamma(_t(1.5), _t(2.0))), 0.032140925409568255)
    _close(kl_divergence(Beta(_t(2.0), _t(3.0)), Beta(_t(1.5), _t(2.0))), 0.038150809805681085)
    p, q = Dirichlet(_t([2.0, 3.0, 1.0])), Dirichlet(_t([1.5, 2.0, 0.5]))
    _close(kl_divergence(p, q), 0.18750113161683402)
    _close(kl_divergence(Exponential(_t(2.0)), Exponential(_t(0.5))), 0.6362943611198906)
    _close(kl_divergence(Laplace(_t(0.0), _t(1.0)), Laplace(_t(1.0), _t(2.0))), 0.37708690114566656)
    _close(kl_divergence(Poisson(_t(2.0)), Poisson(_t(3.0))), 0.189069783783671)
    _close(
        kl_divergence(LogNormal(_t(0.0), _t(1.0)), LogNormal(_t(1.0), _t(2.0))), 0.4431471805599453
    )


def test_moments_and_shapes():
    g = Gamma(_t([1.0, 2.0]), 2.0)
    assert g.batch_shape == (2,) and g.mean.tolist() == [0.5, 1.0]
    assert g.variance.tolist() == [0.25, 0.5] and g.mode.tolist() == [0.0, 0.5]
    assert Gamma(2.0, 1.0).batch_shape == ()  # numbers: a 0-d batch, as torch's
    b = Beta(_t([[1.0], [2.0]]), _t([3.0, 4.0, 5.0]))
    assert b.batch_shape == (2, 3) and b.sample((4,)).shape == (4, 2, 3)
    _close(Beta(2.0, 3.0).variance, 6 / (25 * 6), rtol=1e-6)
    d = Dirichlet(_t([[1.0, 3.0], [2.0, 2.0]]))
    assert d.batch_shape == (2,) and d.event_shape == (2,) and d.sample((5,)).shape == (5, 2, 2)
    assert Dirichlet(_t([3.0, 2.0, 1.0])).mode.tolist() == [2 / 3, 1 / 3, 0.0]
    assert Dirichlet(_t([0.5, 0.2])).mode.tolist() == [1.0, 0.0]  # torch's vertex
    assert Poisson(_t([2.5])).mode.tolist() == [2.0]
    assert Exponential(_t(4.0)).expand((3,)).sample().shape == (3,)
    assert LogNormal(_t([0.0, 1.0]), 1.0).expand((2, 2)).batch_shape == (2, 2)


@pytest.mark.parametrize(
    ("dist", "mean", "var"),
    [
        (
            lambda: Gamma(_t([0.3, 2.0, 30.0]), _t([1.0, 0.5, 3.0])),
            [0.3, 4.0, 10.0],
            [0.3, 8.0, 10 / 3],
        ),
        (lambda: Beta(_t([0.5, 2.0]), _t([0.5, 5.0])), [0.5, 2 / 7], [1 / 8, 10 / (49 * 8)]),
        (lambda: Exponential(_t([0.5, 4.0])), [2.0, 0.25], [4.0, 1 / 16]),
        (lambda: Laplace(_t([1.0, -2.0]), _t([0.5, 2.0])), [1.0, -2.0], [0.5, 8.0]),
        (
            lambda: LogNormal(_t([0.0]), _t([0.5])),
            [math.exp(0.125)],
            [math.expm1(0.25) * math.exp(0.25)],
        ),
        (lambda: Poisson(_t([0.0, 0.7, 12.0])), [0.0, 0.7, 12.0], [0.0, 0.7, 12.0]),
    ],
)
def test_draws_have_the_moments(dist, mean, var):
    fg.manual_seed(0)
    n = 40000
    x = dist().sample((n,)).numpy()
    assert x.shape[0] == n
    se = np.sqrt(np.asarray(var) / n)
    assert np.all(np.abs(x.mean(0) - mean) <= 6 * se + 1e-12), (x.mean(0), mean)
    assert np.allclose(x.var(0), var, rtol=0.1, atol=1e-12), (x.var(0), var)


def test_draws_lie_in_the_support():
    fg.manual_seed(1)
    assert (Gamma(_t(0.05), _t(1.0)).sample((2000,)).numpy() > 0).all()  # tiny ones clamped
    b = Beta(_t(0.1), _t(0.1)).sample((2000,)).numpy()
    assert ((b > 0) & (b < 1)).all()
    d = Dirichlet(_t([0.5, 1.0, 2.0])).sample((1000,)).numpy()
    assert np.allclose(d.sum(-1), 1) and (d > 0).all()
    p = Poisson(_t(3.0)).sample((1000,))
    assert p.dtype == fg.float64 and (p.numpy() == np.round(p.numpy())).all()


def test_dirichlet_draws_have_the_moments():
    fg.manual_seed(2)
    a = np.array([0.5, 1.0, 2.5])
    x = Dirichlet(_t(a.tolist())).sample((40000,)).numpy()
    a0 = a.sum()
    assert np.allclose(x.mean(0), a / a0, atol=0.01)
    assert np.allclose(x.var(0), a * (a0 - a) / (a0**2 * (a0 + 1)), rtol=0.1)


# (a, x, dx/da): mpmath's -(dF/da) / f, F the regularized lower incomplete gamma (the upper
# one for x > a), at 40 digits
_MPMATH = [
    (0.01, 0.0001, 0.08650409375322654),
    (0.01, 8.91, 93.36243180361654),
    (0.3, 0.09, 0.7369828332067401),
    (0.3, 9.399999999999999, 5.46240621235912),
    (1.0, 0.5, 0.806979116825318),
    (1.0, 15.0, 3.347986145111152),
    (2.5, 2.5, 1.0686730199876306),
    (2.5, 54.122776601683796, 3.3992193371651966),
    (7.0, 9.64575131106459, 1.1970157057342743),
    (30.0, 0.3, 0.046672120000418246),
    (30.0, 56.80890230020665, 1.3604395422287048),
    (200.0, 100.0, 0.6937158832991069),
    (200.0, 261.6685424949238, 1.1413413432883661),
    (3000.0, 2890.4554884989666, 0.9815707388260043),
    (3000.0, 3444.1780460041327, 1.0706841152497104),
]


def test_gamma_draw_gradient_is_the_implicit_one():
    a = np.array([r[0] for r in _MPMATH])
    x = np.array([r[1] for r in _MPMATH])
    want = np.array([r[2] for r in _MPMATH])
    assert np.allclose(_gamma_draw_grad(x, a), want, rtol=1e-9)
    assert np.allclose(
        _digamma_host(np.array([0.1, 1.0, 7.0])),
        [-10.423754940411076, -0.5772156649015329, 1.872784335098467],
        rtol=1e-12,
    )


def test_rsample_gradients_match_the_moments():
    # E[x] = a / b: the mean of the draws' gradients is d/da (a / b) = 1 / b and
    # d/db (a / b) = -a / b^2 (reparameterized draws are unbiased)
    fg.manual_seed(3)
    a = fg.tensor(1.5, dtype=fg.float64, requires_grad=True)
    b = fg.tensor(2.0, dtype=fg.float64, requires_grad=True)
    n = 40000
    Gamma(a, b).rsample((n,)).mean().backward()
    assert abs(a.grad.item() - 0.5) < 0.02 and abs(b.grad.item() + 0.375) < 0.02
    c1 = fg.tensor(2.0, dtype=fg.float64, requires_grad=True)
    c0 = fg.tensor(3.0, dtype=fg.float64, requires_grad=True)
    Beta(c1, c0).rsample((n,)).mean().backward()  # d/dc1 of c1 / (c1 + c0) = 3 / 25
    assert abs(c1.grad.item() - 0.12) < 0.01 and abs(c0.grad.item() + 0.08) < 0.01
    r = fg.tensor(2.0, dtype=fg.float64, requires_grad=True)
    Exponential(r).rsample((n,)).mean().backward()
    assert abs(r.grad.item() + 0.25) < 0.01
    loc = fg.tensor(0.5, dtype=fg.float64, requires_grad=True)
    scale = fg.tensor(0.5, dtype=fg.float64, requires_grad=True)
    LogNormal(loc, scale).rsample((n,)).mean().backward()
    m = math.exp(0.5 + 0.125)
    assert abs(loc.grad.item() - m) < 0.03 * m and abs(scale.grad.item() - 0.5 * m) < 0.05 * m
    assert not Poisson(_t(1.0)).has_rsample and Gamma(1.0, 1.0).has_rsample


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: Gamma(_t(-1.0), _t(1.0)), "concentration"),
        (lambda: Gamma(_t(1.0), _t(1.0)).log_prob(_t(-1.0)), "GreaterThanEq(lower_bound=0.0)"),
        (lambda: Beta(_t(1.0), _t(1.0)).log_prob(_t(1.5)), "Interval(lower_bound=0.0"),
        (lambda: Poisson(_t(1.0)).log_prob(_t(1.5)), "IntegerGreaterThan(lower_bound=0)"),
        (lambda: Poisson(_t(-1.0)), "rate"),
        (lambda: Dirichlet(_t(1.0)), "`concentration` parameter must be at least one-dimensional."),
        (lambda: Dirichlet(_t([1.0, 1.0])).log_prob(_t([0.5, 0.6])), "Simplex()"),
        (lambda: Exponential(_t(0.0)), "rate"),
        (lambda: Laplace(_t(0.0), _t(-1.0)), "scale"),
        (lambda: LogNormal(_t(0.0), _t(1.0)).log_prob(_t(-1.0)), "GreaterThan(lower_bound=0.0)"),
    ],
)
def test_validation_raises_torchs_value_errors(make, where):
    with pytest.raises(ValueError, match=None) as info:
        make()
    assert where in str(info.value)


def test_validate_args_false_computes_out_of_support():
    assert Poisson(_t(1.0), validate_args=False).log_prob(_t(1.5)).isfinite().item()
    assert Gamma(_t(2.0), _t(1.0), validate_args=False).log_prob(_t(-1.0)).item() != 0
