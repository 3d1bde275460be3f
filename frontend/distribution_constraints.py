"""`fusegrad.distributions.constraints`: the regions a distribution's parameters and samples
live in, as torch.distributions.constraints: each `check(value)` is a bool tensor of the
value's shape less the constraint's `event_dim` rightmost dims.

>>> import fusegrad as fg
>>> from fusegrad.distributions import constraints
>>> constraints.positive.check(fg.tensor([1.0, 0.0, -2.0])).tolist()
[True, False, False]
>>> constraints.simplex.check(fg.tensor([[0.25, 0.75], [0.5, 0.6]])).tolist()
[True, False]
>>> constraints.integer_interval(0, 2)
IntegerInterval(lower_bound=0, upper_bound=2)

The names and reprs are torch's (a ValueError from a distribution's validation names the
constraint by its repr). Of those over matrices, `lower_cholesky` and `positive_definite`
(MultivariateNormal's); the positive definite test factors each matrix with numpy on the
host, as torch's calls cholesky_ex.
"""

from __future__ import annotations

import numpy as np

from .creation import tensor as _tensor

__all__ = [
    "Constraint",
    "boolean",
    "dependent",
    "dependent_property",
    "greater_than",
    "greater_than_eq",
    "half_open_interval",
    "independent",
    "integer_interval",
    "interval",
    "is_dependent",
    "less_than",
    "lower_cholesky",
    "lower_triangular",
    "multinomial",
    "nonnegative",
    "nonnegative_integer",
    "one_hot",
    "positive",
    "positive_definite",
    "positive_integer",
    "real",
    "real_vector",
    "simplex",
    "unit_interval",
]


class Constraint:
    """A region a variable is valid in. `event_dim`: how many rightmost dims make one
    event, which `check` reduces away; `is_discrete`: whether the region is countable."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        """A bool tensor saying, per event of `value`, whether it lies in the region."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__[1:] + "()"


