"""nn.Unflatten against torch 2.14's: shapes, gradient, repr and errors (torch's
messages written in as literals)."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

# ---------------------------------------------------------------- Unflatten


@pytest.mark.parametrize(
    "shape, dim, sizes, expected",
    [
        ((4, 6), 1, (2, 3), (4, 2, 3)),
        ((4, 6), -1, [2, -1], (4, 2, 3)),
        ((6, 4), 0, (3, 2), (3, 2, 4)),
        ((2, 0), 1, (0, 3), (2, 0, 3)),
        ((5,), 0, (5,), (5,)),
        ((2, 1), 1, (1, 1, 1), (2, 1, 1, 1)),
    ],
)
def test_unflatten_shapes(shape, dim, sizes, expected):
    x = fg.arange(int(np.prod(shape)), dtype=fg.float32).reshape(shape)
    y = nn.Unflatten(dim, sizes)(x)
    assert y.shape == expected
    np.testing.assert_array_equal(y.numpy().reshape(-1), x.numpy().reshape(-1))


def test_unflatten_gradient_is_the_weights_refolded():
    x = fg.arange(12, dtype=fg.float64).reshape(2, 6).requires_grad_()
    w = fg.arange(12, dtype=fg.float64).reshape(2, 2, 3) * 0.5 - 1.0
    (nn.Unflatten(1, (2, 3))(x) * w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), w.numpy().reshape(2, 6))


def test_unflatten_in_sequential_after_linear():
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(50, 50), nn.Unflatten(1, (2, 5, 5)))
    assert model(fg.randn(2, 50)).shape == (2, 2, 5, 5)


def test_unflatten_repr_as_torch():
    assert repr(nn.Unflatten(1, (2, 3))) == "Unflatten(dim=1, unflattened_size=(2, 3))"
    assert repr(nn.Unflatten(-1, [2, -1])) == "Unflatten(dim=-1, unflattened_size=[2, -1])"
    assert nn.Unflatten(0, fg.zeros(2, 3).shape).unflattened_size == (2, 3)


@pytest.mark.parametrize(
    "sizes, message",
    [
        (
            (2.0, 3),
            "unflattened_size must be tuple of ints, but found element of type float at pos 0",
        ),
        (5, "unflattened_size must be a tuple of ints, but found type int"),
        ("ab", "unflattened_size must be a tuple of ints, but found type str"),
        (None, "unflattened_size must be a tuple of ints, but found type NoneType"),
        ((("a", 2),), "unflattened_size must be tuple of ints, but found element of type tuple"),
    ],
)
def test_unflatten_refuses_sizes_that_are_not_ints(sizes, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        nn.Unflatten(1, sizes)


@pytest.mark.parametrize(
    "shape, dim, sizes, error, message",
    [
        # torch: RuntimeError "unflatten: Provided sizes [2, 3] don't multiply up to the
        # size of dim 1 (5) in the input tensor"
        (
            (4, 5),
            1,
            (2, 3),
            RuntimeError,
            r"Provided sizes \[2, 3\] don't multiply up to the "
            r"size of dim 1 \(5\)",
        ),
        ((2, 6), 1, (4, -1), RuntimeError, r"Provided sizes \[4, -1\] don't multiply"),
        # torch: IndexError "Dimension out of range (expected to be in range of [-1, 0], but
        # got 1)"
        ((4,), 1, (2, 3), IndexError, "out of range"),
        ((), 0, (1,), IndexError, "no dimensions"),
        ((2, 4), 1, (2, -1, -1), RuntimeError, "only one dimension can be inferred"),
        ((2, 0), 1, (0, -1), RuntimeError, "ambiguous"),
        ((2, 1), 1, (), RuntimeError, "sizes must be non-empty"),
    ],
)
def test_unflatten_errors_as_torch_at_the_users_line(shape, dim, sizes, error, message):
    m = nn.Unflatten(dim, sizes)
    with pytest.raises(error, match=message) as info:
        m(fg.zeros(*shape))
    assert "test_unflatten.py" in str(info.value)
