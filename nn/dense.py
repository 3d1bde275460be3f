"""The dense layers as functions: `linear`, the dropouts (`dropout`, `dropout1d`,
`dropout2d`, `dropout3d`, `alpha_dropout`, `feature_alpha_dropout`), `embedding`,
`one_hot` (re-exported by `fusegrad.nn.functional`, where users find them).

>>> import fusegrad as fg
>>> from fusegrad.nn.dense import one_hot
>>> one_hot(fg.tensor([0, 2]), 3).tolist()
[[1, 0, 0], [0, 0, 1]]
"""

from __future__ import annotations

import warnings

import numpy as np

from ..nnapi import (
    DTypeError,
    FusegradError,
    ShapeError,
    Tensor,
    custom_gradient,
    gather_rows,
    host_data,
    index_arange,
    one_site,
    rand,
    tensor,
    where,
)
from ..nnapi import fail as _fail
from ..nnapi import fused_linear as _linear


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ W.T + b, with W of shape (out_features, in_features) as torch stores it."""
    return _linear(input, weight, bias)


_ALPHA = 1.7580993408473766  # SELU's scale times its alpha: where alpha dropout sets a value


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _dropped(input: Tensor, p: float, noise_shape: tuple, alpha: bool, inplace: bool, op: str):
    """`input` with one keep-or-drop draw per element of `noise_shape` (broadcast over the
    rest), as torch's `_dropout_impl`: the input times the noise, so a dropped NaN or
    infinity stays NaN and a dropped negative value is -0.0. `alpha`: alpha dropout's
    affine noise, which keeps a SELU network's mean and variance."""
    if p == 1.0:
        out = input * 0.0
    else:
        keep = rand(*noise_shape, dtype=input.dtype, device=input.device) >= p  # P = 1 - p
        if alpha:
            a = 1.0 / ((_ALPHA * _ALPHA * p + 1.0) * (1.0 - p)) ** 0.5
            out = input * where(keep, a, 0.0) + where(keep, _ALPHA * a * p, _ALPHA * a * (p - 1.0))
        else:
            out = input * where(keep, 1.0 / (1.0 - p), 0.0)
    return input._inplace(out, op) if inplace else out


@one_site
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (inverted dropout).

    The mask is `fg.rand` (the counter-based RAND primitive): it is recomputed
    inside whichever kernels read it, forward and backward alike, and never
    stored. Outside training (or with p == 0) the input is returned unchanged.
    """
    _check_p(p)
    if not training or p == 0.0:
        return input
    return _dropped(input, p, input.shape, False, inplace, "dropout_")


def _feature_noise(input: Tensor, batched: bool, op: str) -> tuple:
    """One draw per channel: (N, C, 1, ...) for a batched input, (C, 1, ...) for one
    without its batch axis (torch's `make_feature_noise` after its `unsqueeze(0)`)."""
    shape = input.shape
    if batched:
        if len(shape) < 2:
            _fail(ShapeError, op, "Feature dropout requires at least 2 dimensions in the input")
        return (shape[0], shape[1], *(1,) * (len(shape) - 2))
    return (shape[0], *(1,) * (len(shape) - 1)) if shape else ()


def _warn(message: str) -> None:
    warnings.warn(message, UserWarning, stacklevel=4)  # (the user's line, past one_site)


def _feature_dropout(input, p, training, inplace, batched, alpha, op) -> Tensor:
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    return _dropped(input, p, _feature_noise(input, batched, op), alpha, inplace, op + "_")


@one_site
def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels with probability p and scale the rest by 1 / (1 - p): an input of
    (N, C, L), or (C, L) without the batch axis, as torch's."""
    _check_p(p)
    if input.ndim not in (2, 3):
        _fail(
            ShapeError,
            "dropout1d",
            f"Expected 2D or 3D input, but received a {input.ndim}D input. Note that dropout1d "
            "exists to provide channel-wise dropout on inputs with 1 spatial dimension, a "
            "channel dimension, and an optional batch dimension (i.e. 2D or 3D inputs).",
        )
    return _feature_dropout(input, p, training, inplace, input.ndim == 3, False, "dropout1d")


@one_site
def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels (axis 1) with probability p and scale the rest by 1 / (1 - p), as
    torch's: a 3-d input is read as (N, C, L) (torch warns that this will change), and
    an input of another rank warns and is dropped per (axis 0, axis 1) entry, as torch
    does (a 2-d (N, C) input: each element)."""
    _check_p(p)
    if input.ndim not in (3, 4):
        _warn(
            f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated "
            "and will result in an error in a future release. To retain the behavior and "
            "silence this warning, please use dropout instead. Note that dropout2d exists to "
            "provide channel-wise dropout on inputs with 2 spatial dimensions, a channel "
            "dimension, and an optional batch dimension (i.e. 3D or 4D inputs)."
        )
    if input.ndim == 3:
        _warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
            "is the channel dim. This behavior will change in a future release to interpret "
            "the input as one without a batch dimension, i.e. shape (C, H, W). To maintain "
            "the 1D channel-wise dropout behavior, please switch to using dropout1d instead."
        )
    return _feature_dropout(input, p, training, inplace, True, False, "dropout2d")


@one_site
def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels with probability p and scale the rest by 1 / (1 - p): an input of
    (N, C, D, H, W), or (C, D, H, W) without the batch axis; another rank warns, as
    torch's, and is read as one without its batch axis."""
    _check_p(p)
    if input.ndim not in (4, 5):
        _warn(
            f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is deprecated "
            "and will result in an error in a future release. To retain the behavior and "
            "silence this warning, please use dropout instead. Note that dropout3d exists to "
            "provide channel-wise dropout on inputs with 3 spatial dimensions, a channel "
            "dimension, and an optional batch dimension (i.e. 4D or 5D inputs)."
        )
    return _feature_dropout(input, p, training, inplace, input.ndim == 5, False, "dropout3d")


@one_site
def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False):
    """Alpha dropout (for SELU networks), as torch's: a dropped element becomes
    a * alpha' * (p - 1), a kept one a * x + a * alpha' * p, with alpha' = 1.7581 and
    a = ((alpha'^2 p + 1)(1 - p))^-1/2, so that zero mean and unit variance stay so.
    `training` is False by default, as in torch's function."""
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    return _dropped(input, p, input.shape, True, inplace, "alpha_dropout_")


