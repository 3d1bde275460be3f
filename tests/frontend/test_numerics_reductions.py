"""Sums whose answers are exact: counts of broadcast elements are integers, not float
accumulations of ones (a sum over an expand is the smaller sum times the count)."""

from __future__ import annotations

import numpy as np

import fusegrad as fg


def test_sum_of_an_expanded_one_is_the_exact_count():
    assert fg.ones(1).expand(3_000_000_000).sum().item() == 3e9
    assert fg.ones(1).expand(10**12).sum().item() == float(np.float32(1e12))
    assert fg.ones(1).expand(10**12).mean().item() == 1.0
    assert fg.ones(1, dtype="float64").expand(2**40 + 1).sum().item() == 2**40 + 1


def test_sum_over_some_expanded_axes_and_its_gradient():
    a = np.array([[1.0], [2.0], [3.0]])
    x = fg.tensor(a, dtype="float64", requires_grad=True)
    y = x.expand(3, 4)
    np.testing.assert_array_equal(y.sum(1).numpy(), np.broadcast_to(a, (3, 4)).sum(1))
    np.testing.assert_array_equal(y.sum(0).numpy(), np.broadcast_to(a, (3, 4)).sum(0))
    assert y.sum(1, keepdim=True).shape == (3, 1)
    s = y.sum()
    assert s.item() == 24.0
    s.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[4.0], [4.0], [4.0]])


def test_integer_sum_of_a_broadcast():
    t = fg.tensor([1, 2]).reshape(2, 1).expand(2, 3)
    assert t.sum().item() == 9 and t.sum().dtype == fg.int64
    assert fg.tensor(7, dtype="int32").expand(5).sum().tolist() == 35
