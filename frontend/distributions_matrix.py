"""`fusegrad.distributions`' distributions over matrices: LKJCholesky (Cholesky factors of
correlation matrices) and Wishart (positive definite matrices), with torch's parameters,
shapes, validation and formulas (re-exported by distributions.py).

>>> import fusegrad as fg
>>> from fusegrad.distributions import LKJCholesky, Wishart
>>> LKJCholesky(3, 1.5).sample().shape
(3, 3)
>>> w = Wishart(fg.tensor(4.0), covariance_matrix=fg.eye(2))
>>> w.mean.tolist()
[[4.0, 0.0], [0.0, 4.0]]

Both draw through Beta / Chi2 draws (numpy's gamma on the host, seeded from fusegrad's
stream) and normal draws; Wishart's `rsample` is Bartlett's construction, reparameterized
through the Chi2 draws' implicit gradient, as torch's. The Cholesky factors and inverses
are `fg.linalg.cholesky` and `fg.linalg.inv` (on the host).
"""

from __future__ import annotations

import math
import warnings

from . import distribution_constraints as constraints
from .autograd_state import no_grad
from .creation import arange, eye, randn
from .creation import tensor as _tensor
from .distribution import (
    Distribution,
    ExponentialFamily,
    broadcast_all,
    lazy_property,
    vec_to_tril_matrix,
)
from .distribution_transforms_matrix import _diag_matrix
from .distributions_gamma import Beta
from .distributions_location import Chi2
from .linalg import cholesky, inv, slogdet
from .movement import cat
from .tensor import Tensor, where
from .tensor_base import broadcast_shapes
from .typeinfo import finfo

__all__ = ["LKJCholesky", "Wishart"]
_LOG_2 = math.log(2)


