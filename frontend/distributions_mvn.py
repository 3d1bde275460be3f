"""`fusegrad.distributions.MultivariateNormal` and `LowRankMultivariateNormal` (re-exported
by distributions.py): their factors from `fg.linalg.cholesky`, the inverse of a lower
triangular factor on the host with torch's triangular gradient.

>>> import fusegrad as fg
>>> from fusegrad.distributions import MultivariateNormal
>>> d = MultivariateNormal(fg.zeros(2), fg.tensor([[4.0, 0.0], [0.0, 1.0]]))
>>> d.scale_tril.tolist(), round(d.log_prob(fg.zeros(2)).item(), 4)
([[2.0, 0.0], [0.0, 1.0]], -2.531)
"""

from __future__ import annotations

import math

import numpy as np

from . import distribution_constraints as constraints
from .creation import eye, randn
from .creation import tensor as _tensor
from .distribution import Distribution, lazy_property, register_kl
from .distribution_transforms_matrix import _diag_matrix
from .errors import ArgumentError, DTypeError, JitError, fail
from .function import Function
from .ir.dtypes import float32, float64
from .jithooks import recording
from .linalg import cholesky, inv
from .tensor import Tensor
from .tensor_base import broadcast_shapes

__all__ = ["LowRankMultivariateNormal", "MultivariateNormal"]


def _host_matrices(a: Tensor, op: str) -> np.ndarray:
    """a's matrices in float64 on the host, after the checks LAPACK's callers make."""
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        fail(ArgumentError, op, f"A must be batches of square matrices, got shape {a.shape}")
    if a.dtype not in (float32, float64):
        fail(DTypeError, op, f"expected float32 or float64, got {a.dtype.name}")
    if recording():
        fail(JitError, op, "computed by LAPACK on the host, which fusegrad.jit cannot replay")
    return a.detach().numpy().astype(np.float64)


class _TrilInverse(Function):
    """L^-1 of lower triangular L (on the host); the gradient -L^-T g L^-T, lower
    triangular as torch's triangular solve's."""

    @staticmethod
    def forward(ctx, lower):
        host = np.tril(_host_matrices(lower, "solve_triangular"))
        ctx.inv = _tensor(np.linalg.inv(host), dtype=lower.dtype, device=lower.device)
        return ctx.inv

    @staticmethod
    def backward(ctx, g):
        t = ctx.inv.mT
        return -(t @ g @ t).tril()


def _batch_mahalanobis(lower: Tensor, diff: Tensor) -> Tensor:
    """|L^-1 diff|^2 over the last dim, L's batch broadcast with diff's."""
    m = _TrilInverse.apply(lower) @ diff.unsqueeze(-1)
    return m.squeeze(-1).pow(2).sum(-1)


