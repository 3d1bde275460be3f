"""The base of `fusegrad.distributions`: `Distribution` (and `Independent`, which
TransformedDistribution builds on), torch.distributions.utils' helpers,
and the KL registry (`register_kl`, `kl_divergence`), as torch.distributions has them.

A distribution holds parameter tensors with a `batch_shape` (independent distributions of
one family, side by side) and an `event_shape` (the shape of one draw); a sample of
`sample_shape` has shape `sample_shape + batch_shape + event_shape`.

>>> import fusegrad as fg
>>> from fusegrad.distributions import Normal
>>> d = Normal(fg.zeros(3), fg.ones(3))
>>> d.batch_shape, d.event_shape, d.sample((5,)).shape
((3,), (), (5, 3))

As torch's, arguments are validated by default (`Distribution._validate_args` is
`__debug__`): parameters outside their constraint raise a ValueError at construction,
values outside the support at `log_prob` / `cdf`; `validate_args=False` or
`Distribution.set_default_validate_args(False)` turn it off. Each check reads one bool
back from the device. Shapes are tuples here (torch's are `torch.Size`).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from . import distribution_constraints as constraints
from .autograd import grad as _grad
from .autograd import realize
from .autograd_state import enable_grad, no_grad
from .creation import tensor as _tensor
from .halfdtypes import get_default_dtype
from .ir.dtypes import int64
from .movement import cat
from .shapeops import broadcast_tensors
from .tensor import Tensor
from .typeinfo import finfo

__all__ = [
    "Distribution",
    "ExponentialFamily",
    "broadcast_all",
    "clamp_probs",
    "kl_divergence",
    "lazy_property",
    "logits_to_probs",
    "probs_to_logits",
    "register_kl",
    "tril_matrix_to_vec",
    "vec_to_tril_matrix",
]

# what torch counts as a number parameter (a 0-d tensor of the default dtype)
_NUMBER = (int, float)


class Distribution:
    """The base class of probability distributions (torch.distributions.Distribution).

    A subclass sets `arg_constraints` and `support`, and defines what it can of `rsample`
    (reparameterized: gradients flow to the parameters), `sample`, `log_prob`, `cdf`,
    `icdf`, `entropy`, `mean`, `mode`, `variance` and `enumerate_support`; the rest raise
    NotImplementedError, as torch's.
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument validation on or off for every distribution made later without
        `validate_args=` (on by default, off under `python -O`)."""
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args: bool | None = None):
        self._batch_shape = tuple(batch_shape)
        self._event_shape = tuple(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            self._check_parameters()

    def _check_parameters(self) -> None:
        try:
            arg_constraints = self.arg_constraints
        except NotImplementedError:
            arg_constraints = {}
            warnings.warn(
                f"{self.__class__} does not define `arg_constraints`. Please set "
                "`arg_constraints = {}` or initialize the distribution with "
                "`validate_args=False` to turn off validation.",
                stacklevel=3,
            )
        checked = []  # (name, value, whether every element satisfies the constraint)
        for param, constraint in arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue  # cannot be checked alone
            if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                continue  # the other parameterization (logits where probs were given)
            value = getattr(self, param)
            checked.append((param, value, constraint, constraint.check(value).all()))
        # the parameters computed with their checks, in one plan: a sample or log_prob
        # then reads them instead of computing them again (a policy's forward pass, each
        # step of an episode), as torch's eager values are there
        tensors = [t for _, value, _, ok in checked for t in (value, ok) if isinstance(t, Tensor)]
        if tensors:
            realize(*tensors)
        for param, value, constraint, ok in checked:
            if not bool(ok):
                raise ValueError(
                    f"Expected parameter {param} ({type(value).__name__} of shape "
                    f"{tuple(value.shape)}) of distribution {self!r} to satisfy the "
                    f"constraint {constraint!r}, but found invalid values:\n{value}"
                )

    def expand(self, batch_shape, _instance=None):
        """A distribution of this family with its parameters expanded (views) to
        `batch_shape`; arguments are not checked again."""
        raise NotImplementedError

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self._batch_shape

    @property
    def event_shape(self) -> tuple[int, ...]:
        return self._event_shape

    @property
    def arg_constraints(self) -> dict:
        raise NotImplementedError

    @property
    def support(self):
        raise NotImplementedError

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError

    @property
    def mode(self) -> Tensor:
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def sample(self, sample_shape=()) -> Tensor:
        """A draw of shape `sample_shape + batch_shape + event_shape`, without gradient."""
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        """A reparameterized draw: a differentiable function of the parameters."""
        raise NotImplementedError

    def sample_n(self, n: int) -> Tensor:
        warnings.warn(
            "`sample_n(n)` will be deprecated. Use `sample((n,))` instead.",
            FutureWarning,
            stacklevel=2,
        )
        return self.sample((n,))

    def log_prob(self, value: Tensor) -> Tensor:
        raise NotImplementedError

    def cdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError

    def icdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError

    def enumerate_support(self, expand: bool = True) -> Tensor:
        raise NotImplementedError

    def entropy(self) -> Tensor:
        raise NotImplementedError

    def perplexity(self) -> Tensor:
        return self.entropy().exp()

    def _extended_shape(self, sample_shape=()) -> tuple[int, ...]:
        """sample_shape + batch_shape + event_shape."""
        return tuple(sample_shape) + self._batch_shape + self._event_shape

    def _validate_sample(self, value) -> None:
        """Raise torch's ValueError where `value` is not a tensor, does not broadcast with
        batch_shape + event_shape, or leaves the support."""
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        shape = tuple(value.shape)
        event_dim_start = len(shape) - len(self._event_shape)
        if shape[event_dim_start:] != self._event_shape:
            raise ValueError(
                f"The right-most size of value must match event_shape: {shape} vs "
                f"{self._event_shape}."
            )
        expected = self._batch_shape + self._event_shape
        for i, j in zip(reversed(shape), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(
                    "Value is not broadcastable with batch_shape+event_shape: "
                    f"{shape} vs {expected}."
                )
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(
                f"{self.__class__} does not define `support` to enable sample validation. "
                "Please initialize the distribution with `validate_args=False` to turn off "
                "validation.",
                stacklevel=3,
            )
            return
        ok = support.check(value).all()
        realize(value, ok)  # (the value with its check: a sample read next reads its buffer)
        if not bool(ok):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape {shape}) to be "
                f"within the support ({support!r}) of the distribution {self!r}, but found "
                f"invalid values:\n{value}"
            )

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                "__init__ method must also define a custom .expand() method."
            )
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        shown = []
        for p in names:
            v = self.__dict__[p]
            shown.append(f"{p}: {v if v.numel() == 1 else tuple(v.shape)}")
        return f"{self.__class__.__name__}({', '.join(shown)})"


class ExponentialFamily(Distribution):
    """The base of exponential families (torch.distributions.ExponentialFamily): densities
    p(x; t) = exp(<t, T(x)> - F(t) + k(x)) of natural parameters t (`_natural_params`),
    log normalizer F (`_log_normalizer`) and carrier measure k (`_mean_carrier_measure`,
    its expectation). `entropy` is F(t) - <t, grad F(t)> - E[k(x)], by autograd, for a
    family that does not give its own; `kl_divergence` of two of one such family is the
    Bregman divergence of F, as torch's."""

    @property
    def _natural_params(self) -> tuple:
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self) -> float:
        raise NotImplementedError

    def entropy(self) -> Tensor:
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        with enable_grad():
            lg_normal = self._log_normalizer(*nparams)
            gradients = _grad(lg_normal.sum(), nparams, create_graph=True)
        result = result + lg_normal
        for nparam, g in zip(nparams, gradients):
            result = result - (nparam * g).reshape(self._batch_shape + (-1,)).sum(-1)
        return result


