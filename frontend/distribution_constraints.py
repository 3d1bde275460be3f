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

from .creation import full
from .creation import tensor as _tensor
from .ir.dtypes import bool_
from .movement import cat as _cat_tensors
from .movement import stack as _stack_tensors
from .typeinfo import finfo

__all__ = [
    "Constraint",
    "MixtureSameFamilyConstraint",
    "boolean",
    "cat",
    "corr_cholesky",
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
    "positive_semidefinite",
    "real",
    "real_vector",
    "simplex",
    "square",
    "stack",
    "symmetric",
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


class MixtureSameFamilyConstraint(Constraint):
    """MixtureSameFamily's support: its component distribution's `base_constraint`, checked
    with the components' dim put back (a value of the mixture against each component's
    region, valid where it lies in all of them, as torch's)."""

    def __init__(self, base_constraint: Constraint):
        if not isinstance(base_constraint, Constraint):
            raise AssertionError(
                f"base_constraint must be a Constraint, got {type(base_constraint).__name__}"
            )
        self.base_constraint = base_constraint

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return self.base_constraint.is_discrete

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        return self.base_constraint.event_dim

    def check(self, value):
        result = self.base_constraint.check(value.unsqueeze(-1 - self.event_dim))
        if value.dim() < self.event_dim:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {value.dim()}")
        keep = value.dim() - self.event_dim
        return result.reshape(tuple(result.shape[:keep]) + (-1,)).all(-1)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.base_constraint!r})"


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


class _Square(Constraint):
    """Square matrices (the last two dims)."""

    event_dim = 2

    def check(self, value):
        square = value.shape[-2] == value.shape[-1]
        return full(tuple(value.shape[:-2]), square, dtype=bool_, device=value.device)


class _Symmetric(_Square):
    """Square matrices equal to their transpose (to 1e-6)."""

    def check(self, value):
        square = super().check(value)
        if not bool(square.all()):
            return square
        return value.isclose(value.mT, atol=1e-6).flatten(-2).all(-1)


def _host_matrix_check(value, test) -> np.ndarray:
    """`test` (a numpy matrix -> bool) of each matrix of `value`, on the host."""
    host = value.detach().double().numpy()
    flat = host.reshape((-1,) + host.shape[-2:])
    return np.array([test(m) for m in flat], dtype=bool).reshape(host.shape[:-2])


def _has_cholesky(matrix: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return False
    return True


class _PositiveSemidefinite(_Symmetric):
    """Symmetric matrices with no negative eigenvalue: numpy's eigvalsh, on the host.
    (torch's answers its symmetry check alone where any matrix of the batch is not
    symmetric, so a symmetric indefinite one then passes; here each matrix is checked.)"""

    def check(self, value):
        symmetric = super().check(value)
        ok = _host_matrix_check(value, lambda m: bool((np.linalg.eigvalsh(m) >= 0).all()))
        return symmetric & _tensor(ok, device=value.device)


class _PositiveDefinite(_Symmetric):
    """Symmetric matrices (to 1e-6) with a Cholesky factor: numpy's, on the host (each
    matrix checked, as positive_semidefinite's)."""

    def check(self, value):
        symmetric = super().check(value)
        return symmetric & _tensor(_host_matrix_check(value, _has_cholesky), device=value.device)


class _CorrCholesky(Constraint):
    """Lower Cholesky factors of correlation matrices: lower triangular, a positive
    diagonal, and rows of unit length (to 10 eps per column)."""

    event_dim = 2

    def check(self, value):
        tol = finfo(value.dtype).eps * value.shape[-1] * 10
        row_norm = value.detach().pow(2).sum(-1).sqrt()
        unit_row_norm = ((row_norm - 1.0).abs() <= tol).all(-1)
        return lower_cholesky.check(value) & unit_row_norm


class _Cat(Constraint):
    """The constraints `cseq` on consecutive pieces of `lengths` (1 each by default) along
    `dim`, as torch.cat would join them."""

    def __init__(self, cseq, dim: int = 0, lengths=None):
        if not all(isinstance(c, Constraint) for c in cseq):
            raise AssertionError("All elements of cseq must be Constraint instances")
        self.cseq = list(cseq)
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.cseq):
            raise AssertionError(
                f"lengths ({len(self.lengths)}) must match cseq ({len(self.cseq)})"
            )
        self.dim = dim

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        checks, start = [], 0
        for constraint, length in zip(self.cseq, self.lengths):
            checks.append(constraint.check(value.narrow(self.dim, start, length)))
            start += length
        return _cat_tensors(checks, self.dim)


class _Stack(Constraint):
    """The constraints `cseq` on the slices of `dim`, one each."""

    def __init__(self, cseq, dim: int = 0):
        if not all(isinstance(c, Constraint) for c in cseq):
            raise AssertionError("All elements of cseq must be Constraint instances")
        self.cseq = list(cseq)
        self.dim = dim

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        dim = max(c.event_dim for c in self.cseq)
        if self.dim + dim < 0:
            dim += 1
        return dim

    def check(self, value):
        if not -value.dim() <= self.dim < value.dim():
            raise AssertionError(
                f"dim {self.dim} out of range for tensor with {value.dim()} dimensions"
            )
        slices = [value.select(self.dim, i) for i in range(value.shape[self.dim])]
        return _stack_tensors([c.check(v) for v, c in zip(slices, self.cseq)], self.dim)


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
positive_semidefinite = _PositiveSemidefinite()
corr_cholesky = _CorrCholesky()
square = _Square()
symmetric = _Symmetric()
cat = _Cat
stack = _Stack
