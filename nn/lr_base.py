"""`LRScheduler`, the base class of fusegrad.optim.lr_scheduler's schedules (nn/lr_scheduler.py,
nn/lr_cyclic.py): `step()` advances `last_epoch` and writes each group's lr from `get_lr()`.

>>> import fusegrad as fg
>>> from fusegrad import nn, optim
>>> from fusegrad.nn.lr_base import LRScheduler
>>> class Halving(LRScheduler):
...     def get_lr(self):
...         return [b * 0.5**self.last_epoch for b in self.base_lrs]
>>> opt = optim.SGD([nn.Parameter(fg.zeros(1))], lr=1.0)
>>> sched = Halving(opt)
>>> opt.step()
>>> sched.step()
>>> sched.get_last_lr()
[0.5]
"""

from __future__ import annotations

import functools
import warnings

from ..nnapi import jit_recording, on_replay
from .optimizer import Optimizer

# torch's words (torch/optim/lr_scheduler.py)
_ORDER_WARNING = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
    "later, you should call them in the opposite order: `optimizer.step()` before "
    "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first "
    "value of the learning rate schedule. See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate"
)


class LRScheduler:
    """Base class: `step()` advances `last_epoch` and sets each group's lr from `get_lr()`."""

    def __init__(self, optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when "
                        "resuming an optimizer"
                    )
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rates the last `step()` set, one per parameter group."""
        return self._last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance the schedule one epoch (call it after `optimizer.step()`)."""
        # the first call after the constructor's own: PyTorch warns once if the optimizer
        # has not stepped yet (the first learning rate of the schedule would be skipped)
        if self._step_count == 1 and getattr(self.optimizer, "_step_count", 1) == 0:
            warnings.warn(_ORDER_WARNING, UserWarning, stacklevel=2)
        if jit_recording():  # inside a jitted step: each replay steps the schedule too
            on_replay(functools.partial(self._step, epoch))
        self._step(epoch)

    def _step(self, epoch: int | None) -> None:
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """Everything but the optimizer (plain numbers and lists; fg.save can write it)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)

    def _lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]


def is_initial_step(scheduler: LRScheduler) -> bool:
    """Whether `get_lr` is running for the constructor's own step (torch's `_is_initial`:
    a recursive schedule leaves the lr as it is then). SequentialLR's restart of its first
    schedule counts too, as torch's `_initial_step` does."""
    return scheduler._step_count == 1
