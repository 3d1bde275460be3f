"""`F.multi_head_attention_forward` and `nn.MultiheadAttention`, as PyTorch: the module's
forward is the function over its parameters, as torch's.

Inputs are (L, N, E) (the module transposes `batch_first` ones) or unbatched (L, E).
Masks follow nn.MultiheadAttention's convention: a bool True means *not* allowed to
attend, a float mask is added; both become one float mask, as torch's `_canonical_mask`
and its merge of the key padding mask make them.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> mha = nn.MultiheadAttention(8, 2, batch_first=True)
>>> out, w = mha(fg.ones(3, 5, 8), fg.ones(3, 5, 8), fg.ones(3, 5, 8))
>>> out.shape, w.shape
((3, 5, 8), (3, 5, 5))
"""

from __future__ import annotations

import math
import warnings

from ..nnapi import ShapeError, Tensor, cat, fail, where, zeros
from . import init
from .attention import causal_mask, in_value_dtype
from .dense import dropout, linear
from .layers import NonDynamicallyQuantizableLinear
from .module import Module, place, placeholder_parameter


class AttentionShapeError(ShapeError, AssertionError):
    """Shapes `multi_head_attention_forward` refuses: torch raises AssertionError for
    these; a ShapeError too, as fusegrad's other shape checks."""


def _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """torch's `_mha_shape_check`: whether the inputs are batched."""
    op = "multi_head_attention_forward"
    if query.ndim == 3:
        if key.ndim != 3 or value.ndim != 3:
            fail(
                AttentionShapeError,
                op,
                f"for batched (3-D) query, expected key and value to be 3-D but found "
                f"{key.ndim}-D and {value.ndim}-D tensors respectively",
            )
        if key_padding_mask is not None and key_padding_mask.ndim != 2:
            fail(
                AttentionShapeError,
                op,
                f"for batched (3-D) query, expected key_padding_mask to be None or 2-D but "
                f"found {key_padding_mask.ndim}-D tensor instead",
            )
        if attn_mask is not None and attn_mask.ndim not in (2, 3):
            fail(
                AttentionShapeError,
                op,
                f"for batched (3-D) query, expected attn_mask to be None, 2-D or 3-D but "
                f"found {attn_mask.ndim}-D tensor instead",
            )
        return True
    if query.ndim == 2:
        if key.ndim != 2 or value.ndim != 2:
            fail(
                AttentionShapeError,
                op,
                f"for unbatched (2-D) query, expected key and value to be 2-D but found "
                f"{key.ndim}-D and {value.ndim}-D tensors respectively",
            )
        if key_padding_mask is not None and key_padding_mask.ndim != 1:
            fail(
                AttentionShapeError,
                op,
                f"for unbatched (2-D) query, expected key_padding_mask to be None or 1-D but "
                f"found {key_padding_mask.ndim}-D tensor instead",
            )
        if attn_mask is not None:
            if attn_mask.ndim not in (2, 3):
                fail(
                    AttentionShapeError,
                    op,
                    f"for unbatched (2-D) query, expected attn_mask to be None, 2-D or 3-D "
                    f"but found {attn_mask.ndim}-D tensor instead",
                )
            want = (num_heads, query.shape[0], key.shape[0])
            if attn_mask.ndim == 3 and tuple(attn_mask.shape) != want:
                fail(
                    AttentionShapeError,
                    op,
                    f"expected attn_mask shape to be {want} but got {tuple(attn_mask.shape)}",
                )
        return False
    fail(
        AttentionShapeError,
        op,
        f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D "
        "query tensor",
    )


def _float_mask(mask: Tensor | None, name: str, dtype) -> Tensor | None:
    """torch's `_canonical_mask`: a bool mask as -inf where True and 0 elsewhere, in the
    query's dtype; a float mask as it is."""
    if mask is None or mask.dtype.is_float:
        return mask
    if not mask.dtype.is_bool:
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return where(mask, float("-inf"), zeros((), dtype=dtype, device=mask.device))


def _open_column(mask: Tensor | None) -> Tensor | None:
    """`mask` (..., S) with one more key at the end that every query may attend to, as
    torch pads its masks for `add_bias_kv` and `add_zero_attn`."""
    if mask is None:
        return None
    return cat([mask, zeros(*mask.shape[:-1], 1, dtype=mask.dtype, device=mask.device)], -1)


