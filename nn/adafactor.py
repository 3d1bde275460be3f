"""`fusegrad.optim.Adafactor`, with torch.optim.Adafactor's (2.14) update rule, state and checks.

Adafactor keeps, for a parameter of two dimensions or more, the running mean of the
squared gradient over its last dimension (`row_var`, shape [..., m, 1]) and over its
second to last (`col_var`, [..., 1, n]) instead of a full second moment: memory
m + n where Adam keeps m * n. A vector (or a 0-d parameter) keeps a full `variance`.

The step size is relative: rho = min(lr, 1 / sqrt(t)) times the parameter's RMS (at
least eps2), and the update is clipped to RMS at most `d`. torch computes both RMS
values with `.item()`; here they are 0-d tensors in the step's graph, so the step stays
one cached plan that reads nothing back to the host.

>>> import fusegrad as fg
>>> from fusegrad import nn, optim
>>> w = nn.Parameter(fg.tensor([[1.0, 2.0], [3.0, 4.0]]))
>>> opt = optim.Adafactor([w])
>>> (w * w).sum().backward()
>>> opt.step()
>>> sorted(opt.state[w])
['col_var', 'row_var', 'step']
"""

from __future__ import annotations

import math

import numpy as np

from ..nnapi import Tensor, from_numpy
from .optimizer import Optimizer, zeros_state


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern) as torch.optim.Adafactor computes it.

    With beta = t^beta2_decay, rho = min(lr, 1/sqrt(t)) and
    alpha = max(eps2, RMS(p)) * rho at step t:
    p = p * (1 - lr * weight_decay); for a matrix (the last two dimensions),
    R = lerp(R, mean(g^2, -1), beta), C = lerp(C, mean(g^2, -2), beta),
    V = R C / max(mean(R, -2), eps1); for a vector V = lerp(V, g^2, beta); then
    U = g / sqrt(max(V, eps1^2)) and p = p - alpha / max(1, RMS(U) / d) * U.
    eps1=None means the machine epsilon of the group's first parameter's dtype (torch
    takes it from the first parameter it updates, for the whole group).

    What differs on purpose: `lr` must be a number (torch also takes a 1-element
    tensor); `foreach` is accepted and changes nothing; `step` is a Python number where
    torch keeps a float32 0-d tensor (same value); an empty parameter is left as it is
    (torch's step raises ZeroDivisionError computing its RMS).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple[float | None, float] = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
    ):
        # torch's checks and words (torch/optim/_adafactor.py)
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        defaults = dict(
            lr=lr,
            beta2_decay=beta2_decay,
            eps=tuple(eps),
            d=d,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    _switches = ("weight_decay", "maximize")

    def _init_state(self, p, state, group):
        if p.dtype.is_complex:
            raise RuntimeError("Adafactor does not support complex parameters")
        state["step"] = 0
        if p.ndim > 1:
            *lead, m, n = p.shape
            state["row_var"] = _zeros((*lead, m, 1), p)
            state["col_var"] = _zeros((*lead, 1, n), p)
        else:
            state["variance"] = zeros_state(p)

    def _group_scalars(self, group):
        lr, (eps1, eps2) = group["lr"], group["eps"]
        if eps1 is None:
            first = next(p for p in group["params"] if p.grad is not None)
            eps1 = float(np.finfo(first.dtype.np).eps)
        return [1 - lr * group["weight_decay"], eps1, eps1 * eps1, eps2, group["d"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        t = float(state["step"])
        return [t ** group["beta2_decay"], min(group["lr"], 1 / t**0.5)]

    def _update(self, p, grad, group, state, h):
        decay, eps1, eps1_sq, eps2, d, beta, rho = h
        g = -grad if group["maximize"] else grad
        root_n = math.sqrt(p.numel())
        # the relative step reads the parameter before weight decay, as torch's
        alpha = ((p * p).sum().sqrt() / root_n).maximum(eps2) * rho
        base = p * decay if group["weight_decay"] != 0 else p
        square = g * g
        if p.ndim > 1:
            row, col = state["row_var"], state["col_var"]
            row.assign_(row.lerp(square.mean(-1, keepdim=True), beta))
            col.assign_(col.lerp(square.mean(-2, keepdim=True), beta))
            estimate = row * col / row.mean(-2, keepdim=True).maximum(eps1)
        else:
            variance = state["variance"]
            variance.assign_(variance.lerp(square, beta))
            estimate = variance
        update = estimate.maximum(eps1_sq).rsqrt() * g
        clip = ((update * update).sum().sqrt() / (root_n * d)).clamp(min=1.0)
        p.assign_(base - (alpha / clip) * update)


def _zeros(shape: tuple, like: Tensor) -> Tensor:
    """A realized zero tensor of `shape`, typed and placed as `like` (a factored state)."""
    return from_numpy(np.zeros(shape, dtype=like.dtype.np), device=like.device)
