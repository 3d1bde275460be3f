"""Version counters for in-place updates, as PyTorch's `t._version`.

A Tensor updated in place (`p -= lr * g`, `add_`, `copy_`, ...) is rebound to a
new node; graphs built before the update still hold the old one, which keeps
its old value, so most gradients through them stay right. The exception is a
leaf that requires grad: `backward()` differentiates with respect to the
leaf's *current* node, which an older graph does not contain, so its gradient
would silently be missing. Such a leaf's old node is recorded here, and
`backward()` / `grad()` raise (as PyTorch does) when the graph still uses it.

>>> import fusegrad as fg
>>> w = fg.ones(2, requires_grad=True)
>>> loss = (w * w).sum()
>>> with fg.no_grad():
...     w -= 0.1
>>> w._version
1
"""

from __future__ import annotations

import weakref

from .errors import FusegradError, fail
from .ir.node import Node, toposort
from .ir.ops import Ops


class InplaceError(FusegradError, RuntimeError):
    """An in-place update PyTorch refuses, or a graph that outlived one (RuntimeError)."""


# a leaf's node before an in-place update -> (description, version it had)
_retired: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def retire(old: Node, t) -> None:
    """Remember that leaf `t` no longer is `old` (t._version is its new version)."""
    _retired[old] = (f"{t.dtype.name} {t.shape}", t._version - 1, t._version)


def check_unmodified(root: Node, op: str) -> None:
    """Raise if the graph of `root` reads a leaf's value from before an in-place update."""
    if not _retired:
        return
    for n in toposort([root], stop=lambda n: n.op is Ops.DETACH):
        hit = _retired.get(n)
        if hit is not None:
            what, was, now = hit
            fail(
                InplaceError,
                op,
                "one of the variables needed for gradient computation has been modified by "
                f"an inplace operation: [{what}] is at version {now}; expected version {was} "
                "instead (the update came after this graph was built: build it again)",
            )
