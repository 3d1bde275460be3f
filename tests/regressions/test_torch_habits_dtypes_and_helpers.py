"""Ordinary PyTorch habits found wrong or missing by a second probe of fusegrad against
PyTorch 2.13: dtypes inferred from numpy scalars, dtype properties, numpy-style keyword
aliases, and the small helpers users reach for. Expected values are PyTorch's."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fusegrad as fg

# ---------------------------------------------------------------- numpy scalars keep their dtype


@pytest.mark.parametrize(
    "data, expected",
    [
        (np.float64(1.5), fg.float64),
        ([np.float64(1.5)], fg.float64),
        (np.array(1.5), fg.float64),
        ((np.float64(1.5),), fg.float64),
        ([[np.float64(1.0)], [2.0]], fg.float64),
        ([1.0, np.float64(2.0)], fg.float64),
        (np.float32(1.5), fg.float32),
        (np.int32(3), fg.int32),
        ([np.int32(3)], fg.int32),
        (np.int64(3), fg.int64),
        (np.int8(3), fg.int8),
        (np.uint8(3), fg.uint8),
        (np.bool_(True), fg.bool),
        ([np.bool_(True)], fg.bool),
        # mixed elements promote as tensors do (torch 2.13's answers)
        ([np.int32(3), 5], fg.int64),
        ([np.int64(3), 1.5], fg.float32),
        ([np.int8(1), np.uint8(2)], fg.int16),
        ([np.float32(1.0), np.int64(2)], fg.float32),
        ([np.float64(1.0), True], fg.float64),
        ([np.bool_(True), 2.5], fg.float32),
        # no numpy scalar: Python's defaults
        ([1.5, 2.5], fg.float32),
        ([1, 2], fg.int64),
    ],
)
def test_tensor_of_numpy_scalars_keeps_their_dtype(data, expected):
    t = fg.tensor(data)
    assert t.dtype == expected
    assert t.tolist() == np.asarray(data).tolist()


def test_tensor_of_a_numpy_scalar_is_0d_and_exact():
    t = fg.tensor(np.float64(0.1))
    assert t.shape == () and t.item() == 0.1  # float32 would give 0.10000000149011612


# ---------------------------------------------------------------- dtype properties


@pytest.mark.parametrize(
    "dtype, floating, signed",
    [
        (fg.float32, True, True),
        (fg.float64, True, True),
        (fg.int64, False, True),
        (fg.int32, False, True),
        (fg.int16, False, True),
        (fg.int8, False, True),
        (fg.uint8, False, False),
        (fg.bool, False, False),
    ],
)
def test_dtype_properties_as_torch(dtype, floating, signed):
    assert dtype.is_floating_point is floating
    assert dtype.is_signed is signed
    assert dtype.is_complex is False


# ---------------------------------------------------------------- numpy's keyword names


def test_reductions_take_numpy_axis_and_keepdims():
    x = fg.arange(6.0).reshape(2, 3)
    assert x.sum(axis=1).tolist() == [3.0, 12.0]
    assert fg.sum(x, axis=1, keepdims=True).tolist() == [[3.0], [12.0]]
    assert x.mean(axis=0).tolist() == [1.5, 2.5, 3.5]
    assert fg.mean(x, axis=0, keepdims=True).shape == (1, 3)
    assert x.max(axis=1).indices.tolist() == [2, 2]
    assert x.amin(axis=0).tolist() == [0.0, 1.0, 2.0]
    assert x.argmax(axis=1).tolist() == [2, 2]
    assert x.cumsum(axis=1).tolist() == [[0.0, 1.0, 3.0], [3.0, 7.0, 12.0]]
    assert x.std(axis=0).tolist() == pytest.approx([2.1213203] * 3)
    assert x.softmax(axis=1)[0, 0].item() == pytest.approx(0.09003057330846786)
    assert x.prod(axis=1, keepdims=True).tolist() == [[0.0], [60.0]]
    assert (x > 2).any(axis=1).tolist() == [False, True]


# ---------------------------------------------------------------- fg.Generator


def _draws(g):
    return [
        fg.rand(3, generator=g).tolist(),
        fg.randn(2, generator=g).tolist(),
        fg.randint(0, 10, (4,), generator=g).tolist(),
        fg.randperm(5, generator=g).tolist(),
        fg.zeros(3).normal_(generator=g).tolist(),
        fg.zeros(2).uniform_(generator=g).tolist(),
        fg.normal(0.0, 1.0, size=(2,), generator=g).tolist(),
    ]


def test_a_generator_repeats_its_draws_and_leaves_the_global_stream_alone():
    g = fg.Generator()
    assert g.manual_seed(3) is g  # torch's chaining habit: Generator().manual_seed(s)
    fg.manual_seed(0)
    expected_global = fg.rand(2).tolist()
    fg.manual_seed(0)
    first = _draws(g)
    assert fg.rand(2).tolist() == expected_global
    assert _draws(g.manual_seed(3)) == first
    assert _draws(fg.Generator().manual_seed(4)) != first
    assert g.initial_seed() == 3


def test_a_generator_drives_dataloader_shuffles_and_random_split():
    from fusegrad.nn.data import DataLoader, TensorDataset, random_split

    ds = TensorDataset(fg.arange(10))

    def order(seed):
        loader = DataLoader(
            ds, batch_size=10, shuffle=True, generator=fg.Generator().manual_seed(seed)
        )
        return [b[0].tolist() for b in loader]

    assert order(5) == order(5)
    assert sorted(order(5)[0]) == list(range(10))

    def split(seed):
        parts = random_split(ds, [7, 3], generator=fg.Generator().manual_seed(seed))
        return [list(p.indices) for p in parts]

    assert split(1) == split(1)
    assert sorted(sum(split(1), [])) == list(range(10))


# ---------------------------------------------------------------- integer division by zero


@pytest.mark.cpu_device  # torch on CUDA does not raise either
@pytest.mark.parametrize(
    "divide",
    [
        lambda x: x // 0,
        lambda x: x % 0,
        lambda x: fg.fmod(x, 0),
        lambda x: fg.remainder(x, 0),
        lambda x: fg.div(x, 0, rounding_mode="floor"),
        lambda x: fg.div(x, 0, rounding_mode="trunc"),
        lambda x: x // fg.tensor([0, 1]),
        lambda x: x % fg.tensor([1, 0]),
        lambda x: 5 // fg.tensor([0, 2]),
        lambda x: x.byte() // 0,
        # a divisor promoted to the quotient's type keeps its zeros: uint8 // int8 (int16)
        lambda x: x.byte() // fg.tensor([-3, 0], dtype=fg.int8),
        lambda x: x % fg.tensor([True, False]),  # (bool to int64)
        lambda x: 2 // fg.tensor([True, False]),
        lambda x: fg.fmod(x.short(), fg.tensor([1, 0], dtype=fg.uint8)),
    ],
)
def test_integer_division_by_a_known_zero_raises_as_torch(divide):
    # torch 2.13: RuntimeError("ZeroDivisionError"); fusegrad gave 0 (or x) silently
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        divide(fg.tensor([4, -7]))


def test_in_place_integer_division_by_zero_raises_and_floats_do_not():
    x = fg.tensor([4, -7])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        x //= 0
    assert (fg.tensor([1.0, -1.0]) // 0).tolist() == [float("inf"), float("-inf")]
    assert (fg.tensor([7, -7]) // fg.tensor([2, 2])).tolist() == [3, -4]
    assert (fg.tensor([7, -7]) % 3).tolist() == [1, 2]


# ---------------------------------------------------------------- counting and searching


def test_bincount():
    assert fg.bincount(fg.tensor([0, 1, 1, 3])).tolist() == [1, 2, 0, 1]
    assert fg.tensor([0, 1, 1, 3]).bincount().dtype == fg.int64
    w = fg.bincount(fg.tensor([0, 1, 1, 3]), weights=fg.tensor([0.5, 1.0, 1.0, 2.0]), minlength=6)
    assert w.dtype == fg.float32 and w.tolist() == [0.5, 2.0, 0.0, 2.0, 0.0, 0.0]
    assert fg.bincount(fg.tensor([0, 1, 1]), weights=fg.tensor([1, 2, 3])).dtype == fg.float64
    assert fg.bincount(fg.tensor([], dtype=fg.int64)).tolist() == []
    with pytest.raises(RuntimeError, match="non-negative"):
        fg.bincount(fg.tensor([-1]))
    with pytest.raises(RuntimeError):
        fg.bincount(fg.tensor([1.0]))


def test_searchsorted_and_bucketize():
    seq = fg.tensor([1, 3, 5, 7])
    assert fg.searchsorted(seq, fg.tensor([3, 6, 9])).tolist() == [1, 3, 4]
    assert fg.searchsorted(seq, fg.tensor([3, 6, 0]), right=True).tolist() == [2, 3, 0]
    assert fg.searchsorted(seq, fg.tensor([3]), side="right").tolist() == [2]
    assert fg.searchsorted(seq, 3).tolist() == 1
    assert fg.searchsorted(seq, fg.tensor([3]), out_int32=True).dtype == fg.int32
    rows = fg.tensor([[1, 3, 5], [2, 4, 6]])
    assert fg.searchsorted(rows, fg.tensor([[3], [3]])).tolist() == [[1], [1]]
    assert fg.bucketize(fg.tensor([3, 6, 9]), seq).tolist() == [1, 3, 4]
    b = fg.bucketize(fg.tensor([3.0, 6.0, 9.0]), fg.tensor([1.0, 3.0, 5.0, 7.0]), right=True)
    assert b.dtype == fg.int64 and b.tolist() == [2, 3, 4]


def test_mode():
    v, i = fg.mode(fg.tensor([1, 2, 2, 3, 3]))
    assert (v.tolist(), i.tolist()) == (2, 2)
    r = fg.tensor([[1, 2, 2], [3, 3, 1]]).mode(1)
    assert (r.values.tolist(), r.indices.tolist()) == ([2, 3], [2, 1])
    r = fg.mode(fg.tensor([[1.0, 2, 2], [3, 3, 1]]), 0)
    assert (r.values.tolist(), r.indices.tolist()) == ([1.0, 2.0, 1.0], [0, 0, 1])
    r = fg.mode(fg.tensor([3, 1, 3, 1]))
    assert (r.values.tolist(), r.indices.tolist()) == (1, 3)
    assert fg.mode(fg.tensor([[1, 1]]), 1, keepdim=True).values.shape == (1, 1)


def test_cdist():
    x, y = fg.tensor([[0.0, 0.0], [1.0, 1.0]]), fg.tensor([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(
        fg.cdist(x, y).numpy(), [[1.0, 5.0, 0.0], [1.0, 3.6055512, 1.4142135]], rtol=1e-6
    )
    assert fg.cdist(x, y[:2], p=1).tolist() == [[1.0, 7.0], [1.0, 5.0]]
    assert fg.cdist(x, y[:2], p=float("inf")).tolist() == [[1.0, 4.0], [1.0, 3.0]]
    assert fg.cdist(fg.ones(2, 3, 4), fg.zeros(2, 5, 4)).shape == (2, 3, 5)
    x = fg.tensor([[0.0, 0.0], [1.0, 1.0]], requires_grad=True)
    fg.cdist(x, fg.tensor([[1.0, 0.0], [0.0, 0.0]])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[-1.0, 0.0], [0.7071068, 1.7071068]], rtol=1e-6)


# ---------------------------------------------------------------- torch's warnings, small forms


def test_T_of_a_tensor_not_2d_warns_as_torch():
    with pytest.warns(UserWarning, match="x.T"):
        assert fg.zeros(2, 3, 4).T.shape == (4, 3, 2)
    with pytest.warns(UserWarning, match="x.T"):
        assert fg.zeros(3).T.shape == (3,)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fg.zeros(2, 3).T.shape == (3, 2)


def test_grad_of_a_non_leaf_warns_as_torch():
    import warnings

    x = fg.ones(2, requires_grad=True)
    y = x * 2
    y.sum().backward()
    with pytest.warns(UserWarning, match="not a leaf"):
        assert y.grad is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.grad.tolist() == [2.0, 2.0]
        z = x * 3
        z.retain_grad()
        z.sum().backward()
        assert z.grad.tolist() == [1.0, 1.0]
        assert fg.ones(2).grad is None  # no grad required: no warning


def test_tile_takes_an_int():
    assert fg.tensor([1, 2]).tile(2).tolist() == [1, 2, 1, 2]
    assert fg.tensor([[1, 2]]).tile((2,)).tolist() == [[1, 2, 1, 2]]


def test_fmax_and_fmin_as_torch():
    nan = float("nan")
    a, b = fg.tensor([1.0, nan, nan, 3.0, 2.0]), fg.tensor([nan, 2.0, nan, 1.0, 5.0])
    np.testing.assert_array_equal(fg.fmax(a, b).numpy(), [1.0, 2.0, nan, 3.0, 5.0])
    np.testing.assert_array_equal(a.fmin(b).numpy(), [1.0, 2.0, nan, 1.0, 2.0])
    assert fg.fmax(fg.tensor([1, 5]), fg.tensor([3, 2])).tolist() == [3, 5]
    x = fg.tensor([1.0, nan, 3.0], requires_grad=True)
    y = fg.tensor([2.0, 1.0, nan], requires_grad=True)
    fg.fmax(x, y).sum().backward()
    assert (x.grad.tolist(), y.grad.tolist()) == ([0.0, 0.0, 1.0], [1.0, 1.0, 0.0])


def test_pow_of_a_number_to_a_tensor_abs_builtin_and_mean_dtype():
    r = fg.pow(2, fg.tensor([1, 2, 3]))
    assert r.dtype == fg.int64 and r.tolist() == [2, 4, 8]
    r = fg.pow(2.0, fg.tensor([1, 2]))
    assert r.dtype == fg.float32 and r.tolist() == [2.0, 4.0]
    with pytest.raises(TypeError):
        fg.pow(2, 3)
    assert abs(fg.tensor([-1, 2])).tolist() == [1, 2]
    assert abs(fg.tensor(-1.5)).item() == 1.5
    r = fg.tensor([1, 2]).mean(dtype=fg.float32)
    assert r.dtype == fg.float32 and r.item() == 1.5
    r = fg.mean(fg.tensor([[1, 2]]), 1, dtype=fg.float64)
    assert r.dtype == fg.float64 and r.tolist() == [1.5]


@pytest.mark.cpu_device  # torch prints device='cuda:0' too
@pytest.mark.parametrize(
    "options, make, printed",
    [
        ({"precision": 2}, lambda: fg.tensor([1.23456, 2.0]), "tensor([1.23, 2.00])"),
        ({"sci_mode": False}, lambda: fg.tensor([1e-5, 1.0]), "tensor([0.0000, 1.0000])"),
        ({"sci_mode": True}, lambda: fg.tensor([1.5, 2.0]), "tensor([1.5000e+00, 2.0000e+00])"),
        ({"threshold": 5, "edgeitems": 1}, lambda: fg.arange(10.0), "tensor([0.,  ..., 9.])"),
        (
            {"linewidth": 20},
            lambda: fg.arange(12.0),
            "tensor([ 0.,  1.,\n         2.,  3.,\n         4.,  5.,\n         6.,  7.,\n"
            "         8.,  9.,\n        10., 11.])",
        ),
    ],
)
def test_set_printoptions_as_torch(options, make, printed):
    try:
        fg.set_printoptions(**options)
        assert repr(make()) == printed
    finally:
        fg.set_printoptions(profile="default")
    assert repr(fg.tensor([1.23456])) == "tensor([1.2346])"


def test_torchs_seeding_boilerplate_runs():
    # the usual set_seed(): every line of it raised AttributeError before
    fg.manual_seed(3)
    expected = fg.rand(3).tolist()
    fg.cuda.manual_seed_all(3)
    assert fg.rand(3).tolist() == expected
    fg.cuda.manual_seed(3)
    fg.backends.cudnn.deterministic = True
    fg.backends.cudnn.benchmark = False
    assert fg.backends.cudnn.deterministic is True
    threads = fg.get_num_threads()
    try:
        fg.set_num_threads(1)
        assert fg.get_num_threads() == 1 and fg.config.threads == 1
        assert (fg.arange(4.0) * 2).tolist() == [0.0, 2.0, 4.0, 6.0]
    finally:
        fg.set_num_threads(threads)
    with pytest.raises(ValueError):
        fg.set_num_threads(0)


def test_version_and_compile_habits():
    assert isinstance(fg.__version__, str) and fg.__version__.count(".") >= 1
    model = fg.nn.Linear(2, 1)
    assert fg.compile(model) is model  # fusegrad compiles already: the same model back

    @fg.compile(mode="max-autotune")
    def double(x):
        return x * 2

    assert double(fg.ones(2)).tolist() == [2.0, 2.0]


def test_randint_draws_whole_numbers_evenly_with_a_negative_low():
    fg.manual_seed(0)
    f = fg.randint(0, 5, (1000,), dtype=fg.float32)
    assert f.dtype == fg.float32
    assert (f == f.floor()).all().item() and 0 <= f.min().item() and f.max().item() <= 4
    values, counts = np.unique(fg.randint(-3, 3, (60000,)).numpy(), return_counts=True)
    # was: -3 never drawn and 0 twice as often (the cast truncated toward zero)
    assert values.tolist() == [-3, -2, -1, 0, 1, 2]
    assert counts.min() > 9000 and counts.max() < 11000


@pytest.mark.parametrize("dtype", [fg.int64, fg.int32, fg.uint8, fg.float32, fg.float64])
@pytest.mark.parametrize(("low", "high"), [(0, 5), (3, 250), (0, 2**40), (-3, 3)])
def test_randint_is_the_floor_of_a_uniform_draw_in_every_dtype(low, high, dtype):
    """The values are floor(u * (high - low) + low) of the float64 uniform draw `rand`
    makes from the same seed, cast to `dtype` (a non-negative low takes the cast's
    truncation, which is that floor there)."""
    if (dtype is fg.uint8 and (low < 0 or high > 256)) or (dtype is fg.float32 and high > 2**24):
        with pytest.raises(fg.errors.ArgumentError, match="out of bounds for"):
            fg.randint(low, high, (4,), dtype=dtype)
        return
    if dtype is fg.int32 and high > 2**31:
        with pytest.raises(fg.errors.ArgumentError, match=r"to - 1 is out of bounds for int(?!\w)"):
            fg.randint(low, high, (4,), dtype=dtype)
        return
    fg.manual_seed(7)
    got = fg.randint(low, high, (4096,), dtype=dtype).numpy()
    fg.manual_seed(7)
    u = fg.rand(4096, dtype=fg.float64).numpy()
    want = np.floor(u * (high - low) + low).astype(dtype.np)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert got.min() >= low and got.max() < high


@pytest.mark.parametrize(
    ("low", "high", "dtype", "message"),
    [
        (5, 5, fg.int64, "random_ expects 'from' to be less than 'to', but got from=5 >= to=5"),
        (7, 2, fg.uint8, "random_ expects 'from' to be less than 'to', but got from=7 >= to=2"),
        (0, 300, fg.uint8, "to - 1 is out of bounds for unsigned char"),
        (-1, 5, fg.uint8, "from is out of bounds for unsigned char"),
        (0, 2**30, fg.float16, "to - 1 is out of bounds for c10::Half"),
        (-129, 0, fg.int8, "from is out of bounds for signed char"),
    ],
)
def test_randint_refuses_empty_ranges_and_ranges_its_dtype_cannot_hold(low, high, dtype, message):
    """torch's RuntimeErrors, word for word; the edges of each range are drawn."""
    with pytest.raises(RuntimeError, match=re.escape(message)):
        fg.randint(low, high, (3,), dtype=dtype)
    assert fg.randint(0, 256, (64,), dtype=fg.uint8).numpy().max() <= 255
    assert fg.randint(-128, 128, (8,), dtype=fg.int8).dtype == fg.int8
    assert fg.randint(0, 2**11 + 1, (8,), dtype=fg.float16).dtype == fg.float16


