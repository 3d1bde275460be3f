"""PyTorch's autograd API over symbolic gradients: backward(), .grad, fusegrad.grad().

There is no tape. A leaf that requires grad is a buffer node of its own; at
`backward()` the loss's graph is differentiated symbolically
(`fusegrad.ir.autodiff`) with respect to every such leaf it reaches, and each
leaf's `.grad` becomes a lazy tensor: reading it (or the optimizer step that
uses it) compiles the backward kernels, fused with whatever else is realized
with them.

>>> import fusegrad as fg
>>> x = fg.tensor([[1., 2, 3], [3., 2, 1]], requires_grad=True)
>>> y = fg.tensor([[3., 2, 1], [1., 2, 3]], requires_grad=True)
>>> ((x - y) ** 3).sum().backward()
>>> x.grad.tolist()
[[12.0, 0.0, 12.0], [12.0, 0.0, 12.0]]
"""

from __future__ import annotations

import threading
import weakref

from . import autograd_state, shared_memory
from .autograd_state import anomaly
from .carried import from_constants, note_constant_value, note_differentiated, with_carried
from .errors import GradError, ShapeError, at_callers_site, fail
from .ir import node as N
from .ir.autodiff import GRAD_HOOKS, NO_DERIVATIVE, gradients
from .ir.ops import Ops
from .ir.sites import site_of
from .ir.weaktable import sweep
from .runtime import attribution as _sites
from .runtime import forksafe
from .runtime.engine import engine
from .tensor_base import TensorBase, as_tensor_like
from .tensor_hooks import LEAF_HOOKS, POST_ACCUMULATE_HOOKS, after_accumulation, on_leaf_grad
from .versions import _updated, check_unmodified, retire

# every tensor made a differentiable leaf, by id() (Tensor's == is elementwise, so tensors
# cannot be set members): id -> weak reference. Guarded by a lock: threads register leaves
# while others run backward(). Re-entrant: a garbage collection inside the locked region
# (an allocation there) may run a dead leaf's callback on this very thread.
_leaves: dict[int, weakref.ref] = {}
_leaves_lock = forksafe.RLock()
# roots already backwarded: id -> weak reference (no callback: a root's death runs no
# Python code; dead entries are swept when the table has doubled, as ir/node.py's table)
_consumed: dict[int, weakref.ref] = {}
_consumed_sweep_at = [1024]
_consumed_sweeping = forksafe.Lock()


class _Local(threading.local):
    """`pending`: roots this thread backwarded since its last step; `graded`: the tensors
    it gave a gradient since then, which `settle` computes (None until the first)."""

    pending = None
    graded = None


_local = _Local()


def register_leaf(t) -> None:
    """Make `t` a differentiable leaf: its own buffer node, tracked for backward()."""
    if t.node.op is not Ops.BUFFER:
        realize(t)
    # a fresh node, so that no other tensor (a detached copy, say) shares it
    t.node = N.buffer(engine.value(t.node), t.shape, t.dtype)
    t._is_leaf = True
    _track(_leaves, t)


def _track(table: dict, t) -> None:
    """Keep a weak reference to `t` in `table` under id(t), gone when t is."""
    key = id(t)

    # the lock is bound now: at interpreter exit the module's globals are cleared before
    # the last tensors die
    def forget(ref, key=key, lock=_leaves_lock):
        with lock:
            if table.get(key) is ref:
                del table[key]

    with _leaves_lock:
        table[key] = weakref.ref(t, forget)


# non-leaf tensors whose gradient backward() keeps (`Tensor.retain_grad()`), by id();
# guarded by `_leaves_lock` as the leaves are
_retained: dict[int, weakref.ref] = {}


def retain_grad(t) -> None:
    """Keep t's gradient in `t.grad` at the next backward() calls (as torch: a no-op on a
    leaf, which keeps its gradient anyway)."""
    if not t.requires_grad:
        fail(GradError, "retain_grad", "can't retain_grad on Tensor that has requires_grad=False")
    if not t._is_leaf:
        _track(_retained, t)


