"""Advanced indexing: tensor, list and mask indices, gather/scatter and their relatives.

Everything here is built on two primitives: `GATHER` (rows of a table picked by
an index) and `SCATTER_ADD` (the sum of rows sent to the places an index
says), with views around them. `x[idx]` with integer tensors is one gather
from `x` seen as a table whose rows are the indexed axes; its gradient is the
matching scatter-add, so repeated indices accumulate, as in PyTorch.

>>> import fusegrad as fg
>>> x = fg.arange(12).reshape(3, 4)
>>> x[[0, 2], 1:3].tolist()
[[1, 2], [9, 10]]
>>> x[x > 8].tolist()                 # a mask's values decide the shape: the mask is computed
[9, 10, 11]
>>> x.gather(1, fg.tensor([[3], [0], [1]])).tolist()
[[3], [4], [9]]

What needs values on the host: a boolean mask index, `masked_select` and
`nonzero` have shapes that depend on the mask's values, so they compute the
mask (`.numpy()`) when written; `x[idx] = v` and `scatter` with tensor
indices compute the indices to find repeated places (PyTorch's CPU rule: the
last write wins). Indices already computed (tensors made from data, lists)
are checked, and out-of-range ones raise IndexError as in PyTorch; an index
still lazy when the op is written is not checked, and inside a kernel an
index outside the axis reads 0 (a gather's rule).

`x[idx] = v` gives `x` a new value (its node is rebound, as `assign_` does):
views taken from `x` earlier do not see the write, unlike PyTorch, where they
share memory. A basic index (ints, positive slices, None, ...) writes by views:
`where(mask, v placed by pads, x)`, one elementwise kernel (`_put_basic`); other
indices (and a write through a view of a view) scatter `v` to its flat places. A basic
write into a host tensor of at most `HOST_PUT_MAX` elements whose values are at hand (a
computed buffer or a constant), with no gradient, of a dtype numpy writes as the
kernels would (not 16-bit floats), of a number or such a tensor of its own dtype, is
written by numpy into a new buffer (`_host_put`): a data pipeline's items would
otherwise compute each write in a kernel compiled for its slice.
"""

from __future__ import annotations

import math

import numpy as np

from .autocast import autocast_op
from .creation_nodes import full_node, host_table, index_arange, tensor_like
from .devices import is_host
from .errors import ArgumentError, DTypeError, IndexingError, ShapeError, fail, warn_user
from .extend import custom_gradient
from .ir import node as N
from .ir.autodiff import own_node, with_vjp
from .ir.dtypes import bool_, int64
from .ir.ops import Ops
from .jithooks import host_read_refused
from .movement import MovementMixin, basic_index, linked
from .runtime.buffer import HOST_BUFFERS, Buffer
from .runtime.engine import engine
from .scalars import checked_fill
from .tensor_base import TensorBase, as_tensor_like, broadcast_shapes
from .tensor_base import where as _where

# torch reads a uint8 index as a mask (deprecated) where an int8 one is positions: no guessing
_UINT8_INDEX = (
    "a uint8 index is not supported (torch reads it as a deprecated mask); use a bool mask "
    "(.bool()) or int64 positions (.long())"
)


def _is_advanced(i) -> bool:
    # a tuple inside the index is a list of positions: x[(0, 1), (2, 2)] is x[[0, 1], [2, 2]];
    # so is a range (x[range(3), y] is x[[0, 1, 2], y], as in torch)
    return isinstance(i, (TensorBase, list, tuple, np.ndarray, bool, np.bool_, range))


def needs_general(index) -> bool:
    """Whether `x[index]` needs more than the basic view path (ints, positive slices, None, ...)."""
    items = index if isinstance(index, tuple) else (index,)
    return any(
        _is_advanced(i) or (isinstance(i, slice) and i.step is not None and i.step < 0)
        for i in items
    )


def values_for_shape(t, what: str):
    """t's values, read on the host because a shape depends on them; refused (JitError) while
    fusegrad.jit records, since a replay would keep the recorded shape."""
    host_read_refused(what)
    return t.numpy()


def host_values(t):
    """The values of `t` if they are known without running a kernel (data, constants), else None."""
    if t.node.op in (Ops.BUFFER, Ops.CONST):
        return t.numpy()
    return None


def _as_index(i, op: str, like):
    """A tensor index from a tensor, list or array; bools stay bool, integers become int64
    (a tensor of the class of `like`, the indexed tensor)."""
    if not isinstance(i, TensorBase):
        try:
            arr = np.asarray(i)
        except ValueError as e:
            fail(IndexingError, op, f"index {i!r} is ragged: {e}")
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)  # [] is an empty integer index, as in PyTorch
        if arr.dtype.kind not in "biu":
            fail(
                IndexingError,
                op,
                f"tensors used as indices must be long, int or bool, got {arr.dtype}",
            )
        if arr.dtype == np.uint8:
            fail(IndexingError, op, _UINT8_INDEX)
        i = host_table(like, arr if arr.dtype.kind == "b" else arr.astype(np.int64))
    if i.dtype.unsigned:
        fail(IndexingError, op, _UINT8_INDEX)
    if i.dtype.is_float:
        fail(
            IndexingError,
            op,
            f"tensors used as indices must be long, int or bool tensors, got {i.dtype.name}",
        )
    return i


def _check_range(t, size: int, axis: int, op: str) -> None:
    vals = host_values(t)
    if vals is None or vals.size == 0:
        return
    lo, hi = int(vals.min()), int(vals.max())
    if lo < -size or hi >= size:
        bad = lo if lo < -size else hi
        fail(IndexingError, op, f"index {bad} is out of bounds for axis {axis} with size {size}")


def _wrap(t, size: int):
    """Negative indices count from the end, as in Python."""
    t = t.cast(int64)
    vals = host_values(t)
    if vals is not None and (vals.size == 0 or vals.min() >= 0):
        return t
    return _where(t < 0, t + size, t)


def _positive_slice(s: slice, size: int) -> slice:
    """The slice of the flipped axis that picks what negative-step `s` picks, in its order."""
    start, stop, step = s.indices(size)
    n = len(range(start, stop, step))
    if n == 0:
        return slice(0, 0)
    first = size - 1 - start
    return slice(first, first + (n - 1) * (-step) + 1, -step)


