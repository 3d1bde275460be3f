"""torch's top-level forms of nn.functional ops (`torch.conv2d`, `torch.dropout`,
`torch.batch_norm`, `torch.embedding`, `torch.kl_div`, ...), which `fusegrad` exposes
as `fg.conv2d`, ... : each is a thin adapter over the F function, in torch's own
positional order for its top-level form, where it differs from F's:

- `dropout(input, p, train)` (and `alpha_dropout`, `feature_alpha_dropout`): `train`
  is positional and required;
- `batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
  cudnn_enabled)` and `instance_norm(input, weight, bias, running_mean, running_var,
  use_input_stats, momentum, eps, cudnn_enabled)`: weight and bias first, every argument
  required;
- `embedding(weight, indices, padding_idx=-1, ...)`: the weight first, and a negative
  padding_idx means none (aten's convention);
- the losses take `reduction` as torch's int enum (0 none, 1 mean, 2 sum; another int
  reduces nothing, as aten's kernels): a string is a TypeError, as torch's. Omitted, it
  is 0, as torch's Python binding reads its schema's default (`reduction=Mean` parses as
  0 there: `torch.kl_div(a, b)` is not reduced, `torch.kl_div(a, b, 1)` is the mean);
- `max_pool1d_with_indices` and `adaptive_max_pool1d` return (values, indices);
- the `cudnn_enable(d)` flags are accepted and change nothing.

>>> import fusegrad as fg
>>> round(fg.kl_div(fg.tensor([-1.0, -2.0]), fg.tensor([0.5, 0.5]), 2).item(), 4)  # 2: sum
0.8069
>>> fg.kl_div(fg.tensor([-1.0, -2.0]), fg.tensor([0.5, 0.5])).shape  # omitted: none
(2,)
"""

from __future__ import annotations

from ..nnapi import Tensor
from .activations import celu as _celu
from .activations import celu_, prelu, selu_, threshold_
from .activations import selu as _selu
from .activations import threshold as _threshold
from .adaptive import adaptive_avg_pool1d as _adaptive_avg_pool1d
from .adaptive import adaptive_max_pool1d as _adaptive_max_pool1d
from .bilinear import bilinear
from .channel_ops import channel_shuffle
from .conv import avg_pool1d as _avg_pool1d
from .conv import conv1d, conv2d
from .conv import max_pool1d as _max_pool1d
from .conv import max_pool2d as _max_pool2d
from .conv3d import conv3d, conv_transpose3d
from .conv3d import max_pool3d as _max_pool3d
from .conv_transpose import conv_transpose1d, conv_transpose2d
from .ctc import ctc_loss as _ctc_loss
from .dense import alpha_dropout as _alpha_dropout
from .dense import dropout as _dropout
from .dense import embedding as _embedding
from .dense import feature_alpha_dropout as _feature_alpha_dropout
from .loss_functions import binary_cross_entropy_with_logits as _bce_with_logits
from .loss_functions import cosine_similarity
from .loss_functions import kl_div as _kl_div
from .losses_more import cosine_embedding_loss as _cosine_embedding_loss
from .losses_more import hinge_embedding_loss as _hinge_embedding_loss
from .losses_more import margin_ranking_loss as _margin_ranking_loss
from .losses_more import pairwise_distance
from .losses_more import poisson_nll_loss as _poisson_nll_loss
from .losses_more import triplet_margin_loss as _triplet_margin_loss
from .normalization import batch_norm as _batch_norm
from .normalization import group_norm as _group_norm
from .normalization import instance_norm as _instance_norm
from .normalization import layer_norm as _layer_norm
from .normalization import rms_norm
from .pdist import pdist
from .pool_indices import max_pool1d_with_indices as _max_pool1d_with_indices
from .random_activations import rrelu as _rrelu
from .upsample import pixel_shuffle, pixel_unshuffle

# the same signature as torch's top-level form: F's function itself
__all__ = [
    "bilinear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "celu_",
    "channel_shuffle",
    "cosine_similarity",
    "pairwise_distance",
    "pdist",
    "pixel_shuffle",
    "pixel_unshuffle",
    "prelu",
    "rms_norm",
    "selu_",
    "threshold_",
]

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # at::Reduction


def _reduction(op: str, reduction, position: int) -> str:
    """F's reduction string for torch's int enum `reduction` (an int other than 1 and 2
    reduces nothing, as aten's kernels); anything but an int is torch's TypeError."""
    if isinstance(reduction, bool) or not isinstance(reduction, int):
        raise TypeError(
            f"{op}(): argument 'reduction' (position {position}) must be int, "
            f"not {type(reduction).__name__}"
        )
    return _REDUCTIONS.get(reduction, "none")


def _stride(stride):
    """aten's `stride=[]` (its default) is the kernel size: F's None."""
    return None if stride is None or (isinstance(stride, (list, tuple)) and not stride) else stride


