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
the scalar path. Contractions tile through shared memory (`_Renderer.tiled`); on tensor
cores TF32 ones through `nvcuda::wmma`, 16-bit ones through warp-level `mma.sync` m16n8k16
fed by `ldmatrix` (`fg_mma_16816`, `fg_ldmatrix_x4`: inline PTX on sm_80+, lane-exact
emulations in `runtime/cuda_emu.h`), and a large 16-bit matmul also through Hopper's
warpgroup `wgmma.mma_async` where built for sm_90a (`_Renderer.wgmma_pipeline`).
The source begins with the kernel's global-memory traffic (`gpu.traffic`).
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass, field

from ..ir import rand
from ..ir.dtypes import DType, float32
from ..ir.ops import COMPARISON, Ops
from ..ir.symbolic import FloorDiv, Lin, Mod, Var
from . import gpu as gpu_map
from .gpu import (
    HALF_MMA,
    MMA,
    MMA_WARPS,
    STATIC_SHARED,
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
    Param,
    Position,
    Prefetch,
    Rand,
    ScatterAdd,
    Select,
    Store,
)
from .optable import op_row

PRELUDE = """\
#if defined(__CUDACC__)
#include <mma.h>
#endif
// a launch's dynamic shared memory, as bytes (the emulator's is a buffer of the launch's size)
#if defined(FG_CUDA_EMULATOR)
#define FG_DYNAMIC_SHARED(name) unsigned char* const name = fg_emu_dynamic_shared()
#else
#define FG_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif
// the tensor maps a kernel built for sm_90a takes after its buffers (`WGMMA_PRELUDE`'s fg_tmap)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FG_TMAP_PARAMS \\
  , const __grid_constant__ struct fg_tmap fg_tma, const __grid_constant__ struct fg_tmap fg_tmb
#else
#define FG_TMAP_PARAMS
#endif
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
// an online softmax's statistics (loopir.AccOnlineExp): a running max m and the sum s of
// exp(v - m), rescaled when m grows; -inf adds nothing, NaN and +inf give NaN as the
// two-pass sum does. Pairs merge the same way, in any order to the same bits.
__device__ __forceinline__ float fg_exp(float x) { return expf(x); }
__device__ __forceinline__ double fg_exp(double x) { return exp(x); }
template <class T> __device__ __forceinline__ void fg_online_exp(T& m, T& s, T v) {
  if (v > m) {
    s = s * fg_exp(m - v) + (v - v + (T)1);
    m = v;
  } else if (v != -(T)INFINITY) {
    s += fg_exp(v - m);
    if (v != v) m = v;
  }
}
template <class T> __device__ __forceinline__ void fg_online_merge(T& m, T& s, T m2, T s2) {
  const T top = fg_max(m, m2);
  const T a = s == (T)0 ? (T)0 : s * fg_exp(m - top);
  const T b = s2 == (T)0 ? (T)0 : s2 * fg_exp(m2 - top);
  m = top;
  s = a + b;
}
template <class T> __device__ __forceinline__ void fg_warp_allreduce_online(T& m, T& s) {
  for (int d = 16; d > 0; d >>= 1) {
    const T m2 = __shfl_xor_sync(~0u, m, d), s2 = __shfl_xor_sync(~0u, s, d);
    fg_online_merge(m, s, m2, s2);
  }
}
__device__ __forceinline__ bool fg_aligned16(const void* p) {
  return ((unsigned long long)p & 15ull) == 0;
}
// 16 bytes global -> shared: asynchronous on sm_80+ (cp.async, zero-filled when !ok; wait
// with fg_copy_wait), a plain copy elsewhere and in the emulator
__device__ __forceinline__ void fg_copy16_async(void* smem, const void* gmem, bool ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(s), "l"(gmem),
               "r"(ok ? 16 : 0));
#else
  float4 v = {0.0f, 0.0f, 0.0f, 0.0f};
  if (ok) v = __ldg((const float4*)gmem);
  *(float4*)smem = v;
#endif
}
__device__ __forceinline__ void fg_copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::);
#endif
}
template <int N> __device__ __forceinline__ void fg_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" :: "n"(N));
#endif
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
// fg_block_reduce for an online softmax's (max, sum) pairs; every thread gets the result
template <class T> __device__ void fg_block_reduce_online(T& m, T& s, T* bm, T* bs) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  fg_warp_allreduce_online(m, s);
  if (lane == 0) { bm[warp] = m; bs[warp] = s; }
  __syncthreads();
  const bool has = lane < (blockDim.x >> 5);
  m = has ? bm[lane] : -(T)INFINITY;
  s = has ? bs[lane] : (T)0;
  fg_warp_allreduce_online(m, s);
  __syncthreads();  // bm, bs are free again
}
"""