def _entries(x, index, op: str):
    """The index as one entry per axis of x (plus new axes): ('none',) ('slice', s)
    ('int', j) ('idx', int tensor) ('newidx', int tensor on a new size-1 axis)."""
    if not isinstance(index, tuple):
        index = (index,)
    raw = []
    for i in index:
        if i is None or i is Ellipsis or isinstance(i, slice):
            raw.append(i)
        elif isinstance(i, (bool, np.bool_)):
            raw.append(("bool0", bool(i)))
        elif isinstance(i, (TensorBase, list, tuple, np.ndarray, range)):
            # (a range is the list of its ints, as torch reads it)
            t = _as_index(list(i) if isinstance(i, (tuple, range)) else i, op, x)
            raw.append(("bool", t) if t.dtype.is_bool else ("idx", t))
        elif hasattr(i, "__index__"):
            raw.append(("int", int(i)))
        else:
            fail(
                IndexingError,
                op,
                f"unsupported index {i!r}: use ints, slices, None, ..., tensors, lists or ranges",
            )
    if sum(1 for i in raw if i is Ellipsis) > 1:
        fail(IndexingError, op, "an index can only have a single ellipsis")

    def width(i):
        if i is None or i is Ellipsis or (isinstance(i, tuple) and i[0] == "bool0"):
            return 0
        if isinstance(i, tuple) and i[0] == "bool":
            return max(i[1].ndim, 0)
        return 1

    used = sum(width(i) for i in raw)
    if used > x.ndim:
        fail(IndexingError, op, f"too many indices ({used}) for a tensor of shape {x.shape}")
    if Ellipsis in [i for i in raw if not isinstance(i, tuple)]:
        k = next(n for n, i in enumerate(raw) if i is Ellipsis)
        raw = raw[:k] + [slice(None)] * (x.ndim - used) + raw[k + 1 :]
    else:
        raw = raw + [slice(None)] * (x.ndim - used)
    out, axis = [], 0
    for i in raw:
        if i is None:
            out.append(("none",))
        elif isinstance(i, slice):
            out.append(("slice", i))
            axis += 1
        elif i[0] == "int":
            size = x.shape[axis]
            if not -size <= i[1] < size:
                fail(
                    IndexingError,
                    op,
                    f"index {i[1]} is out of bounds for axis {axis} with size {size}",
                )
            out.append(("int", i[1] % size))
            axis += 1
        elif i[0] == "bool0":
            out.append(("newidx", index_arange(x, 1 if i[1] else 0)))
        elif i[0] == "bool":
            mask = i[1]
            have = x.shape[axis : axis + mask.ndim]
            if mask.shape != have:
                fail(
                    IndexingError,
                    op,
                    f"the shape of the mask {mask.shape} does not match the shape "
                    f"{have} of the indexed tensor at axis {axis}",
                )
            if mask.ndim == 0:
                out.append(("newidx", index_arange(x, 1 if bool(mask.item()) else 0)))
                continue

            # the mask's values decide the result's shape: compute it now
            for coords in np.nonzero(values_for_shape(mask, "a bool mask index")):
                out.append(("idx", host_table(x, coords.astype(np.int64))))
                axis += 1
        else:
            t = i[1]
            _check_range(t, x.shape[axis], axis, op)
            out.append(("idx", t))
            axis += 1
    return out


def _list_as_tuple(index):
    """A list index holding a sequence, tensor, slice, None or ... is read as a tuple of
    indices, as torch's (and old numpy's) rule has it: `x[[[0, 1], [1, 0]]]` is
    `x[[0, 1], [1, 0]]`, `x[[t0, t1]]` is `x[t0, t1]`; torch warns that this will change."""
    if not isinstance(index, list) or len(index) >= 32:
        return index
    for i in index:
        if (
            isinstance(i, (TensorBase, list, tuple, np.ndarray, slice))
            or i is None
            or i is Ellipsis
        ):
            warn_user(
                "Using a non-tuple sequence for multidimensional indexing is deprecated and "
                "will be changed in pytorch 2.9; use x[tuple(seq)] instead of x[seq]. In "
                "pytorch 2.9 this will be interpreted as tensor index, x[torch.tensor(seq)], "
                "which will result either in an error or a different result"
            )
            return tuple(index)
    return index


def getitem(x, index):
    """`x[index]` for any mix of ints, slices (any step), None, ..., tensors, lists and masks."""
    index = _list_as_tuple(index)
    entries = _entries(x, index, "index")
    # 1. views: flip the axes sliced with a negative step, then slice, select, add new axes
    flips = [
        a
        for a, e in enumerate(e for e in entries if e[0] in ("slice", "int", "idx"))
        if e[0] == "slice" and e[1].step is not None and e[1].step < 0
    ]
    if flips:
        x = x._make(N.flip(x.node, tuple(flips)))
    basic, axis = [], 0
    for e in entries:
        if e[0] == "none":
            basic.append(None)
        elif e[0] == "newidx":
            basic.append(None)
        elif e[0] == "slice":
            s = e[1]
            basic.append(_positive_slice(s, x.shape[axis]) if axis in flips else s)
            axis += 1
        elif e[0] == "int":
            basic.append(e[1])
            axis += 1
        else:
            basic.append(slice(None))
            axis += 1

    x = MovementMixin.__getitem__(x, tuple(basic))
    # 2. the axes of x now: one per entry that is not an int
    kept = [e for e in entries if e[0] != "int"]
    adv = [k for k, e in enumerate(kept) if e[0] in ("idx", "newidx")]
    if not adv:
        return x
    sizes = [x.shape[k] for k in adv]
    idx = [_wrap(kept[k][1], x.shape[k]) for k in adv]
    shape = ()
    for t in idx:
        shape = broadcast_shapes(shape, t.shape, "index")
    rest = [k for k in range(x.ndim) if k not in adv]
    table = x.permute(adv + rest).reshape((math.prod(sizes),) + tuple(x.shape[k] for k in rest))
    flat = None
    stride = 1
    for t, s in zip(reversed(idx), reversed(sizes)):
        term = t.expand(shape) * stride if stride != 1 else t.expand(shape)
        flat = term if flat is None else flat + term
        stride *= s
    out = table._make(N.gather(table.node, flat.node), flat)
    # 3. where the index's axes go: in place if the tensor indices are adjacent, else
    # first. PyTorch's rule: an int selects its axis away first, so it neither counts
    # as an advanced index nor separates two (numpy's x[1, :, t] puts t's axes first)
    places = [k for k, e in enumerate(kept) if e[0] in ("idx", "newidx")]
    if places[-1] - places[0] + 1 != len(places):
        return out
    p = sum(1 for e in kept[: places[0]] if e[0] in ("none", "slice"))
    b = len(shape)
    order = list(range(b, b + p)) + list(range(b)) + list(range(b + p, out.ndim))
    return out.permute(order)


def _rebind(x, new, op: str = "setitem") -> None:
    """Give `x` the value `new` by PyTorch's in-place rules (`Tensor._inplace`): gradients flow
    to what `new` is built from, and a leaf that requires grad refuses outside no_grad()."""
    x._inplace(new, op)


LAZY_REPEATS_LIMIT = 1 << 20  # (places written)^2 up to which repeats are found lazily


