"""Graph nodes: frozen, hash-consed `(op, srcs, arg, shape, dtype)` records.

Building the same node twice gives the same object, so equal subgraphs are one
node (common-subexpression elimination for free) and identity is equality:

>>> from fusegrad.ir.dtypes import float32
>>> a = const(1.0, (3,), float32)
>>> add(a, a) is add(a, a)
True

Each constructor applies the op's shape and dtype rule and asserts its
preconditions; the frontend checks user input before it gets here and turns
mistakes into readable errors, so an assertion here is a bug in fusegrad.
"""

from __future__ import annotations

import math
import weakref
from _weakref import _remove_dead_weakref  # (as weakref.WeakValueDictionary)
from collections import deque
from collections.abc import Callable
from math import copysign

from .dtypes import DType, bool_
from .hooks import hooks
from .numpy_ops import fold_constant
from .ops import BINARY, COMPARISON, ELEMENTWISE, MOVEMENT, REDUCE, UNARY, Ops

Shape = tuple[int, ...]
# (module constants: an enum member read through its class costs four times a global's,
# and these are read for every node built)
_BUFFER, _CONST = Ops.BUFFER, Ops.CONST


# Hash-consing table: key -> weak reference to the one node with that key. A dict of
# weakrefs rather than a WeakValueDictionary: this lookup runs for every node built, and
# the plain dict costs a third as much. A key names the sources by id, so an entry holds
# no node alive; an entry whose node is alive is exact (that node holds its sources, so no
# other object can have their ids).
#
# An entry goes when its node dies: its reference's callback removes it (`_gone`, C code
# but for one call), so a training step's dead entries (a key tuple and a reference a node)
# never outlive the step: left until a sweep, they would fill the garbage collector's second
# generation, whose full collections walk every object of the program.
_CACHE: dict[tuple, weakref.ref] = {}


class _Entry(weakref.ref):
    """A table entry's reference: it knows its key, so its node's death can drop it."""

    __slots__ = ("key",)


def _gone(ref: _Entry, remove=_remove_dead_weakref, table=_CACHE) -> None:
    """A node died: drop its entry, unless another node has the key by now."""
    remove(table, ref.key)


class Node:
    """One IR value. Never construct directly: use the functions below.

    A node never changes after it is made. Its value, once computed, is kept by the
    runtime (`fusegrad.runtime.engine`), not by the node; a `BUFFER` node's value is its
    `arg`, the buffer itself. Where it was written is in a side table (`ir/sites.py`):
    equal nodes are one node whoever built them.

    `device` is where its value lives: a `BUFFER`'s is its buffer's; a constant made
    inside fusegrad has None and computes inline on any device; any other node's is
    its sources' one device (sources on two devices are refused when the node is built).
    """

    __slots__ = ("op", "srcs", "arg", "shape", "dtype", "device", "__weakref__")

    op: Ops
    srcs: tuple[Node, ...]
    arg: object
    shape: Shape
    dtype: DType
    device: str | None

    def __repr__(self) -> str:
        arg = "" if self.arg is None or self.op is _BUFFER else f", arg={self.arg!r}"
        return f"<{self.op.name} {self.shape} {self.dtype.name}{arg}>"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def make(
    op: Ops, srcs: tuple[Node, ...], arg, shape: Shape, dtype: DType, device: str | None = None
) -> Node:
    """Return the unique node for these fields, building it if it is new (BUFFER nodes are
    never shared: each is its own value). `device` is a leaf's; other nodes take their
    sources' device."""
    if op is _BUFFER:
        return _new(op, srcs, arg, shape, dtype, getattr(arg, "device", "cpu"))
    # the hottest function of graph building: the common cases inline
    if len(srcs) == 1:
        device = srcs[0].device
        ids = id(srcs[0])
    elif srcs:
        device = common_device(op, srcs)
        ids = tuple(map(id, srcs))
    else:
        ids = ()
    if 0 in shape and op is not _CONST:
        # an empty value has no elements to compute: a constant, so no kernel ever reads it
        return const(False if dtype.is_bool else 0, shape, dtype, device)
    if isinstance(arg, float):
        # keep 0.0 and -0.0 apart; NaN never equals itself, so NaN constants are never shared
        arg_key = (arg, copysign(1.0, arg))
    else:
        arg_key = arg
    key = (op, ids, arg_key, shape, dtype, device)
    ref = _CACHE.get(key)
    if ref is not None:
        hit = ref()
        if hit is not None:
            return hit
    n = object.__new__(Node)
    n.op, n.srcs, n.arg, n.shape, n.dtype, n.device = op, srcs, arg, shape, dtype, device
    ref = _Entry(n, _gone)
    ref.key = key
    prev = _CACHE.setdefault(key, ref)  # one step: another thread may be building it too
    if prev is not ref:
        hit = prev()
        if hit is not None:  # it did, first
            return hit
        _CACHE[key] = ref  # a dead entry, whose callback has not run yet
    return n


