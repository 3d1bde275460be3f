"""Fractional max pooling against a loop over torch's algorithm in numpy: its intervals
(each sum and product rounded to the input's dtype), first maximum on ties, last NaN, and
its gradient (each output's gradient added at its index)."""

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn


def _intervals(u, size, kernel, out, dtype):
    seq = [size - kernel] * out
    if out > 1:
        alpha = dtype(np.float32(size - kernel) / np.float32(out - 1))
        if dtype == np.float64:
            alpha = np.float64(size - kernel) / np.float64(out - 1)
        u = dtype(u)
        for i in range(out - 1):
            seq[i] = int(dtype(dtype(i + u) * alpha)) - int(dtype(u * alpha))
    return seq


def _reference(x, kernel, sizes, samples, grad_out):
    """(values, indices, input gradient) of a batched x (N, C, *spatial), by loops."""
    n = len(kernel)
    spatial = x.shape[2:]
    values = np.zeros(x.shape[:2] + tuple(sizes), x.dtype)
    indices = np.zeros(values.shape, np.int64)
    grad = np.zeros(x.shape, np.float64)
    for b in range(x.shape[0]):
        for c in range(x.shape[1]):
            columns = [1, 0] if n == 2 else [0, 1, 2]  # torch's 2-d kernel: W's sample first
            starts = [
                _intervals(samples[b, c, columns[a]], spatial[a], kernel[a], sizes[a], x.dtype.type)
                for a in range(n)
            ]
            plane = x[b, c].reshape(-1)
            for cell in np.ndindex(*sizes):
                best, pick = -np.inf, None
                for offset in np.ndindex(*kernel):
                    pos = tuple(starts[a][cell[a]] + offset[a] for a in range(n))
                    flat = int(np.ravel_multi_index(pos, spatial))
                    if pick is None:
                        pick = flat
                    if plane[flat] > best or np.isnan(plane[flat]):
                        best, pick = plane[flat], flat
                values[(b, c) + cell], indices[(b, c) + cell] = best, pick
                grad[b, c].reshape(-1)[pick] += grad_out[(b, c) + cell]
    return values, indices, grad


CASES = [
    # (input shape, kernel, output_size, dtype)
    ((2, 3, 7, 6), 2, (3, 4), np.float32),
    ((2, 2, 10, 9), (3, 2), (5, 6), np.float32),
    ((1, 2, 13, 7), 2, (6, 1), np.float64),
    ((2, 2, 6, 6), 2, 5, np.float32),  # windows overlap: gradients add
    ((1, 2, 31, 29), 2, (13, 17), np.float16),
    ((2, 2, 7, 6, 5), 2, (3, 4, 2), np.float32),
    ((1, 2, 9, 8, 7), (2, 3, 2), (4, 4, 3), np.float64),
]


@pytest.mark.parametrize("shape, kernel, output_size, dtype", CASES)
@pytest.mark.parametrize("ties", [False, True])
def test_values_indices_and_gradients_match_the_loop(shape, kernel, output_size, dtype, ties):
    rng = np.random.default_rng(len(shape) + ties)
    if ties:  # few values: ties everywhere, with NaN and -inf among them
        x = rng.integers(0, 3, size=shape).astype(dtype)
        x.flat[5], x.flat[7], x.flat[20] = np.nan, np.nan, -np.inf
    else:
        x = rng.standard_normal(shape).astype(dtype)
    n = len(shape) - 2
    samples = rng.random((shape[0] + 1, shape[1], n)).astype(dtype)  # a spare row is allowed
    pool = F.fractional_max_pool2d if n == 2 else F.fractional_max_pool3d
    xt = fg.tensor(x, requires_grad=True)
    values, indices = pool(
        xt, kernel, output_size, return_indices=True, _random_samples=fg.tensor(samples)
    )
    sizes = (output_size,) * n if isinstance(output_size, int) else output_size
    kernels = (kernel,) * n if isinstance(kernel, int) else kernel
    grad_out = rng.integers(1, 4, size=values.shape).astype(dtype)
    values.backward(fg.tensor(grad_out))
    want_v, want_i, want_g = _reference(x, kernels, sizes, samples, grad_out)
    np.testing.assert_array_equal(values.numpy(), want_v)
    np.testing.assert_array_equal(indices.numpy(), want_i)
    assert indices.dtype == fg.int64
    np.testing.assert_array_equal(xt.grad.numpy().astype(np.float64), want_g)