def _put(x, positions, values, may_repeat: bool = True):
    """x with the flat places `positions` set to `values` (same shape); the last write wins.

    Where places may repeat, a write is kept only if no later one goes to the same place:
    found by comparing every pair of places (lazily) up to LAZY_REPEATS_LIMIT pairs, else
    by reading the places on the host.
    """
    numel = x.numel()
    pos = positions.reshape(-1)
    vals = values.reshape(-1)
    if numel == 0 or pos.numel() == 0:
        return x
    keep = None
    k = pos.numel()
    if may_repeat and k * k <= LAZY_REPEATS_LIMIT:
        order = index_arange(x, k)
        later = (order.reshape(1, k) > order.reshape(k, 1)) & (
            pos.reshape(1, k) == pos.reshape(k, 1)
        )
        keep = later.any(1).logical_not()
    elif may_repeat:
        p = values_for_shape(pos, "x[index] = v with many tensor indices")
        uniq, first_rev = np.unique(p[::-1], return_index=True)
        if uniq.size != p.size:  # repeated places: keep the last value written to each
            last = np.sort(p.size - 1 - first_rev)
            pos = host_table(x, p[last].astype(np.int64))
            vals = vals[host_table(x, last.astype(np.int64))]
    if keep is not None:  # (a value overwritten adds -0.0: v + -0.0 is v)
        vals = _where(keep, vals, -0.0 if vals.dtype.is_float else 0)
    # summed from -0.0, the one value kept at a place comes through with its bits (from
    # +0.0, a -0.0 was written as +0.0; torch writes the value as it is)
    summed = vals._make(N.scatter_add(vals.node, pos.node, numel, from_negative_zero=True), vals)
    ones = N.const(1, pos.shape, int64) if keep is None else keep.cast(int64).node
    hit = N.scatter_add(ones, pos.node, numel)
    hit = x._make(N.binary(Ops.CMPLT, N.const(0, (numel,), int64), hit))
    return _where(hit, summed, x.reshape(-1)).reshape(x.shape)


def _positions(x):
    """The flat position of every element of x, lazily: sum of arange(n_d) * stride_d over the
    axes (small shared index tables, not a host array as large as x)."""
    shape = x.shape
    out = x._make(N.const(0, shape, int64))
    stride = 1
    for d in reversed(range(len(shape))):
        if shape[d] > 1:
            view = [1] * len(shape)
            view[d] = shape[d]
            out = out + (index_arange(x, shape[d]) * stride).reshape(view)
        stride *= shape[d]
    return out


def write_through(link, value, op: str) -> None:
    """Write `value`, a view's new value, into the view's base at the view's places.

    The places are the view of the base's flat positions: `redo` applied to them says
    where each element of the view lives in the base.

    >>> import fusegrad as fg
    >>> x = fg.zeros(2, 3)
    >>> x[0][1] = 5.0
    >>> x.tolist()
    [[0.0, 5.0, 0.0], [0.0, 0.0, 0.0]]
    """
    base, redo = link
    places = redo(_positions(base))
    base._inplace(_put(base, places, value.cast(base.dtype), may_repeat=False), op)


def write_through_untracked(t, value, op: str) -> None:
    """Land `value`, t's new value written without history (through `.data` or a detached
    alias), in the memory t shares with others, as torch's writes to shared storage do: its
    base's places where t is a view of it, the tensor it was detached from where it is a
    detached alias; each of those passes it on in turn (`p[1:3].data.fill_(1.0)`,
    `p.detach().detach().zero_()`, `p[1:3].detach().fill_(1.0)` all write into p).

    >>> import fusegrad as fg
    >>> p = fg.zeros(4)
    >>> _ = p[1:3].detach().detach().fill_(1.0)
    >>> p.tolist()
    [0.0, 1.0, 1.0, 0.0]
    """
    link = getattr(t, "_base", None)
    if link is None:
        return
    base, redo = link
    if redo is None:  # a detached alias: the tensor it came from, as through its `.data`
        base = base()
        if base is not None:
            base.data._inplace(value.cast(base.dtype), op)
        return
    places = redo(_positions(base))
    base.data._inplace(_put(base, places, value.cast(base.dtype), may_repeat=False), op)


def _broadcast_value(v, value, shape):
    """`v` (the written `value`, cast) broadcast to the indexed places' `shape`, or torch's
    error."""
    try:
        broadcast_shapes(v.shape, shape, "setitem")
        return v.expand(shape)
    except ShapeError:
        fail(
            ShapeError,
            "setitem",
            f"shape mismatch: value tensor of shape {value.shape} cannot be broadcast "
            f"to indexing result of shape {shape}",
        )


def _has_tensor_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(_is_advanced(i) for i in items)


def _put_basic(x, index, values):
    """x with the places of a basic index (ints, positive slices, None, ...) set to `values`
    (of the shape `x[index]` has), by views alone: `values` and a mask of its places are
    padded out to x's shape (a step spreads an axis: each value, then step - 1 zeros), and
    `where(mask, placed, x)` is one elementwise kernel over x. Nothing of x's size is
    stored but the result (a scatter stores x's positions, sums and counts).

    >>> import fusegrad as fg
    >>> x = fg.zeros(2, 5)
    >>> x[1, ::2] = 7.0
    >>> x.tolist()
    [[0.0, 0.0, 0.0, 0.0, 0.0], [7.0, 0.0, 7.0, 0.0, 7.0]]
    """
    _, bounds, steps, _ = basic_index(x.shape, index)
    counts = [len(range(a, b, s)) for (a, b), s in zip(bounds, steps)]
    if 0 in counts:
        return x
    ndim = x.ndim

    def placed(t):  # t of shape `counts` -> x's shape, 0 (False) off the written places
        for d, ((start, _), step) in enumerate(zip(bounds, steps)):
            length = counts[d]
            if step > 1:  # (m, 1) -> (m, step) -> m * step: each value, then step - 1 zeros
                shape = t.shape
                t = t.reshape(shape[: d + 1] + (1,) + shape[d + 1 :])
                t = t.pad([0, 0] * (ndim - 1 - d) + [0, step - 1])
                t = t.reshape(shape[:d] + (length * step,) + shape[d + 1 :])
                length *= step
            # before: start; after: what is left of the axis (negative: the zeros past it cut)
            t = t.pad([0, 0] * (ndim - 1 - d) + [start, x.shape[d] - start - length])
        return t

    mask = x._make(N.const(True, tuple(counts), bool_))
    return _where(placed(mask), placed(values.reshape(counts)), x)


# the dtypes `_host_put` writes with numpy: its assignment rounds and truncates as the
# kernels' constants do (not 16-bit floats, whose constants a kernel rounds through float32)
_HOST_PUT_DTYPES = frozenset(
    {"float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"}
)
HOST_PUT_MAX = 1 << 20  # elements: a larger tensor is written by a kernel


