"""biject_to and transform_to (frontend/distribution_constraint_registry.py): each
constraint's transform (torch 2.14.1's choice, by its repr), its values against numpy,
that the values satisfy the constraint, round trips, log |det| of the bijections, and
registration errors."""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distribution_transforms import (
    CatTransform,
    CorrCholeskyTransform,
    ExpTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    SigmoidTransform,
    SoftmaxTransform,
    StackTransform,
    StickBreakingTransform,
)
from fusegrad.distributions import biject_to, constraints, transform_to

X = np.array([-0.7, 0.3, 1.5])


def t64(values):
    return fg.tensor(np.asarray(values, dtype=np.float64))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize(
    ("constraint", "want"),
    [
        (constraints.real, X),
        (constraints.positive, np.exp(X)),
        (constraints.nonnegative, np.exp(X)),
        (constraints.greater_than(2.0), 2 + np.exp(X)),
        (constraints.greater_than_eq(-1.0), -1 + np.exp(X)),
        (constraints.less_than(1.0), 1 - np.exp(X)),
        (constraints.unit_interval, _sigmoid(X)),
        (constraints.interval(-2.0, 3.0), -2 + 5 * _sigmoid(X)),
        (constraints.half_open_interval(0.0, 1.0), _sigmoid(X)),
    ],
)
def test_elementwise_constraints(constraint, want):
    for registry in (biject_to, transform_to):
        t = registry(constraint)
        y = t(t64(X))
        assert np.allclose(y.numpy(), want, rtol=1e-14)
        assert bool(constraint.check(y).all())
        assert np.allclose(t.inv(y).numpy(), X, rtol=1e-12)
    # the bijections' log |det|: log |dy/dx| by central differences
    t = biject_to(constraint)
    h = 1e-6
    slope = (t(t64(X + h)).numpy() - t(t64(X - h)).numpy()) / (2 * h)
    got = t.log_abs_det_jacobian(t64(X), t(t64(X))).numpy()
    assert np.allclose(got, np.log(np.abs(slope)), atol=1e-8)


def test_torchs_choices_of_transform():
    assert isinstance(biject_to(constraints.simplex), StickBreakingTransform)
    assert isinstance(transform_to(constraints.simplex), SoftmaxTransform)
    assert isinstance(transform_to(constraints.unit_interval), SigmoidTransform)
    assert isinstance(biject_to(constraints.corr_cholesky), CorrCholeskyTransform)
    assert isinstance(transform_to(constraints.lower_cholesky), LowerCholeskyTransform)
    for c in (constraints.positive_definite, constraints.positive_semidefinite):
        assert isinstance(transform_to(c), PositiveDefiniteTransform)
        with pytest.raises(NotImplementedError, match="Cannot transform"):
            biject_to(c)
    indep = biject_to(constraints.independent(constraints.positive, 1))
    assert isinstance(indep, IndependentTransform) and indep.reinterpreted_batch_ndims == 1
    assert repr(transform_to(constraints.positive)) == (
        "ComposeTransform(\n    ExpTransform(),\n    AffineTransform()\n)"
    )


def test_vector_and_matrix_constraints():
    y = biject_to(constraints.simplex)(t64(X)).numpy()
    assert y.shape == (4,) and math.isclose(y.sum(), 1.0) and (y > 0).all()
    s = transform_to(constraints.simplex)(t64(X)).numpy()
    assert np.allclose(s, np.exp(X) / np.exp(X).sum())
    corr = biject_to(constraints.corr_cholesky)(t64(X))
    assert corr.shape == (3, 3) and bool(constraints.corr_cholesky.check(corr))
    m = t64(np.arange(9.0).reshape(3, 3) / 10)
    assert bool(constraints.lower_cholesky.check(transform_to(constraints.lower_cholesky)(m)))
    pd = transform_to(constraints.positive_definite)(m)
    assert bool(constraints.positive_definite.check(pd))


def test_cat_and_stack_constraints():
    cat = constraints.cat([constraints.positive, constraints.interval(0.0, 2.0)], 0, [1, 2])
    t = biject_to(cat)
    assert isinstance(t, CatTransform)
    y = t(t64(X)).numpy()
    assert np.allclose(y, [math.exp(-0.7), *(2 * _sigmoid(X[1:]))])
    stack = constraints.stack([constraints.positive, constraints.real, constraints.unit_interval])
    st = transform_to(stack)
    assert isinstance(st, StackTransform) and isinstance(st.transforms[0].parts[0], ExpTransform)
    assert np.allclose(st(t64(X)).numpy(), [math.exp(-0.7), 0.3, _sigmoid(1.5)])


def test_register_errors_and_custom_factories():
    registry = type(biject_to)()
    with pytest.raises(NotImplementedError, match="Cannot transform _Real constraints"):
        registry(constraints.real)
    with pytest.raises(TypeError, match="Expected constraint to be either a Constraint"):
        registry.register(int, lambda c: None)
    registry.register(constraints.real, lambda c: ExpTransform())
    assert isinstance(registry(constraints.real), ExpTransform)
