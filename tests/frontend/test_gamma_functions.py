"""lgamma, digamma, polygamma and erfinv: values and gradients against known closed forms
(no torch needed), against PyTorch's float64 over dense grids where torch is installed,
and at the special points (test_special_points.py sweeps those against torch's table)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg

EULER = 0.5772156649015329
ZETA3 = 1.2020569031595942


def f64(values) -> fg.Tensor:
    return fg.tensor(values, dtype=fg.float64)


def close(got, want, rtol=1e-13, atol=0.0) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=atol)


def test_lgamma_at_the_integers_and_halves():
    n = np.arange(1, 30)
    close(f64(n).lgamma().tolist(), [math.lgamma(v) for v in n], atol=1e-15)
    assert f64([1.0, 2.0]).lgamma().tolist() == [0.0, 0.0]  # exact zeros
    close(f64([0.5]).lgamma().tolist(), [0.5 * math.log(math.pi)])
    # the reflection formula below 1/2: Gamma(-1/2) = -2 sqrt(pi), Gamma(-3/2) = 4 sqrt(pi)/3
    close(f64([-0.5, -1.5]).lgamma().tolist(), [math.log(2 * math.sqrt(math.pi)),
          math.log(4 * math.sqrt(math.pi) / 3)])  # fmt: skip


def test_lgamma_matches_pythons_over_a_wide_range():
    x = np.concatenate([np.linspace(-40.3, 40.3, 2001), np.geomspace(1e-6, 1e6, 400)])
    x = x[(x > 0) | (x != np.round(x))]  # (math.lgamma raises at the poles)
    want = [math.lgamma(v) for v in x]
    got = np.array(f64(x).lgamma().tolist())
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=3e-15)


def test_lgamma_poles_and_infinities():
    got = f64([0.0, -0.0, -1.0, -7.0, -1e30, math.inf, -math.inf, math.nan]).lgamma().tolist()
    assert got[:7] == [math.inf] * 7 and math.isnan(got[7])
    # every float from -2^52 on is a pole: inf there too, where lgamma(1 - x) overflows
    # (-2.7e305 was NaN, inf - inf)
    huge = -np.logspace(16, np.log10(np.finfo(np.float64).max), 200)
    assert f64(huge).lgamma().tolist() == [math.inf] * 200


def test_digamma_at_known_values():
    harmonic = np.cumsum(1 / np.arange(1, 20))
    close(f64(np.arange(2, 21)).digamma().tolist(), -EULER + harmonic, rtol=1e-14)
    close(f64([1.0, 0.5]).digamma().tolist(), [-EULER, -EULER - 2 * math.log(2)], rtol=1e-14)
    # the reflection: psi(1 - x) - psi(x) = pi cot(pi x)
    x = np.array([-0.25, -2.7, -10.1, 0.3])
    a, b = f64(1 - x).digamma().tolist(), f64(x).digamma().tolist()
    close(np.subtract(a, b), math.pi / np.tan(math.pi * x), rtol=1e-12)


def test_digamma_poles_signed_zeros_and_infinities():
    got = f64([0.0, -0.0, -1.0, -5.0, math.inf, -math.inf]).digamma().tolist()
    assert got[:2] == [-math.inf, math.inf]  # the side's, as torch's
    assert all(math.isnan(v) for v in got[2:4]) and got[4] == math.inf and math.isnan(got[5])


def test_polygamma_at_known_values():
    one = f64([1.0])
    close(fg.polygamma(1, one).tolist(), [math.pi**2 / 6])
    close(fg.polygamma(2, one).tolist(), [-2 * ZETA3], rtol=1e-13)
    close(fg.polygamma(3, one).tolist(), [math.pi**4 / 15], rtol=1e-13)
    close(one.polygamma(0).tolist(), [-EULER])
    # psi_1(x) + psi_1(1 - x) = pi^2 / sin^2(pi x), at negative x too
    x = np.array([-0.3, -3.7, 0.2])
    a, b = fg.polygamma(1, f64(x)).tolist(), fg.polygamma(1, f64(1 - x)).tolist()
    close(np.add(a, b), math.pi**2 / np.sin(math.pi * x) ** 2, rtol=1e-12)
    # the poles: (-1)^(n+1) inf (the side of +0)
    assert fg.polygamma(1, f64([0.0, -3.0])).tolist() == [math.inf, math.inf]
    assert fg.polygamma(2, f64([0.0, -3.0])).tolist() == [-math.inf, -math.inf]


def test_polygamma_takes_a_non_negative_int():
    for n in (-1, 1.5, True):
        with pytest.raises(RuntimeError, match="polygamma: n must be a non-negative int"):
            fg.polygamma(n, f64([1.0]))


def test_erfinv_in_the_tails():
    # (1 - |x|) in logarithms: the tail's start is far off, and erf(y) - x cancelled there
    # (erfinv(1 - 2^-52) was 5.41; values: the inverse of math.erfc to the last bits)
    for x, want in ((1 - 2**-52, 5.805018683193453), (1 - 1e-12, 5.042031898572696),
                    (-0.999999, -3.458910737275499), (-0.99, -1.8213863677184494)):  # fmt: skip
        close(f64([x]).erfinv().tolist(), [want], rtol=4e-16)
        assert abs(math.erfc(abs(want)) - (1 - abs(x))) <= 4e-15 * (1 - abs(x))


def test_erfinv_inverts_erf():
    # (to |x| = 3: past it erf's rounding alone moves the inverse by more than 1e-10)
    x = np.linspace(-3.0, 3.0, 1001)
    close(f64(x).erf().erfinv().tolist(), x, rtol=1e-10, atol=1e-13)
    close(f64([0.5]).erfinv().tolist(), [0.4769362762044699], rtol=1e-15)
    got = f64([1.0, -1.0, 1.5, -2.0, 0.0, -0.0, math.nan]).erfinv().tolist()
    assert got[:2] == [math.inf, -math.inf] and all(math.isnan(v) for v in got[2:4] + got[6:])
    assert math.copysign(1, got[4]) == 1 and math.copysign(1, got[5]) == -1


def test_erfinv_of_float32_is_within_an_ulp_of_the_float64_value_rounded():
    """A float32 x takes one Newton step, with erf and erfc to float32's need
    (`mathops.ERFINV_STEPS_FLOAT32`): within 1 ulp of the float64 path rounded, across
    (-1, 1) and into both tails; the ends and NaN as float64's."""
    u = np.concatenate([np.linspace(-1, 1, 200_001)[1:-1], 1 - np.logspace(-7.2, -0.3, 20_000),
                        np.linspace(-1e-4, 1e-4, 2_001)]).astype(np.float32)  # fmt: skip
    u = np.concatenate([u, -u])
    got = fg.tensor(u).erfinv().numpy()
    want = fg.tensor(u.astype(np.float64)).erfinv().numpy().astype(np.float32)
    steps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert steps.max() <= 1
    ends = fg.tensor(np.array([1, -1, 1.5, 0.0, -0.0, math.nan], np.float32)).erfinv().numpy()
    assert ends[0] == math.inf and ends[1] == -math.inf and np.isnan(ends[[2, 5]]).all()
    assert math.copysign(1, ends[3]) == 1 and math.copysign(1, ends[4]) == -1


