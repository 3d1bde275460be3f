"""`fusegrad.distributions`' location-scale families and their relatives: Cauchy,
HalfCauchy, HalfNormal, Gumbel, Weibull, StudentT and Chi2, with torch's parameters,
shapes, validation and formulas (re-exported by distributions.py).

>>> import fusegrad as fg
>>> from fusegrad.distributions import Cauchy, StudentT
>>> round(Cauchy(0.0, 1.0).log_prob(fg.tensor(0.0)).item(), 4)
-1.1447
>>> round(StudentT(fg.tensor(3.0)).log_prob(fg.tensor(1.0)).item(), 4)
-1.5763

torch builds HalfNormal, HalfCauchy, Gumbel and Weibull as TransformedDistributions of
a base; these hold their parameters themselves (no `base_dist` or `transforms`), with
the same values, draws by the same transforms of a uniform or normal draw (fusegrad's
stream, lazily), and `log_prob` / `cdf` / `icdf` in closed form. StudentT's and Chi2's
draws use Gamma's (on the host).
"""

from __future__ import annotations

import math

from . import distribution_constraints as constraints
from .creation import full, rand, randn, zeros_like
from .distribution import Distribution
from .distributions_gamma import Gamma, _as_tensor, _batch, _expanded
from .tensor import Tensor, where
from .typeinfo import finfo

__all__ = ["Cauchy", "Chi2", "Gumbel", "HalfCauchy", "HalfNormal", "StudentT", "Weibull"]
_EULER = 0.57721566490153286060
_LOG_2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _full_like(t: Tensor, value: float, shape) -> Tensor:
    return full(tuple(shape), value, dtype=t.dtype, device=t.device)


