"""`Tensor.view(dtype)`: torch's bit reinterpretation (frontend/movement.py `_view_dtype`),
its shapes, strides, errors and lack of a gradient. The expected bits are IEEE 754's,
computed here with numpy; the messages are torch 2.14.1's."""

import numpy as np
import pytest

import fusegrad as fg


def test_same_itemsize_keeps_the_shape_and_reads_the_bits():
    x = fg.arange(6, dtype=fg.float32).reshape(2, 3)
    got = x.view(fg.int32)
    assert got.dtype == fg.int32 and got.shape == (2, 3)
    want = np.arange(6, dtype=np.float32).reshape(2, 3).view(np.int32)
    assert got.tolist() == want.tolist()
    assert got.tolist()[0][1] == 1065353216  # 1.0f's bits
    back = got.view(fg.float32)
    assert back.tolist() == x.tolist()


def test_signed_zero_nan_and_infinities_keep_their_bits():
    x = fg.tensor([-0.0, float("inf"), float("-inf"), float("nan")], dtype=fg.float64)
    bits = x.view(fg.int64).tolist()
    want = np.array([-0.0, np.inf, -np.inf, np.nan]).view(np.int64).tolist()
    assert bits == want
    assert bits[0] == -(2**63)


def test_a_transposed_view_keeps_its_strides():
    x = fg.arange(6, dtype=fg.float32).reshape(2, 3).t()
    got = x.view(fg.int32)
    assert got.shape == (3, 2) and got.stride() == (1, 3)
    assert got.tolist() == np.arange(6, dtype=np.float32).reshape(2, 3).T.view(np.int32).tolist()


def test_to_a_smaller_itemsize_the_last_dim_grows():
    x = fg.tensor([[1.0, -2.0], [0.5, 3.0]])
    got = x.view(fg.uint8)
    assert got.shape == (2, 8) and got.stride() == (8, 1)
    arr = np.array([[1.0, -2.0], [0.5, 3.0]], dtype=np.float32)
    assert got.tolist() == arr.view(np.uint8).tolist()
    assert x.view(fg.float16).shape == (2, 4)
    assert fg.tensor([-1, 255], dtype=fg.int16).view(fg.uint8).tolist() == [255, 255, 255, 0]
    assert fg.tensor([-1, 255], dtype=fg.int16).view(fg.int8).tolist() == [-1, -1, -1, 0]


def test_to_a_larger_itemsize_the_last_dim_shrinks():
    x = fg.ones(2, 4)
    got = x.view(fg.float64)
    assert got.shape == (2, 2) and got.stride() == (2, 1)
    assert got.tolist() == [[np.ones(2, np.float32).view(np.float64)[0]] * 2] * 2
    b = fg.tensor([0, 0, 128, 63], dtype=fg.uint8).view(fg.float32)  # 1.0f, little-endian
    assert b.shape == (1,) and b.item() == 1.0


def test_half_floats_round_trip():
    x = fg.tensor([1.5, -2.0, 65504.0])
    assert (
        x.half().view(fg.int16).tolist()
        == np.array([1.5, -2.0, 65504.0], np.float16).view(np.int16).tolist()
    )
    assert x.view(fg.bfloat16).view(fg.float32).tolist() == [1.5, -2.0, 65504.0]
    assert x.view(fg.bfloat16).shape == (6,)


def test_bool_reads_any_nonzero_byte_as_true():
    got = fg.tensor([0, 1, 2], dtype=fg.uint8).view(fg.bool)
    assert got.dtype == fg.bool and got.tolist() == [False, True, True]
    assert fg.tensor([True, False]).view(fg.int8).tolist() == [1, 0]


def test_no_gradient_even_to_its_own_dtype():
    y = fg.ones(3, requires_grad=True)
    for dt in (fg.int32, fg.float32, fg.float16):
        assert not y.view(dt).requires_grad
    same = y.view(fg.float32)
    assert same.shape == (3,) and same.tolist() == [1.0, 1.0, 1.0]


def test_the_view_is_computed_from_a_lazy_value():
    x = fg.arange(4, dtype=fg.float32) * 2 + 1
    assert (
        x.view(fg.int32).tolist()
        == (np.arange(4, dtype=np.float32) * 2 + 1).view(np.int32).tolist()
    )


@pytest.mark.parametrize(
    ("make", "dtype", "message"),
    [
        (
            lambda: fg.zeros(2, 3),
            fg.float64,
            "self.size(-1) must be divisible by 2 to view Float as Double (different element "
            "sizes), but got 3",
        ),
        (
            lambda: fg.tensor(1.0),
            fg.float16,
            "self.dim() cannot be 0 to view Float as Half (different element sizes)",
        ),
        (
            lambda: fg.zeros(2, 3).t(),
            fg.float16,
            "self.stride(-1) must be 1 to view Float as Half (different element sizes), but got 3",
        ),
        (
            lambda: fg.zeros(1, 3).t(),
            fg.float16,
            "self.stride(-1) must be 1 to view Float as Half (different element sizes), but got 3",
        ),
        (
            lambda: fg.zeros(2, 3)[:, :2],
            fg.float64,
            "self.stride(0) must be divisible by 2 to view Float as Double (different element "
            "sizes), but got 3",
        ),
        (
            lambda: fg.zeros(2, 4)[:, 1:3],
            fg.float64,
            "self.storage_offset() must be divisible by 2 to view Float as Double (different "
            "element sizes), but got 1",
        ),
        (
            lambda: fg.zeros(2, 4)[:, ::2],
            fg.int16,
            "self.stride(-1) must be 1 to view Float as Short (different element sizes), but got 2",
        ),
    ],
)
def test_torchs_errors(make, dtype, message):
    with pytest.raises(RuntimeError) as info:
        make().view(dtype)
    assert message in str(info.value)