class Independent(Distribution):
    """`base_distribution` with its `reinterpreted_batch_ndims` rightmost batch dims read
    as event dims: log_prob and entropy sum over them (a diagonal Normal over vectors).

    >>> import fusegrad as fg
    >>> from fusegrad.distributions import Normal
    >>> d = Independent(Normal(fg.zeros(2, 3), fg.ones(2, 3)), 1)
    >>> d.batch_shape, d.event_shape, d.log_prob(fg.zeros(2, 3)).shape
    ((2,), (3,), (2,))
    """

    arg_constraints: dict = {}

    def __init__(
        self, base_distribution, reinterpreted_batch_ndims: int, validate_args=None
    ) -> None:
        if reinterpreted_batch_ndims > len(base_distribution.batch_shape):
            raise ValueError(
                "Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), "
                f"actual {reinterpreted_batch_ndims} vs {len(base_distribution.batch_shape)}"
            )
        shape = base_distribution.batch_shape + base_distribution.event_shape
        event_dim = reinterpreted_batch_ndims + len(base_distribution.event_shape)
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Independent, _instance)
        batch_shape = tuple(batch_shape)
        n = self.reinterpreted_batch_ndims
        new.base_dist = self.base_dist.expand(batch_shape + self.event_shape[:n])
        new.reinterpreted_batch_ndims = n
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def has_enumerate_support(self) -> bool:  # type: ignore[override]
        return self.reinterpreted_batch_ndims == 0 and self.base_dist.has_enumerate_support

    @constraints.dependent_property
    def support(self):
        result = self.base_dist.support
        if self.reinterpreted_batch_ndims:
            result = constraints.independent(result, self.reinterpreted_batch_ndims)
        return result

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    def sample(self, sample_shape=()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value: Tensor) -> Tensor:
        return _sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self) -> Tensor:
        return _sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        if self.reinterpreted_batch_ndims > 0:
            raise NotImplementedError("Enumeration over cartesian product is not implemented")
        return self.base_dist.enumerate_support(expand=expand)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_dist}, {self.reinterpreted_batch_ndims})"


