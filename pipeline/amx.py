"""A bfloat16 contraction on AMX tiles (`tdpbf16ps`), where the host has them.

A matmul of two bfloat16 operands that the frontend copied into AMX's layouts (A in
16 x 32 tiles each in one piece, B in pairs along the reduction: the VNNI layout;
`frontend/reduce.py`, `_product`) is lowered to tiles of 32 x 32 outputs, four 16 x 16
float32 accumulator tiles fed by two 16 x 32 tiles of the left operand and two 32 x 16 of
the right one (all eight tile registers), with loops blocked for the caches:

    parallel for ng in 0..N/(32G):  for om in 0..M/32:
      for kc in 0..K/KC:                       (a chunk of A's 32 rows stays in L1)
        for b in 0..G:                         (the group's B panels stay in L2)
          tile0..3 = acc[b]                    (in memory, 32 x 32 float32; 0 at kc = 0)
          for r in 0..KC/32:
            tile4, tile5 = A's tiles at (om*32 + 0..15 | 16..31, kc*KC + 32r..)
                           (b = 0: from A, and stored into stage[r]; b > 0: from stage[r])
            tile6, tile7 = B's pairs at (kc*KC + 32r.., (ng*G + b)*32 + 0..15 | 16..31)
            tile0 += tile4 . tile6;  tile1 += tile4 . tile7;  tile2 += tile5 . tile6; ...
            (in program order load 4, load 6, tile0, load 7, tile1, load 5, tile2, tile3)
          acc[b] = tile0..3
      for b: unrolled for i in 0..32: vector for t in 0..32: out[...] = epilogue(acc[b][i, t])

The chunk kc = 0 is emitted apart from the loop over the others: its tiles start at 0
(`tilezero`), with no zeros stored to memory and read back. `stage` is the thread's copy of
A's chunk in 16 x 32 tiles of 1 KiB (its stack, `Kernel.scratch`), made where A is read in
place (rows K apart: at K = 2048 a tile's 16 rows share one L1 set, so A never stayed in
L1) and the group has more than one block; the copy costs two tile stores per step of the
first block, beside its products.

Products are exact and sums float32, as the FMA tile's, but `tdpbf16ps` flushes
subnormal inputs and results to zero and adds each pair of products before the
accumulator (docs/NUMERICS.md). Anything this does not recognize exactly (another
layout, a padded or computed operand, a size not a multiple of 32) returns None and
takes the register tiles of `pipeline/tile_choice.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.dtypes import bfloat16
from ..ir.ops import Ops
from ..ir.symbolic import Lin, Var, lin
from .coords import coords_from_groups, linear_index, squeeze_coords
from .loopir import (
    AccInit,
    AccRead,
    Kernel,
    Load,
    Loop,
    Param,
    Store,
    TileDot,
    TileLoad,
    TileLoadAcc,
    TileStore,
    TileStoreRows,
    TileZero,
)

AMX_BLOCK = 32  # outputs along each of M and N per tile loop; reduction elements per step
HALF = 16  # a tile's rows (and a float32 tile's columns)


def linear_in(index: Lin, tile_vars: set[Var]) -> bool:
    """Whether `index` is affine in `tile_vars`: none of them inside a division."""
    return not any(not isinstance(a, Var) and tile_vars & a.x.atoms() for a, _ in index.terms)


def bf16_matmul(lw) -> tuple | None:
    """(the product node, the output groups' extents, the reduction's extent) where lowerer
    `lw`'s kernel is a sum of products of bfloat16 values over one group of axes, a
    multiple of 32 long (what the AMX and `vdpbf16ps` kernels take; their layouts are
    checked after, by `find_operands`), with `lw`'s kernel body started empty; else None."""
    item, red = lw.item, lw.item.reduce
    if red is None or red.op is not Ops.SUM or red.dtype is not bfloat16:
        return None
    src = red.srcs[0]
    if src.op is not Ops.MUL or len(lw.red_groups) != 1 or item.extra:
        return None
    lw.block, lw.iterations, lw.flops = [], 1, 0
    shape = item.root.shape
    extents = [math.prod(shape[a] for a in g) for g in lw.out_groups]
    k_extent = math.prod(src.shape[a] for a in lw.red_groups[0])
    if k_extent % AMX_BLOCK:
        return None
    return src, extents, k_extent


