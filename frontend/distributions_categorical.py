"""`fusegrad.distributions`' categorical family: Categorical, OneHotCategorical (and its
straight-through `OneHotCategoricalStraightThrough`), Multinomial, and the counting
families Geometric, Binomial and NegativeBinomial, with torch's parameters, shapes, validation and
formulas (re-exported by distributions.py).

>>> import fusegrad as fg
>>> from fusegrad.distributions import Binomial, OneHotCategorical
>>> OneHotCategorical(fg.tensor([0.25, 0.75])).sample().shape
(2,)
>>> round(Binomial(4, fg.tensor(0.5)).log_prob(fg.tensor(2.0)).exp().item(), 4)
0.375

Categorical draws invert the cumulative probabilities (one uniform per draw, fusegrad's
own stream; torch calls multinomial); OneHotCategorical and Multinomial count such draws.
Binomial draws come from numpy's `binomial` on the host (seeded from fusegrad's stream:
`fg.manual_seed` repeats them; `fusegrad.jit` refuses them), Geometric's lazily.
"""

from __future__ import annotations

import math

import numpy as np

from . import distribution_constraints as constraints
from .autograd_state import no_grad
from .creation import arange, eye, full, rand, zeros_like
from .creation import tensor as _tensor
from .creation_nodes import host_rng
from .distribution import (
    BinaryParameters,
    Distribution,
    broadcast_all,
    lazy_property,
    logits_to_probs,
    probs_to_logits,
)
from .distributions_gamma import Gamma, Poisson
from .errors import JitError, fail
from .ir.dtypes import float64, int64
from .jithooks import recording
from .shapeops import broadcast_tensors
from .tensor import Tensor, where
from .typeinfo import finfo

__all__ = [
    "Binomial",
    "Categorical",
    "Geometric",
    "Multinomial",
    "NegativeBinomial",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
]
_NUMBER = (int, float)


def _softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)), as torch's softplus (beta 1, threshold 20: x itself above it)."""
    return where(x > 20, x, x.clamp(max=20).exp().log1p())


def _log_sigmoid(x: Tensor) -> Tensor:
    """log(sigmoid(x)): x - log1p(exp(x)) below 0, -log1p(exp(-x)) from 0 (exp never
    overflows, and the gradient is sigmoid(-x) at 0 too, where min(x, 0) - log1p(exp(-|x|))
    would give the kinks' one-sided slopes)."""
    negative = x < 0
    below = where(negative, x, 0.0)
    above = where(negative, 0.0, x)
    return where(negative, below - below.exp().log1p(), -(-above).exp().log1p())


def _bce_with_logits(logits: Tensor, target: Tensor) -> Tensor:
    """Binary cross entropy of `target` against sigmoid(logits), elementwise."""
    return (1 - target) * logits - _log_sigmoid(logits)


class Categorical(Distribution):
    """Draws of 0..K-1 with the probabilities along the last dim of `probs` (normalized to
    sum to 1) or `logits` (unnormalized log probabilities, normalized by logsumexp): give
    one. Its other dims are the batch.

    >>> import fusegrad as fg
    >>> m = Categorical(logits=fg.tensor([[0.0, 0.0], [0.0, 1.0]]))
    >>> m.batch_shape, m.sample((4,)).shape, [round(p, 4) for p in m.probs[1].tolist()]
    ((2,), (4, 2), [0.2689, 0.7311])
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.shape[-1]
        super().__init__(tuple(self._param.shape[:-1]), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Categorical, _instance)
        param_shape = tuple(batch_shape) + (self._num_events,)
        for name in ("probs", "logits"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(param_shape))
                new._param = new.__dict__[name]
        new._num_events = self._num_events
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits)

    @property
    def param_shape(self) -> tuple[int, ...]:
        return tuple(self._param.shape)

    @property
    def mean(self) -> Tensor:
        return full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    @property
    def mode(self) -> Tensor:
        return self.probs.argmax(dim=-1)

    @property
    def variance(self) -> Tensor:
        return full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    def sample(self, sample_shape=()) -> Tensor:
        """int64 draws of shape sample_shape + batch_shape: the number of cumulative
        probabilities (but the last) at or below a uniform draw scaled to their total."""
        shape = self._extended_shape(sample_shape)
        with no_grad():
            cumulative = self.probs.detach().to(float64).cumsum(-1)
            u = rand(shape + (1,), dtype=float64, device=cumulative.device)
            return (cumulative[..., :-1] <= u * cumulative[..., -1:]).sum(-1).to(int64)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self) -> Tensor:
        logits = self.logits.clamp(min=finfo(self.logits.dtype).min)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = arange(self._num_events, dtype=int64, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values


def _one_hot(index: Tensor, n: int, dtype) -> Tensor:
    """`index` (int64) as one-hot vectors of length n along a new last dim."""
    return (index.unsqueeze(-1) == arange(n, dtype=int64, device=index.device)).to(dtype)


class OneHotCategorical(Distribution):
    """Categorical draws as one-hot vectors (the last dim of `probs` or `logits`: the
    event); `log_prob` reads the index of each value's largest entry.

    >>> import fusegrad as fg
    >>> d = OneHotCategorical(logits=fg.zeros(2, 3))
    >>> d.batch_shape, d.event_shape, d.enumerate_support().shape
    ((2,), (3,), (3, 2, 3))
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None):
        self._categorical = Categorical(probs, logits)
        batch_shape = self._categorical.batch_shape
        event_shape = self._categorical.param_shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(type(self), _instance)
        batch_shape = tuple(batch_shape)
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def _param(self) -> Tensor:
        return self._categorical._param

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self._categorical.param_shape

    @property
    def mean(self) -> Tensor:
        return self._categorical.probs

    @property
    def mode(self) -> Tensor:
        probs = self._categorical.probs
        return _one_hot(probs.argmax(-1), probs.shape[-1], probs.dtype)

    @property
    def variance(self) -> Tensor:
        probs = self._categorical.probs
        return probs * (1 - probs)

    def sample(self, sample_shape=()) -> Tensor:
        probs = self._categorical.probs
        with no_grad():
            index = self._categorical.sample(sample_shape)
            return _one_hot(index, probs.shape[-1], probs.dtype)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self) -> Tensor:
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True) -> Tensor:
        n = self.event_shape[0]
        values = eye(n, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((n,) + (1,) * len(self.batch_shape) + (n,))
        return values.expand((n,) + self.batch_shape + (n,)) if expand else values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """OneHotCategorical whose `rsample` is the straight-through estimator: the one-hot
    draw's value, with the gradient of `probs` (draw + probs - probs.detach())."""

    has_rsample = True

    def rsample(self, sample_shape=()) -> Tensor:
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())


