"""What the op families under `tensor.py` need of the tensor: its base class, broadcasting
and promotion, `where`.

`Tensor` is assembled in `tensor.py` from static mixins, one per op family
(`MovementMixin` in movement.py, `MathMixin` in mathops.py, ...), so those modules,
and creation, autograd, hooks and copying under them, are below it and never import
it. They hold tensors all the same, and make them through the class of one they hold:

    def double(self):                         # a mixin method
        return self._plain(N.mul(self.node, N.const(2, self.shape, self.dtype)))

`TensorBase._plain` is the class an op's result is (`Tensor`, set by tensor.py, for
every subclass too: an op on a `Parameter` or a `LazyGrad` gives a plain tensor), and
`isinstance(x, TensorBase)` is "x is a tensor". A function that makes a tensor from
nothing (`fg.zeros`, `fg.tensor`) lives above tensor.py (creation.py), or takes the
class from an argument (`creation_nodes.index_arange(like, n)`).
"""

from __future__ import annotations

import functools

from . import creation_nodes
from .errors import DTypeError, ShapeError, fail
from .ir import node as N
from .ir.dtypes import DType, bool_, promote, promote_scalar
from .ir.macro import macro
from .ir.ops import Ops


class TensorBase:
    """The slots of every tensor, and `_plain`, the class op results are built of.

    `_plain` is a class attribute that holds a class (not a method), so `self._plain(node)`
    is a call of `Tensor` itself, no wrapper in between: ops build tensors at the same cost
    as `Tensor(node)`.
    """

    __slots__ = (
        "node",
        "requires_grad",
        "_grad",
        "_strides",
        "_is_leaf",
        "_version",
        "_base",  # (base, redo) for a view whose in-place writes land in base (movement.py)
        "__weakref__",
    )
    _plain: type  # Tensor (tensor.py sets it once the class exists)
    _lazy_grad: type  # tensor.LazyGrad: what backward() leaves in a leaf's .grad
    _data_view: type  # tensor.DataView: what `t.data` is
    _linalg: object  # the fusegrad.linalg module (it sets this): its Tensor methods' home
    _copies_plain = False  # True for LazyGrad and DataView, whose copies are plain tensors


def promote_tensors(a: TensorBase, b: TensorBase) -> DType:
    """PyTorch's rule: against a tensor with dimensions, a 0-d tensor of the same or a lower
    kind (bool < int < float) does not change the dtype; one of a higher kind gives its own
    dtype (`bool_tensor + int32_0d` is int32, `int32_tensor + float64_0d` float64).
    Otherwise the wider dtype wins."""
    if (a.ndim == 0) == (b.ndim == 0):
        return promote(a.dtype, b.dtype)
    dims, zero = (a, b) if b.ndim == 0 else (b, a)
    if zero.dtype.category <= dims.dtype.category:  # uint8 + int64 0-d stays uint8
        return dims.dtype
    return zero.dtype


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    """numpy's broadcasting rule, with an error that shows both shapes and the axis."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            fail(
                ShapeError,
                op,
                f"shapes {a} and {b} cannot be broadcast together (axis -{i}: {x} vs {y})",
            )
        out.append(max(x, y) if x != 1 and y != 1 else x * y)
    return tuple(reversed(out))


# every binary operator on two shapes asks this, and a training step asks the same pairs
# each step (node shapes are tuples; a refusal raises, and is not cached)
broadcast_node_shapes = functools.lru_cache(maxsize=4096)(broadcast_shapes)


def _broadcast_node(node: N.Node, shape: tuple[int, ...]) -> N.Node:
    """`node` broadcast to `shape` (already checked by broadcast_shapes)."""
    if node.shape == shape:
        return node
    src = (1,) * (len(shape) - len(node.shape)) + node.shape
    return N.expand(N.reshape(node, src), shape)


def as_tensor_like(x, like, op: str = "tensor"):
    """`x` itself if it is a tensor, else `fg.tensor(x)` of the class of `like`, another
    argument of the op, which must then be a tensor (as torch: `fg.atan2(1.0, 2.0)` is a
    TypeError, there being no tensor among the arguments)."""
    if isinstance(x, TensorBase):
        return x
    if not isinstance(like, TensorBase):
        fail(
            DTypeError,
            op,
            f"expects a tensor among its arguments, got {type(x).__name__} and "
            f"{type(like).__name__} (wrap one in fusegrad.tensor())",
        )
    return like._plain(creation_nodes.data_node(x))


def as_macro(kind: str, tensors, params: tuple, shape, dtype, composed):
    """Op `kind` of `tensors` as one macro node (ir/macro.py) of `shape` and `dtype`, whose
    expansion is `composed(*tensors, *params)` (registered in tensor.py), built when a plan
    is compiled rather than on every call; of constants only, `composed` itself, which
    folds to a constant. The result is of the first tensor's class."""
    if all(t.node.op is Ops.CONST for t in tensors):
        return composed(*tensors, *params)
    node = macro(kind, tuple(t.node for t in tensors), params, tuple(shape), dtype)
    return tensors[0]._make(node, *tensors[1:])


def where(cond, a, b):
    """`a` where `cond` is true, else `b`, broadcasting all three (`fg.where`, for a call
    where one of the three is a tensor: the result is of its class)."""
    if not isinstance(cond, TensorBase):
        cond = as_tensor_like(cond, a if isinstance(a, TensorBase) else b)
    if not cond.dtype.is_bool:
        fail(
            DTypeError,
            "where",
            f"condition must be a bool tensor, got {cond.dtype.name} (use cond.bool())",
        )
    if not isinstance(a, TensorBase) and not isinstance(b, TensorBase):
        a = cond._plain(N.const(a, (), promote_scalar(bool_, a)))
    if isinstance(a, TensorBase):
        x, y, other = a._operand_nodes(b, "where")
        first = a
    else:
        y, x, other = b._operand_nodes(a, "where")
        first = b
    shape = broadcast_shapes(cond.shape, x.shape, "where")
    node = N.where(
        _broadcast_node(cond.node, shape), _broadcast_node(x, shape), _broadcast_node(y, shape)
    )
    if other is None:
        return first._make(node)
    return first._make(node, other)
