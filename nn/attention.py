"""Attention: `F.scaled_dot_product_attention` and `nn.MultiheadAttention`, as PyTorch.

Both are compositions: scores = q @ k^T * scale, masked (-inf where a position
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
    cat,
    fail,
    index_arange,
    where,
    zeros,
)
from . import init
from .dense import dropout, linear
from .layers import NonDynamicallyQuantizableLinear
from .module import Module, place, placeholder_parameter


def _causal_mask(lq: int, lk: int) -> Tensor:
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
        scores = where(_causal_mask(lq, lk), scores, float("-inf"))
    elif attn_mask is not None:
        if attn_mask.dtype.is_bool:
            scores = where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = _as(scores.softmax(-1), value)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ value


def _as(weights: Tensor, value: Tensor) -> Tensor:
    """Attention weights in the values' dtype: a float mask of a wider dtype than the
    scores' (a float32 mask with bfloat16 queries) widened them before the softmax."""
    return weights if weights.dtype == value.dtype else weights.to(value.dtype)


class MultiheadAttention(Module):
    """Multi-head attention with PyTorch's parameters, masks and outputs.

    forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False) returns
    (output, weights): inputs are (L, N, E), or (N, L, E) with batch_first,
    or unbatched (L, E). Masks follow nn.MultiheadAttention's convention: a
    bool True means *not* allowed to attend; a float mask is added. Weights
    are averaged over heads (N, L, S) unless average_attn_weights=False.

    >>> import fusegrad as fg
    >>> mha = MultiheadAttention(8, 2, batch_first=True)
    >>> out, w = mha(fg.ones(3, 5, 8), fg.ones(3, 5, 8), fg.ones(3, 5, 8))
    >>> out.shape, w.shape
    ((3, 5, 8), (3, 5, 5))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                f"and num_heads={num_heads} instead"
            )
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.batch_first = batch_first
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = placeholder_parameter(3 * embed_dim, embed_dim, dtype=dtype)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = placeholder_parameter(embed_dim, embed_dim, dtype=dtype)
            self.k_proj_weight = placeholder_parameter(embed_dim, self.kdim, dtype=dtype)
            self.v_proj_weight = placeholder_parameter(embed_dim, self.vdim, dtype=dtype)
        if bias:
            self.in_proj_bias = placeholder_parameter(3 * embed_dim, dtype=dtype)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias, dtype=dtype)
        if add_bias_kv:  # a learned key and value appended to every sequence's
            self.bias_k = placeholder_parameter(1, 1, embed_dim, dtype=dtype)
            self.bias_v = placeholder_parameter(1, 1, embed_dim, dtype=dtype)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn  # a zero key and value appended after those
        self._reset_parameters()
        place(self, device)

    def _reset_parameters(self) -> None:
        """As torch: xavier_uniform_ projections, zero biases."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _projections(self):
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            ws = (w[:e], w[e : 2 * e], w[2 * e :])
        else:
            ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        b = self.in_proj_bias
        bs = (b[:e], b[e : 2 * e], b[2 * e :]) if b is not None else (None, None, None)
        return ws, bs

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        unbatched = query.ndim == 2
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            fail(
                ShapeError,
                "MultiheadAttention",
                f"query, key and value must all be 3-D (batched) or 2-D, got {query.shape}, "
                f"{key.shape}, {value.shape}",
            )
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                "module method `generate_square_subsequent_mask` to create this mask."
            )
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        lq, n, e = query.shape
        lk = key.shape[0]
        if e != self.embed_dim:
            fail(
                ShapeError,
                "MultiheadAttention",
                f"was expecting embedding dimension of {self.embed_dim}, but got {e}",
            )
        h, d = self.num_heads, self.head_dim
        (wq, wk, wv), (bq, bk, bv) = self._projections()

        def heads(x, length):  # (L, N, E) -> (N, H, L, D)
            return x.reshape(length, n, h, d).permute(1, 2, 0, 3)

        if attn_mask is not None:
            if attn_mask.ndim == 3:
                if attn_mask.shape != (n * h, lq, lk):
                    fail(
                        ShapeError,
                        "MultiheadAttention",
                        f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                        f"{(n * h, lq, lk)}.",
                    )
            elif attn_mask.shape != (lq, lk):
                fail(
                    ShapeError,
                    "MultiheadAttention",
                    f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                    f"{(lq, lk)}.",
                )
        if key_padding_mask is not None and key_padding_mask.shape != (n, lk):
            fail(
                ShapeError,
                "MultiheadAttention",
                f"expected key_padding_mask of shape {(n, lk)}, got {key_padding_mask.shape}",
            )
        q = heads(linear(query, wq, bq), lq)
        k, v = linear(key, wk, bk), linear(value, wv, bv)  # (S, N, E)
        if self.bias_k is not None:  # one more key and value, learned; masks let it be seen
            k = cat([k, self.bias_k.expand(1, n, e)])
            v = cat([v, self.bias_v.expand(1, n, e)])
            lk += 1
            attn_mask, key_padding_mask = _seen(attn_mask), _seen(key_padding_mask)
        k, v = heads(k, lk), heads(v, lk)
        if self.add_zero_attn:  # and one more of zeros, after the projections
            k = cat([k, zeros(n, h, 1, d, dtype=k.dtype, device=k.device)], 2)
            v = cat([v, zeros(n, h, 1, d, dtype=v.dtype, device=v.device)], 2)
            lk += 1
            attn_mask, key_padding_mask = _seen(attn_mask), _seen(key_padding_mask)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))  # (N, H, L, S)
        if attn_mask is not None:
            if attn_mask.ndim == 3:
                attn_mask = attn_mask.reshape(n, h, lq, lk)
            scores = _apply_mask(scores, attn_mask)
        if key_padding_mask is not None:
            scores = _apply_mask(scores, key_padding_mask.reshape(n, 1, 1, lk))
        weights = _as(scores.softmax(-1), v)
        attended = dropout(weights, self.dropout, self.training) if self.dropout > 0 else weights
        out = (attended @ v).permute(2, 0, 1, 3).reshape(lq, n, e)  # (L, N, E)
        out = self.out_proj(out)
        if unbatched:
            out = out[:, 0]
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        if unbatched:
            weights = weights[0]
        return out, weights

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


def _seen(mask: Tensor | None) -> Tensor | None:
    """`mask` (..., S) with one more key at the end that every query may attend to (False
    in a bool mask, 0 in a float one), as torch pads its masks for `add_bias_kv` and
    `add_zero_attn`."""
    if mask is None:
        return None
    return cat([mask, zeros(*mask.shape[:-1], 1, dtype=mask.dtype, device=mask.device)], -1)


def _apply_mask(scores: Tensor, mask: Tensor) -> Tensor:
    """nn.MultiheadAttention's convention: bool True hides a position; a float mask is added."""
    if mask.dtype.is_bool:
        return where(mask, float("-inf"), scores)
    return scores + mask
