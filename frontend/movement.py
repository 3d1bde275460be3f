"""Views: reshape, permute, expand, slicing, pad, cat, stack.

Every one of these is an index map, never a copy. Each also tracks the strides
PyTorch would report for the view (`stride()`), the way MiniTorch and norch
teach them: transposing swaps strides, expanding gives stride 0, slicing with
a step multiplies the stride.

As in PyTorch, a view shares its base's elements for writes: an in-place op on a
view (`x[0][1] = 5`, `x[:, 0].zero_()`, `x.view(-1).fill_(1)`) lands in the base
too. Each view remembers its base and how to take itself from a tensor of the
base's shape (`linked`); `write_through` puts the view's new elements back at
their places in the base. Reads are not shared the other way: a view taken before
its base is written keeps the old value (README, "Knowingly not supported").

>>> import fusegrad as fg
>>> x = fg.arange(12).reshape(3, 4)
>>> x.T.shape, x.T.stride(), x.T.is_contiguous()
((4, 3), (1, 4), False)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import autograd_state
from .autocast import autocast_op
from .errors import DimError, DTypeError, IndexingError, JitError, ShapeError, fail, warn_user
from .ir import node as N
from .ir.dtypes import TORCH_SCALAR_TYPES, DType, bool_, promote
from .ir.ops import Ops
from .jithooks import recording
from .runtime.attribution import capture, fixed
from .runtime.backend import get_backend
from .runtime.buffer import BLOCK_VIEWS, HOST_BUFFERS, Buffer
from .runtime.engine import engine
from .tensor_base import TensorBase
from .torch_settings import check_memory_format


@functools.lru_cache(maxsize=4096)  # a pure function of shapes, which repeat every step
def _contiguous_strides(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


@functools.lru_cache(maxsize=4096)
def _view_strides(old_shape, old_strides, new_shape):
    """Strides of a reshape that needs no copy, or None (numpy's attempt_nocopy_reshape idea)."""
    if math.prod(old_shape) == 0:
        return _contiguous_strides(new_shape)
    old = [(s, st) for s, st in zip(old_shape, old_strides) if s != 1]
    new_strides = [0] * len(new_shape)
    oi, ni = 0, 0
    new_nz = [i for i, s in enumerate(new_shape) if s != 1]
    while oi < len(old) and ni < len(new_nz):
        # grow matching chunks until their element counts agree
        op, np_ = old[oi][0], new_shape[new_nz[ni]]
        oj, nj = oi, ni
        while op != np_:
            if op < np_:
                oj += 1
                op *= old[oj][0]
            else:
                nj += 1
                np_ *= new_shape[new_nz[nj]]
        for k in range(oi, oj):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        st = old[oj][1]
        for k in range(nj, ni - 1, -1):
            new_strides[new_nz[k]] = st
            st *= new_shape[new_nz[k]]
        oi, ni = oj + 1, nj + 1
    for i in reversed(range(len(new_shape))):
        if new_shape[i] == 1:
            last = i + 1 == len(new_shape)
            new_strides[i] = 1 if last else new_strides[i + 1] * new_shape[i + 1]
    return tuple(new_strides)


def linked(view, base, redo):
    """`view`, remembered as a view of `base` that `redo(t)` takes from any tensor `t` of
    base's shape, so that in-place writes to it land in `base` (`indexing.write_through`)."""
    if view is not base:
        view._base = (base, redo)
    return view


def basic_index(shape: tuple[int, ...], index):
    """A basic index (ints, positive slices, None, one ...) of a tensor of `shape`, spelled
    out: (the index with its ... replaced and every axis named, each axis's (start, stop),
    each axis's step, and whether the axis stays: False for an int). Errors as torch's.

    >>> basic_index((4, 5), (1, slice(None, None, 2)))
    ((1, slice(None, None, 2)), [(1, 2), (0, 5)], [1, 2], [False, True])
    """
    if not isinstance(index, tuple):
        index = (index,)
    if any(i is Ellipsis for i in index):
        k = index.index(Ellipsis)
        if index.count(Ellipsis) > 1:
            fail(IndexingError, "index", "an index can only have a single ellipsis")
        used = sum(1 for i in index if i is not None and i is not Ellipsis)
        index = index[:k] + (slice(None),) * (len(shape) - used) + index[k + 1 :]
    used = sum(1 for i in index if i is not None)
    if used > len(shape):
        fail(
            IndexingError,
            "index",
            f"too many indices ({used}) for a tensor of shape {shape}",
        )
    index = index + (slice(None),) * (len(shape) - used)
    axis = 0
    bounds, steps, keep = [], [], []
    for i in index:
        if i is None:
            continue
        size = shape[axis]
        if isinstance(i, bool) or not isinstance(i, (int, slice)) and not hasattr(i, "__index__"):
            fail(
                IndexingError,
                "index",
                f"unsupported index {i!r}: use ints, slices, None or ...",
            )
        if isinstance(i, slice):
            if i.step is not None and i.step <= 0:  # a ValueError, as torch's
                fail(ShapeError, "index", f"slice step must be positive, got {i.step}")
            start, stop, step = i.indices(size)
            stop = max(stop, start)
            bounds.append((start, stop))
            steps.append(step)
            keep.append(True)
        else:
            j = int(i)
            if not -size <= j < size:
                fail(
                    IndexingError,
                    "index",
                    f"index {j} is out of bounds for axis {axis} with size {size}",
                )
            j %= size
            bounds.append((j, j + 1))
            steps.append(1)
            keep.append(False)
        axis += 1
    return index, bounds, steps, keep


COPIED_DATA_NODES = 16  # the most nodes `copied_data` walks


def copied_data(x) -> bool:
    """Whether `x` is data not yet computed that only copies buffers: views of them and
    `contiguous()` (a dataset batched by `data.view(b, -1).t().contiguous()`), no gradient
    flowing into it, outside `fusegrad.jit`'s recording. Indexing computes it first: its
    slices are then blocks of one buffer (`_block_of_buffer`), as they are once a step has
    computed it, so a loop's first step builds the graph of the later ones, not one that
    holds the copy and slices it (its plan compiled twice: a word language model's 900
    kernels); a step computes it in a plan of its own for the same reason
    (`carried.from_constants` takes it). The copy is a kernel of its own either way
    (`contiguous()` is stored)."""
    node = x.node
    if node.op is not Ops.CONTIGUOUS or x.requires_grad or recording():
        return False
    stack, seen = [node], 0
    while stack:
        n = stack.pop()
        seen += 1
        if seen > COPIED_DATA_NODES or engine.value(n) is not None:
            return False
        for s in n.srcs:
            if s.op is Ops.BUFFER:
                continue
            if s.op not in _COPIES:
                return False
            stack.append(s)
    return True


_COPIES = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.CONTIGUOUS})


