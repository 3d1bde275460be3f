"""uint8, int8 and int16 as PyTorch has them, end to end.

Every expected value below was checked against torch 2.13 (CPU); where torch imports the
test also compares with it. The kernels run on the CPU (LLVM) and, through the CUDA
emulator, as the GPU's CUDA C (`emulate`, from tests/pipeline/test_cuda_emulated.py).
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.errors import DTypeError
from fusegrad.ir.dtypes import int8, int16, int32, promote, uint8

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pipeline"))
import test_cuda_emulated as emulated  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def u8(values):
    return fg.tensor(np.array(values, dtype=np.uint8))


def i8(values):
    return fg.tensor(np.array(values, dtype=np.int8))


def check(t, values, dtype):
    assert t.dtype is dtype, f"{t.dtype} is not {dtype}"
    np.testing.assert_array_equal(t.numpy(), np.array(values, dtype=dtype.np))


# ---------------------------------------------------------------- names and conversions


def test_the_dtypes_have_torchs_names():
    assert (fg.uint8, fg.int8, fg.int16, fg.short) == (uint8, int8, int16, int16)
    assert repr(fg.uint8) == "fusegrad.uint8"
    t = fg.tensor([1.7, -2.2, 3.0])
    assert (t.byte().dtype, t.char().dtype, t.short().dtype) == (fg.uint8, fg.int8, fg.int16)
    assert fg.tensor([1], dtype="short").dtype is fg.int16


@pytest.mark.parametrize("np_dtype", [np.uint8, np.int8, np.int16])
def test_numpy_arrays_keep_their_dtype(np_dtype):
    a = np.array([[0, 1, 100], [7, 2, 3]], dtype=np_dtype)
    for t in (fg.tensor(a), fg.from_numpy(a)):
        assert t.dtype.np == np.dtype(np_dtype).name
        assert t.numpy().dtype == np_dtype
        np.testing.assert_array_equal(t.numpy(), a)


def test_a_list_with_a_dtype():
    check(fg.tensor([1, 2, 255], dtype=fg.uint8), [1, 2, 255], uint8)
    check(fg.tensor([-3, 2], dtype=fg.int8), [-3, 2], int8)


@pytest.mark.cpu_device  # torch prints device='cuda:0' too
def test_repr_names_the_dtype_as_torch_does():
    assert repr(u8([250, 3])) == "tensor([250,   3], dtype=fusegrad.uint8)"
    assert repr(fg.tensor([1, 2], dtype=fg.int16)) == "tensor([1, 2], dtype=fusegrad.int16)"


def test_save_and_load_keep_the_dtype():
    f = io.BytesIO()
    fg.save({"img": u8([0, 128, 255]), "d": i8([-128, 5])}, f)
    f.seek(0)
    got = fg.load(f)
    check(got["img"], [0, 128, 255], uint8)
    check(got["d"], [-128, 5], int8)


# ---------------------------------------------------------------- promotion


def test_promotion_table_is_torchs():
    assert promote(uint8, int8) is int16
    assert promote(uint8, fg.bool) is uint8
    assert promote(uint8, int16) is int16
    assert promote(int8, int32) is int32
    assert promote(uint8, fg.float32) is fg.float32
    u, s = u8([250, 3]), i8([-128, 5])
    check(u + s, [122, 8], int16)
    check(u + fg.tensor([True, False]), [251, 3], uint8)
    check(u + 300, [38, 47], uint8)  # the scalar wraps into uint8 as the sum does
    check(u + fg.tensor(5), [255, 8], uint8)  # an int64 0-d tensor: the dims win
    check(s + fg.tensor(5, dtype=fg.uint8), [-123, 10], int8)
    check(u * 1.5, [375.0, 4.5], fg.float32)
    check(u + fg.tensor(1.5), [251.5, 4.5], fg.float32)
    check(fg.tensor([1, 2], dtype=fg.int32) + 2**40, [1, 2], int32)  # torch wraps it too


def test_arithmetic_wraps_on_overflow():
    u, s = u8([250, 3]), i8([-128, 5])
    check(u + 10, [4, 13], uint8)
    check(u * 2, [244, 6], uint8)
    check(-u, [6, 253], uint8)
    check(u - 5, [245, 254], uint8)
    check(u8([200, 100]) * u8([2, 3]), [144, 44], uint8)
    check(i8([100]) + i8([100]), [-56], int8)
    check(-s, [-128, -5], int8)
    check(fg.tensor([30000], dtype=fg.int16) * 2, [-5536], int16)


def test_division():
    u, s = u8([250, 3]), i8([-128, 5])
    check(u / 2, [125.0, 1.5], fg.float32)  # true division gives the default float
    check(fg.floor_divide(u, 3), [83, 1], uint8)  # unsigned: 250, not -6, divided
    check(fg.floor_divide(s, i8([-1, 2])), [-128, 2], int8)  # -128 / -1 wraps, no trap
    check(fg.remainder(u, 7), [5, 3], uint8)


def test_comparisons_are_unsigned_for_uint8():
    u = u8([250, 3])
    check(u < 200, [False, True], fg.bool)
    check(u < u8([251, 2]), [True, False], fg.bool)
    check(u >= u8([250, 4]), [True, False], fg.bool)
    check(u == 250, [True, False], fg.bool)


def test_reductions():
    u, s = u8([250, 3, 255]), i8([-128, 5, 0])
    check(u.sum(), 508, fg.int64)  # torch's sum of uint8 is int64: no wrap
    check(s.sum(), -123, fg.int64)
    check(fg.tensor([30000, 30000], dtype=fg.int16).sum(), 60000, fg.int64)
    check(u.max(), 255, uint8)  # unsigned max: 255 beats 3
    check(s.max(), 5, int8)
    check(u8([[1, 2], [0, 7]]).amax(1), [2, 7], uint8)
    assert u.argmax().item() == 2
    check(u.sum(dtype=fg.uint8), 252, uint8)  # asked for: wraps, as torch's
    check(u8([0, 5, 200]).min(), 0, uint8)
    with pytest.raises(DTypeError, match="float"):
        u.mean()


def test_bitwise_ops_and_shifts():
    u, s = u8([250, 3]), i8([-128, 5])
    check(u & 3, [2, 3], uint8)
    check(u | u8([1, 1]), [251, 3], uint8)  # the top bit of a uint8 survives
    check(u ^ 1, [251, 2], uint8)
    check(u8([255, 170]) ^ u8([15, 255]), [240, 85], uint8)
    check(u << 1, [244, 6], uint8)
    check(u >> 1, [125, 1], uint8)  # logical: 250 >> 1 is 125, not -3
    check(s >> 1, [-64, 2], int8)  # arithmetic
    check(~u, [5, 252], uint8)
    check(~s, [127, -6], int8)
    check(s & i8([-1, 4]), [-128, 4], int8)


def test_orderings_do_not_wrap():
    u, s = u8([0, 5, 200, 3]), i8([-128, 5, 127, 0])
    top = u.topk(2)
    check(top.values, [200, 5], uint8)
    check(top.indices, [2, 1], fg.int64)
    check(u.sort(descending=True).values, [200, 5, 3, 0], uint8)
    check(s.sort(descending=True).values, [127, 5, 0, -128], int8)
    check(u.cummin(0).values, [0, 0, 0, 0], uint8)
    check(u.cummax(0).values, [0, 5, 200, 200], uint8)
    check(s.cummin(0).values, [-128, -128, -128, -128], int8)


def test_casts_from_float_follow_torch():
    x = fg.tensor([-1.0, 255.0, 256.0, 3.7, -3.7, 300.5])
    check(x.byte(), [255, 255, 0, 3, 253, 44], uint8)
    check(fg.tensor([-1.0, 200.0, 3.7, -3.7]).char(), [-1, -56, 3, -3], int8)
    check(fg.tensor([-1.0, 40000.0]).short(), [-1, -25536], int16)


def test_casts_between_integers_widen_by_sign():
    u, s = u8([250, 3]), i8([-128, 5])
    check(u.float(), [250.0, 3.0], fg.float32)  # uitofp: 250, not -6
    check(u.double(), [250.0, 3.0], fg.float64)
    check(s.float(), [-128.0, 5.0], fg.float32)
    check(u.long(), [250, 3], fg.int64)  # zext
    check(s.long(), [-128, 5], fg.int64)  # sext
    check(s.byte(), [128, 5], uint8)
    check(u.char(), [-6, 3], int8)
    check(fg.tensor([300, -1]).byte(), [44, 255], uint8)
    check(u.bool(), [True, True], fg.bool)


def test_masks_must_be_bool_and_the_error_says_so():
    x = fg.tensor([1.0, 2.0])
    with pytest.raises(DTypeError, match="bool"):
        fg.where(u8([1, 0]), x, x)
    with pytest.raises(IndexError, match="bool mask"):
        x[u8([1, 0])]
    with pytest.raises(IndexError, match="bool mask"):
        x[np.array([1, 0], dtype=np.uint8)]
    check(x[i8([1, 0])], [2.0, 1.0], fg.float32)  # int8 indices are positions, as in torch


def test_integer_dtypes_cannot_require_grad():
    with pytest.raises(DTypeError):
        fg.tensor([1, 2], dtype=fg.uint8, requires_grad=True)


@pytest.mark.skipif(torch is None, reason="cross-check against torch where it is installed")
def test_the_same_as_torch():
    a = np.array([250, 3, 0, 128], dtype=np.uint8)
    b = np.array([-128, 5, -1, 127], dtype=np.int8)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    fa, fb = fg.tensor(a), fg.tensor(b)
    for f, t in [
        (fa + fb, ta + tb),
        (fa * fb, ta * tb),
        (fa - 7, ta - 7),
        (fa + 1000, ta + 1000),
        (fb * 3, tb * 3),
        (fa < fb, ta < tb),
        (fa.sum(), ta.sum()),
        (fa.float() * 0.5, ta.float() * 0.5),
    ]:
        assert str(f.dtype).split(".")[1] == str(t.dtype).split(".")[1]
        np.testing.assert_array_equal(f.numpy(), t.numpy())


# ---------------------------------------------------------------- the CUDA kernels


def _gpu_case():
    u = u8(np.arange(0, 256, 9))
    s = fg.tensor(np.arange(-128, 128, 9).astype(np.int8))
    h = fg.tensor(np.arange(-30000, 30000, 2100).astype(np.int16))
    x = fg.tensor(np.linspace(-3, 300, 29).astype(np.float32))
    return [
        u + s,  # int16
        u * 3 + 7,  # wraps
        (u < 100) | (s < 0),
        # unsigned division, by zero too (a lazy divisor: a known 0 raises, as in torch)
        fg.floor_divide(u, u8(np.arange(29) % 5 + 1) - 1),
        fg.floor_divide(s, fg.tensor(np.full(29, -1, dtype=np.int8))),  # -128 / -1
        x.byte(),
        x.char(),
        h * 2,
        u.float() + s.float(),
        u.long() + h,
        u.max(),
        s.max(),
        h.amax(0, keepdim=True),
        # long rows: reductions split over a block's threads (warp shuffles of bytes)
        u8(np.arange(9 * 700) * 37 % 256).reshape(9, 700).amax(1),
        fg.tensor((np.arange(5000) * 53 % 256 - 128).astype(np.int8)).max(),
        u8(np.arange(5000) * 7 % 256).sum(dtype=fg.uint8),
    ]


def test_cuda_kernels_of_small_ints_match_the_cpu():
    tensors = _gpu_case()
    got, kernels = emulated.emulate(tensors)
    emulated.compare(got, tensors)
    source = "\n".join(k.source for k in kernels)
    assert "unsigned char" in source and "signed char" in source and "short" in source
