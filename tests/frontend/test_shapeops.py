"""Shape ops, reductions, scans and sorting against numpy, with float64 gradient checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import shapeops

RNG = np.random.default_rng(0)
A = RNG.normal(size=(3, 4, 5))
X = fg.tensor(A)


def same(t, want):
    got = t.numpy()
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "eq, shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("ii->i", [(4, 4)]),
        ("ii", [(4, 4)]),
        ("ij->", [(3, 4)]),
        ("i,j->ij", [(3,), (4,)]),
        ("...ij,...jk", [(2, 3, 4), (4, 5)]),
        ("ijk->kji", [(2, 3, 4)]),
        ("ij,ij->i", [(3, 4), (3, 4)]),
        ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ],
)
def test_einsum(eq, shapes):
    arrays = [RNG.normal(size=s) for s in shapes]
    same(fg.einsum(eq, *[fg.tensor(a) for a in arrays]), np.einsum(eq, *arrays))
    assert fg.testing.gradcheck(lambda *ts: fg.einsum(eq, *ts), [fg.tensor(a) for a in arrays])


def test_einsum_errors():
    with pytest.raises(fg.ShapeError, match="operands"):
        fg.einsum("ij,jk->ik", fg.ones(2, 2))
    with pytest.raises(fg.ShapeError, match="subscript"):
        fg.einsum("ij,jk->ik", fg.ones(2, 3), fg.ones(4, 2))
    with pytest.raises(fg.ShapeError, match="do not fit"):
        fg.einsum("ijk->i", fg.ones(2, 3))


def test_bmm_tril_triu_diagonal_diag_trace_outer():
    a, b = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(2, 4, 5))
    same(fg.bmm(fg.tensor(a), fg.tensor(b)), a @ b)
    with pytest.raises(fg.ShapeError, match="3-D"):
        fg.bmm(fg.ones(3, 4), fg.ones(4, 5))
    for k in (-2, -1, 0, 1, 3):
        same(X.tril(k), np.tril(A, k))
        same(fg.triu(X, k), np.triu(A, k))
        same(X.diagonal(k, 1, 2), np.diagonal(A, k, 1, 2))
        same(X.diagonal(k, 0, 2), np.diagonal(A, k, 0, 2))
    v = RNG.normal(size=4)
    for k in (-2, 0, 1):
        same(fg.diag(fg.tensor(v), k), np.diag(v, k))
        same(fg.diag(fg.tensor(A[0]), k), np.diag(A[0], k))
    same(fg.tensor(A[0, :4, :4]).trace(), np.trace(A[0, :4, :4]))
    same(fg.outer(fg.tensor(v), fg.tensor(v)), np.outer(v, v))
    with pytest.raises(fg.ShapeError, match="at least 2"):
        fg.ones(3).tril()
    assert fg.testing.gradcheck(lambda t: t.tril(-1) + t.diagonal(1, 1, 2).sum(), [X])
    assert fg.testing.gradcheck(lambda t: fg.diag(t, 1), [fg.tensor(v)])


def test_split_chunk_unbind_unflatten():
    assert [t.shape for t in X.split(2, 1)] == [(3, 2, 5), (3, 2, 5)]
    parts = X.split([1, 3, 1], dim=2)
    for p, w in zip(parts, np.split(A, [1, 4], axis=2)):
        same(p, w)
    for p, w in zip(fg.chunk(X, 3, 2), np.array_split(A, 3, axis=2)):
        same(p, w)
    assert [t.shape[2] for t in X.chunk(3, 2)] == [2, 2, 1]  # ceil(5 / 3) per piece, as torch
    for p, w in zip(X.unbind(1), [A[:, i] for i in range(4)]):
        same(p, w)
    same(X.unflatten(2, (5, 1)), A.reshape(3, 4, 5, 1))
    same(X.unflatten(1, (2, -1)), A.reshape(3, 2, 2, 5))
    with pytest.raises(fg.ShapeError, match="do not sum"):
        X.split([1, 1], 0)
    with pytest.raises(fg.ShapeError, match="multiply"):
        X.unflatten(1, (3, 2))
    assert fg.testing.gradcheck(lambda t: t.split([1, 3, 1], 2)[1] * 2, [X])


@pytest.mark.parametrize(
    "roll",
    [
        lambda x: x.roll(0, 1),
        lambda x: x.roll(3, 1),  # a whole turn
        lambda x: x.roll((2, 3), (0, 1)),
        lambda x: x.roll(0),
        lambda x: x.roll(6),  # flattened, a whole turn
        lambda x: x.roll(1, 1),
        lambda x: fg.roll(x[:, :1], 1, 1),  # a size-1 axis: makemore's MLP, one token in
    ],
)
def test_roll_is_a_new_tensor_even_when_nothing_moves(roll):
    """torch's roll copies: a write into its result (makemore's `idx = torch.roll(idx, 1,
    1); idx[:, 0] = blank`) leaves the input as it was."""
    x = fg.arange(6.0).reshape(2, 3)
    y = roll(x)
    y[:, 0] = 100.0
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert (y.numpy()[:, 0] == 100.0).all()
    w = fg.arange(6.0, requires_grad=True)  # and the gradient still flows
    (w.roll(6) * fg.arange(6.0)).sum().backward()
    assert w.grad.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_repeat_interleave_roll_unfold_meshgrid():
    same(X.repeat(2, 1, 3), np.tile(A, (2, 1, 3)))
    same(X.repeat(2, 1, 1, 1), np.tile(A, (2, 1, 1, 1)))
    with pytest.raises(fg.ShapeError, match="repeat dims"):
        X.repeat(2, 2)
    same(X.repeat_interleave(2, 1), np.repeat(A, 2, 1))
    same(X.repeat_interleave(2), np.repeat(A, 2))
    same(X.repeat_interleave(fg.tensor([1, 0, 2]), 0), np.repeat(A, [1, 0, 2], 0))
    same(X.roll(2, 1), np.roll(A, 2, 1))
    same(X.roll((-1, 3), (0, 2)), np.roll(A, (-1, 3), (0, 2)))
    same(X.roll(7), np.roll(A, 7))
    same(X.unfold(2, 2, 2), np.lib.stride_tricks.sliding_window_view(A, 2, 2)[:, :, ::2])
    same(X.unfold(1, 3, 1), np.moveaxis(np.lib.stride_tricks.sliding_window_view(A, 3, 1), 1, 1))
    a, b = np.arange(3.0), np.arange(4.0)
    for indexing in ("ij", "xy"):
        for g, w in zip(
            fg.meshgrid(fg.tensor(a), fg.tensor(b), indexing=indexing),
            np.meshgrid(a, b, indexing=indexing),
        ):
            same(g, w)
    assert fg.testing.gradcheck(lambda t: t.repeat(2, 1, 2).roll(1, 2).unfold(1, 2, 1), [X])
    assert fg.testing.gradcheck(lambda t: t.repeat_interleave(3, 2), [X])


def test_logical_reductions_prod_norm_and_moments():
    b = A > 0
    for dim in (None, 0, (1, 2)):
        assert np.array_equal(fg.tensor(b).all(dim).numpy(), b.all(axis=dim))
        assert np.array_equal(fg.tensor(b).any(dim).numpy(), b.any(axis=dim))
        same(
            X.prod(dim) if dim is None or isinstance(dim, int) else X.prod(1),
            A.prod(axis=dim if not isinstance(dim, tuple) else 1),
        )
    assert fg.all(fg.ones(0)).item() is True and fg.any(fg.ones(0)).item() is False
    assert fg.tensor([[1, 2], [3, 4]]).prod(1).tolist() == [2, 12]
    same(X.prod(2, keepdim=True), A.prod(2, keepdims=True))
    z = A.copy()
    z[0, 1, 2] = 0.0  # the gradient of a product with a zero factor is exact
    assert fg.testing.gradcheck(lambda t: t.prod(2), [fg.tensor(z)])
    for p in ("fro", 2, 1, math.inf, -math.inf, 0, 3):
        ord_ = None if p == "fro" else p
        same(X.norm(p), np.linalg.norm(A.reshape(-1), ord=ord_ if ord_ != "fro" else None))
        same(fg.norm(X, p, dim=2), np.linalg.norm(A, ord=ord_, axis=2))
    w = fg.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=fg.float64, requires_grad=True)
    w.norm(dim=1).sum().backward()
    assert w.grad.tolist() == [[0.0, 0.0], [0.6, 0.8]]  # 0 at zero, as PyTorch
    assert fg.testing.gradcheck(lambda t: t.norm(dim=1), [X])
    s, m = fg.std_mean(X, 1)
    same(s, A.std(1, ddof=1))
    same(m, A.mean(1))
    v, m = X.var_mean(dim=2, correction=0)
    same(v, A.var(2))
    same(X.var(1, correction=2), A.var(1, ddof=2))
    same(X.var(1, unbiased=False), A.var(1))


def test_scans():
    for d in (0, 1, 2, -1):
        same(X.cumsum(d), np.cumsum(A, d))
        same(X.cumprod(d), np.cumprod(A, d))
        same(X.logcumsumexp(d), np.logaddexp.accumulate(A, d))
        v, i = X.cummax(d)
        same(v, np.maximum.accumulate(A, d))
        assert np.array_equal(np.take_along_axis(A, i.numpy(), d), v.numpy())
        v, i = X.cummin(d)
        same(v, np.minimum.accumulate(A, d))
    assert fg.tensor([True, True, False]).cumsum(0).tolist() == [1, 2, 2]
    v, i = fg.tensor([1.0, 3.0, 3.0, 2.0, 3.0]).cummax(0)
    assert i.tolist() == [0, 1, 2, 2, 4]  # ties: the latest index, as PyTorch
    z = A.copy()
    z[1, 2, 3] = 0.0
    for fn in (
        lambda t: t.cumsum(2),
        lambda t: t.cumprod(2),
        lambda t: t.logcumsumexp(1),
        lambda t: t.cummax(2).values,
    ):
        assert fg.testing.gradcheck(fn, [fg.tensor(z)])


def test_sort_family():
    a = RNG.integers(0, 5, size=(3, 4, 6)).astype(np.float64)  # many ties
    t = fg.tensor(a)
    for d in (0, 1, 2):
        v, i = t.sort(d)
        same(v, np.sort(a, d))
        assert np.array_equal(i.numpy(), np.argsort(a, d, kind="stable"))
        v, i = t.sort(d, descending=True)
        same(v, -np.sort(-a, d))
        assert np.array_equal(i.numpy(), np.argsort(-a, d, kind="stable"))
        assert np.array_equal(t.argsort(d).numpy(), np.argsort(a, d, kind="stable"))
    n = np.array([3.0, math.nan, -1.0, math.nan, 2.0])
    v, i = fg.tensor(n).sort()
    assert np.array_equal(v.numpy(), np.sort(n), equal_nan=True)  # NaN last
    assert i.tolist() == [2, 4, 0, 1, 3]
    v, i = X.topk(2, dim=2)
    same(v, -np.sort(-A, 2)[:, :, :2])
    v, i = X.topk(3, dim=1, largest=False)
    same(v, np.sort(A, 1)[:, :3])
    v, i = X.kthvalue(2, 2)
    same(v, np.sort(A, 2)[:, :, 1])
    assert np.array_equal(np.take_along_axis(A, i.numpy()[..., None], 2)[..., 0], v.numpy())
    m, i = fg.tensor(a).median(2)
    same(m, np.sort(a, 2)[:, :, (6 - 1) // 2])  # the lower median, as PyTorch
    same(X.median(), np.sort(A.reshape(-1))[(60 - 1) // 2])
    assert math.isnan(fg.tensor([1.0, math.nan, 2.0]).median().item())
    m, i = fg.tensor([[1.0, math.nan, 2.0]]).median(1)
    assert math.isnan(m.item()) and i.item() == 1
    with pytest.raises(fg.IndexingError, match="out of range"):
        X.topk(6, 2)
    with pytest.raises(fg.IndexingError, match="out of range"):
        X.kthvalue(0, 2)
    assert fg.testing.gradcheck(lambda u: u.sort(2).values, [X])
    assert fg.testing.gradcheck(lambda u: u.topk(2, 1).values, [X])
    assert fg.testing.gradcheck(lambda u: u.median(2).values, [X])


def test_sort_refuses_rows_beyond_its_limit(monkeypatch):
    monkeypatch.setattr(shapeops, "SORT_LIMIT", 100)
    with pytest.raises(fg.ShapeError, match="SORT_LIMIT"):
        fg.ones(11).sort()
    fg.ones(10).sort()


def test_broadcast_shapes_and_minitorch_grad_check():
    assert fg.broadcast_shapes((3, 1), (4,), ()) == (3, 4)
    assert fg.broadcast_shapes(2, (3, 1)) == (3, 2)
    with pytest.raises(fg.ShapeError, match="cannot be broadcast"):
        fg.broadcast_shapes((3,), (4,))
    x = fg.tensor([[0.5, -1.0], [2.0, 0.1]], dtype=fg.float64)
    fg.testing.grad_check(
        lambda t, u: (t * u).relu().sum(1), x, fg.tensor([1.5, -2.0], dtype=fg.float64)
    )
    assert x.grad is not None and x.requires_grad
    with pytest.raises(AssertionError, match="derivative check"):
        wrong = fg.tensor([0.5, 2.0], dtype=fg.float64)
        # backward sees only "+ t" (derivative 1); the function really is t^2 + t
        fg.testing.grad_check(lambda t: t.detach() * t.detach() + t, wrong)


def test_smaller_aliases_and_relatives():
    v = RNG.normal(size=(2, 3))
    t = fg.tensor(v)
    same(t.diag_embed(), np.stack([np.diag(r) for r in v]))
    same(fg.tensor(v[0]).diag_embed(1), np.diag(v[0], 1))
    same(t.kron(fg.tensor([[1.0, 2.0]])), np.kron(v, [[1.0, 2.0]]))
    for p, w in zip(X.tensor_split(3, 2), np.array_split(A, 3, 2)):
        same(p, w)
    for p, w in zip(X.tensor_split([1, 3], 1), np.split(A, [1, 3], 1)):
        same(p, w)
    same(X.movedim(0, 2), np.moveaxis(A, 0, 2))
    same(X.moveaxis((0, 1), (2, 0)), np.moveaxis(A, (0, 1), (2, 0)))
    same(X.swapaxes(0, 2), np.swapaxes(A, 0, 2))
    same(X.tile((2,)), np.tile(A, (1, 1, 2)))
    same(X.narrow(1, -3, 2), A[:, 1:3])
    with pytest.raises(fg.IndexingError, match="exceeds"):
        X.narrow(1, 3, 2)
    same(X.msort(), np.sort(A, 0))
    assert np.array_equal(fg.tensor(v > 0).argwhere().numpy(), np.argwhere(v > 0))
    same(X.flipud(), A[::-1])


@pytest.mark.parametrize("offset", [-2, -1, 0, 1, 2])
@pytest.mark.parametrize("shape", [(2, 4, 3), (2, 0), (0, 3)])
def test_diag_embed_of_a_batch_matches_numpy_with_its_gradient(shape, offset):
    """Each last-axis vector on its diagonal, batched in one `where` (not a Python loop
    over the rows); -0.0 kept, zeros +0.0 off the diagonal; the gradient is the diagonal of
    the output's gradient."""
    a = np.random.default_rng(1).standard_normal(shape)
    if a.size:
        a.flat[0] = -0.0
    x = fg.tensor(a, requires_grad=True)
    y = fg.diag_embed(x, offset)
    want = np.zeros(shape[:-1] + (shape[-1] + abs(offset),) * 2)
    for idx in np.ndindex(shape[:-1]):
        want[idx] = np.diag(a[idx], offset)
    got = y.detach().numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    w = np.random.default_rng(2).standard_normal(want.shape)
    (y * fg.tensor(w)).sum().backward()
    g = np.zeros(shape)
    for idx in np.ndindex(shape[:-1]):
        g[idx] = np.diagonal(w[idx], offset)
    np.testing.assert_allclose(x.grad.numpy(), g)
