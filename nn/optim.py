"""`fusegrad.optim`: SGD, Adam and AdamW with PyTorch's exact update formulas.

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

import functools
import math
from collections import defaultdict

import numpy as np

from .. import creation
from ..autograd import take_pending_outputs
from ..autograd_state import enable_grad, no_grad
from ..errors import at_callers_site
from ..jit import guard, on_replay, track
from ..jit import recording as jit_recording
from ..stepcache import StepCache
from ..tensor import Tensor


class Optimizer:
    """Base class: parameter groups, per-parameter state, zero_grad and the fused step.

    A subclass creates its state in `_init_state`, lists each step's scalars
    in `_group_scalars` and `_param_scalars` (host floats, which reach the
    graph as realized 0-d tensors) and builds the update from them in `_update`.
    """

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self._slots: dict = {}  # the step's scalars as 0-d tensors (see _write_scalars)
        self._steps = StepCache()  # steps seen before run without building graphs
        self._step_count = 0  # step() calls so far (a scheduler warns if it comes first)
        self.state: defaultdict = defaultdict(dict)  # keyed by the parameter (hashed by identity)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors "
                "or dicts, but got a Tensor"
            )
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict) -> None:
        group = dict(param_group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if id(p) in seen:
                raise ValueError("some parameters appear in more than one parameter group")
            seen.add(id(p))
        for name, default in self.defaults.items():
            group.setdefault(name, default)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (or set it to zeros with set_to_none=False)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = None if set_to_none else creation.zeros_like(p)

    # ---------------------------------------------------------------- the fused step
    def step(self, closure=None, *, with_outputs=()):
        """Update every parameter that has a gradient; realize it all in one schedule.

        The schedule also computes the tensors `backward()` was called on and any
        in `with_outputs` (say, the batch's predictions), so reading them after
        the step costs nothing: the forward pass runs once.
        """
        self._step_count += 1
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        pending = take_pending_outputs()
        active = [(g, p) for g in self.param_groups for p in g["params"] if p.grad is not None]
        for group, p in active:
            if not self.state[p]:
                self._init_state(p, self.state[p], group)
        scalars = self._write_scalars(active)
        shape = self._graph_options()
        if jit_recording():  # (the hooks' arguments cost a plain step for nothing)
            on_replay(functools.partial(self._write_scalars, active))
            track(
                [p for _, p in active]
                + [t for _, p in active for t in self.state[p].values() if isinstance(t, Tensor)]
            )
            guard(lambda: self._graph_options() == shape)

        def build():
            outputs = []
            with no_grad(), at_callers_site(f"{type(self).__name__.lower()} update", "optimizer"):
                for group, p in active:
                    state = self.state[p]
                    self._update(p, p.grad, group, state, scalars[id(p)])
                    outputs.append(p)
                    outputs.extend(t for t in state.values() if isinstance(t, Tensor))
            return outputs

        extra = [t for t in with_outputs if not t._has_value()]
        params = [p for _, p in active]
        states = [[t for t in self.state[p].values() if isinstance(t, Tensor)] for p in params]
        opt_key = (type(self), shape, tuple(id(p) for p in params))
        self._steps.step(
            opt_key, params, states, [scalars[id(p)] for p in params], pending, extra, build
        )
        return loss

    def _write_scalars(self, active: list) -> dict[int, list[Tensor]]:
        """Compute this step's scalars on the host and write them into their 0-d tensors.

        Each group (per dtype) and each parameter keeps the same tensors from
        step to step; a step writes new values into their buffers. The graph
        reads them as data, so a new learning rate or Adam's next bias
        correction changes no graph structure and nothing recompiles; and
        `fusegrad.jit` replays a step by calling this function alone.
        """
        out, shared = {}, {}
        for group, p in active:
            key = (id(group), p.dtype)
            if key not in shared:  # once per group and dtype, not per parameter
                shared[key] = _scalar_slots(self._slots, key, self._group_scalars(group), p)
            own = _scalar_slots(self._slots, id(p), self._param_scalars(group, self.state[p]), p)
            out[id(p)] = shared[key] + own
        return out

    def _graph_options(self) -> tuple:
        """What in the groups decides the update's graph (not its scalars): the parameters,
        and options that add or remove terms. A jitted step is recorded for these."""
        return tuple(
            (tuple(map(id, g["params"])),)
            + tuple((k, g[k] if isinstance(g[k], bool) else g[k] != 0) for k in self._switches)
            for g in self.param_groups
        )

    _switches: tuple[str, ...] = ()  # options whose being zero / False changes the graph

    def _init_state(self, p: Tensor, state: dict, group: dict) -> None:
        """Create a parameter's state tensors (realized zeros) before its first update."""
        raise NotImplementedError

    def _group_scalars(self, group: dict) -> list[float]:
        """This step's scalars shared by the group's parameters (the lr, ...), as host floats."""
        raise NotImplementedError

    def _param_scalars(self, group: dict, state: dict) -> list[float]:
        """This step's scalars of one parameter (bias corrections, ...); advances its step."""
        raise NotImplementedError

    def _update(self, p: Tensor, grad: Tensor, group: dict, state: dict, h: list) -> None:
        """Build the update from `h` (group scalars, then the parameter's) and assign_ it."""
        raise NotImplementedError

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """{'state': {index: {name: value}}, 'param_groups': [...]} with parameters as indices."""
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = []
            for p in group["params"]:
                index[id(p)] = len(index)
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {}
        for p, s in self.state.items():
            if id(p) in index:
                state[index[id(p)]] = {
                    k: (v.detach() if isinstance(v, Tensor) else v) for k, v in s.items()
                }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        params = []
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group "
                    "that doesn't match the size of optimizer's group"
                )
            mine.update({k: v for k, v in theirs.items() if k != "params"})
            params.extend(zip(theirs["params"], mine["params"]))
        self.state = defaultdict(dict)
        for idx, p in params:
            if idx not in state_dict["state"]:
                continue
            entry = {}
            for k, v in state_dict["state"][idx].items():
                if isinstance(v, (Tensor, np.ndarray)):
                    v = creation.from_numpy(np.array(v, dtype=p.dtype.np), device=p.device)
                entry[k] = v
            self.state[p] = entry

    # ---------------------------------------------------------------- copy and pickle
    def __getstate__(self) -> dict:
        """Everything but the compiled steps and the scalar slots, which are keyed by the
        ids of these parameters: a copy (`copy.deepcopy`, pickle) starts them afresh.
        Its parameters are the copied ones when the model is copied in the same call,
        `copy.deepcopy((model, opt))`, as in torch."""
        state = dict(self.__dict__)
        del state["_steps"], state["_slots"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._steps, self._slots = StepCache(), {}

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        return "\n".join(lines) + "\n)"


def _scalar_slots(slots: dict, key, values: list[float], like: Tensor) -> list[Tensor]:
    """`values` written into the realized 0-d tensors kept under `key` (made on first use)."""
    held = slots.get(key)
    if held is None or len(held) != len(values):
        held = slots[key] = [
            creation.from_numpy(np.zeros((), like.dtype.np), device=like.device) for _ in values
        ]
    for t, v in zip(held, values):
        t._write_scalar(v)
    return held


def _zeros_like(p: Tensor) -> Tensor:
    return creation.from_numpy(np.zeros(p.shape, dtype=p.dtype.np), device=p.device)


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
            state["momentum_buffer"] = _zeros_like(p)
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
        state["exp_avg"] = _zeros_like(p)
        state["exp_avg_sq"] = _zeros_like(p)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = _zeros_like(p)

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
        state["square_avg"] = _zeros_like(p)
        if group["momentum"] > 0:
            state["momentum_buffer"] = _zeros_like(p)
        if group["centered"]:
            state["grad_avg"] = _zeros_like(p)

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
        state["sum"] = creation.from_numpy(
            np.full(p.shape, start, dtype=p.dtype.np), device=p.device
        )

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


# schedulers live in lr_scheduler.py; `fusegrad.optim.lr_scheduler` as in torch
from . import lr_scheduler  # noqa: E402, F401
