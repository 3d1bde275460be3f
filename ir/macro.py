"""Macro nodes: one node for a library op that builds many primitives, expanded on demand.

Every step of a training loop builds its forward graph again (it is the user's
code), but a cached step (frontend/stepcache.py) only needs that graph's
structural key and its leaves: the nodes inside a `linear` (13 of them) or a
`cross_entropy` (27) are built and walked for nothing. So the hottest library
ops build one `MACRO` node instead:

    MACRO(srcs), arg = (kind, params)

whose value is, by definition, that of its *expansion*: the primitive graph
`RULES[kind](srcs, params)` builds on the same sources. The expansion depends on
the kind, the params and the sources' shapes, dtypes and devices alone, so two
macros with one structural key expand to one structure, and it may read no data
but its sources (any table it needs is one of them) and constants.

Only three places look inside a macro, and nothing else needs to know they exist:

- `expand_all(roots)`: the graph with every macro replaced by its expansion, for the
  scheduler (pipeline/driver.py `compile_plan`, under its backend's layout options:
  ir/layout.py), the reference evaluator and `graph_dot` (under `NEUTRAL`); a cached
  plan's run never expands anything;
- autodiff: a macro's gradient is the gradient of its expansion with respect to
  its sources (ir/autodiff.py);
- the expansion is built once per macro node and layout (`expansion`; once for all
  layouts where the rule never asked for one) and kept as long as the node lives, so
  expanding the same graph twice (the step, then its gradient's schedule) builds it
  once; hash-consing makes it the very nodes the composed form would have built.

The inner nodes carry the macro's site, so kernels are named after the user's
line as before (`linear (train.py:9)`).

>>> from fusegrad.ir import node as N
>>> from fusegrad.ir.dtypes import float32
>>> from fusegrad.ir.ops import Ops
>>> register("double", lambda srcs, params: N.add(srcs[0], srcs[0]))
>>> x = N.const(1.5, (2,), float32)
>>> m = macro("double", (x,), (), (2,), float32)
>>> m.op is Ops.MACRO and expand_all([m])[0] is N.add(x, x)
True
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from . import layout as L
from . import node as N
from .layout import Layout
from .node import Node, toposort
from .ops import MOVEMENT, Ops
from .sites import fixed, note, site_of

Rule = Callable[[tuple[Node, ...], tuple], Node]

RULES: dict[str, Rule] = {}  # kind -> builder of the expansion from (srcs, params)

# kind -> its own gradients under the current layout, (srcs, params, output gradient) ->
# one gradient node (or None) per source, or None where the expansion's derived gradient
# is the one (ir/autodiff.py "layout_grad")
GradientRule = Callable[[tuple[Node, ...], tuple, Node], "list[Node | None] | None"]
GRADIENTS: dict[str, GradientRule] = {}


# expansions being built on this thread: a macro asked for inside one (a composite's
# sigmoid) is its expansion at once, so an expansion holds primitives only
class _Building(threading.local):
    depth = 0


_building = _Building()


def building() -> bool:
    """Whether an expansion is being built on this thread: what its rule makes must be
    primitives over its sources and constants, never a new buffer node (a `detach()` of a
    source is a DETACH node there, not a second node over the source's buffer, which no
    plan would know as an input)."""
    return _building.depth > 0


# macro node -> {layout: its expansion on its own sources under that layout}, the key
# None for an expansion that asked for no layout (kept while the macro lives)
_EXPANSIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def register(kind: str, rule: Rule, gradient: GradientRule | None = None) -> None:
    """Make `kind` a macro whose expansion `rule(srcs, params)` builds (primitives only,
    from the sources and constants: no other data). `gradient(srcs, params, g)`, where
    given, gives the gradients of an expansion that depends on the layout (one per
    source), or None to derive them from the expansion under that layout."""
    RULES[kind] = rule
    if gradient is not None:
        GRADIENTS[kind] = gradient


def macro(kind: str, srcs: tuple[Node, ...], params: tuple, shape, dtype) -> Node:
    """The macro node of `kind` on `srcs` (hash-consed as any node): `shape` and `dtype`
    are its expansion's, which the caller knows without building it."""
    assert kind in RULES, f"unknown macro {kind!r}"
    if _building.depth:  # inside an expansion: `expand_all` makes one pass
        return RULES[kind](tuple(srcs), params)
    first = srcs[0].device
    for s in srcs:
        if s.device is not first:  # two devices are refused naming the library op
            N.common_device(_Named(kind), tuple(srcs))
            break
    return N.make(Ops.MACRO, tuple(srcs), (kind, params), tuple(shape), dtype)


class _Named:
    """What a mixed-device error names for a macro: its kind (`linear`), not `MACRO`."""

    __slots__ = ("name",)

    def __init__(self, kind: str):
        self.name = kind


def expansion(m: Node, layout: Layout | None = None) -> Node:
    """The primitive graph `m` stands for, on `m`'s own sources, under `layout` (None: the
    one expansions are being built under, NEUTRAL outside `compile_plan`): built once per
    node and layout."""
    if layout is None:
        layout = L._state.layout
    kept = _EXPANSIONS.get(m)
    got = None if kept is None else kept.get(None, kept.get(layout))
    if got is None:
        with L.noting_reads() as asked:
            got = _expand(m, m.srcs, layout)
        with _lock:
            got = _EXPANSIONS.setdefault(m, {}).setdefault(layout if asked[0] else None, got)
    return got