class lazy_property:  # noqa: N801  (torch's name)
    """A property computed on first read (with gradients recorded) and then kept on the
    instance: Categorical's `logits` where it was given `probs`, and the other way."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        functools.update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class BinaryParameters:
    """`probs` or `logits` of binary events, one given and the other computed on first
    read: the parameterization Bernoulli, Binomial, Geometric and LogitRelaxedBernoulli
    share (a base before `Distribution`)."""

    def _take_parameter(self, probs, logits, *others) -> tuple[tuple[int, ...], list]:
        """Keep the one of `probs` / `logits` given, broadcast with `others`; return the
        batch shape (() for a number alone) and `others` broadcast."""
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        given = probs if probs is not None else logits
        *rest, param = broadcast_all(*others, given)
        setattr(self, "probs" if probs is not None else "logits", param)
        self._param = param
        alone = isinstance(given, _NUMBER) and not others
        return (() if alone else tuple(param.shape)), rest

    def _expand_parameter(self, new, batch_shape: tuple[int, ...]) -> None:
        """Give `new` this distribution's given parameter expanded to `batch_shape`."""
        for name in ("probs", "logits"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(batch_shape))
                new._param = new.__dict__[name]

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self) -> tuple[int, ...]:
        return tuple(self._param.shape)


def broadcast_all(*values) -> tuple[Tensor, ...]:
    """The values broadcast to one shape; numbers become tensors of the first tensor's
    dtype and device (the default dtype where all are numbers), as torch's.

    >>> import fusegrad as fg
    >>> [t.shape for t in broadcast_all(fg.zeros(2, 1), 1.0, fg.ones(3))]
    [(2, 3), (2, 3), (2, 3)]
    """
    if not all(isinstance(v, (Tensor, *_NUMBER)) for v in values):
        raise ValueError(
            "Input arguments must all be instances of Number, torch.Tensor or objects "
            "implementing __torch_function__."
        )
    like = next((v for v in values if isinstance(v, Tensor)), None)
    options = {"dtype": get_default_dtype()}
    if like is not None:
        options = {"dtype": like.dtype, "device": like.device}
    tensors = [v if isinstance(v, Tensor) else _tensor(float(v), **options) for v in values]
    return broadcast_tensors(*tensors)


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    """Probabilities from log-odds (`is_binary`: sigmoid) or from unnormalized log
    probabilities along the last dim (softmax)."""
    return logits.sigmoid() if is_binary else logits.softmax(-1)


def clamp_probs(probs: Tensor) -> Tensor:
    """`probs` clamped to [eps, 1 - eps], eps the dtype's machine epsilon."""
    eps = finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    """Log-odds (`is_binary`) or log probabilities of clamped probabilities."""
    ps = clamp_probs(probs)
    return ps.log() - (-ps).log1p() if is_binary else ps.log()


def _tril_positions(n: int, diag: int) -> np.ndarray:
    """The flat (row-major) positions in an n x n matrix of the entries on or below
    diagonal `diag`, in torch's order (row by row)."""
    rows, cols = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return np.flatnonzero(cols < rows + (diag + 1))


