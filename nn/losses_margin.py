"""The margin losses of classifiers and embeddings, as torch's: `F.soft_margin_loss`,
`F.multilabel_soft_margin_loss`, `F.multi_margin_loss`, `F.multilabel_margin_loss`,
`F.triplet_margin_with_distance_loss` and their modules.

Each is the formula torch's kernel computes, from differentiable ops. The hinges of
multi_margin_loss and multilabel_margin_loss count a term only where it is above zero, as
torch's loops do (`if (z > 0)`), so at the kink the gradient is 0; the triplet loss's
`clamp_min` passes it, as torch's.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> x = fg.tensor([[0.1, 0.2, 0.4, 0.8]])
>>> round(F.multi_margin_loss(x, fg.tensor([3])).item(), 4)
0.325
>>> round(F.multilabel_margin_loss(x, fg.tensor([[3, 0, -1, 1]])).item(), 4)
0.85
"""

from __future__ import annotations

from ..nnapi import (
    DTypeError,
    ShapeError,
    Tensor,
    autocast_op,
    fail,
    grad_enabled,
    host_data,
    index_arange,
    where,
)
from .activations import logsigmoid
from .dense import ClassIndexError
from .loss_functions import check_reduction, reduce_loss
from .losses_more import PairwiseDistance, legacy_reduction, pairwise_distance
from .module import Module


@autocast_op("soft_margin_loss")
def soft_margin_loss(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """log(1 + exp(-target * input)), elementwise: the two-class logistic loss for targets
    of 1 or -1. `target` broadcasts to input's shape (not the other way, as torch's).

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> round(F.soft_margin_loss(fg.tensor([0.0, 2.0]), fg.tensor([1.0, -1.0])).item(), 4)
    1.41
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    _refuse_gradient(target, "target", "soft_margin_loss")
    z = -input * target
    if tuple(z.shape) != tuple(input.shape):
        fail(
            ShapeError,
            "soft_margin_loss",
            f"output with shape {list(input.shape)} doesn't match the broadcast shape "
            f"{list(z.shape)}",
        )
    return reduce_loss(z.exp().log1p(), reduction)


def multilabel_soft_margin_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """-(target log sigmoid(x) + (1 - target) log sigmoid(-x)), times `weight` (one per class,
    broadcast), averaged over the last dim (the classes): one loss per sample.

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> x, y = fg.tensor([[0.0, 0.0]]), fg.tensor([[1.0, 0.0]])
    >>> round(F.multilabel_soft_margin_loss(x, y).item(), 4)
    0.6931
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce, reduction)
    if input.ndim == 0:
        raise IndexError("Dimension specified as -1 but tensor has no dimensions")
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(-1) / input.shape[-1]
    if reduction == "none":
        return loss
    if reduction in ("mean", "sum"):
        return reduce_loss(loss, reduction)
    raise ValueError(reduction + " is not valid")


def _refuse_gradient(t: Tensor | None, argument: str, op: str) -> None:
    """torch's kernel has no derivative for `argument`: a tensor there that requires grad
    is refused when the call is made (with grad mode on), as torch's."""
    if t is not None and t.requires_grad and grad_enabled():
        raise RuntimeError(
            f"The function '{op}' is not differentiable with respect to argument "
            f"'{argument}'. This input cannot have requires_grad True."
        )


def _check_class_targets(target: Tensor, op: str) -> None:
    if target.dtype.is_float or target.dtype.is_bool:
        fail(DTypeError, op, f"expected scalar type Long but found {target.dtype.name}")


def _target_values(target: Tensor):
    """The target's values on the host (computed now if still a graph), to check them as
    torch's kernel does before it reads them."""
    values = host_data(target)
    if values is None and target.numel():
        target.realize()
        values = host_data(target)
    return values


def _rows_of_classes(input: Tensor) -> Tensor:
    """input as (samples, classes): a 0-d input is one sample of one class, a 1-D one sample."""
    if input.ndim == 0:
        return input.reshape(1, 1)
    return input.reshape(1, -1) if input.ndim == 1 else input


def _check_vector_or_matrix(input: Tensor, op: str) -> None:
    ok = input.ndim == 0 or (input.ndim <= 2 and input.shape[-1] > 0)
    if not ok:
        fail(
            ShapeError,
            op,
            "Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
            f"{list(input.shape)}",
        )


