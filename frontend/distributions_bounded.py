"""`fusegrad.distributions`' families on a bounded interval or the circle: ContinuousBernoulli
(on [0, 1]) and VonMises (angles), with torch's parameters, shapes, validation and formulas
(re-exported by distributions.py).

>>> import fusegrad as fg
>>> from fusegrad.distributions import ContinuousBernoulli, VonMises
>>> round(ContinuousBernoulli(fg.tensor(0.2)).mean.item(), 4)
0.388
>>> round(VonMises(fg.tensor(0.0), fg.tensor(1.0)).log_prob(fg.tensor(0.0)).item(), 4)
-1.0738

ContinuousBernoulli's draws are its inverse cdf at a uniform draw (lazy; `rsample`
differentiable in the parameter). VonMises draws by torch's rejection sampler (Best and
Fisher's wrapped Cauchy proposal) in float64, a round of uniform draws per pass until every
element is accepted (each pass reads back whether all are); no `rsample`, as torch's.
"""

from __future__ import annotations

import math

from . import distribution_constraints as constraints
from .autograd import realize
from .autograd_state import no_grad
from .creation import rand, zeros
from .distribution import (
    BinaryParameters,
    Distribution,
    ExponentialFamily,
    clamp_probs,
    lazy_property,
    logits_to_probs,
)
from .distributions_categorical import _bce_with_logits
from .distributions_gamma import _batch, _expanded
from .ir.dtypes import float64
from .tensor import Tensor, where

__all__ = ["ContinuousBernoulli", "VonMises"]


class ContinuousBernoulli(BinaryParameters, ExponentialFamily):
    """The continuous Bernoulli distribution on [0, 1] (Loaiza-Ganem and Cunningham, 2019):
    density C(p) p^x (1 - p)^(1 - x) for `probs` p (or sigmoid(`logits`)). Within `lims`
    of p = 1/2, where the closed forms divide 0 by 0, the log normalizer and the moments
    are torch's Taylor expansions. `probs` are clamped to [eps, 1 - eps] (so, as torch's,
    out-of-range probs pass the default validation; `validate_args=True` checks them
    before clamping).

    >>> import fusegrad as fg
    >>> d = ContinuousBernoulli(logits=fg.tensor([0.0, 2.0]))
    >>> [round(v, 4) for v in d.log_prob(fg.tensor([0.3, 0.3])).tolist()]
    [0.0, -0.5614]
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(
        self, probs=None, logits=None, lims=(0.499, 0.501), validate_args: bool | None = None
    ):
        batch_shape, _ = self._take_parameter(probs, logits)
        if probs is not None:
            if validate_args is not None and not bool(
                self.arg_constraints["probs"].check(self.probs).all()
            ):
                raise ValueError("The parameter probs has invalid values")
            self.probs = self._param = clamp_probs(self.probs)
        self._lims = lims
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ContinuousBernoulli, _instance)
        new._lims = self._lims
        batch_shape = tuple(batch_shape)
        self._expand_parameter(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def probs(self) -> Tensor:
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    def _outside_unstable_region(self) -> Tensor:
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self) -> Tensor:
        """probs, with those inside the unstable region moved to its lower limit (the
        closed forms are then finite there; the Taylor forms are used instead)."""
        return where(self._outside_unstable_region(), self.probs, self._lims[0])

    def _cont_bern_log_norm(self) -> Tensor:
        """log C(p)."""
        p = self._cut_probs()
        below_half = where(p <= 0.5, p, 0.0)
        above_half = where(p >= 0.5, p, 1.0)
        log_norm = ((-p).log1p() - p.log()).abs().log() - where(
            p <= 0.5, (-2.0 * below_half).log1p(), (2.0 * above_half - 1.0).log()
        )
        x = (self.probs - 0.5).pow(2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self) -> Tensor:
        p = self._cut_probs()
        mus = p / (2.0 * p - 1.0) + 1.0 / ((-p).log1p() - p.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.pow(2)) * x
        return where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    @property
    def variance(self) -> Tensor:
        p = self._cut_probs()
        var = p * (p - 1.0) / (1.0 - 2.0 * p).pow(2) + 1.0 / ((-p).log1p() - p.log()).pow(2)
        x = (self.probs - 0.5).pow(2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return where(self._outside_unstable_region(), var, taylor)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        return self.icdf(rand(shape, dtype=self.probs.dtype, device=self.probs.device))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return -_bce_with_logits(self.logits, value) + self._cont_bern_log_norm()

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        p = self._cut_probs()
        cdfs = (p.pow(value) * (1.0 - p).pow(1.0 - value) + p - 1.0) / (2.0 * p - 1.0)
        unbounded = where(self._outside_unstable_region(), cdfs, value)
        return where(value <= 0.0, 0.0, where(value >= 1.0, 1.0, unbounded))

    def icdf(self, value: Tensor) -> Tensor:
        p = self._cut_probs()
        closed = ((-p + value * (2.0 * p - 1.0)).log1p() - (-p).log1p()) / (p.log() - (-p).log1p())
        return where(self._outside_unstable_region(), closed, value)

    def entropy(self) -> Tensor:
        log_probs0 = (-self.probs).log1p()
        log_probs1 = self.probs.log()
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self) -> tuple[Tensor]:
        return (self.logits,)

    def _log_normalizer(self, x: Tensor) -> Tensor:
        outside = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut = where(outside, x, self._lims[0] - 0.5)
        log_norm = cut.expm1().abs().log() - cut.abs().log()
        taylor = 0.5 * x + x.pow(2) / 24.0 - x.pow(4) / 2880.0
        return where(outside, log_norm, taylor)


# Abramowitz and Stegun 9.8.1-9.8.4: I0 and I1 below 3.75 (in (x / 3.75)^2) and
# e^-x sqrt(x) I0, I1 above (in 3.75 / x), torch's coefficients
_I0_COEF_SMALL = [1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813]
_I0_COEF_LARGE = [
    0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281,
    -0.02057706, 0.02635537, -0.01647633, 0.00392377,
]  # fmt: skip
_I1_COEF_SMALL = [0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411]
_I1_COEF_LARGE = [
    0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555,
    0.02282967, -0.02895312, 0.01787654, -0.00420059,
]  # fmt: skip
_COEF_SMALL = [_I0_COEF_SMALL, _I1_COEF_SMALL]
_COEF_LARGE = [_I0_COEF_LARGE, _I1_COEF_LARGE]


def _eval_poly(y: Tensor, coef: list[float]) -> Tensor:
    """sum_k coef[k] y^k, by Horner's rule."""
    result = coef[-1]
    for c in reversed(coef[:-1]):
        result = c + y * result
    return result