def vec_to_tril_matrix(vec: Tensor, diag: int = 0) -> Tensor:
    """The n x n matrix whose entries on or below diagonal `diag` are `vec`'s last dim, row
    by row, and zeros elsewhere (n from the vector's length).

    >>> import fusegrad as fg
    >>> vec_to_tril_matrix(fg.tensor([1.0, 2.0, 3.0])).tolist()
    [[1.0, 0.0], [2.0, 3.0]]
    """
    length = vec.shape[-1]
    b = 1 + 2 * diag
    n = (-b + (b * b + 8 * length + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    if abs(round(n) - n) > finfo(vec.dtype).eps:
        raise ValueError(
            f"The size of last dimension is {length} which cannot be expressed as "
            "the lower triangular part of a square D x D matrix."
        )
    n = round(n)
    where_from = np.full(n * n, length, dtype=np.int64)  # the zero appended below
    where_from[_tril_positions(n, diag)] = np.arange(length)
    padded = cat([vec, vec.new_zeros(tuple(vec.shape[:-1]) + (1,))], -1)
    index = _tensor(where_from, dtype=int64, device=vec.device)
    return padded[..., index].reshape(tuple(vec.shape[:-1]) + (n, n))


def tril_matrix_to_vec(mat: Tensor, diag: int = 0) -> Tensor:
    """The entries of `mat` (the last two dims, square) on or below diagonal `diag`, row
    by row.

    >>> import fusegrad as fg
    >>> tril_matrix_to_vec(fg.tensor([[1.0, 9.0], [2.0, 3.0]])).tolist()
    [1.0, 2.0, 3.0]
    """
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    index = _tensor(_tril_positions(n, diag), dtype=int64, device=mat.device)
    return mat.flatten(-2)[..., index]


def _sum_rightmost(value: Tensor, dim: int) -> Tensor:
    """`value` summed over its `dim` rightmost dims."""
    if dim == 0:
        return value
    return value.reshape(tuple(value.shape[:-dim]) + (-1,)).sum(-1)


# ------------------------------------------------------------------------ KL divergence
# (type_p, type_q) -> function: the pairs registered; lookups, memoized, take the most
# specific registered pair by subclass, as torch's
_KL_REGISTRY: dict[tuple[type, type], object] = {}
_KL_MEMOIZE: dict[tuple[type, type], object] = {}


def register_kl(type_p: type, type_q: type):
    """Register the decorated function as `kl_divergence(p, q)` for p of `type_p` (or a
    subclass) and q of `type_q`.

    >>> from fusegrad.distributions import Normal
    >>> class Mine(Normal): ...
    >>> @register_kl(Mine, Normal)
    ... def kl_mine_normal(p, q):
    ...     return p.loc * 0
    >>> kl_divergence(Mine(1.0, 1.0), Normal(0.0, 1.0)).item()
    0.0
    """
    for t in (type_p, type_q):
        if not (isinstance(t, type) and issubclass(t, Distribution)):
            raise TypeError(f"Expected type_p and type_q to be Distribution subclasses, got {t}")

    def decorator(fun):
        _KL_REGISTRY[type_p, type_q] = fun
        _KL_MEMOIZE.clear()  # the most specific match may have changed
        return fun

    return decorator


def _more_specific(a: tuple[type, ...], b: tuple[type, ...]) -> bool:
    """Whether pair `a` sorts at or before `b`: lexicographically by subclass."""
    for x, y in zip(a, b):
        if not issubclass(x, y):
            return False
        if x is not y:
            break
    return True


def _least(pairs: list[tuple[type, ...]]) -> tuple[type, ...]:
    best = pairs[0]
    for pair in pairs[1:]:
        if _more_specific(pair, best) and pair != best:
            best = pair
    return best


def _dispatch_kl(type_p: type, type_q: type):
    matches = [(p, q) for p, q in _KL_REGISTRY if issubclass(type_p, p) and issubclass(type_q, q)]
    if not matches:
        return NotImplemented
    left_p, left_q = _least(matches)
    right_q, right_p = _least([(q, p) for p, q in matches])
    left, right = _KL_REGISTRY[left_p, left_q], _KL_REGISTRY[right_p, right_q]
    if left is not right:
        warnings.warn(
            f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). "
            f"Please register_kl({left_p.__name__}, {right_q.__name__})",
            RuntimeWarning,
            stacklevel=3,
        )
    return left


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q), batched over the distributions' batch_shape, by the function
    registered for their types (`register_kl`); NotImplementedError for a pair without
    one, as torch's."""
    key = (type(p), type(q))
    fun = _KL_MEMOIZE.get(key)
    if fun is None:
        fun = _KL_MEMOIZE[key] = _dispatch_kl(*key)
    if fun is NotImplemented:
        raise NotImplementedError(
            f"No KL(p || q) is implemented for p type {p.__class__.__name__} and q type "
            f"{q.__class__.__name__}"
        )
    return fun(p, q)