def retains_grad(t) -> bool:
    """Whether retain_grad() was called on the non-leaf tensor t."""
    e = _retained.get(id(t))
    return e is not None and e() is t


def _live_retained() -> list:
    with _leaves_lock:
        refs = list(_retained.values())
    return [t for t in (r() for r in refs) if t is not None and not t._is_leaf]


def _live_leaves() -> list:
    with _leaves_lock:
        refs = list(_leaves.values())
    out = []
    for r in refs:
        t = r()
        if t is not None and t.requires_grad and t._is_leaf:
            out.append(t)
    return out


def _grad_output(t, gradient, op: str):
    if gradient is None:
        if t.numel() != 1:
            fail(
                GradError,
                op,
                f"grad can be implicitly created only for scalar outputs; "
                f"this output has shape {t.shape}, pass a gradient of that shape",
            )
        return N.const(1.0, t.shape, t.dtype)
    g = as_tensor_like(gradient, t)
    if not isinstance(g, TensorBase) or g.shape != t.shape:
        fail(ShapeError, op, f"gradient has shape {g.shape}, output has shape {t.shape}")
    return N.cast(g.node, t.dtype)


class PendingGrads:
    """The gradients of one backward() call, not built yet.

    backward() only finds which leaves get a gradient; the backward graph is built
    (`fusegrad.ir.autodiff`) when one of them is first used. An optimizer step whose
    gradients are all still pending, and whose graph it has seen before, runs the
    cached fused plan of forward + backward + update without building the backward or
    update graphs at all (`frontend/stepcache.py`).
    """

    def __init__(self, root, root_grad, targets: list, site: str | None):
        self.root, self.root_grad, self.site = root, root_grad, site
        self.targets = targets  # the leaves' nodes when backward() was called
        self.grads: list | None = None
        # targets that get no gradient because a rule gave none on purpose (an
        # autograd.Function's backward, a module's backward hook returning None)
        self.undefined: set[int] = set()
        self._lock = None  # made by the first materialize(): a cached step never builds
        # gradient clippings deferred to the build (`tensor.clip_when_built`), in order: a
        # cached step that finds them unbuilt runs the plan that clips, keyed by them
        self.clips: list = []
        self.applied: list = []  # the clips, once the build has run them (in order)

    def clip_count(self) -> int:
        """How many clippings of these gradients were asked for so far: a copy of a
        gradient made now (`LazyGrad.seen`) is its value after that many."""
        return len(self.applied) + len(self.clips)

    def value_of(self, index: int, seen: int):
        """The node of gradient `index` as it was after the first `seen` clippings (those
        of them that clipped it): the value of a copy made then, whatever came later."""
        grads = self.materialize()
        node = grads[index]
        for clip in self.applied[:seen]:
            node = clip.after.get(index, node)
        return node

    def materialize(self) -> list:
        if self.grads is not None:
            return self.grads
        if self._lock is None:
            with _pending_lock:
                if self._lock is None:
                    self._lock = forksafe.Lock()
        with self._lock:
            if self.grads is None:
                cut: list = []
                with _sites.fixed(self.site):
                    grads = gradients(self.root, self.root_grad, self.targets, cut=cut)
                if cut:
                    self.undefined = _undefined(grads, self.targets, cut)
                self.grads = [
                    N.detach(g) if g is not None else N.const(0.0, t.shape, t.dtype)
                    for g, t in zip(grads, self.targets)
                ]
                clips, self.clips = self.clips, []
                self.applied = clips
            else:
                clips = []
        try:
            for clip in clips:  # (outside the lock: a clip reads these gradients)
                clip.apply()
        except BaseException:  # raised at every build, never read unclipped
            self.grads, self.clips, self.applied = None, clips, []
            raise
        return self.grads


