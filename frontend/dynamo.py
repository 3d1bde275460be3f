"""Sizes marked to vary ahead of time: `fg.mark_dynamic(t, dim)`, torch's
`torch._dynamo.mark_dynamic` (and `maybe_mark_dynamic`, `mark_static`, `reset`, under
`torch._dynamo` for a script run with `python -m fusegrad`).

fusegrad plans a graph for its sizes. When a graph comes back with other sizes (a new
batch size, a new sentence length), the second plan is lowered to forms that serve every
size and its kernels are compiled once, generic in their sizes; the third and later
sizes run those kernels, given their sizes (pipeline/templates.py; torch.compile's
automatic dynamic shapes do the same). Marking an input's dimension dynamic says so
before the second size comes: the first plan of every graph that reads the tensor is
already lowered to those forms, its kernels compiled generic (each lowered at other
sizes of the marked dimension too, to see which of its numbers move with it), and so
are the plans that read what those compute, so the second size runs generic kernels
instead of compiling once more:

>>> import fusegrad as fg
>>> x = fg.ones(16, 37)
>>> fg.mark_dynamic(x, 1)            # sentence lengths vary: plan for it from the start
>>> float((x * 2).sum())
1184.0

Where fusegrad differs from torch: a mark applies to the tensor's value (and what is
computed from it), not to a compiled function's argument, so there is no guard that
refuses a size and no `min`/`max` range (accepted, not used); `mark_static` only removes
a mark (a graph seen at two sizes still runs generic kernels after that; the setting
FUSEGRAD_SIZE_TEMPLATES=0 turns that off for the whole process); `reset` forgets which
graphs were met at which sizes, not the compiled plans. `FUSEGRAD_DEBUG=1` says when a
graph is planned for varying sizes, and why: the marked dimension, or which input's
dimension changed from its first plan.
"""

from __future__ import annotations

from .runtime.engine import engine
from .tensor import Tensor


def _dims(t, index, op: str) -> tuple[int, ...]:
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}(): expected a Tensor, got {type(t).__name__}")
    indices = index if isinstance(index, (list, tuple)) else [index]
    return tuple(t._dim(i, op) for i in indices)


def mark_dynamic(t: Tensor, index, *, min=None, max=None, specialize_on=None) -> None:  # noqa: A002
    """Mark dimension(s) `index` (an int or a list of ints) of `t` as varying from call to
    call: every graph reading `t`, and reading what those compute, is planned for varying
    sizes from its first plan (the module's docstring). `min`/`max`/`specialize_on` are
    torch's, accepted and not used. An index out of range raises IndexError naming the
    shape."""
    dims = _dims(t, index, "mark_dynamic")
    engine.mark_dynamic(t.node, dims)


def maybe_mark_dynamic(t: Tensor, index) -> None:
    """torch's softer `mark_dynamic` (no error where the size is specialised anyway):
    here the same as `mark_dynamic`."""
    dims = _dims(t, index, "maybe_mark_dynamic")
    engine.mark_dynamic(t.node, dims)


def mark_static(t: Tensor, index=None) -> None:
    """Remove `mark_dynamic`'s mark from `t` (every dimension: fusegrad marks the tensor,
    and `index` is checked but the mark is the tensor's)."""
    if index is not None:
        _dims(t, index, "mark_static")
    elif not isinstance(t, Tensor):
        raise TypeError(f"mark_static(): expected a Tensor, got {type(t).__name__}")
    engine.mark_static(t.node)


def reset() -> None:
    """Forget which graphs were met at which sizes (torch._dynamo.reset's habit): the next
    plan of each graph compiles for its own sizes, as its first did. Compiled plans stay
    cached."""
    engine.forget_sizes()


__all__ = ["mark_dynamic", "maybe_mark_dynamic", "mark_static", "reset"]
