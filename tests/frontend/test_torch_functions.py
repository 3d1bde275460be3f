"""torch's smaller top-level functions (frontend/torch_functions.py): values, dtypes and
errors against torch 2.14.1's answers (written here as literals), gradients against
float64 central differences or torch's literals."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusegrad as fg

nan, inf = float("nan"), float("inf")


def _numeric_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        g[i] = (f(up) - f(down)) / (2 * eps)
    return g


def test_unravel_index():
    r = fg.unravel_index(fg.tensor([4, 1]), (2, 3))
    assert [t.tolist() for t in r] == [[1, 0], [1, 1]] and r[0].dtype is fg.int64
    r = fg.unravel_index(fg.tensor(4), (2, 3))
    assert [t.tolist() for t in r] == [1, 1] and r[0].shape == ()
    # past the end and negative wrap as torch's floor division and remainder
    assert [t.tolist() for t in fg.unravel_index(fg.tensor([6, -1, -7]), (2, 3))] == [
        [0, 1, 1],
        [0, 2, 2],
    ]
    assert [t.tolist() for t in fg.unravel_index(fg.tensor([1]), 6)] == [[1]]
    assert fg.unravel_index(fg.tensor([1]), ()) == ()
    assert fg.unravel_index(fg.tensor([1], dtype=fg.int32), (2, 3))[1].dtype is fg.int64
    got = fg.unravel_index(fg.tensor([1234, 5678]), (10, 10, 10, 10))
    assert [t.tolist() for t in got] == [[1, 5], [2, 6], [3, 7], [4, 8]]
    empty = fg.unravel_index(fg.tensor([], dtype=fg.int64), (2, 0))
    assert [t.shape for t in empty] == [(0,), (0,)]
    with pytest.raises(TypeError, match="expected 'indices' to be integer dtype"):
        fg.unravel_index(fg.tensor([1.0]), (2, 3))
    with pytest.raises(TypeError, match="expected 'indices' to be integer dtype"):
        fg.unravel_index(fg.tensor([True]), (2,))
    with pytest.raises(ValueError, match="'shape' cannot have negative values"):
        fg.unravel_index(fg.tensor([1]), (2, -3))
    with pytest.raises(ValueError, match="'shape' cannot have zero dimensions"):
        fg.unravel_index(fg.tensor([1]), (2, 0))


def test_unique_consecutive():
    x = fg.tensor([1, 1, 2, 2, 3, 1, 1, 2])
    v, inv, c = fg.unique_consecutive(x, return_inverse=True, return_counts=True)
    assert v.tolist() == [1, 2, 3, 1, 2] and v.dtype is fg.int64
    assert inv.tolist() == [0, 0, 1, 1, 2, 3, 3, 4] and c.tolist() == [2, 2, 1, 2, 1]
    m = fg.tensor([[1, 1], [1, 1], [2, 3]])
    v, inv, c = m.unique_consecutive(return_inverse=True, return_counts=True, dim=0)
    assert (v.tolist(), inv.tolist(), c.tolist()) == ([[1, 1], [2, 3]], [0, 0, 1], [2, 1])
    v, inv = m.unique_consecutive(return_inverse=True, dim=1)
    assert v.tolist() == m.tolist() and inv.tolist() == [0, 1]
    v, inv = fg.tensor([[1, 1], [1, 1]]).unique_consecutive(return_inverse=True)
    assert v.tolist() == [1] and inv.tolist() == [[0, 0], [0, 0]]
    assert np.isnan(fg.tensor([nan, nan, 1.0]).unique_consecutive().numpy()[:2]).all()
    assert fg.tensor([nan, nan, 1.0]).unique_consecutive().shape == (3,)  # NaNs: runs of one
    v, inv, c = fg.tensor(3.0).unique_consecutive(return_inverse=True, return_counts=True)
    assert (v.tolist(), inv.shape, inv.item(), c.tolist()) == ([3.0], (), 0, [1])
    v, inv, c = fg.zeros(0, 3).unique_consecutive(return_inverse=True, return_counts=True, dim=0)
    assert (v.shape, inv.shape, c.shape) == ((0, 3), (0,), (0,))
    with pytest.raises(RuntimeError, match="There are 0 sized dimensions"):
        fg.zeros(0, 3).unique_consecutive(dim=1)


def test_diagflat_vdot_ger():
    assert fg.diagflat(fg.tensor([[1, 2], [3, 4]]), 1).tolist() == [
        [0, 1, 0, 0, 0],
        [0, 0, 2, 0, 0],
        [0, 0, 0, 3, 0],
        [0, 0, 0, 0, 4],
        [0, 0, 0, 0, 0],
    ]
    assert fg.diagflat(fg.tensor(5.0), -1).tolist() == [[0.0, 0.0], [5.0, 0.0]]
    assert fg.tensor([]).diagflat(2).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert fg.vdot(fg.tensor([1.0, 2.0]), fg.tensor([3.0, 4.0])).item() == 11.0
    r = fg.tensor([1, 2], dtype=fg.int32).vdot(fg.tensor([3, 4], dtype=fg.int32))
    assert (r.item(), r.dtype) == (11, fg.int32)
    with pytest.raises(
        RuntimeError, match="expected both vectors to have same dtype, but found Long and Float"
    ):
        fg.vdot(fg.tensor([1, 2]), fg.tensor([3.0, 4.0]))
    with pytest.raises(RuntimeError, match="1D tensors expected, but got 2D and 2D tensors"):
        fg.vdot(fg.ones(2, 2), fg.ones(2, 2))
    with pytest.raises(RuntimeError, match="inconsistent tensor size"):
        fg.vdot(fg.ones(2), fg.ones(3))
    assert fg.tensor([1, 2]).ger(fg.tensor([3, 4])).tolist() == [[3, 4], [6, 8]]


def test_addr_values_and_gradients():
    got = fg.addr(fg.ones(2, 3), fg.tensor([1.0, 2]), fg.tensor([1.0, 2, 3]), beta=0.5, alpha=2)
    assert got.tolist() == [[2.5, 4.5, 6.5], [4.5, 8.5, 12.5]]
    assert fg.addr(fg.ones(3), fg.tensor([1.0, 2]), fg.tensor([1.0, 2, 3])).tolist() == [
        [2.0, 3.0, 4.0],
        [3.0, 5.0, 7.0],
    ]
    ints = fg.addr(
        fg.ones(2, 3, dtype=fg.int64), fg.tensor([1, 2]), fg.tensor([1, 2, 3]), alpha=2, beta=3
    )
    assert ints.tolist() == [[5, 7, 9], [7, 11, 15]]
    nans = fg.addr(fg.full((2, 3), nan), fg.tensor([1.0, 2]), fg.tensor([1.0, 2, 3]), beta=0)
    assert nans.tolist() == [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]
    zero_alpha = fg.addr(fg.ones(2, 3), fg.tensor([1.0, 2]), fg.tensor([1.0, inf, 3]), alpha=0)
    assert np.isnan(zero_alpha.numpy()[:, 1]).all() and zero_alpha[:, 0].tolist() == [1.0, 1.0]
    b = fg.addr(
        fg.ones(2, 3, dtype=fg.bool),
        fg.tensor([True, False]),
        fg.tensor([True, False, True]),
        beta=False,
    )
    assert b.tolist() == [[True, False, True], [False, False, False]]
    promoted = fg.addr(fg.ones(2, 3), fg.ones(2), fg.ones(3, dtype=fg.float64))
    assert promoted.dtype is fg.float64
    t = fg.ones(2, 3)
    assert t.addr_(fg.ones(2), fg.ones(3, dtype=fg.float64)) is t and t.dtype is fg.float32
    assert t.tolist() == [[2.0] * 3] * 2
    with pytest.raises(RuntimeError, match=r"size mismatch, input: \[1, 3\], v1: \[2\], v2: \[3\]"):
        fg.ones(1, 3).addr_(fg.ones(2), fg.ones(3))
    with pytest.raises(RuntimeError, match="argument beta must not be a floating point"):
        fg.addr(fg.ones(2, 3, dtype=fg.int64), fg.tensor([1, 2]), fg.tensor([1, 2, 3]), beta=0.5)
    with pytest.raises(RuntimeError, match="Expected 1-D argument vec1, but got 2-D"):
        fg.addr(fg.ones(2, 3), fg.ones(2, 1), fg.ones(3))
    rng = np.random.default_rng(0)
    i0, a0, b0 = rng.normal(size=(2, 3)), rng.normal(size=2), rng.normal(size=3)
    i, a, b = (fg.tensor(v, dtype=fg.float64, requires_grad=True) for v in (i0, a0, b0))
    w = rng.normal(size=(2, 3))
    (fg.addr(i, a, b, beta=0.7, alpha=-1.5) * fg.tensor(w)).sum().backward()

    def f(ii, aa, bb):
        return float((w * (0.7 * ii - 1.5 * np.outer(aa, bb))).sum())

    assert np.allclose(i.grad.numpy(), _numeric_grad(lambda v: f(v, a0, b0), i0), atol=1e-7)
    assert np.allclose(a.grad.numpy(), _numeric_grad(lambda v: f(i0, v, b0), a0), atol=1e-7)
    assert np.allclose(b.grad.numpy(), _numeric_grad(lambda v: f(i0, a0, v), b0), atol=1e-7)


def test_chain_matmul_warns_and_multiplies():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = fg.chain_matmul(fg.ones(2, 3), fg.ones(3, 4), fg.ones(4, 1))
        assert r.tolist() == [[12.0], [12.0]]
        m = fg.ones(2, 3)
        assert fg.chain_matmul(m) is m
    assert "torch.chain_matmul is deprecated" in str(w[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="Expected one or more matrices"):
            fg.chain_matmul()
        with pytest.raises(RuntimeError, match="Tensor dimension is 1, expected 2 instead."):
            fg.chain_matmul(fg.ones(3))


def test_cumulative_trapezoid():
    y = fg.tensor([1.0, 2, 4, 7])
    assert fg.cumulative_trapezoid(y).tolist() == [1.5, 4.5, 10.0]
    assert fg.cumulative_trapezoid(fg.tensor([1, 2, 4, 7])).tolist() == [1.5, 4.5, 10.0]
    assert fg.cumulative_trapezoid(y, dx=2).tolist() == [3.0, 9.0, 20.0]
    assert fg.cumulative_trapezoid(y, fg.tensor([0.0, 1, 3, 6])).tolist() == [1.5, 7.5, 24.0]
    assert fg.cumulative_trapezoid(y, fg.tensor([0, 1, 3, 5])).tolist() == [1.5, 7.5, 18.5]
    m = fg.tensor([[1.0, 2, 4], [3, 4, 5]])
    assert fg.cumulative_trapezoid(m, fg.tensor([0.0, 1, 3]), dim=1).tolist() == [
        [1.5, 7.5],
        [3.5, 12.5],
    ]
    assert fg.cumulative_trapezoid(m, dim=0).tolist() == [[2.0, 3.0, 4.5]]
    assert fg.cumulative_trapezoid(fg.tensor([1.0])).shape == (0,)
    assert fg.cumulative_trapezoid(fg.tensor([])).shape == (0,)
    with pytest.raises(IndexError, match="slice\\(\\) cannot be applied to a 0-dim tensor"):
        fg.cumulative_trapezoid(fg.tensor(1.0))
    with pytest.raises(RuntimeError, match="There must be one `x` value for each sample point"):
        fg.cumulative_trapezoid(y, fg.tensor([0.0, 1, 3]))
    y0, x0 = np.array([1.0, -2.0, 0.5, 3.0]), np.array([0.0, 0.5, 2.0, 2.5])
    yt = fg.tensor(y0, requires_grad=True)
    xt = fg.tensor(x0, requires_grad=True)
    w = np.array([1.0, -0.5, 2.0])
    (fg.cumulative_trapezoid(yt, xt) * fg.tensor(w)).sum().backward()

    def f(yy, xx):
        mids = (yy[1:] + yy[:-1]) * np.diff(xx) / 2
        return float((np.cumsum(mids) * w).sum())

    assert np.allclose(yt.grad.numpy(), _numeric_grad(lambda v: f(v, x0), y0), atol=1e-7)
    assert np.allclose(xt.grad.numpy(), _numeric_grad(lambda v: f(y0, v), x0), atol=1e-7)


def test_frexp_at_special_points():
    x = fg.tensor(
        [0.0, -0.0, 1.0, 8.0, 0.3, -5.0, inf, nan, 1e-310, 1.7e308, 5e-324], dtype=fg.float64
    )
    m, e = fg.frexp(x)
    assert e.dtype is fg.int32 and m.dtype is fg.float64
    assert e.tolist() == [0, 0, 1, 4, -1, 3, 0, 0, -1029, 1024, -1073]
    want_m, want_e = np.frexp(x.numpy())
    assert np.array_equal(m.numpy(), want_m, equal_nan=True) and (e.numpy() == want_e).all()
    assert np.signbit(m.numpy()[1])
    m, e = fg.tensor([0.3, -inf, 1e-45, 3e38]).frexp()
    assert e.tolist() == [-1, 0, -148, 128] and m[1].item() == -inf
    m, e = fg.frexp(fg.tensor([1.0, 3.0], dtype=fg.bfloat16))
    assert m.dtype is fg.bfloat16 and m.float().tolist() == [0.5, 0.75] and e.tolist() == [1, 2]
    with pytest.raises(RuntimeError, match="only supports floating-point dtypes"):
        fg.frexp(fg.tensor([1, 2]))
    # torch's gradient: grad / 2 ** exponent
    x = fg.tensor([0.3, -5.0, 1e-30, 0.0], dtype=fg.float64, requires_grad=True)
    mant, ex = fg.frexp(x)
    mant.sum().backward()
    assert x.grad.tolist() == [2.0, 0.125, 2.0**99, 1.0] and not ex.requires_grad


def test_gcd_lcm():
    a, b = fg.tensor([12, -18, 0, 0, 7]), fg.tensor([8, 12, 5, 0, -3])
    assert fg.gcd(a, b).tolist() == [4, 6, 5, 0, 1]
    assert fg.lcm(a, b).tolist() == [24, 36, 0, 0, 21]
    assert fg.gcd(fg.tensor([12], dtype=fg.int32), fg.tensor([8])).dtype is fg.int64
    got = fg.gcd(fg.tensor([[12], [6]], dtype=fg.int32), fg.tensor([8, 9], dtype=fg.int32))
    assert got.tolist() == [[4, 3], [2, 3]] and got.dtype is fg.int32
    assert fg.tensor([-128], dtype=fg.int8).gcd(fg.tensor([0], dtype=fg.int8)).tolist() == [-128]
    assert fg.lcm(fg.tensor([100], dtype=fg.int8), fg.tensor([3], dtype=fg.int8)).tolist() == [44]
    t = fg.tensor([12], dtype=fg.int32)
    assert t.gcd_(fg.tensor([8])) is t and t.tolist() == [4] and t.dtype is fg.int32
    assert t.lcm_(fg.tensor([6])).tolist() == [12]
    with pytest.raises(NotImplementedError, match="\"gcd_cpu\" not implemented for 'Float'"):
        fg.gcd(fg.tensor([12.0]), fg.tensor([8.0]))
    with pytest.raises(NotImplementedError, match="\"lcm_cpu\" not implemented for 'Bool'"):
        fg.lcm(fg.tensor([True]), fg.tensor([True]))
    with pytest.raises(TypeError, match="argument 'other' \\(position 2\\) must be Tensor"):
        fg.gcd(fg.tensor([12]), 8)


def test_nextafter():
    got = fg.nextafter(fg.tensor([1.0, 0.0, -0.0, inf, 1.0]), fg.tensor([2.0, 1.0, -1.0, 0.0, nan]))
    want = np.array([1.0000001, 1.4e-45, -1.4e-45, 3.4028235e38, nan], np.float32)
    assert np.allclose(got.numpy(), want, equal_nan=True, rtol=1e-7, atol=0)
    one = fg.tensor([1.0], dtype=fg.float64)
    assert (fg.nextafter(one, one + 1) - 1).item() == 2.0**-52
    assert (fg.nextafter(fg.tensor([1.0]), fg.tensor([2.0])) - 1).item() == 2.0**-23
    assert fg.nextafter(fg.tensor([1.0]), fg.tensor([2.0], dtype=fg.float64)).dtype is fg.float64
    half = fg.nextafter(fg.tensor([1.0], dtype=fg.float16), fg.tensor([2.0], dtype=fg.float16))
    assert half.item() == 1.0009765625
    assert fg.nextafter(fg.tensor([1.0]), fg.tensor([1.0])).item() == 1.0
    t = fg.tensor([1.0])
    assert t.nextafter_(fg.tensor([0.0])).item() == np.nextafter(np.float32(1), np.float32(0))
    with pytest.raises(NotImplementedError, match="\"nextafter_cpu\" not implemented for 'Long'"):
        fg.nextafter(fg.tensor([1]), fg.tensor([2]))
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        fg.nextafter(fg.tensor([1.0]), 2.0)


def test_rsub():
    assert fg.rsub(fg.tensor([1.0, 2]), fg.tensor([5.0, 5]), alpha=2).tolist() == [3.0, 1.0]
    assert fg.rsub(fg.tensor([1.0, 2]), 5).tolist() == [4.0, 3.0]
    r = fg.rsub(fg.tensor([1, 2]), 5, alpha=2)
    assert r.tolist() == [3, 1] and r.dtype is fg.int64
    assert fg.rsub(fg.tensor([1, 2]), 5.5).tolist() == [4.5, 3.5]
    assert fg.rsub(fg.tensor([1, 2]), fg.tensor([1.5]), alpha=0.5).tolist() == [1.0, 0.5]
    with pytest.raises(RuntimeError, match="argument alpha must not be a floating point"):
        fg.rsub(fg.tensor([1, 2]), 5, alpha=0.5)
    with pytest.raises(RuntimeError, match="bool"):
        fg.rsub(fg.tensor([True]), fg.tensor([True]))
    x = fg.tensor([1.0, 2.0], dtype=fg.float64, requires_grad=True)
    fg.rsub(x, 3.0, alpha=-2.5).sum().backward()
    assert x.grad.tolist() == [2.5, 2.5]


def test_histogram_as_torch():
    x = fg.tensor([1.0, 2, 1, 2.5, 4, -1])
    h, e = fg.histogram(x, bins=4, range=(0.0, 3.0))
    assert h.tolist() == [0.0, 2.0, 1.0, 1.0] and e.tolist() == [0.0, 0.75, 1.5, 2.25, 3.0]
    h, e = x.histogram(4)
    assert h.tolist() == [1.0, 2.0, 2.0, 1.0] and e.tolist() == [-1.0, 0.25, 1.5, 2.75, 4.0]
    h, e = fg.histogram(x, bins=fg.tensor([0.0, 1, 2.5, 5]))
    assert h.tolist() == [0.0, 3.0, 2.0]
    h, _ = fg.histogram(x, bins=fg.tensor([0.0, 1, 2.5, 5]), density=True)
    assert np.allclose(h.numpy(), [0.0, 0.4, 0.16])
    h, _ = fg.histogram(x, bins=3, weight=fg.tensor([1.0, 2, 3, 4, 5, 6]), density=True)
    assert np.allclose(h.numpy(), [0.1714286, 0.1714286, 0.2571429])
    # the edges decide, as torch's (0.3 falls in [0.3, 0.4) although 0.3 * 10 rounds below 3)
    h, _ = fg.histogram(fg.tensor([0.1, 0.2, 0.3, 0.7]), bins=10, range=(0.0, 1.0))
    assert h.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    h, e = fg.histogram(fg.tensor([]), bins=2)
    assert h.tolist() == [0.0, 0.0] and e.tolist() == [0.0, 0.5, 1.0]
    h, e = fg.histogram(fg.tensor([2.0, 2.0]), bins=2)
    assert h.tolist() == [0.0, 2.0] and e.tolist() == [1.5, 2.0, 2.5]
    h, _ = fg.histogram(fg.tensor([2.0, nan]), bins=2, range=(0.0, 4.0))
    assert h.tolist() == [0.0, 1.0]
    h, e = fg.histogram(fg.tensor([1.0, 2], dtype=fg.float64), bins=2)
    assert h.dtype is fg.float64 and e.dtype is fg.float64
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        fg.histogram(fg.tensor([1, 2]), bins=2)
    with pytest.raises(RuntimeError, match="is not finite"):
        fg.histogram(fg.tensor([2.0, nan]), bins=2)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        fg.histogram(fg.tensor([2.0]), bins=0)
    with pytest.raises(RuntimeError, match="min should not exceed max"):
        fg.histogram(fg.tensor([2.0]), bins=2, range=(3.0, 1.0))
    with pytest.raises(RuntimeError, match="same dtype"):
        fg.histogram(fg.tensor([2.0]), bins=2, weight=fg.tensor([1.0], dtype=fg.float64))
    with pytest.raises(RuntimeError, match="same dtype"):
        fg.histogram(fg.tensor([2.0]), bins=fg.tensor([1.0, 2.0], dtype=fg.float64))


def test_index_reduce_values():
    x = fg.tensor([[1.0, 2], [3, 4], [5, 6]])
    src = fg.tensor([[2.0, 3], [4.0, 5], [6, 7], [8, 9]])
    idx = fg.tensor([0, 2, 0, 0])
    want = {  # torch 2.14.1: (include_self=True, include_self=False)
        "prod": ([[96, 378], [3, 4], [20, 30]], [[96, 189], [3, 4], [4, 5]]),
        "mean": ([[4.25, 5.25], [3, 4], [4.5, 5.5]], [[16 / 3, 19 / 3], [3, 4], [4, 5]]),
        "amax": ([[8, 9], [3, 4], [5, 6]], [[8, 9], [3, 4], [4, 5]]),
        "amin": ([[1, 2], [3, 4], [4, 5]], [[2, 3], [3, 4], [4, 5]]),
    }
    for reduce, (with_self, without) in want.items():
        assert np.allclose(x.index_reduce(0, idx, src, reduce).numpy(), with_self)
        got = fg.index_reduce(x, 0, idx, src, reduce, include_self=False)
        assert np.allclose(got.numpy(), without)
    got = x.index_reduce(1, fg.tensor([1, 1]), fg.tensor([[7.0, 8], [1, 2], [3, 4]]), "mean")
    assert np.allclose(got.numpy(), [[1, 17 / 3], [3, 7 / 3], [5, 13 / 3]])
    ints = x.long().index_reduce(0, idx, src.long(), "mean")
    assert ints.tolist() == [[4, 5], [3, 4], [4, 5]]  # integer means round down, as torch's
    t = x.clone()
    assert t.index_reduce_(0, idx, src, "amax") is t and t.tolist() == [[8, 9], [3, 4], [5, 6]]
    with pytest.raises(RuntimeError, match="Expected reduce to be one of prod, mean, amax or amin"):
        x.index_reduce(0, idx, src, "sum")
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index but got: Float"):
        x.index_reduce(0, idx.float(), src, "prod")
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_reduce(0, fg.tensor([3, 0, 0, 0]), src, "prod")
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_reduce(0, fg.tensor([-1, 0, 0, 0]), src, "prod")
    with pytest.raises(RuntimeError, match=r"self \(Float\) and source \(Double\) must have"):
        x.index_reduce(0, idx, src.double(), "prod")
    with pytest.raises(RuntimeError, match=r"Number of indices \(3\) should be equal"):
        x.index_reduce(0, idx[:3], src, "prod")


def test_index_reduce_gradients_are_torchs():
    x = fg.tensor([[1.0, 2], [3, 4], [5, 6]], requires_grad=True)
    src = fg.tensor([[2.0, 3], [4.0, 5], [6, 7], [8, 9]], requires_grad=True)
    idx = fg.tensor([0, 2, 0, 0])
    w = fg.arange(6.0).reshape(3, 2)
    want = {  # torch 2.14.1's x.grad, src.grad for include_self True, then False
        "prod": (
            ([[0, 189], [2, 3], [16, 25]], [[0, 126], [20, 30], [0, 54], [0, 42]]),
            ([[0, 0], [2, 3], [0, 0]], [[0, 63], [4, 5], [0, 27], [0, 21]]),
        ),
        "mean": (
            ([[0, 0.25], [2, 3], [2, 2.5]], [[0, 0.25], [2, 2.5], [0, 0.25], [0, 0.25]]),
            ([[0, 0], [2, 3], [0, 0]], [[0, 1 / 3], [4, 5], [0, 1 / 3], [0, 1 / 3]]),
        ),
        "amax": (
            ([[0, 0], [2, 3], [4, 5]], [[0, 0], [0, 0], [0, 0], [0, 1]]),
            ([[0, 0], [2, 3], [0, 0]], [[0, 0], [4, 5], [0, 0], [0, 1]]),
        ),
    }
    for reduce, cases in want.items():
        for include_self, (gx, gs) in zip((True, False), cases):
            x.grad = src.grad = None
            y = x.index_reduce(0, idx, src, reduce, include_self=include_self)
            (y * w).sum().backward()
            assert np.allclose(x.grad.numpy(), gx) and np.allclose(src.grad.numpy(), gs)
    # ties share amax's gradient; a zero in a product
    a = fg.tensor([3.0, 1.0], requires_grad=True)
    s = fg.tensor([3.0, 3.0], requires_grad=True)
    a.index_reduce(0, fg.tensor([0, 0]), s, "amax").sum().backward()
    assert np.allclose(a.grad.numpy(), [1 / 3, 1]) and np.allclose(s.grad.numpy(), [1 / 3, 1 / 3])
    a = fg.tensor([3.0, 1.0], requires_grad=True)
    s = fg.tensor([0.0, 3.0], requires_grad=True)
    a.index_reduce(0, fg.tensor([0, 0]), s, "prod").sum().backward()
    assert a.grad.tolist() == [0.0, 1.0] and s.grad.tolist() == [9.0, 0.0]


@pytest.mark.parametrize("p", [1, 2, 3.5, inf])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_renorm_scales_the_slices_past_maxnorm_and_its_gradient(p, dim):
    """Against numpy's norms and float64 central differences; rows above, at and below
    maxnorm, and a zero row."""
    rng = np.random.default_rng(17 + dim if p == inf else int(p * 10) + dim)
    x = rng.standard_normal((3, 4, 2))
    x[1] *= 0.05  # (small slices: left alone)
    d = dim % 3
    others = tuple(k for k in range(3) if k != d)
    norms = np.linalg.norm(np.moveaxis(x, d, 0).reshape(x.shape[d], -1), ord=p, axis=1)
    maxnorm = float(np.median(norms))  # one slice exactly at it: not scaled (>, as torch)

    def f(v):
        n = np.linalg.norm(np.moveaxis(v, d, 0).reshape(v.shape[d], -1), ord=p, axis=1)
        s = np.where(n > maxnorm, maxnorm / (n + 1e-7), 1.0)
        return np.expand_dims(s, others) * v

    t = fg.tensor(x, requires_grad=True)
    y = fg.renorm(t, p, dim, maxnorm)
    np.testing.assert_allclose(y.detach().numpy(), f(x), rtol=1e-12, atol=1e-12)
    w = rng.standard_normal(x.shape)
    (y * fg.tensor(w)).sum().backward()
    at = np.expand_dims(norms == maxnorm, others) * np.ones_like(x, dtype=bool)
    np.testing.assert_array_equal(t.grad.numpy()[at], w[at])  # at maxnorm: unscaled, as torch
    if p != inf:  # (inf: a max's kink, where central differences straddle it)
        want = _numeric_grad(lambda v: float((f(v) * w).sum()), x)
        np.testing.assert_allclose(t.grad.numpy()[~at], want[~at], rtol=1e-5, atol=1e-7)
    z = x.copy()
    z[0] = 0.0
    assert (fg.renorm(fg.tensor(z), p, 0, 0.0).numpy()[0] == 0).all()  # a zero slice stays


def test_renorm_is_torchs_in_its_errors_its_method_and_in_place():
    x = fg.tensor([[3.0, 4.0]])
    assert x.renorm(2, 0, 1.0).tolist() == fg.renorm(x, 2, 0, 1.0).tolist()
    x.renorm_(2, 0, 1.0)
    assert np.allclose(x.tolist(), [[0.6, 0.8]])
    assert fg.renorm(fg.zeros(0, 3), 2, 0, 1.0).shape == (0, 3)
    tie = fg.tensor([[3.0, -3.0, 1.0], [0.5, 0.2, 0.1]], requires_grad=True)
    fg.renorm(tie, inf, 0, 1.0).sum().backward()  # a tie for the max: torch 2.14.1's split
    np.testing.assert_allclose(tie.grad.tolist(), [[5 / 18, 7 / 18, 1 / 3], [1.0, 1.0, 1.0]],
                               rtol=1e-6)  # fmt: skip
    odd = fg.tensor([[nan, 1.0], [inf, 2.0], [-0.0, 0.0]])
    for p in (2, inf):  # torch 2.14.1's answers: a NaN slice kept, an inf one NaN and 0
        got = fg.renorm(odd, p, 0, 1.0).numpy()
        np.testing.assert_array_equal(got, [[nan, 1.0], [nan, 0.0], [-0.0, 0.0]])
        assert np.signbit(got[2, 0])
    for args, error, says in [
        ((fg.tensor([1.0, 2.0]), 2, 0, 1.0), RuntimeError, "at least 2 dimensions, got 1"),
        ((fg.tensor(1.0), 2, 0, 1.0), RuntimeError, "at least 2 dimensions, got 0"),
        ((fg.tensor([[1.0, 2.0]]), 0, 0, 1.0), RuntimeError, "non-positive-norm"),
        ((fg.tensor([[1.0, 2.0]]), -1, 0, 1.0), RuntimeError, "non-positive-norm"),
        ((fg.tensor([[1.0, 2.0]]), 2, 0, -1.0), RuntimeError, "maxnorm to be >= 0"),
        ((fg.tensor([[1, 2]]), 2, 0, 1.0), RuntimeError, "floating point"),
        ((fg.tensor([[1.0, 2.0]]), 2, 2, 1.0), IndexError, "out of range"),
    ]:
        with pytest.raises(error, match=says):
            fg.renorm(*args)
