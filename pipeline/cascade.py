"""Cascaded sums: a float sum as a tree of vector accumulators (PyTorch's cascade sum).

The methods of the CPU's lowerer (`pipeline/loop_nest.py`, `Lowerer`) that emit a
cascade, as a mixin it inherits (`CascadeSums`): a kernel's long sum one row at a time
(`gen_cascade`), several rows at once (`_lane_cascade`), or a register tile's sum
(`_tile_cascade`). Each accumulator receives at most `CASCADE_FANOUT` vectors before it
is added into the one a level up, so each value's rounding error grows with the tree's
depth, not with the sum's length. Which sums cascade is `pipeline/reductions.py`'s choice.
"""

from __future__ import annotations

import math

from ..ir.dtypes import DType
from ..ir.node import Node
from ..ir.ops import Ops
from ..ir.symbolic import Lin, Var, lin
from . import templates
from .coords import coords_from_groups as _coords_from_groups
from .loopir import AccInit, AccRead, AccReduceLanes, AccUpdate, Select
from .reductions import CASCADE_FANOUT, tile_cascades, zero_value


class _Level:
    """One level of a cascade (`CascadeSums._level`). A plain class, not one defined per call:
    a class is a reference cycle, so a class made per kernel would keep the lowerer, and
    through its schedule item the graph and its buffers, alive until a garbage collection."""

    __slots__ = ("lowerer", "dtype", "size", "lanes", "tile_loops", "slot")

    def __init__(self, lowerer, dtype, size, lanes, tile_loops, slot):
        self.lowerer, self.dtype, self.size, self.lanes = lowerer, dtype, size, lanes
        self.tile_loops, self.slot = tile_loops, slot

    def new(self) -> str:
        lw = self.lowerer
        acc = lw._new_acc()
        lw.emit(AccInit(acc, self.dtype, zero_value(self.dtype), self.size, self.lanes))
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


class CascadeSums:
    """The lowerer's cascaded sums. A mixin of `Lowerer` (pipeline/loop_nest.py), whose
    state and helpers it uses: `item`, `tile`, `red_groups`, `cascade_lanes`, `gen`,
    `emit`, `fresh`, `_new_acc`, `_loop`, `_tile_loops`, `_gen_stashing` and
    `_store_at_source`."""

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
        (`level.add(dst, acc)`), then the rest recursively. In a plan whose sizes vary,
        the rest's levels are all emitted (`_uniform_units`)."""
        base = lin(0) if base is None else base
        if templates.active():
            self._uniform_units(count, unit, dst, level, base)
            return
        self._exact_units(count, unit, dst, level, base)

    def _uniform_units(self, count: int, unit, dst: str, level, base: Lin) -> None:
        """`_exact_units`'s tree, in loops that are the same for every count up to
        FANOUT^2, and for every count from there up to FANOUT^4 (then between two powers of
        FANOUT): one loop of full subtrees per level, down to a loop of single units, each
        loop there even where it runs once or never (its count a literal), so the kernels
        of a plan whose sizes vary differ only in their literals and run one generic
        kernel (pipeline/templates.py). The same additions in the same order as
        `_exact_units`: a loop that never runs adds nothing, and a level's accumulator
        added once into a zero is itself (a sum from +0.0 is never -0.0).

            for j in 0..blocks: (a subtree of 4096 units into acc, acc into dst)
            for j in 0..blocks2: (a subtree of 256 units into acc, acc into dst)
            for j in 0..blocks3: (a subtree of 16 units into acc, acc into dst)
            for k in 0..rest: (a unit into dst)
        """
        size = CASCADE_FANOUT if count <= CASCADE_FANOUT**2 else CASCADE_FANOUT**3
        while size * CASCADE_FANOUT < count:
            size *= CASCADE_FANOUT
        while size > 1:
            blocks, count = divmod(count, size)
            self._subtrees(blocks, size, unit, dst, level, base)
            base = base + blocks * size
            size //= CASCADE_FANOUT
        v = Var(self.fresh("k"), 0, count - 1)
        with self._loop(v, "reduce"):
            unit(base + v, dst)

    def _subtrees(self, blocks: int, size: int, unit, dst: str, level, base: Lin) -> None:
        """A loop over `blocks` full subtrees of `size` units from `base`, each summed into a
        fresh accumulator added into dst once."""
        j = Var(self.fresh("j"), 0, blocks - 1)
        with self._loop(j, "reduce"):
            acc = level.new()
            self._exact_units(size, unit, acc, level, base + lin(j) * size)
            level.add(dst, acc)

    def _exact_units(self, count: int, unit, dst: str, level, base: Lin) -> None:
        """`_sum_units` for this `count`: a loop only where one runs more than once."""
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
        self._subtrees(blocks, size, unit, dst, level, base)
        if rest:
            self._exact_units(rest, unit, dst, level, base + blocks * size)

    def _level(self, dtype: DType, size: int, lanes: int, tile_loops: list[Var], slot: Lin):
        """How a cascade makes and combines accumulators: `size` of them in rows of `lanes`,
        walked by `tile_loops` (unrolled, then the vector loop) at element `slot`."""
        return _Level(self, dtype, size, lanes, tile_loops, slot)
