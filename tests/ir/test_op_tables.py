"""Every primitive is in every table it must be in, and a missing entry is named.

A primitive's places: its row in `ir/ops.py` (a float function's row in `MATH` carries
its spellings), its line in the reference evaluator (`ir/numpy_ops.py`), its gradient
rule (`ir/autodiff.py`), and, for a float function LLVM has no intrinsic for, its
polynomial (`pipeline/llvm_math.py`). The rest is derived from those, and checked here.
"""

from __future__ import annotations

import fusegrad as fg
from fusegrad.ir import autodiff, numpy_ops
from fusegrad.ir.ops import ELEMENTWISE, LEAF, MATH, TRANSCENDENTAL, UNARY, MathOp, Ops
from fusegrad.pipeline import kernel_names, llvm_math, optable


def missing_tables(op: Ops) -> list[str]:
    """The tables `op` should be in and is not."""
    needs = {}
    if op not in LEAF and op is not Ops.MACRO:  # leaves are read, macros expanded first
        needs["ir/numpy_ops.py NUMPY_OPS"] = op in numpy_ops.NUMPY_OPS
    if op not in LEAF:
        needs["ir/autodiff.py VJP"] = op in autodiff.VJP
    if op in ELEMENTWISE - {Ops.WHERE, Ops.CAST}:  # those two each renderer spells itself
        needs["pipeline/optable.py OPS (float row)"] = (op, "f") in optable.OPS
    if op in MATH:
        row = MATH[op]
        if not row.intrinsic:
            needs["pipeline/llvm_math.py (a @_polynomial generator)"] = (
                row.name in llvm_math._GENERATORS
            )
        needs["ir/ops.py UNARY"] = op in UNARY
        needs["ir/ops.py TRANSCENDENTAL"] = op in TRANSCENDENTAL
        needs["pipeline/kernel_names.py kernel names"] = op in kernel_names._NOTABLE
        needs[f"Tensor.{row.name}"] = callable(getattr(fg.Tensor, row.name, None))
        needs[f"fg.{row.name}"] = callable(getattr(fg, row.name, None))
    return [table for table, present in needs.items() if not present]


def test_every_primitive_is_in_every_table_it_needs():
    missing = {op.name: m for op in Ops if (m := missing_tables(op))}
    assert not missing, f"primitives missing from tables: {missing}"


def test_a_new_float_function_is_named_in_each_table_it_lacks(monkeypatch):
    # a row whose function nothing else knows: each table it needs is named
    monkeypatch.setitem(MATH, Ops.NEG, MathOp("bogus"))
    assert missing_tables(Ops.NEG) == [
        "pipeline/llvm_math.py (a @_polynomial generator)",
        "ir/ops.py TRANSCENDENTAL",
        "pipeline/kernel_names.py kernel names",
        "Tensor.bogus",
        "fg.bogus",
    ]


def test_a_primitive_without_a_gradient_rule_is_named(monkeypatch):
    monkeypatch.delitem(autodiff.VJP, Ops.COS)
    monkeypatch.delitem(numpy_ops.NUMPY_OPS, Ops.COS)
    assert missing_tables(Ops.COS) == ["ir/numpy_ops.py NUMPY_OPS", "ir/autodiff.py VJP"]


def test_the_float_rows_of_the_op_table_come_from_the_math_rows():
    for op, row in MATH.items():
        spelled = optable.OPS[op, "f"]
        assert spelled.cuda == row.name + "{f}({0})"
        kind = optable.Intrinsic if row.intrinsic else optable.MathFn
        assert isinstance(spelled.llvm, kind) and spelled.llvm.name == row.name