def _projections(
    query, key, value, in_proj_weight, in_proj_bias, separate, q_proj_weight, k_proj_weight,
    v_proj_weight,
):  # fmt: skip
    """The in-projections of query, key and value: the packed weight's thirds, or the
    separate weights with the packed bias's thirds."""
    if not separate:
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        weights = in_proj_weight.chunk(3)
    else:
        for name, w in (("q", q_proj_weight), ("k", k_proj_weight), ("v", v_proj_weight)):
            if w is None:
                raise AssertionError(
                    f"use_separate_proj_weight is True but {name}_proj_weight is None"
                )
        weights = (q_proj_weight, k_proj_weight, v_proj_weight)
    biases = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
    return [linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases)]


def _static(t: Tensor, name: str, groups: int, head_dim: int) -> Tensor:
    if t.shape[0] != groups:
        fail(AttentionShapeError, name, f"expecting {name}.size(0) of {groups}, got {t.shape[0]}")
    if t.shape[2] != head_dim:
        fail(AttentionShapeError, name, f"expecting {name}.size(2) of {head_dim}, got {t.shape[2]}")
    return t


def multi_head_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: Tensor | None,
    in_proj_bias: Tensor | None,
    bias_k: Tensor | None,
    bias_v: Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    training: bool = True,
    key_padding_mask: Tensor | None = None,
    need_weights: bool = True,
    attn_mask: Tensor | None = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: Tensor | None = None,
    k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None,
    static_k: Tensor | None = None,
    static_v: Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """torch's multi-head attention over (L, N, E) or unbatched (L, E) inputs: (output,
    weights), the weights (N, L, S) averaged over the heads, (N, H, L, S) with
    `average_attn_weights=False`, None without `need_weights`.

    As torch's: `is_causal` needs an `attn_mask`, and with neither `need_weights` nor a
    key padding mask it is a causal mask in its place; `bias_k`/`bias_v` append a key and
    value, `add_zero_attn` a zero one after those, each with an open mask column;
    `static_k`/`static_v` (N * H, S, E / H) replace the projected keys and values; the
    weights returned are those the values were averaged with (after dropout, where
    `training` and `dropout_p` drop). A query whose every key is masked gets NaN with
    `need_weights` and zeros (the output projection's bias) without, as torch's two
    paths. Where torch's weights path refuses a float32 mask with 16-bit inputs, the mask
    is added (as its SDPA does).
    """
    batched = _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    lq, n, e = query.shape
    if (
        key_padding_mask is not None
        and attn_mask is not None
        and key_padding_mask.dtype.is_bool != attn_mask.dtype.is_bool
    ):
        warnings.warn(
            "Support for mismatched key_padding_mask and attn_mask is deprecated. Use same "
            "type for both instead.",
            UserWarning,
            stacklevel=2,
        )
    key_padding_mask = _float_mask(key_padding_mask, "key_padding_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError(
            "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
            "module method `generate_square_subsequent_mask` to create this mask."
        )
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # the hint stands for the mask (torch's SDPA path)
    else:
        attn_mask = _float_mask(attn_mask, "attn_mask", query.dtype)
        is_causal = False  # the mask itself is applied
    if e != embed_dim_to_check:
        fail(
            AttentionShapeError,
            "multi_head_attention_forward",
            f"was expecting embedding dimension of {embed_dim_to_check}, but got {e}",
        )
    h = num_heads
    d = e // h
    if d * h != e:
        raise AssertionError(f"embed_dim {e} not divisible by num_heads {h}")
    if use_separate_proj_weight and key.shape[:2] != value.shape[:2]:
        fail(
            AttentionShapeError,
            "multi_head_attention_forward",
            f"key's sequence and batch dims {key.shape[:2]} do not match value's {value.shape[:2]}",
        )
    if not use_separate_proj_weight and key.shape != value.shape:
        fail(
            AttentionShapeError,
            "multi_head_attention_forward",
            f"key shape {key.shape} does not match value shape {value.shape}",
        )
    q, k, v = _projections(
        query, key, value, in_proj_weight, in_proj_bias, use_separate_proj_weight,
        q_proj_weight, k_proj_weight, v_proj_weight,
    )  # fmt: skip
    lk = key.shape[0]
    if attn_mask is not None:
        want = (lq, lk) if attn_mask.ndim == 2 else (n * h, lq, lk)
        if attn_mask.ndim not in (2, 3):
            raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
        if tuple(attn_mask.shape) != want:
            raise RuntimeError(
                f"The shape of the {attn_mask.ndim}D attn_mask is {tuple(attn_mask.shape)}, "
                f"but should be {want}."
            )
    if (bias_k is None) != (bias_v is None):
        given, missing = ("k", "v") if bias_v is None else ("v", "k")
        raise AssertionError(f"bias_{given} is set but bias_{missing} is None")
    if bias_k is not None:  # one more key and value, learned; the masks let it be seen
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = cat([k, bias_k.expand(1, n, e)])
        v = cat([v, bias_v.expand(1, n, e)])
        attn_mask, key_padding_mask = _open_column(attn_mask), _open_column(key_padding_mask)

    def heads(x):  # (S, N, E) -> (N, H, S, D)
        return x.reshape(x.shape[0], n, h, d).permute(1, 2, 0, 3)

    q = heads(q)
    k = heads(k) if static_k is None else _static(static_k, "static_k", n * h, d)
    v = heads(v) if static_v is None else _static(static_v, "static_v", n * h, d)
    k, v = (x.reshape(n, h, x.shape[-2], d) for x in (k, v))
    if add_zero_attn:  # and one more of zeros, after the projections
        k = cat([k, zeros(n, h, 1, d, dtype=k.dtype, device=k.device)], 2)
        v = cat([v, zeros(n, h, 1, d, dtype=v.dtype, device=v.device)], 2)
        attn_mask, key_padding_mask = _open_column(attn_mask), _open_column(key_padding_mask)
    lk = k.shape[2]
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (n, lk):
            fail(
                AttentionShapeError,
                "multi_head_attention_forward",
                f"expecting key_padding_mask shape of {(n, lk)}, but got "
                f"{tuple(key_padding_mask.shape)}",
            )
        padding = key_padding_mask.reshape(n, 1, 1, lk)
        attn_mask = padding if attn_mask is None else _as_heads(attn_mask, n, h) + padding
    # torch scales the queries before the product (its weights path)
    scores = (q * math.sqrt(1.0 / d)) @ k.transpose(-2, -1)  # (N, H, L, S)
    if is_causal:
        scores = where(causal_mask(lq, lk), scores, float("-inf"))
    elif attn_mask is not None:
        scores = scores + _as_heads(attn_mask, n, h)
    if need_weights:
        weights = in_value_dtype(scores.softmax(-1), v)
    else:  # torch's SDPA path: a row whose every key is masked gives zeros, not NaN
        dead = (scores == float("-inf")).all(-1, keepdim=True)
        weights = in_value_dtype(where(dead, 0.0, where(dead, 0.0, scores).softmax(-1)), v)
    if training and dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    out = (weights @ v).permute(2, 0, 1, 3).reshape(lq, n, e)  # (L, N, E)
    out = linear(out, out_proj_weight, out_proj_bias)
    if not batched:
        out = out[:, 0]
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = weights.mean(1)
    return out, (weights if batched else weights[0])


def _as_heads(mask: Tensor, n: int, h: int) -> Tensor:
    """A (L, S) or (N * H, L, S) mask as (1, 1, L, S) or (N, H, L, S); a 4-d one as it is."""
    if mask.ndim == 2:
        return mask.reshape(1, 1, *mask.shape)
    if mask.ndim == 3:
        return mask.reshape(n, h, *mask.shape[1:])
    return mask


class MultiheadAttention(Module):
    """Multi-head attention with PyTorch's parameters, masks and outputs: its forward is
    `F.multi_head_attention_forward` over them.

    forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False) returns
    (output, weights): inputs are (L, N, E), or (N, L, E) with batch_first,
    or unbatched (L, E).
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
        transposed = self.batch_first and query.ndim == 3
        if transposed:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, weights = multi_head_attention_forward(
            query,
            key,
            value,
            self.embed_dim,
            self.num_heads,
            self.in_proj_weight,
            self.in_proj_bias,
            self.bias_k,
            self.bias_v,
            self.add_zero_attn,
            self.dropout,
            self.out_proj.weight,
            self.out_proj.bias,
            training=self.training,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
        )
        return (out.transpose(0, 1) if transposed else out), weights

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
