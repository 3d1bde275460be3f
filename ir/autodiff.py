"""Symbolic reverse-mode differentiation: gradients are more IR.

Each primitive has one vector-Jacobian rule, a function from the node and the
gradient of its output to the gradients of its sources, built from the same
node constructors as everything else. The backward graph is then scheduled,
fused and compiled like any other graph, and can itself be differentiated
(higher-order derivatives).

>>> import numpy as np
>>> from fusegrad.ir import node as N
>>> from fusegrad.ir.dtypes import float64
>>> from fusegrad.ir.reference import evaluate
>>> from fusegrad.runtime.buffer import Buffer
>>> x = N.buffer(Buffer.from_numpy(np.array(3.0), float64), (), float64)  # x * x of a
>>> y = N.mul(x, x)                                   # constant would fold to a constant
>>> (g,) = gradients(y, N.const(1.0, (), float64), [x])
>>> float(evaluate(g))
6.0
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable

from . import node as N
from .hooks import hooks
from .macro import (
    GRADIENTS,
    RULES,
    depends_on_layout,
    expansion,
    inputs_of,
    keep_expansion,
    macro,
    register,
)
from .node import Node, toposort
from .ops import MOVEMENT, Ops
from .sites import fixed, note, site_of


def _c(value, like: Node) -> Node:
    return N.const(value, like.shape, like.dtype)


def _neg(x: Node) -> Node:
    return N.unary(Ops.NEG, x)


def _div(a: Node, b: Node) -> Node:
    return N.binary(Ops.DIV, a, b)


def _sub(a: Node, b: Node) -> Node:
    return N.add(a, _neg(b))


def _trunc_of(q: Node) -> Node:
    """q rounded toward zero, q - fmod(q, 1) (exact); an infinity or NaN stays itself."""
    frac = N.binary(Ops.FMOD, q, _c(1.0, q))
    return N.where(N.binary(Ops.CMPEQ, frac, frac), _sub(q, frac), q)


def _cast_like(x: Node, like: Node) -> Node:
    return N.cast(x, like.dtype)


def _expand_to(g: Node, shape) -> Node:
    return N.expand(g, shape)


def _sum_to(g: Node, src_shape) -> Node:
    """Sum `g` over the axes an EXPAND grew from size 1, back to `src_shape`."""
    axes = tuple(i for i, (s, t) in enumerate(zip(src_shape, g.shape)) if s != t)
    return N.reduce(Ops.SUM, g, axes)


def _max_grad(n: Node, g: Node):
    # torch.maximum: ties split the gradient evenly; a NaN operand passes all of it to both
    # sides (neither a < b nor b < a holds)
    a, b = n.srcs
    zero, half = _c(0.0, g), N.mul(g, _c(0.5, g))
    tie = N.binary(Ops.CMPEQ, a, b)
    ga = N.where(tie, half, N.where(N.binary(Ops.CMPLT, a, b), zero, g))
    gb = N.where(tie, half, N.where(N.binary(Ops.CMPLT, b, a), zero, g))
    return ga, gb


def _is_nan(x: Node) -> Node:
    return N.unary(Ops.NEG, N.binary(Ops.CMPEQ, x, x))


def _reduce_max_grad(n: Node, g: Node):
    # torch.amax: the gradient is split evenly between the elements equal to the maximum; a
    # NaN maximum equals none of them, so its row's gradient is g / 0 * 0, NaN (the full
    # max() and norm(inf) share it among the NaNs instead, max(dim) and max_pool route it to
    # the first maximum: rules of their own in frontend/reduce.py, nn/conv.py)
    return (max_grad_shared(n.srcs[0], n, g, n.arg, nan_shares=False),)


def max_grad_shared(x: Node, y: Node, g: Node, axes, nan_shares: bool) -> Node:
    """The gradient of a maximum `y` of `x` over `axes` (y, g with those axes kept):
    g split evenly among the elements of x equal to y (among the NaNs where y is NaN,
    if `nan_shares`)."""
    y = N.expand(y, x.shape)
    hit = N.binary(Ops.CMPEQ, x, y)
    if nan_shares and x.dtype.is_float:
        hit = N.add(hit, N.mul(_is_nan(x), _is_nan(y)))  # bool add/mul: or/and
    hit = N.cast(hit, g.dtype)
    count = N.reduce(Ops.SUM, hit, tuple(axes))
    share = _div(g, count)
    return N.mul(N.expand(share, x.shape), hit)


def _erfc_slope(x: Node) -> Node:
    # -2/sqrt(pi) e^(-x^2), as torch's: -0.0 at +-inf, underflowing to 0 past |x| ~ 27
    return N.mul(_c(-2 / math.sqrt(math.pi), x), N.unary(Ops.EXP, _neg(N.mul(x, x))))


def _inverse(order) -> tuple[int, ...]:
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    return tuple(inv)


# op -> rule(node, grad_of_node) -> gradients of node.srcs (None where no gradient flows)
VJP: dict[Ops, Callable[[Node, Node], tuple]] = {
    Ops.NEG: lambda n, g: (_neg(g),),
    Ops.EXP: lambda n, g: (N.mul(g, n),),
    Ops.LOG: lambda n, g: (_div(g, n.srcs[0]),),
    Ops.SIN: lambda n, g: (N.mul(g, N.unary(Ops.COS, n.srcs[0])),),
    Ops.COS: lambda n, g: (_neg(N.mul(g, N.unary(Ops.SIN, n.srcs[0]))),),
    Ops.SQRT: lambda n, g: (_div(g, N.mul(n, _c(2.0, n))),),
    Ops.ERFC: lambda n, g: (N.mul(g, _erfc_slope(n.srcs[0])),),
    Ops.RECIP: lambda n, g: (_neg(N.mul(g, N.mul(n, n))),),
    Ops.CAST: lambda n, g: (_cast_like(g, n.srcs[0]) if n.srcs[0].dtype.is_float else None,),
    Ops.ADD: lambda n, g: (g, g),
    Ops.MUL: lambda n, g: (N.mul(g, n.srcs[1]), N.mul(g, n.srcs[0])),
    Ops.DIV: lambda n, g: (
        _div(g, n.srcs[1]),
        _neg(_div(N.mul(g, n.srcs[0]), N.mul(n.srcs[1], n.srcs[1]))),
    ),
    Ops.MAX: _max_grad,
    Ops.FMOD: lambda n, g: (g, _neg(N.mul(g, _trunc_of(_div(n.srcs[0], n.srcs[1]))))),
    Ops.CMPLT: lambda n, g: (None, None),
    Ops.CMPEQ: lambda n, g: (None, None),
    Ops.WHERE: lambda n, g: (
        None,
        N.where(n.srcs[0], g, _c(0.0, g)),
        N.where(n.srcs[0], _c(0.0, g), g),
    ),
    Ops.SUM: lambda n, g: (_expand_to(g, n.srcs[0].shape),),
    Ops.REDUCE_MAX: _reduce_max_grad,
    Ops.RESHAPE: lambda n, g: (N.reshape(g, n.srcs[0].shape),),
    Ops.PERMUTE: lambda n, g: (N.permute(g, _inverse(n.arg)),),
    Ops.EXPAND: lambda n, g: (_sum_to(g, n.srcs[0].shape),),
    Ops.PAD: lambda n, g: (
        N.shrink(g, tuple((b, b + s) for (b, _), s in zip(n.arg, n.srcs[0].shape))),
    ),
    Ops.SHRINK: lambda n, g: (
        N.pad(g, tuple((b, s - e) for (b, e), s in zip(n.arg, n.srcs[0].shape))),
    ),
    Ops.FLIP: lambda n, g: (N.flip(g, n.arg),),
    Ops.CONTIGUOUS: lambda n, g: (g,),
    Ops.RAND: lambda n, g: (None,),
    Ops.DETACH: lambda n, g: (None,),
    Ops.GATHER: lambda n, g: (N.scatter_add(g, n.srcs[1], n.srcs[0].shape[0]), None),
    Ops.SCATTER_ADD: lambda n, g: (N.gather(g, n.srcs[1]), None),
    # (node, gradient) pairs rather than one gradient per source: `_gradients` takes them
    # as it takes a custom rule's
    Ops.MACRO: lambda n, g: _macro_grad(n, g),
}


def _macro_grad(n: Node, g: Node, live: set[int] | None = None) -> list[tuple[Node, Node]]:
    """A macro's gradient is its expansion's (ir/macro.py), down to the nodes it reads:
    (node, gradient) pairs, as a custom rule gives them. Those nodes are the macro's
    sources and views under them (a view of a source folds into one view), each once.

    For a kind in DEFERRED_GRADS the gradient is itself one macro node ("macro_grad",
    below) over the output gradient and those nodes, its value the gradients that the
    pass wants (`live`: a float node some target is reached from) packed end to end, each
    taken back by a view: nothing is expanded or differentiated while the graph is built,
    only when a plan is compiled for it (an LSTM layer over 64 steps expanded and
    differentiated its 5,000-odd nodes every training step).

    A macro whose expansion depends on the layout it is built for (ir/layout.py) gets its
    gradients the same way, one node per wanted source (`_layout_grads`), derived under
    the layout of the plan that computes them."""
    inputs = inputs_of(n.srcs)
    kind, params = n.arg
    if kind in DEFERRED_GRADS and live is not None:
        wanted = tuple(k for k, s in enumerate(inputs) if id(s) in live and s.dtype.kind == "f")
        if wanted and all(inputs[k].dtype is g.dtype for k in wanted):
            at = {id(s): k for k, s in enumerate(inputs)}
            sources = tuple(at[id(s)] for s in n.srcs)
            sizes = [math.prod(inputs[k].shape) for k in wanted]
            m = macro(
                "macro_grad", (g, *inputs), (kind, params, sources, wanted), (sum(sizes),), g.dtype
            )
            pairs, start = [], 0
            for k, size in zip(wanted, sizes):
                piece = N.shrink(m, ((start, start + size),))
                pairs.append((inputs[k], N.reshape(piece, inputs[k].shape)))
                start += size
            return pairs
    if live is not None and use_custom_vjp and depends_on_layout(n):
        # (with the custom rules off, as tests compare, derived at once: the neutral form's)
        return _layout_grads(n, g, live)
    grads = _gradients(expansion(n), g, inputs, stop={id(s) for s in inputs})
    return [(s, gs) for s, gs in zip(inputs, grads) if gs is not None]


def _layout_grads(n: Node, g: Node, live: set[int]) -> list[tuple[Node, Node]]:
    """The gradients of a macro whose expansion depends on the layout it is built for
    (ir/layout.py: a matmul's packed operands, a convolution's padded copies), one
    "layout_grad" macro node per source that the pass wants: each is derived when a plan
    is compiled, from the expansion under that plan's layout, so a device's gradients
    are those of its own forward (the CPU's read the packed and padded copies its forward
    made, and its convolutions' rules choose as its forward did), while the graph is the
    same for every device."""
    kind, params = n.arg
    wanted: list[int] = []
    for k, s in enumerate(n.srcs):
        if id(s) in live and s.dtype.kind == "f" and all(n.srcs[j] is not s for j in wanted):
            wanted.append(k)
    pairs = []
    for k in wanted:
        s = n.srcs[k]
        grad = macro(
            "layout_grad", (g, *n.srcs), (kind, params, tuple(wanted), k), s.shape, s.dtype
        )
        pairs.append((s, grad))
    return pairs


def _layout_grad_rule(srcs: tuple[Node, ...], params: tuple) -> Node:
    """The expansion of a "layout_grad" node: the gradient of macro `kind`'s expansion,
    built under the current layout, with respect to its source `pick`. The gradients of
    every wanted source are derived together (one pass, as the frontend's own rules build
    them, sharing what they share): each sibling node's (the same sources, another
    `pick`) is kept as its expansion under this layout (`keep_expansion`), so a graph
    holding them all derives them once, and nothing outlives the nodes that asked. A
    source the expansion does not reach gets zeros."""
    kind, inner, wanted, pick = params
    g, sources = srcs[0], srcs[1:]
    grads = _layout_gradients(g, sources, kind, inner, wanted)
    for k, got in zip(wanted, grads):
        if k != pick:  # (a sibling no graph holds is made and dropped: N.make hash-conses)
            s = sources[k]
            arg = ("layout_grad", (kind, inner, wanted, k))
            sibling = N.make(Ops.MACRO, srcs, arg, s.shape, s.dtype)
            keep_expansion(sibling, _as_source_gradient(got, s))
    return _as_source_gradient(grads[wanted.index(pick)], sources[pick])


def _as_source_gradient(got: Node | None, s: Node) -> Node:
    if got is None:
        return N.const(0, s.shape, s.dtype)
    return got if got.dtype is s.dtype else N.cast(got, s.dtype)


def _layout_gradients(g, sources, kind: str, inner: tuple, wanted: tuple) -> list:
    """The gradient of macro `kind`'s expansion on `sources` under the current layout, for
    each wanted source (None where it is not reached). A kind with gradients of its own
    (`register(gradient=)`) gives them where its rule does under this layout. Else they
    are derived: the expansion may read a node under a source (a reshape of a reshape,
    a permute of a permute fold into one node), and what reaches one is taken back up to
    the source through its views, whose own gradient rules then bring it down again to
    the same node (`expand_all` folds the two views)."""
    own = GRADIENTS.get(kind)
    grads = own(sources, inner, g) if own is not None else None
    if grads is not None:
        return [grads[k] for k in wanted]
    out = RULES[kind](sources, inner)
    chains = {k: _view_chain(sources[k]) for k in wanted}
    targets = list({id(v): v for k in wanted for v in chains[k]}.values())
    stop = {id(v) for v in inputs_of(sources)}
    got = dict(zip((id(t) for t in targets), _gradients(out, g, targets, stop=stop)))
    # a node under two sources' views (x under x.reshape(1, K) and x.reshape(K, 1), x @ x
    # of a vector) is taken up by the first of them alone: what reaches it is counted once
    owner: dict[int, int] = {}
    for k in wanted:
        for v in chains[k]:
            owner.setdefault(id(v), k)
    out_grads = []
    for pick in wanted:
        others = {id(sources[k]) for k in wanted if k != pick}
        total, below = None, []
        for v in chains[pick]:
            if v is not chains[pick][0] and (id(v) in others or owner[id(v)] != pick):
                break  # (that source's own gradient takes it)
            gv = got.get(id(v))
            if gv is not None:
                for view in reversed(below):  # back up through the views to the source
                    gv = _view_again(view, gv)
                total = gv if total is None else N.add(total, gv)
            below.append(v)
        out_grads.append(total)
    return out_grads


def _view_chain(s: Node) -> list[Node]:
    """`s` and the reshapes and permutes under it that node folding can reach past it."""
    chain = [s]
    while chain[-1].op in (Ops.RESHAPE, Ops.PERMUTE):
        chain.append(chain[-1].srcs[0])
    return chain


def _view_again(view: Node, g: Node) -> Node:
    """`g`, a gradient at `view`'s source, as one at `view` (a reshape or a permute)."""
    if view.op is Ops.RESHAPE:
        return N.reshape(g, view.shape)
    return N.permute(g, view.arg)


