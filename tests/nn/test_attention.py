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


def np_mha_extra(mha, q, k, v, key_padding_mask=None, attn_mask=None):
    """`np_mha` with torch's `add_bias_kv` (the learned key and value appended after the
    projections) and `add_zero_attn` (a zero key and value appended after those), the masks
    widened by a column that every query may attend to for each."""
    e, h = mha.embed_dim, mha.num_heads
    d = e // h
    w, b = mha.in_proj_weight.numpy(), mha.in_proj_bias.numpy()
    wo, bo = mha.out_proj.weight.numpy(), mha.out_proj.bias.numpy()
    lq, n, _ = q.shape
    kp = k @ w[e : 2 * e].T + b[e : 2 * e]
    vp = v @ w[2 * e :].T + b[2 * e :]
    extra = 0
    if mha.bias_k is not None:
        kp = np.concatenate([kp, np.broadcast_to(mha.bias_k.numpy(), (1, n, e))])
        vp = np.concatenate([vp, np.broadcast_to(mha.bias_v.numpy(), (1, n, e))])
        extra += 1
    lk = kp.shape[0]

    def heads(y, length):
        return y.reshape(length, n, h, d).transpose(1, 2, 0, 3)

    qh, kh, vh = heads(q @ w[:e].T + b[:e], lq), heads(kp, lk), heads(vp, lk)
    if mha.add_zero_attn:
        kh = np.concatenate([kh, np.zeros((n, h, 1, d))], 2)
        vh = np.concatenate([vh, np.zeros((n, h, 1, d))], 2)
        extra += 1
    s = qh @ np.swapaxes(kh, -1, -2) / np.sqrt(d)
    if attn_mask is not None:
        pad = np.zeros(attn_mask.shape[:-1] + (extra,), attn_mask.dtype)
        am = np.concatenate([attn_mask, pad], -1)
        if am.ndim == 3:
            am = am.reshape(n, h, lq, -1)
        s = np.where(am, -np.inf, s) if am.dtype == bool else s + am
    if key_padding_mask is not None:
        kpm = np.concatenate([key_padding_mask, np.zeros((n, extra), bool)], -1)
        s = np.where(kpm[:, None, None, :], -np.inf, s)
    p = np_softmax(s)
    out = (p @ vh).transpose(2, 0, 1, 3).reshape(lq, n, e)
    return out @ wo.T + bo, p


@pytest.mark.parametrize("bias_kv, zero_attn", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("mask", ["none", "bool3d", "float2d", "padding"])
def test_multihead_attention_bias_kv_and_zero_attn(bias_kv, zero_attn, mask):
    fg.manual_seed(2)
    mha = nn.MultiheadAttention(8, 2, add_bias_kv=bias_kv, add_zero_attn=zero_attn)
    mha = mha.to(fg.float64)
    fg.nn.init.uniform_(mha.in_proj_bias, -0.5, 0.5)
    names = [n for n, _ in mha.named_parameters()]
    assert names[:2] == ["in_proj_weight", "in_proj_bias"]  # torch's order
    assert ("bias_k" in names) == bias_kv and ("bias_v" in names) == bias_kv
    if not bias_kv:
        assert mha.bias_k is None and mha.bias_v is None
    q, k, v = (RNG.standard_normal((4, 3, 8)) for _ in range(3))
    kw, ref = {}, {}
    if mask == "bool3d":
        m = RNG.random((6, 4, 4)) > 0.5
        m[..., 0] = False  # (a row masked everywhere is NaN in both)
        kw["attn_mask"], ref["attn_mask"] = fg.tensor(m), m
    elif mask == "float2d":
        m = RNG.standard_normal((4, 4))
        kw["attn_mask"], ref["attn_mask"] = t64(m), m
    elif mask == "padding":
        m = np.zeros((3, 4), bool)
        m[1, 2:] = True
        kw["key_padding_mask"], ref["key_padding_mask"] = fg.tensor(m), m
    want, p = np_mha_extra(mha, q, k, v, **ref)
    out, weights = mha(t64(q), t64(k), t64(v), average_attn_weights=False, **kw)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), p, rtol=1e-10, atol=1e-12)
    assert weights.shape[-1] == 4 + bias_kv + zero_attn


def test_multihead_attention_bias_kv_gradients():
    """The learned key and value get their gradients (float64 central differences of the
    numpy reference)."""
    fg.manual_seed(3)
    mha = nn.MultiheadAttention(4, 2, add_bias_kv=True, add_zero_attn=True).to(fg.float64)
    x = RNG.standard_normal((3, 2, 4))
    w_out = RNG.standard_normal((3, 2, 4))
    (mha(t64(x), t64(x), t64(x))[0] * t64(w_out)).sum().backward()
    for name in ("bias_k", "bias_v"):
        p = getattr(mha, name)
        base = p.numpy().copy()
        want = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            f = []
            for step in (1e-6, -1e-6):
                moved = base.copy()
                moved[i] += step
                p.data = t64(moved)
                f.append((np_mha_extra(mha, x, x, x)[0] * w_out).sum())
            want[i] = (f[0] - f[1]) / 2e-6
        p.data = t64(base)
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def test_sdpa_and_attention_with_a_float32_mask_on_16_bit_inputs():
    """torch's SDPA adds a float32 mask to bfloat16 scores and gives bfloat16; the
    attention layers built on it follow (a decoder's float32 causal mask)."""
    q, k, v = (RNG.standard_normal((2, 5, 4)) for _ in range(3))
    mask = np.triu(np.full((5, 5), -1e9), 1) + RNG.standard_normal((5, 5))
    want = np_sdpa(q, k, v, mask)
    for dt in (fg.bfloat16, fg.float16):
        got = F.scaled_dot_product_attention(
            fg.tensor(q).to(dt), fg.tensor(k).to(dt), fg.tensor(v).to(dt),
            attn_mask=fg.tensor(mask, dtype=fg.float32),
        )  # fmt: skip
        assert got.dtype == dt
        np.testing.assert_allclose(got.float().numpy(), want, atol=0.05)
    layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=True).bfloat16()
    x = fg.randn(5, 2, 8).bfloat16()
    out = layer(x, x[:3], tgt_mask=nn.Transformer.generate_square_subsequent_mask(5))
    assert out.dtype == fg.bfloat16 and out.shape == (5, 2, 8)
    assert np.isfinite(out.float().numpy()).all()


def test_zero_attn_gives_a_row_whose_keys_are_all_masked_the_zero_key():
    """torch's add_zero_attn at a boundary: a batch entry whose every key is padding still
    attends to the appended zero key (its mask column is always open), so its output is
    the output projection's bias, not NaN; the other entry is unchanged by it."""
    fg.manual_seed(4)
    mha = nn.MultiheadAttention(4, 2, add_zero_attn=True).to(fg.float64)
    fg.nn.init.uniform_(mha.out_proj.bias, -1.0, 1.0)
    x = RNG.standard_normal((3, 2, 4))
    kpm = np.array([[True, True, True], [False, True, False]])
    out, w = mha(t64(x), t64(x), t64(x), key_padding_mask=fg.tensor(kpm))
    want, p = np_mha_extra(mha, x, x, x, key_padding_mask=kpm)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        out.detach().numpy()[:, 0], np.tile(mha.out_proj.bias.numpy(), (3, 1))
    )
    assert np.isfinite(out.detach().numpy()).all() and w.numpy()[0, :, -1].tolist() == [1.0] * 3
