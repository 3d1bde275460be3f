"""Cauchy, HalfCauchy, HalfNormal, Gumbel, Weibull, StudentT and Chi2
(frontend/distributions_location.py): log_prob, entropy, moments, cdf and icdf against
torch 2.14.1's values (literals), their gradients against float64 central differences,
moments of many seeded draws within tolerant bounds, rsample's gradients, support
boundaries, 0-d parameters, broadcast batch shapes, expand and validation errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distributions import (
    Cauchy,
    Chi2,
    Gumbel,
    HalfCauchy,
    HalfNormal,
    StudentT,
    Weibull,
)

NAN, INF = math.nan, math.inf
CLASSES = {
    "Cauchy": Cauchy,
    "Chi2": Chi2,
    "Gumbel": Gumbel,
    "HalfCauchy": HalfCauchy,
    "HalfNormal": HalfNormal,
    "StudentT": StudentT,
    "Weibull": Weibull,
}
# the parameters (in each constructor's order) and the values of tests below
PARAMS = {
    "Cauchy": [[0.0, 1.0], [2.0, 0.5]],
    "HalfCauchy": [[2.0, 0.5]],
    "HalfNormal": [[2.0, 0.5]],
    "Gumbel": [[0.0, 1.0], [2.0, 0.5]],
    "Weibull": [[2.0, 0.5], [1.5, 0.7]],
    "StudentT": [[1.0, 2.5], [0.5, -1.0], [2.0, 0.5]],
    "Chi2": [[1.0, 2.5]],
}
VALUE = [0.3, 2.5]
# torch 2.14.1's (scripts: the same calls under torch, float64)
EXPECTED = {
    "Cauchy": {
        "log_prob": [-1.8601276753441651, -2.754167798283501],
        "entropy": [3.224171427529236, 1.8378770664093453],
        "mean": [NAN, NAN],
        "mode": [0.0, 1.0],
        "variance": [INF, INF],
        "cdf": [0.5473931422774896, 0.8975836176504333],
        "icdf": [-6.155367074350505, 1.3632712640026803],
    },
    "HalfCauchy": {
        "log_prob": [-1.16698049478422, -3.0165320627509917],
        "entropy": [2.5310242469692907, 1.1447298858494],
        "mean": [INF, INF],
        "mode": [0.0, 0.0],
        "variance": [INF, INF],
        "cdf": [0.09478628455497917, 0.8743340836219977],
        "icdf": [0.3167688806490729, 0.9813052527525752],
    },
    "HalfNormal": {
        "log_prob": [-0.9301885332046728, -12.032644172084781],
        "entropy": [1.4189385332046727, 0.0326441720847821],
        "mean": [1.5957691216057308, 0.3989422804014327],
        "mode": [0.0, 0.0],
        "variance": [1.4535209105296745, 0.09084505690810465],
        "cdf": [0.119235384740485, 0.9999994266968564],
        "icdf": [0.2513226937101483, 0.5182166947468948],
    },
    "Gumbel": {
        "log_prob": [-1.7038551569850031, -2.3566398878079187],
        "entropy": [2.270362845461478, 0.8840684843415875],
        "mean": [1.1544313298030657, 1.2886078324507664],
        "mode": [0.0, 1.0],
        "variance": [6.579736267392906, 0.4112335167120566],
        "cdf": [0.42286259956536293, 0.9514319929004537],
        "icdf": [-1.6680648904959121, 1.5154652165793612],
    },
    "Weibull": {
        "log_prob": [-1.2943368150878327, -3.231528450709065],
        "entropy": [1.4800872940856251, 0.41614962127813016],
        "mean": [1.8054905859018673, 0.6329117530286418],
        "mode": [0.9614997135382722, NAN],
        "variance": [1.5027611392557274, 0.8567088884132882],
        "cdf": [0.056439459342228826, 0.9542777081610151],
        "icdf": [0.44615105127383414, 0.6518335138806491],
    },
    "StudentT": {
        "log_prob": [-1.8478273972625134, -5.617751795542691],
        "entropy": [3.2241714275292357, 1.1546128900159762],
        "mean": [NAN, -1.0],
        "mode": [0.5, -1.0],
        "variance": [NAN, 1.25],
    },
    "Chi2": {
        "log_prob": [-0.46695213104170463, -1.7890894563095796],
        "entropy": [0.7837571104739339, 1.9017387274821986],
        "mean": [1.0, 2.5],
        "mode": [0.0, 0.5],
        "variance": [2.0, 5.0],
    },
}


def _t(values):
    return fg.tensor(values, dtype=fg.float64)


def _close(got, want, rtol=1e-10):
    got = np.asarray(got.tolist(), dtype=float)
    np.testing.assert_allclose(got, np.asarray(want, dtype=float), rtol=rtol, atol=1e-12)


def _make(name, params):
    return CLASSES[name](*[_t(p) for p in params])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_values_equal_torchs(name):
    d = _make(name, PARAMS[name])
    want = EXPECTED[name]
    _close(d.log_prob(_t(VALUE)), want["log_prob"])
    _close(d.entropy(), want["entropy"])
    for moment in ("mean", "mode", "variance"):
        _close(getattr(d, moment), want[moment])
    if "cdf" in want:
        _close(d.cdf(_t(VALUE)), want["cdf"])
        _close(d.icdf(_t([0.1, 0.7])), want["icdf"])


def _scalar(name, params, k):
    """log_prob + entropy (+ cdf + icdf), summed, as a function of parameter k."""
    d = _make(name, params)
    total = d.log_prob(_t(VALUE)).sum() + d.entropy().sum()
    if "cdf" in EXPECTED[name]:
        total = total + d.cdf(_t(VALUE)).sum() + d.icdf(_t([0.1, 0.7])).sum()
    return total


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gradients_equal_central_differences(name):
    params = PARAMS[name]
    leaves = [fg.tensor(p, dtype=fg.float64, requires_grad=True) for p in params]
    d = CLASSES[name](*leaves)
    total = d.log_prob(_t(VALUE)).sum() + d.entropy().sum()
    if "cdf" in EXPECTED[name]:
        total = total + d.cdf(_t(VALUE)).sum() + d.icdf(_t([0.1, 0.7])).sum()
    total.backward()
    h = 1e-6
    for k, leaf in enumerate(leaves):
        for i in range(len(params[k])):
            up = [list(p) for p in params]
            down = [list(p) for p in params]
            up[k][i] += h
            down[k][i] -= h
            numeric = (_scalar(name, up, k).item() - _scalar(name, down, k).item()) / (2 * h)
            assert abs(leaf.grad.numpy()[i] - numeric) < 1e-6 * max(1, abs(numeric)), (k, i)


# name -> (the distribution, its mean, its variance) for the draw tests
DRAWS = {
    "HalfNormal": (lambda: HalfNormal(_t(2.0)), 2 * math.sqrt(2 / math.pi), 4 * (1 - 2 / math.pi)),
    "Gumbel": (lambda: Gumbel(_t(1.0), _t(2.0)), 1 + 2 * 0.5772156649, (math.pi * 2) ** 2 / 6),
    "Weibull": (
        lambda: Weibull(_t(2.0), _t(1.5)),
        2 * math.gamma(1 + 1 / 1.5),
        4 * (math.gamma(1 + 2 / 1.5) - math.gamma(1 + 1 / 1.5) ** 2),
    ),
    "StudentT": (lambda: StudentT(_t(6.0), _t(1.0), _t(2.0)), 1.0, 4 * 6 / 4),
    "Chi2": (lambda: Chi2(_t(3.0)), 3.0, 6.0),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_draws_have_the_moments(name):
    make, mean, var = DRAWS[name]
    fg.manual_seed(0)
    x = make().sample((40000,)).numpy()
    assert abs(x.mean() - mean) < 5 * math.sqrt(var / x.size)
    assert abs(x.var() / var - 1) < 0.1


@pytest.mark.parametrize("make", [lambda: Cauchy(_t(1.0), _t(2.0)), lambda: HalfCauchy(_t(2.0))])
def test_cauchy_draws_have_the_quartiles(make):
    d = make()
    fg.manual_seed(1)
    x = d.sample((40000,))
    for q in (0.25, 0.5, 0.75):
        assert abs((x.numpy() <= d.icdf(_t(q)).item()).mean() - q) < 0.01
    assert (x.numpy() >= 0).all() or isinstance(d, Cauchy)


def test_rsample_reaches_the_parameters():
    scale = fg.tensor(2.0, dtype=fg.float64, requires_grad=True)
    fg.manual_seed(2)
    HalfNormal(scale).rsample((20000,)).mean().backward()
    assert abs(scale.grad.item() - math.sqrt(2 / math.pi)) < 0.02  # d mean / d scale
    loc = fg.tensor(0.5, dtype=fg.float64, requires_grad=True)
    scale = fg.tensor(1.5, dtype=fg.float64, requires_grad=True)
    Gumbel(loc, scale).rsample((20000,)).mean().backward()
    assert loc.grad.item() == pytest.approx(1.0)
    assert abs(scale.grad.item() - 0.5772156649) < 0.03
    df = fg.tensor(4.0, dtype=fg.float64, requires_grad=True)
    x = Chi2(df).rsample((20000,))
    x.mean().backward()
    assert abs(df.grad.item() - 1.0) < 0.03  # the mean is df


def test_shapes_expand_and_zero_d_parameters():
    assert Cauchy(0.0, 1.0).batch_shape == () and Chi2(3.0).batch_shape == ()
    assert StudentT(_t([[1.0], [2.0]]), _t([0.0, 1.0, 2.0])).batch_shape == (2, 3)
    d = Weibull(_t(2.0), _t([1.0, 3.0]))
    assert d.batch_shape == (2,) and d.sample((5,)).shape == (5, 2)
    e = d.expand((4, 2))
    assert e.batch_shape == (4, 2)
    _close(e.log_prob(_t(1.0))[3], d.log_prob(_t(1.0)))
    c = Chi2(_t([1.0, 2.0])).expand((3, 2))
    assert isinstance(c, Chi2) and c.df.shape == (3, 2)
    _close(c.df[2], [1.0, 2.0])
    s = StudentT(_t(3.0)).expand((2,))
    assert s.rsample().shape == (2,)


def test_support_boundaries():
    assert HalfNormal(_t(1.0)).log_prob(_t(0.0)).item() == pytest.approx(-0.2257913526)
    assert HalfCauchy(_t(1.0)).log_prob(_t(0.0)).item() == pytest.approx(-0.4515827053)
    off = HalfNormal(_t(1.0), validate_args=False).log_prob(_t(-1.0))
    assert off.item() == -INF
    assert HalfCauchy(_t(1.0), validate_args=False).log_prob(_t(-1.0)).item() == -INF
    assert Gumbel(0.0, 1.0).log_prob(_t(-800.0)).item() == -INF
    assert HalfNormal(_t(1.0)).cdf(_t(0.0)).item() == 0.0
    assert Weibull(_t(1.0), _t(2.0)).cdf(_t(INF)).item() == 1.0
    _close(StudentT(_t([0.5, 1.5, 3.0])).variance, [NAN, INF, 3.0])
    _close(StudentT(_t([0.5, 1.5, 3.0])).mean, [NAN, 0.0, 0.0])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: HalfNormal(_t(1.0)).log_prob(_t(-1.0)), "GreaterThanEq"),
        (lambda: Weibull(_t(1.0), _t(1.0)).log_prob(_t(0.0)), r"GreaterThan\(lower_bound=0.0\)"),
        (lambda: Chi2(_t(-1.0)), "Expected parameter df .* of distribution Chi2()"),
        (lambda: StudentT(_t(0.0)), "Expected parameter df .* of distribution Chi2()"),
        (lambda: Cauchy(_t(0.0), _t(-1.0)), "Expected parameter scale"),
        (lambda: Gumbel(_t(0.0), _t(0.0)), "Expected parameter scale"),
    ],
)
def test_validation_raises_torchs_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
