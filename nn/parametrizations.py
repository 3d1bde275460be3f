"""`nn.utils.parametrizations`: `weight_norm`, `spectral_norm` and `orthogonal` as
parametrizations (nn/parametrize.py), as torch.nn.utils.parametrizations.

`weight_norm(m)` keeps `m.weight` as g (`parametrizations.weight.original0`, the norms)
and v (`original1`, the direction): each read of `m.weight` is `v * (g / ||v||)`, a lazy
graph that fuses into the layer's kernels, and gradients flow to g and v.
`spectral_norm(m)` divides the weight by its largest singular value, estimated by power
iteration with the persistent vectors `_u` and `_v` (buffers of the parametrization): in
training mode each read of the weight runs `n_power_iterations` steps and updates them
(lazily, computed with the next optimizer step, as BatchNorm's running statistics), in
eval mode it reads them as they are. Given the same `_u` and `_v`, the values are torch's;
the initial vectors come from fusegrad's random stream (`fg.manual_seed`), not torch's.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> m = nn.utils.parametrizations.weight_norm(nn.Linear(3, 2))
>>> list(m.state_dict())
['bias', 'parametrizations.weight.original0', 'parametrizations.weight.original1']
>>> m.parametrizations.weight.original0.shape
(2, 1)
>>> bool(fg.allclose(m.weight, m.parametrizations.weight.original1))
True
"""

from __future__ import annotations

from enum import Enum, auto

import numpy as np

from ..nnapi import (
    Tensor,
    cat,
    eye,
    finfo,
    linalg_qr,
    linalg_solve,
    no_grad,
    randn,
    tensor,
    zeros,
)
from ..nnapi import realize as _realize
from . import parametrize
from .conv_transpose import ConvTransposeNd
from .module import Module
from .normalization import bound_chain, normalize

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


# ---------------------------------------------------------------- weight norm


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:  # noqa: A002
    """torch.norm_except_dim: the `pow`-norm of `v` over every dim but `dim`, keeping
    `v`'s number of dims (`dim=-1`: over all of `v`, a 0-d tensor, as torch's)."""
    if dim == -1:
        return v.norm(pow)
    keep = dim % v.ndim
    others = tuple(d for d in range(v.ndim) if d != keep)
    if not others:
        return v.abs() if pow != 0 else (v != 0).cast(v.dtype)
    return v.norm(pow, dim=others, keepdim=True)


def weight_norm_of(v: Tensor, g: Tensor, dim: int) -> Tensor:
    """torch._weight_norm: `v * (g / norm_except_dim(v, 2, dim))`."""
    return v * (g / norm_except_dim(v, 2, dim))


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_norm_of(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalization of `module.<name>` as a parametrization, as torch's:
    `original0` is g, the norms over every dim but `dim` (over the whole tensor for
    `dim=None`, which torch reads as -1: so does an explicit -1), `original1` is v;
    the weight read is `v * (g / ||v||)`. A state dict of the hook-based
    `nn.utils.weight_norm` (`weight_g`, `weight_v`) loads into it. Returns `module`.
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(
        state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
    return module


# ---------------------------------------------------------------- spectral norm


def weight_matrix(weight: Tensor, dim: int) -> Tensor:
    """`weight` as a matrix whose rows run along `dim` (moved first), the rest flattened."""
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.ndim) if d != dim))
    return weight.reshape(weight.shape[0], -1)


def sigma_of(weight_mat: Tensor, u: Tensor, v: Tensor) -> Tensor:
    """The spectral norm's estimate `u . (W v)`: differentiable in W, u and v held."""
    return u.dot(weight_mat.mv(v))


def update_vectors(updated: list) -> None:
    """Give each vector buffer its new value, lazily, as BatchNorm's running statistics
    (computed with the next optimizer step; a chain of updates no step computed is
    bounded, `bound_chain`)."""
    bound_chain(updated)
    for target, value in updated:
        target.assign_(value)


