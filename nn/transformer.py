"""Transformer layers as torch.nn's: encoder and decoder layers, their stacks, `Transformer`.

Each layer is a composition of `MultiheadAttention`, `Linear`, `LayerNorm` and
`Dropout` under the attribute names PyTorch uses (`self_attn`, `multihead_attn`,
`linear1`, `linear2`, `norm1`..`norm3`, `dropout`, `dropout1`..`dropout3`), so a
PyTorch `state_dict` loads as it is. `norm_first` selects pre-norm
(x + f(norm(x))) over post-norm (norm(x + f(x))), as torch's.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
>>> nn.TransformerEncoder(layer, num_layers=2)(fg.ones(3, 5, 8)).shape
(3, 5, 8)
>>> nn.Transformer.generate_square_subsequent_mask(3).tolist()
[[0.0, -inf, -inf], [0.0, 0.0, -inf], [0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import copy

from ..nnapi import ShapeError, Tensor, fail, grad_enabled, index_arange, where
from . import init
from .activations import GELU, gelu
from .containers import ModuleList
from .functional import relu
from .layers import Dropout, Linear, ReLU
from .module import Module
from .multihead_attention import MultiheadAttention
from .normalization import LayerNorm


def _activation(activation):
    """torch's: "relu" or "gelu" by name, else any callable (a function or a module)."""
    if isinstance(activation, str):
        if activation == "relu":
            return relu
        if activation == "gelu":
            return gelu
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


def _clones(module: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual and a LayerNorm.

    forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False): src is
    (S, N, E), (N, S, E) with batch_first, or unbatched (S, E); masks as
    `MultiheadAttention`'s (bool True hides a position, a float mask is added).
    `is_causal` is a hint, as torch's: src_mask must hold the causal mask.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, dtype=dtype
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)
        # torch's flag for its fused kernel, kept because code reads it
        fn = self.activation
        relu_like, gelu_like = (
            fn is relu or isinstance(fn, ReLU),
            fn is gelu or isinstance(fn, GELU),
        )
        self.activation_relu_or_gelu = 1 if relu_like else 2 if gelu_like else 0
        _to_dtype(self, dtype)
        if device is not None:
            self.to(device=device)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's output (`memory`), then a feed-forward
    block, each with a residual and a LayerNorm.

    forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False).
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, dtype=dtype
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, dtype=dtype
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)
        _to_dtype(self, dtype)
        if device is not None:
            self.to(device=device)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            attended = self._mha_block(
                x, memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            x = self.norm2(x + attended)
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)


class TransformerEncoder(Module):
    """`num_layers` deep copies of `encoder_layer` (`layers.0`, `layers.1`, ...), then the
    optional `norm`.

    With `enable_nested_tensor` (the default) torch runs inference with a key padding
    mask on nested tensors when its conditions hold (`use_nested_tensor`, eval, no
    gradient, batch-first 3-D input, a left-aligned padding mask, no `mask`), and its
    output is then 0 at the padded positions before the final norm; this gives the same
    values (`_padded_as_nested`). Elsewhere padded positions hold what the layers compute.
    """

    def __init__(
        self,
        encoder_layer: Module,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor and _nested_capable(encoder_layer)
        self.mask_check = mask_check

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        is_causal = _detect_is_causal_mask(mask, is_causal)
        x = src
        for layer in self.layers:
            x = layer(
                x, src_mask=mask, is_causal=is_causal, src_key_padding_mask=src_key_padding_mask
            )
        padded = self._padded_as_nested(src, mask, src_key_padding_mask)
        if padded is not None:
            x = where(padded.reshape(*padded.shape, 1), 0.0, x)
        return self.norm(x) if self.norm is not None else x

    def _padded_as_nested(self, src, mask, key_padding_mask) -> Tensor | None:
        """The positions torch's nested-tensor path leaves 0 (bool, (N, S)), or None where
        torch does not take that path (transformer.py's TransformerEncoder.forward)."""
        if not self.use_nested_tensor or self.layers[0].training or src.ndim != 3:
            return None
        if key_padding_mask is None or mask is not None:
            return None
        first = self.layers[0]
        if grad_enabled() and (
            src.requires_grad or any(p.requires_grad for p in first.parameters())
        ):
            return None
        padded = key_padding_mask
        if not padded.dtype.is_bool:  # a float mask: 0.0 keeps a position
            padded = padded != 0
        if self.mask_check:
            keep = ~padded.numpy()
            if (keep[:, 1:] > keep[:, :-1]).any():  # not left-aligned: torch's dense path
                return None
        return padded


class TransformerDecoder(Module):
    """`num_layers` deep copies of `decoder_layer`, then the optional `norm`."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal)
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=tgt_is_causal,
                memory_is_causal=memory_is_causal,
            )
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """The encoder-decoder model of "Attention Is All You Need", as torch.nn.Transformer:
    `encoder` (a TransformerEncoder with a final LayerNorm), `decoder` (likewise), every
    matrix xavier-uniform initialised.

    forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    src_is_causal=None, tgt_is_causal=None, memory_is_causal=False): src (S, N, E) and
    tgt (T, N, E) (batch first with batch_first=True) give (T, N, E).
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps)
        layer_kwargs = dict(batch_first=batch_first, norm_first=norm_first, bias=bias, dtype=dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(*layer_args, **layer_kwargs)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, _to_dtype(norm, dtype))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(*layer_args, **layer_kwargs)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
            self.decoder = TransformerDecoder(layer, num_decoder_layers, _to_dtype(norm, dtype))
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        if device is not None:
            self.to(device=device)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batched = src.ndim == 3
        batch_axis = 0 if self.batch_first else 1
        if batched and src.shape[batch_axis] != tgt.shape[batch_axis]:
            fail(
                ShapeError,
                "Transformer",
                f"the batch number of src and tgt must be equal (src {src.shape}, tgt {tgt.shape})",
            )
        if not batched and tgt.ndim == 3:
            fail(ShapeError, "Transformer", "the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            fail(
                ShapeError,
                "Transformer",
                f"the feature number of src and tgt must be equal to d_model ({self.d_model}), "
                f"got src {src.shape} and tgt {tgt.shape}",
            )
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """A float (sz, sz) mask: 0.0 where query i may see key j (j <= i), -inf above the
        diagonal, as torch's."""
        keys = index_arange(sz).reshape(1, sz)
        queries = index_arange(sz).reshape(sz, 1)
        mask = where(keys <= queries, 0.0, float("-inf"))
        if dtype is not None:
            mask = mask.to(dtype=dtype)
        return mask.to(device=device) if device is not None else mask


def _nested_capable(layer) -> bool:
    """torch's conditions on the layer for TransformerEncoder's nested-tensor path."""
    return (
        isinstance(layer, TransformerEncoderLayer)
        and not layer.norm_first
        and layer.self_attn.batch_first
        and layer.self_attn._qkv_same_embed_dim
        and layer.self_attn.in_proj_bias is not None
        and bool(layer.activation_relu_or_gelu)
        and layer.norm1.eps == layer.norm2.eps
        and layer.self_attn.num_heads % 2 == 0
    )


def _detect_is_causal_mask(mask: Tensor | None, is_causal: bool | None) -> bool:
    """torch's rule: an explicit is_causal wins; without it the hint is False (torch
    compares the mask with the causal one only to choose a faster kernel, which the
    result does not depend on)."""
    return bool(is_causal) if is_causal is not None else False


def _to_dtype(module: Module, dtype):
    """LayerNorm takes no dtype: cast the module's parameters after building it."""
    if dtype is not None:
        module.to(dtype=dtype)
    return module
