"""Lowering: one scheduled kernel (a subgraph) becomes a loop nest in the loop IR.

The kernel loops over its output; every node inside is generated at the
coordinates its consumer reads it at. Views never move data: each movement op
only rewrites the coordinate expressions on the way down to a load, and `PAD`
adds a validity condition outside which the value is zero.

Adjacent loops are merged when that removes no affine access (a contiguous
elementwise kernel becomes a single loop); a merge that would turn a strided
access into divisions is not made.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

from ..ir.dtypes import DType, float32, float64
from ..ir.node import Node
from ..ir.ops import ELEMENTWISE, REDUCE, REDUCE_COMBINE, TRANSCENDENTAL, Ops
from ..ir.schedule import ScheduleItem, is_squeeze
from ..ir.symbolic import FloorDiv, Lin, Mod, Var, lin
from .amx import lower_amx
from .coords import coords_from_groups as _coords_from_groups
from .coords import linear_index, split_lanes, squeeze_coords, strides_of
from .dpbf16 import lower_dpbf16
from .llvm_math import host_has
from .loopir import (
    AccInit,
    AccOnlineExp,
    AccRead,
    AccReduceLanes,
    AccUpdate,
    Alu,
    Const,
    Kernel,
    Load,
    LoadRow,
    Loop,
    Param,
    Position,
    Prefetch,
    Rand,
    ScatterAdd,
    Select,
    Store,
)
from .peel import (
    guards_taps,
    peel_guarded_loops,
    peel_padded_outputs,
    split_phases,
    unrolled_by_period,
)
from .tiling import (
    MAX_ROW_PERIOD,
    PANEL_CACHE_BYTES,
    RAGGED_16_FROM,
    SHUFFLED_LANE_STEPS,
    TILE_COLS,
    row_period,
    rows_merge,
)


def view_source_coords(n: Node, coords: tuple[Lin, ...]) -> tuple[tuple[Lin, ...], tuple[Lin, ...]]:
    """Map coordinates of movement node `n` to its source's, with new validity conditions."""
    src = n.srcs[0]
    if n.op is Ops.PERMUTE:
        out = [lin(0)] * len(coords)
        for i, o in enumerate(n.arg):
            out[o] = coords[i]
        return tuple(out), ()
    if n.op is Ops.EXPAND:
        return tuple(lin(0) if s == 1 else c for c, s in zip(coords, src.shape)), ()
    if n.op is Ops.SHRINK:
        return tuple(c + b for c, (b, _) in zip(coords, n.arg)), ()
    if n.op is Ops.FLIP:
        return tuple(
            (lin(s - 1) - c) if i in n.arg else c for i, (c, s) in enumerate(zip(coords, n.shape))
        ), ()
    if n.op is Ops.PAD:
        valid = []
        for c, (before, _), s in zip(coords, n.arg, src.shape):
            for cond in (c - before, lin(before + s - 1) - c):
                if cond.min < 0:
                    valid.append(cond)
        return tuple(c - b for c, (b, _) in zip(coords, n.arg)), tuple(valid)
    if n.op is Ops.RESHAPE:
        flat = linear_index(coords, n.shape)
        out = []
        for st, s in zip(strides_of(src.shape), src.shape):
            out.append(lin(0) if s == 1 else (flat // st) % s)
        return tuple(out), ()
    raise AssertionError(n.op)


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
    cascade: bool = False  # lanes along a long float sum, summed in a tree (`_lane_cascade`)

    @property
    def label(self) -> str:
        """The tile's rows as an autotuner names a candidate: "8", or "8x2" for a grid."""
        return f"{self.rows}x{self.rows2}" if self.row2 is not None else str(self.rows)


class _Level:
    """One level of a cascade (`_Lowerer._level`). A plain class, not one defined per call:
    a class is a reference cycle, so a class made per kernel would keep the lowerer, and
    through its schedule item the graph and its buffers, alive until a garbage collection."""

    __slots__ = ("lowerer", "dtype", "size", "lanes", "tile_loops", "slot")

    def __init__(self, lowerer, dtype, size, lanes, tile_loops, slot):
        self.lowerer, self.dtype, self.size, self.lanes = lowerer, dtype, size, lanes
        self.tile_loops, self.slot = tile_loops, slot

    def new(self) -> str:
        lw = self.lowerer
        acc = lw._new_acc()
        lw.emit(AccInit(acc, self.dtype, _zero(self.dtype), self.size, self.lanes))
        return acc

    def add(self, dst: str, acc: str) -> None:
        lw, dtype, slot = self.lowerer, self.dtype, self.slot
        with lw._tile_loops(self.tile_loops):
            part = lw.emit(AccRead(lw.fresh(), dtype, acc, slot))
            lw.emit(AccUpdate(dst, dtype, Ops.ADD, part, slot, ordered=True), 1)


class _Levels:
    """The cascade levels of several sums added in one loop (sibling reductions): a new
    level is one accumulator per sum, added into the level above sum by sum."""

    __slots__ = ("levels",)

    def __init__(self, levels: list[_Level]):
        self.levels = levels

    def new(self) -> tuple[str, ...]:
        return tuple(level.new() for level in self.levels)

    def add(self, dst: tuple[str, ...], acc: tuple[str, ...]) -> None:
        for level, d, a in zip(self.levels, dst, acc):
            level.add(d, a)


class _Lowerer:
    def __init__(
        self,
        item: ScheduleItem,
        out_groups,
        red_groups,
        tile: Tile | None = None,
        cascade_lanes: int = 0,
        row_cascade: bool = False,
        lane_max: bool = False,
        one_loop_siblings: bool = False,
    ):
        self.item = item
        # sibling reductions (ir/schedule.py, rule 7) in the reduction's own loop, one
        # accumulator each (the CPU's); else each in a loop of its own (the GPU's mapping
        # splits one reduction per loop over a block's threads)
        self.one_loop_siblings = one_loop_siblings and bool(item.siblings)
        self.row_cascade = row_cascade  # a row kernel's long float sums cascade (the CPU's)
        # a row kernel's value that its statistics pass stores into the output and its
        # output pass loads back instead of recomputing (`stashed_row_value`); the CPU's
        self.stash = stashed_row_value(item) if row_cascade else None
        self.stash_sums = _sums_computing(item, self.stash)  # ids of the passes storing it
        # where it is stored: the output itself, or for a 16-bit output (which would round
        # it) a float32 scratch row of the thread's own, indexed from the row's first axis
        self.stash_buffer, self.stash_axis, self.scratch = None, 0, []
        # a softmax's division by its sum, done as PyTorch's CPU kernel does it
        self.reciprocal_divisions = softmax_divisions(item) if row_cascade else set()
        self.statistics = 0  # depth of row statistics' passes being emitted (they compute)
        self.tile = tile
        self.cascade_lanes = cascade_lanes  # a float sum in a tree of vector accumulators
        self.lane_max = lane_max  # the kernel's float max in vector lanes (`gen_lane_max`)
        self.out_groups = out_groups
        self.red_groups = red_groups
        self.params: dict[int, Param] = {}
        self.outs = [Param(f"out{k}", n.dtype, n.numel, True) for k, n in enumerate(item.outputs)]
        self.out = self.outs[0]
        # the buffers of the values stored inside the reduction's loops (ir/schedule.py,
        # rule 8), after the root's and the extra outputs'
        self.source_outs = self.outs[1 + len(item.extra) :]
        self.prefetched: list[tuple[Node, int]] = []  # (input, its row's length)
        if self.stash is not None:
            self.stash_buffer = self.out
            axis = _row_axis(item, self.stash_sums)
            row = math.prod(self.stash.shape[axis:])
            # the pass that stores the stash computes (exp): it fetches the next row of the
            # inputs read at the output's coordinates, which the max pass then finds in cache
            self.prefetched = [(n, row) for n in item.inputs if n.shape == self.stash.shape]
            if self.stash.dtype.is_half:
                self.stash_axis = axis
                size = row
                self.stash_buffer = Param("scratch0", float32, size, True)
                self.scratch = [self.stash_buffer]
        for i, n in enumerate(item.inputs):
            self.params[id(n)] = Param(f"in{i}", n.dtype, n.numel, False)
        self.scopes: list[dict] = [{}]
        self.counter = 0
        self.flops_per_iter: list[tuple[int, int]] = []  # (ops, loop depth multiplier)
        self.acc_count = 0
        self.stand_ins: dict[Var, Lin] = {}  # a ragged tile's coordinates (see _ragged)
        self.merged_ins: dict[Var, Lin] = {}  # a merged group's (see _merged_stand_in)
        # output loop levels (variables bound, block, iterations), outermost first, where
        # values are hoisted (`_hoist_level`); None: nothing is hoisted
        self.levels: list | None = None
        self.block_level: dict[int, int] = {}  # id() of a block -> its level
        # (level, block) of the hoisted blocks being built, innermost last (`_gen_hoisted`)
        self.hoisting: list[tuple[int, list]] = []

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # ---------------------------------------------------------------- structure
    def lower(self) -> Kernel:
        if self.tile is not None:
            return self.lower_tiled()
        root = self.item.root
        loop_vars, loops_shape = [], []
        for gi, group in enumerate(self.out_groups):
            extent = math.prod(root.shape[a] for a in group)
            loop_vars.append(Var(f"o{gi}", 0, extent - 1))
            loops_shape.append(extent)
        coords = _coords_from_groups(root.shape, self.out_groups, loop_vars)
        body: list = []
        outer = body
        self.iterations = 1
        # a kernel that computes row statistics inside (ir/schedule.py, rule 6) hoists every
        # value that does not move with the inner loops out of them (`_hoist_level`)
        hoist = any(m.op in REDUCE for m in self.item.nodes) and self.item.reduce is None
        levels = [(frozenset(), body, 1)]
        for i, (v, extent) in enumerate(zip(loop_vars, loops_shape)):
            loop = Loop(v, extent, [], "parallel" if i == 0 else "serial")
            outer.append(loop)
            outer = loop.body
            self.iterations *= extent
            levels.append((levels[-1][0] | {v}, outer, self.iterations))
        if hoist and len(levels) > 1:
            self.levels = levels
            self.block_level = {id(blk): k for k, (_, blk, _) in enumerate(levels)}
        if self.stash is not None and len(loop_vars) > 1 and wide_registers():
            # the output pass in whole AVX-512 registers (LLVM would take half: a 16-bit
            # output's rounding and packing then costs twice the instructions an element)
            loop.lanes = WIDE_VECTOR_BYTES // 4
        self.block = outer
        self.flops = 0
        value = self.gen(root, coords, ())
        self.block.append(Store(self.out, linear_index(coords, root.shape), value))
        self._store_extra(coords, ())
        params = self.outs + [self.params[id(n)] for n in self.item.inputs]
        extent = loops_shape[0] if loops_shape else 1
        return Kernel(
            kernel_name(self.item), params, body, extent, self.flops, scratch=self.scratch
        )

    def lower_scatter(self) -> Kernel:
        """A scatter-add: zero the output (or fill it with -0.0: `N.scatter_add`), then add
        each source row into the row its index names. Threads own disjoint column blocks of
        the output, so their adds never meet:

        parallel for b in 0..R/W:  (W columns of every row)
          for v in 0..V: for t in 0..W: out[v, b*W + t] = 0
          for s in 0..S: i = index[s]; for t in 0..W: out[i, b*W + t] += values[s, b*W + t]
        """
        root = self.item.root
        assert not self.item.extra, "a scatter-add stores one output"
        values, index = root.srcs
        rows, size = root.shape[0], math.prod(root.shape[1:])
        width = min(size, 16)
        body: list = []
        self.block, self.iterations, self.flops = body, 1, 0
        b = Var("b", 0, -(-size // width) - 1)
        t = Var("t", 0, width - 1)
        self._open_loop(Loop(b, b.max + 1, [], "parallel"))
        per_block, per_iter = self.block, self.iterations
        col = lin(b) * width + t
        edge = (lin(size - 1) - col,) if size % width else ()
        v = Var("v", 0, rows - 1)
        self._open_loop(Loop(v, rows, [], "serial"))
        self._open_loop(Loop(t, width, []))
        start = -0.0 if root.arg[1] else _zero(root.dtype)  # (`N.scatter_add`)
        zero = self.emit(Const(self.fresh("c"), root.dtype, start))
        self.emit(Store(self.out, lin(v) * size + col, zero, edge))
        self.block, self.iterations = per_block, per_iter
        s_var = Var("s", 0, index.numel - 1)
        self._open_loop(Loop(s_var, index.numel, [], "serial"))
        s_coords = _coords_from_groups(index.shape, [tuple(range(len(index.shape)))], [s_var])
        row = self.gen(index, s_coords, ())
        self._open_loop(Loop(t, width, []))
        self.scopes.append({})
        rest = root.shape[1:]
        c_coords = _coords_from_groups(rest, [tuple(range(len(rest)))], [col])
        value = self.gen(values, s_coords + c_coords, edge)
        self.emit(ScatterAdd(self.out, row, rows, size, col, value, edge), 1)
        self.scopes.pop()
        params = self.outs + [self.params[id(n)] for n in self.item.inputs]
        return Kernel(kernel_name(self.item), params, body, b.max + 1, self.flops)

    def lower_tiled(self) -> Kernel:
        """Loops over tiles of outputs; each tile accumulates in registers, then runs the epilogue.

        parallel for p in 0..M/rows:  for q in 0..N/cols:
          acc[rows*cols] = identity
          for r ...: unrolled for i in 0..rows: vector for t in 0..cols: acc[i*cols+t] += ...
          unrolled for i: vector for t: store out[...] = epilogue(acc[i*cols+t])
        """
        root, red, tile = self.item.root, self.item.reduce, self.tile
        body: list = []
        self.block, self.iterations, self.flops = body, 1, 0
        i_var = Var("i", 0, tile.rows - 1)
        j_var = Var("j", 0, tile.rows2 - 1)
        t_var = Var("t", 0, tile.cols - 1)
        unrolled = (i_var, j_var) if tile.rows2 > 1 else (i_var,)
        first_extent = None
        edge: tuple[Lin, ...] = ()  # a ragged last tile: its lanes past the end are masked
        group_expr = [lin(0)] * len(self.out_groups)
        order = self._loop_order()
        for gi in order:
            group = self.out_groups[gi]
            extent = math.prod(root.shape[a] for a in group)
            inner, step = {
                tile.col: (t_var, tile.cols),
                tile.row: (i_var, tile.rows),
                tile.row2: (j_var, tile.rows2),
            }.get(gi, (None, 1))
            count = -(-extent // step)
            v = Var(f"o{gi}", 0, count - 1)
            kind = "parallel" if gi == order[0] else "serial"
            self._open_loop(Loop(v, count, [], kind))
            first_extent = count if first_extent is None else first_extent
            group_expr[gi] = lin(v) * step + inner if inner is not None else lin(v)
            if extent % step:
                assert gi == tile.col, "only the vector axis of a tile may be ragged"
                edge = (self._ragged(f"c{gi}", extent, group_expr[gi]),)
                group_expr[gi] = lin(extent - 1) - edge[0]
            elif step > 1 and sum(root.shape[a] > 1 for a in group) > 1:
                group_expr[gi] = self._merged_stand_in(f"g{gi}", extent, group_expr[gi])
        coords = _coords_from_groups(root.shape, self.out_groups, group_expr)
        red_coords = squeeze_coords(coords, root.shape, red.shape)
        size = tile.rows * tile.rows2 * tile.cols
        row_of = lin(i_var) * tile.rows2 + j_var if tile.rows2 > 1 else lin(i_var)
        slot = row_of * tile.cols + t_var
        reds = [red, *self.item.siblings]  # one accumulator each, in one loop nest
        assert len(reds) == 1 or not tile.lanes, "sibling reductions take lanes along outputs"
        accs = []
        for r in reds:
            accs.append(self._new_acc())
            self.emit(AccInit(accs[-1], r.dtype, reduce_identity(r.op, r.dtype), size, tile.cols))
        acc = accs[0]
        combine = REDUCE_COMBINE[red.op]
        if self._tile_cascades(size):
            level = _Levels(
                [self._level(r.dtype, size, tile.cols, [*unrolled, t_var], slot) for r in reds]
            )
            self._tile_cascade(reds, red_coords, edge, [*unrolled, t_var], slot, tuple(accs), level)
        elif tile.cascade:
            level = self._level(red.dtype, size, tile.cols, [*unrolled, t_var], slot)
            self._lane_cascade(red, red_coords, edge, unrolled, t_var, slot, acc, level)
        else:
            outer_block, outer_iter = self.block, self.iterations
            values = self._reduction_values(
                reds, red_coords, edge, tile_vars=(*unrolled, t_var), lane_split=tile.lanes
            )
            for r, a, value in zip(reds, accs, values):
                self.emit(AccUpdate(a, r.dtype, REDUCE_COMBINE[r.op], value, slot), 1)
            self.scopes.pop()
            self.block, self.iterations = outer_block, outer_iter
        for v in unrolled:
            self._open_loop(Loop(v, v.max + 1, [], "unroll"))
        self.scopes.append({})
        if tile.lanes:  # each row's lanes hold partial results: combine them
            base = row_of * tile.cols
            got = self.emit(AccReduceLanes(self.fresh(), red.dtype, acc, base, tile.cols, combine))
        else:
            self._open_loop(Loop(t_var, tile.cols, [], "vector"))
            for r, a in zip(reds[1:], accs[1:]):
                self.scopes[-1][(id(r), red_coords, edge)] = self.emit(
                    AccRead(self.fresh(), r.dtype, a, slot)
                )
            got = self.emit(AccRead(self.fresh(), red.dtype, acc, slot))
        self.scopes[-1][(id(red), red_coords, edge)] = got
        value = self.gen(root, coords, edge)
        self.emit(Store(self.out, linear_index(coords, root.shape), value, edge))
        self._store_extra(coords, edge)
        if self.stand_ins:
            _substitute(body, self.stand_ins)
        if self.merged_ins:
            _substitute(body, self.merged_ins, drop_edges=False)
        params = self.outs + [self.params[id(n)] for n in self.item.inputs]
        return Kernel(kernel_name(self.item), params, body, first_extent or 1, self.flops)

    def _loop_order(self) -> list[int]:
        """The output groups' loops, outermost (parallel) first.

        Normally the groups' own order, or the tile's `first` group outermost when that
        streams less data through the inner loop (`_outermost`). When the operand read as
        vectors (a matmul's right-hand side) is too big to stay in cache, the vector axis's
        tiles go outermost: each thread then keeps one panel of it (cols x the reduction) in
        cache while it walks every row, instead of streaming the whole operand once
        per row tile (a 1024^3 matmul: 1 GB of traffic instead of 128 MB). Where that
        operand moves with other output groups too (`Tile.panels`: a convolution's windows
        move with the image), a panel is one image's: those groups go outside the column
        tiles, where they have tiles enough to share among the threads
        (`PANELS_OUTER_TILES`), so the rows reuse the panel while it is in cache.
        """
        order = list(range(len(self.out_groups)))
        col = self.tile.col
        if self.tile.first is not None:
            order.remove(self.tile.first)
            order.insert(0, self.tile.first)
            return order
        if col is None or col == 0 or self.tile.lanes:
            return order
        shape = self.item.root.shape
        tiles = math.prod(shape[a] for a in self.out_groups[col]) // self.tile.cols
        big = max((n.numel * n.dtype.itemsize for n in self.item.inputs), default=0)
        if big >= PANEL_CACHE_BYTES and tiles >= 4:
            order.remove(col)
            panels = [g for g in self.tile.panels if g in order]
            count = math.prod(math.prod(shape[a] for a in self.out_groups[g]) for g in panels)
            at = len(panels) if panels and count >= min(tiles, PANELS_OUTER_TILES) else 0
            for g in panels[:at]:
                order.remove(g)
            order[:0] = [*panels[:at], col]
        return order

    def _store_extra(self, coords, guard) -> None:
        """Store the kernel's extra outputs, computed at the root's coordinates (they read the
        root's value from registers: `gen` finds it in scope)."""
        for out, n in zip(self.outs[1:], self.item.extra):
            value = self.gen(n, coords, guard)
            self.emit(Store(out, linear_index(coords, n.shape), value, guard))

    def _store_at_source(self, red: Node, coords, guard) -> None:
        """Store the values the kernel keeps at its reduction's source coordinates (ir/
        schedule.py, rule 8: a layer's output gradient, stored by its bias gradient's sum)
        where the sum computes them: `coords` are a source element's, each met once, and
        `guard` masks the lanes past a ragged end. Every path that adds a source value into
        the kernel's reduction calls this just after computing the value."""
        if red is not self.item.reduce:
            return
        for out, n in zip(self.source_outs, self.item.at_source):
            value = self.gen(n, coords, guard)
            self.emit(Store(out, linear_index(coords, n.shape), value, guard))

    def _ragged(self, name: str, extent: int, expr: Lin) -> Lin:
        """The edge condition (`>= 0` inside) of a coordinate `expr` that overshoots `extent`.

        Index expressions are built from a stand-in variable ranging over the axis
        alone, so they simplify as for an exact tile (no divisions by the axis sizes
        the overshoot would cross); `expr` replaces it once the kernel is built.
        Lanes past the end compute addresses past the axis, but the edge masks them.
        """
        stand_in = Var(name, 0, extent - 1)
        self.stand_ins[stand_in] = expr
        return lin(extent - 1) - lin(stand_in)

    def _merged_stand_in(self, name: str, extent: int, expr: Lin) -> Lin:
        """A stand-in for the coordinate `expr` (tile loop times step plus the lane or row)
        along a group of several axes merged into one loop. Built from `expr` itself, each
        axis's coordinate is a division of it that simplifies on its own, and the address
        they make does not recombine: a column sum over (64, 32, 3, 3) read its contiguous
        32-lane rows as gathers, `((o*32 + t)//9 % 32)*9 + ...`. Built from the stand-in,
        the address is the stand-in itself, and `expr` replaces it once the kernel is built."""
        stand_in = Var(name, 0, extent - 1)
        self.merged_ins[stand_in] = expr
        return lin(stand_in)

    def _open_loop(self, loop: Loop) -> None:
        self.block.append(loop)
        self.block = loop.body
        self.iterations *= loop.extent

    def _new_acc(self) -> str:
        self.acc_count += 1
        return f"acc{self.acc_count}"

    def _reduction_body(self, n: Node, coords, guard, tile_vars=(), lane_split=False) -> str:
        """Open the reduction loops (and a tile's inner loops); the value to accumulate.

        With `lane_split`, the innermost reduction loop steps by the tile's lane count and
        the tile's vector variable walks the lanes.
        """
        (value,) = self._reduction_values([n], coords, guard, tile_vars, lane_split)
        return value

    def _reduction_values(self, reds: list[Node], coords, guard, tile_vars=(), lane_split=False):
        """`_reduction_body` for reductions over the same source shape and axes (a kernel's
        sibling reductions, ir/schedule.py rule 7): the loops once, a value for each."""
        n = reds[0]
        src = n.srcs[0]
        assert all(r.srcs[0].shape == src.shape and r.arg == n.arg for r in reds), "not siblings"
        red_vars = [
            Var(f"r{gi}", 0, math.prod(src.shape[a] for a in g) - 1)
            for gi, g in enumerate(self.red_groups)
        ]
        red_exprs = [lin(v) for v in red_vars]
        edge: tuple[Lin, ...] = ()
        if lane_split:
            lanes = tile_vars[-1].max + 1
            last = red_vars[-1]
            red_vars[-1] = Var(last.name, 0, -(-(last.max + 1) // lanes) - 1)
            red_exprs[-1] = lin(red_vars[-1]) * lanes + tile_vars[-1]
            if (last.max + 1) % lanes:  # ragged: lanes past the end add the identity (0)
                assert n.op is Ops.SUM, "only a sum's lanes may be ragged"
                edge = (self._ragged(f"{last.name}c", last.max + 1, red_exprs[-1]),)
                red_exprs[-1] = lin(last.max) - edge[0]
        red_coords = _coords_from_groups(src.shape, self.red_groups, red_exprs)
        src_coords = tuple(red_coords[i] if i in n.arg else c for i, c in enumerate(coords))
        for v in red_vars:
            self._open_loop(Loop(v, v.max + 1, [], "reduce"))
        for k, v in enumerate(tile_vars):
            kind = "vector" if k == len(tile_vars) - 1 else "unroll"
            self._open_loop(Loop(v, v.max + 1, [], kind))
        self.scopes.append({})
        values = []
        for r in reds:
            value = self._gen_stashing(r, src_coords, guard + edge)
            self._store_at_source(r, src_coords, guard + edge)
            if edge and not self._zero_past(edge, value):
                value = self.emit(Select(self.fresh(), r.srcs[0].dtype, edge, value))
            values.append(value)
        return values

    def _zero_past(self, edge: tuple[Lin, ...], value: str) -> bool:
        """Whether `value` is already +0 in the lanes past `edge`: a product of two loads
        that are both masked there (each reads nothing and gives 0, and 0 * 0 is +0), so the
        ragged lanes need no select (a convolution's weight gradient over 28-pixel rows: one
        multiply-add per product instead of a multiply, a blend and an add)."""
        made = {s.dst: s for s in self.block if isinstance(s, (Alu, Load))}
        product = made.get(value)
        if not isinstance(product, Alu) or product.op is not Ops.MUL:
            return False
        loads = [made.get(a) for a in product.args]
        return all(isinstance(ld, Load) and set(edge) <= set(ld.valid) for ld in loads)

    def _gen_stashing(self, n: Node, coords, guard) -> str:
        """The value reduction n adds at `coords` of its source; where that computes the
        stashed row value (`stashed_row_value`), it is also stored into the output at its
        own coordinates (the source's: both have the output's shape), for the output pass
        to load."""
        value = self.gen(n.srcs[0], coords, guard)
        if id(n) in self.stash_sums:
            stashed = self._lookup((id(self.stash), coords, guard))
            assert stashed is not None, "the stashed value is computed at the sum's coordinates"
            self.emit(Store(self.stash_buffer, self._stash_index(coords), stashed, guard))
            if self.cascade_lanes:  # (in vectors: a plain loop stays LLVM's to vectorize)
                for n, row in self.prefetched:
                    index = linear_index(coords, self.stash.shape) + row
                    self.emit(Prefetch(self.params[id(n)], index))
        return value

    def _stash_index(self, coords) -> Lin:
        """Where the stashed value at `coords` lies in its buffer (the output's own index,
        or the index within the row of a scratch row)."""
        k = self.stash_axis
        return linear_index(coords[k:], self.stash.shape[k:])

    def emit(self, stmt, ops: int = 0):
        self.block.append(stmt)
        self.flops += ops * self.iterations
        return getattr(stmt, "dst", None)

    # ---------------------------------------------------------------- values
    def gen(self, n: Node, coords: tuple[Lin, ...], guard: tuple[Lin, ...]) -> str:
        """The register holding n's value at `coords`, emitting the code for it once.

        Elementwise ops read their sources at their own coordinates, so a chain of them is
        walked with an explicit stack, not recursion: a 100,000-op chain lowers as well as
        a short one. Views and reductions recurse, one level per view or reduction.
        """
        key = (id(n), coords, guard)
        hit = self._lookup(key)
        if hit is not None:
            return hit
        if self.levels is not None:
            level, kept = self._hoist_level(coords, guard)
            if level is not None:
                return self._gen_hoisted(n, coords, kept, level)
        stack = [(n, False)]
        while stack:
            m, ready = stack.pop()
            k = (id(m), coords, guard)
            if self._lookup(k) is not None:
                continue
            inline = m.op in ELEMENTWISE and not (id(m) in self.params and m is not self.item.root)
            inline = inline and (m is not self.stash or self.statistics > 0)
            if not inline:
                self.scopes[-1][k] = self._gen(m, coords, guard)
            elif not ready:
                stack.append((m, True))
                stack.extend((s, False) for s in reversed(m.srcs))
            else:
                args = tuple(self._lookup((id(s), coords, guard)) for s in m.srcs)
                if id(m) in self.reciprocal_divisions:  # (its sum's reciprocal: loop-invariant,
                    # LLVM computes it once per row, before the loop over the row)
                    r = self.emit(Alu(self.fresh(), m.dtype, Ops.RECIP, args[1:]))
                    args = (args[0], r)
                op = Ops.MUL if id(m) in self.reciprocal_divisions else m.op
                self.scopes[-1][k] = self.emit(Alu(self.fresh(), m.dtype, op, args), 1)
        return self._lookup(key)

    def _hoist_level(self, coords, guard) -> tuple[int | None, tuple]:
        """The outermost output loop level whose variables cover `coords`, when that is
        outside the block being emitted, and the conditions of `guard` on those variables.
        A row statistic at `(o0, 0)` read inside the loop over the row's elements `o1` is
        computed once per row, before that loop; a reduction's body (not an output level)
        hoists too: a softmax's sum reads its max. A condition on other variables (a ragged
        vector's lanes) is dropped: the value's addresses do not move with them, and the
        reader masks the lanes it rules out."""
        current = self.block_level.get(id(self.block), len(self.levels))
        free = {a for e in coords for a in e.atoms() if isinstance(a, Var)}
        for k, (bound, _, _) in enumerate(self.levels[:-1]):
            if free <= bound:
                if k >= current:
                    return None, guard
                kept = tuple(
                    c for c in guard if {a for a in c.atoms() if isinstance(a, Var)} <= free
                )
                return k, kept
        return None, guard

    def _gen_hoisted(self, n: Node, coords, guard, level: int) -> str:
        """Emit n at `level`, just before that level's inner loop, in the kernel's scope.
        Values it hoists further out land before it, in their own levels. A value hoisted
        from inside a hoisted reduction's loop to that reduction's own level lands in the
        reduction's block, before its loop: that block is placed only once complete, and
        the value may read what the block computes before the loop (placed at the level
        itself, it would come first and read a name not yet defined)."""
        _, target, iterations = self.levels[level]
        for pending_level, pending in reversed(self.hoisting):
            if pending_level == level:
                target = pending  # (whose last statement is the loop being emitted)
                break
        saved = self.block, self.iterations, self.scopes
        here: list = []
        self.block_level[id(here)] = level
        self.block, self.iterations, self.scopes = here, iterations, self.scopes[:1]
        self.hoisting.append((level, here))
        try:
            value = self.gen(n, coords, guard)
        finally:
            self.block, self.iterations, self.scopes = saved
            del self.block_level[id(here)]
            self.hoisting.pop()
        target[len(target) - 1 : len(target) - 1] = here  # the inner loop stays last
        return value

    def _lookup(self, key) -> str | None:
        for scope in reversed(self.scopes):
            value = scope.get(key)
            if value is not None:
                return value
        return None

    def _gen(self, n: Node, coords, guard) -> str:
        if n is self.stash and not self.statistics:  # stored by a statistics pass
            # (from a float32 scratch row as the float32 it was computed in: the renderer
            # loads a buffer's own type and names the value n's)
            index = self._stash_index(coords)
            return self.emit(Load(self.fresh(), n.dtype, self.stash_buffer, index, guard))
        if id(n) in self.params and n is not self.item.root:
            p = self.params[id(n)]
            return self.emit(Load(self.fresh(), n.dtype, p, linear_index(coords, n.shape), guard))
        if n.op is Ops.CONST:
            return self.emit(Const(self.fresh("c"), n.dtype, n.arg))
        if n.op is Ops.RAND:
            key = self.gen(n.srcs[0], (), ())
            return self.emit(Rand(self.fresh(), n.dtype, key, linear_index(coords, n.shape)), 8)
        if n.op is Ops.INDEX:
            return self.emit(Position(self.fresh(), n.dtype, linear_index(coords, n.shape)))
        if n.op in ELEMENTWISE:
            args = tuple(self.gen(s, coords, guard) for s in n.srcs)
            return self.emit(Alu(self.fresh(), n.dtype, n.op, args), 1)
        if n.op in (Ops.CONTIGUOUS, Ops.DETACH):
            return self.gen(n.srcs[0], coords, guard)
        if n.op is Ops.GATHER:
            table, index = n.srcs
            k = len(index.shape)
            row = self.gen(index, coords[:k], guard)
            col = linear_index(coords[k:], table.shape[1:])
            rows, size = table.shape[0], math.prod(table.shape[1:])
            p = self.params[id(table)]
            return self.emit(LoadRow(self.fresh(), n.dtype, p, row, rows, size, col, guard))
        if n.op in REDUCE:
            return self.gen_reduce(n, coords, guard)
        # movement
        src = n.srcs[0]
        if n.op is Ops.RESHAPE and id(src) in self.params:
            # a buffer is contiguous: a reshape of it keeps every element's linear index, so
            # index it directly instead of splitting coordinates with divisions
            p = self.params[id(src)]
            return self.emit(Load(self.fresh(), src.dtype, p, linear_index(coords, n.shape), guard))
        src_coords, valid = view_source_coords(n, coords)
        if any(v.max < 0 for v in valid):  # entirely in the padding
            return self.emit(Const(self.fresh("c"), n.dtype, _zero(n.dtype)))
        inner = self.gen(n.srcs[0], src_coords, guard + valid)
        if not valid:
            return inner
        return self.emit(Select(self.fresh(), n.dtype, valid, inner))

    def gen_reduce(self, n: Node, coords, guard) -> str:
        if n is not self.item.reduce and self.item.reduce is None:
            return self._gen_row_reduce(n, coords, guard)
        if self.cascade_lanes:
            return self.gen_cascade(n, coords, guard)
        if self.lane_max:
            return self.gen_lane_max(n, coords, guard)
        reds = [n, *self.item.siblings] if self.one_loop_siblings and n is self.item.reduce else [n]
        accs = []
        for r in reds:
            accs.append(self._new_acc())
            self.emit(AccInit(accs[-1], r.dtype, reduce_identity(r.op, r.dtype)))
        saved_block, saved_iter = self.block, self.iterations
        values = self._reduction_values(reds, coords, guard)
        for r, acc, value in zip(reds, accs, values):
            self.emit(AccUpdate(acc, r.dtype, REDUCE_COMBINE[r.op], value), 1)
        self.scopes.pop()
        self.block, self.iterations = saved_block, saved_iter
        for r, acc in zip(reds[1:], accs[1:]):  # where the extra outputs' code finds them
            self.scopes[-1][(id(r), coords, guard)] = acc
        return accs[0]

    def _gen_row_reduce(self, n: Node, coords, guard) -> str:
        """A row statistic inside an elementwise kernel (ir/schedule.py, rule 6): its axes
        are the trailing ones, one loop; a long float sum is cascaded as a kernel's own."""
        saved = self.red_groups, self.cascade_lanes
        self.red_groups = [tuple(sorted(n.arg))]
        self.statistics += 1
        row = math.prod(n.srcs[0].shape[a] for a in n.arg)
        long_sum = self.row_cascade and n.op is Ops.SUM and n.dtype.is_float
        long_sum = long_sum and row >= CASCADE_MIN
        self.cascade_lanes = (64 if row >= 256 else 32) if long_sum else 0
        try:
            if self.cascade_lanes:
                return self.gen_cascade(n, coords, guard)
            if self.row_cascade and n.op is Ops.REDUCE_MAX and row >= LANE_MAX_MIN:
                return self.gen_lane_max(n, coords, guard)
            partner = None if self.row_cascade else self._online_partner(n)
            if partner is not None:
                return self.gen_online_exp(n, partner, coords, guard)
            acc = self._new_acc()
            self.emit(AccInit(acc, n.dtype, reduce_identity(n.op, n.dtype)))
            saved_block, saved_iter = self.block, self.iterations
            value = self._reduction_body(n, coords, guard)
            self.emit(AccUpdate(acc, n.dtype, REDUCE_COMBINE[n.op], value), 1)
            self.scopes.pop()
            self.block, self.iterations = saved_block, saved_iter
            return acc
        finally:
            self.red_groups, self.cascade_lanes = saved
            self.statistics -= 1

    def _online_partner(self, n: Node) -> Node | None:
        """The row sum of exp(y - max) in this kernel whose max is n (`online_exp_max`)."""
        if n.op is not Ops.REDUCE_MAX or not n.dtype.is_float:
            return None
        return next((m for m in self.item.nodes if online_exp_max(m) is n), None)

    def gen_online_exp(self, n: Node, total: Node, coords, guard) -> str:
        """Max n and the sum `total` of exp(y - n) in one pass (the GPU's online softmax):

            acc1 = -inf; acc2 = 0
            for r0 in 0..N: v = y[r0]; acc1, acc2 = online_exp(acc1, acc2, v)

        acc2 is the sum's value at the same coordinates, where the output reads it next."""
        top, acc = self._new_acc(), self._new_acc()
        self.emit(AccInit(top, n.dtype, reduce_identity(n.op, n.dtype)))
        self.emit(AccInit(acc, total.dtype, _zero(total.dtype)))
        saved_block, saved_iter = self.block, self.iterations
        value = self._reduction_body(n, coords, guard)
        self.emit(AccOnlineExp(top, acc, n.dtype, value), 4)
        self.scopes.pop()
        self.block, self.iterations = saved_block, saved_iter
        self.scopes[-1][(id(total), coords, guard)] = acc
        return top

    def gen_lane_max(self, n: Node, coords, guard) -> str:
        """A max over one contiguous group of reduction axes, `lanes` elements at a time
        into a vector of accumulators, combined at the end. LLVM's vectorizer leaves a
        float max reduction (`llvm.maximum`, which propagates NaN as torch's max does)
        scalar; written as vectors, a softmax's max pass runs at memory speed. A ragged
        end is read as the last full vector, overlapping the one before: max is idempotent.

            acc1[64] = -inf
            for j in 0..64: vector for t in 0..64: acc1[t] = max(acc1[t], x[j*64 + t])
            m = max over acc1[0 : 64]
        """
        src = n.srcs[0]
        extent = math.prod(src.shape[a] for g in self.red_groups for a in g)
        lanes = next(w for w in (64, 32, 16, 8) if w <= extent)
        t = Var("t", 0, lanes - 1)
        acc = self._new_acc()
        self.emit(AccInit(acc, n.dtype, reduce_identity(n.op, n.dtype), lanes, lanes))

        def max_vector(expr: Lin) -> None:
            red_coords = _coords_from_groups(src.shape, self.red_groups, [expr])
            src_coords = tuple(red_coords[i] if i in n.arg else c for i, c in enumerate(coords))
            with self._tile_loops([t]):
                value = self.gen(src, src_coords, guard)
                self.emit(AccUpdate(acc, n.dtype, Ops.MAX, value, lin(t)), 1)

        vectors, tail = divmod(extent, lanes)
        if vectors == 1:
            max_vector(lin(t))
        else:
            j = Var(self.fresh("j"), 0, vectors - 1)
            with self._loop(j, "reduce"):
                max_vector(lin(j) * lanes + t)
        if tail:
            max_vector(lin(extent - lanes) + t)
        return self.emit(AccReduceLanes(self.fresh(), n.dtype, acc, lin(0), lanes, Ops.MAX))

    # ---------------------------------------------------------------- cascaded sums
    def _tile_cascades(self, size: int) -> bool:
        """Whether a tile's float sum runs as a cascade (see `_tile_cascade`): one long
        reduction loop read with a stride (a column sum), into a tile small enough that
        its levels stay in registers (a matmul's 128 accumulators keep one plain loop)."""
        return not self.tile.lanes and tile_cascades(self.item, self.red_groups, size)

    def _tile_cascade(self, reds: list[Node], coords, guard, tile_loops, slot, accs, level):
        """A tile's sum over its reduction loop as a tree (see `gen_cascade`): every tile
        accumulator receives at most CASCADE_FANOUT rows before its level moves up.

            acc1[32] = 0
            for j2 in 0..256:
              acc3[32] = 0
              for k4 in 0..16: vector for t in 0..32: acc3[t] += x[(j2*16 + k4)*N + o*32 + t]
              vector for t in 0..32: acc1[t] += acc3[t]
        """
        src = reds[0].srcs[0]
        extent = math.prod(src.shape[a] for a in self.red_groups[0])

        def unit(idx: Lin, dst: tuple[str, ...]) -> None:
            red_coords = _coords_from_groups(src.shape, self.red_groups, [idx])
            src_coords = tuple(
                red_coords[i] if i in reds[0].arg else c for i, c in enumerate(coords)
            )
            with self._tile_loops(tile_loops):
                for red, acc in zip(reds, dst):  # sibling reductions: one accumulator each
                    value = self.gen(red.srcs[0], src_coords, guard)
                    self._store_at_source(red, src_coords, guard)
                    self.emit(AccUpdate(acc, red.dtype, Ops.ADD, value, slot, ordered=True), 1)

        self._sum_units(extent, unit, accs, level)

    def _lane_cascade(self, red: Node, coords, guard, unrolled, t: Var, slot, acc, level) -> None:
        """`gen_cascade` for a tile of rows: each unit adds one vector of `lanes` consecutive
        elements of every row of the tile, so each thread streams several rows at once
        (two memory streams keep more loads in flight than one). Each row's sum is the same tree as
        `gen_cascade` builds for it.

            acc1[128] = 0
            for j in 0..4:
              acc2[128] = 0
              for k in 0..16:
                unrolled for i in 0..2: vector for t in 0..64:
                  acc2[i*64 + t] += x[(2*o + i)*4096 + (j*16 + k)*64 + t]
              unrolled for i: vector for t: acc1[i*64 + t] += acc2[i*64 + t]
        """
        extent = math.prod(red.srcs[0].shape[a] for a in self.red_groups[0])
        self._add_vectors(red, coords, guard, [], extent, [*unrolled, t], slot, acc, level)

    def _add_vectors(self, red: Node, coords, guard, outer, extent, loops, slot, dst, level):
        """Add the innermost reduction group (`extent` long; `outer`: the coordinates of the
        outer groups) into accumulator `dst`, one vector (the last of `loops`) at a time,
        in units of the cascade's `level`s; a ragged last vector is masked to 0."""
        src, t = red.srcs[0], loops[-1]
        lanes = t.max + 1

        def add_vector(acc: str, expr: Lin, edge: tuple[Lin, ...]) -> None:
            red_coords = _coords_from_groups(src.shape, self.red_groups, [*outer, expr])
            src_coords = tuple(red_coords[i] if i in red.arg else c for i, c in enumerate(coords))
            with self._tile_loops(loops):
                value = self._gen_stashing(red, src_coords, guard + edge)
                self._store_at_source(red, src_coords, guard + edge)
                if edge:
                    value = self.emit(Select(self.fresh(), src.dtype, edge, value))
                self.emit(AccUpdate(acc, red.dtype, Ops.ADD, value, slot, ordered=True), 1)

        vectors, tail = divmod(extent, lanes)
        if vectors:
            self._sum_units(vectors, lambda u, a: add_vector(a, u * lanes + t, ()), dst, level)
        if tail:  # lanes past the end read nothing and add 0
            at = lin(t) + vectors * lanes
            add_vector(dst, at, (lin(extent - 1) - at,))

    def gen_cascade(self, n: Node, coords, guard) -> str:
        """A float sum as a tree of vector accumulators (PyTorch's cascade sum).

        The innermost reduction loop is read `lanes` elements at a time into a vector of
        accumulators; every accumulator receives at most `CASCADE_FANOUT` vectors before it
        is added, lane by lane, into the one a level up, and an outer reduction loop's
        iterations are grouped the same way. A 2^24-element sum adds 2^18 vectors in five
        levels of at most 16, so each value's rounding error grows with the tree's depth,
        not with n. The adds are `ordered`: a renderer must not flatten the tree. Lanes
        combine at the end (a tree too); a ragged last vector is masked to 0.

            acc2[64] = 0
            for j in 0..4:  (4 blocks of 16 vectors)
              acc3[64] = 0
              for k in 0..16: vector for t in 0..64: acc3[t] += x[(j*16 + k)*64 + t]
              vector for t in 0..64: acc2[t] += acc3[t]
            s = add over acc2[0 : 64]
        """
        src, lanes = n.srcs[0], self.cascade_lanes
        extents = [math.prod(src.shape[a] for a in g) for g in self.red_groups]
        t = Var("t", 0, lanes - 1)
        exprs: list[Lin] = []  # the outer reduction groups' coordinates, outermost first

        def reduce_group(k: int, dst: str) -> None:
            """Add the sum over reduction groups k.. (the outer ones at `exprs`) into dst."""
            if k < len(extents) - 1:

                def unit(idx: Lin, acc: str) -> None:
                    exprs.append(idx)
                    reduce_group(k + 1, acc)
                    exprs.pop()

                self._sum_units(extents[k], unit, dst, level)
                return
            self._add_vectors(n, coords, guard, exprs, extents[k], [t], lin(t), dst, level)

        level = self._level(n.dtype, lanes, lanes, [t], lin(t))
        top = level.new()
        reduce_group(0, top)
        return self.emit(AccReduceLanes(self.fresh(), n.dtype, top, lin(0), lanes, Ops.ADD))

    def _sum_units(self, count: int, unit, dst: str, level, base: Lin | None = None) -> None:
        """Emit `unit(index, acc)` for index in base + 0..count, adding into dst through
        levels of at most CASCADE_FANOUT units each: full subtrees of FANOUT^k units in a
        loop, each into a fresh accumulator (`level.new()`) added to dst once
        (`level.add(dst, acc)`), then the rest recursively."""
        base = lin(0) if base is None else base
        if count <= CASCADE_FANOUT:
            if count == 1:
                unit(base, dst)
                return
            v = Var(self.fresh("k"), 0, count - 1)
            with self._loop(v, "reduce"):
                unit(base + v, dst)
            return
        size = CASCADE_FANOUT
        while size * CASCADE_FANOUT < count:
            size *= CASCADE_FANOUT
        blocks, rest = divmod(count, size)
        j = Var(self.fresh("j"), 0, blocks - 1)
        with self._loop(j, "reduce"):
            acc = level.new()
            self._sum_units(size, unit, acc, level, base + lin(j) * size)
            level.add(dst, acc)
        if rest:
            self._sum_units(rest, unit, dst, level, base + blocks * size)

    def _level(self, dtype: DType, size: int, lanes: int, tile_loops: list[Var], slot: Lin):
        """How a cascade makes and combines accumulators: `size` of them in rows of `lanes`,
        walked by `tile_loops` (unrolled, then the vector loop) at element `slot`."""
        return _Level(self, dtype, size, lanes, tile_loops, slot)

    @contextmanager
    def _tile_loops(self, tile_loops: list[Var]):
        """The unrolled loops of a tile, then its vector loop (the last variable)."""
        with ExitStack() as stack:
            for k, v in enumerate(tile_loops):
                stack.enter_context(
                    self._loop(v, "vector" if k == len(tile_loops) - 1 else "unroll")
                )
            yield

    @contextmanager
    def _loop(self, var: Var, kind: str):
        """Emit the statements of the `with` body inside a loop over var, in a scope of
        their own (a value computed in one loop is not visible after it)."""
        saved_block, saved_iter = self.block, self.iterations
        self._open_loop(Loop(var, var.max + 1, [], kind))
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()
            self.block, self.iterations = saved_block, saved_iter


LANE_MAX_MIN = 8  # a shorter row's max stays one scalar loop


def online_exp_max(n: Node) -> Node | None:
    """The pattern the GPU computes as an online softmax (`AccOnlineExp`), its one entry:
    `sum(exp(y - expand(detach?(max(y)))))`, the max and the sum over the same axes of the
    same y. Returns the max node, or None.

    >>> import fusegrad as fg
    >>> x = fg.randn(4, 8)
    >>> e = (x - x.amax(1, keepdim=True).detach()).exp()
    >>> online_exp_max(e.sum(1, keepdim=True).node).op.name
    'REDUCE_MAX'
    """
    if n.op is not Ops.SUM or n.srcs[0].op is not Ops.EXP:
        return None
    diff = n.srcs[0].srcs[0]
    if diff.op is not Ops.ADD:
        return None
    for y, neg in (diff.srcs, diff.srcs[::-1]):
        if neg.op is not Ops.NEG:
            continue
        m = neg.srcs[0]
        while m.op in (Ops.EXPAND, Ops.DETACH) or is_squeeze(m):
            m = m.srcs[0]
        if m.op is Ops.REDUCE_MAX and m.srcs[0] is y and m.arg == n.arg and m.shape == n.shape:
            return m
    return None


def softmax_divisions(item: ScheduleItem) -> set[int]:
    """ids of a row kernel's softmax divisions, `e / expand(sum(e))` with e = exp(y - max(y))
    (`online_exp_max`), which the CPU computes as `e * (1 / sum)`: one reciprocal per row
    and a multiply per element, as PyTorch's CPU softmax does (`_vec_softmax_lastdim`,
    `tmp_sum = 1 / tmp_sum`), instead of a division per element, which costs as much as the
    rest of the output pass (docs/NUMERICS.md: within 1.5 ulp of the quotient, 0.5 before).

    >>> import fusegrad as fg
    >>> from fusegrad.ir.schedule import schedule
    >>> x = fg.randn(4, 8).realize()
    >>> (item,) = schedule([x.softmax(-1).node], lambda n: n is x.node)
    >>> [n.op.name for n in item.nodes if id(n) in softmax_divisions(item)]
    ['DIV']
    """
    found = set()
    for n in item.nodes:
        if n.op is not Ops.DIV:
            continue
        e, den = n.srcs
        while den.op is Ops.EXPAND or is_squeeze(den):
            den = den.srcs[0]
        if den.op is Ops.SUM and den.srcs[0] is e and online_exp_max(den) is not None:
            found.add(id(n))
    return found


def stashed_row_value(item: ScheduleItem) -> Node | None:
    """The value a row kernel (ir/schedule.py, rule 6) computes for every element both in
    a row sum's pass and in its output pass, which the sum's pass should store into the
    output buffer and the output pass load back and overwrite in place: a softmax's
    `exp(x - max)` (its transcendental then runs once per element), a log-softmax's
    `x - max`, a layer norm's `x - mean`. Besides the work saved, the output's memory
    traffic (its lines fetched for writing) moves into a pass that computes, where it
    overlaps the arithmetic; the reload hits cache (the row fits, `ROW_CACHE_BYTES`).

    The value: elementwise, computed inside a row SUM's source, of the output's shape and
    dtype, read by the output at its own coordinates only; of several, the last computed
    (the most work). The kernel has one output and several rows, so each thread owns whole
    rows and no thread's statistics pass writes where another's output pass already has.
    A float32 or float64 value is stored into the output (what is stored is what was
    computed); a float16 or bfloat16 one into a float32 scratch row of the thread's own
    (`_Lowerer.stash_buffer`), since the output would round it before the output pass reads
    it: `exp` then runs once per element and the output is rounded once, as for float32.
    """
    root = item.root
    if item.reduce is not None or item.extra:
        return None
    if root.dtype not in (float32, float64) and not root.dtype.is_half:
        return None
    inside = {id(m) for m in item.nodes}
    summed: set[int] = set()  # computed inside a row sum's pass
    for n in item.nodes:
        if n.op is Ops.SUM and n.numel > 1:
            summed |= _computed_for(n.srcs[0], inside)
    best = None
    for v in item.nodes:  # sources first: the last that qualifies is the most work
        if id(v) not in summed or v.op not in ELEMENTWISE or v.op is Ops.CONST:
            continue
        if v.shape != root.shape or v.dtype != root.dtype:
            continue
        if _read_at_own_coordinates(item.nodes, v, root) and _varies(v, inside):
            best = v
    return best


def _row_axis(item: ScheduleItem, sums: set[int]) -> int:
    """The first axis of the row that the row sums `sums` reduce: their axes are the trailing
    ones (ir/schedule.py, rule 6), so an element's index within its row is the linear index
    of its coordinates from this axis on."""
    axes = {tuple(sorted(n.arg)) for n in item.nodes if id(n) in sums}
    assert len(axes) == 1, "a stashed value's sums reduce one row"
    return min(axes.pop())


def _sums_computing(item: ScheduleItem, v: Node | None) -> set[int]:
    """ids of the row sums of a kernel whose passes compute v."""
    if v is None:
        return set()
    inside = {id(m) for m in item.nodes}
    return {
        id(n) for n in item.nodes if n.op is Ops.SUM and id(v) in _computed_for(n.srcs[0], inside)
    }


def _computed_for(v: Node, inside: set[int]) -> set[int]:
    """ids of the nodes computed inside a kernel to get v (down to reductions and loads)."""
    stack, seen = [v], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or id(m) not in inside or m.op in REDUCE:
            continue
        seen.add(id(m))
        stack.extend(m.srcs)
    return seen


def _read_at_own_coordinates(nodes: list[Node], v: Node, root: Node) -> bool:
    """Whether root reads v, and every path from v up to root is elementwise at root's shape
    (reductions reading v on the way are passes of their own, not the output's)."""
    reaches = {id(v)}
    for m in nodes:  # sources first
        if m.op in REDUCE or not any(id(s) in reaches for s in m.srcs):
            continue
        if m.op not in ELEMENTWISE or m.shape != root.shape:
            return False
        reaches.add(id(m))
    return id(root) in reaches


def _varies(v: Node, inside: set[int]) -> bool:
    """Whether v changes along the row: it reads an element of a buffer, not only row
    statistics broadcast back (`-max` is one value per row, cheaper computed than loaded)."""
    stack, seen = [v], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or m.op in REDUCE or m.op is Ops.CONST:
            continue
        seen.add(id(m))
        if id(m) not in inside or m.op in (Ops.RAND, Ops.INDEX):  # a loaded value
            return True
        if m.op is Ops.EXPAND:
            continue  # a broadcast: the same value along the axes it spreads
        stack.extend(m.srcs)
    return False


def _substitute(body: list, env: dict, drop_edges: bool = True) -> None:
    """Replace a ragged tile's stand-in variables (see `_Lowerer._ragged`), in place.

    A load whose address does not move with a stand-in reads inside its buffer in
    every lane, so it drops the edge conditions: a value in a lane past the edge
    is never stored, or is zeroed (a sum's ragged lanes) before it is added. (Not with
    `drop_edges` False: a merged group's stand-ins, `_Lowerer._merged_stand_in`, have no
    edge, and a condition on them is padding's.)
    """
    for s in body:
        if isinstance(s, Loop):
            _substitute(s.body, env, drop_edges)
            continue
        if drop_edges and isinstance(s, Load) and s.valid and not (s.index.atoms() & env.keys()):
            s.valid = tuple(c for c in s.valid if not (c.atoms() & env.keys()))
        for name in ("index", "valid"):
            e = getattr(s, name, None)
            if isinstance(e, Lin):
                setattr(s, name, e.substitute(env))
            elif isinstance(e, tuple):
                setattr(s, name, tuple(c.substitute(env) for c in e))


def _zero(dtype: DType):
    return False if dtype.is_bool else 0 if dtype.is_int else 0.0


def reduce_identity(op: Ops, dtype: DType):
    if op is Ops.SUM:
        return _zero(dtype)
    if dtype.is_float:
        return float("-inf")
    if dtype.is_bool:
        return False
    return 0 if dtype.unsigned else -(2 ** (8 * dtype.itemsize - 1))


def _divmod_score(kernel: Kernel) -> int:
    """How many divisions and modulos the kernel's index expressions contain."""
    total = 0

    def count(e: Lin) -> int:
        return sum(isinstance(a, (FloorDiv, Mod)) for a in e.atoms())

    def walk(body):
        nonlocal total
        for s in body:
            if isinstance(s, Loop):
                walk(s.body)
            elif isinstance(s, (Load, Store, Rand, Position)):
                total += count(s.index) + sum(count(v) for v in getattr(s, "valid", ()))
            elif isinstance(s, Select):
                total += sum(count(v) for v in s.valid)

    walk(kernel.body)
    return total


def _merge_groups(axes: list[int], try_lower) -> list[tuple[int, ...]]:
    """Greedily merge adjacent axes (innermost first) while no division appears."""
    groups = [(a,) for a in axes]
    best = try_lower(groups)
    i = len(groups) - 2
    while i >= 0:
        candidate = groups[:i] + [groups[i] + groups[i + 1]] + groups[i + 2 :]
        score = try_lower(candidate)
        if score <= best:
            groups, best = candidate, score
        i -= 1
    return groups


class _StepLog(threading.local):
    steps: list | None = None  # (step, loop IR text) while `record_steps` is open here


_step_log = _StepLog()


@contextmanager
def record_steps() -> Iterator[list[tuple[str, str]]]:
    """Within the block, `lower` on this thread appends each step it takes to the list it
    yields: (what the step did, the loop IR after it), from the loop nest with its loops
    merged to the kernel it returns (a register tile, edges peeled, unrolled by a row's
    period, an interleave split into phases). Off by default: one attribute test a step.
    Vector lanes are part of a tile, not a step of their own; the rest of vectorization
    is LLVM's (compare the LLVM IR before and after its passes)."""
    outer, _step_log.steps = _step_log.steps, []
    try:
        yield _step_log.steps
    finally:
        _step_log.steps = outer


def _step(what: str, kernel: Kernel, before: Kernel | None = None) -> Kernel:
    """`kernel`, noted as the result of step `what` while `record_steps` is open (not
    where `before`, the step's input, is the same kernel: the step changed nothing)."""
    steps = _step_log.steps
    if steps is not None and kernel is not before:
        steps.append((what, str(kernel)))
    return kernel


def lower(
    item: ScheduleItem, tile: bool = True, amx: bool = False, dpbf16: bool = False, tuner=None
) -> Kernel:
    """The loop IR of a scheduled kernel, with its loops merged where that stays affine.

    With `tile`, a reduction may get the CPU's register tile (`choose_tile`); the GPU
    lowering (`codegen/gpu.py`) takes the plain loop nest (`tile=False`) and tiles it
    for the GPU's threads and shared memory instead. With `amx` (the runtime's word that
    the host has AMX-BF16 and may use it), a bfloat16 matmul in the layout `codegen/amx.py`
    recognizes runs on AMX tiles; with `dpbf16` (the host has AVX512-BF16 and no AMX), on
    `vdpbf16ps` register tiles (`codegen/dpbf16.py`). A `tuner` (the runtime's autotuner,
    `runtime/autotune.py`) is handed the tiles a float32 contraction could take
    (`tuning_space`) and a function that lowers one, and returns the kernel it picked;
    without one the tile is `choose_tile`'s, the fixed choice for this host. Either way
    the kernel's `tile_note` says which tile it has and why."""
    root, red = item.root, item.reduce
    if root.op is Ops.SCATTER_ADD:
        return _Lowerer(item, [], []).lower_scatter()
    out_axes = [i for i, s in enumerate(root.shape) if s != 1]
    red_axes = [a for a in red.arg] if red is not None else []
    # merging reduce axes first, with the output axes unmerged, then the output axes
    state = {"out": [(a,) for a in out_axes], "red": [(a,) for a in red_axes]}

    # the merge search lowers each grouping it scores; the one it ends on is the plain
    # kernel, so each grouping is lowered once
    lowered: dict[tuple, Kernel] = {}

    def lowered_with(out_groups, red_groups) -> Kernel:
        key = (tuple(out_groups), tuple(red_groups))
        if key not in lowered:
            lowered[key] = _Lowerer(item, out_groups, red_groups, one_loop_siblings=tile).lower()
        return lowered[key]

    def score_with(out_groups, red_groups) -> int:
        return _divmod_score(lowered_with(out_groups, red_groups))

    if len(red_axes) > 1 and _contiguous_axes(red_axes):
        state["red"] = _merge_groups(red_axes, lambda g: score_with(state["out"], g))
    row_stats = red is None and any(m.op in REDUCE for m in item.nodes)
    if len(out_axes) > 1 and not row_stats:  # a row kernel keeps its rows' loops apart
        state["out"] = _merge_groups(out_axes, lambda g: score_with(g, state["red"]))
    merged = summed = None
    if tile and red is not None and not row_stats and not item.siblings:
        merged = _rows_merged(item, state["out"], state["red"], lowered_with)
        if merged is not None:
            state["out"] = merged
        else:
            summed = _sum_rows_merged(item, state["out"], state["red"], lowered_with)
            if summed is not None:
                state["red"] = summed
    if _step_log.steps is not None:
        what = f"loop nest, loops merged: outputs {state['out']}, sums {state['red']}"
        _step(what, lowered_with(state["out"], state["red"]))
    if row_stats and tile:  # the CPU cascades a row kernel's long sums; the GPU splits them
        kernel = _Lowerer(item, state["out"], state["red"], row_cascade=True).lower()
        return _step("row kernel: each row's long sums cascaded", kernel)
    siblings = len(item.siblings)
    if amx and tile and not siblings and not item.at_source:
        kernel = lower_amx(_Lowerer(item, state["out"], state["red"]), kernel_name(item))
        if kernel is not None:
            return _step("AMX tiles (codegen/amx.py)", kernel)
    if dpbf16 and tile and not siblings and not item.at_source:
        kernel = lower_dpbf16(_Lowerer(item, state["out"], state["red"]), kernel_name(item))
        if kernel is not None:
            return _step("vdpbf16ps register tiles (codegen/dpbf16.py)", kernel)
    plain = lowered_with(state["out"], state["red"])
    sum_lanes = SUM_MERGED_LANES if summed is not None else None
    chosen = choose_tile(plain, item, state["out"], sum_lanes) if tile else None
    if chosen is not None and siblings and not _fits_siblings(chosen, siblings):
        one_row = None if chosen.lanes else Tile(chosen.col, chosen.cols)
        # one row of lanes per sum, or the plain loop nest, one accumulator per sum
        chosen = one_row if one_row is not None and _fits_siblings(one_row, siblings) else None
    if chosen is not None:

        def lowered(t: Tile) -> Kernel:
            # a window read through padding: its edge tiles guarded, its interior not
            tiled = _Lowerer(item, state["out"], state["red"], t).lower()
            _step(f"register tile {tile_text(t)}", tiled)
            kernel = _step("edge tiles peeled", peel_guarded_loops(tiled), tiled)
            if merged is not None and t.col == len(merged) - 1 and not t.lanes:
                before = kernel
                kernel = unrolled_by_period(kernel, f"o{t.col}", _row_period(item, merged, t))
                _step("unrolled by the row's period", kernel, before)
            if summed is not None and t.lanes:
                period = row_period(t.cols, red.srcs[0].shape[summed[-1][-1]])
                before = kernel
                kernel = unrolled_by_period(kernel, f"r{len(summed) - 1}", period)
                _step("unrolled by the row's period", kernel, before)
            kernel.tile_note = f"register tile {tile_text(t)}"
            return kernel

        space = None
        if tuner is not None and not siblings:
            space = tuning_space(chosen, item, state["out"], state["red"], plain)
        if space is not None:
            return tuner(space, lowered)
        kernel = lowered(chosen)
        kernel.tile_note += ": the fixed choice for this CPU"
        return kernel
    if tile and lane_max(plain, item, state["red"]):
        kernel = _Lowerer(item, state["out"], state["red"], lane_max=True).lower()
        return _step("a max over vector lanes", kernel)
    # cascaded sums are the CPU's (tile=True); the GPU lowering reduces a plain loop over a block
    lanes = cascade_lanes(plain, item) if tile else 0
    if lanes:
        rows = None if siblings else _cascade_rows(item, state["out"], state["red"])
        if rows is not None:
            row, count = rows
            chosen = Tile(None, lanes, row, count, lanes=True, cascade=True)
            kernel = _Lowerer(item, state["out"], state["red"], chosen).lower()
            return _step(f"sums cascaded over {lanes} lanes, {count} rows at once", kernel)
        kernel = _Lowerer(item, state["out"], state["red"], cascade_lanes=lanes).lower()
        return _step(f"sums cascaded over {lanes} lanes", kernel)
    if not tile or red is not None:
        return plain
    # an interleave split into its phases; a padded copy's edges guarded, its interior a
    # plain copy for the CPU's vectorizer
    phased = _step("interleave split into its phases", split_phases(plain), plain)
    return _step("padded output's edges peeled", peel_padded_outputs(phased), phased)


def _rows_merged(item: ScheduleItem, out_groups, red_groups, lowered_with) -> list | None:
    """The output groups with the innermost two merged, where the innermost's vectors
    would be ragged and the merged group's are not, and the register tile then takes its
    lanes along the merged group: a convolution's rows of 56 pixels are 3.5 vectors of 16
    lanes (an eighth of every multiply-add masked off, and where FMA units are 512 bits wide a
    half-empty one costs a full one), where 56 x 56 pixels are 196. Its windows then read each
    vector as at most two contiguous runs (`split_lanes`, `LLVMRenderer.split_load`).
    None where that does not hold (the window reads of another layout would gather)."""
    if len(out_groups) < 2 or not wide_registers():
        return None
    shape = item.root.shape
    inner = math.prod(shape[a] for a in out_groups[-1])
    outer = math.prod(shape[a] for a in out_groups[-2])
    if not rows_merge(inner):  # (nn/conv.py asks the same of a convolution's rows)
        return None
    candidate = [*out_groups[:-2], out_groups[-2] + out_groups[-1]]
    plain = lowered_with(candidate, red_groups)
    chosen = choose_tile(plain, item, candidate)
    if (
        chosen is None
        or chosen.lanes
        or chosen.col != len(candidate) - 1
        or (inner * outer) % math.lcm(chosen.cols, inner)
        or row_period(chosen.cols, inner) > MAX_ROW_PERIOD
    ):
        return None
    # (a matmul's left operand over merged rows would be a gather: `A[p // 56, k]`)
    col = Var(f"o{chosen.col}", 0, inner * outer - 1)
    return candidate if _lanes_read_runs(plain, col, chosen.cols) else None


# Lanes along a sum over merged rows (`_sum_rows_merged`): 16, not the 32 an exact sum of
# 3136 would take, so the weight gradient's grid keeps 3 x 4 rows of one register each
# (with 32 lanes it fits 3 x 2, and loads 10 registers for every 12 multiply-adds).
SUM_MERGED_LANES = 16
# ... and its grid up to 24 registers of accumulators (3 kernel columns x 8 output channels,
# 11 loads for 24 multiply-adds): more chains per load, within the registers.
SUM_MERGED_GRID = 384


def _sum_rows_merged(item: ScheduleItem, out_groups, red_groups, lowered_with) -> list | None:
    """The reduction groups with the innermost two merged, as `_rows_merged` merges output
    groups, for a tile whose lanes run along the sum (a convolution's weight gradient,
    summed over the pixels of 56-pixel rows: 3.5 vectors of 16 lanes a row, 98 of 32 over
    the merged image), under the same conditions: the merged sum a whole number of repeats
    of the row pattern, and every load that moves with the lanes one run or two."""
    if len(red_groups) < 2 or not wide_registers():
        return None
    src = item.reduce.srcs[0].shape
    inner = math.prod(src[a] for a in red_groups[-1])
    outer = math.prod(src[a] for a in red_groups[-2])
    if not rows_merge(inner):
        return None
    candidate = [*red_groups[:-2], red_groups[-2] + red_groups[-1]]
    plain = lowered_with(out_groups, candidate)
    chosen = choose_tile(plain, item, out_groups, SUM_MERGED_LANES)
    extent = inner * outer
    if (
        chosen is None
        or not chosen.lanes
        or extent % math.lcm(chosen.cols, inner)
        or row_period(chosen.cols, inner) > MAX_ROW_PERIOD
    ):
        return None
    red = Var(f"r{len(candidate) - 1}", 0, extent - 1)
    return candidate if _lanes_read_runs(plain, red, chosen.cols) else None


def _lanes_read_runs(plain: Kernel, var: Var, lanes: int) -> bool:
    """Whether, with `var` split into tiles of `lanes` lanes, every load of `plain` that
    moves with the lanes reads them as one contiguous run or two (`split_lanes`), and
    every store as one run (a store is never split)."""
    q, t = Var("q", 0, (var.max + 1) // lanes - 1), Var("t", 0, lanes - 1)

    def walk(body):
        for s in body:
            if isinstance(s, Loop):
                yield from walk(s.body)
            elif isinstance(s, (Load, Store)) and var in s.index.atoms():
                yield s

    for s in walk(plain.body):
        index = s.index.substitute({var: lin(q) * lanes + t})
        contiguous = index.coef(t) == 1 and t not in (index - lin(t)).atoms()
        if not contiguous and not (isinstance(s, Load) and split_lanes(index, t, lanes)):
            return False
    return True


def _row_period(item: ScheduleItem, groups, t: Tile) -> int:
    """Tiles of `t.cols` lanes along a merged (row, column) group after which the pattern
    of vectors crossing a row repeats: lcm(cols, row) / cols (7 for 32 lanes over 56)."""
    return row_period(t.cols, item.root.shape[groups[t.col][-1]])


def _fits_siblings(tile: Tile, siblings: int) -> bool:
    """Whether a register tile takes a kernel's sibling reductions (ir/schedule.py, rule 7),
    one accumulator tile each: lanes along the outputs (lanes along the sum combine one
    reduction's lanes at the end), and every accumulator still in registers."""
    size = tile.cols * tile.rows * tile.rows2 * (1 + siblings)
    return not tile.lanes and size <= TILE_MAX_ACCUMULATORS


CASCADE_ROWS = 2  # rows of a cascaded sum one thread streams at once
CASCADE_ROWS_MIN_TILES = 8  # enough tiles left to share among the threads


def _cascade_rows(item: ScheduleItem, out_groups, red_groups) -> tuple[int, int] | None:
    """(out group, rows) for a cascaded sum summed CASCADE_ROWS rows at a time
    (`_Lowerer._lane_cascade`): one reduction group, and an output group the rows divide
    into at least CASCADE_ROWS_MIN_TILES tiles. None: one row at a time (`gen_cascade`)."""
    if len(red_groups) != 1:
        return None
    for g, group in enumerate(out_groups):
        extent = math.prod(item.root.shape[a] for a in group)
        if extent % CASCADE_ROWS == 0 and extent // CASCADE_ROWS >= CASCADE_ROWS_MIN_TILES:
            return g, CASCADE_ROWS
    return None


CASCADE_FANOUT = 16  # vectors (or blocks) an accumulator receives before it moves up a level
CASCADE_MIN = 1024  # a shorter sum is accurate as LLVM vectorizes it (<= 16 adds per lane)
CASCADE_TILE_MAX = 64  # a tile's accumulators, times its levels, must fit the registers


def tile_cascades(item: ScheduleItem, red_groups, size: int) -> bool:
    """Whether a register tile of `size` accumulators (not lanes along the sum) sums as a
    cascade (`_Lowerer._tile_cascades`): a float sum over one reduction group at least
    CASCADE_MIN long, into at most CASCADE_TILE_MAX accumulators."""
    red = item.reduce
    if red.op is not Ops.SUM or not red.dtype.is_float:
        return False
    if len(red_groups) != 1 or size > CASCADE_TILE_MAX:
        return False
    return math.prod(red.srcs[0].shape) // max(red.numel, 1) >= CASCADE_MIN


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
        # (a store: a value the sum stores at its source's coordinates, ir/schedule.py rule 8)
        if not isinstance(s, (Load, Store, Const, Alu, Select, AccUpdate)):
            return None
        moves = isinstance(s, (Load, Store))
        if moves and (s.index.coef(loop.var) not in (0, 1) or divides(s.index)):
            return None
        if any(divides(c) for c in getattr(s, "valid", ())):
            return None
    return loop


def lane_max(plain: Kernel, item: ScheduleItem, red_groups) -> bool:
    """Whether a float max reduction runs in vector lanes (`_Lowerer.gen_lane_max`): one
    reduction group, read contiguously along its innermost loop, at least LANE_MAX_MIN long."""
    red = item.reduce
    if red is None or red.op is not Ops.REDUCE_MAX or not red.dtype.is_float:
        return False
    loop = _streamed_reduce_loop(plain)
    return len(red_groups) == 1 and loop is not None and loop.extent >= LANE_MAX_MIN


def cascade_lanes(plain: Kernel, item: ScheduleItem) -> int:
    """The vector width of a cascaded sum for this kernel, or 0 where it keeps its plain loops.

    A float sum of at least CASCADE_MIN elements per output whose innermost reduction loop
    reads every operand contiguously, or not at all (a row sum, a softmax denominator, a
    full sum), is summed in a tree (see `_Lowerer.gen_cascade`): as fast as one long loop,
    with PyTorch's accuracy instead of an error growing with the length. Sums read with a
    stride (column sums, matmuls) keep their register tiles.
    """
    red = item.reduce
    if red is None or red.op is not Ops.SUM or not red.dtype.is_float:
        return 0
    if math.prod(red.srcs[0].shape) // max(red.numel, 1) < CASCADE_MIN:
        return 0
    loop = _streamed_reduce_loop(plain)
    if loop is None or loop.extent < 128:
        return 0
    return 64 if loop.extent >= 256 else 32


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
# Column tiles whose panels are an image's (`Tile.panels`, `_Lowerer._loop_order`) go inside
# the images' loop where it has at least this many iterations, or as many as the column
# tiles: the stride-2 convolution 32x64x56^2 -> 128 over 28-pixel rows walked its 7 column
# tiles outermost, each for all 32 images, would read every image's windows again in each
# of the 7 (its tile loop is unrolled by the rows' period); so images outermost, then the
# column tiles, then the output channels' tiles. (16: the parallel loop keeps iterations
# enough for a 16-thread host.)
PANELS_OUTER_TILES = 16


def choose_tile(
    plain: Kernel, item: ScheduleItem, out_groups, sum_lanes: int | None = None
) -> Tile | None:
    """Register-tile a reduction, or leave the plain loop nest when it already vectorizes.

    - Some load walks memory with a stride along the innermost reduction loop
      (a matmul's right operand, a column sum): the output axis along which
      those loads are contiguous becomes a vector of `cols` accumulators.
    - Every load is contiguous along (or does not move with) the innermost
      reduction loop, and some output axis leaves a load unchanged (a
      convolution's weight gradient): vector lanes run along the reduction and
      that output axis is unrolled `rows` times, so each load serves every row.
    - Otherwise a long reduction is left to LLVM's vectorizer (a row sum), and
      a short one (a convolution's kernel width) gets an output-axis vector.

    Another output axis is unrolled `rows` times in the first case too.
    """
    if item.reduce is None or not out_groups:
        return None
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
    if not loads:
        return None
    inner = red_vars[-1]
    extents = [math.prod(item.root.shape[a] for a in g) for g in out_groups]
    out_vars = [Var(f"o{g}", 0, e - 1) for g, e in enumerate(extents)]

    def shuffled(ld: Load, step: int, lane_axis: int | None) -> bool:
        """Whether lanes along which `ld` moves by `step` load it as a shuffled vector
        (`SHUFFLED_LANE_STEPS`: step loads and a permute) that pays: rows share it, an
        output axis (other than the lanes' own, `lane_axis`) that it does not move with."""
        return step in SHUFFLED_LANE_STEPS and any(
            g != lane_axis and extents[g] > 1 and ld.index.coef(v) == 0
            for g, v in enumerate(out_vars)
        )

    strided = [
        ld
        for ld in loads
        if abs(ld.index.coef(inner)) > 1 and not shuffled(ld, ld.index.coef(inner), None)
    ]
    # taps read through padding (a depthwise convolution's): the tile's loops are peeled
    # (`peel_guarded_loops`), so a ragged last vector along the sum is an iteration of its own
    peeled = any(guards_taps(ld.valid, set(red_vars)) for ld in loads)
    if not strided:
        # lanes load as vectors (a strided convolution's weight gradient: shuffled windows)
        unit = all(
            ld.index.coef(inner) in (0, 1) or shuffled(ld, ld.index.coef(inner), None)
            for ld in loads
        )
        ragged_ok = item.reduce.op is Ops.SUM
        lanes = sum_lanes or _vector_width(inner.max + 1, ragged_ok, along_sum=True)
        # (a peeled tile's short sum is a window's taps: its lanes go along the output row)
        short = peeled and inner.max + 1 < SHORT_REDUCTION
        lanes = lanes if unit and not short else None
        # an output axis some load does not depend on: rows along it share that load
        shared = [
            g
            for g, v in enumerate(out_vars)
            if extents[g] > 1 and any(ld.index.coef(v) == 0 for ld in loads)
        ]
        if lanes and shared:
            row = max(
                shared, key=lambda g: (sum(ld.index.coef(out_vars[g]) == 0 for ld in loads), g)
            )
            rows = extents[row] if extents[row] <= 8 else _divisor(extents[row], TILE_ROWS, 2)
            shuffles = [ld for ld in loads if ld.index.coef(inner) in SHUFFLED_LANE_STEPS]
            if shuffles and wide_registers():
                tile = _shuffled_grid(shuffles, shared, loads, every_load, out_vars, extents, lanes)
                if tile:
                    return tile
            if rows:
                # a second axis whose loads the first one's rows do not share (a weight
                # gradient's output channels, next to its kernel columns): a grid of rows;
                # or, in a peeled tile, one that shares a load with them (a depthwise weight
                # gradient's kernel rows, next to its columns: the output gradient serves
                # every tap, and 9 accumulators are 9 chains of multiply-adds, not 3)
                def grid_pays(g: int) -> bool:
                    steps = [
                        (ld.index.coef(out_vars[row]), ld.index.coef(out_vars[g])) for ld in loads
                    ]
                    return any(a == 0 and (b != 0 or peeled) for a, b in steps)

                others = [g for g in shared if g != row and grid_pays(g)]
                grid = WIDE_GRID_ACCUMULATORS if wide_registers() else TILE_GRID_ACCUMULATORS
                if wide_registers() and lanes * item.reduce.dtype.itemsize == 2 * WIDE_VECTOR_BYTES:
                    grid = WIDE_PAIR_GRID_ACCUMULATORS  # rows of two registers each
                grid = SUM_MERGED_GRID if sum_lanes else grid
                room = grid // (rows * lanes)
                counts = (8, 4, 3, 2) if sum_lanes else (4, 3, 2)
                for g in sorted(others, key=lambda g: -extents[g]):
                    rows2 = next((r for r in counts if r <= room and extents[g] % r == 0), None)
                    if rows2:
                        steps = {row: rows, g: rows2}
                        first = _outermost(loads, every_load, out_vars, extents, steps)
                        return Tile(
                            None, lanes, row, rows, lanes=True, row2=g, rows2=rows2, first=first
                        )
                return Tile(None, lanes, row, rows, lanes=True)
        if inner.max + 1 >= SHORT_REDUCTION:
            return None

    def width(g: int) -> int | None:
        w = _vector_width(extents[g], True)
        return w or _divisor(extents[g], TILE_COLS[0], TILE_MIN_COLS)  # short: 5 -> 5

    widths = [width(g) for g in range(len(extents))]
    itemsize = item.reduce.dtype.itemsize

    def lane_step(ld: Load, g: int) -> int:
        """How far a load's address moves from one lane to the next, with lanes along g.

        Read off the index once the tile splits the loop (o = q * width + t), so a layout
        that is affine only within aligned tiles (a packed matmul operand's n//32, n%32)
        counts as contiguous."""
        w = widths[g]
        if not w or extents[g] % w:
            return ld.index.coef(out_vars[g])
        q = Var("q", 0, extents[g] // w - 1)
        t = Var("t", 0, w - 1)
        index = ld.index.substitute({out_vars[g]: lin(q) * w + t})
        if split_lanes(index, t, w):  # two contiguous runs (a window over merged rows)
            return 1
        return index.coef(t)

    # score each output axis by the data its lanes would load contiguously, minus the data
    # they would have to gather; a shuffled vector counts its share of the loads it takes
    def score(g: int) -> int:
        total = 0
        for ld in loads:
            c = lane_step(ld, g)
            if c == 1:
                total += ld.param.size
            elif shuffled(ld, c, g):
                total += ld.param.size // c
            elif c != 0:
                total -= ld.param.size
        return total

    votes = [score(g) for g in range(len(extents))]
    col = max(range(len(extents)), key=lambda g: (votes[g], g))
    if votes[col] <= 0:
        return None
    cols = widths[col]
    if cols is None:
        return None
    # unroll rows along the output axis that the vector loads do not depend on, so each
    # loaded vector serves every row (a convolution's output channels, a matmul's rows)
    vector_loads = [
        ld for ld in loads if lane_step(ld, col) == 1 or shuffled(ld, lane_step(ld, col), col)
    ]

    def shared(g: int) -> int:
        return sum(ld.param.size for ld in vector_loads if out_vars[g] not in ld.index.atoms())

    def rows_for(g: int) -> int | None:
        if g == col or extents[g] <= 1:
            return None
        if extents[g] <= 2 * TILE_ROWS and extents[g] * cols <= TILE_MAX_ACCUMULATORS:
            return extents[g]
        if cols <= 16 and extents[g] % WIDE_TILE_ROWS == 0 and wide_registers():
            return WIDE_TILE_ROWS  # rows of one register each
        if (
            cols * itemsize == 2 * WIDE_VECTOR_BYTES
            and extents[g] % FULL_WIDTH_TILE_ROWS == 0
            and full_width_fma()
        ):
            return FULL_WIDTH_TILE_ROWS  # rows of two registers each
        if extents[g] % TILE_ROWS == 0:
            return TILE_ROWS
        # an odd row count (a 1-D convolution's input gradient over 50 word-vector channels,
        # a batch of 10): the largest divisor up to 2 x TILE_ROWS, so each loaded vector
        # still serves several rows (one row: one multiply-add per two loads)
        return _divisor(extents[g], 2 * TILE_ROWS, 2)

    candidates = [g for g in range(len(extents)) if rows_for(g)]
    if not candidates:
        return Tile(col, cols)
    row = max(candidates, key=lambda g: (shared(g), g))
    first = _outermost(loads, every_load, out_vars, extents, {row: rows_for(row), col: cols})
    if (
        first is None
        and peeled
        and not any(out_vars[row] not in ld.index.atoms() for ld in vector_loads)
    ):
        # no vector load is shared by the rows (a depthwise convolution's rows are channels):
        # no panel of it to keep in cache (`_loop_order`), so the groups keep their order and
        # each row tile streams its own rows in order
        first = 0
    panels = tuple(
        g
        for g, v in enumerate(out_vars)
        if g not in (col, row) and extents[g] > 1 and all(ld.index.coef(v) for ld in vector_loads)
    )
    return Tile(col, cols, row, rows_for(row), first=first, panels=panels if vector_loads else ())


# A weight gradient whose windows are shuffled vectors (a strided convolution's, lanes along
# the output pixels) takes a grid of 8 output channels (rows sharing each shuffled window)
# by its whole kernel width (up to 3: rows sharing each gradient vector). A shuffle runs on
# one of the two FMA ports, so the more rows share it the better, up to the registers:
# 8 x 3 accumulators and 3 windows.
SHUFFLED_GRID_ROWS = 8
SHUFFLED_GRID_ROWS2 = 3


def _shuffled_grid(shuffles, shared, loads, every_load, out_vars, extents, lanes) -> Tile | None:
    """The grid of rows for a sum along whose lanes some loads are shuffled vectors
    (`shuffles`): rows along the output axis those loads do not move with, and a second
    axis, the smallest that they move with and the other loads do not (a kernel column)."""
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
    first = _outermost(loads, every_load, out_vars, extents, steps)
    return Tile(None, lanes, row, rows, lanes=True, row2=row2, rows2=extents[row2], first=first)


def tile_text(t: Tile) -> str:
    """A tile in words, for a kernel's dump header: "8 rows x 32 lanes"."""
    rows = f"{t.rows} x {t.rows2} rows" if t.row2 is not None else f"{t.rows} rows"
    if rows == "1 rows":
        rows = "1 row"
    along = " along the sum" if t.lanes else ""
    return f"{rows} x {t.cols} lanes{along}"


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
    registers, width = (32, 64) if wide_registers() else (16, 32)
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
    if plain is not None and one_register and wide_registers():
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


def _outermost(loads, every_load, out_vars, extents, steps: dict[int, int]) -> int | None:
    """Of a tile's two output groups (group -> its step), the one whose tiles should be the
    outer loop, so that the data streamed through the inner loop is the least (`loads`:
    those inside the reduction, `every_load`: the kernel's, its epilogue's included).

    With group `a` outer, the loads that move with `b` but not with `a` are read again
    for every tile of `a`, once per sweep of the inner loop, while the tile of `a`'s own
    operand stays in L1 across the sweep. A linear layer's weight gradient (X^T dY, X
    64x784 and dY 64x128) streams X 32 times with the rows outer (6.4 MB) but dY 49 times
    with the columns outer (1.6 MB): twice as fast. None: keep the groups' own order
    (also when the better outer loop has too few tiles to share among threads).
    """
    (a, step_a), (b, step_b) = steps.items()
    if 0 not in (a, b):  # the outer loop is another axis (a batch): leave it
        return None
    if any(ld.index.coef(out_vars[a]) and ld.index.coef(out_vars[b]) for ld in every_load):
        # an epilogue reading arrays of the output's shape (an optimizer update fused after
        # a weight gradient): those streams run in order only with the groups' own order,
        # and measured, that matters more than the operand traffic saved
        return None
    tiles = {a: extents[a] // step_a, b: extents[b] // step_b}

    def streamed(outer: int, inner: int) -> int:
        moving = [
            ld
            for ld in loads
            if ld.index.coef(out_vars[inner]) != 0 and ld.index.coef(out_vars[outer]) == 0
        ]
        return tiles[outer] * sum(ld.param.size * ld.dtype.itemsize for ld in moving)

    now, other = (a, b) if a == 0 else (b, a)  # group 0 is the outer loop today
    if tiles[other] < MIN_OUTER_TILES or streamed(other, now) >= streamed(now, other):
        return None
    return other


# From RAGGED_16_FROM (codegen/tiling.py) an output axis of 8 (mod 16) takes masked 16-lane
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
    gradient's tile is `peeled` (codegen/peel.py), its ragged vector an iteration of its own.
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


def _contiguous_axes(axes: list[int]) -> bool:
    return all(b == a + 1 for a, b in zip(axes, axes[1:]))


# what a kernel name mentions besides its reductions: the float functions (ir/ops.py's
# MATH), random numbers, padding, gathers and scatters
_NOTABLE = TRANSCENDENTAL | {Ops.RAND, Ops.PAD, Ops.GATHER, Ops.SCATTER_ADD}


def kernel_name(item: ScheduleItem) -> str:
    """A readable, stable name: what the kernel mainly does, and its output shape."""
    notable = []
    for n in item.nodes:
        name = n.op.name.lower()
        if n.op in REDUCE or n.op in _NOTABLE:
            name = {"reduce_max": "max"}.get(name, name)
            if name not in notable:
                notable.append(name)
    kind = "r" if any(n.op in REDUCE for n in item.nodes) else "e"
    shape = "x".join(map(str, item.root.shape)) or "scalar"
    return "_".join([kind] + notable[:4] + [shape])


def kernel_symbol(source: str, name: str) -> str:
    """The symbol a compiled kernel is exported as: its name plus a hash of its source."""
    return f"{name}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"


def base_name(symbol: str) -> str:
    """A kernel's name without the hash `kernel_symbol` adds (`r_sum_64x128`)."""
    head, _, tail = symbol.rpartition("_")
    return head if len(tail) == 12 and all(c in "0123456789abcdef" for c in tail) else symbol
