"""`fusegrad.linalg`: torch.linalg's norms over fusegrad's `Tensor.norm`.

>>> import fusegrad as fg
>>> fg.linalg.norm(fg.tensor([3.0, 4.0])).item()
5.0
>>> fg.linalg.vector_norm(fg.tensor([[3.0, -4.0]]), ord=1, dim=1).tolist()
[7.0]
"""

from __future__ import annotations

from .errors import ArgumentError, fail


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """The `ord`-norm of x's elements (all of them, or along `dim`)."""
    if dtype is not None:
        x = x.cast(dtype)
    return x.norm(p=ord, dim=dim, keepdim=keepdim)


def matrix_norm(x, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None):  # noqa: A002
    """The Frobenius norm over the last two dims (other matrix norms are not available)."""
    if ord != "fro":
        fail(ArgumentError, "linalg.matrix_norm", f"only ord='fro' is supported, got {ord!r}")
    return vector_norm(x, 2, dim, keepdim, dtype=dtype)


def norm(x, ord=None, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """torch.linalg.norm: without `ord` the 2-norm of the flattened elements (the Frobenius
    norm of a matrix); a vector `ord` for 1-d inputs or an int `dim`; 'fro' for matrices."""
    if ord is None:
        return vector_norm(x, 2, dim, keepdim, dtype=dtype)
    if ord == "fro":
        return matrix_norm(x, "fro", dim if dim is not None else (-2, -1), keepdim, dtype=dtype)
    if isinstance(dim, int) or (dim is None and x.ndim == 1):
        return vector_norm(x, ord, dim, keepdim, dtype=dtype)
    fail(
        ArgumentError,
        "linalg.norm",
        f"matrix norm ord={ord!r} is not available (only 'fro'); for a vector norm give an int "
        "dim or use linalg.vector_norm",
    )
