"""A bfloat16 contraction on `vdpbf16ps` register tiles, where the host has AVX512-BF16 and
no AMX (an AMD Zen 4/5, where `vdpbf16ps` outruns the FMA; `benchmarks/bf16_dot_rate.py` measures
which instruction is faster on a host; on an Intel Xeon AMX is used).

The operands are what the frontend makes for AMX tiles (`frontend/reduce.py`, `_product`):
A read in place with K adjacent (or copied into 16 x 32 tiles, whose rows keep K adjacent
too) and B packed in pairs along K, so that for each pair p of K and 16 columns the 32
bfloat16 (b[2p, n], b[2p + 1, n]) are 64 contiguous bytes. One `vdpbf16ps` adds to 16
float32 accumulators the products of those 16 columns with one pair of A's row, broadcast
(a[i, 2p], a[i, 2p + 1]). A register tile is 8 rows x 32 columns, 16 accumulators (of the
32 vector registers, beside B's two and the broadcasts), so each step of a pair is two
loads of B, eight broadcasts of A (`vbroadcastss`, each used twice) and 16 `vdpbf16ps`
(not 4 rows x 64 columns, four loads of B and four broadcasts: B's loads come from L2,
A's from L1); the loops are

    parallel for ng in 0..N/(32G):  for om in 0..M/32:  for i, h in 0..2:
                                                   (one group: M's blocks om the parallel loop)
      for b in 0..G:                               (the group's B panels stay in L2)
        acc[8][32] = 0
        for r in 0..K/32:  for p in 0..16:         (the whole of K, in registers)
          unrolled for row in 0..8, j in 0..2:  vector for c in 0..16:
            acc[row][16j + c] += dot(A's pair (32 om + 16 i + 8 h + row, 32 r + 2p..),
                                     B's pairs (32 r + 2p.., (ng G + b) 32 + 16 j + c))
        unrolled for row, j: vector for c: out[...] = epilogue(acc[row][16j + c])

An 8-row block of A (8 rows of K: 32 KiB at K = 2048) is read by the group's G blocks of
B, each of whose panels (K x 32 bfloat16, 128 KiB at K = 2048) is read by every row
block: `n_group_size` keeps the group's panels within half of L2 (a group that fills L2 evicts
its own panels).

Products are exact and sums float32, each product added to the accumulator and rounded
alone, the pair's second product (the odd index of K) before its first; `vdpbf16ps` treats subnormal
inputs (the accumulator's too) as 0 and flushes subnormal results to 0, whatever MXCSR
says (docs/NUMERICS.md). Anything this does not recognize exactly (another layout, a
padded or computed operand, a size not a multiple of 32) returns None and takes the
register tiles of `pipeline/tile_choice.py`.
"""

from __future__ import annotations

from ..ir.symbolic import Lin, Var, lin
from .amx import AMX_BLOCK, bf16_matmul, find_operands, linear_in
from .amx import n_group_size as amx_group_size
from .coords import coords_from_groups, linear_index, squeeze_coords
from .loopir import AccDotPairs, AccInit, AccRead, Kernel, Loop, Store

ROWS = 8  # a register tile's rows
LANES = 16  # float32 lanes of one vector register (one `vdpbf16ps`)
PAIR_STEP = AMX_BLOCK // 2  # pairs of K in one 32-element step of B's packed layout
L2_PANEL_BYTES = 512 << 10  # the packed B panels one group keeps in L2 (1 MiB on Zen 5)


def n_group_size(n_blocks: int, k_extent: int) -> int:
    """How many of N's 32-column blocks one parallel iteration walks for each row block:
    AMX's choice (`amx.n_group_size`), with the panels kept within `L2_PANEL_BYTES`.

    >>> n_group_size(64, 2048), n_group_size(64, 8192), n_group_size(2, 64), n_group_size(1, 32)
    (4, 1, 1, 1)
    """
    return amx_group_size(n_blocks, k_extent, L2_PANEL_BYTES)


