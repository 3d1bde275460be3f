"""GPU lowering: how a loop-IR kernel maps onto a CUDA grid. The renderer only prints this.

A kernel's output loops (its parallel loop and the serial loops nested
directly inside it) flatten into one output index `gid`. Then one of four
mappings:

- **thread**: one GPU thread per output iteration, in a grid-stride loop;
  everything inside (a short reduction, a CPU register tile, a scatter's rows)
  runs serially in that thread. Elementwise kernels, gathers and scatters,
  short reductions into many outputs.

- **block**: one block per output (grid-stride over outputs), the block's
  threads splitting every reduction of that output. Each thread accumulates
  a strided share of the (flattened) reduction loops, then the block combines
  the partials with warp shuffles and a 32-slot shared array, and every thread
  holds the result; thread 0 stores. The epilogue after the reduction (a
  softmax's division, a mean's scale) is fused as on the CPU.

  A very long reduction into few outputs (a full `sum` of 2^24 elements)
  splits each output's reduction over `split` blocks: pass 1 writes one
  partial per block into a scratch buffer, pass 2 (one block per output)
  combines the partials and runs the epilogue.

- **warp**: one warp per output, several outputs per block, for many short
  reductions (rows of at most `WARP_ROW_MAX`): the warp's lanes split the
  reduction and combine it with `__shfl_xor_sync` alone (no shared memory, no
  barrier); lane 0 stores.

- **tile**: a contraction (matmul, convolution) through shared memory; see
  `Contraction`. Taken from the plain loop nest (`lower(item, tile=False)`). A sum of
  too few output tiles to fill the GPU splits its reduction into chunks, each a
  block's partial tile, summed in order by a second launch (`Contraction.split`).

    >>> import numpy as np
    >>> import fusegrad as fg
    >>> from fusegrad.pipeline.gpu import map_to_gpu
    >>> from fusegrad.pipeline.lower import lower
    >>> from fusegrad.pipeline.schedule import schedule
    >>> total = fg.from_numpy(np.ones(2**20, np.float32)).sum()
    >>> (item,) = schedule([total.node], lambda n: n.op.name == "BUFFER")
    >>> gpu = map_to_gpu(lower(item, tile=False))  # the GPU's loop nest
    >>> gpu.mode, gpu.block, gpu.split, gpu.grid
    ('block', 256, 64, 64)

Contiguous streams are read and written 16 bytes at a time (`VECTOR` lanes of a
4-byte type: `ld.global.nc.v4`): an elementwise kernel's innermost output loop,
or a reduction's innermost loop, runs in groups of `VECTOR` consecutive
iterations when its extent is a multiple of `VECTOR`, and every load (store)
whose index steps by 1 along it and starts each group at a multiple of
`VECTOR` elements becomes one vector access (`vector_accesses`). The renderer
takes that path only when the buffers' addresses are 16-byte aligned, and the
scalar loop otherwise.

`traffic(gpu)` counts each kernel's global-memory bytes (each distinct index
expression's elements once: a value re-read through the same expression is a
cache hit, a second pass over a row is not) and the minimum a kernel could
move (its inputs read once, its outputs written once).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from ..ir.dtypes import DType
from ..ir.ops import Ops
from ..ir.symbolic import Var, lin
from .loopir import (
    AccInit,
    AccOnlineExp,
    AccUpdate,
    Alu,
    Const,
    Kernel,
    Load,
    LoadRow,
    Loop,
    Position,
    Rand,
    ScatterAdd,
    Select,
    Store,
)

MAX_BLOCK = 256  # threads per block
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535
MAX_GRID = 1024  # blocks of a grid-stride launch: about 8 per SM of an 132-SM H100
WARP = 32
BLOCK_REDUCE_MIN = 32  # a reduction this long gets a block of threads per output
FEW_OUTPUTS = 64  # ... and so does any reduction of fewer outputs than this
SPLIT_ITEMS = 64  # elements per thread beyond which a long reduction splits over blocks
SPLIT_MAX_OUTPUTS = 64  # only a reduction into at most this many outputs splits
WARP_ROW_MAX = 1024  # reductions at most this long, into many outputs, take a warp each
VECTOR = 4  # lanes of a 16-byte access of a 4-byte type
STATIC_SHARED = 48 * 1024  # the most a kernel's `__shared__` arrays may hold


@dataclass
class Reduction:
    """A reduce loop nest at the output level, split over the threads of a block.

    `loops` are its perfectly nested reduce loops, flattened into one index of
    `length` iterations; `body` is the innermost loop's statements."""

    init: AccInit
    op: object  # Ops.ADD or Ops.MAX: how two partials combine
    loops: list[Loop]
    body: list
    length: int
    vector: set[int] = field(default_factory=set)  # id() of its loads read VECTOR at a time
    # an online softmax's max and sum (`AccOnlineExp`, whose acc_sum is init's): the
    # partials combine as pairs
    online: AccOnlineExp | None = None


