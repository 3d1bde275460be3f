"""`Rprop` and `ASGD`: torch.optim's resilient backpropagation and averaged SGD.

Written as the other optimizers (nn/optim.py, nn/adam_variants.py): the update is
graph, the per-step numbers are 0-d scalars written each step. Rprop's per-element
step sizes live in a state tensor; ASGD's eta and mu are host floats of its state
(torch's 0-d tensors), the step reads them as scalars, and its choice between copying
the parameter into the average and moving the average towards it is a 0/1 scalar.

>>> import fusegrad as fg
>>> from fusegrad import optim
>>> w = fg.tensor([1.0, -2.0], requires_grad=True)
>>> opt = optim.Rprop([w], lr=0.25)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w.tolist()  # each weight moves by its step size, against its gradient's sign
[0.75, -1.75]
"""

from __future__ import annotations

import numpy as np

from ..nnapi import from_numpy, where
from .adam_variants import check_common, refuse_differentiable, scalar_state
from .optimizer import Optimizer, zeros_state


class Rprop(Optimizer):
    """Resilient backpropagation, as torch.optim.Rprop.

    Per element: where g * prev > 0 the step size grows by etaplus, where it is < 0 it
    shrinks by etaminus and g counts as 0, else it stays; step sizes are clamped to
    `step_sizes`; p -= sign(g) * step_size, and prev = g. Step sizes start at `lr`
    (a later lr changes nothing, as in torch).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        check_common(lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        refuse_differentiable("Rprop", differentiable)
        defaults = dict(
            lr=lr,
            etas=etas,
            step_sizes=step_sizes,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    _switches = ("maximize",)

    def _init_state(self, p, state, group):
        state["step"] = 0
        state["prev"] = zeros_state(p)
        lr = float(group["lr"])
        state["step_size"] = from_numpy(np.full(p.shape, lr, dtype=p.dtype.np), device=p.device)

    def _group_scalars(self, group):
        (etaminus, etaplus), (smallest, largest) = group["etas"], group["step_sizes"]
        return [etaminus, etaplus, smallest, largest]

    def _param_scalars(self, group, state):
        state["step"] += 1
        return []

    def _update(self, p, grad, group, state, h):
        etaminus, etaplus, smallest, largest = h
        g = -grad if group["maximize"] else grad
        prev, step_size = state["prev"], state["step_size"]
        agreement = g * prev  # (a product, not its signs': one that underflows counts as 0)
        factor = where(agreement > 0, etaplus, where(agreement < 0, etaminus, 1.0))
        # torch's clamp_(min, max): max first, so a min above the max gives the max
        step_size.assign_((step_size * factor).maximum(smallest).minimum(largest))
        g = where(agreement < 0, 0.0, g)
        p.assign_(p - g.sign() * step_size)
        prev.assign_(g)


class ASGD(Optimizer):
    """Averaged stochastic gradient descent (Polyak & Juditsky), as torch.optim.ASGD.

    p = p (1 - lambd eta) - eta g; the average ax becomes p while mu = 1, and
    ax + mu (p - ax) after; then eta = lr / (1 + lambd lr t)^alpha and
    mu = 1 / max(1, t - t0) for the next step. `state[p]['ax']` is the average.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        check_common(lr, weight_decay=weight_decay)
        refuse_differentiable("ASGD", differentiable)
        defaults = dict(
            lr=lr,
            lambd=lambd,
            alpha=alpha,
            t0=t0,
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
        state["eta"] = scalar_state(group["lr"])
        state["mu"] = scalar_state(1.0)
        state["ax"] = zeros_state(p)

    def _group_scalars(self, group):
        return [group["weight_decay"]]

    def _param_scalars(self, group, state):
        state["step"] += 1
        t, eta, mu = state["step"], state["eta"], state["mu"]
        lr, lambd = float(group["lr"]), group["lambd"]
        # the next step's eta and mu, from this step's lr
        state["eta"] = scalar_state(lr / ((1 + lambd * lr * t) ** group["alpha"]))
        state["mu"] = scalar_state(1 / max(1, t - group["t0"]))
        return [1 - lambd * eta, eta, mu, 1.0 if mu == 1 else 0.0]

    def _update(self, p, grad, group, state, h):
        wd, decay, eta, mu, copy = h
        g = -grad if group["maximize"] else grad
        if group["weight_decay"] != 0:
            g = g + wd * p
        new = p * decay - eta * g
        ax = state["ax"]
        ax.assign_(where(copy > 0, new, ax + (new - ax) * mu))
        p.assign_(new)