def _block_of_buffer(x, bounds, steps):
    """A computed tensor's slice that is one block of its memory (`data[i : i + n]`,
    `x[k]`, `x[k, a:b]`), on any device, as a buffer node over that block, or None. A slice
    as a `SHRINK` names its offsets in the graph's structure, so a loop that slices its
    data at a new offset each step (`source[i : i + bptt]`) would compile each step anew;
    over a buffer the offset is data. Only for values no gradient flows into (data, not
    parameters) and outside `fusegrad.jit`'s recording (which records graphs over its
    inputs). A reshape of a buffer (`x[k]` of a matrix is one) is that memory in the same
    order: its blocks are cut the same way (`x[k][j]`, `for row in x: for v in row`)."""
    node = x.node
    base = node.srcs[0] if node.op is Ops.RESHAPE else node
    if base.op is not Ops.BUFFER or x.requires_grad:
        return None
    view_of = BLOCK_VIEWS.get(type(base.arg))  # (the buffer types a view is made of)
    if view_of is None:
        return None
    if any(s != 1 for s in steps) or engine.recording():
        return None
    shape = node.shape  # (the reshape's: row-major over the buffer's memory)
    # the axes after the last cut one are whole; the axes before it take one place each
    cut = [k for k, (b, e) in enumerate(bounds) if (b, e) != (0, shape[k])]
    if not cut:
        return None
    last = cut[-1]
    if any(e - b != 1 for b, e in bounds[:last]):
        return None
    start = sum(b * math.prod(shape[k + 1 :]) for k, (b, _) in enumerate(bounds[: last + 1]))
    size = (bounds[last][1] - bounds[last][0]) * math.prod(shape[last + 1 :])
    if size == 0:
        return None
    return N.buffer(view_of(base.arg, start, size), tuple(e - b for b, e in bounds), node.dtype)