def _public(fn):
    __all__.append(fn.__name__)
    return fn


# ---------------------------------------------------------------- convolutions and pools
@_public
def max_pool1d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):  # noqa: A002
    """torch.max_pool1d: `F.max_pool1d` without return_indices (an empty stride, torch's
    default, is the kernel size)."""
    return _max_pool1d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


@_public
def max_pool2d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):  # noqa: A002
    """torch.max_pool2d: `F.max_pool2d` without return_indices (an empty stride, torch's
    default, is the kernel size)."""
    return _max_pool2d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


@_public
def max_pool3d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):  # noqa: A002
    """torch.max_pool3d: `F.max_pool3d` without return_indices (an empty stride, torch's
    default, is the kernel size)."""
    return _max_pool3d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


@_public
def max_pool1d_with_indices(
    input: Tensor,  # noqa: A002
    kernel_size,
    stride=(),
    padding=0,
    dilation=1,
    ceil_mode=False,
):
    """torch.max_pool1d_with_indices: (values, indices) of `F.max_pool1d`."""
    return _max_pool1d_with_indices(
        input, kernel_size, _stride(stride), padding, dilation, ceil_mode
    )


@_public
def avg_pool1d(
    input: Tensor,  # noqa: A002
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
):
    """torch.avg_pool1d: `F.avg_pool1d` (an empty stride is the kernel size)."""
    return _avg_pool1d(input, kernel_size, _stride(stride), padding, ceil_mode, count_include_pad)


@_public
def adaptive_avg_pool1d(input: Tensor, output_size):  # noqa: A002
    """torch.adaptive_avg_pool1d: `F.adaptive_avg_pool1d`."""
    return _adaptive_avg_pool1d(input, output_size)


@_public
def adaptive_max_pool1d(input: Tensor, output_size):  # noqa: A002
    """torch.adaptive_max_pool1d: (values, indices), always, as torch's top-level form."""
    return _adaptive_max_pool1d(input, output_size, True)


# ---------------------------------------------------------------- dropouts
@_public
def dropout(input: Tensor, p: float, train: bool):  # noqa: A002
    """torch.dropout(input, p, train): `F.dropout(input, p, training=train)`."""
    return _dropout(input, p, train)


@_public
def dropout_(input: Tensor, p: float, train: bool):  # noqa: A002
    """torch.dropout_: `F.dropout(input, p, train, inplace=True)`."""
    return _dropout(input, p, train, True)


@_public
def alpha_dropout(input: Tensor, p: float, train: bool):  # noqa: A002
    """torch.alpha_dropout(input, p, train): `F.alpha_dropout`."""
    return _alpha_dropout(input, p, train)


@_public
def alpha_dropout_(input: Tensor, p: float, train: bool):  # noqa: A002
    """torch.alpha_dropout_: `F.alpha_dropout(input, p, train, inplace=True)`."""
    return _alpha_dropout(input, p, train, True)


@_public
def feature_alpha_dropout(input: Tensor, p: float, train: bool):  # noqa: A002
    """torch.feature_alpha_dropout(input, p, train): `F.feature_alpha_dropout`."""
    return _feature_alpha_dropout(input, p, train)


@_public
def feature_alpha_dropout_(input: Tensor, p: float, train: bool):  # noqa: A002
    """torch.feature_alpha_dropout_: `F.feature_alpha_dropout(..., inplace=True)`."""
    return _feature_alpha_dropout(input, p, train, True)


# ---------------------------------------------------------------- normalization
@_public
def layer_norm(
    input: Tensor,  # noqa: A002
    normalized_shape,
    weight=None,
    bias=None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,
):
    """torch.layer_norm: `F.layer_norm` (cudnn_enable changes nothing)."""
    return _layer_norm(input, normalized_shape, weight, bias, eps)


@_public
def batch_norm(
    input: Tensor,  # noqa: A002
    weight,
    bias,
    running_mean,
    running_var,
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
):
    """torch.batch_norm, in torch's top-level order (weight and bias first, every argument
    required): `F.batch_norm(input, running_mean, running_var, weight, bias, training,
    momentum, eps)`."""
    return _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


@_public
def instance_norm(
    input: Tensor,  # noqa: A002
    weight,
    bias,
    running_mean,
    running_var,
    use_input_stats: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
):
    """torch.instance_norm, in torch's top-level order (weight and bias first, every
    argument required): `F.instance_norm`."""
    return _instance_norm(
        input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps
    )


@_public
def group_norm(
    input: Tensor,  # noqa: A002
    num_groups: int,
    weight=None,
    bias=None,
    eps: float = 1e-5,
    cudnn_enabled: bool = True,
):
    """torch.group_norm: `F.group_norm` (cudnn_enabled changes nothing)."""
    return _group_norm(input, num_groups, weight, bias, eps)


