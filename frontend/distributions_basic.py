"""`fusegrad.distributions`' first families: Bernoulli, Normal and Uniform, with torch's
parameters, shapes, validation, formulas and KL pairs (re-exported by distributions.py).

>>> import fusegrad as fg
>>> from fusegrad.distributions import Normal, kl_divergence
>>> kl_divergence(Normal(0.0, 1.0), Normal(1.0, 1.0)).item()
0.5
"""

from __future__ import annotations

import math

from . import distribution_constraints as constraints
from .autograd_state import no_grad
from .creation import arange, bernoulli, full, rand, randn
from .distribution import (
    BinaryParameters,
    Distribution,
    ExponentialFamily,
    broadcast_all,
    register_kl,
)
from .distributions_categorical import _bce_with_logits, _softplus
from .tensor import Tensor, where

__all__ = ["Bernoulli", "Normal", "Uniform"]
_NUMBER = (int, float)


class Bernoulli(BinaryParameters, ExponentialFamily):
    """Draws of 1 with probability `probs` (or sigmoid(`logits`)), else 0, in the
    parameter's dtype.

    >>> import fusegrad as fg
    >>> [round(v, 4) for v in Bernoulli(logits=fg.tensor([0.0, 2.0])).probs.tolist()]
    [0.5, 0.8808]
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None):
        batch_shape, _ = self._take_parameter(probs, logits)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Bernoulli, _instance)
        batch_shape = tuple(batch_shape)
        self._expand_parameter(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        """1 where probs > 0.5, 0 where below, NaN at 0.5 (torch's)."""
        return where(self.probs == 0.5, math.nan, (self.probs >= 0.5).to(self.probs.dtype))

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            return bernoulli(self.probs.expand(shape))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -_bce_with_logits(logits, value)

    def entropy(self) -> Tensor:
        return _bce_with_logits(self.logits, self.probs)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = arange(2, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values

    @property
    def _natural_params(self) -> tuple[Tensor]:
        return (self.probs.log() - (-self.probs).log1p(),)

    def _log_normalizer(self, x):
        return x.exp().log1p()


class Normal(ExponentialFamily):
    """The normal distribution N(loc, scale^2); `rsample` is loc + eps * scale, eps a
    standard normal draw, so gradients reach loc (1) and scale (eps).

    >>> import fusegrad as fg
    >>> d = Normal(fg.tensor([0.0, 1.0]), 2.0)
    >>> d.batch_shape, [round(v, 4) for v in d.log_prob(fg.tensor([0.0, 0.0])).tolist()]
    ((2,), [-1.6121, -1.7371])
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, loc, scale, validate_args: bool | None = None):
        self.loc, self.scale = broadcast_all(loc, scale)
        numbers = isinstance(loc, _NUMBER) and isinstance(scale, _NUMBER)
        super().__init__(() if numbers else tuple(self.loc.shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Normal, _instance)
        batch_shape = tuple(batch_shape)
        new.loc, new.scale = self.loc.expand(batch_shape), self.scale.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return self.stddev.pow(2)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale**2
        return (
            -((value - self.loc) ** 2) / (2 * var)
            - self.scale.log()
            - math.log(math.sqrt(2 * math.pi))
        )

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + ((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)).erf())

    def icdf(self, value: Tensor) -> Tensor:
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    @property
    def _natural_params(self) -> tuple[Tensor, Tensor]:
        return (self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal())

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * (-math.pi / y).log()


class Uniform(Distribution):
    """Uniform draws from [low, high); `rsample` is low + u * (high - low).

    >>> import fusegrad as fg
    >>> d = Uniform(0.0, 4.0)
    >>> d.log_prob(fg.tensor(1.0)).item(), d.cdf(fg.tensor(1.0)).item(), d.mean.item()
    (-1.3862943649291992, 0.25, 2.0)
    """

    has_rsample = True

    @property
    def arg_constraints(self) -> dict:
        return {
            "low": constraints.less_than(self.high),
            "high": constraints.greater_than(self.low),
        }

    def __init__(self, low, high, validate_args: bool | None = None):
        self.low, self.high = broadcast_all(low, high)
        numbers = isinstance(low, _NUMBER) and isinstance(high, _NUMBER)
        super().__init__(() if numbers else tuple(self.low.shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Uniform, _instance)
        batch_shape = tuple(batch_shape)
        new.low, new.high = self.low.expand(batch_shape), self.high.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return (self.high + self.low) / 2

    @property
    def mode(self) -> Tensor:
        return math.nan * self.high

    @property
    def stddev(self) -> Tensor:
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low).pow(2) / 12

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        u = rand(shape, dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        inside = (self.low <= value) & (self.high > value)
        return inside.to(self.low.dtype).log() - (self.high - self.low).log()

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return ((value - self.low) / (self.high - self.low)).clamp(min=0, max=1)

    def icdf(self, value: Tensor) -> Tensor:
        return value * (self.high - self.low) + self.low

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()


# ------------------------------------------------------------- KL pairs (torch's formulas)
@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (_softplus(-q.logits) - _softplus(-p.logits))
    t1 = where(p.probs == 0, 0.0, where(q.probs == 0, math.inf, t1))
    t2 = (1 - p.probs) * (_softplus(q.logits) - _softplus(p.logits))
    t2 = where(p.probs == 1, 0.0, where(q.probs == 1, math.inf, t2))
    return t1 + t2


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return where((q.low > p.low) | (q.high < p.high), math.inf, result)


@register_kl(Normal, Uniform)
def _kl_normal_uniform(p, q):
    return full(tuple(p.loc.shape), math.inf, dtype=p.loc.dtype, device=p.loc.device)


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    width = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / width).log()
    t2 = width.pow(2) / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)
