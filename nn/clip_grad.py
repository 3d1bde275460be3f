"""Gradient clipping, as torch.nn.utils.clip_grad_norm_ and clip_grad_value_, and the two
halves of clip_grad_norm_ (torch 2.6+): `get_total_norm` and `clip_grads_with_norm_`.

Both rescale the lazy `.grad` tensors in place (`assign_`), so the norm, the
scaling and the optimizer update that reads the gradients are all computed
in the optimizer step's one schedule; nothing runs here unless
`error_if_nonfinite` asks for the norm's value. Gradients backward() has not built yet
are not built here either: the clipping runs when they are (`clip_when_built`), so a
training loop that clips every step still runs its optimizer's cached step, whose plan
clips, rather than deriving the gradients again each step (nanoGPT, the word language
model). The returned norm is then built with them, the first time it is read.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> w = nn.Parameter(fg.tensor([3.0, 4.0]))
>>> (w * w).sum().backward()          # grad (6, 8): norm 10
>>> round(nn.utils.clip_grad_norm_([w], max_norm=5.0).item(), 4)
10.0
>>> [round(v, 3) for v in w.grad.tolist()]
[3.0, 4.0]
"""

from __future__ import annotations

import types
import warnings

from ..nnapi import (
    Tensor,
    clip_when_built,
    no_grad,
    stack,
    tensor,
)


def _grads(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
    foreach=None,
) -> Tensor:  # fmt: skip
    """Scale all gradients by min(1, max_norm / (total_norm + 1e-6)); returns the total norm.

    The total norm is the `norm_type`-norm of all gradients together (inf: the largest
    absolute value), as PyTorch computes it: `get_total_norm` of the gradients, then
    `clip_grads_with_norm_`. `foreach` is accepted and changes nothing (the scaling of
    every gradient is one fused step here).
    """
    if not isinstance(parameters, Tensor) and isinstance(parameters, types.GeneratorType):
        parameters = list(parameters)
        if not parameters:
            warnings.warn(
                "`parameters` is an empty generator, no gradient clipping will occur.",
                stacklevel=2,
            )
    grads = _grads(parameters)
    norm_type = float(norm_type)
    if not grads:
        return tensor(0.0)
    # (deferred where nothing can raise: an error raises here, at the caller's line)
    if not error_if_nonfinite and type(max_norm) in (int, float) and norm_type > 0:
        max_norm = float(max_norm)
        deferred = clip_when_built(
            grads,
            lambda gs: _clip_norm(gs, max_norm, norm_type, False),
            ("norm", max_norm, norm_type),
        )
        if deferred is not None:
            return deferred
    with no_grad():
        return _clip_norm(grads, max_norm, norm_type, error_if_nonfinite)


def clip_grad_norm(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
    foreach=None,
) -> Tensor:  # fmt: skip
    """`clip_grad_norm_` under its old name, deprecated in torch (a FutureWarning)."""
    warnings.warn(
        "`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
        "`torch.nn.utils.clip_grad_norm_`.",
        FutureWarning,
        stacklevel=2,
    )
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def get_total_norm(
    tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None
) -> Tensor:
    """The `norm_type`-norm of `tensors` (a tensor or an iterable of them) taken together,
    as torch.nn.utils.get_total_norm: the norm of their norms (for a positive order, the
    norm of all their elements as one vector; inf: the largest absolute value). A 0-d
    tensor, 0.0 for no tensors; with `error_if_nonfinite`, a NaN or infinite norm raises
    (reading its value). No history: computed under no_grad.

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> nn.utils.get_total_norm([fg.tensor([3.0]), fg.tensor([4.0])]).item()
    5.0
    """
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    with no_grad():
        total = _total_norm(tensors, norm_type)
        if error_if_nonfinite:
            _refuse_nonfinite(total, norm_type)
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm, foreach=None) -> None:
    """Scale the parameters' gradients in place by min(1, max_norm / (total_norm + 1e-6)),
    `total_norm` computed beforehand (`get_total_norm`), as torch's (2.6+):
    `clip_grad_norm_` in two steps, with a norm of the caller's choosing between them
    (one reduced over several processes, say)."""
    grads = _grads(parameters)
    if not grads:
        return
    max_norm = float(max_norm)
    total = total_norm if isinstance(total_norm, Tensor) else tensor(float(total_norm))
    with no_grad():
        _scale(grads, max_norm, total)


def _total_norm(tensors: list, norm_type: float) -> Tensor:
    """The total `norm_type`-norm of `tensors`, torch's: each tensor's norm, then the norm
    of those (a positive order sums their elements' powers at once, the same value)."""
    if norm_type == float("inf"):
        parts = [t.abs().amax() for t in tensors]
        total = parts[0]
        for part in parts[1:]:
            total = total.maximum(part)
        return total
    if norm_type == 2.0:
        return sum((t * t).sum() for t in tensors).sqrt()
    if norm_type > 0:
        return sum((t.abs() ** norm_type).sum() for t in tensors) ** (1.0 / norm_type)
    # 0 (a count), a negative order, -inf: the norm of the norms, as torch's
    return stack([t.norm(norm_type) for t in tensors]).norm(norm_type)


def _refuse_nonfinite(total: Tensor, norm_type: float) -> None:
    value = total.item()
    if value != value or value in (float("inf"), float("-inf")):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
        )


def _scale(grads: list, max_norm, total: Tensor) -> None:
    """Each gradient times min(1, max_norm / (total + 1e-6)), in place."""
    coef = (max_norm / (total + 1e-6)).minimum(1.0)
    for g in grads:
        g.assign_(g * coef.cast(g.dtype))


def _clip_norm(grads: list, max_norm, norm_type: float, error_if_nonfinite: bool) -> Tensor:
    """`clip_grad_norm_` on these gradients, now: the total norm; each scaled in place."""
    total = _total_norm(grads, norm_type)
    if error_if_nonfinite:
        _refuse_nonfinite(total, norm_type)
    _scale(grads, max_norm, total)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element to [-clip_value, clip_value]."""
    clip_value = float(clip_value)
    grads = _grads(parameters)
    clipping = lambda gs: _clip_value(gs, clip_value)  # noqa: E731
    if clip_when_built(grads, clipping, ("value", clip_value)) is not None:  # (not its value)
        return
    with no_grad():
        _clip_value(grads, clip_value)


def _clip_value(grads: list, clip_value: float) -> None:
    for g in grads:
        g.assign_(g.clamp(-clip_value, clip_value))