def rows_of_buffer(x) -> list | None:
    """`[x[0], x[1], ...]` for a computed tensor (or a reshape of one) that no gradient
    flows into, outside a jit recording: each row a block of its memory, as
    `_block_of_buffer` cuts it, built without reading an index per row (`for i in
    torch.randint(n, (12,))`); the same nodes, strides and write-through link as `x[k]`.
    None otherwise (then `unbind`)."""
    node = x.node
    base = node.srcs[0] if node.op is Ops.RESHAPE else node  # (`x[k]` of a matrix is one)
    if base.op is not Ops.BUFFER or x.requires_grad:
        return None
    view_of = BLOCK_VIEWS.get(type(base.arg))
    if view_of is None:
        return None
    if not node.shape or engine.recording():
        return None
    rest = node.shape[1:]
    inner = math.prod(rest)
    if inner == 0:
        return None
    strides = x.stride()[1:]
    buf, dtype, block = base.arg, node.dtype, (1, *rest)
    rows = []
    with fixed(capture(1)):  # (one stack walk for every row: the user's line)
        for k in range(node.shape[0]):
            row = N.reshape(N.buffer(view_of(buf, k * inner, inner), block, dtype), rest)
            rows.append(linked(x._view(row, strides), x, functools.partial(_row, k)))
    return rows


def _row(k: int, t):
    """`t[k]`: how a row of `rows_of_buffer` is taken again from its base's new value."""
    return t[k]


