"""fusegrad.distributions.constraints: each check against its definition, event dims
reduced, and torch's reprs (validation errors name constraints by them; the strings are
PyTorch 2.14.1's)."""

from __future__ import annotations

import math

import pytest

import fusegrad as fg
from fusegrad.distributions import Categorical, MixtureSameFamily, Uniform
from fusegrad.distributions import constraints as C


def test_pointwise_checks():
    x = fg.tensor([-1.0, 0.0, 0.5, 1.0, 2.0, math.nan])
    assert C.real.check(x).tolist() == [True] * 5 + [False]
    assert C.positive.check(x).tolist() == [False, False, True, True, True, False]
    assert C.nonnegative.check(x).tolist() == [False, True, True, True, True, False]
    assert C.unit_interval.check(x).tolist() == [False, True, True, True, False, False]
    assert C.half_open_interval(0.0, 1.0).check(x).tolist() == [False, True, True] + [False] * 3
    assert C.less_than(1.0).check(x).tolist() == [True, True, True, False, False, False]
    assert C.boolean.check(x).tolist() == [False, True, False, True, False, False]
    assert C.integer_interval(0, 1).check(x).tolist() == [False, True, False, True, False, False]
    assert C.nonnegative_integer.check(x).tolist() == [False, True, False, True, True, False]
    assert C.positive_integer.check(x).tolist() == [False, False, False, True, True, False]


def test_integer_checks_of_integer_tensors_build_no_remainder():
    """An integer tensor is whole by its dtype: its integer checks are the bounds alone (a
    Categorical's sample is checked at every step of an episode), with the same answers;
    a float tensor's still checks `% 1`."""
    made = []
    real = fg.Tensor.__init__

    def counted(self, *args, **kwargs):
        made.append(1)
        real(self, *args, **kwargs)

    ints = fg.tensor([-1, 0, 1, 2])
    fg.Tensor.__init__ = counted
    try:
        got = C.integer_interval(0, 1).check(ints)
        at_least = C.nonnegative_integer.check(ints)
    finally:
        fg.Tensor.__init__ = real
    assert got.tolist() == [False, True, True, False]
    assert at_least.tolist() == [False, True, True, True]
    assert len(made) <= 5, len(made)  # two comparisons and an and, one comparison
    assert C.integer_interval(0, 3).check(fg.tensor([0.5, 2.0])).tolist() == [False, True]
    assert C.nonnegative_integer.check(fg.tensor([True, False])).tolist() == [True, True]


def test_bounds_may_be_tensors_and_broadcast():
    low, high = fg.tensor([0.0, 1.0]), fg.tensor([2.0, 3.0])
    value = fg.tensor([[1.0, 0.5], [2.0, 3.0]])
    assert C.interval(low, high).check(value).tolist() == [[True, False], [True, True]]
    assert C.greater_than(low).check(value).tolist() == [[True, False], [True, True]]


def test_event_constraints_reduce_their_event_dims():
    probs = fg.tensor([[0.25, 0.75], [0.5, 0.6], [-0.5, 1.5]])
    assert C.simplex.check(probs).tolist() == [True, False, False]
    assert C.simplex.event_dim == 1 and C.real_vector.event_dim == 1
    x = fg.tensor([[0.0, 1.0], [math.nan, 1.0]])
    assert C.real_vector.check(x).tolist() == [True, False]
    assert C.one_hot.check(fg.tensor([[0.0, 1.0], [1.0, 1.0]])).tolist() == [True, False]
    two = C.independent(C.positive, 2)
    assert two.event_dim == 2 and two.check(fg.ones(3, 2, 2)).shape == (3,)
    with pytest.raises(ValueError, match=r"Expected value.dim\(\) >= 2 but got 1"):
        two.check(fg.ones(2))


def test_dependent_constraints_cannot_be_checked():
    assert C.is_dependent(C.dependent) and not C.is_dependent(C.real)
    with pytest.raises(ValueError, match="Cannot determine validity of dependent constraint"):
        C.dependent.check(fg.ones(1))
    with pytest.raises(NotImplementedError, match="cannot be determined statically"):
        C.dependent.event_dim  # noqa: B018
    assert C.dependent(is_discrete=True, event_dim=1).event_dim == 1

    class Box:
        @C.dependent_property(is_discrete=False, event_dim=0)
        def support(self):
            return C.interval(0.0, self.width)

        width = 3.0

    assert C.is_dependent(Box.support) and Box.support.event_dim == 0
    assert repr(Box().support) == "Interval(lower_bound=0.0, upper_bound=3.0)"


def test_reprs_are_torchs():
    assert repr(C.simplex) == "Simplex()"
    assert repr(C.real) == "Real()" and repr(C.boolean) == "Boolean()"
    assert repr(C.positive) == "GreaterThan(lower_bound=0.0)"
    assert repr(C.nonnegative) == "GreaterThanEq(lower_bound=0.0)"
    assert repr(C.unit_interval) == "Interval(lower_bound=0.0, upper_bound=1.0)"
    assert repr(C.integer_interval(0, 2)) == "IntegerInterval(lower_bound=0, upper_bound=2)"
    assert repr(C.nonnegative_integer) == "IntegerGreaterThan(lower_bound=0)"
    assert repr(C.real_vector) == "IndependentConstraint(Real(), 1)"
    assert repr(C.less_than(0.0)) == "LessThan(upper_bound=0.0)"


def test_matrix_constraints():
    pd = fg.tensor([[[2.0, 1.0], [1.0, 2.0]], [[1.0, 2.0], [2.0, 1.0]], [[1.0, 0.5], [0.0, 1.0]]])
    assert C.positive_definite.check(pd).tolist() == [True, False, False]  # (not symmetric)
    tril = fg.tensor([[[1.0, 0.0], [3.0, 2.0]], [[1.0, 1.0], [3.0, 2.0]], [[1.0, 0.0], [3.0, 0.0]]])
    assert C.lower_cholesky.check(tril).tolist() == [True, False, False]
    assert C.lower_triangular.check(tril).tolist() == [True, False, True]
    assert repr(C.positive_definite) == "PositiveDefinite()" and C.lower_cholesky.event_dim == 2


def test_mixture_same_family_constraint():
    # a value of the mixture lies in its support where every component's region holds it
    # (torch's check: the components' dim put back)
    mix = Categorical(fg.tensor([[0.5, 0.5], [0.3, 0.7]]))
    comp = Uniform(fg.tensor([[0.0, 1.0], [-1.0, 0.5]]), fg.tensor([[2.0, 3.0], [1.0, 2.0]]))
    m = MixtureSameFamily(mix, comp)
    assert isinstance(m.support, C.MixtureSameFamilyConstraint) and m.support.event_dim == 0
    assert m.support.check(fg.tensor([1.5, 0.7])).tolist() == [True, True]
    assert m.support.check(fg.tensor([0.5, 0.7])).tolist() == [False, True]
    with pytest.raises(ValueError, match="within the support"):
        m.log_prob(fg.tensor([0.5, 0.7]))
    vec = C.MixtureSameFamilyConstraint(C.real_vector)
    assert repr(vec) == "MixtureSameFamilyConstraint(IndependentConstraint(Real(), 1))"
    assert vec.check(fg.zeros(4, 3)).tolist() == [True] * 4
