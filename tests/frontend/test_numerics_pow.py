"""x ** y as torch.pow: exact integral powers, signs of negative bases, C's special cases,
gradients (at 0 too), integer powers that stay integers."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg

INF, NAN = math.inf, math.nan


def c_pow(x: float, y: float) -> float:
    """C99 pow (what torch.pow calls for tensor exponents), in float64."""
    if y == 0 or x == 1:
        return 1.0
    if math.isnan(x) or math.isnan(y):
        return NAN
    integral = math.isfinite(y) and float(y).is_integer()
    odd = integral and abs(y) < 2**53 and int(y) % 2 == 1
    if x == 0:
        sign = -1.0 if (math.copysign(1, x) < 0 and odd) else 1.0
        return sign * (0.0 if y > 0 else INF)
    if math.isinf(x):
        mag = INF if (y > 0) == (x > 0 or True) and y > 0 else 0.0
        sign = -1.0 if (x < 0 and odd) else 1.0
        return sign * mag
    if x < 0 and not integral and math.isfinite(y):
        return NAN
    if abs(x) == 1 and math.isinf(y):
        return 1.0
    with np.errstate(all="ignore"):
        return float(np.sign(x) ** (1 if odd else 0) * np.power(np.float64(abs(x)), y))


BASES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, INF, -INF, NAN]
EXPONENTS = [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, -3.0, 0.5, -0.5, 2.5, 1 / 3, INF, -INF, NAN, 10.0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_cases_match_c_pow(dtype):
    xs, ys = np.meshgrid(BASES, EXPONENTS, indexing="ij")
    got = (fg.tensor(xs, dtype=dtype) ** fg.tensor(ys, dtype=dtype)).numpy()
    want = np.vectorize(c_pow)(xs, ys).astype(dtype)
    # float32 is computed in float64 and rounded: exact; float64 non-integral exponents
    # go through exp(y log x), a few ulp
    np.testing.assert_allclose(got, want, rtol=0 if dtype == "float32" else 4e-15)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_integral_tensor_exponents_are_exact():
    assert (3 ** fg.tensor([3.0, 5.0])).tolist() == [27.0, 243.0]
    e = np.arange(-20, 21, dtype=np.float64)
    for base in (3.0, -7.0, 1.1):
        got = (fg.tensor(base, dtype="float64") ** fg.tensor(e)).numpy()
        want = np.array([base**k for k in e.astype(int)])  # repeated multiplication
        np.testing.assert_allclose(got, want, rtol=4e-16)
    for base in (3.0, -5.0):
        got = (fg.tensor(base) ** fg.tensor(np.arange(0, 11, dtype=np.float32))).numpy()
        np.testing.assert_array_equal(got, np.float32(base) ** np.arange(11).astype(np.float32))


def test_negative_bases_get_signs_for_integral_exponents():
    x = fg.tensor([-2.0, -2.0, -2.0, -0.5])
    y = fg.tensor([2.0, 3.0, -3.0, 5.0])
    np.testing.assert_array_equal((x**y).numpy(), [4.0, -8.0, -0.125, -0.03125])
    assert math.isnan((fg.tensor(-2.0) ** fg.tensor(0.5)).item())


def test_general_exponents_are_accurate():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.01, 100, 1000).astype(np.float32)
    y = rng.uniform(-8, 8, 1000).astype(np.float32)
    got = (fg.tensor(x) ** fg.tensor(y)).numpy()
    want = np.power(x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1.2e-7)  # correctly rounded float32 or 1 ulp


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 16])
def test_python_integer_exponents(n):
    a = np.array([0.0, -0.0, 1.5, -2.0, INF, NAN], np.float32)
    with np.errstate(all="ignore"):
        for k in (n, -n):  # the exact power rounded once to float32 (numpy's powf is 1 ulp off)
            want = np.power(a.astype(np.float64), float(k)).astype(np.float32)
            np.testing.assert_array_equal((fg.tensor(a) ** k).numpy(), want)


def test_zero_power_keeps_a_gradient_graph():
    x = fg.tensor([0.0, 2.0, NAN], requires_grad=True)
    y = x**0
    assert y.requires_grad
    np.testing.assert_array_equal(y.numpy(), [1.0, 1.0, 1.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


def test_gradients_as_torch_including_at_zero():
    x = fg.tensor([0.0, 1.0, -2.0, 0.0, 4.0], dtype="float64", requires_grad=True)
    e = fg.tensor([2.0, 0.5, 3.0, 0.5, 0.0], dtype="float64", requires_grad=True)
    (x**e).sum().backward()
    # d/dx = y x^(y-1) (0 where y == 0); d/dy = x^y log x (0 where x == 0 and y >= 0)
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.5, 12.0, INF, 0.0])
    gy = e.grad.numpy()
    np.testing.assert_array_equal(gy[[0, 1, 3]], [0.0, 0.0, 0.0])
    assert math.isnan(gy[2])  # log of a negative base, as torch
    assert gy[4] == pytest.approx(math.log(4.0))


def test_gradient_matches_central_differences():
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.5, 3, 6), rng.uniform(-2, 2, 6)
    x = fg.tensor(a, requires_grad=True)
    e = fg.tensor(b, requires_grad=True)
    (x**e).sum().backward()
    h = 1e-6
    np.testing.assert_allclose(x.grad.numpy(), ((a + h) ** b - (a - h) ** b) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(e.grad.numpy(), (a ** (b + h) - a ** (b - h)) / (2 * h), rtol=1e-6)


def test_integer_powers_stay_integer_and_exact():
    x = fg.tensor([2, 3, -3, 0, 1], dtype="int64")
    out = x**40
    assert out.dtype == fg.int64
    want = [int(np.int64(v) ** np.int64(40)) for v in [2, 3, -3, 0, 1]]  # wraps as torch
    assert out.tolist() == want
    e = fg.tensor([31, 3, 5, 0, 7], dtype="int64")
    assert (x**e).dtype == fg.int64
    assert (x**e).tolist() == [2**31, 27, -243, 1, 1]
    y = fg.tensor([2, 5], dtype="int32") ** fg.tensor([10, 3], dtype="int32")
    assert y.dtype == fg.int32 and y.tolist() == [1024, 125]
    assert (fg.tensor([2], dtype="int32") ** 2).dtype == fg.int32


def test_integer_to_negative_integer_power_raises():
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed."):
        fg.tensor([2], dtype="int32") ** -2
    assert (fg.tensor([2.0]) ** -2).tolist() == [0.25]


def test_integers_to_negative_integer_tensor_powers_are_torchs():
    """torch refuses a negative Python exponent of an integer tensor but computes a tensor
    of them: 1 for a base of 1, +-1 for -1 by parity, else 0 (torch 2.14's values)."""
    b = fg.tensor([-3, -2, -1, 0, 1, 2, 3])
    for e, want in [
        (-1, [0, 0, -1, 0, 1, 0, 0]),
        (-2, [0, 0, 1, 0, 1, 0, 0]),
        (-3, [0, 0, -1, 0, 1, 0, 0]),
        (-64, [0, 0, 1, 0, 1, 0, 0]),
        (5, [-243, -32, -1, 0, 1, 32, 243]),
    ]:
        assert (b ** fg.full((7,), e, dtype=fg.int64)).tolist() == want
    assert (fg.tensor([2, 3]) ** fg.tensor([1, -1])).tolist() == [2, 0]
    mixed = fg.tensor([2, 1, 0], dtype=fg.uint8) ** fg.tensor([-1, -1, -2], dtype=fg.int8)
    assert mixed.dtype == fg.int16 and mixed.tolist() == [0, 1, 0]
    assert (fg.tensor([True, False]) ** fg.tensor([-1, -1])).tolist() == [1, 0]
    minus = fg.tensor([-1, -1], dtype=fg.int8) ** fg.tensor([-3, -4])
    assert minus.tolist() == [-1, 1]


# (base dtype, Python exponent, torch 2.13's result dtype)
SCALAR_POWER_DTYPES = [
    ("int64", 2.0, "float32"),  # a float exponent promotes an integer base
    ("int64", 0.0, "float32"),
    ("int64", -0.0, "float32"),
    ("uint8", 1.0, "float32"),
    ("int8", 2.5, "float32"),
    ("bool", 2.0, "float32"),
    ("bool", 0, "int64"),  # an int exponent makes a bool base int64
    ("bool", 3, "int64"),
    ("bool", True, "bool"),  # a bool exponent keeps it bool
    ("bool", False, "bool"),
    ("int64", 3, "int64"),
    ("int16", True, "int16"),
    ("float16", 2, "float16"),
    ("bfloat16", 2.0, "bfloat16"),
    ("float32", 0, "float32"),
]


@pytest.mark.parametrize(("base", "exponent", "want"), SCALAR_POWER_DTYPES)
def test_a_python_exponent_promotes_as_torch(base, exponent, want):
    """An integer or bool tensor to a Python float is a float32 tensor (it stayed an
    integer one: 2 ** 2.0 came out int64, and bool ** 2.0 bool), a bool one to a Python int
    is int64, and to a Python bool stays bool; values as torch's (0 ** 0 = 1)."""
    values = [1, 0, 2, -1] if base not in ("bool", "uint8") else [1, 0, 1, 0]
    x = fg.tensor(values).to(getattr(fg, base))
    got = x**exponent
    assert got.dtype.name == want, (base, exponent, got.dtype.name)
    with np.errstate(invalid="ignore"):  # (-1) ** 2.5 is NaN, as torch's
        expect = [float(np.power(float(v), float(exponent))) for v in values]
    if want == "bool":
        expect = [float(bool(e)) for e in expect]
    np.testing.assert_array_equal(got.float().numpy(), np.array(expect, np.float32))
    try:
        import torch
    except ImportError:
        return
    t = torch.tensor(values).to(getattr(torch, base)) ** exponent
    assert str(t.dtype) == f"torch.{want}"
    np.testing.assert_array_equal(got.float().numpy(), t.float().numpy())


def test_bool_tensors_to_a_bool_tensor_raise_as_torch():
    with pytest.raises(RuntimeError, match="not implemented for bool"):
        fg.tensor([True, False]) ** fg.tensor([True, True])


def test_a_bool_tensors_square_is_int64_as_torch():
    got = fg.tensor([True, False]).square()
    assert got.dtype == fg.int64 and got.tolist() == [1, 0]
    assert fg.tensor([3, -2]).square().tolist() == [9, 4]


def test_a_0d_and_an_empty_integer_tensor_to_a_float_are_float32():
    assert (fg.tensor(2) ** 2.0).dtype == fg.float32 and (fg.tensor(2) ** 2.0).item() == 4.0
    assert (fg.tensor(True) ** 2).dtype == fg.int64
    empty = fg.zeros(0, dtype=fg.int64) ** 0.5
    assert empty.dtype == fg.float32 and empty.shape == (0,)