def lower_dpbf16(lw, name: str) -> Kernel | None:
    """The `vdpbf16ps` kernel `name` of lowerer `lw` (a `pipeline.loop_nest.Lowerer` without a
    tile), or None where the kernel is not a bfloat16 matmul of that shape and layout."""
    matmul = bf16_matmul(lw)
    if matmul is None:
        return None
    src, extents, k_extent = matmul
    # a row 32 om + 16 i + rr (as A's 16 x 32 tiles split it: `_emit` splits rr into the
    # tile's rows), a column 32 on + 16 j + c, a reduction element 32 r + 2 p + q
    i, rr = Var("ai", 0, 1), Var("ar", 0, 15)
    j, c = Var("bj", 0, 1), Var("bc", 0, LANES - 1)
    p, q = Var("kp", 0, PAIR_STEP - 1), Var("kq", 0, 1)
    r = Var("r0", 0, k_extent // AMX_BLOCK - 1)
    k_expr = lin(r) * AMX_BLOCK + lin(p) * 2 + q
    operands = find_operands(
        lw,
        src,
        extents,
        k_expr,
        (lambda om: lin(om) * AMX_BLOCK + lin(i) * 16 + rr, rr),
        (lambda on: lin(on) * AMX_BLOCK + lin(j) * LANES + c, c),
    )
    if operands is None:
        return None
    m_group, n_group, a_load, b_load = operands
    a_ix, b_ix = a_load.index, b_load.index
    # A: a pair (q) adjacent, pairs (p) adjacent along a row
    if not linear_in(a_ix, {i, rr, p, q}) or {j, c} & a_ix.atoms():
        return None
    if a_ix.coef(q) != 1 or a_ix.coef(p) != 2:
        return None
    # B: a pair (q) adjacent, 16 columns (c) a pair apart: 64 contiguous bytes
    if not linear_in(b_ix, {j, c, p, q}) or {i, rr} & b_ix.atoms():
        return None
    if b_ix.coef(q) != 1 or b_ix.coef(c) != 2:
        return None
    tile_vars = (i, rr, j, c, p, q, r)
    return _emit(lw, name, m_group, n_group, extents, a_load, b_load, tile_vars)


def _emit(lw, name, m_group, n_group, extents, a_load, b_load, tile_vars) -> Kernel:
    """The kernel: N's blocks in groups (the parallel loop), each block of rows, each tile
    of the group's N blocks, the whole reduction into one register tile and its epilogue."""
    i, rr, j, c, p, q, r = tile_vars
    item, red = lw.item, lw.item.reduce
    body: list = []
    lw.block, lw.iterations, lw.flops = body, 1, 0
    n_blocks = extents[n_group] // AMX_BLOCK
    k_extent = (r.max + 1) * AMX_BLOCK
    group = n_group_size(n_blocks, k_extent)
    # rr = 8 h + row: a tile's 8 rows are half of one of A's 16-row tiles
    h, row = Var("ah", 0, 16 // ROWS - 1), Var("aw", 0, ROWS - 1)
    n_outer = Var(f"o{n_group}g", 0, n_blocks // group - 1)
    on = Var(f"o{n_group}", 0, n_blocks - 1)  # N's block, as the loads name it
    rest = [g for g in range(len(extents)) if g not in (m_group, n_group)]
    loop_vars = {g: Var(f"o{g}", 0, extents[g] - 1) for g in rest}
    loop_vars[m_group] = Var(f"o{m_group}", 0, extents[m_group] // AMX_BLOCK - 1)
    outer = [n_outer, loop_vars[m_group]]
    if n_outer.max == 0:  # one group of N's blocks (N small): the threads split M instead
        outer.reverse()
    order = outer + [loop_vars[g] for g in rest] + [i, h]
    for k, v in enumerate(order):
        lw._open_loop(Loop(v, v.max + 1, [], "parallel" if k == 0 else "serial"))
    row_expr = lin(h) * ROWS + row
    for b in range(group):
        block_at, block_iter = lw.block, lw.iterations
        acc = lw._new_acc()
        lw.emit(AccInit(acc, red.dtype, 0.0, ROWS * AMX_BLOCK, LANES))
        on_expr = lin(n_outer) * group + b
        # (A's index may name N's block too, times a factor its range makes 0, at N = 32)
        a_at = a_load.index.substitute({rr: row_expr, on: on_expr, c: lin(0), q: lin(0)})
        b_at = b_load.index.substitute({on: on_expr, q: lin(0)})
        at = lin(row) * AMX_BLOCK + lin(j) * LANES + c  # the accumulator of (row, 16 j + c)
        lw._open_loop(Loop(r, r.max + 1, [], "reduce"))
        lw._open_loop(Loop(p, p.max + 1, [], "reduce"))
        _open_tile_loops(lw, row, j, c)
        lw.emit(AccDotPairs(acc, at, a_load.param, a_at, b_load.param, b_at), 4)
        lw.block, lw.iterations = block_at, block_iter
        # the fused epilogue over the tile
        _open_tile_loops(lw, row, j, c)
        m_expr = lin(loop_vars[m_group]) * AMX_BLOCK + lin(i) * 16 + row_expr
        n_expr = on_expr * AMX_BLOCK + lin(j) * LANES + c
        _epilogue(lw, acc, at, m_group, n_group, extents, loop_vars, m_expr, n_expr)
        lw.block, lw.iterations = block_at, block_iter
    params = lw.outs + [lw.params[id(n)] for n in item.inputs]
    kernel = Kernel(name, params, body, order[0].max + 1, lw.flops)
    kernel.tile_note = (
        f"vdpbf16ps register tile {ROWS} rows x {AMX_BLOCK} lanes, groups of {group} N blocks"
    )
    return kernel


def _open_tile_loops(lw, row, j, c) -> None:
    """A tile's rows and its two 16-column halves unrolled, then a vector loop of 16 lanes."""
    lw._open_loop(Loop(row, ROWS, [], "unroll"))
    lw._open_loop(Loop(j, 2, [], "unroll"))
    lw._open_loop(Loop(c, LANES, [], "vector"))


def _epilogue(lw, acc, at, m_group, n_group, extents, loop_vars, m_expr, n_expr):
    """The fused epilogue of output (m_expr, n_expr), accumulator `acc`'s element `at`."""
    red, root = lw.item.reduce, lw.item.root
    exprs: list[Lin] = [
        lin(loop_vars[g]) if g in loop_vars else lin(0) for g in range(len(extents))
    ]
    exprs[m_group], exprs[n_group] = m_expr, n_expr
    coords = coords_from_groups(root.shape, lw.out_groups, exprs)
    red_coords = squeeze_coords(coords, root.shape, red.shape)
    lw.scopes.append({})
    got = lw.emit(AccRead(lw.fresh(), red.dtype, acc, at))
    lw.scopes[-1][(id(red), red_coords, ())] = got
    value = lw.gen(root, coords, ())
    lw.emit(Store(lw.out, linear_index(coords, root.shape), value))
    lw.scopes.pop()
