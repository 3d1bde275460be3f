"""The dense layers as functions: `linear`, `dropout`, `dropout2d`, `embedding`,
`one_hot` (re-exported by `fusegrad.nn.functional`, where users find them).

>>> import fusegrad as fg
>>> from fusegrad.nn.dense import one_hot
>>> one_hot(fg.tensor([0, 2]), 3).tolist()
[[1, 0, 0], [0, 0, 1]]
"""

from __future__ import annotations

import numpy as np

from ..nnapi import (
    DTypeError,
    FusegradError,
    ShapeError,
    Tensor,
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


@one_site
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (inverted dropout).

    The mask is `fg.rand` (the counter-based RAND primitive): it is recomputed
    inside whichever kernels read it, forward and backward alike, and never
    stored. Outside training (or with p == 0) the input is returned unchanged.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
    else:
        u = rand(*input.shape, dtype=input.dtype, device=input.device)
        keep = u >= p  # P(u >= p) = 1 - p
        out = where(keep, input * (1.0 / (1.0 - p)), 0.0)
    return input._inplace(out, "dropout_") if inplace else out


@one_site
def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels (axis 1) with probability p and scale the rest by 1 / (1 - p),
    as torch's; a 3-d input is (N, C, L), as torch 2.13 reads it."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.ndim not in (3, 4):
        _fail(ShapeError, "dropout2d", f"expects a 3-d or 4-d input, got shape {input.shape}")
    if not training or p == 0.0:
        return input
    # one draw per (sample, channel)
    u = rand(*input.shape[:2], *(1,) * (input.ndim - 2), dtype=input.dtype, device=input.device)
    out = where(u >= p, input * (1.0 / (1.0 - p)), 0.0) if p < 1.0 else input * 0.0
    return input._inplace(out, "dropout2d_") if inplace else out


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
    torch's `embedding_renorm_` (no gradient through the scaling). `scale_grad_by_freq`
    and `sparse` gradients raise NotImplementedError.
    """
    refuse_embedding_options("embedding", scale_grad_by_freq, sparse)
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
    if padding_idx is not None and out.requires_grad:
        padding_idx = padding_idx % num
        out = where((input == padding_idx)[..., None], out.detach(), out)
    return out


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