class LKJCholesky(Distribution):
    """The LKJ distribution of correlation matrices, over their lower Cholesky factors:
    density proportional to det(L L^T)^(concentration - 1) (uniform over correlation
    matrices at concentration 1). Draws by torch's onion method (Beta draws for the rows'
    norms, normal draws for their directions); no `rsample`, as torch's.

    >>> import fusegrad as fg
    >>> d = LKJCholesky(2, fg.tensor([1.0, 3.0]))
    >>> [round(v, 4) for v in d.log_prob(fg.eye(2)).tolist()]
    [-0.6931, -0.0645]
    """

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim: int, concentration=1.0, validate_args: bool | None = None):
        if dim < 2:
            raise ValueError(
                f"Expected dim to be an integer greater than or equal to 2. Found dim={dim}."
            )
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        batch_shape = tuple(self.concentration.shape)
        c = self.concentration
        marginal_conc = c + 0.5 * (self.dim - 2)
        offset = arange(self.dim - 1, dtype=c.dtype, device=c.device)
        offset = cat([offset.new_zeros((1,)), offset])
        beta_conc1 = offset + 0.5
        beta_conc0 = marginal_conc.unsqueeze(-1) - 0.5 * offset
        self._beta = Beta(beta_conc1, beta_conc0)
        super().__init__(batch_shape, (dim, dim), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = tuple(batch_shape)
        new.dim = self.dim
        new.concentration = self.concentration.expand(batch_shape)
        new._beta = self._beta.expand(batch_shape + (self.dim,))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            shape = self._extended_shape(sample_shape)
            u_normal = randn(shape, dtype=y.dtype, device=y.device).tril(-1)
            norm = u_normal.pow(2).sum(-1, keepdim=True).sqrt()
            # the first row is all zeros (0 / 0): torch fills it with zeros
            first_row = (arange(self.dim, device=y.device) == 0).unsqueeze(-1)
            u_hypersphere = where(first_row, 0.0, u_normal / where(first_row, 1.0, norm))
            w = y.sqrt() * u_hypersphere
            diag = (1 - w.pow(2).sum(-1)).clamp(min=finfo(w.dtype).tiny).sqrt()
            return w + _diag_matrix(diag)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        diag_elems = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = arange(2, self.dim + 1, device=value.device).to(self.concentration.dtype)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = (order * diag_elems.log()).sum(-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        denominator = alpha.lgamma() * dm1
        numerator = (alpha - 0.5).mvlgamma(dm1)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        return unnormalized_log_pdf - (pi_constant + numerator - denominator)


def _mvdigamma(x: Tensor, p: int) -> Tensor:
    """The multivariate digamma: sum_i digamma(x - i / 2), i < p."""
    if not bool((x > (p - 1) / 2).all()):
        raise AssertionError("Wrong domain for multivariate digamma function.")
    halves = arange(p, dtype=x.dtype, device=x.device) / 2
    return (x.unsqueeze(-1) - halves).digamma().sum(-1)


def _cholesky_solve(b: Tensor, lower: Tensor) -> Tensor:
    """(L L^T)^-1 b, with torch's cholesky_solve gradient: that of the product L L^T, so
    the entries above L's diagonal get one too (a triangular solve's would be lower)."""
    return inv(lower @ lower.mT) @ b


class Wishart(ExponentialFamily):
    """The Wishart distribution of positive definite p x p matrices, of `df` degrees of
    freedom and one of `covariance_matrix`, `precision_matrix` or `scale_tril` (its lower
    Cholesky factor L), as torch's: X = L A A^T L^T with Bartlett's A (square roots of
    Chi2(df - i) draws on the diagonal, normals below), so `rsample` is differentiable in
    df and L. torch checks its draws and draws again where one is singular; these are
    returned as drawn (torch's check flags every positive definite draw, warning each time).

    >>> import fusegrad as fg
    >>> d = Wishart(fg.tensor(3.0), scale_tril=fg.eye(2))
    >>> round(d.log_prob(fg.eye(2)).item(), 4), round(d.entropy().item(), 4)
    (-3.531, 5.531)
    """

    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self) -> dict:
        return {
            "covariance_matrix": constraints.positive_definite,
            "precision_matrix": constraints.positive_definite,
            "scale_tril": constraints.lower_cholesky,
            "df": constraints.greater_than(self.event_shape[-1] - 1),
        }

    def __init__(
        self,
        df,
        covariance_matrix=None,
        precision_matrix=None,
        scale_tril=None,
        validate_args: bool | None = None,
    ):
        given = [m is not None for m in (covariance_matrix, precision_matrix, scale_tril)]
        if sum(given) != 1:
            raise AssertionError(
                "Exactly one of covariance_matrix or precision_matrix or scale_tril may be "
                "specified."
            )
        param = next(p for p in (covariance_matrix, precision_matrix, scale_tril) if p is not None)
        if param.dim() < 2:
            raise ValueError(
                "scale_tril must be at least two-dimensional, with optional leading batch "
                "dimensions"
            )
        if isinstance(df, (int, float)):
            batch_shape = tuple(param.shape[:-2])
            self.df = _tensor(float(df), dtype=param.dtype, device=param.device)
        else:
            batch_shape = broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape), "Wishart")
            self.df = df.expand(batch_shape)
        event_shape = tuple(param.shape[-2:])
        p = event_shape[-1]
        if bool((self.df <= p - 1).any()):
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = {p - 1}.")
        matrix_shape = batch_shape + event_shape
        if scale_tril is not None:
            self.scale_tril = param.expand(matrix_shape)
        elif covariance_matrix is not None:
            self.covariance_matrix = param.expand(matrix_shape)
        else:
            self.precision_matrix = param.expand(matrix_shape)
        if bool((self.df < p).any()):
            warnings.warn(
                "Low df values detected. Singular samples are highly likely to occur for "
                "ndim - 1 < df < ndim.",
                stacklevel=2,
            )
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        self._batch_dims = [-(x + 1) for x in range(len(self._batch_shape))]
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = cholesky(inv(precision_matrix))
        self._dist_chi2 = self._chi2(batch_shape)

    def _chi2(self, batch_shape) -> Chi2:
        """Chi2(df - i), i < p: the squares of Bartlett's diagonal."""
        lower = self._unbroadcasted_scale_tril
        steps = arange(self._event_shape[-1], dtype=lower.dtype, device=lower.device)
        return Chi2(self.df.unsqueeze(-1) - steps.expand(tuple(batch_shape) + (-1,)))

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = tuple(batch_shape)
        cov_shape = batch_shape + self.event_shape
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(cov_shape)
        new.df = self.df.expand(batch_shape)
        new._batch_dims = [-(x + 1) for x in range(len(batch_shape))]
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(cov_shape))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._dist_chi2 = new._chi2(batch_shape)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self) -> tuple[int, ...]:
        return self._batch_shape + self._event_shape

    @lazy_property
    def scale_tril(self) -> Tensor:
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self) -> Tensor:
        lower = self._unbroadcasted_scale_tril
        return (lower @ lower.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self) -> Tensor:
        lower = self._unbroadcasted_scale_tril
        identity = eye(lower.shape[-1], dtype=lower.dtype, device=lower.device)
        return _cholesky_solve(identity, lower).expand(self._matrix_shape())

    @property
    def mean(self) -> Tensor:
        return self.df.reshape(self._batch_shape + (1, 1)) * self.covariance_matrix

    @property
    def mode(self) -> Tensor:
        """(df - p - 1) V; NaN where df <= p + 1."""
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = where(factor <= 0, math.nan, factor)
        return factor.reshape(self._batch_shape + (1, 1)) * self.covariance_matrix

    @property
    def variance(self) -> Tensor:
        v = self.covariance_matrix
        diag_v = v.diagonal(dim1=-2, dim2=-1)
        outer = diag_v.unsqueeze(-1) * diag_v.unsqueeze(-2)
        return self.df.reshape(self._batch_shape + (1, 1)) * (v.pow(2) + outer)

    def _bartlett_sampling(self, sample_shape=()) -> Tensor:
        p = self._event_shape[-1]
        chi = self._dist_chi2.rsample(sample_shape).sqrt()
        diagonal = _diag_matrix(chi.clamp(min=finfo(chi.dtype).eps))
        below_shape = tuple(sample_shape) + self._batch_shape + (p * (p - 1) // 2,)
        below = randn(below_shape, dtype=chi.dtype, device=chi.device)
        chol = self._unbroadcasted_scale_tril @ (diagonal + vec_to_tril_matrix(below, diag=-1))
        return chol @ chol.mT

    def rsample(self, sample_shape=(), max_try_correction=None) -> Tensor:
        return self._bartlett_sampling(sample_shape)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        nu = self.df
        p = self._event_shape[-1]
        lower = self._unbroadcasted_scale_tril
        half_log_det = lower.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        trace = _cholesky_solve(value, lower).diagonal(dim1=-2, dim2=-1).sum(-1)
        return (
            -nu * (p * _LOG_2 / 2 + half_log_det)
            - (nu / 2).mvlgamma(p)
            + (nu - p - 1) / 2 * slogdet(value)[1]
            - trace / 2
        )

    def entropy(self) -> Tensor:
        nu = self.df
        p = self._event_shape[-1]
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return (
            (p + 1) * (p * _LOG_2 / 2 + half_log_det)
            + (nu / 2).mvlgamma(p)
            - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p)
            + nu * p / 2
        )

    @property
    def _natural_params(self) -> tuple[Tensor, Tensor]:
        p = self._event_shape[-1]
        return (-self.precision_matrix / 2, (self.df - p - 1) / 2)

    def _log_normalizer(self, x, y):
        p = self._event_shape[-1]
        log_det = slogdet(-2 * x)[1]
        return (y + (p + 1) / 2) * (-log_det + _LOG_2 * p) + (y + (p + 1) / 2).mvlgamma(p)