_pending_lock = forksafe.Lock()  # guards making a PendingGrads' own lock


def _undefined(grads: list, targets: list, cut: list) -> set[int]:
    """The targets without a gradient that lie under a node a rule left without one: torch
    leaves their `.grad` as it was (None), where a target reached only through ops of zero
    derivative gets zeros."""
    missing = [k for k, g in enumerate(grads) if g is None]
    if not missing:
        return set()
    below = {id(n) for n in N.toposort(cut, stop=lambda n: n.op is Ops.DETACH)}
    return {k for k in missing if id(targets[k]) in below}


def _reached_leaves(root, by_node: dict, seen: set | None = None) -> list:
    """The leaves (in `by_node`, keyed by node id) that a gradient from `root` reaches:
    along float values, never through a detach (`seen` gets the ids of the nodes walked)."""
    detach = Ops.DETACH
    blocked = NO_DERIVATIVE if len(NO_DERIVATIVE) else None  # (floor_divide's: raise now)
    seen = set() if seen is None else seen
    seen.add(id(root))
    stack, out = [root], []
    # (every cached training step walks its whole forward graph here: the loop is kept to
    # local names and one id() per source)
    pop, push, mark, leaf_of = stack.pop, stack.append, seen.add, by_node.get
    while stack:
        n = pop()
        if blocked is not None and n in blocked:
            blocked[n]()
        leaf = leaf_of(id(n))
        if leaf is not None:
            out.append(leaf)
        if n.op is detach or n.dtype.kind != "f":  # (not a float: no gradient flows)
            continue
        for s in n.srcs:
            k = id(s)
            if k not in seen:
                mark(k)
                push(s)
    return out


def tensor_backward(t, gradient=None, retain_graph=None, create_graph: bool = False) -> None:
    """`t.backward()`: accumulate d(t)/d(leaf) into `leaf.grad` for every leaf requiring
    grad that t depends on."""
    if not t.requires_grad:
        fail(
            GradError,
            "backward",
            "element 0 of tensors does not require grad and does not have "
            "a grad_fn (call requires_grad_() on the leaves, or check for no_grad())",
        )
    if graph_consumed(t):
        fail(
            GradError,
            "backward",
            "trying to backward through the graph a second time; "
            "pass retain_graph=True to the first backward() if you need to",
        )
    root_grad = _grad_output(t, gradient, "backward")
    check_unmodified(t.node, "backward")  # a leaf updated in place since t was built
    by_node = {id(leaf.node): leaf for leaf in _live_leaves()}
    retained = _live_retained() if _retained else []
    for r in retained:  # non-leaves whose gradient is kept: targets too
        by_node.setdefault(id(r.node), r)
    undefined: set[int] = set()
    with at_callers_site():
        if create_graph:
            leaves = list(by_node.values())
            grads = gradients(t.node, root_grad, [leaf.node for leaf in leaves])
            fresh = [
                None if g is None else t._plain(g, requires_grad=True, leaf=False) for g in grads
            ]
        else:
            walked: set = set()
            leaves = _reached_leaves(t.node, by_node, walked)
            pending = PendingGrads(t.node, root_grad, [x.node for x in leaves], _sites.capture())
            fresh = [t._lazy_grad(pending, i) for i in range(len(leaves))]
            if GRAD_HOOKS and any(id(n) in walked for n in list(GRAD_HOOKS.keys())):
                pending.materialize()  # user code in the gradient (tensor_hooks.py): run it now
                undefined = pending.undefined
                for k in undefined:
                    fresh[k] = None  # torch's None: .grad stays as it was
            if anomaly.enabled and anomaly.check_nan:
                _check_nan(pending, leaves, fresh)
    if create_graph:  # (the other branch walked the graph already)
        walked = set()
        _reached_leaves(t.node, by_node, walked)
    note_differentiated(walked)
    if autograd_state.has_empty_links():
        _zero_through_empty(walked, by_node, leaves, fresh, undefined, create_graph)
    if retained:  # a retained tensor with another target's node (equal nodes are one node)
        at = {id(x.node): k for k, x in enumerate(leaves)}
        for r in retained:
            k = at.get(id(r.node))
            if k is not None and leaves[k] is not r:
                leaves.append(r)
                fresh.append(fresh[k])
    graded = _local.graded
    if graded is None:
        graded = _local.graded = {}
    accumulated = []
    for k, (leaf, gt) in enumerate(zip(leaves, fresh)):
        if LEAF_HOOKS and (gt is not None or k in undefined):
            gt = on_leaf_grad(leaf, gt)  # (torch calls them with None where a rule gave none)
        if gt is not None:
            leaf._grad = gt if leaf._grad is None else leaf._grad + gt
            graded[id(leaf)] = weakref.ref(leaf)
            accumulated.append(leaf)
    if not (retain_graph or create_graph):
        _consumed[id(t)] = weakref.ref(t)
        if len(_consumed) > _consumed_sweep_at[0] and sweep(_consumed, _dead, _consumed_sweeping):
            _consumed_sweep_at[0] = max(1024, 2 * len(_consumed))

        drop_graph(t)  # a value already computed no longer needs the graph behind it
    pending_roots = _local.pending
    if pending_roots is None:
        pending_roots = _local.pending = []
    pending_roots.append(weakref.ref(t))
    if POST_ACCUMULATE_HOOKS:  # (last: a hook may step an optimizer, which settles all this)
        after_accumulation(accumulated)


