"""The closed set of IR primitives, as one enum with op groups as sets.

Everything a user writes (sigmoid, softmax, matmul, conv2d, losses) is a
composition of these. (`MACRO` is not a primitive: one node standing for a
registered composition, ir/macro.py; nothing past the scheduler sees it.)

Adding a primitive means its member here (its group sets, and for a float
function its `MATH` row, which spells it for every backend and names its Tensor
method), one reference-evaluator line (ir/reference.py), one gradient rule
(ir/autodiff.py) and, for a float function LLVM has no intrinsic for, its
polynomial (pipeline/llvm_math.py). Other elementwise ops take one row in
pipeline/optable.py, read by both renderers; tests/ir/test_op_tables.py names
any table a primitive is missing from.

>>> MATH[Ops.SQRT]
MathOp(name='sqrt', intrinsic=True, branches=False)
>>> Ops.EXP in UNARY and Ops.EXP in TRANSCENDENTAL
True
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto


class Ops(Enum):
    # leaves
    BUFFER = auto()  # realized data; arg is the runtime Buffer
    CONST = auto()  # a scalar broadcast to the node's shape; arg is the Python value
    RAND = auto()  # uniform [0, 1) from a counter-based hash of (key, index); src: the key
    # an integer's own row-major position: element i holds i (an index table that is never
    # stored: argmax's positions, a write's places; no sources)
    INDEX = auto()
    # unary elementwise
    NEG = auto()
    EXP = auto()
    LOG = auto()
    SIN = auto()
    COS = auto()  # its own reduction (pipeline/llvm_math.py), not sin(x + pi/2) rounded
    SQRT = auto()
    ERFC = auto()  # 1 - erf(x) without that subtraction (which cancels to 0 far out)
    RECIP = auto()
    CAST = auto()  # arg is unused; the node's dtype is the target
    # binary elementwise
    ADD = auto()
    MUL = auto()
    DIV = auto()
    MAX = auto()
    CMPLT = auto()
    CMPEQ = auto()
    # a float's remainder of a / b with a's sign, C's fmod: exact at every ratio of a to b
    # (the CPU's `frem`, CUDA's `fmod`); floats only
    FMOD = auto()
    # ternary elementwise
    WHERE = auto()
    # reductions over arg = tuple of axes; the reduced axes keep size 1
    SUM = auto()
    REDUCE_MAX = auto()
    # movement: zero-copy views
    RESHAPE = auto()  # arg = new shape
    PERMUTE = auto()  # arg = axis order
    EXPAND = auto()  # arg = new shape (only size-1 axes grow)
    PAD = auto()  # arg = ((before, after), ...) per axis, zeros outside
    SHRINK = auto()  # arg = ((start, stop), ...) per axis
    FLIP = auto()  # arg = tuple of axes
    # a user's request that a value be materialized (contiguous())
    CONTIGUOUS = auto()
    # the identity, through which no gradient flows (detach(), no_grad())
    DETACH = auto()
    # data-dependent rows: srcs (table, index); out[s..., r...] = table[index[s...], r...]
    # (0 where the index is outside the table)
    GATHER = auto()
    # srcs (values, index), arg = rows V; out[v, r...] = sum of values[s..., r...] over the s
    # with index[s...] == v (indices outside [0, V) add nothing): the gradient of GATHER
    SCATTER_ADD = auto()
    # not a primitive: a library op (linear, cross_entropy) as one node, arg = (kind,
    # params), whose value is its expansion's (ir/macro.py); the scheduler and the
    # reference evaluator see the expansion, autodiff differentiates it
    MACRO = auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    # members are singletons: hash by identity (Enum's default hashes the name, in Python,
    # and every node lookup hashes its op)
    __hash__ = object.__hash__


@dataclass(frozen=True)
class MathOp:
    """A float function primitive's spellings, all derived from `name`: the method
    `t.<name>()` and `fg.<name>(t)` (frontend/mathops.py), CUDA's `<name>` (`<name>f` for
    float32), and on the CPU `@llvm.<name>` where `intrinsic` (LLVM's own vectorizable
    intrinsic), else fusegrad's polynomial `<name>` in pipeline/llvm_math.py. Each is
    transcendental: the scheduler prices it higher, and kernel names mention it."""

    name: str
    intrinsic: bool = False
    # fusegrad's CPU form sends a rare lane (an argument beyond its own reduction's range)
    # to the C library's function (pipeline/llvm_math.py, `MathFn.branches`)
    branches: bool = False


# The float functions, one row each; their value and gradient are in ir/reference.py and
# ir/autodiff.py (tests/ir/test_op_tables.py names a table a row is missing from).
MATH: dict[Ops, MathOp] = {
    Ops.EXP: MathOp("exp"),
    Ops.LOG: MathOp("log"),
    Ops.SIN: MathOp("sin", branches=True),
    Ops.COS: MathOp("cos", branches=True),
    Ops.SQRT: MathOp("sqrt", intrinsic=True),
    Ops.ERFC: MathOp("erfc"),
}

LEAF = {Ops.BUFFER, Ops.CONST, Ops.INDEX}
UNARY = {Ops.NEG, Ops.RECIP, Ops.CAST} | set(MATH)
BINARY = {Ops.ADD, Ops.MUL, Ops.DIV, Ops.MAX, Ops.CMPLT, Ops.CMPEQ, Ops.FMOD}
TERNARY = {Ops.WHERE}
ELEMENTWISE = UNARY | BINARY | TERNARY
REDUCE = {Ops.SUM, Ops.REDUCE_MAX}
MOVEMENT = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
COMPARISON = {Ops.CMPLT, Ops.CMPEQ}
TRANSCENDENTAL = set(MATH)

# What a reduction starts from.
REDUCE_IDENTITY = {Ops.SUM: 0.0, Ops.REDUCE_MAX: float("-inf")}
# The elementwise op that combines two partial results of a reduction.
REDUCE_COMBINE = {Ops.SUM: Ops.ADD, Ops.REDUCE_MAX: Ops.MAX}
