"""Tensor methods built from views and reductions: einsum, tril, split, repeat, prod, cumsum,
sort, ... (PyTorch's names and arguments).

>>> import fusegrad as fg
>>> x = fg.arange(6).reshape(2, 3)
>>> fg.einsum("ij->ji", x).tolist()
[[0, 3], [1, 4], [2, 5]]
>>> x.cumsum(1).tolist(), x.prod(1).tolist()
([[0, 1, 3], [3, 7, 12]], [0, 60])

Scans (cumsum, cumprod, cummax, cummin, logcumsumexp) take log2(n) shifted
steps along the axis (O(n log n) work, no new primitive). Sorting (sort,
argsort, topk, kthvalue, median) ranks each element by comparing it with every
other one on its row, so a row of n elements costs n^2 comparisons: above
SORT_LIMIT compared pairs they raise rather than run out of memory.
"""

from __future__ import annotations

import math
import string
from collections import namedtuple

import numpy as np

from .errors import DimError, DTypeError, IndexingError, ShapeError, fail
from .ir import node as N
from .ir.autodiff import with_vjp
from .ir.dtypes import bool_, int64
from .ir.ops import Ops
from .reduce import ReduceMixin  # (at the top: an import in a function runs each call)

SORT_LIMIT = 1 << 24  # compared pairs (rows * n * n) a sort may build

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _where(c, a, b):
    from .tensor import where

    return where(c, a, b)


def _arange_along(n: int, dim: int, ndim: int):
    from .creation import index_arange as arange

    shape = [1] * ndim
    shape[dim] = n
    return arange(n).reshape(shape)


# ---------------------------------------------------------------- reductions


def _tree_reduce(x, dim: int, combine, identity):
    """Combine the elements along `dim` pairwise: pad to a power of two with `identity`,
    then halve log2(n) times. Each step is exact where `combine` is (max, *)."""
    n = x.shape[dim]
    size = 1 << max(n - 1, 0).bit_length()
    if size != n:
        pads = [(0, 0)] * x.ndim
        pads[dim] = (0, size - n)
        fill = x._make(N.pad(N.const(True, x.shape, bool_), tuple(pads)))
        x = _where(fill, x._make(N.pad(x.node, tuple(pads))), identity)
    while x.shape[dim] > 1:
        half = x.shape[dim] // 2
        lo = x.narrow(dim, 0, half)
        hi = x.narrow(dim, half, half)
        x = combine(lo, hi)
    return x


def prod(x, dim=None, keepdim: bool = False, dtype=None):
    """The product over `dim` (all elements if None); bools and ints multiply as int64.

    Multiplied pairwise (log2(n) steps), so the gradient is exact also where an
    element is zero.
    """
    if dtype is not None:
        x = x.cast(dtype)
    elif not x.dtype.is_float:
        x = x.cast(int64)
    if dim is None:
        out = prod(x.reshape(-1), 0) if x.ndim else x
        return out.reshape((1,) * x.ndim) if keepdim else out
    d = x._dim(dim, "prod")
    if x.ndim == 0:
        return x
    if x.shape[d] == 0:
        shape = x.shape[:d] + (1,) + x.shape[d + 1 :]
        out = x._make(N.const(1, shape, x.dtype))
        return out if keepdim else out.squeeze(d)
    out = _tree_reduce(x, d, lambda a, b: a * b, 1)
    return out if keepdim else out.squeeze(d)


def all_(x, dim=None, keepdim: bool = False):
    """True where every element along `dim` is nonzero (True for an empty reduction)."""
    b = x.bool() if not x.dtype.is_bool else x
    if x.numel() == 0:
        return _empty_logical(x, dim, keepdim, True)
    return b.amin(dim, keepdim)


def any_(x, dim=None, keepdim: bool = False):
    b = x.bool() if not x.dtype.is_bool else x
    if x.numel() == 0:
        return _empty_logical(x, dim, keepdim, False)
    return b.amax(dim, keepdim)


def _empty_logical(x, dim, keepdim, value):
    axes = x._dims(dim, "all")
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    if not keepdim:
        shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return x._make(N.const(value, shape, bool_))


