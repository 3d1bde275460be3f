"""The public Tensor API against numpy, and against PyTorch's documented behaviour.

Where PyTorch defines the answer (dtype inference, promotion, strides of
views), the expected values below are what PyTorch reports, written out.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg


def arange_np(*shape, dtype=np.float32):
    return np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)


# ---------------------------------------------------------------- fg.tensor and from_numpy


@pytest.mark.parametrize(
    "data, dtype",
    [
        (1.5, fg.float32),
        ([1.0, 2.0], fg.float32),
        ([[1, 2], [3, 4]], fg.int64),
        ([True, False], fg.bool),
        (True, fg.bool),
        (7, fg.int64),
        ([1, 2.5], fg.float32),  # ints and floats together: float
        ([[True, False]], fg.bool),
    ],
)
def test_tensor_infers_dtype_from_python_data(data, dtype):
    t = fg.tensor(data)
    assert t.dtype is dtype
    np.testing.assert_array_equal(t.numpy(), np.array(data))
    assert t.shape == np.shape(data)


def test_tensor_of_python_floats_rounds_to_float32():
    t = fg.tensor([0.1, 1 / 3])
    np.testing.assert_array_equal(t.numpy(), np.array([0.1, 1 / 3], dtype=np.float32))


@pytest.mark.parametrize("dtype", [fg.float64, "float64", np.float64])
def test_tensor_with_float64_dtype_keeps_full_precision(dtype):
    t = fg.tensor([0.1, 1 / 3, 1e-300], dtype=dtype)
    assert t.dtype is fg.float64
    assert t.tolist() == [0.1, 1 / 3, 1e-300]


@pytest.mark.parametrize(
    "array",
    [
        np.array([0.1, 0.2]),
        np.array([1, 2], dtype=np.int32),
        np.array([1, 2], dtype=np.int64),
        np.array([[0.5]], dtype=np.float32),
        np.array([True, False]),
    ],
)
def test_tensor_of_numpy_array_keeps_its_dtype(array):
    t = fg.tensor(array)
    assert t.dtype.name == array.dtype.name
    np.testing.assert_array_equal(t.numpy(), array)


def test_tensor_with_explicit_dtype_converts():
    assert fg.tensor([1, 2], dtype=fg.float32).tolist() == [1.0, 2.0]
    assert fg.tensor([1.7, -1.7], dtype=fg.int32).tolist() == [1, -1]
    assert fg.tensor([0, 2], dtype=fg.bool).tolist() == [False, True]


@pytest.mark.parametrize(
    "array",
    [
        arange_np(3, 4),
        arange_np(3, 4, dtype=np.float64).T,  # not contiguous
        arange_np(4, 6, dtype=np.int32)[:, ::2],  # strided
        arange_np(2, 3, dtype=np.int64)[::-1],  # negative stride
        np.array(3.5),
        np.zeros((2, 1, 3), dtype=bool),
    ],
)
def test_from_numpy_has_the_arrays_values(array):
    t = fg.from_numpy(array)
    assert t.shape == array.shape
    assert t.dtype.name == array.dtype.name
    np.testing.assert_array_equal(t.numpy(), array)
    np.testing.assert_array_equal((t + 0).numpy(), array + 0)  # through a compiled kernel too


@pytest.mark.parametrize("dtype", [np.complex64, np.uint16])
def test_from_numpy_of_unsupported_dtype_raises(dtype):
    with pytest.raises(fg.DTypeError, match="from_numpy"):
        fg.from_numpy(np.zeros(3, dtype=dtype))


# ---------------------------------------------------------------- creation


def test_zeros_ones_full():
    z = fg.zeros(2, 3)
    assert z.shape == (2, 3) and z.dtype is fg.float32
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(fg.zeros((4,)).numpy(), np.zeros(4, np.float32))
    o = fg.ones(3, dtype=fg.int32)
    assert o.dtype is fg.int32 and o.tolist() == [1, 1, 1]
    assert fg.ones(2, 2, dtype=fg.float64).numpy().dtype == np.float64
    assert fg.full((2, 2), 7).dtype is fg.int64
    assert fg.full((2, 2), 7).tolist() == [[7, 7], [7, 7]]
    assert fg.full((3,), 2.5).dtype is fg.float32
    assert fg.full((3,), 2.5).tolist() == [2.5, 2.5, 2.5]
    assert fg.full((2,), True).dtype is fg.bool
    assert fg.full((2,), -1.5, dtype=fg.float64).tolist() == [-1.5, -1.5]


def test_constants_take_part_in_arithmetic():
    x = fg.tensor([1.0, 2.0])
    assert (fg.zeros(2) + x).tolist() == [1.0, 2.0]
    assert (fg.ones(2, 2) * x).tolist() == [[1.0, 2.0], [1.0, 2.0]]
    assert (fg.full((2,), 3) * 2).tolist() == [6, 6]


@pytest.mark.parametrize(
    "args, kwargs, want",
    [
        ((5,), {}, np.arange(5)),
        ((2, 7), {}, np.arange(2, 7)),
        ((0, 10, 3), {}, np.arange(0, 10, 3)),
        ((5, 0, -2), {}, np.arange(5, 0, -2)),
        ((0.0, 1.0, 0.25), {}, np.arange(0, 1, 0.25, dtype=np.float32)),
        ((4,), {"dtype": fg.float64}, np.arange(4, dtype=np.float64)),
        ((-3, 3), {"dtype": fg.int32}, np.arange(-3, 3, dtype=np.int32)),
    ],
)
def test_arange(args, kwargs, want):
    t = fg.arange(*args, **kwargs)
    assert t.dtype.name == ("int64" if want.dtype == np.int64 else want.dtype.name)
    np.testing.assert_array_equal(t.numpy(), want)


def test_eye():
    np.testing.assert_array_equal(fg.eye(3).numpy(), np.eye(3, dtype=np.float32))
    np.testing.assert_array_equal(fg.eye(2, 4).numpy(), np.eye(2, 4, dtype=np.float32))
    assert fg.eye(2, dtype=fg.int64).tolist() == [[1, 0], [0, 1]]


def test_rand_is_uniform_in_0_1_and_reproducible():
    fg.manual_seed(1234)
    a = fg.rand(100_000).numpy().copy()
    b = fg.rand(100_000).numpy().copy()
    fg.manual_seed(1234)
    a2 = fg.rand(100_000).numpy()
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a, a2)  # the same seed gives the same numbers
    assert not np.array_equal(a, b)  # the next call gives new ones
    assert a.min() >= 0.0 and a.max() < 1.0
    assert abs(a.mean() - 0.5) < 0.01
    assert abs(a.var() - 1 / 12) < 0.005
    counts, _ = np.histogram(a, bins=10, range=(0, 1))
    assert counts.min() > 9_000 and counts.max() < 11_000
    fg.manual_seed(1235)
    assert not np.array_equal(fg.rand(100_000).numpy(), a)


def test_rand_shapes_and_dtypes():
    fg.manual_seed(0)
    t = fg.rand(2, 3, dtype=fg.float64)
    assert t.shape == (2, 3) and t.numpy().dtype == np.float64
    assert fg.rand((4, 5)).shape == (4, 5)


def test_randn_has_mean_0_and_std_1_and_is_reproducible():
    fg.manual_seed(7)
    a = fg.randn(100_000).numpy().copy()
    fg.manual_seed(7)
    np.testing.assert_array_equal(fg.randn(100_000).numpy(), a)
    assert a.dtype == np.float32
    assert np.all(np.isfinite(a))
    assert abs(a.mean()) < 0.02
    assert abs(a.std() - 1) < 0.02
    assert abs(np.mean(np.abs(a) < 1) - 0.6827) < 0.01  # the normal's one-sigma mass


# ---------------------------------------------------------------- properties and conversions


def test_shape_dtype_ndim_numel():
    t = fg.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4)
    assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
    assert t.ndim == 3 and t.dim() == 3
    assert t.numel() == 24
    assert len(t) == 2
    s = fg.tensor(3.0)
    assert s.shape == () and s.ndim == 0 and s.numel() == 1


def test_item_tolist_numpy():
    assert fg.tensor([[2.5]]).item() == 2.5
    assert isinstance(fg.tensor(3).item(), int)
    assert isinstance(fg.tensor(True).item(), bool)
    assert fg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert fg.tensor(1.5).tolist() == 1.5
    a = fg.tensor([1.0, 2.0]).numpy()
    assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (2,)
    assert (fg.tensor([1.0, 2.0]) * 3).sum().item() == 9.0
    assert float(fg.tensor(2.5)) == 2.5 and int(fg.tensor(7)) == 7


def test_item_of_a_lazy_scalar_reads_its_computed_buffer():
    """`.item()` of a graph computes it and reads the one element of its buffer: every
    dtype's Python type as before, a graph that backward still needs is kept, and a
    tensor of several elements is refused before anything is computed."""
    from fusegrad.runtime.engine import engine

    x = fg.tensor(np.arange(4, dtype=np.float32))
    y = (x * 2 + 1).sum()
    assert y.item() == 16.0 and isinstance(y.item(), float)
    assert y.node.op.name == "BUFFER"  # pointed at its buffer: the graph is freed
    assert (fg.tensor([3, 4]) * 2).sum().item() == 14
    assert isinstance((fg.tensor([3, 4]) * 2).sum().item(), int)
    assert (fg.tensor([1.0, 2.0]) > 1.5).any().item() is True
    assert (fg.tensor([0.25], dtype=fg.float64) * 2).sum().item() == 0.5
    half = (fg.tensor([1.5, 2.0], dtype=fg.bfloat16) * 2).sum()
    assert half.item() == 7.0 and isinstance(half.item(), float)
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    assert loss.item() == 5.0
    loss.backward()  # the graph is still there for backward
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])
    before = engine.stats["scheduled"] + engine.stats["schedule_hits"]
    with pytest.raises(Exception, match="one-element"):
        (x * 3).item()
    assert engine.stats["scheduled"] + engine.stats["schedule_hits"] == before


def test_item_in_a_loop_gives_each_scalars_buffer_back_to_the_pool():
    """`.item()` of a temporary (`(x * 2).sum().item()`) holds no reference to the buffer's
    array when the tensor dies with the call: the memory goes back to the pool, and the
    next call's scalar takes it instead of a new allocation."""
    from fusegrad.runtime import buffer

    x = fg.tensor(np.arange(5, dtype=np.float32))
    for _ in range(3):  # compiled, cached, the pool primed
        (x * 2 + 1).sum().item()
    misses = sum(buffer._misses.values())
    for _ in range(20):
        assert (x * 2 + 1).sum().item() == 25.0
        assert fg.tensor(2.5).item() == 2.5  # a buffer tensor's own fast path
    assert sum(buffer._misses.values()) == misses


