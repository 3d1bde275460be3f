"""`fusegrad.optim`: SGD, Adam, AdamW, RMSprop, Adagrad and Adadelta with PyTorch's exact
update formulas; NAdam, RAdam and Adamax (nn/adam_variants.py), Rprop and ASGD
(nn/rprop_asgd.py), Adafactor (nn/adafactor.py), and LBFGS (nn/lbfgs.py); the weight
averaging of `optim.swa_utils` (nn/swa_utils.py).

A step builds every parameter's update as graph and realizes, in ONE
`fg.realize` call, the new parameters, the new optimizer state and the losses
`backward()` was called on since the last step. So the forward pass, the
backward pass and the update are scheduled together (fused where they can
be), and `loss.item()` after `step()` reads a value already computed.

Scalars that change from step to step (the learning rate, Adam's bias
corrections, momentum on the first step) are not baked into the graph as
constants: each step writes them into the same small realized 0-d tensors,
which the graph reads as data. The graph therefore has the same structure
every step, the schedule and kernels compiled for the first step are reused
by every later one, and `fusegrad.jit` can replay a step by rewriting them.

>>> import fusegrad as fg
>>> from fusegrad import nn, optim
>>> w = nn.Parameter(fg.tensor([1.0, 2.0]))
>>> opt = optim.SGD([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w.tolist()
[0.800000011920929, 1.600000023841858]
"""

from __future__ import annotations

import math

import numpy as np

from ..nnapi import (
    from_numpy,
)
from . import (
    lr_scheduler,  # noqa: F401  (`fusegrad.optim.lr_scheduler`, as in torch)
    swa_utils,  # noqa: F401  (`fusegrad.optim.swa_utils`, as in torch)
)
from .adafactor import Adafactor  # noqa: F401  (torch.optim's name)
from .adam_variants import Adamax, NAdam, RAdam  # noqa: F401  (torch.optim's names)
from .lbfgs import LBFGS  # noqa: F401  (torch.optim.LBFGS's home)
from .optimizer import Optimizer, zeros_state
from .rprop_asgd import ASGD, Rprop  # noqa: F401  (torch.optim's names)


def _check(value: float, name: str, low: float = 0.0) -> None:
    if not value >= low:
        raise ValueError(f"Invalid {name} value: {value}")


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

    As torch.optim.SGD: g = grad + weight_decay * p; with momentum,
    b = g on the first step and b = momentum * b + (1 - dampening) * g after,
    and g = g + momentum * b (Nesterov) or g = b; then p = p - lr * g.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ):
        _check(lr, "learning rate")
        _check(momentum, "momentum")
        _check(weight_decay, "weight_decay")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    _switches = ("momentum", "weight_decay", "nesterov", "maximize")

    def _init_state(self, p, state, group):
        if group["momentum"] != 0:
            state["momentum_buffer"] = zeros_state(p)
            state["_started"] = False

    def _group_scalars(self, group):
        return [group["lr"], group["weight_decay"], group["momentum"]]

    def _param_scalars(self, group, state):
        # the momentum buffer's decay and the new gradient's weight: (0, 1) on the first step
        if "_started" not in state:
            return []
        first, state["_started"] = not state["_started"], True
        return [0.0, 1.0] if first else [group["momentum"], 1.0 - group["dampening"]]

    def _update(self, p, grad, group, state, h):
        lr, wd, momentum, *buffer_weights = h
        g = -grad if group["maximize"] else grad
        if group["weight_decay"] != 0:
            g = g + wd * p
        if group["momentum"] != 0:
            decay, fresh = buffer_weights
            buf = state["momentum_buffer"]
            buf.assign_(decay * buf + fresh * g)  # on the first step: 0 * 0 + 1 * g = g exactly
            g = g + momentum * buf if group["nesterov"] else buf
        p.assign_(p - lr * g)


