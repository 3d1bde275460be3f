"""A register-tiled reduction's loop nest (a matmul, a convolution as implicit GEMM, a
column sum): loops over tiles of outputs, each tile accumulating in registers, then the
epilogue (`TiledContraction.lower_tiled`).

A mixin of the CPU's lowerer (`pipeline/loop_nest.py`, `Lowerer`): the tile is
`pipeline/tile_choice.py`'s, the order of its loops is chosen here (`_loop_order`), and a
ragged last tile or a group of merged axes is built from stand-in variables replaced
once the kernel is built (`_ragged`, `_merged_stand_in`, `substitute_stand_ins`).
"""

from __future__ import annotations

import math

from ..ir.ops import REDUCE_COMBINE
from ..ir.symbolic import Lin, Var, lin
from .cascade import _Levels
from .coords import coords_from_groups as _coords_from_groups
from .coords import linear_index, squeeze_coords
from .kernel_names import kernel_name
from .loopir import AccInit, AccRead, AccReduceLanes, AccUpdate, Kernel, Load, Loop, Store
from .reductions import reduce_identity
from .tile_choice import PANELS_OUTER_TILES
from .tiling import PANEL_CACHE_BYTES


class TiledContraction:
    """The lowerer's register tiles. A mixin of `Lowerer` (pipeline/loop_nest.py), whose
    state and helpers it uses: `item`, `tile`, `out_groups`, `outs`, `params`, `block`,
    `scopes`, `stand_ins`, `merged_ins`, `gen`, `emit`, `fresh`, `_new_acc`, `_open_loop`,
    `_reduction_values`, `_store_extra` and the cascades' methods (pipeline/cascade.py)."""

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
        coords, edge, first_extent = self._open_tile_loops(i_var, j_var, t_var)
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
            substitute_stand_ins(body, self.stand_ins)
        if self.merged_ins:
            substitute_stand_ins(body, self.merged_ins, drop_edges=False)
        params = self.outs + [self.params[id(n)] for n in self.item.inputs]
        return Kernel(kernel_name(self.item), params, body, first_extent or 1, self.flops)

    def _open_tile_loops(self, i_var: Var, j_var: Var, t_var: Var):
        """Open the loops over the tiles, in `_loop_order` (the first one parallel), and
        return (the output coordinates of the tile's element at i_var, j_var, t_var, the
        edge condition of a ragged last vector or (), the parallel loop's extent)."""
        root, tile = self.item.root, self.tile
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
            rows = gi in (tile.row, tile.row2)
            if rows and self.shifted_last and count > 1 and extent % step == 0:
                count += 1  # (the last tile is the one before it again: `shifted_last`)
            v = Var(f"o{gi}", 0, count - 1)
            kind = "parallel" if gi == order[0] else "serial"
            self._open_loop(Loop(v, count, [], kind))
            first_extent = count if first_extent is None else first_extent
            group_expr[gi] = lin(v) * step + inner if inner is not None else lin(v)
            if count * step != extent and gi != tile.col:
                # ragged rows (`tile_choice.ragged_rows`): the last tile shifted back to end
                # at the last row, `v // (count - 1)` being 1 there and 0 before it
                assert rows and count > 1, "only a tile's rows or vectors are ragged"
                start = lin(v) * step - (lin(v) // (count - 1)) * (count * step - extent)
                group_expr[gi] = self._merged_stand_in(f"g{gi}", extent, start + inner)
            elif extent % step:
                edge = (self._ragged(f"c{gi}", extent, group_expr[gi]),)
                group_expr[gi] = lin(extent - 1) - edge[0]
            elif step > 1 and sum(root.shape[a] > 1 for a in group) > 1:
                group_expr[gi] = self._merged_stand_in(f"g{gi}", extent, group_expr[gi])
        return _coords_from_groups(root.shape, self.out_groups, group_expr), edge, first_extent

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


def substitute_stand_ins(body: list, env: dict, drop_edges: bool = True) -> None:
    """Replace a ragged tile's stand-in variables (see `TiledContraction._ragged`), in place.

    A load whose address does not move with a stand-in reads inside its buffer in
    every lane, so it drops the edge conditions: a value in a lane past the edge
    is never stored, or is zeroed (a sum's ragged lanes) before it is added. (Not with
    `drop_edges` False: a merged group's stand-ins, `TiledContraction._merged_stand_in`, have no
    edge, and a condition on them is padding's.)
    """
    for s in body:
        if isinstance(s, Loop):
            substitute_stand_ins(s.body, env, drop_edges)
            continue
        if drop_edges and isinstance(s, Load) and s.valid and not (s.index.atoms() & env.keys()):
            s.valid = tuple(c for c in s.valid if not (c.atoms() & env.keys()))
        for name in ("index", "valid"):
            e = getattr(s, name, None)
            if isinstance(e, Lin):
                setattr(s, name, e.substitute(env))
            elif isinstance(e, tuple):
                setattr(s, name, tuple(c.substitute(env) for c in e))
