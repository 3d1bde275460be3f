"""`CyclicLR`: torch.optim.lr_scheduler.CyclicLR (Smith, "Cyclical Learning Rates").

The lr goes linearly from base_lr up to max_lr over `step_size_up` steps and back over
`step_size_down`, the swing scaled per cycle (`triangular2` halves it, `exp_range`
multiplies by gamma^step, or your `scale_fn`); momentum (or Adam's beta1) swings the
other way between max_momentum and base_momentum. Call `step()` after every batch.
Both are written into the groups as numbers the step reads as data, so cycling them
compiles nothing.

>>> import fusegrad as fg
>>> from fusegrad import nn, optim
>>> opt = optim.SGD([nn.Parameter(fg.zeros(1))], lr=0.1, momentum=0.9)
>>> sched = optim.lr_scheduler.CyclicLR(opt, base_lr=0.1, max_lr=0.5, step_size_up=2)
>>> lrs = []
>>> for _ in range(4):
...     opt.step()
...     sched.step()
...     lrs.append(round(sched.get_last_lr()[0], 6))
>>> lrs
[0.3, 0.5, 0.3, 0.1]
"""

from __future__ import annotations

import functools
import math
import types

from .lr_base import LRScheduler
from .optimizer import Optimizer


def format_param(name: str, optimizer, value) -> list:
    """One `value` per parameter group (a list or tuple must have one per group), with
    torch's error otherwise."""
    groups = optimizer.param_groups
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ValueError(
                f"{name} must have the same length as optimizer.param_groups. "
                f"{name} has {len(value)} values, param_groups has {len(groups)}."
            )
        return list(value)
    return [value] * len(groups)


def _triangular(x: float) -> float:
    return 1.0


def _triangular2(x: float) -> float:
    return 1 / (2.0 ** (x - 1))


def _exp_range(gamma: float, x: float) -> float:
    return gamma**x


class CyclicLR(LRScheduler):
    """Cycle the lr between `base_lr` and `max_lr` (and momentum the other way), as torch's."""

    def __init__(
        self,
        optimizer,
        base_lr,
        max_lr,
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn=None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum=0.8,
        max_momentum=0.9,
        last_epoch: int = -1,
    ):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        base_lrs = format_param("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = format_param("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    "optimizer must support momentum or beta1 with `cycle_momentum` option enabled"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = format_param("base_momentum", optimizer, base_momentum)
            self.max_momentums = format_param("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for high, low, group in zip(
                    self.max_momentums, self.base_momentums, optimizer.param_groups
                ):
                    self._set_momentum(group, high)
                    group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        """The built-in scale function of `mode` (and its scale_mode), unless one was given."""
        if self._scale_fn_custom is not None:
            return
        if self.mode == "triangular":
            self._scale_fn_ref, self.scale_mode = _triangular, "cycle"
        elif self.mode == "triangular2":
            self._scale_fn_ref, self.scale_mode = _triangular2, "cycle"
        elif self.mode == "exp_range":
            self._scale_fn_ref = functools.partial(_exp_range, self.gamma)
            self.scale_mode = "iterations"

    def scale_fn(self, x) -> float:
        """The swing's scale at cycle (or iteration) `x`."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        return self._scale_fn_ref(x)

    def _set_momentum(self, group: dict, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [
            base + (top - base) * scale_factor * scale
            for base, top in zip(self.base_lrs, self.max_lrs)
        ]
        if self.cycle_momentum:
            for group, low, high in zip(
                self.optimizer.param_groups, self.base_momentums, self.max_momentums
            ):
                self._set_momentum(group, high - (high - low) * scale_factor * scale)
        return lrs

    def state_dict(self) -> dict:
        """As torch's: the scale function is not saved (None), a callable object's __dict__ is."""
        state = super().state_dict()
        state.pop("_scale_fn_ref", None)
        fn = state.pop("_scale_fn_custom")
        state["_scale_fn_custom"] = None
        if fn is not None and not isinstance(fn, types.FunctionType):
            state["_scale_fn_custom"] = dict(fn.__dict__)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        fn = state.pop("_scale_fn_custom")
        super().load_state_dict(state)
        if fn is not None:
            self._scale_fn_custom.__dict__.update(fn)
        self._init_scale_fn()
