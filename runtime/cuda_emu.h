// fusegrad's CUDA emulator, the side a kernel sees: the CUDA C that pipeline/cuda.py prints,
// compiled by the host g++ against this header. Kept light (C headers only) because every
// kernel module includes it; the threads and barriers live in cuda_emu_runtime.cpp, compiled
// once and loaded before any kernel module (runtime/cuda_emulator.py).
//
// What CUDA provides, the smallest way that is still faithful for a kernel's correctness:
// - every thread of a block is a real OS thread; blocks run one after another (so `__shared__`,
//   which becomes `static`, is one copy per block, as on the GPU); a launch's dynamic shared
//   memory (`extern __shared__` on the GPU) is `fg_emu_dynamic_shared()`, a buffer of the
//   launch's size filled with 0xff bytes (a read of what no thread wrote is a NaN, not a 0);
// - threadIdx/blockIdx/blockDim/gridDim are per thread (__thread: no C++ TLS wrappers);
// - __syncthreads() is a real barrier (std::barrier) among the block's threads that have not
//   returned;
// - warp shuffles exchange values through per-block tables and that barrier, so every thread
//   of the block must call them together (the renderer calls them uniformly);
// - the device math functions are the C library's;
// - __syncwarp() is the block's barrier (so, like the shuffles, the whole block calls it);
// - nvcuda::wmma's fragments (TF32 m16n16k8, which the TF32 contractions use; __half and
//   __nv_bfloat16 m16n16k16; fp32 accumulators) as whole matrices that every thread of the
//   warp holds and computes alike, __float_to_tf32 rounding as the GPU's cvt.rna.tf32.f32;
// - the warp-level tensor-core primitives the 16-bit contractions use (fg_ldmatrix_x4,
//   fg_mma_*_16816 in pipeline/cuda_prelude.py): lane-exact, each lane's registers holding
//   what the PTX ISA gives that lane (ldmatrix.m8n8.x4[.trans].b16, mma.sync m16n8k16 with
//   16-bit inputs and fp32 accumulators); the lanes trade their addresses and fragments
//   through a per-block table and the barrier, so the whole block calls them together;
// - __half and __nv_bfloat16 with their conversions to and from float;
// - the 16-byte vector types the renderer uses (float4, int4) and __ldg / __stwb, a plain read
//   and write here
//   (the emulator is built with -fno-strict-aliasing, as a kernel reads a float buffer
//   through a float4 pointer).
// runtime/cuda_emulator.py appends one `fg_launch_<symbol>(void** args, grid, block)` per
// kernel that unpacks the arguments, as CUDA's kernelParams does, and calls fg_emu_launch.
#pragma once
#define FG_CUDA_EMULATOR 1  // the kernels' helpers choose this emulation where the GPU has asm
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__ inline
#define __host__
#define __forceinline__
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct uint3 { unsigned int x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
struct dim3 { unsigned int x, y, z; };

extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern __thread dim3 blockDim;
extern __thread dim3 gridDim;
static const int warpSize = 32;
#define FG_EMU_SLOT 32

extern "C" {
void fg_emu_syncthreads();
// publish `value` for this thread, wait for the block, return thread `from_linear`'s value
uint64_t fg_emu_exchange(uint64_t value, unsigned from_linear);
// publish `bytes` (at most FG_EMU_SLOT) for this thread, wait for the block, return the
// block's table: thread t's bytes at table + t * FG_EMU_SLOT (valid until the next call)
const unsigned char* fg_emu_share(const void* value, unsigned bytes);
void fg_emu_launch(void (*entry)(void**), void** args, dim3 grid, dim3 block, unsigned shared);
// the launch's dynamic shared memory (`shared` bytes, 128-byte aligned; null when 0)
unsigned char* fg_emu_dynamic_shared();
}

inline void __syncthreads() { fg_emu_syncthreads(); }

namespace fg_emu {
inline unsigned linear_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline unsigned block_threads() { return blockDim.x * blockDim.y * blockDim.z; }
template <class T> inline T shuffle(T v, unsigned from_linear) {
  static_assert(sizeof(T) <= 8, "a shuffled value fits in 8 bytes");
  uint64_t slot = 0;
  std::memcpy(&slot, &v, sizeof(T));
  uint64_t got = fg_emu_exchange(slot, from_linear);
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}
}  // namespace fg_emu

template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  unsigned me = fg_emu::linear_tid(), from = me + delta;
  bool inside = me % width + delta < (unsigned)width && from < fg_emu::block_threads();
  return fg_emu::shuffle(v, inside ? from : me);
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, unsigned mask, int width = 32) {
  unsigned me = fg_emu::linear_tid(), from = me ^ mask;
  bool inside = from / width == me / width && from < fg_emu::block_threads();
  return fg_emu::shuffle(v, inside ? from : me);
}
template <class T> inline T __shfl_sync(unsigned, T v, int src_lane, int width = 32) {
  unsigned me = fg_emu::linear_tid();
  unsigned from = me / width * width + (unsigned)src_lane % width;
  return fg_emu::shuffle(v, from < fg_emu::block_threads() ? from : me);
}

inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }

inline void __syncwarp(unsigned = 0xffffffffu) { fg_emu_syncthreads(); }

// The 16-bit floats, as cuda_fp16.h / cuda_bf16.h give them to the kernels: storage types
// with conversions to float and back (to nearest even). float16 through the compiler's
// _Float16 (exact); bfloat16 in integers, as the CPU kernels do (a NaN stays a quiet NaN).
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
// the GPU's widening (cvt.f32.f16) gives every NaN the bits 0x7fffffff
inline float __half2float(__half h) {
  if ((h.x & 0x7fffu) > 0x7c00u) return __int_as_float(0x7fffffff);
  _Float16 f; std::memcpy(&f, &h.x, 2); return (float)f;
}
inline unsigned short __half_as_ushort(__half h) { return h.x; }
// the GPU's conversions (cvt.rn.f16.f32, cvt.rn.bf16.f32) give every NaN the bits 0x7fff
inline __half __float2half_rn(float v) {
  if (v != v) return __half{(unsigned short)0x7fffu};
  _Float16 f = (_Float16)v; __half h; std::memcpy(&h.x, &f, 2); return h;
}
inline __half __ushort_as_half(unsigned short x) { return __half{x}; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return __nv_bfloat16{x}; }
inline float __bfloat162float(__nv_bfloat16 h) { return __int_as_float((int)((uint32_t)h.x << 16)); }
inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  uint32_t bits = (uint32_t)__float_as_int(v);
  if (v != v) return __nv_bfloat16{(uint16_t)0x7fffu};
  bits = bits + 0x7fffu + ((bits >> 16) & 1u);
  return __nv_bfloat16{(uint16_t)(bits >> 16)};
}

// Tensor cores, as the kernels use them: m16n16k8 with TF32 inputs, m16n16k16 with __half or
// __nv_bfloat16 inputs, fp32 accumulators. A fragment is the whole matrix in every thread (the
// GPU spreads it over the warp's lanes; each lane's view here is the warp's), so load/mma/store
// give every thread the same result. Inputs are held as float: a 16-bit value widens exactly,
// and the product of two 16-bit values is exact in float, so fma and mul-then-add agree.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision { struct tf32 {}; }
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;
template <int M, int N, int K, class T, class L> struct fragment<matrix_a, M, N, K, T, L> {
  static const int num_elements = M * K;
  float x[M * K];  // (m, k) at x[m * K + k]
};
template <int M, int N, int K, class T, class L> struct fragment<matrix_b, M, N, K, T, L> {
  static const int num_elements = K * N;
  float x[K * N];  // (k, n) at x[k * N + n]
};
template <int M, int N, int K> struct fragment<accumulator, M, N, K, float, void> {
  static const int num_elements = M * N;
  float x[M * N];  // (m, n) at x[m * N + n]
};
// round to nearest (ties away from zero) at a 10-bit mantissa, as cvt.rna.tf32.f32
inline float __float_to_tf32(float f) {
  if (!std::isfinite(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, 4);
  return f;
}
// what a fragment of inputs of type T loads from shared memory: float for TF32, else T
template <class T> struct input { using type = T; };
template <> struct input<precision::tf32> { using type = float; };
inline float widen(float v) { return v; }
inline float widen(__half v) { return __half2float(v); }
inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<matrix_a, M, N, K, T, L>& a,
                             const typename input<T>::type* p, unsigned ldm) {
  constexpr bool row = std::is_same_v<L, row_major>;
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) a.x[m * K + k] = widen(row ? p[m * ldm + k] : p[k * ldm + m]);
}
template <int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<matrix_b, M, N, K, T, L>& b,
                             const typename input<T>::type* p, unsigned ldm) {
  constexpr bool row = std::is_same_v<L, row_major>;
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) b.x[k * N + n] = widen(row ? p[k * ldm + n] : p[n * ldm + k]);
}
template <int M, int N, int K>
inline void fill_fragment(fragment<accumulator, M, N, K, float>& c, float v) {
  for (int i = 0; i < M * N; ++i) c.x[i] = v;
}
template <int M, int N, int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d,
                     const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b,
                     const fragment<accumulator, M, N, K, float>& c) {
  float out[M * N];
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float s = c.x[m * N + n];
      for (int k = 0; k < K; ++k) s = std::fma(a.x[m * K + k], b.x[k * N + n], s);
      out[m * N + n] = s;
    }
  std::memcpy(d.x, out, sizeof out);
}
template <int M, int N, int K>
inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& c,
                              unsigned ldm, layout_t layout) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      (layout == mem_row_major ? p[m * ldm + n] : p[n * ldm + m]) = c.x[m * N + n];
}
}  // namespace wmma
}  // namespace nvcuda

