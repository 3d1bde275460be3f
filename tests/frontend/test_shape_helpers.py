"""torch's smaller shape helpers (frontend/shapeops.py): atleast_*d, broadcast_tensors,
column_stack, dstack, hsplit, vsplit, inner, mv, tril/triu_indices, isin, cartesian_prod,
block_diag, trapezoid, select, deg2rad and rad2deg, against values torch gives."""

from __future__ import annotations

import math

import pytest

import fusegrad as fg


def t(x, dtype=None):
    return fg.tensor(x, dtype=dtype)


def test_atleast_nd_shapes_and_tuples():
    assert fg.atleast_1d(t(1.5)).shape == (1,)
    assert fg.atleast_2d(t([1.0, 2.0])).shape == (1, 2)
    assert fg.atleast_3d(fg.ones(2, 3)).shape == (2, 3, 1)
    assert fg.atleast_3d(t([1.0, 2.0, 3.0])).shape == (1, 3, 1)
    assert fg.atleast_3d(t(2.0)).shape == (1, 1, 1)
    many = fg.atleast_1d(t(1.0), t([2.0, 3.0]))
    assert isinstance(many, tuple) and [m.shape for m in many] == [(1,), (2,)]
    assert isinstance(fg.atleast_2d([t(1.0)]), tuple)


def test_broadcast_stack_and_split_helpers():
    a, b = fg.broadcast_tensors(fg.ones(3, 1), t([1.0, 2.0]))
    assert a.shape == b.shape == (3, 2) and b.tolist() == [[1.0, 2.0]] * 3
    assert fg.column_stack([t([1, 2]), t([[3], [4]])]).tolist() == [[1, 3], [2, 4]]
    assert fg.dstack([t([1, 2]), t([3, 4])]).tolist() == [[[1, 3], [2, 4]]]
    assert [p.tolist() for p in fg.hsplit(fg.arange(6), 3)] == [[0, 1], [2, 3], [4, 5]]
    parts = fg.vsplit(fg.arange(12).reshape(4, 3), [1])
    assert [p.shape for p in parts] == [(1, 3), (3, 3)]
    with pytest.raises(fg.ShapeError, match="not divisible"):
        fg.hsplit(fg.arange(12).reshape(3, 4), 3)
    with pytest.raises(fg.ShapeError, match="at least 2"):
        fg.vsplit(fg.arange(6), 2)
    assert fg.select(fg.arange(6).reshape(2, 3), 1, -1).tolist() == [2, 5]
    with pytest.raises(fg.IndexingError):
        fg.select(fg.arange(6).reshape(2, 3), 1, 3)


def test_products_indices_and_membership():
    a = fg.arange(6.0).reshape(2, 3)
    assert fg.inner(a, fg.arange(12.0).reshape(4, 3)).tolist() == [
        [5.0, 14.0, 23.0, 32.0],
        [14.0, 50.0, 86.0, 122.0],
    ]
    assert fg.inner(t(2.0), t([1.0, 2.0])).tolist() == [2.0, 4.0]
    assert fg.mv(a, t([1.0, 2.0, 3.0])).tolist() == [8.0, 26.0]
    with pytest.raises(fg.ShapeError):
        fg.mv(a, a)
    assert fg.tril_indices(3, 4, 1).tolist() == [
        [0, 0, 1, 1, 1, 2, 2, 2, 2],
        [0, 1, 0, 1, 2, 0, 1, 2, 3],
    ]
    upper = [[0, 0, 0, 1, 1, 1, 2, 2], [0, 1, 2, 0, 1, 2, 1, 2]]
    assert fg.triu_indices(3, 3, -1).tolist() == upper
    assert fg.tril_indices(0, 0).shape == (2, 0)
    assert fg.isin(t([[1, 2], [3, 4]]), t([2, 3])).tolist() == [[False, True], [True, False]]
    assert fg.isin(t([1.0, math.nan]), t([math.nan, 1.0])).tolist() == [True, False]
    assert fg.isin(t([1, 5]), t([1, 2]), invert=True).tolist() == [False, True]
    assert fg.cartesian_prod(t([1, 2]), t([3, 4, 5])).tolist() == [
        [1, 3], [1, 4], [1, 5], [2, 3], [2, 4], [2, 5],
    ]  # fmt: skip
    assert fg.cartesian_prod(t([1, 2])).tolist() == [1, 2]


