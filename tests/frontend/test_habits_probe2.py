"""Ordinary PyTorch habits found wrong or missing by a second probe of fusegrad against
PyTorch 2.13: dtypes inferred from numpy scalars, dtype properties, numpy-style keyword
aliases, and the small helpers users reach for. Expected values are PyTorch's."""

from __future__ import annotations

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