// ---------------------------------------------------------------- warp-level tensor cores
// ldmatrix and mma.sync as the PTX ISA defines them per lane ("Warp-level matrix fragments":
// mma.m16n8k16 with .f16/.bf16 inputs; "ldmatrix"). A lane's `unsigned` holds two 16-bit
// values, the first (lower column) in its low half, as the GPU's .b32 registers do.
namespace fg_emu {
inline unsigned lane_id() { return linear_tid() & 31u; }
inline unsigned warp_base() { return linear_tid() & ~31u; }

// ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: lanes 8j..8j+7 give the addresses of
// rows 0..7 of matrix j (8 16-bit values each). Lane l receives in r[j], of matrix j, the pair
// (row l/4, columns 2(l%4), 2(l%4)+1); with .trans the transposed matrix's: (rows 2(l%4) and
// 2(l%4)+1, column l/4).
inline void ldmatrix(unsigned* r, unsigned count, bool trans, const void* row) {
  const unsigned char* table = fg_emu_share(&row, sizeof row);
  const unsigned lane = lane_id(), base = warp_base();
  auto row_of = [&](unsigned j, unsigned i) {
    const void* p;
    std::memcpy(&p, table + (base + 8 * j + i) * FG_EMU_SLOT, sizeof p);
    return (const uint16_t*)p;
  };
  for (unsigned j = 0; j < count; ++j) {
    uint16_t v[2];
    for (unsigned h = 0; h < 2; ++h)
      v[h] = trans ? row_of(j, 2 * (lane % 4) + h)[lane / 4] : row_of(j, lane / 4)[2 * (lane % 4) + h];
    r[j] = (unsigned)v[0] | (unsigned)v[1] << 16;
  }
}

inline float widen16(uint16_t bits, bool bf16) {
  if (bf16) return __int_as_float((int)((uint32_t)bits << 16));
  _Float16 f;
  std::memcpy(&f, &bits, 2);
  return (float)f;
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 d, a, b, c. Lane l is in
// group g = l/4 at t = l%4 of it:
//   a[0..3]: A(g, 2t..2t+1), A(g+8, 2t..), A(g, 2t+8..), A(g+8, 2t+8..)  (16 x 16, row)
//   b[0..1]: B(2t..2t+1, g), B(2t+8..2t+9, g)                             (16 x 8, col)
//   c, d[0..3]: C(g, 2t), C(g, 2t+1), C(g+8, 2t), C(g+8, 2t+1)           (16 x 8, fp32)
// The products of 16-bit values are exact in fp32; they are added to c in k's order.
inline void mma_m16n8k16(float* d, const unsigned* a, const unsigned* b, const float* c,
                         bool bf16) {
  struct Fragments { unsigned a[4], b[2]; } mine;
  std::memcpy(mine.a, a, sizeof mine.a);
  std::memcpy(mine.b, b, sizeof mine.b);
  const unsigned char* table = fg_emu_share(&mine, sizeof mine);
  const unsigned lane = lane_id(), base = warp_base();
  auto of = [&](unsigned l) {
    Fragments f;
    std::memcpy(&f, table + (base + l) * FG_EMU_SLOT, sizeof f);
    return f;
  };
  auto half = [&](unsigned word, unsigned k) { return widen16((uint16_t)(word >> 16 * (k % 2)), bf16); };
  auto A = [&](unsigned m, unsigned k) {
    return half(of(4 * (m % 8) + k % 8 / 2).a[m / 8 + 2 * (k / 8)], k);
  };
  auto B = [&](unsigned k, unsigned n) { return half(of(4 * n + k % 8 / 2).b[k / 8], k); };
  float out[4];
  for (unsigned r = 0; r < 4; ++r) {
    const unsigned m = lane / 4 + 8 * (r / 2), n = 2 * (lane % 4) + r % 2;
    float s = c[r];
    for (unsigned k = 0; k < 16; ++k) s = std::fma(A(m, k), B(k, n), s);
    out[r] = s;
  }
  std::memcpy(d, out, sizeof out);
}
}  // namespace fg_emu
