"""`fusegrad.linalg`: torch.linalg. The norms are fusegrad's `Tensor.norm` and reductions;
the inverses, determinants and factorizations (cholesky, qr, eigh, svd, pinv, lstsq,
matrix_exp, ...) are LAPACK through numpy on the host, each with torch's gradient written
as tensor ops over its factors.

>>> import fusegrad as fg
>>> fg.linalg.norm(fg.tensor([3.0, 4.0])).item()
5.0
>>> fg.linalg.vector_norm(fg.tensor([[3.0, -4.0]]), ord=1, dim=1).tolist()
[7.0]
>>> fg.linalg.matrix_norm(fg.tensor([[3.0, 0.0], [0.0, -4.0]]), ord="nuc").item()
7.0
"""

from __future__ import annotations

import math
import sys
from collections import namedtuple

import numpy as np

from .autocast import autocast_op
from .creation import tensor
from .errors import (
    ArgumentError,
    DTypeError,
    GradError,
    IndexingError,
    JitError,
    LinAlgError,
    fail,
)
from .function import Function
from .ir.dtypes import float32, float64
from .jithooks import recording
from .movement import cat
from .shapeops import cross as _cross
from .shapeops import vander as _vander
from .tensor_base import TensorBase, where

_SVD_DTYPES = (float32, float64)


@autocast_op("vector_norm")
def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """The `ord`-norm of x's elements (all of them, or along `dim`)."""
    if dtype is not None:
        x = x.cast(dtype)
    return x.norm(p=ord, dim=dim, keepdim=keepdim)


@autocast_op("matrix_norm")
def matrix_norm(x, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None):  # noqa: A002
    """A norm of the matrices over the two dims `dim`: 'fro' (Frobenius), 1 / -1 (the
    largest / smallest column sum of |x|), inf / -inf (row sum), 2 / -2 (the largest /
    smallest singular value) or 'nuc' (their sum), as torch's. The singular values come
    from LAPACK on the host (`svdvals`), so the spectral norms do not fuse.

    >>> import fusegrad as fg
    >>> fg.linalg.matrix_norm(fg.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=1).item()
    6.0
    """
    op = "linalg.matrix_norm"
    dim = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(dim) != 2:
        fail(ArgumentError, op, f"dim must be a 2-tuple. Got {len(dim)}")
    if x.ndim < 2:
        fail(ArgumentError, op, "The input tensor A must have at least 2 dimensions.")
    d0, d1 = (d % x.ndim for d in dim)
    if d0 == d1:
        fail(ArgumentError, op, f"dims must be different. Got {tuple(dim)}")
    if ord == "fro":
        return vector_norm(x, 2, dim, keepdim, dtype=dtype)
    if ord not in (1, -1, math.inf, -math.inf, 2, -2, "nuc"):
        fail(
            ArgumentError,
            op,
            f"Order {ord!r} not supported: 'fro', 'nuc', 1, -1, 2, -2, inf and -inf are",
        )
    if dtype is not None:
        x = x.cast(dtype)
    if ord in (2, -2, "nuc"):
        return _spectral(x, ord, d0, d1, keepdim)
    if ord in (math.inf, -math.inf):  # sums along rows: the roles of the dims swap
        d0, d1 = d1, d0
    sums = x.abs().sum(d0, keepdim=True)
    out = sums.amax(d1, keepdim=True) if ord > 0 else sums.amin(d1, keepdim=True)
    if keepdim:
        return out
    return out.squeeze(max(d0, d1)).squeeze(min(d0, d1))


