"""Accuracy of the polynomial exp, log and sin (pipeline/llvm_math.py), through the public API.

Each function is swept densely over its range on float32 and float64 and the
largest error is measured in ulps of the result's type, against a reference
computed in higher precision (numpy in float64 for float32 results, in long
double for float64 results). The bounds are the measured worst case rounded up
with a little headroom, not a loose tolerance: a change that costs an ulp fails.
Special values (infinities, NaN, zeros, denormals, overflow) are checked exactly.
The arrays are long enough to run both the vectorized loop and its scalar tail.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg

F32, F64 = np.float32, np.float64
LONG = np.longdouble
# where long double is just double, the float64 reference itself may be half an ulp off
REF_SLACK_F64 = 0.0 if np.finfo(LONG).nmant > 60 else 1.0

# the largest error allowed, in ulps of the result (measured: f32 exp 0.93, log 2.8,
# sin 0.50; f64 exp 1.6, log 2.8, sin 2.6)
BOUND_ULPS = {
    ("exp", F32): 2.0,
    ("log", F32): 4.0,
    ("sin", F32): 1.0,
    ("cos", F32): 1.0,
    ("exp", F64): 3.0,
    ("log", F64): 4.0,
    ("sin", F64): 4.0,
    ("cos", F64): 4.0,
}

N = 1 << 20


def apply(fn: str, x: np.ndarray) -> np.ndarray:
    out = getattr(fg.from_numpy(np.ascontiguousarray(x)), fn)().numpy()
    assert out.dtype == x.dtype and out.shape == x.shape
    return out


def reference(fn: str, x: np.ndarray) -> np.ndarray:
    wide = LONG if x.dtype == F64 else F64
    return getattr(np, fn)(x.astype(wide))


def ulp_errors(got: np.ndarray, ref: np.ndarray, dtype) -> np.ndarray:
    """|got - ref| in units of the spacing of dtype at ref (at least the smallest normal's)."""
    tiny = np.finfo(dtype).tiny
    ulp = np.spacing(np.maximum(np.abs(ref), tiny).astype(dtype)).astype(ref.dtype)
    err = np.abs(got.astype(ref.dtype) - ref) / ulp
    return np.asarray(err, dtype=np.float64)


def assert_within_ulps(fn: str, x: np.ndarray) -> None:
    dtype = x.dtype.type
    got, ref = apply(fn, x), reference(fn, x)
    assert np.isfinite(got).all() == np.isfinite(ref.astype(dtype)).all()
    err = ulp_errors(got, ref, dtype)
    bound = BOUND_ULPS[(fn, dtype)] + (REF_SLACK_F64 if dtype is F64 else 0.0)
    worst = int(np.argmax(err))
    bad = int((err > bound).sum())
    assert err[worst] <= bound, (
        f"{fn} {x.dtype}: {bad} of {x.size} inputs over {bound} ulp; worst {err[worst]:.2f} ulp "
        f"at x={x[worst]!r}: got {got[worst]!r}, want {ref[worst]!r}"
    )


# ---------------------------------------------------------------- dense sweeps


def test_exp_float32_over_the_normal_range():
    # exp(-87) = 1.6e-38 is still a normal float32; exp(88.7228) is just below FLT_MAX
    top = float(np.nextafter(F32(np.log(np.finfo(F32).max)), F32(0)))
    assert_within_ulps("exp", np.linspace(-87.0, top, N).astype(F32))


def test_exp_float32_near_zero():
    assert_within_ulps("exp", np.linspace(-1.0, 1.0, N // 4).astype(F32))


def test_exp_float64_over_the_normal_range():
    top = float(np.nextafter(np.log(np.finfo(F64).max), 0))
    assert_within_ulps("exp", np.linspace(-708.0, top, N))
    assert_within_ulps("exp", np.linspace(-1.0, 1.0, N // 4))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_exp_results_that_are_subnormal_are_not_flushed_to_zero(dtype):
    info = np.finfo(dtype)
    lo, hi = np.log(float(info.smallest_subnormal)) + 1, np.log(float(info.tiny))
    x = np.linspace(lo, hi, 4099).astype(dtype)
    got, ref = apply("exp", x), np.exp(x.astype(LONG))
    # a subnormal's spacing is the smallest subnormal itself
    err = np.asarray(np.abs(got.astype(LONG) - ref) / LONG(info.smallest_subnormal), F64)
    worst = int(np.argmax(err))
    assert err[worst] <= 2, (
        f"exp({x[worst]!r}) = {got[worst]!r}, want {ref[worst]!r} "
        f"({int((got == 0).sum())} of {x.size} subnormal results are 0)"
    )


@pytest.mark.parametrize("dtype", [F32, F64])
def test_log_log_spaced(dtype):
    span = 30 if dtype is F32 else 300
    assert_within_ulps("log", np.logspace(-span, span, N).astype(dtype))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_log_around_one(dtype):
    eps = np.finfo(dtype).eps
    near = 1 + np.arange(-4096, 4097).astype(dtype) * eps
    x = np.concatenate([np.linspace(0.5, 2.0, N // 4).astype(dtype), near.astype(dtype)])
    assert_within_ulps("log", x)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_log_of_subnormals(dtype):
    info = np.finfo(dtype)
    lo, hi = np.log10(float(info.smallest_subnormal)), np.log10(float(info.tiny))
    x = np.logspace(lo, hi, 8191).astype(dtype)
    x = x[x > 0]
    assert_within_ulps("log", x)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_sin_over_ten_thousand(dtype):
    k = np.arange(-6366, 6367)
    # also the representable numbers nearest to multiples of pi/2, where sin is 0 or +-1
    x = np.concatenate([np.linspace(-1e4, 1e4, N), k * (np.pi / 2)]).astype(dtype)
    assert_within_ulps("sin", x)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_sin_small_arguments(dtype):
    x = np.concatenate([np.linspace(-4.0, 4.0, N // 4), np.logspace(-30, 0, 4096)]).astype(dtype)
    assert_within_ulps("sin", np.concatenate([x, -x]))


@pytest.mark.parametrize("fn", ["sin", "cos"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_sin_and_cos_of_huge_arguments_are_as_accurate(fn, dtype):
    # the double-precision reduction below 2^50, the C library's beyond (1e20 once gave
    # sin = 1.0, and 3e38 -1.0); either side of the bound, and up to the largest float
    top = 38 if dtype is F32 else 308
    edge = [2.0**50, np.nextafter(2.0**50, 0)]
    near = np.concatenate([np.linspace(2.0**49, 2.0**53, 4000), edge])
    x = np.concatenate([np.logspace(9, top, 20000), near, [float(np.finfo(dtype).max)]])
    x = x.astype(dtype)
    assert_within_ulps(fn, np.concatenate([x, -x]))


# ---------------------------------------------------------------- special values


def repeated(values: list[float], dtype) -> np.ndarray:
    """The values repeated to 67 elements, so both the vector loop and the scalar tail see them."""
    return np.resize(np.array(values, dtype=dtype), 67)


def assert_same_values(got: np.ndarray, want: np.ndarray, x: np.ndarray, fn: str) -> None:
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{fn}{tuple(x[~same][:4])} = {got[~same][:4]}, want {want[~same][:4]}"


@pytest.mark.parametrize("dtype", [F32, F64])
def test_exp_special_values(dtype):
    big = 100.0 if dtype is F32 else 710.0  # overflows the type
    tiny = -104.0 if dtype is F32 else -746.0  # below half the smallest subnormal
    pairs = [(-np.inf, 0.0), (np.inf, np.inf), (np.nan, np.nan), (0.0, 1.0), (-0.0, 1.0)]
    pairs += [(big, np.inf), (-10 * big, 0.0), (tiny, 0.0), (1e30, np.inf), (-1e30, 0.0)]
    x = repeated([v for v, _ in pairs], dtype)
    assert_same_values(apply("exp", x), repeated([w for _, w in pairs], dtype), x, "exp")


def test_exp_100_overflows_float32_but_not_float64():
    assert apply("exp", np.array([100.0], F32))[0] == np.inf
    got = apply("exp", np.array([100.0], F64))[0]
    assert got == pytest.approx(np.exp(100.0), rel=1e-15)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_log_special_values(dtype):
    info = np.finfo(dtype)
    values = [0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 1.0, -float(info.smallest_subnormal)]
    want = [-np.inf, -np.inf, np.nan, np.nan, np.inf, np.nan, 0.0, np.nan]
    x = repeated(values, dtype)
    assert_same_values(apply("log", x), repeated(want, dtype), x, "log")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_log_of_the_smallest_and_largest_numbers(dtype):
    info = np.finfo(dtype)
    x = repeated([info.smallest_subnormal, info.tiny, info.tiny / 2, info.max, info.eps], dtype)
    assert_within_ulps("log", x)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_sin_special_values(dtype):
    values = [np.inf, -np.inf, np.nan, 0.0]
    want = [np.nan, np.nan, np.nan, 0.0]
    x = repeated(values, dtype)
    assert_same_values(apply("sin", x), repeated(want, dtype), x, "sin")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_sin_keeps_the_sign_of_zero(dtype):
    x = repeated([-0.0, 0.0], dtype)
    y = apply("sin", x)
    assert (y == 0).all()
    assert (np.signbit(y) == np.signbit(x)).all(), "sin(-0.0) must be -0.0, as numpy gives"


@pytest.mark.parametrize("big", [1e300, 3.5e38, -1e300])
def test_a_python_number_past_float32s_range_is_its_infinity(big):
    """`x < 1e300` of a float32 x: the number, cast to float32 as torch's wrapped numbers
    are, is an infinity (the literal's rounding raised OverflowError in code generation);
    one that rounds to float32's largest value stays finite."""
    x = fg.tensor([1.0, -2.0, float("nan"), float("inf"), -float("inf")])
    inf = np.float32(np.inf) if big > 0 else np.float32(-np.inf)
    a = x.numpy()
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal((x < big).numpy(), a < inf)
        np.testing.assert_array_equal((x * 0 + big).numpy(), a * 0 + inf)
    assert (x[:1] * 0 + 3.4028235e38).item() == float(np.finfo(np.float32).max)
