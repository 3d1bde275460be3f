"""How a reduction is summed on the CPU: its identity, and which of the loop nest's
strategies takes it.

Besides a register tile (`pipeline/tile_choice.py`), a reduction may run as a cascade: a
float sum as a tree of vector accumulators (`cascade_lanes`; a tile's own sum,
`tile_cascades`; several rows at once, `cascade_rows`), PyTorch's accuracy at one long
loop's speed; or a float max in vector lanes (`lane_max`), which LLVM's vectorizer would
leave scalar. `pipeline/lower.py` asks these in turn; `pipeline/cascade.py` and
`pipeline/loop_nest.py` emit what they choose.
"""

from __future__ import annotations

import functools
import math

from ..ir.dtypes import DType
from ..ir.ops import Ops
from ..ir.symbolic import FloorDiv, Lin, Mod
from .llvm_math import host_has
from .loopir import AccUpdate, Alu, Const, Kernel, Load, Loop, Select, Store
from .schedule import ScheduleItem


def zero_value(dtype: DType):
    """The zero of `dtype` as a Python value: False, 0 or 0.0.

    >>> from fusegrad.ir.dtypes import float32, int32
    >>> zero_value(float32), zero_value(int32)
    (0.0, 0)
    """
    return False if dtype.is_bool else 0 if dtype.is_int else 0.0


def reduce_identity(op: Ops, dtype: DType):
    """The value an accumulator of reduction `op` over `dtype` starts from: 0 for a sum,
    the least value of the dtype for a max (-inf for a float).

    >>> from fusegrad.ir.dtypes import float32, int8
    >>> reduce_identity(Ops.REDUCE_MAX, float32), reduce_identity(Ops.REDUCE_MAX, int8)
    (-inf, -128)
    """
    if op is Ops.SUM:
        return zero_value(dtype)
    if dtype.is_float:
        return float("-inf")
    if dtype.is_bool:
        return False
    return 0 if dtype.unsigned else -(2 ** (8 * dtype.itemsize - 1))


LANE_MAX_MIN = 8  # a shorter row's max stays one scalar loop


CASCADE_ROWS = 2  # rows of a cascaded sum one thread streams at once
CASCADE_ROWS_MIN_TILES = 8  # enough tiles left to share among the threads


def cascade_rows(item: ScheduleItem, out_groups, red_groups) -> tuple[int, int] | None:
    """(out group, rows) for a cascaded sum summed CASCADE_ROWS rows at a time
    (pipeline/cascade.py, `CascadeSums._lane_cascade`): one reduction group, and an output
    group the rows divide into at least CASCADE_ROWS_MIN_TILES tiles. None: one row at a
    time (`gen_cascade`)."""
    if len(red_groups) != 1:
        return None
    for g, group in enumerate(out_groups):
        extent = math.prod(item.root.shape[a] for a in group)
        if extent % CASCADE_ROWS == 0 and extent // CASCADE_ROWS >= CASCADE_ROWS_MIN_TILES:
            return g, CASCADE_ROWS
    return None


CASCADE_FANOUT = 16  # vectors (or blocks) an accumulator receives before it moves up a level
# A shorter sum is accurate as LLVM vectorizes it: at most 64 adds in each of its lanes,
# where a loop body too large to interleave (a softmax's exp and sum) leaves one vector of
# partial sums, 16 lanes with AVX-512 and 8 with AVX2 (a 1000-long softmax row left to it on
# AVX2 was off by several ulps in every output of the row).
CASCADE_ADDS_PER_LANE = 64


@functools.cache
def cascade_min() -> int:
    """The shortest float sum summed as a cascade (`cascade_lanes`, `tile_cascades`, a row
    statistic's `Lowerer._gen_row_reduce`): CASCADE_ADDS_PER_LANE times the float32 lanes
    of the host's vectors, 1024 with AVX-512, 512 without."""
    return CASCADE_ADDS_PER_LANE * (16 if host_has("avx512f") else 8)


# the shortest innermost loop a cascaded sum takes: a batch norm's 8 x 8 plane is two vectors
# of 32 lanes, which LLVM otherwise sums as one scalar chain, unrolled (twice the compile)
CASCADE_MIN_ROW = 64
CASCADE_TILE_MAX = 64  # a tile's accumulators, times its levels, must fit the registers


def tile_cascades(item: ScheduleItem, red_groups, size: int) -> bool:
    """Whether a register tile of `size` accumulators (not lanes along the sum) sums as a
    cascade (`CascadeSums._tile_cascades`): a float sum over one reduction group at least
    `cascade_min()` long, into at most CASCADE_TILE_MAX accumulators."""
    red = item.reduce
    if red.op is not Ops.SUM or not red.dtype.is_float:
        return False
    if len(red_groups) != 1 or size > CASCADE_TILE_MAX:
        return False
    return math.prod(red.srcs[0].shape) // max(red.numel, 1) >= cascade_min()


def _streamed_reduce_loop(plain: Kernel) -> Loop | None:
    """The innermost reduction loop of a plain kernel when every operand it reads is read
    contiguously along it, or not at all (a row sum, a row max); else None."""
    inner: list[Loop] = []

    def walk(body):
        for s in body:
            if isinstance(s, Loop):
                if s.kind == "reduce":
                    inner[:] = [s]
                walk(s.body)

    walk(plain.body)
    if not inner:
        return None
    loop = inner[0]

    def divides(e: Lin) -> bool:  # the loop variable inside a division: lane by lane
        return any(isinstance(a, (FloorDiv, Mod)) and loop.var in a.x.atoms() for a in e.atoms())

    for s in loop.body:
        # (a store: a value the sum stores at its source's coordinates, pipeline/schedule.py rule 8)
        if not isinstance(s, (Load, Store, Const, Alu, Select, AccUpdate)):
            return None
        moves = isinstance(s, (Load, Store))
        if moves and (s.index.coef(loop.var) not in (0, 1) or divides(s.index)):
            return None
        if any(divides(c) for c in getattr(s, "valid", ())):
            return None
    return loop


def lane_max(plain: Kernel, item: ScheduleItem, red_groups) -> bool:
    """Whether a float max reduction runs in vector lanes (`Lowerer.gen_lane_max`): one
    reduction group, read contiguously along its innermost loop, at least LANE_MAX_MIN long."""
    red = item.reduce
    if red is None or red.op is not Ops.REDUCE_MAX or not red.dtype.is_float:
        return False
    loop = _streamed_reduce_loop(plain)
    return len(red_groups) == 1 and loop is not None and loop.extent >= LANE_MAX_MIN


def cascade_lanes(plain: Kernel, item: ScheduleItem) -> int:
    """The vector width of a cascaded sum for this kernel, or 0 where it keeps its plain loops.

    A float sum of at least `cascade_min()` elements per output whose innermost reduction loop
    reads every operand contiguously, or not at all (a row sum, a softmax denominator, a
    full sum), is summed in a tree (see `CascadeSums.gen_cascade`): as fast as one long loop,
    with PyTorch's accuracy instead of an error growing with the length. Sums read with a
    stride (column sums, matmuls) keep their register tiles.
    """
    red = item.reduce
    if red is None or red.op is not Ops.SUM or not red.dtype.is_float:
        return 0
    if math.prod(red.srcs[0].shape) // max(red.numel, 1) < cascade_min():
        return 0
    loop = _streamed_reduce_loop(plain)
    if loop is None or loop.extent < CASCADE_MIN_ROW:
        return 0
    return 64 if loop.extent >= 256 else 32