# anomaly mode looks for the op that made a NaN among at most this many nodes of the
# gradient's graph (each is computed: a debugging mode's cost, paid only on a NaN)
_ANOMALY_MAX_NODES = 4096


def _check_nan(pending: PendingGrads, leaves: list, fresh: list) -> None:
    """Anomaly mode's check (`detect_anomaly`): compute this backward's gradients now and
    raise torch's RuntimeError if one holds a NaN, naming the first op of the gradient's
    graph whose value is NaN (its site: the op's label and the user's line). torch checks
    each backward function's outputs as it runs; here the whole backward graph is built at
    once, so the gradients are checked after, and the op is found by computing the graph's
    nodes (up to `_ANOMALY_MAX_NODES`; beyond, the leaf is named instead)."""
    checked = [
        (k, g.isnan().any()) for k, g in enumerate(fresh) if g is not None and g.dtype.kind == "f"
    ]
    if checked:
        realize(*(flag for _, flag in checked))  # (one plan for every gradient and check)
    for k, flag in checked:
        if not bool(flag.item()):
            continue
        leaf = leaves[k]
        what = f"the gradient of a tensor of shape {tuple(leaf.shape)} (input {k} of backward)"
        node = _first_nan(pending.materialize()[k], leaf)
        if node is not None:
            site = site_of(node)
            label = site.label if site is not None and hasattr(site, "label") else None
            where = f" ({site})" if site is not None else ""
            what = f"'{label or node.op.name.lower()}'{where}"
        raise RuntimeError(  # torch's words, with fusegrad's op in place of its Function
            f"Function {what} returned nan values in its 0th output. (anomaly mode: "
            "fusegrad checks the gradients after building the whole backward graph)"
        )


def _first_nan(root, like):
    """The first op (in order of computation) of `root`'s graph whose value holds a NaN,
    or None (too large a graph, or no op of it: the NaN is an input's). `like`: a tensor,
    whose class builds tensors of the nodes."""
    nodes = [
        n
        for n in N.toposort([root])
        if n.srcs and n.dtype.kind == "f" and n.op is not Ops.DETACH and n.shape is not None
    ]
    if not nodes or len(nodes) > _ANOMALY_MAX_NODES:
        return None
    flags = [like._plain(n, requires_grad=False).isnan().any() for n in nodes]
    realize(*flags)
    for n, f in zip(nodes, flags):
        if bool(f.item()):
            return n
    return None


