"""`NAdam`, `RAdam` and `Adamax`: Adam's relatives, with torch.optim's update rules.

Each is an `Optimizer` (nn/optimizer.py) as Adam is in nn/optim.py: the update is built
as graph from the step's scalars, which are host floats written into the same 0-d
tensors every step. What changes from step to step (a bias correction, NAdam's
momentum schedule, whether RAdam rectifies) is such a scalar, never a graph constant
or a Python branch, so the step compiled first is the step run from then on.

>>> import fusegrad as fg
>>> from fusegrad import optim
>>> w = fg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = optim.Adamax([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> [round(v, 4) for v in w.tolist()]  # Adamax's first step moves each weight by lr
[0.9, -1.9]
"""

from __future__ import annotations

import numpy as np

from ..nnapi import Tensor, default_float, where
from .optimizer import Optimizer, zeros_state


def scalar_state(value: float) -> float:
    """`value` rounded as torch keeps a scalar state entry (a 0-d tensor of the default
    float dtype: float32 unless the default is float64), so the schedules that multiply
    it step after step (NAdam's mu_product, ASGD's eta) round as torch's do."""
    return float(np.float64(value) if default_float().np == np.float64 else np.float32(value))


def check_common(lr, eps: float | None = None, betas=(), weight_decay: float = 0.0) -> None:
    """torch's argument checks shared by these optimizers, with torch's messages."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if eps is not None and not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


def refuse_differentiable(name: str, differentiable: bool) -> None:
    """torch's `differentiable=True` lets autograd see through `step()`; fusegrad's step
    runs under no_grad, so the option is refused rather than ignored."""
    if differentiable:
        raise NotImplementedError(
            f"{name}: differentiable=True (autograd through optimizer.step()) is not "
            "supported by fusegrad; leave it False"
        )


def _decay_or_coefficient(group: dict) -> float:
    """Decoupled weight decay's factor 1 - lr * weight_decay, or the L2 coefficient."""
    wd = group["weight_decay"]
    return 1 - group["lr"] * wd if group.get("decoupled_weight_decay") else wd


