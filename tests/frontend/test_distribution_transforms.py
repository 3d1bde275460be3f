"""torch.distributions.transforms (frontend/distribution_transforms.py): each transform's
values, inverse and log |det Jacobian| against numpy formulas and float64 central
differences of the map itself, domains, codomains, signs, event dims, caching, inverses,
composition, reprs and errors (torch 2.14.1's, checked with the same calls under torch)."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distribution_transforms import (
    AbsTransform,
    AffineTransform,
    ComposeTransform,
    ExpTransform,
    PowerTransform,
    SigmoidTransform,
    SoftmaxTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from fusegrad.distributions import constraints, transforms

X = np.array([-1.5, 0.3, 2.0])


def t64(values):
    return fg.tensor(np.asarray(values, dtype=np.float64))


def numeric_log_det(transform, x, h=1e-6):
    """log |dy/dx| of an elementwise transform by central differences."""
    up = transform(t64(x + h)).numpy()
    down = transform(t64(x - h)).numpy()
    return np.log(np.abs((up - down) / (2 * h)))


ELEMENTWISE = [
    (ExpTransform(), X, np.exp),
    (AffineTransform(1.0, -2.0), X, lambda x: 1.0 - 2.0 * x),
    (SigmoidTransform(), X, lambda x: 1 / (1 + np.exp(-x))),
    (TanhTransform(), X, np.tanh),
    (PowerTransform(t64(2.5)), np.abs(X), lambda x: x**2.5),
    (
        ComposeTransform([AffineTransform(0.5, 3.0), TanhTransform()]),
        X,
        lambda x: np.tanh(0.5 + 3 * x),
    ),
]


@pytest.mark.parametrize("case", ELEMENTWISE, ids=lambda c: type(c[0]).__name__)
def test_values_inverse_and_log_det(case):
    transform, x, formula = case
    y = transform(t64(x))
    np.testing.assert_allclose(y.numpy(), formula(x), rtol=1e-12)
    np.testing.assert_allclose(transform.inv(y).numpy(), x, rtol=1e-9)
    log_det = transform.log_abs_det_jacobian(t64(x), y).numpy()
    np.testing.assert_allclose(log_det, numeric_log_det(transform, x), atol=1e-5)
    # the inverse's is the negative, at the swapped pair
    np.testing.assert_allclose(transform.inv.log_abs_det_jacobian(y, t64(x)).numpy(), -log_det)


def test_tanh_log_det_is_torch_stable_form():
    # 2 * (log 2 - x - softplus(-2x)) stays finite where 1 - tanh(x)^2 underflows
    x = t64([-30.0, 0.0, 30.0, 400.0])
    got = TanhTransform().log_abs_det_jacobian(x, x.tanh()).numpy()
    xs = x.numpy()
    expected = 2 * (math.log(2) - xs - np.logaddexp(0, -2 * xs))
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.isfinite(got).all()


def test_sigmoid_clamps_as_torch():
    y = SigmoidTransform()(fg.tensor([-200.0, 200.0]))
    fi = fg.finfo(fg.float32)
    assert y.tolist() == [fi.tiny, pytest.approx(1 - fi.eps)]


def test_constraints_signs_and_flags():
    assert repr(ExpTransform().codomain) == "GreaterThan(lower_bound=0.0)"
    assert TanhTransform().codomain.lower_bound == -1.0
    assert SigmoidTransform().codomain is constraints.unit_interval
    assert ExpTransform().sign == 1 and TanhTransform().sign == 1
    assert AffineTransform(0.0, -2.0).sign == -1 and AffineTransform(0.0, 0).sign == 0
    assert AffineTransform(0.0, fg.tensor([2.0, -1.0])).sign.tolist() == [1.0, -1.0]
    assert PowerTransform(fg.tensor(-0.5)).sign.item() == -1.0
    assert ExpTransform().bijective and not AbsTransform().bijective
    assert not SoftmaxTransform().bijective
    assert ExpTransform().event_dim == 0
    with pytest.raises(ValueError, match="Please use either .domain.event_dim"):
        _ = _MixedDims().event_dim
    assert AffineTransform(0.0, -1.0).inv.sign == -1
    assert transforms.TanhTransform is TanhTransform
    assert ComposeTransform([AffineTransform(0.0, -1.0), ExpTransform()]).sign == -1


class _MixedDims(Transform):
    domain = constraints.real
    codomain = constraints.simplex


def test_affine_event_dim_sums_log_det():
    scale = t64([1.0, 2.0, 4.0])
    a = AffineTransform(t64([0.0, 0.0, 0.0]), scale, event_dim=1)
    x = t64(X)
    assert a.event_dim == 1
    assert repr(a.domain) == "IndependentConstraint(Real(), 1)"
    assert a.log_abs_det_jacobian(x, a(x)).item() == pytest.approx(math.log(8.0))
    x2 = t64(np.ones((4, 3)))
    assert a.log_abs_det_jacobian(x2, a(x2)).shape == (4,)
    # a number scale: a full tensor of log|scale| in x's shape
    b = AffineTransform(1.0, -3.0)
    assert b.log_abs_det_jacobian(x2, b(x2)).tolist() == [[math.log(3.0)] * 3] * 4


def test_softmax_and_abs():
    x = t64(X)
    y = SoftmaxTransform()(x)
    np.testing.assert_allclose(y.numpy(), np.exp(X) / np.exp(X).sum(), rtol=1e-12)
    np.testing.assert_allclose(SoftmaxTransform().inv(y).numpy(), np.log(y.numpy()))
    assert repr(SoftmaxTransform().domain) == "IndependentConstraint(Real(), 1)"
    with pytest.raises(NotImplementedError):
        SoftmaxTransform().log_abs_det_jacobian(x, y)
    with pytest.raises(ValueError, match="Too few dimensions on input"):
        SoftmaxTransform().forward_shape(())
    assert AbsTransform()(x).tolist() == [1.5, 0.3, 2.0]
    assert AbsTransform().inv(x) is x


def test_cache_returns_kept_pair():
    t = TanhTransform(cache_size=1)
    x = fg.tensor([0.5, 40.0])
    y = t(x)
    assert t(x) is y and t.inv(y) is x  # atanh(1.0) would be inf
    plain = TanhTransform()
    y2 = plain(x)
    assert math.isinf(plain.inv(y2).tolist()[1])
    assert t.with_cache(1) is t and plain.with_cache(1)._cache_size == 1
    assert AffineTransform(1.0, 2.0).with_cache(1)(x).tolist() == [2.0, 81.0]
    with pytest.raises(ValueError, match="cache_size must be 0 or 1"):
        ExpTransform(cache_size=2)


def test_inverse_and_compose_objects():
    e = ExpTransform()
    assert e.inv.inv is e and e.inv is e.inv  # weakly kept while alive
    assert e == ExpTransform() and e.inv == ExpTransform().inv and e != TanhTransform()
    assert repr(e.inv) == "_InverseTransform(ExpTransform())"
    assert e.inv.domain is e.codomain and e.inv.codomain is e.domain
    c = ComposeTransform([AffineTransform(0.5, 3.0), TanhTransform()])
    assert repr(c) == "ComposeTransform(\n    AffineTransform(),\n    TanhTransform()\n)"
    assert c.inv.inv is c
    assert repr(c.inv) == (
        "ComposeTransform(\n    _InverseTransform(TanhTransform()),\n"
        "    _InverseTransform(AffineTransform())\n)"
    )
    assert c.bijective and c.with_cache(1).parts[1]._cache_size == 1
    x = t64(X)
    assert identity_transform(x) is x
    assert identity_transform.log_abs_det_jacobian(x, x).tolist() == [0.0, 0.0, 0.0]
    assert identity_transform.domain is constraints.real
    # a softmax after an elementwise map: the composition is over vectors
    s = ComposeTransform([ExpTransform(), SoftmaxTransform()])
    assert s.domain.event_dim == 1 and s.codomain.event_dim == 1


def test_power_transform_shapes():
    p = PowerTransform(fg.tensor([1.0, 2.0, 3.0]))
    assert p.forward_shape((4, 1)) == (4, 3)
    assert p == PowerTransform(fg.tensor([1.0, 2.0, 3.0]))
    assert p != PowerTransform(fg.tensor([1.0, 2.0, 4.0]))