def _zero_through_empty(walked: set, by_node, leaves: list, fresh: list, undefined, create_graph):
    """Give a zero gradient to each leaf that t reaches only through empty values, as torch
    does (`lin(x[:0]).sum().backward()` leaves zeros in the weight's .grad, and an optimizer
    with momentum or weight decay then still updates it). An empty value folds to a
    constant without sources (ir/node.py), so the gradient pass finds no path to what it
    was computed from; the links `autograd_state.link_empty` keeps do (as `grad()` follows
    them). `walked`: the ids of the nodes the gradient pass reaches. Extends `leaves` and
    `fresh` in place."""
    starts = autograd_state.linked_among(walked)
    if not starts:
        return
    at = {id(x): k for k, x in enumerate(leaves)}
    seen, stack = set(walked), [p for n in starts for p in autograd_state.empty_parents(n)]
    while stack:
        n = stack.pop()
        if id(n) in seen:  # (a node the gradient pass reaches has its gradient from it)
            continue
        seen.add(id(n))
        leaf = by_node.get(id(n))
        if leaf is not None and leaf.requires_grad:
            k = at.get(id(leaf))
            if k is None or (fresh[k] is None and k not in undefined):
                zero = N.const(0, leaf.shape, leaf.dtype, leaf.node.device)
                g = leaf._plain(zero, requires_grad=create_graph, leaf=not create_graph)
                if k is None:
                    at[id(leaf)] = len(leaves)
                    leaves.append(leaf)
                    fresh.append(g)
                else:
                    fresh[k] = g
        if n.op is Ops.DETACH or n.dtype.kind != "f":
            continue
        stack.extend(n.srcs)
        stack.extend(autograd_state.empty_parents(n))


def graph_consumed(t) -> bool:
    """Whether backward() used t's graph without retain_graph (so the graph can be freed)."""
    ref = _consumed.get(id(t))
    return ref is not None and ref() is t


def realize(*tensors) -> list:
    """Compute several tensors at once, sharing work between them; returns the kernels run.

    A realized tensor whose graph no longer needs differentiating (it does not
    require grad, or backward() already used its graph) is re-pointed at its
    buffer, so the graph that produced it, and every buffer in it, can be freed.
    """
    if shared_memory._shared:  # (tensors shared between processes: their values now)
        shared_memory.refresh()
    nodes = [t.node for t in tensors]
    records = engine.realize(nodes)
    for t in tensors:
        if t._is_leaf or not t.requires_grad or graph_consumed(t):
            drop_graph(t)
    return records


def drop_graph(t) -> None:
    """Point a realized tensor at its buffer alone."""
    if t.node.op is not Ops.BUFFER:
        buf = engine.value(t.node)
        if buf is not None:
            t.node = N.buffer(buf, t.shape, t.dtype)


def _dead(ref: weakref.ref) -> bool:
    return ref() is None


def take_pending_outputs() -> list:
    """The tensors backward() was called on since the last call, still alive and unrealized.

    An optimizer step realizes them together with the new parameters, so the
    forward pass runs once and `loss.item()` after `step()` costs nothing.
    """
    pending = _local.pending or []
    _local.pending = []
    _local.graded = {}  # the step computes the gradients too: `settle` need not
    out = []
    for ref in pending:
        t = ref()
        if t is not None and engine.value(t.node) is None:
            out.append(t)
    return out


def _given_grads():
    """The current `.grad` of each tensor of this thread that backward() gave a gradient
    since the last optimizer step, still alive."""
    for ref in list((_local.graded or {}).values()):
        leaf = ref()
        g = None if leaf is None else leaf._grad
        if g is not None:
            yield g


def sibling_grads(grad) -> list:
    """The gradients that the backward() call which gave `grad` (a `LazyGrad`) gave other
    tensors of this thread, still theirs and not computed yet."""
    return [
        g
        for g in _given_grads()
        if g is not grad and getattr(g, "pending", None) is grad.pending and not g._has_value()
    ]


