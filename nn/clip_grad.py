"""Gradient clipping, as torch.nn.utils.clip_grad_norm_ and clip_grad_value_.

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

from ..nnapi import (
    Tensor,
    clip_when_built,
    no_grad,
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
    absolute value), as PyTorch computes it.
    """
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


def _clip_norm(grads: list, max_norm, norm_type: float, error_if_nonfinite: bool) -> Tensor:
    """`clip_grad_norm_` on these gradients, now: the total norm; each scaled in place."""
    if norm_type == float("inf"):
        parts = [g.abs().amax() for g in grads]
        total = parts[0]
        for part in parts[1:]:
            total = total.maximum(part)
    elif norm_type == 2.0:
        total = sum((g * g).sum() for g in grads).sqrt()
    else:
        total = sum((g.abs() ** norm_type).sum() for g in grads) ** (1.0 / norm_type)
    if error_if_nonfinite:
        value = total.item()
        if value != value or value in (float("inf"), float("-inf")):
            raise RuntimeError(
                f"The total norm of order {norm_type} for gradients from `parameters` is "
                "non-finite, so it cannot be clipped. To disable this error and scale the "
                "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
            )
    coef = (max_norm / (total + 1e-6)).minimum(1.0)
    for g in grads:
        g.assign_(g * coef.cast(g.dtype))
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
