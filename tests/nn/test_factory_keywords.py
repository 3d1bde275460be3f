"""torch's factory keywords `device` and `dtype` on every layer that has parameters, in
torch's positional order (`nn.Linear(in, out, bias, device, dtype)`), as torch's
documented signatures list them."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

CONV = "in_channels out_channels kernel_size stride padding dilation groups bias padding_mode"
CONV_T = (
    "in_channels out_channels kernel_size stride padding output_padding groups bias dilation "
    "padding_mode"
)
NORM = "num_features eps momentum affine track_running_stats"
ENCODER = (
    "d_model nhead dim_feedforward dropout activation layer_norm_eps batch_first norm_first bias"
)
# layer -> (torch's parameters before device and dtype, the positional values for them)
TORCH_SIGNATURES = {
    nn.Linear: ("in_features out_features bias", (3, 2, True)),
    nn.Conv1d: (CONV, (2, 4, 3, 1, 0, 1, 1, True, "zeros")),
    nn.Conv2d: (CONV, (2, 4, 3, 1, 0, 1, 1, True, "zeros")),
    nn.Conv3d: (CONV, (2, 4, 3, 1, 0, 1, 1, True, "zeros")),
    nn.ConvTranspose1d: (CONV_T, (2, 4, 3, 1, 0, 0, 1, True, 1, "zeros")),
    nn.ConvTranspose2d: (CONV_T, (2, 4, 3, 1, 0, 0, 1, True, 1, "zeros")),
    nn.ConvTranspose3d: (CONV_T, (2, 4, 3, 1, 0, 0, 1, True, 1, "zeros")),
    nn.Embedding: (
        "num_embeddings embedding_dim padding_idx max_norm norm_type scale_grad_by_freq "
        "sparse _weight _freeze",
        (5, 3, None, None, 2.0, False, False, None, False),
    ),
    nn.BatchNorm1d: (NORM, (3, 1e-5, 0.1, True, True)),
    nn.BatchNorm2d: (NORM, (3, 1e-5, 0.1, True, True)),
    nn.InstanceNorm1d: (NORM, (3, 1e-5, 0.1, True, True)),
    nn.InstanceNorm2d: (NORM, (3, 1e-5, 0.1, True, True)),
    nn.InstanceNorm3d: (NORM, (3, 1e-5, 0.1, True, True)),
    nn.GroupNorm: ("num_groups num_channels eps affine", (1, 3, 1e-5, True)),
    nn.LayerNorm: ("normalized_shape eps elementwise_affine bias", (3, 1e-5, True, True)),
    nn.RMSNorm: ("normalized_shape eps elementwise_affine", (3, None, True)),
    nn.PReLU: ("num_parameters init", (3, 0.25)),
    nn.MultiheadAttention: (
        "embed_dim num_heads dropout bias add_bias_kv add_zero_attn kdim vdim batch_first",
        (4, 2, 0.0, True, False, False, None, None, False),
    ),
    nn.RNNCell: ("input_size hidden_size bias nonlinearity", (3, 4, True, "tanh")),
    nn.LSTMCell: ("input_size hidden_size bias", (3, 4, True)),
    nn.GRUCell: ("input_size hidden_size bias", (3, 4, True)),
    nn.TransformerEncoderLayer: (ENCODER, (4, 2, 8, 0.0, "relu", 1e-5, False, False, True)),
    nn.TransformerDecoderLayer: (ENCODER, (4, 2, 8, 0.0, "relu", 1e-5, False, False, True)),
    nn.Transformer: (
        "d_model nhead num_encoder_layers num_decoder_layers dim_feedforward dropout "
        "activation custom_encoder custom_decoder layer_norm_eps batch_first norm_first bias",
        (4, 2, 1, 1, 8, 0.0, "relu", None, None, 1e-5, False, False, True),
    ),
}
LAYERS = list(TORCH_SIGNATURES)


def _floating(module):
    tensors = list(module.parameters()) + [b for b in module.buffers() if b is not None]
    return [t for t in tensors if t.dtype.is_float]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda c: c.__name__)
def test_signature_is_torchs(layer):
    names, _ = TORCH_SIGNATURES[layer]
    params = list(inspect.signature(layer.__init__).parameters.values())[1:]
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == names.split() + ["device", "dtype"]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda c: c.__name__)
def test_positional_device_and_dtype(layer):
    _, values = TORCH_SIGNATURES[layer]
    fg.manual_seed(0)
    module = layer(*values, "cpu", fg.float64)
    floating = _floating(module)
    assert floating and all(t.dtype == fg.float64 for t in floating)
    assert all(t.device == "cpu" for t in module.parameters())
    assert all(p.requires_grad for p in module.parameters())
    # the same layer in float32, from the same seed: the same values, rounded
    fg.manual_seed(0)
    plain = layer(*values)
    for a, b in zip(_floating(module), _floating(plain)):
        assert b.dtype == fg.float32
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("layer", [nn.RNN, nn.LSTM, nn.GRU], ids=lambda c: c.__name__)
def test_recurrent_layers_take_the_keywords(layer):
    module = layer(3, 4, 2, device="cpu", dtype=fg.float64)
    assert all(p.dtype == fg.float64 for p in module.parameters())


def test_integer_buffers_keep_their_dtype():
    bn = nn.BatchNorm1d(3, dtype=fg.float64)
    assert bn.num_batches_tracked.dtype == fg.int64 and bn.running_var.dtype == fg.float64


def test_the_layers_compute_in_their_dtype():
    fg.manual_seed(0)
    layer = nn.Linear(3, 2, True, None, fg.float64)
    x = np.arange(6.0).reshape(2, 3)
    got = layer(fg.tensor(x, dtype=fg.float64))
    want = x @ layer.weight.numpy().T + layer.bias.numpy()
    assert got.dtype == fg.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-14)


@pytest.mark.skipif(fg.cuda.is_available(), reason="checks the error where cuda cannot run")
def test_an_unavailable_device_fails_at_the_layers_line():
    with pytest.raises(fg.DeviceError, match="cuda:0 is not available") as info:
        nn.Conv2d(1, 2, 3, device="cuda")
    assert "test_factory_keywords.py" in str(info.value)


def test_conv_transpose_takes_only_zeros_padding():
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported'):
        nn.ConvTranspose2d(1, 2, 3, padding_mode="reflect")
