"""scaled_dot_product_attention and MultiheadAttention against a numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn
from fusegrad.testing import gradcheck

RNG = np.random.default_rng(11)


def t64(a):
    return fg.tensor(np.asarray(a, np.float64), dtype=fg.float64)


def np_softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_sdpa(q, k, v, mask=None, causal=False, scale=None):
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.tril(np.ones((q.shape[-2], k.shape[-2]), bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return np_softmax(s) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_values_and_gradients(causal):
    q = RNG.standard_normal((2, 3, 4, 5))
    k = RNG.standard_normal((2, 3, 6, 5))
    v = RNG.standard_normal((2, 3, 6, 2))
    out = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), is_causal=causal)
    np.testing.assert_allclose(out.numpy(), np_sdpa(q, k, v, causal=causal), rtol=1e-10)

    def fn(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, is_causal=causal, scale=0.3)

    assert gradcheck(fn, [t64(q[:1, :1]), t64(k[:1, :1]), t64(v[:1, :1])])


def test_sdpa_masks():
    q, k, v = (RNG.standard_normal((2, 4, 3)) for _ in range(3))
    bool_mask = RNG.random((4, 4)) > 0.4
    bool_mask[:, 0] = True  # no fully masked row
    got = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), attn_mask=fg.tensor(bool_mask))
    np.testing.assert_allclose(got.numpy(), np_sdpa(q, k, v, bool_mask), rtol=1e-10)
    float_mask = RNG.standard_normal((2, 4, 4))
    got = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), attn_mask=t64(float_mask))
    np.testing.assert_allclose(got.numpy(), np_sdpa(q, k, v, float_mask), rtol=1e-10)
    with pytest.raises(RuntimeError, match="attn_mask should not be set"):
        F.scaled_dot_product_attention(t64(q), t64(k), t64(v), fg.tensor(bool_mask), is_causal=True)
    with pytest.raises(ValueError, match="do not fit"):
        F.scaled_dot_product_attention(t64(q), t64(k[..., :2]), t64(v))


def test_sdpa_dropout_keeps_the_expected_value():
    fg.manual_seed(0)
    q = k = fg.zeros(1, 4, 2)  # uniform weights 1/4
    v = fg.ones(1, 4, 3)
    outs = np.stack(
        [F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy() for _ in range(200)]
    )
    # each output is (kept count) * 0.25 * 2: multiples of 0.5, mean 1
    np.testing.assert_allclose(outs * 2, np.round(outs * 2), atol=1e-6)
    assert abs(outs.mean() - 1.0) < 0.1 and outs.std() > 0.1


def np_mha(mha, q, k, v, key_padding_mask=None, attn_mask=None):
    """nn.MultiheadAttention's formulas, with (L, N, E) inputs."""
    e, h = mha.embed_dim, mha.num_heads
    d = e // h
    w, b = mha.in_proj_weight.numpy(), mha.in_proj_bias.numpy()
    wo, bo = mha.out_proj.weight.numpy(), mha.out_proj.bias.numpy()
    lq, n, _ = q.shape
    lk = k.shape[0]

    def heads(x, i, length):
        y = x @ w[i * e : (i + 1) * e].T + b[i * e : (i + 1) * e]
        return y.reshape(length, n, h, d).transpose(1, 2, 0, 3)

    s = heads(q, 0, lq) @ np.swapaxes(heads(k, 1, lk), -1, -2) / np.sqrt(d)
    if attn_mask is not None:
        s = np.where(attn_mask, -np.inf, s) if attn_mask.dtype == bool else s + attn_mask
    if key_padding_mask is not None:
        s = np.where(key_padding_mask[:, None, None, :], -np.inf, s)
    p = np_softmax(s)
    out = (p @ heads(v, 2, lk)).transpose(2, 0, 1, 3).reshape(lq, n, e)
    return out @ wo.T + bo, p


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_matches_numpy(batch_first):
    fg.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    fg.nn.init.uniform_(mha.in_proj_bias, -0.5, 0.5)
    q, k, v = (RNG.standard_normal((5, 3, 8)).astype(np.float32) for _ in range(3))
    kpm = np.zeros((3, 5), bool)
    kpm[1, 3:] = True
    causal = ~np.tril(np.ones((5, 5), bool))
    want, p = np_mha(mha, q, k, v, kpm, causal)

    def inp(a):
        return fg.tensor(a.transpose(1, 0, 2) if batch_first else a)

    out, weights = mha(
        inp(q), inp(k), inp(v), key_padding_mask=fg.tensor(kpm), attn_mask=fg.tensor(causal)
    )
    got = out.numpy().transpose(1, 0, 2) if batch_first else out.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), p.mean(1), rtol=1e-4, atol=1e-6)
    _, per_head = mha(inp(q), inp(k), inp(v), average_attn_weights=False)
    assert per_head.shape == (3, 2, 5, 5)
    out2, none = mha(inp(q), inp(k), inp(v), need_weights=False)
    assert none is None and out2.shape == out.shape


def test_multihead_attention_float_mask_unbatched_and_gradients():
    fg.manual_seed(1)
    mha = nn.MultiheadAttention(4, 2)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    fmask = RNG.standard_normal((3, 3)).astype(np.float32)
    want, _ = np_mha(mha, x[:, None], x[:, None], x[:, None], attn_mask=fmask)
    out, w = mha(fg.tensor(x), fg.tensor(x), fg.tensor(x), attn_mask=fg.tensor(fmask))
    np.testing.assert_allclose(out.numpy(), want[:, 0], rtol=1e-4, atol=1e-5)
    assert w.shape == (3, 3)
    out.sum().backward()
    names = {n for n, p in mha.named_parameters() if p.grad is not None}
    assert names == {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}


def test_multihead_attention_errors():
    with pytest.raises(AssertionError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    mha = nn.MultiheadAttention(4, 2)
    x = fg.ones(3, 2, 4)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="embedding dimension"):
        mha(fg.ones(3, 2, 5), x, x)
