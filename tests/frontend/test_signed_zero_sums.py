"""The sign of a zero sum, as PyTorch 2.13 gives it on the CPU.

torch's sums start their accumulator at +0.0 and add in order, so a sum (mean, nansum,
cumsum) of -0.0s is +0.0, whatever the shape: over one element, a 0-d tensor, a size-1
axis, or a long row. fusegrad's kernels add with `reassoc nsz` (pipeline/llvm.py), which
lets LLVM fold `0.0 + x` to `x`, and the IR folds a sum over size-1 axes to its input;
both would give -0.0. The expected values below were checked against torch 2.13; each
test also asks torch where it is installed.

prod keeps -0.0 (its identity is 1.0: torch's prod of [-0.0] is -0.0), and a 0-d cumsum
is its input, as torch's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg

pytestmark = pytest.mark.usefixtures("backend")

NEG0 = -0.0
DTYPES = ["float32", "float64"]

# (name, shape of an all -0.0 input, the reduction): each result is all +0.0 in torch
ALL_POSITIVE_ZERO = [
    ("sum_0d", (), lambda t: t.sum()),
    ("sum_one", (1,), lambda t: t.sum()),
    ("sum_one_2d", (1, 1), lambda t: t.sum()),
    ("sum_two", (2,), lambda t: t.sum()),
    ("sum_size1_axis", (1, 3), lambda t: t.sum(0)),
    ("sum_size1_axis_keepdim", (3, 1), lambda t: t.sum(1, keepdim=True)),
    ("sum_rows", (2, 3), lambda t: t.sum(1)),
    ("sum_columns", (2, 3), lambda t: t.sum(0)),
    ("sum_column_tiles", (4, 16), lambda t: t.sum(0)),
    ("sum_wide_column_tiles", (3, 256), lambda t: t.sum(0)),
    ("sum_middle_axis", (2, 2, 64), lambda t: t.sum(1)),
    ("sum_long", (1000,), lambda t: t.sum()),
    ("sum_long_rows", (20, 1000), lambda t: t.sum(1)),
    ("sum_long_columns", (1000, 20), lambda t: t.sum(0)),
    ("sum_cascade", (1 << 17,), lambda t: t.sum()),
    ("mean_0d", (), lambda t: t.mean()),
    ("mean_one", (1,), lambda t: t.mean()),
    ("mean_two", (2,), lambda t: t.mean()),
    ("mean_rows_keepdim", (2, 3), lambda t: t.mean(1, keepdim=True)),
    ("nansum_0d", (), lambda t: t.nansum()),
    ("nansum_two", (2,), lambda t: t.nansum()),
    ("cumsum_one", (1,), lambda t: t.cumsum(0)),
    ("cumsum_two", (2,), lambda t: t.cumsum(0)),
    ("cumsum_one_2d", (1, 1), lambda t: t.cumsum(1)),
    ("cumsum_rows", (2, 3), lambda t: t.cumsum(1)),
]


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _neg_zeros(shape, dtype: str) -> fg.Tensor:
    return fg.tensor(np.full(shape, NEG0, dtype=dtype))


@pytest.mark.backend_slice
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("shape", "reduce"),
    [pytest.param(s, f, id=name) for name, s, f in ALL_POSITIVE_ZERO],
)
def test_a_sum_of_negative_zeros_is_positive_zero(shape, reduce, dtype):
    got = np.asarray(reduce(_neg_zeros(shape, dtype)).numpy())
    assert got.size and (got == 0).all()
    assert not np.signbit(got).any(), f"-0.0 at {np.argwhere(np.signbit(got))}"
    torch = _torch()
    if torch is not None:  # the literal expectation above is torch's
        want = reduce(torch.tensor(np.full(shape, NEG0, dtype=dtype))).numpy()
        assert not np.signbit(want).any()


@pytest.mark.backend_slice
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_by_row_products_of_negative_zeros_sum_to_positive_zero(dtype):
    """Rows times rows along contiguous memory (a linear layer's x @ w.T): the CPU kernel
    keeps a vector of partial sums per row and adds its lanes at the end."""
    x, w = np.full((4, 64), NEG0, dtype=dtype), np.ones((8, 64), dtype=dtype)
    got = (fg.tensor(x).reshape(4, 1, 64) * fg.tensor(w).reshape(1, 8, 64)).sum(2).numpy()
    np.testing.assert_array_equal(got, np.zeros((4, 8)))
    assert not np.signbit(got).any()  # torch: +0.0 everywhere
    torch = _torch()
    if torch is not None:
        want = (torch.tensor(x).reshape(4, 1, 64) * torch.tensor(w).reshape(1, 8, 64)).sum(2)
        assert not torch.signbit(want).any()


@pytest.mark.backend_slice
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "k", "n"), [(8, 2, 8), (4, 3, 32), (64, 2, 64)])
def test_a_matmul_of_negative_zeros_is_positive_zero(m, k, n, dtype):
    """-0.0s times ones, k >= 2 products per output: torch's +0.0 (its k = 1 case follows
    its BLAS path instead: -0.0 for (m, 1) @ (1, n), +0.0 for (1, 1) @ (1, 1))."""
    a, b = np.full((m, k), NEG0, dtype=dtype), np.ones((k, n), dtype=dtype)
    got = (fg.tensor(a) @ fg.tensor(b)).numpy()
    np.testing.assert_array_equal(got, np.zeros((m, n)))
    assert not np.signbit(got).any()
    torch = _torch()
    if torch is not None:
        assert not torch.signbit(torch.tensor(a) @ torch.tensor(b)).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_0d_cumsum_and_prods_keep_negative_zero(dtype):
    assert np.signbit(_neg_zeros((), dtype).cumsum(0).numpy())  # torch: tensor(-0.)
    assert np.signbit(_neg_zeros((1,), dtype).prod().numpy())  # torch: tensor(-0.)
    assert np.signbit(_neg_zeros((), dtype).prod().numpy())
    assert np.signbit(fg.tensor(np.array([NEG0, 1.0], dtype=dtype)).prod().numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_gradient_of_a_sum_over_one_element_is_still_one(dtype):
    x = fg.tensor(np.full((1, 1), NEG0, dtype=dtype), requires_grad=True)
    x.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0]])


@pytest.mark.backend_slice
@pytest.mark.parametrize("dtype", DTYPES)
def test_other_sums_are_unchanged(dtype):
    """Only -0.0 changes: NaN, infinities and non-zero values come out as IEEE adds give."""
    inf, nan = math.inf, math.nan
    cases = [  # (input, torch's sum)
        ([1.0, -1.0], 0.0),
        ([NEG0, nan], nan),
        ([NEG0, -inf], -inf),
        ([inf, -inf], nan),
        ([-2.5], -2.5),
        ([NEG0, -2.5, NEG0], -2.5),
        ([-inf], -inf),
        ([nan], nan),
    ]
    for values, want in cases:
        got = fg.tensor(np.array(values, dtype=dtype)).sum().numpy()
        np.testing.assert_array_equal(got, np.array(want, dtype=dtype), err_msg=str(values))
        assert np.signbit(got) == np.signbit(want) or np.isnan(want)
    one = fg.tensor(np.array([[-2.5], [nan], [-inf]], dtype=dtype)).sum(1).numpy()
    np.testing.assert_array_equal(one, np.array([-2.5, nan, -inf], dtype=dtype))
    rows = fg.tensor(np.array([[NEG0, -1.0, 3.0], [inf, 1.0, NEG0]], dtype=dtype))
    np.testing.assert_array_equal(rows.cumsum(1).numpy(), [[0.0, -1.0, 2.0], [inf, inf, inf]])
    assert np.signbit(rows.cumsum(1).numpy()[0, 0]) == 0  # torch: 0.0 + -0.0


# (name, shapes of the pieces, axis, stack?): torch.cat and torch.stack copy each piece,
# -0.0 and NaNs of either sign as they are
JOINS = [
    ("cat_two", [(3,), (2,)], 0, False),
    ("cat_rows", [(2, 5), (3, 5), (1, 5)], 0, False),
    ("cat_columns", [(4, 3), (4, 17)], 1, False),
    ("cat_long", [(1000,), (37,)], 0, False),
    ("stack_last", [(3, 40), (3, 40)], -1, True),
    ("stack_first", [(2, 2), (2, 2), (2, 2)], 0, True),
]
SPECIAL = np.array([NEG0, 0.0, -1.0, 1.0, np.inf, -np.inf, np.nan, -np.nan], np.float32)


@pytest.mark.backend_slice
@pytest.mark.parametrize("dtype", DTYPES + ["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("shapes", "axis", "stacked"), [pytest.param(*j[1:], id=j[0]) for j in JOINS]
)
def test_cat_and_stack_keep_negative_zero_and_nan_signs(shapes, axis, stacked, dtype):
    """A cat is its pieces padded and added. Padded with +0.0, -0.0 + +0.0 gave +0.0 (and
    -0.0 in kernels where LLVM folded the add): fusegrad's cat of [-0.0] and anything was
    +0.0. Each piece's bits come through, -0.0 and the NaNs' signs included, and the
    gradient of each piece is its slice of the output's."""
    pieces = [np.resize(SPECIAL, s) * np.float32(k + 1) for k, s in enumerate(shapes)]
    tensors = [fg.tensor(p, requires_grad=True).to(getattr(fg, dtype)) for p in pieces]
    join = fg.stack if stacked else fg.cat
    out = join(tensors, axis)
    want = (np.stack if stacked else np.concatenate)(pieces, axis)
    got = out.float().numpy()
    np.testing.assert_array_equal(got, want)  # (NaN where NaN)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    g = np.resize(SPECIAL[::-1], want.shape).astype(np.float32)
    grads = fg.grad(out, tensors, grad_outputs=fg.tensor(g).to(getattr(fg, dtype)))
    parts = (
        [np.take(g, k, axis) for k in range(len(pieces))]
        if stacked
        else np.split(g, np.cumsum([s[axis] for s in shapes])[:-1], axis)
    )
    for grad, part in zip(grads, parts):
        np.testing.assert_array_equal(grad.float().numpy(), part)
        np.testing.assert_array_equal(np.signbit(grad.float().numpy()), np.signbit(part))
    torch = _torch()
    if torch is not None:
        tp = [torch.tensor(p) for p in pieces]
        t = (torch.stack if stacked else torch.cat)(tp, axis).numpy()
        np.testing.assert_array_equal(np.signbit(t), np.signbit(want))


