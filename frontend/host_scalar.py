"""One integer worked out on the host: `int(i + 1)` without a kernel.

A program that indexes with tensors does arithmetic on one-element integer tensors and
reads the result back at once: nanoGPT's `get_batch` slices `data[i + 1 : i + 1 + n]`
for each `i` of a `randint` draw. Each read would otherwise schedule and run a plan for
one number. When `item()` (and so `int()`, `bool()`, `__index__`) asks for one element of
a small graph of integer or bool ops over values in host memory, that element is worked
out here alone, in Python ints: each view (a row, a slice, a reshape, a flip, a
broadcast) followed back to the element of its source it reads, each op computed as
`ir/numpy_ops.py` computes it and wrapped to its node's type as numpy's integers wrap,
which is what the kernel computes: integer arithmetic wraps alike, comparisons and
selects are exact, and casts between integer types truncate alike. Floats never come here
(a kernel may contract a multiply and an add into one rounding), nor random numbers,
reductions or divisions, nor values on a device; such graphs run as plans.

>>> import fusegrad as fg
>>> i = fg.tensor([7, 9])[1]
>>> int(i + 1), bool(i > 8), (i * -3).item()
(10, True, -27)
"""

from __future__ import annotations

from .ir.node import Node
from .ir.ops import Ops
from .runtime.buffer import HOST_BUFFERS
from .runtime.engine import engine

_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.DETACH})
# the ops computed here: exact on integers and bools, as the kernels compute them
OPS = frozenset(
    {Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.CMPLT, Ops.CMPEQ, Ops.WHERE, Ops.CAST} | _VIEWS
)
MAX_NODES = 16  # elements of nodes worked out for one read: a bigger graph runs as a plan
MAX_ELEMENTS = 1 << 16  # elements of a host value read here (a slice of a batch's indices)


def value(root: Node):
    """The Python number of one-element `root`, or None where it is not computed here
    (see the module's docstring)."""
    if root.dtype.is_float or root.op is Ops.CONST:
        return None
    try:
        return _element(root, (0,) * len(root.shape), {}, [0])
    except _Refused:
        return None


class _Refused(Exception):
    """A node `_element` does not compute."""


def _wrapped(v: int, dt):
    """`v` as a value of integer or bool type `dt` holds it (two's complement wrap)."""
    if dt.is_bool:
        return bool(v)
    bits = 8 * dt.itemsize
    v &= (1 << bits) - 1
    return v - (1 << bits) if dt.is_signed and v >> (bits - 1) else v


def _flat(at: tuple, shape: tuple) -> int:
    """Index `at` of `shape` as a row-major offset."""
    flat = 0
    for i, size in zip(at, shape):
        flat = flat * size + i
    return flat


def _element(n: Node, at: tuple, memo: dict, count: list):
    """The element of `n` at index `at`, as a Python int or bool (`_Refused` where not)."""
    key = (id(n), at)
    if key in memo:
        return memo[key]
    count[0] += 1
    dt = n.dtype
    if count[0] > MAX_NODES or dt.is_float:
        raise _Refused
    op = n.op
    if op is Ops.CONST:
        out = _wrapped(int(n.arg), dt)
    else:
        # a buffer, or a value computed already (read, not recomputed), is a leaf
        buf = n.arg if op is Ops.BUFFER else engine.value(n)
        if buf is not None:
            if type(buf) not in HOST_BUFFERS or buf.size > MAX_ELEMENTS:
                raise _Refused
            out = buf.array.reshape(-1)[_flat(at, n.shape)].item()
            out = bool(out) if dt.is_bool else int(out)
        elif op in _VIEWS:
            out = _element(n.srcs[0], _source_index(n, at), memo, count)
        elif op not in OPS or any(s.dtype.is_float for s in n.srcs):
            raise _Refused  # (a float cast inside: the kernel's rounding)
        else:
            out = _scalar_op(n, [_element(s, at, memo, count) for s in n.srcs])
    memo[key] = out
    return out


def _source_index(n: Node, at: tuple) -> tuple:
    """The index into a view's source that its element `at` reads."""
    op, src = n.op, n.srcs[0]
    if op is Ops.DETACH:
        return at
    if op is Ops.SHRINK:
        return tuple(i + b for i, (b, _) in zip(at, n.arg))
    if op is Ops.PERMUTE:
        out = [0] * len(at)
        for i, axis in zip(at, n.arg):
            out[axis] = i
        return tuple(out)
    if op is Ops.EXPAND:
        return tuple(0 if s == 1 else i for i, s in zip(at, src.shape))
    if op is Ops.FLIP:
        return tuple(s - 1 - i if k in n.arg else i for k, (i, s) in enumerate(zip(at, n.shape)))
    flat, out = _flat(at, n.shape), []  # RESHAPE: the same place in row-major order
    for size in reversed(src.shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def _scalar_op(n: Node, args: list):
    """Elementwise `n` on its sources' elements, as `ir/numpy_ops.py` computes it."""
    op, dt = n.op, n.dtype
    if op is Ops.ADD:
        return (args[0] or args[1]) if dt.is_bool else _wrapped(args[0] + args[1], dt)
    if op is Ops.MUL:
        return (args[0] and args[1]) if dt.is_bool else _wrapped(args[0] * args[1], dt)
    if op is Ops.NEG:
        return (not args[0]) if dt.is_bool else _wrapped(-args[0], dt)
    if op is Ops.MAX:
        return max(args[0], args[1]) if not dt.is_bool else (args[0] or args[1])
    if op is Ops.CMPLT:
        return args[0] < args[1]
    if op is Ops.CMPEQ:
        return args[0] == args[1]
    if op is Ops.WHERE:
        return args[1] if args[0] else args[2]
    if op is Ops.CAST:
        return (args[0] != 0) if dt.is_bool else _wrapped(int(args[0]), dt)
    raise _Refused
