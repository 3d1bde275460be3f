"""fusegrad.special: torch.special's names, and ndtr, entr and xlog1py against torch's
values and gradients at the special points (and, without torch, against math and
literals)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg

NAN, INF = float("nan"), float("inf")
POINTS = [-40.0, -5.0, -1.0, -0.8, -0.0, 0.0, 1e-300, 0.3, 0.7071, 1.0, 5.0, 40.0, INF, -INF, NAN]


def test_ndtr_entr_xlog1py_without_torch():
    x = fg.tensor(POINTS, dtype=fg.float64)
    got = fg.special.ndtr(x).numpy()
    want = [0.5 * math.erfc(-v / math.sqrt(2)) if not math.isnan(v) else NAN for v in POINTS]
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    e = fg.special.entr(fg.tensor([0.0, -0.0, 1.0, 0.5, -1.0, INF, NAN])).tolist()
    assert e[:3] == [0.0, 0.0, -0.0] and e[4] == -INF and e[5] == -INF and math.isnan(e[6])
    assert e[3] == pytest.approx(0.5 * math.log(2))
    xl = fg.special.xlog1py(fg.tensor([0.0, 0.0, 2.0, 1.0]), fg.tensor([-1.0, NAN, 0.5, -1.0]))
    assert xl.tolist()[0] == 0.0 and math.isnan(xl.tolist()[1]) and xl.tolist()[3] == -INF
    assert fg.special.expit(fg.tensor([0.0])).tolist() == [0.5]
    assert fg.special.xlogy(fg.tensor([0.0]), fg.tensor([0.0])).tolist() == [0.0]


@pytest.mark.parametrize(
    "name", ["ndtr", "entr", "expit", "erf", "erfc", "exp2", "expm1", "log1p", "sinc"]
)
def test_special_values_and_gradients_as_torchs(name):
    torch = pytest.importorskip("torch")
    values = [v for v in POINTS if not (name == "entr" and v == 0.0)]  # (torch: -inf slope)
    x = fg.tensor(values, dtype=fg.float64, requires_grad=True)
    t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    got, want = getattr(fg.special, name)(x), getattr(torch.special, name)(t)
    # torch's ndtr loses 4e-11 of Phi(-5) (docs/NUMERICS.md); fusegrad's is erfc's
    rtol = 1e-10 if name == "ndtr" else 1e-14
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=0)
    # gradients where both are computed from finite values: at +-40 and 1e-300 fusegrad's
    # sigmoid, expm1 and sinc gradients keep the tiny slope torch's formulas round to 0
    # (docs/NUMERICS.md), and a selected element's 0 gradient times inf is NaN in torch's
    inner = [i for i, v in enumerate(values) if math.isfinite(v) and 1e-100 < abs(v) < 40]
    (gf,) = fg.grad(got[inner].sum(), [x])
    (gt,) = torch.autograd.grad(want[inner].sum(), [t])
    np.testing.assert_allclose(gf.numpy()[inner], gt.numpy()[inner], rtol=1e-10, atol=1e-300)


def test_xlog1py_values_and_gradients_as_torchs():
    torch = pytest.importorskip("torch")
    xs = [0.0, 0.0, 2.0, -0.0, 1.0, 3.0, 0.0]
    ys = [-1.0, NAN, 0.5, -2.0, -0.5, INF, 0.25]
    fx, fy = (fg.tensor(v, dtype=fg.float64, requires_grad=True) for v in (xs, ys))
    tx, ty = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (xs, ys))
    got, want = fg.special.xlog1py(fx, fy), torch.special.xlog1py(tx, ty)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-15)
    gf = fg.grad(got.nansum(), [fx, fy])
    gt = torch.autograd.grad(want.nansum(), [tx, ty])
    for a, b in zip(gf, gt):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-14)