def _host_values(t) -> np.ndarray | None:
    """A host tensor's values as a numpy array, where they are at hand: a computed buffer's
    (a copy) or a constant's; None for a value still to compute."""
    node = t.node
    if node.op is Ops.BUFFER and type(node.arg) in HOST_BUFFERS:
        return node.arg.array.reshape(node.shape).copy()
    if node.op is Ops.CONST:
        return np.full(node.shape, node.arg, dtype=node.dtype.np)
    return None


def _host_put(x, index, value, view_shape):
    """`x[index] = value` written by numpy into a new buffer, where x is a small host tensor
    whose values are at hand (computed, or a constant such as `zeros`), with no gradient,
    of a dtype numpy writes as a kernel would, and the value a number or such a tensor of
    x's dtype and the view's shape (or one element); None otherwise (the lazy path).

    A data pipeline's item (`x = zeros(n); x[1:k] = ids; y[k:] = -1`, makemore's) would
    otherwise compute each write in a kernel of its own, compiled for each new slice."""
    if (
        type(x) is not x._plain
        or x.requires_grad
        or x.dtype.name not in _HOST_PUT_DTYPES
        or x.numel() > HOST_PUT_MAX
        or engine.recording()
        or not is_host(x.node.device)
    ):
        return None
    items = index if isinstance(index, tuple) else (index,)
    if not all(i is None or i is Ellipsis or type(i) in (int, slice) for i in items):
        return None
    if isinstance(value, TensorBase):
        if value.requires_grad or value.dtype is not x.dtype:
            return None
        if value.shape != tuple(view_shape) and value.numel() != 1:
            return None
        if not is_host(value.node.device):
            return None
        fill = _host_values(value)
        if fill is None:
            return None
        if value.shape != tuple(view_shape):
            fill = fill.reshape(())
    else:
        fill = checked_fill(value, x.dtype, "setitem")
    values = _host_values(x)
    if values is None:
        return None
    values[index] = fill
    return x._plain(N.buffer(Buffer.from_numpy(values, x.dtype), x.shape, x.dtype))


def setitem(x, index, value) -> None:
    """`x[index] = value`: x is rebound to a new value (see the module docstring)."""
    if not isinstance(value, TensorBase):
        value = (
            value if isinstance(value, (int, float, bool)) else as_tensor_like(value, x, "setitem")
        )
    if not needs_general(index):  # a box of places, strided: written by views (_put_basic)
        view_shape = x[index].shape
        new = _host_put(x, index, value, view_shape)
        if new is not None:
            _rebind(x, new, "setitem")
            return
        if isinstance(value, TensorBase):
            v = _broadcast_value(value.cast(x.dtype), value, view_shape)
        else:
            fill = checked_fill(value, x.dtype, "setitem")
            v = x._plain(N.const(fill, view_shape, x.dtype))
        _rebind(x, _put_basic(x, index, v), "setitem")
        return
    positions = _positions(x)[index]
    if isinstance(value, TensorBase):
        v = _broadcast_value(value.cast(x.dtype), value, positions.shape)
    else:
        v = x._plain(N.const(checked_fill(value, x.dtype, "setitem"), positions.shape, x.dtype))
    _rebind(x, _put(x, positions, v, may_repeat=_has_tensor_index(index)), "setitem")


# ---------------------------------------------------------------- along an axis


def _flat_along(shape, dim: int, index):
    """Flat positions in a row-major tensor of `shape` of index's elements along `dim`:
    position[i, j, k] = i*s0 + index[i, j, k]*s1 + k*s2 for dim = 1."""
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    flat = index.cast(int64) * strides[dim]
    for d in range(len(shape)):
        if d != dim and index.shape[d] > 1:
            view = [1] * len(shape)
            view[d] = index.shape[d]
            flat = flat + (index_arange(index, index.shape[d]) * strides[d]).reshape(view)
    return flat.expand(index.shape)


def _tensor_arg(value, op: str, name: str, position: int | None = None):
    """`value`, which must be a Tensor: otherwise torch's TypeError, naming the argument."""
    if not isinstance(value, TensorBase):
        at = f" (position {position})" if position is not None else ""
        fail(
            DTypeError,
            f"{op}()",
            f"argument '{name}'{at} must be Tensor, not {type(value).__name__}",
        )
    return value


def _number_arg(value, op: str, name: str):
    """`value`, a Python number or a 0-d tensor (a fill value): otherwise a TypeError
    naming the argument, not numpy's complaint about converting it."""
    if isinstance(value, (bool, int, float, np.number, np.bool_, TensorBase)):
        return value
    fail(
        DTypeError,
        f"{op}()",
        f"argument '{name}' must be Number or a 0-dim Tensor, not {type(value).__name__}",
    )


def _one_element(x, index, src):
    """A 0-d input as a 1-element vector, as torch's gather and scatter treat it, with a 0-d
    index and src made vectors too (the caller makes the result 0-d again)."""
    index = index.reshape(1) if isinstance(index, TensorBase) and index.ndim == 0 else index
    src = src.reshape(1) if isinstance(src, TensorBase) and src.ndim == 0 else src
    return x.reshape(1), index, src


def _check_along(x, dim, index, op: str, src=None):
    if not isinstance(index, TensorBase):
        index = _as_index(index, op, x)
    if index.dtype.is_float or index.dtype.is_bool:
        fail(DTypeError, op, f"index must be an int64 tensor, got {index.dtype.name}")
    d = x._dim(dim, op)
    if index.ndim != x.ndim:
        fail(
            ShapeError,
            op,
            f"index tensor must have the same number of dimensions as input tensor "
            f"(index {index.shape}, input {x.shape})",
        )
    if src is not None and src.ndim != index.ndim:
        fail(
            ShapeError,
            op,
            f"index {index.shape} and src {src.shape} must have the same number of dimensions",
        )
    for a in range(x.ndim):
        if a != d and index.shape[a] > x.shape[a]:
            fail(
                ShapeError,
                op,
                f"size of index {index.shape} exceeds input {x.shape} at dimension {a}",
            )
        if src is not None and index.shape[a] > src.shape[a]:
            fail(
                ShapeError,
                op,
                f"size of index {index.shape} exceeds src {src.shape} at dimension {a}",
            )
    vals = host_values(index)
    size = x.shape[d] if x.ndim else 1
    if vals is not None and vals.size and (vals.min() < 0 or vals.max() >= size):
        bad = int(vals.min()) if vals.min() < 0 else int(vals.max())
        fail(IndexingError, op, f"index {bad} is out of bounds for dimension {d} with size {size}")
    return d, index


def gather(x, dim: int, index):
    """out[i][j][k] = x[i][index[i][j][k]][k] for dim = 1 (torch.gather).

    >>> import fusegrad as fg
    >>> fg.tensor([[1, 2], [3, 4]]).gather(1, fg.tensor([[0, 0], [1, 0]])).tolist()
    [[1, 1], [4, 3]]
    """
    if x.ndim == 0:
        x._dim(dim, "gather")
        if isinstance(index, TensorBase) and index.ndim == 0:
            return gather(x.reshape(1), 0, index.reshape(1)).reshape(())
        x = x.reshape(1)
    d, index = _check_along(x, dim, index, "gather")
    flat = _flat_along(x.shape, d, index)
    table = x.reshape(-1)
    return table._make(N.gather(table.node, flat.node), flat)