register("layout_grad", _layout_grad_rule)


# Macro kinds whose gradient is a macro of its own (`_macro_grad`): those whose expansion
# is large (a recurrent layer's time steps), so that a cached training step builds one node
# for their backward rather than expanding and differentiating them.
DEFERRED_GRADS: set[str] = set()


def _deferred_grad_rule(srcs: tuple[Node, ...], params: tuple) -> Node:
    """The expansion of a "macro_grad" node: the gradients of macro `kind`'s expansion
    (on its sources, the same nodes as the forward's, by hash-consing) with respect to
    the `wanted` nodes it reads, each flattened and placed end to end (pads and adds). A
    wanted node the expansion does not reach gets zeros."""
    kind, inner, sources, wanted = params
    g, inputs = srcs[0], srcs[1:]
    out = RULES[kind](tuple(inputs[k] for k in sources), inner)
    targets = [inputs[k] for k in wanted]
    grads = _gradients(out, g, targets, stop={id(s) for s in inputs})
    total = sum(math.prod(t.shape) for t in targets)
    packed, start = None, 0
    for t, gt in zip(targets, grads):
        size = math.prod(t.shape)
        if gt is None:
            gt = N.const(0, t.shape, g.dtype)
        elif gt.dtype is not g.dtype:
            gt = N.cast(gt, g.dtype)
        piece = N.pad(N.reshape(gt, (size,)), ((start, total - start - size),))
        packed = piece if packed is None else N.add(packed, piece)
        start += size
    return packed


