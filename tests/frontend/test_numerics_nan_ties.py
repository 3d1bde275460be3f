"""NaN propagation and gradients at ties and kinks, as PyTorch defines them.

Oracles are exact values: PyTorch's documented conventions (torch.max(dim) and
max_pool route the gradient to the first maximum, amax / max() / maximum split
it evenly, abs'(0) = 0, clamp's gradient is 1 on the closed interval, relu(nan)
is nan with gradient 1) written out by hand, and numpy for values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F

NAN = float("nan")


def grad_of(fn, values, dtype="float32"):
    x = fg.tensor(values, dtype=dtype, requires_grad=True)
    out = fn(x)
    out.sum().backward()
    return out.numpy(), x.grad.numpy()


# ---------------------------------------------------------------- NaN in values


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_argmax_argmin_return_the_nan_index(dtype):
    x = fg.tensor([1.0, 5.0, NAN, 2.0], dtype=dtype)
    assert x.argmax().item() == 2
    assert x.argmin().item() == 2
    assert x.max(0).indices.item() == 2
    assert x.min(0).indices.item() == 2
    assert math.isnan(x.max(0).values.item()) and math.isnan(x.max().item())
    assert math.isnan(x.min().item())


def test_argmax_rows_with_and_without_nan():
    a = np.array([[1.0, NAN, 3.0, NAN], [4.0, 9.0, 9.0, 0.0], [NAN, 0.0, 0.0, 0.0]], np.float32)
    x = fg.tensor(a)
    assert x.argmax(1).tolist() == [1, 1, 0]
    assert x.argmin(1).tolist() == [1, 3, 0]
    assert x.argmax(0).tolist() == [2, 0, 1, 0]
    values, index = x.max(1)
    np.testing.assert_array_equal(values.numpy(), [NAN, 9.0, NAN])
    assert index.tolist() == [1, 1, 0]


def test_relu_of_nan_is_nan_with_gradient_one():
    value, grad = grad_of(lambda x: x.relu(), [NAN, 0.0, -1.0, 2.0])
    np.testing.assert_array_equal(value, [NAN, 0.0, 0.0, 2.0])
    np.testing.assert_array_equal(grad, [1.0, 0.0, 0.0, 1.0])


def test_comparisons_with_nan_are_false():
    x = fg.tensor([NAN, 1.0])
    assert (x <= 0).tolist() == [False, False]
    assert (x >= 0).tolist() == [False, True]
    assert (x != x).tolist() == [True, False]
    assert (0 <= x).tolist() == [False, True]


def test_maximum_minimum_clamp_propagate_nan():
    a = fg.tensor([NAN, 1.0, 2.0])
    b = fg.tensor([0.0, NAN, 1.0])
    np.testing.assert_array_equal(a.maximum(b).numpy(), [NAN, NAN, 2.0])
    np.testing.assert_array_equal(a.minimum(b).numpy(), [NAN, NAN, 1.0])
    np.testing.assert_array_equal(a.clamp(0.5, 1.5).numpy(), [NAN, 1.0, 1.5])
    np.testing.assert_array_equal(a.abs().numpy(), [NAN, 1.0, 2.0])


def test_max_pool_propagates_nan():
    x = fg.tensor([[[[1.0, NAN], [3.0, 2.0]]]])
    assert math.isnan(F.max_pool2d(x, 2).item())


# ---------------------------------------------------------------- gradients at kinks


def test_abs_gradient_is_zero_at_zero():
    value, grad = grad_of(lambda x: x.abs(), [0.0, -0.0, -3.0, 2.0])
    np.testing.assert_array_equal(value, [0.0, 0.0, 3.0, 2.0])
    assert not np.signbit(value[1])  # |-0| is +0
    np.testing.assert_array_equal(grad, [0.0, 0.0, -1.0, 1.0])


def test_clamp_gradient_is_one_at_the_bounds():
    _, grad = grad_of(lambda x: x.clamp(min=1.0), [1.0, 0.5, 2.0])
    np.testing.assert_array_equal(grad, [1.0, 0.0, 1.0])
    _, grad = grad_of(lambda x: x.clamp(-1.0, 1.0), [-1.0, 1.0, 3.0, -3.0, 0.0])
    np.testing.assert_array_equal(grad, [1.0, 1.0, 0.0, 0.0, 1.0])
    value, grad = grad_of(lambda x: x.clamp(max=0.0), [NAN, 0.0])
    np.testing.assert_array_equal(value, [NAN, 0.0])
    np.testing.assert_array_equal(grad, [0.0, 1.0])  # torch: NaN is outside [min, max]


def test_clamp_min_above_max_gives_max():
    np.testing.assert_array_equal(fg.tensor([0.0, 5.0]).clamp(3.0, 1.0).numpy(), [1.0, 1.0])


def test_relu_gradient_is_zero_at_zero():
    _, grad = grad_of(F.relu, [0.0, 1e-30, -1e-30])
    np.testing.assert_array_equal(grad, [0.0, 1.0, 0.0])


# ---------------------------------------------------------------- gradients at ties


def test_max_dim_gives_the_gradient_to_the_first_maximum():
    _, grad = grad_of(lambda x: x.max(1).values, [[3.0, 1.0, 3.0], [2.0, 2.0, 2.0]])
    np.testing.assert_array_equal(grad, [[1, 0, 0], [1, 0, 0]])
    _, grad = grad_of(lambda x: x.max(1, keepdim=True)[0], [[3.0, 1.0, 3.0]])
    np.testing.assert_array_equal(grad, [[1, 0, 0]])
    _, grad = grad_of(lambda x: x.min(0).values, [[1.0, 5.0], [1.0, 4.0]])
    np.testing.assert_array_equal(grad, [[1, 0], [0, 1]])


def test_max_dim_all_minus_inf_and_nan_rows():
    _, grad = grad_of(lambda x: x.max(1).values, [[-math.inf, -math.inf], [1.0, NAN]])
    np.testing.assert_array_equal(grad, [[1, 0], [0, 1]])


def test_amax_and_full_max_split_ties_evenly():
    _, grad = grad_of(lambda x: x.amax(1), [[3.0, 1.0, 3.0, 3.0]])
    np.testing.assert_allclose(grad, [[1 / 3, 0, 1 / 3, 1 / 3]], rtol=1e-7)
    _, grad = grad_of(lambda x: x.max(), [2.0, 2.0, 1.0])
    np.testing.assert_array_equal(grad, [0.5, 0.5, 0.0])
    _, grad = grad_of(lambda x: x.max(), [NAN, 2.0, NAN])  # torch: shared among the NaNs
    np.testing.assert_array_equal(grad, [0.5, 0.0, 0.5])


def test_maximum_splits_ties_and_passes_nan_both_ways():
    a = fg.tensor([1.0, 2.0, NAN, 3.0], requires_grad=True)
    b = fg.tensor([1.0, 1.0, 0.0, 4.0], requires_grad=True)
    a.maximum(b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 0.0, 1.0, 1.0])


def test_minimum_splits_ties():
    a = fg.tensor([1.0, 2.0, 5.0], requires_grad=True)
    b = fg.tensor([1.0, 3.0, 4.0], requires_grad=True)
    a.minimum(b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 1.0, 0.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 0.0, 1.0])


def test_max_pool_gives_the_gradient_to_the_first_maximum():
    x = np.array([[[[1.0, 1.0, 0.0, 2.0], [1.0, 0.0, 2.0, 2.0]]]], np.float32)
    _, grad = grad_of(lambda t: F.max_pool2d(t, 2), x)
    np.testing.assert_array_equal(grad, [[[[1, 0, 0, 1], [0, 0, 0, 0]]]])
    # overlapping windows: each window's first maximum gets that window's gradient
    _, grad = grad_of(lambda t: F.max_pool1d(t, 2, 1), [[[3.0, 3.0, 3.0]]])
    np.testing.assert_array_equal(grad, [[[1, 1, 0]]])


def test_max_pool_with_padding_and_nan_gradient():
    _, grad = grad_of(lambda t: F.max_pool1d(t, 3, 1, padding=1), [[[NAN, 1.0, 1.0]]])
    # windows: (pad, nan, 1), (nan, 1, 1), (1, 1, pad)
    np.testing.assert_array_equal(grad, [[[2, 1, 0]]])


def test_max_pool_gradient_matches_a_loop_on_random_ties():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, size=(2, 3, 6, 6)).astype(np.float64)
    _, grad = grad_of(lambda t: F.max_pool2d(t, 3, 2, padding=1), a, dtype="float64")
    want = np.zeros_like(a)
    p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    for n in range(2):
        for c in range(3):
            for i in range(3):
                for j in range(3):
                    win = p[n, c, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3]
                    r, s = np.unravel_index(np.argmax(win), win.shape)
                    want[n, c, 2 * i + r - 1, 2 * j + s - 1] += 1
    np.testing.assert_array_equal(grad, want)


def test_int_max_pool_with_padding_stays_int():
    x = fg.tensor(np.arange(16, dtype=np.int32).reshape(1, 1, 4, 4) - 20)
    out = F.max_pool2d(x, 3, 1, padding=1)
    assert out.dtype == fg.int32
    a = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-(2**31))
    want = np.lib.stride_tricks.sliding_window_view(a, (3, 3), axis=(2, 3)).max(axis=(-2, -1))
    np.testing.assert_array_equal(out.numpy(), want)
