"""Whether operations record gradients (`fusegrad.no_grad()` turns it off)."""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref

from .ir.ops import Ops


class _State(threading.local):
    """This thread's modes. Defaults as class attributes: a read is always a hit (a
    `getattr` default on a miss costs an exception inside CPython, on every op)."""

    enabled = True  # gradients are recorded (off inside `no_grad()`)
    inference = False  # inside `inference_mode()`


_state = _State()


def enabled() -> bool:
    return _state.enabled


def no_grad(func=None):
    """Within this block, results never require grad (as `torch.no_grad()`); also a
    decorator, with or without the call (`@fg.no_grad()`, `@fg.no_grad`), as torch's.

    >>> import fusegrad as fg
    >>> @fg.no_grad
    ... def double(t):
    ...     return t * 2
    >>> double(fg.ones(1, requires_grad=True)).requires_grad
    False
    """
    if callable(func):  # @fg.no_grad, without the call
        return _NoGrad()(func)
    return _NoGrad()


class _NoGrad:
    """What `no_grad()` returns: a context manager, and a decorator."""

    def __init__(self):
        self._saved: list[bool] = []  # one per nested `with` of this object

    def __enter__(self) -> None:
        self._saved.append(enabled())
        _state.enabled = False

    def __exit__(self, *exc) -> None:
        _state.enabled = self._saved.pop()

    def __call__(self, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with _NoGrad():
                return fn(*args, **kwargs)

        return run


@contextlib.contextmanager
def enable_grad():
    old = enabled()
    _state.enabled = True
    try:
        yield
    finally:
        _state.enabled = old


def is_grad_enabled() -> bool:
    """Whether operations record history now (False under `no_grad()`), as torch's."""
    return enabled()


class set_grad_enabled:  # noqa: N801  (torch's name)
    """Turn recording on or off, as `torch.set_grad_enabled(mode)`: called plainly it sets
    the mode; as a context manager (or decorator) the mode is restored on exit.

    >>> import fusegrad as fg
    >>> w = fg.ones(2, requires_grad=True)
    >>> with fg.set_grad_enabled(False):
    ...     (w * 2).requires_grad
    False
    """

    def __init__(self, mode: bool):
        self._before = enabled()
        _state.enabled = bool(mode)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        _state.enabled = self._before

    def __call__(self, fn):
        mode = enabled()
        _state.enabled = self._before  # decorating does not change the mode now

        @functools.wraps(fn)
        def run(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return run


def is_inference_mode_enabled() -> bool:
    """Whether an `inference_mode()` block is running on this thread."""
    return _state.inference


class inference_mode:  # noqa: N801  (torch's name)
    """Compute without recording gradients, as `torch.inference_mode()`: a context manager
    and a decorator (`@fg.inference_mode()` or `@fg.inference_mode`).
    `inference_mode(False)` changes nothing.

    Within it, as under `no_grad()`, results never require grad. (fusegrad's lazy tensors
    cost the same either way, so unlike PyTorch's "inference tensors" the results may be
    used in autograd afterwards.)

    >>> import fusegrad as fg
    >>> w = fg.ones(2, requires_grad=True)
    >>> with fg.inference_mode():
    ...     (w * 2).requires_grad, fg.is_inference_mode_enabled()
    (False, True)
    """

    def __new__(cls, mode=True):
        if callable(mode):  # @fg.inference_mode, without the call
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self._saved: list[tuple[bool, bool]] = []  # one per nested `with` of this object

    def __enter__(self) -> None:
        self._saved.append((enabled(), is_inference_mode_enabled()))
        if self.mode:
            _state.enabled, _state.inference = False, True

    def __exit__(self, *exc) -> None:
        _state.enabled, _state.inference = self._saved.pop()

    def __call__(self, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with inference_mode(self.mode):
                return fn(*args, **kwargs)

        return run


class _Anomaly:
    """Anomaly mode (`fusegrad.autograd.detect_anomaly`): process-wide, as torch's flag.
    `enabled`: backward() checks its gradients for NaN; `check_nan`: torch's second flag
    (False keeps the mode on without the NaN check, which is all the mode does here)."""

    enabled = False
    check_nan = True


anomaly = _Anomaly()


def is_anomaly_enabled() -> bool:
    """Whether anomaly mode is on (`fusegrad.autograd.detect_anomaly`), as
    `torch.is_anomaly_enabled()`."""
    return anomaly.enabled


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly mode checks gradients for NaN, as
    `torch.is_anomaly_check_nan_enabled()`."""
    return anomaly.check_nan


# Results that require grad and are, or are computed from, empty values: node id -> (the
# node, weak refs to its parents' nodes). An empty value folds to a constant without
# sources (ir/node.py: no kernel reads it), and so may a reduction of one, so the graph
# alone no longer shows what they came from; `grad()` follows these links to tell
# PyTorch's "used, with an empty or zero gradient" (x[1:1].sum()) from "not used".
_empty_links: dict[int, tuple] = {}
_MAX_EMPTY_PARENTS = 256  # per (shared, hash-consed) empty constant
# A parent that is not empty is often a temporary no one holds (the weight's reshape that a
# convolution multiplies an empty batch's windows by) and its weak reference dies with it:
# the nodes it was computed from are linked too, up to this many per parent, so the path
# reaches the weight itself (a parameter's node lives as long as the parameter).
_MAX_SOURCES_PER_PARENT = 32


def _with_sources(n) -> list:
    """`n` and, unless it is empty (its own links go on from there), the nodes it was
    computed from up to any detach, breadth first, at most `_MAX_SOURCES_PER_PARENT`."""
    if 0 in n.shape:
        return [n]
    out, seen, queue = [], set(), [n]
    while queue and len(out) < _MAX_SOURCES_PER_PARENT:
        m = queue.pop(0)
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append(m)
        if m.op is not Ops.DETACH:  # (no gradient flows past a detach)
            queue.extend(m.srcs)
    return out


def link_empty(node, parents) -> None:
    """Record that `node` (empty, or computed from an empty value) came from `parents`."""
    entry = _empty_links.get(id(node))
    refs = entry[1] if entry is not None and entry[0] is node else []
    live = [r for r in refs if r() is not None]
    live.extend(weakref.ref(m) for p in parents for m in _with_sources(p.node))
    _empty_links[id(node)] = (node, live[-_MAX_EMPTY_PARENTS:])


def has_empty_links() -> bool:
    """Whether any empty value was linked to its parents (in this process, ever)."""
    return bool(_empty_links)


def linked_among(ids: set) -> list:
    """The nodes, of those whose ids are in `ids`, that `link_empty` recorded parents for."""
    if not _empty_links:
        return []
    out = []
    for k in ids & _empty_links.keys():
        node = _empty_links[k][0]
        if id(node) == k:
            out.append(node)
    return out


def empty_parents(node) -> list:
    """The nodes `node` was computed from, as `link_empty` recorded them."""
    entry = _empty_links.get(id(node))
    if entry is None or entry[0] is not node:
        return []
    return [n for n in (r() for r in entry[1]) if n is not None]