# 16-bit floats: stored as CUDA's __half / __nv_bfloat16, float in registers (widened at
# loads by fg_f32, rounded to nearest even at stores and explicit casts)
HALF_STORAGE = {"float16": "__half", "bfloat16": "__nv_bfloat16"}
HALF_PRELUDE = """\
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif
// widened as the CPU kernels widen: a NaN keeps its sign and payload, quieted (the GPU's own
// cvt.f32.f16 gives every NaN the bits 0x7fffffff)
__device__ __forceinline__ float fg_f32(__half h) {
  const unsigned b = __half_as_ushort(h);
  const unsigned nan = (b & 0x8000u) << 16 | 0x7fc00000u | (b & 0x3ffu) << 13;
  return (b & 0x7fffu) > 0x7c00u ? __int_as_float((int)nan) : __half2float(h);
}
__device__ __forceinline__ float fg_f32(__nv_bfloat16 h) { return __bfloat162float(h); }
// rounded to nearest even; a NaN keeps its sign and the top of its payload, quieted, as the
// CPU kernels round it (the GPU's own conversions give every NaN the bits 0x7fff)
__device__ __forceinline__ __half fg_to_f16(float v) {
  const unsigned u = (unsigned)__float_as_int(v);
  const unsigned nan = (u >> 16 & 0x8000u) | 0x7e00u | (u >> 13 & 0x3ffu);
  return v != v ? __ushort_as_half((unsigned short)nan) : __float2half_rn(v);
}
__device__ __forceinline__ __nv_bfloat16 fg_to_bf16(float v) {
  const unsigned u = (unsigned)__float_as_int(v);
  return v != v ? __ushort_as_bfloat16((unsigned short)(u >> 16 | 0x40u)) : __float2bfloat16_rn(v);
}
// Where value (row, col) of a staged 16-bit tile with CHUNKS 16-byte chunks (8 values) a row
// is kept: its chunk is swizzled (XOR) with the row, so that the 8 rows at one chunk that an
// ldmatrix phase reads (16 bytes each) fall on 8 distinct groups of 4 banks without padding.
// Rows of 8+ chunks: chunk ^ (row % 8); of 4 (2 rows a 128-byte bank line): chunk ^ (row / 2
// % 4); of 2: chunk ^ (row / 4 % 2). A chunk stays whole (16-byte copies land as they are).
template <int CHUNKS> __device__ __forceinline__ int fg_swizzle(int row, int col) {
  constexpr int period = CHUNKS < 8 ? CHUNKS : 8;
  return ((col >> 3) ^ (row / (8 / period) % period)) << 3 | (col & 7);
}
// The 16-bit contractions' warp-level tensor cores (sm_80+; the emulator's lane-exact copies
// in runtime/cuda_emu.h). ldmatrix.x4: lanes 8j..8j+7 give the shared-memory addresses of the
// 8 rows (16 bytes each) of 8x8 matrix j, which lands in register j (.trans: transposed).
template <bool TRANS>
__device__ __forceinline__ void fg_ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2,
                                               unsigned& r3, const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = (unsigned)__cvta_generic_to_shared(row);
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(s));
#elif defined(FG_CUDA_EMULATOR)
  unsigned r[4];
  fg_emu::ldmatrix(r, 4, TRANS, row);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
#endif
}
// d += A B on one 16x8 fp32 fragment, A 16x16 (a: 4 registers of 2 values), B 16x8 (b0, b1),
// both float16 (BF16 false) or both bfloat16
template <bool BF16>
__device__ __forceinline__ void fg_mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(FG_CUDA_EMULATOR)
  const unsigned b[2] = {b0, b1};
  fg_emu::mma_m16n8k16(d, a, b, d, BF16);
#endif
}
"""
_TO_HALF = {"float16": "fg_to_f16", "bfloat16": "fg_to_bf16"}
# Hopper's warpgroup tensor cores, sm_90a only (`_Renderer.wgmma_pipeline`; the emulator and
# other GPUs take the `mma.sync` pipeline beside it)
WGMMA_PRELUDE = """\
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A shared-memory operand of wgmma: its start, the byte offsets between its 8-row core
// matrices (lbo: leading, sbo: stride) and the 128-byte swizzle (a row's 16-byte chunk c
// of 8-row group row r sits at chunk c ^ (r % 8); the buffers are 1024-byte aligned)
__device__ __forceinline__ unsigned long long fg_wgmma_desc(const void* at, unsigned lbo,
                                                            unsigned sbo) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(at);
  return (unsigned long long)((s & 0x3ffffu) >> 4) | (unsigned long long)(lbo >> 4) << 16 |
         (unsigned long long)(sbo >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void fg_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void fg_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ __forceinline__ void fg_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// shared memory written through the generic proxy (cp.async, stores), read next by wgmma
__device__ __forceinline__ void fg_fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// the accumulators stay where they are across this point (nothing moves past it)
__device__ __forceinline__ void fg_wgmma_pin(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
// The Tensor Memory Accelerator's copies (a tensor map, encoded on the host and passed by
// value: `CudaKernel.tensor_maps`) into shared memory, their completion counted in bytes on
// an mbarrier that threads wait on by phase parity
struct __align__(64) fg_tmap { unsigned long long q[16]; };
__device__ __forceinline__ unsigned fg_smem(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void fg_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(fg_smem(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void fg_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ bool fg_mbar_try(unsigned long long* bar, unsigned parity) {
  unsigned ok;
  asm volatile("{\\n.reg .pred p;\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
               "selp.u32 %0, 1, 0, p;\\n}\\n" : "=r"(ok) : "r"(fg_smem(bar)), "r"(parity)
               : "memory");
  return ok != 0;
}
// until the phase of `bar` with this parity is complete (parity 1 before any: at once)
__device__ __forceinline__ void fg_mbar_wait(unsigned long long* bar, unsigned parity) {
  while (!fg_mbar_try(bar, parity)) {
  }
}
__device__ __forceinline__ void fg_mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(fg_smem(bar)) : "memory");
}
// this thread's arrival, and `bytes` more to come from copies before the phase completes
__device__ __forceinline__ void fg_mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(fg_smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void fg_tma_2d(void* dst, const fg_tmap* map, int c0, int c1,
                                          unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(fg_smem(dst)), "l"(map), "r"(c0), "r"(c1), "r"(fg_smem(bar)) : "memory");
}
__device__ __forceinline__ void fg_tma_3d(void* dst, const fg_tmap* map, int c0, int c1, int c2,
                                          unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];"
               :: "r"(fg_smem(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(fg_smem(bar))
               : "memory");
}
// d (a warpgroup's 64 x 256 fp32 outputs) += A (64 x 16) B (16 x 256): 16-bit operands in
// shared memory, K-major (TA, TB 0) or MN-major (1); thread t's d[4 j + r] is output (16 (t /
// 32) + t % 32 / 4 + 8 (r / 2), 8 j + 2 (t % 4) + r % 2)
template <bool BF16, int TA, int TB>
__device__ __forceinline__ void fg_wgmma_64x256(float (&d)[128], unsigned long long a,
                                                unsigned long long b) {
  if (BF16)
    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %130, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {REGS}, %128, %129, p, 1, 1, "
      "%131, %132;\\n}\\n"
      : OUTS
      : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
  else
    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %130, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {REGS}, %128, %129, p, 1, 1, "
      "%131, %132;\\n}\\n"
      : OUTS
      : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
}
// d += A (64 x 8) B (8 x 256): fp32 operands in shared memory read as TF32 (their low 13
// mantissa bits left out), both K-major (wgmma takes TF32 operands no other way); d as above
__device__ __forceinline__ void fg_wgmma_64x256_tf32(float (&d)[128], unsigned long long a,
                                                     unsigned long long b) {
  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %130, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {REGS}, %128, %129, p, 1, 1;\\n}\\n"
    : OUTS
    : "l"(a), "l"(b), "r"(1));
}
#endif
"""
WGMMA_PRELUDE = WGMMA_PRELUDE.replace("REGS", ", ".join(f"%{i}" for i in range(128))).replace(
    "OUTS", ", ".join(f'"+f"(d[{i}])' for i in range(128))
)


def mem_type(dt: DType) -> str:
    return "unsigned char" if dt.is_bool else HALF_STORAGE.get(dt.name, dt.cuda)


def _reg(dt: DType) -> DType:
    """The type a value of `dt` is computed in: float32 for the 16-bit floats."""
    return float32 if dt.is_half else dt


def _widened(ref: str, dt: DType) -> str:
    return f"fg_f32({ref})" if dt.is_half else ref


def _narrowed(value: str, dt: DType) -> str:
    return f"{_TO_HALF[dt.name]}({value})" if dt.is_half else value


def literal(value, dt: DType) -> str:
    dt = _reg(dt)
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


# Whether `index` renders its arithmetic in 32-bit ints: set while a contraction's staging
# prints a side whose indices and buffers are all below NARROW_LIMIT (`Renderer.stage`); a
# context variable, as kernels are rendered in several threads at once
_NARROW_INDEX = contextvars.ContextVar("fg_narrow_index", default=False)


def _suffix() -> str:
    """The suffix of an index's integer literals: none in 32-bit rendering."""
    return "" if _NARROW_INDEX.get() else "LL"


def index(e: Lin) -> str:
    ll = _suffix()
    parts = []
    for atom, coef in e.terms:
        a = _atom(atom)
        parts.append(a if coef == 1 else f"{a}*{coef}{ll}")
    if e.const or not parts:
        parts.append(f"{e.const}{ll}")
    return "(" + " + ".join(parts) + ")"


def _atom(a) -> str:
    if isinstance(a, Var):
        return a.name
    if isinstance(a, FloorDiv):
        return f"({index(a.x)}/{a.c}{_suffix()})"
    if isinstance(a, Mod):
        return f"({index(a.x)}%{a.c}{_suffix()})"
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


@dataclass(frozen=True)
class TensorMap:
    """A tensor map the host encodes for a launch (`cuTensorMapEncodeTiled`) and passes by
    value after the buffers (`FG_TMAP_PARAMS`, on sm_90a): the Tensor Memory Accelerator's
    view of buffer `param` (its index among the kernel's parameters) from element `offset`
    on, `dims` elements along each dimension (innermost first), `strides` bytes between the
    steps of dimensions 1.. (dimension 0 is contiguous), copied `box` elements at a time
    into shared memory in the 128-byte swizzle; reads outside `dims` give zeros.
    `realign`: a view whose start is not 16-byte aligned (but is a whole number of values
    past such an address) gets a map from the aligned address before it, its dimension 0 as
    many values longer; the kernel adds that shift to its coordinates along dimension 0.
    Else such a view gets a map of zeros (the kernel copies it another way)."""

    param: int
    dtype: str
    offset: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    realign: bool = False


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
    tensor_maps: tuple[TensorMap, ...] = ()  # passed after the buffers where built for sm_90a

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
# a contraction's staging decomposes its flat indices in 32-bit ints where each of them (a
# side's outputs, the reduction, the batch) is below this: a sum of a few such indices in
# an affine load index still fits in an int
NARROW_LIMIT = 2**29
PAD = 4  # floats after each staged row: rows stay 16-byte aligned for the 16-byte copies
# (16-bit values are not padded but swizzled: `fg_swizzle`)
WMMA = "nvcuda::wmma::"


HALF_STAGES = 4  # at most this many buffers of staged steps on the 16-bit tensor cores
# buffers of staged steps on the fp32 SIMT path where a side is copied by `cp.async`
# (`Contraction.simt_async`: the copies of the next SIMT_STAGES - 1 steps in flight), and
# the blocks per multiprocessor nvcc must leave registers for there (__launch_bounds__)
SIMT_STAGES = 4
SIMT_MIN_BLOCKS = 1
HALF_MIN_BLOCKS = 1  # blocks per multiprocessor nvcc must leave registers for (__launch_bounds__)
# an MN-major wgmma operand's two descriptor offsets the other way round (a check on a GPU)
WGMMA_MN_SWAPPED = False
# the wgmma pipeline's steps copied by the Tensor Memory Accelerator where the sides allow
# (`tma_maps`), else by every thread's cp.async (slower: every thread computes addresses).
# Its kernels launch through `runtime/tensor_map.py`'s ParamsLaunch
WGMMA_TMA = True
# wgmma groups a warpgroup leaves running when it goes on to the next step: 1 (the tensor
# cores never wait for the barrier; steps staged WGMMA_STAGES - 2 ahead) or 0 (staged one
# step further ahead)
WGMMA_IN_FLIGHT = 1


