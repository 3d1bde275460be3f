"""GPU lowering: how a loop-IR kernel maps onto a CUDA grid. The renderer only prints this.

A kernel's output loops (its parallel loop and the serial loops nested
directly inside it) flatten into one output index `gid`. Then one of two
mappings:

- **thread**: one GPU thread per output iteration, in a grid-stride loop;
  everything inside (a short reduction, a register tile, a scatter's rows)
  runs serially in that thread. Elementwise kernels, tiled contractions,
  short reductions.

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

    >>> from fusegrad.codegen.gpu import map_to_gpu   # doctest: +SKIP
    >>> map_to_gpu(kernel_of(x.sum())).mode           # doctest: +SKIP
    'block'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .loopir import AccInit, AccUpdate, Kernel, Loop, ScatterAdd

MAX_BLOCK = 256  # threads per block
MAX_GRID = 1024  # blocks of a grid-stride launch: about 8 per SM of an 132-SM H100
WARP = 32
BLOCK_REDUCE_MIN = 32  # a reduction this long gets a block of threads per output
FEW_OUTPUTS = 64  # ... and so does any reduction of fewer outputs than this
SPLIT_ITEMS = 64  # elements per thread beyond which a long reduction splits over blocks
SPLIT_MAX_OUTPUTS = 64  # only a reduction into at most this many outputs splits


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
    mode: str  # "thread" or "block"
    block: int
    grid: int
    reductions: dict[int, Reduction] = field(default_factory=dict)
    split: int = 1
    block2: int = 0
    grid2: int = 0

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
    updates = [s for s in body if isinstance(s, AccUpdate) and s.acc == init.acc]
    if len(updates) != 1 or updates[0].index is not None:
        return None
    length = math.prod(lp.extent for lp in loops)
    return Reduction(init, updates[0].op, loops, body, length)


def _has(body: list, kind) -> bool:
    return any(isinstance(s, kind) or (isinstance(s, Loop) and _has(s.body, kind)) for s in body)


def map_to_gpu(kernel: Kernel) -> GpuKernel:
    """Decide the grid mapping of `kernel` (see the module docstring)."""
    outputs, body = _output_loops(kernel.body)
    extent = math.prod(loop.extent for loop in outputs)
    reductions = {}
    for prev, s in zip([None, *body], body):
        if isinstance(s, Loop) and s.kind == "reduce" and isinstance(prev, AccInit):
            red = _reduction(prev, s)
            if red is not None:
                reductions[id(s)] = red
    longest = max((r.length for r in reductions.values()), default=0)
    cooperative = (
        reductions
        and not _has(body, ScatterAdd)
        and (longest >= BLOCK_REDUCE_MIN or extent < FEW_OUTPUTS)
    )
    if not cooperative:
        block = min(MAX_BLOCK, _round_up(extent, WARP))
        grid = min(MAX_GRID, -(-extent // block))
        return GpuKernel(kernel, outputs, body, "thread", block, grid)
    block = min(MAX_BLOCK, _round_up(longest, WARP))
    gpu = GpuKernel(kernel, outputs, body, "block", block, min(extent, MAX_GRID), reductions)
    split = -(-longest // (block * SPLIT_ITEMS))
    split = min(split, MAX_GRID // extent)
    if len(reductions) == 1 and extent <= SPLIT_MAX_OUTPUTS and split > 1:
        gpu.split = split
        gpu.grid = extent * gpu.split
        gpu.block2 = min(MAX_BLOCK, _round_up(gpu.split, WARP))
        gpu.grid2 = extent
    return gpu
