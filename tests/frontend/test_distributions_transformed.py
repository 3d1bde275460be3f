"""TransformedDistribution, LogisticNormal, RelaxedBernoulli, RelaxedOneHotCategorical and
MixtureSameFamily (frontend/distributions_transformed.py): log_prob against numpy
formulas and torch 2.14.1's values (literals, float64), gradients against central
differences, seeded draws within tolerant bounds, shapes, expand, reprs and errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distribution_transforms import (
    AffineTransform,
    ExpTransform,
    SoftmaxTransform,
    TanhTransform,
)
from fusegrad.distributions import (
    Categorical,
    ExpRelaxedCategorical,
    Independent,
    LogisticNormal,
    LogitRelaxedBernoulli,
    MixtureSameFamily,
    MultivariateNormal,
    Normal,
    RelaxedBernoulli,
    RelaxedOneHotCategorical,
    TransformedDistribution,
)


def t64(values, **kw):
    return fg.tensor(np.asarray(values, dtype=np.float64), **kw)


def normal_logpdf(x, mu, sd):
    return -((x - mu) ** 2) / (2 * sd**2) - np.log(sd) - 0.5 * np.log(2 * np.pi)


MU, SD, ACTION = [0.2, -0.5], [0.7, 1.3], [0.3, -0.9]


def sac_log_prob(mu, sd, a):
    u = np.arctanh(a)
    return normal_logpdf(u, mu, sd) - 2 * (np.log(2) - u - np.logaddexp(0, -2 * u))


def test_tanh_normal_log_prob_and_gradients():
    mu, sd = t64(MU, requires_grad=True), t64(SD, requires_grad=True)
    d = TransformedDistribution(Normal(mu, sd), [TanhTransform(cache_size=1)])
    assert (d.batch_shape, d.event_shape, d.has_rsample) == ((2,), (), True)
    assert repr(d) == "TransformedDistribution()"
    assert repr(d.support) == "Interval(lower_bound=-1.0, upper_bound=1.0)"
    lp = d.log_prob(t64(ACTION))
    # torch 2.14.1's
    np.testing.assert_allclose(lp.tolist(), [-0.4801922401057257, 0.19978026242597968], rtol=1e-12)
    lp.sum().backward()
    np.testing.assert_allclose(mu.grad.tolist(), [0.22350939633288117, -0.5752778044871125])
    np.testing.assert_allclose(sd.grad.tolist(), [-1.3936019133970663, -0.33900285119460294])
    m, s, a = np.array(MU), np.array(SD), np.array(ACTION)
    np.testing.assert_allclose(lp.numpy(), sac_log_prob(m, s, a), rtol=1e-12)
    h = 1e-6
    for i in range(2):
        e = np.eye(2)[i] * h
        numeric = (sac_log_prob(m + e, s, a) - sac_log_prob(m - e, s, a)) / (2 * h)
        assert mu.grad.tolist()[i] == pytest.approx(numeric[i], rel=1e-6)


def test_sac_rsample_then_log_prob():
    # the policy loss of SAC: rsample an action, then its log_prob, through the cache
    fg.manual_seed(0)
    mu, sd = t64(MU, requires_grad=True), t64(SD, requires_grad=True)
    d = TransformedDistribution(Normal(mu, sd), [TanhTransform(cache_size=1)])
    action = d.rsample()
    lp = d.log_prob(action)
    # the cached pre-tanh draw u: the same value as inverting through atanh
    u = np.arctanh(action.detach().numpy())
    np.testing.assert_allclose(
        lp.detach().numpy(), sac_log_prob(np.array(MU), np.array(SD), np.tanh(u)), rtol=1e-9
    )
    # d/dmu of log_prob(tanh(mu + eps * sd)) with eps fixed: central differences
    eps = (u - np.array(MU)) / np.array(SD)

    def loss(m, s):
        return (sac_log_prob(m, s, np.tanh(m + eps * s)) + np.tanh(m + eps * s)).sum()

    (lp.sum() + action.sum()).backward()
    h = 1e-6
    for i in range(2):
        e = np.eye(2)[i] * h
        m, s = np.array(MU), np.array(SD)
        assert mu.grad.tolist()[i] == pytest.approx(
            (loss(m + e, s) - loss(m - e, s)) / (2 * h), rel=1e-5, abs=1e-8
        )
        assert sd.grad.tolist()[i] == pytest.approx(
            (loss(m, s + e) - loss(m, s - e)) / (2 * h), rel=1e-5, abs=1e-8
        )


def test_draws_shapes_and_moments():
    fg.manual_seed(1)
    d = TransformedDistribution(Normal(0.0, 1.0), [AffineTransform(1.0, 2.0), ExpTransform()])
    x = d.sample((20000,))
    assert x.shape == (20000,) and not x.requires_grad
    logs = np.log(x.numpy())
    assert abs(logs.mean() - 1.0) < 0.05 and abs(logs.std() - 2.0) < 0.05
    # a LogNormal(1, 2) density
    v = np.array([0.5, 3.0])
    expected = normal_logpdf(np.log(v), 1.0, 2.0) - np.log(v)
    np.testing.assert_allclose(d.log_prob(t64(v)).numpy(), expected, rtol=1e-12)
    assert d.cdf(t64(1.0)).item() == pytest.approx(0.5 * (1 + math.erf(-1 / (2 * math.sqrt(2)))))
    # a decreasing map flips the cdf
    neg = TransformedDistribution(Normal(0.0, 1.0), AffineTransform(0.0, -1.0))
    assert neg.cdf(t64(0.5)).item() == pytest.approx(1 - 0.5 * (1 + math.erf(-0.5 / math.sqrt(2))))
    assert neg.icdf(t64(0.25)).item() == pytest.approx(-0.6744897501960818)  # torch 2.14.1


def test_event_dims_and_expand():
    base = Independent(Normal(t64(MU), t64(SD)), 1)
    d = TransformedDistribution(base, [TanhTransform()])
    assert (d.batch_shape, d.event_shape) == ((), (2,))
    assert (
        repr(d.support) == "IndependentConstraint(Interval(lower_bound=-1.0, upper_bound=1.0), 1)"
    )
    assert d.log_prob(t64(ACTION)).item() == pytest.approx(-0.2804119776797458, rel=1e-12)
    e = d.expand((3,))
    assert (e.batch_shape, e.event_shape, e.rsample().shape) == ((3,), (2,), (3, 2))
    assert e.log_prob(t64(ACTION)).shape == (3,)
    # an event-dim-1 affine map over a batch of normals makes the event
    a = TransformedDistribution(
        Normal(t64(np.zeros(3)), 1.0), AffineTransform(0.0, t64([1.0, 2.0, 4.0]), event_dim=1)
    )
    assert (a.batch_shape, a.event_shape) == ((), (3,))
    expected = normal_logpdf(np.array(X3), 0, np.array([1.0, 2.0, 4.0])).sum()
    assert a.log_prob(t64(X3)).item() == pytest.approx(expected, rel=1e-12)
    # a MultivariateNormal's event passes through an elementwise transform
    mvn = MultivariateNormal(t64(np.zeros(2)), t64(np.eye(2)))
    assert TransformedDistribution(mvn, ExpTransform()).event_shape == (2,)


X3 = [0.5, -1.0, 3.0]


def test_transformed_errors():
    with pytest.raises(ValueError, match="transforms must be a Transform or list, but was 3"):
        TransformedDistribution(Normal(0.0, 1.0), 3)
    with pytest.raises(ValueError, match="transforms must be a Transform or a list of Transforms"):
        TransformedDistribution(Normal(0.0, 1.0), [3])
    with pytest.raises(ValueError, match=r"needs to have shape with size at least 1, but got \(\)"):
        TransformedDistribution(Normal(0.0, 1.0), [SoftmaxTransform()])
    d = TransformedDistribution(Normal(0.0, 1.0), TanhTransform())
    with pytest.raises(ValueError, match="within the support"):
        d.log_prob(t64(1.5))


def test_relaxed_bernoulli():
    temp = t64(0.5)
    d = RelaxedBernoulli(temp, probs=t64([0.3, 0.9]))
    assert (d.batch_shape, d.event_shape, repr(d)) == ((2,), (), "RelaxedBernoulli()")
    assert d.temperature is temp and d.support.upper_bound == 1.0
    lp = d.log_prob(t64([0.2, 0.7]))
    np.testing.assert_allclose(lp.tolist(), [-0.25279481345134047, -1.2196124803422075], rtol=1e-12)
    # the formula: log t + l - t*z - 2 log1p(exp(l - t*z)), z = logit(y), minus log|dy/dz|
    y, p, t = np.array([0.2, 0.7]), np.array([0.3, 0.9]), 0.5
    z, logits = np.log(y / (1 - y)), np.log(p / (1 - p))
    diff = logits - t * z
    expected = np.log(t) + diff - 2 * np.log1p(np.exp(diff)) - np.log(y * (1 - y))
    np.testing.assert_allclose(lp.numpy(), expected, rtol=1e-12)
    fg.manual_seed(2)
    x = RelaxedBernoulli(t64(0.1), probs=t64([0.3, 0.9])).sample((20000,)).numpy()
    assert ((x > 0) & (x < 1)).all()
    np.testing.assert_allclose((x > 0.5).mean(0), [0.3, 0.9], atol=0.02)
    assert d.expand((4, 2)).batch_shape == (4, 2)
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified"):
        RelaxedBernoulli(temp)
    with pytest.raises(ValueError, match="Expected parameter probs"):
        RelaxedBernoulli(temp, probs=t64(1.5))


def test_relaxed_bernoulli_rsample_gradient():
    # d/dlogit of sigmoid((logit(u) + l) / t) at the kept draw: y (1 - y) / t
    logits = t64([0.4, -1.0], requires_grad=True)
    fg.manual_seed(3)
    y = RelaxedBernoulli(t64(0.7), logits=logits).rsample()
    y.sum().backward()
    yy = y.detach().numpy()
    np.testing.assert_allclose(logits.grad.numpy(), yy * (1 - yy) / 0.7, rtol=1e-9)
    assert LogitRelaxedBernoulli(t64(0.5), logits=t64([0.0, 1.0])).log_prob(
        t64([0.0, 0.0])
    ).tolist() == pytest.approx([-2.0794415416798357, -2.319670555596391])


def test_relaxed_one_hot_categorical():
    d = RelaxedOneHotCategorical(t64(0.5), probs=t64([0.3, 0.7]))
    assert (d.batch_shape, d.event_shape, repr(d)) == ((), (2,), "RelaxedOneHotCategorical()")
    lp = d.log_prob(t64([0.2, 0.8]))
    assert lp.item() == pytest.approx(-0.2527948134513409, rel=1e-12)
    # the Concrete density: (K-1)! t^(K-1) prod(p_i y_i^(-t-1)) / (sum p_i y_i^-t)^K
    p, y, t, k = np.array([0.3, 0.7]), np.array([0.2, 0.8]), 0.5, 2
    expected = (
        math.lgamma(k)
        + (k - 1) * np.log(t)
        + np.sum(np.log(p) - (t + 1) * np.log(y))
        - k * np.log(np.sum(p * y**-t))
    )
    assert lp.item() == pytest.approx(expected, rel=1e-12)
    fg.manual_seed(4)
    x = RelaxedOneHotCategorical(t64(0.1), logits=t64(np.log([[0.2, 0.3, 0.5]]))).sample((20000,))
    assert x.shape == (20000, 1, 3)
    xs = x.numpy()
    np.testing.assert_allclose(xs.sum(-1), 1.0, rtol=1e-9)
    counts = np.bincount(xs[:, 0].argmax(-1), minlength=3) / 20000
    np.testing.assert_allclose(counts, [0.2, 0.3, 0.5], atol=0.02)
    e = d.expand((3,))
    assert (e.batch_shape, e.event_shape, e.rsample().shape) == ((3,), (2,), (3, 2))
    base = ExpRelaxedCategorical(t64(1.0), probs=t64([0.5, 0.5]))
    assert base.log_prob(t64([0.5, 0.5]).log()).item() == pytest.approx(-1.3862943611198906)


def test_relaxed_one_hot_rsample_gradient():
    # y = softmax((logits + g) / t): dy_0/dlogit_j = y_0 (delta_0j - y_j) / t
    logits = t64([0.1, 0.5, -0.3], requires_grad=True)
    fg.manual_seed(5)
    y = RelaxedOneHotCategorical(t64(0.8), logits=logits).rsample()
    y[0].backward()
    yy = y.detach().numpy()
    np.testing.assert_allclose(
        logits.grad.numpy(), yy[0] * (np.eye(3)[0] - yy) / 0.8, rtol=1e-9, atol=1e-15
    )


def gmm():
    mix = Categorical(t64([0.3, 0.7]))
    return MixtureSameFamily(mix, Normal(t64([-1.0, 1.0]), t64([0.5, 2.0])))


def test_mixture_same_family_values():
    g = gmm()
    assert (g.batch_shape, g.event_shape, g.has_rsample) == ((), (), False)
    x = np.array([0.0, 1.5])
    lp = g.log_prob(t64(x))
    np.testing.assert_allclose(lp.tolist(), [-1.8603545637824852, -2.0000040663824863], rtol=1e-12)
    expected = np.log(
        0.3 * np.exp(normal_logpdf(x, -1, 0.5)) + 0.7 * np.exp(normal_logpdf(x, 1, 2))
    )
    np.testing.assert_allclose(lp.numpy(), expected, rtol=1e-12)
    assert g.mean.item() == pytest.approx(0.4)
    assert g.variance.item() == pytest.approx(3.715)
    assert g.cdf(t64(0.5)).item() == pytest.approx(0.5805006026124644)
    assert repr(g) == (
        "MixtureSameFamily(\n  Categorical(probs: (2,), logits: (2,)),\n"
        "  Normal(loc: (2,), scale: (2,)))"
    )
    fg.manual_seed(6)
    s = g.sample((40000,)).numpy()
    assert s.shape == (40000,)
    assert abs(s.mean() - 0.4) < 0.05 and abs(s.var() - 3.715) < 0.1


def test_mixture_gradient_and_batches():
    loc = t64([-1.0, 1.0], requires_grad=True)
    g = MixtureSameFamily(Categorical(t64([0.3, 0.7])), Normal(loc, t64([0.5, 2.0])))
    g.log_prob(t64(0.2)).backward()

    def f(m):
        return np.log(
            0.3 * np.exp(normal_logpdf(0.2, m[0], 0.5))
            + 0.7 * np.exp(normal_logpdf(0.2, m[1], 2.0))
        )

    h = 1e-6
    for i in range(2):
        e = np.eye(2)[i] * h
        numeric = (f(np.array([-1.0, 1.0]) + e) - f(np.array([-1.0, 1.0]) - e)) / (2 * h)
        assert loc.grad.tolist()[i] == pytest.approx(numeric, rel=1e-6)
    # a batch of 3 mixtures of 2 diagonal normals over vectors of 4
    comp = Independent(Normal(t64(np.zeros((3, 2, 4))), 1.0), 1)
    b = MixtureSameFamily(Categorical(logits=t64(np.zeros((3, 2)))), comp)
    assert (b.batch_shape, b.event_shape) == ((3,), (4,))
    assert b.sample((5,)).shape == (5, 3, 4) and b.log_prob(t64(np.zeros(4))).shape == (3,)
    assert b.mean.shape == (3, 4) and b.variance.shape == (3, 4)
    assert b.log_prob(t64(np.zeros(4))).tolist() == pytest.approx(
        [4 * -0.5 * math.log(2 * math.pi)] * 3
    )
    e = b.expand((2, 3))
    assert (e.batch_shape, e.sample().shape) == ((2, 3), (2, 3, 4))


def test_mixture_errors():
    with pytest.raises(
        ValueError, match="needs to be an  instance of torch.distributions.Categorical"
    ):
        MixtureSameFamily(Normal(0.0, 1.0), Normal(t64([0.0, 1.0]), 1.0))
    with pytest.raises(
        ValueError, match="need to be an instance of torch.distributions.Distribution"
    ):
        MixtureSameFamily(Categorical(t64([0.5, 0.5])), 3)
    with pytest.raises(ValueError, match=r"`mixture_distribution component` \(3\) does not equal"):
        MixtureSameFamily(Categorical(t64([1.0, 1.0, 1.0])), Normal(t64([0.0, 1.0]), 1.0))
    with pytest.raises(ValueError, match="is not compatible with"):
        MixtureSameFamily(Categorical(t64(np.ones((3, 2)))), Normal(t64(np.zeros((4, 2))), 1.0))


def test_logistic_normal():
    loc, scale = np.array([0.2, -0.3]), np.array([1.0, 2.0])
    d = LogisticNormal(fg.tensor(loc), fg.tensor(scale))
    y = np.array([0.2, 0.3, 0.5])

    def stick(x):  # numpy's stick breaking: z_k = sigmoid(x_k - log(K - k))
        z = 1 / (1 + np.exp(-(x - np.log(np.array([2.0, 1.0])))))
        return np.append(z, 1) * np.concatenate([[1], np.cumprod(1 - z)])

    # x from y: z_0 = y_0, z_1 = y_1 / (1 - y_0); the density is the normal's at x over
    # |det dy[:2]/dx| (a numerical Jacobian)
    z = np.array([y[0], y[1] / (1 - y[0])])
    x = np.log(z / (1 - z)) + np.log(np.array([2.0, 1.0]))
    assert np.allclose(stick(x), y)
    h = 1e-6
    jac = np.stack([(stick(x + e)[:2] - stick(x - e)[:2]) / (2 * h) for e in np.eye(2) * h], -1)
    normal = (-0.5 * ((x - loc) / scale) ** 2 - np.log(scale) - 0.5 * math.log(2 * math.pi)).sum()
    want = normal - np.log(abs(np.linalg.det(jac)))
    got = d.log_prob(fg.tensor(y)).item()
    assert math.isclose(got, want, rel_tol=1e-8) and math.isclose(got, 0.5711217768250614)
    assert d.event_shape == (3,) and d.batch_shape == () and d.support is not None
    fg.manual_seed(0)
    s = d.sample((1000,)).numpy()
    assert s.shape == (1000, 3) and np.allclose(s.sum(-1), 1) and (s > 0).all()
    assert LogisticNormal(fg.tensor(0.5), fg.tensor(1.5)).event_shape == (2,)  # a 0-d base
    assert d.expand((4,)).sample().shape == (4, 3)
