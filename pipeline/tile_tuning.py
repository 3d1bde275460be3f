"""The register tiles an autotuner may time in place of the fixed choice (`tuning_space`).

`pipeline/lower.py` hands them, with a function that lowers one, to the runtime's
autotuner (`runtime/autotune.py`), which times them and keeps the fastest per shape class.
The fixed choice is `pipeline/tile_choice.py`'s; the candidates differ from it in their
rows (and a grid by a second axis, `grid_axis`) only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.dtypes import float32
from ..ir.ops import Ops
from ..ir.symbolic import FloorDiv, Lin, Mod, Var
from . import tile_choice
from .loopir import Kernel, Load, Loop
from .reductions import tile_cascades
from .schedule import ScheduleItem
from .tile_choice import WIDE_VECTOR_BYTES, Tile


@dataclass(frozen=True)
class TuningSpace:
    """The register tiles a float32 contraction could take, for an autotuner to time.

    `default` is `choose_tile`'s (the first candidate), `shape_class` names the kernels
    one timed choice serves (the operand sizes rounded up to powers of two, the vector
    width, the kernel's reads), and `work` is the kernel's multiply-adds (for launching).
    """

    shape_class: str
    candidates: tuple[Tile, ...]
    work: int

    @property
    def default(self) -> Tile:
        return self.candidates[0]


TUNE_ROWS = (4, 8, 12, 16)  # the row counts an autotuner times (those that divide the axis)
# ... and the grids of 16-lane vectors, rows x rows2 along a second axis (`grid_axis`):
# 2 vectors loaded for 8 or 12 broadcasts, 16 or 24 multiply-adds, where rows alone load
# 1 vector for 8 or 16 broadcasts. Faster for some convolutions and slower for others, so a
# candidate, timed, not a fixed choice.
TUNE_GRIDS = ((8, 2), (12, 2), (4, 4))
# multiply-adds below which a kernel is not tuned: its time is mostly not its tile's, and
# compiling its candidates would slow a small model's first step (the MLP's: 0.24 s)
TUNE_MIN_WORK = 1 << 26
TUNE_MAX_WORK = 1 << 35  # above this one timing run would take most of a tuning budget
TUNE_REGISTER_SHARE = 0.75  # of the vector registers, the most a tile's accumulators take


def tuning_space(
    chosen: Tile, item: ScheduleItem, out_groups, red_groups, plain: Kernel | None = None
) -> TuningSpace | None:
    """The tiles an autotuner may time in place of `chosen`, or None where there is no
    choice worth timing.

    Only a float32 sum of products with a vector of columns and unrolled rows (a matmul,
    a convolution as implicit GEMM, their gradients) whose inputs and outputs are all
    float32 (so random inputs read nowhere out of bounds); the candidates differ in their
    rows only, and only those that sum as `chosen` does (a cascade or one plain loop:
    `tile_cascades`), so each output is the same sum in the same order whichever is
    taken. (An epilogue's multiply and add may still be fused into one rounding by LLVM in
    one tile's kernel and not in another's: a fused SGD update, measured, differs in the
    last bit in 191 of 524288 weights. The tuner checks every candidate against the first
    within a tolerance, as the tests check against numpy's float64.)

    Where the columns are one AVX-512 register and the plain loop nest (`plain`) has a
    second output axis for a grid (`grid_axis`), grids of rows by it (`TUNE_GRIDS`) are
    candidates too.

    >>> TUNE_ROWS
    (4, 8, 12, 16)
    """
    red = item.reduce
    if red is None or red.op is not Ops.SUM or red.dtype is not float32:
        return None
    if chosen.col is None or chosen.row is None or chosen.lanes or chosen.row2 is not None:
        return None
    nodes = [*item.inputs, *item.outputs]
    if any(n.dtype is not float32 for n in nodes):
        return None
    shape = item.root.shape
    extents = [math.prod(shape[a] for a in g) for g in out_groups]
    depth = math.prod(red.srcs[0].shape) // max(red.numel, 1)
    work = item.root.numel * depth
    if not TUNE_MIN_WORK <= work <= TUNE_MAX_WORK:
        return None
    registers, width = (32, 64) if tile_choice.wide_registers() else (16, 32)
    room = int(registers * width * TUNE_REGISTER_SHARE)  # bytes of accumulators
    cascades = tile_cascades(item, red_groups, chosen.rows * chosen.cols)
    rows = [chosen.rows] + [
        r
        for r in TUNE_ROWS
        if r != chosen.rows
        and extents[chosen.row] % r == 0
        and r * chosen.cols * red.dtype.itemsize <= room
        and tile_cascades(item, red_groups, r * chosen.cols) == cascades
    ]
    candidates = [replace(chosen, rows=r) for r in rows]
    one_register = chosen.cols * red.dtype.itemsize == WIDE_VECTOR_BYTES
    grid = None
    if plain is not None and one_register and tile_choice.wide_registers():
        grid = grid_axis(plain, chosen, item, out_groups)
    if grid is not None:
        candidates += [
            replace(
                chosen,
                rows=r,
                row2=grid,
                rows2=r2,
                first=None if chosen.first == grid else chosen.first,
                panels=tuple(g for g in chosen.panels if g != grid),
            )
            for r, r2 in TUNE_GRIDS
            if extents[chosen.row] % r == 0
            and extents[grid] % r2 == 0
            and tile_cascades(item, red_groups, r * r2 * chosen.cols) == cascades
        ]
    if len(candidates) < 2:
        return None

    def bucket(n: int) -> int:
        return 1 << max(n - 1, 0).bit_length()

    sizes = ",".join(
        ("rows" if g == chosen.row else "lanes" if g == chosen.col else "") + str(bucket(e))
        for g, e in enumerate(extents)
    )
    reads = ",".join(str(len(n.shape)) for n in item.inputs)
    shape_class = f"float32 sum out[{sizes}] k{bucket(depth)} lanes{chosen.cols} reads[{reads}]"
    return TuningSpace(shape_class, tuple(candidates), work)


def grid_axis(plain: Kernel, chosen: Tile, item: ScheduleItem, out_groups) -> int | None:
    """A second output axis for a grid of `chosen`'s rows, or None: one along which every
    load read as a vector of columns moves and every other load (those broadcast to the
    rows) does not, so each broadcast value serves rows x rows2 vectors, not rows (a
    convolution's images, where its weights are broadcast and its windows are vectors)."""
    if chosen.col is None or chosen.row is None or chosen.lanes or chosen.row2 is not None:
        return None
    extents = [math.prod(item.root.shape[a] for a in g) for g in out_groups]
    out_vars = [Var(f"o{g}", 0, e - 1) for g, e in enumerate(extents)]
    col = out_vars[chosen.col]
    loads: list[Load] = []

    def walk(body, summed: bool):
        for s in body:
            if isinstance(s, Loop):
                walk(s.body, summed or s.kind == "reduce")
            elif isinstance(s, Load) and summed:
                loads.append(s)

    walk(plain.body, False)

    def moves(index: Lin, v: Var) -> bool:  # also inside a division (a merged group's rows)
        return any(
            a == v or (isinstance(a, (FloorDiv, Mod)) and moves(a.x, v)) for a in index.atoms()
        )

    vectors = [ld for ld in loads if moves(ld.index, col)]
    broadcast = [ld for ld in loads if not moves(ld.index, col)]
    if not vectors or not broadcast:
        return None
    axes = [
        g
        for g, v in enumerate(out_vars)
        if g not in (chosen.col, chosen.row)
        and extents[g] > 1
        and all(moves(ld.index, v) for ld in vectors)
        and not any(moves(ld.index, v) for ld in broadcast)
    ]
    return max(axes, key=lambda g: (extents[g], g)) if axes else None