def settle(value) -> None:
    """Compute tensor `value` now; if gradients that backward() calls of this thread gave
    since the last optimizer step were read (so `value` may use them) and are not computed
    yet, compute them in the same plan, with the losses backward() was called on (so the
    forward and backward passes run once, and `loss.item()` after costs nothing).

    An update without history calls it (`overwrite`, below): a manual SGD step
    `p -= lr * p.grad` computes the step's forward, backward and first update together,
    and each further parameter's update from values in memory. Gradients nobody read are
    left alone, for the optimizer step's cached plan (`stepcache.py`)."""
    grads = {}
    for g in _given_grads():
        if g.requires_grad or (type(g) is g._lazy_grad and not g.built):
            continue
        if not g._has_value():
            grads[id(g)] = g
    if not grads:
        realize(value)
        return
    pending = take_pending_outputs()  # (which forgets `graded`)
    # the step's boundary: the lazy values alive now too (carried.py)
    extra = with_carried(value, [value, *grads.values(), *pending], [])
    realize(value, *grads.values(), *pending, *extra)


def overwrite(t, value, counted: bool = True) -> None:
    """Give tensor `t` the value of tensor `value` (already checked: same shape, a dtype
    `t` can hold) with no history: `t` stays the same leaf, or becomes one that does
    not require grad. `counted`: bump t's version (an update through `.data` does not,
    as in PyTorch). Computes the value now where a lazy one would chain steps together
    (see the module docstring)."""
    old = t.node
    if counted:
        t._version += 1
    parameter = t.requires_grad and t._is_leaf
    value = value.detach()
    if parameter or (old in _updated and engine.value(old) is None):
        constant = not parameter and from_constants(value)
        settle(value)
        if constant:  # (a table written piece by piece: still a constant's for `carried`)
            note_constant_value(value)
    t.assign_(value)
    if parameter:
        retire(old, t, counted)
    elif t.node.op is not Ops.BUFFER:
        _updated.add(t.node)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
):
    """Gradients of `outputs` with respect to `inputs`, returned instead of accumulated
    (torch.autograd.grad's signature).

    With `create_graph=True` the results are differentiable themselves, so
    `grad(grad(y, x, create_graph=True)[0].sum(), x)` is a second derivative. An input
    the outputs do not depend on raises, gets None with `allow_unused=True`, or zeros with
    `materialize_grads=True` (which implies allow_unused, as torch's). `only_inputs` is
    ignored, as torch's (deprecated there); `is_grads_batched=True` raises
    NotImplementedError (call grad once per row of the grad_outputs, or use
    `fusegrad.func.vmap` over `fusegrad.func.vjp`). `retain_graph` changes nothing: the
    graph is symbolic and never freed by grad().
    """
    if is_grads_batched:
        raise NotImplementedError(
            "torch.autograd.grad(is_grads_batched=True) is not supported by fusegrad: call "
            "grad() once per row of grad_outputs, or vmap fusegrad.func.vjp"
        )
    if materialize_grads and allow_unused is False:
        raise ValueError(  # torch's words
            "Expected allow_unused to be True or not passed when materialize_grads=True, "
            "but got: allow_unused=False."
        )
    if allow_unused is None:
        allow_unused = materialize_grads
    outputs = [outputs] if isinstance(outputs, TensorBase) else list(outputs)
    inputs_t = [inputs] if isinstance(inputs, TensorBase) else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, TensorBase):
        grad_outputs = [grad_outputs] * len(outputs)
    for o in outputs:
        if not o.requires_grad:
            fail(
                GradError,
                "grad",
                "an output does not require grad (no input it depends on requires grad)",
            )
    total: list = [None] * len(inputs_t)
    for o, go in zip(outputs, grad_outputs):
        check_unmodified(o.node, "grad")
        gs = gradients(o.node, _grad_output(o, go, "grad"), [x.node for x in inputs_t])
        for i, g in enumerate(gs):
            if g is not None:
                total[i] = g if total[i] is None else N.add(total[i], g)
    # an input reached only through empty values (x[1:1].sum()) gets a zero gradient, as
    # in torch: an empty value folds to a constant, so autodiff found no path to it
    result = []
    for x, g in zip(inputs_t, total):
        if g is None and x.requires_grad and _reached_through_empty(outputs, x.node):
            g = N.const(0, x.shape, x.dtype)
        if g is None and materialize_grads:
            g = N.const(0, x.shape, x.dtype)
        if g is None:
            if not allow_unused:
                fail(
                    GradError,
                    "grad",
                    f"one of the inputs (shape {x.shape}) was not used to compute "
                    "the outputs; pass allow_unused=True to get None for it",
                )
            result.append(None)
            continue
        node = g if create_graph else N.detach(g)
        g = x._plain(node, requires_grad=create_graph, leaf=not create_graph)
        result.append(on_leaf_grad(x, g) if LEAF_HOOKS else g)  # (a leaf's hooks, as torch)
    return tuple(result)