@pytest.mark.backend_slice
@pytest.mark.parametrize("dtype", DTYPES + ["float16", "bfloat16"])
def test_writes_through_indices_keep_negative_zero(dtype):
    """x[index] = v, index_put and scatter write each value's bits as torch does: a
    written value is summed into its place from +0.0 (one SCATTER_ADD), which wrote -0.0
    as +0.0. Places written once, twice (the last write wins) and never; NaNs of either
    sign and infinities pass; the gradient of a written -0.0 is its place's, as torch's."""
    dt = getattr(fg, dtype)
    vals = np.array([NEG0, 2.0, NEG0, np.nan, -np.nan, -np.inf, 0.0], np.float32)
    where = np.array([1, 3, 3, 0, 5, 6, 2])
    x = fg.full((8,), -1.0, dtype=dt)
    x[fg.tensor(where)] = fg.tensor(vals).to(dt)
    want = np.full(8, -1.0, np.float32)
    want[where] = vals  # numpy: the last write wins, as torch's CPU does
    got = x.float().numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # scatter along a dim, the destination holding -0.0 where nothing is written
    base = np.full((2, 4), NEG0, np.float32)
    idx = np.array([[3, 0], [1, 1]])
    src = np.array([[NEG0, 5.0], [7.0, NEG0]], np.float32)
    out = fg.tensor(base).to(dt).scatter(1, fg.tensor(idx), fg.tensor(src).to(dt))
    want = base.copy()
    for i in range(2):
        for j in range(2):
            want[i, idx[i, j]] = src[i, j]
    got = out.float().numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # the gradient of each written value is its place's, -0.0 written or not
    v = fg.tensor(np.array([NEG0, 3.0, NEG0], np.float32), requires_grad=True)
    y = fg.zeros(4).index_put((fg.tensor([2, 0, 1]),), v)
    assert np.signbit(y.detach().numpy()).tolist() == [False, True, True, False]
    (g,) = fg.grad(y, [v], grad_outputs=fg.tensor([1.0, 2.0, 3.0, 4.0]))
    assert g.tolist() == [3.0, 1.0, 2.0]
    torch = _torch()
    if torch is not None:
        t = torch.full((8,), -1.0)
        t[torch.tensor(where)] = torch.tensor(vals)
        want = np.full(8, -1.0, np.float32)
        want[where] = vals
        np.testing.assert_array_equal(np.signbit(t.numpy()), np.signbit(want))