def test_randint_like_and_seed():
    fg.manual_seed(0)
    a = fg.randint_like(fg.zeros(1000), 5)
    assert a.dtype == fg.float32 and set(a.tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    b = fg.randint_like(fg.zeros(3, dtype=fg.int32), 2, 5)
    assert b.dtype == fg.int32 and all(2 <= v < 5 for v in b.tolist())
    assert fg.randint_like(fg.zeros(2), high=4).shape == (2,)
    s = fg.seed()
    assert isinstance(s, int) and fg.initial_seed() == s


# ---------------------------------------------------------------- NaN in unique and mode


def test_unique_keeps_each_nan_as_torch():
    """torch 2.14: each NaN is a value of its own (NaN != NaN), in values, inverse, counts."""
    x = fg.tensor([float("nan"), 1.0, float("nan"), 1.0])
    values, inverse, counts = fg.unique(x, return_inverse=True, return_counts=True)
    assert values.shape == (3,) and values[0].item() == 1.0 and values[1:].isnan().all()
    assert inverse.tolist() == [1, 0, 2, 0] and counts.tolist() == [2, 1, 1]


def test_mode_of_rows_with_nan_does_not_crash():
    """A row of NaNs has the mode NaN; torch's own pick among NaNs
    follows its sort, so only the value is checked against torch's."""
    nan = float("nan")
    m = fg.tensor([[nan, nan, nan], [nan, 2.0, nan], [1.0, 2.0, 1.0]]).mode(1)
    assert m.values[0].isnan().item() and m.values[1].isnan().item()
    assert m.values[2].item() == 1.0 and m.indices[2].item() == 2
