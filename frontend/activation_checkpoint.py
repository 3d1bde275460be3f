"""torch.utils.checkpoint's `checkpoint` and `checkpoint_sequential` (`fusegrad.utils.checkpoint`).

In PyTorch, checkpointing a block frees its activations after the forward pass and runs the
block again during backward, trading compute for memory. fusegrad's graphs are lazy: a
step's forward and backward are scheduled together, and what is kept or recomputed is the
scheduler's decision for the whole step (docs/ARCHITECTURE.md). So `checkpoint(fn, *args)`
calls `fn(*args)` once: values and gradients are those of the plain call, which are also
torch's (its recomputation reproduces the forward, random draws included where
`preserve_rng_state`), and peak memory is what the schedule makes it, not what torch's
recomputation would. torch's behaviours around the call are kept: the warning when
`use_reentrant` is not given, the ValueError for keyword arguments with
`use_reentrant=True`, and, with `use_reentrant=True` and no input that requires grad,
torch's warning and its outcome: the block runs without recording gradients, so its
parameters get none.

>>> import fusegrad as fg
>>> from fusegrad.utils.checkpoint import checkpoint
>>> layer = fg.nn.Linear(3, 2)
>>> x = fg.ones(4, 3, requires_grad=True)
>>> checkpoint(layer, x, use_reentrant=False).shape
(4, 2)
"""

from __future__ import annotations

import warnings

from .autograd_state import no_grad
from .tensor import Tensor

_NO_REENTRANT_GIVEN = (
    "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. "
    "Starting in PyTorch 2.9, calling checkpoint without use_reentrant will raise an "
    "exception. use_reentrant=False is recommended, but if you need to preserve the current "
    "default behavior, you can pass use_reentrant=True. Refer to docs for more details on "
    "the differences between the two variants."
)


def checkpoint(
    function,
    *args,
    use_reentrant: bool | None = None,
    preserve_rng_state: bool = True,
    context_fn=None,
    determinism_check: str = "default",
    debug: bool = False,
    early_stop: bool = True,
    respect_saved_tensors_hooks=None,
    **kwargs,
):
    """`function(*args, **kwargs)`, as torch's `checkpoint` computes it (the module's
    docstring: nothing is recomputed; the schedule decides what is kept). The options
    after `use_reentrant` are torch's, accepted; they change nothing here."""
    if use_reentrant is None:
        warnings.warn(_NO_REENTRANT_GIVEN, UserWarning, stacklevel=2)
        use_reentrant = True  # (torch's default)
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn(
                "None of the inputs have requires_grad=True. Gradients will be None",
                UserWarning,
                stacklevel=2,
            )
            with no_grad():
                return function(*args)
    return function(*args, **kwargs)


def checkpoint_sequential(functions, segments: int, input, use_reentrant=None, **kwargs):  # noqa: A002
    """torch's `checkpoint_sequential`: the modules (or an `nn.Sequential`'s children)
    applied in order to `input`, in `segments` checkpointed runs (here: `checkpoint`'s
    rules, each run a plain call)."""
    if use_reentrant is None:
        warnings.warn(_NO_REENTRANT_GIVEN, UserWarning, stacklevel=2)
        use_reentrant = True
    if hasattr(functions, "children") and callable(functions.children):
        functions = list(functions.children())
    functions = list(functions)
    size = len(functions) // segments  # (torch's segments: the last takes the rest)
    if size < 1:
        raise ValueError(
            f"checkpoint_sequential: {segments} segments of {len(functions)} functions: "
            "each segment needs at least one"
        )
    end = 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        block = functions[start:end]
        input = checkpoint(_run(block), input, use_reentrant=use_reentrant, **kwargs)
    return _run(functions[end:])(input)


def _run(block):
    def forward(x):
        for f in block:
            x = f(x)
        return x

    return forward


__all__ = ["checkpoint", "checkpoint_sequential"]
