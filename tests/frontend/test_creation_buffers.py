"""fg.frombuffer and fg.empty_strided (frontend/creation.py): values, dtypes and
torch's errors (their texts as torch 2.14 gives them)."""

from __future__ import annotations

import array

import pytest

import fusegrad as fg

INTS = bytearray(b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00")  # int32 1, 2, 3


def test_frombuffer_reads_count_elements_from_offset():
    assert fg.frombuffer(INTS, dtype=fg.int32).tolist() == [1, 2, 3]
    t = fg.frombuffer(INTS, dtype=fg.int32, count=2, offset=4)
    assert t.dtype == fg.int32 and t.tolist() == [2, 3]
    assert fg.frombuffer(INTS, dtype=fg.int32, count=-2).tolist() == [1, 2, 3]
    assert fg.frombuffer(INTS, dtype=fg.uint8, count=2, offset=4).tolist() == [2, 0]


def test_frombuffer_copies_and_takes_requires_grad():
    data = array.array("f", [1.5, 2.5])
    t = fg.frombuffer(data, dtype=fg.float32, requires_grad=True)
    assert t.requires_grad and t.tolist() == [1.5, 2.5]
    data[0] = 7.0
    assert t.tolist() == [1.5, 2.5]  # a copy here (torch shares the memory)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"offset": -1},
            r"offset \(-1 bytes\) must be non-negative and no greater than buffer "
            r"length \(12 bytes\) minus 1",
        ),
        ({"offset": 12}, r"offset \(12 bytes\) must be non-negative"),
        (
            {"count": 4},
            r"requested buffer length \(4 \* 4 bytes\) after offset \(0 bytes\) must "
            r"not be greater than actual buffer length \(12 bytes\)",
        ),
        ({"count": 0}, r"both buffer length \(12\) and count \(0\) must not be 0"),
        (
            {"offset": 2},
            r"buffer length \(10 bytes\) after offset \(2 bytes\) must be a multiple "
            r"of element size \(4\)",
        ),
    ],
)
def test_frombuffer_errors_as_torch(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fg.frombuffer(INTS, dtype=fg.int32, **kwargs)


def test_frombuffer_refuses_empty_buffers_and_non_buffers():
    with pytest.raises(ValueError, match=r"both buffer length \(0\) and count \(-1\)"):
        fg.frombuffer(bytearray(), dtype=fg.int32)
    with pytest.raises(ValueError, match="does not implement Python buffer protocol"):
        fg.frombuffer([1, 2], dtype=fg.int32)


def test_empty_strided_has_the_size_and_row_major_strides():
    t = fg.empty_strided((2, 3), (1, 2))
    assert t.shape == (2, 3) and t.dtype == fg.float32 and t.stride() == (3, 1)
    t = fg.empty_strided((2, 3), (3, 1), dtype=fg.float64, requires_grad=True)
    assert t.dtype == fg.float64 and t.requires_grad


def test_empty_strided_errors():
    with pytest.raises(RuntimeError, match=r"dimensionality of sizes \(2\) must match"):
        fg.empty_strided((2, 3), (1,))
    with pytest.raises(RuntimeError, match="negative stride"):
        fg.empty_strided((2, 3), (-1, 1))