class MultivariateNormal(Distribution):
    """The normal distribution over vectors (the last dim of `loc`) with one of
    `covariance_matrix`, `precision_matrix` or `scale_tril` (a lower Cholesky factor of
    the covariance), as torch's. `rsample` is loc + L eps, so gradients reach every
    parameter. The factorizations run on the host (numpy's LAPACK: the parameters are
    computed first, and `fusegrad.jit` refuses them), with torch's gradients; a
    precision matrix is inverted, then factored (torch factors it flipped; the values
    agree to rounding).

    >>> import fusegrad as fg
    >>> d = MultivariateNormal(fg.zeros(3, 2), scale_tril=fg.eye(2))
    >>> d.batch_shape, d.event_shape, d.sample((4,)).shape
    ((3,), (2,), (4, 3, 2))
    """

    arg_constraints = {
        "loc": constraints.real_vector,
        "covariance_matrix": constraints.positive_definite,
        "precision_matrix": constraints.positive_definite,
        "scale_tril": constraints.lower_cholesky,
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(
        self,
        loc,
        covariance_matrix=None,
        precision_matrix=None,
        scale_tril=None,
        validate_args: bool | None = None,
    ):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [m is not None for m in (covariance_matrix, precision_matrix, scale_tril)]
        if sum(given) != 1:
            raise ValueError(
                "Exactly one of covariance_matrix or precision_matrix or scale_tril may be "
                "specified."
            )
        if scale_tril is not None:
            if scale_tril.dim() < 2:
                raise ValueError(
                    "scale_tril matrix must be at least two-dimensional, with optional "
                    "leading batch dimensions"
                )
            batch = broadcast_shapes(
                tuple(scale_tril.shape[:-2]), tuple(loc.shape[:-1]), "MultivariateNormal"
            )
            self.scale_tril = scale_tril.expand(batch + tuple(scale_tril.shape[-2:]))
            given_matrix = scale_tril
        else:
            name = "covariance_matrix" if covariance_matrix is not None else "precision_matrix"
            matrix = covariance_matrix if covariance_matrix is not None else precision_matrix
            if matrix.dim() < 2:
                raise ValueError(
                    f"{name} must be at least two-dimensional, with optional leading batch "
                    "dimensions"
                )
            batch = broadcast_shapes(
                tuple(matrix.shape[:-2]), tuple(loc.shape[:-1]), "MultivariateNormal"
            )
            setattr(self, name, matrix.expand(batch + tuple(matrix.shape[-2:])))
            given_matrix = matrix
        self.loc = loc.expand(batch + (-1,))
        super().__init__(batch, tuple(self.loc.shape[-1:]), validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(given_matrix)
        else:
            self._unbroadcasted_scale_tril = cholesky(inv(given_matrix))

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        loc_shape = batch_shape + self.event_shape
        cov_shape = batch_shape + self.event_shape + self.event_shape
        new.loc = self.loc.expand(loc_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(cov_shape))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self) -> tuple[int, ...]:
        return self._batch_shape + self._event_shape + self._event_shape

    @lazy_property
    def scale_tril(self) -> Tensor:
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self) -> Tensor:
        lower = self._unbroadcasted_scale_tril
        return (lower @ lower.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self) -> Tensor:
        lower_inv = _TrilInverse.apply(self._unbroadcasted_scale_tril)
        return (lower_inv.mT @ lower_inv).expand(self._matrix_shape())

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return (
            self._unbroadcasted_scale_tril.pow(2)
            .sum(-1)
            .expand(self._batch_shape + self._event_shape)
        )

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def _half_log_det(self) -> Tensor:
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        m = _batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        k = self._event_shape[0]
        return -0.5 * (k * math.log(2 * math.pi) + m) - self._half_log_det()

    def entropy(self) -> Tensor:
        k = self._event_shape[0]
        h = 0.5 * k * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return h.expand(self._batch_shape) if self._batch_shape else h


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_multivariatenormal_multivariatenormal(p, q):
    """torch's: log det ratio + trace(Sq^-1 Sp) + Mahalanobis of the means, halved."""
    if p.event_shape != q.event_shape:
        raise ValueError(
            "KL-divergence between two Multivariate Normals with different event shapes "
            "cannot be computed"
        )
    k = p.event_shape[0]
    q_inv = _TrilInverse.apply(q._unbroadcasted_scale_tril)
    half_term1 = q._half_log_det() - p._half_log_det()
    term2 = (q_inv @ p._unbroadcasted_scale_tril).pow(2).flatten(-2).sum(-1)
    term3 = _batch_mahalanobis(q._unbroadcasted_scale_tril, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - k)


def _batch_mv(matrix: Tensor, vec: Tensor) -> Tensor:
    """matrix @ vec over the batch dims both broadcast."""
    return (matrix @ vec.unsqueeze(-1)).squeeze(-1)


def _batch_capacitance_tril(w: Tensor, d: Tensor) -> Tensor:
    """The Cholesky factor of the capacitance I + W^T D^-1 W (m x m, m W's rank)."""
    m = w.shape[-1]
    k = (w.mT / d.unsqueeze(-2)) @ w
    return cholesky(k + eye(m, dtype=k.dtype, device=k.device))


def _batch_lowrank_logdet(d: Tensor, capacitance_tril: Tensor) -> Tensor:
    """log det(W W^T + D), by the matrix determinant lemma."""
    return 2 * capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + d.log().sum(-1)


def _batch_lowrank_mahalanobis(w: Tensor, d: Tensor, x: Tensor, capacitance_tril: Tensor):
    """x^T (W W^T + D)^-1 x, by the Woodbury identity."""
    wt_dinv_x = _batch_mv(w.mT / d.unsqueeze(-2), x)
    return (x.pow(2) / d).sum(-1) - _batch_mahalanobis(capacitance_tril, wt_dinv_x)


