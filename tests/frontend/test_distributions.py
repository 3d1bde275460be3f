"""fusegrad.distributions' families against PyTorch 2.14.1 (torch.distributions, float64):
log_prob, entropy, cdf / icdf, KL and their gradients with respect to the parameters,
written here as literals; draws by their properties (shape, support, empirical moments
within six standard errors, rsample's gradients, repeatability under fg.manual_seed),
since fusegrad's random stream is not torch's."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distributions import (
    Bernoulli,
    Categorical,
    Independent,
    Normal,
    Uniform,
    kl_divergence,
)

F64 = fg.float64


def t64(values, requires_grad: bool = False):
    return fg.tensor(values, dtype=F64, requires_grad=requires_grad)


def close(got, want, rtol=1e-13, atol=1e-15):
    got = got.detach().numpy() if isinstance(got, fg.Tensor) else got
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def grads(value, params):
    return [g.numpy() for g in fg.autograd.grad(value.sum(), params, retain_graph=True)]


# ------------------------------------------------------------------------- Categorical
def test_categorical_from_probs_normalizes_and_scores():
    p = t64([[1.0, 2.0, 7.0], [2.0, 1.0, 1.0]], requires_grad=True)
    m = Categorical(probs=p)
    assert m.batch_shape == (2,) and m.event_shape == () and m.param_shape == (2, 3)
    close(m.probs, [[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]])
    close(
        m.logits,
        [
            [-2.3025850929940455, -1.6094379124341003, -0.35667494393873245],
            [-0.6931471805599453, -1.3862943611198906, -1.3862943611198906],
        ],
    )
    lp = m.log_prob(fg.tensor([2, 0]))
    close(lp, [-0.35667494393873245, -0.6931471805599453])
    (g,) = grads(lp, [p])
    close(
        g, [[-0.09999999999999999, -0.09999999999999999, 0.04285714285714286], [0.25, -0.25, -0.25]]
    )
    e = m.entropy()
    close(e, [0.8018185525433373, 1.0397207708399179])
    (g,) = grads(e, [p])
    close(
        g,
        [
            [0.1500766540450708, 0.08076193598907629, -0.0445143608604605],
            [-0.08664339756999316, 0.08664339756999316, 0.08664339756999316],
        ],
    )


def test_categorical_log_prob_broadcasts_the_value_against_the_batch():
    m = Categorical(probs=t64([[1.0, 2.0, 7.0], [2.0, 1.0, 1.0]]))
    lp = m.log_prob(fg.tensor([[0], [1], [2], [1]]))
    close(
        lp,
        [
            [-2.3025850929940455, -0.6931471805599453],
            [-1.6094379124341003, -1.3862943611198906],
            [-0.35667494393873245, -1.3862943611198906],
            [-1.6094379124341003, -1.3862943611198906],
        ],
    )


def test_categorical_from_logits():
    lg = t64([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]], requires_grad=True)
    m = Categorical(logits=lg)
    close(m.probs, [[0.1752903921400367, 0.039112573270687456, 0.7855970345892759], [1 / 3] * 3])
    close(
        m.logits,
        [
            [-1.7413112966571571, -3.241311296657157, -0.24131129665715711],
            [-1.0986122886681098, -1.0986122886681098, -1.0986122886681098],
        ],
    )
    lp = m.log_prob(fg.tensor([1, 2]))
    close(lp, [-3.241311296657157, -1.0986122886681098])
    (g,) = grads(lp, [lg])
    close(
        g,
        [
            [-0.17529039214003667, 0.9608874267293126, -0.7855970345892758],
            [-0.3333333333333333, -0.3333333333333333, 0.6666666666666667],
        ],
    )
    e = m.entropy()
    close(e, [0.6215846046792746, 1.0986122886681096])
    (g,) = grads(e, [lg])
    close(g, [[0.19627733092646912, 0.1024642521891606, -0.2987415831156297], [0, 0, 0]])
    assert m.mode.tolist() == [2, 0]
    assert m.enumerate_support().tolist() == [[0, 0], [1, 1], [2, 2]]
    assert m.enumerate_support(expand=False).tolist() == [[0], [1], [2]]
    assert np.isnan(m.mean.numpy()).all() and m.variance.shape == (2,)


def test_categorical_with_a_zero_probability():
    m = Categorical(probs=t64([0.0, 0.5, 0.5]))
    close(m.entropy(), 0.6931471805599453)
    close(m.log_prob(fg.tensor(0)), -36.04365338911715)  # log(eps), as torch's clamp


def test_categorical_errors():
    with pytest.raises(ValueError, match="^Either `probs` or `logits` must be specified"):
        Categorical(probs=fg.ones(1), logits=fg.ones(1))
    with pytest.raises(ValueError, match="^Either `probs` or `logits` must be specified"):
        Categorical()
    with pytest.raises(ValueError, match="^`probs` parameter must be at least one-dimensional"):
        Categorical(probs=fg.tensor(1.0))
    with pytest.raises(ValueError, match="^`logits` parameter must be at least one-dimensional"):
        Categorical(logits=fg.tensor(1.0))
    with pytest.raises(ValueError) as info:
        Categorical(probs=fg.tensor([1.0, -1.0, 2.0]))
    assert str(info.value).startswith(
        "Expected parameter probs (Tensor of shape (3,)) of distribution Categorical(probs: "
        "(3,)) to satisfy the constraint Simplex(), but found invalid values:\n"
    )


def test_categorical_draws_follow_the_probabilities():
    fg.manual_seed(0)
    probs = fg.tensor([[0.1, 0.2, 0.7], [0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    n = 20000
    s = Categorical(probs).sample((n,))
    assert s.shape == (n, 3) and s.dtype == fg.int64
    counts = np.stack([np.bincount(col, minlength=3) for col in s.numpy().T]) / n
    bound = 6 * np.sqrt(probs.numpy() * (1 - probs.numpy()) / n)
    assert (np.abs(counts - probs.numpy()) <= bound).all(), counts
    assert counts[1, 0] == 0 and counts[2, 0] == 1  # never a zero-probability class
    one = Categorical(logits=fg.zeros(4)).sample()
    assert one.shape == () and 0 <= one.item() < 4
    assert Categorical(fg.ones(2, 1)).sample((3,)).tolist() == [[0, 0]] * 3  # one class


def test_categorical_draws_repeat_under_manual_seed_and_have_no_gradient():
    logits = fg.tensor([0.3, -0.2, 1.0, 0.0], requires_grad=True)
    m = Categorical(logits=logits)
    fg.manual_seed(7)
    a = m.sample((50,))
    fg.manual_seed(7)
    b = m.sample((50,))
    assert a.tolist() == b.tolist() and not a.requires_grad
    assert m.sample((50,)).tolist() != a.tolist()


# -------------------------------------------------------------------------- Normal
def test_normal_log_prob_cdf_icdf_entropy_and_gradients():
    loc = t64([0.0, 1.0, -2.0], requires_grad=True)
    scale = t64([1.0, 0.5, 3.0], requires_grad=True)
    n = Normal(loc, scale)
    x = t64([0.3, 1.2, 4.0])
    lp = n.log_prob(x)
    close(lp, [-0.9639385332046727, -0.30579135264472734, -4.017550821872783])
    gl, gs = grads(lp, [loc, scale])
    close(gl, [0.3, 0.7999999999999998, 0.6666666666666666])
    close(gs, [-0.91, -1.6800000000000002, 1.0])
    c = n.cdf(x)
    close(c, [0.6179114221889526, 0.6554217416103241, 0.9772498680518208])
    gl, gs = grads(c, [loc, scale])
    close(gl, [-0.381387815460524, -0.7365402806066464, -0.017996988837729357], rtol=1e-12)
    close(gs, [-0.1144163446381572, -0.2946161122426585, -0.035993977675458706], rtol=1e-12)
    ic = n.icdf(t64([0.1, 0.5, 0.975]))
    close(ic, [-1.2815515655446008, 1.0, 3.879891953620163], rtol=1e-12)
    gl, gs = grads(ic, [loc, scale])
    close(gl, [1.0, 1.0, 1.0])
    close(gs, [-1.2815515655446008, 0.0, 1.959963984540054], rtol=1e-12)
    e = n.entropy()
    close(e, [1.4189385332046727, 0.7257913526447274, 2.5175508218727822])
    close(grads(e, [scale])[0], [1.0, 2.0, 0.3333333333333333])
    close(n.variance, [1.0, 0.25, 9.0])
    close(n.stddev, [1.0, 0.5, 3.0])
    assert n.mean.tolist() == n.mode.tolist() == [0.0, 1.0, -2.0]


def test_normal_of_numbers_is_float32_and_scalar():
    n = Normal(0.0, 1)
    assert n.batch_shape == () and n.loc.dtype == fg.float32 == n.scale.dtype
    assert n.log_prob(fg.tensor(0.5)).item() == pytest.approx(-1.0439385175704956, abs=1e-7)


def test_normal_errors():
    with pytest.raises(ValueError) as info:
        Normal(fg.tensor([0.0, 1.0]), fg.tensor([1.0, -1.0]))
    assert str(info.value).startswith(
        "Expected parameter scale (Tensor of shape (2,)) of distribution Normal(loc: (2,), "
        "scale: (2,)) to satisfy the constraint GreaterThan(lower_bound=0.0), but found "
        "invalid values:\n"
    )
    with pytest.raises(ValueError, match="to satisfy the constraint Real()"):
        Normal(fg.tensor([math.nan]), fg.tensor([1.0]))


def test_normal_rsample_is_loc_plus_eps_times_scale():
    loc = fg.tensor([0.0, 10.0], requires_grad=True)
    scale = fg.tensor([1.0, 3.0], requires_grad=True)
    fg.manual_seed(3)
    x = Normal(loc, scale).rsample((5,))
    assert x.shape == (5, 2) and x.requires_grad
    values = x.detach().numpy()
    x.sum().backward()
    eps = (values - np.array([0.0, 10.0])) / np.array([1.0, 3.0])
    assert loc.grad.tolist() == [5.0, 5.0]
    close(scale.grad, eps.sum(0), rtol=1e-5, atol=1e-5)
    assert not Normal(loc, scale).sample((5,)).requires_grad


def test_normal_draws_have_the_moments_and_repeat():
    fg.manual_seed(1)
    n = 40000
    d = Normal(fg.tensor([0.0, 1.0, -3.0]), fg.tensor([1.0, 2.0, 0.1]))
    x = d.sample((n,)).numpy()
    assert x.shape == (n, 3)
    se = np.array([1.0, 2.0, 0.1]) / math.sqrt(n)
    assert (np.abs(x.mean(0) - [0.0, 1.0, -3.0]) <= 6 * se).all()
    # the sample variance's standard error is about sigma^2 sqrt(2 / n)
    assert (
        np.abs(x.var(0) - [1.0, 4.0, 0.01]) <= 6 * np.array([1.0, 4.0, 0.01]) * math.sqrt(2 / n)
    ).all()
    fg.manual_seed(5)
    a = d.sample((3,)).tolist()
    fg.manual_seed(5)
    assert d.sample((3,)).tolist() == a


# -------------------------------------------------------------------------- Bernoulli
def test_bernoulli_from_probs():
    p = t64([0.2, 0.5, 0.9], requires_grad=True)
    b = Bernoulli(p)
    lp = b.log_prob(t64([1.0, 0.0, 1.0]))
    close(lp, [-1.6094379124341003, -0.6931471805599453, -0.10536051565782628])
    close(grads(lp, [p])[0], [5.0, -2.0, 1.1111111111111123], rtol=1e-12)
    e = b.entropy()
    close(e, [0.5004024235381879, 0.6931471805599453, 0.3250829733914482])
    close(grads(e, [p])[0], [1.3862943611198906, 0.0, -2.197224577336221], rtol=1e-12)
    close(b.logits, [-1.3862943611198906, 0.0, 2.1972245773362196], rtol=1e-12)
    assert np.array_equal(b.mode.numpy(), [0.0, math.nan, 1.0], equal_nan=True)
    close(b.variance, [0.16000000000000003, 0.25, 0.08999999999999998])
    assert b.enumerate_support().tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]


def test_bernoulli_from_logits():
    lg = t64([-1.0, 0.0, 3.0, 30.0], requires_grad=True)
    b = Bernoulli(logits=lg)
    lp = b.log_prob(t64([0.0, 1.0, 1.0, 0.0]))
    close(lp, [-0.3132616875182228, -0.6931471805599453, -0.04858735157374206, -30.000000000000092])
    close(
        grads(lp, [lg])[0],
        [-0.2689414213699951, 0.5, 0.047425873177566635, -0.9999999999999065],
    )
    e = b.entropy()
    close(e, [0.5822031088882179, 0.6931471805599453, 0.19086497110644196, 2.897999589891543e-12])
    close(
        grads(e, [lg])[0],
        [0.19661193324148185, 0.0, -0.13552997919273602, -2.8044233602028833e-12],
        rtol=1e-10,
        atol=1e-14,  # the last is a difference of nearly equal terms, there and here
    )
    close(b.probs, [0.2689414213699951, 0.5, 0.9525741268224334, 0.9999999999999065])


def test_bernoulli_errors():
    with pytest.raises(ValueError, match="Interval\\(lower_bound=0.0, upper_bound=1.0\\)"):
        Bernoulli(fg.tensor([0.5, 1.2]))
    with pytest.raises(ValueError, match="to be within the support \\(Boolean\\(\\)\\)"):
        Bernoulli(fg.tensor([0.5])).log_prob(fg.tensor([0.5]))


def test_bernoulli_draws():
    fg.manual_seed(2)
    n = 20000
    p = np.array([0.0, 0.3, 0.9, 1.0])
    s = Bernoulli(fg.tensor(p, dtype=F64)).sample((n,))
    assert s.shape == (n, 4) and s.dtype == F64
    values = s.numpy()
    assert set(np.unique(values)) <= {0.0, 1.0}
    assert (np.abs(values.mean(0) - p) <= 6 * np.sqrt(p * (1 - p) / n)).all()


# ---------------------------------------------------------------------------- Uniform
def test_uniform_against_torch():
    lo, hi = t64([0.0, -1.0], requires_grad=True), t64([2.0, 3.0], requires_grad=True)
    u = Uniform(lo, hi)
    lp = u.log_prob(t64([1.0, 2.5]))
    close(lp, [-0.6931471805599453, -1.3862943611198906])
    gl, gh = grads(lp, [lo, hi])
    close(gl, [0.5, 0.25])
    close(gh, [-0.5, -0.25])
    c = u.cdf(t64([0.5, 2.5]))
    close(c, [0.25, 0.875])
    gl, gh = grads(c, [lo, hi])
    close(gl, [-0.375, -0.03125])
    close(gh, [-0.125, -0.21875])
    close(u.icdf(t64([0.25, 0.5])), [0.5, 1.0])
    close(u.entropy(), [0.6931471805599453, 1.3862943611198906])
    close(u.mean, [1.0, 1.0])
    close(u.variance, [0.3333333333333333, 1.3333333333333333])
    close(u.stddev, [0.5773502691896258, 1.1547005383792517])
    assert np.isnan(u.mode.detach().numpy()).all()


def test_uniform_errors():
    with pytest.raises(ValueError) as info:
        Uniform(1.0, 0.0)
    assert str(info.value) == (
        "Expected parameter low (Tensor of shape ()) of distribution Uniform(low: 1.0, "
        "high: 0.0) to satisfy the constraint LessThan(upper_bound=0.0), but found invalid "
        "values:\n1.0"
    )
    with pytest.raises(ValueError, match="to be within the support \\(Interval"):
        Uniform(t64([0.0, -1.0]), t64([2.0, 3.0])).log_prob(t64([3.0, 0.0]))


def test_uniform_rsample_stays_inside_and_carries_gradients():
    fg.manual_seed(4)
    n = 20000
    low = fg.tensor([0.0, -5.0], requires_grad=True)
    high = fg.tensor([1.0, 5.0], requires_grad=True)
    x = Uniform(low, high).rsample((n,))
    values = x.detach().numpy()
    assert ((values >= [0.0, -5.0]) & (values < [1.0, 5.0])).all()
    se = np.array([1.0, 10.0]) / math.sqrt(12 * n)
    assert (np.abs(values.mean(0) - [0.5, 0.0]) <= 6 * se).all()
    x.sum().backward()
    frac = (values - [0.0, -5.0]) / [1.0, 10.0]
    close(high.grad, frac.sum(0), rtol=1e-4)
    close(low.grad, (1 - frac).sum(0), rtol=1e-4)


# ------------------------------------------------------------------------ Independent
def test_independent_sums_over_the_reinterpreted_dims():
    base = Normal(t64([[0.0, 1.0], [2.0, 3.0]]), t64([[1.0, 2.0], [0.5, 1.0]]))
    d = Independent(base, 1)
    assert d.batch_shape == (2,) and d.event_shape == (2,) and d.has_rsample
    close(d.log_prob(t64([[0.5, 0.5], [0.5, 0.5]])), [-2.6872742469692907, -8.769729885849399])
    close(d.entropy(), [3.5310242469692907, 2.1447298858494])
    assert d.sample((3,)).shape == (3, 2, 2)
    assert repr(d) == "Independent(Normal(loc: (2, 2), scale: (2, 2)), 1)"
    with pytest.raises(ValueError, match="actual 2 vs 1"):
        Independent(Normal(fg.zeros(2), fg.ones(2)), 2)
    with pytest.raises(NotImplementedError, match="cartesian product"):
        Independent(Bernoulli(fg.ones(2, 2) / 2), 1).enumerate_support()


# ------------------------------------------------------------------------------ expand
@pytest.mark.parametrize(
    "make",
    [
        lambda: Normal(fg.zeros(3), fg.ones(3)),
        lambda: Uniform(fg.zeros(3), fg.ones(3)),
        lambda: Bernoulli(logits=fg.zeros(3)),
        lambda: Categorical(probs=fg.ones(3, 4)),
        lambda: Independent(Normal(fg.zeros(3, 2), fg.ones(3, 2)), 1),
    ],
)
def test_expand_adds_batch_dims(make):
    d = make()
    e = d.expand((5, 3))
    assert type(e) is type(d) and e.batch_shape == (5, 3) and e.event_shape == d.event_shape
    assert e.sample().shape == (5, 3) + d.event_shape
    assert e._validate_args == d._validate_args


# ------------------------------------------------------------------------------- KL
def test_kl_normal_normal():
    loc = t64([0.0, 1.0, -2.0], requires_grad=True)
    scale = t64([1.0, 0.5, 3.0], requires_grad=True)
    k = kl_divergence(Normal(loc, scale), Normal(t64([1.0, 0.0, 0.0]), t64([2.0, 1.0, 0.5])))
    close(k, [0.4431471805599453, 0.8181471805599453, 23.708240530771945])
    gl, gs = grads(k, [loc, scale])
    close(gl, [-0.25, 1.0, -8.0])
    close(gs, [-0.75, -1.5, 11.666666666666666])


def test_kl_categorical_categorical():
    p = t64([[0.2, 0.3, 0.5], [0.0, 0.5, 0.5]], requires_grad=True)
    q = t64([[0.1, 0.1, 0.8], [0.3, 0.7, 0.0]])
    close(kl_divergence(Categorical(p), Categorical(q)), [0.2332113080895541, math.inf])
    k = kl_divergence(Categorical(p[:1]), Categorical(q[:1]))
    close(
        grads(k, [p])[0],
        [[0.45993587247039125, 0.8654009805785552, -0.7032149373352895], [0, 0, 0]],
        rtol=1e-12,
    )


def test_kl_bernoulli_bernoulli():
    p = t64([0.0, 0.3, 1.0, 0.5, 0.2])
    q = t64([0.2, 0.0, 0.4, 1.0, 0.6])
    close(
        kl_divergence(Bernoulli(p), Bernoulli(q)),
        [0.22314355131420954, math.inf, 0.9162907318741548, math.inf, 0.3347952867143343],
        rtol=1e-12,
    )
    p2 = t64([0.3, 0.7], requires_grad=True)
    k = kl_divergence(Bernoulli(p2), Bernoulli(t64([0.6, 0.1])))
    close(k, [0.1837868973868122, 1.032553417738286], rtol=1e-12)
    close(grads(k, [p2])[0], [-1.2527629684953678, 3.0445224377234226], rtol=1e-12)


def test_kl_uniform_pairs():
    lo, hi = t64([0.0, -1.0], requires_grad=True), t64([2.0, 3.0], requires_grad=True)
    k = kl_divergence(Uniform(lo, hi), Uniform(t64([-1.0, -2.0]), t64([2.0, 2.0])))
    close(k, [0.4054651081081644, math.inf])
    k = kl_divergence(Uniform(lo, hi), Normal(t64([0.5, 0.0]), t64([1.0, 2.0])))
    close(k, [0.517458019311394, 0.517458019311394])
    gl, gh = grads(k, [lo, hi])
    close(gl, [0.5833333333333334, 0.2916666666666667])
    close(gh, [-0.08333333333333337, -0.041666666666666685])
    inf = kl_divergence(Normal(fg.zeros(2), fg.ones(2)), Uniform(fg.zeros(2), fg.ones(2)))
    assert inf.tolist() == [math.inf, math.inf]


def test_kl_independent_independent():
    p = Independent(Normal(t64([[0.0, 1.0], [2.0, 3.0]]), t64([[1.0, 2.0], [0.5, 1.0]])), 1)
    q = Independent(Normal(fg.zeros(2, 2, dtype=F64), fg.ones(2, 2, dtype=F64)), 1)
    close(kl_divergence(p, q), [1.3068528194400546, 6.818147180559945])
    with pytest.raises(NotImplementedError):
        kl_divergence(p, Independent(q.base_dist, 2))
