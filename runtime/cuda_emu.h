// fusegrad's CUDA emulator: the CUDA C that codegen/cuda.py prints, compiled by the host g++.
//
// What CUDA provides, the smallest way that is still faithful for a kernel's correctness:
// - every thread of a block is a real OS thread; blocks run one after another (so `__shared__`,
//   which becomes `static`, is one copy per block, as on the GPU);
// - threadIdx/blockIdx/blockDim/gridDim are thread_local;
// - __syncthreads() is a real barrier among the block's threads that have not returned;
// - warp shuffles exchange values through a per-block table between two barriers, so every
//   thread of the block must call them together (the renderer calls them uniformly);
// - the device math functions are the C library's.
// runtime/cuda_emulator.py appends one `fg_launch_<symbol>(void** args)` per kernel that
// unpacks the arguments, as CUDA's kernelParams does, and launches through fg_emu_launch.
#pragma once
#include <cmath>
#include <cstring>
#include <condition_variable>
#include <cstdint>
#include <mutex>
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

// A reusable barrier that threads may leave for good (a returned thread no longer counts,
// as on the GPU where __syncthreads waits only for the threads that have not exited).
struct Barrier {
  std::mutex m;
  std::condition_variable cv;
  unsigned expected = 0, arrived = 0, generation = 0;

  void release_locked() { arrived = 0; ++generation; cv.notify_all(); }
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    unsigned gen = generation;
    if (++arrived == expected) { release_locked(); return; }
    cv.wait(lock, [&] { return generation != gen; });
  }
  void leave() {
    std::lock_guard<std::mutex> lock(m);
    --expected;
    if (expected > 0 && arrived == expected) release_locked();
  }
};

struct Block {
  Barrier sync;                       // __syncthreads
  std::vector<uint64_t> exchange;     // one slot per thread, for warp shuffles
};

thread_local Block* current_block = nullptr;
thread_local unsigned linear_tid = 0;

template <class T> inline T shuffle(T v, unsigned from_linear) {
  static_assert(sizeof(T) <= 8, "a shuffled value fits in 8 bytes");
  Block& b = *current_block;
  uint64_t slot = 0;
  std::memcpy(&slot, &v, sizeof(T));
  b.exchange[linear_tid] = slot;
  b.sync.wait();
  uint64_t got = b.exchange[from_linear];
  b.sync.wait();  // nobody overwrites its slot before every thread has read
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

}  // namespace fg_emu

inline void __syncthreads() { fg_emu::current_block->sync.wait(); }

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
  b.exchange.assign(nthreads, 0);
  Barrier block_done;  // every thread finishes a block before any starts the next
  block_done.expected = nthreads;
  auto worker = [&](unsigned tid) {
    current_block = &b;
    linear_tid = tid;
    blockDim = block;
    gridDim = grid;
    threadIdx = {tid % block.x, tid / block.x % block.y, tid / (block.x * block.y)};
    for (unsigned long long k = 0; k < nblocks; ++k) {
      blockIdx = {unsigned(k % grid.x), unsigned(k / grid.x % grid.y),
                  unsigned(k / (1ULL * grid.x * grid.y))};
      if (tid == 0) {
        std::lock_guard<std::mutex> g(b.sync.m);
        b.sync.expected = nthreads;
      }
      block_done.wait();  // the barrier is reset before anyone syncs in this block
      entry(args);
      b.sync.leave();
      block_done.wait();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(nthreads);
  for (unsigned t = 0; t < nthreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
}

}  // namespace fg_emu
