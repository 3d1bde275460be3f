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
  `x * 2` built from the same `x` before the hook (registering warns where such a tensor
  is alive; one built after it gets a node of its own). A view gets a node of its own
  above its view node for the ops built on it later (a view of a view would fold past
  it); ops built on a view's view before the hook was registered folded past it already
  and are not seen.
- A leaf's hooks are kept by tensor (its node changes at each optimizer step) and run
  on each gradient backward() gives it, before it is added to `.grad`.
- `Tensor.register_post_accumulate_grad_hook` (leaves only): `hook(leaf)` after
  backward() has added the leaf's gradient to its `.grad`, as torch's; kept by tensor too.
  backward() accumulates every gradient of the call first, then runs these hooks (in the
  order it reached the leaves), where torch runs each as its leaf's gradient is
  accumulated: a hook that reads *another* leaf's `.grad` may see it already summed here.
  A hook that reads its leaf's `.grad` computes the call's gradients together (they share
  the backward pass), so an optimizer step in the hook ("optimizer in backward") updates
  the parameter from that value and the other gradients are unaffected.

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

import gc
import itertools
import warnings
import weakref
from collections.abc import Callable, Sequence

from .errors import GradError, ShapeError, fail
from .ir import node as N
from .ir.autodiff import (
    CUSTOM_VJP,
    GRAD_HOOKS,
    leave_without_gradient,
    own_node,
    received_gradient,
    with_vjp,
)
from .ir.dtypes import float32, float64
from .ir.ops import MOVEMENT, Ops
from .movement import cat
from .tensor_base import TensorBase

# non-leaf nodes hooked by `register_hook` -> a weak reference to the tensor that owns the
# hooks (see `separate`)
HOOKED_BY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# leaves with hooks: id(tensor) -> (weak reference, {key: hook}); see `_leaf_entry`
LEAF_HOOKS: dict[int, tuple[weakref.ref, dict]] = {}
# leaves with post-accumulate hooks, in the same form
POST_ACCUMULATE_HOOKS: dict[int, tuple[weakref.ref, dict]] = {}
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


def _warn_if_shared(t, node) -> None:
    """Warn where another live tensor already is the same expression as t: equal
    expressions are one node, so t's hook would also see the gradient that flows through
    the other one (torch keeps them apart). One built after the hook gets its own node
    (`separate`); one built before cannot be told apart, so say so instead of summing
    silently. Looking costs a scan of the live objects (a few ms in a large program), paid
    only by `register_hook` on a non-leaf."""
    others = [
        o
        for o in gc.get_referrers(node)
        if o is not t and isinstance(o, TensorBase) and o.node is node
    ]
    if others:
        warnings.warn(
            f"register_hook: another live tensor of shape {tuple(t.shape)} is the same "
            "expression as this one and was built before the hook, so they share one graph "
            "node: the hook also sees the gradient that flows through the other tensor "
            "(torch keeps them apart). Build the expression once and reuse it, or register "
            "the hook before building the other.",
            UserWarning,
            stacklevel=3,
        )


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
    _warn_if_shared(t, node)
    if node.op in MOVEMENT:
        # a view of this view would fold into one node that skips it: later ops build on
        # a node of t's own above it, so every gradient for t still passes the hooked one
        t.node = fresh_node(node)
    hooks = GRAD_HOOKS.get(node)
    if hooks is None:
        hooks = GRAD_HOOKS[node] = {}
    hooks[key] = _on_node(hook, node, "register_hook", t._plain)
    HOOKED_BY[node] = weakref.ref(t)
    ref = weakref.ref(node)
    return RemovableHandle(hooks, key, lambda: _forget_node(ref))


def _forget_node(ref: weakref.ref) -> None:
    node = ref()
    if node is not None and not GRAD_HOOKS.get(node, True):
        del GRAD_HOOKS[node]  # no hook left: backward() need not build gradients early
        HOOKED_BY.pop(node, None)


