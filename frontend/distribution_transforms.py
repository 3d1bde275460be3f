"""`fusegrad.distributions.transforms` (torch.distributions.transforms): invertible maps
between constraint regions with their log |det Jacobian|, which TransformedDistribution
pushes a base distribution through. The elementwise ones are here; the base (`Transform`,
`ComposeTransform`) is `distribution_transform.py`'s, the vector and matrix ones
`distribution_transforms_matrix.py`'s, those built from others
`distribution_transforms_combined.py`'s, all importable from here.

>>> import fusegrad as fg
>>> from fusegrad.distribution_transforms import AffineTransform, ExpTransform
>>> t = AffineTransform(1.0, 2.0)
>>> t(fg.tensor(3.0)).item(), t.inv(fg.tensor(7.0)).item()
(7.0, 3.0)
>>> e = ExpTransform()
>>> e.domain, e.codomain, e.bijective, e.sign
(Real(), GreaterThan(lower_bound=0.0), True, 1)

A transform made with `cache_size=1` keeps its last (x, y) pair: called again on the same
tensor object, or inverted on the `y` it returned, it answers the kept tensor without
computing (TanhTransform's inverse of a sampled action is then the pre-tanh draw itself, as
SAC's `log_prob(rsample())` relies on). Names, reprs, event dims and errors are torch's.
"""

from __future__ import annotations

import math
import numbers

from . import distribution_constraints as constraints
from .distribution import _sum_rightmost, broadcast_all, lazy_property
from .distribution_transform import (
    ComposeTransform,
    Transform,
    _broadcast_shapes,
    _clipped_sigmoid,
    _Fixed,
    identity_transform,
)
from .distribution_transforms_combined import (
    CatTransform,
    CumulativeDistributionTransform,
    IndependentTransform,
    ReshapeTransform,
    StackTransform,
)
from .distribution_transforms_matrix import (
    CorrCholeskyTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    StickBreakingTransform,
)
from .distributions_categorical import _softplus
from .typeinfo import finfo

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "CatTransform",
    "ComposeTransform",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "ExpTransform",
    "IndependentTransform",
    "LowerCholeskyTransform",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "TanhTransform",
    "Transform",
    "identity_transform",
]


class ExpTransform(_Fixed):
    """y = exp(x); log |det| = x."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


class PowerTransform(Transform):
    """y = x ** exponent on the positive reals; log |det| = log |exponent * y / x|."""

    domain = constraints.positive
    codomain = constraints.positive
    bijective = True

    def __init__(self, exponent, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        (self.exponent,) = broadcast_all(exponent)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return PowerTransform(self.exponent, cache_size=cache_size)

    @lazy_property
    def sign(self):
        return self.exponent.sign()

    def __eq__(self, other) -> bool:
        if not isinstance(other, PowerTransform):
            return False
        return bool(self.exponent.eq(other.exponent).all().item())

    __hash__ = object.__hash__

    def _call(self, x):
        return x.pow(self.exponent)

    def _inverse(self, y):
        return y.pow(1 / self.exponent)

    def log_abs_det_jacobian(self, x, y):
        return (self.exponent * y / x).abs().log()

    def forward_shape(self, shape):
        return _broadcast_shapes(shape, tuple(self.exponent.shape))

    def inverse_shape(self, shape):
        return _broadcast_shapes(shape, tuple(self.exponent.shape))


class SigmoidTransform(_Fixed):
    """y = sigmoid(x) (clamped to [tiny, 1 - eps]); its inverse the logit of y clamped the
    same way; log |det| = -softplus(-x) - softplus(x)."""

    domain = constraints.real
    codomain = constraints.unit_interval
    bijective = True
    sign = +1

    def _call(self, x):
        return _clipped_sigmoid(x)

    def _inverse(self, y):
        fi = finfo(y.dtype)
        y = y.clamp(min=fi.tiny, max=1.0 - fi.eps)
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x) - _softplus(x)


class SoftplusTransform(_Fixed):
    """y = softplus(x) = log(1 + e^x) (x itself above 20, as torch's softplus); its inverse
    y + log(-expm1(-y)); log |det| = -softplus(-x)."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def _call(self, x):
        return _softplus(x)

    def _inverse(self, y):
        return (-(-y).expm1()).log() + y

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x)


class TanhTransform(_Fixed):
    """y = tanh(x), x = atanh(y); log |det| = 2 * (log 2 - x - softplus(-2x)), torch's
    stable form of log(1 - tanh(x)^2). Use `cache_size=1` to invert sampled values (atanh
    of a y rounded to +-1 is infinite)."""

    domain = constraints.real
    codomain = constraints.interval(-1.0, 1.0)
    bijective = True
    sign = +1

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return y.atanh()

    def log_abs_det_jacobian(self, x, y):
        return 2.0 * (math.log(2.0) - x - _softplus(-2.0 * x))


class AbsTransform(_Fixed):
    """y = |x| (not bijective: its inverse is y itself)."""

    domain = constraints.real
    codomain = constraints.positive

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


class AffineTransform(Transform):
    """y = loc + scale * x, over events of `event_dim` rightmost dims (its log |det|,
    log |scale|, summed over them)."""

    bijective = True

    def __init__(self, loc, scale, event_dim: int = 0, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        self.loc = loc
        self.scale = scale
        self._event_dim = event_dim

    @property
    def event_dim(self) -> int:
        return self._event_dim

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        if self.event_dim == 0:
            return constraints.real
        return constraints.independent(constraints.real, self.event_dim)

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        if self.event_dim == 0:
            return constraints.real
        return constraints.independent(constraints.real, self.event_dim)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return AffineTransform(self.loc, self.scale, self.event_dim, cache_size=cache_size)

    def __eq__(self, other) -> bool:
        if not isinstance(other, AffineTransform):
            return False
        for mine, theirs in ((self.loc, other.loc), (self.scale, other.scale)):
            if isinstance(mine, numbers.Number) and isinstance(theirs, numbers.Number):
                if mine != theirs:
                    return False
            elif not bool((mine == theirs).all().item()):
                return False
        return True

    __hash__ = object.__hash__

    @property
    def sign(self):
        if isinstance(self.scale, numbers.Real):
            return 1 if float(self.scale) > 0 else -1 if float(self.scale) < 0 else 0
        return self.scale.sign()

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        shape = tuple(x.shape)
        scale = self.scale
        if isinstance(scale, numbers.Real):
            result = x.new_full(shape, math.log(abs(scale)))
        else:
            result = scale.abs().log()
        if self.event_dim:
            result = _sum_rightmost(result, self.event_dim)
            shape = shape[: len(shape) - self.event_dim]
        return result.expand(shape)

    def _param_shapes(self):
        return [tuple(getattr(p, "shape", ())) for p in (self.loc, self.scale)]

    def forward_shape(self, shape):
        return _broadcast_shapes(tuple(shape), *self._param_shapes())

    def inverse_shape(self, shape):
        return _broadcast_shapes(tuple(shape), *self._param_shapes())


class SoftmaxTransform(_Fixed):
    """y = softmax(x) over the last dim (real vectors to the simplex); its inverse log(y),
    one of the many preimages (not bijective; no log |det|, as torch's)."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def _call(self, x):
        probs = (x - x.max(-1, True)[0]).exp()
        return probs / probs.sum(-1, True)

    def _inverse(self, y):
        return y.log()

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return shape

    def inverse_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return shape
