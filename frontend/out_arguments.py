"""torch's `out=` keyword on fusegrad's top-level functions: `fg.add(a, b, out=c)`.

Every function of the `fusegrad` namespace takes `out=`, as torch's do: the result is
computed as without it, then written into `out` (a tensor, or a tuple of them for a
function that returns several, `fg.max(x, 0, out=(values, indices))`), and `out` is
returned. torch's rules: the result is cast to `out`'s dtype where torch's casting allows it
(`fg.can_cast`), else RuntimeError; an `out` of another shape takes the result's (with
torch's deprecation warning when it held elements); and no gradient flows through `out=`,
so a result that requires grad raises, as torch's. A function whose result is not a tensor
refuses `out=` with the TypeError Python gives an unknown keyword.

>>> import fusegrad as fg
>>> c = fg.empty(3)
>>> fg.add(fg.tensor([1.0, 2.0, 3.0]), 1, out=c) is c, c.tolist()
(True, [2.0, 3.0, 4.0])
"""

from __future__ import annotations

import functools
import warnings

from . import autograd_state
from .tensor import Tensor
from .torch_settings import can_cast


def with_out(fn, name: str):
    """`fn` taking torch's `out=` keyword as well (see the module's docstring)."""

    # (named `wrapper`: a frame that only passes the call on, so kernels are labelled by
    # `fn`'s name, not this one's: runtime/attribution.py)
    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        return write_out(fn(*args, **kwargs), out, name)

    return wrapper


def write_out(result, out, name: str):
    """Write `result` (a tensor, or a tuple of them) into `out`; return `out`."""
    if isinstance(result, Tensor):
        if not isinstance(out, Tensor):
            raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
        _write(out, result, name)
        return out
    several = isinstance(result, tuple) and all(isinstance(r, Tensor) for r in result)
    if several and isinstance(out, (tuple, list)) and len(out) == len(result):
        for o, r in zip(out, result):
            if not isinstance(o, Tensor):
                raise TypeError(f"{name}(): each of 'out' must be a Tensor, not {type(o).__name__}")
            _write(o, r, name)
        return type(result)(*out) if hasattr(result, "_fields") else tuple(out)
    if several:
        raise TypeError(f"{name}(): argument 'out' must be a tuple of {len(result)} Tensors")
    raise TypeError(f"{name}() got an unexpected keyword argument 'out'")


def _write(out: Tensor, result: Tensor, name: str) -> None:
    if autograd_state.enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(
            f"{name}(): functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad."
        )
    if result.dtype != out.dtype:
        if not can_cast(result.dtype, out.dtype):  # (torch's RuntimeError)
            raise RuntimeError(
                f"{name}: result type {result.dtype.name} can't be cast to the desired output "
                f"type {out.dtype.name}"
            )
        result = result.to(out.dtype)
    if tuple(result.shape) == tuple(out.shape):
        out.copy_(result)
        return
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape "
            f"{list(result.shape)}. This behavior is deprecated, and in a future PyTorch "
            "release outputs will not be resized unless they have zero elements.",
            UserWarning,
            stacklevel=4,
        )
    # another shape: `out` takes the result's value and shape, as torch resizes it
    out.node, out._strides = result.node, None
    out._version += 1