register("macro_grad", _deferred_grad_rule)


# Composites with a gradient of their own, keyed by the node that ends them. The rule maps
# the composite's output gradient to (source node, gradient) pairs and replaces the
# derivation through the composite's inner nodes. Used where the derived gradient is
# measurably worse (a sliding-window view's derived gradient is index arithmetic full of
# divisions; its own rule is a sum of shifted pads). Tests check each against the derived one.
CUSTOM_VJP: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
use_custom_vjp = True  # tests turn this off to compare with the derived gradients


def with_vjp(n: Node, rule: Callable[[Node], list[tuple[Node, Node]]]) -> Node:
    """Give composite node `n` its own gradient rule (see CUSTOM_VJP).

    `n` must not be a view: reshapes of reshapes fold into one node, so a rule on a
    view could vanish from the graph that uses it.
    """
    assert n.op not in MOVEMENT, f"custom gradient on a view ({n.op.name}) could be folded away"
    CUSTOM_VJP[n] = rule
    return n


# Nodes whose gradient passes through user code: node -> {key: function of the gradient
# node}, applied in order, each returning a replacement or None (`Tensor.register_hook` on a
# non-leaf, a module's backward hook); an autograd.Function's node is here with one that
# changes nothing, for the rule below. A backward() whose graph holds one builds its
# gradients at once (frontend/autograd.py), so that code runs, and raises, inside
# backward() as torch's does.
GRAD_HOOKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _hooked(n: Node, g: Node) -> Node:
    for hook in list(GRAD_HOOKS.get(n, {}).values()):
        changed = hook(g)
        if changed is not None:
            g = changed
    return g


