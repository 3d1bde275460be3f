"""The CPU's lowerer: one scheduled kernel's loop nest, its values generated at the
coordinates their consumers read them at (`Lowerer`).

The kernel loops over its output; every node inside is generated at the coordinates its
consumer reads it at (`Lowerer.gen`). Views never move data: each movement op only
rewrites the coordinate expressions on the way down to a load (`view_source_coords`),
and `PAD` adds a validity condition outside which the value is zero. A reduction opens
its loops where its value is needed (`gen_reduce`); a row kernel's statistics are
hoisted out of the loops they do not move with (`_hoist_level`). A register tile's
loop nest is `pipeline/contraction.py`'s and a cascaded sum's `pipeline/cascade.py`'s
(mixins of `Lowerer`); which of them a kernel takes is `pipeline/lower.py`'s choice.
"""

from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager

from ..ir.dtypes import float32
from ..ir.node import Node
from ..ir.ops import ELEMENTWISE, REDUCE, REDUCE_COMBINE, Ops
from ..ir.symbolic import Lin, Var, lin
from . import tile_choice
from .cascade import CascadeSums
from .contraction import TiledContraction
from .coords import coords_from_groups as _coords_from_groups
from .coords import linear_index, strides_of
from .kernel_names import kernel_name
from .loopir import (
    AccInit,
    AccOnlineExp,
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
from .reductions import LANE_MAX_MIN, cascade_min, reduce_identity, zero_value
from .row_patterns import (
    online_exp_max,
    row_axis,
    softmax_divisions,
    stashed_row_value,
    sums_computing,
)
from .schedule import ScheduleItem
from .tile_choice import WIDE_VECTOR_BYTES, Tile


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


class Lowerer(TiledContraction, CascadeSums):
    """Builds one schedule item's loop nest (`lower`; a scatter-add's, `lower_scatter`).

    `out_groups` and `red_groups` are the output and reduction axes merged into each loop
    (`pipeline/lower.py` chooses them). With `tile`, a reduction is register-tiled
    (`lower_tiled`, pipeline/contraction.py); with `cascade_lanes`, its float sum is
    cascaded over that many lanes (pipeline/cascade.py); `row_cascade` cascades a row
    kernel's long sums (and stores a value its passes share, `stashed_row_value`);
    `lane_max` takes a float max in vector lanes; `one_loop_siblings` adds a kernel's
    sibling reductions in the reduction's own loop. `amx.py` and `dpbf16.py` build their
    kernels with a lowerer's value generation too.
    """

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
        shifted_last: bool = False,
    ):
        self.item = item
        # a register tile's rows whose count they divide still end in a last tile shifted
        # back (a whole tile), as a count they do not divide does: in a plan whose sizes vary,
        # so the kernel's form does not change with the divisors of a size
        # (`TiledContraction._open_tile_loops`)
        self.shifted_last = shifted_last
        # sibling reductions (pipeline/schedule.py, rule 7) in the reduction's own loop, one
        # accumulator each (the CPU's); else each in a loop of its own (the GPU's mapping
        # splits one reduction per loop over a block's threads)
        self.one_loop_siblings = one_loop_siblings and bool(item.siblings)
        self.row_cascade = row_cascade  # a row kernel's long float sums cascade (the CPU's)
        # a row kernel's value that its statistics pass stores into the output and its
        # output pass loads back instead of recomputing (`stashed_row_value`); the CPU's
        self.stash = stashed_row_value(item) if row_cascade else None
        self.stash_sums = sums_computing(item, self.stash)  # ids of the passes storing it
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
        # the buffers of the values stored inside the reduction's loops (pipeline/schedule.py,
        # rule 8), after the root's and the extra outputs'
        self.source_outs = self.outs[1 + len(item.extra) :]
        self.prefetched: list[tuple[Node, int]] = []  # (input, its row's length)
        if self.stash is not None:
            self.stash_buffer = self.out
            axis = row_axis(item, self.stash_sums)
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
        # a kernel that computes row statistics inside (pipeline/schedule.py, rule 6) hoists every
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
        whole = self.stash is not None or loops_shape[-1:] >= [WIDE_VECTOR_BYTES // 4]
        if self.row_cascade and whole and len(loop_vars) > 1 and tile_choice.wide_registers():
            # a row kernel's output pass in whole AVX-512 registers: LLVM would take half
            # (a 16-bit output's rounding and packing then costs twice the instructions an
            # element), or a quarter where the pass compares 64-bit integers (a cross
            # entropy's one-hot target == class: 4 lanes for the 4 int64s of 256 bits)
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
        start = -0.0 if root.arg[1] else zero_value(root.dtype)  # (`N.scatter_add`)
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
        sibling reductions, pipeline/schedule.py rule 7): the loops once, a value for each."""
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
            return self.emit(Const(self.fresh("c"), n.dtype, zero_value(n.dtype)))
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
        """A row statistic inside an elementwise kernel (pipeline/schedule.py, rule 6): its axes
        are the trailing ones, one loop; a long float sum is cascaded as a kernel's own."""
        saved = self.red_groups, self.cascade_lanes
        self.red_groups = [tuple(sorted(n.arg))]
        self.statistics += 1
        row = math.prod(n.srcs[0].shape[a] for a in n.arg)
        long_sum = self.row_cascade and n.op is Ops.SUM and n.dtype.is_float
        long_sum = long_sum and row >= cascade_min()
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
        self.emit(AccInit(acc, total.dtype, zero_value(total.dtype)))
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
