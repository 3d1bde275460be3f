"""IndependentTransform, ReshapeTransform, CatTransform, StackTransform and
CumulativeDistributionTransform (frontend/distribution_transforms_combined.py): values,
inverses and log |det Jacobian| against their parts applied by hand, event dims, domains,
caching and torch's errors; the constraints cat / stack they use."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distribution_transforms import (
    AffineTransform,
    CatTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    ReshapeTransform,
    SigmoidTransform,
    StackTransform,
)
from fusegrad.distributions import Normal, TransformedDistribution, constraints

X = np.array([[0.3, -1.2, 0.5], [2.0, 0.1, -3.0]])


def t64(values):
    return fg.tensor(np.asarray(values, dtype=np.float64))


def test_independent_transform():
    t = IndependentTransform(ExpTransform(), 1)
    y = t(t64(X))
    assert np.allclose(y.numpy(), np.exp(X)) and np.allclose(t.inv(y).numpy(), X)
    assert np.allclose(t.log_abs_det_jacobian(t64(X), y).numpy(), X.sum(-1))
    assert t.event_dim == 1 and t.domain.event_dim == 1 and t.bijective and t.sign == 1
    assert repr(t) == "IndependentTransform(ExpTransform(), 1)"
    with pytest.raises(ValueError, match="Too few dimensions on input"):
        t(t64(1.0))


def test_reshape_transform():
    t = ReshapeTransform((3,), (3, 1))
    y = t(t64(X))
    assert y.shape == (2, 3, 1) and t.inv(y).shape == (2, 3)
    assert t.log_abs_det_jacobian(t64(X), y).tolist() == [0.0, 0.0]
    assert t.forward_shape((5, 3)) == (5, 3, 1) and t.inverse_shape((5, 3, 1)) == (5, 3)
    with pytest.raises(ValueError, match="different numbers of elements"):
        ReshapeTransform((3,), (2, 2))
    with pytest.raises(ValueError, match="Shape mismatch"):
        t.forward_shape((5, 4))


def test_cat_transform():
    t = CatTransform([ExpTransform(), AffineTransform(1.0, 2.0)], dim=1, lengths=[1, 2])
    y = t(t64(X))
    want = np.concatenate([np.exp(X[:, :1]), 1 + 2 * X[:, 1:]], 1)
    assert np.allclose(y.numpy(), want) and np.allclose(t.inv(y).numpy(), X)
    want_log_det = np.concatenate([X[:, :1], np.full((2, 2), math.log(2))], 1)
    assert np.allclose(t.log_abs_det_jacobian(t64(X), y).numpy(), want_log_det)
    assert t.event_dim == 0 and t.length == 3 and t.bijective
    check = t.codomain.check(t64([[1.0, -5.0, 0.0], [-1.0, 0.0, 0.0]]))
    assert check.tolist() == [[True, True, True], [False, True, True]]
    with pytest.raises(AssertionError, match=r"x.size\(1\) = 2 must equal length 3"):
        t.log_abs_det_jacobian(t64(X[:, :2]), t64(X[:, :2]))
    # pieces of a batch dim, each with a vector event: their log |det|s joined (torch's)
    t0 = CatTransform([IndependentTransform(ExpTransform(), 1)] * 2, dim=0, lengths=[1, 1])
    assert t0.event_dim == 1
    assert np.allclose(t0.log_abs_det_jacobian(t64(X), t0(t64(X))).numpy(), X.sum(-1))


def test_stack_transform():
    t = StackTransform([ExpTransform(), SigmoidTransform()], dim=0)
    y = t(t64(X))
    want = np.stack([np.exp(X[0]), 1 / (1 + np.exp(-X[1]))])
    assert np.allclose(y.numpy(), want) and np.allclose(t.inv(y).numpy(), X, rtol=1e-12)
    log_sig = -np.logaddexp(0, -X[1]) - np.logaddexp(0, X[1])
    assert np.allclose(t.log_abs_det_jacobian(t64(X), y).numpy(), np.stack([X[0], log_sig]))
    assert t.codomain.check(y).tolist() == [[True] * 3, [True] * 3]
    assert t.domain.event_dim == 0 and t.bijective
    with pytest.raises(AssertionError, match="must equal len"):
        t(t64(X.T))


def test_cumulative_distribution_transform():
    d = Normal(t64(0.5), t64(2.0))
    t = CumulativeDistributionTransform(d)
    x = t64([-1.0, 0.5, 3.0])
    y = t(x)
    want = [0.5 * (1 + math.erf((v - 0.5) / (2.0 * math.sqrt(2)))) for v in (-1.0, 0.5, 3.0)]
    assert np.allclose(y.numpy(), want) and np.allclose(t.inv(y).numpy(), x.numpy())
    assert np.allclose(t.log_abs_det_jacobian(x, y).numpy(), d.log_prob(x).numpy())
    assert t.domain is constraints.real and t.codomain is constraints.unit_interval
    # a normal through its own cdf is uniform on (0, 1): density 1
    u = TransformedDistribution(d, [t])
    assert np.allclose(u.log_prob(t64([0.1, 0.7])).numpy(), 0.0, atol=1e-12)


def test_with_cache_keeps_the_parts():
    t = CatTransform([ExpTransform(), ExpTransform()], dim=0).with_cache(1)
    x = t64([0.0, 1.0])
    y = t(x)
    assert t.inv(y) is x and all(p._cache_size == 1 for p in t.transforms)
    s = StackTransform([ExpTransform()], dim=0).with_cache(1)
    assert s.with_cache(1) is s
