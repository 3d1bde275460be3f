"""The transforms onto vectors and matrices of `fusegrad.distributions.transforms` (torch's):
StickBreakingTransform (to the simplex), LowerCholeskyTransform, PositiveDefiniteTransform
and CorrCholeskyTransform (to Cholesky factors of correlation matrices), with torch's
formulas, shapes and log |det Jacobian|s.

>>> import fusegrad as fg
>>> from fusegrad.distribution_transforms import StickBreakingTransform
>>> t = StickBreakingTransform()
>>> y = t(fg.zeros(2))  # the middle of the simplex
>>> [round(v, 4) for v in y.tolist()], [abs(round(v, 4)) for v in t.inv(y).tolist()]
([0.3333, 0.3333, 0.3333], [0.0, 0.0])
"""

from __future__ import annotations

import math

from . import distribution_constraints as constraints
from .creation import eye
from .distribution import tril_matrix_to_vec, vec_to_tril_matrix
from .distribution_transform import Transform, _clipped_sigmoid, _Fixed
from .distributions_categorical import _log_sigmoid, _softplus
from .ir.dtypes import bool_
from .linalg import cholesky
from .movement import cat
from .tensor import Tensor, where
from .typeinfo import finfo

__all__ = [
    "CorrCholeskyTransform",
    "LowerCholeskyTransform",
    "PositiveDefiniteTransform",
    "StickBreakingTransform",
]


def _diag_matrix(vec: Tensor) -> Tensor:
    """The matrices with `vec`'s last dim on their diagonals (diag_embed's values) in one
    elementwise kernel: Tensor.diag_embed builds one diagonal per batch row, which a batch
    of thousands of draws (Wishart's, LKJCholesky's) makes slow."""
    n = vec.shape[-1]
    on_diagonal = eye(n, dtype=bool_, device=vec.device)
    return where(on_diagonal, vec.unsqueeze(-1), 0.0)


def _pad_last(x: Tensor, before: int, after: int, value: float) -> Tensor:
    """x with `before` / `after` entries of `value` added to its last dim (F.pad's)."""
    parts = []
    fill_shape = tuple(x.shape[:-1]) + (1,)
    if before:
        parts.append(x.new_full(fill_shape, value))
    parts.append(x)
    if after:
        parts.append(x.new_full(fill_shape, value))
    return cat(parts, -1)


class StickBreakingTransform(_Fixed):
    """Real vectors of length K to the simplex of K + 1 by stick breaking: the k-th piece
    takes sigmoid(x_k - log(K - k)) of what is left (zeros go to the uniform point).
    Bijective, unlike SoftmaxTransform: TransformedDistribution can use its log |det|."""

    domain = constraints.real_vector
    codomain = constraints.simplex
    bijective = True

    def _offset(self, k: int, like: Tensor) -> Tensor:
        """log(K - k) for k = 0 .. K-1 (K + 1 - cumsum of ones)."""
        return (k + 1 - like.new_ones(k).cumsum(-1)).log()

    def _call(self, x):
        z = _clipped_sigmoid(x - self._offset(x.shape[-1], x))
        z_cumprod = (1 - z).cumprod(-1)
        return _pad_last(z, 0, 1, 1.0) * _pad_last(z_cumprod, 1, 0, 1.0)

    def _inverse(self, y):
        y_crop = y[..., :-1]
        offset = (y.shape[-1] - y.new_ones(y_crop.shape[-1]).cumsum(-1)).log()
        sf = (1 - y_crop.cumsum(-1)).clamp(min=finfo(y.dtype).tiny)
        return y_crop.log() - sf.log() + offset

    def log_abs_det_jacobian(self, x, y):
        x = x - self._offset(x.shape[-1], x)
        return (-x + _log_sigmoid(x) + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] - 1,)


class LowerCholeskyTransform(_Fixed):
    """Unconstrained square matrices to lower triangular ones with a positive diagonal:
    the strict lower triangle kept, the diagonal exponentiated (not bijective, and no
    log |det|, as torch's)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def _call(self, x):
        return x.tril(-1) + _diag_matrix(x.diagonal(dim1=-2, dim2=-1).exp())

    def _inverse(self, y):
        return y.tril(-1) + _diag_matrix(y.diagonal(dim1=-2, dim2=-1).log())


class PositiveDefiniteTransform(_Fixed):
    """Unconstrained square matrices to positive definite ones: L L^T of
    LowerCholeskyTransform's L; the inverse factors with `fg.linalg.cholesky`."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def _call(self, x):
        lower = LowerCholeskyTransform()(x)
        return lower @ lower.mT

    def _inverse(self, y):
        return LowerCholeskyTransform().inv(cholesky(y))


class CorrCholeskyTransform(Transform):
    """Real vectors of length D(D-1)/2 to Cholesky factors of D x D correlation matrices
    (lower triangular, positive diagonal, unit rows): tanh into (-1, 1), then each row's
    stick breaking on the squared norm, as torch's (LKJCholesky's reparameterization)."""

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky
    bijective = True

    def _call(self, x):
        x = x.tanh()
        eps = finfo(x.dtype).eps
        x = x.clamp(min=-1 + eps, max=1 - eps)
        r = vec_to_tril_matrix(x, diag=-1)
        z1m_cumprod_sqrt = (1 - r**2).sqrt().cumprod(-1)
        r = r + eye(r.shape[-1], dtype=r.dtype, device=r.device)
        return r * _pad_last(z1m_cumprod_sqrt[..., :-1], 1, 0, 1.0)

    def _inverse(self, y):
        y_cumsum = 1 - (y * y).cumsum(-1)
        y_cumsum_shifted = _pad_last(y_cumsum[..., :-1], 1, 0, 1.0)
        y_vec = tril_matrix_to_vec(y, diag=-1)
        y_cumsum_vec = tril_matrix_to_vec(y_cumsum_shifted, diag=-1)
        t = y_vec / y_cumsum_vec.sqrt()
        return (t.log1p() - (-t).log1p()) / 2

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        y1m_cumsum = 1 - (y * y).cumsum(-1)
        y1m_cumsum_tril = tril_matrix_to_vec(y1m_cumsum, diag=-2)
        stick_breaking_logdet = 0.5 * y1m_cumsum_tril.log().sum(-1)
        tanh_logdet = -2 * (x + _softplus(-2 * x) - math.log(2.0)).sum(-1)
        return stick_breaking_logdet + tanh_logdet

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        n = shape[-1]
        d = round((0.25 + 2 * n) ** 0.5 + 0.5)
        if d * (d - 1) // 2 != n:
            raise ValueError("Input is not a flattened lower-diagonal number")
        return tuple(shape[:-1]) + (d, d)

    def inverse_shape(self, shape):
        if len(shape) < 2:
            raise ValueError("Too few dimensions on input")
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        d = shape[-1]
        return tuple(shape[:-2]) + (d * (d - 1) // 2,)
