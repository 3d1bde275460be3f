"""`fusegrad.distributions`' heavy- and bounded-tailed continuous families: Pareto,
GeneralizedPareto, InverseGamma, FisherSnedecor and Kumaraswamy, with torch's parameters,
shapes, validation and formulas (re-exported by distributions.py).

>>> import fusegrad as fg
>>> from fusegrad.distributions import Pareto, InverseGamma
>>> round(Pareto(1.0, 2.0).log_prob(fg.tensor(2.0)).item(), 4)
-1.3863
>>> InverseGamma(fg.tensor(3.0), fg.tensor(2.0)).mean.item()
1.0

Pareto, InverseGamma and Kumaraswamy are TransformedDistributions of a base, as torch
builds them (an Exponential through exp and a scale; a Gamma through x^-1; a Uniform
through three maps), so `base_dist`, `transforms`, `log_prob`, `cdf` and the draws are
torch's. FisherSnedecor's and InverseGamma's draws use Gamma's (on the host,
reparameterized); Pareto's, Kumaraswamy's and GeneralizedPareto's are lazy.
"""

from __future__ import annotations

import math

from . import distribution_constraints as constraints
from .creation import full_like, rand
from .distribution import Distribution
from .distribution_transforms import AffineTransform, ExpTransform, PowerTransform
from .distributions_basic import Uniform
from .distributions_gamma import Exponential, Gamma, _batch, _expanded
from .distributions_transformed import TransformedDistribution
from .tensor import Tensor, where
from .typeinfo import finfo

__all__ = ["FisherSnedecor", "GeneralizedPareto", "InverseGamma", "Kumaraswamy", "Pareto"]
_EULER = 0.57721566490153286060