def _plans_run() -> int:
    from fusegrad.runtime.engine import engine

    return engine.stats["scheduled"] + engine.stats["schedule_hits"]


def test_an_element_of_a_computed_value_is_read_without_a_kernel():
    """`x[i, j].item()`, `int(i)` of `for i in ix`: a one-element view that only reshapes,
    permutes, expands or flips a computed buffer's element reads it there (values, -0.0,
    dtypes and Python types as the computed path gives them), no plan run."""
    a = np.array([[1.5, -0.0], [3.0, np.nan]], np.float32)
    x = fg.tensor(a).realize()
    before = _plans_run()
    got = [x[0, 1].item(), x[1][0].item(), x[0:1, 1:2].expand(1, 1).permute(1, 0).item()]
    got += [x[1, 1].item()]
    host = x.device.type == "cpu"  # (a device's element is copied back, by a plan of its own)
    assert _plans_run() == before or not host
    assert got[:3] == [-0.0, 3.0, -0.0] and np.isnan(got[3])
    assert [str(v) for v in got[:3:2]] == ["-0.0", "-0.0"]
    # a view that moves an element is computed, as before
    before = _plans_run()
    moved = (x.T[1, 0].item(), x.flip(0)[0, 0].item())
    assert moved == (-0.0, 3.0) and str(moved[0]) == "-0.0" and _plans_run() == before + 2
    for dtype, value, kind in (
        (fg.bfloat16, 7.0, float),
        (fg.int32, -3, int),
        (fg.bool, True, bool),
    ):
        t = fg.tensor([[value]], dtype=dtype).realize()
        assert t.reshape(()).item() == value and type(t.expand(1, 1).item()) is kind