def norm(x, ord=None, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """torch.linalg.norm: without `ord` the 2-norm of the flattened elements (the Frobenius
    norm of a matrix); with `ord`, a vector norm over one dim (or of a 1-D input) and a
    matrix norm over two dims (or of a 2-D input)."""
    if dim is not None:
        dim = (dim,) if isinstance(dim, int) else tuple(dim)
    if ord is None:
        return vector_norm(x, 2, dim, keepdim, dtype=dtype)
    if dim is None:
        if x.ndim not in (1, 2):
            fail(
                ArgumentError,
                "linalg.norm",
                f"If dim is not specified but ord is, the input must be 1D or 2D. Got {x.ndim}D.",
            )
        dim = tuple(range(x.ndim))
    if len(dim) == 1 and not isinstance(ord, str):
        return vector_norm(x, ord, dim[0], keepdim, dtype=dtype)
    if len(dim) == 2:
        return matrix_norm(x, ord, dim, keepdim, dtype=dtype)
    fail(
        ArgumentError,
        "linalg.norm",
        f"ord={ord!r} and dim={dim}: a vector norm takes one dim, a matrix norm two",
    )


def _spectral(x, ord, d0: int, d1: int, keepdim: bool):  # noqa: A002
    """ord 2, -2 or 'nuc' over dims d0, d1: torch's composition, svdvals then amax, amin
    or sum (so the gradient at tied singular values is split as amax splits it)."""
    rest = [d for d in range(x.ndim) if d not in (d0, d1)]
    s = svdvals(x.permute(*rest, d0, d1))
    if ord == "nuc" or s.shape[-1] == 0:
        if ord == -2 and s.shape[-1] == 0:
            fail(
                IndexingError,
                "linalg.matrix_norm",
                f"ord=-2 of empty matrices (shape {x.shape}): the smallest singular value of "
                "no singular values",
            )
        out = s.sum(-1)  # (0 for an empty matrix, as torch's ord 2)
    else:
        out = s.amax(-1) if ord == 2 else s.amin(-1)
    if keepdim:
        for d in sorted((d0, d1)):
            out = out.unsqueeze(d)
    return out


class _SingularValues(Function):
    """The singular values of the matrices in x's last two dims, largest first, from
    LAPACK (numpy's `svd`, in float64, rounded once to x's dtype). Their gradient is
    U diag(g) V^T, torch's for svdvals."""

    @staticmethod
    def forward(ctx, x):
        u, s, vh = np.linalg.svd(x.detach().numpy().astype(np.float64), full_matrices=False)
        ctx.u = tensor(u, dtype=x.dtype, device=x.device)
        ctx.vh = tensor(vh, dtype=x.dtype, device=x.device)
        return tensor(s, dtype=x.dtype, device=x.device)

    @staticmethod
    def backward(ctx, g):
        return ctx.u @ (g.unsqueeze(-1) * ctx.vh)


def svdvals(x):
    """torch.linalg.svdvals: the singular values of the matrices in x's last two dims,
    in descending order, differentiable. Computed by LAPACK on the host (x is computed
    first; the result does not fuse with its neighbours, and `fg.jit`, which cannot replay
    host code, refuses it).

    >>> import fusegrad as fg
    >>> fg.linalg.svdvals(fg.tensor([[3.0, 0.0], [0.0, -4.0]])).tolist()
    [4.0, 3.0]
    """
    op = "linalg.svdvals"
    if x.ndim < 2:
        fail(ArgumentError, op, f"The input tensor A must have at least 2 dimensions ({x.shape})")
    if x.dtype not in _SVD_DTYPES:
        fail(
            DTypeError,
            op,
            f"Low precision dtypes not supported: expected float32 or float64, got "
            f"{x.dtype.name} {x.shape} (cast with .float() first)",
        )
    if recording():
        fail(
            JitError,
            op,
            f"the singular values of {x.dtype.name} {x.shape} are computed by LAPACK on the "
            "host, which fusegrad.jit cannot replay: compute them outside the jitted function",
        )
    return _SingularValues.apply(x)


def cross(x, other, *, dim: int = -1):
    """The cross product of 3-vectors along `dim` (the last by default), as
    torch.linalg.cross.

    >>> import fusegrad as fg
    >>> fg.linalg.cross(fg.tensor([0.0, 1.0, 0.0]), fg.tensor([0.0, 0.0, 1.0])).tolist()
    [1.0, 0.0, 0.0]
    """
    return _cross(x, other, dim)


# ---------------------------------------------------------------- inverses and determinants
# (LAPACK on the host, as svdvals: the input is computed first, the result does not fuse,
# and fusegrad.jit refuses them; the gradients are tensor ops, torch's formulas)


def _host(x, op: str, square: bool = False):
    """x's matrices in float64 on the host, after torch's checks (at least 2-d, square where
    `square`, float32/64; not while fusegrad.jit records)."""
    if x.ndim < 2:
        fail(ArgumentError, op, "The input tensor A must have at least 2 dimensions.")
    if square and x.shape[-1] != x.shape[-2]:
        fail(
            ArgumentError,
            op,
            f"A must be batches of square matrices, but they are {x.shape[-2]} by "
            f"{x.shape[-1]} matrices",
        )
    if x.dtype not in _SVD_DTYPES:
        fail(DTypeError, op, f"expected float32 or float64, got {x.dtype.name} (cast it first)")
    if recording():
        fail(JitError, op, "computed by LAPACK on the host, which fusegrad.jit cannot replay")
    return x.detach().numpy().astype(np.float64)


def _host_square(x, op: str):
    """x's square matrices in float64 on the host, after torch's checks."""
    return _host(x, op, square=True)


def _singular(op: str):
    fail(
        LinAlgError,
        op,
        "The diagonal element of the U factor is zero, the inversion could not be completed "
        "because the input matrix is singular.",
    )


class _Inverse(Function):
    """A^-1; its gradient is -A^-T g A^-T."""

    @staticmethod
    def forward(ctx, a):
        try:
            inv = np.linalg.inv(_host_square(a, "linalg.inv"))
        except np.linalg.LinAlgError:
            _singular("linalg.inv")
        ctx.inv = tensor(inv, dtype=a.dtype, device=a.device)
        return ctx.inv

    @staticmethod
    def backward(ctx, g):
        t = ctx.inv.mT
        return -(t @ g @ t)


class _LogAbsDet(Function):
    """(sign, log |det A|); the gradient of log |det A| is A^-T (the sign has none)."""

    @staticmethod
    def forward(ctx, a):
        sign, logabs = np.linalg.slogdet(_host_square(a, "linalg.slogdet"))
        ctx.a = a.detach()
        return tensor(logabs, dtype=a.dtype, device=a.device), tensor(
            sign, dtype=a.dtype, device=a.device
        )

    @staticmethod
    def backward(ctx, g, g_sign=None):
        return g.unsqueeze(-1).unsqueeze(-1) * _Inverse.apply(ctx.a).mT


def inv(A):
    """torch.linalg.inv: the inverses of the square matrices in A's last two dims (a
    singular one raises, as torch's); gradient -A^-T g A^-T.

    >>> import fusegrad as fg
    >>> fg.linalg.inv(fg.tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    return _Inverse.apply(A)


class SlogdetResult(tuple):
    """torch.linalg.slogdet's result: (sign, logabsdet), also by name."""

    __slots__ = ()

    def __new__(cls, sign, logabsdet):
        return super().__new__(cls, (sign, logabsdet))

    sign = property(lambda self: self[0])
    logabsdet = property(lambda self: self[1])


def slogdet(A):
    """torch.linalg.slogdet: (sign, log |det A|) of the square matrices in A's last dims."""
    logabs, sign = _LogAbsDet.apply(A)
    return SlogdetResult(sign.detach(), logabs)


def det(A):
    """torch.linalg.det: sign * exp(log |det A|), with the gradient det(A) A^-T. A singular
    matrix's determinant is 0, but its gradient raises the singular-matrix error here,
    where torch's is finite (its adjugate): not done yet."""
    sign, logabs = slogdet(A)
    return sign * logabs.exp()


def logdet(A):
    """torch.logdet: log det A, NaN where det A < 0, -inf where it is 0."""
    sign, logabs = slogdet(A)
    return where(sign < 0, float("nan"), where(sign == 0, float("-inf"), logabs))


def solve(A, B, *, left: bool = True):
    """torch.linalg.solve: X with A X = B (B a vector or matrices; `left=False`: X A = B),
    through A's inverse (so its gradient is the inverse's and the product's)."""
    if not left:
        return (inv(A.mT) @ B.mT).mT
    if B.ndim == A.ndim - 1:
        return (inv(A) @ B.unsqueeze(-1)).squeeze(-1)
    return inv(A) @ B


def matrix_power(A, n: int):
    """torch.linalg.matrix_power: A^n by repeated squaring (n < 0: of A's inverse; n = 0:
    the identity)."""
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        fail(ArgumentError, "linalg.matrix_power", f"expects square matrices, got {A.shape}")
    if n == 0:
        eye = tensor(np.eye(A.shape[-1]), dtype=A.dtype, device=A.device)
        return eye.expand(A.shape) + A * 0
    base, n = (inv(A), -n) if n < 0 else (A, n)
    out = None
    while n:
        if n & 1:
            out = base if out is None else out @ base
        n >>= 1
        if n:
            base = base @ base
    return out


def multi_dot(tensors):
    """torch.linalg.multi_dot: the product of the matrices, left to right (a 1-d first
    or last one as a row or column vector)."""
    ts = list(tensors)
    if len(ts) < 2:
        fail(ArgumentError, "linalg.multi_dot", "expected at least 2 tensors")
    out = ts[0]
    for t in ts[1:]:
        out = out @ t
    return out


def vecdot(x, y, *, dim: int = -1):
    """torch.linalg.vecdot: sum(x * y) along `dim` (real tensors)."""
    return (x * y).sum(dim)


def diagonal(A, *, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """torch.linalg.diagonal: A.diagonal over the last two dims by default."""
    return A.diagonal(offset, dim1, dim2)


def vander(x, *, N: int | None = None):
    """torch.linalg.vander: columns x^0, x^1, ... x^(N-1) (increasing, unlike torch.vander)."""
    return _vander(x, N, increasing=True)


# ---------------------------------------------------------------- factorizations
# (LAPACK through numpy on the host, in float64, rounded once to the input's dtype; the
# gradients are torch's formulas (torch/csrc/autograd/FunctionsManual.cpp) written as
# tensor ops over the factors, which enter the backward graph as constants)

CholeskyExResult = namedtuple("CholeskyExResult", ["L", "info"])
QRResult = namedtuple("QRResult", ["Q", "R"])
EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])
SVDVResult = namedtuple("SVDVResult", ["U", "S", "V"])
LstsqResult = namedtuple("LstsqResult", ["solution", "residuals", "rank", "singular_values"])