def _src_along(x, index, src, op: str):
    """src cut to index's shape (as PyTorch reads it), in x's dtype; a number is broadcast."""
    if not isinstance(src, TensorBase):
        return x._plain(N.const(src, index.shape, x.dtype))
    src = src.cast(x.dtype)
    if src.ndim != index.ndim:
        fail(ShapeError, op, f"src {src.shape} and index {index.shape} differ in dims")
    return src[tuple(slice(0, s) for s in index.shape)]


def _same_dtype(x, src, op: str) -> None:
    """torch's scatter and scatter_reduce take no `src` of another dtype (a RuntimeError)."""
    if src.dtype != x.dtype:
        fail(
            DTypeError,
            op,
            f"Expected self.dtype to be equal to src.dtype (self {x.dtype}, src {src.dtype})",
        )


def scatter(x, dim: int, index, src=None, value=None, reduce=None):
    """out = x, then out[i][index[i][j][k]][k] = src[i][j][k] for dim = 1 (torch.scatter).

    The index is computed to find repeated places (where the last write wins).

    >>> import fusegrad as fg
    >>> fg.zeros(2, 3).scatter(1, fg.tensor([[2], [0]]), fg.tensor([[5.0], [7.0]])).tolist()
    [[0.0, 0.0, 5.0], [7.0, 0.0, 0.0]]
    """
    if src is None:
        src = value
    if not isinstance(src, TensorBase):
        _number_arg(src, "scatter", "value")
    else:
        _same_dtype(x, src, "scatter")
    if x.ndim == 0:
        x._dim(dim, "scatter")
        x1, index1, src1 = _one_element(x, index, src)
        return scatter(x1, 0, index1, src1, reduce=reduce).reshape(())
    if reduce is not None:
        mode = {"add": "sum", "multiply": "prod"}.get(reduce)
        if mode is None:
            fail(ShapeError, "scatter", f"reduce must be 'add' or 'multiply', got {reduce!r}")
        if not isinstance(src, TensorBase):  # torch's scatter(dim, index, value, reduce=...)
            src = x._plain(full_node(tuple(index.shape), src, x.dtype, x.device))
        return scatter_reduce(x, dim, index, src, mode)
    d, index = _check_along(x, dim, index, "scatter", src if isinstance(src, TensorBase) else None)
    vals = _src_along(x, index, src, "scatter")
    return _put(x, _flat_along(x.shape, d, index), vals)


@autocast_op("scatter_add")
def scatter_add(x, dim: int, index, src):
    """out = x, then out[i][index[i][j][k]][k] += src[i][j][k] for dim = 1 (one SCATTER_ADD).

    >>> import fusegrad as fg
    >>> fg.zeros(3).scatter_add(0, fg.tensor([0, 2, 0]), fg.tensor([1.0, 2.0, 3.0])).tolist()
    [4.0, 0.0, 2.0]
    """
    _tensor_arg(src, "scatter_add", "src", 3)
    if x.ndim == 0:
        x._dim(dim, "scatter_add")
        x1, index1, src1 = _one_element(x, index, src)
        return scatter_add(x1, 0, index1, src1).reshape(())
    d, index = _check_along(x, dim, index, "scatter_add", src)
    vals = _src_along(x, index, src, "scatter_add")
    return x + _scattered_sum(x, d, index, vals)


def _scattered_sum(x, d, index, vals):
    """The sums of `vals` sent along axis `d` to the places `index` names, in x's shape,
    each from -0.0 (`N.scatter_add`): x plus it is x, bits and all, where nothing or only
    -0.0s are added, as torch's adds into x in order (from +0.0, x's -0.0 became +0.0)."""
    flat = _flat_along(x.shape, d, index).reshape(-1)
    v = vals.reshape(-1)
    node = N.scatter_add(v.node, flat.node, x.numel(), from_negative_zero=True)
    return v._make(node, flat).reshape(x.shape)


ONE_HOT_LIMIT = 1 << 24  # elements of the (places x sources) table that amax/amin/prod build


def scatter_reduce(x, dim: int, index, src, reduce: str, include_self: bool = True):
    """torch.scatter_reduce with reduce in sum, mean, prod, amax, amin.

    sum and mean are one SCATTER_ADD each; prod, amax and amin compare every place
    with every source (a one-hot table), so they raise above ONE_HOT_LIMIT elements.
    Integer means round down, as PyTorch's.
    """
    if isinstance(src, TensorBase):
        _same_dtype(x, src, "scatter_reduce")
    if reduce not in ("sum", "mean", "prod", "amax", "amin"):
        fail(
            ShapeError,
            "scatter_reduce",
            f"reduce must be one of sum, mean, prod, amax, amin, got {reduce!r}",
        )
    _tensor_arg(src, "scatter_reduce", "src", 3)
    if x.ndim == 0:
        x._dim(dim, "scatter_reduce")
        x1, index1, src1 = _one_element(x, index, src)
        return scatter_reduce(x1, 0, index1, src1, reduce, include_self).reshape(())
    d, index = _check_along(x, dim, index, "scatter_reduce", src)
    vals = _src_along(x, index, src, "scatter_reduce")
    ones = vals._make(N.const(1, vals.shape, int64))
    count = _scattered_sum(x.cast(int64), d, index, ones)
    hit = count > 0
    base = x if include_self else _where(hit, 0, x)
    if reduce in ("sum", "mean"):
        total = base + _scattered_sum(x, d, index, vals)
        if reduce == "sum":
            return total
        n = count + int(include_self)
        if x.dtype.is_float:
            return _where(hit, total / n.cast(x.dtype).maximum(1), x)
        return _where(hit, total.div(n.maximum(1), rounding_mode="floor"), x)
    numel, m = x.numel(), vals.numel()
    if numel * m > ONE_HOT_LIMIT:
        fail(
            ShapeError,
            "scatter_reduce",
            f"reduce={reduce!r} compares {numel} places with {m} sources "
            f"({numel * m} > {ONE_HOT_LIMIT} elements); only sum and mean scale further",
        )

    flat = _flat_along(x.shape, d, index).reshape(1, m)
    onehot = index_arange(x, numel).reshape(numel, 1) == flat
    v = vals.reshape(1, m).expand(numel, m)
    xf = x.reshape(-1)
    hitf = hit.reshape(-1)
    if reduce == "prod":
        red = _where(onehot, v, 1).prod(1)
        out = red * xf if include_self else _where(hitf, red, xf)
        if out.requires_grad:
            out = out.reshape(x.shape)
            return _with_scatter_prod_gradient(out, x, d, index, vals, include_self)
    else:
        big = math.inf if x.dtype.is_float else np.iinfo(x.dtype.np).max
        if reduce == "amax":
            red = _where(onehot, v, -big).amax(1)
            out = _where(hitf, red.maximum(xf) if include_self else red, xf)
        else:
            red = _where(onehot, v, big).amin(1)
            out = _where(hitf, red.minimum(xf) if include_self else red, xf)
        if out.requires_grad:
            return _shared_among_equal(out.reshape(x.shape), x, d, index, vals, hit, include_self)
    return out.reshape(x.shape)