class Cauchy(Distribution):
    """The Cauchy distribution of `loc` (its median) and `scale` (its half width at half
    maximum); `rsample` is loc + scale tan(pi (u - 1/2)). Its mean is NaN and its variance
    inf, as torch's.

    >>> import fusegrad as fg
    >>> d = Cauchy(fg.tensor([0.0, 1.0]), 2.0)
    >>> d.cdf(fg.tensor([0.0, 3.0])).tolist()
    [0.5, 0.75]
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None):
        batch, (self.loc, self.scale) = _batch(loc, scale)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, Cauchy, ("loc", "scale"), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return _full_like(self.loc, math.nan, self._extended_shape())

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return _full_like(self.loc, math.inf, self._extended_shape())

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        u = rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + (math.pi * (u - 0.5)).tan() * self.scale

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        return -math.log(math.pi) - self.scale.log() - (z**2).log1p()

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return ((value - self.loc) / self.scale).atan() / math.pi + 0.5

    def icdf(self, value: Tensor) -> Tensor:
        return (math.pi * (value - 0.5)).tan() * self.scale + self.loc

    def entropy(self) -> Tensor:
        return math.log(4 * math.pi) + self.scale.log()


class HalfNormal(Distribution):
    """|X| for X ~ Normal(0, `scale`); `rsample` is |eps scale|, eps standard normal.

    >>> import fusegrad as fg
    >>> d = HalfNormal(fg.tensor(1.0), validate_args=False)
    >>> round(d.log_prob(fg.tensor(0.0)).item(), 4), d.log_prob(fg.tensor(-1.0)).item()
    (-0.2258, -inf)
    """

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args: bool | None = None):
        batch, (self.scale,) = _batch(scale)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, HalfNormal, ("scale",), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def mode(self) -> Tensor:
        return zeros_like(self.scale)

    @property
    def variance(self) -> Tensor:
        return self.scale.pow(2) * (1 - 2 / math.pi)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = randn(shape, dtype=self.scale.dtype, device=self.scale.device)
        return (eps * self.scale).abs()

    def log_prob(self, value: Tensor) -> Tensor:
        """-inf below 0 (where validation is off)."""
        if self._validate_args:
            self._validate_sample(value)
        normal = -(value**2) / (2 * self.scale**2) - self.scale.log() - _HALF_LOG_2PI
        return where(value >= 0, normal + _LOG_2, -math.inf)

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return (value / (self.scale * math.sqrt(2))).erf()

    def icdf(self, value: Tensor) -> Tensor:
        return self.scale * value.erfinv() * math.sqrt(2)

    def entropy(self) -> Tensor:
        return 0.5 + _HALF_LOG_2PI + self.scale.log() - _LOG_2


class HalfCauchy(Distribution):
    """|X| for X ~ Cauchy(0, `scale`); its mean and variance are inf, as torch's.

    >>> import fusegrad as fg
    >>> HalfCauchy(fg.tensor(2.0)).cdf(fg.tensor(2.0)).item()
    0.5
    """

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args: bool | None = None):
        batch, (self.scale,) = _batch(scale)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, HalfCauchy, ("scale",), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return _full_like(self.scale, math.inf, self._extended_shape())

    @property
    def mode(self) -> Tensor:
        return zeros_like(self.scale)

    @property
    def variance(self) -> Tensor:
        return _full_like(self.scale, math.inf, self._extended_shape())

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        u = rand(shape, dtype=self.scale.dtype, device=self.scale.device)
        return ((math.pi * (u - 0.5)).tan() * self.scale).abs()

    def log_prob(self, value: Tensor) -> Tensor:
        """-inf below 0 (where validation is off)."""
        value = _as_tensor(value, self.scale)
        if self._validate_args:
            self._validate_sample(value)
        cauchy = -math.log(math.pi) - self.scale.log() - ((value / self.scale) ** 2).log1p()
        return where(value >= 0, cauchy + _LOG_2, -math.inf)

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return 2 * (value / self.scale).atan() / math.pi

    def icdf(self, prob: Tensor) -> Tensor:
        return (math.pi * prob / 2).tan() * self.scale

    def entropy(self) -> Tensor:
        return math.log(4 * math.pi) + self.scale.log() - _LOG_2


class Gumbel(Distribution):
    """The Gumbel distribution of `loc` and `scale` (cdf exp(-exp(-(x - loc) / scale)));
    `rsample` is loc - scale log(-log u), u uniform in [tiny, 1 - eps), as torch's.

    >>> import fusegrad as fg
    >>> d = Gumbel(fg.tensor(0.0), fg.tensor(1.0))
    >>> round(d.log_prob(fg.tensor(0.0)).item(), 4), round(d.mean.item(), 4)
    (-1.0, 0.5772)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None):
        batch, (self.loc, self.scale) = _batch(loc, scale)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, Gumbel, ("loc", "scale"), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return self.loc + self.scale * _EULER

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self) -> Tensor:
        return self.stddev.pow(2)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        info = finfo(self.loc.dtype)
        u = rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        u = (u * (1 - info.eps)).clamp(min=info.tiny)
        return self.loc - self.scale * (-u.log()).log()

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        return -(self.scale.log() + z + (-z).exp())

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return (-(-(value - self.loc) / self.scale).exp()).exp()

    def icdf(self, value: Tensor) -> Tensor:
        return self.loc - self.scale * (-value.log()).log()

    def entropy(self) -> Tensor:
        return self.scale.log() + (1 + _EULER)