def norm(x, p="fro", dim=None, keepdim: bool = False):
    """The vector p-norm over `dim` (all elements if None): p in fro, 2, 1, inf, -inf, 0 or a
    number. The 2-norm's gradient at zero is 0, as PyTorch's."""
    from .ir.autodiff import with_vjp

    if not x.dtype.is_float:
        fail(DTypeError, "norm", f"needs a float tensor, got {x.dtype.name}")
    if p == "fro" or p == 2:
        n = (x * x).sum(dim, keepdim=True).sqrt()
        out = x._make(N.contiguous(n.node, "norm with its own gradient"), x)
        if out.requires_grad:
            safe = _where(n == 0, 1, n).detach()
            share = _where(n == 0, 0, x / safe)
            xn, sn = x.node, share.node  # now: an in-place update would rebind x.node
            with_vjp(out.node, lambda g: [(xn, N.mul(N.expand(g, xn.shape), sn))])
        return out if keepdim else out.squeeze(dim if dim is not None else None)
    a = x.abs()
    if p == math.inf or p == "inf":
        return a.amax(dim, keepdim)
    if p == -math.inf:
        return a.amin(dim, keepdim)
    if p == 0:
        return (a != 0).cast(x.dtype).sum(dim, keepdim)
    if p == 1:
        return a.sum(dim, keepdim)
    if isinstance(p, (int, float)):
        return (a**p).sum(dim, keepdim) ** (1.0 / p)
    fail(ShapeError, "norm", f"unsupported p {p!r}")


def var(x, dim=None, unbiased=None, keepdim: bool = False, correction=None):
    """Variance with PyTorch's `correction` (default 1) or the older `unbiased` flag."""
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if isinstance(dim, bool):  # var(True): the old positional unbiased
        dim, correction = None, int(dim)
    return ReduceMixin.var(x, dim, keepdim, correction)


def std(x, dim=None, unbiased=None, keepdim: bool = False, correction=None):
    return ReduceMixin._std_of_var(var(x, dim, unbiased, keepdim, correction))


def var_mean(x, dim=None, unbiased=None, keepdim: bool = False, correction=None):
    return var(x, dim, unbiased, keepdim, correction), x.mean(dim, keepdim)


def std_mean(x, dim=None, unbiased=None, keepdim: bool = False, correction=None):
    """(std, mean) over `dim`, as torch.std_mean."""
    return std(x, dim, unbiased, keepdim, correction), x.mean(dim, keepdim)


def sum_(x, dim=None, keepdim: bool = False, dtype=None, axis=None):
    """Sum over `dim` (`axis` is accepted as numpy's name)."""
    if axis is not None:
        if dim is not None:
            fail(ShapeError, "sum", "give dim or axis, not both")
        dim = axis
    return ReduceMixin.sum(x, dim, keepdim, dtype)


# ---------------------------------------------------------------- matrices


