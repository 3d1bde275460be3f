"""logit, sinc, diff, rot90 and dist beyond their special-point sweep
(test_special_points.py): the dtypes they return, their bounds in the input's dtype, their
in-place forms, layouts, and PyTorch's refusals. The values are torch 2.13's, written in."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg

INF, NAN = math.inf, math.nan


def _value_and_grad(f, values, dtype=fg.float64):
    x = fg.tensor(values, dtype=dtype, requires_grad=True)
    y = f(x)
    y.sum().backward()
    return y.tolist(), x.grad.tolist()


def test_logit_clamps_to_eps_in_the_inputs_dtype():
    # torch: lo = eps and hi = 1 - eps rounded to float32 first; the gradient is 0 outside
    # [lo, hi] and 1 / (x (1 - x)) at the bounds themselves
    x = [0.25, 0.5, 0.75, 0.1, 0.9, 1e-7, 2e-7]
    y, g = _value_and_grad(lambda t: fg.logit(t, 1e-7), x, fg.float32)
    want = [-1.0986123085021973, 0.0, 1.0986123085021973, -2.1972246170043945]
    want += [2.1972243785858154, -16.11809539794922, -15.424948692321777]
    assert y == want
    assert g[:4] == [5.333333492279053, 4.0, 5.333333492279053, 11.111111640930176]
    assert g[4:] == [11.111108779907227, 10000001.0, 5000001.0]
    y, g = _value_and_grad(lambda t: t.logit(0.25), [0.0, 0.1, 0.25, 0.5, 0.8, 1.0, 2.0, NAN])
    l3 = math.log(3.0)  # log(0.75 / 0.25)
    assert y[:7] == pytest.approx([-l3, -l3, -l3, 0.0, l3, l3, l3], rel=1e-15)
    assert math.isnan(y[7])
    assert g[:7] == [0.0, 0.0, 5.333333333333333, 4.0, 0.0, 0.0, 0.0] and math.isnan(g[7])


def test_logit_without_eps_at_its_ends():
    # the scalar loop of torch's backward: inf at 0 (and -0.0) and 1, NaN outside [0, 1]
    y, g = _value_and_grad(fg.logit, [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, NAN])
    assert y[:3] == [-INF, -INF, INF] and y[5] == 0.0
    assert all(math.isnan(v) for v in y[3:5] + y[6:])
    assert g[:3] == [INF, INF, INF] and g[5] == 4.0
    assert all(math.isnan(v) for v in g[3:5] + g[6:])
    # a negative eps clamps nothing; eps = 0 clamps to [0, 1]
    assert math.isnan(fg.tensor([2.0]).logit(-1.0).item())
    assert fg.tensor([2.0, -1.0]).logit(0.0).tolist() == [INF, -INF]


def test_logit_and_sinc_dtypes_and_in_place_forms():
    assert fg.logit(fg.tensor([0, 1])).tolist() == [-INF, INF]  # integers: the default float
    assert fg.logit(fg.tensor([0, 1])).dtype is fg.float32
    assert fg.sinc(fg.tensor([True, False])).tolist()[1] == 1.0
    half = fg.tensor([0.3, 0.5], dtype=fg.float16, requires_grad=True)
    y = half.logit()
    y.sum().backward()
    assert y.dtype is fg.float16 and half.grad.tolist() == [4.76171875, 4.0]
    x = fg.tensor([0.2, 0.5], requires_grad=True)
    y = x.clone()
    assert y.logit_(0.3) is y
    y.sum().backward()
    assert y.tolist() == [-0.8472977876663208, 0.0] and x.grad.tolist() == [0.0, 4.0]
    z = fg.tensor([0.0, 0.5], dtype=fg.float64)
    z.sinc_()
    assert z.tolist() == [1.0, 0.6366197723675814]


def test_sinc_is_one_at_zero_with_zero_gradient():
    y, g = _value_and_grad(fg.sinc, [0.0, -0.0, 0.5, 1.0, INF, NAN])
    assert y[:4] == [1.0, 1.0, 0.6366197723675814, 3.8981718325193755e-17]
    assert g[:4] == [0.0, 0.0, -1.2732395447351625, -1.0]
    assert all(math.isnan(v) for v in y[4:] + g[4:])
    y, g = _value_and_grad(fg.sinc, [0.0, 0.5, 1.0], fg.float32)
    assert y == [1.0, 0.6366197466850281, pytest.approx(0.0, abs=1e-7)]
    assert g == [0.0, pytest.approx(-1.2732396125793457), pytest.approx(-1.0)]


@pytest.mark.parametrize("dtype", [fg.float32, fg.float64])
def test_sinc_gradient_near_zero_is_its_slope(dtype):
    # -pi^2 x / 3 (1 - pi^2 x^2 / 10): torch's formula cancels to noise here (-2.1e-8 at 1e-8)
    x = np.array([1e-8, -1e-8, 1e-4, 0.1, 0.15, 0.16, 0.2, 1e-30])
    _, g = _value_and_grad(fg.sinc, x.tolist(), dtype)
    u = np.pi * x
    want = np.pi * (u * np.cos(u) - np.sin(u)) / (u * u)
    small = np.abs(u) < 1e-3
    want[small] = (-np.pi * u / 3 * (1 - u * u / 10))[small]
    np.testing.assert_allclose(g, want, rtol=1e-6 if dtype is fg.float32 else 1e-13, atol=0)


def test_diff_as_torchs():
    x = fg.tensor([[1.0, 3.0, 6.0], [2.0, 0.0, -1.0]])
    assert x.diff().tolist() == [[2.0, 3.0], [-2.0, -1.0]]
    assert fg.diff(x, n=2).tolist() == [[1.0], [1.0]]
    assert fg.diff(x, n=5).shape == (2, 0) and x.diff(dim=0).tolist() == [[1.0, -3.0, -7.0]]
    assert x.diff(n=0).tolist() == x.tolist()
    both = x.diff(append=fg.tensor([[0.0], [1.0]]), prepend=fg.tensor([[5.0], [5.0]]))
    assert both.tolist() == [[-4.0, 2.0, 3.0, -6.0], [-3.0, -2.0, -1.0, 2.0]]
    assert fg.diff(fg.tensor([1, 5, 2], dtype=fg.uint8)).tolist() == [4, 253]  # wraps
    assert fg.diff(fg.tensor([True, False, False, True])).tolist() == [True, False, True]
    assert fg.diff(fg.tensor([True, False, False, True]), n=2).tolist() == [True, True]
    promoted = fg.diff(fg.tensor([1, 2]), prepend=fg.tensor([1.5]))
    assert promoted.dtype is fg.float32 and promoted.tolist() == [-0.5, 1.0]
    assert fg.diff(fg.tensor([True, False]), prepend=fg.tensor([1])).dtype is fg.int64
    assert fg.diff(fg.zeros(0, 3), dim=0).shape == (0, 3)


def test_diff_gradient_and_refusals():
    x = fg.tensor([1.0, 4.0, 9.0, 16.0], dtype=fg.float64, requires_grad=True)
    p = fg.tensor([0.0], dtype=fg.float64, requires_grad=True)
    (x.diff(n=2, prepend=p) * fg.tensor([1.0, 2.0, 3.0], dtype=fg.float64)).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, -4.0, 3.0] and p.grad.tolist() == [1.0]
    x = fg.ones(2, 3)
    with pytest.raises(RuntimeError, match="order must be non-negative but got -1"):
        x.diff(n=-1)
    with pytest.raises(RuntimeError, match="at least one-dimensional"):
        fg.tensor(1.0).diff()
    with pytest.raises(IndexError):
        x.diff(dim=2)
    with pytest.raises(RuntimeError, match="same dimension as input"):
        x.diff(prepend=fg.ones(2))
    with pytest.raises(RuntimeError, match=r"input.size\(0\) = 2, but got tensor.size\(0\) = 3"):
        x.diff(prepend=fg.zeros(3, 1))
    with pytest.raises(TypeError, match="'prepend' must be Tensor, not float"):
        x.diff(prepend=1.0)
    with pytest.raises(TypeError, match="'n' must be int, not float"):
        x.diff(n=1.5)


@pytest.mark.parametrize(
    ("k", "want"),
    [
        (1, [[2, 5], [1, 4], [0, 3]]),
        (2, [[5, 4, 3], [2, 1, 0]]),
        (3, [[3, 0], [4, 1], [5, 2]]),
        (-1, [[3, 0], [4, 1], [5, 2]]),
        (4, [[0, 1, 2], [3, 4, 5]]),
        (5, [[2, 5], [1, 4], [0, 3]]),
    ],
)
def test_rot90_turns_as_torchs(k, want):
    x = fg.arange(6).reshape(2, 3)
    assert fg.rot90(x, k).tolist() == want
    assert x.rot90(-k, [1, 0]).tolist() == want  # the other way round, backwards


def test_rot90_of_other_planes_gradient_and_refusals():
    x = fg.arange(24.0).reshape(2, 3, 4)
    assert x.rot90(1, (2, 0)).shape == (4, 3, 2)
    assert x.rot90(1, (2, 0))[:, 0, :].tolist() == [
        [12.0, 0.0],
        [13.0, 1.0],
        [14.0, 2.0],
        [15.0, 3.0],
    ]
    w = fg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    x = fg.zeros(2, 3, requires_grad=True)
    (x.rot90() * w).sum().backward()
    assert x.grad.tolist() == [[5.0, 3.0, 1.0], [6.0, 4.0, 2.0]]
    x = fg.zeros(2, 3)
    with pytest.raises(RuntimeError, match="expected total rotation dims == 2, but got dims = 1"):
        x.rot90(1, (0,))
    with pytest.raises(RuntimeError, match="expected total dims >= 2, but got total dims = 1"):
        fg.zeros(3).rot90()
    with pytest.raises(RuntimeError, match="dim0 = 0 and dim1 = -2"):
        x.rot90(1, (0, -2))
    with pytest.raises(IndexError):
        x.rot90(1, (0, 2))
    with pytest.raises(TypeError, match="'k' .* must be int, not float"):
        x.rot90(1.0)


def test_dist_as_torchs():
    a, b = fg.tensor([1.0, 2.0]), fg.tensor([2.0, 4.0])
    assert fg.dist(a, b).item() == pytest.approx(2.2360680103302)
    assert a.dist(b, p=-1).item() == pytest.approx(0.6666666865348816)
    assert a.dist(b, 0.5).item() == pytest.approx(5.828427314758301)
    assert a.dist(b, 0).item() == 2.0 and a.dist(b, math.inf).item() == 2.0
    assert a.dist(fg.tensor([[2.0], [4.0]])).item() == pytest.approx(3.7416574954986572)
    assert a.dist(b.double()).dtype is fg.float64
    assert fg.tensor([1.0], dtype=fg.float16).dist(fg.tensor([2.0])).dtype is fg.float32
    x = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.dist(x.detach()).backward()  # 0 at x == other, as torch's norm
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(RuntimeError):  # torch: norm() of Long
        fg.tensor([1, 2]).dist(fg.tensor([2, 4]))
    with pytest.raises(RuntimeError, match="broadcast"):
        a.dist(fg.ones(3))
    with pytest.raises(TypeError, match="'other' .* must be Tensor, not float"):
        a.dist(3.0)
    with pytest.raises(TypeError, match="'p' must be Number, not str"):
        a.dist(b, p="fro")
