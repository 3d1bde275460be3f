"""Ulp tables of the polynomial transcendentals (pipeline/llvm_math.py) over wide ranges.

float32 results against numpy in float64; docs/NUMERICS.md has the full tables
(`scripts/ulp_tables.py`). cos is its own primitive (COS) sharing sin's reduction.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir import node as N
from fusegrad.ir.dtypes import float64
from fusegrad.ir.ops import Ops
from fusegrad.ir.reference import evaluate


def max_ulp(name, x, ref) -> float:
    got = getattr(fg.tensor(x), name)().numpy().astype(np.float64)
    want = ref(x.astype(np.float64))
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return float((np.abs(got - want) / spacing).max())


@pytest.mark.parametrize("name, ref", [("cos", np.cos), ("sin", np.sin)])
@pytest.mark.parametrize("bound", [100.0, 1e4, 1e5])
def test_sin_cos_within_one_ulp_in_float32(name, ref, bound):
    x = np.linspace(-bound, bound, 200_001).astype(np.float32)
    assert max_ulp(name, x, ref) <= 1.0


def test_cos_where_the_old_formula_failed():
    x = np.array([8436.7, 8436.69, 1e6 + 0.5, 3e7, 1e8, np.pi / 2], np.float32)
    got = fg.tensor(x).cos().numpy().astype(np.float64)
    want = np.cos(x.astype(np.float64))
    np.testing.assert_allclose(got, want, atol=6e-8, rtol=0)


def test_cos_special_values():
    x = fg.tensor([0.0, -0.0, math.inf, -math.inf, math.nan])
    out = x.cos().numpy()
    assert out[0] == 1.0 and out[1] == 1.0 and np.isnan(out[2:]).all()


@pytest.mark.parametrize(
    "name, ref, lo, hi, bound",
    [
        ("exp", np.exp, -87.0, 88.0, 2.0),
        ("log", np.log, 1e-6, 1e6, 3.0),
        ("tanh", np.tanh, -10.0, 10.0, 3.0),
        ("sigmoid", lambda v: 1 / (1 + np.exp(-v)), -30.0, 30.0, 3.0),
    ],
)
def test_other_functions_float32(name, ref, lo, hi, bound):
    x = np.linspace(lo, hi, 200_001).astype(np.float32)
    assert max_ulp(name, x, ref) <= bound


def test_float64_sin_cos_close_to_libm():
    x = np.linspace(-1e4, 1e4, 100_001)
    for name, ref in (("sin", np.sin), ("cos", np.cos)):
        got = getattr(fg.tensor(x), name)().numpy()
        np.testing.assert_allclose(got, ref(x), rtol=0, atol=4e-16)


def test_cos_primitive_gradient_and_reference():
    x = fg.tensor([0.0, 1.0, -2.0, 10.0], dtype="float64", requires_grad=True)
    x.cos().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), -np.sin([0.0, 1.0, -2.0, 10.0]), rtol=1e-15)
    y = fg.tensor([0.5, 3.0], dtype="float64", requires_grad=True)
    (g,) = fg.grad(y.sin().sum(), [y])
    np.testing.assert_allclose(g.numpy(), np.cos([0.5, 3.0]), rtol=1e-15)
    n = N.unary(Ops.COS, N.const(2.0, (2,), float64))
    np.testing.assert_array_equal(evaluate(n), np.cos([2.0, 2.0]))
    assert fg.tensor([1.0]).cos().node.op is Ops.COS


def _ulp_tables_script():
    import pathlib

    from _files import load_file

    path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "ulp_tables.py"
    module = load_file("ulp_tables", path)
    return module


def test_ulp_tables_script_rewrites_only_the_tables_of_numerics_md():
    """The script regenerates the tables, never the prose written by hand above them."""
    import pathlib

    script = _ulp_tables_script()
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "NUMERICS.md").read_text()
    prose = doc.partition(script.TABLES_HEADING)[0]
    assert "## Sums" in prose and "## float16 and bfloat16" in prose
    new = script.with_tables(doc, script.TABLES_HEADING + "\n| fresh table |\n")
    assert new == prose + script.TABLES_HEADING + "\n| fresh table |\n"
    with pytest.raises(ValueError, match="## float32"):
        script.with_tables("# Numerics\n\nno tables here\n", "x")
