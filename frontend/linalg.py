"""`fusegrad.linalg`: torch.linalg's norms over fusegrad's `Tensor.norm`.

>>> import fusegrad as fg
>>> fg.linalg.norm(fg.tensor([3.0, 4.0])).item()
5.0
>>> fg.linalg.vector_norm(fg.tensor([[3.0, -4.0]]), ord=1, dim=1).tolist()
[7.0]
"""

from __future__ import annotations

import math

from .autocast import autocast_op
from .errors import ArgumentError, fail


@autocast_op("vector_norm")
def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """The `ord`-norm of x's elements (all of them, or along `dim`)."""
    if dtype is not None:
        x = x.cast(dtype)
    return x.norm(p=ord, dim=dim, keepdim=keepdim)


@autocast_op("matrix_norm")
def matrix_norm(x, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None):  # noqa: A002
    """A norm of the matrices over the two dims `dim`: 'fro' (Frobenius), 1 / -1 (the
    largest / smallest column sum of |x|) or inf / -inf (row sum), as torch's. The
    spectral norms (2, -2, 'nuc') need singular values, which fusegrad does not have.

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
    if ord not in (1, -1, math.inf, -math.inf):
        fail(
            ArgumentError,
            op,
            f"ord={ord!r} needs singular values, which fusegrad does not compute; "
            "'fro', 1, -1, inf and -inf are available",
        )
    if dtype is not None:
        x = x.cast(dtype)
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
