"""Register tiles: which tile a reduction's loop nest takes on the CPU (`choose_tile`).

A tile (`Tile`) is a block of outputs that accumulate in registers: `cols` vector lanes
along one output group (or along the sum, `lanes`), unrolled `rows` times along another
(and `rows2` times along a third: a grid), so each loaded value serves several
accumulators. `choose_tile` reads the plain loop nest's loads (`TileReads`) and picks
the lanes' axis by the data they load contiguously, the rows' axis by the data the
rows share, and which group's tiles go outermost (`_outermost`). `pipeline/lower.py`
asks it, `pipeline/loop_nest.py` emits the tile, `pipeline/tile_tuning.py` lists the
tiles an autotuner may time instead. The tile widths the frontend also needs are in
`pipeline/tiling.py`.

The host's registers (`wide_registers`, `full_width_fma`) are asked here, and every
module asks them through this one (`tile_choice.wide_registers()`), so a test may
stand in another host by replacing them here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..ir.ops import Ops
from ..ir.symbolic import Mod, Var, lin
from . import templates
from .coords import split_lanes
from .llvm_math import host_has
from .loopir import Kernel, Load, Loop
from .peel import guards_taps
from .schedule import ScheduleItem
from .tiling import RAGGED_16_FROM, SHUFFLED_LANE_STEPS, TILE_COLS


@dataclass(frozen=True)
class Tile:
    """Register tiling of a reduction: `cols` outputs along out group `col` share each loaded
    value of the other operand, `rows` outputs along group `row` share each of this one's."""

    col: int | None
    cols: int
    row: int | None = None
    rows: int = 1
    lanes: bool = False  # vector lanes run along the innermost reduction loop instead of `col`
    row2: int | None = None  # a second unrolled output axis: a rows x rows2 grid of vectors
    rows2: int = 1
    first: int | None = None  # the out group whose tiles are the outermost (parallel) loop
    # out groups every vector load moves with (a convolution's images: each image's windows
    # are a panel of their own), kept outside the column tiles when those go outermost
    panels: tuple[int, ...] = ()
    cascade: bool = False  # lanes along a long float sum, summed in a tree (`pipeline/cascade.py`)

    @property
    def label(self) -> str:
        """The tile's rows as an autotuner names a candidate: "8", or "8x2" for a grid."""
        return f"{self.rows}x{self.rows2}" if self.row2 is not None else str(self.rows)


def tile_text(t: Tile) -> str:
    """A tile in words, for a kernel's dump header: "8 rows x 32 lanes"."""
    rows = f"{t.rows} x {t.rows2} rows" if t.row2 is not None else f"{t.rows} rows"
    if rows == "1 rows":
        rows = "1 row"
    along = " along the sum" if t.lanes else ""
    return f"{rows} x {t.cols} lanes{along}"


TILE_MIN_COLS = 4
TILE_MAX_ACCUMULATORS = 128  # beyond this LLVM stops keeping a tile in registers
TILE_GRID_ACCUMULATORS = 160  # a grid of lane rows: at most 20 8-lane or 10 16-lane registers
SHORT_REDUCTION = 16
TILE_ROWS = 4
# With 32 vector registers (AVX-512) a tile may hold twice the accumulator registers: 8 rows
# of one 16-lane register, or a 4 x 4 grid of lane rows (16 registers). More independent
# multiply-add chains keep both FMA ports busy, and each loaded vector serves more rows.
WIDE_TILE_ROWS = 8
WIDE_GRID_ACCUMULATORS = 256
# ... and a grid of rows of two registers each (32 float32 lanes along a long sum) up to 24
# registers: the 1-D weight gradient 32x128x1024 -> 128 (k3) takes 3 taps x 4 output
# channels, 14 loads for 24 multiply-adds, not 3 x 2 (10 for 12). (Rows of one 16-lane
# register keep 16: short sums, as the sentiment CNN's 5 x 2 grids, do not gain from more.)
WIDE_PAIR_GRID_ACCUMULATORS = 384
WIDE_VECTOR_BYTES = 64  # one AVX-512 register
L1_RESIDENT_BYTES = 16 << 10  # an operand this small stays in L1 while a tile loop sweeps
L2_RESIDENT_BYTES = 256 << 10  # an epilogue's array this small is read from L2 in any order