def _weight_decayed(p: Tensor, g: Tensor, group: dict, wd: Tensor) -> tuple[Tensor, Tensor]:
    """(the parameter the update starts from, the gradient), after weight decay."""
    if group["weight_decay"] == 0:
        return p, g
    if group.get("decoupled_weight_decay"):
        return p * wd, g  # wd holds 1 - lr * weight_decay here
    return p, g + wd * p


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat), as torch.optim.NAdam.

    mu_t = beta1 (1 - 0.96^(t momentum_decay) / 2) and mu_product = mu_1 ... mu_t;
    m and v as Adam's; denom = sqrt(v / (1 - beta2^t)) + eps;
    p -= lr (1 - mu_t) / (1 - mu_product) * g / denom
         + lr mu_{t+1} / (1 - mu_product mu_{t+1}) * m / denom.
    """

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        check_common(lr, eps, betas, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        refuse_differentiable("NAdam", differentiable)
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    _switches = ("weight_decay", "decoupled_weight_decay", "maximize")

    def _init_state(self, p, state, group):
        state["step"] = 0
        state["mu_product"] = 1.0
        state["exp_avg"] = zeros_state(p)
        state["exp_avg_sq"] = zeros_state(p)

    def _group_scalars(self, group):
        b1, b2 = group["betas"]
        return [_decay_or_coefficient(group), 1 - b1, b2, 1 - b2, group["eps"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        t = state["step"]
        (b1, b2), lr, decay = group["betas"], group["lr"], group["momentum_decay"]
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * decay))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * decay))
        state["mu_product"] = mu_product = scalar_state(state["mu_product"] * scalar_state(mu))
        grad_weight = lr * (1.0 - mu) / (1.0 - mu_product)
        avg_weight = lr * mu_next / (1.0 - mu_product * mu_next)
        return [1 - b2**t, grad_weight, avg_weight]

    def _update(self, p, grad, group, state, h):
        wd, one_minus_b1, b2, one_minus_b2, eps, bias_correction2, grad_weight, avg_weight = h
        base, g = _weight_decayed(p, -grad if group["maximize"] else grad, group, wd)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.assign_(m + one_minus_b1 * (g - m))
        v.assign_(b2 * v + one_minus_b2 * (g * g))
        denom = (v / bias_correction2).sqrt() + eps
        p.assign_(base - grad_weight * (g / denom) - avg_weight * (m / denom))


class RAdam(Optimizer):
    """Rectified Adam (Liu et al.), as torch.optim.RAdam.

    m and v as Adam's; rho_inf = 2 / (1 - beta2) - 1 and
    rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t). While rho_t <= 5 the step is
    momentum SGD, p -= lr m / (1 - beta1^t); after, it is Adam's step scaled by
    rect = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)).
    Which of the two a step takes is a 0/1 scalar the graph selects with, not a branch.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        check_common(lr, eps, betas, weight_decay)
        refuse_differentiable("RAdam", differentiable)
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            decoupled_weight_decay=decoupled_weight_decay,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    _switches = ("weight_decay", "decoupled_weight_decay", "maximize")

    def _init_state(self, p, state, group):
        state["step"] = 0
        state["exp_avg"] = zeros_state(p)
        state["exp_avg_sq"] = zeros_state(p)

    def _group_scalars(self, group):
        b1, b2 = group["betas"]
        return [_decay_or_coefficient(group), 1 - b1, b2, 1 - b2, group["eps"], group["lr"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        t = state["step"]
        b1, b2 = group["betas"]
        bias_correction2 = 1 - b2**t
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * (b2**t) / bias_correction2
        rectified = rho_t > 5.0
        rect = 0.0  # (unused then; the formula's root would be of a negative number)
        if rectified:
            rect = (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
            rect = rect**0.5
        return [1 - b1**t, bias_correction2**0.5, rect, 1.0 if rectified else 0.0]

    def _update(self, p, grad, group, state, h):
        wd, one_minus_b1, b2, one_minus_b2, eps, lr, bias_correction1, bc2_sqrt, rect, use = h
        base, g = _weight_decayed(p, -grad if group["maximize"] else grad, group, wd)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.assign_(m + one_minus_b1 * (g - m))
        v.assign_(b2 * v + one_minus_b2 * (g * g))
        momentum_step = m / bias_correction1 * lr
        adaptive_lr = bc2_sqrt / (v.sqrt() + eps)
        p.assign_(base - where(use > 0, momentum_step * adaptive_lr * rect, momentum_step))


class Adamax(Optimizer):
    """Adam with the infinity norm (Kingma & Ba, section 7), as torch.optim.Adamax.

    m = m + (1 - beta1)(g - m); u = max(beta2 u, |g| + eps);
    p -= lr / (1 - beta1^t) * m / u.
    """

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        check_common(lr, eps, betas, weight_decay)
        refuse_differentiable("Adamax", differentiable)
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    _switches = ("weight_decay", "maximize")

    def _init_state(self, p, state, group):
        state["step"] = 0
        state["exp_avg"] = zeros_state(p)
        state["exp_inf"] = zeros_state(p)

    def _group_scalars(self, group):
        b1, b2 = group["betas"]
        return [group["weight_decay"], 1 - b1, b2, group["eps"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        return [group["lr"] / (1 - group["betas"][0] ** state["step"])]

    def _update(self, p, grad, group, state, h):
        wd, one_minus_b1, b2, eps, clr = h
        _, g = _weight_decayed(p, -grad if group["maximize"] else grad, group, wd)
        m, u = state["exp_avg"], state["exp_inf"]
        m.assign_(m + one_minus_b1 * (g - m))
        u.assign_((u * b2).maximum(g.abs() + eps))
        p.assign_(p - clr * (m / u))
