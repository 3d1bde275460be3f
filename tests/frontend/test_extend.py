"""fusegrad.extend: the tensor-level API nn builds its own ops with."""

from __future__ import annotations

import numpy as np

import fusegrad as fg
from fusegrad.extend import custom_gradient, gather_rows, host_data, materialize


def test_custom_gradient_replaces_the_derived_one_and_leaves_equal_nodes_alone():
    x = fg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = custom_gradient(x.abs(), [x], lambda g, x: [g * 10], own_node=True)
    z = x.abs()  # the same computation built elsewhere keeps abs's own gradient
    (y.sum() + z.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [11.0, 9.0, 11.0])


def test_custom_gradient_on_a_view_gets_a_node_of_its_own():
    x = fg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = custom_gradient(x.reshape(4), [x], lambda g, x: [g.reshape(2, 2) * 0 + 7])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 7.0))
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0, 3.0, 4.0])


def test_gather_materialize_and_host_data():
    table = fg.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    rows = gather_rows(table, fg.tensor([2, 0]))
    np.testing.assert_array_equal(rows.numpy(), [[6, 7, 8], [0, 1, 2]])
    kept = materialize(table * 2, "a test asked")
    np.testing.assert_array_equal(kept.numpy(), np.arange(12).reshape(4, 3) * 2)
    assert host_data(table) is not None and host_data(table + 1) is None
