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
    with pytest.raises(RuntimeError, match="needs singular values"):
        fg.linalg.matrix_norm(x, "nuc")
    with pytest.raises(RuntimeError, match="dims must be different"):
        fg.linalg.matrix_norm(x, 1, (1, 1))
