"""Lazy values that outlive a training step, computed with the step.

A lazy value still alive after a step (recurrent state, a running metric, an EMA copy of
the weights, a GAN's fake batch kept for the next step) would otherwise stay a graph over
the step's inputs, and the next step's schedule would compute this step again, and the
one before: a step's cost would grow with the run (XLA asks for `mark_step()` here). So
each thread keeps its tensors whose value is a graph not yet computed, weakly and oldest
first (`note_lazy`: a tensor made lazy, by an op or by a write in place), and every kind
of optimizer step (`StepCache.step`, a flushed hand-written update, `autograd.settle`)
computes those still alive with its own outputs (`with_carried`). What the step computes
anyway costs a store, not a kernel; a value chained from step to step (an EMA) is cut at
every step, so its graph never grows; nothing dead is computed.

>>> import fusegrad as fg
>>> from fusegrad import nn, optim
>>> model = nn.Linear(2, 1)
>>> opt = optim.SGD(model.parameters(), lr=0.1)
>>> running = fg.zeros(())
>>> for _ in range(3):
...     loss = model(fg.ones(4, 2)).pow(2).mean()
...     opt.zero_grad(); loss.backward(); opt.step()
...     running = 0.9 * running + 0.1 * loss.detach()   # computed by the next step
>>> running._has_value()
False
>>> opt.zero_grad(); model(fg.ones(4, 2)).pow(2).mean().backward(); opt.step()
>>> running._has_value()
True
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from .ir.ops import Ops
from .runtime.engine import engine
from .tensor_base import TensorBase

_lazy = threading.local()  # .refs: weak references to tensors noted lazy, oldest first
COMPACT_AT = 4096  # noted references kept before the dead ones are dropped (then twice the live)


def note_lazy(t) -> None:
    """Remember `t`, whose value is a graph not yet computed, for as long as it lives: the
    next optimizer step computes it with the step if it is still lazy then (`carried`).
    A weak reference appended to a list (what the graph-building paths can afford per
    tensor); the references of tensors gone are dropped when the list has grown to twice
    what was alive at the last drop, so a loop with no step keeps it bounded."""
    try:
        refs = _lazy.refs
    except AttributeError:
        refs = _refs()
    refs.append(weakref.ref(t))
    if len(refs) > _lazy.limit:
        _compact(refs)


@contextlib.contextmanager
def unnoted():
    """Tensors made inside are not noted (`note_lazy`): a macro's expansion, built when a
    plan is compiled, makes tensors that are its graph's, never a user's value; one that a
    gradient rule keeps would otherwise be carried by the next step as a lazy value of
    the user's (and the step's graph would change with what the collector had freed)."""
    _refs()
    saved = _lazy.refs, _lazy.limit
    _lazy.refs, _lazy.limit = [], 1 << 62
    try:
        yield
    finally:
        _lazy.refs, _lazy.limit = saved


def _refs() -> list:
    """This thread's list of noted references, made on first use."""
    try:
        return _lazy.refs
    except AttributeError:
        _lazy.refs, _lazy.limit, _lazy.since = [], COMPACT_AT, None
        return _lazy.refs


def _compact(refs: list) -> None:
    """Drop the references of tensors gone (keeping the order, and where `own_values_only`
    begins)."""
    since = _lazy.since
    if since is not None:
        _lazy.since = sum(1 for r in refs[:since] if r() is not None)
    refs[:] = [r for r in refs if r() is not None]
    _lazy.limit = max(COMPACT_AT, 2 * len(refs))


def with_carried(anchor, pending, extra) -> list:
    """`extra` and the lazy values a step computes with its own outputs (`carried`, on the
    device of `anchor`, a tensor the step computes or updates; None: no step): what every
    kind of optimizer step asks for."""
    if anchor is None:
        return extra
    taken = [t.node for t in pending] + [t.node for t in extra]
    device = TensorBase.__dict__["node"].__get__(anchor).device or engine.default_device
    return [*extra, *carried(device, map(id, taken))]


@contextlib.contextmanager
def own_values_only():
    """While `fusegrad.jit` records a call: its steps compute only the lazy values the
    call made (one made before it is not the call's to compute: a replay would not)."""
    _lazy.since = len(_refs())
    try:
        yield
    finally:
        _lazy.since = None


def carried(device, taken) -> list:
    """This thread's live tensors that are still lazy, on `device`, other than the nodes in
    `taken` (ids), oldest first: what a step computes with its own outputs. Every tensor
    noted so far is forgotten (`note_lazy` notes it again when a write makes it lazy)."""
    refs = getattr(_lazy, "refs", None)
    if not refs:
        return []
    since = _lazy.since or 0  # while jit records a call: the call's own only
    live = [t for t in (r() for r in refs[since:]) if t is not None]
    del refs[since:]
    value = engine.value
    node_of = TensorBase.__dict__["node"].__get__  # the slot, not a subclass's property
    default = engine.default_device
    out, seen = [], set(taken)
    for t in live:
        if type(t) is not t._plain:  # (a gradient, a view of .data, a deferred parameter)
            continue
        n = node_of(t, TensorBase)
        if (
            id(n) in seen
            or n.op is Ops.BUFFER
            or (n.device or default) != device
            or 0 in n.shape
            or value(n) is not None
        ):
            continue
        seen.add(id(n))
        out.append(t)
    return out