class LowRankMultivariateNormal(Distribution):
    """The normal distribution over vectors with covariance `cov_factor` @ `cov_factor`^T +
    diag(`cov_diag`) (W of shape event x m, m the rank): log_prob and entropy through the
    m x m capacitance matrix (Woodbury, the determinant lemma), as torch's; `rsample` is
    loc + W eps_W + sqrt(D) eps_D, so gradients reach every parameter. The capacitance's
    Cholesky factor is computed at construction (on the host, as MultivariateNormal's).

    >>> import fusegrad as fg
    >>> d = LowRankMultivariateNormal(fg.zeros(2), fg.tensor([[1.0], [1.0]]), fg.ones(2))
    >>> d.covariance_matrix.tolist(), round(d.log_prob(fg.zeros(2)).item(), 4)
    ([[2.0, 1.0], [1.0, 2.0]], -2.3872)
    """

    arg_constraints = {
        "loc": constraints.real_vector,
        "cov_factor": constraints.independent(constraints.real, 2),
        "cov_diag": constraints.independent(constraints.positive, 1),
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args: bool | None = None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = tuple(loc.shape[-1:])
        if cov_factor.dim() < 2:
            raise ValueError(
                "cov_factor must be at least two-dimensional, with optional leading batch "
                "dimensions"
            )
        if tuple(cov_factor.shape[-2:-1]) != event_shape:
            raise ValueError(
                f"cov_factor must be a batch of matrices with shape {event_shape[0]} x m"
            )
        if tuple(cov_diag.shape[-1:]) != event_shape:
            raise ValueError(f"cov_diag must be a batch of vectors with shape {event_shape}")
        try:
            batch = broadcast_shapes(
                tuple(loc.shape[:-1]),
                broadcast_shapes(
                    tuple(cov_factor.shape[:-2]), tuple(cov_diag.shape[:-1]), "broadcast"
                ),
                "broadcast",
            )
        except Exception as e:
            raise ValueError(
                f"Incompatible batch shapes: loc {tuple(loc.shape)}, cov_factor "
                f"{tuple(cov_factor.shape)}, cov_diag {tuple(cov_diag.shape)}"
            ) from e
        self.loc = loc.expand(batch + event_shape)
        self.cov_factor = cov_factor.expand(batch + tuple(cov_factor.shape[-2:]))
        self.cov_diag = cov_diag.expand(batch + event_shape)
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        self._capacitance_tril = _batch_capacitance_tril(cov_factor, cov_diag)
        super().__init__(batch, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        loc_shape = batch_shape + self.event_shape
        new.loc = self.loc.expand(loc_shape)
        new.cov_diag = self.cov_diag.expand(loc_shape)
        new.cov_factor = self.cov_factor.expand(loc_shape + tuple(self.cov_factor.shape[-1:]))
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self) -> tuple[int, ...]:
        return self._batch_shape + self._event_shape + self._event_shape

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @lazy_property
    def variance(self) -> Tensor:
        w, d = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        return (w.pow(2).sum(-1) + d).expand(self._batch_shape + self._event_shape)

    @lazy_property
    def scale_tril(self) -> Tensor:
        n = self._event_shape[0]
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        dinvsqrt_w = self._unbroadcasted_cov_factor / d_sqrt
        k = dinvsqrt_w @ dinvsqrt_w.mT + eye(n, dtype=d_sqrt.dtype, device=d_sqrt.device)
        return (d_sqrt * cholesky(k)).expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self) -> Tensor:
        w = self._unbroadcasted_cov_factor
        cov = w @ w.mT + _diag_matrix(self._unbroadcasted_cov_diag)
        return cov.expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self) -> Tensor:
        d = self._unbroadcasted_cov_diag
        wt_dinv = self._unbroadcasted_cov_factor.mT / d.unsqueeze(-2)
        a = _TrilInverse.apply(self._capacitance_tril) @ wt_dinv
        return (_diag_matrix(d.reciprocal()) - a.mT @ a).expand(self._matrix_shape())

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        w_shape = shape[:-1] + tuple(self.cov_factor.shape[-1:])
        eps_w = randn(w_shape, dtype=self.loc.dtype, device=self.loc.device)
        eps_d = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return (
            self.loc
            + _batch_mv(self._unbroadcasted_cov_factor, eps_w)
            + self._unbroadcasted_cov_diag.sqrt() * eps_d
        )

    def _log_det(self) -> Tensor:
        return _batch_lowrank_logdet(self._unbroadcasted_cov_diag, self._capacitance_tril)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        m = _batch_lowrank_mahalanobis(
            self._unbroadcasted_cov_factor,
            self._unbroadcasted_cov_diag,
            value - self.loc,
            self._capacitance_tril,
        )
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + self._log_det() + m)

    def entropy(self) -> Tensor:
        h = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + self._log_det())
        return h.expand(self._batch_shape) if self._batch_shape else h