# Hosts with 16 vector registers of 8 float32 lanes (AVX2 without AVX-512): a tile's
# accumulators take at most 12 of them, the rest holding the loaded vectors and a broadcast:
# columns of two registers (16 lanes) by 6 rows (`_narrow_rows`); lanes along a sum two
# registers at most too. With 32 lanes by 4 rows (AVX-512's tile) all 16 registers held
# accumulators and every step spilled: a 1024^3 matmul on Zen 3 ran at 77 GFLOP/s, and at
# 155 with 16 x 4.
NARROW_TILE_COLS = 16
NARROW_TILE_ROWS = 6
NARROW_ACCUMULATOR_BYTES = 12 * 32
# From this many rows their 6-row tiles may leave a ragged last tile in any plan (shifted
# back: `ragged_rows`), recomputing at most 5 of the rows: a GPT step's products over 1024
# rows then hold 12 accumulators instead of 4 rows' 8 (Zen 3: 202 -> 177 ms a step).
NARROW_RAGGED_FROM = 8 * NARROW_TILE_ROWS


def wide_registers() -> bool:
    """Whether the host has 32 vector registers of 16 float32 lanes (AVX-512)."""
    return host_has("avx512f")


# Where AVX-512's multiply-adds run on full 512-bit units (Intel's server cores: two per
# cycle, four cycles deep, so eight independent chains keep them busy, and one 16-lane load
# of B must feed more rows to keep up), a tile of two 16-lane registers per row takes 8 rows
# (16 accumulators) instead of 4. AMD's Zen 4 splits each into two 256-bit halves and keeps
# the 4-row tile; Zen 5 (LLVM's `znver5`) has full 512-bit units and takes 8 rows.
FULL_WIDTH_TILE_ROWS = 8


@functools.lru_cache(maxsize=1)
def full_width_fma() -> bool:
    """Whether the host runs AVX-512 multiply-adds on full 512-bit units: AVX-512 and not
    AMD's Zen 4 (LLVM's `znver4`: its 4-row tiles were tuned there). Intel's server cores
    and Zen 5 do."""
    import llvmlite.binding as llvm

    return wide_registers() and llvm.get_host_cpu_name() != "znver4"


MIN_OUTER_TILES = 4  # a tile loop with fewer iterations does not become the parallel one
# Column tiles whose panels are an image's (`Tile.panels`, `TiledContraction._loop_order`)
# go inside the images' loop where it has at least this many iterations, or as many as the
# column tiles: the stride-2 convolution 32x64x56^2 -> 128 over 28-pixel rows walked its 7 column
# tiles outermost, each for all 32 images, would read every image's windows again in each
# of the 7 (its tile loop is unrolled by the rows' period); so images outermost, then the
# column tiles, then the output channels' tiles. (16: the parallel loop keeps iterations
# enough for a 16-thread host.)
PANELS_OUTER_TILES = 16


# Lanes along a sum over merged rows (`_sum_rows_merged`): 16, not the 32 an exact sum of
# 3136 would take, so the weight gradient's grid keeps 3 x 4 rows of one register each
# (with 32 lanes it fits 3 x 2, and loads 10 registers for every 12 multiply-adds).
SUM_MERGED_LANES = 16
# ... and its grid up to 24 registers of accumulators (3 kernel columns x 8 output channels,
# 11 loads for 24 multiply-adds): more chains per load, within the registers.
SUM_MERGED_GRID = 384


def fits_siblings(tile: Tile, siblings: int) -> bool:
    """Whether a register tile takes a kernel's sibling reductions (pipeline/schedule.py, rule 7),
    one accumulator tile each: lanes along the outputs (lanes along the sum combine one
    reduction's lanes at the end), and every accumulator still in registers."""
    size = tile.cols * tile.rows * tile.rows2 * (1 + siblings)
    return not tile.lanes and size <= TILE_MAX_ACCUMULATORS


