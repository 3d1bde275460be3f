"""LKJCholesky and Wishart (frontend/distributions_matrix.py): log_prob and entropy against
closed forms (numpy) and torch 2.14.1's values (literals), draws' moments and structure,
Wishart's reparameterized gradients, shapes and errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distributions import LKJCholesky, Wishart

COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]])
X = np.array([[3.0, 0.5, 0.2], [0.5, 2.0, -0.3], [0.2, -0.3, 4.0]])


def _t(values, grad=False):
    return fg.tensor(np.asarray(values, dtype=np.float64), requires_grad=grad)


def _wishart_log_pdf(x: np.ndarray, df: float, cov: np.ndarray) -> float:
    """The Wishart density's log, from its definition."""
    p = cov.shape[0]
    log_mvgamma = p * (p - 1) / 4 * math.log(math.pi)
    log_mvgamma += sum(math.lgamma(df / 2 - j / 2) for j in range(p))
    return (
        (df - p - 1) / 2 * np.linalg.slogdet(x)[1]
        - np.trace(np.linalg.solve(cov, x)) / 2
        - df * p / 2 * math.log(2)
        - df / 2 * np.linalg.slogdet(cov)[1]
        - log_mvgamma
    )


def test_wishart_log_prob_and_entropy():
    d = Wishart(_t([3.5, 5.0]), covariance_matrix=_t(COV))
    got = d.log_prob(_t(X)).tolist()
    want = [_wishart_log_pdf(X, df, COV) for df in (3.5, 5.0)]
    assert np.allclose(got, want, rtol=1e-12)
    assert np.allclose(got, [-11.138884627047476, -11.272352235670954], rtol=1e-12)  # torch's
    assert np.allclose(d.entropy().tolist(), [12.930056913218422, 15.008594567109924], rtol=1e-12)
    assert np.allclose(d.mean.numpy(), np.array([3.5, 5.0])[:, None, None] * COV)
    assert np.allclose(d.precision_matrix.numpy(), np.linalg.inv(COV), rtol=1e-12)
    assert np.allclose(d.scale_tril.numpy(), np.linalg.cholesky(COV), rtol=1e-12)
    assert np.isnan(d.mode.numpy()[0]).all() and np.allclose(d.mode.numpy()[1], COV)
    var = np.array([3.5, 5.0])[:, None, None] * (COV**2 + np.outer(np.diag(COV), np.diag(COV)))
    assert np.allclose(d.variance.numpy(), var)
    # the three parameterizations agree
    by_precision = Wishart(_t(3.5), precision_matrix=_t(np.linalg.inv(COV)))
    by_tril = Wishart(_t(3.5), scale_tril=_t(np.linalg.cholesky(COV)))
    for other in (by_precision, by_tril):
        assert math.isclose(other.log_prob(_t(X)).item(), want[0], rel_tol=1e-10)


def test_wishart_draws_and_gradients():
    fg.manual_seed(0)
    lower = _t([[1.0, 0.0], [0.3, 0.8]], grad=True)
    df = _t(5.0, grad=True)
    x = Wishart(df, scale_tril=lower).rsample((20000,))
    assert x.shape == (20000, 2, 2)
    cov = np.array([[1.0, 0.3], [0.3, 0.73]])
    assert np.allclose(x.mean(0).detach().numpy(), 5 * cov, rtol=0.03)
    x.mean(0).sum().backward()
    # E[X] = df L L^T: d/ddf of its sum is sum(L L^T), d/dL is 2 df (ones @ L)
    assert abs(df.grad.item() - cov.sum()) < 0.05
    want = 2 * 5 * np.ones((2, 2)) @ np.array([[1.0, 0.0], [0.3, 0.8]])
    assert np.allclose(lower.grad.numpy(), want, rtol=0.03)
    assert np.all(np.linalg.eigvalsh(x.detach().numpy()) > 0)


def test_wishart_shapes_and_errors():
    d = Wishart(4.0, covariance_matrix=_t(np.stack([COV, 2 * COV])))
    assert d.batch_shape == (2,) and d.event_shape == (3, 3)
    e = d.expand((5, 2))
    assert e.batch_shape == (5, 2) and e.rsample((3,)).shape == (3, 5, 2, 3, 3)
    with pytest.raises(ValueError, match="expected to be greater than ndim - 1 = 2"):
        Wishart(_t(1.5), covariance_matrix=_t(COV))
    with pytest.warns(UserWarning, match="Low df values detected"):
        Wishart(_t(2.5), covariance_matrix=_t(COV))
    with pytest.raises(AssertionError, match="Exactly one of"):
        Wishart(_t(4.0))
    with pytest.raises(ValueError, match="PositiveDefinite"):
        Wishart(_t(4.0), covariance_matrix=_t(-COV))
    with pytest.raises(ValueError, match="PositiveDefinite"):
        Wishart(_t(4.0), covariance_matrix=_t(COV)).log_prob(_t(-X))


def test_lkj_log_prob():
    lower = np.array(
        [
            [1.0, 0.0, 0.0],
            [0.2913126124515909, 0.9566279119002483, 0.0],
            [-0.8336546070121552, 0.2552209076091072, 0.48977779096912166],
        ]
    )
    d = LKJCholesky(3, _t([0.5, 1.0, 3.0]))
    want = [-1.817220768417009, -1.6406533610647953, -3.104614437063838]  # torch's
    assert np.allclose(d.log_prob(_t(lower)).tolist(), want, rtol=1e-12)
    # dim 2: L = [[1, 0], [r, sqrt(1 - r^2)]] has one free entry r, and log_prob is a
    # density in r (proportional to (1 - r^2)^(eta - 3/2)): it integrates to one over (-1, 1)
    eta = 2.0
    r = np.linspace(-0.999999, 0.999999, 200001)
    mats = np.zeros((r.size, 2, 2))
    mats[:, 0, 0], mats[:, 1, 0], mats[:, 1, 1] = 1.0, r, np.sqrt(1 - r**2)
    density = np.exp(LKJCholesky(2, _t(eta)).log_prob(_t(mats)).numpy())
    integral = ((density[1:] + density[:-1]) / 2 * np.diff(r)).sum()  # the trapezoid rule
    assert abs(integral - 1) < 1e-4


def test_lkj_draws():
    fg.manual_seed(1)
    y = LKJCholesky(3, 2.0).sample((20000,)).numpy()
    assert np.allclose(np.triu(y, 1), 0) and (np.diagonal(y, 0, -2, -1) > 0).all()
    assert np.allclose((y**2).sum(-1), 1)
    corr = y @ np.swapaxes(y, -1, -2)
    # the first pair's correlation: a Beta(eta - 1 + d/2) on (-1, 1), variance 1/6 here
    # (torch's onion sampler gives the later rows' pairs a wider spread, as this one)
    assert abs(corr[:, 1, 0].mean()) < 0.02 and abs(corr[:, 1, 0].var() - 1 / 6) < 0.01
    d = LKJCholesky(3, _t([1.0, 2.0]))
    assert d.batch_shape == (2,) and d.event_shape == (3, 3)
    assert d.expand((4, 2)).sample().shape == (4, 2, 3, 3)
    with pytest.raises(ValueError, match="Expected dim to be an integer greater than or equal"):
        LKJCholesky(1)
    with pytest.raises(ValueError, match="concentration"):
        LKJCholesky(3, _t(-1.0))
    with pytest.raises(ValueError, match="CorrCholesky"):
        LKJCholesky(2).log_prob(_t([[1.0, 0.0], [0.5, 0.5]]))