def test_block_diag_trapezoid_and_angles():
    out = fg.block_diag(fg.ones(2, 2), t([[5.0]]), t(7.0))
    assert out.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 5, 0], [0, 0, 0, 7]]
    mixed = fg.block_diag(t([[1, 2]]), t([1.5, 2.5]))
    assert mixed.dtype == fg.float32 and mixed.tolist() == [[1, 2, 0, 0], [0, 0, 1.5, 2.5]]
    y = t([1.0, 2.0, 3.0])
    assert fg.trapezoid(y).item() == 4.0 and fg.trapezoid(y, dx=2).item() == 8.0
    assert fg.trapezoid(y, t([0.0, 1.0, 3.0])).item() == 6.5
    grid = fg.arange(6.0).reshape(3, 2)
    assert fg.trapezoid(grid, t([0.0, 1.0, 3.0]), dim=0).tolist() == [7.0, 10.0]
    assert fg.trapz(grid, dim=0).tolist() == [4.0, 6.0]
    assert fg.deg2rad(t([180, 90])).tolist() == pytest.approx([math.pi, math.pi / 2])
    assert fg.deg2rad(t([180])).dtype == fg.float32
    assert fg.rad2deg(t([math.pi])).tolist() == pytest.approx([180.0])


def test_empty_and_one_element_inputs_as_torchs():
    e = fg.zeros(0)
    assert fg.atleast_2d(e).shape == (1, 0) and fg.column_stack([e, e]).shape == (0, 2)
    assert fg.isin(e, t([1.0])).shape == (0,) and fg.isin(t([1.0]), e).tolist() == [False]
    assert fg.trapezoid(e).item() == 0.0 and fg.trapezoid(t([4.0])).item() == 0.0
    assert fg.inner(e, e).item() == 0.0
    assert fg.cartesian_prod(e, t([1.0])).shape == (0, 2)
    assert fg.block_diag(fg.zeros(0, 2), fg.ones(1, 1)).tolist() == [[0.0, 0.0, 1.0]]
    assert fg.tril_indices(1, 1).tolist() == [[0], [0]]


def test_combinations_as_torchs():
    a = fg.tensor([1.0, 2.0, 3.0, 4.0])
    assert fg.combinations(a, 2).tolist() == [
        [1.0, 2.0], [1.0, 3.0], [1.0, 4.0], [2.0, 3.0], [2.0, 4.0], [3.0, 4.0]
    ]  # fmt: skip
    assert fg.combinations(a, 3).shape == (4, 3) and fg.combinations(a, 5).shape == (0, 5)
    assert fg.combinations(a[:2], 2, with_replacement=True).tolist() == [
        [1.0, 1.0], [1.0, 2.0], [2.0, 2.0]
    ]  # fmt: skip
    assert fg.combinations(a, 0).shape == (0,) and fg.combinations(a, 1).shape == (4, 1)
    assert fg.combinations(fg.tensor([1, 2]), 2).dtype == fg.int64
    w = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    fg.combinations(w, 2).sum().backward()  # each element in two of the three pairs
    assert w.grad.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match=r"Expect a 1D vector, but got shape \[2, 2\]"):
        fg.combinations(a.reshape(2, 2))
    with pytest.raises(RuntimeError, match="Expect a non-negative number, but got -1"):
        fg.combinations(a, -1)


def test_vander_as_torchs():
    x = fg.tensor([1, 2, 3])
    assert fg.vander(x).tolist() == [[1, 1, 1], [4, 2, 1], [9, 3, 1]]
    assert fg.vander(x).dtype == fg.int64 and fg.vander(fg.tensor([True])).dtype == fg.int64
    assert fg.vander(x.float(), 2, increasing=True).tolist() == [[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]
    assert fg.vander(x, 0).shape == (3, 0)
    xf = fg.tensor([2.0, -1.0, 0.0], requires_grad=True)
    fg.vander(xf, 4).sum().backward()  # d/dx (x^3 + x^2 + x + 1); torch's backward raises
    assert xf.grad.tolist() == [17.0, 2.0, 1.0]
    with pytest.raises(ValueError, match="one-dimensional"):
        fg.vander(x.reshape(1, 3))
    with pytest.raises(RuntimeError, match="N must be non-negative"):
        fg.vander(x, -1)
