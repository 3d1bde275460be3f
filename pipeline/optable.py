"""The op table: how each backend spells every elementwise op, one row per (op, dtype kind).

A new primitive is one row here, read by both renderers (plus its shape rule,
gradient rule and reference-evaluator line in `ir/`); a float function (exp, sqrt,
erfc, ...) is instead a row of `ir.ops.MATH`, from which its row here is made. The kind is
`DType.kind` of the operands: "f" float, "i" integer, "b" bool; "u" rows hold
the few ops where an unsigned integer (uint8) differs from a signed one, and an
unsigned op without one uses the "i" row (add, mul and neg wrap the same way).

    >>> from fusegrad.ir.ops import Ops
    >>> row = OPS[Ops.ADD, "f"]
    >>> row.llvm, row.cuda
    ('fadd contract {t} {0}, {1}', '{0} + {1}')

An LLVM entry is one of
  - an instruction template: `{t}` the (scalar or vector) type, `{0}` `{1}` the
    operands, `{one}` `{zero}` `{true}` constants of the type;
  - `Intrinsic(name, nargs)`: a call of `@llvm.<name>.<type>`;
  - `MathFn(name)`: fusegrad's own vectorizable function (`pipeline/llvm_math.py`);
  - `SAFE_DIV`: integer division that gives 0 for a zero divisor (several instructions).
A CUDA entry is a C expression: `{0}` `{1}` the operands (SSA names, so no
parentheses are needed around them), `{t}` the C type, `{f}` the `f` suffix of
float32 math functions. `fg_max` (in the CUDA prelude) propagates NaN as
numpy's `maximum` does, as LLVM's `maximum` does.

WHERE and CAST are not rows: each renderer spells them (a cast depends on two types).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.dtypes import DType
from ..ir.ops import MATH, Ops


@dataclass(frozen=True)
class Intrinsic:
    name: str
    nargs: int


@dataclass(frozen=True)
class MathFn:
    name: str
    # its body branches (a rare lane's slow path): a scalar loop calls it rather than
    # inlining it, naming its vector forms for LLVM's loop vectorizer (`llvm_math.variants`)
    branches: bool = False


SAFE_DIV = "safe integer division"  # signed: sdiv, on at least i32 (see llvm.py)
SAFE_UDIV = "safe unsigned integer division"


@dataclass(frozen=True)
class OpRow:
    llvm: object  # str | Intrinsic | MathFn | SAFE_DIV | SAFE_UDIV
    cuda: str


OPS: dict[tuple[Ops, str], OpRow] = {
    # float: `contract` lets a multiply and an add fuse into one FMA (one rounding, not two)
    (Ops.ADD, "f"): OpRow("fadd contract {t} {0}, {1}", "{0} + {1}"),
    (Ops.MUL, "f"): OpRow("fmul contract {t} {0}, {1}", "{0} * {1}"),
    (Ops.DIV, "f"): OpRow("fdiv {t} {0}, {1}", "{0} / {1}"),
    (Ops.NEG, "f"): OpRow("fneg {t} {0}", "-{0}"),
    (Ops.RECIP, "f"): OpRow("fdiv {t} {one}, {0}", "({t})1 / {0}"),
    (Ops.CMPLT, "f"): OpRow("fcmp olt {t} {0}, {1}", "{0} < {1}"),
    (Ops.CMPEQ, "f"): OpRow("fcmp oeq {t} {0}, {1}", "{0} == {1}"),
    (Ops.MAX, "f"): OpRow(Intrinsic("maximum", 2), "fg_max({0}, {1})"),
    # exact at every ratio: vectorized where that is exact, else the C library's fmod
    (Ops.FMOD, "f"): OpRow(MathFn("fmod", branches=True), "fmod{f}({0}, {1})"),
    # the float functions (exp, log, sqrt, ...): their rows come from ir/ops.py's MATH, below
    # signed integers
    (Ops.ADD, "i"): OpRow("add {t} {0}, {1}", "{0} + {1}"),
    (Ops.MUL, "i"): OpRow("mul {t} {0}, {1}", "{0} * {1}"),
    (Ops.DIV, "i"): OpRow(SAFE_DIV, "({1} == 0 ? ({t})0 : {0} / {1})"),
    (Ops.NEG, "i"): OpRow("sub {t} {zero}, {0}", "-{0}"),
    (Ops.CMPLT, "i"): OpRow("icmp slt {t} {0}, {1}", "{0} < {1}"),
    (Ops.CMPEQ, "i"): OpRow("icmp eq {t} {0}, {1}", "{0} == {1}"),
    (Ops.MAX, "i"): OpRow(Intrinsic("smax", 2), "fg_max({0}, {1})"),
    # unsigned integers, where they differ (C's unsigned char compares and divides unsigned)
    (Ops.DIV, "u"): OpRow(SAFE_UDIV, "({1} == 0 ? ({t})0 : {0} / {1})"),
    (Ops.CMPLT, "u"): OpRow("icmp ult {t} {0}, {1}", "{0} < {1}"),
    (Ops.MAX, "u"): OpRow(Intrinsic("umax", 2), "fg_max({0}, {1})"),
    # bool: + is or, * is and, - is not
    (Ops.ADD, "b"): OpRow("or {t} {0}, {1}", "{0} || {1}"),
    (Ops.MUL, "b"): OpRow("and {t} {0}, {1}", "{0} && {1}"),
    (Ops.MAX, "b"): OpRow("or {t} {0}, {1}", "{0} || {1}"),
    (Ops.NEG, "b"): OpRow("xor {t} {0}, {true}", "!{0}"),
    (Ops.CMPLT, "b"): OpRow("icmp ult {t} {0}, {1}", "{0} < {1}"),
    (Ops.CMPEQ, "b"): OpRow("icmp eq {t} {0}, {1}", "{0} == {1}"),
}
for _op, _fn in MATH.items():
    _llvm = Intrinsic(_fn.name, 1) if _fn.intrinsic else MathFn(_fn.name, _fn.branches)
    OPS[_op, "f"] = OpRow(_llvm, _fn.name + "{f}({0})")


def op_row(op: Ops, dtype: DType) -> OpRow:
    """The row of `op` on operands of `dtype`; NotImplementedError if no backend has one."""
    row = OPS.get((op, "u")) if dtype.unsigned else None
    row = row or OPS.get((op, dtype.kind))
    if row is None:
        raise NotImplementedError(f"{op.name} on {dtype.name}: no row in pipeline/optable.py")
    return row
