"""Both renderers spell elementwise ops from the one table in `pipeline/optable.py`."""

from __future__ import annotations

import doctest

import pytest

from fusegrad.ir.dtypes import ALL_DTYPES, bool_, float32, float64, int32, int64, uint8
from fusegrad.ir.ops import BINARY, ELEMENTWISE, Ops
from fusegrad.ir.symbolic import Var, lin
from fusegrad.pipeline import gpu, optable
from fusegrad.pipeline.cuda import render_cuda
from fusegrad.pipeline.llvm import render_llvm
from fusegrad.pipeline.loopir import Alu, Kernel, Load, Loop, Param, Store

DTYPE_OF_KIND = {"f": float32, "i": int64, "b": bool_, "u": uint8}


def one_op_kernel(op: Ops, dt) -> Kernel:
    """out0[i] = op(in0[i], in1[i]) over 8 elements."""
    out_dt = bool_ if op in (Ops.CMPLT, Ops.CMPEQ) else dt
    out = Param("out0", out_dt, 8, True)
    a, b = Param("in0", dt, 8, False), Param("in1", dt, 8, False)
    i = Var("o0", 0, 7)
    args = ("v1", "v2") if op in BINARY else ("v1",)
    body = [
        Load("v1", dt, a, lin(i)),
        Load("v2", dt, b, lin(i)),
        Alu("v3", out_dt, op, args),
        Store(out, lin(i), "v3"),
    ]
    return Kernel(f"{op.name.lower()}_{dt.name}", [out, a, b], [Loop(i, 8, body, "parallel")], 8)


def test_every_elementwise_op_has_a_float_row():
    spelled_elsewhere = {Ops.WHERE, Ops.CAST}
    missing = [op.name for op in ELEMENTWISE - spelled_elsewhere if (op, "f") not in optable.OPS]
    assert not missing
    unsigned = {"u"} if any(dt.unsigned for dt in ALL_DTYPES) else set()
    assert {kind for _, kind in optable.OPS} == {dt.kind for dt in ALL_DTYPES} | unsigned


@pytest.mark.parametrize("key", list(optable.OPS), ids=lambda k: f"{k[0].name}-{k[1]}")
def test_each_row_is_what_both_renderers_print(key):
    op, kind = key
    row = optable.OPS[key]
    dt = DTYPE_OF_KIND[kind]
    kernel = one_op_kernel(op, dt)
    f = "f" if dt is float32 else ""
    args = ("v1", "v2") if op in BINARY else ("v1",)
    assert f"= {row.cuda.format(*args, t=dt.cuda, f=f)};" in render_cuda(kernel, "k")
    llvm = render_llvm(kernel, "k")
    if isinstance(row.llvm, optable.Intrinsic):
        assert f"@llvm.{row.llvm.name}." in llvm
    elif isinstance(row.llvm, optable.MathFn):
        assert f"{row.llvm.name}" in llvm
    elif row.llvm == optable.SAFE_DIV:
        assert "sdiv" in llvm
    elif row.llvm == optable.SAFE_UDIV:
        assert "udiv" in llvm
    else:
        assert f" = {row.llvm.split()[0]} " in llvm


def test_changing_a_row_changes_both_backends(monkeypatch):
    kernel = one_op_kernel(Ops.ADD, float64)
    monkeypatch.setitem(
        optable.OPS, (Ops.ADD, "f"), optable.OpRow("fsub {t} {0}, {1}", "{0} - {1}")
    )
    assert "const double v3 = v1 - v2;" in render_cuda(kernel, "k")
    assert " = fsub double " in render_llvm(kernel, "k")


def test_a_missing_row_is_named():
    with pytest.raises(NotImplementedError, match="EXP on int32: no row in pipeline/optable.py"):
        render_cuda(one_op_kernel(Ops.EXP, int32), "k")


@pytest.mark.parametrize("module", [optable, gpu], ids=["optable", "gpu"])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
