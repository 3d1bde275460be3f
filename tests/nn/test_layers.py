"""Layers against numpy: every forward value and every gradient from PyTorch's formulas.

Gradients are taken of a weighted sum `(out * G).sum()` with a random G, so
the upstream gradient is G and each layer's vector-Jacobian product is
checked in full, not only its column sums.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

RNG = np.random.default_rng(1234)

# every test once per backend (tests/conftest.py: `backend`; the others beside the CPU for
# the tests marked backend_slice, all of them under --all-backends)
pytestmark = pytest.mark.usefixtures("backend")


RNG_LAYERS = np.random.default_rng(29)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def backward_with(out: fg.Tensor, upstream: np.ndarray) -> None:
    (out * fg.from_numpy(upstream)).sum().backward()


def close(actual, expected, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------- Linear


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.backend_slice
def test_linear_forward_and_gradients(bias):
    fg.manual_seed(0)
    layer = nn.Linear(5, 3, bias=bias)
    x_np = randn(4, 5)
    x = fg.tensor(x_np, requires_grad=True)
    out = layer(x)
    W = layer.weight.numpy().astype(np.float64)
    b = layer.bias.numpy().astype(np.float64) if bias else 0.0
    close(out.numpy(), x_np @ W.T + b)
    g = randn(4, 3)
    backward_with(out, g)
    close(layer.weight.grad.numpy(), g.T @ x_np)
    close(x.grad.numpy(), g @ W)
    if bias:
        close(layer.bias.grad.numpy(), g.sum(0))
    else:
        assert layer.bias is None and [n for n, _ in layer.named_parameters()] == ["weight"]


def test_linear_on_batched_input():
    layer = nn.Linear(4, 2)
    x_np = randn(2, 3, 4)
    W, b = layer.weight.numpy(), layer.bias.numpy()
    close(layer(fg.tensor(x_np)).numpy(), x_np @ W.T + b)


# ---------------------------------------------------------------- activations

EXTREMES = np.array(
    [-200.0, -100.0, -89.0, -30.0, -3.0, -0.1, 0.0, 0.1, 3.0, 30.0, 100.0], np.float32
)


def sigmoid_np(x):
    x = x.astype(np.float64)
    return np.where(
        x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x)))
    )


@pytest.mark.parametrize(
    "module, forward, derivative",
    [
        (nn.ReLU(), lambda x: np.maximum(x, 0), lambda x, y: (x > 0).astype(np.float64)),
        (nn.Sigmoid(), sigmoid_np, lambda x, y: y * (1 - y)),
        (nn.Tanh(), lambda x: np.tanh(x.astype(np.float64)), lambda x, y: 1 - y * y),
    ],
    ids=["relu", "sigmoid", "tanh"],
)
def test_activation_values_and_gradients(module, forward, derivative):
    x_np = np.concatenate([randn(20, scale=4.0), EXTREMES])
    x = fg.tensor(x_np, requires_grad=True)
    out = module(x)
    y = forward(x_np)
    close(out.numpy(), y, rtol=2e-6, atol=1e-7)
    g = randn(x_np.size)
    backward_with(out, g)
    grad = x.grad.numpy()
    assert np.isfinite(grad).all(), "saturated inputs must not give NaN gradients"
    close(grad, g * derivative(x_np, y), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax(dim):
    x_np = randn(3, 5, scale=3.0)
    shifted = x_np - x_np.max(axis=dim, keepdims=True)
    soft = np.exp(shifted) / np.exp(shifted).sum(axis=dim, keepdims=True)
    g = randn(3, 5)

    x = fg.tensor(x_np, requires_grad=True)
    out = nn.Softmax(dim=dim)(x)
    close(out.numpy(), soft)
    backward_with(out, g)
    close(x.grad.numpy(), soft * (g - (g * soft).sum(axis=dim, keepdims=True)))

    x = fg.tensor(x_np, requires_grad=True)
    out = nn.LogSoftmax(dim=dim)(x)
    close(out.numpy(), np.log(soft), atol=1e-5)
    backward_with(out, g)
    close(x.grad.numpy(), g - soft * g.sum(axis=dim, keepdims=True))


def test_softmax_without_dim_uses_torch_legacy_rule():
    x_np = randn(2, 3)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = F.softmax(fg.tensor(x_np))
    e = np.exp(x_np - x_np.max(1, keepdims=True))
    close(out.numpy(), e / e.sum(1, keepdims=True))


def test_flatten():
    x = fg.tensor(randn(2, 3, 4, 5))
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 1)(x).shape == (6, 4, 5)
    assert nn.Flatten(2)(x).shape == (2, 3, 20)
    close(nn.Flatten()(x).numpy(), x.numpy().reshape(2, 60))


def test_identity_returns_its_input():
    x = fg.tensor([1.0])
    assert nn.Identity()(x) is x


# ---------------------------------------------------------------- Embedding


@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
@pytest.mark.backend_slice
def test_embedding_lookup_and_gradient(index_dtype):
    fg.manual_seed(3)
    emb = nn.Embedding(7, 4)
    idx_np = np.array([[0, 3, 3, 6], [2, 2, 2, 5]], dtype=index_dtype)
    out = emb(fg.from_numpy(idx_np))
    W = emb.weight.numpy()
    assert out.shape == (2, 4, 4)
    close(out.numpy(), W[idx_np])
    g = randn(2, 4, 4)
    backward_with(out, g)
    expected = np.zeros((7, 4))
    np.add.at(expected, idx_np.reshape(-1), g.reshape(-1, 4))  # scatter-add of repeated rows
    close(emb.weight.grad.numpy(), expected)


def test_embedding_scalar_index():
    emb = nn.Embedding(3, 2)
    assert emb(fg.tensor(1)).shape == (2,)
    close(emb(fg.tensor(1)).numpy(), emb.weight.numpy()[1])


def test_embedding_init_is_standard_normal():
    fg.manual_seed(0)
    w = nn.Embedding(400, 100).weight.numpy()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1.0) < 0.02


def test_embedding_padding_idx_row_is_zero_and_gets_no_gradient():
    emb = nn.Embedding(5, 3, padding_idx=2)
    assert not emb.weight.numpy()[2].any()
    idx = np.array([2, 0, 2, 4])
    out = emb(fg.from_numpy(idx))
    close(out.numpy(), emb.weight.numpy()[idx])
    g = randn(4, 3)
    backward_with(out, g)
    expected = np.zeros((5, 3))
    np.add.at(expected, idx, g)
    expected[2] = 0
    close(emb.weight.grad.numpy(), expected)


def _max_norm_habits(lib, norm_type):
    """An embedding with max_norm, on `lib` (torch or fusegrad): rows above the norm, at
    it, below it, zero, repeated and unused; two lookups, a backward each."""
    w0 = np.array(
        [[3.0, 4.0], [0.3, 0.4], [1.0, 0.0], [-6.0, 8.0], [0.0, 0.0], [-0.0, 2.0]], np.float64
    )
    w = lib.tensor(w0, requires_grad=True)
    F_ = lib.nn.functional
    out = F_.embedding(lib.tensor([[0, 1, 3], [3, 3, 4]]), w, max_norm=1.0, norm_type=norm_type)
    (out * lib.tensor([1.0, 2.0], dtype=lib.float64)).sum().backward()
    out2 = F_.embedding(lib.tensor([5, 2]), w, padding_idx=2, max_norm=0.5, norm_type=norm_type)
    (out2 * out2).sum().backward()
    return [t.detach().numpy() for t in (out, out2, w, w.grad)]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0])
def test_embedding_max_norm_renormalizes_the_rows_it_reads_as_torchs(norm_type):
    out, _, w, grad = _max_norm_habits(fg, norm_type)
    if norm_type == 2.0:  # torch's values (rows 0 and 3 scaled to norm 1, 1 and 2 kept)
        scale = 1.0 / (5.0 + 1e-7)
        np.testing.assert_allclose(w[0], [3.0 * scale, 4.0 * scale], rtol=1e-15)
        np.testing.assert_allclose(w[3], [-6.0 / (10.0 + 1e-7), 8.0 / (10.0 + 1e-7)])
        assert w[1].tolist() == [0.3, 0.4]  # at norm 0.5: kept
        np.testing.assert_allclose(w[2], [0.5 / (1.0 + 1e-7), 0.0])  # the second lookup's 0.5
        assert grad[3].tolist() == [3.0, 6.0]  # read three times
    torch = pytest.importorskip("torch")
    for got, want in zip(_max_norm_habits(fg, norm_type), _max_norm_habits(torch, norm_type)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    emb = nn.Embedding(6, 2, max_norm=1.0)
    emb(fg.tensor([0, 1]))
    assert (emb.weight.detach()[:2].norm(dim=1) <= 1.0 + 1e-6).all().item()
    assert repr(emb) == "Embedding(6, 2, max_norm=1.0)"
    with pytest.raises(NotImplementedError, match="sparse"):
        nn.Embedding(6, 2, sparse=True)


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_scale_grad_by_freq_divides_by_each_index_count(padding_idx):
    """torch's rule: a position's gradient is divided by how many times its index occurs
    in the whole input (the padding row still gets none); the values are unchanged."""
    table = RNG_LAYERS.standard_normal((6, 2))
    idx = np.array([[0, 3, 3, 5], [3, 0, 1, 3]])
    g = RNG_LAYERS.standard_normal((2, 4, 2))
    emb = nn.Embedding(6, 2, padding_idx=padding_idx, scale_grad_by_freq=True).double()
    emb.weight.data = fg.tensor(table)
    out = emb(fg.tensor(idx))
    np.testing.assert_array_equal(out.detach().numpy(), table[idx])
    (out * fg.tensor(g)).sum().backward()
    counts = np.bincount(idx.reshape(-1), minlength=6)
    want = np.zeros((6, 2))
    np.add.at(want, idx.reshape(-1), (g / counts[idx][..., None]).reshape(-1, 2))
    if padding_idx is not None:
        want[padding_idx] = 0
    np.testing.assert_allclose(emb.weight.grad.numpy(), want, rtol=1e-14)
    assert "scale_grad_by_freq=True" in repr(emb)
    w = fg.tensor(table, requires_grad=True)  # the function form, no module
    F.embedding(fg.tensor(idx), w, scale_grad_by_freq=True).sum().backward()
    np.testing.assert_allclose(w.grad.numpy()[:, 0], np.where(counts > 0, 1.0, 0.0))
    # an empty index tensor: an empty result and a zero gradient; a 0-d index: its row whole
    e = nn.Embedding(5, 2, scale_grad_by_freq=True)
    out = e(fg.tensor([], dtype=fg.int64))
    assert out.shape == (0, 2)
    out.sum().backward()
    assert not e.weight.grad.numpy().any()
    e.weight.grad = None
    (e(fg.tensor(3)) * 2).sum().backward()
    assert e.weight.grad.tolist() == [[0.0, 0.0]] * 3 + [[2.0, 2.0]] + [[0.0, 0.0]]


def test_embedding_from_pretrained():
    table = randn(4, 3)
    frozen = nn.Embedding.from_pretrained(fg.tensor(table))
    assert not frozen.weight.requires_grad
    close(frozen(fg.tensor([3, 1])).numpy(), table[[3, 1]])
    trainable = nn.Embedding.from_pretrained(fg.tensor(table), freeze=False)
    assert trainable.weight.requires_grad
    trainable(fg.tensor([1, 1])).sum().backward()
    expected = np.zeros((4, 3))
    expected[1] = 2
    close(trainable.weight.grad.numpy(), expected)


def test_embedding_rejects_bad_indices():
    emb = nn.Embedding(4, 2)
    with pytest.raises(IndexError, match="out of range"):
        emb(fg.tensor([0, 4]))
    with pytest.raises(IndexError, match="out of range"):
        emb(fg.tensor([-1]))
    with pytest.raises(TypeError, match="integer index"):
        emb(fg.tensor([0.0, 1.0]))


# ---------------------------------------------------------------- Dropout


def test_dropout_statistics_and_scaling():
    fg.manual_seed(7)
    p, n = 0.3, 200_000
    x = fg.ones(n, requires_grad=True)
    out = nn.Dropout(p)(x)
    y = out.numpy()
    kept = y != 0
    # the fraction kept is Binomial(n, 1 - p) / n: within 5 standard deviations
    assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)
    close(y[kept], np.full(kept.sum(), 1 / (1 - p)))  # inverted dropout: kept values scaled
    out.sum().backward()
    # the backward kernels regenerate the same mask: gradient 1/(1-p) exactly where kept
    close(x.grad.numpy(), kept / (1 - p))


@pytest.mark.backend_slice
def test_dropout_masks_differ_between_calls_and_repeat_under_manual_seed():
    x = fg.ones(1000)
    fg.manual_seed(11)
    first, second = nn.Dropout(0.5)(x).numpy(), nn.Dropout(0.5)(x).numpy()
    assert (first != second).any()
    fg.manual_seed(11)
    np.testing.assert_array_equal(nn.Dropout(0.5)(x).numpy(), first)


def test_dropout_eval_and_edge_probabilities():
    x = fg.tensor(randn(10))
    d = nn.Dropout(0.5)
    d.eval()
    assert d(x) is x
    d.train()
    assert d(x) is not x
    assert F.dropout(x, 0.0) is x
    assert F.dropout(x, 0.9, training=False) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), np.zeros(10))
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, -0.1)


# ---------------------------------------------------------------- a model


def test_mlp_forward_and_gradients_match_numpy():
    fg.manual_seed(5)
    model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2), nn.Sigmoid())
    x_np = randn(8, 3)
    W1, b1, W2, b2 = (p.numpy().astype(np.float64) for p in model.parameters())
    h = np.tanh(x_np @ W1.T + b1)
    y = 1 / (1 + np.exp(-(h @ W2.T + b2)))
    out = model(fg.tensor(x_np))
    close(out.numpy(), y)
    g = randn(8, 2)
    backward_with(out, g)
    dz2 = g * y * (1 - y)
    dz1 = (dz2 @ W2) * (1 - h * h)
    grads = [dz1.T @ x_np, dz1.sum(0), dz2.T @ h, dz2.sum(0)]
    for p, expected in zip(model.parameters(), grads):
        close(p.grad.numpy(), expected, rtol=1e-4, atol=1e-6)
