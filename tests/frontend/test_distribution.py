"""The base of fusegrad.distributions: validation on by default with torch's ValueErrors,
the shapes a value must broadcast with, broadcast_all and the probability helpers, and the
KL registry's dispatch by subclass. Messages are PyTorch 2.14.1's, but for shapes, which
are tuples here (torch prints torch.Size)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distribution import (
    Distribution,
    _sum_rightmost,
    broadcast_all,
    clamp_probs,
    kl_divergence,
    lazy_property,
    logits_to_probs,
    probs_to_logits,
    register_kl,
)
from fusegrad.distributions import (
    Bernoulli,
    Beta,
    Categorical,
    Dirichlet,
    Exponential,
    ExponentialFamily,
    Gamma,
    Normal,
    Poisson,
    Uniform,
    Wishart,
)
from fusegrad.distributions_kl import _kl_expfamily_expfamily
from fusegrad.runtime.engine import engine


@pytest.fixture
def default_validation():
    """Restore the class-wide default a test changes."""
    before = Distribution._validate_args
    yield
    Distribution.set_default_validate_args(before)


def test_validation_is_on_by_default_as_torchs():
    assert Distribution._validate_args is __debug__ is True
    with pytest.raises(ValueError) as info:
        Normal(0.0, -1.0)
    assert str(info.value) == (
        "Expected parameter scale (Tensor of shape ()) of distribution Normal(loc: 0.0, "
        "scale: -1.0) to satisfy the constraint GreaterThan(lower_bound=0.0), but found "
        "invalid values:\n-1.0"
    )


def test_validate_args_false_and_the_class_default_turn_it_off(default_validation):
    assert Normal(0.0, -1.0, validate_args=False).scale.item() == -1.0
    Distribution.set_default_validate_args(False)
    d = Uniform(1.0, 0.0)
    assert d.low.item() == 1.0 and not d._validate_args
    with pytest.raises(ValueError):
        Normal(0.0, -1.0, validate_args=True)
    with pytest.raises(ValueError):
        Distribution.set_default_validate_args("yes")


def test_value_shapes_and_types_are_checked():
    m = Categorical(probs=fg.ones(2, 3))
    with pytest.raises(ValueError, match=r"^The value argument to log_prob must be a Tensor$"):
        m.log_prob(1)
    with pytest.raises(ValueError) as info:
        m.log_prob(fg.tensor([0, 1, 2]))
    assert str(info.value) == (
        "Value is not broadcastable with batch_shape+event_shape: (3,) vs (2,)."
    )
    assert m.log_prob(fg.tensor([[0], [1], [2]])).shape == (3, 2)  # broadcasts


def test_values_outside_the_support_are_refused():
    with pytest.raises(ValueError) as info:
        Categorical(probs=fg.tensor([0.5, 0.5])).log_prob(fg.tensor(2))
    assert str(info.value) == (
        "Expected value argument (Tensor of shape ()) to be within the support "
        "(IntegerInterval(lower_bound=0, upper_bound=1)) of the distribution "
        "Categorical(probs: (2,)), but found invalid values:\n2"
    )
    # not checked: torch's log_prob of an out-of-support value without validation
    u = Uniform(fg.tensor([0.0]), fg.tensor([1.0]), validate_args=False)
    assert u.log_prob(fg.tensor([2.0])).tolist() == [-math.inf]


def test_a_subclass_without_constraints_warns_and_unimplemented_parts_raise():
    class Bare(Distribution):
        pass

    with pytest.warns(UserWarning, match="does not define `arg_constraints`"):
        d = Bare()
    for name in ("mean", "variance", "support", "stddev"):
        with pytest.raises(NotImplementedError):
            getattr(d, name)
    with pytest.raises(NotImplementedError, match="does not implement mode"):
        d.mode  # noqa: B018
    with pytest.raises(NotImplementedError):
        d.sample()
    with pytest.raises(NotImplementedError, match="must also define a custom .expand"):

        class Own(Normal):
            def __init__(self):
                super().__init__(0.0, 1.0)

        Own()._get_checked_instance(Normal)


def test_shapes_and_extended_shape():
    d = Normal(fg.zeros(2, 3), 1.0)
    assert d.batch_shape == (2, 3) and d.event_shape == ()
    assert d._extended_shape((4,)) == (4, 2, 3) and d._extended_shape() == (2, 3)
    assert Normal(0.0, 1.0).batch_shape == ()
    with pytest.raises(TypeError):  # as torch's: a sample shape is a sequence
        d.sample(4)
    with pytest.warns(FutureWarning, match="sample_n"):
        assert d.sample_n(5).shape == (5, 2, 3)
    assert d.perplexity().allclose(d.entropy().exp())


def test_broadcast_all_takes_the_first_tensors_dtype():
    a, b, c = broadcast_all(fg.zeros(2, 1, dtype=fg.float64), 1, fg.ones(3))
    assert a.shape == b.shape == c.shape == (2, 3) and b.dtype == fg.float64
    (s,) = broadcast_all(0.5)
    assert s.shape == () and s.dtype == fg.float32
    with pytest.raises(ValueError, match="Input arguments must all be instances of Number"):
        broadcast_all([1.0], fg.ones(1))


def test_probability_helpers():
    p = fg.tensor([0.0, 0.25, 1.0], dtype=fg.float64)
    eps = np.finfo(np.float64).eps
    assert clamp_probs(p).tolist() == [eps, 0.25, 1 - eps]
    np.testing.assert_allclose(
        probs_to_logits(p, is_binary=True).numpy(),
        np.log([eps, 0.25, 1 - eps]) - np.log1p(-np.array([eps, 0.25, 1 - eps])),
    )
    logits = fg.tensor([[1.0, 2.0, 3.0]], dtype=fg.float64)
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(logits_to_probs(logits).numpy(), [e / e.sum()], rtol=1e-15)
    assert logits_to_probs(fg.tensor([0.0]), is_binary=True).tolist() == [0.5]
    assert _sum_rightmost(fg.ones(2, 3, 4), 2).tolist() == [12.0, 12.0]
    assert _sum_rightmost(fg.ones(2), 0).shape == (2,)


def test_lazy_property_computes_once_with_gradients_on():
    calls = []

    class Thing:
        @lazy_property
        def value(self):
            calls.append(1)
            return fg.ones(1, requires_grad=True) * 2

    t = Thing()
    with fg.no_grad():
        assert t.value.requires_grad  # recorded even under no_grad, as torch's
    assert t.value is t.value and len(calls) == 1
    assert isinstance(Thing.value, lazy_property)


def test_kl_missing_pairs_raise_torchs_error():
    with pytest.raises(NotImplementedError) as info:
        kl_divergence(Normal(0.0, 1.0), Categorical(fg.ones(2)))
    assert str(info.value) == (
        "No KL(p || q) is implemented for p type Normal and q type Categorical"
    )
    with pytest.raises(TypeError):
        register_kl(int, Normal)


def test_kl_dispatch_takes_the_most_specific_pair_and_warns_when_ambiguous():
    class A(Normal):
        pass

    class B(A):
        pass

    @register_kl(A, Normal)
    def kl_a(p, q):
        return fg.tensor(1.0)

    assert kl_divergence(B(0.0, 1.0), Normal(0.0, 1.0)).item() == 1.0  # A's over Normal's
    assert kl_divergence(Normal(0.0, 1.0), B(0.0, 1.0)).item() == 0.0  # Normal-Normal

    @register_kl(Normal, B)
    def kl_b(p, q):
        return fg.tensor(2.0)

    with pytest.warns(RuntimeWarning, match=r"Ambiguous kl_divergence\(B, B\)"):
        assert kl_divergence(B(0.0, 1.0), B(0.0, 1.0)).item() == 1.0
    register_kl(B, B)(kl_b)  # the tie broken
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kl_divergence(B(0.0, 1.0), B(0.0, 1.0)).item() == 2.0


@pytest.mark.cpu_device  # (a CPU tensor's repr: a cuda one adds device='cuda:0', as torch's)
def test_repr_shows_one_element_parameters_and_shapes_otherwise():
    assert repr(Normal(0.0, 1.0)) == "Normal(loc: 0.0, scale: 1.0)"
    assert repr(Categorical(probs=fg.ones(2, 3))) == "Categorical(probs: (2, 3))"
    assert repr(Bernoulli(fg.tensor([0.5]))) == "Bernoulli(probs: tensor([0.5000]))"


def test_validation_computes_the_parameters_and_values_it_checks_once():
    """A policy's step (probs = net(state); Categorical(probs); sample; log_prob; item):
    the checks compute the parameter and the sample with themselves, so the sample and
    the read use those buffers instead of computing the forward pass again (two plans
    run, not three), with the values unchanged."""
    w = fg.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    probs = (fg.tensor([[1.0, 2.0]]) @ w).softmax(-1)
    runs = engine.stats["schedule_hits"] + engine.stats["scheduled"]
    m = Categorical(probs)
    assert m.probs._has_value()  # (its probs: the given ones normalized)
    action = m.sample()
    log_p = m.log_prob(action)
    assert action._has_value()
    a = action.item()
    assert engine.stats["schedule_hits"] + engine.stats["scheduled"] - runs == 2
    want = np.log(probs.detach().numpy()[0, a])
    np.testing.assert_allclose(log_p.item(), want, rtol=1e-6)
    log_p.sum().backward()  # the gradient still reaches w through the computed probs
    p = probs.detach().numpy()[0]
    x = np.array([1.0, 2.0])
    dz = np.eye(2)[a] - p  # d log p_a / d logits
    np.testing.assert_allclose(w.grad.numpy(), np.outer(x, dz), rtol=1e-5, atol=1e-7)


# torch's kl_divergence of the two Wisharts below (its Bregman divergence)
WISHART_KL = [3.1729829972957786, 1.6593015574790333]


def test_exponential_family_entropy_and_bregman_kl():
    def t(v):
        return fg.tensor(v, dtype=fg.float64)

    # the generic entropy (F(t) - <t, grad F(t)> - E[k]) equals each family's closed form
    for d in (
        Normal(t([0.3, -1.0]), t([1.0, 2.5])),
        Gamma(t([0.3, 2.0]), t([1.0, 2.5])),
        Bernoulli(t([0.3, 0.9])),
        Exponential(t([0.3, 0.9])),
    ):
        assert isinstance(d, ExponentialFamily)
        assert np.allclose(ExponentialFamily.entropy(d).numpy(), d.entropy().numpy(), rtol=1e-12)
    # the Bregman divergence equals the families' own KL formulas
    pairs = [
        (Normal(t([0.3, -1.0]), t([1.0, 2.5])), Normal(t([0.0, 1.0]), t([2.0, 0.5]))),
        (Gamma(t([0.3, 2.0]), t([1.0, 2.5])), Gamma(t([1.0, 1.5]), t([2.0, 0.5]))),
        (Dirichlet(t([0.3, 1.0, 2.0])), Dirichlet(t([1.0, 2.0, 0.5]))),
        (Beta(t([0.3, 2.0]), t([1.0, 2.5])), Beta(t([1.0, 1.5]), t([2.0, 0.5]))),
        (Poisson(t([2.0, 0.5])), Poisson(t([1.0, 3.0]))),
    ]
    for p, q in pairs:
        want = kl_divergence(p, q).numpy()
        assert np.allclose(_kl_expfamily_expfamily(p, q).numpy(), want, rtol=1e-10)
    # Wishart has no pair of its own: kl_divergence takes the Bregman one (torch's value)
    cov = t([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]])
    p = Wishart(t([3.5, 5.0]), covariance_matrix=cov)
    q = Wishart(t(4.0), scale_tril=t([[1.0, 0.0, 0.0], [0.3, 0.8, 0.0], [-0.2, 0.1, 1.5]]))
    assert np.allclose(kl_divergence(p, q).numpy(), WISHART_KL, rtol=1e-12)
    with pytest.raises(NotImplementedError, match="different exponential families"):
        kl_divergence(Poisson(t([2.0])), Gamma(t([1.0]), t([1.0])))
