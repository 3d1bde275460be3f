"""Hooks on gradients: `Tensor.register_hook`, and the tool `nn`'s module backward hooks use.

Gradients are built symbolically (`ir/autodiff.py`), so a hook is a function of the
gradient *tensor* that runs while the backward graph is built, and what it returns
(a tensor, or None to keep the gradient) is graph like the rest: it fuses with the
backward kernels. A `backward()` whose graph holds a hooked node builds its gradients
at once, so hooks run inside `backward()` as torch's do.

- A non-leaf's hooks hang on its node (`GRAD_HOOKS`): they see the sum of every
  gradient that reaches it, before it flows on, and `retain_grad()` keeps the hooked
  gradient (as torch, where the retaining hook always runs last). Equal expressions are
  one node here (`ir/node.py`), so a hook on `x * 2` also sees the gradient of another
  `x * 2` built from the same `x`. A view gets a node of its own above its view node
  for the ops built on it later (a view of a view would fold past it); ops built on a
  view's view before the hook was registered folded past it already and are not seen.
- A leaf's hooks are kept by tensor (its node changes at each optimizer step) and run
  on each gradient backward() gives it, before it is added to `.grad`.

>>> import fusegrad as fg
>>> x = fg.tensor([1.0, 2.0], requires_grad=True)
>>> y = x * 3
>>> handle = y.register_hook(lambda g: g * 10)
>>> y.sum().backward()
>>> x.grad.tolist()
[30.0, 30.0]
>>> handle.remove()
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence

from . import core
from .errors import GradError, ShapeError, fail
from .ir import node as N
from .ir.autodiff import CUSTOM_VJP, GRAD_HOOKS
from .ir.ops import MOVEMENT, Ops
from .movement import cat

# leaves with hooks: id(tensor) -> (weak reference, {key: hook}); see `_leaf_entry`
LEAF_HOOKS: dict[int, tuple[weakref.ref, dict]] = {}
_keys = itertools.count()


class RemovableHandle:
    """What `register_hook` returns: `remove()` takes the hook off (so does leaving a
    `with` block), as torch.utils.hooks.RemovableHandle."""

    def __init__(self, hooks: dict, key: int, on_empty: Callable[[], None] | None = None):
        self._hooks, self.id, self._on_empty = hooks, key, on_empty

    def remove(self) -> None:
        self._hooks.pop(self.id, None)
        if not self._hooks and self._on_empty is not None:
            self._on_empty()

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def register_hook(t, hook: Callable) -> RemovableHandle:
    """Call `hook(grad)` with t's gradient at each backward pass; a tensor it returns
    replaces the gradient. See the module docstring."""
    if not t.requires_grad:
        fail(
            GradError,
            "register_hook",
            "cannot register a hook on a tensor that doesn't require gradient",
        )
    key = next(_keys)
    if t._is_leaf:
        hooks = _leaf_entry(t)
        hooks[key] = hook
        leaf_id = id(t)
        return RemovableHandle(hooks, key, lambda: _forget_leaf(leaf_id, hooks))
    node = t.node
    if node.op in MOVEMENT:
        # a view of this view would fold into one node that skips it: later ops build on
        # a node of t's own above it, so every gradient for t still passes the hooked one
        t.node = fresh_node(node)
    hooks = GRAD_HOOKS.get(node)
    if hooks is None:
        hooks = GRAD_HOOKS[node] = {}
    hooks[key] = _on_node(hook, node, "register_hook")
    ref = weakref.ref(node)
    return RemovableHandle(hooks, key, lambda: _forget_node(ref))


def _forget_node(ref: weakref.ref) -> None:
    node = ref()
    if node is not None and not GRAD_HOOKS.get(node, True):
        del GRAD_HOOKS[node]  # no hook left: backward() need not build gradients early


def _forget_leaf(leaf_id: int, hooks: dict) -> None:
    entry = LEAF_HOOKS.get(leaf_id)
    if entry is not None and entry[1] is hooks:
        del LEAF_HOOKS[leaf_id]


def _leaf_entry(t) -> dict:
    entry = LEAF_HOOKS.get(id(t))
    if entry is None or entry[0]() is not t:
        key = id(t)

        def forget(ref, key=key):
            if LEAF_HOOKS.get(key, (None,))[0] is ref:
                del LEAF_HOOKS[key]

        entry = LEAF_HOOKS[key] = (weakref.ref(t, forget), {})
    return entry[1]


def on_leaf_grad(leaf, grad):
    """`grad`, for `leaf`, through the leaf's hooks (backward() calls it)."""
    entry = LEAF_HOOKS.get(id(leaf))
    if entry is None or entry[0]() is not leaf:
        return grad
    for hook in list(entry[1].values()):
        changed = hook(grad)
        if changed is not None:
            grad = _checked(changed, grad.shape, grad.dtype, "register_hook")
    return grad


