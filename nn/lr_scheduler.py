"""`fusegrad.optim.lr_scheduler`: learning-rate schedules with PyTorch's formulas.

A scheduler writes `group["lr"]` of its optimizer's parameter groups; the
optimizer reads it as data at its next step, so a new learning rate never
recompiles anything. The recursive ("chainable") forms are PyTorch's own, so
the learning rates match PyTorch's step for step, rounding included.

>>> import fusegrad as fg
>>> from fusegrad import nn, optim
>>> opt = optim.SGD([nn.Parameter(fg.zeros(1))], lr=1.0)
>>> sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for _ in range(5):
...     opt.step()
...     sched.step()
...     lrs.append(sched.get_last_lr()[0])
>>> lrs
[1.0, 0.5, 0.5, 0.25, 0.25]
"""

from __future__ import annotations

import bisect
import math
import types
from collections import Counter

from ..nnapi import JitError, jit_recording
from .lr_base import LRScheduler, is_initial_step
from .lr_cyclic import CyclicLR  # noqa: F401  (torch.optim.lr_scheduler's name)
from .optimizer import Optimizer  # noqa: F401  (torch.optim.lr_scheduler.Optimizer, as torch's)

_INF = float("inf")


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch), one function or one per group."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * fn(self.last_epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self) -> dict:
        """As PyTorch: functions are not saved (None), callable objects by their __dict__."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [
            None if isinstance(fn, types.FunctionType) else dict(fn.__dict__)
            for fn in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas", [])
        self.__dict__.update(state)
        for fn, saved in zip(self.lr_lambdas, lambdas):
            if saved is not None:
                fn.__dict__.update(saved)


class MultiplicativeLR(LRScheduler):
    """lr *= lr_lambda(epoch) every epoch, one function or one per group (the constructor's
    own step multiplies by nothing)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise TypeError(f"lr_lambda should be a function, but got {type(fn).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if is_initial_step(self):
            return self._lrs()
        return [lr * fn(self.last_epoch) for lr, fn in zip(self._lrs(), self.lr_lambdas)]

    state_dict = LambdaLR.state_dict
    load_state_dict = LambdaLR.load_state_dict


class StepLR(LRScheduler):
    """lr *= gamma every `step_size` epochs."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr *= gamma at each epoch listed in `milestones`."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = Counter(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._lrs()]

    def _get_closed_form_lr(self):
        passed = sum(c for m, c in self.milestones.items() if m <= self.last_epoch)
        return [b * self.gamma**passed for b in self.base_lrs]

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["milestones"] = {int(k): v for k, v in self.milestones.items()}
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.milestones = Counter({int(k): v for k, v in self.milestones.items()})


class ExponentialLR(LRScheduler):
    """lr *= gamma every epoch."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if is_initial_step(self):
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self):
        return [b * self.gamma**self.last_epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """eta_min + (initial_lr - eta_min) (1 + cos(pi t / T_max)) / 2, in PyTorch's recursive form."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        t, T, lo = self.last_epoch, self.T_max, self.eta_min
        if is_initial_step(self):
            return self._lrs()
        if (t - 1 - T) % (2 * T) == 0:
            return [
                lr + (b - lo) * (1 - math.cos(math.pi / T)) / 2
                for lr, b in zip(self._lrs(), self.base_lrs)
            ]
        ratio = (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
        return [ratio * (lr - lo) + lo for lr in self._lrs()]

    def _get_closed_form_lr(self):
        t, T, lo = self.last_epoch, self.T_max, self.eta_min
        return [lo + (b - lo) * (1 + math.cos(math.pi * t / T)) / 2 for b in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = initial_lr * factor for the first `total_iters` epochs, then initial_lr."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch=-1):
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._lrs()]
        if self.last_epoch != self.total_iters:
            return self._lrs()
        return [lr * (1.0 / self.factor) for lr in self._lrs()]

    def _get_closed_form_lr(self):
        done = self.last_epoch >= self.total_iters
        return [b * (self.factor + done * (1 - self.factor)) for b in self.base_lrs]


class LinearLR(LRScheduler):
    """lr goes linearly from initial_lr * start_factor to initial_lr * end_factor over
    `total_iters` epochs (a warmup), then stays."""

    def __init__(
        self,
        optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ):
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError(
                "Starting multiplicative factor expected to be greater than 0 and less or "
                "equal to 1."
            )
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._lrs()]
        if is_initial_step(self) or self.last_epoch > self.total_iters:
            return self._lrs()
        delta = self.end_factor - self.start_factor
        scale = 1.0 + delta / (self.total_iters * self.start_factor + (self.last_epoch - 1) * delta)
        return [lr * scale for lr in self._lrs()]

    def _get_closed_form_lr(self):
        done = min(self.total_iters, self.last_epoch) / self.total_iters
        return [
            b * (self.start_factor + (self.end_factor - self.start_factor) * done)
            for b in self.base_lrs
        ]


class PolynomialLR(LRScheduler):
    """lr = initial_lr * (1 - t / total_iters)^power for t up to total_iters, then 0 (with
    power 1, a linear decay to zero), in torch's recursive form."""

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch=-1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        t, n = self.last_epoch, self.total_iters
        if is_initial_step(self) or t > n:
            return self._lrs()
        factor = ((1.0 - t / n) / (1.0 - (t - 1) / n)) ** self.power
        return [lr * factor for lr in self._lrs()]

    def _get_closed_form_lr(self):
        done = min(self.total_iters, self.last_epoch) / self.total_iters
        return [b * (1.0 - done) ** self.power for b in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine from initial_lr down to eta_min over T_i epochs, then restart; T_i starts at
    T_0 and is multiplied by T_mult at each restart (SGDR)."""

    def __init__(
        self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1
    ):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        cos = (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
        return [self.eta_min + (b - self.eta_min) * cos for b in self.base_lrs]

    def _step(self, epoch) -> None:
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        elif epoch >= self.T_0:
            if self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:
                n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult**n
        else:
            self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = self._lrs()


class SequentialLR(LRScheduler):
    """Run `schedulers` one after another, switching at the epochs in `milestones` (each
    starts over from epoch 0), as torch's: `SequentialLR(opt, [LinearLR(...),
    CosineAnnealingLR(...)], milestones=[warmup])`."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        if len(schedulers) < 1:
            raise ValueError("SequentialLR expects at least one scheduler, but got no scheduler.")
        for i, sched in enumerate(schedulers):
            if isinstance(sched, ReduceLROnPlateau):
                raise ValueError(
                    f"SequentialLR does not support `ReduceLROnPlateau` scheduler (at index {i})"
                )
            if sched.optimizer is not optimizer:
                raise ValueError(
                    "SequentialLR expects all schedulers to belong to the same optimizer, but "
                    f"got scheduler {type(sched).__name__} at index {i} with another one"
                )
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                "Sequential Schedulers expects number of schedulers provided to be one more "
                f"than the number of milestone points, but got number of schedulers "
                f"{len(schedulers)} and the number of milestones to be equal to {len(milestones)}"
            )
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.optimizer = optimizer
        self.last_epoch = last_epoch + 1
        self._step_count = 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        _undo_initial_steps(self._schedulers)  # the step each made when it was built
        first = self._schedulers[bisect.bisect_right(self._milestones, 0)]
        first._step_count = 0
        first._step(None)
        self._last_lr = first.get_last_lr()

    def _step(self, epoch) -> None:
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[i]
        sched._step(0 if i > 0 and self._milestones[i - 1] == self.last_epoch else None)
        self._last_lr = sched.get_last_lr()

    def state_dict(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        for sched, saved in zip(self._schedulers, state.pop("_schedulers")):
            sched.load_state_dict(saved)
        self.__dict__.update(state)


def _undo_initial_steps(schedulers) -> None:
    """Take back the constructor's step of each schedule, inside chains too (torch's
    SequentialLR.recursive_undo)."""
    for sched in schedulers:
        if isinstance(sched, ChainedScheduler):
            _undo_initial_steps(sched._schedulers)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1


class ChainedScheduler(LRScheduler):
    """Step several schedules of one optimizer together, each after the other, every
    `step()` (their factors multiply), as torch's: `ChainedScheduler([ConstantLR(opt, ...),
    ExponentialLR(opt, gamma=0.9)])`."""

    def __init__(self, schedulers, optimizer=None):
        name = type(self).__name__
        if len(schedulers) < 1:
            raise ValueError(
                f"{name} expects at least one scheduler to be chained, but got no scheduler."
            )
        optimizer = optimizer or schedulers[0].optimizer
        for i, sched in enumerate(schedulers):
            if not hasattr(sched, "optimizer"):
                raise TypeError(f"{name} at index {i} should have `optimizer` as its attribute.")
            if isinstance(sched, ReduceLROnPlateau):
                raise ValueError(
                    f"{name} does not support `ReduceLROnPlateau` scheduler as it requires "
                    "additional kwargs to be specified when calling `step`, but got one at "
                    f"index {i} in the given schedulers sequence."
                )
            if optimizer != sched.optimizer:
                raise ValueError(
                    f"{name} expects all schedulers to belong to the same optimizer, but got "
                    f"scheduler {type(sched).__name__} at index {i} has {sched.optimizer}, "
                    f"which is different from {type(optimizer).__name__}."
                )
        self._schedulers = schedulers
        self.optimizer = optimizer
        self._last_lr = [group["lr"] for group in schedulers[-1].optimizer.param_groups]

    def step(self) -> None:
        """Step every chained schedule (each warns, and is replayed under fusegrad.jit, as
        it would alone)."""
        for sched in self._schedulers:
            sched.step()
        self._last_lr = [group["lr"] for group in self._schedulers[-1].optimizer.param_groups]

    def _step(self, epoch) -> None:  # (SequentialLR steps its schedules through _step)
        for sched in self._schedulers:
            sched._step(epoch)
        self._last_lr = [group["lr"] for group in self._schedulers[-1].optimizer.param_groups]

    def state_dict(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        for sched, saved in zip(self._schedulers, state.pop("_schedulers")):
            sched.load_state_dict(saved)
        self.__dict__.update(state)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin): warm up to max_lr, then anneal far below the start.

    As torch.optim.lr_scheduler.OneCycleLR, momentum (or Adam's beta1) cycles
    inversely between max_momentum and base_momentum when cycle_momentum is set.
    Call `step()` after every batch, `total_steps` times at most.
    """

    def __init__(
        self,
        optimizer,
        max_lr,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum=0.85,
        max_momentum=0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
        groups = optimizer.param_groups
        if total_steps is not None:
            if total_steps <= 0 or not isinstance(total_steps, int):
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            if epochs <= 0 or not isinstance(epochs, int):
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if steps_per_epoch <= 0 or not isinstance(steps_per_epoch, int):
                raise ValueError(
                    f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}"
                )
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if not 0 <= pct_start <= 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}"
            )
        self.anneal_strategy = anneal_strategy
        n = self.total_steps
        if three_phase:
            self._schedule_phases = [
                dict(end_step=float(pct_start * n) - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=float(2 * pct_start * n) - 2, start_lr="max_lr",
                     end_lr="initial_lr", start_momentum="base_momentum",
                     end_momentum="max_momentum"),
                dict(end_step=n - 1, start_lr="initial_lr", end_lr="min_lr",
                     start_momentum="max_momentum", end_momentum="max_momentum"),
            ]  # fmt: skip
        else:
            self._schedule_phases = [
                dict(end_step=float(pct_start * n) - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=n - 1, start_lr="max_lr", end_lr="min_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum"),
            ]  # fmt: skip
        max_lrs = _per_group(max_lr, groups, "max_lr")
        if last_epoch == -1:
            for group, top in zip(groups, max_lrs):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            defaults = optimizer.defaults
            if "momentum" not in defaults and "betas" not in defaults:
                raise ValueError(
                    "optimizer must support momentum or beta1 with `cycle_momentum` option enabled"
                )
            self.use_beta1 = "betas" in defaults
            highs = _per_group(max_momentum, groups, "max_momentum")
            lows = _per_group(base_momentum, groups, "base_momentum")
            if last_epoch == -1:
                for group, hi, lo in zip(groups, highs, lows):
                    self._set_momentum(group, hi)
                    group["max_momentum"], group["base_momentum"] = hi, lo
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(
                f"Tried to step {step} times. The specified number of total steps is "
                f"{self.total_steps}"
            )
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end = phase["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lr = self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        momentum = self._anneal(
                            group[phase["start_momentum"]], group[phase["end_momentum"]], pct
                        )
                    break
                start = phase["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                self._set_momentum(group, momentum)
        return lrs


def _per_group(value, groups, name: str) -> list[float]:
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ValueError(f"expected {len(groups)} values for {name}, got {len(value)}")
        return list(value)
    return [value] * len(groups)


class ReduceLROnPlateau:
    """Multiply the lr by `factor` once a metric has stopped improving for `patience` epochs.

    `step(metric)` after each validation, as torch.optim.lr_scheduler.ReduceLROnPlateau
    (mode 'min' or 'max', threshold 'rel' or 'abs', cooldown, min_lr, eps).
    """

    def __init__(
        self,
        optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr=0.0,
        eps: float = 1e-8,
    ):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if mode not in ("min", "max"):
            raise ValueError("mode " + mode + " is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode " + threshold_mode + " is unknown!")
        self.optimizer = optimizer
        self.factor, self.patience, self.cooldown, self.eps = factor, patience, cooldown, eps
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.min_lrs = _per_group(min_lr, optimizer.param_groups, "min_lr")
        self.best = _INF if mode == "min" else -_INF
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def step(self, metrics, epoch: int | None = None) -> None:
        if jit_recording():
            raise JitError(
                "fusegrad.jit: ReduceLROnPlateau.step inside a jitted function would see the "
                "recorded metric on every replay; call it after the call, with the result"
            )
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self._is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return self._last_lr

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
