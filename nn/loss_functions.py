"""The losses as functions (`mse_loss`, `cross_entropy`, ...; re-exported by
`fusegrad.nn.functional`; nn/losses.py wraps them as modules).

>>> import fusegrad as fg
>>> from fusegrad.nn.loss_functions import cross_entropy
>>> round(cross_entropy(fg.tensor([[2.0, 0.5, -1.0]]), fg.tensor([0])).item(), 4)
0.2413
"""

from __future__ import annotations

import warnings

from ..nnapi import (
    ShapeError,
    Tensor,
    autocast_op,
    class_cross_entropy,
    composite,
    fits_class_cross_entropy,
    host_data,
    index_arange,
    one_site,
    register_composite,
    where,
)
from ..nnapi import fail as _fail
from ..nnapi import with_grad as _with_grad
from .dense import ClassIndexError


def _check_targets_in_range(target: Tensor, classes: int, ignore_index: int, op: str) -> bool:
    """As torch: a class index outside [0, classes) that is not ignore_index raises, here,
    naming the line of the loss call.

    A target still to be computed (`labels.long()`) is computed now: inside the loss's
    kernels an index outside the classes would match no class and silently drop its row.
    Returns whether every target is known to be a class (none is ignore_index)."""
    values = host_data(target)
    if values is None and target.numel():
        target.realize()
        values = host_data(target)
    if values is None or values.size == 0:
        return False
    lo, hi = values.min(), values.max()
    if lo >= 0 and hi < classes and not lo <= ignore_index <= hi:
        return True  # the usual batch, told with two reductions
    bad = values[((values < 0) | (values >= classes)) & (values != ignore_index)]
    if bad.size:
        _fail(ClassIndexError, op, f"Target {int(bad[0])} is out of bounds.")
    return not (values == ignore_index).any()


def reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def check_reduction(reduction: str) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")


@autocast_op("mse_loss")
def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """(input - target)^2, averaged (or summed) over every element."""
    check_reduction(reduction)
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.",
            stacklevel=2,
        )
    diff = input - target
    return reduce_loss(diff * diff, reduction)


_BCE_EPSILON = 9.999999960041972e-13  # torch's 1e-12, a float32 constant, in float64


def _size_warning(input: Tensor, target: Tensor) -> None:
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.",
            stacklevel=3,
        )


@autocast_op("l1_loss")
def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """|input - target|, averaged (or summed); the gradient at a tie is 0, as torch's.

    >>> import fusegrad as fg
    >>> l1_loss(fg.tensor([1.0, -2.0]), fg.tensor([0.0, 0.0])).item()
    1.5
    """
    check_reduction(reduction)
    _size_warning(input, target)
    return reduce_loss((input - target).abs(), reduction)