@dataclass(frozen=True)
class TileReads:
    """What `choose_tile` reads off a plain loop nest.

    `loads`: the loads met once the walk has entered a reduction loop (the sum's operands,
    and an epilogue's after it); `every_load`: all of them; `red_vars`: the reduction
    loops' variables in the order met (the last is the innermost); `extents` and
    `out_vars`: the output groups' sizes and loop variables (`o0`, `o1`, ...).
    """

    item: ScheduleItem
    loads: list[Load]
    every_load: list[Load]
    red_vars: list[Var]
    extents: list[int]
    out_vars: list[Var]

    @property
    def inner(self) -> Var:
        """The innermost reduction loop's variable."""
        return self.red_vars[-1]

    def shuffled(self, ld: Load, step: int, lane_axis: int | None) -> bool:
        """Whether lanes along which `ld` moves by `step` load it as a shuffled vector
        (`SHUFFLED_LANE_STEPS`: step loads and a permute) that pays: rows share it, an
        output axis (other than the lanes' own, `lane_axis`) that it does not move with."""
        return step in SHUFFLED_LANE_STEPS and any(
            g != lane_axis and self.extents[g] > 1 and ld.index.coef(v) == 0
            for g, v in enumerate(self.out_vars)
        )


def tile_reads(plain: Kernel, item: ScheduleItem, out_groups) -> TileReads:
    """The loads and loops of `plain` (the item's loop nest grouped by `out_groups`)."""
    loads, red_vars, every_load = [], [], []

    def walk(body):
        for s in body:
            if isinstance(s, Loop):
                if s.kind == "reduce":
                    red_vars.append(s.var)
                walk(s.body)
            elif isinstance(s, Load):
                every_load.append(s)
                if red_vars:
                    loads.append(s)

    walk(plain.body)
    extents = [math.prod(item.root.shape[a] for a in g) for g in out_groups]
    out_vars = [Var(f"o{g}", 0, e - 1) for g, e in enumerate(extents)]
    return TileReads(item, loads, every_load, red_vars, extents, out_vars)


def choose_tile(
    plain: Kernel, item: ScheduleItem, out_groups, sum_lanes: int | None = None
) -> Tile | None:
    """Register-tile a reduction, or leave the plain loop nest when it already vectorizes.

    - Some load walks memory with a stride along the innermost reduction loop
      (a matmul's right operand, a column sum): the output axis along which
      those loads are contiguous becomes a vector of `cols` accumulators
      (`columns_tile`).
    - Every load is contiguous along (or does not move with) the innermost
      reduction loop, and some output axis leaves a load unchanged (a
      convolution's weight gradient): vector lanes run along the reduction and
      that output axis is unrolled `rows` times, so each load serves every row
      (`lanes_along_sum`).
    - Otherwise a long reduction is left to LLVM's vectorizer (a row sum), and
      a short one (a convolution's kernel width) gets an output-axis vector.

    Another output axis is unrolled `rows` times in the first case too. `sum_lanes`
    fixes the lanes along the sum (`SUM_MERGED_LANES`, a sum over merged rows).
    """
    if item.reduce is None or not out_groups:
        return None
    reads = tile_reads(plain, item, out_groups)
    if not reads.loads:
        return None
    inner = reads.inner
    strided = [
        ld
        for ld in reads.loads
        if abs(step_along(ld.index, inner)) > 1
        and not reads.shuffled(ld, ld.index.coef(inner), None)
    ]
    # taps read through padding (a depthwise convolution's): the tile's loops are peeled
    # (`peel_guarded_loops`), so a ragged last vector along the sum is an iteration of its own
    peeled = any(guards_taps(ld.valid, set(reads.red_vars)) for ld in reads.loads)
    if not strided:
        tile = lanes_along_sum(reads, peeled, sum_lanes)
        if tile is not None:
            return tile
        if inner.max + 1 >= SHORT_REDUCTION:
            return None
    return columns_tile(reads, peeled)