class _Dependent(Constraint):
    """A placeholder for a variable whose region depends on other variables (Uniform's
    support between its low and high): it cannot be checked alone."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        """`constraints.dependent(is_discrete=True, event_dim=1)`: one with those known."""
        if is_discrete is NotImplemented:
            is_discrete = self._is_discrete
        if event_dim is NotImplemented:
            event_dim = self._event_dim
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, x):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint) -> bool:
    """Whether `constraint` is a dependent one (validation skips those)."""
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    """A property on an instance (`Uniform(0, 1).support` is an Interval) that reads as a
    dependent constraint on the class (`Uniform.support`), as torch's decorator."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    def __call__(self, fn):  # type: ignore[override]
        """`@constraints.dependent_property(is_discrete=True, event_dim=0)`."""
        return _DependentProperty(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


class _IndependentConstraint(Constraint):
    """`base_constraint` over events of `reinterpreted_batch_ndims` more rightmost dims:
    an event is valid where all its entries are."""

    def __init__(self, base_constraint: Constraint, reinterpreted_batch_ndims: int):
        if not isinstance(base_constraint, Constraint):
            raise TypeError(f"base_constraint must be a Constraint, got {base_constraint!r}")
        if not isinstance(reinterpreted_batch_ndims, int) or reinterpreted_batch_ndims < 0:
            raise ValueError(
                f"reinterpreted_batch_ndims must be an int >= 0, got {reinterpreted_batch_ndims!r}"
            )
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return self.base_constraint.is_discrete

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        n = self.reinterpreted_batch_ndims
        if result.dim() < n:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {value.dim()}")
        return result.reshape(tuple(result.shape[: result.dim() - n]) + (-1,)).all(-1)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__[1:]}({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"
        )


class _Boolean(Constraint):
    """The two values {0, 1}."""

    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    """One-hot vectors along the last dim."""

    is_discrete = True
    event_dim = 1

    def check(self, value):
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


def _whole(value, within):
    """`within` where `value` is whole too: an integer tensor always is, so its check
    (`value % 1 == 0`, eight tensors) is left out (a Categorical's sample, validated by
    `log_prob` at every step of a policy's episode)."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and not getattr(dtype, "is_floating_point", True):
        return within
    return (value % 1 == 0) & within


class _IntegerInterval(Constraint):
    """The integers in [lower_bound, upper_bound]."""

    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return _whole(value, (self.lower_bound <= value) & (value <= self.upper_bound))

    def __repr__(self) -> str:
        bounds = f"lower_bound={self.lower_bound}, upper_bound={self.upper_bound}"
        return f"{type(self).__name__[1:]}({bounds})"


class _IntegerGreaterThan(Constraint):
    """The integers in [lower_bound, inf)."""

    is_discrete = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return _whole(value, value >= self.lower_bound)

    def __repr__(self) -> str:
        return f"{type(self).__name__[1:]}(lower_bound={self.lower_bound})"


class _Multinomial(Constraint):
    """Nonnegative vectors (along the last dim) summing to at most `upper_bound`: torch's
    weaker check of Multinomial's support (not that the sum is exactly the count)."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return (value >= 0).all(-1) & (value.sum(-1) <= self.upper_bound)


class _Real(Constraint):
    """The extended real line [-inf, inf]: everything but NaN."""

    def check(self, value):
        return value == value


class _GreaterThan(Constraint):
    """(lower_bound, inf]."""

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return self.lower_bound < value

    def __repr__(self) -> str:
        return f"{type(self).__name__[1:]}(lower_bound={self.lower_bound})"


class _GreaterThanEq(_GreaterThan):
    """[lower_bound, inf)."""

    def check(self, value):
        return self.lower_bound <= value


class _LessThan(Constraint):
    """[-inf, upper_bound)."""

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self) -> str:
        return f"{type(self).__name__[1:]}(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    """[lower_bound, upper_bound]."""

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        bounds = f"lower_bound={self.lower_bound}, upper_bound={self.upper_bound}"
        return f"{type(self).__name__[1:]}({bounds})"


class _HalfOpenInterval(_Interval):
    """[lower_bound, upper_bound)."""

    def check(self, value):
        return (self.lower_bound <= value) & (value < self.upper_bound)


class _Simplex(Constraint):
    """Probability vectors along the last dim: x >= 0 and |sum(x) - 1| < 1e-6."""

    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _LowerTriangular(Constraint):
    """Square matrices (the last two dims) that are zero above the diagonal."""

    event_dim = 2

    def check(self, value):
        return (value.tril() == value).reshape(tuple(value.shape[:-2]) + (-1,)).min(-1)[0]


class _LowerCholesky(Constraint):
    """Lower triangular matrices with a positive diagonal."""

    event_dim = 2

    def check(self, value):
        lower = (value.tril() == value).reshape(tuple(value.shape[:-2]) + (-1,)).min(-1)[0]
        positive = (value.diagonal(dim1=-2, dim2=-1) > 0).min(-1)[0]
        return lower & positive


class _PositiveDefinite(Constraint):
    """Symmetric matrices (to 1e-6) with a Cholesky factor: numpy's, on the host."""

    event_dim = 2

    def check(self, value):
        symmetric = value.isclose(value.mT, atol=1e-6).flatten(-2).all(-1)
        host = value.detach().double().numpy()
        flat = host.reshape((-1,) + host.shape[-2:])
        factors = []
        for matrix in flat:
            try:
                np.linalg.cholesky(matrix)
                factors.append(True)
            except np.linalg.LinAlgError:
                factors.append(False)
        ok = np.array(factors, dtype=bool).reshape(host.shape[:-2])
        return symmetric & _tensor(ok, device=value.device)


dependent = _Dependent()
dependent_property = _DependentProperty
independent = _IndependentConstraint
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
multinomial = _Multinomial
real = _Real()
real_vector = independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
positive_definite = _PositiveDefinite()
