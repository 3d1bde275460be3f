"""Distance, margin and likelihood losses, as torch's: `F.pairwise_distance`,
`F.cosine_embedding_loss`, `F.margin_ranking_loss`, `F.triplet_margin_loss`,
`F.hinge_embedding_loss`, `F.poisson_nll_loss`, `F.gaussian_nll_loss` and their modules.

Each is the formula torch's ATen writes, from differentiable ops, so the gradients
(kinks included: a clamp at 0 passes the gradient at exactly 0, as torch's) are torch's.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> F.pairwise_distance(fg.tensor([[0.0, 0.0]]), fg.tensor([[3.0, 4.0]])).tolist()
[4.999...]
>>> x1, x2, y = fg.tensor([1.0, 2.0]), fg.tensor([2.0, 1.0]), fg.tensor([1.0, 1.0])
>>> F.margin_ranking_loss(x1, x2, y).item()
0.5
"""

from __future__ import annotations

import math
import warnings

from ..nnapi import ShapeError, Tensor, autocast_op, custom_gradient, fail, where
from .loss_functions import check_reduction, reduce_loss
from .module import Module


def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """The p-norm of x1 - x2 + eps along the last dim (broadcasting), as torch's: eps keeps
    the gradient finite where x1 == x2."""
    dim = max(x1.ndim, x2.ndim) - 1
    if dim < 0:
        fail(ShapeError, "pairwise_distance", "expects at least 1-D inputs, got 0-D")
    diff = x1 - x2 + eps
    if p == 0:  # a count of the nonzero differences: its gradient is zero, as torch's
        count = (diff != 0).sum(dim, keepdim=keepdim).cast(diff.dtype)
        return custom_gradient(count, [diff], lambda g, d: [d * 0.0], own_node=True)
    return diff.norm(p=p, dim=dim, keepdim=keepdim)


@autocast_op("cosine_embedding_loss")
def cosine_embedding_loss(
    input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, reduction: str = "mean"
) -> Tensor:
    """1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it is -1 (0 for other
    targets), with torch's cos: sum(x1 x2) / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12))."""
    check_reduction(reduction)
    if input1.ndim not in (1, 2) or input1.ndim != input2.ndim:
        fail(
            ShapeError,
            "cosine_embedding_loss",
            f"expects 1-D or 2-D inputs of the same number of dims, got {input1.shape} and "
            f"{input2.shape}",
        )
    if target.ndim != input1.ndim - 1:
        fail(
            ShapeError,
            "cosine_embedding_loss",
            f"0D or 1D target tensor expected, multi-target not supported (inputs "
            f"{input1.shape}, target {target.shape})",
        )
    dim = input1.ndim - 1
    epsilon = 1e-12
    prod = (input1 * input2).sum(dim)
    mag1 = (input1 * input1).sum(dim) + epsilon
    mag2 = (input2 * input2).sum(dim) + epsilon
    cos = prod / (mag1 * mag2).sqrt()
    pos = where(target == 1, 1 - cos, 0.0)
    neg = where(target == -1, (cos - margin).clamp_min(0.0), 0.0)
    return reduce_loss(pos + neg, reduction)


@autocast_op("margin_ranking_loss")
def margin_ranking_loss(
    input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, reduction: str = "mean"
) -> Tensor:
    """max(0, -target (input1 - input2) + margin), elementwise (broadcasting)."""
    check_reduction(reduction)
    if not input1.ndim == input2.ndim == target.ndim:
        fail(
            ShapeError,
            "margin_ranking_loss",
            "All input tensors should have same dimension but got sizes: input1: "
            f"{input1.shape}, input2: {input2.shape}, target: {target.shape} ",
        )
    return reduce_loss((-target * (input1 - input2) + margin).clamp_min(0.0), reduction)


@autocast_op("triplet_margin_loss")
def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    reduction: str = "mean",
) -> Tensor:
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the pairwise distance;
    with `swap`, d(anchor, negative) is the smaller of it and d(positive, negative)."""
    check_reduction(reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        fail(
            ShapeError,
            "triplet_margin_loss",
            f"The anchor, positive, and negative tensors are expected to have the same "
            f"number of dimensions, but got: anchor {anchor.ndim}D, positive "
            f"{positive.ndim}D, and negative {negative.ndim}D inputs",
        )
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return reduce_loss((margin + d_pos - d_neg).clamp_min(0.0), reduction)


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """torch's deprecated size_average= and reduce=: either given decides the reduction
    (both default to True: mean; reduce alone: sum; reduce=False: none), with its warning."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    out = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(
        f"size_average and reduce args will be deprecated, please use reduction='{out}' instead.",
        stacklevel=3,
    )
    return out


