"""Steering the scheduler: ask for a cut or a merge, or schedule without a rule, and compare.

`fusegrad.debug` holds these (`fg.debug.cut`, ...):

- `cut(t)`: `t` is stored by a kernel of its own and the kernels that read it load it;
  no later rule merges that kernel with another. Returns `t` itself (the request is on
  its value, so `fg.debug.cut(h)` and `h = fg.debug.cut(h)` both read well).
- `fuse(t)`: `t` is recomputed inside the kernels that read it rather than stored, where
  the scheduler can (a value it would store for reuse, rule 4). A reduction it must
  store (broadcast back over its row, read by several kernels), an output, a gather's
  result or a `contiguous()` cannot be: the kernel's reason then says why.
- `with no_fusion():` every tensor op run inside the block is a kernel of its own (views
  stay views; library ops that are one macro node, `linear`, are cut at their output).
- `with disable_rule("sibling_reductions"):` (FUSEGRAD_DISABLE_RULES=name,name): schedule
  without the named rules; `schedule_rules()` lists them with one line each.

Every request says where it was made: a kernel's `reason` and `FUSEGRAD_DEBUG=2` read
"cut requested at train.py:9", "merge requested at train.py:9: value computed in here"
or "merge requested at train.py:9 could not be honoured: reduction broadcast back over
axis 1". Requests and disabled rules are part of the plan cache's key: toggling a rule
compiles the schedule without it once, and turning it back finds the cached one.

Requests sit on graph values, and equal values are one value (hash-consing): a cut of
`x * 2` holds for every `x * 2` of the same `x`, until that value is gone. A `fg.jit`
function replays the plans it recorded, whatever is requested later.

>>> import fusegrad as fg
>>> x = fg.randn(8, 4).realize()
>>> h = fg.debug.cut(x.exp())
>>> [k.reason.split(" at ")[0] for k in fg.kernels(h * 2)]
['cut requested', 'output requested']
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .ir import steering
from .ir.macro import expansion
from .ir.ops import LEAF, MOVEMENT, Ops
from .pipeline.schedule import RULES
from .runtime.attribution import capture
from .runtime.config import config, rule_names
from .runtime.engine import engine

if TYPE_CHECKING:
    from .tensor_base import TensorBase


def schedule_rules() -> dict[str, str]:
    """The scheduling rules `disable_rule` can turn off, each with what it does.

    >>> import fusegrad as fg
    >>> "sibling_reductions" in fg.debug.schedule_rules()
    True
    """
    return dict(RULES)


@contextlib.contextmanager
def disable_rule(*names: str) -> Iterator[None]:
    """Schedule without the named rules inside the block (`schedule_rules()` lists them;
    FUSEGRAD_DISABLE_RULES sets them for a whole run). The setting is the process's, as
    `fg.config` is: `fg.config.disable_rules` holds it.

    >>> import fusegrad as fg
    >>> with fg.debug.disable_rule("sibling_reductions"):
    ...     sorted(fg.config.disable_rules)
    ['sibling_reductions']
    """
    bad = [n for n in names if not isinstance(n, str)]
    if bad or not names:
        raise TypeError(
            f"disable_rule() expects rule names (strings), got {list(names)!r}; "
            f"the rules are {', '.join(RULES)}"
        )
    try:
        wanted = rule_names(",".join(names), "disable_rule")
    except ValueError as e:
        raise ValueError(str(e)) from None
    with config.override(disable_rules=config.disable_rules | wanted):
        yield


def cut(t: TensorBase) -> TensorBase:
    """Store `t`'s value by a kernel of its own; its readers load it. Returns `t`.

    A view is cut at the value under it (`cut(y.T)` stores `y`). A value in memory
    already (a parameter, a realized tensor, a constant) has nothing to cut: a
    UserWarning says so.
    """
    _ask(t, steering.CUT, "cut")
    return t


def fuse(t: TensorBase) -> TensorBase:
    """Compute `t`'s value inside the kernels that read it rather than store it, where the
    scheduler can; the kernel that stores it says why where it cannot. Returns `t`.

    >>> import fusegrad as fg
    >>> x = fg.randn(4, 3).realize()
    >>> m = fg.debug.fuse(x.sum(0, keepdim=True))  # broadcast back over the rows
    >>> fg.kernels(x - m)[0].reason.split(": ", 1)[1]
    'reduction broadcast back over axis 0'

    """
    _ask(t, steering.FUSE, "fuse")
    return t


class _Block(threading.local):
    site = None  # the `with no_fusion()` line of this thread's open block, or None


_block = _Block()
open_blocks = [0]  # no_fusion blocks open on any thread: Tensor's one test while it is 0


@contextlib.contextmanager
def no_fusion() -> Iterator[None]:
    """Inside the block, every tensor op's result is stored by a kernel of its own (as if
    `cut` were called on each): compare a schedule with the fused one op by op. Views
    stay views; gradients built later (`backward()` outside the block) are fused as
    usual.

    >>> import fusegrad as fg
    >>> x = fg.randn(8).realize()
    >>> with fg.debug.no_fusion():
    ...     y = (x * 2).exp() + 1
    >>> len(fg.kernels(y))
    3
    """
    outer = _block.site
    _block.site = outer or capture(1)
    open_blocks[0] += 1
    try:
        yield
    finally:
        open_blocks[0] -= 1
        _block.site = outer


def note_tensor(node) -> None:
    """Tensor's hook while a `no_fusion` block is open somewhere: cut `node` if this
    thread's block is open and it is a computed value (not a view, a leaf or a copy)."""
    where = _block.site
    if where is None or node.op in MOVEMENT or node.op in LEAF or node.op is Ops.CONTIGUOUS:
        return
    if node.op is Ops.MACRO:
        node = expansion(node)
    steering.request(node, steering.CUT, f"{capture(2) or where} (no_fusion)")


def _ask(t: TensorBase, kind: str, what: str) -> None:
    node = t.node
    while node.op in MOVEMENT or node.op is Ops.MACRO:
        node = node.srcs[0] if node.op in MOVEMENT else expansion(node)
    site = capture(2)
    if node.op in LEAF or engine.value(node) is not None:
        message = f"fusegrad.debug.{what}: the value is in memory already, nothing to {what}"
        if site is None:
            warnings.warn(message, UserWarning, stacklevel=3)
        else:
            warnings.warn_explicit(message, UserWarning, site.path, site.line)
        return
    steering.request(node, kind, str(site) if site is not None else "(no user line)")
