"""Render a loop-IR kernel as CUDA C, on the grid mapping `pipeline/gpu.py` decided.

The result is a `CudaKernel`: the source, the buffers it takes (the CPU
kernel's parameters, in order, then any scratch buffers) and its launches
(symbol, grid, block), run in order with the same arguments:

    extern "C" __global__ void SYMBOL(float* __restrict__ out0, const float* __restrict__ in0, ...)

Transcendentals are CUDA's own device functions (`expf`, `logf`, `sinf`, ...);
`MAX` propagates NaN as numpy's `maximum` does. Block reductions go through
`fg_block_reduce` (warp shuffles, then one 32-slot shared array), a warp's
through `fg_warp_allreduce` (shuffles only). Contiguous 4-byte streams move 16
bytes per access (`float4` / `int4` through `__ldg` and `__stwb`: `ld.global.nc.v4`,
`st.global.wb.v4`) on a path taken when the buffers are 16-byte aligned, next to
the scalar path. The source begins with the kernel's global-memory traffic
(`gpu.traffic`), then the device functions it calls (`cuda_prelude.py`).

This module prints the statements and the grid's loops; a contraction is the other
modules' (`_Renderer` mixes them in):

- `cuda_simt.py`: the tiles through shared memory, the staging of their steps, and the
  fp32 SIMT arithmetic (`TiledContraction`);
- `cuda_mma.py`: warp-level tensor cores, TF32 through `nvcuda::wmma`, 16-bit through
  `mma.sync` m16n8k16 fed by `ldmatrix` (`MmaSteps`);
- `cuda_wgmma.py`: Hopper's warpgroup `wgmma.mma_async` where built for sm_90a, staged by
  the Tensor Memory Accelerator or `cp.async` (`WgmmaPipeline`);
- `cuda_text.py`: the C spelling of types, literals and indices; `cuda_types.py`: what
  the runtime takes (`CudaKernel`, `CudaLaunch`, `TensorMap`).
"""

from __future__ import annotations

from ..ir import rand
from ..ir.dtypes import DType, float32
from ..ir.ops import COMPARISON, Ops
from .cuda_mma import MmaSteps
from .cuda_prelude import HALF_PRELUDE, PRELUDE, WGMMA_PRELUDE
from .cuda_simt import TiledContraction, staged_half
from .cuda_text import PARTIAL, index, literal, mem_type, narrowed, reg_type, valid, widened
from .cuda_types import CudaKernel, CudaLaunch, TensorMap
from .cuda_wgmma import WgmmaPipeline, transpose_kernel
from .gpu import (
    MAX_BLOCK,
    MAX_GRID,
    STATIC_SHARED,
    TILE_THREADS,
    VECTOR,
    WARP,
    GpuKernel,
    Reduction,
    map_to_gpu,
    traffic,
    vector_type,
)
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
    Position,
    Prefetch,
    Rand,
    ScatterAdd,
    Select,
    Store,
)
from .optable import op_row

__all__ = [
    "HALF_PRELUDE",
    "PRELUDE",
    "STATIC_SHARED",
    "WGMMA_PRELUDE",
    "CudaKernel",
    "CudaLaunch",
    "TensorMap",
    "cuda_kernel",
    "render_cuda",
]

# blocks per multiprocessor nvcc must leave registers for (__launch_bounds__): on the fp32
# SIMT path where a side is copied by `cp.async`, and on the 16-bit tensor cores
SIMT_MIN_BLOCKS = 1
HALF_MIN_BLOCKS = 1