def test_the_gradients_are_the_next_function():
    x = f64([0.3, 1.7, -2.5, 12.0]).requires_grad_()
    (g,) = fg.grad(x.lgamma().sum(), [x])
    close(g.tolist(), x.detach().digamma().tolist())
    (g,) = fg.grad(x.digamma().sum(), [x])
    close(g.tolist(), fg.polygamma(1, x.detach()).tolist())
    (g,) = fg.grad(fg.polygamma(2, x).sum(), [x])
    close(g.tolist(), fg.polygamma(3, x.detach()).tolist())
    # twice: lgamma'' = polygamma(1)
    (g,) = fg.grad(x.lgamma().sum(), [x], create_graph=True)
    (gg,) = fg.grad(g.sum(), [x])
    close(gg.tolist(), fg.polygamma(1, x.detach()).tolist())
    y = f64([-0.9, 0.0, 0.5, 0.99]).requires_grad_()
    (g,) = fg.grad(y.erfinv().sum(), [y])
    want = math.sqrt(math.pi) / 2 * np.exp(np.square(y.detach().erfinv().tolist()))
    close(g.tolist(), want)


def test_float32_is_rounded_once_from_float64():
    x = np.array([-0.5, 0.1, 1.4616321, 3.3, 25.0, -7.2], dtype=np.float32)
    for name in ("lgamma", "digamma", "erfinv"):
        xs = x if name != "erfinv" else x / 30
        got = getattr(fg.tensor(xs), name)().numpy()
        want = np.float32(getattr(fg.tensor(xs.astype(np.float64)), name)().numpy())
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def test_integer_inputs_give_float32_and_the_in_place_forms():
    assert fg.tensor([1, 2, 3]).lgamma().dtype == fg.float32
    t = f64([0.5, 2.0])
    t.lgamma_()
    close(t.tolist(), [0.5 * math.log(math.pi), 0.0])
    t = f64([1.0])
    t.polygamma_(1)
    close(t.tolist(), [math.pi**2 / 6])


