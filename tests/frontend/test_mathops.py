"""Elementwise math against numpy over wide ranges, in float32 and float64.

Tolerances are in units in the last place (ulps) of the result's dtype, and
each test states its own. Float32 inputs of the transcendental functions are
computed in float64 and rounded once, so float32 results are checked to within
1 ulp (they are almost always exact). Gradients are checked with float64
central differences (`fusegrad.testing.gradcheck`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir.ops import Ops

DTYPES = [np.float32, np.float64]

# every test once per backend (tests/conftest.py: `backend`; the others beside the CPU for
# the tests marked backend_slice, all of them under --all-backends)
pytestmark = pytest.mark.usefixtures("backend")


def wide(dt, n=4000, lo=-30.0, hi=30.0, seed=0, signed=True):
    """Values of every magnitude from 10^lo to 10^hi, both signs."""
    rng = np.random.default_rng(seed)
    mag = 10.0 ** rng.uniform(lo, hi, n)
    if signed:
        mag = mag * rng.choice([-1.0, 1.0], n)
    return mag.astype(dt)


SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan]


def ulps(got, ref, dt) -> float:
    """The largest error in ulps of dt; NaN matches NaN, equal infinities match."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    same = (got == ref) | (np.isnan(got) & np.isnan(ref))
    spacing = np.spacing(np.abs(ref).astype(dt)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.where(same, 0.0, np.abs(got - ref) / spacing)
    return float(np.nan_to_num(err, nan=np.inf).max())


def check(fn, ref, a, dt, max_ulps):
    a = np.concatenate([a.astype(dt), np.array(SPECIAL, dt)])
    got = fn(fg.tensor(a)).numpy()
    assert got.dtype == dt
    with np.errstate(all="ignore"):
        want = ref(a.astype(np.float64)).astype(dt)
    err = ulps(got, want, dt)
    assert err <= max_ulps, f"{err} ulps"


F64_ULPS = 4  # float64 results: within 4 ulps; float32: within 1


def tol(dt):
    return 1 if dt == np.float32 else F64_ULPS


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(
    "name, ref, values",
    [
        ("log1p", np.log1p, lambda dt: np.abs(wide(dt))),
        ("log1p", np.log1p, lambda dt: -np.abs(wide(dt, lo=-30, hi=-0.001))),
        ("expm1", np.expm1, lambda dt: wide(dt, lo=-30, hi=1.5)),
        ("log2", np.log2, lambda dt: np.abs(wide(dt))),
        ("log10", np.log10, lambda dt: np.abs(wide(dt))),
        ("atan", np.arctan, lambda dt: wide(dt)),
        ("asin", np.arcsin, lambda dt: np.random.default_rng(1).uniform(-1, 1, 4000)),
        ("acos", np.arccos, lambda dt: np.random.default_rng(1).uniform(-1, 1, 4000)),
        ("sinh", np.sinh, lambda dt: wide(dt, lo=-10, hi=1.9)),
        ("cosh", np.cosh, lambda dt: wide(dt, lo=-10, hi=1.9)),
        ("asinh", np.arcsinh, lambda dt: wide(dt)),
        ("acosh", np.arccosh, lambda dt: 1 + np.abs(wide(dt))),
        ("atanh", np.arctanh, lambda dt: np.random.default_rng(1).uniform(-1, 1, 4000)),
        ("tan", np.tan, lambda dt: np.random.default_rng(2).uniform(-10, 10, 4000)),
        ("tan", np.tan, lambda dt: np.random.default_rng(2).uniform(-4e5, 4e5, 4000)),
        ("tan", np.tan, lambda dt: wide(dt, lo=-30, hi=0)),
    ],
)
def test_transcendental_against_numpy(name, ref, values, dt):
    check(lambda t: getattr(t, name)(), ref, values(dt), dt, tol(dt))


def whole_range(dt, signed=False):
    """Magnitudes from 1e-30 to the dtype's largest, log-spaced."""
    a = np.logspace(-30, np.log10(np.finfo(dt).max), 4000).astype(dt)
    return np.concatenate([a, -a]) if signed else a


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(
    "name, ref, values",
    [
        # log(1 + x) * x / x overflowed past 1e305: inf for log1p(3.3e305), 703.5
        ("log1p", np.log1p, lambda dt: whole_range(dt)),
        # a reduction of its own, exact below 2^19 only: tan(1e8) was off by hundreds of ulps
        ("tan", np.tan, lambda dt: whole_range(dt, signed=True)),
        ("sin", np.sin, lambda dt: whole_range(dt, signed=True)),
        ("cos", np.cos, lambda dt: whole_range(dt, signed=True)),
        ("acosh", np.arccosh, lambda dt: 1 + whole_range(dt)),
        ("asinh", np.arcsinh, lambda dt: whole_range(dt, signed=True)),
        ("atan", np.arctan, lambda dt: whole_range(dt, signed=True)),
    ],
)
def test_transcendental_over_the_whole_float_range(name, ref, values, dt):
    check(lambda t: getattr(t, name)(), ref, values(dt), dt, tol(dt))


@pytest.mark.parametrize("dt", DTYPES)
def test_acosh_is_nan_below_one_at_every_magnitude(dt):
    # t (t + 2), t = x - 1, is positive again under -1: -7e7 once gave -inf
    a = np.concatenate([[0.999, 0.0, -0.0, -1.0, -1.5], -whole_range(dt)]).astype(dt)
    assert np.isnan(fg.tensor(a).acosh().numpy()).all()
    assert fg.tensor(np.array([1.0], dt)).acosh().item() == 0.0


@pytest.mark.parametrize("dt", DTYPES)
def test_exp2_over_the_whole_range(dt):
    lo, hi = (-1070, 1030) if dt == np.float64 else (-140, 130)
    a = np.random.default_rng(3).uniform(lo, hi, 4000)
    check(lambda t: t.exp2(), np.exp2, a, dt, tol(dt))
    check(lambda t: fg.exp2(t), np.exp2, np.arange(-120, 120.0), dt, 0)  # exact powers of 2


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.backend_slice
def test_erf_against_math_erf(dt):
    a = np.concatenate([wide(dt, lo=-30, hi=1.2), np.linspace(-7, 7, 2001)]).astype(dt)
    got = fg.tensor(a).erf().numpy()
    want = np.array([math.erf(float(v)) for v in a]).astype(dt)
    assert ulps(got, want, dt) <= tol(dt)
    got = fg.erfc(fg.tensor(a)).numpy()
    want = np.array([1 - math.erf(float(v)) for v in a]).astype(dt)
    np.testing.assert_allclose(got, want, atol=2 * np.finfo(dt).eps)
    special = fg.tensor(np.array([math.inf, -math.inf, math.nan], dt)).erf().numpy()
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2])


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round"])
def test_rounding_is_exact_everywhere(name, dt):
    ref = {"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round}[name]
    halves = np.arange(-10, 10, 0.5)
    edges = np.array([2.0**23 - 0.5, 2.0**52 - 0.5, 0.49999997, -0.49999997, 2.5e300, -1e20])
    edges = edges[np.abs(edges) < np.finfo(dt).max]
    a = np.concatenate([wide(dt), halves, edges]).astype(dt)
    a = np.concatenate([a, np.array(SPECIAL, dt)])
    got = getattr(fg.tensor(a), name)().numpy()
    want = ref(a)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # -0.0 where numpy has it


@pytest.mark.parametrize("dt", DTYPES)
def test_frac_sign_and_round_decimals(dt):
    a = np.concatenate([wide(dt, lo=-5, hi=10), np.array(SPECIAL, dt)]).astype(dt)
    t = fg.tensor(a)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(t.frac().numpy(), a - np.trunc(a), equal_nan=True)
    # torch.sign(nan) is 0 (numpy's is NaN)
    assert np.array_equal(t.sign().numpy(), np.where(np.isnan(a), 0, np.sign(a)))
    b = np.array([1.2345, -2.5678, 0.125], dt)
    np.testing.assert_allclose(fg.tensor(b).round(decimals=2).numpy(), [1.23, -2.57, 0.12])
    assert fg.tensor([-3, 0, 5]).sign().tolist() == [-1, 0, 1]


@pytest.mark.parametrize("dt", DTYPES)
def test_fmod_remainder_and_floor_divide_are_exact(dt):
    rng = np.random.default_rng(4)
    # quotients up to 2^28 (float32 is exact up to 2^29, float64 up to 2^52)
    b = wide(dt, n=3000, lo=-3, hi=3, seed=5)
    a = (b.astype(np.float64) * rng.uniform(-(2.0**28), 2.0**28, 3000)).astype(dt)
    a = np.concatenate([a, np.array([5.0, -5.0, 5.0, -5.0, 0.0, -0.0, 3.0, math.inf], dt)])
    b = np.concatenate([b, np.array([3.0, 3.0, -3.0, -3.0, 2.0, 2.0, math.inf, 2.0], dt)])
    ta, tb = fg.tensor(a), fg.tensor(b)
    with np.errstate(all="ignore"):
        assert np.array_equal(fg.fmod(ta, tb).numpy(), np.fmod(a, b), equal_nan=True)
        assert np.array_equal((ta % tb).numpy(), np.remainder(a, b), equal_nan=True)
        assert np.array_equal((ta // tb).numpy(), np.floor_divide(a, b), equal_nan=True)
        assert np.array_equal(np.signbit(fg.fmod(ta, tb).numpy()), np.signbit(np.fmod(a, b)))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_fmod_floor_division_and_remainder_are_exact_at_every_ratio(dt):
    # quotients from 2^-1074 to 2^2000: the vectorized path below 2^52, C's fmod beyond
    # (a quotient no longer an exact integer once gave fmod(1, 1e-38) = 9.6e-18 in float32)
    tiny, huge = np.finfo(dt).tiny, np.finfo(dt).max
    b = np.array([0.1, 0.7, 3.3, 1e-38, tiny / 4, 3.0, 0.1, 1e-30, -2.5, huge], dt)
    a = np.array([1.37e15, 2.0**60, -7.0, 1.0, 1.0, 1e38, 1e38, -3.0e30, 1e30, -1.0], dt)
    for got, want, signed in (
        (fg.fmod(fg.tensor(a), fg.tensor(b)), np.fmod(a, b), True),
        # (a zero remainder is +0.0 whatever b's sign, as torch's; numpy's takes b's)
        (fg.tensor(a) % fg.tensor(b), np.remainder(a, b), False),
        (fg.tensor(a) // fg.tensor(b), np.floor_divide(a, b), True),
    ):
        assert got.dtype.np == np.dtype(dt).name
        np.testing.assert_array_equal(got.numpy(), want)
        assert not signed or np.array_equal(np.signbit(got.numpy()), np.signbit(want))


def test_fmod_keeps_its_gradients_at_a_huge_ratio():
    # torch's: 1 and -trunc(a / b), the quotient as the dtype rounds it
    a = fg.tensor([1e20, 7.0], requires_grad=True)
    b = fg.tensor([3.0, 2.0], requires_grad=True)
    fg.fmod(a, b).sum().backward()
    assert a.grad.tolist() == [1.0, 1.0]
    assert b.grad.tolist() == [-np.trunc(np.float32(1e20) / np.float32(3.0)), -3.0]


@pytest.mark.backend_slice
def test_integer_division_modes_and_operators():
    a = np.array([7, -7, 7, -7, 0, 9], np.int64)
    b = np.array([2, 2, -2, -2, 3, 4], np.int64)
    ta, tb = fg.tensor(a), fg.tensor(b)
    assert (ta // tb).tolist() == (a // b).tolist()
    assert (ta % tb).tolist() == (a % b).tolist()
    assert fg.fmod(ta, tb).tolist() == np.fmod(a, b).tolist()
    assert ta.div(tb, rounding_mode="trunc").tolist() == (np.trunc(a / b)).astype(int).tolist()
    assert ta.div(tb, rounding_mode="floor").tolist() == (a // b).tolist()
    assert (17 // tb).tolist() == (17 // b).tolist()  # (17 // ta: ta's 0 raises, as torch)
    assert (17 % tb).tolist() == (17 % b).tolist()
    np.testing.assert_allclose(ta.div(tb).numpy(), a / b, rtol=1e-6)
    f = fg.tensor([7.5, -7.5])
    assert f.div(2, rounding_mode="trunc").tolist() == [3.0, -3.0]
    assert f.div(2, rounding_mode="floor").tolist() == [3.0, -4.0]
    with pytest.raises(fg.ShapeError, match="rounding_mode"):
        f.div(2, rounding_mode="nearest")


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.backend_slice
def test_atan2_quadrants_zeros_and_infinities(dt):
    rng = np.random.default_rng(6)
    y = np.concatenate(
        [
            wide(dt, n=2000, seed=7),
            np.array([0.0, -0.0, 0.0, -0.0, 1, -1, math.inf, -math.inf, math.inf, 1, math.nan], dt),
        ]
    )
    x = np.concatenate(
        [
            wide(dt, n=2000, seed=8),
            np.array([0.0, 0.0, -0.0, -0.0, math.inf, -math.inf, 1, 1, -math.inf, 0.0, 1], dt),
        ]
    )
    y, x = y.astype(dt), x.astype(dt)
    got = fg.atan2(fg.tensor(y), fg.tensor(x)).numpy()
    want = np.arctan2(y.astype(np.float64), x.astype(np.float64)).astype(dt)
    assert ulps(got, want, dt) <= tol(dt)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    del rng


@pytest.mark.parametrize("dt", DTYPES)
def test_two_argument_helpers(dt):
    rng = np.random.default_rng(9)
    a = rng.uniform(-50, 50, 500).astype(dt)
    b = rng.uniform(-50, 50, 500).astype(dt)
    ta, tb = fg.tensor(a), fg.tensor(b)
    np.testing.assert_allclose(
        fg.logaddexp(ta, tb).numpy(), np.logaddexp(a, b), rtol=4 * np.finfo(dt).eps
    )
    big = np.array([1000.0, -1000.0, -math.inf, math.inf], dt)
    assert np.array_equal(
        fg.logaddexp(fg.tensor(big), fg.tensor(big)).numpy(),
        np.logaddexp(big, big),
    )
    assert np.array_equal(fg.copysign(ta, tb).numpy(), np.copysign(a, b))
    assert fg.copysign(fg.tensor([1.0, 1.0]), fg.tensor([-0.0, 0.0])).tolist() == [-1.0, 1.0]
    w = rng.uniform(0, 1, 500).astype(dt)
    got = fg.lerp(ta, tb, fg.tensor(w)).numpy()
    np.testing.assert_allclose(got, a + w * (b - a), rtol=1e-5, atol=1e-4)
    assert fg.lerp(ta, tb, 1.0).tolist() == b.tolist()  # exact at weight 1
    assert fg.lerp(ta, tb, 0.0).tolist() == a.tolist()


def test_classification_and_nan_to_num():
    a = np.array([1.0, math.nan, math.inf, -math.inf, -0.0, 3e38], np.float32)
    t = fg.tensor(a)
    assert t.isnan().tolist() == np.isnan(a).tolist()
    assert t.isinf().tolist() == np.isinf(a).tolist()
    assert t.isfinite().tolist() == np.isfinite(a).tolist()
    assert fg.signbit(t).tolist() == np.signbit(a).tolist()
    assert t.nan_to_num().tolist() == np.nan_to_num(a).tolist()
    want = np.nan_to_num(a, nan=1.0, posinf=2.0, neginf=-2.0)
    assert t.nan_to_num(nan=1.0, posinf=2.0, neginf=-2.0).tolist() == want.tolist()
    i = fg.tensor([1, 2])
    assert i.isnan().tolist() == [False, False] and i.isfinite().tolist() == [True, True]


def test_isclose_allclose_equal():
    a = np.array([1.0, 1.0 + 1e-7, math.inf, math.nan, 0.0, -math.inf], np.float32)
    b = np.array([1.0, 1.0, math.inf, math.nan, 1e-9, math.inf], np.float32)
    t, u = fg.tensor(a), fg.tensor(b)
    assert fg.isclose(t, u).tolist() == np.isclose(a, b).tolist()
    assert fg.isclose(t, u, equal_nan=True).tolist() == np.isclose(a, b, equal_nan=True).tolist()
    assert fg.allclose(fg.tensor([1.0, 2.0]), fg.tensor([1.0, 2.0 + 1e-7]))
    assert not fg.allclose(t, u)
    assert fg.equal(fg.tensor([1, 2]), fg.tensor([1, 2]))
    assert not fg.equal(fg.tensor([1, 2]), fg.tensor([1, 3]))
    assert not fg.equal(fg.tensor([1, 2]), fg.tensor([[1, 2]]))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_bitwise_ops_on_integers(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(10)
    a = np.concatenate(
        [
            rng.integers(info.min, info.max, 200, dtype=dtype, endpoint=True),
            np.array([0, -1, info.min, info.max], dtype),
        ]
    )
    b = np.concatenate(
        [
            rng.integers(info.min, info.max, 200, dtype=dtype, endpoint=True),
            np.array([-1, 0, -1, info.min], dtype),
        ]
    )
    ta, tb = fg.tensor(a), fg.tensor(b)
    assert (ta & tb).numpy().tolist() == (a & b).tolist()
    assert (ta | tb).numpy().tolist() == (a | b).tolist()
    assert (ta ^ tb).numpy().tolist() == (a ^ b).tolist()
    assert (~ta).numpy().tolist() == (~a).tolist()
    s = rng.integers(0, 8 * np.dtype(dtype).itemsize - 1, a.shape[0]).astype(dtype)
    small = (a >> 8).astype(dtype)  # left shifts that do not overflow
    assert (fg.tensor(small) << fg.tensor(np.minimum(s, 7))).numpy().tolist() == (
        small << np.minimum(s, 7)
    ).tolist()
    assert (ta >> fg.tensor(s)).numpy().tolist() == (a >> s).tolist()
    assert (ta >> 3).numpy().tolist() == (a >> 3).tolist()
    assert (ta & 0xFF).numpy().tolist() == (a & 0xFF).tolist()


def test_bitwise_ops_on_bools_and_errors():
    p = fg.tensor([True, True, False, False])
    q = fg.tensor([True, False, True, False])
    assert (p & q).tolist() == [True, False, False, False]
    assert (p | q).tolist() == [True, True, True, False]
    assert (p ^ q).tolist() == [False, True, True, False]
    assert (~p).tolist() == [False, False, True, True]
    with pytest.raises(fg.DTypeError, match="bitwise"):
        fg.tensor([1.0]) & fg.tensor([1.0])
    with pytest.raises(fg.DTypeError, match="invert"):
        ~fg.tensor([1.0])


def test_method_forms_and_aliases():
    a = fg.tensor([1.0, 2.0, 3.0])
    b = fg.tensor([4.0, 5.0, 6.0])
    assert a.add(b).tolist() == [5, 7, 9]
    assert a.add(b, alpha=2).tolist() == [9, 12, 15]
    assert a.sub(b, alpha=0.5).tolist() == [-1, -0.5, 0]
    assert a.mul(b).tolist() == [4, 10, 18]
    assert a.pow(2).tolist() == [1, 4, 9]
    assert a.sum(axis=0).item() == 6
    assert fg.tensor([[1, 2], [3, 4]]).sum(axis=1).tolist() == [3, 7]
    c = a.clone()
    assert c.tolist() == a.tolist() and c is not a
    assert a.data.tolist() == [1, 2, 3] and not a.data.requires_grad
    assert a.double().dtype == fg.float64 and a.long().dtype == fg.int64
    assert fg.tensor([1, 2]).float().dtype == fg.float32


def test_clone_passes_gradients_and_data_does_not():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = (x.clone() * 3).sum()
    y.backward()
    assert x.grad.tolist() == [3.0, 3.0]
    x.data = fg.tensor([5.0, 6.0])
    assert x.tolist() == [5.0, 6.0] and x.is_leaf and x.requires_grad


@pytest.mark.parametrize(
    "name, values",
    [
        ("log1p", [0.5, 1e-9, 3.0]),
        ("expm1", [0.5, 1e-9, -3.0]),
        ("log2", [0.5, 2.0, 7.0]),
        ("log10", [0.5, 2.0, 7.0]),
        ("exp2", [0.5, -2.0, 3.3]),
        ("erf", [0.3, -1.2, 2.5]),
        ("atan", [0.3, -1.2, 25.0]),
        ("asin", [0.3, -0.7, 0.9]),
        ("acos", [0.3, -0.7, 0.9]),
        ("tan", [0.3, -1.2, 2.0]),
        ("sinh", [0.3, -1.2, 5.0]),
        ("cosh", [0.3, -1.2, 5.0]),
        ("asinh", [0.3, -1.2, 50.0]),
        ("acosh", [1.3, 2.2, 50.0]),
        ("atanh", [0.3, -0.7, 0.9]),
        ("floor", [0.3, -1.2, 2.5]),
        ("round", [0.3, -1.2, 2.7]),
        ("frac", [0.3, -1.2, 2.5]),
        ("sign", [0.3, -1.2, 2.5]),
    ],
)
def test_unary_gradients(name, values):
    x = fg.tensor(values, dtype=fg.float64)
    assert fg.testing.gradcheck(lambda t: getattr(t, name)(), [x])


@pytest.mark.backend_slice
def test_binary_gradients():
    a = fg.tensor([0.3, -1.2, 2.5, 4.0], dtype=fg.float64)
    b = fg.tensor([1.1, 0.7, -2.0, 3.0], dtype=fg.float64)
    for fn in [
        fg.atan2,
        fg.logaddexp,
        fg.fmod,
        fg.remainder,
        fg.copysign,
        lambda p, q: fg.lerp(p, q, 0.3),
    ]:
        assert fg.testing.gradcheck(fn, [a, b])
    w = fg.tensor([0.2, 0.6, 0.9, 0.1], dtype=fg.float64)
    assert fg.testing.gradcheck(lambda p, q, r: fg.lerp(p, q, r), [a, b, w])


def test_smaller_aliases_and_relatives():
    a = np.array([1.5, -2.5, math.inf, -math.inf, 0.0])
    t = fg.tensor(a)
    assert t.isposinf().tolist() == np.isposinf(a).tolist()
    assert t.isneginf().tolist() == np.isneginf(a).tolist()
    assert t.fix().tolist() == np.trunc(a).tolist() and t.sgn().tolist() == np.sign(a).tolist()
    assert t.isreal().tolist() == [True] * 5
    np.testing.assert_allclose(
        fg.tensor([1.0, 3.0]).logaddexp2(fg.tensor([2.0, 3.0])).numpy(),
        np.logaddexp2([1.0, 3.0], [2.0, 3.0]),
        rtol=1e-6,
    )
    p, q = fg.tensor([1, 0, 2]), fg.tensor([1, 1, 0])
    assert fg.logical_and(p, q).tolist() == [True, False, False]
    assert fg.logical_or(p, q).tolist() == [True, True, True]
    assert fg.logical_xor(p, q).tolist() == [False, True, True]
    b = fg.tensor([6.0, 8.0])
    assert b.true_divide(4).tolist() == [1.5, 2.0] and b.divide(4).tolist() == [1.5, 2.0]
    assert b.multiply(2).tolist() == [12.0, 16.0] and b.subtract(1).tolist() == [5.0, 7.0]
    assert (
        b.arctan2(fg.tensor([1.0, 1.0])).tolist()
        == np.arctan2([6.0, 8.0], 1.0).astype(np.float32).tolist()
    )
    c = fg.tensor([1.0, 2.0, 3.0])
    c.masked_fill_(fg.tensor([False, True, False]), 0.0)
    assert c.tolist() == [1.0, 0.0, 3.0]
    c.scatter_reduce_(0, fg.tensor([0, 0]), fg.tensor([5.0, 7.0]), "amax")
    assert c.tolist() == [7.0, 0.0, 3.0]
    assert (1 << fg.tensor([1, 2])).tolist() == [2, 4] and (64 >> fg.tensor([1, 2])).tolist() == [
        32,
        16,
    ]


COMPOSED_FLOAT_OPS = [
    ("log1p", lambda x, y: x.log1p(), np.log1p),
    ("erf", lambda x, y: x.erf(), None),
    ("atan", lambda x, y: x.atan(), np.arctan),
    ("sinh", lambda x, y: x.sinh(), np.sinh),
    ("atan2", lambda x, y: fg.atan2(x, y), np.arctan2),
    ("floor", lambda x, y: x.floor(), np.floor),
    ("ceil", lambda x, y: x.ceil(), np.ceil),
    ("trunc", lambda x, y: x.trunc(), np.trunc),
    ("round", lambda x, y: x.round(), np.round),
    ("floor_divide", lambda x, y: x // y, np.floor_divide),
    ("fmod", lambda x, y: fg.fmod(x, y), np.fmod),
    ("remainder", lambda x, y: x % y, np.remainder),
]


@pytest.mark.parametrize(("name", "op", "ref"), COMPOSED_FLOAT_OPS, ids=lambda v: v)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_composed_float_ops_are_one_node_with_numpys_values(name, op, ref, dtype):
    """A float floor, ceil, trunc, round, //, fmod, % (and log1p, erf, atan, sinh, atan2,
    ...) is one macro node (its 20 to 300 primitives built when a plan is compiled, not on
    every call); the exact ones with numpy's values at
    the special points (signed zeros, halves, infinities, NaN) and a zero or torch's
    gradient; of constants it folds to a constant (torch's signs of zero remainders)."""
    a = np.array([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 7.25, -7.25, np.inf, np.nan], dtype)
    b = np.array([2.0, -2.0, 3.0, 3.0, -3.0, 0.25, 0.5, -1.0, 2.0, 2.0, 2.0, 1.0], dtype)
    x, y = fg.tensor(a), fg.tensor(b)
    out = op(x, y)
    assert out.node.op is Ops.MACRO and out.node.arg[0] == name
    got = out.numpy()
    with np.errstate(all="ignore"):
        binary = name in ("floor_divide", "fmod", "remainder", "atan2")
        want = None if ref is None else ref(a, b) if binary else ref(a)
    if name == "remainder":  # a zero takes a's sign, as torch's (fmod's) does: numpy's b's
        want = np.where(want == 0, np.copysign(0.0, a), want).astype(dtype)
    if ref is None or name in ("log1p", "atan", "sinh", "atan2"):  # (within ulps: ir tests)
        assert got.dtype == want.dtype if ref is not None else got.dtype == dtype
        return
    assert np.array_equal(got, want, equal_nan=True), (got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    assert op(fg.full((3,), -0.5), fg.full((3,), 2.0)).node.op is Ops.CONST
    if name in ("floor", "ceil", "trunc", "round"):
        w = fg.tensor(a[:9].copy(), requires_grad=True)
        (op(w, None) * 3).sum().backward()
        assert w.grad.tolist() == [0.0] * 9


@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp_is_one_node_with_torchs_values_at_infinities_and_nan(keepdim):
    """One macro node (its axes and keepdim in it), the composed form's values: an infinite
    row maximum shifts by 0 ([inf, 1] is inf, all -inf is -inf), NaN propagates, and an
    empty axis gives -inf; the gradient is softmax's."""
    x = fg.tensor([[1.0, 2.0, -np.inf], [np.inf, 1.0, 0.0], [-np.inf] * 3, [np.nan, 0.0, 1.0]])
    y = x.logsumexp(1, keepdim=keepdim)
    assert y.node.op is Ops.MACRO and y.node.arg == ("logsumexp", ((1,), keepdim))
    assert y.shape == ((4, 1) if keepdim else (4,))
    got = y.numpy().reshape(-1)
    want = np.log(np.exp(np.array([1.0, 2.0])).sum())
    assert np.isclose(got[0], want) and got[1] == np.inf and got[2] == -np.inf
    assert np.isnan(got[3])
    assert (
        fg.zeros(2, 0).logsumexp(1, keepdim=keepdim).numpy().reshape(-1).tolist() == [-np.inf] * 2
    )
    w = fg.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    w.logsumexp(-1, keepdim=keepdim).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), w.softmax(-1).numpy(), rtol=1e-6)


@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_is_one_node_with_the_first_maximum_nan_counting_largest(keepdim):
    """argmax along an axis is one macro node (its expansion reads its index table as an
    INDEX node: an expansion holds no buffer but its sources'), with torch's answers: the
    first of tied maxima, -0.0 and 0.0 tied, a NaN the largest; argmin and max(dim) too."""
    x = fg.tensor(
        [[1.0, 3.0, 3.0, 2.0], [-0.0, 0.0, 0.0, -0.0], [np.nan, 1.0, np.nan, 5.0], [-np.inf] * 4]
    )
    got = x.argmax(1, keepdim=keepdim)
    assert got.node.op is Ops.MACRO and got.node.arg == ("argmax", (1, keepdim))
    assert got.dtype == fg.int64 and got.shape == ((4, 1) if keepdim else (4,))
    assert got.numpy().reshape(-1).tolist() == [1, 0, 0, 0]
    assert x.argmin(1, keepdim=keepdim).numpy().reshape(-1).tolist() == [0, 0, 0, 0]
    values, indices = x.max(0, keepdim=keepdim)
    assert indices.numpy().reshape(-1).tolist() == [2, 0, 2, 2]
    assert fg.tensor([[2, 7, 7], [9, 1, 9]]).argmax(-1).tolist() == [1, 0]
    assert fg.zeros(3, 4).argmax(0).tolist() == [0, 0, 0, 0]  # (a constant: folded)


@pytest.mark.parametrize(("name", "op", "ref"), COMPOSED_FLOAT_OPS, ids=lambda v: v)
def test_composed_float_ops_of_0d_and_empty_tensors(name, op, ref):
    """The one-node ops at 0-d (-0.0, -1, 1 and 2.5 against 2 or -2) and on empty tensors:
    numpy's values and zero signs (torch's, for a remainder's zero), empty results of the
    input's shape."""
    for a, b in [(-0.0, 2.0), (-1.0, -2.0), (1.0, 2.0), (2.5, -2.0)]:
        got = op(fg.tensor(a), fg.tensor(b))
        assert got.shape == ()
        if ref is None:
            continue
        with np.errstate(all="ignore"):
            want = ref(np.float32(a), np.float32(b)) if name in BINARY_OPS else ref(np.float32(a))
        if name == "remainder" and want == 0:
            want = np.copysign(np.float32(0.0), np.float32(a))
        value = np.float32(got.item())
        assert np.isclose(value, want, rtol=1e-6, equal_nan=True), (a, b, value, want)
        assert np.signbit(value) == np.signbit(want), (a, b, value, want)
    empty = op(fg.zeros(0), fg.ones(0))
    assert empty.shape == (0,) and empty.numpy().size == 0
    assert op(fg.zeros(2, 0), fg.ones(2, 0)).shape == (2, 0)


BINARY_OPS = ("floor_divide", "fmod", "remainder", "atan2")


def test_logsumexp_and_argmax_of_0d_and_size_1_axes():
    x = fg.tensor(-0.0)
    assert x.logsumexp(0).item() == 0.0 and x.argmax().item() == 0
    assert fg.tensor(float("-inf")).logsumexp(0).item() == float("-inf")
    assert fg.tensor([[3.0], [-1.0]]).argmax(1).tolist() == [0, 0]
    assert fg.tensor([[3.0], [-1.0]]).logsumexp(1).tolist() == [3.0, -1.0]


def test_heaviside_float_power_and_ldexp_as_torchs():
    inf, nan = math.inf, math.nan
    x = fg.tensor([-1.0, -0.0, 0.0, 2.0, nan, inf, -inf])
    assert fg.heaviside(x, fg.tensor([0.5])).tolist() == [0.0, 0.5, 0.5, 1.0, 0.0, 1.0, 0.0]
    ints = fg.heaviside(fg.tensor([-2, 0, 3]), fg.tensor([7]))
    assert ints.tolist() == [0, 7, 1] and ints.dtype == fg.int64
    with pytest.raises(fg.DTypeError, match="different dtypes"):
        fg.heaviside(x, fg.tensor([1]))
    a = fg.tensor([1.0, -2.0], requires_grad=True)
    out = a.heaviside(fg.tensor([0.5]))
    assert out.requires_grad  # (as torch's: and its backward refuses)
    with pytest.raises(RuntimeError, match="derivative for 'heaviside'"):
        out.sum().backward()
    p = fg.float_power(fg.tensor([2, -2, 0]), 0.5)
    assert p.dtype == fg.float64 and p.tolist()[0] == math.sqrt(2) and math.isnan(p.tolist()[1])
    assert fg.float_power(2, fg.tensor([3])).tolist() == [8.0]
    with pytest.raises(fg.DTypeError, match="requires dtype float64"):  # (torch's refusal)
        fg.tensor([2.0]).float_power_(2)
    assert fg.tensor([2.0], dtype=fg.float64).float_power_(3).tolist() == [8.0]
    assert fg.ldexp(fg.tensor([1.0, 3.0]), fg.tensor([3, -1])).tolist() == [8.0, 1.5]
    assert fg.ldexp(fg.tensor([1, 3]), fg.tensor([3, -1])).dtype == fg.float32
    assert fg.ldexp(fg.tensor([1.0], dtype=fg.float16), fg.tensor([20])).tolist() == [inf]
    b = fg.tensor([2.0], requires_grad=True)
    b.ldexp(fg.tensor([3])).sum().backward()
    assert b.grad.tolist() == [8.0]


# PyTorch 2.14.1's float64 values and gradients at these pairs (torch.fmod, torch.remainder;
# torch.floor_divide's values), the sign of every zero included
_PAIRS = [
    (0.0, 1.0),
    (-0.0, 1.0),
    (0.0, -1.0),
    (1.0, 1.0),
    (-1.0, 1.0),
    (1.0, -1.0),
    (2.5, 1.0),
    (-2.5, 1.0),
    (2.5, -2.0),
    (7.0, 2.0),
    (-7.0, 2.0),
    (7.0, -2.0),
    (1.0, math.inf),
    (-1.0, math.inf),
    (math.inf, 2.0),
    (math.nan, 2.0),
    (3.0, 0.0),
    (1.0, 0.5),
    (5.0, 2.5),
    (-5.0, 2.5),
]
_TORCH = {'floor_divide': ([0.0, -0.0, -0.0, 1.0, -1.0, -1.0, 2.0, -3.0, -2.0, 3.0, -4.0,
                   -4.0, 0.0, -1.0, math.nan, math.nan, math.inf, 2.0, 2.0, -2.0],),
 'fmod': ([0.0, -0.0, 0.0, 0.0, -0.0, 0.0, 0.5, -0.5, 0.5, 1.0, -1.0, 1.0, 1.0,
           -1.0, math.nan, math.nan, math.nan, 0.0, 0.0, -0.0],
          [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
           1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
          [-0.0, 0.0, 0.0, -1.0, 1.0, 1.0, -2.0, 2.0, 1.0, -3.0, 3.0, 3.0, -0.0,
           0.0, -math.inf, math.nan, -math.inf, -2.0, -2.0, 2.0]),
 'remainder': ([0.0, -0.0, 0.0, 0.0, -0.0, 0.0, 0.5, 0.5, -1.5, 1.0, 1.0, -1.0,
                1.0, math.inf, math.nan, math.nan, math.nan, 0.0, 0.0, -0.0],
               [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
                1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
               [-0.0, 0.0, 0.0, -1.0, 1.0, 1.0, -2.0, 3.0, 2.0, -3.0, 4.0, 4.0,
                -0.0, 1.0, math.nan, math.nan, -math.inf, -2.0, -2.0, 2.0])}  # fmt: skip


@pytest.mark.parametrize("name", ["fmod", "remainder", "floor_divide"])
def test_division_family_at_special_points_as_torchs(name):
    a = fg.tensor([p[0] for p in _PAIRS], dtype=fg.float64, requires_grad=True)
    b = fg.tensor([p[1] for p in _PAIRS], dtype=fg.float64, requires_grad=True)
    fn = {"fmod": fg.fmod, "remainder": fg.remainder, "floor_divide": fg.floor_divide}[name]
    want = _TORCH[name]
    out = fn(a.detach(), b.detach()) if name == "floor_divide" else fn(a, b)
    same_bits(out.detach().numpy(), want[0])
    if name != "floor_divide":  # (no derivative, as torch's)
        out.sum().backward()
        same_bits(a.grad.numpy(), want[1])
        same_bits(b.grad.numpy(), want[2])


def same_bits(got, want):
    """Equal values, NaN where NaN, and every zero's sign."""
    want = np.array(want, np.float64)
    assert np.array_equal(got, want, equal_nan=True), (got, want)
    real = ~np.isnan(want)  # (a NaN's sign bit means nothing)
    assert np.array_equal(np.signbit(got[real]), np.signbit(want[real])), (got, want)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: fg.fmod(a, b),
        lambda a, b: a % b,
        lambda a, b: a // b,
        lambda a, b: fg.heaviside(a, b),
        lambda a, b: fg.ldexp(a, b.to(fg.int64)),
        lambda a, b: fg.float_power(a, b),
    ],
)
def test_this_sessions_binary_ops_on_empty_and_0d_inputs(fn):
    empty = fn(fg.zeros(0, 3), fg.ones(0, 3))
    assert empty.shape == (0, 3) and empty.numpy().size == 0
    scalar = fn(fg.tensor(3.0), fg.tensor(2.0))
    assert scalar.shape == () and np.isfinite(scalar.item())
    assert fn(fg.tensor(-0.0), fg.tensor(1.0)).shape == ()