def test_iterating_a_value_to_compute_computes_it_once():
    """`for i in torch.randint(n, (12,))`: the tensor is computed once, as torch's is, and
    its elements read where they are (each computed its own before); a tensor that needs a
    gradient keeps its graph, and views still write through."""
    ix = fg.randint(1000, (12,))
    before = _plans_run()
    got = [int(i) for i in ix]
    # (a device's elements are copied back one by one, each by a plan of its own)
    assert _plans_run() == before + 1 or ix.device.type != "cpu"
    assert got == ix.tolist() and all(0 <= v < 1000 for v in got)
    assert [int(v) for v in fg.arange(4) * -1] == [0, -1, -2, -3]
    w = fg.tensor([1.0, -2.0], requires_grad=True)
    rows = list(w * 3)
    assert [r.item() for r in rows] == [3.0, -6.0]
    rows[1].backward()
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 3.0])
    y = fg.arange(6.0).reshape(3, 2) * 1.0
    for r in y:
        r.mul_(-1)
    assert y.tolist() == [[-0.0, -1.0], [-2.0, -3.0], [-4.0, -5.0]]
    assert list(fg.zeros(0, 3)) == []


def test_repr_shows_values_and_non_default_dtype():
    r = repr(fg.tensor([1.5, -2.25]))
    assert r.startswith("tensor(") and "1.5" in r and "-2.25" in r
    assert "dtype" not in r  # float32 is the default, as in PyTorch
    r64 = repr(fg.tensor([0.5], dtype=fg.float64))
    assert "0.5" in r64 and "float64" in r64
    assert "int32" in repr(fg.tensor([1], dtype=fg.int32))
    assert "dtype" not in repr(fg.tensor([1, 2]))
    r2 = repr(fg.arange(6).reshape(2, 3) * 10)  # a lazy tensor prints its computed values
    for v in (0, 10, 20, 30, 40, 50):
        assert str(v) in r2


