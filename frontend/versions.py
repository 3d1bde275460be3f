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

An update with no history (under no_grad, or written through `.data`) must not
chain one step's graph onto the next: `p -= lr * p.grad` builds p's new value
from its old one and from a gradient whose graph reads p's old value too, so a
lazy value left as it is would grow by a whole training step every step. So
`autograd.overwrite` computes the new value at once where that chain would form: for a
leaf that requires grad (a parameter, which the next forward reads), and for a
tensor whose current value is itself an update not computed yet (a momentum
buffer `buf.mul_(m).add_(g)`: one kernel for both). If the gradients of the
last backward() were read, it computes it together with them and the loss
(`autograd.settle`), so the forward and backward passes run once, in one plan,
and each parameter's update after the first is a small kernel on values in
memory. (A tensor updated in place many times in a row is thus computed at every
second update: `total += loss.detach()` before `opt.step()` computes the forward
for itself, as `loss.item()` there would.)
"""

from __future__ import annotations

import weakref

from .errors import FusegradError, fail
from .ir.node import Node, toposort
from .ir.ops import Ops


class InplaceError(FusegradError, RuntimeError):
    """An in-place update PyTorch refuses, or a graph that outlived one (RuntimeError)."""


# a leaf's node before an in-place update -> (description, version it had, version now);
# the versions are None for a write through `.data`, which PyTorch does not count
_retired: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# nodes an in-place update without history gave a tensor, not computed yet (see autograd.overwrite)
_updated: weakref.WeakSet = weakref.WeakSet()


def retire(old: Node, t, counted: bool = True) -> None:
    """Remember that leaf `t` no longer is `old` (t._version is its new version)."""
    versions = (t._version - 1, t._version) if counted else (None, None)
    _retired[old] = (f"{t.dtype.name} {t.shape}", *versions)


def check_unmodified(root: Node, op: str) -> None:
    """Raise if the graph of `root` reads a leaf's value from before an in-place update."""
    if not _retired:
        return
    for n in toposort([root], stop=lambda n: n.op is Ops.DETACH):
        hit = _retired.get(n)
        if hit is not None:
            what, was, now = hit
            how = (
                f"through .data: [{what}]"
                if was is None
                else f"by an inplace operation: [{what}] is at version {now}; expected version "
                f"{was} instead"
            )
            fail(
                InplaceError,
                op,
                f"one of the variables needed for gradient computation has been modified {how} "
                "(the update came after this graph was built: build it again)",
            )