def backward(
    tensors,
    grad_tensors=None,
    retain_graph=None,
    create_graph: bool = False,
    grad_variables=None,
    inputs=None,
) -> None:
    """torch.autograd.backward: accumulate the gradients of `tensors` (weighted by
    `grad_tensors`, None for a one-element tensor) into the `.grad` of the leaves they
    depend on, as `sum(t.backward(g))`; with `inputs`, into those tensors' `.grad` alone
    (leaves or not). `grad_variables` is torch's deprecated name of `grad_tensors`.

    >>> import fusegrad as fg
    >>> x = fg.tensor([1.0, 2.0], requires_grad=True)
    >>> backward([(x * x).sum(), x * 3], [None, fg.tensor([1.0, 0.0])])
    >>> x.grad.tolist()
    [5.0, 4.0]
    """
    if grad_variables is not None:
        if grad_tensors is not None:
            raise RuntimeError(  # torch's words
                "'grad_tensors' and 'grad_variables' (deprecated) arguments both passed "
                "to backward(). Please only use 'grad_tensors'."
            )
        grad_tensors = grad_variables
    if inputs is not None and not isinstance(inputs, TensorBase) and len(inputs) == 0:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")  # torch's
    tensors = [tensors] if isinstance(tensors, TensorBase) else list(tensors)
    if grad_tensors is None or isinstance(grad_tensors, TensorBase):
        grad_tensors = [grad_tensors] * len(tensors)
    grad_tensors = list(grad_tensors)
    if len(grad_tensors) != len(tensors):
        raise RuntimeError(  # torch's words
            f"got {len(grad_tensors)} tensors and {len(tensors)} gradients"
        )
    if inputs is not None:
        inputs = [inputs] if isinstance(inputs, TensorBase) else list(inputs)
        gs = grad(
            tensors,
            inputs,
            grad_tensors,
            retain_graph=retain_graph,
            create_graph=create_graph,
            allow_unused=True,
        )
        for x, g in zip(inputs, gs):
            if g is not None:
                x._grad = g if x._grad is None else x._grad + g  # (a non-leaf's too)
        return
    for t, g in zip(tensors, grad_tensors):
        tensor_backward(t, g, retain_graph=retain_graph, create_graph=create_graph)


def _reached_through_empty(outputs, target) -> bool:
    """Whether `target` is upstream of an output, following the links that empty values
    keep to what they were computed from (`autograd_state.link_empty`)."""
    seen, stack = set(), [o.node for o in outputs]
    while stack:
        n = stack.pop()
        if n is target:
            return True
        if id(n) in seen or n.op is Ops.DETACH:
            continue
        seen.add(id(n))
        stack.extend(n.srcs)
        stack.extend(autograd_state.empty_parents(n))
    return False