def keep_expansion(m: Node, got: Node) -> None:
    """Keep `got` as macro `m`'s expansion under the layout expansions are being built
    under (a rule that derives its siblings' expansions with its own: ir/autodiff.py's
    "layout_grad"), unless `m` has one there already."""
    layout = L._state.layout
    with _lock:
        _EXPANSIONS.setdefault(m, {}).setdefault(layout, got)


def _rebuilt(n: Node, srcs: tuple[Node, ...]) -> Node:
    """`n` on new sources. A reshape or permute folds into a reshape or permute under it, as
    when built (a gradient taken through a view, "layout_grad", is a view of the gradient
    its expansion finds under that view: the two fold back into it)."""
    if n.op is Ops.RESHAPE:
        return N.reshape(srcs[0], n.shape)
    if n.op is Ops.PERMUTE:
        return N.permute(srcs[0], n.arg)
    return N.make(n.op, srcs, n.arg, n.shape, n.dtype)


def depends_on_layout(m: Node) -> bool:
    """Whether macro `m`'s expansion asks which layout it is built for (ir/layout.py):
    a matmul's, a convolution's, or one with either inside.

    Found by building the expansion once for each kind, parameters and sources' ops,
    shapes, dtypes and devices (`_ASKS_LAYOUT`), not for each node: a graph built anew at
    every call (L-BFGS's closure over an unrolled `LSTMCell`) asked it of hundreds of
    macros a gradient pass, each building its whole expansion only to find a matmul in
    it. (Either answer gives the right gradient; this one says where it is derived.)"""
    kept = _EXPANSIONS.get(m)
    if kept is not None:
        return None not in kept
    key = (m.arg, tuple((s.op, s.shape, s.dtype, s.device) for s in m.srcs))
    asks = _ASKS_LAYOUT.get(key)
    if asks is None:
        expansion(m, L.NEUTRAL)
        asks = None not in _EXPANSIONS[m]
        with _lock:
            if len(_ASKS_LAYOUT) >= ASKS_LAYOUT_KEPT:
                _ASKS_LAYOUT.clear()
            _ASKS_LAYOUT[key] = asks
    return asks


# macros' kinds, parameters and sources (`depends_on_layout`) -> whether the expansion
# asks the layout; at most ASKS_LAYOUT_KEPT kept, then forgotten all at once
_ASKS_LAYOUT: dict[tuple, bool] = {}
ASKS_LAYOUT_KEPT = 4096


def _expand(m: Node, srcs: tuple[Node, ...], layout: Layout) -> Node:
    kind, params = m.arg
    site = site_of(m)
    _building.depth += 1
    try:
        # (a rule that makes tensors, a composite, names m's line)
        with fixed(site, replace=True), L.using(layout):
            out = RULES[kind](srcs, params)
    finally:
        _building.depth -= 1
    assert out.shape == m.shape and out.dtype is m.dtype, (
        f"macro {kind}: expansion {out.shape} {out.dtype.name} for {m.shape} {m.dtype.name}"
    )
    if site is not None:  # the inner nodes are the user's line's work, as the macro is
        inputs = {id(s) for s in inputs_of(srcs)}
        for n in toposort([out], lambda n: id(n) in inputs):
            if id(n) not in inputs:
                note(n, site)
    return out


def inputs_of(srcs: tuple[Node, ...]) -> list[Node]:
    """The nodes an expansion on `srcs` may read its inputs at: each source, and the views
    under it (node constructors fold a view of a view into one, so the expansion of a
    linear on `flatten(x)` reads `x` itself). The walk into an expansion stops at them."""
    out: dict[int, Node] = {}
    for s in srcs:
        while id(s) not in out:
            out[id(s)] = s
            if s.op not in MOVEMENT:
                break
            s = s.srcs[0]
    return list(out.values())


def expand_all(
    roots: list[Node],
    stop: Callable[[Node], bool] | None = None,
    replaced: dict | None = None,
    layout: Layout = L.NEUTRAL,
) -> list[Node]:
    """`roots` with every macro under them replaced by its expansion under `layout` (and
    the nodes above a macro rebuilt on the expanded sources); nodes where `stop` holds
    (values in memory) are kept as they are, with what is under them. Returns `roots`
    itself when the graph holds no macro. One pass over a topological order: no
    recursion. `replaced`, a dict, gets id(node) -> what stands for it, for each macro and
    each node rebuilt (`fusegrad.debug.stages` numbers the two alike)."""
    order = toposort(roots, stop) if stop is not None else toposort(roots)
    macro_op = Ops.MACRO
    if not any(n.op is macro_op for n in order):
        return roots
    new: dict[int, Node] = {}
    for n in order:
        if not n.srcs or (stop is not None and stop(n)):
            continue
        srcs = tuple([new.get(id(s), s) for s in n.srcs])
        changed = any(a is not b for a, b in zip(srcs, n.srcs))
        if n.op is macro_op:
            m = _expand(n, srcs, layout) if changed else expansion(n, layout)
        elif changed:
            m = _rebuilt(n, srcs)
            site = site_of(n)
            if site is not None:
                note(m, site)
        else:
            continue
        new[id(n)] = m
    if replaced is not None:
        replaced.update(new)
    return [new.get(id(r), r) for r in roots]