# ---------------------------------------------------------------- strides, as PyTorch reports them


def test_strides_of_views_match_pytorch():
    x = fg.arange(24).reshape(2, 3, 4)
    assert x.stride() == (12, 4, 1) and x.is_contiguous()
    assert x.stride(0) == 12 and x.stride(-1) == 1
    t = x.transpose(0, 2)  # transpose swaps strides
    assert t.shape == (4, 3, 2) and t.stride() == (1, 4, 12) and not t.is_contiguous()
    assert x.permute(1, 0, 2).stride() == (4, 12, 1)
    assert x.permute(2, 0, 1).stride() == (1, 12, 4)
    m = fg.arange(12).reshape(3, 4)
    assert m.T.stride() == (1, 4) and not m.T.is_contiguous()
    assert m.t().stride() == (1, 4)
    assert x.reshape(6, 4).stride() == (4, 1)
    assert x.flatten().stride() == (1,)
    assert x.flatten(1).stride() == (12, 1)


def test_strides_of_expand_are_zero_on_broadcast_axes():
    e = fg.arange(3).reshape(3, 1).expand(3, 4)
    assert e.stride() == (1, 0) and not e.is_contiguous()
    e2 = fg.arange(4).expand(2, 3, 4)
    assert e2.stride() == (0, 0, 1) and not e2.is_contiguous()
    e3 = fg.arange(4).reshape(1, 4).expand(5, -1)
    assert e3.shape == (5, 4) and e3.stride() == (0, 1)


def test_strides_of_slices_multiply_by_the_step():
    x = fg.arange(24).reshape(4, 6)
    assert x[:, ::2].shape == (4, 3) and x[:, ::2].stride() == (6, 2)
    assert not x[:, ::2].is_contiguous()
    assert x[::2].stride() == (12, 1) and not x[::2].is_contiguous()
    assert x[::3, 1::4].stride() == (18, 4)
    assert x[1:3].stride() == (6, 1) and x[1:3].is_contiguous()
    assert x[:, 1:3].stride() == (6, 1) and not x[:, 1:3].is_contiguous()
    assert x[1].stride() == (1,) and x[1].is_contiguous()
    assert x[:, 1].stride() == (6,) and not x[:, 1].is_contiguous()
    assert x.T[:, ::2].stride() == (1, 12)
    y = fg.arange(24).reshape(2, 3, 4)
    assert y[..., ::2].shape == (2, 3, 2) and y[..., ::2].stride() == (12, 4, 2)


