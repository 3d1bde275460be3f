"""`fusegrad.optim.swa_utils`: weight averaging as torch.optim.swa_utils (2.14) does it.

`AveragedModel` keeps a copy of a model whose parameters are the running average (SWA)
or exponential moving average (EMA) of the model's; `update_bn` recomputes BatchNorm's
running statistics over a loader for averaged weights; `SWALR` anneals each group's lr
to a fixed SWA lr.

An average is updated once a step, after `opt.step()`. Every averaged tensor's new
value is built first and all are computed in one plan (`_write_all`), then written in
place: the averaged parameters stay buffers, never a lazy chain growing from step to
step, and a step's update runs the same few kernels every step (the SWA weight
1 / (n + 1) is read from the `n_averaged` buffer, so a new n compiles nothing).

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> from fusegrad.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
>>> model = nn.Linear(1, 1, bias=False)
>>> ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.5))
>>> with fg.no_grad():
...     _ = model.weight.fill_(2.0)
>>> ema.update_parameters(model)  # the first update copies
>>> with fg.no_grad():
...     _ = model.weight.fill_(4.0)
>>> ema.update_parameters(model)
>>> ema.module.weight.item(), int(ema.n_averaged)
(3.0, 2)
"""

from __future__ import annotations

import copy
import itertools
import math

from ..nnapi import no_grad, realize, tensor
from .lr_base import LRScheduler
from .lr_cyclic import format_param
from .module import Module
from .normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm

# torch's _BatchNorm family (the lazy ones derive from these; InstanceNorm is not one)
_BATCH_NORMS = (BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm)

__all__ = [
    "AveragedModel",
    "update_bn",
    "SWALR",
    "get_ema_multi_avg_fn",
    "get_swa_multi_avg_fn",
    "get_ema_avg_fn",
    "get_swa_avg_fn",
]


def _check_decay(decay: float) -> None:
    if decay < 0.0 or decay > 1.0:  # torch's words
        raise ValueError(
            f"Invalid decay value {decay} provided. Please provide a value in [0,1] range."
        )


def _write_all(targets: list, values: list) -> None:
    """Write each of `values` into its tensor of `targets` in place, all computed in one
    plan first: the writes then rebind each target to a buffer (no kernel each), and
    nothing reads a half-updated list."""
    realize(*values)
    with no_grad():
        for t, v in zip(targets, values):
            # (a target may be a detached view, which a write reaches through; a detached
            # view of it would not reach its owner here)
            t.copy_(v)


def get_ema_multi_avg_fn(decay: float = 0.999):
    """The EMA update of lists of tensors, in place: `ema = lerp(ema, current, 1 - decay)`
    for floating tensors, `ema * decay + current * (1 - decay)` written back (truncated)
    for the others, as torch's. Raises ValueError for a decay outside [0, 1].

    >>> import fusegrad as fg
    >>> ema, now = fg.tensor([0.0, 1.0]), fg.tensor([1.0, 3.0])
    >>> get_ema_multi_avg_fn(0.75)([ema], [now], 1)
    >>> ema.tolist()
    [0.25, 1.5]
    """
    _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, _) -> None:
        with no_grad():
            values = [
                e.lerp(c, 1 - decay) if e.dtype.is_float else e * decay + c * (1 - decay)
                for e, c in zip(ema_param_list, current_param_list)
            ]
        _write_all(list(ema_param_list), values)

    return ema_update


def get_swa_multi_avg_fn():
    """The equally weighted (SWA) update of lists of tensors, in place:
    `avg = lerp(avg, current, 1 / (n + 1))` for floating tensors, with `n` the number of
    models averaged so far (an integer tensor gives a float32 weight, as torch's). Other
    dtypes get `avg + (current - avg) / (n + 1)` written back (truncated); torch's
    addcdiv refuses an integer tensor there.

    >>> import fusegrad as fg
    >>> avg, now = fg.tensor([1.0, 2.0]), fg.tensor([4.0, 8.0])
    >>> get_swa_multi_avg_fn()([avg], [now], 2)
    >>> avg.tolist()
    [2.0, 4.0]
    """

    def swa_update(averaged_param_list, current_param_list, num_averaged) -> None:
        with no_grad():
            weight = 1 / (num_averaged + 1)
            values = [
                a.lerp(c, weight) if a.dtype.is_float else a + (c - a) / (num_averaged + 1)
                for a, c in zip(averaged_param_list, current_param_list)
            ]
        _write_all(list(averaged_param_list), values)

    return swa_update