@dataclass
class GpuKernel:
    """A loop-IR kernel with its grid mapping decided.

    `outputs` are the flattened output loops (outermost first), `body` what runs
    per output iteration. For `mode == "block"`, `reductions` maps id() of each
    cooperative reduce loop in `body` to its `Reduction`; `split > 1` means two
    launches (pass 1 over `grid` = outputs * split blocks, pass 2 over `grid2`)."""

    kernel: Kernel
    outputs: list[Loop]
    body: list
    mode: str  # "thread", "block" or "tile"
    block: int
    grid: int
    reductions: dict[int, Reduction] = field(default_factory=dict)
    split: int = 1
    block2: int = 0
    grid2: int = 0
    contraction: Contraction | None = None
    vector: set[int] = field(default_factory=set)  # thread mode: id() of vector loads/stores
    # block and warp mode: id() of the output loops after a row kernel's statistics, which
    # the threads share (`_row_loops`), each with the id() of its vector loads and stores
    row_loops: dict[int, set[int]] = field(default_factory=dict)

    @property
    def rows_per_block(self) -> int:
        """Outputs a block computes at once: one per warp in warp mode, else one (block mode)
        or one per thread."""
        return self.block // WARP if self.mode == "warp" else 1

    @property
    def block_dims(self) -> tuple[int, int, int]:
        if self.contraction is not None:
            return (TILE_THREADS, TILE_THREADS, 1)
        return (self.block, 1, 1)

    @property
    def grid_dims(self) -> tuple[int, int, int]:
        c = self.contraction
        if c is not None:
            tiles_a, tiles_b = c.tiles
            z = min(c.nc * c.split, MAX_GRID_Y)  # (a split reduction's chunks along z too)
            return (min(tiles_b, MAX_GRID_X), min(tiles_a, MAX_GRID_Y), z)
        return (self.grid, 1, 1)

    @property
    def extent(self) -> int:
        """Output iterations: the product of the flattened output loops' extents."""
        return math.prod(loop.extent for loop in self.outputs)


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def _output_loops(body: list) -> tuple[list[Loop], list]:
    """The perfectly nested parallel/serial loops a kernel starts with, and what is inside."""
    loops = []
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind in ("parallel", "serial"):
        loops.append(body[0])
        body = body[0].body
    return loops, body


def _reduction(init: AccInit, loop: Loop) -> Reduction | None:
    """The cooperative form of a reduce loop nest right after its accumulator's init."""
    if init.size != 1:  # a register tile: its reduction stays in one thread
        return None
    loops, body = [loop], loop.body
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "reduce":
        loops.append(body[0])
        body = body[0].body
    length = math.prod(lp.extent for lp in loops)
    online = [s for s in body if isinstance(s, AccOnlineExp) and s.acc_sum == init.acc]
    if len(online) == 1:
        return Reduction(init, Ops.ADD, loops, body, length, online=online[0])
    updates = [s for s in body if isinstance(s, AccUpdate) and s.acc == init.acc]
    if len(updates) != 1 or updates[0].index is not None:
        return None
    if any(isinstance(s, (AccUpdate, AccOnlineExp)) and s is not updates[0] for s in body):
        return None  # sibling sums in one loop (the CPU's lowering): each thread runs it all
    return Reduction(init, updates[0].op, loops, body, length)


def _has(body: list, kind) -> bool:
    return any(isinstance(s, kind) or (isinstance(s, Loop) and _has(s.body, kind)) for s in body)


def _row_loops(body: list) -> dict[int, set[int]]:
    """The output loops of a row kernel (pipeline/schedule.py, rule 6): the loops over a row's
    elements that follow its statistics at the top of the per-output body, by id(), each
    with its vector accesses (`vector_accesses`). They hold no loop of their own, so the
    threads that computed the statistics together split their iterations (a softmax's row:
    max, sum, then each thread writes every 256th group of 4 elements instead of thread 0
    writing the whole row)."""
    return {
        id(s): vector_accesses(s.body, s) or set()
        for s in body
        if isinstance(s, Loop) and s.kind in ("parallel", "serial") and not _has(s.body, Loop)
    }


