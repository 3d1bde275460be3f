"""Distance and margin losses, as torch's: `F.pairwise_distance`, `F.cosine_embedding_loss`,
`F.margin_ranking_loss`, `F.triplet_margin_loss` and their modules.

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