# Nodes of ops without a derivative (torch's floor_divide): node -> a function that raises.
# backward() raises at once where a gradient would pass through one (frontend/autograd.py),
# and so does a rule built later (create_graph, a gradient read lazily).
NO_DERIVATIVE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def without_derivative(n: Node, raise_error: Callable[[], None]) -> Node:
    """Mark `n` (a node of its own: `own_node`) as having no derivative."""
    NO_DERIVATIVE[n] = raise_error
    CUSTOM_VJP[n] = lambda g: raise_error()
    return n


def own_node(n: Node) -> Node:
    """A node of `n`'s value to hang a rule of its own on (`with_vjp`): n + (-0.0), exact
    for every value (-0.0 + -0.0 is -0.0). Nodes are hash-consed, so n * 1 would be the
    node of a user's own `x * 1`, and a rule on it would change that gradient too."""
    return N.add(n, N.const(-0.0, n.shape, n.dtype))


def reaches(roots: list[Node], targets: set[int]) -> set[int]:
    """Ids of the nodes under `roots` from which some target can be reached (targets included)."""
    return _live(toposort(roots, stop=lambda n: n.op is Ops.DETACH), targets)


def _live(order: list[Node], targets: set[int]) -> set[int]:
    out: set[int] = set()
    for n in order:
        if id(n) in targets or (n.op is not Ops.DETACH and any(id(s) in out for s in n.srcs)):
            out.add(id(n))
    return out


