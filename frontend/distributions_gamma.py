"""`fusegrad.distributions`' gamma family and the other one-parameter-pair families:
Gamma, Beta, Dirichlet, Exponential, Poisson, Laplace and LogNormal, with torch's
parameters, shapes, validation, formulas and KL pairs (re-exported by distributions.py).

>>> import fusegrad as fg
>>> from fusegrad.distributions import Gamma, Exponential, kl_divergence
>>> round(Gamma(fg.tensor(2.0), fg.tensor(3.0)).log_prob(fg.tensor(1.0)).item(), 4)
-0.8028
>>> kl_divergence(Exponential(fg.tensor(1.0)), Exponential(fg.tensor(2.0))).item() > 0
True

Draws of Exponential, Laplace and LogNormal are lazy (fusegrad's `rand` / `randn`, in the
kernels that read them). Gamma, Beta, Dirichlet and Poisson draw on the host (numpy's
`standard_gamma` and `poisson`, from a generator seeded by fusegrad's: `fg.manual_seed`
repeats them; the parameters are computed first, and `fusegrad.jit` cannot replay them).
Gamma's `rsample` is reparameterized as torch's: the gradient of a draw x with respect to
the concentration a is the implicit one, -(dF/da) / f at x (F the gamma CDF, f its
density), here from F's series summed in float64 on the host; Beta and Dirichlet
`rsample` normalize such gamma draws, so their gradients are those of the normalized
gammas (the same distribution of draws and expected gradients as torch's, whose
Dirichlet gradient is computed another way).
"""

from __future__ import annotations

import math

import numpy as np

from . import distribution_constraints as constraints
from .autograd_state import no_grad
from .creation import arange, rand, randn, zeros_like
from .creation import tensor as _tensor
from .creation_nodes import host_rng
from .distribution import Distribution, ExponentialFamily, broadcast_all, register_kl
from .errors import JitError, fail
from .function import Function
from .jithooks import recording
from .movement import stack
from .tensor import Tensor, where
from .typeinfo import finfo

__all__ = ["Beta", "Dirichlet", "Exponential", "Gamma", "Laplace", "LogNormal", "Poisson"]
_NUMBER = (int, float)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _batch(*params) -> tuple[tuple[int, ...], tuple[Tensor, ...]]:
    """The parameters broadcast (numbers to tensors), and the batch shape torch gives:
    () where all are numbers."""
    tensors = broadcast_all(*params)
    numbers = all(isinstance(p, _NUMBER) for p in params)
    return (() if numbers else tuple(tensors[0].shape)), tensors


def _expanded(self, cls, names, batch_shape, _instance, event_shape=()):
    """`expand` for a family whose parameters `names` have the batch shape + event shape."""
    new = self._get_checked_instance(cls, _instance)
    batch_shape = tuple(batch_shape)
    for name in names:
        setattr(new, name, getattr(self, name).expand(batch_shape + tuple(event_shape)))
    Distribution.__init__(new, batch_shape, event_shape, validate_args=False)
    new._validate_args = self._validate_args
    return new


# ---------------------------------------------------------------- gamma draws on the host
def _digamma_host(a: np.ndarray) -> np.ndarray:
    """digamma of positive float64s: the recurrence up past 6, then the asymptotic series."""
    a = a.astype(np.float64)
    shift = np.zeros_like(a)
    for _ in range(6):
        small = a < 6
        shift = shift - np.where(small, 1 / np.where(small, a, 1), 0)
        a = np.where(small, a + 1, a)
    inv2 = 1 / (a * a)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return shift + np.log(a) - 0.5 / a - series


