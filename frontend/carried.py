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

A loop with no optimizer step (an evaluation or text generation under `no_grad`) carries
state too: `output, hidden = model(data, hidden)`, then `loss.item()`. There, with
gradients off, the host read is the step's end: it computes, with the value read, the
live lazy tensors made since the last read whose graphs share work with it without being
on its way (`read_along`: `hidden` shares the recurrence with the loss), so the next
batch starts from `hidden`'s buffer instead of computing this batch again inside its
own graph, which would otherwise hold every batch before it. A lazy tensor whose graph
shares nothing with the read stays lazy, and so does one the read computes on its way.

A carried tensor that needs a gradient and whose graph no backward pass has gone through
since the last step (a GAN's fake batch: the discriminator's step saw it detached) will
be differentiated later, by a backward that needs its forward pass's values: the step
keeps its contractions too (`_kept_for_backward`), so the generator's step reads them
instead of running the generator's forward pass again.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from .creation_nodes import is_table
from .ir import node as N
from .ir.ops import MOVEMENT, Ops
from .jithooks import recording
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
    saved = _lazy.refs, _lazy.limit, _lazy.read_from
    _lazy.refs, _lazy.limit, _lazy.read_from = [], 1 << 62, 0
    try:
        yield
    finally:
        _lazy.refs, _lazy.limit, _lazy.read_from = saved


def _refs() -> list:
    """This thread's list of noted references, made on first use."""
    try:
        return _lazy.refs
    except AttributeError:
        _lazy.refs, _lazy.limit, _lazy.since, _lazy.read_from = [], COMPACT_AT, None, 0
        return _lazy.refs


def _compact(refs: list) -> None:
    """Drop the references of tensors gone (keeping the order, and where `own_values_only`
    begins)."""
    since = _lazy.since
    if since is not None:
        _lazy.since = sum(1 for r in refs[:since] if r() is not None)
    _lazy.read_from = sum(1 for r in refs[: _lazy.read_from] if r() is not None)
    refs[:] = [r for r in refs if r() is not None]
    _lazy.limit = max(COMPACT_AT, 2 * len(refs))


# ids of nodes backward passes went through kept at most, past which the earlier passes'
# are forgotten (a loop of backward passes with no optimizer step)
DIFFERENTIATED_MAX = 1 << 18


def note_differentiated(ids: set[int]) -> None:
    """Remember that a backward pass went through the nodes `ids` (see `take_differentiated`)."""
    seen = getattr(_lazy, "differentiated", None)
    if seen is None or len(seen) + len(ids) > DIFFERENTIATED_MAX:
        _lazy.differentiated = ids
    else:
        seen |= ids


def take_differentiated() -> set[int]:
    """The ids of the nodes the backward passes of this thread went through since the last
    call, forgotten here: a lazy value outliving an optimizer step whose graph none went
    through (a GAN's fake batch, seen by the discriminator detached) is differentiated
    later, so the step keeps its contractions' values too (`_kept_for_backward`)."""
    seen = getattr(_lazy, "differentiated", None)
    _lazy.differentiated = None
    return seen or set()


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
    differentiated = take_differentiated()
    refs = getattr(_lazy, "refs", None)
    if not refs:
        return []
    since = _lazy.since or 0  # while jit records a call: the call's own only
    live = [t for t in (r() for r in refs[since:]) if t is not None]
    del refs[since:]
    # each tensor where it was noted last (its latest write): a buffer written in place at
    # every step (a BatchNorm's count) stands where this step's write put it, as at every
    # later step, not where a write before the first step (its reset) noted it first, so
    # the first step's graph, and plan, are the second's
    last = {id(t): k for k, t in enumerate(live)}
    live = [t for k, t in enumerate(live) if last[id(t)] == k]
    _lazy.read_from = min(_lazy.read_from, since)
    out = _still_lazy(live, device, set(taken))
    copies = [t for t, _ in out if from_constants(t)]
    if copies:
        _computed_apart(copies)
        out = [(t, n) for t, n in out if engine.value(n) is None]
    return [t for t, _ in out] + _kept_for_backward(out, differentiated)


FROM_CONSTANTS_NODES = 256  # the most nodes `from_constants` walks
_COPIES = (Ops.DETACH, Ops.CONTIGUOUS)  # what a view of data may pass through besides views

# buffers computed from constants alone (`from_constants` of the value an in-place write
# computed: `pe[:, 0::2] = ...` into `zeros`), while they live
_constant_buffers: weakref.WeakSet = weakref.WeakSet()


def note_constant_value(t) -> None:
    """Remember that `t`'s buffer, just computed, was computed from constants alone: a graph
    over it is still `from_constants`."""
    buf = engine.value(TensorBase.__dict__["node"].__get__(t))
    if buf is not None:
        _constant_buffers.add(buf)


def from_constants(t) -> bool:
    """Whether `t`'s value is still to compute from constants alone, or only copies data:
    under it no buffer but the tables fusegrad builds for itself (`creation_nodes.is_table`)
    and values computed before (zeros, `arange`, random draws, the ops and writes in place
    over them), or only views and copies down to buffers (`movement.copied_data`'s: a
    corpus batched by `view(b, -1).t().contiguous()`); within
    FROM_CONSTANTS_NODES nodes, no gradient flowing into it, outside `fusegrad.jit`'s
    recording. A module's table made when it is built (a positional encoding's `pe` and the
    views of it kept alive, a causal mask `triu(full(...))` kept on `self` by the first
    forward) is one: the first step reads it as a graph, every later step as a buffer, so a
    step computes it apart (`_computed_apart`), and the first step's plan is the later
    steps'. A value that depends on a step's inputs through an op (recurrent state, an EMA
    of the weights) is not: every step computes it anew, with its own outputs."""
    node = TensorBase.__dict__["node"].__get__(t)
    if t.requires_grad or recording():
        return False
    value = engine.value
    stack, seen = [(node, True)], {id(node)}
    while stack:
        n, views_only = stack.pop()
        if n.op is Ops.BUFFER:
            if views_only or is_table(n.arg) or n.arg in _constant_buffers:
                continue
            return False
        if len(seen) > FROM_CONSTANTS_NODES:
            return False
        if value(n) is not None and n is not node:  # (computed before)
            continue
        views_only = views_only and (n.op in MOVEMENT or n.op in _COPIES)
        for s in n.srcs:
            if id(s) not in seen:
                seen.add(id(s))
                stack.append((s, views_only))
    return True