class _SpectralNorm(Module):
    def __init__(
        self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12
    ) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(
                "Dimension out of range (expected to be in range of "
                f"[-{ndim}, {ndim - 1}] but got {dim})"
            )
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but "
                f"got n_power_iterations={n_power_iterations}"
            )
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            with no_grad():
                weight_mat = self._reshape_weight_to_matrix(weight.detach())
                h, w = weight_mat.shape
                like = {"dtype": weight.dtype, "device": weight.device}
                u = normalize(randn(h, **like), dim=0, eps=self.eps)
                v = normalize(randn(w, **like), dim=0, eps=self.eps)
                for _ in range(15):  # reasonable starting vectors, as torch's
                    u, v = self._power_steps(weight_mat, u, v)
                _realize(u, v)
            self.register_buffer("_u", u)
            self.register_buffer("_v", v)

    def _reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        if weight.ndim <= 1:
            raise AssertionError(
                f"Expected weight to have more than 1 dimension, got {weight.ndim}"
            )
        return weight_matrix(weight, self.dim)

    def _power_steps(self, weight_mat: Tensor, u: Tensor, v: Tensor) -> tuple:
        u = normalize(weight_mat.mv(v), dim=0, eps=self.eps)
        v = normalize(weight_mat.T.mv(u), dim=0, eps=self.eps)
        return u, v

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        """`n_power_iterations` steps from `_u` and `_v`, written back into them."""
        with no_grad():
            weight_mat = weight_mat.detach()
            u, v = self._u, self._v
            for _ in range(n_power_iterations):
                u, v = self._power_steps(weight_mat, u, v)
            update_vectors([(self._u, u), (self._v, v)])

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return normalize(weight, dim=0, eps=self.eps)  # exact: no power iteration
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        # (the vectors as they are now: a later update does not change this graph)
        u, v = self._u.clone(), self._v.clone()
        return weight / sigma_of(weight_mat, u, v)

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> Module:
    """Spectral normalization of `module.<name>` as a parametrization, as torch's: the
    weight read is the weight divided by its largest singular value, estimated by
    `n_power_iterations` power-iteration steps per read in training mode, from the
    vectors `module.parametrizations.<name>[0]._u` and `._v` (15 steps at registration),
    none in eval mode. `dim`: the dim of the output channels (1 for a transposed
    convolution, else 0, by default). A 1-D weight is normalized exactly. Returns
    `module`.
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if isinstance(module, ConvTransposeNd) else 0
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps)
    )
    return module


# ---------------------------------------------------------------- orthogonal


def _is_orthogonal(Q: Tensor) -> bool:
    n, k = Q.shape[-2], Q.shape[-1]
    Id = eye(k, dtype=Q.dtype, device=Q.device)
    eps = 10.0 * n * finfo(Q.dtype).eps  # a reasonable tolerance, torch's
    return bool((Q.mT @ Q).allclose(Id, atol=eps))


def _make_orthogonal(A: Tensor) -> Tensor:
    """The Q of A's QR decomposition, its columns' signs set so that R's diagonal is
    positive (unique for a full-rank A): torch's geqrf and householder_product, here
    LAPACK's QR through fg.linalg.qr (the same reflections)."""
    Q, R = linalg_qr(A)
    return Q * R.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


def householder_product(A: Tensor, tau: Tensor) -> Tensor:
    """torch.linalg.householder_product: the first k columns of H_1 ... H_k, H_i = I -
    tau_i v_i v_i^T, v_i column i of A below the diagonal with a 1 on it (A: (..., n, k),
    tau: (..., k)); differentiable in A and tau (one rank-one update a reflector)."""
    n, k = A.shape[-2], A.shape[-1]
    V = A.tril(-1) + eye(n, k, dtype=A.dtype, device=A.device)
    Q = eye(n, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], n, n)
    for i in range(k):
        v = V[..., :, i : i + 1]
        Q = Q - tau[..., i : i + 1].unsqueeze(-1) * ((Q @ v) @ v.mT)
    return Q[..., :, :k]