def _reduce_rows(loss: Tensor, reduction: str, unbatched: bool) -> Tensor:
    if reduction == "none":
        return loss.reshape(()) if unbatched else loss
    return reduce_loss(loss, reduction)


@autocast_op("multi_margin_loss")
def multi_margin_loss(
    input: Tensor,
    target: Tensor,
    p: int = 1,
    margin: float = 1.0,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """The multi-class hinge: per sample, sum over classes i != y of
    max(0, margin - x[y] + x[i])^p * weight[y], divided by the number of classes.

    input is (C,) or (N, C) (0-d: one class), target the class indices, () or (N,).
    A term at exactly zero adds no gradient, as torch's. With reduction='mean' over an
    empty batch the loss is NaN (torch's is an uninitialized value).

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> round(F.multi_margin_loss(fg.tensor([0.1, 0.2, 0.4, 0.8]), fg.tensor(3)).item(), 4)
    0.325
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    op = "multi_margin_loss"
    _check_vector_or_matrix(input, op)
    x = _rows_of_classes(input)
    frames, classes = x.shape
    if target.ndim > 1 or target.numel() != frames:
        fail(
            ShapeError,
            op,
            "target tensor should be 1-D with size equal to the number of input samples "
            f"(batch size). Expected target size [{frames}], but got {list(target.shape)}. "
            f"Input has shape {list(input.shape)}.",
        )
    if weight is not None and weight.numel() != classes:
        fail(
            ShapeError,
            op,
            f"inconsistent weight size, expected {classes} but got {list(weight.shape)}",
        )
    _check_class_targets(target, op)
    _refuse_gradient(weight, "weight", op)
    values = _target_values(target)
    if values is not None and values.size and (values.min() < 0 or values.max() >= classes):
        fail(ClassIndexError, op, "target out of range")
    y = target.reshape(frames, 1)
    z = margin - x.gather(1, y) + x
    other = (y != index_arange(classes)) & (z > 0)
    hinge = z if p == 1 else z * z
    if weight is not None:
        hinge = hinge * weight.cast(x.dtype)[y.reshape(frames)].reshape(frames, 1)
    loss = where(other, hinge, 0.0).sum(1) / classes
    return _reduce_rows(loss, reduction, target.ndim == 0)


@autocast_op("multilabel_margin_loss")
def multilabel_margin_loss(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """The multi-label hinge: per sample, sum over its target classes j and every class k
    that is not a target of max(0, 1 - (x[j] - x[k])), divided by the number of classes.

    target has input's shape: each row lists its classes first, then -1 (what follows the
    first -1 is ignored, but must still be a class or -1, as torch's). A class listed twice
    counts twice, and a term at exactly zero adds no gradient, as torch's.

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> x = fg.tensor([0.1, 0.2, 0.4, 0.8])
    >>> round(F.multilabel_margin_loss(x, fg.tensor([3, 0, -1, 1])).item(), 4)
    0.85
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    op = "multilabel_margin_loss"
    _check_vector_or_matrix(input, op)
    x = _rows_of_classes(input)
    frames, classes = x.shape
    if input.ndim <= 1:
        fits = target.ndim <= 1 and target.numel() == classes
    else:
        fits = tuple(target.shape) == tuple(input.shape)
    if not fits:
        fail(
            ShapeError,
            op,
            f"inconsistent target size: {list(target.shape)} for input of size: "
            f"{list(input.shape)}",
        )
    _check_class_targets(target, op)
    values = _target_values(target)
    if values is not None and values.size and (values.min() < -1 or values.max() >= classes):
        fail(ClassIndexError, op, "argument #2 'target' is out of range")
    t = target.reshape(frames, classes)
    listed = (t == -1).cumsum(1) == 0  # the places before a row's first -1
    t = where(listed, t, -1)
    is_target = (t.reshape(frames, classes, 1) == index_arange(classes)).any(1)
    x_target = x.gather(1, t.clamp_min(0))  # x[j] for each listed j (row, place)
    z = 1.0 - x_target.reshape(frames, classes, 1) + x.reshape(frames, 1, classes)
    counted = listed.reshape(frames, classes, 1) & ~is_target.reshape(frames, 1, classes)
    loss = where(counted & (z > 0), z, 0.0).sum((1, 2)) / classes
    if reduction == "mean" and frames == 0:  # torch's kernel: 0 for no samples, not 0 / 0
        return loss.sum()
    return _reduce_rows(loss, reduction, input.ndim <= 1)


def triplet_margin_with_distance_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    *,
    distance_function=None,
    margin: float = 1.0,
    swap: bool = False,
    reduction: str = "mean",
) -> Tensor:
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) for any distance d
    (default `F.pairwise_distance`); with `swap`, d(anchor, negative) is the smaller of it
    and d(positive, negative).

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> a, p, n = fg.tensor([[0.0, 0.0]]), fg.tensor([[3.0, 4.0]]), fg.tensor([[0.0, 1.0]])
    >>> l1 = lambda u, v: (u - v).abs().sum(-1)
    >>> F.triplet_margin_with_distance_loss(a, p, n, distance_function=l1).item()
    7.0
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        fail(
            ShapeError,
            "triplet_margin_with_distance_loss",
            f"The anchor, positive, and negative tensors are expected to have the same "
            f"number of dimensions, but got: anchor {anchor.ndim}D, positive "
            f"{positive.ndim}D, and negative {negative.ndim}D inputs",
        )
    distance = distance_function if distance_function is not None else pairwise_distance
    d_pos = distance(anchor, positive)
    d_neg = distance(anchor, negative)
    if swap:
        d_neg = d_neg.minimum(distance(positive, negative))
    return reduce_loss((margin + d_pos - d_neg).clamp_min(0.0), reduction)