def common_device(op: Ops, srcs: tuple[Node, ...]) -> str | None:
    """The one device of `srcs` (None if all are constants); two devices are refused."""
    device = srcs[0].device
    for s in srcs[1:]:
        d = s.device
        if d is not device and d is not None:
            if device is None:
                device = d
            elif d != device:
                hooks.mixed_devices(op, device, d)
    return device


def _new(op, srcs, arg, shape, dtype, device) -> Node:
    n = object.__new__(Node)
    n.op, n.srcs, n.arg, n.shape, n.dtype, n.device = op, srcs, arg, shape, dtype, device
    return n


# ---------------------------------------------------------------- leaves


def buffer(buf, shape: Shape, dtype: DType) -> Node:
    """A node for realized data (a runtime Buffer of `prod(shape)` elements, row-major)."""
    return _new(_BUFFER, (), buf, tuple(shape), dtype, getattr(buf, "device", "cpu"))


# the constants made last, kept alive: `x * 2` in a loop finds its `2` in the table
# (`make`) instead of making the node, its entry and its reference again for each call,
# and dropping them when the call's graph dies (a constant holds no data)
RECENT_CONSTANTS = 64
_recent_constants: deque = deque(maxlen=RECENT_CONSTANTS)


def const(value, shape: Shape, dtype: DType, device: str | None = None) -> Node:
    """`value` everywhere; `device` None (fusegrad's own constants) computes on any device."""
    kind = dtype.kind
    value = float(value) if kind == "f" else bool(value) if kind == "b" else int(value)
    n = make(_CONST, (), value, tuple(shape), dtype, device)
    _recent_constants.append(n)
    return n


def unshared_const(value, shape: Shape, dtype: DType, device: str | None = None) -> Node:
    """A constant node of its own, which hash-consing never hands out again: an anchor for
    a hook or a gradient rule on an empty value, where every node built of it folds to the
    one empty constant (`make`), so no other node of its value is free."""
    kind = dtype.kind
    value = float(value) if kind == "f" else bool(value) if kind == "b" else int(value)
    return _new(_CONST, (), value, tuple(shape), dtype, device)


