"""Tensor.resize_ and resize_as_ (frontend/inplace_methods.py): torch's kept elements,
zeros where torch leaves memory uninitialized, and torch's refusal of tensors that
require grad."""

from __future__ import annotations

import pytest

import fusegrad as fg


def test_shrinking_keeps_the_first_elements_in_row_major_order():
    t = fg.arange(6.0).reshape(2, 3)
    assert t.resize_(4) is t
    assert t.shape == (4,) and t.tolist() == [0.0, 1.0, 2.0, 3.0]
    t = fg.arange(6.0).reshape(2, 3)
    assert t.resize_((1, 2)).tolist() == [[0.0, 1.0]]
    assert fg.arange(6.0).reshape(2, 3).resize_([3, 2]).tolist() == [[0, 1], [2, 3], [4, 5]]


def test_growing_keeps_all_and_fills_zeros():
    t = fg.tensor([1, 2, 3])
    t.resize_(2, 2)
    assert t.dtype == fg.int64 and t.tolist() == [[1, 2], [3, 0]]
    assert fg.tensor([True]).resize_(1, 2).tolist() == [[True, False]]


def test_resize_as_takes_the_other_shape():
    t = fg.arange(4.0)
    assert t.resize_as_(fg.zeros(2, 2)).tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert t.resize_as_(fg.zeros(3)).tolist() == [0.0, 1.0, 2.0]


def test_resize_bumps_the_version():
    t = fg.arange(4.0)
    v = t._version
    t.resize_(2)
    assert t._version == v + 1


def test_refuses_tensors_that_require_grad_as_torch():
    w = fg.ones(3, requires_grad=True)
    for call in (
        lambda: w.resize_(2),
        lambda: w.resize_as_(fg.zeros(2)),
        lambda: (w * 2).resize_(2),
    ):
        with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            call()
    with fg.no_grad(), pytest.raises(RuntimeError, match="cannot resize variables"):
        w.resize_(2)


def test_negative_sizes_are_refused():
    with pytest.raises(RuntimeError, match="negative size"):
        fg.ones(2).resize_(2, -1)


def test_a_view_that_shrinks_still_writes_into_its_base():
    base = fg.arange(6.0)
    v = base[:3]
    v.resize_(2)
    v.fill_(9.0)
    assert base.tolist() == [9.0, 9.0, 2.0, 3.0, 4.0, 5.0] and v.tolist() == [9.0, 9.0]


def test_a_view_that_grows_is_its_own():
    base = fg.arange(6.0)
    v = base[1:4]
    v.resize_(5)
    v.fill_(9.0)
    assert v.tolist() == [9.0] * 5 and base.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