def separate(n: N.Node, parents) -> N.Node:
    """`n`, or a node of its exact value whose gradient does not pass through `n`, for a
    new tensor whose op built `n` again while `n` carries another tensor's hooks.

    Equal expressions are one node: `y2 = x * 2` after `y1 = x * 2; y1.register_hook(h)`
    is y1's node, and h would see y2's gradient too (torch's hook sees y1's alone). So y2
    gets n rebuilt over `s + (-0.0)` for its first source s that is not a constant. A
    result that folded back to n from n itself (a view of a view of y1) is derived from
    y1, and keeps n. (Tensors that were equal before the hook was registered share it:
    a known limit, in the README.)"""
    owner = HOOKED_BY.get(n)
    if owner is None or owner() is None or not n.srcs:
        return n
    if any(p.node is n for p in parents) or id(n) in {
        id(m) for m in N.toposort([p.node for p in parents])
    }:
        return n
    srcs = list(n.srcs)
    for i, s in enumerate(srcs):
        if s.dtype.is_float and s.op is not Ops.CONST:
            srcs[i] = fresh_node(s)
            return N.make(n.op, tuple(srcs), n.arg, n.shape, n.dtype)
    return n


def _forget_leaf(leaf_id: int, hooks: dict, registry: dict = LEAF_HOOKS) -> None:
    entry = registry.get(leaf_id)
    if entry is not None and entry[1] is hooks:
        del registry[leaf_id]


def _leaf_entry(t, registry: dict = LEAF_HOOKS) -> dict:
    entry = registry.get(id(t))
    if entry is None or entry[0]() is not t:
        key = id(t)

        def forget(ref, key=key):
            if registry.get(key, (None,))[0] is ref:
                del registry[key]

        entry = registry[key] = (weakref.ref(t, forget), {})
    return entry[1]


def register_post_accumulate_grad_hook(t, hook: Callable) -> RemovableHandle:
    """Call `hook(t)` after each backward() has accumulated t's gradient into `t.grad`
    (a leaf that requires grad); the hook returns None. See the module docstring."""
    if not t.requires_grad:
        fail(
            GradError,
            "register_post_accumulate_grad_hook",
            "cannot register a hook on a tensor that doesn't require gradient",
        )
    if not t._is_leaf:
        fail(
            GradError,
            "register_post_accumulate_grad_hook",
            "post accumulate grad hooks cannot be registered on non-leaf tensors",
        )
    key = next(_keys)
    hooks = _leaf_entry(t, POST_ACCUMULATE_HOOKS)
    hooks[key] = hook
    leaf_id = id(t)
    return RemovableHandle(hooks, key, lambda: _forget_leaf(leaf_id, hooks, POST_ACCUMULATE_HOOKS))


def after_accumulation(leaves) -> None:
    """Run the post-accumulate hooks of `leaves` (backward() calls it once every gradient
    of the call is in `.grad`)."""
    for leaf in leaves:
        entry = POST_ACCUMULATE_HOOKS.get(id(leaf))
        if entry is None or entry[0]() is not leaf:
            continue
        for hook in list(entry[1].values()):
            if hook(leaf) is not None:
                fail(
                    GradError,
                    "register_post_accumulate_grad_hook",
                    "Tensor post accumulate grad hooks should return None.",
                )


def on_leaf_grad(leaf, grad):
    """`grad`, for `leaf`, through the leaf's hooks (backward() calls it; `grad` is None
    where a rule gave the leaf no gradient, as torch's)."""
    entry = LEAF_HOOKS.get(id(leaf))
    if entry is None or entry[0]() is not leaf:
        return grad
    for hook in list(entry[1].values()):
        changed = hook(grad)
        if changed is not None:
            grad = _checked(changed, leaf.shape, leaf.dtype, "register_hook")
    return grad


def _on_node(hook: Callable, node: N.Node, op: str, plain: type) -> Callable:
    """The user's tensor hook as a function of gradient nodes (`GRAD_HOOKS`'s form), which
    it is handed as tensors of class `plain`."""
    shape, dtype = node.shape, node.dtype

    def run(g: N.Node):
        changed = hook(plain(g))
        return None if changed is None else _checked(changed, shape, dtype, op).node

    run.user_hook = hook  # (called with None for an output that got no gradient: see below)
    return run


def call_with_none(n: N.Node) -> None:
    """Call the `register_hook` hooks on node `n` with None, as torch calls a hook on an
    output of a multi-output op that got no gradient while another output did."""
    for run in list(GRAD_HOOKS.get(n, {}).values()):
        hook = getattr(run, "user_hook", None)
        if hook is not None:
            hook(None)