def step_along(index, v: Var) -> int:
    """How far `index` moves as `v` steps by one, within a period of the remainders it
    takes of `v` (`(v % 16) * 1024` moves 1024: a merged loop over a concatenation's rows
    of 16 reads its pieces down their columns).

    >>> v = Var("r0", 0, 1023)
    >>> step_along(lin(v) % 16 * 1024 + 3, v), step_along(lin(v) * 2 + lin(v) // 16, v)
    (1024, 2)
    """
    step = index.coef(v)
    for atom, c in index.terms:
        if isinstance(atom, Mod) and v in atom.x.atoms():
            step += c * atom.x.coef(v)
    return step


def lanes_along_sum(reads: TileReads, peeled: bool, sum_lanes: int | None) -> Tile | None:
    """A tile whose vector lanes run along the innermost reduction loop, for a sum every
    load of which is contiguous along it (or does not move with it, or is a shuffled
    vector: a strided convolution's weight gradient), with rows along an output axis
    some load does not move with (so rows share that load). None where there is none."""
    loads, inner, extents, out_vars = reads.loads, reads.inner, reads.extents, reads.out_vars
    # lanes load as vectors (a strided convolution's weight gradient: shuffled windows)
    unit = all(
        ld.index.coef(inner) in (0, 1) or reads.shuffled(ld, ld.index.coef(inner), None)
        for ld in loads
    )
    ragged_ok = reads.item.reduce.op is Ops.SUM
    lanes = sum_lanes or _vector_width(inner.max + 1, ragged_ok, along_sum=True)
    if lanes and lanes > NARROW_TILE_COLS and not wide_registers():
        # (with 16 registers rows of two: a 3x3 convolution's weight gradient over 32-pixel
        # rows, 3 taps x 32 lanes, loaded 16 registers for 12 multiply-adds; Zen 3: 18.8 ms
        # -> 14.6 forward and weight gradient, 16 x 64 x 32^2 -> 64)
        lanes = NARROW_TILE_COLS
    # (a peeled tile's short sum is a window's taps: its lanes go along the output row)
    short = peeled and inner.max + 1 < SHORT_REDUCTION
    lanes = lanes if unit and not short else None
    # an output axis some load does not depend on: rows along it share that load
    shared = [
        g
        for g, v in enumerate(out_vars)
        if extents[g] > 1 and any(ld.index.coef(v) == 0 for ld in loads)
    ]
    if not lanes or not shared:
        return None
    row = max(shared, key=lambda g: (sum(ld.index.coef(out_vars[g]) == 0 for ld in loads), g))
    rows = extents[row] if extents[row] <= 8 else _lane_tile_rows(reads, extents[row])
    shuffles = [ld for ld in loads if ld.index.coef(inner) in SHUFFLED_LANE_STEPS]
    if shuffles and wide_registers():
        tile = _shuffled_grid(reads, shuffles, shared, lanes)
        if tile:
            return tile
    if not rows:
        return None
    return _lane_rows(reads, row, rows, lanes, shared, peeled, sum_lanes)


def _lane_tile_rows(reads: TileReads, extent: int) -> int | None:
    """The rows of a tile of lanes along the sum over an output axis of `extent` (more
    than 8): `TILE_ROWS` in a plan whose sizes vary (`ragged_rows`: the last tile shifted
    back, so a batch of 309 rows takes the tile a batch of 360 does, not 3-row ones), else
    the largest divisor of the rows up to it."""
    if ragged_rows(reads):
        return TILE_ROWS
    return _divisor(extent, TILE_ROWS, 2)


