"""`F.multi_head_attention_forward` against torch's formulas in numpy: separate
projections, static keys and values, its is_causal reading, its two paths' fully masked
rows, the weights after dropout, and its refusals (`nn.MultiheadAttention`, which is this
function over its parameters, is checked in test_attention.py)."""

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

RNG = np.random.default_rng(21)
E, H = 8, 2
D = E // H


def t64(a, grad=False):
    return fg.tensor(np.asarray(a, np.float64), requires_grad=grad)


def np_softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_forward(q, k, v, wq, wk, wv, b, wo, bo, static_k=None, static_v=None, mask=None):
    """(L, N, E) inputs; `mask` a float (N, H, L, S) or broadcastable one."""
    lq, n, _ = q.shape

    def heads(x):
        return x.reshape(x.shape[0], n, H, D).transpose(1, 2, 0, 3)

    qh = heads(q @ wq.T + b[:E])
    kh = heads(k @ wk.T + b[E : 2 * E]) if static_k is None else static_k.reshape(n, H, -1, D)
    vh = heads(v @ wv.T + b[2 * E :]) if static_v is None else static_v.reshape(n, H, -1, D)
    s = qh @ np.swapaxes(kh, -1, -2) / np.sqrt(D)
    if mask is not None:
        s = s + mask
    p = np_softmax(s)
    out = (p @ vh).transpose(2, 0, 1, 3).reshape(lq, n, E)
    return out @ wo.T + bo, p


def _weights(kdim=E, vdim=E):
    return dict(
        wq=RNG.standard_normal((E, E)) * 0.4,
        wk=RNG.standard_normal((E, kdim)) * 0.4,
        wv=RNG.standard_normal((E, vdim)) * 0.4,
        b=RNG.standard_normal(3 * E) * 0.3,
        wo=RNG.standard_normal((E, E)) * 0.4,
        bo=RNG.standard_normal(E) * 0.3,
    )


def test_separate_projections_and_their_gradients():
    w = _weights(kdim=6, vdim=5)
    q, k, v = (RNG.standard_normal(s) for s in ((4, 3, E), (5, 3, 6), (5, 3, 5)))
    params = {name: t64(a, grad=True) for name, a in w.items()}
    out, weights = F.multi_head_attention_forward(
        t64(q), t64(k), t64(v), E, H, None, params["b"], None, None, False, 0.0,
        params["wo"], params["bo"], use_separate_proj_weight=True, q_proj_weight=params["wq"],
        k_proj_weight=params["wk"], v_proj_weight=params["wv"], average_attn_weights=False,
    )  # fmt: skip
    want, p = np_forward(q, k, v, **w)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.detach().numpy(), p, rtol=1e-10, atol=1e-12)
    out.sum().backward()
    # d(sum out)/d(bo) is one per output row; d/d(wq) by a central difference
    np.testing.assert_allclose(params["bo"].grad.numpy(), np.full(E, 4 * 3))
    i, j = 1, 2
    f = []
    for step in (1e-6, -1e-6):
        moved = dict(w)
        moved["wq"] = w["wq"].copy()
        moved["wq"][i, j] += step
        f.append(np_forward(q, k, v, **moved)[0].sum())
    np.testing.assert_allclose(params["wq"].grad.numpy()[i, j], (f[0] - f[1]) / 2e-6, rtol=1e-6)


def test_static_keys_and_values_replace_the_projections():
    w = _weights()
    q, k = RNG.standard_normal((4, 2, E)), RNG.standard_normal((5, 2, E))
    sk, sv = RNG.standard_normal((2 * H, 6, D)), RNG.standard_normal((2 * H, 6, D))
    packed = np.concatenate([w["wq"], w["wk"], w["wv"]])
    svt = t64(sv, grad=True)
    out, weights = F.multi_head_attention_forward(
        t64(q), t64(k), t64(k), E, H, t64(packed), t64(w["b"]), None, None, False, 0.0,
        t64(w["wo"]), t64(w["bo"]), static_k=t64(sk), static_v=svt,
    )  # fmt: skip
    want, p = np_forward(q, k, k, **w, static_k=sk, static_v=sv)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.detach().numpy(), p.mean(1), rtol=1e-10, atol=1e-12)
    assert weights.shape == (2, 4, 6)
    out.sum().backward()
    assert svt.grad.shape == sv.shape and np.abs(svt.grad.numpy()).sum() > 0


def _call(q, mask, w, **kw):
    packed = np.concatenate([w["wq"], w["wk"], w["wv"]])
    return F.multi_head_attention_forward(
        t64(q), t64(q), t64(q), E, H, t64(packed), t64(w["b"]), None, None, False, 0.0,
        t64(w["wo"]), t64(w["bo"]), attn_mask=None if mask is None else fg.tensor(mask), **kw,
    )  # fmt: skip


