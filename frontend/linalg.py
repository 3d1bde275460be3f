"""`fusegrad.linalg`: torch.linalg's norms over fusegrad's `Tensor.norm`.

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

import numpy as np

from .autocast import autocast_op
from .creation import tensor
from .errors import ArgumentError, DTypeError, IndexingError, JitError, fail
from .function import Function
from .ir.dtypes import float32, float64
from .jithooks import recording
from .shapeops import cross as _cross
from .shapeops import vander as _vander
from .tensor_base import where

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


def _host_square(x, op: str):
    """x's matrices in float64 on the host, after torch's checks (square, float32/64)."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        fail(
            ArgumentError,
            op,
            f"A must be batches of square matrices, but they are {x.shape[-2:]} matrices"
            if x.ndim >= 2
            else f"The input tensor A must have at least 2 dimensions ({x.shape})",
        )
    if x.dtype not in _SVD_DTYPES:
        fail(DTypeError, op, f"expected float32 or float64, got {x.dtype.name} (cast it first)")
    if recording():
        fail(JitError, op, "computed by LAPACK on the host, which fusegrad.jit cannot replay")
    return x.detach().numpy().astype(np.float64)


def _singular(op: str):
    fail(
        ArgumentError,
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