@pytest.mark.backend_slice
@pytest.mark.parametrize("dtype", DTYPES)
def test_index_add_and_scatter_add_keep_negative_zero_as_torch(dtype):
    """torch adds into x in order, so a place nothing is added to, or only -0.0s, keeps
    x's bits, and one given +0.0 or more is x's plus their sum. fusegrad adds x to a sum
    from +0.0, which turned such a -0.0 into +0.0; the places where something other than
    -0.0 is added are now counted. Values against the adds done in torch's order in numpy,
    and the gradients of x and of the added values."""
    for base in ([NEG0, 0.0, NEG0, 1.0, NEG0], [0.0, NEG0, NEG0, 0.0, np.nan]):
        for added in ([NEG0, NEG0, 0.0], [NEG0, 3.0, -3.0], [np.nan, NEG0, np.inf]):
            index = [0, 2, 0]
            want = np.array(base, dtype=dtype)
            for i, v in zip(index, added):
                want[i] = want[i] + np.array(v, dtype=dtype)
            x = fg.tensor(np.array(base, dtype=dtype))
            src = fg.tensor(np.array(added, dtype=dtype))
            for got in (
                x.index_add(0, fg.tensor(index), src).numpy(),
                x.scatter_add(0, fg.tensor(index), src).numpy(),
            ):
                np.testing.assert_array_equal(got, want)
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # the gradients where only -0.0s are added, and where more is
    x = fg.tensor(np.array([NEG0, 1.0, 5.0], dtype=dtype), requires_grad=True)
    for added in ([NEG0, NEG0], [NEG0, 2.0]):
        v = fg.tensor(np.array(added, dtype=dtype), requires_grad=True)
        y = x.index_add(0, fg.tensor([0, 0]), v)
        gx, gv = fg.grad(y, [x, v], grad_outputs=fg.tensor(np.array([3.0, 4.0, 5.0], dtype)))
        assert gx.tolist() == [3.0, 4.0, 5.0] and gv.tolist() == [3.0, 3.0]
        assert bool(np.signbit(y.detach().numpy()[0])) == (added == [NEG0, NEG0])
    torch = _torch()
    if torch is not None:
        t = torch.tensor([NEG0, 0.0]).index_add(0, torch.tensor([0, 1]), torch.tensor([NEG0, NEG0]))
        assert np.signbit(t.numpy()).tolist() == [True, False]


