"""The device functions a CUDA kernel's source starts with (`cuda.cuda_kernel` picks them).

`PRELUDE` opens every kernel: `fg_max` (NaN-propagating, as numpy's `maximum`), the
counter-based hash of `RAND`, warp and block reductions (`fg_warp_allreduce`,
`fg_block_reduce`, and their online-softmax forms), and the 16-byte asynchronous copy
into shared memory (`fg_copy16_async`). `HALF_PRELUDE` follows where a kernel holds 16-bit
floats: their conversions, the staged tiles' swizzle and the warp-level tensor cores
(`fg_ldmatrix_x4`, `fg_mma_16816`). `WGMMA_PRELUDE` follows where a contraction has
Hopper's warpgroup pipeline (`cuda_wgmma.py`): wgmma, its descriptors, mbarriers and the
Tensor Memory Accelerator's copies. Each inline-PTX function has a lane-exact copy for
the CPU emulator in `runtime/cuda_emu.h`, or a plain-C++ branch it takes there.
"""

from __future__ import annotations

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

# 16-bit floats: their conversions, and the 16-bit contractions' staged layout and warp-level
# tensor cores
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

# Hopper's warpgroup tensor cores, sm_90a only (`WgmmaPipeline.wgmma_pipeline`; the emulator
# and other GPUs take the `mma.sync` pipeline beside it)
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
