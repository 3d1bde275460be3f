"""fg.hypot and fg.xlogy at their special points, values and gradients as torch 2.13's
(float64; the gradient of the sum)."""

from __future__ import annotations

import math

import numpy as np

import fusegrad as fg

NAN, INF = math.nan, math.inf
A = [0.0, 0.0, 0.0, 1.0, 2.0, -1.0, NAN, 0.0, 3.0, -0.0, INF, 1e300, 1e-300, NAN]
B = [0.0, NAN, 2.0, 0.0, 3.0, -2.0, 1.0, -1.0, INF, 0.0, 2.0, 1e300, 1e-300, INF]

HYPOT = [0.0, NAN, 2.0, 1.0, 3.605551275463989, 2.23606797749979, NAN, 1.0, INF, 0.0, INF,
         1.4142135623730952e300, 1.414213562373095e-300, INF]  # fmt: skip
HYPOT_DA = [NAN, NAN, 0.0, 1.0, 0.5547001962252291, -0.4472135954999579, NAN, 0.0, 0.0, NAN,
            NAN, 0.7071067811865475, 0.7071067811865476, NAN]  # fmt: skip
HYPOT_DB = [NAN, NAN, 1.0, 0.0, 0.8320502943378437, -0.8944271909999159, NAN, -1.0, NAN, NAN,
            0.0, 0.7071067811865475, 0.7071067811865476, NAN]  # fmt: skip
XLOGY = [0.0, NAN, 0.0, -INF, 2.1972245773362196, NAN, NAN, 0.0, INF, 0.0, INF,
         6.907755278982137e302, -6.907755278982137e-298, NAN]  # fmt: skip
XLOGY_DX = [0.0, NAN, 0.6931471805599453, -INF, 1.0986122886681098, NAN, 0.0, 0.0, INF, 0.0,
            0.6931471805599453, 690.7755278982137, -690.7755278982137, INF]  # fmt: skip
XLOGY_DY = [NAN, NAN, 0.0, INF, 0.6666666666666666, 0.5, NAN, -0.0, 0.0, NAN, INF, 1.0, 1.0,
            NAN]  # fmt: skip


def _check(fn, value, da, db):
    a = fg.tensor(A, dtype=fg.float64, requires_grad=True)
    b = fg.tensor(B, dtype=fg.float64, requires_grad=True)
    out = fn(a, b)
    out.sum().backward()
    for got, want in ((out, value), (a.grad, da), (b.grad, db)):
        got, want = got.numpy(), np.array(want)
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
        finite = ~np.isnan(want)
        assert (np.signbit(got[finite]) == np.signbit(want[finite])).all()  # -0.0 stays


def test_hypot_special_points_and_gradient():
    _check(fg.hypot, HYPOT, HYPOT_DA, HYPOT_DB)
    small = fg.hypot(fg.tensor([3.0]), fg.tensor([4.0]))
    assert small.dtype == fg.float32 and small.tolist() == [5.0]


def test_xlogy_special_points_and_gradient():
    _check(fg.xlogy, XLOGY, XLOGY_DX, XLOGY_DY)
    assert fg.tensor([1, 2]).xlogy(fg.tensor([3, 4])).dtype == fg.float32  # ints: default float
    t = fg.tensor([2.0, 0.0])
    t.xlogy_(3.0)
    assert t.tolist() == [np.float32(2 * math.log(3.0)), 0.0]
