"""The hand-written SGD loop at `opt.step()`'s speed: updates by a gradient, deferred.

    loss.backward()
    with fg.no_grad():
        for p in model.parameters():
            p -= lr * p.grad      (p.data -= lr * p.grad, p.add_(p.grad, alpha=-lr), ...)

Each update reads a gradient backward() has not built (`LazyGrad`), perhaps times a
Python number (`ScaledGrad`). Computed at once, it would build the backward graph and
run one plan per parameter. So `defer` only notes it: the parameter, the recipe
(add or subtract, alpha, the number) and the gradient's place in its backward()
record. The parameter keeps its old node meanwhile, but nothing can read it: its class
is swapped for a subclass whose `node` flushes the batch first (then swaps back).

The batch is flushed when every leaf the backward() reached has its update (the
usual loop), or when anything reads one of its parameters (the next forward at the
latest), or when an update of another backward() comes. A flush is an optimizer step
(`StepCache.run`, keyed by the forward graph's structure and the recipes): from the
second step on it runs the cached plan of forward, backward, updates and loss, building
nothing; a miss builds each update exactly as the eager path does and realizes them
all, with the loss, in one plan. Either way the values are the eager path's.
"""

from __future__ import annotations

import threading

from . import autograd_state
from .autograd import take_pending_outputs
from .carried import with_carried
from .runtime import forksafe
from .runtime.engine import engine
from .stepcache import StepCache, _realize_all
from .versions import retire

_local = threading.local()  # .batch: this thread's deferred updates; .cache: its StepCache
_lock = forksafe.Lock()
_batch_of: dict[int, _Batch] = {}  # id of a hidden parameter -> its batch (ids: tensors' == is
# elementwise)
_HIDDEN: dict[type, type] = {}  # a tensor class -> its subclass that flushes on reading node


class _Batch:
    """One backward()'s deferred updates: (parameter, through .data, recipe) in order."""

    __slots__ = ("record", "ops", "left", "done", "thread")

    def __init__(self, record):
        self.record = record
        self.thread = threading.get_ident()  # (whose backward() losses the step computes)
        # (param, via_data, method, alpha, index, coef, side, base, seen)
        self.ops: list[tuple] = []
        self.left = {id(n) for n in record.targets}  # leaves still without their update
        self.done = False


def defer(t, other, method: str, alpha) -> bool:
    """Note `t.add_/sub_(other, alpha=alpha)` (`method` "add" or "sub") for the batch instead
    of computing it, where `other` is a gradient backward() has not built (or a number times
    one) of the parameter `t` is (or whose `.data` it is). False when it does not fit: the
    caller computes the update as always."""
    via_data = type(t) is t._data_view
    if via_data:
        if t._moves:
            return False
        owner = t.owner
    elif autograd_state.enabled():  # (a leaf that requires grad: the eager path raises)
        return False
    else:
        owner = t
    if not (owner.requires_grad and owner._is_leaf) or other.built:
        return False
    if engine.recording() or (method == "sub" and alpha != 1 and alpha != -1):
        return False  # (rarer spellings, such as sub_ with an alpha, stay eager)
    if method == "add" and alpha != 1 and type(other) is not other._lazy_grad:
        return False
    if other.base is not None and type(other.base) is other._lazy_grad:
        return False  # (accumulated over several backward() calls: one record a batch)
    record, index = other.pending, other.index
    node = owner.node  # (a parameter already in a batch: that batch is flushed first)
    if record.targets[index] is not node or other.dtype is not owner.dtype:
        return False
    if other.shape != owner.shape:
        return False
    batch = getattr(_local, "batch", None)
    if batch is not None and batch.record is not record:
        flush(batch)
        batch = None
    if batch is None:
        batch = _local.batch = _Batch(record)
    if type(other) is other._lazy_grad:
        coef, side = None, None
        seen = record.clip_count() if other.seen is None else other.seen  # (clipped so far)
    else:
        coef, side, seen = other.coef, other.side, other.seen
    t._version += 1  # as the eager update counts it (a .data write: the view's version)
    retire(node, owner, counted=not via_data)  # a graph from before it raises at backward()
    batch.ops.append((owner, via_data, method, alpha, index, coef, side, other.base, seen))
    batch.left.discard(id(node))
    _hide(owner, batch)
    if not batch.left:
        flush(batch)
    return True


