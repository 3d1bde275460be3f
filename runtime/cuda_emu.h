// fusegrad's CUDA emulator: the CUDA C that codegen/cuda.py prints, compiled by the host g++.
//
// What CUDA provides, the smallest way that is still faithful for a kernel's correctness:
// - every thread of a block is a real OS thread; blocks run one after another (so `__shared__`,
//   which becomes `static`, is one copy per block, as on the GPU);
// - threadIdx/blockIdx/blockDim/gridDim are thread_local;
// - __syncthreads() is a real barrier (std::barrier) among the block's threads that have not
//   returned;
// - warp shuffles exchange values through per-block tables and that barrier, so every thread
//   of the block must call them together (the renderer calls them uniformly);
// - the device math functions are the C library's.
// runtime/cuda_emulator.py appends one `fg_launch_<symbol>(void** args)` per kernel that
// unpacks the arguments, as CUDA's kernelParams does, and launches through fg_emu_launch.
#pragma once
#include <cmath>
#include <cstring>
#include <barrier>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#define __global__
#define __device__ inline
#define __host__
#define __forceinline__
#define __shared__ static
#define __launch_bounds__(...)

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;
static const int warpSize = 32;

namespace fg_emu {

struct Block {
  // __syncthreads; made afresh for every block, since a returned thread leaves it for good
  // (as on the GPU, where __syncthreads waits only for the threads that have not exited)
  std::optional<std::barrier<>> sync;
  std::vector<uint64_t> exchange[2];  // one slot per thread, for warp shuffles
};

thread_local Block* current_block = nullptr;
thread_local unsigned linear_tid = 0;
thread_local unsigned parity = 0;  // which exchange table this thread's next shuffle uses

// Every thread publishes its value, waits for all, reads its source's. The two tables take
// turns, so one barrier per shuffle suffices: a table is written again only two shuffles
// later, after a barrier that every reader of it has passed.
template <class T> inline T shuffle(T v, unsigned from_linear) {
  static_assert(sizeof(T) <= 8, "a shuffled value fits in 8 bytes");
  Block& b = *current_block;
  std::vector<uint64_t>& table = b.exchange[parity];
  parity ^= 1;
  uint64_t slot = 0;
  std::memcpy(&slot, &v, sizeof(T));
  table[linear_tid] = slot;
  b.sync->arrive_and_wait();
  uint64_t got = table[from_linear];
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

}  // namespace fg_emu

inline void __syncthreads() { fg_emu::current_block->sync->arrive_and_wait(); }

template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  unsigned lane = fg_emu::linear_tid % width;
  unsigned n = blockDim.x * blockDim.y * blockDim.z;
  unsigned from = fg_emu::linear_tid + delta;
  bool inside = lane + delta < (unsigned)width && from < n;
  return fg_emu::shuffle(v, inside ? from : fg_emu::linear_tid);
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, unsigned mask, int width = 32) {
  unsigned n = blockDim.x * blockDim.y * blockDim.z;
  unsigned from = fg_emu::linear_tid ^ mask;
  bool inside = from / width == fg_emu::linear_tid / width && from < n;
  return fg_emu::shuffle(v, inside ? from : fg_emu::linear_tid);
}
template <class T> inline T __shfl_sync(unsigned, T v, int src_lane, int width = 32) {
  unsigned n = blockDim.x * blockDim.y * blockDim.z;
  unsigned from = fg_emu::linear_tid / width * width + (unsigned)src_lane % width;
  return fg_emu::shuffle(v, from < n ? from : fg_emu::linear_tid);
}

inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }

namespace fg_emu {

// Run `entry(args)` over the grid: one OS thread per thread of a block, the blocks in turn.
inline void launch(void (*entry)(void**), void** args, dim3 grid, dim3 block) {
  static std::mutex one_launch_at_a_time;  // `__shared__` statics are one copy per kernel
  std::lock_guard<std::mutex> lock(one_launch_at_a_time);
  const unsigned nthreads = block.x * block.y * block.z;
  const unsigned long long nblocks = 1ULL * grid.x * grid.y * grid.z;
  Block b;
  b.exchange[0].assign(nthreads, 0);
  b.exchange[1].assign(nthreads, 0);
  std::barrier<> block_done(nthreads);  // every thread finishes a block before any starts the next
  auto worker = [&](unsigned tid) {
    current_block = &b;
    linear_tid = tid;
    blockDim = block;
    gridDim = grid;
    threadIdx = {tid % block.x, tid / block.x % block.y, tid / (block.x * block.y)};
    for (unsigned long long k = 0; k < nblocks; ++k) {
      blockIdx = {unsigned(k % grid.x), unsigned(k / grid.x % grid.y),
                  unsigned(k / (1ULL * grid.x * grid.y))};
      parity = 0;
      if (tid == 0) b.sync.emplace(nthreads);
      block_done.arrive_and_wait();  // the block's barrier is made before anyone syncs on it
      entry(args);
      b.sync->arrive_and_drop();
      block_done.arrive_and_wait();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(nthreads);
  for (unsigned t = 0; t < nthreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
}

}  // namespace fg_emu