def get_ema_avg_fn(decay: float = 0.999):
    """The EMA of one tensor, returned: `decay * ema + (1 - decay) * current`.

    >>> import fusegrad as fg
    >>> get_ema_avg_fn(0.5)(fg.tensor([0.0]), fg.tensor([2.0]), 1).tolist()
    [1.0]
    """
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """The equally weighted average of one tensor, returned:
    `averaged + (current - averaged) / (num_averaged + 1)`.

    >>> import fusegrad as fg
    >>> get_swa_avg_fn()(fg.tensor([1.0]), fg.tensor([4.0]), 2).tolist()
    [2.0]
    """

    def swa_update(averaged_param, current_param, num_averaged):
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class AveragedModel(Module):
    """A deep copy of `model` whose parameters `update_parameters(model)` averages.

    As torch.optim.swa_utils.AveragedModel: the first update copies the model's
    parameters, each later one applies `multi_avg_fn` (lists, in place), `avg_fn` (one
    tensor at a time, returning the new value) or, with neither, the equally weighted
    running average; `n_averaged` (an int64 buffer) counts the updates. With
    `use_buffers=True` the buffers are averaged too, else they are copied from the
    model at every update. `forward` calls the copy; the state dict holds `n_averaged`
    and `module.<name>`. `device` places the copy (and `n_averaged`).

    What differs on purpose: every new value of an update is computed in one plan, so
    the averaged parameters stay buffers (torch's in-place updates are eager anyway);
    the default average is the CPU formula `avg + (current - avg) / (n + 1)` on every
    device (torch's CUDA path lerps with a float32 weight).
    """

    def __init__(
        self,
        model: Module,
        device=None,
        avg_fn=None,
        multi_avg_fn=None,
        use_buffers: bool = False,
    ):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype="int64", device=device).realize())
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model: Module) -> None:
        """Average `model`'s parameters (and buffers, with use_buffers) into the copy's;
        copy them on the first call; copy the buffers when not averaging them."""
        if self.use_buffers:
            mine = list(itertools.chain(self.module.parameters(), self.module.buffers()))
            theirs = list(itertools.chain(model.parameters(), model.buffers()))
        else:
            mine, theirs = list(self.parameters()), list(model.parameters())
        pairs = list(zip(mine, theirs))  # (torch zips the two without checking lengths)
        with no_grad():
            current = [c.detach().to(a.device) for a, c in pairs]
        count = int(self.n_averaged.item())  # (a buffer written by the host: no kernel)
        if count == 0:
            _write_all([a for a, _ in pairs], current)
        else:
            self._average([a for a, _ in pairs], current)
        if not self.use_buffers:
            with no_grad():
                buffers = list(self.module.buffers())
                fresh = [b.detach().to(s.device) for s, b in zip(buffers, model.buffers())]
            _write_all(buffers, fresh)
        self.n_averaged.assign_(tensor(count + 1, dtype="int64", device=self.n_averaged.device))

    def _average(self, averaged: list, current: list) -> None:
        """One update of every averaged tensor by `avg_fn` or `multi_avg_fn` (or SWA's)."""
        if self.avg_fn is not None:
            with no_grad():
                values = [
                    self.avg_fn(a.detach(), c, self.n_averaged.to(a.device))
                    for a, c in zip(averaged, current)
                ]
            _write_all(averaged, values)
            return
        # torch hands a list function each (device, dtype) group of tensors apart
        groups: dict = {}
        for a, c in zip(averaged, current):
            mine, theirs = groups.setdefault((str(a.device), a.dtype), ([], []))
            mine.append(a)
            theirs.append(c)
        for mine, theirs in groups.values():
            n = self.n_averaged.to(mine[0].device)
            if self.multi_avg_fn is not None:
                self.multi_avg_fn([a.detach() for a in mine], theirs, n)
            else:
                _write_all(mine, [get_swa_avg_fn()(a, c, n) for a, c in zip(mine, theirs)])


def update_bn(loader, model: Module, device=None) -> None:
    """Recompute the running statistics of `model`'s BatchNorm layers over `loader`.

    As torch.optim.swa_utils.update_bn: each BatchNorm's statistics are reset and its
    momentum set to None (a cumulative average over the batches), the model runs in
    training mode on each batch (the first element of a list or tuple batch; moved to
    `device` if given) without gradients, then the momenta and the model's mode are
    restored. A model with no BatchNorm layer is left alone (the loader is not read).

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> bn = nn.BatchNorm1d(1)
    >>> update_bn([fg.tensor([[1.0], [3.0]]), (fg.tensor([[5.0], [7.0]]), None)], bn)
    >>> bn.running_mean.tolist(), bn.momentum
    ([4.0], 0.1)
    """
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BATCH_NORMS):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    with no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if device is not None:
                batch = batch.to(device)
            model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's lr to `swa_lr` over `anneal_epochs` epochs, then hold it.

    As torch.optim.swa_utils.SWALR: `swa_lr` is one number or one per group (stored as
    the group's "swa_lr"); at the k-th step (k from 0 at construction) the fraction
    t = clip(k / max(1, anneal_epochs), 0, 1) is mapped through (1 - cos(pi t)) / 2
    ("cos") or t ("linear") to alpha, and the lr becomes
    swa_lr * alpha + lr0 * (1 - alpha), where lr0 is the lr that the previous step's
    alpha would have started from (torch's recursive form; anneal_epochs=0 jumps to
    swa_lr at once).

    >>> import fusegrad as fg
    >>> from fusegrad import nn, optim
    >>> opt = optim.SGD([nn.Parameter(fg.zeros(1))], lr=1.0)
    >>> sched = SWALR(opt, swa_lr=0.0, anneal_epochs=2, anneal_strategy="linear")
    >>> for _ in range(3):
    ...     opt.step(); sched.step()
    ...     print(sched.get_last_lr())
    [0.5]
    [0.0]
    [0.0]
    """

    def __init__(
        self,
        optimizer,
        swa_lr,
        anneal_epochs: int = 10,
        anneal_strategy: str = "cos",
        last_epoch: int = -1,
    ):
        for value, group in zip(format_param("swa_lr", optimizer, swa_lr), optimizer.param_groups):
            group["swa_lr"] = value
        if anneal_strategy not in ("cos", "linear"):  # torch's words, here and below
            raise ValueError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}"
            )
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t: float) -> float:
        return t

    @staticmethod
    def _cosine_anneal(t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        """The lr that annealing by `alpha` towards `swa_lr` turned into `lr`."""
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def _set_anneal_func(self, anneal_strategy: str) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def get_lr(self) -> list[float]:
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        span = max(1, self.anneal_epochs)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / span)))
        groups = self.optimizer.param_groups
        starts = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / span)))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, starts)]

    def state_dict(self) -> dict:
        """Everything but the optimizer and the anneal function (named by
        `_anneal_strategy`, which load_state_dict reads back)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
