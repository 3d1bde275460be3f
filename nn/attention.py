"""Attention: `F.scaled_dot_product_attention`, as PyTorch (`nn.MultiheadAttention` and
`F.multi_head_attention_forward` are built on its parts in nn/multihead_attention.py).

It is a composition: scores = q @ k^T * scale, masked (-inf where a position
may not attend), softmax over the keys, optional dropout, then @ v. The
scheduler fuses the masking and scaling into the score matmul's kernel and
the softmax into its neighbours.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> q = k = v = fg.tensor([[[1.0, 0.0], [0.0, 1.0]]])
>>> out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
>>> out.tolist()[0][0]          # the first position sees only itself
[1.0, 0.0]
"""

from __future__ import annotations

import math

from ..nnapi import (
    DTypeError,
    ShapeError,
    Tensor,
    autocast_op,
    fail,
    index_arange,
    where,
)
from .dense import dropout


def causal_mask(lq: int, lk: int) -> Tensor:
    """True where query i may attend to key j: j <= i (top-left aligned, as torch.tril)."""
    return index_arange(lk).reshape(1, lk) <= index_arange(lq).reshape(lq, 1)


@autocast_op("scaled_dot_product_attention")
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v over the last two axes, batched over the rest.

    `attn_mask` is bool (True: may attend) or float (added to the scores), and
    broadcasts against (..., L, S); a float mask of another float dtype than the query's
    is added as it is (a float32 mask to bfloat16 scores: the softmax in float32), and
    the result has the query's dtype, as torch's. `is_causal` masks keys after each
    query; `dropout_p` drops attention weights (always, as PyTorch: pass 0.0 in eval).
    """
    if enable_gqa:
        raise NotImplementedError("scaled_dot_product_attention: enable_gqa is not supported")
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        fail(
            ShapeError,
            "scaled_dot_product_attention",
            f"query, key and value need at least 2 dims, got {query.shape}, {key.shape}, "
            f"{value.shape}",
        )
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        fail(
            ShapeError,
            "scaled_dot_product_attention",
            f"query {query.shape}, key {key.shape} and value {value.shape} do not fit "
            "(need query[-1] == key[-1] and key[-2] == value[-2])",
        )
    if not (query.dtype.is_float and key.dtype == query.dtype and value.dtype == query.dtype):
        fail(
            DTypeError,
            "scaled_dot_product_attention",
            f"expected query, key and value of one float dtype, got {query.dtype.name}, "
            f"{key.dtype.name} and {value.dtype.name}",
        )
    if is_causal and attn_mask is not None:
        raise RuntimeError(
            "_scaled_dot_product_attention: Explicit attn_mask should not be set when "
            "is_causal=True"
        )
    lq, lk = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        scores = where(causal_mask(lq, lk), scores, float("-inf"))
    elif attn_mask is not None:
        if attn_mask.dtype.is_bool:
            scores = where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = in_value_dtype(scores.softmax(-1), value)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ value


def in_value_dtype(weights: Tensor, value: Tensor) -> Tensor:
    """Attention weights in the values' dtype: a float mask of a wider dtype than the
    scores' (a float32 mask with bfloat16 queries) widened them before the softmax."""
    return weights if weights.dtype == value.dtype else weights.to(value.dtype)