def _geqrf(A: Tensor) -> tuple:
    """torch.geqrf (LAPACK's): (R above the diagonal and the reflectors below, tau),
    computed on the host by numpy's raw QR (the same LAPACK routine)."""
    a = A.numpy()
    batch = a.shape[:-2]
    flat = a.reshape(-1, *a.shape[-2:])
    outs, taus = [], []
    for m in flat:
        h, t = np.linalg.qr(m, mode="raw")
        outs.append(h.T)
        taus.append(t)
    k = min(a.shape[-2:])
    out = np.stack(outs).reshape(*batch, *a.shape[-2:]) if outs else a.copy()
    tau = np.stack(taus).reshape(*batch, k) if taus else np.zeros((*batch, k), a.dtype)
    return out, tau


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    def __init__(self, weight: Tensor, orthogonal_map: _OrthMaps, *, use_trivialization=True):
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        # X is n x k with n >= k
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()
            if n != k:  # embedded in a square matrix
                X = cat([X, zeros(*X.shape[:-2], n, n - k, dtype=X.dtype, device=X.device)], -1)
            A = X - X.mT  # skew-symmetric
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = A.matrix_exp()
            else:  # the Cayley retraction (I + A/2)(I - A/2)^-1
                Id = eye(n, dtype=A.dtype, device=A.device)
                Q = linalg_solve(Id - 0.5 * A, Id + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(-2))
            Q = householder_product(A, tau)
            # X's diagonal holds 1s and -1s: read as integers, no gradient, as torch's
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        if transposed:
            Q = Q.mT
        return Q

    def right_inverse(self, Q: Tensor) -> Tensor:
        with no_grad():
            return self._right_inverse(Q)

    def _right_inverse(self, Q: Tensor) -> Tensor:
        if Q.shape != self.shape:
            raise ValueError(
                f"Expected a matrix or batch of matrices of shape {self.shape}. "
                f"Got a tensor of shape {Q.shape}."
            )
        Q_init = Q
        n, k = Q.shape[-2], Q.shape[-1]
        transpose = n < k
        if transpose:
            Q = Q.mT
            n, k = k, n
        if not hasattr(self, "base"):
            if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                raise NotImplementedError(
                    "It is not possible to assign to the matrix exponential "
                    "or the Cayley parametrizations when use_trivialization=False."
                )
            # the reflectors of Q's QR, R's diagonal replaced by its signs (flipped where
            # LAPACK made no reflection, tau 0), as torch's
            a, tau = _geqrf(Q.detach())
            diag = np.sign(np.diagonal(a, axis1=-2, axis2=-1)) * np.where(tau == 0.0, -1, 1)
            i = np.arange(k)
            a[..., i, i] = diag
            A = tensor(a, dtype=Q.dtype, device=Q.device)
            return A.mT if transpose else A
        if n == k:
            Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
        else:  # completed into a full n x n orthogonal matrix
            N = randn(*Q.shape[:-2], n, n - k, dtype=Q.dtype, device=Q.device)
            Q = _make_orthogonal(cat([Q, N], -1))
        self.base = Q.detach().realize()
        # -Id: the diagonal the Householder map reads (householder(zeros) is eye(m, n))
        m0, n0 = Q_init.shape[-2], Q_init.shape[-1]
        return Q_init.detach() * 0 - eye(m0, n0, dtype=Q_init.dtype, device=Q_init.device)


def orthogonal(
    module: Module,
    name: str = "weight",
    orthogonal_map: str | None = None,
    *,
    use_trivialization: bool = True,
) -> Module:
    """An orthogonal (or semi-orthogonal) `module.<name>` as a parametrization, as torch's:
    each read is an orthogonal matrix (of each matrix of a batch), Q^T Q = I (Q Q^T = I
    for a wide one). `orthogonal_map`: "matrix_exp" (the default for a square matrix),
    "cayley" or "householder" (the default otherwise). `use_trivialization`: the map is
    composed with a base, `parametrizations.<name>[0].base`, set to the orthogonalized
    weight at registration and on assignment (a wide or tall weight is completed with
    fusegrad's random numbers, so it is not torch's for the same seed); without it only
    "householder" can be assigned. Returns `module`."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(
            f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions."
        )
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError(
            'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
            f"Got: {orthogonal_map}"
        )
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module