def _lane_rows(reads: TileReads, row, rows, lanes, shared, peeled, sum_lanes) -> Tile:
    """`rows` rows of lanes along the sum on output group `row`, as a grid by a second
    axis of `shared` where one pays: one whose loads the first one's rows do not share (a
    weight gradient's output channels, next to its kernel columns); or, in a peeled
    tile, one that shares a load with them (a depthwise weight gradient's kernel rows,
    next to its columns: the output gradient serves every tap, and 9 accumulators are 9
    chains of multiply-adds, not 3)."""
    extents, out_vars = reads.extents, reads.out_vars

    def grid_pays(g: int) -> bool:
        steps = [(ld.index.coef(out_vars[row]), ld.index.coef(out_vars[g])) for ld in reads.loads]
        return any(a == 0 and (b != 0 or peeled) for a, b in steps)

    others = [g for g in shared if g != row and grid_pays(g)]
    room = _lane_grid_accumulators(reads.item, lanes, sum_lanes) // (rows * lanes)
    counts = (8, 4, 3, 2) if sum_lanes else (4, 3, 2)
    ragged = ragged_rows(reads)  # (the grid's last tile shifted back too, as the rows')

    def fits(extent: int, r: int) -> bool:
        return r <= room and (extent % r == 0 or (ragged and extent > r))

    for g in sorted(others, key=lambda g: -extents[g]):
        rows2 = next((r for r in counts if fits(extents[g], r)), None)
        if rows2:
            first = _outermost(reads, {row: rows, g: rows2})
            return Tile(None, lanes, row, rows, lanes=True, row2=g, rows2=rows2, first=first)
    return Tile(None, lanes, row, rows, lanes=True)


def _lane_grid_accumulators(item: ScheduleItem, lanes: int, sum_lanes: int | None) -> int:
    """The most accumulators a grid of rows of lanes along the sum may hold."""
    grid = WIDE_GRID_ACCUMULATORS if wide_registers() else TILE_GRID_ACCUMULATORS
    if wide_registers() and lanes * item.reduce.dtype.itemsize == 2 * WIDE_VECTOR_BYTES:
        grid = WIDE_PAIR_GRID_ACCUMULATORS  # rows of two registers each
    return SUM_MERGED_GRID if sum_lanes else grid


def columns_tile(reads: TileReads, peeled: bool) -> Tile | None:
    """A tile whose vector lanes run along the output axis whose loads are most data read
    contiguously (`column_score`), with rows unrolled along the output axis the vector
    loads do not depend on, so each loaded vector serves every row (a convolution's output
    channels, a matmul's rows). None where no axis's lanes load more than they gather."""
    loads, extents, out_vars = reads.loads, reads.extents, reads.out_vars
    widths = [_column_width(e) for e in extents]
    votes = [column_score(reads, widths, g) for g in range(len(extents))]
    col = max(range(len(extents)), key=lambda g: (votes[g], g))
    if votes[col] <= 0:
        return None
    cols = widths[col]
    if cols is None:
        return None
    vector_loads = [
        ld
        for ld in loads
        if lane_step(reads, widths, ld, col) == 1
        or reads.shuffled(ld, lane_step(reads, widths, ld, col), col)
    ]

    def shared(g: int) -> int:
        return sum(ld.param.size for ld in vector_loads if out_vars[g] not in ld.index.atoms())

    candidates = [g for g in range(len(extents)) if _rows_for(reads, g, col, cols)]
    if not candidates:
        return Tile(col, cols)
    row = max(candidates, key=lambda g: (shared(g), g))
    rows = _rows_for(reads, row, col, cols)
    first = _outermost(reads, {row: rows, col: cols})
    if (
        first is None
        and peeled
        and not any(out_vars[row] not in ld.index.atoms() for ld in vector_loads)
    ):
        # no vector load is shared by the rows (a depthwise convolution's rows are channels):
        # no panel of it to keep in cache (`Lowerer._loop_order`), so the groups keep their
        # order and each row tile streams its own rows in order
        first = 0
    panels = tuple(
        g
        for g, v in enumerate(out_vars)
        if g not in (col, row) and extents[g] > 1 and all(ld.index.coef(v) for ld in vector_loads)
    )
    return Tile(col, cols, row, rows, first=first, panels=panels if vector_loads else ())


def _column_width(extent: int) -> int | None:
    """Lanes for a vector of columns along an output axis of `extent` (at most
    NARROW_TILE_COLS on a host without AVX-512)."""
    w = _vector_width(extent, True)
    if w and w > NARROW_TILE_COLS and not wide_registers():
        return NARROW_TILE_COLS
    return w or _divisor(extent, TILE_COLS[0], TILE_MIN_COLS)  # short: 5 -> 5