def map_to_gpu(kernel: Kernel, tf32: bool = False, shared_limit: int = STATIC_SHARED) -> GpuKernel:
    """Decide the grid mapping of `kernel` (see the module docstring). `tf32`: an fp32
    contraction that is a plain sum of products may run on tensor cores (`Contraction.mma`);
    `shared_limit`: the device's shared memory per block (a contraction's tile fits it)."""
    outputs, body = _output_loops(kernel.body)
    extent = math.prod(loop.extent for loop in outputs)
    reductions = {}
    for prev, s in zip([None, *body], body):
        if isinstance(s, Loop) and s.kind == "reduce" and isinstance(prev, AccInit):
            red = _reduction(prev, s)
            if red is not None:
                reductions[id(s)] = red
    longest = max((r.length for r in reductions.values()), default=0)
    scatter = _has(body, ScatterAdd)
    for red in reductions.values():
        red.vector = vector_accesses(red.body, red.loops[-1]) or set()
    # a thread's step covers VECTOR elements where every reduction reads vectors
    steps = longest // VECTOR if all(r.vector for r in reductions.values()) else longest
    block = min(MAX_BLOCK, _round_up(steps, WARP))
    gpu = GpuKernel(kernel, outputs, body, "block", block, min(extent, MAX_GRID), reductions)
    gpu.contraction = _contraction(gpu, tf32, shared_limit) if reductions and not scatter else None
    if gpu.contraction is not None:
        gpu.mode, gpu.block = "tile", TILE_THREADS * TILE_THREADS
        return gpu
    if not reductions or scatter or (longest < BLOCK_REDUCE_MIN and extent >= FEW_OUTPUTS):
        block = min(MAX_BLOCK, _round_up(extent, WARP))
        grid = min(MAX_GRID, -(-extent // block))
        gpu = GpuKernel(kernel, outputs, body, "thread", block, grid)
        if outputs and not _has(body, Loop) and not scatter:
            gpu.vector = vector_accesses(body, outputs[-1]) or set()
        return gpu
    gpu.row_loops = _row_loops(body)
    if longest <= WARP_ROW_MAX and extent >= FEW_OUTPUTS:
        gpu.mode, gpu.block = "warp", MAX_BLOCK
        gpu.grid = min(MAX_GRID, -(-extent // gpu.rows_per_block))
        return gpu
    split = -(-longest // (block * SPLIT_ITEMS))
    split = min(split, MAX_GRID // extent)
    paired = any(r.online for r in reductions.values())  # (pass 1 stores one partial)
    if len(reductions) == 1 and extent <= SPLIT_MAX_OUTPUTS and split > 1 and not paired:
        gpu.split = split
        gpu.grid = extent * gpu.split
        gpu.block2 = min(MAX_BLOCK, _round_up(gpu.split, WARP))
        gpu.grid2 = extent
    return gpu


VECTOR_TYPES = {"float32": "float4", "int32": "int4"}  # 16-byte CUDA vector types


def vector_type(dt: DType) -> str | None:
    """The CUDA type that moves `VECTOR` elements of `dt` in one 16-byte access, if any."""
    return VECTOR_TYPES.get(dt.name)


def _steps_by_one(index, var: Var, lanes: int = VECTOR) -> bool:
    """`index` moves by 1 per step of `var` and is a multiple of `lanes` wherever `var` is."""
    if index.coef(var) != 1 or index.const % lanes:
        return False
    for atom, coef in index.terms:
        if atom == var:
            continue
        if coef % lanes or (not isinstance(atom, Var) and var in atom.x.atoms()):
            return False
    return True


def vector_accesses(body: list, loop: Loop) -> set[int] | None:
    """id() of the loads and stores in `body` that can move VECTOR elements at once when
    `loop` (the innermost loop around `body`) runs VECTOR iterations per step; None when
    it cannot (its extent is not a multiple of VECTOR, or nothing would be vectorized).

    Within a group of VECTOR iterations only `loop.var` changes (by 1 each), so an
    index with coefficient 1 on it and every other part a multiple of VECTOR reads
    VECTOR consecutive, 16-byte-aligned elements (given an aligned buffer)."""
    if loop.extent % VECTOR:
        return None
    out = set()
    for s in body:
        if isinstance(s, Load) and not s.valid and vector_type(s.dtype) and not s.param.output:
            ok = s.param.dtype == s.dtype
        elif isinstance(s, Store) and not s.valid and vector_type(s.param.dtype):
            ok = True
        else:
            continue
        if ok and _steps_by_one(s.index, loop.var):
            out.add(id(s))
    return out or None


# ---------------------------------------------------------------- traffic
@dataclass(frozen=True)
class Traffic:
    """A GPU kernel's global-memory bytes and FLOPs, next to the least it could move."""

    bytes_read: int
    bytes_written: int
    flops: int
    min_bytes: int  # every input read once, every output written once

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def ratio(self) -> float:
        """Bytes moved over the minimum (1.0: each byte once)."""
        return self.bytes / self.min_bytes if self.min_bytes else 1.0

    def __str__(self) -> str:
        return (
            f"global memory: {self.bytes_read} bytes read, {self.bytes_written} written "
            f"({self.ratio:.2f}x the minimum {self.min_bytes}); {self.flops} FLOPs"
        )


def _reach(index, size: int) -> int:
    """Distinct elements `index` touches over its loop variables' ranges, at most `size`."""
    n = math.prod(v.max - v.min + 1 for v in index.atoms() if isinstance(v, Var))
    return min(size, n)


def traffic(gpu: GpuKernel) -> Traffic:
    """Count `gpu`'s global-memory traffic (see the module docstring).

    >>> import numpy as np, fusegrad as fg
    >>> from fusegrad.pipeline.lower import lower
    >>> from fusegrad.pipeline.schedule import schedule
    >>> x = fg.from_numpy(np.ones((8, 64), np.float32))
    >>> (item,) = schedule([x.sum(1).node], lambda n: n.op.name == "BUFFER")
    >>> print(traffic(map_to_gpu(lower(item, tile=False))))
    global memory: 2048 bytes read, 32 written (1.00x the minimum 2080); 512 FLOPs
    """
    reads: dict[str, set] = {}
    writes: dict[str, set] = {}
    sizes = {p.name: p for p in gpu.kernel.params}
    read = written = 0

    # a row kernel's passes over its row (its statistics' loops, then the loop over its
    # elements) read the same addresses through different loop variables: one expression
    row_vars: dict[Var, Var] = {}

    def walk(body: list, loops: int) -> None:
        nonlocal read, written
        for s in body:
            if isinstance(s, Loop):
                if id(s) in gpu.row_loops or id(s) in gpu.reductions:
                    row_vars[s.var] = Var("row", s.var.min, s.var.max)
                walk(s.body, loops * s.extent)
                continue
            if isinstance(s, Load):
                at = s.index.substitute({v: lin(r) for v, r in row_vars.items()})
                if at in reads.setdefault(s.param.name, set()):
                    continue
                reads[s.param.name].add(at)
                read += _reach(s.index, s.param.size) * s.param.dtype.itemsize
            if isinstance(s, LoadRow):
                read += min(s.param.size, loops) * s.param.dtype.itemsize
            elif isinstance(s, ScatterAdd):  # read, add, write back
                n = min(s.param.size, loops) * s.param.dtype.itemsize
                read, written = read + n, written + n
            elif isinstance(s, Store) and s.index not in writes.setdefault(s.param.name, set()):
                writes[s.param.name].add(s.index)
                written += _reach(s.index, s.param.size) * s.param.dtype.itemsize

    walk(gpu.kernel.body, 1)
    if gpu.split > 1:  # the partials: written by the first pass, read by the second
        red = next(iter(gpu.reductions.values()))
        n = gpu.grid * red.init.dtype.itemsize
        read, written = read + n, written + n
    c = gpu.contraction
    if c is not None and c.split > 1:  # a split reduction's partial tiles, likewise
        n = c.split * c.nc * c.na * c.nb * max(4, c.red.init.dtype.itemsize)  # (fp32 for 16 bits)
        read, written = read + n, written + n
    least = sum(p.size * p.dtype.itemsize for p in sizes.values())
    return Traffic(read, written, gpu.kernel.flops, least)


# ---------------------------------------------------------------- contractions
TILE_THREADS = 16  # a contraction's block is 16 x 16 threads (8 warps)
TILE_K = 16  # reduction steps staged in shared memory at a time (8 for the 128x128 tile)
SIMT_BIG_K = 16  # ... for the fp32 SIMT path's 128x128 tile
# an fp32 side contiguous along the reduction is staged [at][kk] by `cp.async` (True), or
# read 16 bytes at a time into registers and stored transposed, [kk][at] (False): fewer
# registers held across a step, but the copy waits for its load
SIMT_K_INNER = True
CONTRACTION_MIN_K = 8
# a contraction of at most half as many tiles as SMS (a convolution's weight gradient: 64 x
# 576 outputs, a sum over 131072 pixels, 9 tiles), or of fewer than SMS summing at least
# SPLIT_K_LONG terms each, splits its reduction into chunks of whole steps, one block each,
# to fill about SPLIT_K_BLOCKS blocks; each chunk at least SPLIT_K_MIN_STEPS steps, the
# partial tiles at most SPLIT_K_MAX_PARTIALS values (`Contraction.split`)
SPLIT_K_BLOCKS = 2 * 132
SPLIT_K_LONG = 4096
SPLIT_K_MIN_STEPS = 8
SPLIT_K_MAX_PARTIALS = 1 << 24
CONTRACTION_MIN_OUTPUTS = 256
SMS = 132  # an H100's multiprocessors: a grid of fewer 128x128 tiles takes 64x64 ones
MMA_WARPS = (2, 4)  # tensor cores: the block's 8 warps as 2 (a side) x 4 (b side)
MMA = 16  # a TF32 WMMA fragment is 16 x 16 outputs, 8 reduction steps (m16n16k8)
# 16-bit inputs: warp-level mma.sync m16n8k16 (fp32 accumulators in registers), the operands
# read from shared memory by ldmatrix, `HALF_TILE_K` reduction steps staged at a time
HALF_MMA = ("float16", "bfloat16")
HALF_TILE_K = 32
# a large 16-bit contraction's (ra, rb, kc): 128 x 256 outputs, 64 steps staged at a time, in
# 2 buffers of 48 KiB (the fastest of benchmarks/gpu_tiles.py's shapes), where the device
# gives a block that much; on Hopper its wgmma pipeline in 4 (`wgmma_tile`, staged by TMA)
HALF_TILE = (8, 16, 64)
HALF_SHARED = 96 * 1024  # the most shared memory a 16-bit contraction's staging takes
# Hopper's warpgroup tensor cores (`wgmma.mma_async`, sm_90a): a `HALF_TILE` contraction whose
# sides are both plain 16-byte loads takes WGMMA_STAGES buffers where the device gives a
# block that much (and 1 KiB more, to align them to the 128-byte swizzle's 1024-byte period);
# 0 turns the pipeline off (benchmarks/gpu_tiles.py compares the two)
WGMMA_STAGES = 4
# a large fp32 contraction with `allow_tf32` on Hopper: wgmma reads TF32 operands K-major
# only, so one whose sides are both plain 16-byte loads contiguous along the reduction takes
# 128 x 256 outputs, 32 steps staged at a time (128-byte rows, 48 KiB a buffer as for
# HALF_TILE), its wgmma pipeline in WGMMA_STAGES buffers (`wgmma_tile`), its WMMA one beside
TF32_TILE = (8, 16, 32)
# ... on (checked and timed on an H200: benchmarks/README.md); False gives such products
# the WMMA pipeline on Hopper too
TF32_WGMMA = True


@dataclass
class Contraction:
    """A reduction whose every term is f(a-side values, b-side values), where the a side
    depends on the reduction and the output loops in `a_loops` only, the b side on those in
    `b_loops` (a matmul's rows and columns; a convolution's output channels and pixels);
    both may depend on the batch loops `c_loops` too (one batch per grid z index).

    A block computes a (16*ra) x (16*rb) tile of outputs, each thread an ra x rb register
    tile. The block stages each side's values for `kc` reduction steps at a time in
    shared memory (`a_exports`, `b_exports`: the side values the terms read), in two
    buffers (the next step's copy overlaps this step's arithmetic), then every thread
    combines its tile from there; `kk_fastest` says which side's staging walks the
    reduction fastest (the one whose loads are contiguous along it).

    `a_vector` / `b_vector` ("k" or "m", else None): the side is one plain load (fp32, or
    16-bit on the 16-bit tensor cores), contiguous along the reduction ("k": 16-byte
    `__ldg`s stored transposed; 16-bit values, staged `[at][kk]`, by `cp.async`) or along
    its outputs ("m": 16-byte asynchronous copies, `cp.async` on sm_80+), taken when the
    buffer is 16-byte aligned at launch. `mma`, a sum of a-value * b-value run on tensor
    cores with fp32 accumulation: "tf32" (fp32 values with `allow_tf32`: WMMA m16n16k8 on
    TF32 inputs), "float16" or "bfloat16" (both sides 16-bit values, always: warp-level
    `mma.sync` m16n8k16; the sides are staged in shared memory in their 16-bit storage,
    exactly, as their products are exact in fp32), else None.

    On the 16-bit tensor cores each of the block's 8 warps (`MMA_WARPS`, 2 x 4) owns a
    (8 ra) x (4 rb) piece of the tile (64 x 32 of a 128 x 128 tile): per 16 reduction
    steps it reads (8 ra / 16) A fragments and (4 rb / 16) pairs of B fragments with
    `ldmatrix.x4` and runs every A x B pair through `mma.sync` (16 of them for 64 x 32),
    its fp32 accumulators in registers in the m16n8 C-fragment layout, from which each lane
    runs the epilogue of its own outputs; the steps are staged in as many buffers as fit
    (`cuda_simt.stage_count`, up to 4), their rows' 16-byte chunks swizzled against bank conflicts
    (`fg_swizzle`). A side is staged `[kk][at]` (rows along its
    outputs, read with `ldmatrix.trans`) or, where its loads are contiguous along the
    reduction (`k_inner`), `[at][kk]` (rows along the reduction, read without `.trans`,
    and its 16-byte copies go straight to shared memory with `cp.async`)."""

    red: Reduction
    a_loops: list[Loop]
    b_loops: list[Loop]
    consts: list  # statements that depend on nothing: repeated wherever they are needed
    a_stmts: list
    b_stmts: list
    terms: list  # the statements that combine both sides (arithmetic only)
    a_exports: list  # (name, dtype)
    b_exports: list
    prefix: list  # per-output statements before the reduction, run with the epilogue
    epilogue: list
    ra: int
    rb: int
    a_kk_fastest: bool
    b_kk_fastest: bool
    c_loops: list[Loop] = field(default_factory=list)  # a batch: output loops both sides read
    kc: int = TILE_K
    a_vector: str | None = None
    b_vector: str | None = None
    mma: str | None = None
    # a split reduction: `split` chunks of `chunk` steps (a multiple of kc), each a block's,
    # whose partial tiles a second launch sums in order and runs the epilogue on
    split: int = 1
    chunk: int = 0

    @property
    def lanes(self) -> int:
        """Elements of a side in 16 bytes: 4 fp32 values, or 8 16-bit ones (staged in 16
        bits for the tensor cores)."""
        return 8 if self.mma in HALF_MMA else VECTOR

    def k_inner(self, side: str) -> bool:
        """Whether `side` ("a" or "b") is staged `[buf][at][kk]` (the reduction innermost)
        rather than `[buf][kk][at]`: a side whose loads are contiguous along the reduction,
        so that its 16-byte copies go straight to shared memory (`cp.async`), on the 16-bit
        tensor cores (`ldmatrix` reads either layout, so the layout follows memory, gathers
        too) or on the fp32 SIMT path (`simt_async`; its threads read a row's steps 16 bytes
        at a time), or the TF32 one (WMMA loads an `[at][kk]` side as a row-major A or a
        column-major B)."""
        vector = self.a_vector if side == "a" else self.b_vector
        kk_fastest = self.a_kk_fastest if side == "a" else self.b_kk_fastest
        if self.mma in (None, "tf32"):
            return vector == "k" and SIMT_K_INNER
        return self.mma in HALF_MMA and (vector == "k" or (vector is None and kk_fastest))

    @property
    def simt_async(self) -> bool:
        """An fp32 contraction (SIMT, or TF32 WMMA) with a side that is one plain 16-byte
        load: its steps are staged by `cp.async` in `cuda_simt.SIMT_STAGES` buffers (copies of
        the next steps in flight while one is computed), else in two."""
        fp32 = self.mma in (None, "tf32")
        return fp32 and (self.a_vector is not None or self.b_vector is not None)

    @property
    def tiles(self) -> tuple[int, int]:
        """The output tiles along the a side and the b side (of each batch)."""
        return -(-self.na // (TILE_THREADS * self.ra)), -(-self.nb // (TILE_THREADS * self.rb))

    @property
    def na(self) -> int:
        return math.prod(lp.extent for lp in self.a_loops)

    @property
    def nb(self) -> int:
        return math.prod(lp.extent for lp in self.b_loops)

    @property
    def nc(self) -> int:
        return math.prod(lp.extent for lp in self.c_loops)


def half_stage_bytes(ra: int, rb: int, kc: int) -> int:
    """The bytes of one buffer of a 16-bit contraction's staged steps: kc steps of both
    sides' (16 ra) + (16 rb) values, 2 bytes each."""
    return 2 * TILE_THREADS * (ra + rb) * kc


def wgmma_tile(c: Contraction, shared_limit: int) -> bool:
    """Whether `c` renders a `wgmma.mma_async` pipeline beside its `mma.sync` (or WMMA) one,
    taken where the code is compiled for sm_90a: a 16-bit `HALF_TILE` contraction whose
    sides are each one plain 16-byte load (`a_vector`, `b_vector`), or such a TF32
    `TF32_TILE` one with at most one batch loop, on a device whose blocks may have
    `WGMMA_STAGES` buffers of it. wgmma reads TF32 operands K-major only: a TF32 side
    contiguous along its outputs ("m") is copied K-major first (`cuda_wgmma.transpose_kernel`)."""
    if WGMMA_STAGES < 3 or c.a_vector is None or c.b_vector is None:
        return False
    if c.mma == "tf32":  # (a side along its outputs is staged from a K-major copy)
        if not TF32_WGMMA:
            return False
        tile = TF32_TILE
        shared = shared_limit >= tf32_shared(*tile)
        return len(c.c_loops) <= 1 and (c.ra, c.rb, c.kc) == tile and shared
    need = WGMMA_STAGES * half_stage_bytes(*HALF_TILE) + 1024
    return c.mma in HALF_MMA and (c.ra, c.rb, c.kc) == HALF_TILE and shared_limit >= need


def tf32_shared(ra: int, rb: int, kc: int) -> int:
    """The shared memory a block of a TF32 wgmma contraction takes: `WGMMA_STAGES` buffers of
    its WMMA pipeline's staging (fp32 rows of kc steps padded by 4 values: the larger
    layout, which the wgmma one's 128-byte rows reuse), 1 KiB to align those to 1024 bytes,
    the WMMA epilogue's 8 warps x 16 x 16 floats and the barriers."""
    return WGMMA_STAGES * 4 * TILE_THREADS * (ra + rb) * (kc + 4) + 1024 + 8 * MMA * MMA * 4 + 256


def _tile_shape(
    na: int,
    nb: int,
    nc: int,
    mma: str | None,
    shared_limit: int = STATIC_SHARED,
    plain_sides: bool = False,
) -> tuple[int, int, int]:
    """(ra, rb, kc): 128x128 tiles (8x8 per thread, 8 steps staged) where they still give
    every multiprocessor a block, else 64x64 (4x4, 16 steps), smaller sides smaller.
    Tensor cores take at least 32 x 64 (16 x 16 outputs per warp) and 16 steps (32 for
    16-bit inputs: fewer barriers per mma). A large 16-bit contraction takes `HALF_TILE`
    where its sides fill it and two buffers of its steps fit the device's `shared_limit`;
    a large TF32 one whose sides are both plain 16-byte loads (`plain_sides`) takes
    `TF32_TILE` where its wgmma pipeline fits (`tf32_shared`)."""
    big = na >= 128 and nb >= 128 and -(-na // 128) * -(-nb // 128) * nc >= SMS

    def regs(n: int) -> int:
        return 8 if big else 4 if n >= 64 else 2 if n >= 32 else 1

    ra, rb = regs(na), regs(nb)
    ha, hb, _ = HALF_TILE
    if mma in HALF_MMA and big and na >= 16 * ha and nb >= 16 * hb:
        if 2 * half_stage_bytes(*HALF_TILE) <= min(HALF_SHARED, shared_limit):
            return HALF_TILE
    ta, tb, _ = TF32_TILE
    tf32_big = mma == "tf32" and TF32_WGMMA and big
    if tf32_big and plain_sides and na >= 16 * ta and nb >= 16 * tb:
        if WGMMA_STAGES >= 3 and tf32_shared(*TF32_TILE) <= shared_limit:
            return TF32_TILE
    if mma:
        return max(ra, 2), max(rb, 4), HALF_TILE_K if mma in HALF_MMA else TILE_K
    return ra, rb, SIMT_BIG_K if big else TILE_K


def _vector_side(
    stmts: list, exports: list, loops: list[Loop], red: Reduction, mma: str | None
) -> str | None:
    """ "k" or "m" when a side is one plain load, fp32 (or 16-bit, staged in 16 bits for the
    tensor cores), whose index steps by 1 along the reduction ("k") or along the side's one
    output loop ("m"), every other part a multiple of the lanes of 16 bytes (4, or 8 16-bit
    values) and that loop's extent too: groups of 16 bytes, all in or all out. (A
    convolution's weights, contiguous along its flat reduction over input channels and
    kernel taps, are not: their decomposition's registers would cost the kernel a block
    per multiprocessor.)"""
    if len(stmts) != 1 or len(exports) != 1 or len(loops) != 1 or len(red.loops) != 1:
        return None
    (s,) = stmts
    if not isinstance(s, Load) or s.valid or s.dst != exports[0][0] or s.param.output:
        return None
    if s.dtype.name not in ("float32", mma) or s.param.dtype != s.dtype:
        return None
    if any(not isinstance(atom, Var) for atom, _ in s.index.terms):
        return None
    lanes = 16 // s.dtype.itemsize
    for axis, loop in (("k", red.loops[0]), ("m", loops[0])):
        if loop.extent % lanes == 0 and _steps_by_one(s.index, loop.var, lanes):
            return axis
    return None


def _sum_of_products(red: Reduction, terms: list, a_exports: list, b_exports: list) -> bool:
    """The reduction is `acc += a * b` from 0, a and b one value of each side, all of the
    accumulator's type."""
    dt = red.init.dtype
    if red.op is not Ops.ADD or not dt.is_float or red.init.value != 0:
        return False
    if len(a_exports) != 1 or len(b_exports) != 1 or len(terms) != 1:
        return False
    (t,) = terms
    value = next(s for s in red.body if isinstance(s, AccUpdate)).value
    sides = {a_exports[0][0], b_exports[0][0]}
    return (
        isinstance(t, Alu) and t.op is Ops.MUL and t.dst == value and set(t.args) == sides
        and t.dtype == dt and all(e[1] == dt for e in a_exports + b_exports)
    )  # fmt: skip


def _mma_kind(red: Reduction, c_parts: tuple, tf32: bool) -> str | None:
    """Which tensor-core path a contraction takes (`Contraction.mma`), if any. 16-bit
    values live in fp32 registers, so a side's value is a 16-bit number only where it is
    loaded from a buffer of that type or cast to it; then the tensor cores' exact products
    and fp32 sums are what the fp32 path computes, up to the order of the additions."""
    _, a_stmts, b_stmts, terms, a_exp, b_exp = c_parts
    if not _sum_of_products(red, terms, a_exp, b_exp):
        return None
    dt = red.init.dtype
    if dt.name == "float32":
        return "tf32" if tf32 else None
    if dt.name not in HALF_MMA:
        return None
    for stmts, ((name, _),) in ((a_stmts, a_exp), (b_stmts, b_exp)):
        if not _is_16bit(name, stmts, dt):
            return None
    return dt.name


def _is_16bit(name: str, stmts: list, dt: DType) -> bool:
    """`name` is a value of the 16-bit type `dt`: loaded from a buffer of it, cast to it, or
    such a value where a condition holds and 0 elsewhere (a padded convolution's window)."""
    s = next(s for s in stmts if s.dst == name)
    if isinstance(s, Select):
        return _is_16bit(s.value, stmts, dt)
    loaded = isinstance(s, Load) and not s.param.output and s.param.dtype == dt
    return loaded or (isinstance(s, Alu) and s.op is Ops.CAST and s.dtype == dt)


def _defs_and_uses(s) -> tuple[str | None, set[str], set]:
    """(the name `s` defines, the names it reads, the loop variables it reads)."""
    names, exprs = set(), []
    if isinstance(s, Load):
        exprs = [s.index, *s.valid]
    elif isinstance(s, LoadRow):
        names, exprs = {s.row}, [s.col, *s.valid]
    elif isinstance(s, Alu):
        names = set(s.args)
    elif isinstance(s, Select):
        names, exprs = {s.value}, list(s.valid)
    elif isinstance(s, Rand):
        names, exprs = {s.key}, [s.index]
    elif isinstance(s, Position):
        exprs = [s.index]
    elif not isinstance(s, Const):
        return None, set(), set()
    atoms = set().union(*(e.atoms() for e in exprs)) if exprs else set()
    return s.dst, names, {a for a in atoms if isinstance(a, Var)}


def _contraction(
    gpu: GpuKernel, tf32: bool = False, shared_limit: int = STATIC_SHARED
) -> Contraction | None:
    """The shared-memory tiling of a single reduction, if its terms split into two sides."""
    if len(gpu.reductions) != 1 or len(gpu.outputs) < 2:
        return None
    (red,) = gpu.reductions.values()
    if red.length < CONTRACTION_MIN_K or gpu.extent < CONTRACTION_MIN_OUTPUTS:
        return None
    at = next(i for i, s in enumerate(gpu.body) if isinstance(s, Loop) and id(s) in gpu.reductions)
    prefix, epilogue = gpu.body[: at - 1], gpu.body[at + 1 :]
    if any(isinstance(s, (Loop, AccInit)) for s in prefix + epilogue):
        return None
    body = [s for s in red.body if not (isinstance(s, AccUpdate) and s.acc == red.init.acc)]
    deps: dict[str, set] = {}  # value -> the output loop variables it depends on
    pure: dict[str, bool] = {}
    constant: dict[str, bool] = {}  # computed from literals alone
    out_vars = {lp.var for lp in gpu.outputs}
    for s in body:
        dst, names, vars_ = _defs_and_uses(s)
        if dst is None or any(n not in deps for n in names):  # a loop, or a value from outside
            return None
        deps[dst] = (vars_ & out_vars).union(*(deps[n] for n in names))
        pure[dst] = isinstance(s, (Alu, Const))  # arithmetic, which any thread can redo
        constant[dst] = pure[dst] and not deps[dst] and all(constant[n] for n in names)
    value = next(s for s in red.body if isinstance(s, AccUpdate)).value
    if value not in deps:
        return None
    loops = gpu.outputs
    best = None
    # each output loop goes to the a side, the b side, or the batch (both sides read it)
    for sides in itertools.product("abc", repeat=len(loops)):
        if "a" not in sides or "b" not in sides:
            continue
        a_vars, b_vars, c_vars = ({lp.var for lp, w in zip(loops, sides) if w == k} for k in "abc")
        split = _split_terms(body, deps, pure, constant, a_vars | c_vars, b_vars | c_vars, value)
        if split is None:
            continue
        na = math.prod(lp.extent for lp in loops if lp.var in a_vars)
        nb = math.prod(lp.extent for lp in loops if lp.var in b_vars)
        score = (min(na, nb), -len(c_vars))  # big tiles first, then as little batch as can be
        if min(na, nb) >= 4 and (best is None or score > best[0]):
            best = (score, sides, split)
    if best is None:
        return None
    _, sides, (consts, a_stmts, b_stmts, terms, a_exp, b_exp) = best
    a_loops, b_loops, c_loops = ([lp for lp, w in zip(loops, sides) if w == k] for k in "abc")
    inner = red.loops[-1].var

    def kk_fastest(stmts, own: list[Loop]) -> bool:
        """Whether the side's loads run contiguously along the reduction, and no shorter
        than along the side's own innermost loop (a convolution's input: 3 kernel taps in
        a row against 56 pixels, so its staging walks the pixels)."""
        loads = [s for s in stmts if isinstance(s, Load)]
        along_k = any(abs(s.index.coef(inner)) == 1 for s in loads)
        if not along_k or not own:
            return along_k
        along_own = any(abs(s.index.coef(own[-1].var)) == 1 for s in loads)
        return not (along_own and own[-1].extent > red.loops[-1].extent)

    na, nb = math.prod(lp.extent for lp in a_loops), math.prod(lp.extent for lp in b_loops)
    mma = _mma_kind(red, best[2], tf32)
    a_vector = _vector_side(a_stmts, a_exp, a_loops, red, mma)
    b_vector = _vector_side(b_stmts, b_exp, b_loops, red, mma)
    nc, plain = math.prod(lp.extent for lp in c_loops), bool(a_vector and b_vector)
    ra, rb, kc = _tile_shape(na, nb, nc, mma, shared_limit, plain and len(c_loops) <= 1)
    c = Contraction(
        red, a_loops, b_loops, consts, a_stmts, b_stmts, terms, a_exp, b_exp, prefix,
        epilogue, ra, rb, kk_fastest(a_stmts, a_loops), kk_fastest(b_stmts, b_loops), c_loops, kc,
        a_vector, b_vector, mma,
    )  # fmt: skip
    c.split, c.chunk = _split_reduction(c, shared_limit)
    return c


def _split_reduction(c: Contraction, shared_limit: int) -> tuple[int, int]:
    """(split, chunk) of `c` (`Contraction.split`): a float sum from 0 of so few tiles that
    half the multiprocessors or more would have no block (or some would, and each output
    sums `SPLIT_K_LONG` terms or more), and long enough, splits into chunks of whole steps
    toward `SPLIT_K_BLOCKS` blocks; else (1, 0). Not the wgmma pipeline (large products).
    (A 2048^3 product's 128 tiles nearly fill 132 multiprocessors: writing and reading its
    partials would cost more than the few idle ones.)"""
    red = c.red
    if red.op is not Ops.ADD or not red.init.dtype.is_float or red.init.value != 0:
        return 1, 0
    if wgmma_tile(c, shared_limit):
        return 1, 0
    tiles = math.prod(c.tiles) * c.nc
    steps = -(-red.length // c.kc)
    split = min(
        -(-SPLIT_K_BLOCKS // tiles),
        steps // SPLIT_K_MIN_STEPS,
        SPLIT_K_MAX_PARTIALS // (c.nc * c.na * c.nb),
    )
    few = 2 * tiles <= SMS or (tiles < SMS and red.length >= SPLIT_K_LONG)
    if not few or split < 2:
        return 1, 0
    chunk = -(-steps // split) * c.kc
    return -(-red.length // chunk), chunk


def _split_terms(body, deps, pure, constant, a_vars, b_vars, value):
    """Sort the reduction body into consts, a side, b side and the terms combining them.

    A value that depends on neither side's own loops (only on the batch's, or on the
    reduction alone: `w[k]` in `(x[i,k] + w[k]) * y[k,j]`) is computed on each side that
    reads it, since the sides are staged by different threads; the terms read it from
    the a side."""
    consts, terms = [], []
    side: dict[str, str] = {}
    for s in body:
        d = deps[s.dst]
        if constant[s.dst]:
            consts.append(s)
            side[s.dst] = "const"
        elif d <= a_vars and d <= b_vars:
            side[s.dst] = "both"
        elif d <= a_vars:
            side[s.dst] = "a"
        elif d <= b_vars:
            side[s.dst] = "b"
        elif pure[s.dst]:
            terms.append(s)
            side[s.dst] = "terms"
        else:
            return None
    if side[value] != "terms":
        return None
    reads = {s.dst: _defs_and_uses(s)[1] for s in body}
    used = {n for s in terms for n in reads[s.dst]}
    # the values each side computes: its own, and the shared ones it (or, for a, the terms) reads
    need = {"a": {n for n in used if side[n] == "both"}, "b": set()}
    for s in reversed(body):
        for k in "ab":
            if side[s.dst] == k or (side[s.dst] == "both" and s.dst in need[k]):
                need[k].add(s.dst)
                need[k] |= reads[s.dst]
    a_stmts = [s for s in body if side[s.dst] in ("a", "both") and s.dst in need["a"]]
    b_stmts = [s for s in body if side[s.dst] in ("b", "both") and s.dst in need["b"]]
    types = {s.dst: s.dtype for s in body}
    a_exp = [(n, types[n]) for n in sorted(used) if side[n] in ("a", "both")]
    b_exp = [(n, types[n]) for n in sorted(used) if side[n] == "b"]
    return consts, a_stmts, b_stmts, terms, a_exp, b_exp