def test_strides_of_new_axes_match_pytorch():
    x = fg.arange(24).reshape(4, 6)
    # x[None] is x.unsqueeze(0) in PyTorch: the new axis gets size * stride of the next one
    assert x.unsqueeze(0).stride() == (24, 6, 1)
    assert x.unsqueeze(1).stride() == (6, 6, 1)
    assert x.unsqueeze(-1).stride() == (6, 1, 1)
    assert x[None].shape == (1, 4, 6) and x[None].stride() == (24, 6, 1)
    assert x[:, None].stride() == (6, 6, 1)
    assert x[None].is_contiguous()


def test_squeeze_keeps_the_other_strides():
    z = fg.zeros(3, 1, 4)
    assert z.stride() == (4, 4, 1)
    assert z.squeeze(1).stride() == (4, 1)
    assert z.squeeze().stride() == (4, 1)
    assert fg.zeros(1, 5).T.is_contiguous()  # size-1 axes do not count, as in PyTorch


def test_contiguous_and_copies_have_row_major_strides():
    x = fg.arange(24).reshape(2, 3, 4).transpose(0, 2)
    c = x.contiguous()
    assert c.stride() == (6, 2, 1) and c.is_contiguous()
    np.testing.assert_array_equal(c.numpy(), arange_np(2, 3, 4, dtype=np.int64).transpose(2, 1, 0))
    r = x.reshape(4, 6)  # needs a copy: row-major strides
    assert r.stride() == (6, 1)
    np.testing.assert_array_equal(r.numpy(), np.arange(24).reshape(2, 3, 4).T.reshape(4, 6))
    assert fg.arange(12).reshape(3, 4).pad((1, 1)).stride() == (6, 1)


# ---------------------------------------------------------------- indexing


@pytest.mark.parametrize(
    "index",
    [
        1,
        -1,
        (slice(None), slice(2, 5)),
        (Ellipsis, slice(None, None, 2)),
        None,
        (1, -2),
        (slice(None), None, 1),
        (slice(1, None, 2), Ellipsis, 3),
        (Ellipsis, None),
        (slice(-3, None), slice(None, -1)),
        (0, 0, 0),
        (slice(1, 100),),
    ],
)
def test_basic_indexing_matches_numpy(index):
    a = arange_np(3, 6, 5)
    t = fg.from_numpy(a)[index]
    assert t.shape == a[index].shape
    np.testing.assert_array_equal(t.numpy(), a[index])


def test_indexing_composes_with_arithmetic():
    a = arange_np(4, 6)
    t = fg.from_numpy(a)
    got = (t[1:, ::2] * 2 + t[:-1, 1::2]).numpy()
    np.testing.assert_array_equal(got, a[1:, ::2] * 2 + a[:-1, 1::2])


# ---------------------------------------------------------------- reductions and softmax


def test_max_with_dim_returns_values_and_indices():
    a = np.array([[1, 3, 3, -1], [2, 0, 2, 5], [-4, -4, -5, -4]], np.float32)
    t = fg.from_numpy(a)
    values, indices = t.max(1)
    np.testing.assert_array_equal(values.numpy(), a.max(1))
    np.testing.assert_array_equal(indices.numpy(), [1, 3, 0])  # the first of equal maxima
    r = t.max(dim=0, keepdim=True)
    assert r.values.shape == (1, 4) and r.indices.shape == (1, 4)
    np.testing.assert_array_equal(r.values.numpy(), a.max(0, keepdims=True))
    np.testing.assert_array_equal(r.indices.numpy(), a.argmax(0)[None])
    assert r.indices.dtype is fg.int64
    lo = t.min(1)
    np.testing.assert_array_equal(lo.values.numpy(), a.min(1))
    np.testing.assert_array_equal(lo.indices.numpy(), [3, 1, 2])
    assert t.max().item() == 5.0 and t.min().item() == -5.0
    assert t.argmax().item() == 7 and t.argmax(1).tolist() == [1, 3, 0]