def _like(x, value):
    """A host array as a constant tensor of x's dtype and device."""
    return tensor(np.ascontiguousarray(value), dtype=x.dtype, device=x.device)


def _eye(x, n: int):
    return _like(x, np.eye(n))


def _tri_inverse(t, lower: bool):
    """The inverses of the triangular matrices t (float64, batched) by substitution: a zero
    on the diagonal gives inf / NaN, as LAPACK's trsm, instead of raising."""
    n = t.shape[-1]
    out = np.zeros_like(t)
    eye = np.eye(n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        order = range(n) if lower else range(n - 1, -1, -1)
        for i in order:
            done = slice(0, i) if lower else slice(i + 1, n)
            rest = eye[i] - np.einsum("...k,...kj->...j", t[..., i, done], out[..., done, :])
            out[..., i, :] = rest / t[..., i, i : i + 1]
            if lower:  # (0 / 0 off the triangle where t[i, i] = 0: the inverse's 0 there)
                out[..., i, i + 1 :] = 0.0
            else:
                out[..., i, :i] = 0.0
    return out


def _cholesky_host(h):
    """(L, info) of the matrices h: info 0, or the order of the first leading minor that is
    not positive-definite, with L as LAPACK's potrf leaves it there (the columns before
    that order computed, the diagonal element that failed, the rest of A's lower triangle)."""
    batch, n = h.shape[:-2], h.shape[-1]
    info = np.zeros(batch, dtype=np.int32)
    try:
        return np.linalg.cholesky(h), info
    except np.linalg.LinAlgError:
        pass
    flat = h.reshape(-1, n, n)
    out = np.zeros_like(flat)
    for b, a in enumerate(flat):
        try:
            out[b] = np.linalg.cholesky(a)
            continue
        except np.linalg.LinAlgError:
            pass
        low = np.tril(a)
        for j in range(n):
            ajj = a[j, j] - low[j, :j] @ low[j, :j]
            if not ajj > 0:
                low[j, j] = ajj
                info.reshape(-1)[b] = j + 1
                break
            low[j, j] = math.sqrt(ajj)
            low[j + 1 :, j] = (a[j + 1 :, j] - low[j + 1 :, :j] @ low[j, :j]) / low[j, j]
        out[b] = low
    return out.reshape(h.shape), info


def _not_positive_definite(op: str, info, batched: bool):
    bad = np.flatnonzero(info.reshape(-1))
    b = int(bad[0])
    where = f"(Batch element {b}): " if batched else ""
    fail(
        LinAlgError,
        op,
        f"{where}The factorization could not be completed because the input is not "
        f"positive-definite (the leading minor of order {int(info.reshape(-1)[b])} is not "
        "positive-definite).",
    )


class _Cholesky(Function):
    """L (or U = L^T), computed on the host, with A = L L^T; torch's gradient
    L^-T Phi(L^T gL) L^-1, Phi taking the lower triangle, its diagonal halved, and
    mirroring it (a symmetric gradient)."""

    @staticmethod
    def forward(ctx, a, low, upper):
        ctx.low = _like(a, low)
        ctx.inv = _like(a, _tri_inverse(low, lower=True))
        ctx.upper = upper
        return ctx.low.mT if upper else ctx.low

    @staticmethod
    def backward(ctx, g):
        if ctx.upper:
            g = g.mT
        t = (ctx.low.mT @ g).tril()
        t = 0.5 * (t + t.tril(-1).mT)
        return ctx.inv.mT @ t @ ctx.inv, None, None


def cholesky(A, *, upper: bool = False):
    """torch.linalg.cholesky: L, lower triangular with a positive diagonal, with A = L L^T,
    of the symmetric positive-definite matrices in A's last two dims (only A's lower
    triangle is read); `upper=True` gives U = L^T. A matrix that is not positive-definite
    raises `fg.linalg.LinAlgError` naming the leading minor, as torch's.

    Gradient: torch's, L^-T Phi(L^T gL) L^-1 (Phi: the lower triangle, diagonal halved,
    mirrored), symmetric. LAPACK on the host (float32 / float64; `fg.jit` refuses it).

    >>> import fusegrad as fg
    >>> fg.linalg.cholesky(fg.tensor([[4.0, 2.0], [2.0, 5.0]])).tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    """
    op = "linalg.cholesky"
    low, info = _cholesky_host(_host_square(A, op))
    if info.any():
        _not_positive_definite(op, info, A.ndim > 2)
    return _Cholesky.apply(A, low, upper)


def cholesky_ex(A, *, upper: bool = False, check_errors: bool = False):
    """torch.linalg.cholesky_ex: (L, info) without raising: info (int32, one per matrix) is
    0, or the order of the first leading minor that is not positive-definite (L is then
    what LAPACK's potrf leaves). `check_errors=True` raises as `cholesky`. L's gradient is
    `cholesky`'s."""
    op = "linalg.cholesky_ex"
    low, info = _cholesky_host(_host_square(A, op))
    if check_errors and info.any():
        _not_positive_definite(op, info, A.ndim > 2)
    return CholeskyExResult(_Cholesky.apply(A, low, upper), tensor(info, device=A.device))


def _empty_qr(h, mode: str):
    m, n = h.shape[-2:]
    k = min(m, n)
    cols = m if mode == "complete" else k
    q = np.broadcast_to(np.eye(m)[:, :cols], h.shape[:-2] + (m, cols)).copy()
    return q, np.zeros(h.shape[:-2] + (cols, n))


class _QR(Function):
    """(Q, R), computed on the host; torch's gradient: for m >= n,
    (gQ + Q copyltu(gR R^T - Q^T gQ)) R^-T (copyltu: the upper triangle mirrored); for
    m < n, A = [X | Y] and R = [U | V]: X's gradient is that of (Q, U) = qr(X) with
    gQ + Y gV^T, and Y's is Q gV."""

    @staticmethod
    def forward(ctx, a, q, r):
        ctx.set_materialize_grads(False)
        ctx.q, ctx.r = _like(a, q), _like(a, r)
        k = min(q.shape[-2], r.shape[-1])
        ctx.rinv = _like(a, _tri_inverse(r[..., :k, :k], lower=False))
        ctx.complete_tall = q.shape[-1] > r.shape[-1]
        return ctx.q, ctx.r

    @staticmethod
    def backward(ctx, gq, gr):
        if ctx.complete_tall:
            fail(
                GradError,
                "linalg.qr",
                "The QR decomposition is not differentiable when mode='complete' and "
                "nrows > ncols.",
            )
        q, r = ctx.q, ctx.r
        m, n = q.shape[-2], r.shape[-1]
        if m >= n:
            return _qr_square_backward(gq, gr, q, r, ctx.rinv), None, None
        u, v = r[..., :, :m], r[..., :, m:]
        gu = gr[..., :, :m] if gr is not None else None
        gv = gr[..., :, m:] if gr is not None else None
        y = q @ v  # A's last n - m columns
        if gv is not None:
            gq = y @ gv.mT if gq is None else gq + y @ gv.mT
        gx = _qr_square_backward(gq, gu, q, u, ctx.rinv)
        gy = q @ gv if gv is not None else y * 0
        return cat([gx, gy], -1), None, None


def _qr_square_backward(gq, gr, q, r, rinv):
    """torch's QR gradient for m >= n: (gQ + Q copyltu(M)) R^-T, M = gR R^T - Q^T gQ."""
    if gq is None:
        M = gr @ r.mT
    elif gr is None:
        M = -(q.mT @ gq)
    else:
        M = gr @ r.mT - q.mT @ gq
    M = M.triu()
    M = M + M.triu(1).mT
    g = q @ M if gq is None else gq + q @ M
    return g @ rinv.mT


def qr(A, mode: str = "reduced"):
    """torch.linalg.qr: (Q, R) with A = Q R, Q with orthonormal columns and R upper
    triangular, of the matrices in A's last two dims (m x n, k = min(m, n)): mode
    'reduced' gives Q m x k and R k x n, 'complete' Q m x m and R m x n, 'r' only R (k x n;
    Q is an empty tensor). R's diagonal may be negative (LAPACK's Householder signs, as
    torch's on the CPU).

    Gradient: torch's (see `_QR`); mode='r' and mode='complete' with m > n are not
    differentiable and raise torch's message when a gradient is built. A rank-deficient A
    gives inf / NaN gradients, as torch's triangular solve.

    >>> import fusegrad as fg
    >>> q, r = fg.linalg.qr(fg.tensor([[3.0, 0.0], [4.0, 5.0]]))
    >>> [round(v, 6) for v in r.reshape(-1).tolist()]
    [-5.0, -4.0, 0.0, 3.0]
    """
    op = "linalg.qr"
    if mode not in ("reduced", "complete", "r"):
        fail(
            ArgumentError,
            op,
            f"qr received unrecognized mode '{mode}' but expected one of 'reduced' "
            "(default), 'r', or 'complete'",
        )
    h = _host(A, op)
    if 0 in h.shape:
        q, r = _empty_qr(h, mode)
    else:
        q, r = np.linalg.qr(h, mode="complete" if mode == "complete" else "reduced")
    if mode == "r":
        return QRResult(_like(A, np.zeros(0)), _QROnlyR.apply(A, r))
    return QRResult(*_QR.apply(A, q, r))


class _QROnlyR(Function):
    """R of mode='r': torch has no gradient for it (Q is not computed)."""

    @staticmethod
    def forward(ctx, a, r):
        return _like(a, r)

    @staticmethod
    def backward(ctx, g):
        fail(
            GradError,
            "linalg.qr",
            "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
            "Please use linalg.qr(A, mode='reduced') if you are going to differentiate "
            "through linalg.qr.",
        )


def _uplo(UPLO: str, op: str) -> str:
    if UPLO not in ("L", "U", "l", "u"):
        fail(ArgumentError, op, f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return UPLO.upper()


class _Eigh(Function):
    """(eigenvalues, eigenvectors), computed on the host; torch's gradient
    V (diag(gL) + skew(V^T gV) / 2 / E) V^T with E_ij = L_j - L_i (inf / NaN off the
    diagonal where eigenvalues repeat and the eigenvectors get a gradient, as torch's)."""

    @staticmethod
    def forward(ctx, a, w, v):
        ctx.set_materialize_grads(False)
        ctx.w, ctx.v = _like(a, w), _like(a, v)
        return ctx.w, ctx.v

    @staticmethod
    def backward(ctx, gw, gv):
        w, v = ctx.w, ctx.v
        eye = _eye(v, v.shape[-1])
        inner = 0 if gw is None else gw.unsqueeze(-1) * eye
        if gv is not None:
            vg = v.mT @ gv
            e = w.unsqueeze(-2) - w.unsqueeze(-1) + eye
            inner = inner + 0.5 * (vg - vg.mT) / e
        return v @ inner @ v.mT, None, None


def _eigh_host(A, UPLO: str, op: str):
    h = _host_square(A, op)
    if 0 in h.shape:
        n = h.shape[-1]
        return np.zeros(h.shape[:-1]), np.broadcast_to(np.eye(n), h.shape).copy()
    return np.linalg.eigh(h, UPLO=_uplo(UPLO, op))


def eigh(A, UPLO: str = "L"):
    """torch.linalg.eigh: (eigenvalues, eigenvectors) of the symmetric matrices in A's last
    two dims, eigenvalues ascending, eigenvectors the columns of an orthogonal V (each
    defined up to its sign; LAPACK's syevd picks it, as torch's on the CPU). Only the
    triangle `UPLO` ('L' or 'U') of A is read.

    Gradient: torch's, V (diag(gL) + (V^T gV - gV^T V) / 2 / E) V^T, E_ij = L_j - L_i:
    finite for distinct eigenvalues; where they repeat and the eigenvectors get a
    gradient it is inf / NaN, as torch's (the eigenvectors are not unique there).

    >>> import fusegrad as fg
    >>> fg.linalg.eigh(fg.tensor([[2.0, 1.0], [1.0, 2.0]])).eigenvalues.tolist()
    [1.0, 3.0]
    """
    op = "linalg.eigh"
    w, v = _eigh_host(A, UPLO, op)
    return EighResult(*_Eigh.apply(A, w, v))


def eigvalsh(A, UPLO: str = "L"):
    """torch.linalg.eigvalsh: the eigenvalues of the symmetric matrices in A's last two
    dims (triangle `UPLO`), ascending; gradient V diag(gL) V^T (finite at repeated
    eigenvalues too).

    >>> import fusegrad as fg
    >>> fg.linalg.eigvalsh(fg.tensor([[2.0, 9.0], [1.0, 2.0]])).tolist()  # (9.0 unread)
    [1.0, 3.0]
    """
    w, v = _eigh_host(A, UPLO, "linalg.eigvalsh")
    return _Eigh.apply(A, w, v)[0]


class _SVD(Function):
    """(U, S, Vh), computed on the host; torch's gradient (svd_backward): with
    full_matrices, the gradient reaches only the first k = min(m, n) columns of U and rows
    of Vh, as torch's."""

    @staticmethod
    def forward(ctx, a, u, s, vh):
        ctx.set_materialize_grads(False)
        ctx.u, ctx.s, ctx.vh = _like(a, u), _like(a, s), _like(a, vh)
        return ctx.u, ctx.s, ctx.vh

    @staticmethod
    def backward(ctx, gu, gs, gvh):
        k = ctx.s.shape[-1]
        u, s, vh = ctx.u[..., :k], ctx.s, ctx.vh[..., :k, :]
        gu = None if gu is None else gu[..., :k]
        gvh = None if gvh is None else gvh[..., :k, :]
        return _svd_backward(gu, gs, gvh, u, s, vh), None, None, None


def _svd_backward(gu, gs, gvh, u, s, vh):
    """torch's svd_backward for real matrices (reduced factors)."""
    m, n = u.shape[-2], vh.shape[-1]
    if gu is None and gvh is None:
        if gs is None:
            return None
        return u @ (gs.unsqueeze(-1) * vh)
    eye = _eye(u, s.shape[-1])
    s2 = s * s
    e = s2.unsqueeze(-2) - s2.unsqueeze(-1) + eye
    ret = 0
    if gu is not None:
        uhgu = u.mT @ gu
        ret = (uhgu - uhgu.mT) * s.unsqueeze(-2)
    if gvh is not None:
        vhgv = vh @ gvh.mT
        ret = ret + s.unsqueeze(-1) * (vhgv - vhgv.mT)
    ret = ret / e
    if gs is not None:
        ret = ret + gs.unsqueeze(-1) * eye
    if m > n and gu is not None:
        g = u @ ret
        gusinv = gu / s.unsqueeze(-2)
        g = g + gusinv - u @ (u.mT @ gusinv)
        return g @ vh
    if m < n and gvh is not None:
        g = ret @ vh
        sinvgvh = gvh / s.unsqueeze(-1)
        g = g + sinvgvh - (sinvgvh @ vh.mT) @ vh
        return u @ g
    return u @ ret @ vh


def _svd_host(h, full_matrices: bool):
    m, n = h.shape[-2:]
    if 0 in h.shape:
        k = min(m, n)
        rows, cols = (m, n) if full_matrices else (k, k)
        u = np.broadcast_to(np.eye(m)[:, :rows], h.shape[:-2] + (m, rows)).copy()
        vh = np.broadcast_to(np.eye(n)[:cols], h.shape[:-2] + (cols, n)).copy()
        return u, np.zeros(h.shape[:-2] + (k,)), vh
    return np.linalg.svd(h, full_matrices=full_matrices)


def svd(A, full_matrices: bool = True, *, driver=None):
    """torch.linalg.svd: (U, S, Vh) with A = U diag(S) Vh of the matrices in A's last two
    dims (m x n, k = min(m, n)), S descending; `full_matrices=True` (torch's default) gives
    U m x m and Vh n x n, False U m x k and Vh k x n. Each pair of singular vectors is
    defined up to a common sign (LAPACK's gesdd picks it, as torch's on the CPU). `driver`
    (cuSOLVER's choice in torch) is accepted and ignored.

    Gradient: torch's svd_backward: finite for distinct nonzero singular values; where
    they repeat and U or Vh get a gradient it is inf / NaN, as torch's; with
    full_matrices=True only the first k columns of U / rows of Vh carry gradient (torch
    narrows them the same way). LAPACK on the host (float32 / float64).

    >>> import fusegrad as fg
    >>> fg.linalg.svd(fg.tensor([[0.0, 2.0], [3.0, 0.0]])).S.tolist()
    [3.0, 2.0]
    """
    del driver
    h = _host(A, "linalg.svd")
    return SVDResult(*_SVD.apply(A, *_svd_host(h, full_matrices)))


def _default_rtol(A, atol, rtol):
    """torch's rule: rtol is eps * max(m, n) when neither is given, 0 when only atol is."""
    if rtol is not None:
        return _host_value(rtol)
    if atol is not None and np.all(_host_value(atol) > 0):
        return 0.0
    return np.finfo(np.float32 if A.dtype == float32 else np.float64).eps * max(A.shape[-2:])


def _host_value(v):
    """A tolerance (a number or a tensor) as a float64 numpy value."""
    return np.asarray(v.detach().numpy() if hasattr(v, "detach") else v, dtype=np.float64)


def _tolerance(A, s, atol, rtol):
    """max(atol, rtol * the largest singular value), one per matrix (s: (*, k))."""
    rtol = _default_rtol(A, atol, rtol)
    atol = 0.0 if atol is None else _host_value(atol)
    top = s.max(-1) if s.shape[-1] else np.zeros(s.shape[:-1])
    return np.maximum(atol, rtol * top)


class _Pinv(Function):
    """A^+, computed on the host; torch's gradient (pinv_backward), which holds where the
    rank does not change."""

    @staticmethod
    def forward(ctx, a, p):
        ctx.p, ctx.a = _like(a, p), a.detach()
        return ctx.p

    @staticmethod
    def backward(ctx, g):
        p, a = ctx.p, ctx.a
        m, n = a.shape[-2:]
        ph, gh = p.mT, g.mT
        if m <= n:
            k = gh @ p
            kph = k @ ph
            return -(p @ k).mT + kph - (a @ p) @ kph + (ph @ p) @ (gh - k @ a), None
        k = p @ gh
        phk = ph @ k
        return -(k @ p).mT + (gh - a @ k) @ p @ ph + phk - phk @ p @ a, None


def _pinv_host(A, atol, rtol, hermitian: bool, op: str):
    if hermitian:
        w, v = _eigh_host(A, "L", op)
        keep = np.abs(w) > _tolerance(A, np.abs(w), atol, rtol)[..., None]
        inv_w = np.where(keep, 1.0 / np.where(keep, w, 1.0), 0.0)
        return (v * inv_w[..., None, :]) @ np.swapaxes(v, -1, -2)
    h = _host(A, op)
    u, s, vh = _svd_host(h, False)
    keep = s > _tolerance(A, s, atol, rtol)[..., None]
    inv_s = np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)
    return np.swapaxes(vh, -1, -2) @ (inv_s[..., :, None] * np.swapaxes(u, -1, -2))


def pinv(A, *, atol=None, rtol=None, hermitian: bool = False):
    """torch.linalg.pinv: the Moore-Penrose pseudo-inverses of the matrices in A's last two
    dims, from their SVD (`hermitian=True`: from eigh of A's lower triangle), singular
    values at or below max(atol, rtol * the largest) taken as zero; rtol defaults to
    eps * max(m, n) (0 when only atol > 0 is given), as torch's. atol / rtol: numbers or
    tensors broadcast over the batch.

    Gradient: torch's pinv_backward (valid where the rank is locally constant).

    >>> import fusegrad as fg
    >>> fg.linalg.pinv(fg.tensor([[2.0, 0.0], [0.0, 0.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    p = _pinv_host(A, atol, rtol, hermitian, "linalg.pinv")
    return _Pinv.apply(A, p)


def lstsq(A, B, rcond=None, *, driver=None):
    """torch.linalg.lstsq: the least-squares solutions X minimizing ||A X - B|| (the
    minimum-norm one where A is rank-deficient), with A (*, m, n) and B (*, m, k) (batch
    dims broadcast). Returns (solution, residuals, rank, singular_values) as torch's for
    the `driver` ('gelsy', torch's CPU default; 'gels', 'gelsd', 'gelss'): residuals (the
    squared column norms of A X - B) only for m > n, full rank and a driver other than
    gelsy, rank for all but gels, singular values for gelsd / gelss; otherwise empty.
    Singular values at or below rcond * the largest (rcond: eps * max(m, n) by default)
    count as zero, for every driver.

    Here X = pinv(A) B, so the gradients are torch's (it differentiates through pinv too);
    the values equal LAPACK's gelsy / gelsd up to rounding.

    >>> import fusegrad as fg
    >>> A = fg.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    >>> fg.linalg.lstsq(A, fg.tensor([[1.0], [4.0], [5.0]])).solution.tolist()
    [[1.0], [2.0]]
    """
    op = "linalg.lstsq"
    driver = "gelsy" if driver is None else driver
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        fail(
            ArgumentError,
            op,
            f"parameter `driver` should be one of (gels, gelsy, gelsd, gelss), got {driver}",
        )
    h = _host(A, op)
    if B.dtype != A.dtype:
        fail(
            DTypeError,
            op,
            f"Expected input and other to have the same dtype, but got input's dtype "
            f"{A.dtype.name} and other's dtype {B.dtype.name}",
        )
    vector = B.ndim == 1 or B.ndim == A.ndim - 1  # (torch's rule for lstsq)
    rhs = B.unsqueeze(-1) if vector else B
    m, n = A.shape[-2:]
    if rhs.ndim < 2 or rhs.shape[-2] != m:
        fail(
            ArgumentError,
            op,
            f"input.size(-2) should match other.size(-2). Got {m} and "
            f"{rhs.shape[-2] if rhs.ndim >= 2 else rhs.shape}",
        )
    _, s, _ = _svd_host(h, False)
    rtol = _default_rtol(A, None, rcond if rcond is None or rcond >= 0 else None)
    tol = _tolerance(A, s, None, rtol)
    x = _Pinv.apply(A, _pinv_host(A, None, rtol, False, op)) @ rhs
    batch = x.shape[:-2]
    rank = (s > tol[..., None]).sum(-1)
    empty = _like(A, np.zeros(0))
    residuals = empty
    if driver != "gelsy" and m > n and np.all(rank == n):
        residuals = ((A @ x - rhs) ** 2).sum(-2)
    ranks = tensor(np.broadcast_to(rank, batch).astype(np.int64), device=A.device)
    if driver == "gels":
        ranks = tensor(np.zeros(0, dtype=np.int64), device=A.device)
    values = empty
    if driver in ("gelsd", "gelss"):
        values = _like(A, np.broadcast_to(s, batch + s.shape[-1:]))
    return LstsqResult(x.squeeze(-1) if vector else x, residuals, ranks, values)


# matrix_exp's Taylor degree and the 1-norm its scaled matrix is brought under: the
# truncation is 0.25^13 / 13! (4e-18) of the norm, below float64's rounding
_EXP_DEGREE = 12
_EXP_THETA = 0.25


def _expm_host(h):
    """(exp(h), the Horner terms T_1..T_q of the scaled Taylor polynomial, the squarings'
    bases E_0..E_{s-1}, s): exp(X) = T_0^(2^s) with X = h / 2^s, T_q = I,
    T_{k-1} = I + X T_k / k (one s for the batch: the largest matrix's)."""
    n = h.shape[-1]
    norm = np.abs(h).sum(-2).max() if h.size else 0.0
    s = max(0, math.ceil(math.log2(norm / _EXP_THETA))) if norm > _EXP_THETA else 0
    x = h / 2.0**s
    eye = np.eye(n)
    terms = [np.broadcast_to(eye, h.shape)]  # T_q
    for k in range(_EXP_DEGREE, 0, -1):
        terms.append(eye + x @ terms[-1] / k)
    e = terms.pop()  # T_0
    bases = []
    for _ in range(s):
        bases.append(e)
        e = e @ e
    return e, terms[::-1], bases, s


class _MatrixExp(Function):
    """exp(A) by scaling and squaring a Taylor polynomial on the host; torch's gradient,
    the upper-right block of exp([[A^T, G], [0, A^T]]), computed by the same scaling and
    squaring of that block matrix (whose upper-right block is linear in G: the powers of
    A^T are constants, G stays in the graph)."""

    @staticmethod
    def forward(ctx, a, h):
        e, terms, bases, s = _expm_host(h)
        ctx.x = _like(a, np.swapaxes(h, -1, -2) / 2.0**s)
        ctx.terms = [_like(a, np.swapaxes(t, -1, -2)) for t in terms]  # T_1..T_q of A^T
        ctx.bases = [_like(a, np.swapaxes(b, -1, -2)) for b in bases]
        ctx.s = s
        return _like(a, e)

    @staticmethod
    def backward(ctx, g):
        gs = g / 2.0**ctx.s
        d = None  # the derivative of T_k in the direction gs, from T_q = I down to T_0
        for k in range(_EXP_DEGREE, 0, -1):
            step = gs @ ctx.terms[k - 1] if d is None else gs @ ctx.terms[k - 1] + ctx.x @ d
            d = step / k
        for base in ctx.bases:
            d = base @ d + d @ base
        return d, None


def matrix_exp(A):
    """torch.linalg.matrix_exp: the exponential sum_k A^k / k! of the square matrices in A's
    last two dims, by scaling and squaring a degree-12 Taylor polynomial on the host in
    float64 (torch's CPU kernel uses Pade / Taylor degrees by the norm: equal to rounding).

    Gradient: torch's, the upper-right block of exp([[A^T, G], [0, A^T]]), computed by the
    same scaling and squaring in the graph (so G's path fuses; A's powers are constants:
    the gradient's own gradient reaches G, not A).

    >>> import fusegrad as fg
    >>> fg.linalg.matrix_exp(fg.tensor([[0.0, 1.0], [0.0, 0.0]])).tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    return _MatrixExp.apply(A, _host_square(A, "linalg.matrix_exp"))


def matrix_rank(A, tol=None, hermitian: bool = False, *, atol=None, rtol=None):
    """torch.linalg.matrix_rank: the number of singular values (`hermitian=True`: of
    |eigenvalues| of A's lower triangle) above max(atol, rtol * the largest), int64, one
    per matrix; rtol defaults to eps * max(m, n) (0 when only atol > 0 is given). `tol`,
    torch's older argument, is atol with rtol 0. Not differentiable.

    >>> import fusegrad as fg
    >>> fg.linalg.matrix_rank(fg.tensor([[1.0, 2.0], [2.0, 4.0]])).item()
    1
    """
    op = "linalg.matrix_rank"
    if tol is not None:
        atol, rtol = tol, 0.0
    if hermitian:
        s = np.abs(_eigh_host(A, "L", op)[0])
    else:
        s = _svd_host(_host(A, op), False)[1]
    rank = (s > _tolerance(A, s, atol, rtol)[..., None]).sum(-1)
    return tensor(np.asarray(rank, dtype=np.int64), device=A.device)


def cond(A, p=None):
    """torch.linalg.cond: the condition number of the matrices in A's last two dims in the
    norm `p`: None or 2 (the default) the largest singular value over the smallest, -2 the
    smallest over the largest (any m x n), else ('fro', 'nuc', inf, -inf, 1, -1; square A)
    matrix_norm(A, p) * matrix_norm(inv(A), p), inf for a singular A, as torch's.
    Differentiable through svdvals / inv (torch 2.14.1's backward of the second kind
    raises an in-place error; this one gives the composition's gradient).

    >>> import fusegrad as fg
    >>> fg.linalg.cond(fg.tensor([[4.0, 0.0], [0.0, 2.0]])).item()
    2.0
    """
    if p is None or p in (2, -2):
        s = svdvals(A)
        big, small = s[..., 0], s[..., -1]
        return small / big if p == -2 else big / small
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        fail(
            ArgumentError,
            "linalg.cond",
            f"A must be batches of square matrices, but they are {A.shape[-2]} by "
            f"{A.shape[-1]} matrices"
            if A.ndim >= 2
            else "The input tensor A must have at least 2 dimensions.",
        )
    h = _host_square(A, "linalg.cond")
    singular = np.linalg.slogdet(h)[0] == 0 if h.size else np.zeros(h.shape[:-2], bool)
    if not singular.any():
        return matrix_norm(A, p) * matrix_norm(inv(A), p)
    # torch's inf for a singular matrix (no gradient there); the others' as above
    mask = tensor(singular, device=A.device)
    safe = where(mask.unsqueeze(-1).unsqueeze(-1), _eye(A, A.shape[-1]), A)
    return where(mask, math.inf, matrix_norm(A, p) * matrix_norm(inv(safe), p))


class _TriangularInverse(Function):
    """T^-1 of the triangle (`upper` or lower; unit diagonal where `unit`) of A, by
    substitution on the host (inf / NaN at a zero diagonal element, as LAPACK's trsm); its
    gradient -T^-T g T^-T, kept to the triangle read (the strict one where `unit`)."""

    @staticmethod
    def forward(ctx, a, upper, unit):
        h = _host_square(a, "linalg.solve_triangular")
        t = np.triu(h) if upper else np.tril(h)
        if unit:
            idx = np.arange(t.shape[-1])
            t[..., idx, idx] = 1.0
        ctx.inv = _like(a, _tri_inverse(t, lower=not upper) if t.size else t)
        ctx.upper, ctx.unit = upper, unit
        return ctx.inv

    @staticmethod
    def backward(ctx, g):
        t = ctx.inv.mT
        grad = -(t @ g @ t)
        shift = 1 if ctx.unit else 0
        return (grad.triu(shift) if ctx.upper else grad.tril(-shift)), None, None


def solve_triangular(A, B, *, upper: bool, left: bool = True, unitriangular: bool = False):
    """torch.linalg.solve_triangular: X with T X = B (`left=False`: X T = B), T the upper
    (`upper=True`) or lower triangle of the square matrices in A's last two dims, with a
    unit diagonal where `unitriangular` (A's diagonal is then not read); batch dims
    broadcast. A zero on T's diagonal gives inf / NaN, as torch's.

    Here X = T^-1 B, T^-1 by substitution on the host: gradients torch's
    (B: T^-T gX; A: -T^-T gX X^T kept to the triangle read), values equal to LAPACK's trsm
    up to rounding.

    >>> import fusegrad as fg
    >>> A = fg.tensor([[2.0, 1.0], [0.0, 4.0]])
    >>> fg.linalg.solve_triangular(A, fg.tensor([[4.0], [8.0]]), upper=True).tolist()
    [[1.0], [2.0]]
    """
    op = "linalg.solve_triangular"
    if B.ndim < 2:
        fail(ArgumentError, op, "The input tensor B must have at least 2 dimensions.")
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        _host_square(A, op)  # (raises torch's error)
    n, rows = A.shape[-1], (B.shape[-2] if left else B.shape[-1])
    if rows != n:
        equation = "AX = B" if left else "XA = B"
        fail(
            ArgumentError,
            op,
            f"Incompatible shapes of A and B for the equation {equation} "
            f"({A.shape[-2]}x{A.shape[-1]} and {B.shape[-2]}x{B.shape[-1]})",
        )
    if B.dtype != A.dtype:
        fail(
            DTypeError,
            op,
            f"Expected A and B to have the same dtype, but found A of type {A.dtype.name} "
            f"and B of type {B.dtype.name} instead",
        )
    tinv = _TriangularInverse.apply(A, upper, unitriangular)
    return tinv @ B if left else B @ tinv


# Tensor's linear-algebra methods (torch_methods.py) call this module, which sits above
# tensor.py: bound here, late, as tensor.py binds `_plain`
TensorBase._linalg = sys.modules[__name__]


def __getattr__(name: str):
    """torch.linalg's eig and eigvals return complex tensors, which fusegrad does not
    have: say so (an AttributeError, so `python -m fusegrad`'s torch shim records them as
    fusegrad's gaps)."""
    if name in ("eig", "eigvals"):
        raise AttributeError(
            f"fusegrad.linalg has no {name!r}: torch.linalg.{name} returns complex tensors, "
            "which fusegrad does not have (for symmetric matrices use eigh / eigvalsh)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