# ---------------------------------------------------------------- embedding, activations
@_public
def embedding(
    weight: Tensor,
    indices: Tensor,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
):
    """torch.embedding(weight, indices, ...): the weight first. As aten's, a padding_idx
    outside [0, num_embeddings) is none (its rows get their gradient), and padding_idx
    only keeps that row's gradient zero (the lookup reads it as any row)."""
    if padding_idx < 0 or padding_idx >= weight.shape[0]:
        padding_idx = None
    return _embedding(
        indices, weight, padding_idx, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse
    )


@_public
def selu(input: Tensor):  # noqa: A002
    """torch.selu: `F.selu`."""
    return _selu(input)


@_public
def celu(input: Tensor, alpha: float = 1.0):  # noqa: A002
    """torch.celu: `F.celu`."""
    return _celu(input, alpha)


@_public
def threshold(input: Tensor, threshold: float, value: float):  # noqa: A002
    """torch.threshold: `F.threshold` (value where input <= threshold)."""
    return _threshold(input, threshold, value)


def _no_generator(op: str, generator) -> None:
    if generator is not None:
        raise TypeError(
            f"{op}(): fusegrad's rrelu draws its slopes from the global stream "
            "(fg.manual_seed), not from a generator= (a difference from torch)"
        )


@_public
def rrelu(input: Tensor, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):  # noqa: A002
    """torch.rrelu: `F.rrelu`; a `generator` other than None is refused (fusegrad's
    slopes come from the global stream)."""
    _no_generator("rrelu", generator)
    return _rrelu(input, lower, upper, training)


@_public
def rrelu_(input: Tensor, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):  # noqa: A002
    """torch.rrelu_: `F.rrelu(..., inplace=True)`; a `generator` is refused, as rrelu's."""
    _no_generator("rrelu_", generator)
    return _rrelu(input, lower, upper, training, True)


# ---------------------------------------------------------------- losses (reduction: an int)
@_public
def binary_cross_entropy_with_logits(
    input: Tensor,  # noqa: A002
    target: Tensor,
    weight=None,
    pos_weight=None,
    reduction: int = 0,
):
    """torch.binary_cross_entropy_with_logits: pos_weight before reduction, an int enum."""
    how = _reduction("binary_cross_entropy_with_logits", reduction, 5)
    return _bce_with_logits(input, target, weight, how, pos_weight)


@_public
def kl_div(input: Tensor, target: Tensor, reduction: int = 0, *, log_target: bool = False):  # noqa: A002
    """torch.kl_div: `F.kl_div` with the int enum (1 is the mean over every element, not
    'batchmean'; without F's warning about that, as torch's top-level form)."""
    how = _reduction("kl_div", reduction, 3)
    out = _kl_div(input, target, reduction="none" if how == "mean" else how, log_target=log_target)
    return out.mean() if how == "mean" else out


@_public
def margin_ranking_loss(input1, input2, target, margin: float = 0.0, reduction: int = 0):
    """torch.margin_ranking_loss: `F.margin_ranking_loss` with the int enum."""
    how = _reduction("margin_ranking_loss", reduction, 5)
    return _margin_ranking_loss(input1, input2, target, margin, how)


@_public
def hinge_embedding_loss(input: Tensor, target, margin: float = 1.0, reduction: int = 0):  # noqa: A002
    """torch.hinge_embedding_loss: `F.hinge_embedding_loss` with the int enum."""
    how = _reduction("hinge_embedding_loss", reduction, 4)
    return _hinge_embedding_loss(input, target, margin, reduction=how)


@_public
def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, reduction: int = 0):
    """torch.cosine_embedding_loss: `F.cosine_embedding_loss` with the int enum."""
    how = _reduction("cosine_embedding_loss", reduction, 5)
    return _cosine_embedding_loss(input1, input2, target, margin, how)


@_public
def triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    reduction: int = 0,
):
    """torch.triplet_margin_loss: `F.triplet_margin_loss` with the int enum."""
    how = _reduction("triplet_margin_loss", reduction, 8)
    return _triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, how)


@_public
def poisson_nll_loss(
    input: Tensor, target, log_input: bool, full: bool, eps: float, reduction: int
):  # noqa: A002
    """torch.poisson_nll_loss(input, target, log_input, full, eps, reduction): every
    argument required, as torch's; `F.poisson_nll_loss` with the int enum."""
    how = _reduction("poisson_nll_loss", reduction, 6)
    return _poisson_nll_loss(input, target, log_input, full, eps=eps, reduction=how)


@_public
def ctc_loss(
    log_probs,
    targets,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: int = 0,
    zero_infinity: bool = False,
):
    """torch.ctc_loss: `F.ctc_loss` with the int enum."""
    how = _reduction("ctc_loss", reduction, 6)
    return _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, how, zero_infinity)