@pytest.mark.backend_slice
def test_joins_and_indexed_writes_of_empty_and_0d_tensors_keep_signs():
    """The boundaries of the above: a stack of 0-d tensors, a cat beside an empty piece (on
    either side), an index_add and a write of nothing, an index_add into a 0-d tensor."""
    s = fg.stack([fg.tensor(NEG0), fg.tensor(math.nan), fg.tensor(NEG0)]).numpy()
    assert np.signbit(s).tolist() == [True, False, True] and np.isnan(s[1])
    row = fg.tensor([[NEG0, 1.0, 2.0]])
    for pieces in ([fg.zeros(0, 3), row], [row, fg.zeros(0, 3)]):
        got = fg.cat(pieces).numpy()
        assert got.shape == (1, 3) and np.signbit(got).tolist() == [[True, False, False]]
    x = fg.tensor([NEG0, 1.0])
    got = x.index_add(0, fg.tensor([], dtype=fg.int64), fg.zeros(0)).numpy()
    assert np.signbit(got).tolist() == [True, False]
    y = fg.tensor([NEG0, 1.0])
    y[fg.tensor([], dtype=fg.int64)] = fg.zeros(0)
    assert np.signbit(y.numpy()).tolist() == [True, False]
    z = fg.tensor(NEG0).index_add(0, fg.tensor([0]), fg.tensor([NEG0]))
    assert z.shape == () and np.signbit(z.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plane", [7, 8, 32])
def test_per_channel_sums_over_images_and_planes_at_special_points(plane, dtype):
    """A batch norm's sums over N, H and W of N x C x H x W: H and W one loop per image,
    cascaded in vector lanes from 8 x 8 on (pipeline/lower.py, `CASCADE_MIN_ROW`), a 7 x 7
    plane summed in LLVM's loop. Per channel: all -0.0 (+0.0, as torch), all 1.0 and
    alternating +-1 (exact), one +inf among zeros, +inf with -inf (NaN), one NaN; the
    gradients of the sum and the mean are the weights, whatever the values; an empty batch
    sums to zeros."""
    inf, nan = math.inf, math.nan
    n, count = 4, 4 * plane * plane
    x = np.zeros((n, 6, plane, plane), dtype=dtype)
    x[:, 0] = NEG0
    x[:, 1] = 1.0
    signs = np.where(np.arange(plane * plane).reshape(plane, plane) % 2, 1.0, -1.0)
    x[:, 2] = signs  # (an odd plane sums to -1 per image)
    x[1, 3, 2, 3] = inf
    x[0, 4, 0, 0], x[3, 4, -1, -1] = inf, -inf
    x[2, 5, plane - 1, 0] = nan
    t = fg.tensor(x, requires_grad=True)
    got = t.sum((0, 2, 3)).numpy()
    alternating = n * signs.sum()
    np.testing.assert_array_equal(got, np.array([0.0, count, alternating, inf, nan, nan], dtype))
    assert not np.signbit(got[0])
    means = np.array([0.0, 1.0, alternating / count], dtype)
    np.testing.assert_array_equal(t.mean((0, 2, 3)).numpy()[:3], means)
    w = np.array([1.0, -2.0, 0.5, NEG0, 3.0, -1.0], dtype=dtype)
    (t.sum((0, 2, 3)) * fg.tensor(w)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.broadcast_to(w[None, :, None, None], x.shape))
    t.grad = None
    t.mean((0, 2, 3)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.full(x.shape, 1 / count, dtype))
    empty = fg.tensor(np.zeros((0, 6, plane, plane), dtype=dtype)).sum((0, 2, 3)).numpy()
    np.testing.assert_array_equal(empty, np.zeros(6, dtype))
    torch = _torch()
    if torch is not None:  # the expectations above are torch's
        want = torch.tensor(x).sum((0, 2, 3)).numpy()
        np.testing.assert_array_equal(got, want)
        assert np.signbit(got[0]) == np.signbit(want[0])
