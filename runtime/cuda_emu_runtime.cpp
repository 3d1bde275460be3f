// fusegrad's CUDA emulator, the side that runs kernels: one OS thread per thread of a block,
// the blocks in turn, real barriers. Compiled once into a shared library that
// runtime/cuda_emulator.py loads (RTLD_GLOBAL) before any kernel module; see cuda_emu.h.
#include "cuda_emu.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <barrier>
#include <functional>
#include <atomic>
#include <mutex>
#include <semaphore>
#include <optional>
#include <thread>
#include <vector>

__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread dim3 blockDim;
__thread dim3 gridDim;

namespace {

struct Block {
  // __syncthreads; made afresh for every block, since a returned thread leaves it for good
  // (as on the GPU, where __syncthreads waits only for the threads that have not exited).
  // Blocks take turns between two, so that the next block's is made while this one runs.
  std::optional<std::barrier<>> syncs[2];
  std::vector<uint64_t> exchange[2];  // one slot per thread, for warp shuffles
  std::vector<unsigned char> shared[2];  // FG_EMU_SLOT bytes per thread, for fg_emu_share
};

thread_local Block* current_block = nullptr;
thread_local std::barrier<>* current_sync = nullptr;  // this block's __syncthreads
thread_local unsigned parity = 0;  // which exchange table this thread's next shuffle uses
thread_local unsigned share_parity = 0;  // ... and which table its next fg_emu_share uses

}  // namespace

extern "C" void fg_emu_syncthreads() { current_sync->arrive_and_wait(); }

// Every thread publishes its value, waits for all, reads its source's. The two tables take
// turns, so one barrier per shuffle suffices: a table is written again only two shuffles
// later, after a barrier that every reader of it has passed.
extern "C" uint64_t fg_emu_exchange(uint64_t value, unsigned from_linear) {
  std::vector<uint64_t>& table = current_block->exchange[parity];
  parity ^= 1;
  table[fg_emu::linear_tid()] = value;
  current_sync->arrive_and_wait();
  return table[from_linear];
}

// fg_emu_exchange for a warp's fragments: every thread publishes its bytes, waits for all,
// and may read any thread's until its next call (the tables take turns as above).
extern "C" const unsigned char* fg_emu_share(const void* value, unsigned bytes) {
  std::vector<unsigned char>& table = current_block->shared[share_parity];
  share_parity ^= 1;
  std::memcpy(table.data() + fg_emu::linear_tid() * FG_EMU_SLOT, value, bytes);
  current_sync->arrive_and_wait();
  return table.data();
}

namespace {

// The OS threads that play a block's threads, kept between launches (starting 256 threads
// costs more than most emulated kernels). Worker t sleeps on its own semaphore until a
// launch needs a t-th thread, runs its part, and the last to finish wakes the launcher
// (through the pool's own counter and semaphore, which outlive every launch).
struct Pool {
  std::vector<std::binary_semaphore*> wake;
  std::function<void(unsigned)> work;  // the current launch's part for worker t
  std::atomic<unsigned> running{0};
  std::binary_semaphore finished{0};

  void grow(unsigned n) {
    while (wake.size() < n) {
      unsigned t = wake.size();
      auto* sem = new std::binary_semaphore(0);
      wake.push_back(sem);
      std::thread([this, t, sem] {
        for (;;) {
          sem->acquire();
          work(t);
          if (running.fetch_sub(1) == 1) finished.release();
        }
      }).detach();
    }
  }
};

Pool* pool = new Pool;  // never destroyed: its threads outlive main's statics

void forget_pool_in_child() { pool = new Pool; }  // a forked child has none of the threads

const int pool_fork_hook = pthread_atfork(nullptr, nullptr, forget_pool_in_child);

}  // namespace

static unsigned char* dynamic_shared = nullptr;  // the running launch's (one launch at a time)
extern "C" unsigned char* fg_emu_dynamic_shared() { return dynamic_shared; }

// Run `entry(args)` over the grid: one OS thread per thread of a block, the blocks in turn.
extern "C" void fg_emu_launch(void (*entry)(void**), void** args, dim3 grid, dim3 block,
                              unsigned shared) {
  static std::mutex one_launch_at_a_time;  // `__shared__` statics are one copy per kernel
  std::lock_guard<std::mutex> lock(one_launch_at_a_time);
  // the dynamic shared memory: one buffer, reused block after block as the statics are
  std::vector<unsigned char> dynamic(shared ? shared + 128 : 0, 0xff);
  const auto at = reinterpret_cast<uintptr_t>(dynamic.data());
  dynamic_shared =
      shared ? reinterpret_cast<unsigned char*>((at + 127) & ~uintptr_t(127)) : nullptr;
  (void)pool_fork_hook;
  const unsigned nthreads = block.x * block.y * block.z;
  const unsigned long long nblocks = 1ULL * grid.x * grid.y * grid.z;
  Block b;
  b.exchange[0].assign(nthreads, 0);
  b.exchange[1].assign(nthreads, 0);
  b.shared[0].assign(nthreads * FG_EMU_SLOT, 0);
  b.shared[1].assign(nthreads * FG_EMU_SLOT, 0);
  b.syncs[0].emplace(nthreads);
  std::barrier<> block_done(nthreads);  // every thread finishes a block before any starts the next
  pool->grow(nthreads);
  pool->running = nthreads;
  pool->work = [&](unsigned tid) {
    current_block = &b;
    blockDim = block;
    gridDim = grid;
    threadIdx = {tid % block.x, tid / block.x % block.y, tid / (block.x * block.y)};
    for (unsigned long long k = 0; k < nblocks; ++k) {
      blockIdx = {unsigned(k % grid.x), unsigned(k / grid.x % grid.y),
                  unsigned(k / (1ULL * grid.x * grid.y))};
      parity = share_parity = 0;
      current_sync = &*b.syncs[k % 2];
      // the next block's barrier was the previous block's, which everyone has left
      if (tid == 0 && k + 1 < nblocks) b.syncs[(k + 1) % 2].emplace(nthreads);
      entry(args);
      current_sync->arrive_and_drop();
      block_done.arrive_and_wait();
    }
  };
  for (unsigned t = 0; t < nthreads; ++t) pool->wake[t]->release();
  pool->finished.acquire();
}

// FUSEGRAD_EMU_GUARD: device buffers end where a page no access is allowed to begins, so
// an access past the end faults; the fault names the kernel that was running, then goes on
// to whatever handled it before (Python's faulthandler prints the stack).
namespace {
char guarded_kernel[256];
struct sigaction previous_segv, previous_bus;

void on_guard_fault(int sig, siginfo_t* info, void* context) {
  static const char what[] =
      "\nfusegrad CUDA emulator: an out-of-bounds access (a guard page) in kernel ";
  (void)!write(2, what, sizeof what - 1);
  (void)!write(2, guarded_kernel, strlen(guarded_kernel));
  (void)!write(2, "\n", 1);
  struct sigaction& before = sig == SIGSEGV ? previous_segv : previous_bus;
  sigaction(sig, &before, nullptr);
  raise(sig);
  (void)info;
  (void)context;
}
}  // namespace

extern "C" void fg_emu_guard(const char* kernel) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action = {};
    action.sa_sigaction = on_guard_fault;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &action, &previous_segv);
    sigaction(SIGBUS, &action, &previous_bus);
  });
  strncpy(guarded_kernel, kernel, sizeof guarded_kernel - 1);
}
