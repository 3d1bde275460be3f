"""MultivariateNormal, LowRankMultivariateNormal (against the dense one and numpy) and the
Cholesky factor they take (fg.linalg.cholesky):
values and gradients against torch 2.14.1's (literals), draws' covariance within tolerant
bounds, shapes, and torch's errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distributions import LowRankMultivariateNormal, MultivariateNormal, kl_divergence


def _t(values, grad=False):
    return fg.tensor(values, dtype=fg.float64, requires_grad=grad)


def test_cholesky_value_and_gradient_equal_torchs():
    a = _t([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]], grad=True)
    w = _t([[1.0, 2.0, -1.0], [0.5, -0.3, 0.7], [1.1, 0.2, -0.4]])
    lower = fg.linalg.cholesky(a)
    (lower * w).sum().backward()
    want_l = [
        [1.4142135623730951, 0.0, 0.0],
        [0.21213203435596423, 0.9772410142846032, 0.0],
        [0.07071067811865475, 0.18930846873576085, 1.2079579064126869],
    ]
    want_g = [
        [0.30515415233339943, 0.19698598795616254, 0.3770268013289989],
        [0.19698598795616254, -0.1795294232561142, 0.13440241657782995],
        [0.37702680132899885, 0.13440241657782995, -0.1655686832614447],
    ]
    assert np.allclose(lower.tolist(), want_l, rtol=1e-13)
    assert np.allclose(a.grad.tolist(), want_g, rtol=1e-12)


def test_cholesky_of_a_matrix_that_is_not_positive_definite_raises():
    with pytest.raises(RuntimeError, match="not positive-definite"):
        fg.linalg.cholesky(_t([[1.0, 2.0], [2.0, 1.0]]))


def test_log_prob_entropy_and_gradients_equal_torchs():
    loc = _t([1.0, -1.0], grad=True)
    cov = _t([[2.0, 0.3], [0.3, 1.0]], grad=True)
    m = MultivariateNormal(loc, cov)
    lp = m.log_prob(_t([0.3, 0.2]))
    lp.backward()
    assert math.isclose(lp.item(), -3.175564813093065, rel_tol=1e-13)
    assert math.isclose(m.entropy().item(), 3.161428687438615, rel_tol=1e-13)
    assert np.allclose(loc.grad.tolist(), [-0.5549738219895286, 1.3664921465968585], rtol=1e-12)
    want = [[-0.10778213316520933, -0.3006496532441543], [-0.3006496532441543, 0.4100901839313614]]
    assert np.allclose(cov.grad.tolist(), want, rtol=1e-12)
    loc.grad = cov.grad = None
    p = MultivariateNormal(loc, precision_matrix=cov)
    lp = p.log_prob(_t([0.3, 0.2]))
    lp.backward()
    assert math.isclose(lp.item(), -2.472325445380076, rel_tol=1e-13)
    assert np.allclose(loc.grad.tolist(), [-1.04, 0.99], rtol=1e-12)
    want = [[0.01678010471204196, 0.3414659685863874], [0.3414659685863874, -0.19643979057591618]]
    assert np.allclose(cov.grad.tolist(), want, rtol=1e-12)
    q = MultivariateNormal(_t([0.5, 0.0]), scale_tril=_t([[1.0, 0.0], [0.4, 2.0]]))
    assert math.isclose(kl_divergence(m, q).item(), 0.8095955595306761, rel_tol=1e-12)


def test_the_three_parameterizations_agree():
    cov = _t([[2.0, 0.3], [0.3, 1.0]])
    lower = np.linalg.cholesky(np.array(cov.tolist()))
    prec = np.linalg.inv(np.array(cov.tolist()))
    by_cov = MultivariateNormal(_t([0.0, 0.0]), cov)
    by_tril = MultivariateNormal(_t([0.0, 0.0]), scale_tril=_t(lower.tolist()))
    by_prec = MultivariateNormal(_t([0.0, 0.0]), precision_matrix=_t(prec.tolist()))
    x = _t([[0.3, -0.2], [1.0, 2.0]])
    for d in (by_tril, by_prec):
        assert np.allclose(d.log_prob(x).tolist(), by_cov.log_prob(x).tolist(), rtol=1e-12)
        assert np.allclose(d.covariance_matrix.tolist(), cov.tolist(), rtol=1e-12)
        assert np.allclose(d.precision_matrix.tolist(), prec.tolist(), rtol=1e-12)
        assert np.allclose(d.scale_tril.tolist(), lower.tolist(), rtol=1e-12)
    assert np.allclose(by_cov.variance.tolist(), [2.0, 1.0])


def test_batch_shapes_broadcast():
    m = MultivariateNormal(
        _t([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]), scale_tril=fg.eye(2, dtype=fg.float64)
    )
    assert m.batch_shape == (3,) and m.event_shape == (2,)
    assert m.sample((4,)).shape == (4, 3, 2) and m.log_prob(_t([0.0, 1.0])).shape == (3,)
    assert m.entropy().shape == (3,) and m.scale_tril.shape == (3, 2, 2)
    e = m.expand((5, 3))
    assert e.batch_shape == (5, 3) and e.log_prob(_t([0.0, 1.0])).shape == (5, 3)
    both = MultivariateNormal(
        _t([0.0, 0.0]), _t([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 2.0]]])
    )
    assert both.batch_shape == (2,) and both.loc.shape == (2, 2)


def test_draws_have_the_covariance_and_rsample_reaches_the_parameters():
    fg.manual_seed(0)
    cov = np.array([[2.0, 0.6], [0.6, 1.0]])
    loc = _t([1.0, -1.0], grad=True)
    tril = _t(np.linalg.cholesky(cov).tolist(), grad=True)
    x = MultivariateNormal(loc, scale_tril=tril).rsample((40000,))
    got = x.detach().numpy()
    assert np.allclose(got.mean(0), [1.0, -1.0], atol=0.03)
    assert np.allclose(np.cov(got.T), cov, atol=0.05)
    x.mean(0).sum().backward()
    assert np.allclose(loc.grad.tolist(), [1.0, 1.0])
    # d mean / d L = mean of eps (a row per output), near 0: torch's matmul gradient, the
    # upper entries included
    assert np.abs(np.array(tril.grad.tolist())).max() < 0.03


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: MultivariateNormal(_t([0.0, 0.0])), "Exactly one of covariance_matrix"),
        (
            lambda: MultivariateNormal(
                _t([0.0, 0.0]),
                _t([[1.0, 0.0], [0.0, 1.0]]),
                scale_tril=_t([[1.0, 0.0], [0.0, 1.0]]),
            ),
            "Exactly one of covariance_matrix",
        ),
        (lambda: MultivariateNormal(_t(0.0), _t([[1.0]])), "loc must be at least one-dimensional."),
        (
            lambda: MultivariateNormal(_t([0.0, 0.0]), _t([1.0, 1.0])),
            "covariance_matrix must be at least two-dimensional",
        ),
        (
            lambda: MultivariateNormal(_t([0.0, 0.0]), precision_matrix=_t([1.0, 1.0])),
            "precision_matrix must be at least two-dimensional",
        ),
        (
            lambda: MultivariateNormal(_t([0.0, 0.0]), scale_tril=_t([1.0, 1.0])),
            "scale_tril matrix must be at least two-dimensional",
        ),
        (
            lambda: MultivariateNormal(_t([0.0, 0.0]), _t([[1.0, 2.0], [2.0, 1.0]])),
            "to satisfy the constraint PositiveDefinite()",
        ),
        (
            lambda: MultivariateNormal(_t([0.0, 0.0]), scale_tril=_t([[1.0, 1.0], [0.0, 1.0]])),
            "to satisfy the constraint LowerCholesky()",
        ),
        (
            lambda: MultivariateNormal(
                _t([0.0, 0.0]), scale_tril=_t([[1.0, 0.0], [0.0, 1.0]])
            ).log_prob(_t([0.0])),
            "The right-most size of value must match event_shape",
        ),
    ],
)
def test_torchs_value_errors(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert message in str(info.value)


# ---------------------------------------------------------------- LowRankMultivariateNormal
def _lowrank_numpy():
    loc = np.array([0.1, -0.2, 0.3])
    w = np.array([[1.0, 0.5], [0.2, -0.3], [0.0, 0.4]])
    d = np.array([0.5, 1.5, 2.0])
    return loc, w, d


def test_lowrank_equals_the_dense_normal():
    loc, w, d = _lowrank_numpy()
    cov = w @ w.T + np.diag(d)
    x = np.array([0.3, 0.4, -1.0])
    lr = LowRankMultivariateNormal(_t(loc.tolist()), _t(w.tolist()), _t(d.tolist()))
    diff = x - loc
    want = -0.5 * (3 * math.log(2 * math.pi) + np.linalg.slogdet(cov)[1])
    want -= 0.5 * diff @ np.linalg.solve(cov, diff)
    assert math.isclose(lr.log_prob(_t(x.tolist())).item(), want, rel_tol=1e-12)
    assert math.isclose(lr.log_prob(_t(x.tolist())).item(), -4.161044695189645, rel_tol=1e-12)
    assert math.isclose(lr.entropy().item(), 5.157934456371859, rel_tol=1e-12)  # torch's
    assert np.allclose(lr.covariance_matrix.numpy(), cov, rtol=1e-14)
    assert np.allclose(lr.precision_matrix.numpy(), np.linalg.inv(cov), rtol=1e-12)
    assert np.allclose(lr.scale_tril.numpy(), np.linalg.cholesky(cov), rtol=1e-12)
    assert np.allclose(lr.variance.numpy(), np.diag(cov), rtol=1e-14)
    e = lr.expand((4, 2))
    assert e.batch_shape == (4, 2) and e.log_prob(_t(x.tolist())).shape == (4, 2)


def test_lowrank_gradients_equal_the_dense_normals():
    loc, w, d = _lowrank_numpy()
    x = _t([0.3, 0.4, -1.0])
    params = [_t(v.tolist(), grad=True) for v in (loc, w, d)]
    LowRankMultivariateNormal(*params).log_prob(x).backward()
    dense = [_t(v.tolist(), grad=True) for v in (loc, w, d)]
    cov = dense[1] @ dense[1].mT + dense[2].diag_embed()
    MultivariateNormal(dense[0], covariance_matrix=cov).log_prob(x).backward()
    for mine, theirs in zip(params, dense):
        assert np.allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_lowrank_draws_and_errors():
    loc, w, d = _lowrank_numpy()
    fg.manual_seed(0)
    lr = LowRankMultivariateNormal(_t(loc.tolist()), _t(w.tolist()), _t(d.tolist()))
    x = lr.sample((40000,)).numpy()
    assert np.allclose(x.mean(0), loc, atol=0.05)
    assert np.allclose(np.cov(x.T), w @ w.T + np.diag(d), atol=0.1)
    g = _t(w.tolist(), grad=True)
    LowRankMultivariateNormal(_t(loc.tolist()), g, _t(d.tolist())).rsample((3,)).sum().backward()
    assert g.grad.shape == (3, 2)
    with pytest.raises(ValueError, match="cov_factor must be a batch of matrices with shape 3 x m"):
        LowRankMultivariateNormal(_t(loc.tolist()), _t([[1.0]]), _t(d.tolist()))
    with pytest.raises(ValueError, match=r"cov_diag must be a batch of vectors with shape \(3,\)"):
        LowRankMultivariateNormal(_t(loc.tolist()), _t(w.tolist()), _t([1.0]))
    with pytest.raises(ValueError, match="cov_diag"):
        LowRankMultivariateNormal(_t(loc.tolist()), _t(w.tolist()), _t([1.0, -1.0, 1.0]))