def _stages(c: Contraction, shared_limit: int = STATIC_SHARED) -> int:
    """Buffers of `kc` staged steps: 2 (double buffering); on the fp32 SIMT path with a side
    copied by `cp.async` (`simt_async`), `SIMT_STAGES` where they fit the device's
    `shared_limit`; on the 16-bit tensor cores as many as fit in `gpu.HALF_SHARED` and
    `shared_limit`, up to `HALF_STAGES` (the copies of the next stages - 1 steps in flight
    while one is computed; the tile is chosen so that two fit: `gpu._tile_shape`)."""
    if gpu_map.wgmma_tile(c, shared_limit):
        return gpu_map.WGMMA_STAGES
    if c.simt_async:
        return max(2, min(SIMT_STAGES, shared_limit // _stage_bytes(c)))
    if not _staged_half(c):
        return 2
    return max(2, min(HALF_STAGES, min(gpu_map.HALF_SHARED, shared_limit) // _stage_bytes(c)))


def _stage_bytes(c: Contraction) -> int:
    """The bytes of one buffer of a contraction's staged steps, both sides: 16-bit values
    as they are, fp32 rows padded by `PAD`."""
    if _staged_half(c):
        return gpu_map.half_stage_bytes(c.ra, c.rb, c.kc)
    total = 0
    for side, exports in (("a", c.a_exports), ("b", c.b_exports)):
        rows, cols = _staged_shapes(c)[side]
        total += sum(rows * (cols + PAD) * _reg(t).itemsize for _, t in exports)
    return total


def simt_at(r: int, thread: str, i: str) -> str:
    """The tile position of row (or column) `i` of a thread's r on the fp32 SIMT path: in
    groups of 4 neighbours, 64 apart, where r is a multiple of 4 (a staged `[kk][at]` row's 4
    values are one 16-byte read: `thread * 4 + i % 4 + (i / 4) * 64`), else
    `thread + 16 i`."""
    n = TILE_THREADS
    if r % VECTOR:
        return f"{thread} + {i} * {n}"
    return f"({i} >> 2) * {VECTOR * n} + {thread} * {VECTOR} + ({i} & 3)"


def _staged_shapes(c: Contraction) -> dict[str, tuple[int, int]]:
    """side -> (rows, columns) of one buffer of its staged values (before an fp32 row's
    padding): (kc, tile width), or (tile width, kc) where the reduction is innermost
    (`k_inner`)."""
    shapes = {}
    for side, width in (("a", TILE_THREADS * c.ra), ("b", TILE_THREADS * c.rb)):
        shapes[side] = (width, c.kc) if c.k_inner(side) else (c.kc, width)
    return shapes


def _k_padded(c: Contraction) -> int:
    """The values of a row of a transposed side's K-major copy: the reduction's steps,
    rounded up to 16 bytes (a tensor map's strides are multiples of 16 bytes)."""
    return -(-c.red.loops[0].extent // VECTOR) * VECTOR


def _wgmma_k_major(c: Contraction, side: str) -> bool:
    """Whether the wgmma pipeline stages `side` K-major: as it is laid out (`k_inner`), or
    always for TF32 (a side along its outputs is read from its K-major copy)."""
    return c.mma == "tf32" or c.k_inner(side)


def transpose_kernel(kernel: Kernel, c: Contraction, side: str, symbol: str, head: str) -> tuple:
    """(source, launch) of the launch that copies TF32 `side` (one plain load contiguous
    along its outputs) K-major into its scratch buffer `fg_t<side>` before the contraction:
    element (batch, position, step) at ((batch * n + position) * `_k_padded` + step), steps
    past the reduction 0. 32 x 32 tiles through shared memory, so that both the reads (along
    the positions) and the writes (along the steps) are coalesced. `head` is the kernel's
    parameter list; built for sm_90a alone (elsewhere the launch does nothing: the
    contraction reads the side as it is)."""
    (load,) = c.a_stmts if side == "a" else c.b_stmts
    (loop,) = c.a_loops if side == "a" else c.b_loops
    red, n, k4 = c.red.loops[0], loop.extent, _k_padded(c)
    nc = c.nc
    names = [f"const long long {loop.var.name} = fg_m, {red.var.name} = fg_k;"]
    names += [f"const long long {lp.var.name} = ic;" for lp in c.c_loops]
    grid = (-(-k4 // 32), min(-(-n // 32), 65535), min(nc, 65535))
    src = f"""extern "C" __global__ void {symbol}({head}) {{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ float fg_tile[32][33];
  for (long long ic = blockIdx.z; ic < {nc}LL; ic += gridDim.z)
  for (long long m0 = blockIdx.y * 32LL; m0 < {n}LL; m0 += gridDim.y * 32LL) {{
    const long long k0 = blockIdx.x * 32LL;
    for (int i = threadIdx.y; i < 32; i += 8) {{
      const long long fg_k = k0 + i, fg_m = m0 + threadIdx.x;
      float v = 0.0f;
      if (fg_k < {red.extent}LL && fg_m < {n}LL) {{
        {" ".join(names)}
        v = {load.param.name}[{index(load.index)}];
      }}
      fg_tile[i][threadIdx.x] = v;
    }}
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {{
      const long long fg_m = m0 + i, fg_k = k0 + threadIdx.x;
      if (fg_m < {n}LL && fg_k < {k4}LL)
        fg_t{side}[(ic * {n}LL + fg_m) * {k4}LL + fg_k] = fg_tile[threadIdx.x][i];
    }}
    __syncthreads();
  }}
#endif
}}"""
    return src, CudaLaunch(symbol, grid, (32, 8, 1)), nc * n * k4


def _wgmma_item(c: Contraction) -> int:
    """The bytes of one staged value in the wgmma pipeline: 4 (fp32 read as TF32) or 2."""
    return 4 if c.mma == "tf32" else 2


def _staged_half(c: Contraction) -> bool:
    """The sides are staged in shared memory as 16-bit values (the 16-bit tensor cores)."""
    return c.mma in HALF_MMA


def tma_maps(kernel: Kernel, c: Contraction, transposed: tuple = ()) -> tuple[TensorMap, ...]:
    """The two sides' tensor maps for `tma_steps`, or () where a side's load is not one
    the Tensor Memory Accelerator can copy: its buffer seen as rows along the side's
    contiguous axis (the reduction for a K-major side, its outputs for an MN-major one),
    the other axis next, then at most one batch loop, each step a positive stride that
    leaves the rows apart (16-byte multiples: `gpu._vector_side` saw to those). A side in
    `transposed` is read from its K-major copy instead, the scratch buffer after the
    kernel's parameters that `transpose_kernel` fills (rows of `_k_padded` values)."""
    maps = []
    red = c.red.loops[0]
    for side, loops, stmts in (("a", c.a_loops, c.a_stmts), ("b", c.b_loops, c.b_stmts)):
        (load,) = stmts
        (loop,) = loops
        if len(c.c_loops) > 1 or load.index.has_divmod():
            return ()
        rows = TILE_THREADS * (c.ra if side == "a" else c.rb)
        if side in transposed:
            k4 = _k_padded(c)
            batch = tuple(lp.extent for lp in c.c_loops)
            param = len(kernel.params) + transposed.index(side)
            strides = (k4 * 4,) + ((loop.extent * k4 * 4,) if batch else ())
            dims = (red.extent, loop.extent, *batch)
            maps.append(
                TensorMap(param, "float32", 0, dims, strides, (c.kc, rows) + (1,) * len(batch))
            )
            continue
        axes = [red, loop] if c.k_inner(side) else [loop, red]
        axes += c.c_loops
        coefs = [load.index.coef(lp.var) for lp in axes]
        if coefs[0] != 1 or len(load.index.terms) != sum(1 for k in coefs if k):
            return ()
        dims = [lp.extent for lp in axes]
        size = load.dtype.itemsize
        for i in range(1, len(axes)):  # each axis outside the one before it
            if coefs[i] < dims[i - 1] * coefs[i - 1] or coefs[i] * size % 16:
                return ()
        box = (c.kc, rows) if c.k_inner(side) else (64, c.kc)
        box += (1,) * len(c.c_loops)
        param = kernel.params.index(load.param)
        strides = tuple(k * size for k in coefs[1:])
        realign = c.mma == "tf32"  # (`tma_stage` adds the shift to its steps)
        maps.append(
            TensorMap(param, load.dtype.name, load.index.const, tuple(dims), strides, box, realign)
        )
    return tuple(maps)


class _Renderer:
    """Prints one launch of a `GpuKernel`: `part` is "all" (the whole kernel), or "partials"
    and "final" for the two passes of a split reduction."""

    def __init__(self, gpu: GpuKernel, part: str = "all", shared_limit: int = STATIC_SHARED):
        self.gpu, self.k, self.part = gpu, gpu.kernel, part
        self.shared_limit = shared_limit  # the device's shared memory per block
        self.lines: list[str] = []
        self.types: dict[str, DType] = {}
        self.shared: list[str] = []
        self.shared_bytes = 0  # static (`__shared__` arrays)
        self.dynamic_bytes = 0  # dynamic (`FG_DYNAMIC_SHARED`), asked for at launch
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
        below NARROW_LIMIT): a GPU divides 64-bit integers by a constant in many times the
        instructions."""
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
                    self.line(depth + 1, f"{_reg(dt).cuda} {acc}_l1 = {zero}, {acc}_l2 = {zero}, "
                                         f"{acc}_l3 = {zero};")  # fmt: skip
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
        dt = _reg(dt)
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
        m, total, t = step.acc_max, step.acc_sum, _reg(step.dtype).cuda
        if self.gpu.mode == "warp":
            self.line(depth, f"fg_warp_allreduce_online<{t}>({m}, {total});")
            return
        self.shared.append(f"  __shared__ {t} {m}_shared[32];")
        self.shared.append(f"  __shared__ {t} {total}_shared[32];")
        self.shared_bytes += 64 * _reg(step.dtype).itemsize
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

    def tiled(self, c: Contraction) -> None:
        """A contraction through shared memory: see `codegen/gpu.py`'s `Contraction`.

        Each side's values for `kc` reduction steps go to `<side>_<value>[buffer][kk][at]`
        (two buffers: the next step's copy is issued before this step's arithmetic), rows
        padded by `PAD` (16-byte aligned, and a transposed store spreads over the banks).
        16-bit tensor-core sides: up to `HALF_STAGES` buffers (`_stages`), rows unpadded but
        swizzled (`staged`), and a side contiguous along the reduction goes to
        `<side>_<value>[buffer][at][kk]` instead (`Contraction.k_inner`)."""
        half, stages = _staged_half(c), _stages(c, self.shared_limit)
        # past 48 KiB the staged buffers are carved from dynamic shared memory (the launch
        # asks for it; the driver is told the kernel may use that much)
        dynamic = stages * _stage_bytes(c) > STATIC_SHARED
        if dynamic:
            self.shared.append("  FG_DYNAMIC_SHARED(fg_dynamic);")
        for side, exports in (("a", c.a_exports), ("b", c.b_exports)):
            rows, cols = _staged_shapes(c)[side]
            for name, t in exports:
                t_smem, pad = (mem_type(t), 0) if half else (t.cuda, PAD)
                size = t.itemsize if half else _reg(t).itemsize
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
        self.wgmma = gpu_map.wgmma_tile(c, self.shared_limit)
        if self.wgmma and c.mma == "tf32":  # TF32 through the TMA pipeline alone
            sides = (("a", c.a_vector), ("b", c.b_vector))
            self.transposes = [side for side, vector in sides if vector == "m"]
            self.tensor_maps = tma_maps(self.k, c, tuple(self.transposes)) if WGMMA_TMA else ()
            if not self.tensor_maps:
                self.wgmma, self.transposes = False, []
        elif self.wgmma:
            self.tensor_maps = tma_maps(self.k, c) if WGMMA_TMA else ()
        if self.wgmma:  # room to align the wgmma pipeline's buffers to 1024 bytes
            self.dynamic_bytes += 1024
        if self.tensor_maps:  # each buffer's barriers: its copies landed; its readers are done
            stages = _stages(c, self.shared_limit)
            self.shared.append("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")
            self.shared.append(f"  __shared__ __align__(8) unsigned long long fg_full[{stages}], "
                               f"fg_empty[{stages}];")  # fmt: skip
            self.shared.append("#endif")
            self.shared_bytes += 16 * stages
        if c.mma == "tf32":  # a warp's 16x16 outputs on their way to the epilogue
            warps = MMA_WARPS[0] * MMA_WARPS[1]
            self.shared.append(f"  __shared__ __align__(32) float fg_out[{warps}][{MMA * MMA}];")
            self.shared_bytes += warps * MMA * MMA * 4
        vectors = [s for s, v in ((c.a_stmts, c.a_vector), (c.b_stmts, c.b_vector)) if v]
        if vectors:  # 16-byte copies need 16-byte aligned buffers, known only now
            names = dict.fromkeys(s[0].param.name for s in vectors)
            self.line(1, f"const bool fg_vec = {' && '.join(f'fg_aligned16({n})' for n in names)};")
        ta, tb = TILE_THREADS * c.ra, TILE_THREADS * c.rb
        self.line(1, "const int tid = threadIdx.y * blockDim.x + threadIdx.x;")
        if self.tensor_maps:  # the block's steps so far, every tile's: the barriers' phases
            self.line(0, "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")
            self.line(1, "unsigned fg_t0 = 0;")
            self.line(0, "#endif")
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

    def pipeline(self, c: Contraction, mma: bool) -> None:
        """One output tile: stage step 0, then per step stage the next into the other buffer,
        wait for this one (`fg_copy_wait`: the asynchronous copies), accumulate, store; a
        16-bit contraction keeps more steps in flight (`stages_ahead`). `mma`: on tensor
        cores (else the fp32 path, which a 16-bit contraction takes below sm_80)."""
        red, acc, kc = c.red, c.red.init.acc, c.kc
        dt, half = red.init.dtype, _staged_half(c)
        d = 3
        if mma and half:
            fa, fb = self.warp_fragments(c)
            self.line(d, f"float {acc}_frag[{fa}][{fb}][4];  // m16n8 C fragments")
            self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {fa}; ++i)")
            self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {fb}; ++j)")
            self.line(d, f"#pragma unroll\n{'  ' * d}for (int r = 0; r < 4; ++r) "
                         f"{acc}_frag[i][j][r] = 0.0f;")  # fmt: skip
            self.warp_ids(d)
            self.ldmatrix_rows(c, d)
        elif mma:
            fa, fb = (
                c.ra * TILE_THREADS // MMA_WARPS[0] // MMA,
                c.rb * TILE_THREADS // MMA_WARPS[1] // MMA,
            )
            self.line(d, f"{WMMA}fragment<{WMMA}accumulator, 16, 16, 8, float> "
                         f"{acc}_frag[{fa}][{fb}];")  # fmt: skip
            self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {fa}; ++i)")
            self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {fb}; ++j) "
                         f"{WMMA}fill_fragment({acc}_frag[i][j], 0.0f);")  # fmt: skip
            self.warp_ids(d)
        else:
            init = literal(red.init.value, dt)
            self.line(d, f"{dt.cuda} {acc}_tile[{c.ra}][{c.rb}];")
            self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {c.ra}; ++i)")
            self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {c.rb}; ++j) "
                         f"{acc}_tile[i][j] = {init};")  # fmt: skip
        self.line(d, f"const int fg_steps = (int)(({red.length}LL + {kc - 1}) / {kc});")
        ahead = half or c.simt_async  # else two buffers, two barriers a step
        if ahead:
            stages = _stages(c, self.shared_limit)
            self.stages_ahead(c, d, stages, stages - 1, self.stage)
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
            self.mma_step(c, fa, fb, d + 1)
        else:
            self.simt_step(c, d + 1)
        if not ahead:
            self.line(d + 1, "__syncthreads();  // read before the step after next overwrites it")
        self.line(d, "}")
        if ahead:  # the block's next tile (a grid-stride loop) stages its first steps
            self.line(d, "__syncthreads();  // once every warp is done with the last")
        if mma and half:
            self.mma16_epilogue(c, fa, fb, d)
            return
        if mma:
            self.mma_epilogue(c, fa, fb, d)
            return
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {c.ra}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {c.rb}; ++j) {{")
        self.line(d + 1, f"const long long ia = tile_a + {simt_at(c.ra, 'threadIdx.y', 'i')};")
        self.line(d + 1, f"const long long ib = tile_b + {simt_at(c.rb, 'threadIdx.x', 'j')};")
        self.line(d + 1, f"if (ia < {c.na}LL && ib < {c.nb}LL) {{")
        self.output(c, f"{acc}_tile[i][j]", d + 2)
        self.line(d + 1, "}")
        self.line(d, "}")

    def wgmma_pipeline(self, c: Contraction) -> None:
        """One output tile on Hopper's warpgroup tensor cores (sm_90a): the block's two
        warpgroups each own 64 of the tile's 128 a-side rows and all 256 b-side columns, a
        64 x 256 fp32 accumulator (128 registers a thread). Steps are staged in
        `WGMMA_STAGES` buffers laid out as `wgmma` reads them (`wgmma_offset`): by every
        thread's `cp.async` (`copy_steps`), or, where `WGMMA_TMA` is on and the sides have
        tensor maps and the buffers are 16-byte aligned, by the Tensor Memory Accelerator
        (`tma_steps`). Each step
        is four m64n256k16 products (`wgmma_products`), left running while the next is
        prepared; each lane then runs the epilogue of the outputs it holds."""
        red, kc, d = c.red, c.kc, 3
        stages = _stages(c, self.shared_limit)
        self.line(d, "unsigned char* const fg_sa = fg_dynamic + ((1024u - ((unsigned)"
                     "__cvta_generic_to_shared(fg_dynamic) & 1023u)) & 1023u);")  # fmt: skip
        self.line(d, f"unsigned char* const fg_sb = fg_sa + {stages * self.wgmma_bytes(c, 'a')};")
        self.line(d, "const int fg_g = tid >> 7;  // this warpgroup's rows: 64 fg_g ...")
        self.line(d, "float fg_d[128];")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < 128; ++i) fg_d[i] = 0.0f;")
        self.line(d, f"const int fg_steps = (int)(({red.length}LL + {kc - 1}) / {kc});")
        if c.mma == "tf32":  # any alignment (`TensorMap.realign`, `transpose_kernel`)
            for side, m in zip("ab", self.tensor_maps):
                if m.realign:  # values the side's map starts before its view
                    ref = f"{self.k.params[m.param].name} + {m.offset}"
                    self.line(d, f"const int fg_shift_{side} = (int)(((unsigned long long)({ref}) "
                                 "& 15ull) >> 2);")  # fmt: skip
            self.tma_steps(c, stages, d)
        elif self.tensor_maps:
            self.line(d, "if (fg_vec) {  // the Tensor Memory Accelerator's copies")
            self.tma_steps(c, stages, d + 1)
            self.line(d, "} else {  // a buffer is not 16-byte aligned")
            self.copy_steps(c, stages, d + 1)
            self.line(d, "}")
        else:
            self.copy_steps(c, stages, d)
        self.line(d, "const int fg_w4 = (tid >> 5) & 3, fg_ln = tid & 31;")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < 32; ++j)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int r = 0; r < 4; ++r) {{")
        self.line(d + 1, "const long long ia = tile_a + fg_g * 64 + fg_w4 * 16 + (fg_ln >> 2) + "
                         "(r >> 1) * 8;")  # fmt: skip
        self.line(d + 1, "const long long ib = tile_b + j * 8 + (fg_ln & 3) * 2 + (r & 1);")
        self.line(d + 1, f"if (ia < {c.na}LL && ib < {c.nb}LL) {{")
        self.output(c, "fg_d[j * 4 + r]", d + 2)
        self.line(d + 1, "}")
        self.line(d, "}")

    def wgmma_products(self, c: Contraction, buf: str, d: int) -> None:
        """The warpgroup's four m64n256k16 products of the step in buffer `buf`, issued
        together as one group (left running)."""
        self.line(d, "fg_wgmma_fence();")
        bf16 = "true" if c.mma == "bfloat16" else "false"
        ta, tb = (int(not c.k_inner(side)) for side in "ab")
        call = (
            "fg_wgmma_64x256_tf32(" if c.mma == "tf32" else f"fg_wgmma_64x256<{bf16}, {ta}, {tb}>("
        )
        for ks in range(0, c.kc, 32 // _wgmma_item(c)):  # 32 bytes of steps a product
            descs = []
            for side, base in (("a", "fg_sa"), ("b", "fg_sb")):
                at = "fg_g * 64" if side == "a" else "0"
                start = f"{base} + {buf} * {self.wgmma_bytes(c, side)} + "
                start += self.wgmma_offset(c, side, at, str(ks))
                lbo, sbo = self.wgmma_strides(c, side)
                descs.append(f"fg_wgmma_desc({start}, {lbo}, {sbo})")
            self.line(d, f"{call}fg_d, {descs[0]},")
            self.line(d + 2, f"{descs[1]});")
        self.line(d, "fg_wgmma_commit();")

    def tma_steps(self, c: Contraction, stages: int, d: int) -> None:
        """The tile's steps through the Tensor Memory Accelerator: thread 0 issues each
        step's copies (`tma_stage`) `stages` - 1 steps ahead into the buffer the step before
        was read from, once all 8 warps have said they are done with it (`fg_empty`: each
        warp's lane 0 arrives once the warpgroup's products of that step are complete); the
        copies' bytes complete `fg_full`, which every thread waits on before its products.
        No barrier across the block: the barriers' phases count the block's steps over all
        its tiles (`fg_t0`), so a buffer's parity is that count / stages."""
        self.line(d, "if (fg_t0 == 0) {  // the block's first tile: the barriers, once")
        self.line(d + 1, "if (tid == 0) {")
        self.line(d + 2, f"for (int s = 0; s < {stages}; ++s) {{")
        self.line(d + 3, "fg_mbar_init(&fg_full[s], 1);")
        self.line(d + 3, f"fg_mbar_init(&fg_empty[s], {TILE_THREADS * TILE_THREADS // 32});")
        self.line(d + 2, "}")
        self.line(d + 2, "fg_mbar_init_fence();")
        self.line(d + 1, "}")
        self.line(d + 1, "__syncthreads();")
        self.line(d, "}")
        self.line(d, "if (tid == 0) {")
        self.line(d + 1, f"for (int p = 0; p < {stages - 1} && p < fg_steps; ++p) {{")
        self.tma_stage(c, stages, "p", d + 2)
        self.line(d + 1, "}")
        self.line(d, "}")
        self.line(d, "__syncwarp();")
        self.line(d, "for (int kt = 0; kt < fg_steps; ++kt) {")
        self.line(d + 1, "const unsigned fg_n = fg_t0 + kt;")
        self.line(d + 1, f"fg_mbar_wait(&fg_full[fg_n % {stages}], fg_n / {stages} & 1u);")
        self.wgmma_products(c, f"(fg_n % {stages})", d + 1)
        self.line(d + 1, "fg_wgmma_wait<1>();  // step kt - 1's products are complete")
        self.line(d + 1, "if (kt > 0 && (tid & 31) == 0) "
                         f"fg_mbar_arrive(&fg_empty[(fg_n - 1) % {stages}]);")  # fmt: skip
        self.line(d + 1, f"if (tid == 0 && kt + {stages - 1} < fg_steps) {{")
        self.tma_stage(c, stages, f"kt + {stages - 1}", d + 2)
        self.line(d + 1, "}")
        self.line(d + 1, "__syncwarp();")
        self.line(d, "}")
        self.line(d, "fg_wgmma_wait<0>();")
        self.line(d, "fg_wgmma_pin(fg_d);")
        self.line(d, "if (fg_steps > 0 && (tid & 31) == 0) "
                     f"fg_mbar_arrive(&fg_empty[(fg_t0 + fg_steps - 1) % {stages}]);")  # fmt: skip
        self.line(d, "fg_t0 += fg_steps;")

    def tma_stage(self, c: Contraction, stages: int, step: str, d: int) -> None:
        """Thread 0 issues the copies of the tile's step `step` (wgmma_offset's layouts: a
        K-major side is one box of its rows x 64 steps, an MN-major one 64 x 64 boxes side by
        side), once its buffer's last readers are done."""
        self.line(d, "{")
        self.line(d + 1, f"const unsigned fg_p = fg_t0 + {step}, fg_s = fg_p % {stages};")
        self.line(d + 1, f"fg_mbar_wait(&fg_empty[fg_s], (fg_p / {stages} & 1u) ^ 1u);")
        total = self.wgmma_bytes(c, "a") + self.wgmma_bytes(c, "b")
        self.line(d + 1, f"fg_mbar_expect(&fg_full[fg_s], {total});")
        self.line(d + 1, f"const int fg_k = (int)({step}) * {c.kc};")
        for side, tmap, m in zip("ab", ("fg_tma", "fg_tmb"), self.tensor_maps):
            base = f"fg_s{side} + fg_s * {self.wgmma_bytes(c, side)}"
            batch = ", (int)ic" if len(m.dims) == 3 else ""
            call = "fg_tma_3d" if batch else "fg_tma_2d"
            if _wgmma_k_major(c, side):
                k = f"fg_k + fg_shift_{side}" if m.realign else "fg_k"
                self.line(d + 1, f"{call}({base}, &{tmap}, {k}, (int)tile_{side}{batch}, "
                                 f"&fg_full[fg_s]);")  # fmt: skip
                continue
            for i in range(16 * (c.ra if side == "a" else c.rb) // 64):
                self.line(d + 1, f"{call}({base} + {i * c.kc * 128}, &{tmap}, (int)tile_{side} + "
                                 f"{64 * i}, fg_k{batch}, &fg_full[fg_s]);")  # fmt: skip
        self.line(d, "}")

    def copy_steps(self, c: Contraction, stages: int, d: int) -> None:
        """The tile's steps staged by every thread's `cp.async` copies (`stage`),
        `stages` - 1 - `WGMMA_IN_FLIGHT` steps ahead, one barrier a step (`stages_ahead`:
        the copies fenced for the tensor cores' proxy before it), each step's products left
        running while the next is staged."""
        ahead = stages - 1 - WGMMA_IN_FLIGHT
        self.stages_ahead(c, d, stages, ahead, functools.partial(self.stage, wgmma=True), True)
        self.wgmma_products(c, "fg_buf", d + 1)
        self.line(d + 1, f"fg_wgmma_wait<{WGMMA_IN_FLIGHT}>();  // all but the newest in flight")
        self.line(d, "}")
        self.line(d, "fg_wgmma_wait<0>();")
        self.line(d, "fg_wgmma_pin(fg_d);")
        self.line(d, "__syncthreads();  // the buffers are free for the block's next tile")

    @staticmethod
    def wgmma_bytes(c: Contraction, side: str) -> int:
        """The bytes of one buffer of `side` in the wgmma pipeline: kc steps of its tile."""
        return _wgmma_item(c) * TILE_THREADS * (c.ra if side == "a" else c.rb) * c.kc

    @staticmethod
    def wgmma_offset(c: Contraction, side: str, at: str, kk: str) -> str:
        """The byte offset in a wgmma buffer of `side`'s value at tile position `at`, step
        `kk`, in the 128-byte swizzle's canonical layouts: K-major (a side contiguous along
        the reduction: rows of the kc steps, 128 bytes: 64 16-bit ones or 32 fp32 ones) or
        MN-major (16-bit only: 64-wide column blocks of kc rows of 128 bytes, one block after
        another)."""
        if _wgmma_k_major(c, side):
            e = _wgmma_item(c)
            shift = {2: 3, 4: 2}[e]  # a 16-byte chunk's steps: 8 or 4
            return (
                f"({at}) * 128 + (((({kk}) >> {shift}) ^ (({at}) & 7)) << 4) + "
                f"(({kk}) & {16 // e - 1}) * {e}"
            )
        return (
            f"(({at}) >> 6) * {c.kc * 128} + ({kk}) * 128 + "
            f"((((({at}) & 63) >> 3) ^ (({kk}) & 7)) << 4) + (({at}) & 7) * 2"
        )

    @staticmethod
    def wgmma_strides(c: Contraction, side: str) -> tuple[int, int]:
        """(leading, stride) byte offsets of a side's wgmma descriptor: K-major, the 8-row
        groups 1024 bytes apart (the leading offset unused); MN-major, the 64-wide column
        blocks kc * 128 bytes apart (leading), their 8-row groups 1024 (stride)."""
        if _wgmma_k_major(c, side):
            return 16, 1024
        if WGMMA_MN_SWAPPED:
            return 1024, c.kc * 128
        return c.kc * 128, 1024

    def wgmma_cell(self, c: Contraction, side: str, name: str, buf: str, kk: str, at: str) -> str:
        """The shared-memory cell of `side`'s value at step `kk`, tile position `at` in wgmma
        buffer `buf` (`wgmma_offset`'s layouts): what `stage` copies into for the wgmma
        pipeline."""
        (_, t), base = (c.a_exports if side == "a" else c.b_exports)[0], f"fg_s{side}"
        offset = self.wgmma_offset(c, side, at, kk)
        return f"*({mem_type(t)}*)({base} + ({buf}) * {self.wgmma_bytes(c, side)} + {offset})"

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
        """The epilogue of output (ia, ib) of batch ic, its reduction's result `value`."""
        self.index_vars(c.a_loops, "ia", d)
        self.index_vars(c.b_loops, "ib", d)
        self.index_vars(c.c_loops, "ic", d)
        dt = c.red.init.dtype
        self.line(d, f"{dt.cuda} {c.red.init.acc} = {value};")
        self.block(c.prefix + c.epilogue, d)

    def stage(self, c: Contraction, buf: str, k0: str, d: int, wgmma: bool = False) -> None:
        """Copy the `kc` reduction steps from `k0` of both sides into buffer `buf`; values
        outside the outputs or the reduction are 0 (the tensor cores sum whole steps).
        `wgmma`: into the wgmma pipeline's buffers (`wgmma_cell`)."""
        red, kc, threads = c.red, c.kc, TILE_THREADS * TILE_THREADS
        cell_of = self.wgmma_cell if wgmma else self.staged
        self.line(d, "{")
        self.line(d + 1, f"const long long k0 = {k0};")
        for side, loops, stmts, exports, width, kk_fastest, vector, extent in (
            ("a", c.a_loops, c.a_stmts, c.a_exports, TILE_THREADS * c.ra, c.a_kk_fastest,
             c.a_vector, c.na),
            ("b", c.b_loops, c.b_stmts, c.b_exports, TILE_THREADS * c.rb, c.b_kk_fastest,
             c.b_vector, c.nb),
        ):  # fmt: skip
            if not exports:
                continue
            inside = f"i{side} < {extent}LL && red < {red.length}LL"
            e = d + 1
            sizes = [extent, red.length, c.nc]
            sizes += [s.param.size for s in c.consts + stmts if isinstance(s, Load)]
            narrow = max(sizes) < NARROW_LIMIT  # the indices split, and loads, in 32 bits
            if vector:
                (name, _), (load,) = exports[0], stmts
                at_m, at_k = loops[0].var.name, red.loops[0].var.name
                token = _NARROW_INDEX.set(narrow)
                try:
                    ref = f"{load.param.name}[{index(load.index)}]"
                finally:
                    _NARROW_INDEX.reset(token)
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
                self.line(e, "} else {  // a buffer is not 16-byte aligned: one at a time")
                e += 1
            # each thread keeps one step (or one tile position) for every copy of a stage:
            # what depends on it alone is computed once a stage (or once a tile). Not in a
            # vector side's fallback for unaligned buffers, where the registers it holds
            # are better left to the main path.
            if kk_fastest and threads % kc == 0 and not vector:
                self.line(e, f"for (int at = tid / {kc}, kk = tid % {kc}; at < {width}; "
                             f"at += {threads // kc}) {{")  # fmt: skip
            elif not kk_fastest and threads % width == 0 and not vector:
                self.line(e, f"for (int kk = tid / {width}, at = tid % {width}; kk < {kc}; "
                             f"kk += {threads // width}) {{")  # fmt: skip
            else:
                kk, at = (
                    (f"e % {kc}", f"e / {kc}") if kk_fastest else (f"e / {width}", f"e % {width}")
                )
                self.line(e, f"for (int e = tid; e < {kc * width}; e += {threads}) {{")
                self.line(e + 1, f"const int kk = {kk}, at = {at};")
            self.line(e + 1, f"const long long i{side} = tile_{side} + at, red = k0 + kk;")
            self.line(e + 1, f"if ({inside}) {{")
            self.index_vars(loops, f"i{side}", e + 2, narrow)
            self.index_vars(c.c_loops, "ic", e + 2, narrow)
            self.index_vars(red.loops, "red", e + 2, narrow)
            token = _NARROW_INDEX.set(narrow)
            try:
                self.block(c.consts + stmts, e + 2)
            finally:
                _NARROW_INDEX.reset(token)
            half = _staged_half(c)  # exact: the value is a 16-bit number (`gpu._mma_kind`)
            for name, t in exports:
                value = _narrowed(name, t) if half else name
                self.line(e + 2, f"{cell_of(c, side, name, buf, 'kk', 'at')} = {value};")
            self.line(e + 1, "} else {")
            for name, t in exports:
                zero = _narrowed("0.0f", t) if half else f"({t.cuda})0"
                self.line(e + 2, f"{cell_of(c, side, name, buf, 'kk', 'at')} = {zero};")
            self.line(e + 1, "}")
            self.line(e, "}")
            if vector:
                self.line(d + 1, "}")
        self.line(d, "}")

    def simt_step(self, c: Contraction, d: int) -> None:
        """Every thread adds this step's terms into its ra x rb register tile (rows and
        columns `simt_at`: a row's 4 neighbours are one 16-byte shared read, and
        neighbouring threads read neighbouring words): per reduction step, its rows' and
        columns' staged values into registers, then the ra x rb terms. The steps are
        unrolled where the step is whole (every step when kc divides the reduction)."""
        red, kc = c.red, c.kc
        whole = red.length % kc == 0
        if not whole:
            self.line(d, f"const long long fg_left = {red.length}LL - (long long)kt * {kc};")
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
                ref = _widened(ref, t) if _staged_half(c) else ref
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

    def staged(self, c: Contraction, side: str, name: str, buf: str, kk: str, at: str) -> str:
        """The shared-memory cell of value `name` of `side` at reduction step `kk` and tile
        position `at`, as the side is laid out (`Contraction.k_inner`); 16-bit values
        sit in their row's 16-byte chunks swizzled (`fg_swizzle`)."""
        row, col = (at, kk) if c.k_inner(side) else (kk, at)
        if _staged_half(c):
            chunks = _staged_shapes(c)[side][1] // 8
            col = f"fg_swizzle<{chunks}>({row}, {col})"
        return f"{side}_{name}[{buf}][{row}][{col}]"

    def warp_ids(self, d: int) -> None:
        """The warp's place in the block's `MMA_WARPS` grid, and the thread's lane in it."""
        self.line(d, "const int fg_warp = tid >> 5, fg_lane = tid & 31;")
        self.line(
            d, f"const int fg_wa = fg_warp / {MMA_WARPS[1]}, fg_wb = fg_warp % {MMA_WARPS[1]};"
        )

    @staticmethod
    def warp_fragments(c: Contraction) -> tuple[int, int]:
        """(16-row A fragments, 8-column B fragments) of a warp's piece of a 16-bit tile:
        its (16 fa) x (8 fb) outputs are fa x fb m16n8 accumulator fragments."""
        wa, wb = c.ra * TILE_THREADS // MMA_WARPS[0], c.rb * TILE_THREADS // MMA_WARPS[1]
        return wa // 16, wb // 8

    def ldmatrix_rows(self, c: Contraction, d: int) -> None:
        """Which row of which 8x8 matrix this lane addresses in an `ldmatrix.x4`: lanes 8q..8q+7
        give matrix q's rows. The A side's four matrices are a 16x16 fragment's registers
        a0..a3: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15); the B
        side's are two 8-column fragments' b0, b1: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7,
        n 8-15), (k 8-15, n 8-15). A matrix's 8 rows run along the side's outputs where it
        is staged [at][kk] (each row 8 reduction steps: no .trans), else along the reduction
        (each row 8 outputs: .trans). `fg_<side>_at`, `fg_<side>_kk`: the lane's offsets."""
        self.line(d, "const int fg_q = fg_lane >> 3, fg_r = fg_lane & 7;")
        for side, at_bit, kk_bit in (
            ("a", "fg_q & 1", "fg_q >> 1"),
            ("b", "fg_q >> 1", "fg_q & 1"),
        ):
            at, kk = f"({at_bit}) * 8", f"({kk_bit}) * 8"
            if c.k_inner(side):
                at = f"{at} + fg_r"
            else:
                kk = f"{kk} + fg_r"
            self.line(d, f"const int fg_{side}_at = {at}, fg_{side}_kk = {kk};")

    def mma16_step(self, c: Contraction, fa: int, fb: int, d: int) -> None:
        """The warp's (16 fa) x (8 fb) outputs from this step on 16-bit tensor cores: per 16
        reduction steps, fa A fragments (16x16) and fb B fragments (16x8) through
        `ldmatrix.x4` (a B load gives two), then every pair through `mma.sync` m16n8k16."""
        acc, kc = c.red.init.acc, c.kc
        (a_name, _), (b_name, _) = c.a_exports[0], c.b_exports[0]
        wa, wb = 16 * fa, 8 * fb
        mma = "fg_mma_16816<true>" if c.mma == "bfloat16" else "fg_mma_16816<false>"
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int ks = 0; ks < {kc}; ks += 16) {{")
        self.line(d + 1, f"unsigned fg_a[{fa}][4], fg_b[{fb}][2];")
        for side, name, count, step, regs, w, who in (
            ("a", a_name, fa, 1, "fg_a[i][0], fg_a[i][1], fg_a[i][2], fg_a[i][3]", wa, "fg_wa"),
            ("b", b_name, fb, 2, "fg_b[i][0], fg_b[i][1], fg_b[i + 1][0], fg_b[i + 1][1]", wb,
             "fg_wb"),
        ):  # fmt: skip
            at = f"{who} * {w} + i * {16 // step} + fg_{side}_at"
            row = self.staged(c, side, name, "fg_buf", f"ks + fg_{side}_kk", at)
            trans = "false" if c.k_inner(side) else "true"
            self.line(d + 1, "#pragma unroll")
            self.line(d + 1, f"for (int i = 0; i < {count}; i += {step})")
            self.line(d + 2, f"fg_ldmatrix_x4<{trans}>({regs}, &{row});")
        self.products(fa, fb, f"{mma}({acc}_frag[i][j], fg_a[i], fg_b[j][0], fg_b[j][1]);", d)

    def products(self, fa: int, fb: int, call: str, d: int) -> None:
        """The warp's fa x fb fragment products of this step, `call` for fragment (i, j),
        unrolled; then the step's loop closes."""
        self.line(d + 1, f"#pragma unroll\n{'  ' * (d + 1)}for (int i = 0; i < {fa}; ++i)")
        self.line(d + 1, f"#pragma unroll\n{'  ' * (d + 1)}for (int j = 0; j < {fb}; ++j) {call}")
        self.line(d, "}")

    def mma16_epilogue(self, c: Contraction, fa: int, fb: int, d: int) -> None:
        """Each lane runs the epilogue of the outputs its accumulators hold: register r of
        fragment (i, j) is output (row g + 8 (r / 2), column 2 t + r % 2) of that 16x8
        fragment, for the lane's group g = lane / 4 and t = lane % 4 in it."""
        acc = c.red.init.acc
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {fa}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {fb}; ++j)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int r = 0; r < 4; ++r) {{")
        self.line(d + 1, f"const long long ia = tile_a + fg_wa * {16 * fa} + i * 16 + "
                         "(fg_lane >> 2) + (r >> 1) * 8;")  # fmt: skip
        self.line(d + 1, f"const long long ib = tile_b + fg_wb * {8 * fb} + j * 8 + "
                         "(fg_lane & 3) * 2 + (r & 1);")  # fmt: skip
        self.line(d + 1, f"if (ia < {c.na}LL && ib < {c.nb}LL) {{")
        self.output(c, f"{acc}_frag[i][j][r]", d + 2)
        self.line(d + 1, "}")
        self.line(d, "}")

    def mma_step(self, c: Contraction, fa: int, fb: int, d: int) -> None:
        """The warp's (16 fa) x (16 fb) outputs from this step on TF32 tensor cores (WMMA
        m16n16k8): the a side staged [kk][row] is a column-major 16xK matrix, the b side
        [kk][column] a row-major Kx16 one, their fp32 values rounded to TF32 (10-bit
        mantissas) first. (16-bit inputs: `mma16_step`.)"""
        acc, kc = c.red.init.acc, c.kc
        (a_name, _), (b_name, _) = c.a_exports[0], c.b_exports[0]
        wa, wb = c.ra * TILE_THREADS // MMA_WARPS[0], c.rb * TILE_THREADS // MMA_WARPS[1]
        k, t_in = 8, f"{WMMA}precision::tf32"
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int ks = 0; ks < {kc}; ks += {k}) {{")
        # a side staged [kk][at] is a column-major A (a row-major B); one staged [at][kk]
        # (`k_inner`), a row-major A (a column-major B)
        layouts = {}
        for side, matrix, r, inner in (("a", "matrix_a", c.ra, "row_major"),
                                       ("b", "matrix_b", c.rb, "col_major")):  # fmt: skip
            outer = "col_major" if inner == "row_major" else "row_major"
            k_inner = c.k_inner(side)
            layouts[side] = (kc + PAD, k_inner) if k_inner else (TILE_THREADS * r + PAD, k_inner)
            self.line(d + 1, f"{WMMA}fragment<{WMMA}{matrix}, 16, 16, {k}, {t_in}, "
                             f"{WMMA}{inner if k_inner else outer}> fg_{side}"
                             f"[{fa if side == 'a' else fb}];")  # fmt: skip
        for frag, count, src, w, who in (
            ("fg_a", fa, f"a_{a_name}", wa, "fg_wa"),
            ("fg_b", fb, f"b_{b_name}", wb, "fg_wb"),
        ):
            ld, k_inner = layouts[frag[-1]]
            at = f"{who} * {w} + i * 16"
            cell = f"[{at}][ks]" if k_inner else f"[ks][{at}]"
            self.line(d + 1, "#pragma unroll")
            self.line(d + 1, f"for (int i = 0; i < {count}; ++i) {{")
            self.line(d + 2, f"{WMMA}load_matrix_sync({frag}[i], &{src}[fg_buf]{cell}, {ld});")
            self.line(d + 2, "#pragma unroll")
            x = f"{frag}[i].x[t]"
            self.line(d + 2, f"for (int t = 0; t < {frag}[i].num_elements; ++t) "
                             f"{x} = {WMMA}__float_to_tf32({x});")  # fmt: skip
            self.line(d + 1, "}")
        self.products(
            fa, fb, f"{WMMA}mma_sync({acc}_frag[i][j], fg_a[i], fg_b[j], {acc}_frag[i][j]);", d
        )

    def mma_epilogue(self, c: Contraction, fa: int, fb: int, d: int) -> None:
        """TF32: each 16x16 fragment goes through the warp's slice of shared memory (WMMA
        does not say which lane holds which output), then its lanes run the epilogue 8
        outputs each."""
        acc = c.red.init.acc
        wa, wb = c.ra * TILE_THREADS // MMA_WARPS[0], c.rb * TILE_THREADS // MMA_WARPS[1]
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {fa}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {fb}; ++j) {{")
        self.line(d + 1, f"{WMMA}store_matrix_sync(fg_out[fg_warp], {acc}_frag[i][j], 16, "
                         f"{WMMA}mem_row_major);")  # fmt: skip
        self.line(d + 1, "__syncwarp();")
        self.line(d + 1, f"for (int e = fg_lane; e < {MMA * MMA}; e += 32) {{")
        self.line(d + 2, f"const long long ia = tile_a + fg_wa * {wa} + i * 16 + e / 16;")
        self.line(d + 2, f"const long long ib = tile_b + fg_wb * {wb} + j * 16 + e % 16;")
        self.line(d + 2, f"if (ia < {c.na}LL && ib < {c.nb}LL) {{")
        self.output(c, "fg_out[fg_warp][e]", d + 3)
        self.line(d + 2, "}")
        self.line(d + 1, "}")
        self.line(d + 1, "__syncwarp();  // read before the next fragment overwrites it")
        self.line(d, "}")

    def render(self, symbol: str) -> str:
        gpu = self.gpu
        params = []
        for p in self.k.params:
            const = "" if p.output else "const "
            params.append(f"{const}{mem_type(p.dtype)}* __restrict__ {p.name}")
        if gpu.split > 1:
            red = next(iter(gpu.reductions.values()))
            params.append(f"{mem_type(_reg(red.init.dtype))}* __restrict__ {PARTIAL}")
        extent = f"{gpu.extent}LL"
        if gpu.contraction is not None:
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
        blocks = HALF_MIN_BLOCKS if c is not None and _staged_half(c) else SIMT_MIN_BLOCKS
        if c is not None and (_staged_half(c) or c.simt_async) and blocks > 1:
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
        if self.lane is not None and id(s) in self.vector:
            part = f"{self.vector_names[id(s)]}.{'xyzw'[self.lane]}"
            if isinstance(s, Load):
                return self.decl(s.dst, s.dtype, part)
            return f"{part} = {s.value};"
        if isinstance(s, Load):
            # (widened by what memory holds: a 16-bit row's float32 scratch row is float)
            ref = _widened(f"{s.param.name}[{index(s.index)}]", s.param.dtype)
            if s.dtype.is_bool:
                ref = f"({ref} != 0)"
            if s.valid:
                ok = valid(s.valid)
                at = _widened(f"{s.param.name}[({ok}) ? {index(s.index)} : 0LL]", s.param.dtype)
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
                new = _narrowed(f"{_widened(cell, dt)} + {s.value}", dt)
                return f"if ({ok}) {cell} = {new};"
            if isinstance(s, ScatterAdd):  # this thread owns these columns: no atomics needed
                return f"if ({ok}) {s.param.name}[{at}] += {s.value};"
            ref = f"(({ok}) ? {_widened(f'{s.param.name}[({ok}) ? {at} : 0LL]', dt)} : 0)"
            return self.decl(s.dst, s.dtype, f"({ref} != 0)" if s.dtype.is_bool else ref)
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
            t = _reg(s.dtype).cuda
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
        if isinstance(s, Store):
            v = f"(unsigned char){s.value}" if s.param.dtype.is_bool else s.value
            store = f"{s.param.name}[{index(s.index)}] = {_narrowed(v, s.param.dtype)};"
            return f"if ({valid(s.valid)}) {store}" if s.valid else store
        raise TypeError(s)

    def alu(self, s: Alu) -> str:
        a = s.args
        src = self.types.get(a[0], s.dtype) if a else s.dtype
        if s.op is Ops.WHERE:
            return f"{a[0]} ? {a[1]} : {a[2]}"
        if s.op is Ops.CAST:
            if src.is_half:  # read as its type holds it (llvm.py's cast)
                a = [f"fg_f32({_narrowed(a[0], src)})"]
            if s.dtype.is_bool:
                return f"({a[0]} != 0)"
            if s.dtype.is_half:  # an explicit cast rounds, inside a kernel too
                return f"fg_f32({_narrowed(f'(float){a[0]}', s.dtype)})"
            if src.is_float and s.dtype.itemsize < 4:
                # through int, then wrap (as the CPU kernels and torch on the CPU): a direct
                # float -> unsigned char conversion saturates on the GPU and is UB in C++
                return f"({s.dtype.cuda})(int){a[0]}"
            return f"({s.dtype.cuda}){a[0]}"
        if s.op in COMPARISON and src.is_half:  # compared as their type holds them (llvm.py)
            a = [f"fg_f32({_narrowed(x, src)})" for x in a]
        src = _reg(src)
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
    """`kernel` as GPU code: its grid mapping (`codegen/gpu.py`), source and launches.
    `tf32`: fp32 contractions may use tensor cores (`fg.backends.cuda.matmul.allow_tf32`);
    `shared_limit`: the device's shared memory per block, dynamic included (a 16-bit
    contraction stages more steps where it is larger than 48 KiB)."""
    gpu = map_to_gpu(kernel, tf32, shared_limit)
    if gpu.split == 1:
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
        scratch = [(_reg(red.init.dtype), gpu.grid)]  # float32 partials of a 16-bit sum
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