def _on_node(hook: Callable, node: N.Node, op: str) -> Callable:
    """The user's tensor hook as a function of gradient nodes (`GRAD_HOOKS`'s form)."""
    shape, dtype = node.shape, node.dtype

    def run(g: N.Node):
        changed = hook(core.Tensor(g))
        return None if changed is None else _checked(changed, shape, dtype, op).node

    return run


def _checked(t, shape, dtype, op: str):
    if not isinstance(t, core.Tensor) or t.shape != shape:
        fail(
            ShapeError,
            op,
            f"hook returned {getattr(t, 'shape', type(t).__name__)}, expected a gradient "
            f"tensor of shape {shape}",
        )
    return t if t.dtype == dtype else t.to(dtype=dtype)


def fresh_node(n: N.Node) -> N.Node:
    """A node of `n`'s exact value that has no hook or gradient rule yet and does not
    pass through a node that has one, to hang a new one on.

    Nodes are hash-consed: `n + (-0.0)` built again for the same `n` (the same module
    called again on the same input, while the first call's graph is alive) is the
    node the first call hooked, and a chain through it would run the old hooks too. So
    this searches, breadth first, the exact identities built of `+ (-0.0)`, `* 1` and
    an even number of negations for the first node free of both."""
    minus_zero, one = N.const(-0.0, n.shape, n.dtype), N.const(1, n.shape, n.dtype)
    frontier = [(n, False)]  # (node, negated)
    while True:
        following = []
        for y, negated in frontier:
            for z, flipped in ((N.add(y, minus_zero), negated), (N.mul(y, one), negated)) + (
                ((N.unary(Ops.NEG, y), not negated),)
            ):
                if z in GRAD_HOOKS or z in CUSTOM_VJP:
                    continue
                if not flipped:
                    return z
                following.append((z, flipped))
        frontier = following


def hooked_together(tensors: Sequence, on_grads: Callable) -> list:
    """The float tensors `tensors` (requiring grad) as new tensors of one node, so that
    `on_grads(grads)` sees all their gradients at once (a list, zeros where one gets
    none) when a backward pass reaches them, and may return replacements (a list, None
    meaning unchanged). A module's backward hook is built on this (nn/hooks.py)."""
    shapes = [t.shape for t in tensors]
    if len(tensors) == 1:
        joint = tensors[0]
    else:
        if len({t.dtype for t in tensors}) > 1:
            raise NotImplementedError(
                "backward hooks on tensors of different dtypes "
                f"({', '.join(t.dtype.name for t in tensors)}) are not supported"
            )
        joint = cat([t.reshape(-1) for t in tensors])
    node = fresh_node(joint.node)
    sizes = [t.numel() for t in tensors]

    def split(g: core.Tensor) -> list:
        if len(tensors) == 1:
            return [g]
        out, start = [], 0
        for shape, size in zip(shapes, sizes):
            out.append(g[start : start + size].reshape(shape))
            start += size
        return out

    def run(g: N.Node):
        grads = split(core.Tensor(g))
        changed = on_grads(grads)
        if changed is None:
            return None
        new = [
            old if c is None else _checked(c, old.shape, old.dtype, "backward hook")
            for c, old in zip(changed, grads)
        ]
        return new[0].node if len(new) == 1 else cat([c.reshape(-1) for c in new]).node

    GRAD_HOOKS[node] = {next(_keys): run}
    out = joint._make(node, *tensors)
    return split(out)