def _log_modified_bessel_fn(x: Tensor, order: int = 0) -> Tensor:
    """log I_order(x) for x > 0, order 0 or 1, by torch's polynomial approximations
    (relative error about 1e-7, in every dtype, as torch's)."""
    if order not in (0, 1):
        raise AssertionError(f"order must be 0 or 1, got {order}")
    y = (x / 3.75).pow(2)
    small = _eval_poly(y, _COEF_SMALL[order])
    if order == 1:
        small = x.abs() * small
    small = small.log()
    large = x - 0.5 * x.log() + _eval_poly(3.75 / x, _COEF_LARGE[order]).log()
    return where(x < 3.75, small, large)


class VonMises(Distribution):
    """The von Mises distribution of angles: density e^(k cos(x - loc)) / (2 pi I0(k)) for
    `loc` and `concentration` k. Draws, in [-pi, pi), come from torch's rejection sampler
    in float64; `log_prob` takes any real angle.

    >>> import fusegrad as fg
    >>> d = VonMises(fg.tensor([0.0, 1.0]), fg.tensor([1.0, 4.0]))
    >>> d.mean.tolist(), [round(v, 4) for v in d.variance.tolist()]
    ([0.0, 1.0], [0.5536, 0.1365])
    """

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args: bool | None = None):
        _, (self.loc, self.concentration) = _batch(loc, concentration)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        names = ("loc", "concentration")
        return _expanded(self, VonMises, names, batch_shape, _instance)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        log_prob = self.concentration * (value - self.loc).cos()
        return (
            log_prob - math.log(2 * math.pi) - _log_modified_bessel_fn(self.concentration, order=0)
        )

    def _proposal_r(self, kappa: Tensor) -> Tensor:
        """The wrapped Cauchy proposal's r for concentration kappa (its Taylor form below
        1e-5, where the closed one cancels)."""
        tau = 1 + (1 + 4 * kappa**2).sqrt()
        rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
        r = (1 + rho**2) / (2 * rho)
        return where(kappa < 1e-5, 1 / kappa + kappa, r)

    def sample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            loc = self.loc.detach().to(float64)
            kappa = self.concentration.detach().to(float64)
            proposal_r = self._proposal_r(kappa)
            x = zeros(shape, dtype=float64, device=self.loc.device)
            done = zeros(shape, dtype=x.dtype, device=x.device) > 0
            while not bool(done.all()):
                u = rand((3,) + shape, dtype=float64, device=x.device)
                u1, u2, u3 = u[0], u[1], u[2]
                z = (math.pi * u1).cos()
                f = (1 + proposal_r * z) / (proposal_r + z)
                c = kappa * (proposal_r - f)
                accept = (c * (2 - c) - u2 > 0) | ((c / u2).log() + 1 - c >= 0)
                x = where(accept & ~done, (u3 - 0.5).sign() * f.acos(), x)
                done = done | accept
                realize(x, done)  # (each pass builds on the last: keep the graph short)
            wrapped = (x + math.pi + loc) % (2 * math.pi) - math.pi
            return wrapped.to(self.loc.dtype)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        """1 - I1(k) / I0(k), the circular variance."""
        k = self.concentration
        return 1 - (_log_modified_bessel_fn(k, order=1) - _log_modified_bessel_fn(k, order=0)).exp()