# The passes being built on this thread, innermost last: (gradients so far by node id, the
# nodes a rule left without a gradient, the ids of the pass's graph, those of its live
# nodes: a wanted target lies below them). Rules and hooks run in reverse topological order,
# so when a node's hook runs, every node built on it has its final gradient here: a rule
# can tell a consumer that got no gradient (torch's None) from one that got zeros.
_passes = threading.local()


def wants_gradient(n: Node) -> bool:
    """Whether the passes being built on this thread need `n`'s gradient: False where an
    enclosing pass holds `n` in its graph but no node it differentiates for lies below it
    (a network's input batch, a frozen weight), so a rule may leave that gradient None
    and not build it (a convolution's input gradient). A
    macro's own pass wants every source; the pass around it says which it really needs."""
    for _, _, in_graph, live in getattr(_passes, "stack", ()):
        if id(n) in in_graph and id(n) not in live:
            return False
    return True


def received_gradient(n: Node) -> bool:
    """Whether `n` has received a gradient in the pass being built (for a rule or hook:
    see `_passes`)."""
    stack = getattr(_passes, "stack", None)
    return bool(stack) and id(n) in stack[-1][0]


def leave_without_gradient(n: Node) -> None:
    """Record that a rule of the pass being built gave source `n` no gradient on purpose
    (torch's None, not a zero one): `gradients(..., cut=)` reports it."""
    stack = getattr(_passes, "stack", None)
    if stack:
        stack[-1][1].append(n)


