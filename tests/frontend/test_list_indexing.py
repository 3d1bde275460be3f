"""Indexing with Python lists as torch reads them: nested lists, lists holding tensors,
tuples of positions, ranges, and a list that holds a sequence, tensor, slice, None or ... read
as a tuple of indices. Values and gradients (of sum(y * arange)) are torch 2.13's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusegrad as fg

A = np.arange(12.0).reshape(2, 3, 2)
T = fg.tensor

# (index, result shape, result values, gradient of x)
GET_CASES = [
    ("[[[0, 1], [1, 0]]]", (2, 2), [2, 3, 6, 7], [0, 0, 0, 1, 0, 0, 2, 3, 0, 0, 0, 0]),
    ("[[T(1), T(0)]]", (2,), [6, 7], [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]),
    ("[[[T(1)], [T(0)]], 1]", (2, 1, 2), [8, 9, 2, 3], [0, 0, 2, 3, 0, 0, 0, 0, 0, 1, 0, 0]),
    ("[[slice(0, 1), [2, 0]]]", (1, 2, 2), [4, 5, 0, 1], [2, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
    (
        "[[..., [1, 0]]]",
        (2, 3, 2),
        [1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10],
        [1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10],
    ),
    ("[(0, 1), (2, 2)]", (2, 2), [4, 5, 10, 11], [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 3]),
    # a range is the list of its ints, as torch reads it (a negative step too)
    ("[range(2), :, [1, 0]]", (2, 3), [1, 3, 5, 6, 8, 10], [0, 0, 0, 1, 0, 2, 3, 0, 4, 0, 5, 0]),
    (
        "[range(1, -1, -1)]",
        (2, 3, 2),
        [6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5],
        [6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5],
    ),
    ("[range(0)]", (0, 3, 2), [], [0] * 12),
    ("[:, range(2)]", (2, 2, 2), [0, 1, 2, 3, 6, 7, 8, 9], [0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 0, 0]),
    (
        "[[1, 0, 1]]",
        (3, 3, 2),
        [6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
        [6, 7, 8, 9, 10, 11, 12, 14, 16, 18, 20, 22],
    ),
]

# (index, value v, result of y[index] = 2 v, gradient of x, gradient of v)
SET_CASES = [
    (
        "[range(2), 1, 0]",
        [5.0, 6.0],
        [0, 1, 10, 3, 4, 5, 6, 7, 12, 9, 10, 11],
        [0, 1, 0, 3, 4, 5, 6, 7, 0, 9, 10, 11],
        [4, 16],
    ),
    (
        "[[[0, 1], [1, 2]]]",
        [5.0, 6.0],
        [0, 1, 10, 12, 4, 5, 6, 7, 8, 9, 10, 12],
        [0, 1, 0, 0, 4, 5, 6, 7, 8, 9, 0, 0],
        [24, 28],
    ),
    (
        "[[T(1), T(0)]]",
        3.0,
        [0, 1, 2, 3, 4, 5, 6, 6, 8, 9, 10, 11],
        [0, 1, 2, 3, 4, 5, 0, 0, 8, 9, 10, 11],
        [26],
    ),
    (
        "[(0, 1), :, [[1], [0]]]",
        [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
        [2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [2, 10, 18, 26, 34, 42],
    ),
]


def _weights(y):
    return fg.tensor(np.arange(y.numel(), dtype=np.float64).reshape(y.shape))


@pytest.mark.parametrize("index, shape, values, grad", GET_CASES, ids=[c[0] for c in GET_CASES])
def test_get_with_lists(index, shape, values, grad):
    x = fg.tensor(A, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation torch also warns of
        y = eval("x" + index, {"x": x, "T": T, "np": np})
    (y * _weights(y)).sum().backward()
    assert tuple(y.shape) == shape
    assert y.numpy().ravel().tolist() == values
    assert x.grad.numpy().ravel().tolist() == grad


@pytest.mark.parametrize(
    "index, value, result, grad, value_grad", SET_CASES, ids=[c[0] for c in SET_CASES]
)
def test_set_with_lists(index, value, result, grad, value_grad):
    x = fg.tensor(A, requires_grad=True)
    v = fg.tensor(value, dtype=fg.float64, requires_grad=True)
    y = x * 1.0
    exec("y" + index + " = v * 2", {"y": y, "v": v, "T": T})
    (y * _weights(y)).sum().backward()
    assert y.numpy().ravel().tolist() == result
    assert x.grad.numpy().ravel().tolist() == grad
    assert v.grad.numpy().ravel().tolist() == value_grad


def test_a_list_holding_sequences_is_a_tuple_and_warns_as_torch():
    x = fg.tensor(A)
    with pytest.warns(UserWarning, match="non-tuple sequence for multidimensional indexing"):
        y = x[[[0, 1], [1, 0]]]
    assert y.tolist() == x[[0, 1], [1, 0]].tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x[[1, 0]].shape == (2, 3, 2)  # a list of ints is one index: no warning
    # from 32 items on, a list is one index whatever it holds (numpy's old rule)
    many = x[[[0]] * 32]
    assert many.shape == (32, 1, 3, 2)
