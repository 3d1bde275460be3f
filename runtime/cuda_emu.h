// fusegrad's CUDA emulator, the side a kernel sees: the CUDA C that codegen/cuda.py prints,
// compiled by the host g++ against this header. Kept light (C headers only) because every
// kernel module includes it; the threads and barriers live in cuda_emu_runtime.cpp, compiled
// once and loaded before any kernel module (runtime/cuda_emulator.py).
//
// What CUDA provides, the smallest way that is still faithful for a kernel's correctness:
// - every thread of a block is a real OS thread; blocks run one after another (so `__shared__`,
//   which becomes `static`, is one copy per block, as on the GPU);
// - threadIdx/blockIdx/blockDim/gridDim are per thread (__thread: no C++ TLS wrappers);
// - __syncthreads() is a real barrier (std::barrier) among the block's threads that have not
//   returned;
// - warp shuffles exchange values through per-block tables and that barrier, so every thread
//   of the block must call them together (the renderer calls them uniformly);
// - the device math functions are the C library's;
// - the 16-byte vector types the renderer uses (float4, int4) and __ldg / __stwb, a plain read
//   and write here
//   (the emulator is built with -fno-strict-aliasing, as a kernel reads a float buffer
//   through a float4 pointer).
// runtime/cuda_emulator.py appends one `fg_launch_<symbol>(void** args, grid, block)` per
// kernel that unpacks the arguments, as CUDA's kernelParams does, and calls fg_emu_launch.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__ inline
#define __host__
#define __forceinline__
#define __shared__ static
#define __launch_bounds__(...)

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

extern "C" {
void fg_emu_syncthreads();
// publish `value` for this thread, wait for the block, return thread `from_linear`'s value
uint64_t fg_emu_exchange(uint64_t value, unsigned from_linear);
void fg_emu_launch(void (*entry)(void**), void** args, dim3 grid, dim3 block);
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