def test_sum_mean_amax_over_dims():
    a = arange_np(2, 3, 4) - 10
    t = fg.from_numpy(a)
    np.testing.assert_allclose(t.sum().item(), a.sum())
    np.testing.assert_array_equal(t.sum(1).numpy(), a.sum(1))
    np.testing.assert_array_equal(t.sum((0, 2), keepdim=True).numpy(), a.sum((0, 2), keepdims=True))
    np.testing.assert_allclose(t.mean(-1).numpy(), a.mean(-1), rtol=1e-6)
    np.testing.assert_array_equal(t.amax((1, 2)).numpy(), a.max((1, 2)))
    ints = fg.tensor([[1, 2], [3, 4]], dtype=fg.int32)
    assert ints.sum().dtype is fg.int64 and ints.sum().item() == 10  # as PyTorch: ints sum to int64
    assert fg.tensor([True, True, False]).sum().item() == 2


def softmax_np(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax(dim):
    a = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32) * 3
    t = fg.from_numpy(a)
    s = t.softmax(dim).numpy()
    np.testing.assert_allclose(s, softmax_np(a.astype(np.float64), dim), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(s.sum(dim), 1.0, rtol=1e-5)
    ls = t.log_softmax(dim).numpy()
    want = np.log(softmax_np(a.astype(np.float64), dim))
    np.testing.assert_allclose(ls, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fg.softmax(t, dim).numpy(), s, rtol=1e-6)
    np.testing.assert_allclose(fg.log_softmax(t, dim).numpy(), ls, rtol=1e-6)


def test_softmax_of_large_values_is_finite():
    t = fg.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]])
    s = t.softmax(-1).numpy()
    assert np.all(np.isfinite(s))
    np.testing.assert_allclose(s[0], softmax_np(np.array([0.0, 1.0, 2.0]), 0), rtol=1e-5)
    np.testing.assert_allclose(s[1], [0.0, 0.0, 1.0], atol=1e-7)
    ls = t.log_softmax(-1).numpy()
    assert np.all(np.isfinite(ls))
    np.testing.assert_allclose(ls[1], [-2000.0, -1000.0, 0.0], rtol=1e-6)


# ---------------------------------------------------------------- matmul


