"""Dtype limits and numbers written into tensors, as PyTorch 2.13 has them (issue 26):
`fg.finfo` / `fg.iinfo`, numbers that do not fit the dtype they are written into (raised
or wrapped exactly where torch raises or wraps), numpy's unsigned arrays, and var/std
with no degrees of freedom. Every expected value below is torch 2.13's."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.errors import ArgumentError

# ---------------------------------------------------------------- finfo / iinfo

FINFO = {  # torch.finfo(d): bits, eps, max, min, tiny, smallest_normal, resolution, dtype
    fg.float32: (
        32,
        1.1920928955078125e-07,
        3.4028234663852886e38,
        -3.4028234663852886e38,
        1.1754943508222875e-38,
        1.1754943508222875e-38,
        1e-06,
        "float32",
    ),
    fg.float64: (
        64,
        2.220446049250313e-16,
        1.7976931348623157e308,
        -1.7976931348623157e308,
        2.2250738585072014e-308,
        2.2250738585072014e-308,
        1e-15,
        "float64",
    ),
}
IINFO = {  # torch.iinfo(d): bits, max, min, dtype
    fg.uint8: (8, 255, 0, "uint8"),
    fg.int8: (8, 127, -128, "int8"),
    fg.int16: (16, 32767, -32768, "int16"),
    fg.int32: (32, 2147483647, -2147483648, "int32"),
    fg.int64: (64, 9223372036854775807, -9223372036854775808, "int64"),
}


@pytest.mark.parametrize("dt", list(FINFO), ids=str)
def test_finfo_is_torchs(dt):
    f = fg.finfo(dt)
    got = (f.bits, f.eps, f.max, f.min, f.tiny, f.smallest_normal, f.resolution, f.dtype)
    assert got == FINFO[dt]
    assert fg.finfo(dt.name).eps == f.eps  # names work as dtypes do elsewhere


def test_finfo_repr_and_default():
    assert repr(fg.finfo(fg.float32)) == (
        "finfo(resolution=1e-06, min=-3.40282e+38, max=3.40282e+38, eps=1.19209e-07, "
        "smallest_normal=1.17549e-38, tiny=1.17549e-38, dtype=float32)"
    )
    assert fg.finfo().dtype == "float32"  # torch: the default dtype


@pytest.mark.parametrize("dt", list(IINFO), ids=str)
def test_iinfo_is_torchs(dt):
    i = fg.iinfo(dt)
    assert (i.bits, i.max, i.min, i.dtype) == IINFO[dt]


def test_iinfo_repr():
    assert repr(fg.iinfo(fg.uint8)) == "iinfo(min=0, max=255, dtype=uint8)"
    assert repr(fg.iinfo(fg.int32)) == "iinfo(min=-2.14748e+09, max=2.14748e+09, dtype=int32)"


@pytest.mark.parametrize(
    "info, dt",
    [(fg.finfo, fg.int32), (fg.finfo, fg.bool), (fg.iinfo, fg.bool), (fg.iinfo, fg.float32)],
)
def test_info_of_the_wrong_kind_is_a_type_error(info, dt):
    with pytest.raises(TypeError, match=info.__name__):  # torch: TypeError
        info(dt)


# ---------------------------------------------------------------- numbers into tensors

OVERFLOW = "value cannot be converted to type {} without overflow"

# (call, torch's result list) or (call, (error class, message part))
CASES = {
    "tensor([2**63 - 1])": (lambda: fg.tensor([2**63 - 1]), [9223372036854775807]),
    "tensor([2**63])": (lambda: fg.tensor([2**63]), (ValueError, "Overflow")),
    "tensor([2**64])": (lambda: fg.tensor([2**64]), (ValueError, "Overflow")),
    "tensor([-2**63 - 1])": (lambda: fg.tensor([-(2**63) - 1]), (ValueError, "Overflow")),
    "tensor(2**64)": (lambda: fg.tensor(2**64), (ValueError, "Overflow")),
    "tensor([1.5, 2**64])": (lambda: fg.tensor([1.5, 2**64]), [1.5, 1.8446744073709552e19]),
    "tensor([2**64], f32)": (
        lambda: fg.tensor([2**64], dtype=fg.float32),
        [1.8446744073709552e19],
    ),
    "tensor([1.5e300], f32)": (lambda: fg.tensor([1.5e300], dtype=fg.float32), [math.inf]),
    "tensor([300], u8)": (lambda: fg.tensor([300], dtype=fg.uint8), OVERFLOW.format("uint8")),
    "tensor(300, u8)": (lambda: fg.tensor(300, dtype=fg.uint8), OVERFLOW.format("uint8")),
    "tensor([-1], u8)": (lambda: fg.tensor([-1], dtype=fg.uint8), [255]),
    "tensor([-255], u8)": (lambda: fg.tensor([-255], dtype=fg.uint8), [1]),
    "tensor([-256], u8)": (lambda: fg.tensor([-256], dtype=fg.uint8), OVERFLOW.format("uint8")),
    "tensor([200], i8)": (lambda: fg.tensor([200], dtype=fg.int8), OVERFLOW.format("int8")),
    "tensor([-128], i8)": (lambda: fg.tensor([-128], dtype=fg.int8), [-128]),
    "tensor([40000], i16)": (lambda: fg.tensor([40000], dtype=fg.int16), OVERFLOW.format("int16")),
    "tensor([2**40], i32)": (lambda: fg.tensor([2**40], dtype=fg.int32), OVERFLOW.format("int32")),
    "tensor([300.7], u8)": (lambda: fg.tensor([300.7], dtype=fg.uint8), OVERFLOW.format("uint8")),
    "tensor([-1.0], u8)": (lambda: fg.tensor([-1.0], dtype=fg.uint8), OVERFLOW.format("uint8")),
    "tensor([nan], i64)": (
        lambda: fg.tensor([math.nan], dtype=fg.int64),
        OVERFLOW.format("int64"),
    ),
    "tensor([1e19], i64)": (lambda: fg.tensor([1e19], dtype=fg.int64), OVERFLOW.format("int64")),
    "tensor([300], bool)": (lambda: fg.tensor([300], dtype=fg.bool), [True]),
    "tensor(np.int64(300), u8)": (
        lambda: fg.tensor(np.int64(300), dtype=fg.uint8),
        OVERFLOW.format("uint8"),
    ),
    "new_tensor([300]) of u8": (
        lambda: fg.zeros(2, dtype=fg.uint8).new_tensor([300]),
        OVERFLOW.format("uint8"),
    ),
    "as_tensor([300], u8)": (
        lambda: fg.as_tensor([300], dtype=fg.uint8),
        OVERFLOW.format("uint8"),
    ),
    # an array given with dtype= is cast, with wrap-around, in torch too
    "tensor(np.array([300]), u8)": (lambda: fg.tensor(np.array([300]), dtype=fg.uint8), [44]),
    "full 300 u8": (lambda: fg.full((2,), 300, dtype=fg.uint8), OVERFLOW.format("uint8_t")),
    "full -1 u8": (lambda: fg.full((2,), -1, dtype=fg.uint8), [255, 255]),
    "full 200 i8": (lambda: fg.full((2,), 200, dtype=fg.int8), OVERFLOW.format("int8_t")),
    "full 2**40 i32": (lambda: fg.full((2,), 2**40, dtype=fg.int32), OVERFLOW.format("int")),
    "full 2**63": (lambda: fg.full((2,), 2**63), OVERFLOW.format("int64_t")),
    "full 2**64": (lambda: fg.full((2,), 2**64), (OverflowError, "too big")),
    "full 300.5 u8": (lambda: fg.full((2,), 300.5, dtype=fg.uint8), OVERFLOW.format("uint8_t")),
    "full nan i32": (lambda: fg.full((2,), math.nan, dtype=fg.int32), OVERFLOW.format("int")),
    "full 1e300 f32": (lambda: fg.full((2,), 1e300, dtype=fg.float32), OVERFLOW.format("float")),
    "full inf f32": (lambda: fg.full((2,), math.inf, dtype=fg.float32), [math.inf] * 2),
    "full 2**63 f64": (lambda: fg.full((1,), 2**63, dtype=fg.float64), [9.223372036854776e18]),
    "full 300 bool": (lambda: fg.full((1,), 300, dtype=fg.bool), [True]),
    "full_like 300 u8": (
        lambda: fg.full_like(fg.zeros(2, dtype=fg.uint8), 300),
        OVERFLOW.format("uint8_t"),
    ),
    "new_full 300 u8": (
        lambda: fg.zeros(2, dtype=fg.uint8).new_full((2,), 300),
        OVERFLOW.format("uint8_t"),
    ),
    "fill_ 300 u8": (
        lambda: fg.zeros(2, dtype=fg.uint8).fill_(300),
        OVERFLOW.format("uint8_t"),
    ),
    "fill_ -1 u8": (lambda: fg.zeros(2, dtype=fg.uint8).fill_(-1), [255, 255]),
    "setitem 300 u8": (
        lambda: fg.zeros(2, dtype=fg.uint8).__setitem__(0, 300),
        OVERFLOW.format("uint8_t"),
    ),
    "masked_fill 300 u8": (
        lambda: fg.zeros(1, dtype=fg.uint8).masked_fill(fg.tensor([True]), 300),
        OVERFLOW.format("uint8_t"),
    ),
    # arithmetic wraps in torch too
    "u8 + 300": (lambda: fg.zeros(2, dtype=fg.uint8) + 300, [44, 44]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_numbers_into_tensors_as_torch(name):
    call, want = CASES[name]
    if isinstance(want, list):
        assert call().tolist() == want
        return
    kind, part = want if isinstance(want, tuple) else (RuntimeError, want)
    with pytest.raises(kind, match=part.replace("(", r"\(")) as info:
        call()
    if kind is RuntimeError:
        assert isinstance(info.value, ArgumentError)


# ---------------------------------------------------------------- numpy unsigned arrays


@pytest.mark.parametrize(
    "dt, values",
    [(np.uint16, [1, 65535]), (np.uint32, [1, 4294967295]), (np.uint64, [1, 2**63 - 1])],
)
def test_unsigned_arrays_become_int64_with_their_values(dt, values):
    t = fg.tensor(np.array(values, dtype=dt))  # torch keeps uint16/32/64; fusegrad has int64
    assert t.dtype is fg.int64 and t.tolist() == values


def test_uint64_values_beyond_int64_raise_naming_the_dtype():
    big = np.array([1, 2**64 - 1], dtype=np.uint64)
    for make in (fg.tensor, fg.as_tensor):
        with pytest.raises(OverflowError, match="uint64"):
            make(big)
    with pytest.raises(OverflowError):
        fg.tensor(np.uint64(2**64 - 1))  # a numpy number, as a Python int would
    # dtype= is a cast, with wrap-around, as torch's: tensor(big, dtype=int64) is [1, -1]
    assert fg.tensor(big, dtype=fg.int64).tolist() == [1, -1]


def test_from_numpy_of_an_unsigned_array_says_what_to_do():
    with pytest.raises(TypeError, match="uint16.*fusegrad.tensor"):
        fg.from_numpy(np.array([1], dtype=np.uint16))


# ---------------------------------------------------------------- var / std without freedom

DOF = "degrees of freedom is <= 0"


@pytest.mark.parametrize(
    "op, call, want",
    [
        ("var", lambda: fg.tensor([1.0]).var(), [math.nan]),
        ("std", lambda: fg.tensor([1.0]).std(), [math.nan]),
        ("var", lambda: fg.tensor([1.0, 2.0]).var(correction=2), [math.inf]),
        ("std", lambda: fg.tensor([1.0, 2.0]).std(correction=3), [math.inf]),
        ("var", lambda: fg.ones(3, 1).var(1), [math.nan] * 3),
        ("var_mean", lambda: fg.var_mean(fg.tensor([1.0]))[0], [math.nan]),
        ("std_mean", lambda: fg.std_mean(fg.tensor([1.0]))[0], [math.nan]),
    ],
)
def test_var_without_degrees_of_freedom_warns_as_torch(op, call, want):
    with pytest.warns(UserWarning, match=rf"^{op}\(\): {DOF}\. Correction should be strictly"):
        got = call()
    np.testing.assert_array_equal(np.atleast_1d(got.numpy()), want)


def test_var_with_freedom_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fg.tensor([1.0, 2.0]).var(correction=0).item() == 0.25
        assert fg.ones(2, 3).var(dim=1, correction=2.5).tolist() == [0.0, 0.0]


def test_the_warning_names_the_users_line():
    with pytest.warns(UserWarning, match=DOF) as record:
        fg.tensor([1.0]).var()
    assert record[0].filename == __file__


@pytest.mark.parametrize("name", ["scalars", "typeinfo"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"fusegrad.{name}"))
    assert result.attempted > 0 and result.failed == 0