@autocast_op("smooth_l1_loss")
def smooth_l1_loss(
    input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0
) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target), as torch's.

    >>> import fusegrad as fg
    >>> smooth_l1_loss(fg.tensor([0.5, -2.0]), fg.tensor([0.0, 0.0])).item()
    0.8125
    """
    check_reduction(reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _size_warning(input, target)
    d = (input - target).abs()
    if beta == 0.0:
        return reduce_loss(d, reduction)
    return reduce_loss((d * d * (0.5 / beta)).where(d < beta, d - 0.5 * beta), reduction)


@autocast_op("kl_div")
def kl_div(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """KL(target || exp(input)) pointwise: target (log target - input), 0 where target is 0
    and NaN where it is negative, as torch's (or exp(target) (target - input) with
    `log_target`); reduction "batchmean" divides the
    sum by the batch size, the true KL divergence ("mean" averages every element, as
    torch's, which warns about it).

    >>> import fusegrad as fg
    >>> kl_div(fg.tensor([[-1.0, -0.5]]), fg.tensor([[0.5, 0.5]]), reduction="batchmean").item()
    0.05685...
    """
    if reduction not in ("mean", "sum", "none", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if log_target:
        pointwise = target.exp() * (target - input)
    else:  # torch's xlogy: 0 where target is 0 (its gradient there NaN), NaN where negative
        pointwise = target.xlogy(target) - target * input
    if reduction == "batchmean":
        total = pointwise.sum()
        return total / input.shape[0] if input.ndim else total
    if reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support "
            "size.'batchmean' divides only by the batch size, and aligns with the KL div math "
            "definition.'mean' will be changed to behave the same as 'batchmean' in the next "
            "major release.",
            stacklevel=2,
        )
    return reduce_loss(pointwise, reduction)


@autocast_op("cosine_similarity")
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 x2) / (max(|x1|, eps) max(|x2|, eps)) along `dim` (broadcasting), as torch's:
    each norm is clamped at eps in value while its gradient stays the norm's."""
    n1 = x1.norm(dim=dim, keepdim=True)
    n2 = x2.norm(dim=dim, keepdim=True)
    n1 = n1 + (n1.clamp_min(eps) - n1).detach()
    n2 = n2 + (n2.clamp_min(eps) - n2).detach()
    return ((x1 / n1) * (x2 / n2)).sum(dim)


@autocast_op("huber_loss")
def huber_loss(
    input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0
) -> Tensor:
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (d = input - target).

    >>> import fusegrad as fg
    >>> huber_loss(fg.tensor([0.5, -2.0]), fg.tensor([0.0, 0.0]), delta=1.5).item()
    1.0
    """
    check_reduction(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _size_warning(input, target)
    d = (input - target).abs()
    return reduce_loss((d * d * 0.5).where(d < delta, (d - 0.5 * delta) * delta), reduction)


@autocast_op("binary_cross_entropy")
@one_site
def binary_cross_entropy(
    input: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = "mean"
) -> Tensor:
    """-w (y log(x) + (1 - y) log(1 - x)) for probabilities x; each log is clamped at -100.

    Torch's formulas: the value (y - 1) max(log1p(-x), -100) - y max(log(x), -100) (so
    -0.0 at x = y = 1), the gradient w (x - y) / max((1 - x) x, 1e-12) (1e-12 a float32,
    as torch's), not the chain rule through the clamped logs: where a sigmoid saturates
    to exactly 0 or 1 that chain rule multiplies 0 by an infinite 1/x and gives NaN. The
    target's gradient is -logit(x), unclamped (+-inf at 0 and 1).
    """
    check_reduction(reduction)
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}) is deprecated. Please ensure they have the same size."
        )
    dt = input.dtype
    tensors = [input, target] + ([] if weight is None else [weight])
    if (
        reduction != "none" and dt.is_float
        and all(isinstance(t, Tensor) and t.dtype is dt for t in tensors)
        and (weight is None or weight.shape == input.shape)
    ):  # fmt: skip
        # every step of a binary classifier: one macro node, not 29 (`_bce`'s nodes)
        params = (reduction, weight is not None)
        return composite("binary_cross_entropy", tensors, params, (), dt)
    return _bce(tensors, (reduction, weight is not None))


def _bce(tensors: list, params: tuple) -> Tensor:
    """binary_cross_entropy composed: the loss of each element, weighted, then reduced."""
    input, target = tensors[:2]
    reduction, weighted = params
    value = (target - 1.0) * (-input).log1p().maximum(-100.0)
    value = value - target * input.log().maximum(-100.0)
    x, y = input, target  # (not detached: the rules' own gradients are the 2nd derivatives)
    grad_x = (x - y) / ((1.0 - x) * x).maximum(_BCE_EPSILON)
    loss = _with_grad(value, [(input, grad_x), (target, -(x / (1.0 - x)).log())])
    if weighted:
        loss = loss * tensors[2]
    return reduce_loss(loss, reduction)


register_composite("binary_cross_entropy", _bce)


@autocast_op("binary_cross_entropy_with_logits")
@one_site
def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Sigmoid and binary cross-entropy in one stable formula.

    loss = (1 - y) x + l (log(1 + exp(-|x|)) + max(-x, 0)), with l = 1 + (pos_weight - 1) y.
    """
    check_reduction(reduction)
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(
            f"Target size ({tuple(target.shape)}) must be the same as input size "
            f"({tuple(input.shape)})"
        )
    softplus_neg = (1.0 + (-input.abs()).exp()).log() + (-input).maximum(0.0)
    if pos_weight is not None:
        softplus_neg = softplus_neg * ((pos_weight - 1.0) * target + 1.0)
    loss = (1.0 - target) * input + softplus_neg
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, reduction)


def _classes_last(input: Tensor) -> Tensor:
    """(N, C, d1, ...) -> (N, d1, ..., C): every loss below reduces over the last axis."""
    if input.ndim <= 2:
        return input
    return input.permute(0, *range(2, input.ndim), 1)


def _class_count(input: Tensor) -> int:
    if input.ndim == 0:
        raise ValueError("input must have at least one dimension (the classes)")
    return input.shape[1] if input.ndim >= 2 else input.shape[0]