@pytest.mark.parametrize(
    "sa, sb",
    [
        ((4,), (4,)),
        ((3, 4), (4,)),
        ((4,), (4, 5)),
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((4,), (2, 4, 5)),
        ((2, 3, 4), (2, 4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((1, 1), (1, 1)),
    ],
)
def test_matmul_matches_numpy(sa, sb):
    rng = np.random.default_rng(0)
    a = rng.normal(size=sa).astype(np.float32)
    b = rng.normal(size=sb).astype(np.float32)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    for got in (
        fg.from_numpy(a) @ fg.from_numpy(b),
        fg.matmul(fg.from_numpy(a), fg.from_numpy(b)),
        fg.from_numpy(a).matmul(fg.from_numpy(b)),
    ):
        assert got.shape == want.shape and got.dtype is fg.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [fg.int32, fg.int64, fg.float64])
def test_matmul_keeps_the_dtype(dtype):
    a = fg.arange(6, dtype=dtype).reshape(2, 3)
    b = fg.arange(12, dtype=dtype).reshape(3, 4)
    c = a @ b
    assert c.dtype is dtype  # PyTorch: int32 @ int32 is int32
    want = np.arange(6).reshape(2, 3) @ np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(c.numpy(), want)
    assert (fg.arange(3, dtype=dtype) @ fg.arange(3, dtype=dtype)).dtype is dtype


def test_dot_and_transposed_operands():
    a = arange_np(3, 4)
    b = arange_np(5, 4)
    np.testing.assert_array_equal((fg.from_numpy(a) @ fg.from_numpy(b).T).numpy(), a @ b.T)
    assert fg.tensor([1.0, 2.0, 3.0]).dot(fg.tensor([4.0, 5.0, 6.0])).item() == 32.0


# ---------------------------------------------------------------- comparisons


@pytest.mark.parametrize("op", ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"])
def test_comparisons_return_bool_tensors(op):
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32)
    b = np.array([2.0, 2.0, 2.0], np.float32)
    t = fg.from_numpy(a)
    for other, other_np in ((fg.from_numpy(b), b), (2.0, 2.0), (2, 2)):
        r = getattr(t, op)(other)
        assert isinstance(r, fg.Tensor) and r.dtype is fg.bool
        np.testing.assert_array_equal(r.numpy(), getattr(a, op)(other_np))


def test_scalar_on_the_left_of_a_comparison():
    t = fg.tensor([1, 2, 3])
    assert (2 < t).tolist() == [False, False, True]
    assert (2 >= t).tolist() == [True, True, False]
    assert (2 == t).tolist() == [False, True, False]


def test_comparisons_across_dtypes_promote_first():
    i = fg.tensor([1, 2, 3])
    f = fg.tensor([1.5, 2.0, 2.5])
    assert (i < f).tolist() == [True, False, False]
    assert (i == f).tolist() == [False, True, False]
    assert (i > 1.5).tolist() == [False, True, True]


# ---------------------------------------------------------------- dtype promotion (PyTorch's rules)


@pytest.mark.parametrize(
    "a, b, want",
    [
        (fg.int32, fg.int64, fg.int64),
        (fg.int64, fg.float32, fg.float32),
        (fg.float32, fg.float64, fg.float64),
        (fg.bool, fg.int32, fg.int32),
        (fg.bool, fg.float32, fg.float32),
        (fg.int32, fg.float64, fg.float64),
    ],
)
def test_promotion_of_two_tensors(a, b, want):
    x, y = fg.ones(2, dtype=a), fg.ones(2, dtype=b)
    assert (x + y).dtype is want and (y * x).dtype is want


@pytest.mark.parametrize(
    "dtype, scalar, want",
    [
        (fg.int32, 2, fg.int32),
        (fg.int32, 2.5, fg.float32),
        (fg.int64, 2.5, fg.float32),
        (fg.float64, 2.5, fg.float64),
        (fg.float32, 2, fg.float32),
        (fg.bool, 2, fg.int64),
        (fg.bool, 2.5, fg.float32),
        (fg.bool, True, fg.bool),
        (fg.int32, True, fg.int32),
    ],
)
def test_promotion_with_python_scalars(dtype, scalar, want):
    x = fg.ones(2, dtype=dtype)
    assert (x + scalar).dtype is want
    assert (scalar * x).dtype is want


def test_zero_dim_tensor_does_not_widen_a_tensor_of_its_category():
    # PyTorch: a dimensioned tensor outranks a 0-d one of the same category
    assert (fg.ones(3) + fg.tensor(1.0, dtype=fg.float64)).dtype is fg.float32
    assert (fg.ones(3, dtype=fg.int32) + fg.tensor(1)).dtype is fg.int32


def test_division_of_ints_is_true_division_in_float32():
    r = fg.tensor([1, 7, -7]) / 2
    assert r.dtype is fg.float32 and r.tolist() == [0.5, 3.5, -3.5]
    assert (fg.tensor([3], dtype=fg.int32) / fg.tensor([4], dtype=fg.int32)).tolist() == [0.75]


# ---------------------------------------------------------------- cat, stack, pad


def test_cat_and_stack():
    a, b = arange_np(2, 3), arange_np(4, 3) + 100
    ta, tb = fg.from_numpy(a), fg.from_numpy(b)
    np.testing.assert_array_equal(fg.cat([ta, tb]).numpy(), np.concatenate([a, b]))
    np.testing.assert_array_equal(fg.cat([ta, tb], dim=-2).numpy(), np.concatenate([a, b], -2))
    np.testing.assert_array_equal(fg.cat([ta, ta], 1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(fg.cat([ta]).numpy(), a)
    np.testing.assert_array_equal(fg.stack([ta, ta * 2]).numpy(), np.stack([a, a * 2]))
    np.testing.assert_array_equal(fg.stack([ta, ta], dim=2).numpy(), np.stack([a, a], 2))
    np.testing.assert_array_equal(fg.stack([ta, ta], dim=-1).numpy(), np.stack([a, a], -1))
    mixed = fg.cat([fg.tensor([1, 2]), fg.tensor([0.5])])
    assert mixed.dtype is fg.float32 and mixed.tolist() == [1.0, 2.0, 0.5]
    bools = fg.cat([fg.tensor([True]), fg.tensor([True, False])])
    assert bools.dtype is fg.bool and bools.tolist() == [True, True, False]


def pad_np(a, pad, value=0.0):
    """torch.nn.functional.pad's constant mode, in numpy: pairs from the last axis, < 0 crops."""
    for k in range(len(pad) // 2):
        axis = a.ndim - 1 - k
        lo, hi = pad[2 * k], pad[2 * k + 1]
        index = [slice(None)] * a.ndim
        index[axis] = slice(max(-lo, 0), a.shape[axis] - max(-hi, 0))
        a = a[tuple(index)]
        widths = [(0, 0)] * a.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        a = np.pad(a, widths, constant_values=value)
    return a


@pytest.mark.parametrize(
    "pad, value",
    [
        ((1, 2), 0.0),
        ((1, 1, 2, 0), 0.0),
        ((0, 0, 0, 0, 1, 1), -1.5),
        ((-1, 0), 0.0),  # crop one column on the left
        ((-1, -2, 1, -1), 0.0),
        ((2, -1, -1, 3), 7.0),
        ((-2, 3), 2.5),
    ],
)
def test_pad_with_negative_amounts_and_a_value(pad, value):
    a = arange_np(2, 3, 5) + 1
    t = fg.from_numpy(a).pad(pad, value=value)
    want = pad_np(a, pad, value)
    assert t.shape == want.shape
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(fg.pad(fg.from_numpy(a), pad, value).numpy(), want)


def test_pad_of_a_lazy_value():
    a = arange_np(3, 4)
    t = (fg.from_numpy(a) * 2).pad((1, 1, 1, 1), value=-1.0) + 1
    np.testing.assert_array_equal(t.numpy(), pad_np(a * 2, (1, 1, 1, 1), -1.0) + 1)


def test_where_and_clamp():
    a = np.array([-2.0, -0.5, 0.5, 2.0], np.float32)
    t = fg.from_numpy(a)
    np.testing.assert_array_equal(fg.where(t > 0, t, 0.0).numpy(), np.where(a > 0, a, 0))
    np.testing.assert_array_equal(t.where(t < 1, -t).numpy(), np.where(a < 1, a, -a))
    np.testing.assert_array_equal(t.clamp(-1, 1).numpy(), np.clip(a, -1, 1))
    np.testing.assert_array_equal(t.clamp(min=0).numpy(), np.maximum(a, 0))


def test_graphs_of_one_structure_with_different_constants_and_bounds():
    """Kernels are cached by graph structure: constants, pads and slices must still differ."""
    a = arange_np(3, 4)
    x = fg.from_numpy(a)
    for c in (1.0, 2.0, -3.5):
        np.testing.assert_array_equal((x * c + c).numpy(), a * c + c)
    for v in (0.0, 1.5, -2.0):
        want = np.pad(a, [(0, 0), (1, 1)], constant_values=v)
        np.testing.assert_array_equal(x.pad((1, 1), value=v).numpy(), want)
    for s in (slice(0, 2), slice(1, 3), slice(0, 3, 2)):
        np.testing.assert_array_equal((x[s] * 2).numpy(), a[s] * 2)
    for d in (0, 1):
        np.testing.assert_array_equal(x.sum(d).numpy(), a.sum(d))
    for dtype in ("int32", "int64", "float64", "bool"):
        np.testing.assert_array_equal(x.cast(dtype).numpy(), a.astype(dtype))
    for b in (a + 1, a * 3):
        np.testing.assert_array_equal((x + fg.from_numpy(b)).numpy(), a + b)


@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "rand", "randn"])
def test_creation_takes_torchs_size_keyword(name):
    """`torch.empty(size=(4, 8))` (pytorch/examples' GAT builds its weights so)."""
    make = getattr(fg, name)
    assert make(size=(2, 3)).shape == (2, 3)
    assert make(size=[4]).shape == (4,) and make(size=()).shape == ()
    assert make(2, 3).shape == make((2, 3)).shape == (2, 3)
    assert make(size=(2,), dtype=fg.float64).dtype == fg.float64
    with pytest.raises(TypeError, match=f"{name}\\(\\) got multiple values for argument 'size'"):
        make(2, size=(3,))