def flush(batch: _Batch | None = None) -> None:
    """Compute a batch of deferred updates (this thread's, by default) as one step."""
    batch = batch if batch is not None else getattr(_local, "batch", None)
    if batch is None:
        return
    with _lock:
        if batch.done:
            return
        batch.done = True
    if getattr(_local, "batch", None) is batch:
        _local.batch = None
    params = [op[0] for op in batch.ops]
    for p in params:
        _show(p)
    record = batch.record
    pending = take_pending_outputs() if batch.thread == threading.get_ident() else []

    def build():
        with autograd_state.no_grad():
            for p, _, method, alpha, index, coef, side, base, seen in batch.ops:
                p.assign_(_value(p, method, alpha, record, index, coef, side, base, seen))
        return params

    mine = batch.thread == threading.get_ident()
    # the lazy values alive now (stepcache.carried): the step's thread's
    extra = with_carried(params[0] if params else None, pending, []) if mine else []
    usable = not engine.recording() and all(t.node is record.root for t in pending)
    if usable:
        key = ("manual", tuple((*op[1:4], *op[5:7], op[7] is not None, op[8]) for op in batch.ops))
        empty = [[] for _ in params]
        _cache().run([record], None, key, params, empty, empty, pending, extra, build)
    else:
        _realize_all(build(), pending, extra)


def _value(p, method, alpha, record, index, coef, side, base, seen):
    """The updated value of `p`, built as the eager `p.<method>_(other, alpha)` builds it
    (`base`: the zeros the gradient was accumulated onto, or None; `seen`: the clippings
    of the gradient asked for before the update, `LazyGrad.seen`)."""
    g = p._lazy_grad(record, index, base, seen)
    if coef is not None:
        g = g._plain.__mul__(g, coef) if side == "mul" else g._plain.__rmul__(g, coef)
    other = g if alpha == 1 else g * alpha
    # (through .data the eager path reads p's value as a view of its own: the same value;
    # reading p itself keeps p's node among the forward graph's inputs, where the step
    # cache finds it)
    return (p + other if method == "add" else p - other).detach()


def _cache() -> StepCache:
    cache = getattr(_local, "cache", None)
    if cache is None:
        cache = _local.cache = StepCache()
    return cache


def _hide(t, batch: _Batch) -> None:
    """Swap t's class for one whose `node` computes the batch first."""
    cls = type(t)
    if cls in _HIDDEN.values():
        return
    sub = _HIDDEN.get(cls)
    if sub is None:
        body = {"__slots__": (), "__module__": cls.__module__, "node": property(_get, _set)}
        for name in _CLASS_READERS:  # (they would see the swapped class)
            body[name] = _revealing(name)
        sub = _HIDDEN[cls] = type(cls.__name__, (cls,), body)
    with _lock:
        _batch_of[id(t)] = batch
    t.__class__ = sub


def _show(t) -> None:
    """Give t its own class back."""
    cls = type(t)
    if cls in _HIDDEN.values():
        t.__class__ = cls.__bases__[0]
    with _lock:
        _batch_of.pop(id(t), None)


_CLASS_READERS = ("__reduce_ex__", "__reduce__", "__deepcopy__", "__copy__")


def _revealing(name: str):
    """A method that computes the batch and gives t its class back, then calls `name`."""

    def method(t, *args):
        _get(t)
        return getattr(t, name)(*args)

    return method


def _get(t):
    batch = _batch_of.get(id(t))
    if batch is not None:
        flush(batch)
    _show(t)  # (a batch flushed by another path has already shown it)
    return t.node


def _set(t, value) -> None:
    batch = _batch_of.get(id(t))
    if batch is not None:
        flush(batch)
    _show(t)
    t.node = value
