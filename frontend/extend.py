"""Building new ops on fusegrad: what `nn` (and a user's own layers) need beyond `Tensor`.

Everything here works on tensors; none of it exposes graph nodes. These are the
pieces that ordinary tensor methods do not cover:

- `custom_gradient(out, inputs, rule)`: give a composite op its own gradient, as
  `torch.autograd.Function` does (a convolution's transposed convolution, pooling's
  first-maximum rule), instead of the one derived from its primitives;
- `gather_rows(table, index)`: rows of a 2-D table picked by an integer tensor (an
  embedding lookup), without bounds checks (check the indices first);
- `materialize(t, reason)`: store `t` in memory rather than recompute it in every
  kernel that reads it, with the reason the schedule reports;
- `host_data(t)`: `t`'s values if they are data already in memory, else None (so a
  check never computes a lazy value early);
- `reads_out_of_order(t)`: whether a kernel reading `t` reads its source through a
  view that reorders, reverses or pads it (what a convolution weighs against a copy).

>>> import fusegrad as fg
>>> from fusegrad.extend import custom_gradient
>>> x = fg.tensor([1.0, -2.0], requires_grad=True)
>>> y = custom_gradient(x.abs(), [x], lambda g, x: [g * 2])  # a made-up gradient
>>> y.sum().backward(); x.grad.tolist()
[2.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .ir import node as N
from .ir.autodiff import CUSTOM_VJP, wants_gradient, with_vjp
from .ir.ops import MOVEMENT, REDUCE, Ops
from .tensor_base import TensorBase


def custom_gradient(
    out: TensorBase,
    inputs: Sequence[TensorBase],
    rule: Callable[..., Sequence[TensorBase | None]],
    *,
    own_node: bool = False,
    same_rule: bool = False,
) -> TensorBase:
    """`out`, computed from `inputs`, with the gradient `rule(grad_out, *inputs)` (one
    gradient or None per input) instead of the one derived from its ops.

    The rule runs when a backward pass is built, on tensors over the values the
    inputs had when `custom_gradient` was called (so it need not, and should not,
    capture the input tensors: one may be given a new value by an optimizer step
    before the gradient is built, and a captured tensor keeps its graph alive).
    `own_node=True` (or an `out` that is a view, a leaf or already has a rule) puts
    the rule on a node of its own (`out * 1`), so it cannot attach to an equal node
    built elsewhere. `same_rule=True` says an equal node can only have been built by this
    same op, with a rule that computes the same gradients: an `out` whose node has a rule
    already takes this one in its place (a library op built twice, composed and as a
    macro's expansion, is then the same nodes both times).
    """
    node = out.node
    taken = node in CUSTOM_VJP and not same_rule
    if own_node or node.op in MOVEMENT or node.op in (Ops.BUFFER, Ops.CONST) or taken:
        node = N.mul(node, N.const(1, node.shape, node.dtype))
    sources = [t.node for t in inputs]
    plain = out._plain  # (the class: the rule must not hold a tensor)

    def node_rule(g):
        grads = rule(plain(g), *[plain(s) for s in sources])
        return [(s, d.node) for s, d in zip(sources, grads) if d is not None]

    with_vjp(node, node_rule)
    return out if node is out.node else out._make(node, *inputs)


def gradient_wanted(t: TensorBase) -> bool:
    """For a `custom_gradient` rule: whether the backward being built needs the gradient of
    input `t` (False where nothing it differentiates for lies below `t`, a network's input
    batch): the rule may return None for it and save building its graph."""
    return wants_gradient(t.node)


_REORDERING = (Ops.PERMUTE, Ops.PAD, Ops.FLIP)


def reads_out_of_order(t: TensorBase) -> bool:
    """Whether `t` is a view that permutes, pads or flips the value under it, so that a
    kernel reading `t` in order reads memory out of order (strided, backwards) or through
    bounds tests. Reshapes, slices and broadcasts of a value read it in order.

    >>> import fusegrad as fg
    >>> x = fg.randn(2, 3, 4)
    >>> reads_out_of_order(x.reshape(6, 4)), reads_out_of_order(x.permute(0, 2, 1))
    (False, True)
    """
    return _read_in_order(t.node) is None


def _read_in_order(node):
    """The value under `node`'s views where they only reshape, slice or broadcast it (a
    kernel reading `node` in order reads it in order too); None where one reorders it."""
    while node.op in MOVEMENT:
        if node.op in _REORDERING:
            return None
        node = node.srcs[0]
    return node


def reads_stored_values(t: TensorBase) -> bool:
    """Whether `t` reads, in order, values kept in memory (a buffer, a reduction's output, a
    `materialize`d copy) through reshapes, slices and broadcasts only: a kernel that reads
    it several times recomputes nothing (an elementwise value would be computed again at
    every read).

    >>> import fusegrad as fg
    >>> x = fg.randn(2, 3).realize()
    >>> reads_stored_values(x.reshape(3, 2)), reads_stored_values((x * 2).reshape(3, 2))
    (True, False)
    """
    node = _read_in_order(t.node)
    return node is not None and (node.op in (Ops.BUFFER, Ops.CONTIGUOUS) or node.op in REDUCE)


def gather_rows(table: TensorBase, index: TensorBase) -> TensorBase:
    """Rows of `table` picked by the integers in `index`: shape index.shape + table.shape[1:].

    Indices are not checked (the caller checks them where their values are known)."""
    return table._make(N.gather(table.node, index.node), index)


def materialize(t: TensorBase, reason: str) -> TensorBase:
    """`t`, stored in memory by its own kernel; `reason` is what the schedule says."""
    return t._make(N.contiguous(t.node, reason))


def host_data(t: TensorBase):
    """`t`'s values as a numpy array if they are data in memory already, else None."""
    node = t.node
    if node.op is not Ops.BUFFER:
        return None
    array = getattr(node.arg, "array", None)  # a host buffer's, read straight (every step
    if array is None:  # reads a batch's targets): a device's is copied by numpy()
        return t.numpy()
    view = array.reshape(node.shape).view()
    view.setflags(write=False)
    return view