class Multinomial(Distribution):
    """Counts of `total_count` Categorical draws per category (the last dim of `probs` or
    `logits`: the event). `total_count` is an int (one for the whole batch); `log_prob`
    needs no total_count (a value's sum is its own).

    >>> import fusegrad as fg
    >>> d = Multinomial(3, fg.tensor([0.5, 0.25, 0.25]))
    >>> d.sample().sum().item(), round(d.log_prob(fg.tensor([1.0, 1.0, 1.0])).item(), 4)
    (3.0, -1.674)
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        batch_shape = self._categorical.batch_shape
        event_shape = self._categorical.param_shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        batch_shape = tuple(batch_shape)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        new._binomial = Binomial(self.total_count, probs=new._categorical.probs)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def _param(self) -> Tensor:
        return self._categorical._param

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self._categorical.param_shape

    @property
    def mean(self) -> Tensor:
        return self.probs * self.total_count

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        """The counts of total_count Categorical draws, in the probabilities' dtype."""
        probs = self.probs
        with no_grad():
            draws = self._categorical.sample((self.total_count,) + tuple(sample_shape))
            counts = _one_hot(draws, probs.shape[-1], probs.dtype).sum(0)
            return counts.expand(self._extended_shape(sample_shape))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = (value.sum(-1) + 1).lgamma()
        log_factorial_xs = (value + 1).lgamma().sum(-1)
        logits = where((value == 0) & (logits == -math.inf), 0.0, logits)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)

    def entropy(self) -> Tensor:
        """torch's: n H(categorical) - log n! + sum_k E[log x_k!], x_k Binomial(n, p_k)."""
        n = self.total_count
        term1 = n * self._categorical.entropy() - math.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = self._binomial.log_prob(support).exp()
        weights = (support + 1).lgamma()
        return term1 + (binomial_probs * weights).sum(0).sum(-1)