def bmm(a, b):
    """Batched matrix product of (b, n, m) and (b, m, p)."""
    if a.ndim != 3 or b.ndim != 3:
        fail(ShapeError, "bmm", f"expects 3-D tensors, got {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0]:
        fail(ShapeError, "bmm", f"batch sizes differ: {a.shape} and {b.shape}")
    return a @ b


def _tri(x, diagonal: int, upper: bool, op: str):
    if x.ndim < 2:
        fail(ShapeError, op, f"input tensor must have at least 2 dimensions, got {x.shape}")
    n, m = x.shape[-2:]
    r = _arange_along(n, 0, 2)
    c = _arange_along(m, 1, 2)
    keep = (c - r >= diagonal) if upper else (c - r <= diagonal)
    zero = x._make(N.const(0, (), x.dtype))
    return _where(keep, x, zero)


def tril(x, diagonal: int = 0):
    """The lower triangle (elements with col - row <= diagonal); the rest is 0.

    >>> import fusegrad as fg
    >>> fg.ones(2, 2).tril().tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    return _tri(x, diagonal, False, "tril")


def triu(x, diagonal: int = 0):
    return _tri(x, diagonal, True, "triu")


def diagonal(x, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal of the (dim1, dim2) planes, as a last axis (a view: a strided slice)."""
    a, b = x._dim(dim1, "diagonal"), x._dim(dim2, "diagonal")
    if a == b:
        fail(ShapeError, "diagonal", f"dim1 and dim2 cannot be the same axis ({dim1})")
    rest = [k for k in range(x.ndim) if k not in (a, b)]
    y = x.permute(rest + [a, b])
    n, m = y.shape[-2:]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    flat = y.reshape(y.shape[:-2] + (n * m,))
    if length == 0:
        return flat[..., 0:0]
    return flat[..., start : start + (length - 1) * (m + 1) + 1 : m + 1]


def diag(x, diagonal: int = 0):
    """A 1-D tensor's square matrix with it on a diagonal, or a 2-D tensor's diagonal."""
    if x.ndim == 2:
        return diagonal_(x, diagonal)
    if x.ndim != 1:
        fail(ShapeError, "diag", f"expects a 1-D or 2-D tensor, got shape {x.shape}")
    n, k = x.shape[0], abs(diagonal)
    size = n + k
    r = _arange_along(size, 0, 2)
    c = _arange_along(size, 1, 2)
    if diagonal >= 0:
        v = x.reshape(n, 1).pad((0, 0, 0, k)).expand(size, size)
    else:
        v = x.reshape(1, n).pad((0, k)).expand(size, size)
    zero = x._make(N.const(0, (), x.dtype))
    return _where(c - r == diagonal, v, zero)


diagonal_ = diagonal


def diag_embed(x, offset: int = 0):
    if x.ndim == 1:
        return diag(x, offset)
    rows = [diag(t, offset) for t in unbind(x.reshape(-1, x.shape[-1]), 0)]
    from .movement import stack

    out = stack(rows, 0)
    return out.reshape(x.shape[:-1] + out.shape[-2:])


def trace(x):
    if x.ndim != 2:
        fail(ShapeError, "trace", f"expects a matrix, got shape {x.shape}")
    return diagonal(x).sum()


def outer(a, b):
    if a.ndim != 1 or b.ndim != 1:
        fail(ShapeError, "outer", f"expects 1-D tensors, got {a.shape} and {b.shape}")
    return a.reshape(-1, 1) * b.reshape(1, -1)


def einsum(equation: str, *operands):
    """Einstein summation: one broadcast product of all operands, summed over the letters
    that are not in the output (`...` and implicit outputs as in numpy).

    >>> import fusegrad as fg
    >>> a, b = fg.ones(2, 3), fg.ones(3, 4)
    >>> fg.einsum("ij,jk->ik", a, b).shape
    (2, 4)
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        fail(
            ShapeError,
            "einsum",
            f"{equation!r} names {len(terms)} operands, got {len(operands)}",
        )
    letters = [c for c in string.ascii_letters if c not in eq]
    nd_ell = 0
    for term, t in zip(terms, operands):
        if "..." in term:
            nd_ell = max(nd_ell, t.ndim - (len(term) - 3))
    ell = "".join(letters[:nd_ell])
    expanded = []
    for term, t in zip(terms, operands):
        if "..." in term:
            k = t.ndim - (len(term) - 3)
            term = term.replace("...", ell[nd_ell - k :] if k else "")
        if len(term) != t.ndim or not all(c.isalpha() for c in term):
            fail(
                ShapeError,
                "einsum",
                f"subscripts {term!r} do not fit an operand of shape {t.shape}",
            )
        expanded.append(term)
    if arrow:
        out = out.replace("...", ell)
    else:
        counts = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    sizes: dict[str, int] = {}
    for term, t in zip(expanded, operands):
        for c, s in zip(term, t.shape):
            if c in sizes and sizes[c] != s and s != 1 and sizes[c] != 1:
                fail(
                    ShapeError,
                    "einsum",
                    f"subscript {c!r} has size {s} in one operand and {sizes[c]} in another",
                )
            sizes[c] = max(sizes.get(c, 1), s)
    for c in out:
        if c not in sizes:
            fail(ShapeError, "einsum", f"output subscript {c!r} is in no operand")
    order = list(out) + [c for c in sizes if c not in out]
    full = tuple(sizes[c] for c in order)
    product = None
    for term, t in zip(expanded, operands):
        # a letter twice in one term is a diagonal
        while len(set(term)) != len(term):
            c = next(c for c in term if term.count(c) > 1)
            i = term.index(c)
            j = term.index(c, i + 1)
            t = diagonal(t, 0, i, j)
            term = "".join(x for k, x in enumerate(term) if k not in (i, j)) + c
        perm = sorted(range(len(term)), key=lambda k: order.index(term[k]))
        t = t.permute(perm) if term else t
        shape = [1] * len(order)
        for k in perm:
            shape[order.index(term[k])] = t.shape[perm.index(k)]
        t = t.reshape(shape).expand(full)
        product = t if product is None else product * t
    summed = tuple(range(len(out), len(order)))
    return product.sum(summed) if summed else product


def kron(a, b):
    out = a.reshape(tuple(v for s in a.shape for v in (s, 1))) * b.reshape(
        tuple(v for s in b.shape for v in (1, s))
    )
    return out.reshape(tuple(x * y for x, y in zip(a.shape, b.shape)))


# ---------------------------------------------------------------- pieces


def narrow(x, dim: int, start: int, length: int):
    d = x._dim(dim, "narrow")
    if start < 0:
        start += x.shape[d]
    if not 0 <= start <= start + length <= x.shape[d]:
        fail(
            IndexingError,
            "narrow",
            f"start {start} + length {length} exceeds axis {d} of size {x.shape[d]}",
        )
    return x[(slice(None),) * d + (slice(start, start + length),)]


def split(x, split_size_or_sections, dim: int = 0):
    """Pieces of `split_size` along `dim` (the last may be shorter), or of the given sizes.

    >>> import fusegrad as fg
    >>> [t.tolist() for t in fg.arange(5).split(2)]
    [[0, 1], [2, 3], [4]]
    """
    d = x._dim(dim, "split")
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        if s <= 0 and n:
            fail(ShapeError, "split", f"split_size must be positive, got {s}")
        sizes = [min(s, n - k) for k in range(0, n, s)] if n else [0]
    else:
        sizes = [int(v) for v in split_size_or_sections]
        if sum(sizes) != n or any(v < 0 for v in sizes):
            fail(
                ShapeError,
                "split",
                f"split sizes {sizes} do not sum to the axis's size {n} (dim {dim})",
            )
    out, start = [], 0
    for s in sizes:
        out.append(narrow(x, d, start, s))
        start += s
    return tuple(out)


def chunk(x, chunks: int, dim: int = 0):
    """At most `chunks` pieces of ceil(n / chunks) along `dim`."""
    if chunks <= 0:
        fail(ShapeError, "chunk", f"chunks must be positive, got {chunks}")
    n = x.shape[x._dim(dim, "chunk")]
    return split(x, max(-(-n // chunks), 1), dim)


def tensor_split(x, indices_or_sections, dim: int = 0):
    d = x._dim(dim, "tensor_split")
    n = x.shape[d]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    else:
        cuts = [0] + [min(max(int(i), 0), n) for i in indices_or_sections] + [n]
        sizes = [max(b - a, 0) for a, b in zip(cuts, cuts[1:])]
        starts = cuts[:-1]
        return tuple(narrow(x, d, min(s, n), z) for s, z in zip(starts, sizes))
    return split(x, sizes, d)


def unbind(x, dim: int = 0):
    """The slices along `dim`, each without that axis."""
    d = x._dim(dim, "unbind")
    return tuple(x[(slice(None),) * d + (i,)] for i in range(x.shape[d]))


def movedim(x, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [x._dim(s, "movedim") for s in src]
    dst = [x._dim(s, "movedim") for s in dst]
    order = [k for k in range(x.ndim) if k not in src]
    for s, t in sorted(zip(dst, src)):
        order.insert(s, t)
    return x.permute(order)


def swapaxes(x, a, b):
    return x.transpose(a, b)


def unflatten(x, dim: int, sizes):
    """Split axis `dim` into `sizes` (one may be -1)."""
    d = x._dim(dim, "unflatten")
    sizes = tuple(int(s) for s in sizes)
    known = math.prod(s for s in sizes if s != -1)
    if sizes.count(-1) == 1 and known:
        sizes = tuple(x.shape[d] // known if s == -1 else s for s in sizes)
    if math.prod(sizes) != x.shape[d]:
        fail(
            ShapeError,
            "unflatten",
            f"sizes {sizes} do not multiply to the size {x.shape[d]} of dim {dim}",
        )
    return x.reshape(x.shape[:d] + sizes + x.shape[d + 1 :])


def unfold(x, dimension: int, size: int, step: int):
    """Windows of `size` every `step` along `dimension`, as a new last axis (a view)."""
    from .movement import sliding_windows

    d = x._dim(dimension, "unfold") if x.ndim else 0
    if x.ndim == 0:
        x = x.reshape(1)
    if size > x.shape[d] or size < 0 or step <= 0:
        fail(
            ShapeError,
            "unfold",
            f"size {size} (step {step}) does not fit axis {d} of size {x.shape[d]}",
        )
    moved = movedim(x, d, -1)
    win = sliding_windows(moved, (size,), (step,), (1,))  # (..., windows, size)
    return movedim(win, -2, d)


def repeat(x, *sizes):
    """Tile x: `sizes` gives the copies along each axis (more axes than x adds leading ones).

    >>> import fusegrad as fg
    >>> fg.tensor([1, 2]).repeat(2).tolist(), fg.tensor([1, 2]).repeat_interleave(2).tolist()
    ([1, 2, 1, 2], [1, 1, 2, 2])
    """
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < x.ndim:
        fail(
            ShapeError,
            "repeat",
            f"number of repeat dims {len(sizes)} can not be smaller than the tensor's {x.ndim}",
        )
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    y = x.reshape(tuple(v for s in shape for v in (1, s)))
    y = y.expand(tuple(v for r, s in zip(sizes, shape) for v in (r, s)))
    return y.reshape(tuple(r * s for r, s in zip(sizes, shape)))


def tile(x, dims):
    dims = tuple(dims)
    return repeat(x, (1,) * (x.ndim - len(dims)) + dims)


def repeat_interleave(x, repeats, dim=None):
    """Each element `repeats` times in a row along `dim` (flattened if None); a tensor of
    repeats is read on the host."""
    from .tensor import Tensor

    if dim is None:
        x, dim = x.reshape(-1), 0
    d = x._dim(dim, "repeat_interleave")
    if isinstance(repeats, Tensor) and repeats.numel() == 1:
        from .indexing import values_for_shape

        repeats = int(values_for_shape(repeats, "repeat_interleave with tensor repeats").item())
    if isinstance(repeats, int):
        if repeats < 0:
            fail(ShapeError, "repeat_interleave", f"repeats must be >= 0, got {repeats}")
        y = x.unsqueeze(d + 1)
        y = y.expand(x.shape[: d + 1] + (repeats,) + x.shape[d + 1 :])
        return y.flatten(d, d + 1)
    if isinstance(repeats, Tensor):
        from .indexing import values_for_shape

        reps = np.asarray(values_for_shape(repeats, "repeat_interleave with tensor repeats"))
    else:
        reps = np.asarray(repeats)
    if reps.shape != (x.shape[d],) or (reps < 0).any():
        fail(
            ShapeError,
            "repeat_interleave",
            f"repeats must be non-negative with shape ({x.shape[d]},), got {reps.shape}",
        )
    from .creation import host_table

    idx = host_table(np.repeat(np.arange(x.shape[d]), reps).astype(np.int64))
    return x.index_select(d, idx)


def roll(x, shifts, dims=None):
    """Elements shifted cyclically along `dims` (the flattened tensor if None)."""
    from .movement import cat

    if dims is None:
        return roll(x.reshape(-1), shifts, 0).reshape(x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        fail(ShapeError, "roll", f"shifts {shifts} and dims {dims} differ in length")
    for s, dm in zip(shifts, dims):
        d = x._dim(dm, "roll")
        if x.ndim == 0:  # torch refuses a dim for a 0-d tensor here (dims=None rolls it)
            fail(DimError, "roll", f"dimension specified as {dm} but tensor has no dimensions")
        n = x.shape[d]
        if n == 0:
            continue
        s %= n
        if s:
            x = cat([narrow(x, d, n - s, s), narrow(x, d, 0, n - s)], d)
    return x


def meshgrid(*tensors, indexing: str = "ij"):
    """Coordinate grids from 1-D tensors ('ij': matrix indexing, 'xy': Cartesian)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        fail(ShapeError, "meshgrid", f"indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = [t.reshape(-1) for t in tensors]
    shape = tuple(t.shape[0] for t in ts)
    out = []
    for k, t in enumerate(ts):
        view = [1] * len(ts)
        view[k] = shape[k]
        out.append(t.reshape(view).expand(shape))
    if indexing == "xy" and len(ts) >= 2:  # Cartesian: the first two axes swap
        out = [o.transpose(0, 1) for o in out]
    return tuple(out)


# ---------------------------------------------------------------- scans


def _shift(x, d: int, s: int, fill):
    """x moved s places forward along d, the first s places `fill`."""
    n = x.shape[d]
    pads = [(0, 0)] * x.ndim
    pads[d] = (s, 0)
    body = narrow(x, d, 0, n - s)
    moved = x._make(N.pad(body.node, tuple(pads)), body)
    if fill == 0:
        return moved
    inside = x._make(N.pad(N.const(True, body.shape, bool_), tuple(pads)))
    return _where(inside, moved, fill)


def _scan(x, dim, combine, fill, op: str):
    d = x._dim(dim, op)
    if x.ndim == 0:
        return x
    n, s = x.shape[d], 1
    while s < n:
        x = combine(x, _shift(x, d, s, fill))
        s *= 2
    return x


def cumsum(x, dim: int, dtype=None):
    """Running sums along `dim` (ints and bools sum as int64): log2(n) shifted adds.

    >>> import fusegrad as fg
    >>> fg.tensor([1, 2, 3]).cumsum(0).tolist()
    [1, 3, 6]
    """
    x = x.cast(dtype) if dtype is not None else (x if x.dtype.is_float else x.cast(int64))
    return _scan(x, dim, lambda a, b: a + b, 0, "cumsum")


def cumprod(x, dim: int, dtype=None):
    """Running products along `dim`; the gradient is exact where elements are zero."""
    x = x.cast(dtype) if dtype is not None else (x if x.dtype.is_float else x.cast(int64))
    return _scan(x, dim, lambda a, b: a * b, 1, "cumprod")


def logcumsumexp(x, dim: int):
    from .mathops import logaddexp

    x = x._float()
    return _scan(x, dim, lambda a, b: logaddexp(a, b), -math.inf, "logcumsumexp")


def _cum_extreme(x, dim, largest: bool, op: str):
    d = x._dim(dim, op) if x.ndim else 0
    if x.ndim == 0:
        return ValuesIndices(x, x._make(N.const(0, (), int64)))
    if largest:
        key = x
    elif x.dtype.is_bool:
        key = x.logical_not()
    else:  # -x of a uint8, or of an int8 -128, would wrap: negate in int64
        key = -(x.cast(int64) if x.dtype.is_int and x.dtype.itemsize < 8 else x)
    low = -math.inf if key.dtype.is_float else int(np.iinfo(np.int64).min)
    k = key if not key.dtype.is_bool else key.cast(int64)
    run = _scan(k.detach(), d, lambda a, b: a.maximum(b), low, op)
    # the index of the last element on which the running extreme was reached; as torch, a
    # NaN is reached where it stands, and from the first NaN on the running value is NaN
    pos = _arange_along(x.shape[d], d, x.ndim).expand(x.shape)
    hit = k.detach() == run
    if k.dtype.is_float:
        hit = hit | (k.detach() != k.detach())
    at = _where(hit, pos, -1)
    idx = _scan(at, d, lambda a, b: a.maximum(b), -1, op)
    return ValuesIndices(x.gather(d, idx), idx)


def cummax(x, dim: int):
    """(running maxima, their indices) along `dim`; the gradient goes to the index. As
    torch: a NaN propagates (the index is then the latest NaN's), ties take the later index.

    >>> import fusegrad as fg
    >>> v, i = fg.tensor([1.0, float("nan"), 3.0]).cummax(0)
    >>> v.tolist(), i.tolist()
    ([1.0, nan, nan], [0, 1, 1])
    """
    return _cum_extreme(x, dim, True, "cummax")


def cummin(x, dim: int):
    return _cum_extreme(x, dim, False, "cummin")


# ---------------------------------------------------------------- sorting


def _ranks(x, d: int, descending: bool, op: str):
    """Each element's place in the stable sort along d: how many sort before it."""
    from .mathops import isnan

    n = x.shape[d]
    rows = x.numel() // max(n, 1)
    if rows * n * n > SORT_LIMIT:
        fail(
            ShapeError,
            op,
            f"sorting compares every pair on a row: {rows} rows of {n} need "
            f"{rows * n * n} comparisons, above SORT_LIMIT = {SORT_LIMIT}",
        )
    y = movedim(x.detach(), d, -1)
    a = y.unsqueeze(-1)  # element i
    b = y.unsqueeze(-2)  # element j
    if y.dtype.is_bool or (y.dtype.is_int and y.dtype.itemsize < 8):
        a, b = a.cast(int64), b.cast(int64)  # so that -a cannot wrap (uint8, int8 -128)
    if descending:
        a, b = -a if not a.dtype.is_bool else a, -b if not b.dtype.is_bool else b
    # NaN sorts as the largest, as in torch: last ascending, first descending
    an, bn = isnan(a), isnan(b)
    before = (b < a) | ((bn & ~an) if descending else (an & ~bn))
    tie = (b == a) | (an & bn)
    i = _arange_along(n, a.ndim - 2, a.ndim)
    j = _arange_along(n, a.ndim - 1, a.ndim)
    ahead = before | (tie & (j < i))
    return ahead.cast(int64).sum(-1)  # (..., n): the rank of element i


def sort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """(sorted values, indices) along `dim`, stable; NaN sorts as the largest value (last,
    or first when `descending`), as in torch; see SORT_LIMIT.

    >>> import fusegrad as fg
    >>> v, i = fg.tensor([3.0, 1.0, 2.0]).sort()
    >>> v.tolist(), i.tolist()
    ([1.0, 2.0, 3.0], [1, 2, 0])
    """
    if x.ndim == 0:
        return ValuesIndices(x, x._make(N.const(0, (), int64)))
    d = x._dim(dim, "sort")
    n = x.shape[d]
    if n == 0:
        return ValuesIndices(x, x._make(N.const(0, x.shape, int64)))
    rank = _ranks(x, d, descending, "sort")  # (..., n) with d moved last
    pos = _arange_along(n, rank.ndim - 1, rank.ndim).expand(rank.shape)
    # indices[..., rank[i]] = i: a permutation, so a scatter-add places each exactly once
    from .indexing import _scattered_sum

    zeros = rank._make(N.const(0, rank.shape, int64))
    idx = _scattered_sum(zeros, rank.ndim - 1, rank, pos)
    idx = movedim(idx, -1, d)
    return ValuesIndices(x.gather(d, idx), idx)


def argsort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    return sort(x, dim, descending).indices


def msort(x):
    return sort(x, 0).values


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The k largest (or smallest) along `dim`, with their indices; NaN counts as the
    largest, as in torch.

    >>> import fusegrad as fg
    >>> fg.tensor([3.0, 1.0, 2.0]).topk(2).values.tolist()
    [3.0, 2.0]
    """
    d = x._dim(dim, "topk") if x.ndim else 0
    n = x.shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        fail(IndexingError, "topk", f"k ({k}) is out of range for dimension {d} of size {n}")
    if x.ndim == 0:  # as torch: the value and index 0, 0-d
        vals, idx = topk(x.reshape(1), max(k, 1), 0, largest, sorted)
        return ValuesIndices(vals.reshape(()), idx.reshape(()))
    vals, idx = sort(x, d, descending=largest)
    return ValuesIndices(narrow(vals, d, 0, k), narrow(idx, d, 0, k))


def kthvalue(x, k: int, dim: int = -1, keepdim: bool = False):
    """The k-th smallest element along `dim` (k from 1), with its index."""
    d = x._dim(dim, "kthvalue") if x.ndim else 0
    n = x.shape[d] if x.ndim else 1
    if not 1 <= k <= n:
        fail(IndexingError, "kthvalue", f"k ({k}) is out of range for dimension {d} of size {n}")
    if x.ndim == 0:  # as torch: the value and index 0, 0-d whatever keepdim
        vals, idx = kthvalue(x.reshape(1), k, 0)
        return ValuesIndices(vals, idx)
    vals, idx = sort(x, d)
    v, i = narrow(vals, d, k - 1, 1), narrow(idx, d, k - 1, 1)
    return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))


def median(x, dim=None, keepdim: bool = False):
    """The lower median (NaN if the row has a NaN); with `dim`, also its index."""
    from .mathops import isnan

    if dim is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0 and x.dtype.is_float:  # the median of nothing is NaN, as torch's
            return x._make(N.const(math.nan, (), x.dtype))
        v = kthvalue(flat, (flat.shape[0] + 1) // 2, 0).values
        if not x.dtype.is_float:
            return v
        return _shared_by_ties(_where(isnan(flat).any(), math.nan, v), flat)
    d = x._dim(dim, "median")
    n = x.shape[d]
    v, i = kthvalue(x, (n + 1) // 2, d, keepdim=True)
    if x.dtype.is_float:
        bad = isnan(x).any(d, keepdim=True)
        # the first NaN's index, as PyTorch, and the value read there (so that its
        # gradient goes to that NaN)
        first = _where(isnan(x), _arange_along(n, d, x.ndim), n).amin(d, keepdim=True)
        i = _where(bad, first, i)
        v = x.take_along_dim(i, d)
    return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))


def _shared_by_ties(out, flat):
    """`out`, a value picked from `flat`, with torch's gradient for a full median: shared
    evenly by the elements equal to it (by the NaNs, where it is NaN)."""
    if not out.requires_grad or out.node.op is not Ops.WHERE:
        return out
    from .mathops import isnan

    hit = ((flat == out) | (isnan(flat) & isnan(out))).cast(flat.dtype)
    share = (hit / hit.sum()).node
    fn = flat.node
    with_vjp(out.node, lambda g: [(fn, N.mul(N.expand(N.reshape(g, (1,)), fn.shape), share))])
    return out


def count_nonzero(x, dim=None):
    """How many elements are not zero (int64), over all of x or along `dim` (an int or a
    tuple).

    >>> import fusegrad as fg
    >>> fg.count_nonzero(fg.tensor([[0, 1], [2, 3]]), dim=0).tolist()
    [1, 2]
    """
    return (x != 0).cast("int64").sum(dim)


METHODS = {
    "count_nonzero": count_nonzero,
    "prod": prod,
    "all": all_,
    "any": any_,
    "norm": norm,
    "var": var,
    "std": std,
    "var_mean": var_mean,
    "std_mean": std_mean,
    "sum": sum_,
    "bmm": bmm,
    "tril": tril,
    "triu": triu,
    "diagonal": diagonal,
    "diag": diag,
    "diag_embed": diag_embed,
    "trace": trace,
    "outer": outer,
    "kron": kron,
    "narrow": narrow,
    "split": split,
    "chunk": chunk,
    "tensor_split": tensor_split,
    "unbind": unbind,
    "movedim": movedim,
    "moveaxis": movedim,
    "swapaxes": swapaxes,
    "swapdims": swapaxes,
    "unflatten": unflatten,
    "unfold": unfold,
    "repeat": repeat,
    "tile": tile,
    "repeat_interleave": repeat_interleave,
    "roll": roll,
    "cumsum": cumsum,
    "cumprod": cumprod,
    "logcumsumexp": logcumsumexp,
    "cummax": cummax,
    "cummin": cummin,
    "sort": sort,
    "argsort": argsort,
    "msort": msort,
    "topk": topk,
    "kthvalue": kthvalue,
    "median": median,
}


def install(cls) -> None:
    for name, fn in METHODS.items():
        setattr(cls, name, fn)