class Pareto(TransformedDistribution):
    """The Pareto (type I) distribution of `scale` (its minimum) and `alpha` (its tail
    index): density alpha scale^alpha / x^(alpha + 1) above scale; scale e^E, E an
    Exponential(alpha) draw, as torch's.

    >>> import fusegrad as fg
    >>> d = Pareto(fg.tensor([1.0, 2.0]), fg.tensor([3.0, 1.0]))
    >>> d.mean.tolist(), d.cdf(fg.tensor([2.0, 4.0])).tolist()
    ([1.5, inf], [0.875, 0.5])
    """

    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}

    def __init__(self, scale, alpha, validate_args: bool | None = None):
        _, (self.scale, self.alpha) = _batch(scale, alpha)
        base_dist = Exponential(self.alpha, validate_args=validate_args)
        transforms = [ExpTransform(), AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Pareto, _instance)
        batch_shape = tuple(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new.alpha = self.alpha.expand(batch_shape)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self) -> Tensor:
        """alpha scale / (alpha - 1); inf for alpha <= 1 (torch's clamp)."""
        a = self.alpha.clamp(min=1)
        return a * self.scale / (a - 1)

    @property
    def mode(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        """inf for alpha <= 2 (torch's clamp)."""
        a = self.alpha.clamp(min=2)
        return self.scale.pow(2) * a / ((a - 1).pow(2) * (a - 2))

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.greater_than_eq(self.scale)

    def entropy(self) -> Tensor:
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


class InverseGamma(TransformedDistribution):
    """1 / X for X ~ Gamma(`concentration`, `rate`): density b^a x^(-a-1) e^(-b/x) /
    Gamma(a); `rsample` is reparameterized through Gamma's draw.

    >>> import fusegrad as fg
    >>> d = InverseGamma(fg.tensor([3.0, 1.0]), fg.tensor(2.0))
    >>> d.mean.tolist(), d.mode.tolist()
    ([1.0, inf], [0.5, 1.0])
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args: bool | None = None):
        base_dist = Gamma(concentration, rate, validate_args=validate_args)
        neg_one = -base_dist.rate.new_ones(())
        super().__init__(base_dist, PowerTransform(neg_one), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def concentration(self) -> Tensor:
        return self.base_dist.concentration

    @property
    def rate(self) -> Tensor:
        return self.base_dist.rate

    @property
    def mean(self) -> Tensor:
        """rate / (concentration - 1); inf for concentration <= 1."""
        result = self.rate / (self.concentration - 1)
        return where(self.concentration > 1, result, math.inf)

    @property
    def mode(self) -> Tensor:
        return self.rate / (self.concentration + 1)

    @property
    def variance(self) -> Tensor:
        """inf for concentration <= 2."""
        a = self.concentration
        result = self.rate.square() / ((a - 1).square() * (a - 2))
        return where(a > 2, result, math.inf)

    def entropy(self) -> Tensor:
        a = self.concentration
        return a + self.rate.log() + a.lgamma() - (1 + a) * a.digamma()


def _kumaraswamy_moment(a: Tensor, b: Tensor, n: int) -> Tensor:
    """E[X^n] = b B(1 + n / a, b), through lgamma (torch's `_moments`)."""
    arg1 = 1 + n / a
    return b * (arg1.lgamma() + b.lgamma() - (arg1 + b).lgamma()).exp()


class Kumaraswamy(TransformedDistribution):
    """The Kumaraswamy distribution on [0, 1] of `concentration1` a and `concentration0` b
    (cdf 1 - (1 - x^a)^b): (1 - u^(1/b))^(1/a) for u uniform, as torch's transforms.

    >>> import fusegrad as fg
    >>> d = Kumaraswamy(fg.tensor(2.0), fg.tensor(1.0))  # density 2x
    >>> round(d.log_prob(fg.tensor(0.5)).item(), 4), round(d.mean.item(), 4)
    (0.0, 0.6667)
    """

    arg_constraints = {
        "concentration1": constraints.positive,
        "concentration0": constraints.positive,
    }
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args: bool | None = None):
        _, (self.concentration1, self.concentration0) = _batch(concentration1, concentration0)
        base_dist = Uniform(
            full_like(self.concentration0, 0),
            full_like(self.concentration0, 1),
            validate_args=validate_args,
        )
        transforms = [
            PowerTransform(exponent=self.concentration0.reciprocal()),
            AffineTransform(loc=1.0, scale=-1.0),
            PowerTransform(exponent=self.concentration1.reciprocal()),
        ]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        batch_shape = tuple(batch_shape)
        new.concentration1 = self.concentration1.expand(batch_shape)
        new.concentration0 = self.concentration0.expand(batch_shape)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self) -> Tensor:
        return _kumaraswamy_moment(self.concentration1, self.concentration0, 1)

    @property
    def mode(self) -> Tensor:
        """torch's formula, NaN where either concentration is below 1 (and, as torch's, at
        b > 1 too, where its log1p(-b) is NaN)."""
        a, b = self.concentration1, self.concentration0
        log_mode = b.reciprocal() * (-b).log1p() - (-b * a).log1p()
        return where((b < 1) | (a < 1), math.nan, log_mode).exp()

    @property
    def variance(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        return _kumaraswamy_moment(a, b, 2) - self.mean.pow(2)

    def entropy(self) -> Tensor:
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        h0 = (self.concentration0 + 1).digamma() + _EULER
        return t0 + t1 * h0 - self.concentration1.log() - self.concentration0.log()


class GeneralizedPareto(Distribution):
    """The generalized Pareto distribution of `loc`, `scale` and `concentration` xi
    (survival (1 + xi z)^(-1/xi), z = (x - loc) / scale; e^-z at xi = 0); `rsample` is its
    inverse cdf at a uniform draw. Exponential at xi = 0, a Pareto for xi > 0, Uniform at
    xi = -1.

    >>> import fusegrad as fg
    >>> d = GeneralizedPareto(fg.tensor(0.0), fg.tensor(1.0), fg.tensor(0.0))
    >>> d.log_prob(fg.tensor(2.0)).item(), d.mean.item()
    (-2.0, 1.0)
    """

    arg_constraints = {
        "loc": constraints.real,
        "scale": constraints.positive,
        "concentration": constraints.real,
    }
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args: bool | None = None):
        batch, (self.loc, self.scale, self.concentration) = _batch(loc, scale, concentration)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        names = ("loc", "scale", "concentration")
        return _expanded(self, GeneralizedPareto, names, batch_shape, _instance)

    def _safe_concentration(self) -> tuple[Tensor, Tensor]:
        """(whether xi is 0 to isclose's tolerance, xi with those replaced by 1)."""
        xi = self.concentration
        eq_zero = xi.isclose(xi.new_zeros(()))
        return eq_zero, where(eq_zero, 1.0, xi)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        return self.icdf(rand(shape, dtype=self.loc.dtype, device=self.loc.device))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        eq_zero, safe = self._safe_concentration()
        y = 1 / safe + 1
        nonzero = where(y == 0, y, y * (safe * z).log1p())
        return -self.scale.log() - where(eq_zero, z, nonzero)

    def log_survival_function(self, value: Tensor) -> Tensor:
        """log P(X > value)."""
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        eq_zero, safe = self._safe_concentration()
        return where(eq_zero, -z, -(safe * z).log1p() / safe)

    def log_cdf(self, value: Tensor) -> Tensor:
        return (-self.log_survival_function(value).exp()).log1p()

    def cdf(self, value: Tensor) -> Tensor:
        return self.log_cdf(value).exp()

    def icdf(self, value: Tensor) -> Tensor:
        eq_zero, safe = self._safe_concentration()
        logu = (-value).log1p()
        nonzero = self.loc + self.scale / safe * (-safe * logu).expm1()
        return where(eq_zero, self.loc - self.scale * logu, nonzero)

    @property
    def mean(self) -> Tensor:
        """NaN for concentration >= 1."""
        valid = self.concentration < 1
        safe = where(valid, self.concentration, 0.5)
        return where(valid, self.loc + self.scale / (1 - safe), math.nan)

    @property
    def variance(self) -> Tensor:
        """NaN for concentration >= 1/2."""
        valid = self.concentration < 0.5
        safe = where(valid, self.concentration, 0.25)
        result = self.scale**2 / ((1 - safe) ** 2 * (1 - 2 * safe))
        return where(valid, result, math.nan)

    @property
    def mode(self) -> Tensor:
        return self.loc

    def entropy(self) -> Tensor:
        return (self.scale.log() + self.concentration + 1).broadcast_to(self._batch_shape)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        lower = self.loc
        upper = where(self.concentration < 0, lower - self.scale / self.concentration, math.inf)
        return constraints.interval(lower, upper)