@autocast_op("hinge_embedding_loss")
def hinge_embedding_loss(
    input: Tensor,
    target: Tensor,
    margin: float = 1.0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """x where target is 1, max(0, margin - x) where it is -1, their sum for any other
    target (broadcasting), as torch's ATen formula; the clamp passes the gradient at 0.

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> F.hinge_embedding_loss(fg.tensor([0.3, 2.0]), fg.tensor([1, -1]), reduction="none").tolist()
    [0.30000001192092896, 0.0]
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    margin_clamp = (margin - input).clamp_min(0.0)
    output_margin = where(target != 1, margin_clamp, 0.0)
    output_self = where(target != -1, input, 0.0)
    return reduce_loss(output_margin + output_self, reduction)


@autocast_op("poisson_nll_loss")
def poisson_nll_loss(
    input: Tensor,
    target: Tensor,
    log_input: bool = True,
    full: bool = False,
    size_average=None,
    eps: float = 1e-8,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """exp(input) - target input (log_input), or input - target log(input + eps); `full`
    adds Stirling's term target log(target) - target + log(2 pi target) / 2 where target
    > 1, as torch's ATen formula.

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> F.poisson_nll_loss(fg.tensor([0.0, 1.0]), fg.tensor([1.0, 2.0]), reduction="sum").item()
    1.718...
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + where(target <= 1, 0.0, stirling)
    return reduce_loss(loss, reduction)


def gaussian_nll_loss(
    input: Tensor,
    target: Tensor,
    var: Tensor | float,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
) -> Tensor:
    """(log(var) + (input - target)^2 / var) / 2 (+ log(2 pi) / 2 with `full`), var clamped
    to eps for the value only (its gradient passes the clamp, as torch's in-place clamp
    under no_grad). var is one per element, or one short of input's last dim, or broadcast
    along one dim; a float is one for all.

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> F.gaussian_nll_loss(fg.tensor([1.0, 3.0]), fg.tensor([2.0, 3.0]), 1.0).item()
    0.25
    """
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = var * input.new_ones(input.shape)
    elif bool((var < 0).any().item()):
        raise ValueError("var has negative entry/entries")
    if var.shape != input.shape:
        if input.shape[:-1] == var.shape:  # one variance per row: broadcast along the last
            var = var.unsqueeze(-1)
        elif not (
            input.ndim == var.ndim and sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1
        ):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    clamped = var.clamp(min=eps)
    if var.requires_grad:  # the clamp's value, the identity's gradient
        clamped = custom_gradient(clamped, [var], lambda g, v: [g], own_node=True)
    var = clamped
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return reduce_loss(loss, reduction)


class PairwiseDistance(Module):
    """`F.pairwise_distance` as a module, as torch.nn.PairwiseDistance."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class _MarginLoss(Module):
    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__()
        check_reduction(reduction)
        self.margin, self.reduction = margin, reduction


class CosineEmbeddingLoss(_MarginLoss):
    """`F.cosine_embedding_loss` as a module."""

    def forward(self, input1, input2, target):
        return cosine_embedding_loss(input1, input2, target, self.margin, self.reduction)


class MarginRankingLoss(_MarginLoss):
    """`F.margin_ranking_loss` as a module."""

    def forward(self, input1, input2, target):
        return margin_ranking_loss(input1, input2, target, self.margin, self.reduction)


class TripletMarginLoss(_MarginLoss):
    """`F.triplet_margin_loss` as a module."""

    def __init__(
        self,
        margin: float = 1.0,
        p: float = 2.0,
        eps: float = 1e-6,
        swap: bool = False,
        reduction: str = "mean",
    ):
        if margin <= 0:
            raise ValueError(
                f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead"
            )
        super().__init__(margin, reduction)
        self.p, self.eps, self.swap = p, eps, swap

    def forward(self, anchor, positive, negative):
        return triplet_margin_loss(
            anchor, positive, negative, self.margin, self.p, self.eps, self.swap, self.reduction
        )


class _Reduced(Module):
    """A loss module that keeps its reduction (torch's deprecated size_average and reduce
    decide it when given); its repr, as torch's, names no option."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = legacy_reduction(size_average, reduce, reduction)


class HingeEmbeddingLoss(_Reduced):
    """`F.hinge_embedding_loss` as a module."""

    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class PoissonNLLLoss(_Reduced):
    """`F.poisson_nll_loss` as a module."""

    def __init__(
        self,
        log_input: bool = True,
        full: bool = False,
        size_average=None,
        eps: float = 1e-8,
        reduce=None,
        reduction: str = "mean",
    ):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return poisson_nll_loss(
            log_input, target, self.log_input, self.full, eps=self.eps, reduction=self.reduction
        )


class GaussianNLLLoss(_Reduced):
    """`F.gaussian_nll_loss` as a module (its options keyword-only, as torch's)."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)