def test_is_causal_is_a_causal_mask_only_without_weights_and_padding():
    """torch: with need_weights=False and no key padding mask the hint replaces attn_mask
    by a causal mask; otherwise attn_mask is applied as given."""
    w = _weights()
    q = RNG.standard_normal((5, 2, E))
    lower = np.tril(np.ones((5, 5), bool), -1)  # a mask that is not causal
    causal = np.where(np.triu(np.ones((5, 5), bool), 1), -np.inf, 0.0)
    given = np.where(lower, -np.inf, 0.0)
    given[0, 0] = 0.0
    out, none = _call(q, lower, w, is_causal=True, need_weights=False)
    assert none is None
    np.testing.assert_allclose(out.numpy(), np_forward(q, q, q, **w, mask=causal)[0], rtol=1e-10)
    out, _ = _call(q, lower, w, is_causal=True)
    np.testing.assert_allclose(out.numpy(), np_forward(q, q, q, **w, mask=given)[0], rtol=1e-10)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        _call(q, None, w, is_causal=True)


def test_fully_masked_rows_nan_with_weights_zeros_without():
    w = _weights()
    q = RNG.standard_normal((3, 1, E))
    mask = np.zeros((3, 3), bool)
    mask[1] = True
    with_weights, weights = _call(q, mask, w)
    assert np.isnan(with_weights.numpy()[1]).all() and np.isnan(weights.numpy()[0, 1]).all()
    without, _ = _call(q, mask, w, need_weights=False)
    np.testing.assert_allclose(without.numpy()[1, 0], w["bo"])  # the zero row, projected
    np.testing.assert_allclose(without.numpy()[[0, 2]], with_weights.numpy()[[0, 2]])


def test_returned_weights_are_the_dropped_ones():
    w = _weights()
    q = RNG.standard_normal((6, 1, E))
    packed = np.concatenate([w["wq"], w["wk"], w["wv"]])
    fg.manual_seed(0)
    out, weights = F.multi_head_attention_forward(
        t64(q), t64(q), t64(q), E, 1, t64(packed), None, None, None, False, 0.5,
        t64(w["wo"]), None, average_attn_weights=False,
    )  # fmt: skip
    p = weights.numpy()[0, 0]
    assert (p == 0).any()
    want = (p @ (q[:, 0] @ w["wv"].T)) @ w["wo"].T  # one head: the values, unsplit
    np.testing.assert_allclose(out.numpy()[:, 0], want, rtol=1e-10)
    kept, _ = F.multi_head_attention_forward(
        t64(q), t64(q), t64(q), E, 1, t64(packed), None, None, None, False, 0.5,
        t64(w["wo"]), None, training=False,
    )  # fmt: skip
    x = q[:, 0]
    one_head = np_softmax((x @ w["wq"].T) @ (x @ w["wk"].T).T / np.sqrt(E))
    want = (one_head @ (x @ w["wv"].T)) @ w["wo"].T
    np.testing.assert_allclose(kept.numpy()[:, 0], want, rtol=1e-10)


def test_empty_batch_and_module_shares_the_function():
    mha = nn.MultiheadAttention(E, H)
    out, weights = mha(fg.ones(4, 0, E), fg.ones(5, 0, E), fg.ones(5, 0, E))
    assert out.shape == (4, 0, E) and weights.shape == (0, 4, 5)
    x = fg.randn(4, 2, E)
    direct = F.multi_head_attention_forward(
        x, x, x, E, H, mha.in_proj_weight, mha.in_proj_bias, None, None, False, 0.0,
        mha.out_proj.weight, mha.out_proj.bias,
    )  # fmt: skip
    np.testing.assert_array_equal(mha(x, x, x)[0].numpy(), direct[0].numpy())


@pytest.mark.parametrize(
    "change, error",
    [
        (dict(embed_dim_to_check=6), AssertionError),
        (dict(num_heads=3), AssertionError),
        (dict(query=fg.ones(2, 2, 2, E)), AssertionError),
        (dict(key=fg.ones(5, E)), AssertionError),
        (dict(attn_mask=fg.ones(4, 4, dtype=fg.bool)), RuntimeError),
        (dict(attn_mask=fg.ones(2 * H, 4, 6)), RuntimeError),
        (dict(attn_mask=fg.ones(4, 5, dtype=fg.int64)), AssertionError),
        (dict(key_padding_mask=fg.ones(2, 4, dtype=fg.bool)), AssertionError),
        (dict(bias_k=fg.ones(1, 1, E)), AssertionError),
        (
            dict(bias_k=fg.ones(1, 1, E), bias_v=fg.ones(1, 1, E), static_k=fg.ones(4, 5, D)),
            AssertionError,
        ),
        (dict(static_k=fg.ones(3, 5, D)), AssertionError),
        (dict(in_proj_weight=None), AssertionError),
        (dict(use_separate_proj_weight=True), AssertionError),
    ],
)
def test_refusals_as_torch(change, error):
    args = dict(
        query=fg.ones(4, 2, E), key=fg.ones(5, 2, E), value=fg.ones(5, 2, E),
        embed_dim_to_check=E, num_heads=H, in_proj_weight=fg.ones(3 * E, E),
        in_proj_bias=None, bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
        out_proj_weight=fg.ones(E, E), out_proj_bias=None,
    )  # fmt: skip
    args.update(change)
    with pytest.raises(error):
        F.multi_head_attention_forward(**args)