def _clamp_by_zero(x: Tensor) -> Tensor:
    """max(x, 0) with the gradient 0.5 at 0, as torch's."""
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class Binomial(BinaryParameters, Distribution):
    """Successes in `total_count` trials of probability `probs` (or sigmoid(`logits`)),
    in the parameter's dtype; total_count broadcasts with the parameter (a tensor or an
    int). Draws are numpy's `binomial` on the host.

    >>> import fusegrad as fg
    >>> d = Binomial(fg.tensor([2.0, 10.0]), fg.tensor([0.5, 0.3]))
    >>> d.mean.tolist(), d.mode.tolist()
    ([1.0, 3.0], [1.0, 3.0])
    """

    arg_constraints = {
        "total_count": constraints.nonnegative_integer,
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        batch_shape, (count,) = self._take_parameter(probs, logits, total_count)
        self.total_count = count.to(self._param.dtype)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Binomial, _instance)
        batch_shape = tuple(batch_shape)
        new.total_count = self.total_count.expand(batch_shape)
        self._expand_parameter(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.probs

    @property
    def mode(self) -> Tensor:
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        if recording():
            fail(JitError, "Binomial.sample", "binomial draws are made on the host")
        with no_grad():
            n = self.total_count.detach().expand(shape).double().numpy()
            p = self.probs.detach().expand(shape).double().numpy()
            draws = host_rng().binomial(n.astype(np.int64), np.clip(p, 0.0, 1.0))
            return _tensor(draws, dtype=self._param.dtype, device=self._param.device)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        n, logits = self.total_count, self.logits
        log_factorial_n = (n + 1).lgamma()
        log_factorial_k = (value + 1).lgamma()
        log_factorial_nmk = (n - value + 1).lgamma()
        normalize = n * _clamp_by_zero(logits) + n * (-logits.abs()).exp().log1p()
        normalize = normalize - log_factorial_n
        return value * logits - log_factorial_k - log_factorial_nmk - normalize

    def entropy(self) -> Tensor:
        total = int(self.total_count.max().item()) if self.total_count.numel() else 0
        if not bool((self.total_count == total).all()):
            raise NotImplementedError("Inhomogeneous total count not supported by `entropy`.")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(log_prob.exp() * log_prob).sum(0)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        total = int(self.total_count.max().item()) if self.total_count.numel() else 0
        if not bool((self.total_count == total).all()):
            raise NotImplementedError(
                "Inhomogeneous total count not supported by `enumerate_support`."
            )
        values = arange(1 + total, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values


class Geometric(BinaryParameters, Distribution):
    """The number of failures before the first success of trials of probability `probs`
    (or sigmoid(`logits`)): P(k) = (1 - p)^k p, k = 0, 1, ...; probs must be positive.

    >>> import fusegrad as fg
    >>> d = Geometric(fg.tensor([0.5, 1.0]))
    >>> d.mean.tolist(), d.log_prob(fg.tensor([1.0, 0.0])).exp().tolist()
    ([1.0, 0.0], [0.25, 1.0])
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None):
        batch_shape, _ = self._take_parameter(probs, logits)
        super().__init__(batch_shape, validate_args=validate_args)
        if self._validate_args and probs is not None and not bool((self.probs > 0).all()):
            raise ValueError(
                f"Expected parameter probs ({type(self.probs).__name__} of shape "
                f"{tuple(self.probs.shape)}) of distribution {self!r} to be positive but "
                f"found invalid values:\n{self.probs[self.probs <= 0]}"
            )

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Geometric, _instance)
        batch_shape = tuple(batch_shape)
        self._expand_parameter(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return 1.0 / self.probs - 1.0

    @property
    def mode(self) -> Tensor:
        return zeros_like(self.probs)

    @property
    def variance(self) -> Tensor:
        return (1.0 / self.probs - 1.0) / self.probs

    def sample(self, sample_shape=()) -> Tensor:
        """floor(log u / log(1 - p)), u uniform in [tiny, 1), as torch's."""
        shape = self._extended_shape(sample_shape)
        probs = self.probs.detach()
        with no_grad():
            u = rand(shape, dtype=probs.dtype, device=probs.device).clamp(
                min=finfo(probs.dtype).tiny
            )
            return (u.log() / (-probs).log1p()).floor()

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        probs = where((probs == 1) & (value == 0), 0.0, probs)  # 0 * log(0): 0
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self) -> Tensor:
        return _bce_with_logits(self.logits, self.probs) / self.probs


class NegativeBinomial(BinaryParameters, Distribution):
    """The number of successes (each of probability `probs`, or sigmoid(`logits`)) before
    `total_count` failures: P(k) = C(k + r - 1, k) p^k (1 - p)^r; a real total_count r > 0
    makes it a gamma-Poisson mixture. Draws are a Poisson draw at a Gamma(r, (1 - p) / p)
    draw, both on the host, as torch's; no `rsample`, no `entropy`.

    >>> import fusegrad as fg
    >>> d = NegativeBinomial(fg.tensor(3.0), fg.tensor(0.5))
    >>> d.mean.item(), d.variance.item(), round(d.log_prob(fg.tensor(0.0)).exp().item(), 4)
    (3.0, 6.0, 0.125)
    """

    arg_constraints = {
        "total_count": constraints.greater_than_eq(0),
        "probs": constraints.half_open_interval(0.0, 1.0),
        "logits": constraints.real,
    }
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args: bool | None = None):
        _, (count,) = self._take_parameter(probs, logits, total_count)
        self.total_count = count.to(self._param.dtype)
        super().__init__(tuple(self._param.shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(NegativeBinomial, _instance)
        batch_shape = tuple(batch_shape)
        new.total_count = self.total_count.expand(batch_shape)
        self._expand_parameter(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.logits.exp()

    @property
    def mode(self) -> Tensor:
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self) -> Tensor:
        return self.mean / (-self.logits).sigmoid()

    @lazy_property
    def _gamma(self) -> Gamma:
        return Gamma(self.total_count, (-self.logits).exp(), validate_args=False)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            rate = self._gamma.sample(sample_shape)
            return Poisson(rate, validate_args=False).sample()

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        r, logits = self.total_count, self.logits
        log_unnormalized = r * _log_sigmoid(-logits) + value * _log_sigmoid(logits)
        log_normalization = -(r + value).lgamma() + (1.0 + value).lgamma() + r.lgamma()
        log_normalization = log_normalization.masked_fill(r + value == 0.0, 0.0)
        return log_unnormalized - log_normalization
