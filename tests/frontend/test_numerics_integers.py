"""Integers as torch: min/argmin/minimum exact at the ends of the range, 0-d promotion."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg

I32 = np.iinfo(np.int32)
I64 = np.iinfo(np.int64)


@pytest.mark.parametrize("dtype, info", [("int32", I32), ("int64", I64)])
def test_min_max_at_the_ends_of_the_range(dtype, info):
    a = np.array([0, info.min, 5, info.max, -1], dtype=dtype)
    x = fg.tensor(a, dtype=dtype)
    assert x.min().item() == info.min
    assert x.max().item() == info.max
    assert x.argmin().item() == 1
    assert x.argmax().item() == 3
    assert x.amin(0).item() == info.min
    values, index = x.min(0)
    assert values.item() == info.min and index.item() == 1
    b = np.array([info.min, info.max, 0, info.min, 3], dtype=dtype)
    np.testing.assert_array_equal(x.minimum(fg.tensor(b, dtype=dtype)).numpy(), np.minimum(a, b))
    np.testing.assert_array_equal(x.maximum(fg.tensor(b, dtype=dtype)).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(x.clamp(min=-1, max=4).numpy(), np.clip(a, -1, 4))


def test_int_min_rows_and_first_index():
    a = np.array([[3, -(2**31), -(2**31)], [7, 7, 1]], dtype=np.int32)
    x = fg.tensor(a, dtype="int32")
    np.testing.assert_array_equal(x.amin(1).numpy(), a.min(1))
    assert x.argmin(1).tolist() == [1, 2]
    assert x.argmax(1).tolist() == [0, 0]


@pytest.mark.parametrize(
    "zero, dims, want",
    [
        ("int32", "bool", "int32"),
        ("int64", "bool", "int64"),
        ("float64", "int32", "float64"),
        ("float32", "int64", "float32"),
        ("int64", "int32", "int32"),  # same kind: the dimensioned tensor wins
        ("float64", "float32", "float32"),
        ("bool", "int32", "int32"),
    ],
)
def test_zero_dim_tensor_promotion_as_torch(zero, dims, want):
    z = fg.tensor(1, dtype=zero)
    d = fg.tensor([1, 0], dtype=dims)
    assert (z + d).dtype.name == want
    assert (d * z).dtype.name == want


def test_bool_plus_int32_zero_dim_value():
    out = fg.tensor([True, False]) + fg.tensor(2**31 - 2, dtype="int32")
    assert out.dtype == fg.int32 and out.tolist() == [2**31 - 1, 2**31 - 2]