class Adam(Optimizer):
    """Adam (Kingma & Ba) with torch.optim.Adam's formulas, bias correction included.

    m = m + (1 - b1)(g - m); v = b2 v + (1 - b2) g^2;
    p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
    with v replaced by its running maximum under amsgrad. Weight decay adds
    weight_decay * p to g (Adam) or multiplies p by 1 - lr * weight_decay first
    (AdamW, `decoupled_weight_decay=True`).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        decoupled_weight_decay: bool = False,
    ):
        _check(lr, "learning rate")
        _check(eps, "epsilon value")
        _check(weight_decay, "weight_decay value")
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    _switches = ("weight_decay", "amsgrad", "maximize", "decoupled_weight_decay")

    def _init_state(self, p, state, group):
        state["step"] = 0
        state["exp_avg"] = zeros_state(p)
        state["exp_avg_sq"] = zeros_state(p)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = zeros_state(p)

    def _group_scalars(self, group):
        lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
        decay = 1 - lr * wd if group["decoupled_weight_decay"] else wd
        return [decay, 1 - b1, b2, 1 - b2, group["eps"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        t = state["step"]
        (b1, b2), lr = group["betas"], group["lr"]
        bias_correction1 = 1 - b1**t
        bias_correction2 = 1 - b2**t
        return [lr / bias_correction1, math.sqrt(bias_correction2)]

    def _update(self, p, grad, group, state, h):
        wd, one_minus_b1, b2, one_minus_b2, eps, step_size, bc2_sqrt = h
        g = -grad if group["maximize"] else grad
        base = p
        if group["weight_decay"] != 0:
            if group["decoupled_weight_decay"]:
                base = p * wd  # wd holds 1 - lr * weight_decay here
            else:
                g = g + wd * p
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.assign_(m + one_minus_b1 * (g - m))
        v.assign_(b2 * v + one_minus_b2 * (g * g))
        if group["amsgrad"]:
            vmax = state["max_exp_avg_sq"]
            vmax.assign_(vmax.maximum(v))
            v = vmax
        denom = v.sqrt() / bc2_sqrt + eps
        p.assign_(base - step_size * (m / denom))


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01), as torch.optim.AdamW."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ):
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            maximize=maximize,
            decoupled_weight_decay=True,
        )


class RMSprop(Optimizer):
    """RMSprop with torch.optim.RMSprop's formulas (centered, momentum, weight decay).

    v = alpha v + (1 - alpha) g^2; with `centered`, a = alpha a + (1 - alpha) g
    and the denominator is sqrt(v - a^2) + eps, else sqrt(v) + eps; then
    p -= lr * g / denom, or through a momentum buffer b = momentum b + g / denom.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ):
        _check(lr, "learning rate")
        _check(eps, "epsilon value")
        _check(momentum, "momentum value")
        _check(weight_decay, "weight_decay value")
        _check(alpha, "alpha value")
        defaults = dict(
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    _switches = ("momentum", "weight_decay", "centered", "maximize")

    def _init_state(self, p, state, group):
        state["step"] = 0
        state["square_avg"] = zeros_state(p)
        if group["momentum"] > 0:
            state["momentum_buffer"] = zeros_state(p)
        if group["centered"]:
            state["grad_avg"] = zeros_state(p)

    def _group_scalars(self, group):
        a = group["alpha"]
        return [group["lr"], a, 1 - a, group["eps"], group["weight_decay"], group["momentum"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        return []

    def _update(self, p, grad, group, state, h):
        lr, alpha, one_minus_alpha, eps, wd, momentum = h
        g = -grad if group["maximize"] else grad
        if group["weight_decay"] != 0:
            g = g + wd * p
        v = state["square_avg"]
        v.assign_(alpha * v + one_minus_alpha * (g * g))
        if group["centered"]:
            a = state["grad_avg"]
            a.assign_(a + one_minus_alpha * (g - a))  # torch's lerp
            denom = (v - a * a).sqrt() + eps
        else:
            denom = v.sqrt() + eps
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf.assign_(momentum * buf + g / denom)
            p.assign_(p - lr * buf)
        else:
            p.assign_(p - lr * (g / denom))


class Adagrad(Optimizer):
    """Adagrad with torch.optim.Adagrad's formulas.

    s += g^2; p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps), with
    s starting at `initial_accumulator_value`.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ):
        _check(lr, "learning rate")
        _check(lr_decay, "lr_decay value")
        _check(weight_decay, "weight_decay value")
        _check(initial_accumulator_value, "initial_accumulator_value value")
        _check(eps, "epsilon value")
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    _switches = ("weight_decay", "maximize")

    def _init_state(self, p, state, group):
        state["step"] = 0
        start = group["initial_accumulator_value"]
        state["sum"] = from_numpy(np.full(p.shape, start, dtype=p.dtype.np), device=p.device)

    def _group_scalars(self, group):
        return [group["eps"], group["weight_decay"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        return [group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])]

    def _update(self, p, grad, group, state, h):
        eps, wd, clr = h
        g = -grad if group["maximize"] else grad
        if group["weight_decay"] != 0:
            g = g + wd * p
        s = state["sum"]
        s.assign_(s + g * g)
        p.assign_(p - clr * (g / (s.sqrt() + eps)))


class Adadelta(Optimizer):
    """Adadelta (Zeiler) with torch.optim.Adadelta's formulas.

    v = rho v + (1 - rho) g^2; d = sqrt(u + eps) / sqrt(v + eps) * g;
    u = rho u + (1 - rho) d^2; p = p - lr * d, with g = grad + weight_decay * p.
    """

    def __init__(
        self,
        params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
    ):
        _check(lr, "learning rate")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check(eps, "epsilon value")
        _check(weight_decay, "weight_decay value")
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    _switches = ("weight_decay", "maximize")

    def _init_state(self, p, state, group):
        state["step"] = 0
        state["square_avg"] = zeros_state(p)
        state["acc_delta"] = zeros_state(p)

    def _group_scalars(self, group):
        rho = group["rho"]
        return [group["lr"], rho, 1 - rho, group["eps"], group["weight_decay"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        return []

    def _update(self, p, grad, group, state, h):
        lr, rho, one_minus_rho, eps, wd = h
        g = -grad if group["maximize"] else grad
        if group["weight_decay"] != 0:
            g = g + wd * p
        v, u = state["square_avg"], state["acc_delta"]
        v.assign_(rho * v + one_minus_rho * (g * g))
        delta = (u + eps).sqrt() / (v + eps).sqrt() * g
        u.assign_(rho * u + one_minus_rho * (delta * delta))
        p.assign_(p - lr * delta)