def _checked(t, shape, dtype, op: str):
    if not isinstance(t, TensorBase) or t.shape != shape:
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
    if 0 in n.shape:  # every node of an empty value is its one constant: none is free
        return N.unshared_const(0, n.shape, n.dtype, n.device)
    minus_zero, one = N.const(-0.0, n.shape, n.dtype), N.const(1, n.shape, n.dtype)
    frontier = [(n, False)]  # (node, negated)
    seen = {id(n)}  # (a constant's identities fold back into constants: never twice)
    while frontier:
        following = []
        for y, negated in frontier:
            for z, flipped in ((N.add(y, minus_zero), negated), (N.mul(y, one), negated)) + (
                ((N.unary(Ops.NEG, y), not negated),)
            ):
                if z in GRAD_HOOKS or z in CUSTOM_VJP or id(z) in seen:
                    continue
                seen.add(id(z))
                if not flipped:
                    return z
                following.append((z, flipped))
        frontier = following
    # every identity folded back into a node already taken (constants): one of its own
    return N.contiguous(n, f"a hook's own node {next(_anchors)}")


_anchors = itertools.count()


def hooked_together(tensors: Sequence, on_grads: Callable, materialize: bool = True) -> list:
    """The float tensors `tensors` (requiring grad) as new tensors of one node, so that
    `on_grads(grads)` sees all their gradients at once (a list) when a backward pass
    reaches them, and may return replacements (a list, None meaning unchanged). A module's
    backward hook is built on this (nn/hooks.py).

    A tensor that received no gradient is given as zeros (`materialize`) or as None. In a
    replacement, None means no gradient: that tensor's sources get none from here (torch's
    None, which leaves a leaf's `.grad` as it was). Tensors of several dtypes share a node
    of a dtype that holds each exactly."""
    shapes = [t.shape for t in tensors]
    dtypes = [t.dtype for t in tensors]
    if len(tensors) == 1:
        joint = tensors[0]
    else:
        wide = dtypes[0] if len(set(dtypes)) == 1 else _holding_each(dtypes)
        joint = cat([t.reshape(-1).cast(wide) for t in tensors])
    node = fresh_node(joint.node)
    sizes = [t.numel() for t in tensors]
    # the rule keeps the sources' nodes, not the tensors (see function.py's _attach)
    sources = [t.node for t in tensors]
    plain = joint._plain  # (the class: the rule must not hold a tensor)

    def split(g: TensorBase) -> list:
        if len(tensors) == 1:
            return [g]
        out, start = [], 0
        for shape, size, dtype in zip(shapes, sizes, dtypes):
            out.append(g[start : start + size].reshape(shape).cast(dtype))
            start += size
        return out

    out = split(joint._make(node, *tensors))
    if len(tensors) > 1:  # nodes of their own, to see which receive a gradient
        out = [p._make(own_node(p.node), p) for p in out]
    refs = [weakref.ref(p.node) for p in out]

    def received(k: int) -> bool:
        piece = refs[k]()
        return len(tensors) == 1 or (piece is not None and received_gradient(piece))

    def rule(g: N.Node):
        grads = split(plain(g))
        seen = [g if materialize or received(k) else None for k, g in enumerate(grads)]
        changed = on_grads(seen)
        if changed is None:
            return [(s, g.node) for s, g in zip(sources, grads)]
        pairs = []
        for s, c, old in zip(sources, changed, grads):
            if c is None:
                leave_without_gradient(s)  # torch's None: no gradient from here
            else:
                pairs.append((s, _checked(c, old.shape, old.dtype, "backward hook").node))
        return pairs

    with_vjp(node, rule)
    # listed, doing nothing, so that backward() builds the gradient at once: the hooks
    # run inside backward(), as torch's
    GRAD_HOOKS[node] = {next(_keys): _keep}
    return out


def _keep(g: N.Node) -> None:
    return None


def _holding_each(dtypes: list):
    """A float dtype that holds each of `dtypes` exactly."""
    return float64 if any(d.itemsize >= 8 for d in dtypes) else float32