def _with_scatter_prod_gradient(out, x, d: int, index, vals, include_self: bool):
    """`out`, scatter_reduce's prod, with torch's gradient: g * result / x for the places
    (their zeros taken as 1), and for the sources g * result / src, or where a source is
    the only zero reaching its place, the product of the others."""

    def reduced(base, src):
        return scatter_reduce(base, d, index, src, "prod", include_self)

    hit = _scattered_sum(x.cast(int64), d, index, vals._make(N.const(1, vals.shape, int64))) > 0

    def rule(g, x, src, res):
        own = _where(x == 0, 1.0, x)
        grad_self = g * reduced(own, src) / own
        if not include_self:
            grad_self = _where(hit, 0.0, grad_self)
        zero = src == 0
        zeros_there = _scattered_sum(x * 0, d, index, zero.cast(x.dtype)).gather(d, index)
        single = zero & (zeros_there == 1)
        others = (g * reduced(x, _where(single, 1.0, src))).gather(d, index)
        plain = (g * res).gather(d, index) / _where(zero, 1.0, src)
        return [grad_self, _where(single, others, plain), None]

    return custom_gradient(out, [x, vals, out], rule, own_node=True)


def _shared_among_equal(out, x, d: int, index, vals, hit, include_self: bool):
    """`out`, scatter_reduce's amax or amin, with torch's gradient: each place's gradient is
    split evenly among the elements equal to its result, the place's own value (counted
    also without include_self, as torch's formula does; it then gets no share) and the
    sources reduced there. A NaN result equals nothing: g / 0 * 0, NaN, as torch's."""
    res = out.detach()
    self_is = (x.detach() == res).cast(x.dtype)
    src_is = (vals.detach() == res.gather(d, index)).cast(x.dtype)
    count = self_is + _scattered_sum(self_is, d, index, src_is)
    xn, vn = x.node, vals.node  # now: an in-place update would rebind x.node

    def rule(g):
        share = count._plain(g) / count
        own = share * self_is if include_self else _where(hit, 0.0, share * self_is)
        return [(xn, own.node), (vn, (share.gather(d, index) * src_is).node)]

    node = own_node(out.node)
    return out._make(with_vjp(node, rule))


def index_select(x, dim: int, index):
    """The entries of `x` at `index` (a vector) along `dim`.

    >>> import fusegrad as fg
    >>> fg.arange(6).reshape(2, 3).index_select(1, fg.tensor([2, 0])).tolist()
    [[2, 0], [5, 3]]
    """
    index = _as_index(index, "index_select", x)
    if index.ndim > 1 or index.dtype.is_bool:
        fail(IndexingError, "index_select", f"index must be a vector of ints, got {index.shape}")
    d = x._dim(dim, "index_select")
    if x.ndim == 0:
        if index.numel() != 1:
            fail(
                IndexingError,
                "index_select",
                f"Index to scalar can have only 1 value, got {index.numel()} value(s)",
            )
        index = index.reshape(1)
        _check_range(index, 1, 0, "index_select")
        return x.reshape(1)[index].reshape(())
    _check_range(index.reshape(-1), x.shape[d], d, "index_select")
    return x[(slice(None),) * d + (index.reshape(-1),)]


def take(x, index):
    """The elements of the flattened tensor at `index` (any shape).

    >>> import fusegrad as fg
    >>> fg.tensor([[4, 3], [5, 6]]).take(fg.tensor([0, 3])).tolist()
    [4, 6]
    """
    index = _as_index(index, "take", x)
    return x.reshape(-1)[index]


def _along(x, dim: int, index, op: str):
    """A 1-D index along `dim`, spread to the shape of the selection it makes."""
    index = _as_index(index, op, x)
    if index.ndim > 1 or index.dtype.is_bool:
        fail(IndexingError, op, f"index must be a vector of ints, got shape {index.shape}")
    d = x._dim(dim, op)
    index = index.reshape(-1)
    _check_range(index, x.shape[d], d, op)
    view = [1] * x.ndim
    view[d] = index.shape[0]
    shape = x.shape[:d] + (index.shape[0],) + x.shape[d + 1 :]
    return d, _wrap(index, x.shape[d]).reshape(view).expand(shape)


def index_add(x, dim: int, index, source, alpha=1):
    """x with alpha * source[..., i, ...] added to x[..., index[i], ...] along `dim`.

    >>> import fusegrad as fg
    >>> fg.zeros(3).index_add(0, fg.tensor([0, 0, 2]), fg.tensor([1.0, 2.0, 3.0])).tolist()
    [3.0, 0.0, 3.0]
    """
    _tensor_arg(source, "index_add", "source", 3)
    if not isinstance(alpha, (bool, int, float, np.number)):
        fail(
            DTypeError,
            "index_add()",
            f"argument 'alpha' must be Number, not {type(alpha).__name__}",
        )
    if x.ndim == 0:
        x._dim(dim, "index_add")
        x1, _, src1 = _one_element(x, None, source)
        return index_add(x1, 0, index, src1, alpha).reshape(())
    d, spread = _along(x, dim, index, "index_add")
    src = source * alpha if alpha != 1 else source
    return scatter_add(x, d, spread, src)


@autocast_op("index_copy")
def index_copy(x, dim: int, index, source):
    """x with x[..., index[i], ...] = source[..., i, ...] along `dim`."""
    if x.ndim == 0:
        x._dim(dim, "index_copy")
        x1, _, src1 = _one_element(x, None, source)
        return index_copy(x1, 0, index, src1).reshape(())
    d, spread = _along(x, dim, index, "index_copy")
    return scatter(x, d, spread, source)


def index_fill(x, dim: int, index, value):
    """x with `value` at the positions `index` along `dim`."""
    _number_arg(value, "index_fill", "value")
    if x.ndim == 0:
        x._dim(dim, "index_fill")
        return index_fill(x.reshape(1), 0, index, value).reshape(())
    d, spread = _along(x, dim, index, "index_fill")
    if isinstance(value, TensorBase):
        if value.ndim:
            fail(
                ShapeError,
                "index_fill",
                f"only supports a 0-dimensional value tensor, got shape {value.shape}",
            )
        value = value.expand(spread.shape)  # one value for every place
    return scatter(x, d, spread, value)