def index(shape: Shape, dtype: DType) -> Node:
    """Each element's row-major position in `shape`, as an integer of `dtype`: an index table
    that no buffer holds, computed where a kernel reads it (of no device, as a constant).

    >>> from fusegrad.ir.dtypes import int64
    >>> from fusegrad.ir.reference import evaluate
    >>> evaluate(index((2, 3), int64)).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    assert dtype.is_int
    return make(Ops.INDEX, (), None, tuple(shape), dtype)


def rand(key: Node, shape: Shape, dtype: DType) -> Node:
    """Uniform [0, 1) numbers: element i is a hash of (key, i), so any kernel can regenerate it.

    The key is data (a 0-d int32 node, usually a buffer), not a constant in the graph: a new
    dropout mask each step changes a buffer, not the graph, so nothing is recompiled.
    """
    assert dtype.is_float and key.shape == () and key.dtype.name == "int32"
    return make(Ops.RAND, (key,), None, tuple(shape), dtype)


# ---------------------------------------------------------------- elementwise


def _fold(op: Ops, srcs: tuple[Node, ...], shape: Shape, dtype: DType) -> Node:
    """Constant folding: an elementwise op on constants is a constant, computed as numpy
    (the reference evaluator) computes it in that dtype."""
    value = fold_constant(op, [s.arg for s in srcs], [s.dtype for s in srcs], dtype)
    return const(value, shape, dtype, common_device(op, srcs))


def unary(op: Ops, x: Node) -> Node:
    assert op in UNARY and op is not Ops.CAST
    if x.op is _CONST:
        return _fold(op, (x,), x.shape, x.dtype)
    return make(op, (x,), None, x.shape, x.dtype)


def cast(x: Node, dtype: DType) -> Node:
    if x.dtype is dtype:
        return x
    if x.op is _CONST:
        return _fold(Ops.CAST, (x,), x.shape, dtype)
    return make(Ops.CAST, (x,), None, x.shape, dtype)


def binary(op: Ops, a: Node, b: Node) -> Node:
    assert op in BINARY
    assert a.shape == b.shape, f"{op.name}: {a.shape} vs {b.shape}"
    assert a.dtype is b.dtype, f"{op.name}: {a.dtype} vs {b.dtype}"
    out = bool_ if op in COMPARISON else a.dtype
    if a.op is _CONST and b.op is _CONST:
        return _fold(op, (a, b), a.shape, out)
    return make(op, (a, b), None, a.shape, out)


def where(cond: Node, a: Node, b: Node) -> Node:
    assert cond.dtype is bool_ and cond.shape == a.shape == b.shape and a.dtype is b.dtype
    if cond.op is _CONST:
        common_device(Ops.WHERE, (cond, a, b))  # two devices are refused even here
        return a if cond.arg else b
    return make(Ops.WHERE, (cond, a, b), None, a.shape, a.dtype)


def add(a, b):
    return binary(Ops.ADD, a, b)


def mul(a, b):
    return binary(Ops.MUL, a, b)


# ---------------------------------------------------------------- reductions


def reduce(op: Ops, x: Node, axes: tuple[int, ...]) -> Node:
    """Reduce over `axes`, which keep size 1 (keepdim); no axes is the identity."""
    assert op in REDUCE
    shape = x.shape
    if len(axes) == 1:  # the usual case, without building sets and generators
        a = axes[0]
        if a < 0:
            a += len(shape)
        if shape[a] == 1:
            return x
        return make(op, (x,), (a,), shape[:a] + (1,) + shape[a + 1 :], x.dtype)
    axes = tuple(sorted(set(a for a in axes if shape[a] != 1)))
    if not axes:
        return x
    return make(op, (x,), axes, tuple(1 if i in axes else s for i, s in enumerate(shape)), x.dtype)


# ---------------------------------------------------------------- movement


def reshape(x: Node, shape: Shape) -> Node:
    shape = tuple(map(int, shape))
    assert math.prod(shape) == x.numel, f"reshape {x.shape} -> {shape}"
    if shape == x.shape:
        return x
    if x.op is Ops.RESHAPE:  # reshape of a reshape is one reshape
        return reshape(x.srcs[0], shape)
    return make(Ops.RESHAPE, (x,), shape, shape, x.dtype)


def permute(x: Node, order: tuple[int, ...]) -> Node:
    order = tuple(order)
    assert sorted(order) == list(range(len(x.shape)))
    if order == tuple(range(len(order))):
        return x
    if x.op is Ops.PERMUTE:  # compose two permutations
        inner = x.arg
        return permute(x.srcs[0], tuple(inner[o] for o in order))
    return make(Ops.PERMUTE, (x,), order, tuple(x.shape[o] for o in order), x.dtype)


def expand(x: Node, shape: Shape) -> Node:
    shape = tuple(shape)
    if shape == x.shape:
        return x
    assert len(shape) == len(x.shape) and all(s == t or s == 1 for s, t in zip(x.shape, shape)), (
        f"expand {x.shape} -> {shape}"
    )
    return make(Ops.EXPAND, (x,), shape, shape, x.dtype)


def pad(x: Node, pads: tuple[tuple[int, int], ...]) -> Node:
    pads = tuple((int(b), int(a)) for b, a in pads)
    assert len(pads) == len(x.shape) and all(b >= 0 and a >= 0 for b, a in pads)
    if all(b == 0 and a == 0 for b, a in pads):
        return x
    shape = tuple(s + b + a for s, (b, a) in zip(x.shape, pads))
    return make(Ops.PAD, (x,), pads, shape, x.dtype)


def shrink(x: Node, bounds: tuple[tuple[int, int], ...]) -> Node:
    bounds = tuple((int(b), int(e)) for b, e in bounds)
    assert len(bounds) == len(x.shape) and all(
        0 <= b <= e <= s for (b, e), s in zip(bounds, x.shape)
    ), f"shrink {x.shape} by {bounds}"
    if all(b == 0 and e == s for (b, e), s in zip(bounds, x.shape)):
        return x
    shape = tuple(e - b for b, e in bounds)
    return make(Ops.SHRINK, (x,), bounds, shape, x.dtype)


def flip(x: Node, axes: tuple[int, ...]) -> Node:
    axes = tuple(sorted(set(a for a in axes if x.shape[a] > 1)))
    if not axes:
        return x
    return make(Ops.FLIP, (x,), axes, x.shape, x.dtype)


def contiguous(x: Node, reason: str | None = None) -> Node:
    """Materialize x; `reason` says who asked (the user's contiguous() if None)."""
    return make(Ops.CONTIGUOUS, (x,), reason, x.shape, x.dtype)


def device_copy(x: Node, device: str) -> Node:
    """x's value on another `device`: a node of its own (never shared, never folded) with
    `x`, on its own device, as its source. Its value is the copy the caller binds to it
    (the runtime copies buffers between devices; no kernel does); the source is there so
    that a gradient can cross back (frontend/tensor.py `_to_device`)."""
    return _new(Ops.CONTIGUOUS, (x,), "device copy", x.shape, x.dtype, device)


def detach(x: Node) -> Node:
    """The same value, cut off from differentiation."""
    if x.op in (Ops.DETACH, _CONST):
        return x
    return make(Ops.DETACH, (x,), None, x.shape, x.dtype)


# ---------------------------------------------------------------- data-dependent rows


def gather(table: Node, index: Node) -> Node:
    """Rows of `table` picked by the integers in `index`: shape index.shape + table.shape[1:]."""
    assert index.dtype.is_int and not index.dtype.is_bool and table.shape
    shape = index.shape + table.shape[1:]
    if table.op is _CONST:  # every row is the same
        return const(table.arg, shape, table.dtype, common_device(Ops.GATHER, (table, index)))
    return make(Ops.GATHER, (table, index), None, shape, table.dtype)


def scatter_add(values: Node, index: Node, rows: int, from_negative_zero: bool = False) -> Node:
    """Sums of `values` rows into `rows` rows chosen by `index` (the transpose of gather),
    each from +0.0, or with `from_negative_zero` (floats) from -0.0: a sum from -0.0 is its
    terms' exactly, -0.0 kept (x + -0.0 is x; a place nothing is added to is -0.0), as
    torch's in-place adds into x keep x's bits (`index_add`: x + such a sum)."""
    k = len(index.shape)
    assert index.dtype.is_int and values.shape[:k] == index.shape
    arg = (rows, from_negative_zero and values.dtype.is_float)
    return make(Ops.SCATTER_ADD, (values, index), arg, (rows,) + values.shape[k:], values.dtype)


def place(x: Node, device: str) -> Node:
    """`x` computed on `device`: a node built only from fusegrad's own constants (device
    None) is rebuilt with its constants on `device`; any other node is returned as is."""
    if x.device is not None:
        return x
    placed: dict[int, Node] = {}
    for n in toposort([x]):
        if n.op is _CONST:
            m = const(n.arg, n.shape, n.dtype, device)
        else:
            m = make(n.op, tuple(placed[id(s)] for s in n.srcs), n.arg, n.shape, n.dtype)
        placed[id(n)] = m
    return placed[id(x)]


# ---------------------------------------------------------------- graph walks


def toposort(roots: list[Node], stop: Callable[[Node], bool] = lambda n: False) -> list[Node]:
    """Nodes reachable from `roots`, sources before users; does not descend below `stop` nodes.
    (A node hashes by identity: the set holds the nodes, not their `id`s, and the loop's
    methods are bound once; the scheduler walks each kernel's nodes several times.)"""
    order: list[Node] = []
    seen: set[Node] = set()
    add, place = seen.add, order.append
    for root in roots:
        if root in seen:
            continue
        add(root)
        nodes = [root]
        pending = [iter(() if stop(root) else root.srcs)]
        enter, leave, wait, done = nodes.append, nodes.pop, pending.append, pending.pop
        while nodes:
            for s in pending[-1]:
                if s not in seen:
                    add(s)
                    enter(s)
                    wait(iter(() if stop(s) else s.srcs))
                    break
            else:  # every source is placed: so is this node
                done()
                place(leave())
    return order


def is_view(n: Node) -> bool:
    return n.op in MOVEMENT


def is_elementwise(n: Node) -> bool:
    return n.op in ELEMENTWISE


def is_reduce(n: Node) -> bool:
    return n.op in REDUCE
