"""A contraction's tiles through shared memory, and their fp32 SIMT arithmetic.

`TiledContraction` prints a contraction (`pipeline/gpu.py`'s `Contraction`): the block's
loop over output tiles, the staged buffers in shared memory, the loop over reduction
steps that copies the next steps while it computes this one (`stage`, `stages_ahead`),
and the epilogue per output. What a step computes is one of three paths, printed side by
side under `#if`s on the architecture: every thread's ra x rb register tile on the CUDA
cores (`simt_step`, here), warp-level tensor cores (`cuda_mma.py`), or Hopper's warpgroup
tensor cores (`cuda_wgmma.py`, which also stages through `stage` and `stages_ahead`).

A thread's rows of its register tile are 4 neighbours 64 apart where it has a multiple
of 4 (a staged row's 4 values are one 16-byte read):

    >>> simt_at(8, "threadIdx.y", "i")
    '(i >> 2) * 64 + threadIdx.y * 4 + (i & 3)'
    >>> simt_at(2, "threadIdx.y", "i")
    'threadIdx.y + i * 16'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.symbolic import Var, lin
from . import gpu as gpu_map
from .cuda_text import (
    PARTIAL,
    index,
    index_texts,
    literal,
    mem_type,
    narrow_indices,
    narrowed,
    reg_type,
    valid,
    widened,
)
from .gpu import HALF_MMA, STATIC_SHARED, TILE_THREADS, VECTOR, Contraction
from .loopir import AccUpdate, Alu, Const, Load, Select

# a contraction's staging decomposes its flat indices in 32-bit ints where each of them (a
# side's outputs, the reduction, the batch) is below this: a sum of a few such indices in
# an affine load index still fits in an int
NARROW_LIMIT = 2**29
PAD = 4  # floats after each staged row: rows stay 16-byte aligned for the 16-byte copies
# (16-bit values are not padded but swizzled: `fg_swizzle`)
HALF_STAGES = 4  # at most this many buffers of staged steps on the 16-bit tensor cores
# buffers of staged steps on the fp32 SIMT path where a side is copied by `cp.async`
# (`Contraction.simt_async`: the copies of the next SIMT_STAGES - 1 steps in flight)
SIMT_STAGES = 4


# the fp32 SIMT path with two buffers (no side copied by `cp.async`): each thread loads
# the next step's values into registers before this step's products and stores them to
# shared memory after, so the loads' latency overlaps the products, one barrier a step
# (off: staged before the step's barrier, two barriers a step; `benchmarks/gpu.py
# --no-prefetch` and `gpu_models.py --no-prefetch` time both)
PREFETCH = True

# sides staged through `Gather` tables where they apply (off: value by value, as before;
# `benchmarks/gpu.py --no-gather` times both)
GATHER = True
# a gather side's table of the reduction's parts (`Gather`): at most this many bytes
GATHER_TABLE_BYTES = 8192
GATHER_MASK_BITS = 64  # its conditions' reduction loops span at most this many values


@dataclass
class Gather:
    """How a side staged `[kk][at]` one value at a time (a convolution's input window) is
    staged without working out its indices per value. Each thread keeps one tile position
    `at` for the whole tile, so every affine index and condition of the side splits into a
    part along the side's own (and the batch's) loops, fixed for the tile, and a part
    along the reduction's loops:

    - `index` (an index of the side's loads -> its column in the table, or None where it
      has no reduction part): the own part is computed once a tile (`h<i>`), the
      reduction's read per staged value from a table in shared memory, a row per
      reduction step, filled once a block (`gather_tables`);
    - `conds` (each distinct conjunction of conditions, a padded window's bounds): the
      reduction loops they read span at most `GATHER_MASK_BITS` values (a 3x3 window's
      9), so each thread sets a bit per value once a tile where the conjunction holds
      (`m<j>`), and a staged value tests its bit, numbered in the table's last column.

    A staged value then costs a table row, an add, a shift and the load, where it cost
    the reduction step's decomposition (divisions by constants) and every bound."""

    index: dict  # Lin -> (own part, table column or None)
    columns: list  # the reduction parts, one table column each
    conds: list  # distinct conjunctions (tuples of Lin)
    cond_loops: list  # the reduction loops the conjunctions read (row-major numbering)

    @property
    def width(self) -> int:
        """Ints a table row holds: the columns, then the mask bit's number where needed."""
        return len(self.columns) + (1 if self.cond_loops else 0)

    @property
    def bits(self) -> int:
        return math.prod(lp.extent for lp in self.cond_loops)


def keeps_position(c: Contraction, side: str) -> bool:
    """Whether `side` is staged `[kk][at]` one value at a time with each thread at one tile
    position over all its copies (`stage_values`): not a 16-byte side, its staging walks its
    outputs (`Contraction.kk_fastest` False), and the block's threads cover whole rows."""
    a = side == "a"
    kk_fastest, vector = (c.a_kk_fastest, c.a_vector) if a else (c.b_kk_fastest, c.b_vector)
    width = TILE_THREADS * (c.ra if a else c.rb)
    return not kk_fastest and not vector and (TILE_THREADS * TILE_THREADS) % width == 0


def gather_plan(c: Contraction, side: str, narrow: bool, room: int) -> Gather | None:
    """The `Gather` staging of `side`, where it applies: staged `[kk][at]` one value at a
    time with each thread at one tile position (`stage_values`), its statements loads,
    selects, arithmetic and literals whose indices are affine in plain loop variables,
    reading the reduction's loops, in 32-bit indices (`narrow`), and its table within
    `GATHER_TABLE_BYTES` and the `room` left in shared memory."""
    if not (GATHER and narrow and keeps_position(c, side)):
        return None
    stmts = c.a_stmts if side == "a" else c.b_stmts
    lins, conds = [], []
    for st in c.consts + stmts:
        if isinstance(st, Load):
            if st.pieces:
                return None
            lins.append(st.index)
            if st.valid:
                conds.append(tuple(st.valid))
        elif isinstance(st, Select):
            conds.append(tuple(st.valid))
        elif not isinstance(st, (Alu, Const)):
            return None
    conds = [v for v in dict.fromkeys(conds) if v]
    every = lins + [e for v in conds for e in v]
    if any(not isinstance(at, Var) for e in every for at, _ in e.terms):
        return None  # (an index with a division or a remainder)
    red_vars = {lp.var for lp in c.red.loops}
    cond_vars = {at for v in conds for e in v for at, _ in e.terms if at in red_vars}
    cond_loops = [lp for lp in c.red.loops if lp.var in cond_vars]
    if math.prod(lp.extent for lp in cond_loops) > GATHER_MASK_BITS:
        return None
    index, columns = {}, []
    for e in dict.fromkeys(lins):
        own = lin(e.const)
        for at, k in e.terms:
            if at not in red_vars:
                own = own + lin(at) * k
        part = e - own
        if part.is_const:
            index[e] = (own, None)
            continue
        if part not in columns:
            columns.append(part)
        index[e] = (own, columns.index(part))
    plan = Gather(index, columns, conds, cond_loops)
    if not plan.width:
        return None  # nothing along the reduction to take out
    table = c.red.length * plan.width * 4
    if table > min(GATHER_TABLE_BYTES, room):
        return None
    return plan


def stage_count(c: Contraction, shared_limit: int = STATIC_SHARED) -> int:
    """Buffers of `kc` staged steps: 2 (double buffering); on the fp32 SIMT path with a side
    copied by `cp.async` (`simt_async`), `SIMT_STAGES` where they fit the device's
    `shared_limit`; on the 16-bit tensor cores as many as fit in `gpu.HALF_SHARED` and
    `shared_limit`, up to `HALF_STAGES` (the copies of the next stages - 1 steps in flight
    while one is computed; the tile is chosen so that two fit: `gpu._tile_shape`); in the
    wgmma pipeline `gpu.WGMMA_STAGES`."""
    if gpu_map.wgmma_tile(c, shared_limit):
        return gpu_map.WGMMA_STAGES
    if c.simt_async:
        return max(2, min(SIMT_STAGES, shared_limit // stage_bytes(c)))
    if not staged_half(c):
        return 2
    return max(2, min(HALF_STAGES, min(gpu_map.HALF_SHARED, shared_limit) // stage_bytes(c)))


def stage_bytes(c: Contraction) -> int:
    """The bytes of one buffer of a contraction's staged steps, both sides: 16-bit values
    as they are, fp32 rows padded by `PAD`."""
    if staged_half(c):
        return gpu_map.half_stage_bytes(c.ra, c.rb, c.kc)
    total = 0
    for side, exports in (("a", c.a_exports), ("b", c.b_exports)):
        rows, cols = staged_shapes(c)[side]
        total += sum(rows * (cols + PAD) * reg_type(t).itemsize for _, t in exports)
    return total


def staged_half(c: Contraction) -> bool:
    """The sides are staged in shared memory as 16-bit values (the 16-bit tensor cores)."""
    return c.mma in HALF_MMA


def staged_shapes(c: Contraction) -> dict[str, tuple[int, int]]:
    """side -> (rows, columns) of one buffer of its staged values (before an fp32 row's
    padding): (kc, tile width), or (tile width, kc) where the reduction is innermost
    (`k_inner`)."""
    shapes = {}
    for side, width in (("a", TILE_THREADS * c.ra), ("b", TILE_THREADS * c.rb)):
        shapes[side] = (width, c.kc) if c.k_inner(side) else (c.kc, width)
    return shapes


def simt_at(r: int, thread: str, i: str) -> str:
    """The tile position of row (or column) `i` of a thread's r on the fp32 SIMT path: in
    groups of 4 neighbours, 64 apart, where r is a multiple of 4 (a staged `[kk][at]` row's 4
    values are one 16-byte read: `thread * 4 + i % 4 + (i / 4) * 64`), else
    `thread + 16 i`."""
    n = TILE_THREADS
    if r % VECTOR:
        return f"{thread} + {i} * {n}"
    return f"({i} >> 2) * {VECTOR * n} + {thread} * {VECTOR} + ({i} & 3)"


def _owns(g: Gather) -> list:
    """A `Gather`'s distinct parts along the side's own loops, numbered (`<side>_fg_h<i>`)."""
    return list(dict.fromkeys(own for own, _ in g.index.values()))


def _bit(g: Gather):
    """The number of a reduction step's bit in a `Gather`'s masks: its conditions' loops,
    row-major."""
    bit, stride = lin(0), 1
    for lp in reversed(g.cond_loops):
        bit = bit + lin(lp.var) * stride
        stride *= lp.extent
    return bit


def _gather_texts(side: str, g: Gather) -> dict:
    """What a `Gather` side's indices and conditions print as (`cuda_text.index_texts`):
    each index its tile part plus its table column (`fg_row`, the step's row), each
    conjunction the thread's bit for the step's window position."""
    owns = _owns(g)
    texts: dict = {}
    for expr, (own, col) in g.index.items():
        h = f"{side}_fg_h{owns.index(own)}"
        texts[expr] = h if col is None else f"({h} + fg_row[{col}])"
    bit = f" >> fg_row[{len(g.columns)}]" if g.cond_loops else ""  # (else one bit: 0)
    for j, v in enumerate(g.conds):
        texts[v] = f"((int)({side}_fg_m{j}{bit}) & 1)"
    return texts


class TiledContraction:
    """The tile loop, staging and fp32 SIMT steps of a contraction; a mixin of the CUDA
    renderer (`cuda._Renderer`), whose `line`, `block`, `index_vars` and `stmt` print, and
    whose `shared` declarations, `shared_bytes` and `dynamic_bytes` it adds to. The tensor
    core paths' steps come from `MmaSteps` and `WgmmaPipeline`, mixed into the same class."""

    def tiled(self, c: Contraction) -> None:
        """A contraction through shared memory: see `pipeline/gpu.py`'s `Contraction`.

        Each side's values for `kc` reduction steps go to `<side>_<value>[buffer][kk][at]`
        (two buffers: the next step's copy is issued before this step's arithmetic), rows
        padded by `PAD` (16-byte aligned, and a transposed store spreads over the banks).
        16-bit tensor-core sides: up to `HALF_STAGES` buffers (`stage_count`), rows unpadded
        but swizzled (`staged`), and a side contiguous along the reduction goes to
        `<side>_<value>[buffer][at][kk]` instead (`Contraction.k_inner`)."""
        self.stage_buffers(c)
        self.plan_wgmma(c)
        if c.mma == "tf32":
            self.wmma_out_buffer()
        self.gathers = {}
        if not self.wgmma and not self.dynamic_bytes:  # (tables in static shared memory)
            for side in "ab":
                room = STATIC_SHARED - self.shared_bytes
                plan = gather_plan(c, side, self.narrow(c, side), room)
                if plan is not None:
                    self.gathers[side] = plan
                    self.shared_bytes += c.red.length * plan.width * 4
        vectors = [s for s, v in ((c.a_stmts, c.a_vector), (c.b_stmts, c.b_vector)) if v]
        if vectors:  # 16-byte copies need 16-byte aligned buffers, known only now
            names = dict.fromkeys(s[0].param.name for s in vectors)
            self.line(1, f"const bool fg_vec = {' && '.join(f'fg_aligned16({n})' for n in names)};")
        ta, tb = TILE_THREADS * c.ra, TILE_THREADS * c.rb
        self.line(1, "const int tid = threadIdx.y * blockDim.x + threadIdx.x;")
        self.gather_tables(c)
        if self.tensor_maps:  # the block's steps so far, every tile's: the barriers' phases
            self.line(0, "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")
            self.line(1, "unsigned fg_t0 = 0;")
            self.line(0, "#endif")
        if c.split > 1:  # z walks the batches' chunks: this block's steps are its chunk's
            self.line(1, f"for (long long fg_z = blockIdx.z; fg_z < {c.nc * c.split}LL; "
                         "fg_z += gridDim.z) {")  # fmt: skip
            self.line(1, f"const long long ic = fg_z / {c.split}LL, fg_part = fg_z % {c.split}LL;")
            self.line(1, f"const long long fg_k0 = fg_part * {c.chunk}LL;")
            left = f"{c.red.length}LL - fg_k0"
            self.line(1, f"const long long fg_kn = {left} < {c.chunk}LL ? {left} : {c.chunk}LL;")
        else:
            self.line(1, f"for (long long ic = blockIdx.z; ic < {c.nc}LL; ic += gridDim.z)")
        self.line(1, f"for (long long tile_a = blockIdx.y * {ta}LL; tile_a < {c.na}LL; "
                     f"tile_a += (long long)gridDim.y * {ta}) {{")  # fmt: skip
        self.line(2, f"for (long long tile_b = blockIdx.x * {tb}LL; tile_b < {c.nb}LL; "
                     f"tile_b += (long long)gridDim.x * {tb}) {{")  # fmt: skip
        if self.wgmma:  # Hopper's warpgroup tensor cores where compiled for sm_90a
            self.line(0, "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")
            self.wgmma_pipeline(c)
            self.line(0, "#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800")
        elif c.mma:  # tensor cores on sm_80+ (and in the emulator), the fp32 path elsewhere
            self.line(0, "#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800")
        if c.mma:
            self.pipeline(c, mma=True)
            self.line(0, "#else")
        self.pipeline(c, mma=False)
        if c.mma:
            self.line(0, "#endif")
        self.line(2, "}")
        self.line(1, "}")
        if c.split > 1:
            self.line(1, "}")

    def split_sums(self, c: Contraction) -> None:
        """A split reduction's second launch: each thread sums an output's partials in the
        chunks' order (`output` stored them), then runs its epilogue."""
        n = c.nc * c.na * c.nb
        dt = reg_type(c.red.init.dtype)
        self.line(1, "for (long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                     f"gid < {n}LL; gid += (long long)gridDim.x * blockDim.x) {{")  # fmt: skip
        self.line(2, f"const long long ic = gid / {c.na * c.nb}LL, "
                     f"ia = gid / {c.nb}LL % {c.na}LL, ib = gid % {c.nb}LL;")  # fmt: skip
        self.line(2, f"{dt.cuda} fg_sum = {PARTIAL}[gid];")
        self.line(2, f"for (int p = 1; p < {c.split}; ++p) fg_sum += {PARTIAL}[p * {n}LL + gid];")
        self.output(c, "fg_sum", 2)
        self.line(1, "}")

    def stage_buffers(self, c: Contraction) -> None:
        """Declare each side's staged buffers: `__shared__` arrays, or past 48 KiB views
        carved from dynamic shared memory (the launch asks for it; the driver is told the
        kernel may use that much), each view 128-byte aligned."""
        half, stages = staged_half(c), stage_count(c, self.shared_limit)
        dynamic = stages * stage_bytes(c) > STATIC_SHARED
        if dynamic:
            self.shared.append("  FG_DYNAMIC_SHARED(fg_dynamic);")
        for side, exports in (("a", c.a_exports), ("b", c.b_exports)):
            rows, cols = staged_shapes(c)[side]
            for name, t in exports:
                t_smem, pad = (mem_type(t), 0) if half else (t.cuda, PAD)
                size = t.itemsize if half else reg_type(t).itemsize
                shape = f"[{stages}][{rows}][{cols + pad}]"
                if dynamic:
                    self.shared.append(
                        f"  auto& {side}_{name} = *reinterpret_cast<{t_smem} (*){shape}>"
                        f"(fg_dynamic + {self.dynamic_bytes});"
                    )
                    self.dynamic_bytes += -(-stages * rows * (cols + pad) * size // 128) * 128
                    continue
                self.shared.append(f"  __shared__ __align__(32) {t_smem} {side}_{name}{shape};")
                self.shared_bytes += stages * rows * (cols + pad) * size

    def pipeline(self, c: Contraction, mma: bool) -> None:
        """One output tile: stage step 0, then per step stage the next into the other buffer,
        wait for this one (`fg_copy_wait`: the asynchronous copies), accumulate, store; a
        16-bit contraction keeps more steps in flight (`stages_ahead`). `mma`: on tensor
        cores (else the fp32 path, which a 16-bit contraction takes below sm_80)."""
        red, kc = c.red, c.kc
        half = staged_half(c)
        d = 3
        if mma and half:
            fa, fb = self.mma16_accumulators(c, d)
        elif mma:
            fa, fb = self.wmma_accumulators(c, d)
        else:
            self.simt_accumulators(c, d)
        self.gather_tile(c, d)
        length = "fg_kn" if c.split > 1 else f"{red.length}LL"  # (this block's chunk)
        self.line(d, f"const int fg_steps = (int)(({length} + {kc - 1}) / {kc});")
        ahead = half or c.simt_async  # else two buffers, two barriers a step
        prefetch = PREFETCH and not mma and not ahead
        if ahead:
            stages = stage_count(c, self.shared_limit)
            self.stages_ahead(c, d, stages, stages - 1, self.stage)
        elif prefetch:
            self.stage(c, "0", "0LL", d)
            self.line(d, "__syncthreads();  // step 0 is everyone's")
            self.line(d, "for (int kt = 0; kt < fg_steps; ++kt) {")
            self.line(d + 1, "const int fg_buf = kt & 1;")
            self.prefetch_registers(c, d + 1)
            self.line(d + 1, "if (kt + 1 < fg_steps) {  // the next step's values, in flight")
            self.stage(c, "fg_buf ^ 1", f"(long long)(kt + 1) * {kc}", d + 2, phase="load")
            self.line(d + 1, "}")
        else:
            self.stage(c, "0", "0LL", d)
            self.line(d, "fg_copy_commit();")
            self.line(d, "for (int kt = 0; kt < fg_steps; ++kt) {")
            self.line(d + 1, "const int fg_buf = kt & 1;")
            self.line(d + 1, "if (kt + 1 < fg_steps) {")
            self.stage(c, "fg_buf ^ 1", f"(long long)(kt + 1) * {kc}", d + 2)
            self.line(d + 1, "}")
            self.line(d + 1, "fg_copy_commit();  // empty on the last step: one group per step")
            self.line(d + 1, "fg_copy_wait<1>();  // all but the newest group: this step's tiles")
            self.line(d + 1, "__syncthreads();")
        if mma and half:
            self.mma16_step(c, fa, fb, d + 1)
        elif mma:
            self.wmma_step(c, fa, fb, d + 1)
        else:
            self.simt_step(c, d + 1)
        if prefetch:
            self.line(d + 1, "if (kt + 1 < fg_steps) {")
            self.stage(c, "fg_buf ^ 1", f"(long long)(kt + 1) * {kc}", d + 2, phase="store")
            self.line(d + 1, "}")
            self.line(d + 1, "__syncthreads();  // this step read, the next one stored")
        elif not ahead:
            self.line(d + 1, "__syncthreads();  // read before the step after next overwrites it")
        self.line(d, "}")
        if ahead:  # the block's next tile (a grid-stride loop) stages its first steps
            self.line(d, "__syncthreads();  // once every warp is done with the last")
        if mma and half:
            self.mma16_epilogue(c, fa, fb, d)
        elif mma:
            self.wmma_epilogue(c, fa, fb, d)
        else:
            self.simt_epilogue(c, d)

    def stages_ahead(self, c: Contraction, d: int, stages: int, ahead: int, stage,
                     fence: bool = False) -> None:  # fmt: skip
        """The head of a 16-bit contraction's loop over its steps in `stages` buffers, the
        copies `ahead` steps ahead (`stage(c, buffer, first step, depth)` prints a step's):
        steps 0..ahead-1 are staged before it, one copy group each (`fg_copy_commit`, empty
        past the last step); at step kt, once group kt is complete (`fg_copy_wait`: all but
        the newest ahead - 1; `fence`: then made visible to the tensor cores' async proxy)
        and the block has passed the barrier, step kt + ahead is staged into the buffer step
        kt + ahead - stages was read from (every thread is done with it: one barrier per
        step), then step kt, in buffer `fg_buf`, is computed (the body the caller prints)."""
        kc = c.kc
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int s = 0; s < {ahead}; ++s) {{")
        self.line(d + 1, "if (s < fg_steps) {")
        stage(c, "s", f"(long long)s * {kc}", d + 2)
        self.line(d + 1, "}")
        self.line(d + 1, "fg_copy_commit();")
        self.line(d, "}")
        self.line(d, "for (int kt = 0; kt < fg_steps; ++kt) {")
        self.line(d + 1, f"const int fg_buf = kt % {stages};")
        self.line(d + 1, f"fg_copy_wait<{ahead - 1}>();  // all but the newest: step kt's group")
        if fence:
            self.line(d + 1, "fg_fence_async_shared();  // ... seen by the tensor cores")
        self.line(d + 1, "__syncthreads();  // its copies are everyone's; "
                         f"step kt - {stages - ahead} is read")  # fmt: skip
        self.line(d + 1, f"if (kt + {ahead} < fg_steps) {{")
        stage(c, f"(kt + {ahead}) % {stages}", f"(long long)(kt + {ahead}) * {kc}", d + 2)
        self.line(d + 1, "}")
        self.line(d + 1, "fg_copy_commit();  // empty near the end: one group per step")

    def output(self, c: Contraction, value: str, d: int) -> None:
        """The epilogue of output (ia, ib) of batch ic, its reduction's result `value`; a
        split reduction's first launch stores `value`, its chunk's sum, instead, for
        `split_sums` to add up (partials [chunk][ic][ia][ib])."""
        if self.part == "partials":
            at = f"((fg_part * {c.nc}LL + ic) * {c.na}LL + ia) * {c.nb}LL + ib"
            self.line(d, f"{PARTIAL}[{at}] = {value};")
            return
        self.index_vars(c.a_loops, "ia", d)
        self.index_vars(c.b_loops, "ib", d)
        self.index_vars(c.c_loops, "ic", d)
        dt = c.red.init.dtype
        self.line(d, f"{dt.cuda} {c.red.init.acc} = {value};")
        self.block(c.prefix + c.epilogue, d)

    def stage(self, c: Contraction, buf: str, k0: str, d: int, wgmma: bool = False,
              phase: str | None = None) -> None:  # fmt: skip
        """Copy the `kc` reduction steps from `k0` of both sides into buffer `buf`; values
        outside the outputs or the reduction are 0 (the tensor cores sum whole steps).
        A side that is one plain load of 16-byte aligned buffers moves 16 bytes at a time
        (`stage_vector`), else, and where its buffers are not aligned, one value at a time
        (`stage_values`). `wgmma`: into the wgmma pipeline's buffers (`wgmma_cell`).
        `phase` (`PREFETCH`: value by value only): "load" the values into the thread's
        registers (`prefetch_registers`), "store" those into the buffer."""
        if phase is not None:
            assert not (c.a_vector or c.b_vector or wgmma), "a prefetch stages value by value"
            for side, exports in (("a", c.a_exports), ("b", c.b_exports)):
                if exports:
                    self.prefetch_values(c, side, buf, k0, phase, d)
            return
        red = c.red
        cell_of = self.wgmma_cell if wgmma else self.staged
        self.line(d, "{")
        start = "fg_k0 + " if c.split > 1 else ""  # (a split reduction: from its chunk's first)
        self.line(d + 1, f"const long long k0 = {start}{k0};")
        for side, exports, vector, extent in (
            ("a", c.a_exports, c.a_vector, c.na),
            ("b", c.b_exports, c.b_vector, c.nb),
        ):
            if not exports:
                continue
            inside = f"i{side} < {extent}LL && red < {red.length}LL"
            narrow = self.narrow(c, side)
            if vector:
                self.stage_vector(c, side, buf, inside, narrow, cell_of, d + 1)
                self.line(d + 1, "} else {  // a buffer is not 16-byte aligned: one at a time")
            self.stage_values(c, side, buf, inside, narrow, cell_of, d + 2 if vector else d + 1)
            if vector:
                self.line(d + 1, "}")
        self.line(d, "}")

    def narrow(self, c: Contraction, side: str) -> bool:
        """Whether `side`'s indices split, and its loads index, in 32 bits: its outputs, the
        reduction, the batch and every buffer it reads are below `NARROW_LIMIT`."""
        extent, stmts = (c.na, c.a_stmts) if side == "a" else (c.nb, c.b_stmts)
        sizes = [extent, c.red.length, c.nc]
        sizes += [s.param.size for s in c.consts + stmts if isinstance(s, Load)]
        return max(sizes) < NARROW_LIMIT

    def gather_tables(self, c: Contraction) -> None:
        """Fill each `Gather` side's table once a block: a row per reduction step, its
        reduction parts and the number of its conditions' bit."""
        red, threads = c.red, TILE_THREADS * TILE_THREADS
        for side, g in self.gathers.items():
            table = f"{side}_fg_tab"
            self.shared.append(f"  __shared__ __align__(16) int {table}[{red.length}][{g.width}];")
            self.line(1, f"for (int fg_r = tid; fg_r < {red.length}; fg_r += {threads}) {{")
            self.index_vars(red.loops, "fg_r", 2, narrow=True)
            with narrow_indices(True):
                for j, part in enumerate(g.columns):
                    self.line(2, f"{table}[fg_r][{j}] = {index(part)};")
                if g.cond_loops:
                    self.line(2, f"{table}[fg_r][{len(g.columns)}] = {index(_bit(g))};")
            self.line(1, "}")
        if self.gathers:
            self.line(1, "__syncthreads();  // the tables are everyone's")

    def gather_tile(self, c: Contraction, d: int) -> None:
        """Once a tile, each `Gather` side's parts along its own loops for the thread's tile
        position (`<side>_fg_h<i>`) and its conditions' bits (`<side>_fg_m<j>`)."""
        for side, g in self.gathers.items():
            loops = c.a_loops if side == "a" else c.b_loops
            width = TILE_THREADS * (c.ra if side == "a" else c.rb)
            mask = "unsigned long long" if g.bits > 32 else "unsigned"
            owns = _owns(g)
            for i in range(len(owns)):
                self.line(d, f"int {side}_fg_h{i};")
            for j in range(len(g.conds)):
                self.line(d, f"{mask} {side}_fg_m{j} = 0;")
            self.line(d, "{")
            self.line(d + 1, f"const long long fg_i = tile_{side} + tid % {width};")
            self.index_vars(loops, "fg_i", d + 1, narrow=True)
            self.index_vars(c.c_loops, "ic", d + 1, narrow=True)
            with narrow_indices(True):
                for i, own in enumerate(owns):
                    self.line(d + 1, f"{side}_fg_h{i} = {index(own)};")
                if g.conds:
                    self.line(d + 1, f"for (int fg_q = 0; fg_q < {g.bits}; ++fg_q) {{")
                    self.index_vars(g.cond_loops, "fg_q", d + 2, narrow=True)
                    for j, v in enumerate(g.conds):
                        self.line(d + 2, f"{side}_fg_m{j} |= ({mask})({valid(v)}) << fg_q;")
                    self.line(d + 1, "}")
            self.line(d, "}")

    def stage_vector(self, c: Contraction, side: str, buf: str, inside: str, narrow: bool,
                     cell_of, e: int) -> None:  # fmt: skip
        """`stage`'s 16-byte copies of a side that is one plain load, where `fg_vec` (its
        buffers are 16-byte aligned): along the side's outputs ("m") straight into shared
        memory, along the reduction 4 steps of one row (into a `k_inner` row as they are,
        else stored transposed). Leaves the `if (fg_vec)` open for the fallback."""
        kc, threads = c.kc, TILE_THREADS * TILE_THREADS
        loops, (load,) = (c.a_loops, c.a_stmts) if side == "a" else (c.b_loops, c.b_stmts)
        (name, _) = (c.a_exports if side == "a" else c.b_exports)[0]
        vector = c.a_vector if side == "a" else c.b_vector
        width = TILE_THREADS * (c.ra if side == "a" else c.rb)
        at_m, at_k = loops[0].var.name, c.red.loops[0].var.name
        with narrow_indices(narrow):
            ref = f"{load.param.name}[{index(load.index)}]"
        ity, lit = ("int", "") if narrow else ("long long", "LL")
        out = f"{side}_{name}[{buf}]"
        lanes = c.lanes
        self.line(e, "if (fg_vec) {")
        if vector == "m":  # contiguous along the side: straight into shared memory
            q = width // lanes
            self.line(e + 1, f"for (int e = tid; e < {kc * q}; e += {threads}) {{")
            self.line(e + 2, f"const int kk = e / {q}, at = e % {q} * {lanes};")
        else:  # contiguous along the reduction: 4 steps of one row, stored transposed
            q = kc // lanes
            self.line(e + 1, f"for (int e = tid; e < {q * width}; e += {threads}) {{")
            self.line(e + 2, f"const int kk = e % {q} * {lanes}, at = e / {q};")
        self.line(e + 2, f"const long long i{side} = tile_{side} + at, red = k0 + kk;")
        self.line(e + 2, f"const bool fg_in = {inside};")
        # outside, the address of element 0 (never read): no pointer leaves the buffer
        self.line(e + 2, f"const {ity} {at_m} = fg_in ? ({ity})i{side} : 0{lit}, "
                         f"{at_k} = fg_in ? ({ity})red : 0{lit};")  # fmt: skip
        self.index_vars(c.c_loops, "ic", e + 2, narrow)
        if vector == "m" or c.k_inner(side):  # 16 bytes along a row of the staging
            cell = cell_of(c, side, name, buf, "kk", "at")
            self.line(e + 2, f"fg_copy16_async(&{cell}, &{ref}, fg_in);")
        else:
            self.line(e + 2, "float4 fg_v = {0.0f, 0.0f, 0.0f, 0.0f};")
            self.line(e + 2, f"if (fg_in) fg_v = __ldg((const float4*)&{ref});")
            for lane in range(VECTOR):
                self.line(e + 2, f"{out}[kk + {lane}][at] = fg_v.{'xyzw'[lane]};")
        self.line(e + 1, "}")

    def stage_values(self, c: Contraction, side: str, buf: str, inside: str, narrow: bool,
                     cell_of, e: int) -> None:  # fmt: skip
        """`stage`'s copies of a side one value at a time: its statements (the side's
        prologue) computed per staged value, 0 outside the outputs and the reduction."""
        kc, threads = c.kc, TILE_THREADS * TILE_THREADS
        a = side == "a"
        exports = c.a_exports if a else c.b_exports
        kk_fastest, vector = (c.a_kk_fastest, c.a_vector) if a else (c.b_kk_fastest, c.b_vector)
        width = TILE_THREADS * (c.ra if a else c.rb)
        # each thread keeps one step (or one tile position) for every copy of a stage:
        # what depends on it alone is computed once a stage (or once a tile). Not in a
        # vector side's fallback for unaligned buffers, where the registers it holds
        # are better left to the main path.
        if kk_fastest and threads % kc == 0 and not vector:
            self.line(e, f"for (int at = tid / {kc}, kk = tid % {kc}; at < {width}; "
                         f"at += {threads // kc}) {{")  # fmt: skip
        elif keeps_position(c, side):
            self.line(e, f"for (int kk = tid / {width}, at = tid % {width}; kk < {kc}; "
                         f"kk += {threads // width}) {{")  # fmt: skip
        else:
            kk, at = (f"e % {kc}", f"e / {kc}") if kk_fastest else (f"e / {width}", f"e % {width}")
            self.line(e, f"for (int e = tid; e < {kc * width}; e += {threads}) {{")
            self.line(e + 1, f"const int kk = {kk}, at = {at};")
        self.line(e + 1, f"const long long i{side} = tile_{side} + at, red = k0 + kk;")
        self.line(e + 1, f"if ({inside}) {{")
        self.staged_value(c, side, narrow, e + 2)
        half = staged_half(c)  # exact: the value is a 16-bit number (`gpu._mma_kind`)
        for name, t in exports:
            value = narrowed(name, t) if half else name
            self.line(e + 2, f"{cell_of(c, side, name, buf, 'kk', 'at')} = {value};")
        self.line(e + 1, "} else {")
        for name, t in exports:
            zero = narrowed("0.0f", t) if half else f"({t.cuda})0"
            self.line(e + 2, f"{cell_of(c, side, name, buf, 'kk', 'at')} = {zero};")
        self.line(e + 1, "}")
        self.line(e, "}")

    def prefetch_shape(self, c: Contraction, side: str) -> tuple[int, str, str, str]:
        """(copies a thread makes of `side` a stage, its q-th copy's step `kk`, tile
        position `at`, and the condition that the copy is one), walking the stage as
        `stage_values` does."""
        threads, kc = TILE_THREADS * TILE_THREADS, c.kc
        a = side == "a"
        width = TILE_THREADS * (c.ra if a else c.rb)
        kk_fastest = c.a_kk_fastest if a else c.b_kk_fastest
        # a thread's step fixed and its positions walked, or its position fixed and its steps
        walked = {"at": (kc, width)} if kk_fastest and threads % kc == 0 else {}
        if not walked and keeps_position(c, side):
            walked = {"kk": (width, kc)}
        for axis, (fixed, extent) in walked.items():
            step = threads // fixed
            walk = f"tid / {fixed} + q * {step}"
            copy = "true" if extent % step == 0 else f"{walk} < {extent}"
            kk, at = (f"tid % {kc}", walk) if axis == "at" else (walk, f"tid % {width}")
            return -(-extent // step), kk, at, copy
        e, n = f"(tid + q * {threads})", kc * width
        kk, at = (f"{e} % {kc}", f"{e} / {kc}")
        if not kk_fastest:
            kk, at = f"{e} / {width}", f"{e} % {width}"
        return -(-n // threads), kk, at, ("true" if n % threads == 0 else f"{e} < {n}")

    def prefetch_registers(self, c: Contraction, d: int) -> None:
        """Declare the registers a thread loads a step's values into (`PREFETCH`)."""
        for side, exports in (("a", c.a_exports), ("b", c.b_exports)):
            count = self.prefetch_shape(c, side)[0]
            for name, t in exports:
                self.line(d, f"{t.cuda} fg_next_{side}_{name}[{count}];")

    def prefetch_values(self, c: Contraction, side: str, buf: str, k0: str, phase: str,
                        d: int) -> None:  # fmt: skip
        """`stage_values`' copies of `side` for steps from `k0`, in two phases (`PREFETCH`):
        "load" computes each into its register (0 outside the outputs and the reduction),
        "store" writes those to buffer `buf`."""
        red = c.red
        a = side == "a"
        exports = c.a_exports if a else c.b_exports
        extent = c.na if a else c.nb
        count, kk, at, copy = self.prefetch_shape(c, side)
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int q = 0; q < {count}; ++q) {{")
        self.line(d + 1, f"const int kk = {kk}, at = {at};")
        if copy != "true":
            self.line(d + 1, f"if ({copy}) {{")
        e = d + 2 if copy != "true" else d + 1
        if phase == "store":
            for name, _ in exports:
                cell = self.staged(c, side, name, buf, "kk", "at")
                self.line(e, f"{cell} = fg_next_{side}_{name}[q];")
        else:
            narrow = self.narrow(c, side)
            start = "fg_k0 + " if c.split > 1 else ""
            self.line(e, f"const long long i{side} = tile_{side} + at, red = {start}{k0} + kk;")
            self.line(e, f"if (i{side} < {extent}LL && red < {red.length}LL) {{")
            self.staged_value(c, side, narrow, e + 1)
            for name, _ in exports:
                self.line(e + 1, f"fg_next_{side}_{name}[q] = {name};")
            self.line(e, "} else {")
            for name, t in exports:
                self.line(e + 1, f"fg_next_{side}_{name}[q] = ({t.cuda})0;")
            self.line(e, "}")
        if copy != "true":
            self.line(d + 1, "}")
        self.line(d, "}")

    def staged_value(self, c: Contraction, side: str, narrow: bool, d: int) -> None:
        """The statements that compute a staged value of `side` (its exports) at output `i<side>`
        and step `red`: a `Gather` side's indices and bounds from the tile's parts and its
        table's row, any other's from the flat indices split into loop variables."""
        loops, stmts = (c.a_loops, c.a_stmts) if side == "a" else (c.b_loops, c.b_stmts)
        gather = self.gathers.get(side)
        if gather is not None:
            self.line(d, f"const int* fg_row = {side}_fg_tab[(int)red];")
            with narrow_indices(True), index_texts(_gather_texts(side, gather)):
                self.block(c.consts + stmts, d)
            return
        self.index_vars(loops, f"i{side}", d, narrow)
        self.index_vars(c.c_loops, "ic", d, narrow)
        self.index_vars(c.red.loops, "red", d, narrow)
        with narrow_indices(narrow):
            self.block(c.consts + stmts, d)

    def staged(self, c: Contraction, side: str, name: str, buf: str, kk: str, at: str) -> str:
        """The shared-memory cell of value `name` of `side` at reduction step `kk` and tile
        position `at`, as the side is laid out (`Contraction.k_inner`); 16-bit values
        sit in their row's 16-byte chunks swizzled (`fg_swizzle`)."""
        row, col = (at, kk) if c.k_inner(side) else (kk, at)
        if staged_half(c):
            chunks = staged_shapes(c)[side][1] // 8
            col = f"fg_swizzle<{chunks}>({row}, {col})"
        return f"{side}_{name}[{buf}][{row}][{col}]"

    def simt_accumulators(self, c: Contraction, d: int) -> None:
        """The thread's ra x rb register tile of accumulators, each the reduction's init."""
        red, acc = c.red, c.red.init.acc
        init = literal(red.init.value, red.init.dtype)
        self.line(d, f"{red.init.dtype.cuda} {acc}_tile[{c.ra}][{c.rb}];")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {c.ra}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {c.rb}; ++j) "
                     f"{acc}_tile[i][j] = {init};")  # fmt: skip

    def simt_step(self, c: Contraction, d: int) -> None:
        """Every thread adds this step's terms into its ra x rb register tile (rows and
        columns `simt_at`: a row's 4 neighbours are one 16-byte shared read, and
        neighbouring threads read neighbouring words): per reduction step, its rows' and
        columns' staged values into registers, then the ra x rb terms. The steps are
        unrolled where the step is whole (every step when kc divides the reduction)."""
        red, kc = c.red, c.kc
        whole = red.length % kc == 0
        if not whole:
            length = "fg_kn" if c.split > 1 else f"{red.length}LL"  # (this block's chunk)
            self.line(d, f"const long long fg_left = {length} - (long long)kt * {kc};")
            self.line(d, f"if (fg_left >= {kc}) {{")
            self.simt_steps(c, str(kc), d + 1)
            self.line(d, "} else {")
            self.simt_steps(c, "(int)fg_left", d + 1)
            self.line(d, "}")
            return
        self.simt_steps(c, str(kc), d)

    def simt_steps(self, c: Contraction, steps: str, d: int) -> None:
        """`simt_step`'s loop over `steps` reduction steps (unrolled when a number)."""
        red = c.red
        acc = red.init.acc
        if steps.isdigit():
            self.line(d, "#pragma unroll")
        self.line(d, f"for (int kk = 0; kk < {steps}; ++kk) {{")
        for side, exports, r, var, thread in (
            ("a", c.a_exports, c.ra, "i", "threadIdx.y"),
            ("b", c.b_exports, c.rb, "j", "threadIdx.x"),
        ):
            for name, t in exports:
                ref = self.staged(c, side, name, "fg_buf", "kk", simt_at(r, thread, var))
                ref = widened(ref, t) if staged_half(c) else ref
                regs = f"fg_{side}_{name}"
                self.line(d + 1, f"{t.cuda} {regs}[{r}];")
                self.line(d + 1, f"#pragma unroll\n{'  ' * (d + 1)}for (int {var} = 0; "
                                 f"{var} < {r}; ++{var}) {regs}[{var}] = {ref};")  # fmt: skip
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int i = 0; i < {c.ra}; ++i) {{")
        self.line(d + 2, "#pragma unroll")
        self.line(d + 2, f"for (int j = 0; j < {c.rb}; ++j) {{")
        for side, exports, var in (("a", c.a_exports, "i"), ("b", c.b_exports, "j")):
            for name, t in exports:
                self.line(d + 3, f"const {t.cuda} {name} = fg_{side}_{name}[{var}];")
        self.block(c.consts + c.terms, d + 3)
        value = next(s for s in red.body if isinstance(s, AccUpdate) and s.acc == acc)
        self.line(d + 3, self.stmt(AccUpdate(f"{acc}_tile[i][j]", red.init.dtype, red.op,
                                             value.value)))  # fmt: skip
        self.line(d + 2, "}")
        self.line(d + 1, "}")
        self.line(d, "}")

    def simt_epilogue(self, c: Contraction, d: int) -> None:
        """Each thread runs the epilogue of the outputs of its register tile."""
        acc = c.red.init.acc
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {c.ra}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {c.rb}; ++j) {{")
        self.line(d + 1, f"const long long ia = tile_a + {simt_at(c.ra, 'threadIdx.y', 'i')};")
        self.line(d + 1, f"const long long ib = tile_b + {simt_at(c.rb, 'threadIdx.x', 'j')};")
        self.line(d + 1, f"if (ia < {c.na}LL && ib < {c.nb}LL) {{")
        self.output(c, f"{acc}_tile[i][j]", d + 2)
        self.line(d + 1, "}")
        self.line(d, "}")
