"""Render a loop-IR kernel as CUDA C, on the grid mapping `codegen/gpu.py` decided.

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
the scalar path.
The source begins with the kernel's global-memory traffic (`gpu.traffic`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir.dtypes import DType
from ..ir.ops import Ops
from ..ir.symbolic import FloorDiv, Lin, Mod, Var
from .gpu import (
    TILE_K,
    TILE_THREADS,
    VECTOR,
    WARP,
    Contraction,
    GpuKernel,
    Reduction,
    Traffic,
    map_to_gpu,
    traffic,
    vector_type,
)
from .loopir import (
    AccInit,
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
    Rand,
    ScatterAdd,
    Select,
    Store,
)
from .optable import op_row

PRELUDE = """\
__device__ __forceinline__ float fg_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ double fg_max(double a, double b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ int fg_max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ long long fg_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ bool fg_max(bool a, bool b) { return a || b; }
__device__ __forceinline__ unsigned int fg_fmix(unsigned int x) {
  x ^= x >> 16; x *= 0x85EBCA6Bu; x ^= x >> 13; x *= 0xC2B2AE35u; x ^= x >> 16; return x;
}
template <class T, bool IS_MAX> __device__ __forceinline__ T fg_combine(T a, T b) {
  return IS_MAX ? fg_max(a, b) : a + b;
}
template <class T, bool IS_MAX> __device__ __forceinline__ T fg_warp_reduce(T v) {
  for (int d = 16; d > 0; d >>= 1) v = fg_combine<T, IS_MAX>(v, __shfl_down_sync(~0u, v, d));
  return v;  // lane 0 holds the warp's total
}
template <class T, bool IS_MAX> __device__ __forceinline__ T fg_warp_allreduce(T v) {
  for (int d = 16; d > 0; d >>= 1) v = fg_combine<T, IS_MAX>(v, __shfl_xor_sync(~0u, v, d));
  return v;  // every lane holds the warp's total
}
__device__ __forceinline__ bool fg_aligned16(const void* p) {
  return ((unsigned long long)p & 15ull) == 0;
}
// Combine one value per thread over the block; every thread gets the result. Called by all
// threads together; blockDim.x is a multiple of 32 and at most 1024; buf holds 32 values.
template <class T, bool IS_MAX> __device__ T fg_block_reduce(T v, T* buf, T identity) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  v = fg_warp_reduce<T, IS_MAX>(v);
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  v = fg_warp_reduce<T, IS_MAX>(lane < (blockDim.x >> 5) ? buf[lane] : identity);
  v = __shfl_sync(~0u, v, 0);
  __syncthreads();  // buf is free again for the next reduction
  return v;
}
"""


def mem_type(dt: DType) -> str:
    return "unsigned char" if dt.is_bool else dt.cuda


def literal(value, dt: DType) -> str:
    if dt.is_bool:
        return "true" if value else "false"
    if dt.is_int:
        v = dt.wrap(int(value))
        return f"{v}LL" if dt.itemsize == 8 else f"({dt.cuda}){v}" if dt.itemsize < 4 else str(v)
    v = float(value)
    if v != v:
        text = (
            "__int_as_float(0x7fc00000)"
            if dt.itemsize == 4
            else "__longlong_as_double(0x7ff8000000000000LL)"
        )
        return text
    if v in (float("inf"), float("-inf")):
        sign = "-" if v < 0 else ""
        return f"{sign}(1.0{'f' if dt.itemsize == 4 else ''}/0.0{'f' if dt.itemsize == 4 else ''})"
    return f"{v!r}f" if dt.itemsize == 4 else repr(v)


def index(e: Lin) -> str:
    parts = []
    for atom, coef in e.terms:
        a = _atom(atom)
        parts.append(a if coef == 1 else f"{a}*{coef}LL")
    if e.const or not parts:
        parts.append(f"{e.const}LL")
    return "(" + " + ".join(parts) + ")"


def _atom(a) -> str:
    if isinstance(a, Var):
        return a.name
    if isinstance(a, FloorDiv):
        return f"({index(a.x)}/{a.c}LL)"
    if isinstance(a, Mod):
        return f"({index(a.x)}%{a.c}LL)"
    raise TypeError(a)


def valid(conds) -> str:
    return " && ".join(f"{index(c)} >= 0" for c in conds) or "true"


@dataclass(frozen=True)
class CudaLaunch:
    """One kernel launch: `module.get_function(symbol)(*buffers, grid=, block=, shared=)`."""

    symbol: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic shared memory to ask for at launch


@dataclass
class CudaKernel:
    """A kernel rendered for the GPU, with its launch configuration.

    Buffers are passed as `(*params, *scratch)`: the CPU kernel's parameters in
    their order (outputs first), then `scratch` buffers of `(dtype, count)` that
    the caller allocates (a long reduction's partials). The launches run in
    order, each with the same arguments."""

    name: str
    source: str
    params: list[Param]
    launches: tuple[CudaLaunch, ...]
    scratch: list = field(default_factory=list)
    static_shared_bytes: int = 0  # the `__shared__` arrays the source declares, per block
    traffic: Traffic | None = None  # global-memory bytes and FLOPs (`codegen/gpu.py`)

    @property
    def symbol(self) -> str:
        return self.launches[0].symbol

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.launches[0].grid

    @property
    def block(self) -> tuple[int, int, int]:
        return self.launches[0].block

    @property
    def shared_bytes(self) -> int:
        return self.launches[0].shared_bytes


PARTIAL = "fg_partial"  # the scratch buffer of a split reduction's partials


class _Renderer:
    """Prints one launch of a `GpuKernel`: `part` is "all" (the whole kernel), or "partials"
    and "final" for the two passes of a split reduction."""

    def __init__(self, gpu: GpuKernel, part: str = "all"):
        self.gpu, self.k, self.part = gpu, gpu.kernel, part
        self.lines: list[str] = []
        self.types: dict[str, DType] = {}
        self.shared: list[str] = []
        self.shared_bytes = 0
        self.lane: int | None = None  # which lane of a vector group is being printed
        self.vector: set[int] = set()  # id() of the loads/stores moved VECTOR at a time
        self.vector_names: dict[int, str] = {}  # ... and the vector value each one uses

    def line(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def index_vars(self, loops: list[Loop], flat: str, depth: int) -> None:
        """Declare each loop's variable from the flat index over all of them (row-major)."""
        inner = 1
        for k in range(len(loops) - 1, -1, -1):
            lp = loops[k]
            expr = flat if inner == 1 else f"{flat} / {inner}LL"
            if k > 0:
                expr = f"{expr} % {lp.extent}LL"
            self.line(depth, f"const long long {lp.var.name} = {expr if lp.extent > 1 else '0LL'};")
            inner *= lp.extent

    def block(self, body, depth: int) -> bool:
        """Print `body`; False once a split reduction's first pass has written its partial
        (nothing after the reduction belongs to that pass)."""
        for s in body:
            if isinstance(s, Loop) and id(s) in self.gpu.reductions:
                if not self.cooperative(self.gpu.reductions[id(s)], depth):
                    return False
            elif isinstance(s, Loop):
                v = s.var.name
                self.line(depth, f"for (long long {v} = 0; {v} < {s.extent}LL; ++{v}) {{")
                self.block(s.body, depth + 1)
                self.line(depth, "}")
            else:
                text = self.stmt(s)
                if self.gpu.mode == "block" and isinstance(s, (Store, ScatterAdd)):
                    text = f"if (threadIdx.x == 0) {{ {text} }}"
                elif self.gpu.mode == "warp" and isinstance(s, (Store, ScatterAdd)):
                    text = f"if ((threadIdx.x & 31u) == 0) {{ {text} }}"
                self.line(depth, text)
        return True

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
            scalar = depth
            if red.vector:
                self.line(depth, f"if ({self.aligned(red.body, red.vector)}) {{")
                self.line(depth + 1, f"for (long long rq = {first}; rq < "
                                     f"{red.length // VECTOR}LL; rq += {step}) {{")  # fmt: skip
                self.lanes(red.loops, "red", "rq", red.body, red.vector, depth + 2)
                self.line(depth + 1, "}")
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
        # warp shuffles move 4 bytes at least: bools, bytes and shorts travel as int
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
        if self.part == "partials":
            v = f"(unsigned char){acc}" if dt.is_bool else acc
            self.line(depth, f"if (threadIdx.x == 0) {PARTIAL}[blockIdx.x] = {v};")
            return False
        return True

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

    def tiled(self, c: Contraction) -> None:
        """A contraction through shared memory: see `codegen/gpu.py`'s `Contraction`."""
        n, kc = TILE_THREADS, TILE_K
        ta, tb = n * c.ra, n * c.rb
        red, acc = c.red, c.red.init.acc
        dt = red.init.dtype
        for side, exports, width in (("a", c.a_exports, ta), ("b", c.b_exports, tb)):
            for name, t in exports:
                # one spare column: a side staged along the reduction stores down a column,
                # and rows of width + 1 put consecutive threads' stores in different banks
                self.shared.append(f"  __shared__ {t.cuda} {side}_{name}[{kc}][{width + 1}];")
                self.shared_bytes += kc * (width + 1) * t.itemsize
        init = literal(red.init.value, dt)
        self.line(1, "const int tid = threadIdx.y * blockDim.x + threadIdx.x;")
        self.line(1, f"for (long long ic = blockIdx.z; ic < {c.nc}LL; ic += gridDim.z)")
        self.line(1, f"for (long long tile_a = blockIdx.y * {ta}LL; tile_a < {c.na}LL; "
                     f"tile_a += (long long)gridDim.y * {ta}) {{")  # fmt: skip
        self.line(2, f"for (long long tile_b = blockIdx.x * {tb}LL; tile_b < {c.nb}LL; "
                     f"tile_b += (long long)gridDim.x * {tb}) {{")  # fmt: skip
        self.line(3, f"{dt.cuda} {acc}_tile[{c.ra}][{c.rb}];")
        self.line(3, f"for (int i = 0; i < {c.ra}; ++i) for (int j = 0; j < {c.rb}; ++j) "
                     f"{acc}_tile[i][j] = {init};")  # fmt: skip
        self.line(3, f"for (long long k0 = 0; k0 < {red.length}LL; k0 += {kc}) {{")
        for side, loops, stmts, exports, width, kk_fastest in (
            ("a", c.a_loops, c.a_stmts, c.a_exports, ta, c.a_kk_fastest),
            ("b", c.b_loops, c.b_stmts, c.b_exports, tb, c.b_kk_fastest),
        ):
            if not exports:
                continue
            self.line(4, f"for (int e = tid; e < {kc * width}; e += {n * n}) {{")
            kk, at = (f"e % {kc}", f"e / {kc}") if kk_fastest else (f"e / {width}", f"e % {width}")
            self.line(5, f"const int kk = {kk}, at = {at};")
            self.line(5, f"const long long i{side} = tile_{side} + at, red = k0 + kk;")
            self.line(5, f"if (i{side} < {math.prod(lp.extent for lp in loops)}LL && "
                         f"red < {red.length}LL) {{")  # fmt: skip
            self.index_vars(loops, f"i{side}", 6)
            self.index_vars(c.c_loops, "ic", 6)
            self.index_vars(red.loops, "red", 6)
            self.block(c.consts + stmts, 6)
            for name, _ in exports:
                self.line(6, f"{side}_{name}[kk][at] = {name};")
            self.line(5, "}")
            self.line(4, "}")
        self.line(4, "__syncthreads();")
        self.line(4, f"const int kmax = {red.length}LL - k0 < {kc} ? (int)({red.length}LL - k0) "
                     f": {kc};")  # fmt: skip
        self.line(4, "for (int kk = 0; kk < kmax; ++kk) {")
        self.line(5, "#pragma unroll")
        self.line(5, f"for (int i = 0; i < {c.ra}; ++i) {{")
        self.line(6, "#pragma unroll")
        self.line(6, f"for (int j = 0; j < {c.rb}; ++j) {{")
        for side, exports, var, thread in (
            ("a", c.a_exports, "i", "threadIdx.y"),
            ("b", c.b_exports, "j", "threadIdx.x"),
        ):
            for name, t in exports:
                self.line(7, f"const {t.cuda} {name} = {side}_{name}[kk][{thread} + {var} * {n}];")
        self.block(c.consts + c.terms, 7)
        value = next(s for s in red.body if isinstance(s, AccUpdate) and s.acc == acc)
        self.line(7, self.stmt(AccUpdate(f"{acc}_tile[i][j]", dt, red.op, value.value)))
        self.line(6, "}")
        self.line(5, "}")
        self.line(4, "}")
        self.line(4, "__syncthreads();  // the tiles are read before the next step overwrites them")
        self.line(3, "}")
        self.line(3, f"for (int i = 0; i < {c.ra}; ++i) for (int j = 0; j < {c.rb}; ++j) {{")
        self.line(4, f"const long long ia = tile_a + threadIdx.y + i * {n};")
        self.line(4, f"const long long ib = tile_b + threadIdx.x + j * {n};")
        self.line(4, f"if (ia >= {c.na}LL || ib >= {c.nb}LL) continue;")
        self.index_vars(c.a_loops, "ia", 4)
        self.index_vars(c.b_loops, "ib", 4)
        self.index_vars(c.c_loops, "ic", 4)
        self.line(4, f"{dt.cuda} {acc} = {acc}_tile[i][j];")
        self.block(c.prefix + c.epilogue, 4)
        self.line(3, "}")
        self.line(2, "}")
        self.line(1, "}")

    def render(self, symbol: str) -> str:
        gpu = self.gpu
        params = []
        for p in self.k.params:
            const = "" if p.output else "const "
            params.append(f"{const}{mem_type(p.dtype)}* __restrict__ {p.name}")
        if gpu.split > 1:
            red = next(iter(gpu.reductions.values()))
            params.append(f"{mem_type(red.init.dtype)}* __restrict__ {PARTIAL}")
        extent = f"{gpu.extent}LL"
        if gpu.contraction is not None:
            self.tiled(gpu.contraction)
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
        head = f'extern "C" __global__ void {symbol}({", ".join(params)}) {{'
        return "\n".join([head, *self.shared, *self.lines, "}"])

    def decl(self, name: str, dt: DType, expr: str) -> str:
        self.types[name] = dt
        return f"const {dt.cuda} {name} = {expr};"

    def stmt(self, s) -> str:
        if self.lane is not None and id(s) in self.vector:
            part = f"{self.vector_names[id(s)]}.{'xyzw'[self.lane]}"
            if isinstance(s, Load):
                return self.decl(s.dst, s.dtype, part)
            return f"{part} = {s.value};"
        if isinstance(s, Load):
            ref = f"{s.param.name}[{index(s.index)}]"
            if s.dtype.is_bool:
                ref = f"({ref} != 0)"
            if s.valid:
                ok = valid(s.valid)
                ref = f"(({ok}) ? {s.param.name}[({ok}) ? {index(s.index)} : 0LL] : 0)"
                if s.dtype.is_bool:
                    ref = f"({ref} != 0)"
            return self.decl(s.dst, s.dtype, ref)
        if isinstance(s, (LoadRow, ScatterAdd)):
            ok = f"{s.row} >= 0 && {s.row} < {s.rows}LL" + (
                f" && {valid(s.valid)}" if s.valid else ""
            )
            at = f"(long long){s.row} * {s.row_size}LL + {index(s.col)}"
            if isinstance(s, ScatterAdd):  # this thread owns these columns: no atomics needed
                return f"if ({ok}) {s.param.name}[{at}] += {s.value};"
            ref = f"(({ok}) ? {s.param.name}[({ok}) ? {at} : 0LL] : 0)"
            return self.decl(s.dst, s.dtype, f"({ref} != 0)" if s.dtype.is_bool else ref)
        if isinstance(s, Const):
            return self.decl(s.dst, s.dtype, literal(s.value, s.dtype))
        if isinstance(s, Select):
            return self.decl(s.dst, s.dtype, f"({valid(s.valid)}) ? {s.value} : ({s.dtype.cuda})0")
        if isinstance(s, Rand):
            h = f"fg_fmix((unsigned int){index(s.index)} ^ (unsigned int){s.key})"
            return self.decl(
                s.dst, s.dtype, f"({s.dtype.cuda})({h} >> 8) * ({s.dtype.cuda})(1.0 / 16777216.0)"
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
            ref = s.acc if s.index is None else f"{s.acc}[{index(s.index)}]"
            if s.op is Ops.ADD and not s.dtype.is_bool:
                return f"{ref} += {s.value};"
            return f"{ref} = fg_max({ref}, {s.value});"
        if isinstance(s, Store):
            v = f"(unsigned char){s.value}" if s.param.dtype.is_bool else s.value
            store = f"{s.param.name}[{index(s.index)}] = {v};"
            return f"if ({valid(s.valid)}) {store}" if s.valid else store
        raise TypeError(s)

    def alu(self, s: Alu) -> str:
        a = s.args
        src = self.types.get(a[0], s.dtype) if a else s.dtype
        if s.op is Ops.WHERE:
            return f"{a[0]} ? {a[1]} : {a[2]}"
        if s.op is Ops.CAST:
            if s.dtype.is_bool:
                return f"({a[0]} != 0)"
            if src.is_float and s.dtype.itemsize < 4:
                # through int, then wrap (as the CPU kernels and torch on the CPU): a direct
                # float -> unsigned char conversion saturates on the GPU and is UB in C++
                return f"({s.dtype.cuda})(int){a[0]}"
            return f"({s.dtype.cuda}){a[0]}"
        f = "f" if src.is_float and src.itemsize == 4 else ""
        return op_row(s.op, src).cuda.format(*a, t=src.cuda, f=f)


def cuda_kernel(kernel: Kernel, symbol: str) -> CudaKernel:
    """`kernel` as GPU code: its grid mapping (`codegen/gpu.py`), source and launches."""
    gpu = map_to_gpu(kernel)
    if gpu.split == 1:
        r = _Renderer(gpu)
        bodies = [r.render(symbol)]
        launches = (CudaLaunch(symbol, gpu.grid_dims, gpu.block_dims),)
        scratch = []
    else:
        r, r2 = _Renderer(gpu, "partials"), _Renderer(gpu, "final")
        bodies = [r.render(symbol), r2.render(f"{symbol}_final")]
        launches = (
            CudaLaunch(symbol, (gpu.grid, 1, 1), (gpu.block, 1, 1)),
            CudaLaunch(f"{symbol}_final", (gpu.grid2, 1, 1), (gpu.block2, 1, 1)),
        )
        red = next(iter(gpu.reductions.values()))
        scratch = [(red.init.dtype, gpu.grid)]
    moved = traffic(gpu)
    source = "\n".join([f"// kernel {kernel.name}", f"// {moved}", PRELUDE, *bodies, ""])
    return CudaKernel(
        kernel.name, source, list(kernel.params), launches, scratch, r.shared_bytes, moved
    )


def render_cuda(kernel: Kernel, symbol: str) -> str:
    """CUDA C text of `kernel`, its `__global__` function(s) named from `symbol`."""
    return cuda_kernel(kernel, symbol).source