class Weibull(Distribution):
    """The Weibull distribution of `scale` and `concentration` k (cdf 1 - exp(-(x /
    scale)^k)); `rsample` is scale E^(1/k), E a standard exponential draw.

    >>> import fusegrad as fg
    >>> d = Weibull(fg.tensor(1.0), fg.tensor(1.0))  # Exponential(1)
    >>> d.mean.item(), round(d.log_prob(fg.tensor(2.0)).item(), 4)
    (1.0, -2.0)
    """

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, scale, concentration, validate_args: bool | None = None):
        batch, (self.scale, self.concentration) = _batch(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = _expanded(self, Weibull, ("scale", "concentration"), batch_shape, _instance)
        new.concentration_reciprocal = new.concentration.reciprocal()
        return new

    @property
    def mean(self) -> Tensor:
        return self.scale * (1 + self.concentration_reciprocal).lgamma().exp()

    @property
    def mode(self) -> Tensor:
        k = self.concentration
        return self.scale * ((k - 1) / k) ** k.reciprocal()

    @property
    def variance(self) -> Tensor:
        k1 = self.concentration_reciprocal
        return self.scale.pow(2) * ((1 + 2 * k1).lgamma().exp() - (2 * (1 + k1).lgamma()).exp())

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        u = rand(shape, dtype=self.scale.dtype, device=self.scale.device)
        return self.scale * (-(-u).log1p()).pow(self.concentration_reciprocal)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        k, z = self.concentration, value / self.scale
        return (k / self.scale).log() + (k - 1) * z.log() - z.pow(k)

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return -(-(value / self.scale).pow(self.concentration)).expm1()

    def icdf(self, value: Tensor) -> Tensor:
        return self.scale * (-(-value).log1p()).pow(self.concentration_reciprocal)

    def entropy(self) -> Tensor:
        return (
            _EULER * (1 - self.concentration_reciprocal)
            + (self.scale * self.concentration_reciprocal).log()
            + 1
        )


class Chi2(Gamma):
    """The chi-squared distribution of `df` degrees of freedom: Gamma(df / 2, 1 / 2).

    >>> import fusegrad as fg
    >>> d = Chi2(fg.tensor([2.0, 4.0]))
    >>> d.mean.tolist(), d.df.tolist()
    ([2.0, 4.0], [2.0, 4.0])
    """

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args: bool | None = None):
        _, (df,) = _batch(df)
        super().__init__(0.5 * df, 0.5, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return super().expand(batch_shape, self._get_checked_instance(Chi2, _instance))

    @property
    def df(self) -> Tensor:
        return self.concentration * 2


class StudentT(Distribution):
    """Student's t distribution of `df` degrees of freedom, `loc` and `scale`; `rsample`
    is loc + scale X / sqrt(Z / df), X standard normal and Z a Chi2(df) draw (gradients
    reach df through Gamma's reparameterized draw).

    >>> import fusegrad as fg
    >>> d = StudentT(fg.tensor([1.0, 2.0, 3.0]))
    >>> d.mean.tolist(), d.variance.tolist()
    ([nan, 0.0, 0.0], [nan, inf, 3.0])
    """

    arg_constraints = {
        "df": constraints.positive,
        "loc": constraints.real,
        "scale": constraints.positive,
    }
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args: bool | None = None):
        batch, (self.df, self.loc, self.scale) = _batch(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = _expanded(self, StudentT, ("df", "loc", "scale"), batch_shape, _instance)
        new._chi2 = self._chi2.expand(tuple(batch_shape))
        return new

    @property
    def mean(self) -> Tensor:
        return where(self.df <= 1, math.nan, self.loc)

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        df = self.df
        finite = self.scale.pow(2) * df / where(df > 2, df - 2, 1.0)
        return where(df > 2, finite, where(df > 1, math.inf, math.nan))

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x = randn(shape, dtype=self.df.dtype, device=self.df.device)
        z = self._chi2.rsample(sample_shape)
        return self.loc + self.scale * x * (z / self.df).rsqrt()

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        df = self.df
        z = (
            self.scale.log()
            + 0.5 * df.log()
            + 0.5 * math.log(math.pi)
            + (0.5 * df).lgamma()
            - (0.5 * (df + 1.0)).lgamma()
        )
        return -0.5 * (df + 1.0) * (y**2 / df).log1p() - z

    def entropy(self) -> Tensor:
        df = self.df
        lbeta = (0.5 * df).lgamma() + math.lgamma(0.5) - (0.5 * (df + 1)).lgamma()
        return (
            self.scale.log()
            + 0.5 * (df + 1) * ((0.5 * (df + 1)).digamma() - (0.5 * df).digamma())
            + 0.5 * df.log()
            + lbeta
        )
