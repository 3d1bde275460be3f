"""Loss modules: the functions of `functional` with their options stored, as torch.nn.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> nn.MSELoss()(fg.tensor([1.0, 2.0]), fg.tensor([1.0, 4.0])).item()
2.0
"""

from __future__ import annotations

import warnings

from . import loss_functions as F
from .losses_more import legacy_reduction
from .module import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        F.check_reduction(reduction)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return "" if self.reduction == "mean" else f"reduction={self.reduction}"


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    """Mean squared error: mean((input - target)^2)."""

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error: mean(|input - target|)."""

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Squared below `beta`, absolute above (F.smooth_l1_loss)."""

    def __init__(self, reduction: str = "mean", beta: float = 1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Squared below `delta`, delta times absolute above (F.huber_loss)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class KLDivLoss(Module):
    """KL divergence (F.kl_div); use reduction="batchmean" for the true divergence."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target=False):
        super().__init__()
        if reduction not in ("mean", "sum", "none", "batchmean"):
            raise ValueError(f"{reduction} is not a valid value for reduction")
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class BCELoss(_WeightedLoss):
    """Binary cross-entropy on probabilities (put a Sigmoid before it)."""

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, self.weight, self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """Sigmoid + binary cross-entropy in one numerically stable formula."""

    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None):
        super().__init__(weight, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, self.reduction, self.pos_weight
        )


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class indices, given log-probabilities (after LogSoftmax)."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class NLLLoss2d(NLLLoss):
    """torch's deprecated NLLLoss2d: `NLLLoss` (over (N, C, H, W) as over any shape), with
    torch's signature (the deprecated `size_average` / `reduce` too) and its FutureWarning."""

    def __init__(
        self,
        weight=None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
    ):
        warnings.warn(
            "`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead as a drop-in "
            "replacement and see https://pytorch.org/docs/main/nn.html#torch.nn.NLLLoss for "
            "more details.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__(weight, ignore_index, legacy_reduction(size_average, reduce, reduction))


class CrossEntropyLoss(_WeightedLoss):
    """LogSoftmax + NLLLoss; targets are class indices or class probabilities."""

    def __init__(
        self,
        weight=None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(
            input,
            target,
            self.weight,
            self.ignore_index,
            self.reduction,
            self.label_smoothing,
        )