def lane_step(reads: TileReads, widths: list, ld: Load, g: int) -> int:
    """How far a load's address moves from one lane to the next, with lanes along g.

    Read off the index once the tile splits the loop (o = q * width + t), so a layout
    that is affine only within aligned tiles (a packed matmul operand's n//32, n%32)
    counts as contiguous."""
    w, extent, var = widths[g], reads.extents[g], reads.out_vars[g]
    if not w or extent % w:
        return ld.index.coef(var)
    q = Var("q", 0, extent // w - 1)
    t = Var("t", 0, w - 1)
    index = ld.index.substitute({var: lin(q) * w + t})
    if split_lanes(index, t, w):  # two contiguous runs (a window over merged rows)
        return 1
    return index.coef(t)


def column_score(reads: TileReads, widths: list, g: int) -> int:
    """Output axis g's score as the tile's columns: the data its lanes would load
    contiguously, minus the data they would have to gather; a shuffled vector counts its
    share of the loads it takes."""
    total = 0
    for ld in reads.loads:
        c = lane_step(reads, widths, ld, g)
        if c == 1:
            total += ld.param.size
        elif reads.shuffled(ld, c, g):
            total += ld.param.size // c
        elif c != 0:
            total -= ld.param.size
    return total


def ragged_rows(reads: TileReads) -> bool:
    """Whether the tile's rows may leave a ragged last tile: in a plan whose sizes vary
    (`templates.active()`), so that one tile serves every row count and the kernels of the
    next sizes differ only in their literals (a batch of 309 rows takes 8-row tiles, as one
    of 360 does, not 3-row ones). The last tile is shifted back to end at the last row
    (`TiledContraction._open_tile_loops`): the rows it shares with the tile before are
    computed twice, alike, and stored twice; where the rows divide the count, the last
    tile is the one before it again (`Lowerer.shifted_last`), so the kernel's form does
    not depend on the divisors of the count. Not where a load is guarded (a window read
    through padding), whose edge tiles are peeled by their rows' ranges. A plan of sizes
    that never vary keeps rows that divide its row count, but on a host with 16 registers
    from `NARROW_RAGGED_FROM` rows (`_narrow_rows`)."""
    return templates.active() and not _guarded(reads)


def _guarded(reads: TileReads) -> bool:
    """Whether some load of the kernel is guarded (a window read through padding): its
    tiles' edges are peeled by their rows' ranges, so its rows stay whole."""
    return any(ld.valid for ld in reads.every_load)


def _rows_for(reads: TileReads, g: int, col: int, cols: int) -> int | None:
    """The rows a tile of `cols` columns along group `col` unrolls along group g, or None
    where g takes none."""
    extent = reads.extents[g]
    if g == col or extent <= 1:
        return None
    if not wide_registers():  # (16 registers: `NARROW_TILE_ROWS`)
        return _narrow_rows(reads, extent, cols)
    if extent <= 2 * TILE_ROWS and extent * cols <= TILE_MAX_ACCUMULATORS:
        return extent
    ragged = ragged_rows(reads)

    def fits(rows: int) -> bool:  # (a ragged last tile is shifted back: `ragged_rows`)
        return extent % rows == 0 or (ragged and extent > rows)

    if cols <= 16 and fits(WIDE_TILE_ROWS) and wide_registers():
        return WIDE_TILE_ROWS  # rows of one register each
    if (
        cols * reads.item.reduce.dtype.itemsize == 2 * WIDE_VECTOR_BYTES
        and fits(FULL_WIDTH_TILE_ROWS)
        and full_width_fma()
    ):
        return FULL_WIDTH_TILE_ROWS  # rows of two registers each
    if fits(TILE_ROWS):
        return TILE_ROWS
    # an odd row count (a 1-D convolution's input gradient over 50 word-vector channels,
    # a batch of 10): the largest divisor up to 2 x TILE_ROWS, so each loaded vector
    # still serves several rows (one row: one multiply-add per two loads)
    return _divisor(extent, 2 * TILE_ROWS, 2)


def _narrow_rows(reads: TileReads, extent: int, cols: int) -> int | None:
    """`_rows_for` on a host with 16 vector registers: as many rows as the accumulators'
    share of them holds (`NARROW_ACCUMULATOR_BYTES`), up to NARROW_TILE_ROWS: 6 in a plan
    whose sizes vary (`ragged_rows`), else 6 or 5 where they divide the rows, else 6 where
    the last tile may be ragged (`NARROW_RAGGED_FROM` rows and no guarded load), else the
    largest divisor (4 for 44 rows)."""
    most = NARROW_ACCUMULATOR_BYTES // max(cols * reads.item.reduce.dtype.itemsize, 1)
    if most < 2:
        return None
    if extent <= min(most, 2 * TILE_ROWS):
        return extent
    top = min(NARROW_TILE_ROWS, most)
    if ragged_rows(reads) and extent > top:
        return top  # (one tile for every size of a plan whose sizes vary)
    exact = _divisor(extent, top, TILE_ROWS + 1)  # (6 or 5 rows, dividing the rows)
    if exact:
        return exact
    if extent >= NARROW_RAGGED_FROM and not _guarded(reads):
        return top
    return _divisor(extent, top, 2)


# A weight gradient whose windows are shuffled vectors (a strided convolution's, lanes along
# the output pixels) takes a grid of 8 output channels (rows sharing each shuffled window)
# by its whole kernel width (up to 3: rows sharing each gradient vector). A shuffle runs on
# one of the two FMA ports, so the more rows share it the better, up to the registers:
# 8 x 3 accumulators and 3 windows.
SHUFFLED_GRID_ROWS = 8
SHUFFLED_GRID_ROWS2 = 3


def _shuffled_grid(reads: TileReads, shuffles, shared, lanes: int) -> Tile | None:
    """The grid of rows for a sum along whose lanes some loads are shuffled vectors
    (`shuffles`): rows along the output axis those loads do not move with, and a second
    axis, the smallest that they move with and the other loads do not (a kernel column)."""
    loads, out_vars, extents = reads.loads, reads.out_vars, reads.extents
    rows_axes = [g for g in shared if all(ld.index.coef(out_vars[g]) == 0 for ld in shuffles)]
    if not rows_axes:
        return None
    row = max(rows_axes, key=lambda g: (extents[g], g))
    rows = _divisor(extents[row], SHUFFLED_GRID_ROWS, 2)
    others = [
        g
        for g in shared
        if g != row
        and extents[g] <= SHUFFLED_GRID_ROWS2
        and all(ld.index.coef(out_vars[g]) != 0 for ld in shuffles)
        and any(ld.index.coef(out_vars[g]) == 0 for ld in loads)
    ]
    if not rows or not others:
        return None
    row2 = min(others, key=lambda g: (extents[g], g))
    steps = {row: rows, row2: extents[row2]}
    first = _outermost(reads, steps)
    return Tile(None, lanes, row, rows, lanes=True, row2=row2, rows2=extents[row2], first=first)


def _outermost(reads: TileReads, steps: dict[int, int]) -> int | None:
    """Of a tile's two output groups (group -> its step), the one whose tiles should be the
    outer loop, so that the data streamed through the inner loop is the least (`reads.loads`:
    those inside the reduction, `reads.every_load`: the kernel's, its epilogue's included).

    With group `a` outer, the loads that move with `b` but not with `a` are read again
    for every tile of `a`, once per sweep of the inner loop, while the tile of `a`'s own
    operand stays in L1 across the sweep. A linear layer's weight gradient (X^T dY, X
    64x784 and dY 64x128) streams X 32 times with the rows outer (6.4 MB) but dY 49 times
    with the columns outer (1.6 MB): twice as fast. An operand of at most
    `L1_RESIDENT_BYTES` is read once whichever loop is outer. None: keep the groups' own order
    (also when the better outer loop has too few tiles to share among threads).
    """
    loads, every_load, out_vars, extents = (
        reads.loads,
        reads.every_load,
        reads.out_vars,
        reads.extents,
    )
    (a, step_a), (b, step_b) = steps.items()
    if 0 not in (a, b):  # the outer loop is another axis (a batch): leave it
        return None
    if any(
        ld.index.coef(out_vars[a])
        and ld.index.coef(out_vars[b])
        and ld.param.size * ld.dtype.itemsize > L2_RESIDENT_BYTES
        for ld in every_load
    ):
        # an epilogue reading large arrays of the output's shape (an optimizer update fused
        # after a weight gradient): those streams run in order only with the groups' own
        # order, and measured, that matters more than the operand traffic saved
        return None
    tiles = {a: extents[a] // step_a, b: extents[b] // step_b}

    def streamed(outer: int, inner: int) -> int:
        # (a load moves with a loop whose variable its index holds at any depth: a packed
        # panel's column is `o1 % 32 + (o1 // 32) * 8192`, with no plain term in o1)
        moving = [
            ld
            for ld in loads
            if out_vars[inner] in ld.index.atoms() and out_vars[outer] not in ld.index.atoms()
        ]
        sizes = [ld.param.size * ld.dtype.itemsize for ld in moving]
        # an operand that fits L1 stays there across the sweeps: read once (a recurrent
        # layer's 16 hidden rows against its 1 MB weight, which then is read once too)
        return sum(n if n <= L1_RESIDENT_BYTES else tiles[outer] * n for n in sizes)

    now, other = (a, b) if a == 0 else (b, a)  # group 0 is the outer loop today
    if tiles[other] < MIN_OUTER_TILES or streamed(other, now) >= streamed(now, other):
        return None
    return other


# From RAGGED_16_FROM (pipeline/tiling.py) an output axis of 8 (mod 16) takes masked 16-lane
# vectors on AVX-512 (twice the FLOPs per multiply-add for 8/7 of the lanes). LeNet's
# 24-pixel rows keep 8-lane vectors.


def _vector_width(n: int, ragged_ok: bool, along_sum: bool = False) -> int | None:
    """Lanes for a vector along an axis of n: a power of two (the machine's registers hold
    8 or 16 floats; other widths compile to spilled pieces). One that divides n, else,
    where a ragged last vector may be masked, 16 or 8 lanes with the last one partial.

    An output axis of 9..15 takes one 16-lane vector (half the instructions of two
    8-lane ones); lanes along a sum take 16 only from 12 on, since each ragged vector
    there also pays for zeroing its lanes past the end (measured on LeNet's kernels).
    With AVX-512, an output axis of 8 (mod 16) from `RAGGED_16_FROM` on takes 16 lanes too,
    the last vector masked (a mask computed once per tile, so its loads and stores cost
    what unmasked ones do): a convolution over 56-pixel rows then multiplies 16 lanes at a
    time instead of 8 (twice the FLOPs per instruction for 8/7 of the lanes). So do lanes
    along such a sum: a weight gradient's, whose lanes run along the summed pixels (masked
    loads read zeros past the row, so the last vector's products add nothing). On a core
    with 512-bit FMA units an 8-lane FMA costs what a 16-lane one does. A depthwise weight
    gradient's tile is `peeled` (pipeline/peel.py), its ragged vector an iteration of its own.
    """
    exact = next((c for c in TILE_COLS if n % c == 0), None)
    if exact == 8 and ragged_ok and n >= RAGGED_16_FROM and wide_registers():
        return 16  # 56 -> 16, 16, 16, 8 of 16: the vectors hold 7/8 of AVX-512's FMA lanes
    if exact or not ragged_ok:
        return exact
    return 16 if n >= (12 if along_sum else 9) else 8 if n >= 6 else None


def _divisor(n: int, most: int, least: int) -> int | None:
    """The largest divisor of n in [least, most], or None."""
    return next((c for c in range(min(most, n), least - 1, -1) if n % c == 0), None)