class _Renderer(TiledContraction, MmaSteps, WgmmaPipeline):
    """Prints one launch of a `GpuKernel`: `part` is "all" (the whole kernel), or "partials"
    and "final" for the two passes of a split reduction. Its own methods print statements,
    the grid's loops and cooperative reductions; a contraction's come from the mixins."""

    def __init__(self, gpu: GpuKernel, part: str = "all", shared_limit: int = STATIC_SHARED):
        self.gpu, self.k, self.part = gpu, gpu.kernel, part
        self.shared_limit = shared_limit  # the device's shared memory per block
        self.lines: list[str] = []
        self.types: dict[str, DType] = {}
        self.shared: list[str] = []
        self.shared_bytes = 0  # static (`__shared__` arrays)
        self.dynamic_bytes = 0  # dynamic (`FG_DYNAMIC_SHARED`), asked for at launch
        self.gathers: dict = {}  # side -> its `cuda_simt.Gather` staging, in a contraction
        self.lane: int | None = None  # which lane of a vector group is being printed
        self.vector: set[int] = set()  # id() of the loads/stores moved VECTOR at a time
        self.vector_names: dict[int, str] = {}  # ... and the vector value each one uses
        self.shared_row = False  # inside a row loop the block's threads share (`block`)
        # a float sum's accumulator whose vector lanes 1..3 add into accumulators of their
        # own (`lane_sums`): <acc>_l1, <acc>_l2, <acc>_l3
        self.lane_acc: str | None = None
        self.wgmma = False  # a contraction with a `wgmma_pipeline` (needs `WGMMA_PRELUDE`)
        self.tensor_maps: tuple[TensorMap, ...] = ()  # its sides' maps (`tma_maps`), if any
        # TF32 sides along their outputs, copied K-major into scratch buffers first (a launch
        # of `transpose_kernel` each) for the wgmma pipeline, which takes TF32 that way only
        self.transposes: list[str] = []

    def line(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def index_vars(self, loops: list[Loop], flat: str, depth: int, narrow: bool = False) -> None:
        """Declare each loop's variable from the flat index over all of them (row-major).
        `narrow`: as 32-bit ints, divided in 32 bits (the caller knows the flat index is
        below `cuda_simt.NARROW_LIMIT`): a GPU divides 64-bit integers by a constant in many
        times the instructions."""
        whole, suffix, kind = (f"(int){flat}", "", "int") if narrow else (flat, "LL", "long long")
        inner = 1
        for k in range(len(loops) - 1, -1, -1):
            lp = loops[k]
            expr = whole if inner == 1 else f"{whole} / {inner}{suffix}"
            if k > 0:
                expr = f"{expr} % {lp.extent}{suffix}"
            self.line(depth, f"const {kind} {lp.var.name} = {expr if lp.extent > 1 else '0'};")
            inner *= lp.extent

    def block(self, body, depth: int) -> bool:
        """Print `body`; False once a split reduction's first pass has written its partial
        (nothing after the reduction belongs to that pass)."""
        for s in body:
            if isinstance(s, Loop) and id(s) in self.gpu.reductions:
                if not self.cooperative(self.gpu.reductions[id(s)], depth):
                    return False
            elif isinstance(s, Loop) and id(s) in self.gpu.row_loops and not self.shared_row:
                # a row kernel's loop over the row's elements, after its statistics (which
                # every thread holds): the block's (or warp's) threads take strided shares
                self.row_loop(s, self.gpu.row_loops[id(s)], depth)
            elif isinstance(s, Loop):
                v = s.var.name
                self.line(depth, f"for (long long {v} = 0; {v} < {s.extent}LL; ++{v}) {{")
                self.block(s.body, depth + 1)
                self.line(depth, "}")
            else:
                text = self.stmt(s)
                if self.shared_row:  # each thread stores its own elements
                    pass
                elif self.gpu.mode == "block" and isinstance(s, (Store, ScatterAdd)):
                    text = f"if (threadIdx.x == 0) {{ {text} }}"
                elif self.gpu.mode == "warp" and isinstance(s, (Store, ScatterAdd)):
                    text = f"if ((threadIdx.x & 31u) == 0) {{ {text} }}"
                self.line(depth, text)
        return True

    def row_loop(self, s: Loop, vector: set[int], depth: int) -> None:
        """A row kernel's loop over the row's elements, after its statistics (which every
        thread holds): the block's (or warp's) threads take strided shares, VECTOR elements
        at a time where the accesses and buffers allow (as an elementwise kernel's)."""
        v = s.var.name
        first, step = "(long long)threadIdx.x", "(long long)blockDim.x"
        if self.gpu.mode == "warp":
            first, step = "(long long)(threadIdx.x & 31u)", f"{WARP}LL"
        self.shared_row = True
        scalar = depth
        if vector:
            self.line(depth, f"if ({self.aligned(s.body, vector)}) {{")
            self.line(depth + 1, f"for (long long {v}_q = {first}; {v}_q < "
                                 f"{s.extent // VECTOR}LL; {v}_q += {step}) {{")  # fmt: skip
            self.lanes([s], f"{v}_f", f"{v}_q", s.body, vector, depth + 2)
            self.line(depth + 1, "}")
            self.line(depth, "} else {  // a buffer is not 16-byte aligned: one at a time")
            scalar = depth + 1
        self.line(scalar, f"for (long long {v} = {first}; {v} < {s.extent}LL; {v} += {step}) {{")
        self.block(s.body, scalar + 1)
        self.line(scalar, "}")
        if vector:
            self.line(depth, "}")
        self.shared_row = False

    def cooperative(self, red: Reduction, depth: int) -> bool:
        """A reduction split over the block's threads, then combined across the block."""
        acc, dt, split = red.init.acc, red.init.dtype, self.gpu.split
        if self.part == "final":  # combine the first pass's partials of this output
            self.line(
                depth, f"for (long long red = threadIdx.x; red < {split}LL; red += blockDim.x)"
            )
            part = f"{PARTIAL}[gid * {split}LL + red]"
            update = AccUpdate(acc, dt, red.op, f"({part} != 0)" if dt.is_bool else part)
            self.line(depth + 1, self.stmt(update))
        else:
            first, step = "(long long)threadIdx.x", "(long long)blockDim.x"
            if self.part == "partials":
                first, step = f"part * blockDim.x + {first}", f"{split}LL * blockDim.x"
            if self.gpu.mode == "warp":
                first, step = "(long long)(threadIdx.x & 31u)", f"{WARP}LL"
            # a value the statistics pass stores for the output pass (the CPU lowering's
            # `stashed_row_value`): each thread stores the elements of its own share
            saved, self.shared_row = self.shared_row, True
            scalar = depth
            if red.vector:
                apart = lane_sums(red)
                self.line(depth, f"if ({self.aligned(red.body, red.vector)}) {{")
                if apart:
                    zero = literal(0, dt)
                    self.line(depth + 1, f"{reg_type(dt).cuda} {acc}_l1 = {zero}, "
                                         f"{acc}_l2 = {zero}, {acc}_l3 = {zero};")  # fmt: skip
                    self.lane_acc = acc
                self.line(depth + 1, f"for (long long rq = {first}; rq < "
                                     f"{red.length // VECTOR}LL; rq += {step}) {{")  # fmt: skip
                self.lanes(red.loops, "red", "rq", red.body, red.vector, depth + 2)
                self.line(depth + 1, "}")
                if apart:
                    self.lane_acc = None
                    self.line(depth + 1, f"{acc} = ({acc} + {acc}_l1) + ({acc}_l2 + {acc}_l3);")
                self.line(depth, "} else {  // a buffer is not 16-byte aligned: one at a time")
                scalar = depth + 1
            self.line(
                scalar, f"for (long long red = {first}; red < {red.length}LL; red += {step}) {{"
            )
            self.index_vars(red.loops, "red", scalar + 1)
            self.block(red.body, scalar + 1)
            self.line(scalar, "}")
            if red.vector:
                self.line(depth, "}")
            self.shared_row = saved
        if red.online is not None:
            self.combine_online(red.online, depth)
            self.sync_stores(red, depth)
            return True
        # warp shuffles move 4 bytes at least: bools, bytes and shorts travel as int
        dt = reg_type(dt)
        narrow = dt.is_bool or dt.itemsize < 4
        t = "int" if narrow else dt.cuda
        is_max = "true" if red.op is Ops.MAX or dt.is_bool else "false"
        identity = literal(red.init.value, dt) if not dt.is_bool else "0"
        value = f"({t}){acc}" if narrow else acc
        if self.gpu.mode == "warp":
            reduced = f"fg_warp_allreduce<{t}, {is_max}>({value})"
        else:
            buf = f"{acc}_shared"
            self.shared.append(f"  __shared__ {t} {buf}[32];")
            self.shared_bytes += 32 * (4 if narrow else dt.itemsize)
            reduced = f"fg_block_reduce<{t}, {is_max}>({value}, {buf}, {identity})"
        self.line(depth, f"{acc} = {reduced}{' != 0' if dt.is_bool else ''};")
        self.sync_stores(red, depth)
        if self.part == "partials":
            v = f"(unsigned char){acc}" if dt.is_bool else acc
            self.line(depth, f"if (threadIdx.x == 0) {PARTIAL}[blockIdx.x] = {v};")
            return False
        return True

    def sync_stores(self, red: Reduction, depth: int) -> None:
        """After a reduction whose threads stored values that others read next: a warp's
        lanes order their memory (a block's reduction ends with `__syncthreads`)."""
        if self.gpu.mode == "warp" and any(isinstance(s, Store) for s in red.body):
            self.line(depth, "__syncwarp();")

    def combine_online(self, step: AccOnlineExp, depth: int) -> None:
        """An online softmax's per-thread (max, sum) pairs, merged over the warp or block."""
        m, total, t = step.acc_max, step.acc_sum, reg_type(step.dtype).cuda
        if self.gpu.mode == "warp":
            self.line(depth, f"fg_warp_allreduce_online<{t}>({m}, {total});")
            return
        self.shared.append(f"  __shared__ {t} {m}_shared[32];")
        self.shared.append(f"  __shared__ {t} {total}_shared[32];")
        self.shared_bytes += 64 * reg_type(step.dtype).itemsize
        self.line(depth, f"fg_block_reduce_online<{t}>({m}, {total}, {m}_shared, {total}_shared);")

    def aligned(self, body: list, vector: set[int]) -> str:
        """The condition under which `body`'s vector accesses are 16-byte aligned: their
        buffers' addresses (their indices are multiples of VECTOR, `gpu.vector_accesses`)."""
        names = dict.fromkeys(s.param.name for s in body if id(s) in vector)
        return " && ".join(f"fg_aligned16({n})" for n in names)

    def lanes(self, loops: list[Loop], flat: str, group: str, body, vector, depth: int) -> None:
        """`body` for the VECTOR consecutive iterations `group * VECTOR + lane` of the
        flattened `loops`: the vector loads first (at lane 0's index), each lane in its own
        scope reading its component, then the vector stores."""
        self.line(depth, f"const long long {flat} = {group} * {VECTOR}LL;")
        self.index_vars(loops, flat, depth)
        inner = loops[-1].var.name  # the only variable that changes within the group
        self.line(depth, f"const long long {inner}_base = {inner};")
        stores = []
        for s in body:
            if id(s) not in vector:
                continue
            name = f"{s.dst}_q" if isinstance(s, Load) else f"{s.param.name}_q{len(stores)}"
            self.vector_names[id(s)] = name
            vt = vector_type(s.param.dtype)
            if isinstance(s, Load):
                at = f"{s.param.name}[{index(s.index)}]"
                self.line(depth, f"const {vt} {name} = __ldg((const {vt}*)&{at});")
            else:
                self.line(depth, f"{vt} {name};")
                stores.append(s)
        saved = self.vector
        self.vector = vector
        for lane in range(VECTOR):
            self.lane = lane
            self.line(depth, "{")
            self.line(depth + 1, f"const long long {inner} = {inner}_base + {lane};")
            self.block(body, depth + 1)
            self.line(depth, "}")
        self.lane, self.vector = None, saved
        for s in stores:
            vt = vector_type(s.param.dtype)
            at = f"{s.param.name}[{index(s.index)}]"
            # __stwb, not `*(float4*)p = v`: nvcc splits that store into four
            self.line(depth, f"__stwb(({vt}*)&{at}, {self.vector_names[id(s)]});")

    def render(self, symbol: str) -> str:
        """The launch's `__global__` function, named `symbol`: its parameters, shared
        arrays and the grid's loop over its outputs (or a contraction's tiles)."""
        gpu = self.gpu
        params = []
        for p in self.k.params:
            const = "" if p.output else "const "
            params.append(f"{const}{mem_type(p.dtype)}* __restrict__ {p.name}")
        c = gpu.contraction
        if gpu.split > 1 or (c is not None and c.split > 1):
            red = c.red if c is not None else next(iter(gpu.reductions.values()))
            params.append(f"{mem_type(reg_type(red.init.dtype))}* __restrict__ {PARTIAL}")
        extent = f"{gpu.extent}LL"
        if c is not None and self.part == "final":  # a split contraction's sums, epilogues
            self.split_sums(c)
        elif c is not None:
            self.tiled(gpu.contraction)
            params += [f"float* __restrict__ fg_t{side}" for side in self.transposes]
        elif self.part == "partials":
            self.line(1, f"const long long gid = blockIdx.x / {gpu.split}LL;")
            self.line(1, f"const long long part = blockIdx.x % {gpu.split}LL;")
            self.line(1, "{")
        elif gpu.mode == "block":
            self.line(1, f"for (long long gid = blockIdx.x; gid < {extent}; gid += gridDim.x) {{")
        elif gpu.mode == "warp":
            rows = "(long long)(blockDim.x >> 5)"
            self.line(1, f"for (long long gid = blockIdx.x * {rows} + (threadIdx.x >> 5); "
                         f"gid < {extent}; gid += gridDim.x * {rows}) {{")  # fmt: skip
        else:
            if gpu.vector:  # 16 bytes per access where the buffers allow, else the loop below
                self.line(1, f"if ({self.aligned(gpu.body, gpu.vector)}) {{")
                self.line(2, "for (long long gq = (long long)blockIdx.x * blockDim.x + "
                             f"threadIdx.x; gq < {gpu.extent // VECTOR}LL; "
                             "gq += (long long)gridDim.x * blockDim.x) {")  # fmt: skip
                self.lanes(gpu.outputs, "gid", "gq", gpu.body, gpu.vector, 3)
                self.line(2, "}")
                self.line(2, "return;")
                self.line(1, "}")
            self.line(
                1,
                "for (long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                f"gid < {extent}; gid += (long long)gridDim.x * blockDim.x) {{",
            )
        if gpu.contraction is None:
            self.index_vars(gpu.outputs, "gid", 2)
            self.block(gpu.body, 2)
            self.line(1, "}")
        bounds, c = "", gpu.contraction
        blocks = HALF_MIN_BLOCKS if c is not None and staged_half(c) else SIMT_MIN_BLOCKS
        if c is not None and (staged_half(c) or c.simt_async) and blocks > 1:
            bounds = f"__launch_bounds__({TILE_THREADS * TILE_THREADS}, {blocks}) "
        maps = " FG_TMAP_PARAMS" if self.tensor_maps else ""
        self.head = f"{', '.join(params)}{maps}"  # (the transposes' launches take the same)
        head = f'extern "C" __global__ void {bounds}{symbol}({self.head}) {{'
        # a CPU row kernel's scratch row (rendered here only for FUSEGRAD_DUMP's .cu view:
        # the GPU lowering makes none), each thread's own
        scratch = [f"  {mem_type(p.dtype)} {p.name}[{p.size}];" for p in self.k.scratch]
        return "\n".join([head, *scratch, *self.shared, *self.lines, "}"])

    def decl(self, name: str, dt: DType, expr: str) -> str:
        self.types[name] = dt
        return f"const {dt.cuda} {name} = {expr};"

    def stmt(self, s) -> str:
        """One loop-IR statement as a line of C (in a vector group's lane, its component)."""
        if self.lane is not None and id(s) in self.vector:
            part = f"{self.vector_names[id(s)]}.{'xyzw'[self.lane]}"
            if isinstance(s, Load):
                return self.decl(s.dst, s.dtype, part)
            return f"{part} = {s.value};"
        if isinstance(s, (Load, LoadRow, ScatterAdd, Store)):
            return self.memory(s)
        if isinstance(s, Const):
            return self.decl(s.dst, s.dtype, literal(s.value, s.dtype))
        if isinstance(s, Select):
            return self.decl(s.dst, s.dtype, f"({valid(s.valid)}) ? {s.value} : ({s.dtype.cuda})0")
        if isinstance(s, Position):
            return self.decl(s.dst, s.dtype, f"({s.dtype.cuda})({index(s.index)})")
        if isinstance(s, Rand):
            h = f"fg_fmix((unsigned int){index(s.index)} ^ (unsigned int){s.key})"
            bits = rand.uniform_bits(s.dtype)
            return self.decl(
                s.dst,
                s.dtype,
                f"({s.dtype.cuda})({h} >> {32 - bits}) * ({s.dtype.cuda})(1.0 / {1 << bits}.0)",
            )
        if isinstance(s, Alu):
            return self.decl(s.dst, s.dtype, self.alu(s))
        if isinstance(s, AccInit):
            self.types[s.acc] = s.dtype
            init = literal(s.value, s.dtype)
            if s.size == 1:
                return f"{s.dtype.cuda} {s.acc} = {init};"
            return (
                f"{s.dtype.cuda} {s.acc}[{s.size}]; "
                f"for (int k = 0; k < {s.size}; ++k) {s.acc}[k] = {init};"
            )
        if isinstance(s, AccRead):
            return self.decl(s.dst, s.dtype, f"{s.acc}[{index(s.index)}]")
        if isinstance(s, AccOnlineExp):
            t = reg_type(s.dtype).cuda
            return f"fg_online_exp<{t}>({s.acc_max}, {s.acc_sum}, {s.value});"
        if isinstance(s, AccReduceLanes):
            self.types[s.dst] = s.dtype
            base = index(s.base)
            step = f"{s.dst} += {s.acc}[{base} + k];"
            if s.op is not Ops.ADD or s.dtype.is_bool:
                step = f"{s.dst} = fg_max({s.dst}, {s.acc}[{base} + k]);"
            return (
                f"{s.dtype.cuda} {s.dst} = {s.acc}[{base}]; "
                f"for (int k = 1; k < {s.lanes}; ++k) {step}"
            )
        if isinstance(s, AccUpdate):
            acc = s.acc
            if acc == self.lane_acc and self.lane:
                acc = f"{acc}_l{self.lane}"
            ref = acc if s.index is None else f"{acc}[{index(s.index)}]"
            if s.op is Ops.ADD and not s.dtype.is_bool:
                return f"{ref} += {s.value};"
            return f"{ref} = fg_max({ref}, {s.value});"
        if isinstance(s, Prefetch):  # a hint: a GPU has no use for it
            return f"// prefetch {s.param.name}[{index(s.index)}]"
        raise TypeError(s)

    def memory(self, s: Load | LoadRow | ScatterAdd | Store) -> str:
        """A statement that reads or writes a buffer: a load (a row's, by index, or an
        affine one), a scatter-add into a row, or a store; masked ones touch memory only
        where valid (a masked load reads element 0 elsewhere, and gives 0)."""
        if isinstance(s, Load):
            # (widened by what memory holds: a 16-bit row's float32 scratch row is float)
            ref = widened(f"{s.param.name}[{index(s.index)}]", s.param.dtype)
            if s.dtype.is_bool:
                ref = f"({ref} != 0)"
            if s.valid:
                ok = valid(s.valid)
                at = widened(f"{s.param.name}[({ok}) ? {index(s.index)} : 0LL]", s.param.dtype)
                ref = f"(({ok}) ? {at} : 0)"
                if s.dtype.is_bool:
                    ref = f"({ref} != 0)"
            return self.decl(s.dst, s.dtype, ref)
        if isinstance(s, (LoadRow, ScatterAdd)):
            ok = f"{s.row} >= 0 && {s.row} < {s.rows}LL" + (
                f" && {valid(s.valid)}" if s.valid else ""
            )
            at = f"(long long){s.row} * {s.row_size}LL + {index(s.col)}"
            dt = s.param.dtype
            if isinstance(s, ScatterAdd) and dt.is_half:
                cell = f"{s.param.name}[{at}]"
                new = narrowed(f"{widened(cell, dt)} + {s.value}", dt)
                return f"if ({ok}) {cell} = {new};"
            if isinstance(s, ScatterAdd):  # this thread owns these columns: no atomics needed
                return f"if ({ok}) {s.param.name}[{at}] += {s.value};"
            ref = f"(({ok}) ? {widened(f'{s.param.name}[({ok}) ? {at} : 0LL]', dt)} : 0)"
            return self.decl(s.dst, s.dtype, f"({ref} != 0)" if s.dtype.is_bool else ref)
        if isinstance(s, Store):
            v = f"(unsigned char){s.value}" if s.param.dtype.is_bool else s.value
            store = f"{s.param.name}[{index(s.index)}] = {narrowed(v, s.param.dtype)};"
            return f"if ({valid(s.valid)}) {store}" if s.valid else store
        raise TypeError(s)

    def alu(self, s: Alu) -> str:
        a = s.args
        src = self.types.get(a[0], s.dtype) if a else s.dtype
        if s.op is Ops.WHERE:
            return f"{a[0]} ? {a[1]} : {a[2]}"
        if s.op is Ops.CAST:
            if src.is_half:  # read as its type holds it (llvm.py's cast)
                a = [f"fg_f32({narrowed(a[0], src)})"]
            if s.dtype.is_bool:
                return f"({a[0]} != 0)"
            if s.dtype.is_half:  # an explicit cast rounds, inside a kernel too
                return f"fg_f32({narrowed(f'(float){a[0]}', s.dtype)})"
            if src.is_float and s.dtype.itemsize < 4:
                # through int, then wrap (as the CPU kernels and torch on the CPU): a direct
                # float -> unsigned char conversion saturates on the GPU and is UB in C++
                return f"({s.dtype.cuda})(int){a[0]}"
            return f"({s.dtype.cuda}){a[0]}"
        if s.op in COMPARISON and src.is_half:  # compared as their type holds them (llvm.py)
            a = [f"fg_f32({narrowed(x, src)})" for x in a]
        src = reg_type(src)
        f = "f" if src.is_float and src.itemsize == 4 else ""
        return op_row(s.op, src).cuda.format(*a, t=src.cuda, f=f)


def lane_sums(red: Reduction) -> bool:
    """Whether a vectorized float sum keeps one accumulator per lane of its 16-byte groups
    (combined as (l0 + l1) + (l2 + l3) after the loop): four chains of additions a quarter
    as long, so a long row's rounding error is about a quarter and the adds overlap. Only
    for a plain sum (an online softmax's statistics and maxima keep one)."""
    updates = [s for s in red.body if isinstance(s, AccUpdate)]
    return (
        red.online is None and red.op is Ops.ADD and red.init.dtype.is_float
        and red.init.value == 0 and len(updates) == 1 and updates[0].acc == red.init.acc
        and updates[0].index is None
    )  # fmt: skip


def cuda_kernel(
    kernel: Kernel, symbol: str, tf32: bool = False, shared_limit: int = STATIC_SHARED
) -> CudaKernel:
    """`kernel` as GPU code: its grid mapping (`pipeline/gpu.py`), source and launches.
    `tf32`: fp32 contractions may use tensor cores (`fg.backends.cuda.matmul.allow_tf32`);
    `shared_limit`: the device's shared memory per block, dynamic included (a 16-bit
    contraction stages more steps where it is larger than 48 KiB)."""
    gpu = map_to_gpu(kernel, tf32, shared_limit)
    c = gpu.contraction
    if c is not None and c.split > 1:  # the chunks' partial tiles, then their sums
        r = _Renderer(gpu, "partials", shared_limit)
        r2 = _Renderer(gpu, "final", shared_limit)
        bodies = [r.render(symbol), r2.render(f"{symbol}_final")]
        n = c.nc * c.na * c.nb
        block = min(MAX_BLOCK, -(-n // WARP) * WARP)
        launches = (
            CudaLaunch(symbol, gpu.grid_dims, gpu.block_dims, r.dynamic_bytes),
            CudaLaunch(f"{symbol}_final", (min(MAX_GRID, -(-n // block)), 1, 1), (block, 1, 1)),
        )
        scratch = [(reg_type(c.red.init.dtype), c.split * n)]
    elif gpu.split == 1:
        r = _Renderer(gpu, shared_limit=shared_limit)
        bodies = [r.render(symbol)]
        launches = (CudaLaunch(symbol, gpu.grid_dims, gpu.block_dims, r.dynamic_bytes),)
        scratch = []
        for side in r.transposes:  # launched first, in the order of their scratch buffers
            source, launch, count = transpose_kernel(
                kernel, gpu.contraction, side, f"{symbol}_t{side}", r.head
            )
            bodies.insert(len(scratch), source)
            launches = (*launches[:-1], launch, launches[-1])
            scratch.append((float32, count))
    else:
        r, r2 = _Renderer(gpu, "partials"), _Renderer(gpu, "final")
        bodies = [r.render(symbol), r2.render(f"{symbol}_final")]
        launches = (
            CudaLaunch(symbol, (gpu.grid, 1, 1), (gpu.block, 1, 1)),
            CudaLaunch(f"{symbol}_final", (gpu.grid2, 1, 1), (gpu.block2, 1, 1)),
        )
        red = next(iter(gpu.reductions.values()))
        scratch = [(reg_type(red.init.dtype), gpu.grid)]  # float32 partials of a 16-bit sum
    moved = traffic(gpu)
    # 16-bit values in the parameters or only inside (an explicit cast of float32 values)
    half = any(p.dtype.is_half for p in kernel.params) or any("fg_f32(" in b for b in bodies)
    prelude = PRELUDE + (HALF_PRELUDE if half else "") + (WGMMA_PRELUDE if r.wgmma else "")
    source = "\n".join([f"// kernel {kernel.name}", f"// {moved}", prelude, *bodies, ""])
    return CudaKernel(
        kernel.name, source, list(kernel.params), launches, scratch, r.shared_bytes, moved,
        r.tensor_maps,
    )  # fmt: skip


def render_cuda(
    kernel: Kernel, symbol: str, tf32: bool = False, shared_limit: int = STATIC_SHARED
) -> str:
    """CUDA C text of `kernel`, its `__global__` function(s) named from `symbol`."""
    return cuda_kernel(kernel, symbol, tf32, shared_limit).source