def test_torch_special_names():
    x = f64([0.5, 3.0])
    close(fg.special.gammaln(x).tolist(), x.lgamma().tolist())
    close(fg.special.psi(x).tolist(), x.digamma().tolist())
    close(fg.special.digamma(x).tolist(), x.digamma().tolist())
    close(fg.special.polygamma(1, x).tolist(), fg.polygamma(1, x).tolist())
    close(fg.special.erfinv(f64([0.25])).tolist(), f64([0.25]).erfinv().tolist())


def test_against_torch_float64_on_dense_grids():
    torch = pytest.importorskip("torch")
    x = np.concatenate([np.linspace(-20.3, 20.3, 4001), np.geomspace(1e-5, 1e5, 300)])
    t = torch.tensor(x)
    for name, rtol, atol in (("lgamma", 1e-13, 1e-14), ("digamma", 1e-12, 1e-13)):
        got = np.array(getattr(f64(x), name)().tolist())
        np.testing.assert_allclose(got, getattr(torch, name)(t).numpy(), rtol=rtol, atol=atol)
    for n in (1, 2, 3):  # (torch's own float64 polygamma(1) is off by up to ~5e-10)
        got = np.array(fg.polygamma(n, f64(x)).tolist())
        np.testing.assert_allclose(got, torch.polygamma(n, t).numpy(), rtol=2e-9)
    u = np.linspace(-0.99999, 0.99999, 3001)
    got = np.array(f64(u).erfinv().tolist())
    np.testing.assert_allclose(got, torch.erfinv(torch.tensor(u)).numpy(), rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------- Bessel, erfcx, log_ndtr


def bessel_series(nu: int, x: float) -> float:
    """I_nu(x) from its power series (each term from the last), summed exactly by fsum."""
    term, terms = (x / 2) ** nu / math.factorial(nu), []
    for k in range(200):
        terms.append(term)
        term *= (x / 2) ** 2 / ((k + 1) * (k + 1 + nu))
    return math.fsum(terms)


def test_bessel_functions_overflow_to_inf():
    # 2 pi x overflowed past 2.9e307: 0 * inf was NaN
    x = [710.0, 1e300, 2.9e307, np.finfo(np.float64).max, -1.7e308]
    assert fg.i0(f64(x)).tolist() == [math.inf] * 5
    assert fg.special.i1(f64(x)).tolist() == [math.inf] * 4 + [-math.inf]


def test_bessel_functions_against_their_series():
    x = [0.0, 0.5, 1.0, 2.5, 10.0, 29.0, 31.0, 45.0, -3.0]
    close(f64(x).i0().tolist(), [bessel_series(0, abs(v)) for v in x], rtol=2e-15)
    close(fg.special.i1(f64(x)).tolist(), [math.copysign(bessel_series(1, abs(v)), v) for v in x],
          rtol=2e-15)  # fmt: skip
    scaled = [math.exp(-abs(v)) for v in x]
    close(fg.special.i0e(f64(x)).tolist(), np.multiply(f64(x).i0().tolist(), scaled), rtol=3e-15)
    close(fg.special.i1e(f64(x)).tolist(),
          np.multiply(fg.special.i1(f64(x)).tolist(), scaled), rtol=3e-15)  # fmt: skip
    # the limits: i0, i1 -> inf; the scaled ones -> 0 (i1e -0.0 at -inf), I0(0) = 1, I1(0) = 0
    ends = f64([math.inf, -math.inf])
    assert ends.i0().tolist() == [math.inf, math.inf]
    assert fg.special.i1(ends).tolist() == [math.inf, -math.inf]
    assert fg.special.i0e(ends).tolist() == [0.0, 0.0]
    assert [math.copysign(1, v) for v in fg.special.i1e(ends).tolist()] == [1.0, -1.0]


def test_bessel_gradients_are_torchs_rules():
    x = f64([-2.0, 0.0, 0.7, 40.0]).requires_grad_()
    d = x.detach()
    (g,) = fg.grad(x.i0().sum(), [x])
    close(g.tolist(), fg.special.i1(d).tolist())
    (g,) = fg.grad(fg.special.i1(x).sum(), [x])
    i0, i1 = np.array(d.i0().tolist()), np.array(fg.special.i1(d).tolist())
    want = np.where(d.numpy() == 0, 0.5, i0 - i1 / np.where(d.numpy() == 0, 1, d.numpy()))
    close(g.tolist(), want)
    (g,) = fg.grad(fg.special.i0e(x).sum(), [x])
    want = np.array(fg.special.i1e(d).tolist()) - np.sign(d.numpy()) * fg.special.i0e(d).numpy()
    close(g.tolist(), want, atol=1e-16)


def test_erfcx_and_log_ndtr_in_the_tails():
    x = np.array([-5.0, -1.0, 0.0, 0.5, 3.0, 10.0, 30.0, 1e6])

    def asymptotic(v):  # 1/(v sqrt(pi)) sum (-1)^n (2n - 1)!! / (2 v^2)^n
        terms = [(-1) ** n * math.prod(range(1, 2 * n, 2)) / (2 * v * v) ** n for n in range(10)]
        return math.fsum(terms) / (math.sqrt(math.pi) * v)

    want = [math.exp(v * v) * math.erfc(v) if v < 25 else asymptotic(v) for v in x]
    close(fg.special.erfcx(f64(x)).tolist(), want, rtol=1e-13)
    assert fg.special.erfcx(f64([math.inf, -math.inf])).tolist() == [0.0, math.inf]
    # log Phi(x): no 0 or -inf in either tail where the value is representable
    got = fg.special.log_ndtr(f64([-40.0, -1.0, 0.0, 2.0, 20.0])).tolist()
    phi = [0.5 * math.erfc(-v / math.sqrt(2)) for v in (-1.0, 0.0, 2.0)]
    close(got[1:4], [math.log(p) for p in phi], rtol=1e-14)
    close([got[0]], [-804.6084420137538], rtol=1e-13)  # -x^2/2 - log(-x sqrt(2 pi)) + ...
    close([got[4]], [-0.5 * math.erfc(20 / math.sqrt(2))], rtol=1e-12)


def test_mvlgamma_is_a_sum_of_lgammas():
    x = f64([2.5, 3.0, 7.25])
    want = [sum(math.lgamma(v - j / 2) for j in range(3)) + 1.5 * math.log(math.pi) for v in
            x.tolist()]  # fmt: skip
    close(x.mvlgamma(3).tolist(), want, rtol=1e-13)
    close(fg.special.multigammaln(x, 1).tolist(), x.lgamma().tolist())
    with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
        x.mvlgamma(0)


def test_bessel_and_tails_against_torch():
    torch = pytest.importorskip("torch")
    v = np.concatenate([np.linspace(-700, 700, 7001), np.geomspace(1e-6, 700, 300)])
    for name in ("i0e", "i1", "i1e"):
        got = np.array(getattr(fg.special, name)(f64(v)).tolist())
        np.testing.assert_allclose(got, getattr(torch.special, name)(torch.tensor(v)).numpy(),
                                   rtol=5e-15)  # fmt: skip
    np.testing.assert_allclose(np.array(f64(v).i0().tolist()), torch.i0(torch.tensor(v)).numpy(),
                               rtol=5e-15)  # fmt: skip
    u = np.linspace(-26, 37, 6301)  # (past 37, log_ndtr is subnormal)
    # (log_ndtr's upper tail, about -1e-74 past 18, is e^(-x^2/2) erfcx: 4e-13 relative there)
    for name, rtol in (("erfcx", 1e-13), ("log_ndtr", 1e-12)):
        got = np.array(getattr(fg.special, name)(f64(u)).tolist())
        np.testing.assert_allclose(got, getattr(torch.special, name)(torch.tensor(u)).numpy(),
                                   rtol=rtol)  # fmt: skip


def test_ndtri_inverts_the_normal_cdf_in_both_tails():
    p = [1e-300, 1e-20, 0.01, 0.3, 0.5, 0.975, 0.999]
    got = fg.special.ndtri(f64(p))
    back = [0.5 * math.erfc(-v / math.sqrt(2)) for v in got.tolist()]
    close(back, p, rtol=1e-13)
    assert got.tolist()[4] == 0.0
    ends = fg.special.ndtri(f64([0.0, 1.0, -0.1, 1.1, math.nan])).tolist()
    assert ends[:2] == [-math.inf, math.inf] and all(math.isnan(v) for v in ends[2:])
    x = f64([0.01, 0.5, 0.9]).requires_grad_()
    (g,) = fg.grad(fg.special.ndtri(x).sum(), [x])
    y = np.array(fg.special.ndtri(x.detach()).tolist())
    close(g.tolist(), math.sqrt(2 * math.pi) * np.exp(y * y / 2))


def test_ndtri_against_torch():
    torch = pytest.importorskip("torch")
    u = np.concatenate([np.linspace(1e-6, 1 - 1e-6, 5001), np.geomspace(1e-300, 0.02, 500)])
    got = np.array(fg.special.ndtri(f64(u)).tolist())
    np.testing.assert_allclose(got, torch.special.ndtri(torch.tensor(u)).numpy(), rtol=2e-14)
