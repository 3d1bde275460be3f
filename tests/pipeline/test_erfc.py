"""The ERFC primitive: values and gradients at torch's special points on the CPU and on
the emulated CUDA device, accuracy over a wide range, and erfc far out where 1 - erf is 0.

The expected values are torch 2.13's `torch.erfc` and its gradient (written out: torch is
not installed in CI).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad.ir import node as N
from fusegrad.ir.dtypes import float64
from fusegrad.ir.ops import Ops
from fusegrad.ir.reference import evaluate
from fusegrad.pipeline.lower import kernel_name
from fusegrad.pipeline.schedule import schedule

inf, nan = math.inf, math.nan
X = [0.0, -0.0, 0.5, -1.0, 1.25, 3.0, 9.0, 10.0, 27.0, -6.0, inf, -inf, nan]
TORCH = {  # dtype: (erfc(X), d erfc / dx at X)
    "float32": (
        [1.0, 1.0, 0.4795001149177551, 1.8427008390426636, 0.07709987461566925,
         2.2090496713644825e-05, 4.137031708073991e-37, 1.401298464324817e-45, 0.0, 2.0, 0.0,
         2.0, nan],
        [-1.128379225730896, -1.128379225730896, -0.8787826299667358, -0.41510751843452454,
         -0.2365211397409439, -0.00013925305393058807, -7.492073225024278e-36,
         -4.203895392974451e-44, -0.0, -2.61730110207145e-16, -0.0, -0.0, nan],
    ),
    "float64": (
        [1.0, 1.0, 0.4795001221869535, 1.8427007929497148, 0.07709987174354177,
         2.209049699858544e-05, 4.13703174651381e-37, 2.088487583762545e-45, 5.23705e-319, 2.0,
         0.0, 2.0, nan],
        [-1.1283791670955126, -1.1283791670955126, -0.8787825789354448, -0.4151074974205947,
         -0.23652112244729076, -0.00013925305194674786, -7.492073428245975e-36,
         -4.197656231354417e-44, -2.8299433e-317, -2.617301239249265e-16, -0.0, -0.0, nan],
    ),
}  # fmt: skip


def ulps(got, want) -> np.ndarray:
    """|got - want| in units of want's ulp (0 where both are NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    both_nan = np.isnan(got) & np.isnan(want)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    spacing = np.spacing(np.abs(want)).astype(np.float64)
    return np.where(both_nan, 0.0, err / spacing)


def same_signs(got, want) -> bool:
    """The same sign bits where want is a number (a NaN's sign is not part of the answer)."""
    number = ~np.isnan(want)
    return np.array_equal(np.signbit(got[number]), np.signbit(want[number]))


def erfc_and_grad(dtype: str, device: str = "cpu"):
    x = fg.tensor(X, dtype=getattr(fg, dtype), device=device, requires_grad=True)
    y = x.erfc()
    assert y.node.op is Ops.ERFC
    y.sum().backward()
    return y.cpu().numpy(), x.grad.cpu().numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_points_against_torch_on_the_cpu(dtype):
    value, grad = erfc_and_grad(dtype)
    want_value, want_grad = (np.array(v, dtype) for v in TORCH[dtype])
    # float32 is computed in double and rounded once: torch's own answers; float64 within
    # the few ulps of the polynomial exp it calls
    bound = 0 if dtype == "float32" else 4
    assert ulps(value, want_value).max() <= bound
    assert ulps(grad, want_grad).max() <= bound
    assert same_signs(grad, want_grad)  # -0.0 at +-inf


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_points_against_torch_on_the_emulated_cuda_device(emulated, dtype):  # noqa: F811
    value, grad = erfc_and_grad(dtype, "cuda")
    want_value, want_grad = (np.array(v, dtype) for v in TORCH[dtype])
    # the device's erfcf/erfc (libm's in the emulator, CUDA's on a GPU: 2-5 ulp)
    assert ulps(value, want_value).max() <= 5
    assert ulps(grad, want_grad).max() <= 5
    assert same_signs(grad, want_grad)


def test_float32_is_rounded_once_and_float64_within_16_ulps():
    x = np.concatenate([np.linspace(-6.0, 10.0, 16_001), np.geomspace(1e-30, 1.0, 300)])
    want = np.array([math.erfc(v) for v in x])
    got64 = fg.tensor(x, dtype=fg.float64).erfc().numpy()
    assert ulps(got64, want).max() <= 16  # 4 from 1 on; 1 - erf loses 3 bits below
    x32 = x.astype(np.float32)
    want32 = np.array([math.erfc(v) for v in x32.astype(np.float64)])
    got32 = fg.tensor(x32).erfc().numpy()
    assert ulps(got32, want32.astype(np.float32)).max() <= 1


def test_far_out_where_one_minus_erf_is_zero():
    x = fg.tensor([6.0, 12.0, 26.0], dtype=fg.float64)
    assert (1 - x.erf()).tolist() == [0.0, 0.0, 0.0]
    want = [2.1519736712498913e-17, 1.3562611692059042e-64, 5.663192408856143e-296]
    assert ulps(x.erfc().numpy(), want).max() <= 4


def test_integers_compute_in_float32_and_fg_erfc_is_the_method():
    assert fg.erfc(fg.tensor([0, 1])).dtype is fg.float32
    assert fg.erfc(fg.tensor([0, 1])).tolist() == [1.0, 0.15729920566082]


def test_reference_evaluator_and_kernel_name():
    x = N.const(0.5, (3,), float64)
    assert evaluate(N.unary(Ops.ERFC, x)).tolist() == [math.erfc(0.5)] * 3  # folded
    y = fg.tensor([0.5, 1.0, 2.0]).erfc()
    (item,) = schedule([y.node], lambda n: n.op is Ops.BUFFER)
    assert kernel_name(item) == "e_erfc_3"