def _gamma_draw_grad(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """d x / d a of a standard gamma draw x of concentration a at a fixed CDF value:
    -(dF/da) / f, F the CDF and f the density.

    Up to x = a + sqrt(a) (sqrt(a) at least 1), F's series: F = sum_n x^(a+n) e^-x /
    Gamma(a+n+1), whose n-th term is the first times r_n = prod_{k<=n} x / (a + k), the
    first over f being x / a, so dx/da = -(x / a) sum_n r_n (log x - digamma(a + n + 1)).
    In the upper tail that sum cancels, and the upper integral is used instead: dx/da =
    (dQ/da) / f = int_0^inf (log(x + s) - digamma(a)) (1 + s/x)^(a-1) e^-s ds, by
    Gauss-Laguerre quadrature after scaling s by 1 / (1 - (a - 1) / x), which leaves the
    integrand flat at 0. Both agree with mpmath's derivative of the regularized
    incomplete gamma to 1e-11 (tests/frontend/test_distributions_gamma.py: a table)."""
    x = np.maximum(x.astype(np.float64), np.finfo(np.float64).tiny)
    a = np.broadcast_to(a.astype(np.float64), x.shape)
    out = np.empty_like(x)
    tail = x > a + np.sqrt(np.maximum(a, 1))
    if (~tail).any():
        out[~tail] = _series_grad(x[~tail], a[~tail])
    if tail.any():
        out[tail] = _tail_grad(x[tail], a[tail])
    return out


def _series_grad(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    log_x = np.log(x)
    psi = _digamma_host(a + 1)
    r = np.ones_like(x)
    total = log_x - psi
    terms = int(np.ceil(np.max(np.maximum(x - a, 0) + 15 * np.sqrt(np.maximum(x, 1)) + 40)))
    for n in range(1, terms):
        psi = psi + 1 / (a + n)
        r = r * x / (a + n)
        total = total + r * (log_x - psi)
    return -(x / a) * total


_LAGUERRE = np.polynomial.laguerre.laggauss(80)


def _tail_grad(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    nodes, weights = _LAGUERRE
    lam = 1 - (a - 1) / x  # > 0 in the tail
    s = nodes[None, :] / lam[:, None]
    xs, am = x[:, None], a[:, None]
    log_f = (am - 1) * np.log1p(s / xs) - s + nodes[None, :]
    value = (np.log(xs + s) - _digamma_host(a)[:, None]) * np.exp(log_f)
    return (value * weights[None, :]).sum(-1) / lam


class _StandardGamma(Function):
    """Standard gamma draws (rate 1) of concentration `a`, on the host, with the implicit
    reparameterization gradient (`_gamma_draw_grad`)."""

    @staticmethod
    def forward(ctx, a):
        host = a.detach().double().numpy()
        x = host_rng().standard_gamma(host)
        x = np.maximum(x, float(finfo(a.dtype).tiny))
        if ctx.needs_input_grad[0]:
            grad = _gamma_draw_grad(x, host)
            ctx.grad = _tensor(grad, dtype=a.dtype, device=a.device)
        return _tensor(x, dtype=a.dtype, device=a.device)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.grad


def _standard_gamma(a: Tensor, op: str) -> Tensor:
    """Gamma(a, 1) draws of a's shape, reparameterized."""
    if recording():
        fail(JitError, op, "gamma draws are made on the host, which fusegrad.jit cannot replay")
    if a.numel() == 0:
        # nothing to draw; and a second custom Function over an empty result hangs
        # tensor_hooks.fresh_node (every identity of an empty node folds to the same one)
        return a * 0
    return _StandardGamma.apply(a.contiguous())


# ---------------------------------------------------------------- the families
class Gamma(ExponentialFamily):
    """The gamma distribution of `concentration` a and `rate` b (density
    b^a x^(a-1) e^(-b x) / Gamma(a)); `rsample` is reparameterized (gradients reach both).

    >>> import fusegrad as fg
    >>> d = Gamma(fg.tensor([1.0, 2.0]), 2.0)
    >>> d.mean.tolist(), d.variance.tolist()
    ([0.5, 1.0], [0.25, 0.5])
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, concentration, rate, validate_args: bool | None = None):
        batch, (self.concentration, self.rate) = _batch(concentration, rate)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, Gamma, ("concentration", "rate"), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.rate

    @property
    def mode(self) -> Tensor:
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self) -> Tensor:
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x = _standard_gamma(self.concentration.expand(shape), "Gamma.rsample")
        return (x / self.rate.expand(shape)).clamp(min=finfo(x.dtype).tiny)

    def log_prob(self, value: Tensor) -> Tensor:
        value = _as_tensor(value, self.rate)
        if self._validate_args:
            self._validate_sample(value)
        a, b = self.concentration, self.rate
        return a.xlogy(b) + (a - 1).xlogy(value) - b * value - a.lgamma()

    def cdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError("Gamma.cdf needs the incomplete gamma function (igamma)")

    def entropy(self) -> Tensor:
        a = self.concentration
        return a - self.rate.log() + a.lgamma() + (1.0 - a) * a.digamma()

    @property
    def _natural_params(self) -> tuple[Tensor, Tensor]:
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return (x + 1).lgamma() + (x + 1) * (-y.reciprocal()).log()


class Dirichlet(ExponentialFamily):
    """The Dirichlet distribution over probability vectors (the last dim of
    `concentration`); `rsample` normalizes reparameterized gamma draws.

    >>> import fusegrad as fg
    >>> d = Dirichlet(fg.tensor([1.0, 3.0]))
    >>> d.batch_shape, d.event_shape, d.mean.tolist()
    ((), (2,), [0.25, 0.75])
    """

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args: bool | None = None):
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        shape = tuple(concentration.shape)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(
            self, Dirichlet, ("concentration",), batch_shape, _instance, self.event_shape
        )

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self) -> Tensor:
        """(a - 1)+ / sum((a - 1)+); where every a < 1, the first vertex (torch's rule:
        the one-hot of the argmax of those NaNs)."""
        a = self.concentration
        clamped = (a - 1).clamp(min=0)
        mode = clamped / clamped.sum(-1, keepdim=True)
        below = (a < 1).all(-1, keepdim=True)
        first = (arange(a.shape[-1], device=a.device) == 0).to(a.dtype)
        return where(below, first, mode)

    @property
    def variance(self) -> Tensor:
        a = self.concentration
        a0 = a.sum(-1, keepdim=True)
        return a * (a0 - a) / (a0.pow(2) * (a0 + 1))

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        g = _standard_gamma(self.concentration.expand(shape), "Dirichlet.rsample")
        tiny, eps = finfo(g.dtype).tiny, finfo(g.dtype).eps
        return (g / g.sum(-1, keepdim=True)).clamp(min=tiny, max=1 - eps)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        a = self.concentration
        return (a - 1).xlogy(value).sum(-1) + a.sum(-1).lgamma() - a.lgamma().sum(-1)

    def entropy(self) -> Tensor:
        a = self.concentration
        k = a.shape[-1]
        a0 = a.sum(-1)
        return (
            a.lgamma().sum(-1)
            - a0.lgamma()
            - (k - a0) * a0.digamma()
            - ((a - 1.0) * a.digamma()).sum(-1)
        )

    @property
    def _natural_params(self) -> tuple[Tensor]:
        return (self.concentration,)

    def _log_normalizer(self, x):
        return x.lgamma().sum(-1) - x.sum(-1).lgamma()


class Beta(ExponentialFamily):
    """The beta distribution on [0, 1] of `concentration1` (alpha) and `concentration0`
    (beta), as torch's: a Dirichlet over (x, 1 - x).

    >>> import fusegrad as fg
    >>> d = Beta(fg.tensor(2.0), fg.tensor(2.0))
    >>> d.mean.item(), round(d.log_prob(fg.tensor(0.5)).item(), 4)
    (0.5, 0.4055)
    """

    arg_constraints = {
        "concentration1": constraints.positive,
        "concentration0": constraints.positive,
    }
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args: bool | None = None):
        batch, (c1, c0) = _batch(concentration1, concentration0)
        self._dirichlet = Dirichlet(stack([c1, c0], -1), validate_args=validate_args)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Beta, _instance)
        batch_shape = tuple(batch_shape)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def concentration1(self) -> Tensor:
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self) -> Tensor:
        return self._dirichlet.concentration[..., 1]

    @property
    def mean(self) -> Tensor:
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self) -> Tensor:
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self) -> Tensor:
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()) -> Tensor:
        return self._dirichlet.rsample(sample_shape)[..., 0]

    def log_prob(self, value: Tensor) -> Tensor:
        value = _as_tensor(value, self.concentration1)
        if self._validate_args:
            self._validate_sample(value)
        return self._dirichlet.log_prob(stack([value, 1.0 - value], -1))

    def entropy(self) -> Tensor:
        return self._dirichlet.entropy()

    @property
    def _natural_params(self) -> tuple[Tensor, Tensor]:
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x, y):
        return x.lgamma() + y.lgamma() - (x + y).lgamma()


class Exponential(ExponentialFamily):
    """The exponential distribution of `rate` (density rate e^(-rate x)); `rsample` is
    -log(1 - u) / rate, lazily.

    >>> import fusegrad as fg
    >>> d = Exponential(fg.tensor([1.0, 4.0]))
    >>> d.mean.tolist(), d.cdf(fg.tensor([0.0, 0.0])).tolist()
    ([1.0, 0.25], [0.0, 0.0])
    """

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, rate, validate_args: bool | None = None):
        batch, (self.rate,) = _batch(rate)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, Exponential, ("rate",), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return self.rate.reciprocal()

    @property
    def mode(self) -> Tensor:
        return zeros_like(self.rate)

    @property
    def stddev(self) -> Tensor:
        return self.rate.reciprocal()

    @property
    def variance(self) -> Tensor:
        return self.rate.pow(-2)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        u = rand(shape, dtype=self.rate.dtype, device=self.rate.device)
        return -(-u).log1p() / self.rate

    def log_prob(self, value: Tensor) -> Tensor:
        value = _as_tensor(value, self.rate)
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return 1 - (-self.rate * value).exp()

    def icdf(self, value: Tensor) -> Tensor:
        return -(-value).log1p() / self.rate

    def entropy(self) -> Tensor:
        return 1.0 - self.rate.log()

    @property
    def _natural_params(self) -> tuple[Tensor]:
        return (-self.rate,)

    def _log_normalizer(self, x):
        return -(-x).log()


class Laplace(Distribution):
    """The Laplace distribution of `loc` and `scale` (density e^(-|x - loc| / scale) /
    (2 scale)); `rsample` is torch's inverse-CDF draw, lazily.

    >>> import fusegrad as fg
    >>> d = Laplace(0.0, 1.0)
    >>> round(d.log_prob(fg.tensor(1.0)).item(), 4), d.variance.item()
    (-1.6931, 2.0)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None):
        batch, (self.loc, self.scale) = _batch(loc, scale)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, Laplace, ("loc", "scale"), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return 2 * self.scale.pow(2)

    @property
    def stddev(self) -> Tensor:
        return math.sqrt(2) * self.scale

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = finfo(self.loc.dtype).eps
        u = rand(shape, dtype=self.loc.dtype, device=self.loc.device) * (2 - eps) + (eps - 1)
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        d = value - self.loc
        return 0.5 - 0.5 * d.sign() * (-d.abs() / self.scale).expm1()

    def icdf(self, value: Tensor) -> Tensor:
        term = value - 0.5
        return self.loc - self.scale * term.sign() * (-2 * term.abs()).log1p()

    def entropy(self) -> Tensor:
        return 1 + (2 * self.scale).log()


class LogNormal(Distribution):
    """exp of a Normal(loc, scale) draw; `rsample` is exp(loc + eps * scale), lazily.
    (torch's is a TransformedDistribution with a `base_dist`; this one holds `loc` and
    `scale` itself.)

    >>> import fusegrad as fg
    >>> d = LogNormal(0.0, 1.0)
    >>> round(d.log_prob(fg.tensor(1.0)).item(), 4), round(d.mean.item(), 4)
    (-0.9189, 1.6487)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None):
        batch, (self.loc, self.scale) = _batch(loc, scale)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, LogNormal, ("loc", "scale"), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return (self.loc + self.scale.pow(2) / 2).exp()

    @property
    def mode(self) -> Tensor:
        return (self.loc - self.scale.pow(2)).exp()

    @property
    def variance(self) -> Tensor:
        s2 = self.scale.pow(2)
        return s2.expm1() * (2 * self.loc + s2).exp()

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return (self.loc + eps * self.scale).exp()

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        y = value.log()
        normal = -((y - self.loc) ** 2) / (2 * self.scale**2) - self.scale.log() - _HALF_LOG_2PI
        return normal - y

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + ((value.log() - self.loc) / (self.scale * math.sqrt(2))).erf())

    def icdf(self, value: Tensor) -> Tensor:
        return (self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)).exp()

    def entropy(self) -> Tensor:
        return 0.5 + _HALF_LOG_2PI + self.scale.log() + self.loc


class Poisson(ExponentialFamily):
    """The Poisson distribution of `rate`: counts 0, 1, 2, ... with probability
    rate^k e^(-rate) / k!. Draws (in the rate's dtype, as torch's) come from numpy's
    `poisson` on the host; no `rsample` and no `entropy`, as torch's.

    >>> import fusegrad as fg
    >>> d = Poisson(fg.tensor([0.0, 2.0]))
    >>> [round(v, 4) for v in d.log_prob(fg.tensor([0.0, 1.0])).tolist()]
    [0.0, -1.3069]
    """

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args: bool | None = None):
        batch, (self.rate,) = _batch(rate)
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expanded(self, Poisson, ("rate",), batch_shape, _instance)

    @property
    def mean(self) -> Tensor:
        return self.rate

    @property
    def mode(self) -> Tensor:
        return self.rate.floor()

    @property
    def variance(self) -> Tensor:
        return self.rate

    def sample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        if recording():
            fail(JitError, "Poisson.sample", "Poisson draws are made on the host")
        with no_grad():
            rate = self.rate.detach().expand(shape).double().numpy()
            draws = host_rng().poisson(rate)
            return _tensor(draws, dtype=self.rate.dtype, device=self.rate.device)

    def log_prob(self, value: Tensor) -> Tensor:
        value = _as_tensor(value, self.rate)
        if self._validate_args:
            self._validate_sample(value)
        rate, value = broadcast_all(self.rate, value)
        return value.xlogy(rate) - rate - (value + 1).lgamma()

    @property
    def _natural_params(self) -> tuple[Tensor]:
        return (self.rate.log(),)

    def _log_normalizer(self, x):
        return x.exp()


def _as_tensor(value, like: Tensor) -> Tensor:
    """A number given as a value, as a tensor of the parameter's dtype and device."""
    if isinstance(value, _NUMBER):
        return _tensor(float(value), dtype=like.dtype, device=like.device)
    return value


# ------------------------------------------------------------- KL pairs (torch's formulas)
@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    t1 = q.concentration * (p.rate / q.rate).log()
    t2 = q.concentration.lgamma() - p.concentration.lgamma()
    t3 = (p.concentration - q.concentration) * p.concentration.digamma()
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    sum_p = p.concentration1 + p.concentration0
    sum_q = q.concentration1 + q.concentration0
    t1 = q.concentration1.lgamma() + q.concentration0.lgamma() + sum_p.lgamma()
    t2 = p.concentration1.lgamma() + p.concentration0.lgamma() + sum_q.lgamma()
    t3 = (p.concentration1 - q.concentration1) * p.concentration1.digamma()
    t4 = (p.concentration0 - q.concentration0) * p.concentration0.digamma()
    t5 = (sum_q - sum_p) * sum_p.digamma()
    return t1 - t2 + t3 + t4 + t5


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    sum_p = p.concentration.sum(-1)
    sum_q = q.concentration.sum(-1)
    t1 = sum_p.lgamma() - sum_q.lgamma()
    t2 = (p.concentration.lgamma() - q.concentration.lgamma()).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = p.concentration.digamma() - sum_p.digamma().unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    ratio = q.rate / p.rate
    return -ratio.log() + ratio - 1


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    t1 = -scale_ratio.log()
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * (-loc_abs_diff / p.scale).exp()
    return t1 + t2 + t3 - 1


@register_kl(LogNormal, LogNormal)
def _kl_lognormal_lognormal(p, q):
    """Normal's: KL is unchanged by the exp both share (torch's transformed pair)."""
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (p.rate.log() - q.rate.log()) - (p.rate - q.rate)