def test_unbatched_output_ratio_and_the_with_indices_forms():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 9, 11)).astype(np.float32)
    samples = rng.random((1, 3, 2)).astype(np.float32)
    got = F.fractional_max_pool2d_with_indices(
        fg.tensor(x), 2, output_ratio=(0.5, 0.7), _random_samples=fg.tensor(samples)
    )
    want_v, want_i, _ = _reference(x[None], (2, 2), (4, 7), samples, np.zeros((1, 3, 4, 7)))
    np.testing.assert_array_equal(got[0].numpy(), want_v[0])
    np.testing.assert_array_equal(got[1].numpy(), want_i[0])
    alone = F.fractional_max_pool2d(
        fg.tensor(x), 2, output_ratio=(0.5, 0.7), _random_samples=fg.tensor(samples)
    )
    np.testing.assert_array_equal(alone.numpy(), want_v[0])
    x3 = rng.standard_normal((2, 5, 6, 7)).astype(np.float64)
    s3 = rng.random((1, 2, 3))
    v3, i3 = F.fractional_max_pool3d_with_indices(
        fg.tensor(x3), 2, 3, _random_samples=fg.tensor(s3)
    )
    want_v, want_i, _ = _reference(x3[None], (2, 2, 2), (3, 3, 3), s3, np.zeros((1, 2, 3, 3, 3)))
    np.testing.assert_array_equal(v3.numpy(), want_v[0])
    np.testing.assert_array_equal(i3.numpy(), want_i[0])


def test_empty_batch_and_empty_output():
    x = fg.zeros(0, 3, 7, 6, requires_grad=True)
    values = F.fractional_max_pool2d(x, 2, (3, 3))
    assert values.shape == (0, 3, 3, 3)
    values.sum().backward()
    assert x.grad.shape == (0, 3, 7, 6)
    assert F.fractional_max_pool2d(fg.ones(2, 3, 7, 6), 2, (0, 3)).shape == (2, 3, 0, 3)
    assert F.fractional_max_pool3d(fg.ones(0, 2, 6, 6, 6), 2, 3).shape == (0, 2, 3, 3, 3)


def test_samples_are_drawn_from_the_generator():
    x = fg.randn(2, 3, 9, 9)
    fg.manual_seed(7)
    drawn = F.fractional_max_pool2d(x, 2, 4)
    fg.manual_seed(7)
    samples = fg.rand(2, 3, 2)
    np.testing.assert_array_equal(
        drawn.numpy(), F.fractional_max_pool2d(x, 2, 4, _random_samples=samples).numpy()
    )