@one_site
def feature_alpha_dropout(
    input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
) -> Tensor:
    """`alpha_dropout` of whole channels (one draw per (N, C)), as torch's."""
    return _feature_dropout(input, p, training, inplace, True, True, "feature_alpha_dropout")


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last axis (num_classes=-1 reads max + 1, as torch)."""
    if tensor.dtype.is_float or tensor.dtype.is_bool:
        _fail(
            DTypeError,
            "one_hot",
            f"one_hot is only applicable to index tensors, got {tensor.dtype.name}",
        )
    if num_classes == -1:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    values = host_data(tensor)
    if values is not None and values.size:
        if values.min() < 0:
            _fail(ClassIndexError, "one_hot", "Class values must be non-negative.")
        if values.max() >= num_classes:
            _fail(ClassIndexError, "one_hot", "Class values must be smaller than num_classes.")
    return (tensor[..., None] == index_arange(num_classes)).long()


@one_site
def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of `weight` picked by the integer tensor `input`: shape input.shape + (dim,).

    One GATHER kernel (rows read where the indices say); the gradient for
    `weight` is the matching SCATTER_ADD, which touches only the rows read.
    Rows at `padding_idx` receive no gradient. Indices already computed are
    checked against the table's size; inside a kernel, an index outside it
    reads a zero row. With `max_norm`, each row the indices pick whose `norm_type`-norm
    is above it is scaled in `weight` itself first, to max_norm / (norm + 1e-7), as
    torch's `embedding_renorm_` (no gradient through the scaling). With
    `scale_grad_by_freq`, each position's gradient is divided by how many times its index
    occurs in `input`, as torch's. `sparse` gradients raise NotImplementedError.
    """
    refuse_embedding_options("embedding", False, sparse)
    if input.dtype.is_float or input.dtype.is_bool:
        _fail(
            DTypeError,
            "embedding",
            f"expected an integer index tensor (int64 or int32), got {input.dtype.name}; "
            "use .long()",
        )
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (rows, dim), got shape {weight.shape}")
    num = weight.shape[0]
    _check_indices(input, num)
    if max_norm is not None:
        _renorm_rows(weight, input, float(max_norm), float(norm_type))
    out = gather_rows(weight, input)
    if scale_grad_by_freq and out.requires_grad:
        out = custom_gradient(out, [weight, input], _by_frequency, own_node=True)
    if padding_idx is not None and out.requires_grad:
        padding_idx = padding_idx % num
        out = where((input == padding_idx)[..., None], out.detach(), out)
    return out


def _by_frequency(g: Tensor, weight: Tensor, input: Tensor):
    """The gradient of `weight[input]` with each position's share divided by the count of
    its index in `input` (torch's `scale_grad_by_freq`); none for the indices."""
    flat = input.reshape(-1)
    counts = weight.new_zeros(weight.shape[0]).index_add(0, flat, weight.new_ones(flat.shape))
    rows = (g / counts[input].unsqueeze(-1)).reshape(-1, weight.shape[1])
    return weight.new_zeros(weight.shape).index_add(0, flat, rows), None


def refuse_embedding_options(op: str, scale_grad_by_freq: bool, sparse: bool) -> None:
    """torch's embedding options fusegrad does not have raise, naming themselves."""
    if scale_grad_by_freq or sparse:
        what = "scale_grad_by_freq=True" if scale_grad_by_freq else "sparse=True"
        raise NotImplementedError(f"{op}: {what} is not supported by fusegrad")


def _renorm_rows(weight: Tensor, input: Tensor, max_norm: float, norm_type: float) -> None:
    """torch.embedding_renorm_: the rows `input` picks whose norm is above `max_norm`,
    scaled to it (over norm + 1e-7), written into `weight` as through `.data`."""
    if input.numel() == 0:
        return
    picked = tensor(np.unique(input.numpy().reshape(-1)))
    data = weight.data
    rows = data[picked]
    norms = rows.norm(norm_type, dim=1, keepdim=True)
    data[picked] = rows * where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)


class ClassIndexError(FusegradError, IndexError, RuntimeError):
    """A class index outside [0, classes): torch raises IndexError (losses) or RuntimeError
    (one_hot) for it; this is both (and names the user's line, as fusegrad's errors do)."""


def _check_indices(input: Tensor, num: int) -> None:
    """Out-of-range indices would silently give zero rows: check them when they are known."""
    if not input._has_value() or input.numel() == 0:
        return
    values = input.numpy()
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= num:
        bad = lo if lo < 0 else hi
        raise IndexError(f"embedding: index {bad} is out of range for a table of {num} rows")
