"""Advanced indexing against numpy: tensor, list and mask indices, their placement rules,
assignment, and the gather/scatter family (values, gradients, errors)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad.errors import ArgumentError
from fusegrad.versions import InplaceError

A = np.arange(60, dtype=np.float64).reshape(3, 4, 5)


CASES = [
    ([0, 2],),
    (Ellipsis, [1, 3]),
    ([0, 2], slice(None), [1, 4]),  # separated: the index axes go first
    (0, slice(None), [1, 4]),  # torch: the int selects first, [1, 4] stays in place
    (slice(None), [0, -1], [1, 4]),  # adjacent: in place
    (slice(None, None, -1), 1, slice(None, None, -2)),
    (None, [[0], [1]], None, [1, 2]),
    (1, None, [0, 1], slice(2, None)),
    ([[0, 1], [2, 0]], Ellipsis, 3),
    (slice(1, None), [2, 2, 0]),  # repeated indices
    (Ellipsis, slice(None, 1, -1)),
    (slice(-1, -4, -1),),
    ([],),
    (True,),
    (False,),
]


# PyTorch applies a leading int first (a select), so the tensor index after it stays in
# place; numpy counts the int as an index and moves the index axes first (issue 31)
INT_FIRST = {repr((0, slice(None), [1, 4])), repr((1, None, [0, 1], slice(2, None)))}


def _np_index(index):
    return tuple(np.array(i, dtype=np.int64) if isinstance(i, list) else i for i in index)


@pytest.mark.parametrize("index", CASES, ids=[repr(c) for c in CASES])
def test_get_matches_numpy(index):
    if repr(index) in INT_FIRST:
        want = A[index[0]][_np_index(index[1:])]
    else:
        want = A[_np_index(index)]
    fg_index = tuple(fg.tensor(i, dtype=fg.int64) if isinstance(i, list) else i for i in index)
    assert np.array_equal(fg.tensor(A)[fg_index].numpy(), want)
    # lists work as well as tensors
    assert np.array_equal(fg.tensor(A)[index].numpy(), want)


def test_bool_masks_read_the_mask():
    x = fg.tensor(A)
    assert np.array_equal(x[x > 30].numpy(), A[A > 30])
    assert np.array_equal(x[x[:, :, 0] > 10].numpy(), A[A[:, :, 0] > 10])
    assert np.array_equal(x[:, [True, False, True, True]].numpy(), A[:, [True, False, True, True]])
    assert np.array_equal(x[fg.tensor(True)].numpy(), A[True])
    assert x[x > 1000].shape == (0,)


def test_tensor_index_next_to_ellipsis():
    # used to fail with "eq: unsupported operand type ellipsis"
    x = fg.tensor(A)
    assert np.array_equal(x[fg.tensor([1]), ...].numpy(), A[[1], ...])
    assert np.array_equal(x[..., fg.tensor([1])].numpy(), A[..., [1]])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.data())
def test_random_mixed_indices_match_numpy(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    np_index, fg_index = [], []
    for s in shape:
        kind = data.draw(st.sampled_from(["slice", "int", "list", "tensor", "none", "mask"]))
        if kind == "slice":
            step = data.draw(st.sampled_from([1, 2, -1, -2]))
            i = slice(data.draw(st.integers(-s, s)), data.draw(st.integers(-s, s)), step)
            np_index.append(i), fg_index.append(i)
        elif kind == "int":
            i = data.draw(st.integers(-s, s - 1))
            np_index.append(i), fg_index.append(i)
        elif kind in ("list", "tensor"):
            i = data.draw(st.lists(st.integers(-s, s - 1), min_size=1, max_size=3))
            np_index.append(np.array(i))
            fg_index.append(i if kind == "list" else fg.tensor(i))
        elif kind == "mask":
            m = data.draw(st.lists(st.booleans(), min_size=s, max_size=s))
            np_index.append(np.array(m)), fg_index.append(fg.tensor(m))
        else:
            np_index += [None, slice(None)]
            fg_index += [None, slice(None)]
    try:
        want = a[tuple(np_index)]
    except IndexError:  # arrays that do not broadcast together
        with pytest.raises(fg.ShapeError):
            fg.tensor(a)[tuple(fg_index)]
        return
    got = fg.tensor(a)[tuple(fg_index)].numpy()
    assert got.shape == want.shape and np.array_equal(got, want)


def test_index_gradients_accumulate_repeats():
    x = fg.tensor(A)
    assert fg.testing.gradcheck(lambda t: t[[0, 0, 2], 1:, [1, 1, 3]], [x])
    assert fg.testing.gradcheck(lambda t: t[::-1, [2, 2]], [x])
    mask = fg.tensor(A > 40)  # fixed: a perturbed value must not change the shape
    assert fg.testing.gradcheck(lambda t: t[mask], [x])


def test_setitem_matches_numpy():
    x, b = fg.tensor(A.copy()), A.copy()
    x[0, [1, 2]] = 7.0
    b[0, [1, 2]] = 7.0
    x[:, 1:3, ::2] = fg.tensor([1.0, 2, 3])
    b[:, 1:3, ::2] = [1, 2, 3]
    x[x > 50] = -1
    b[b > 50] = -1
    x[[0, 0], [1, 1]] = fg.tensor([[5.0] * 5, [6.0] * 5])  # the last write wins
    b[[0, 0], [1, 1]] = [[5.0] * 5, [6.0] * 5]
    x[..., -1] = fg.tensor([[1.0], [2.0], [3.0]])
    b[..., -1] = [[1.0], [2.0], [3.0]]
    x[1] = 0
    b[1] = 0
    assert np.array_equal(x.numpy(), b)
    i = fg.tensor([1, 2, 3])
    i[1] = 2.7  # the value takes the tensor's dtype
    assert i.tolist() == [1, 2, 3]


def test_setitem_gradients_and_leaf_rule():
    v = fg.tensor([1.0, 2.0], requires_grad=True)
    x = fg.zeros(4)
    x[[1, 3]] = v * 3
    assert x.requires_grad and not x.is_leaf
    x.sum().backward()
    assert v.grad.tolist() == [3.0, 3.0]
    w = fg.ones(3, requires_grad=True)
    with pytest.raises(InplaceError, match="leaf"):
        w[0] = 2.0
    with fg.no_grad():
        w[0] = 2.0
    assert w.tolist() == [2.0, 1.0, 1.0]
    with pytest.raises(fg.ShapeError, match="shape mismatch"):
        fg.zeros(4)[[0, 1]] = fg.ones(3)


def test_gather_and_take_along_dim():
    rng = np.random.default_rng(0)
    ind = rng.integers(0, 5, (3, 4, 2))
    got = fg.tensor(A).gather(2, fg.tensor(ind)).numpy()
    assert np.array_equal(got, np.take_along_axis(A, ind, 2))
    ind0 = rng.integers(0, 3, (2, 4, 5))
    assert np.array_equal(
        fg.gather(fg.tensor(A), 0, fg.tensor(ind0)).numpy(), np.take_along_axis(A, ind0, 0)
    )
    small = rng.integers(0, 4, (2, 3, 5))  # smaller than the input outside dim
    want = np.take_along_axis(A[:2, :, :], small, 1)
    assert np.array_equal(fg.tensor(A).gather(1, fg.tensor(small)).numpy(), want)
    I = fg.tensor(ind)
    assert fg.testing.gradcheck(lambda t: t.gather(2, I), [fg.tensor(A)])
    am = fg.tensor(A).argmax(2, keepdim=True)
    assert np.array_equal(fg.tensor(A).take_along_dim(am, 2).numpy(), A.max(2, keepdims=True))
    bc = fg.tensor([[0], [1], [2]]).reshape(3, 1, 1)  # broadcasts against (3, 4, 5)
    want = np.take_along_axis(
        A, np.broadcast_to(np.array([0, 1, 2]).reshape(3, 1, 1), (3, 4, 1)), 2
    )
    assert np.array_equal(fg.tensor(A).take_along_dim(bc, 2).numpy(), want)
    assert fg.tensor(A).take_along_dim(fg.tensor([59, 0])).tolist() == [59, 0]


def test_gather_errors():
    x = fg.tensor(A)
    with pytest.raises(fg.IndexingError, match="out of bounds"):
        x.gather(2, fg.tensor(np.full((3, 4, 1), 5)))
    with pytest.raises(fg.IndexingError, match="out of bounds"):
        x.gather(2, fg.tensor(np.full((3, 4, 1), -1)))
    with pytest.raises(fg.ShapeError, match="same number of dimensions"):
        x.gather(2, fg.tensor([0, 1]))
    with pytest.raises(fg.DTypeError, match="int64"):
        x.gather(2, fg.tensor(np.zeros((3, 4, 1), np.float32)))
    with pytest.raises(fg.ShapeError, match="exceeds"):
        x.gather(2, fg.tensor(np.zeros((4, 4, 1), np.int64)))


def scatter_np(a, dim, index, src, mode):
    out = a.copy()
    for pos in np.ndindex(index.shape):
        target = list(pos)
        target[dim] = index[pos]
        target = tuple(target)
        if mode == "set":
            out[target] = src[pos]
        else:
            out[target] += src[pos]
    return out


def test_scatter_and_scatter_add():
    rng = np.random.default_rng(1)
    index = rng.integers(0, 4, (3, 2, 5))
    src = rng.normal(size=(3, 3, 5))
    x = fg.tensor(A)
    got = x.scatter_add(1, fg.tensor(index), fg.tensor(src)).numpy()
    np.testing.assert_allclose(got, scatter_np(A, 1, index, src, "add"))
    # scatter: the last write wins where places repeat (PyTorch's CPU order)
    got = x.scatter(1, fg.tensor(index), fg.tensor(src)).numpy()
    np.testing.assert_array_equal(got, scatter_np(A, 1, index, src, "set"))
    got = x.scatter(1, fg.tensor(index), 9.0).numpy()
    np.testing.assert_array_equal(got, scatter_np(A, 1, index, np.full(index.shape, 9.0), "set"))
    I, S = fg.tensor(index), fg.tensor(src)
    assert fg.testing.gradcheck(lambda t, s: t.scatter_add(1, I, s), [x, S])
    perm = fg.tensor(np.argsort(rng.normal(size=(3, 4, 5)), axis=1))  # no repeats
    S2 = fg.tensor(rng.normal(size=(3, 4, 5)))
    assert fg.testing.gradcheck(lambda t, s: t.scatter(1, perm, s), [x, S2])
    y = fg.zeros(3, 4, 5, dtype=fg.float64)
    y.scatter_add_(1, I, S)
    np.testing.assert_allclose(y.numpy(), scatter_np(np.zeros((3, 4, 5)), 1, index, src, "add"))


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    rng = np.random.default_rng(2)
    base = rng.normal(size=(2, 5))
    index = rng.integers(0, 5, (2, 6))
    src = rng.normal(size=(2, 6))
    want = base.copy()
    groups = {}
    for pos in np.ndindex(index.shape):
        groups.setdefault((pos[0], index[pos]), []).append(src[pos])
    fn = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "amax": np.max, "amin": np.min}[reduce]
    for target, vals in groups.items():
        want[target] = fn(vals + [base[target]] if include_self else vals)
    got = fg.tensor(base).scatter_reduce(
        1, fg.tensor(index), fg.tensor(src), reduce, include_self=include_self
    )
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    if reduce in ("sum", "mean", "prod"):
        I = fg.tensor(index)
        assert fg.testing.gradcheck(
            lambda b, s: b.scatter_reduce(1, I, s, reduce, include_self=include_self),
            [fg.tensor(base), fg.tensor(src)],
        )


def test_scatter_reduce_integer_mean_and_limits():
    got = fg.tensor([10, 10]).scatter_reduce(0, fg.tensor([0, 0, 1]), fg.tensor([1, 2, 5]), "mean")
    assert got.tolist() == [4, 7]  # (10 + 1 + 2) // 3, (10 + 5) // 2
    with pytest.raises(fg.ShapeError, match="reduce"):
        fg.zeros(3).scatter_reduce(0, fg.tensor([0]), fg.ones(1), "median")
    with pytest.raises(fg.ShapeError, match="ONE_HOT_LIMIT|only sum and mean"):
        fg.zeros(1 << 13).scatter_reduce(
            0, fg.zeros(1 << 12, dtype=fg.int64), fg.ones(1 << 12), "amax"
        )


def test_index_select_masked_fill_masked_select_nonzero_where():
    x = fg.tensor(A)
    assert np.array_equal(x.index_select(1, fg.tensor([3, 0, 3])).numpy(), A[:, [3, 0, 3]])
    assert np.array_equal(fg.index_select(x, 2, fg.tensor([4])).numpy(), A[:, :, [4]])
    with pytest.raises(fg.IndexingError):
        x.index_select(1, fg.tensor([4]))
    with pytest.raises(fg.IndexingError, match="vector"):
        x.index_select(1, fg.tensor([[0]]))
    mask = A % 7 == 0
    assert np.array_equal(x.masked_fill(fg.tensor(mask), -1).numpy(), np.where(mask, -1, A))
    i = fg.tensor([1, 2, 3]).masked_fill(fg.tensor([True, False, False]), 2.9)
    assert i.dtype == fg.int64 and i.tolist() == [2, 2, 3]
    with pytest.raises(fg.ShapeError, match="broadcast"):
        fg.ones(3).masked_fill(fg.tensor([[True], [False]]), 0)
    v = fg.tensor(2.0, requires_grad=True)
    fg.ones(3).masked_fill(fg.tensor([True, False, True]), v).sum().backward()
    assert v.grad.item() == 2.0
    assert np.array_equal(x.masked_select(fg.tensor(mask)).numpy(), A[mask])
    row = fg.tensor([True, False, False, True, False])
    assert np.array_equal(
        x.masked_select(row).numpy(), A[np.broadcast_to([True, False, False, True, False], A.shape)]
    )
    assert np.array_equal(fg.tensor(mask).nonzero().numpy(), np.argwhere(mask))
    assert all(
        np.array_equal(a.numpy(), b)
        for a, b in zip(fg.nonzero(fg.tensor(mask), as_tuple=True), np.nonzero(mask))
    )
    assert all(
        np.array_equal(a.numpy(), b) for a, b in zip(fg.where(fg.tensor(mask)), np.nonzero(mask))
    )
    assert fg.where(fg.tensor([True, False]), 1.0, 2.0).tolist() == [1.0, 2.0]


def test_flip_and_negative_steps():
    x = fg.tensor(A)
    assert np.array_equal(x.flip(0).numpy(), A[::-1])
    assert np.array_equal(x.flip((0, 2)).numpy(), A[::-1, :, ::-1])
    assert np.array_equal(fg.flip(x, [-1]).numpy(), A[..., ::-1])
    # torch's other spellings: dims one by one, and the dims= keyword
    assert np.array_equal(x.flip(-1, 0).numpy(), A[::-1, :, ::-1])
    assert np.array_equal(x.flip(dims=[1]).numpy(), A[:, ::-1])
    assert np.array_equal(fg.flip(x, dims=(0,)).numpy(), A[::-1])
    with pytest.raises(TypeError, match="multiple values for argument 'dims'"):
        x.flip(0, dims=[1])
    assert np.array_equal(x[:, ::-3].numpy(), A[:, ::-3])
    assert np.array_equal(x[2:0:-1, -1:-5:-2].numpy(), A[2:0:-1, -1:-5:-2])
    assert np.array_equal(x.fliplr().numpy(), np.fliplr(A))
    assert fg.testing.gradcheck(lambda t: t[::-2, 1:, ::-1].flip(1), [x])


def test_flipped_column_shifted_by_a_pad_reads_inside_the_buffer():
    # the index (3 - o) % 3 was simplified to (-o) % 3 and rendered with srem, which is
    # negative for o > 0: a read before the buffer (ir/symbolic.py now keeps it >= 0)
    c = np.arange(1.0, 7.0).reshape(3, 2)
    got = fg.tensor(c)[:, 0].flip(0).pad((1, 0)).numpy()
    assert got.tolist() == [0.0, 5.0, 3.0, 1.0]
    t = fg.tensor(A)
    assert np.array_equal(
        (t[0] * t[1]).flip(0).cumsum(0).numpy(), np.cumsum((A[0] * A[1])[::-1], 0)
    )


def test_take_and_the_index_family():
    x = fg.tensor(A)
    flat = np.array([[0, 59], [7, 7]])
    assert np.array_equal(x.take(fg.tensor(flat)).numpy(), np.take(A, flat))
    src = np.random.default_rng(3).normal(size=(3, 3, 5))
    idx = np.array([3, 0, 3])
    want = A.copy()
    np.add.at(want, (slice(None), idx), 2 * src)
    got = x.index_add(1, fg.tensor(idx), fg.tensor(src), alpha=2).numpy()
    np.testing.assert_allclose(got, want)
    want = A.copy()
    want[:, [1, 0, 2]] = src
    np.testing.assert_array_equal(
        x.index_copy(1, fg.tensor([1, 0, 2]), fg.tensor(src)).numpy(), want
    )
    want = A.copy()
    want[:, :, [4, 0]] = -1
    np.testing.assert_array_equal(x.index_fill(2, fg.tensor([4, 0]), -1).numpy(), want)
    rows, cols = np.array([0, 0, 2]), np.array([1, 1, 3])
    want = A.copy()
    np.add.at(want, (rows, cols), 1.0)
    got = x.index_put((fg.tensor(rows), fg.tensor(cols)), fg.tensor(1.0), accumulate=True)
    np.testing.assert_allclose(got.numpy(), want)
    want = A.copy()
    want[rows, cols] = 5.0
    got = x.index_put((fg.tensor(rows), fg.tensor(cols)), fg.tensor(5.0))
    np.testing.assert_array_equal(got.numpy(), want)
    assert np.array_equal(x.numpy(), A)  # out of place
    y = fg.tensor(A.copy())
    y.index_fill_(0, fg.tensor([1]), 0.0)
    assert y.numpy()[1].sum() == 0
    I = fg.tensor(idx)
    assert fg.testing.gradcheck(lambda t, s: t.index_add(1, I, s), [x, fg.tensor(src)])
    with pytest.raises(fg.IndexingError, match="vector"):
        x.index_add(1, fg.tensor([[0]]), fg.ones(3, 1, 5, dtype=fg.float64))
    with pytest.raises(fg.IndexingError, match="out of bounds"):
        x.index_fill(1, fg.tensor([4]), 0.0)


@pytest.mark.parametrize("lazy", [True, False])
def test_repeated_places_keep_the_last_write_both_ways(lazy, monkeypatch):
    from fusegrad import indexing

    if not lazy:  # the places are read on the host instead of compared pairwise
        monkeypatch.setattr(indexing, "LAZY_REPEATS_LIMIT", 1)
    b = A.copy()
    rows = np.array([2, 0, 2, 2, 1])
    vals = np.arange(5.0 * 4 * 5).reshape(5, 4, 5)
    b[rows] = vals
    x = fg.tensor(A.copy())
    x[fg.tensor(rows)] = fg.tensor(vals)
    assert np.array_equal(x.numpy(), b)
    v = fg.tensor(vals, requires_grad=True)
    y = fg.tensor(A.copy())
    y[fg.tensor(rows)] = v
    y.sum().backward()
    want = np.zeros_like(vals)
    want[[1, 3, 4]] = 1.0  # only the writes that stay receive a gradient
    assert np.array_equal(v.grad.numpy(), want)


def test_jit_replays_tensor_index_writes_and_refuses_mask_shapes():
    @fg.jit
    def put(x, i, v):
        y = x * 1
        y[i] = v
        return y

    for k in range(4):
        i = np.array([k % 3, 1, k % 3])
        v = np.arange(3.0) + 10 * k
        want = A[:, 0, 0].copy()
        want[i] = v
        got = put(fg.tensor(A[:, 0, 0].copy()), fg.tensor(i), fg.tensor(v))
        assert np.array_equal(got.numpy(), want)

    @fg.jit
    def select(x):
        return x[x > 0]

    with pytest.raises(fg.JitError, match="bool mask"):
        for _ in range(3):
            select(fg.tensor(A))


def test_an_overwritten_value_gets_gradient_zero_on_purpose():
    """`x[[1, 1, 2]] = v`: the last write to place 1 wins (torch's CPU order); the value it
    overwrote gets gradient 0, its derivative, where torch's backward gives it place 1's
    gradient too (docs/NUMERICS.md)."""
    x = fg.zeros(4, requires_grad=True)
    v = fg.tensor([5.0, 6.0, 7.0], requires_grad=True)
    y = x * 1
    y[fg.tensor([1, 1, 2])] = v
    (y * fg.tensor([1.0, 10.0, 100.0, 1000.0])).sum().backward()
    assert y.tolist() == [0.0, 6.0, 7.0, 0.0]
    assert v.grad.tolist() == [0.0, 10.0, 100.0] and x.grad.tolist() == [1.0, 0.0, 0.0, 1000.0]


@pytest.mark.parametrize(
    "index",
    [
        (slice(1, None, 3), 2),
        (Ellipsis, slice(None, None, 2)),
        (None, 1, slice(2, 9, 4), None),
        (slice(-3, None), slice(None, 1)),
        (0,),
        (Ellipsis,),
        (slice(5, 2),),  # empty: nothing written
    ],
)
def test_a_basic_write_is_numpys_bits_and_all_with_gradients(index):
    # written by views (indexing._put_basic), not a scatter: every place, -0.0 and NaN
    # kept as written, the gradient to the value and to what is not overwritten
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 10)).astype(np.float32)
    shape = a[index].shape
    v = rng.standard_normal(shape).astype(np.float32)
    if v.size:
        v.flat[0], v.flat[-1] = -0.0, np.nan
    want = a.copy()
    want[index] = v
    x = fg.tensor(a, requires_grad=True)
    vt = fg.tensor(v, requires_grad=True)
    y = x * 1.0
    y[index] = vt
    got = y.numpy()
    assert got.tobytes() == want.tobytes()
    (
        y.nan_to_num(0.0) * fg.tensor(np.arange(70.0, dtype=np.float32).reshape(7, 10))
    ).sum().backward()
    weights = np.arange(70.0, dtype=np.float32).reshape(7, 10)
    written = np.zeros_like(a, dtype=bool)
    written[index] = True
    np.testing.assert_array_equal(x.grad.numpy(), np.where(written, 0.0, weights))
    if v.size:  # (an empty write leaves the value without a gradient, as before)
        grad = np.where(np.isnan(v), 0.0, weights[index])
        np.testing.assert_array_equal(vt.grad.numpy(), grad)


# ---------------------------------------------------------------- special points of the
# writes by views and of positions computed in kernels (`Ops.INDEX`: tables past 64K)

LONG = 70_000  # past `creation._SHARED_LIMIT`: argmax's positions are an INDEX node


def test_long_argmax_and_argmin_at_ties_signed_zeros_nan_and_the_ends():
    a = np.zeros(LONG, np.float32)
    a[10] = -0.0  # equal to +0.0: the first of the ties wins, as in torch
    assert fg.tensor(a).argmax().item() == 0 and fg.tensor(a).argmin().item() == 0
    a[-1] = 5.0  # the last element
    assert fg.tensor(a).argmax().item() == LONG - 1
    a[0] = -5.0  # the first element
    assert fg.tensor(a).argmin().item() == 0
    a[50_000] = a[-2] = np.nan  # NaN is the largest and the smallest: its first place
    assert fg.tensor(a).argmax().item() == 50_000 and fg.tensor(a).argmin().item() == 50_000
    ints = np.arange(LONG, dtype=np.int32) % 7  # integer ties
    assert fg.tensor(ints).argmax().item() == 6 and fg.tensor(ints).argmin().item() == 0


def test_long_max_over_a_dim_gives_its_gradient_to_the_index_it_returns():
    rows = np.stack([np.ones(LONG, np.float32), np.arange(LONG, dtype=np.float32)])
    x = fg.tensor(rows, requires_grad=True)
    values, indices = x.max(1)
    assert values.tolist() == [1.0, LONG - 1.0] and indices.tolist() == [0, LONG - 1]
    values.sum().backward()
    want = np.zeros_like(rows)
    want[0, 0] = want[1, -1] = 1.0  # all of a tie's gradient to the index returned
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_a_basic_write_into_a_0d_tensor_keeps_the_value_bits_and_gradients():
    x, v = fg.tensor(3.0, requires_grad=True), fg.tensor(-0.0, requires_grad=True)
    y = x * 1
    y[()] = v
    assert y.numpy().tobytes() == np.float32(-0.0).tobytes()
    y.backward()
    assert x.grad.item() == 0.0 and v.grad.item() == 1.0
    z = fg.tensor(1.0)
    z[...] = 2.5
    assert z.shape == () and z.item() == 2.5


def test_basic_writes_at_the_ends_into_empty_int_and_bool_tensors():
    e = fg.zeros(0, 3)
    e[:, 1] = 5.0  # no place to write
    assert e.shape == (0, 3)
    y = fg.zeros(LONG, dtype=fg.int32)  # past 64K, with negative and first places
    y[-1], y[0] = 7, -1
    assert (y[-1].item(), y[0].item(), y.sum().item()) == (7, -1, 6)
    with pytest.raises(ArgumentError, match="overflow"):  # torch: RuntimeError
        y[1] = 2**40
    b = fg.zeros(4, dtype=fg.bool)
    b[1:] = True
    b[-1] = False
    assert b.tolist() == [False, True, True, False]


# ---------------------------------------------------------------- writes by numpy


def _plans_run() -> int:
    from fusegrad.runtime.engine import engine

    return engine.stats["scheduled"] + engine.stats["schedule_hits"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize(
    "index", [(slice(1, None, 3), 2), (Ellipsis, slice(None, None, 2)), (0,), (slice(5, 2),)]
)
def test_a_basic_write_into_a_computed_host_value_is_numpys_without_a_kernel(dtype, index):
    """`x[index] = v` into a host tensor whose values are at hand (computed or a constant)
    with no gradient: written by numpy into a new buffer (a data pipeline's item, makemore's
    `x[1:k] = ids; y[k:] = -1`, compiled a kernel for each slice): numpy's bits, -0.0 and
    NaN included, no plan run."""
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((7, 10)) * 50).astype(dtype)
    v = (rng.standard_normal(a[index].shape) * 50).astype(dtype)
    if v.size and dtype.startswith("float"):
        v.flat[0], v.flat[-1] = -0.0, np.nan
    want = a.copy()
    want[index] = v
    x, vt = fg.tensor(a), fg.tensor(v)
    z = fg.zeros(7, 10, dtype=dtype)  # a constant
    before = _plans_run()
    x[index] = vt
    z[index] = vt
    zeros = np.zeros_like(a)
    zeros[index] = v
    assert x.numpy().tobytes() == want.tobytes()
    assert z.numpy().tobytes() == zeros.tobytes()
    # (the lazy path computes at the reads; a device's value is no host value to write)
    assert _plans_run() == before or x.device.type != "cpu"


def test_host_writes_of_numbers_round_truncate_and_refuse_as_the_kernels_do():
    x = fg.zeros(6, dtype=fg.int64)
    x[1:3] = 2.7  # truncated toward zero, as torch
    x[3] = -2.7
    x[4:] = fg.tensor([9])  # one element, broadcast
    assert x.tolist() == [0, 2, 2, -2, 9, 9]
    f = fg.tensor([1.0, 2.0, 3.0])
    f[0] = 0.1  # float32's nearest
    f[1:] = -0.0
    assert f.numpy().tobytes() == np.array([0.1, -0.0, -0.0], np.float32).tobytes()
    with pytest.raises(ArgumentError, match="overflow"):
        fg.zeros(3, dtype=fg.uint8)[0] = 300
    b = fg.zeros(3, dtype=fg.bool)
    b[1] = True
    assert b.tolist() == [False, True, False]
    s = fg.tensor(1.0)  # 0-d: the whole value, by `()` and by `...`
    s[()] = -0.0
    assert s.shape == () and s.numpy().tobytes() == np.float32(-0.0).tobytes()
    s[...] = fg.tensor(float("nan"))
    assert np.isnan(s.item())
    e = fg.zeros(0, 3, dtype=fg.int64)  # empty: nothing written
    e[:, 1] = 5
    assert e.shape == (0, 3)


def test_a_host_write_into_a_view_lands_in_its_base():
    w = fg.arange(6.0).reshape(2, 3).realize()
    row = w[1]
    row[0] = 9.0
    row[1:] = fg.tensor([-1.0, -0.0])
    assert w.tolist() == [[0.0, 1.0, 2.0], [9.0, -1.0, -0.0]] and row.tolist() == [9.0, -1.0, -0.0]


def test_writes_numpy_cannot_make_as_a_kernel_would_stay_lazy():
    """A value still to compute, a gradient, a 16-bit float (a kernel rounds its constant
    through float32) or a value of another dtype: the lazy path, with the same values."""
    lazy = fg.arange(5.0) * 2  # not computed
    lazy[1] = 7.0
    assert lazy.tolist() == [0.0, 7.0, 4.0, 6.0, 8.0]
    for x, v, want in (
        (fg.zeros(3, dtype=fg.bfloat16), 1.00390625, [0.0, 1.0, 0.0]),  # rounds to 1.0
        (fg.zeros(3), fg.tensor([2], dtype=fg.int64), [0.0, 2.0, 0.0]),  # cast
    ):
        before = _plans_run()
        x[1:2] = v
        assert x.tolist() == want and _plans_run() > before
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    y = w * 1.0
    y[0] = fg.tensor(5.0, requires_grad=True)
    y.sum().backward()
    assert w.grad.tolist() == [0.0, 1.0]


def test_slicing_data_that_only_copies_a_buffer_computes_the_copy_first():
    """A lazy tensor that only copies buffers (views and `contiguous()`: a dataset batched
    by `view(b, -1).t().contiguous()`) is computed when first sliced, so its slices are
    blocks of its buffer, as they are once it has been computed (`movement.copied_data`);
    one with arithmetic in it, or that wants a gradient, stays a graph. Values: numpy's,
    the empty slice and a 0-d element included."""
    from fusegrad.ir.ops import Ops

    raw = np.arange(60) * 7 % 50
    want = raw[:60].reshape(4, -1).T
    batched = fg.tensor(raw).narrow(0, 0, 60).view(4, -1).t().contiguous()
    rows = batched[3:8]
    assert batched.node.op is Ops.BUFFER and rows.node.op is Ops.BUFFER
    np.testing.assert_array_equal(rows.numpy(), want[3:8])
    assert batched[5:5].shape == (0, 4) and batched[14, 3].item() == want[14, 3]
    doubled = (fg.tensor(raw) * 2).view(4, -1).t().contiguous()
    assert doubled[0:2].node.op is Ops.SHRINK and doubled.node.op is Ops.CONTIGUOUS
    np.testing.assert_array_equal(doubled[0:2].numpy(), 2 * want[0:2])
    weights = fg.tensor(raw.astype(np.float32), requires_grad=True).view(4, -1).t().contiguous()
    assert weights[0:2].node.op is Ops.SHRINK