def _check_targets(input: Tensor, target: Tensor, op: str) -> None:
    want = (input.shape[0],) + tuple(input.shape[2:]) if input.ndim >= 2 else ()
    if tuple(target.shape) != want:
        raise ValueError(
            f"{op}: expected target of shape {want} for input of shape {tuple(input.shape)}, "
            f"got {tuple(target.shape)}"
        )


@autocast_op("nll_loss")
@one_site
def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """-w[y] * input[..., y] for log-probabilities `input` (classes on dim 1) and class indices.

    'mean' divides by the sum of the picked weights, as torch does; targets equal
    to `ignore_index` contribute nothing.
    """
    check_reduction(reduction)
    if target.dtype.is_float or target.dtype.is_bool:
        raise TypeError(f"nll_loss: expected integer class indices, got {target.dtype.name}")
    _check_targets(input, target, "nll_loss")
    all_classes = _check_targets_in_range(target, _class_count(input), ignore_index, "nll_loss")
    if input.ndim == 1:  # unbatched: one sample of C classes
        loss = nll_loss(input[None], target.reshape(1), weight, ignore_index, reduction)
        return loss.reshape(()) if reduction == "none" else loss
    classes = _class_count(input)
    x = _classes_last(input)
    hit = target.reshape(*target.shape, 1) == index_arange(classes)
    if 0 <= ignore_index < classes and not all_classes:  # out of range, it never matches
        hit = hit & (target != ignore_index)[..., None]
    picked = where(hit, x, 0.0).sum(-1)
    if weight is None and all_classes:
        # every row has its one class and weight 1 (the targets were read above): the same
        # values as the general form below, from a third of its graph
        loss = -picked
        return loss.sum() / target.numel() if reduction == "mean" else reduce_loss(loss, reduction)
    if weight is not None:
        w = where(hit, weight.cast(x.dtype), 0.0).sum(-1)
    else:
        w = hit.cast(x.dtype).sum(-1)
    loss = -(w * picked)
    if reduction == "mean":
        return loss.sum() / w.sum()
    return reduce_loss(loss, reduction)


@autocast_op("cross_entropy")
@one_site
def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """log_softmax over dim 1 and the negative log-likelihood of the target.

    `target` is either class indices (an integer tensor without the class axis)
    or class probabilities (a float tensor shaped like `input`), as in torch.
    """
    check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    classes = _class_count(input)
    if input.ndim == 1:  # unbatched: one sample of C classes
        target = target[None] if target.dtype.is_float else target.reshape(1)
        loss = cross_entropy(input[None], target, weight, ignore_index, reduction, label_smoothing)
        return loss.reshape(()) if reduction == "none" else loss
    if (
        weight is None
        and label_smoothing == 0.0
        and fits_class_cross_entropy(input, target)
        and _check_targets_in_range(target, classes, ignore_index, "cross_entropy")
    ):  # every classifier's every step: the same graph as below, built at once
        return class_cross_entropy(input, target, reduction)
    logp = input.log_softmax(1)
    if target.dtype.is_float:
        return _cross_entropy_probs(logp, target, weight, reduction, label_smoothing, classes)
    nll = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return nll
    x = _classes_last(logp)
    w = weight.cast(x.dtype) if weight is not None else None
    smooth = -((x * w) if w is not None else x).sum(-1)
    valid = target != ignore_index
    smooth = where(valid, smooth, 0.0)
    if reduction == "mean":
        if w is not None:
            hit = (target[..., None] == index_arange(classes)) & valid[..., None]
            denom = where(hit, w, 0.0).sum()
        else:
            denom = valid.cast(x.dtype).sum()
        smooth = smooth.sum() / denom
    else:
        smooth = reduce_loss(smooth, reduction)
    return (1.0 - label_smoothing) * nll + smooth * (label_smoothing / classes)


def _cross_entropy_probs(logp, target, weight, reduction, label_smoothing, classes):
    if tuple(target.shape) != tuple(logp.shape):
        _fail(  # torch: a RuntimeError (float class indices, or the wrong shape)
            ShapeError,
            "cross_entropy",
            f"probability targets must have the input's shape {tuple(logp.shape)}, got "
            f"{tuple(target.shape)} (class indices must be an int64 tensor)",
        )
    if label_smoothing > 0.0:
        target = target * (1.0 - label_smoothing) + label_smoothing / classes
    x, y = _classes_last(logp), _classes_last(target)
    terms = x * y if weight is None else x * y * weight.cast(x.dtype)
    loss = -terms.sum(-1)
    if reduction == "mean":
        return loss.sum() / (logp.numel() // classes)
    return reduce_loss(loss, reduction)