def gradients(
    root: Node, root_grad: Node, targets: list[Node], cut: list | None = None
) -> list[Node | None]:
    """d(sum(root * root_grad)) / d(target) for each target; None where it does not depend on it.

    `cut`, if given, gets the nodes that a rule or hook left without a gradient on purpose
    (`leave_without_gradient`)."""
    with hooks.timed("autodiff"):
        return _gradients(root, root_grad, targets, cut=cut)


def _gradients(
    root: Node,
    root_grad: Node,
    targets: list[Node],
    stop: set[int] | None = None,
    cut: list | None = None,
) -> list[Node | None]:
    """(`stop`: ids of nodes not to descend below: a macro's sources.)"""
    grads: dict[int, Node] = {id(root): root_grad}
    if stop:
        order = toposort([root], stop=lambda n: n.op is Ops.DETACH or id(n) in stop)
    else:
        order = toposort([root], stop=lambda n: n.op is Ops.DETACH)
    live = _live(order, {id(t) for t in targets})
    in_graph = {id(n) for n in order}
    stack = getattr(_passes, "stack", None)
    if stack is None:
        stack = _passes.stack = []
    stack.append((grads, [] if cut is None else cut, in_graph, live))
    try:
        return _propagate(root, grads, targets, stop, order, live, in_graph)
    finally:
        stack.pop()


def _propagate(root, grads, targets, stop, order, live, in_graph) -> list[Node | None]:
    hooks = len(GRAD_HOOKS) > 0
    for n in reversed(order):
        g = grads.get(id(n))
        # (a macro's sources, `stop`, are hooked by the caller, once their sum is complete)
        if hooks and g is not None and n in GRAD_HOOKS and not (stop and id(n) in stop):
            g = grads[id(n)] = _hooked(n, g)
        if g is None or not n.srcs or id(n) not in live or (stop and id(n) in stop):
            continue
        # gradient nodes report the line of the forward op they differentiate ("linear
        # backward"); an inner node of a composite passes on the site of its gradient
        site = site_of(n)
        site = site.backward() if site is not None else site_of(g)
        rule = CUSTOM_VJP.get(n) if use_custom_vjp else None
        if rule is not None:  # it may build tensors: they belong to this backward, too
            with fixed(site, replace=True):
                pairs = rule(g)
        elif n.op is Ops.MACRO:  # (node, gradient) pairs, as a custom rule's
            with fixed(site, replace=True):
                pairs = _macro_grad(n, g, live)
        else:
            pairs = zip(n.srcs, VJP[n.op](n, g))
        for src, gs in pairs:
            # a custom rule may name a view that graph rewrites folded into its neighbours:
            # carry its gradient down to the node the graph really holds
            while gs is not None and id(src) not in in_graph and src.op in MOVEMENT:
                (gs,) = VJP[src.op](src, gs)
                src = src.srcs[0]
            if gs is None or id(src) not in live:
                continue
            assert gs.shape == src.shape, f"{n.op}: gradient {gs.shape} for {src.shape}"
            if gs.dtype is not src.dtype:
                gs = N.cast(gs, src.dtype)
            if src.op is Ops.EXPAND and not (stop and id(src) in stop):
                # a broadcast read by several nodes (hash-consing makes a weight's expand
                # in every time step of a recurrent layer one node) sums each gradient to
                # its source's shape at once: added at the broadcast's shape first, an
                # LSTM's (batch, 4H, H) products would be added in chains of kernels
                # storing that shape
                base = src.srcs[0]
                if id(base) in live and src not in GRAD_HOOKS:
                    src, gs = base, _sum_to(gs, base.shape)
            prev = grads.get(id(src))
            grads[id(src)] = gs if prev is None else N.add(prev, gs)
            note(grads[id(src)], site)
            note(gs, site)
    return [grads.get(id(t)) for t in targets]