class FisherSnedecor(Distribution):
    """The F distribution of `df1` and `df2` degrees of freedom; `rsample` is X1 / X2 of
    Gamma(df / 2, df) draws (reparameterized: gradients reach both).

    >>> import fusegrad as fg
    >>> d = FisherSnedecor(fg.tensor([1.0, 4.0]), fg.tensor([6.0, 2.0]))
    >>> d.mean.tolist(), d.mode.tolist()
    ([1.5, nan], [nan, 0.25])
    """

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args: bool | None = None):
        batch, (self.df1, self.df2) = _batch(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = _expanded(self, FisherSnedecor, ("df1", "df2"), batch_shape, _instance)
        new._gamma1 = self._gamma1.expand(new.batch_shape)
        new._gamma2 = self._gamma2.expand(new.batch_shape)
        return new

    @property
    def mean(self) -> Tensor:
        """df2 / (df2 - 2); NaN for df2 <= 2."""
        df2 = where(self.df2 <= 2, math.nan, self.df2)
        return df2 / (df2 - 2)

    @property
    def mode(self) -> Tensor:
        """NaN for df1 <= 2."""
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return where(self.df1 <= 2, math.nan, mode)

    @property
    def variance(self) -> Tensor:
        """NaN for df2 <= 4."""
        df2 = where(self.df2 <= 4, math.nan, self.df2)
        return 2 * df2.pow(2) * (self.df1 + df2 - 2) / (self.df1 * (df2 - 2).pow(2) * (df2 - 4))

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x1 = self._gamma1.rsample(sample_shape).reshape(shape)
        x2 = self._gamma2.rsample(sample_shape).reshape(shape)
        tiny = finfo(x2.dtype).tiny
        return (x1 / x2.clamp(min=tiny)).clamp(min=tiny)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        ct1, ct2 = self.df1 * 0.5, self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = (ct1 + ct2).lgamma() - ct1.lgamma() - ct2.lgamma()
        t2 = ct1 * ct3.log() + (ct1 - 1) * value.log()
        t3 = (ct1 + ct2) * (ct3 * value).log1p()
        return t1 + t2 - t3