class MovementMixin:
    """View methods of Tensor."""

    __slots__ = ()

    def _view(self, node, strides):
        return self._make(node, strides=strides)

    # ---------------------------------------------------------------- reshape family
    def _resolve_shape(self, shape, op):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if shape.count(-1) > 1:
            fail(ShapeError, op, f"only one dimension can be -1, got {shape}")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or self.numel() % known:
                fail(
                    ShapeError,
                    op,
                    f"cannot reshape tensor of shape {self.shape} "
                    f"({self.numel()} elements) into {shape}",
                )
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if any(s < 0 for s in shape) or math.prod(shape) != self.numel():
            fail(
                ShapeError,
                op,
                f"cannot reshape tensor of shape {self.shape} "
                f"({self.numel()} elements) into {shape} ({math.prod(shape)} elements)",
            )
        return shape

    def reshape(self, *shape):
        """The same elements in row-major order, in a new shape (one axis may be -1)."""
        shape = self._resolve_shape(shape, "reshape")
        st = _view_strides(self.shape, self.stride(), shape)
        out = self._view(N.reshape(self.node, shape), st or _contiguous_strides(shape))
        return out if st is None else linked(out, self, lambda t: t.reshape(shape))

    def view(self, *shape):
        """Like reshape, but only where no copy would be needed (as PyTorch's view).

        `view(dtype)` reinterprets the bytes, as torch's: see `_view_dtype`."""
        if len(shape) == 1 and isinstance(shape[0], DType):  # torch's view(dtype): a bitcast
            return self._view_dtype(shape[0])
        shape = self._resolve_shape(shape, "view")
        st = _view_strides(self.shape, self.stride(), shape)
        if st is None:
            fail(
                ShapeError,
                "view",
                f"view of shape {shape} is not compatible with strides "
                f"{self.stride()} of shape {self.shape}; use reshape() or contiguous() first",
            )
        return linked(self._view(N.reshape(self.node, shape), st), self, lambda t: t.reshape(shape))

    def _view_dtype(self, dtype: DType):
        """`x.view(dtype)`: x's bytes read as `dtype`, torch's bit reinterpretation. Of the
        same itemsize the shape stays; to a smaller one the last dim grows by the ratio, to a
        larger one it shrinks by it (torch's conditions, and its errors: a 0-d tensor, a last
        dim not of stride 1, a last dim or another stride or the storage offset not
        divisible). The strides are torch's (the others scaled by the ratio). As in torch
        the result has no gradient (`view(dtype)` is not differentiable, even to its own
        dtype), and a bool is any nonzero byte.

        fusegrad has no bit-cast primitive: x is computed and its bytes are read as
        `dtype` on the host (numpy's `view`), so the result is a new computed tensor, not
        a lazy node, and shares no memory with x (a write to one does not reach the
        other, where torch's share their storage); `fusegrad.jit` refuses it."""
        if dtype == self.dtype:  # torch: the same tensor's view, without its gradient
            return self.detach().view(self.shape)
        op = "view"
        a, b = self.dtype.itemsize, dtype.itemsize
        names = (
            TORCH_SCALAR_TYPES.get(self.dtype.name, self.dtype.name),
            TORCH_SCALAR_TYPES.get(dtype.name, dtype.name),
        )
        why = f"to view {names[0]} as {names[1]} (different element sizes)"
        strides = tuple(self.stride())
        shape = tuple(self.shape)
        if a != b:
            if self.ndim == 0:
                fail(ShapeError, op, f"self.dim() cannot be 0 {why}")
            if strides[-1] != 1:
                fail(ShapeError, op, f"self.stride(-1) must be 1 {why}, but got {strides[-1]}")
            if b > a:
                ratio = b // a
                if shape[-1] % ratio:
                    fail(
                        ShapeError,
                        op,
                        f"self.size(-1) must be divisible by {ratio} {why}, but got {shape[-1]}",
                    )
                for d, st in enumerate(strides[:-1]):
                    if st % ratio:
                        fail(
                            ShapeError,
                            op,
                            f"self.stride({d}) must be divisible by {ratio} {why}, but got {st}",
                        )
                offset = self.storage_offset()
                if offset % ratio:
                    fail(
                        ShapeError,
                        op,
                        f"self.storage_offset() must be divisible by {ratio} {why}, but got "
                        f"{offset}",
                    )
                shape = shape[:-1] + (shape[-1] // ratio,)
                strides = tuple(st // ratio for st in strides[:-1]) + (1,)
            else:
                ratio = a // b
                shape = shape[:-1] + (shape[-1] * ratio,)
                strides = tuple(st * ratio for st in strides[:-1]) + (1,)
        if recording():
            fail(
                JitError,
                op,
                f"view({dtype.name}) reads the bytes of a {self.dtype.name} {self.shape} tensor "
                "on the host, which fusegrad.jit cannot replay",
            )
        host = np.ascontiguousarray(self.detach()._host())
        if dtype.is_bool:
            arr = host.view(np.uint8).reshape(shape) != 0
        else:
            arr = host.view(dtype.np).reshape(shape)
        buf = get_backend(self.node.device).from_host(arr, dtype, self.node.device)
        return self.detach()._make(N.buffer(buf, shape, dtype), strides=strides)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        if self.ndim == 0:
            return self.reshape(1)
        a, b = self._dim(start_dim, "flatten"), self._dim(end_dim, "flatten")
        if a > b:
            fail(ShapeError, "flatten", f"start_dim {start_dim} comes after end_dim {end_dim}")
        shape = self.shape[:a] + (math.prod(self.shape[a : b + 1]),) + self.shape[b + 1 :]
        return self.reshape(shape)

    def squeeze(self, dim=None):
        if dim is None:
            dims = [i for i, s in enumerate(self.shape) if s == 1]
        else:
            dims = [d for d in self._dims(dim, "squeeze") if self.shape[d] == 1]
        shape = tuple(s for i, s in enumerate(self.shape) if i not in dims)
        strides = tuple(st for i, st in enumerate(self.stride()) if i not in dims)
        out = self._view(N.reshape(self.node, shape), strides)
        return linked(out, self, lambda t: t.reshape(shape))

    def unsqueeze(self, dim: int):
        n = self.ndim + 1
        if not -n <= dim < n:
            fail(
                DimError,
                "unsqueeze",
                f"dim {dim} is out of range for a tensor of shape {self.shape} "
                f"(expected -{n} <= dim < {n})",
            )
        dim %= n
        shape = self.shape[:dim] + (1,) + self.shape[dim:]
        st = self.stride()
        inner = st[dim] * self.shape[dim] if dim < self.ndim else 1
        strides = st[:dim] + (inner,) + st[dim:]
        out = self._view(N.reshape(self.node, shape), strides)
        return linked(out, self, lambda t: t.reshape(shape))

    # ---------------------------------------------------------------- axis order
    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if len(dims) != self.ndim:
            fail(
                ShapeError,
                "permute",
                f"got {len(dims)} dims {tuple(dims)} for a tensor of shape {self.shape}",
            )
        order = tuple(self._dim(d, "permute") for d in dims)
        if sorted(order) != list(range(self.ndim)):
            fail(
                ShapeError,
                "permute",
                f"{tuple(dims)} is not a permutation of the axes of shape {self.shape}",
            )
        st = self.stride()
        out = self._view(N.permute(self.node, order), tuple(st[o] for o in order))
        return linked(out, self, lambda t: t.permute(order))

    def transpose(self, dim0: int = 0, dim1: int = 1):
        a, b = self._dim(dim0, "transpose"), self._dim(dim1, "transpose")
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order) if self.ndim else self

    def t(self):
        if self.ndim > 2:
            fail(ShapeError, "t", f"expects a tensor with <= 2 dims, got shape {self.shape}")
        return self.transpose(0, 1) if self.ndim == 2 else self

    @property
    def T(self):
        if self.ndim != 2:
            warn_user(
                "The use of `x.T` on tensors of dimension other than 2 to reverse their shape "
                "is deprecated and it will throw an error in a future release. Consider `x.mT` "
                "to transpose batches of matrices or `x.permute(*torch.arange(x.ndim - 1, -1, "
                "-1))` to reverse the dimensions of a tensor."
            )
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        return self.transpose(-2, -1)

    # ---------------------------------------------------------------- broadcasting
    def expand(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if len(shape) < self.ndim:
            fail(ShapeError, "expand", f"cannot expand shape {self.shape} to fewer dims {shape}")
        lead = len(shape) - self.ndim
        src = (1,) * lead + self.shape
        shape = tuple(s if t == -1 else t for s, t in zip(src, shape))
        for s, t in zip(src, shape):
            if s != t and s != 1:
                fail(
                    ShapeError,
                    "expand",
                    f"cannot expand shape {self.shape} to {shape}: only size-1 axes can grow",
                )
        st = (0,) * lead + self.stride()
        strides = tuple(0 if s != t else x for s, t, x in zip(src, shape, st))
        node = N.expand(N.reshape(self.node, src), shape)
        return self._view(node, strides)

    def expand_as(self, other):
        return self.expand(other.shape)

    def broadcast_to(self, shape):
        return self.expand(shape)

    # ---------------------------------------------------------------- slicing
    def __getitem__(self, index):
        """Basic indexing: ints, positive slices, None and ... give a view (tensors, lists,
        bool masks and negative steps: `indexing.py`'s `IndexingMixin.__getitem__`)."""
        index, bounds, steps, keep = basic_index(self.shape, index)
        x = self
        if x.node.op is Ops.CONTIGUOUS and copied_data(x):  # (then blocks of one buffer)
            x.realize()
        st = self.stride()
        node = _block_of_buffer(x, bounds, steps)
        if node is None:
            node = N.shrink(x.node, tuple(bounds))
        if any(s != 1 for s in steps):
            node = _stride_node(node, steps)
        new_strides = []
        for k, stp, stride in zip(keep, steps, st):
            if k:
                new_strides.append(stride * stp)
        # final shape: drop int-indexed axes, insert None axes
        kept = iter([s for s, k in zip(node.shape, keep) if k])
        kept_st = iter(new_strides)
        shape, strides_out = [], []
        ki = iter(keep)
        for i in index:
            if i is None:
                shape.append(1)
                strides_out.append(None)  # filled below from the axis after it
            elif next(ki):
                shape.append(next(kept))
                strides_out.append(next(kept_st))
        # as PyTorch: a new axis's stride is the next axis's stride times its size (1 at the end)
        for k in reversed(range(len(strides_out))):
            if strides_out[k] is None:
                last = k + 1 == len(strides_out)
                strides_out[k] = 1 if last else strides_out[k + 1] * shape[k + 1]
        out = self._view(N.reshape(node, tuple(shape)), tuple(strides_out))
        return linked(out, self, lambda t: t[index])

    # ---------------------------------------------------------------- padding
    def pad(self, pad, value: float = 0.0):
        """Pad as PyTorch's F.pad: (before last axis, after it, before the axis before, ...).

        Negative amounts crop.
        """
        if len(pad) % 2 or len(pad) // 2 > self.ndim:
            fail(
                ShapeError,
                "pad",
                f"padding {tuple(pad)} must have an even length of at most "
                f"2 * ndim = {2 * self.ndim}",
            )
        pairs = [(0, 0)] * self.ndim
        for k in range(len(pad) // 2):
            pairs[self.ndim - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
        crop = tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(pairs, self.shape))
        if any(lo > hi for lo, hi in crop):
            fail(
                ShapeError,
                "pad",
                f"negative padding {tuple(pad)} removes more than shape {self.shape}",
            )
        node = N.shrink(self.node, crop)
        grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
        padded = self._view(N.pad(node, grow), None)
        if value != 0 or math.copysign(1.0, value) < 0:  # (a -0.0 fill is no +0.0 padding)
            inside = N.pad(N.const(True, node.shape, bool_), grow)
            padded = _fill_outside(padded, padded._make(inside), value)
        return padded

    def contiguous(self, memory_format=None):
        """A tensor with contiguous strides; materialized once if this one is a strided view.
        `memory_format=` is checked as torch checks it; the strides stay row-major
        (fusegrad's layout is its own, torch_settings.py)."""
        check_memory_format(memory_format, self.ndim, "contiguous")
        if self.is_contiguous():
            return self
        return self._make(N.contiguous(self.node), strides=_contiguous_strides(self.shape))


def _fill_outside(x, mask, value):
    """`x` where `mask`, else `value` in x's dtype (torch.nn.functional.pad keeps the
    input's dtype: 2.5 pads an int64 tensor with 2, 1 a bool one with True)."""
    if x.dtype.is_int and not x.dtype.is_bool:
        info = np.iinfo(x.dtype.np)
        if not math.isfinite(value) or not info.min <= math.trunc(value) <= info.max:
            fail(DTypeError, "pad", f"value {value} cannot be converted to type {x.dtype.name}")
    return x._make(N.where(mask.node, x.node, N.const(value, x.shape, x.dtype)), mask)


def _stride_node(node, steps):
    """Take every `step`-th element along each axis: pad to a multiple, split, keep index 0."""
    shape = node.shape
    padded = tuple((0, (-s) % st) for s, st in zip(shape, steps))
    node = N.pad(node, padded)
    split = []
    for s, st in zip(node.shape, steps):
        split += [s // st, st]
    node = N.reshape(node, tuple(split))
    node = N.shrink(node, tuple((0, n) if k % 2 == 0 else (0, 1) for k, n in enumerate(split)))
    return N.reshape(node, tuple(-(-s // st) for s, st in zip(shape, steps)))


@autocast_op("cat")
def cat(tensors, dim: int = 0):
    """Join tensors along an existing axis (as torch.cat): each is padded to the whole and
    chosen where it lies, its bits as they are."""
    tensors = list(tensors)
    if not tensors:
        fail(ShapeError, "cat", "expected a non-empty list of tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, TensorBase):
            fail(
                DTypeError,
                "cat",
                f"expected Tensor as element {i} in argument 0, but got {type(t).__name__}",
            )
        if t.ndim == 0:
            fail(
                ShapeError,
                "cat",
                f"zero-dimensional tensor (at position {i}) cannot be concatenated",
            )
    first = tensors[0]
    d = first._dim(dim, "cat")
    for t in tensors[1:]:
        if t.ndim != first.ndim or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d
        ):
            fail(
                ShapeError,
                "cat",
                f"shapes {[tuple(x.shape) for x in tensors]} differ outside dim {dim}",
            )
    total = sum(t.shape[d] for t in tensors)
    out, offset = None, 0
    dtype = first.dtype
    for t in tensors:
        dtype = promote(dtype, t.dtype)
    arrays = _host_values(tensors, total * math.prod(first.shape) // max(first.shape[d], 1))
    if arrays is not None:
        return _host_join(np.concatenate, arrays, d, first)
    # each piece padded to the whole and chosen where it lies (a WHERE, not an add: a
    # piece's -0.0 plus the others' +0.0 padding was +0.0, where torch.cat copies it)
    for t in tensors:
        pads = [(0, 0)] * first.ndim
        pads[d] = (offset, total - offset - t.shape[d])
        offset += t.shape[d]
        piece = t.cast(dtype)
        padded = piece._make(N.pad(piece.node, tuple(pads)))
        if out is None:
            out = padded
            continue
        inside = N.pad(N.const(True, t.shape, bool_, piece.node.device), tuple(pads))
        out = padded._make(N.where(inside, padded.node, out.node), out)
    return out


@autocast_op("stack")
def stack(tensors, dim: int = 0):
    """Join tensors along a new axis (as torch.stack)."""
    tensors = list(tensors)
    if not tensors:
        fail(ShapeError, "stack", "expected a non-empty list of tensors")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        fail(
            ShapeError,
            "stack",
            f"all tensors must have the same shape, got {[t.shape for t in tensors]}",
        )
    n = tensors[0].ndim + 1
    if isinstance(dim, (int, np.integer)) and -n <= dim < n:
        arrays = _host_values(tensors, len(tensors) * tensors[0].numel())
        if arrays is not None:
            return _host_join(np.stack, arrays, int(dim) % n, tensors[0])
    return cat([t.unsqueeze(dim) for t in tensors], dim)


# A join of this many pieces or more, every one a value in host memory, is copied there by
# numpy, whatever its size: one kernel reading each piece from a place of its own is slow
# to compile (tens of milliseconds a piece) and a new compile for each new set of sizes,
# as a dataset's sentences joined into one stream meet (`torch.cat(lines)`). A smaller
# join is copied there too when its bytes are few: it then costs less than a launch.
HOST_JOIN_PIECES = 8
HOST_JOIN_BYTES = 1 << 20


def _host_values(tensors, numel: int) -> list[np.ndarray] | None:
    """The pieces' values as host arrays, where a join of them is better done by numpy at
    once (`HOST_JOIN_PIECES`): every piece computed, in host memory, of one dtype, none
    needing a gradient, and no `fusegrad.jit` recording (its replay could not redo it).
    None where the join should stay in the graph."""
    first = tensors[0]
    if numel == 0 or recording():
        return None
    if len(tensors) < HOST_JOIN_PIECES and numel * first.dtype.itemsize > HOST_JOIN_BYTES:
        return None
    grads = autograd_state.enabled()
    arrays = []
    for t in tensors:
        if t.dtype is not first.dtype or (grads and t.requires_grad):
            return None
        buf = engine.value(t.node)
        if buf is None or type(buf) not in HOST_BUFFERS:
            return None
        arrays.append(buf.array[: t.numel()].reshape(t.shape))
    return arrays


def _host_join(join, arrays: list[np.ndarray], axis: int, first):
    """The tensor of `join(arrays, axis=axis)` (np.concatenate or np.stack), written
    straight into a buffer of its own."""
    shape = list(arrays[0].shape)
    if join is np.stack:
        shape.insert(axis, len(arrays))
    else:
        shape[axis] = sum(a.shape[axis] for a in arrays)
    buf = Buffer(math.prod(shape), first.dtype)
    join(arrays, axis=axis, out=buf.array.reshape(shape))
    return first._plain(N.buffer(buf, tuple(shape), first.dtype), requires_grad=False, leaf=True)


def sliding_windows(x, kernel, stride, dilation):
    """A view of the sliding windows over the last len(kernel) axes: no data is copied.

    For one axis of size i, window c holds x[c*s], x[c*s + d], ..., and the
    view is built from movement ops alone: repeat the axis f times, flatten,
    cut to k*(i+d) and fold it to (k, i+d), so that element [a, b] is
    x[a*d + b]; then keep every s-th column. Index simplification turns the
    composition back into `x[c*s + a*d]`.

    Returns shape (*prefix, *outputs, *kernel).

    >>> import fusegrad as fg
    >>> sliding_windows(fg.arange(5.0), (2,), (2,), (1,)).tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """
    node = x.node
    for op, arg in _window_recipe(x.shape, tuple(kernel), tuple(stride), tuple(dilation)):
        node = op(node, arg)
    return x._make(node)


@functools.lru_cache(maxsize=1024)  # a function of shapes: a training step asks the same again
def _window_recipe(shape, kernel, stride, dilation) -> tuple:
    """The movement ops (node function, argument) that make `sliding_windows`' view of an
    input of `shape`, in order."""
    n = len(kernel)
    prefix, spatial = shape[: len(shape) - n], shape[len(shape) - n :]
    outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(spatial, kernel, stride, dilation)]
    if any(o <= 0 for o in outs):
        fail(
            ShapeError,
            "window",
            f"kernel {tuple(kernel)} (dilation {tuple(dilation)}) is larger "
            f"than the input's spatial size {tuple(spatial)}",
        )
    p = len(prefix)
    if all(s == k for s, k in zip(stride, kernel)) and all(d == 1 for d in dilation):
        # windows that tile the input: a reshape, whose gradient is a reshape too
        order = (
            tuple(range(p))
            + tuple(p + 2 * j for j in range(n))
            + tuple(p + 2 * j + 1 for j in range(n))
        )
        return (
            (
                N.shrink,
                tuple((0, s) for s in prefix) + tuple((0, o * k) for o, k in zip(outs, kernel)),
            ),
            (N.reshape, prefix + tuple(v for o, k in zip(outs, kernel) for v in (o, k))),
            (N.permute, order),
        )
    reps = [-(-k * (i + d) // i) for i, k, d in zip(spatial, kernel, dilation)]
    steps = [
        # repeat every spatial axis: (*prefix, f1, i1, f2, i2, ...)
        (N.reshape, prefix + tuple(v for i in spatial for v in (1, i))),
        (N.expand, prefix + tuple(v for f, i in zip(reps, spatial) for v in (f, i))),
        (N.reshape, prefix + tuple(f * i for f, i in zip(reps, spatial))),
        (
            N.shrink,
            tuple((0, s) for s in prefix)
            + tuple((0, k * (i + d)) for i, k, d in zip(spatial, kernel, dilation)),
        ),
        (
            N.reshape,
            prefix + tuple(v for i, k, d in zip(spatial, kernel, dilation) for v in (k, i + d)),
        ),
    ]
    # keep columns 0, s, 2s, ...: make each row exactly o*s long, split (o, s), keep s == 0
    bounds = [(0, s) for s in prefix]
    grow = [(0, 0)] * p
    for i, k, s, d, o in zip(spatial, kernel, stride, dilation, outs):
        bounds += [(0, k), (0, min(o * s, i + d))]
        grow += [(0, 0), (0, max(0, o * s - (i + d)))]
    order = (
        tuple(range(p))
        + tuple(p + 2 * j + 1 for j in range(n))
        + tuple(p + 2 * j for j in range(n))
    )
    steps += [
        (N.shrink, tuple(bounds)),
        (N.pad, tuple(grow)),
        (N.reshape, prefix + tuple(v for k, o, s in zip(kernel, outs, stride) for v in (k, o, s))),
        (
            N.shrink,
            tuple((0, s) for s in prefix)
            + tuple(v for k, o in zip(kernel, outs) for v in ((0, k), (0, o), (0, 1))),
        ),
        (N.reshape, prefix + tuple(v for k, o in zip(kernel, outs) for v in (k, o))),
        (N.permute, order),
    ]
    return tuple(steps)