def lower_amx(lw, name: str) -> Kernel | None:
    """The AMX kernel `name` of lowerer `lw` (a `pipeline.loop_nest.Lowerer` without a tile), or
    None where the kernel is not a bfloat16 matmul of that shape and layout."""
    matmul = bf16_matmul(lw)
    if matmul is None:
        return None
    src, extents, k_extent = matmul
    # symbolic coordinates of one 32 x 32 block: om, on the tile loops, (i, rr) a row inside
    # (i: which 16), (j, c) a column, (p, q) a reduction element 32r + 2p + q
    i, rr = Var("ai", 0, 1), Var("ar", 0, HALF - 1)
    j, c = Var("bj", 0, 1), Var("bc", 0, HALF - 1)
    p, q = Var("kp", 0, HALF - 1), Var("kq", 0, 1)
    r = Var("r0", 0, k_extent // AMX_BLOCK - 1)
    k_expr = lin(r) * AMX_BLOCK + lin(p) * 2 + q
    operands = find_operands(
        lw,
        src,
        extents,
        k_expr,
        (lambda om: lin(om) * AMX_BLOCK + lin(i) * HALF + rr, rr),
        (lambda on: lin(on) * AMX_BLOCK + lin(j) * HALF + c, c),
    )
    if operands is None:
        return None
    m_group, n_group, a_load, b_load = operands
    a_ix, b_ix = a_load.index, b_load.index
    # A: rows rr apart by its row stride, 32 consecutive reduction elements (p, q) per row
    if not linear_in(a_ix, {i, rr, p, q}) or {j, c} & a_ix.atoms():
        return None
    if a_ix.coef(q) != 1 or a_ix.coef(p) != 2 or a_ix.coef(rr) < AMX_BLOCK:
        return None
    # B: pairs (q) adjacent, 16 columns (c) 2 apart, rows of pairs (p) a stride apart
    if not linear_in(b_ix, {j, c, p, q}) or {i, rr} & b_ix.atoms():
        return None
    b_stride = b_ix.coef(p)
    if b_ix.coef(q) != 1 or b_ix.coef(c) != 2 or b_stride < AMX_BLOCK:
        return None
    return _emit(lw, name, m_group, n_group, extents, a_load, b_load, (i, rr, j, c, p, q, r))


def find_operands(lw, src, extents, k_expr, rows, cols):
    """(m group, n group, A's load, B's load) read at a block's symbolic coordinates, or
    None: each of the product's two operands must be one bfloat16 load, unguarded. `rows`
    is (the row's expression given M's 32-row block variable, the variable that only A's
    index may name), `cols` the same for N's columns and B (also `pipeline/dpbf16.py`'s)."""
    (row_of, rr), (col_of, c) = rows, cols
    for m_group in range(len(extents)):
        for n_group in range(len(extents)):
            if m_group == n_group or extents[m_group] % AMX_BLOCK:
                continue
            if extents[n_group] % AMX_BLOCK:
                continue
            exprs = [lin(Var(f"o{g}", 0, e - 1)) for g, e in enumerate(extents)]
            om = Var(f"o{m_group}", 0, extents[m_group] // AMX_BLOCK - 1)
            exprs[m_group] = row_of(om)
            on = Var(f"o{n_group}", 0, extents[n_group] // AMX_BLOCK - 1)
            exprs[n_group] = col_of(on)
            loads = trial_loads(lw, src, exprs, k_expr)
            if loads is None:
                return None
            first, second = loads
            if {rr} & first.index.atoms() and {c} & second.index.atoms():
                return m_group, n_group, first, second
            if {rr} & second.index.atoms() and {c} & first.index.atoms():
                return m_group, n_group, second, first
    return None


def trial_loads(lw, src, out_exprs, k_expr) -> tuple[Load, Load] | None:
    """The loads the product's two operands make at these coordinates, generated into a
    scratch block and dropped; None unless each is one unguarded bfloat16 load."""
    root, red = lw.item.root, lw.item.reduce
    coords = coords_from_groups(root.shape, lw.out_groups, out_exprs)
    coords = squeeze_coords(coords, root.shape, red.shape)
    # the reduction's input coordinates: the output's, with the reduced axes' replaced
    red_coords = coords_from_groups(src.shape, lw.red_groups, [k_expr])
    src_coords = tuple(red_coords[a] if a in red.arg else x for a, x in enumerate(coords))
    saved = lw.block, lw.iterations, lw.flops, lw.scopes
    loads = []
    try:
        for operand in src.srcs:
            lw.block, lw.scopes = [], [{}]
            lw.gen(operand, src_coords, ())
            stmts = lw.block
            if len(stmts) != 1 or not isinstance(stmts[0], Load):
                return None
            ld = stmts[0]
            if ld.valid or ld.dtype is not bfloat16 or ld.param.output:
                return None
            loads.append(ld)
    finally:
        lw.block, lw.iterations, lw.flops, lw.scopes = saved
    return loads[0], loads[1]


# one reduction step in program order: tiles 4-7 are loads, 0-3 the products into them. Each
# operand is loaded just before its first product, so the first product waits for two loads,
# not four (the tiles are not renamed: a load waits for the last step's products reading its
# tile), so the products start while later loads are in flight
LOADS_AND_PRODUCTS = (4, 6, 0, 7, 1, 5, 2, 3)
L2_PANEL_BYTES = 1 << 20  # the packed B columns one group of N blocks keeps in L2
# the rows of A one reduction chunk of an M block keeps in L1: 16 KiB, so that the chunk's
# copy (`stage`, `_Chunks`) and the 16 KiB of B one block's chunk streams past it fit L1
# (a larger chunk spills the copy out of L1; a smaller one pays more loop overhead)
L1_CHUNK_BYTES = 16 << 10
GROUP_MAX = 8  # N blocks per group at most


def n_group_size(n_blocks: int, k_extent: int, budget: int = L2_PANEL_BYTES) -> int:
    """How many of N's 32-column blocks one parallel iteration walks for each M block: the
    most (a divisor of `n_blocks`, at most 8) whose packed B panels fit `budget` bytes,
    leaving at least two groups (one per core) where there are two blocks or more.

    >>> n_group_size(64, 2048), n_group_size(64, 8192), n_group_size(2, 64), n_group_size(1, 32)
    (8, 2, 1, 1)
    """
    panel = k_extent * AMX_BLOCK * 2  # bytes of one block's bfloat16 B panel
    best = 1
    for g in range(1, min(GROUP_MAX, n_blocks // 2) + 1):
        if n_blocks % g == 0 and g * panel <= budget:
            best = g
    return best


def k_chunk_size(k_extent: int) -> int:
    """The reduction elements of one chunk: the most (a multiple of 32 dividing `k_extent`)
    whose 32 rows of A fit `L1_CHUNK_BYTES`.

    >>> k_chunk_size(2048), k_chunk_size(96), k_chunk_size(32), k_chunk_size(1056)
    (256, 96, 32, 96)
    """
    best = AMX_BLOCK
    for kc in range(AMX_BLOCK, k_extent + 1, AMX_BLOCK):
        if k_extent % kc == 0 and kc * AMX_BLOCK * 2 <= L1_CHUNK_BYTES:
            best = kc
    return best


def _emit(lw, name, m_group, n_group, extents, a_load, b_load, tile_vars) -> Kernel:
    """The kernel: N's blocks in groups (the parallel loop), each M block, the reduction in
    chunks and in each chunk the group's blocks, so that a chunk of A's 32 rows is read from
    L1 by all the group's blocks and their packed B panels stay in L2; each block's four
    accumulator tiles wait in memory between chunks. The first chunk starts its tiles at 0
    (no accumulator in memory to read yet): it is emitted apart from the loop over the
    others. Then the epilogue, block by block."""
    i, rr, j, c, p, q, r = tile_vars
    item, red, root = lw.item, lw.item.reduce, lw.item.root
    body: list = []
    lw.block, lw.iterations, lw.flops = body, 1, 0
    n_blocks = extents[n_group] // AMX_BLOCK
    k_extent = (r.max + 1) * AMX_BLOCK
    group, chunk = n_group_size(n_blocks, k_extent), k_chunk_size(k_extent)
    n_outer = Var(f"o{n_group}g", 0, n_blocks // group - 1)
    rest = [g for g in range(len(extents)) if g not in (m_group, n_group)]
    loop_vars = {g: Var(f"o{g}", 0, extents[g] - 1) for g in rest}
    loop_vars[m_group] = Var(f"o{m_group}", 0, extents[m_group] // AMX_BLOCK - 1)
    order = [n_outer, loop_vars[m_group]] + [loop_vars[g] for g in rest]
    for k, v in enumerate(order):
        lw._open_loop(Loop(v, v.max + 1, [], "parallel" if k == 0 else "serial"))
    accs = [lw._new_acc() for _ in range(group)]
    for acc in accs:
        lw.emit(AccInit(acc, red.dtype, 0.0, AMX_BLOCK * AMX_BLOCK, AMX_BLOCK, memory=True))
    # A's chunk copied into 16 x 32 tiles of 1 KiB where its rows are apart (read in place:
    # a tile's 16 rows, 4 KiB apart at K = 2048, share one L1 set and never stay in L1) and
    # more than one block reads it
    stage = None
    if a_load.index.coef(rr) != AMX_BLOCK and group > 1:
        stage = Param("scratch0", bfloat16, chunk * AMX_BLOCK, False)
    on, r_in = Var(f"o{n_group}", 0, n_blocks - 1), Var("r1", 0, chunk // AMX_BLOCK - 1)
    chunks = _Chunks(accs, a_load, b_load, tile_vars, on, n_outer, group, r_in, stage)
    outer_block, outer_iter = lw.block, lw.iterations
    chunks.emit(lw, lin(0), first=True)
    if k_extent > chunk:
        rk = Var("rk", 0, k_extent // chunk - 2)
        lw._open_loop(Loop(rk, rk.max + 1, [], "serial"))
        chunks.emit(lw, lin(rk) + 1, first=False)
    lw.block, lw.iterations = outer_block, outer_iter
    for b, acc in enumerate(accs):
        # the epilogue over block b: rows unrolled, 32-lane vectors along N
        row, lane = Var("i", 0, AMX_BLOCK - 1), Var("t", 0, AMX_BLOCK - 1)
        block_at, block_iter = lw.block, lw.iterations
        lw._open_loop(Loop(row, AMX_BLOCK, [], "unroll"))
        lw._open_loop(Loop(lane, AMX_BLOCK, [], "vector"))
        exprs = [lin(loop_vars[g]) if g in loop_vars else lin(0) for g in range(len(extents))]
        exprs[m_group] = lin(loop_vars[m_group]) * AMX_BLOCK + row
        exprs[n_group] = (lin(n_outer) * group + b) * AMX_BLOCK + lane
        coords = coords_from_groups(root.shape, lw.out_groups, exprs)
        red_coords = squeeze_coords(coords, root.shape, red.shape)
        lw.scopes.append({})
        got = lw.emit(AccRead(lw.fresh(), red.dtype, acc, lin(row) * AMX_BLOCK + lane))
        lw.scopes[-1][(id(red), red_coords, ())] = got
        value = lw.gen(root, coords, ())
        lw.emit(Store(lw.out, linear_index(coords, root.shape), value))
        lw.scopes.pop()
        lw.block, lw.iterations = block_at, block_iter
    params = lw.outs + [lw.params[id(n)] for n in item.inputs]
    scratch = [stage] if stage is not None else []
    return Kernel(name, params, body, n_outer.max + 1, lw.flops, scratch=scratch)


@dataclass
class _Chunks:
    """Emits one reduction chunk of an M block for each of its group's N blocks."""

    accs: list[str]  # the group's accumulators in memory, one 32 x 32 block each
    a_load: Load
    b_load: Load
    tile_vars: tuple[Var, ...]  # (i, rr, j, c, p, q, r) of `lower_amx`
    on: Var  # N's block, as the loads name it
    n_outer: Var  # the group of N's blocks (the parallel loop)
    group: int
    r_in: Var  # a step inside a chunk
    stage: Param | None  # the thread's copy of A's chunk, or None: A read in place

    def emit(self, lw, rk: Lin, first: bool) -> None:
        """Chunk `rk`, block by block: the four accumulator tiles from memory (at 0 in the
        first chunk), the chunk's steps, the tiles back to memory. The group's first block
        reads A in place and stores each of its tiles into the copy (`stage`: a store of a
        tile already loaded, beside the products) that the other blocks read."""
        i, rr, j, c, p, q, r = self.tile_vars
        a_load, b_load, r_in, stage = self.a_load, self.b_load, self.r_in, self.stage
        r_expr = rk * (r_in.max + 1) + r_in
        zero = {rr: lin(0), c: lin(0), p: lin(0), q: lin(0)}
        chunk_block, chunk_iter = lw.block, lw.iterations
        for b, acc in enumerate(self.accs):
            on_expr = lin(self.n_outer) * self.group + b
            # (A's index may name N's block too, times a factor its range makes 0, at N = 32)
            a_ix = a_load.index.substitute({r: r_expr, self.on: on_expr})
            b_ix = b_load.index.substitute({r: r_expr, self.on: on_expr})
            for t in range(4):
                lw.emit(TileZero(t) if first else TileLoadAcc(t, acc, _tile_offset(t)))
            lw._open_loop(Loop(r_in, r_in.max + 1, [], "reduce"))
            loads, copies = {}, {}
            for half in range(2):
                staged = lin(r_in) * (2 * HALF * AMX_BLOCK) + half * HALF * AMX_BLOCK
                if stage is not None and b > 0:
                    loads[4 + half] = TileLoad(4 + half, stage, staged, AMX_BLOCK)
                else:
                    at = a_ix.substitute({**zero, i: lin(half)})
                    loads[4 + half] = TileLoad(4 + half, a_load.param, at, a_load.index.coef(rr))
                if stage is not None and b == 0:
                    copies[4 + half] = TileStoreRows(4 + half, stage, staged, AMX_BLOCK)
                at = b_ix.substitute({**zero, j: lin(half)})
                loads[6 + half] = TileLoad(6 + half, b_load.param, at, b_load.index.coef(p))
            for t in LOADS_AND_PRODUCTS:
                if t in loads:
                    lw.emit(loads[t])
                    if t in copies:
                        lw.emit(copies[t])
                else:
                    lw.emit(TileDot(t, 4 + t // 2, 6 + t % 2), 2 * HALF * HALF * AMX_BLOCK)
            lw.block, lw.iterations = chunk_block, chunk_iter
            for t in range(4):
                lw.emit(TileStore(t, acc, _tile_offset(t)))


def _tile_offset(t: int) -> int:
    """Where accumulator tile t (0-3: rows 0-15 or 16-31, columns 0-15 or 16-31) starts in
    its 32 x 32 block."""
    return (t // 2) * HALF * AMX_BLOCK + (t % 2) * HALF
