"""fg.linalg.matrix_norm's 1 / -1 / inf / -inf norms and linalg.norm's choice of vector or
matrix norm, against torch 2.13's values and gradients (the gradient of the sum; a tie
in the smallest column sum splits it, as torch's amin)."""

from __future__ import annotations

import math

import pytest

import fusegrad as fg

X = [[[1.0, -1.0, 0.5], [1.0, 1.0, -2.0]]]


@pytest.mark.parametrize(
    "ord, value, grad",
    [
        (1, [2.5], [[[0.0, -0.0, 1.0], [0.0, 0.0, -1.0]]]),
        (-1, [2.0], [[[0.5, -0.5, 0.0], [0.5, 0.5, -0.0]]]),
        (math.inf, [4.0], [[[0.0, -0.0, 0.0], [1.0, 1.0, -1.0]]]),
        (-math.inf, [2.5], [[[1.0, -1.0, 1.0], [0.0, 0.0, -0.0]]]),
    ],
)
def test_matrix_norms(ord, value, grad):
    x = fg.tensor(X, dtype=fg.float64, requires_grad=True)
    y = fg.linalg.matrix_norm(x, ord)
    y.sum().backward()
    assert y.tolist() == value and x.grad.tolist() == grad


def test_norm_picks_vector_or_matrix_norm_and_refuses_what_it_cannot():
    x = fg.tensor(X, dtype=fg.float64, requires_grad=True)
    y = fg.linalg.norm(x, 1, dim=(2, 1), keepdim=True)  # dims swapped: the row sums' max
    y.sum().backward()
    assert y.shape == (1, 1, 1) and y.tolist() == [[[4.0]]]
    assert x.grad.tolist() == [[[0.0, -0.0, 0.0], [1.0, 1.0, -1.0]]]
    assert fg.linalg.norm(fg.tensor([[3.0, 0.0], [0.0, 4.0]]), "fro").item() == 5.0
    assert fg.linalg.norm(fg.tensor([3.0, -4.0]), 1).item() == 7.0
    with pytest.raises(RuntimeError, match="must be 1D or 2D. Got 3D"):
        fg.linalg.norm(x, 2)
    with pytest.raises(RuntimeError, match="Order 3 not supported"):
        fg.linalg.matrix_norm(x, 3)
    with pytest.raises(RuntimeError, match="dims must be different"):
        fg.linalg.matrix_norm(x, 1, (1, 1))


A = [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize(
    "ord, value, grad",  # torch 2.13, float64
    [
        (
            2,
            5.464985704219043,
            [[0.23304246013169683, 0.33068839528718], [0.5268045304253642, 0.7475382155592234]],
        ),
        (
            -2,
            0.3659661906262575,
            [[-0.7475382155592234, 0.5268045304253642], [0.33068839528718, -0.23304246013169685]],
        ),
        (
            "nuc",
            5.8309518948453,
            [[-0.5144957554275266, 0.8574929257125443], [0.8574929257125443, 0.5144957554275266]],
        ),
    ],
)
def test_spectral_norms_as_torch(ord, value, grad):
    x = fg.tensor(A, dtype=fg.float64, requires_grad=True)
    y = fg.linalg.matrix_norm(x, ord)
    y.backward()
    assert y.item() == pytest.approx(value, rel=1e-14)
    assert x.grad.numpy() == pytest.approx(__import__("numpy").array(grad), abs=1e-14)
    assert fg.linalg.norm(fg.tensor(A), ord).item() == pytest.approx(value, rel=1e-6)


@pytest.mark.parametrize("ord", [2, -2, "nuc"])
def test_spectral_norms_at_ties_zeros_and_empty_as_torch(ord):
    """torch 2.13: the identity's tied singular values split the gradient of ord +-2 (1/3 I,
    amax's rule); a zero matrix's nuc gradient is I; an empty matrix's 2 and nuc norms are
    0, its -2 norm raises IndexError; float16 raises."""
    x = fg.eye(3, requires_grad=True)
    fg.linalg.matrix_norm(x, ord).backward()
    expected = 1.0 if ord == "nuc" else 1 / 3
    assert x.grad.numpy() == pytest.approx(fg.eye(3).numpy() * expected)
    z = fg.zeros(2, 2, requires_grad=True)
    assert fg.linalg.matrix_norm(z, ord).item() == 0.0
    fg.linalg.matrix_norm(z, ord).backward()
    assert z.grad.tolist() == (
        [[1.0, 0.0], [0.0, 1.0]] if ord == "nuc" else [[0.5, 0.0], [0.0, 0.5]]
    )
    if ord == -2:
        with pytest.raises(IndexError, match="ord=-2 of empty matrices"):
            fg.linalg.matrix_norm(fg.zeros(2, 0, 0), ord)
    else:
        assert fg.linalg.matrix_norm(fg.zeros(2, 0, 0), ord).tolist() == [0.0, 0.0]
    with pytest.raises(RuntimeError, match="Low precision dtypes not supported"):
        fg.linalg.matrix_norm(fg.ones(2, 2, dtype=fg.float16), ord)


def test_spectral_norms_batched_over_other_dims_against_torch():
    torch = pytest.importorskip("torch")
    import numpy as np

    a = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    for ord in (2, -2, "nuc"):
        t, x = torch.tensor(a, requires_grad=True), fg.tensor(a, requires_grad=True)
        rt = torch.linalg.matrix_norm(t, ord, dim=(0, 2), keepdim=True)
        rx = fg.linalg.matrix_norm(x, ord, dim=(0, 2), keepdim=True)
        (rt * torch.tensor([[[1.0], [2.0]]])).sum().backward()
        (rx * fg.tensor([[[1.0], [2.0]]])).sum().backward()
        assert rx.shape == tuple(rt.shape)
        np.testing.assert_allclose(rx.numpy(), rt.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_spectral_norms_refused_under_jit():
    @fg.jit
    def spectral(w):
        return fg.linalg.matrix_norm(w * 1, 2)

    with pytest.raises(fg.JitError, match="LAPACK on the host"):
        for _ in range(3):  # (the call that records it raises)
            spectral(fg.tensor([[1.0, 2.0], [3.0, 4.0]]))