@autocast_op("index_put")
def index_put(x, indices, values, accumulate: bool = False):
    """x[indices] = values (a tuple of index tensors), or += with accumulate=True, where
    repeated places add up."""
    if not isinstance(accumulate, (bool, np.bool_)):
        fail(
            DTypeError,
            "index_put_()",
            f"argument 'accumulate' must be bool, not {type(accumulate).__name__}",
        )
    if isinstance(indices, TensorBase):  # not one index per row of it
        fail(
            DTypeError,
            "index_put_()",
            "argument 'indices' (position 1) must be tuple of Tensors, not Tensor",
        )
    indices = tuple(indices)
    positions = _positions(x)[indices]
    if not accumulate:
        out = x.clone()
        setitem(out, indices, values)
        return out
    v = as_tensor_like(values, x, "index_put")
    v = v.cast(x.dtype).expand(positions.shape).reshape(-1)
    pos = positions.reshape(-1)
    summed = v._make(N.scatter_add(v.node, pos.node, x.numel(), from_negative_zero=True), v)
    return x + summed.reshape(x.shape)  # (x's bits where only -0.0s are added: index_add's)


def _storage_positions(shape, strides, offset: int) -> np.ndarray:
    """Where each element of a tensor of `shape` and `strides` (row-major order) lies in
    its storage, for a first element at `offset`."""
    pos = np.full(shape, offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(shape, strides)):
        view = [1] * len(shape)
        view[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(view)
    return pos.reshape(-1)


def _storage_root(x):
    """The tensor whose storage x's strides and storage offset count in: the first of its
    bases that is no view (a detached tensor counts as its own)."""
    root = x
    while (link := getattr(root, "_base", None)) is not None and link[1] is not None:
        root = link[0]
    return root


def as_strided(x, size, stride, storage_offset=None):
    """torch.as_strided: the tensor of `size` whose element (i, j, ...) is the element at
    `storage_offset + i * stride[0] + j * stride[1] + ...` of x's storage (windows that
    overlap, sliding views). `storage_offset` counts from the storage's start (x's own
    `storage_offset()` when None), as torch's; out-of-storage windows and negative
    strides raise torch's errors.

    fusegrad's tensors are logical, not memory: x's storage is worked out from the
    strides and storage offsets torch would report (`stride()`, `storage_offset()`), and
    each element of the result is read from x by an index table (a `GATHER`), lazily;
    its gradient is a scatter-add back to x's elements (overlapping windows add up, as
    torch's as_strided backward). The elements read must be x's own: a storage place x
    does not reach (another part of its base, in torch still readable) raises. Writes to
    the result land in x (it is a view of x here too).

    >>> import fusegrad as fg
    >>> fg.arange(5.0).as_strided((3, 3), (1, 1)).tolist()
    [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]]
    """
    op = "as_strided"
    size = (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(s) for s in size)
    stride = (
        (int(stride),) if isinstance(stride, (int, np.integer)) else tuple(int(s) for s in stride)
    )
    if len(size) != len(stride):
        fail(ShapeError, op, "mismatch in length of strides and shape")
    if any(st < 0 for st in stride):
        fail(
            ShapeError,
            op,
            f"as_strided: Negative strides are not supported at the moment, got strides: "
            f"{list(stride)}",
        )
    if any(n < 0 for n in size):
        fail(
            ShapeError,
            op,
            f"Storage size calculation overflowed with sizes={list(size)} and "
            f"strides={list(stride)}",
        )
    offset = x.storage_offset() if storage_offset is None else int(storage_offset)
    if offset < 0:
        fail(ShapeError, op, f"Tensor: invalid storage offset {offset}")
    root = _storage_root(x)
    root_pos = _storage_positions(root.shape, root.stride(), root.storage_offset())
    storage = int(root_pos.max()) + 1 if root_pos.size else 0
    if 0 not in size:
        needed = offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1
        if needed > storage:
            item = x.dtype.itemsize
            fail(
                ShapeError,
                op,
                f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset "
                f"{offset}, and itemsize {item} requiring a storage size of {needed * item} "
                f"are out of bounds for storage of size {storage * item}",
            )
    return _strided_read(x, size, stride, offset, storage)


def _strided_read(x, size, stride, offset: int, storage: int):
    """as_strided's result, checked: x's elements at the storage places of `size`, `stride`
    and `offset`, through a table from storage place to x's element (the first of x's
    elements at a place, where x repeats one: an expand)."""
    wanted = _storage_positions(size, stride, offset)
    own = _storage_positions(x.shape, x.stride(), x.storage_offset())
    element = np.full(max(storage, 1), -1, dtype=np.int64)
    element[own[::-1]] = np.arange(own.size - 1, -1, -1, dtype=np.int64)  # the first wins
    index = element[wanted] if wanted.size else wanted
    if (index < 0).any():
        place = int(wanted[np.argmax(index < 0)])
        fail(
            IndexingError,
            "as_strided",
            f"storage place {place} is not an element of this {x.dtype.name} {x.shape} tensor "
            f"(strides {x.stride()}, storage offset {x.storage_offset()}) but of its base; "
            "fusegrad's as_strided reads the tensor's own elements only",
        )
    return linked(_gathered(x, index, size, stride), x, lambda t: _gathered(t, index, size, stride))


def _gathered(x, index: np.ndarray, size, stride):
    """x's row-major elements at `index`, in the shape `size` (torch's strides `stride`)."""
    table = x.reshape(-1)
    flat = host_table(x, index)
    out = table._make(N.gather(table.node, flat.node), flat)
    return out._view(N.reshape(out.node, size), stride)


def take_along_dim(x, indices, dim=None):
    """Values of `x` at `indices` along `dim` (numpy's take_along_axis); flattened if dim is None.

    >>> import fusegrad as fg
    >>> x = fg.tensor([[10, 30, 20], [60, 40, 50]])
    >>> x.take_along_dim(x.argmax(1, keepdim=True), 1).tolist()
    [[30], [60]]
    """
    indices = _as_index(indices, "take_along_dim", x)
    if dim is None:
        return gather(x.reshape(-1), 0, indices.reshape(-1))
    d = x._dim(dim, "take_along_dim")
    if indices.ndim != x.ndim:
        fail(
            ShapeError,
            "take_along_dim",
            f"input {x.shape} and indices {indices.shape} should have the same number of dims",
        )
    a = x.shape[:d] + (1,) + x.shape[d + 1 :]
    b = indices.shape[:d] + (1,) + indices.shape[d + 1 :]
    common = broadcast_shapes(a, b, "take_along_dim")
    xs = common[:d] + (x.shape[d],) + common[d + 1 :]
    ind = common[:d] + (indices.shape[d],) + common[d + 1 :]
    return gather(x.expand(xs), d, indices.expand(ind))


def masked_fill(x, mask, value):
    """x with `value` where `mask` is true (mask broadcasts to x; x keeps its dtype).

    >>> import fusegrad as fg
    >>> fg.tensor([1.0, 2.0, 3.0]).masked_fill(fg.tensor([True, False, True]), 0).tolist()
    [0.0, 2.0, 0.0]
    """
    mask = _as_index(mask, "masked_fill", x) if not isinstance(mask, TensorBase) else mask
    _number_arg(value, "masked_fill", "value")
    if not mask.dtype.is_bool:
        fail(DTypeError, "masked_fill", f"mask must be a bool tensor, got {mask.dtype.name}")
    if broadcast_shapes(mask.shape, x.shape, "masked_fill") != x.shape:
        fail(
            ShapeError,
            "masked_fill",
            f"mask of shape {mask.shape} does not broadcast to the tensor's shape {x.shape}",
        )
    if isinstance(value, TensorBase):
        if value.ndim != 0:
            fail(
                ShapeError,
                "masked_fill",
                f"only 0-dim value tensors are supported, got shape {value.shape}",
            )
        value = value.cast(x.dtype)
    else:
        value = x._plain(N.const(checked_fill(value, x.dtype, "masked_fill"), (), x.dtype))
    return _where(mask, value, x)


def masked_select(x, mask):
    """The elements of `x` where `mask` is true, as a 1-D tensor (the mask is computed now).

    >>> import fusegrad as fg
    >>> fg.tensor([1.0, 2.0, 3.0]).masked_select(fg.tensor([True, False, True])).tolist()
    [1.0, 3.0]
    """
    mask = _as_index(mask, "masked_select", x)
    if not mask.dtype.is_bool:
        fail(DTypeError, "masked_select", f"mask must be a bool tensor, got {mask.dtype.name}")
    shape = broadcast_shapes(x.shape, mask.shape, "masked_select")
    return x.expand(shape)[mask.expand(shape)]


def nonzero(x, as_tuple: bool = False):
    """Coordinates of the nonzero elements, shape (count, ndim) (the values are computed now).

    >>> import fusegrad as fg
    >>> fg.tensor([[0, 1], [2, 0]]).nonzero().tolist()
    [[0, 1], [1, 0]]
    """
    a = np.asarray(values_for_shape(x, "nonzero"))
    device = x.device
    if as_tuple:
        if a.ndim == 0:
            return (tensor_like(x, np.nonzero(a.reshape(1))[0].astype(np.int64), device=device),)
        return tuple(tensor_like(x, c.astype(np.int64), device=device) for c in np.nonzero(a))
    if a.ndim == 0:  # torch: one row of no coordinates if the value is nonzero, else none
        return tensor_like(x, np.zeros((int(a != 0), 0), np.int64), device=device)
    return tensor_like(x, np.argwhere(a).astype(np.int64).reshape(-1, a.ndim), device=device)


def argwhere(x):
    return nonzero(x)


def unique(
    x, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim=None
):  # noqa: A002, E501
    """The distinct values, sorted (the values are computed now), with torch's optional
    inverse (where each element's value is in the result) and counts.

    >>> import fusegrad as fg
    >>> fg.tensor([3, 1, 3, 2]).unique(return_counts=True)
    (tensor([1, 2, 3]), tensor([1, 1, 2]))
    """
    if dim is not None:
        fail(ArgumentError, "unique", "dim= is not supported here; unique of the flattened values")
    a = np.asarray(values_for_shape(x, "unique"))
    # each NaN is a value of its own, as torch's (NaN != NaN)
    values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True, equal_nan=False)
    out = [tensor_like(x, values, dtype=x.dtype, device=x.device)]
    if return_inverse:
        out.append(tensor_like(x, inverse.reshape(a.shape).astype(np.int64), device=x.device))
    if return_counts:
        out.append(tensor_like(x, counts.astype(np.int64), device=x.device))
    return out[0] if len(out) == 1 else tuple(out)