def test_modules():
    samples = fg.rand(1, 2, 2)
    pool = nn.FractionalMaxPool2d(3, output_ratio=0.5, return_indices=True, _random_samples=samples)
    assert list(pool.state_dict()) == ["_random_samples"] and repr(pool) == "FractionalMaxPool2d()"
    x = fg.randn(1, 2, 10, 8)
    values, indices = pool(x)
    want = F.fractional_max_pool2d(x, 3, (5, 4), return_indices=True, _random_samples=samples)
    np.testing.assert_array_equal(values.numpy(), want[0].numpy())
    np.testing.assert_array_equal(indices.numpy(), want[1].numpy())
    assert nn.FractionalMaxPool3d(2, output_size=2)(fg.randn(2, 4, 4, 4)).shape == (2, 2, 2, 2)
    assert not nn.FractionalMaxPool2d(2, output_size=2).state_dict()


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda x: F.fractional_max_pool2d(x, 2), ValueError),
        (lambda x: F.fractional_max_pool2d(x, 2, output_ratio=0.5), TypeError),  # torch's len()
        (lambda x: F.fractional_max_pool2d(x, 2, 7), RuntimeError),
        (lambda x: F.fractional_max_pool2d(x, 2, (3, 6)), RuntimeError),
        (lambda x: F.fractional_max_pool2d(x, 0, 3), RuntimeError),
        (lambda x: F.fractional_max_pool2d(x, (2, 2, 2), 3), RuntimeError),
        (lambda x: F.fractional_max_pool2d(x, 2, (-1, 3)), RuntimeError),
        (lambda x: F.fractional_max_pool2d(x[0, 0], 2, 3), IndexError),
        (lambda x: F.fractional_max_pool2d(x[None], 2, 3), RuntimeError),
        (lambda x: F.fractional_max_pool2d(x[:, :0], 2, 3), RuntimeError),
        (lambda x: F.fractional_max_pool2d(x.long(), 2, 3), NotImplementedError),
        (
            lambda x: F.fractional_max_pool2d(x, 2, 3, _random_samples=fg.rand(2, 3, 3)),
            RuntimeError,
        ),
        (
            lambda x: F.fractional_max_pool2d(x, 2, 3, _random_samples=fg.rand(1, 3, 2)),
            RuntimeError,
        ),
        (
            lambda x: F.fractional_max_pool2d(x, 2, 3, _random_samples=fg.rand(2, 1, 2)),
            RuntimeError,
        ),
        (lambda x: F.fractional_max_pool2d(x, 2, 3, _random_samples=fg.rand(6, 2)), RuntimeError),
        (
            lambda x: F.fractional_max_pool2d(
                x, 2, 3, _random_samples=fg.rand(2, 3, 2, dtype=fg.float64)
            ),
            RuntimeError,
        ),
        (lambda x: F.fractional_max_pool3d(x[None], 2, 6), RuntimeError),
        # the 3-d form refuses a last window ending at the input's end (torch's check); the
        # 2-d form takes it
        (lambda x: F.fractional_max_pool3d(fg.randn(1, 3, 3, 3), 2, 2), RuntimeError),
        (lambda x: F.fractional_max_pool3d(fg.randn(1, 4, 3, 4), 2, 2), RuntimeError),
        (lambda x: F.fractional_max_pool3d(fg.randn(1, 4, 4, 3), 2, 2), RuntimeError),
        (lambda x: nn.FractionalMaxPool2d(2, output_ratio=1.5), ValueError),
        (lambda x: nn.FractionalMaxPool2d(2, output_size=2, output_ratio=0.5), ValueError),
        (lambda x: nn.FractionalMaxPool2d(2), ValueError),
        (lambda x: nn.FractionalMaxPool3d(0, output_size=2), ValueError),
    ],
)
def test_errors_as_torch(call, error):
    with pytest.raises(error):
        call(fg.randn(2, 3, 7, 6))


def test_a_last_window_at_the_inputs_end_is_taken_in_2d_and_refused_in_3d():
    assert F.fractional_max_pool2d(fg.randn(1, 1, 3, 3), 2, 2).shape == (1, 1, 2, 2)
    assert F.fractional_max_pool3d(fg.randn(1, 1, 4, 4, 4), 2, 2).shape == (1, 1, 2, 2, 2)
    for shape, axis in [((3, 4, 4), "time"), ((4, 3, 4), "height"), ((4, 4, 3), "width")]:
        with pytest.raises(
            RuntimeError, match=f"pool {axis} 2 too large relative to input {axis} 3"
        ):
            F.fractional_max_pool3d(fg.randn(1, 1, *shape), 2, 2)