def _computed_apart(copies: list) -> None:
    """Compute the carried tensors `from_constants` takes (datasets batched by
    `view(b, -1).t().contiguous()` at the start of a program, a module's tables) in a plan
    of their own, each then pointed at its buffer: with the first step's outputs they would
    make its graph, and plan, other than the later steps' (a word language model's 900
    kernels, compiled twice)."""
    engine.realize([t.node for t in copies])
    for t in copies:
        t.node = N.buffer(engine.value(t.node), t.shape, t.dtype)


def _kept_for_backward(lazy: list[tuple], differentiated: set[int]) -> list:
    """Tensors over the contractions (convolutions, matmuls: macros) still to compute under
    the carried tensors that need a gradient and that no gradient pass has gone through
    yet (`differentiated`): a later backward through them (a GAN's generator step, through
    the fake batch its discriminator step computed from a detached copy) reads them rather
    than computing the forward pass again. Not 16-bit values (a later graph would read
    them rounded where it computed them unrounded), nor the carried tensors themselves."""
    value = engine.value
    out: list = []
    seen = {id(n) for _, n in lazy}
    for t, n in lazy:
        if id(n) in differentiated or not t.requires_grad:
            continue
        stack = list(n.srcs)
        while stack:
            m = stack.pop()
            if id(m) in seen or m.op in (Ops.BUFFER, Ops.DETACH) or value(m) is not None:
                continue
            seen.add(id(m))
            if m.op is Ops.MACRO and m.dtype.itemsize >= 4 and 0 not in m.shape:
                out.append(t._plain(m, requires_grad=False, leaf=True))
            stack.extend(m.srcs)
    return out


def _still_lazy(tensors, device, seen: set[int]) -> list[tuple]:
    """`(tensor, node)` for each of `tensors` (None: gone) still lazy on `device`: plain
    tensors (not a gradient, a view of .data, a deferred parameter) whose node is no
    buffer, not empty, has no value and is not in `seen` (ids, extended: one tensor a
    node)."""
    value = engine.value
    node_of = TensorBase.__dict__["node"].__get__  # the slot, not a subclass's property
    default = engine.default_device
    out = []
    for t in tensors:
        if t is None or type(t) is not t._plain:
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
        out.append((t, n))
    return out


def read_along(t) -> list:
    """The live lazy tensors to compute with `t`, whose value the host is about to read
    with gradients off (`Tensor._realize_for_read`): those noted since the last such read
    (on `t`'s device, in the window `own_values_only` allows) whose graphs share a node
    still to compute with `t`'s. The read is where a loop without an optimizer step ends
    its step (module docstring). Each tensor noted is looked at by one read only, so a
    read costs what its window holds."""
    refs = getattr(_lazy, "refs", None)
    if not refs:
        return []
    start = max(_lazy.read_from, _lazy.since or 0)
    if start >= len(refs):
        return []
    window = refs[start:]
    _lazy.read_from = len(refs)
    root = t.node  # (the property: a `.data` view's or a gradient's node is its owner's)
    if root.op is Ops.BUFFER or engine.value(root) is not None:
        return []  # nothing to compute, so nothing to share
    found = _still_lazy((r() for r in window), root.device or engine.default_device, {id(root)})
    if not found:
        return []
    on_way, shared = _to_compute(root)
    clean: set[int] = set()
    # (a value the read computes on its way, `out` of `loss = f(out)`, stays lazy: it is
    # not state carried past the read, and a 16-bit one stored would round what later
    # kernels compute from it where one kernel keeps float32)
    return [c for c, n in found if id(n) not in on_way and _reaches(n, shared, clean)]


def _to_compute(root) -> tuple[set[int], set[int]]:
    """The ids of the nodes under `root` a realize of it computes (no value yet), and of
    those that are work: not constants (one `ones(1)` is every graph's that uses it) nor
    movements (an `expand` of one is no work to share, and a huge buffer if stored)."""
    value, buffer = engine.value, Ops.BUFFER
    free = MOVEMENT | {Ops.CONST}
    seen, out, stack = {id(root)}, set(), [root]
    while stack:
        n = stack.pop()
        if n.op not in free:
            out.add(id(n))
        for s in n.srcs:
            k = id(s)
            if k not in seen and s.op is not buffer and value(s) is None:
                seen.add(k)
                stack.append(s)
    return seen, out


def _reaches(node, shared: set[int], clean: set[int]) -> bool:
    """Whether the graph under `node`, down to values, holds a node of `shared` (`clean`:
    ids of nodes whose graphs were walked and hold none, kept across calls)."""
    value, buffer = engine.value, Ops.BUFFER
    seen, stack = {id(node)}, [node]
    while stack:
        n = stack.pop()
        if id(n) in shared:
            return True
        for s in n.srcs:
            k = id(s)
            if k in shared:
                return True
            if k not in seen and k not in clean and s.op is not buffer and value(s) is None:
                seen.add(k)
                stack.append(s)
    clean |= seen
    return False