def flip(x, *args, dims=None):
    """The elements in reverse order along `dims` (a list, or the dims one by one as
    torch's Tensor.flip takes them: `x.flip(-1, 0)`); a new tensor, as torch's.

    >>> import fusegrad as fg
    >>> fg.arange(4).flip(0).tolist()
    [3, 2, 1, 0]
    """
    if dims is None:
        dims = args[0] if len(args) == 1 and not isinstance(args[0], int) else args
    elif args:
        raise TypeError("flip() got multiple values for argument 'dims'")
    if isinstance(dims, int):
        dims = (dims,)
    axes = x._dims(tuple(dims), "flip")
    if x.ndim == 0:  # dim 0 or -1 of a 0-d tensor: nothing to reverse
        return x._make(x.node)
    return x._make(N.flip(x.node, axes))


def fliplr(x):
    if x.ndim < 2:
        fail(ShapeError, "fliplr", f"input must be >= 2-d, got shape {x.shape}")
    return flip(x, 1)


def flipud(x):
    if x.ndim < 1:
        fail(ShapeError, "flipud", f"input must be >= 1-d, got shape {x.shape}")
    return flip(x, 0)


METHODS = {
    "unique": unique,
    "gather": gather,
    "scatter": scatter,
    "scatter_add": scatter_add,
    "scatter_reduce": scatter_reduce,
    "index_select": index_select,
    "take_along_dim": take_along_dim,
    "take": take,
    "as_strided": as_strided,
    "index_add": index_add,
    "index_copy": index_copy,
    "index_fill": index_fill,
    "index_put": index_put,
    "masked_fill": masked_fill,
    "masked_select": masked_select,
    "nonzero": nonzero,
    "argwhere": argwhere,
    "flip": flip,
    "fliplr": fliplr,
    "flipud": flipud,
}


def _rebinding(fn):
    """The in-place form of `fn`: this tensor takes its result's value."""

    def method(self, *args, **kwargs):
        _rebind(self, fn(self, *args, **kwargs), fn.__name__ + "_")
        return self

    method.__doc__ = f"In-place form of {fn.__name__} (rebinds this tensor's value)."
    return method


INPLACE = (
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "masked_fill",
    "index_add",
    "index_copy",
    "index_fill",
    "index_put",
)


class IndexingMixin:
    """Tensor's indexing: t[...] (the general cases here, the basic views in movement.py),
    t[...] = v, the methods above (`METHODS`) and in-place forms that rebind (`INPLACE`)."""

    __slots__ = ()
    locals().update(METHODS)  # t.gather(), t.scatter(), ...: the functions above
    locals().update({name + "_": _rebinding(METHODS[name]) for name in INPLACE})
    __setitem__ = setitem

    def __getitem__(self, index):
        """Indexing as PyTorch: ints, slices, None, ..., and tensors, lists and bool masks
        (those, and negative steps, here; the basic views in `movement.py`)."""
        if needs_general(index):
            return getitem(self, index)
        return MovementMixin.__getitem__(self, index)
