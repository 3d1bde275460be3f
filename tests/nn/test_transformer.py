"""nn.TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer, TransformerDecoder
and Transformer against PyTorch 2.13: the same weights (numpy-generated, loaded through
PyTorch's state_dict names) give PyTorch's outputs and gradients, written here as literals
(torch computed them; rounded to 5 decimals). The loss is sum(out * c) for a fixed random c.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

S, N, E = 3, 2, 4  # sequence, batch, d_model; nhead=2, dim_feedforward=6

# fmt: off
TF_OUT = [
    0.12429, 0.47479, 0.81767, 1.13897, 0.22826, 0.4061, 0.74788, 1.24245, -0.02474, 0.47886,
    0.88569, 1.0759, -0.00231, 0.42411, 0.87188, 1.14946
]
TF_GRAD = [
    0.22494, -0.09635, -0.10434, -0.2854, 0.07686, 0.00493, -0.16763, 0.00164, 0.0, 0.0, 0.0,
    0.0, 0.03146, -0.01727, -0.03019, -0.01829, -0.01936, -0.04127, 0.06023, -0.01647, -0.00885,
    0.03607, -0.02487, 0.0241
]
TF_GRAD_TGT = [
    0.08384, -0.17212, 0.2191, 0.10098, 0.19737, -0.50614, -0.16025, 0.38277, 0.043, 0.03951,
    -0.09806, -0.06518, -0.2067, 0.44624, -0.12258, -0.15223
]
TF_PGRAD = [
    -0.02715, -0.06156, 0.03857, -0.00412, 0.00308, 0.00788, -0.00457, 0.00063
]
PRE_OUT = [
    -0.00379, 0.8421, 0.34743, -0.07492, -0.47641, 0.88753, -0.29272, -0.02499
]
# fmt: on

ENC_KEYS = [
    "self_attn.in_proj_weight",
    "self_attn.in_proj_bias",
    "self_attn.out_proj.weight",
    "self_attn.out_proj.bias",
    "linear1.weight",
    "linear1.bias",
    "linear2.weight",
    "linear2.bias",
    "norm1.weight",
    "norm1.bias",
    "norm2.weight",
    "norm2.bias",
]
DEC_KEYS = ENC_KEYS[:4] + [k.replace("self_attn", "multihead_attn") for k in ENC_KEYS[:4]]
DEC_KEYS += ENC_KEYS[4:] + ["norm3.weight", "norm3.bias"]


def _data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _fill(module, seed=0):
    """Weights drawn from numpy in state_dict order, loaded by name as from a torch file."""
    rng = np.random.default_rng(seed)
    state = {
        k: (rng.standard_normal(v.shape) * 0.5).astype(np.float32)
        for k, v in module.state_dict().items()
    }
    module.load_state_dict(state)


def _batch_first(a):
    return np.ascontiguousarray(a.transpose(1, 0, 2))


def _check(module, inputs, kwargs, expected, pname, pgrad_expected, train=False):
    """expected: the output, then each input's gradient (flattened)."""
    _fill(module)
    module.train(train)
    xs = [fg.tensor(x, requires_grad=True) for x in inputs]
    out = module(*xs, **kwargs)
    c = fg.tensor(_data(out.shape, 99))
    (out * c).sum().backward()
    pgrad = dict(module.named_parameters())[pname].grad
    got = [out] + [x.grad for x in xs]
    fg.realize(pgrad, *got)  # one schedule for forward and backward
    for value, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(value.numpy().reshape(-1), want, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(pgrad.numpy()[:2].reshape(-1), pgrad_expected, atol=2e-4, rtol=1e-4)


SRC = _data((S, N, E), 1)
TGT = _data((2, N, E), 2)
PAD = fg.tensor([[False, False, True], [False, False, False]])  # True: a padded key


def test_transformer_post_norm_batch_first_every_mask_eval():
    """dropout=0.1 (the default) in eval(): nothing dropped. The padded source position
    gets no gradient: no query may attend to it."""
    model = nn.Transformer(E, 2, 1, 1, 6, batch_first=True)
    kwargs = dict(
        src_mask=nn.Transformer.generate_square_subsequent_mask(S),
        src_key_padding_mask=PAD,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(2),
        memory_mask=fg.tensor([[0.0, -1.0, 0.5], [0.0, 0.0, float("-inf")]]),
        memory_key_padding_mask=PAD,
    )
    _check(
        model,
        [_batch_first(SRC), _batch_first(TGT)],
        kwargs,
        [TF_OUT, TF_GRAD, TF_GRAD_TGT],
        "decoder.layers.0.multihead_attn.in_proj_weight",
        TF_PGRAD,
    )


def test_transformer_norm_first_callable_activation_bool_mask_unbatched_train():
    """Pre-norm layers, two encoder layers (deep copies), train() with dropout=0.0,
    unbatched (S, E) inputs; forward only (the backward code is the post-norm test's)."""
    model = nn.Transformer(
        E, 2, 2, 1, 6, dropout=0.0, norm_first=True, activation=nn.functional.gelu
    ).train()
    _fill(model)
    layers = model.encoder.layers
    assert layers[0] is not layers[1] and layers[0].linear1 is not layers[1].linear1
    out = model(
        fg.tensor(SRC[:, 1]),
        fg.tensor(TGT[:, 1]),
        src_mask=fg.tensor([[False, True, False], [False, False, True], [True, False, False]]),
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(2),
        tgt_is_causal=True,
    )
    np.testing.assert_allclose(out.numpy().reshape(-1), PRE_OUT, atol=2e-4, rtol=1e-4)


def test_inference_with_padding_zeroes_padded_positions_as_torchs_nested_path():
    """torch (2.13, checked): TransformerEncoder in eval() under no_grad with a left-aligned
    key padding mask runs on nested tensors, and padded positions leave the layers as 0,
    so the final norm gives its bias there. With gradients on, they hold computed values."""
    layer = nn.TransformerEncoderLayer(E, 2, dim_feedforward=6, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 1, norm=nn.LayerNorm(E)).eval()
    _fill(encoder)
    assert encoder.use_nested_tensor
    bias = encoder.norm.bias.numpy()
    src = fg.tensor(_batch_first(SRC))
    with fg.no_grad():
        out = encoder(src, src_key_padding_mask=PAD).numpy()
    np.testing.assert_array_equal(out[0, 2], bias)
    dense = encoder(src, src_key_padding_mask=PAD).numpy()
    assert np.abs(dense[0, 2] - bias).max() > 0.01
    np.testing.assert_allclose(
        np.delete(out.reshape(6, E), 2, 0), np.delete(dense.reshape(6, E), 2, 0), atol=1e-6
    )
    not_left_aligned = fg.tensor([[True, False, False], [False, False, False]])
    with fg.no_grad():
        out = encoder(src, src_key_padding_mask=not_left_aligned).numpy()
    assert np.abs(out[0, 0] - bias).max() > 0.01  # torch's dense path then
    norm_first = nn.TransformerEncoderLayer(E, 2, 6, batch_first=True, norm_first=True)
    assert not nn.TransformerEncoder(norm_first, 1).use_nested_tensor


def test_parameter_names_are_torchs():
    assert list(nn.TransformerEncoderLayer(E, 2, 6).state_dict()) == ENC_KEYS
    assert list(nn.TransformerDecoderLayer(E, 2, 6).state_dict()) == DEC_KEYS
    model = nn.Transformer(E, 2, 1, 2, 6)
    keys = ["encoder.layers.0." + k for k in ENC_KEYS] + [
        "encoder.norm.weight",
        "encoder.norm.bias",
    ]
    for i in range(2):
        keys += [f"decoder.layers.{i}." + k for k in DEC_KEYS]
    keys += ["decoder.norm.weight", "decoder.norm.bias"]
    assert list(model.state_dict()) == keys


def test_defaults_as_torch():
    layer = nn.TransformerEncoderLayer(8, 2)
    assert layer.linear1.weight.shape == (2048, 8) and layer.linear2.weight.shape == (8, 2048)
    assert layer.dropout.p == layer.dropout1.p == layer.dropout2.p == 0.1
    assert layer.self_attn.dropout == 0.1 and not layer.self_attn.batch_first
    assert layer.norm1.eps == 1e-5 and not layer.norm_first
    assert layer.activation is nn.functional.relu and layer.activation_relu_or_gelu == 1
    flags = [
        nn.TransformerEncoderLayer(8, 2, 16, activation=a).activation_relu_or_gelu
        for a in ("gelu", nn.GELU(), fg.tanh)
    ]
    assert flags == [2, 2, 0]  # torch's
    no_bias = nn.TransformerDecoderLayer(8, 2, 16, bias=False)
    assert no_bias.linear1.bias is None and no_bias.norm3.bias is None
    assert no_bias.multihead_attn.in_proj_bias is None
    model = nn.Transformer(8, 2, 2, 1, 16)
    assert len(model.encoder.layers) == 2 and len(model.decoder.layers) == 1
    assert isinstance(model.encoder.norm, nn.LayerNorm)
    # torch's init: every matrix xavier-uniform, in (-sqrt(6 / (fan_in + fan_out)), ...)
    w = model.encoder.layers[0].linear1.weight.numpy()
    assert np.abs(w).max() <= np.sqrt(6 / 24) and np.abs(w).max() > 0.5 * np.sqrt(6 / 24)


def test_square_subsequent_mask():
    mask = nn.Transformer.generate_square_subsequent_mask(3)
    assert mask.dtype == fg.float32
    inf = float("-inf")
    assert mask.tolist() == [[0.0, inf, inf], [0.0, 0.0, inf], [0.0, 0.0, 0.0]]


def test_errors_as_torch():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(E, 2, 6, activation="tanh")
    model = nn.Transformer(E, 2, 1, 1, 6)
    with pytest.raises(fg.ShapeError, match="batch number of src and tgt must be equal"):
        model(fg.zeros(3, 2, E), fg.zeros(2, 3, E))
    with pytest.raises(fg.ShapeError, match="feature number of src and tgt must be equal"):
        model(fg.zeros(3, 2, E), fg.zeros(2, 2, E + 2))


def test_docstring_examples():
    import doctest

    from fusegrad.nn import transformer

    result = doctest.testmod(transformer)
    assert result.attempted > 0 and result.failed == 0