class _Reduced(Module):
    """A loss module keeping its reduction (torch's deprecated size_average and reduce decide
    it when given); its repr, as torch's, names no option."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = legacy_reduction(size_average, reduce, reduction)


class SoftMarginLoss(_Reduced):
    """`F.soft_margin_loss` as a module."""

    def forward(self, input, target):
        return soft_margin_loss(input, target, reduction=self.reduction)


class MultiLabelMarginLoss(_Reduced):
    """`F.multilabel_margin_loss` as a module."""

    def forward(self, input, target):
        return multilabel_margin_loss(input, target, reduction=self.reduction)


class _WeightedReduced(_Reduced):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class MultiLabelSoftMarginLoss(_WeightedReduced):
    """`F.multilabel_soft_margin_loss` as a module (`weight` a buffer, as torch's)."""

    def forward(self, input, target):
        return multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)


class MultiMarginLoss(_WeightedReduced):
    """`F.multi_margin_loss` as a module (`weight` a buffer, as torch's)."""

    def __init__(
        self,
        p: int = 1,
        margin: float = 1.0,
        weight=None,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
    ):
        super().__init__(weight, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        if weight is not None and weight.ndim != 1:
            raise ValueError(
                f"MultiMarginLoss: expected weight to be None or 1D tensor, got {weight.ndim}D "
                "instead"
            )
        self.p, self.margin = p, margin

    def forward(self, input, target):
        return multi_margin_loss(
            input, target, self.p, self.margin, self.weight, reduction=self.reduction
        )


class TripletMarginWithDistanceLoss(_Reduced):
    """`F.triplet_margin_with_distance_loss` as a module; its options keyword-only and its
    default distance a `PairwiseDistance()` submodule, as torch's."""

    def __init__(
        self,
        *,
        distance_function=None,
        margin: float = 1.0,
        swap: bool = False,
        reduction: str = "mean",
    ):
        super().__init__(reduction=reduction)
        if margin <= 0:
            raise ValueError(
                "TripletMarginWithDistanceLoss: expected margin to be greater than 0, got "
                f"{margin} instead"
            )
        self.distance_function = (
            distance_function if distance_function is not None else PairwiseDistance()
        )
        self.margin, self.swap = margin, swap

    def forward(self, anchor, positive, negative):
        return triplet_margin_with_distance_loss(
            anchor,
            positive,
            negative,
            distance_function=self.distance_function,
            margin=self.margin,
            swap=self.swap,
            reduction=self.reduction,
        )
