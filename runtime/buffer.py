"""CPU buffers: flat numpy arrays, recycled through a pool.

First-touching a fresh 64 MiB allocation costs about 7 ms here, more than a
whole elementwise kernel over it, so a freed buffer goes back to a pool keyed
by size and the next allocation of that size reuses it. A buffer whose array
is still referenced from outside (a user kept `t.numpy()`) is not recycled.

A training loop allocates the same few sizes every step (LeNet-5: 25 sizes, 13 MB);
a program whose shapes keep changing (a new batch size each call) allocates new ones,
which nothing asks for again. So a size is pooled only once it has been allocated
anew twice (a loop's second step; the first 4 x `POOL_SIZES` such sizes are
remembered), and the pool is bounded twice: at most `POOL_LIMIT_BYTES` in all and at
most `POOL_SIZES` distinct sizes, what was least recently freed dropped first.

What the program stops asking for goes back to the system: a pooled array that stays
unused for `POOL_DECAY_S` seconds is freed by a thread of the pool's own (as jemalloc
decays its dirty pages), so memory is not kept once the tensors are gone and the
program has moved on, while a loop whose steps come faster than that reuses its
buffers. `clear_pool()` gives everything back at once.
"""

from __future__ import annotations

import mmap
import os
import sys
import time
from collections import OrderedDict

import numpy as np

from ..ir.dtypes import NUMPY_DTYPES, DType
from . import forksafe
from .backend_registry import get_backend, to_device


def _pool_limit() -> int:
    """4 GiB, or a sixth of the machine's memory where that is less. It trades memory held
    for first touches: a program that runs several convolutions' training steps one after
    another (batch 64 of 56x56 maps: ~200 MB each) allocates more than 1 GiB between two
    uses of a size, and a smaller bound would send its buffers out of the pool every call.
    What is pooled is a size the program allocated twice, memory it will ask for again
    (`clear_pool` gives it all back; `POOL_DECAY_S` what stays unused)."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): the fixed bound
        ram = 1 << 40
    return min(4 << 30, ram // 6)


POOL_LIMIT_BYTES = _pool_limit()
POOL_SIZES = 128  # distinct sizes kept, least recently freed dropped first
# seconds a pooled array may stay unused before it is freed: longer keeps memory a program
# no longer needs; shorter makes a loop whose steps take longer first-touch its buffers
# anew each step (about 7 ms for 64 MiB, small beside such a step)
POOL_DECAY_S = 2.0
# bytes -> free (raw array, address, the typed array last made of it or None, when it was
# freed by `time.monotonic()`), the size least recently freed first, each size's list
# least recently freed first
_pool: OrderedDict[int, list[tuple[np.ndarray, int, np.ndarray | None, float]]] = OrderedDict()
_pooled_bytes = 0
# bytes -> how many times an array of that size was allocated anew (the pool had none)
_misses: dict[int, int] = {}
_lock = forksafe.Lock()  # Python threads allocate and free at once
_NP = {d: np.dtype(d.np) for d in NUMPY_DTYPES}  # numpy's dtype object for each of ours
live_buffers = 0  # buffers allocated and not yet freed, for tests of memory planning


class Buffer:
    """`size` elements of `dtype` in one contiguous array, on the CPU."""

    __slots__ = ("size", "dtype", "array", "kernels", "ptr", "__weakref__")
    device = "cpu"

    def __init__(self, size: int, dtype: DType, array: np.ndarray | None = None):
        global live_buffers
        self.size, self.dtype = size, dtype
        if array is None and size:
            raw, self.ptr, typed = _take(size * dtype.itemsize)
            # the array a freed buffer of this size and dtype had: no numpy call to make one
            array = (
                typed if typed is not None and typed.dtype is _NP[dtype] else raw.view(_NP[dtype])
            )
        else:
            if array is None:
                array = np.empty(0, dtype.np)
            self.ptr: int = array.ctypes.data  # the data's address (an array never moves)
        self.array = array
        self.kernels: list = []  # the kernel records of the realize call that computed it
        live_buffers += 1

    @classmethod
    def from_numpy(cls, a: np.ndarray, dtype: DType) -> Buffer:
        """A buffer holding a copy of `a` converted to `dtype` (numpy's casting, as
        `astype`), in pooled memory: a training loop's batch of the same size each step
        lands in memory the last one left warm instead of a fresh allocation."""
        buf = cls(a.size, dtype)
        if a.size:
            np.copyto(buf.array.reshape(a.shape), a, casting="unsafe")
        return buf

    def numpy(self) -> np.ndarray:
        return self.array

    def write_scalar(self, value) -> None:
        """Overwrite element 0 (an optimizer's per-step scalar), as `DeviceBuffer` does."""
        self.array[0] = value

    def __del__(self):
        if _pool is None:  # interpreter shutdown: the module's globals are already gone
            return
        # an allocation that failed in __init__ (MemoryError) leaves no array and was never
        # counted; deepcopy and pickle never make one (a Tensor copies its value instead)
        a = getattr(self, "array", None)
        if a is None:
            return
        global live_buffers
        live_buffers -= 1
        # 3 references: the slot, the local name, getrefcount's argument
        if sys.getrefcount(a) > 3 or a.base is None:
            return
        raw = a.base
        view = raw.base  # the pool's arrays are over a memoryview of an array,
        if type(view) is memoryview and type(view.obj) is mmap.mmap:  # the CUDA emulator's
            return  # guarded memory over one of an mmap: never pooled
        with _lock:
            if sys.getrefcount(raw) > 3:
                return
            # its typed array goes with it, unless someone made it read-only
            _give(raw.nbytes, (raw, self.ptr, a if a.flags.writeable else None, time.monotonic()))

    def __repr__(self) -> str:
        return f"<Buffer {self.size} x {self.dtype.name}>"


def take_scratch(nbytes: int) -> tuple[np.ndarray, int, None]:
    """Raw bytes for values that live only inside one native program run (from the pool),
    and their address."""
    raw, ptr, _ = _take(nbytes)
    return raw, ptr, None


def give_scratch(scratch: tuple[np.ndarray, int, None]) -> None:
    """Return `take_scratch` memory to the pool once the program that used it has run.
    It is pooled from its first return: a program's scratch is asked for again by the
    plan's next run (a training loop's second step), where another size is pooled only
    once allocated twice."""
    with _lock:
        _give(scratch[0].nbytes, (*scratch, time.monotonic()), reused=True)


def _give(nbytes: int, entry: tuple, reused: bool = False) -> None:
    """Pool `entry` (under `_lock`), then drop what was least recently freed while the
    pool is over either bound. Dropped arrays are freed here: numpy frees their memory
    and runs no Python code. `reused`: pooled even if its size was allocated only once."""
    global _pooled_bytes
    once = nbytes not in _pool and _misses.get(nbytes, 0) < 2 and not reused
    if nbytes > POOL_LIMIT_BYTES or once:
        return  # too big, or a size allocated once: likely never again
    free = _pool.get(nbytes)
    if free is None:
        _pool[nbytes] = [entry]
    else:
        free.append(entry)
        _pool.move_to_end(nbytes)
    if not _pooled_bytes and not _pool_filled.is_set():  # (cleared only under `_lock`)
        _pool_filled.set()  # the trimming thread watches the pool while it holds memory
    _pooled_bytes += nbytes
    while len(_pool) > POOL_SIZES:
        size, dropped = _pool.popitem(last=False)
        _pooled_bytes -= size * len(dropped)
    while _pooled_bytes > POOL_LIMIT_BYTES:  # the oldest size's coldest array first
        size, oldest = next(iter(_pool.items()))
        oldest.pop(0)
        _pooled_bytes -= size
        if not oldest:
            del _pool[size]


class BufferView(Buffer):
    """Elements `start`..`start + size` of another CPU buffer, in its memory (a slice of a
    computed tensor along its first axes: `data[i : i + n]` of a training loop's batches).
    It keeps that buffer alive, so its memory is not reused while the view reads it, and
    gives nothing to the pool when it goes."""

    __slots__ = ("owner",)

    def __init__(self, owner: Buffer, start: int, size: int):
        super().__init__(size, owner.dtype, owner.array[start : start + size])
        self.owner = owner

    def __del__(self):
        global live_buffers
        if _pool is not None:
            live_buffers -= 1


class HostTable(Buffer):
    """A read-only table fusegrad builds for itself (the `arange` an index op compares
    against): host data of no device, so a graph on any device may read it. A device
    plan reads a copy made once per device and kept with the table."""

    __slots__ = ("copies",)
    device = None

    def __init__(self, size: int, dtype: DType, array: np.ndarray | None = None):
        super().__init__(size, dtype, array)
        self.copies: dict = {}

    def on(self, device: str):
        """This table's copy on `device` (made on first use, once per cuda backend: a copy
        made on the GPU is no use to the emulator, nor the other way round)."""
        key = get_backend(device).copy_key(device)
        copy = self.copies.get(key)
        if copy is None:
            copy = self.copies[key] = to_device(self, device)
        return copy


def _take(nbytes: int) -> tuple[np.ndarray, int, np.ndarray | None]:
    """`nbytes` raw bytes, their address and the typed array last made of them: a pooled
    array of that size, or a new one."""
    global _pooled_bytes
    nbytes = max(nbytes, 1)
    with _lock:
        free = _pool.get(nbytes)
        if free:
            _pooled_bytes -= nbytes
            entry = free.pop()
            if not free:  # sizes in the pool are sizes with memory to give
                del _pool[nbytes]
            return entry[:3]
        if len(_misses) >= 4 * POOL_SIZES:  # bounded: the sizes seen once are forgotten
            _forget_one_off_sizes()
        _misses[nbytes] = _misses.get(nbytes, 0) + 1
        if not _trimmer:  # a size is pooled once allocated twice: the thread is there by then
            _start_trimmer()
    raw = aligned_bytes(nbytes)
    return raw, raw.ctypes.data, None


PAGE = mmap.PAGESIZE
TOUCH_FROM = 16 * PAGE  # bytes: a smaller buffer is touched by its kernel's first stores


def touch_pages(buf: Buffer) -> None:
    """Write a byte into each page of `buf` (its value is about to be overwritten), so
    that a fresh allocation's pages are faulted in now rather than by the kernel that
    fills it. A pooled buffer's pages are resident already; touching them costs one store
    a page."""
    a = buf.array
    if a.nbytes >= TOUCH_FROM:
        a.view(np.uint8)[::PAGE] = 0


CACHE_LINE = 64  # bytes: where every buffer starts


def aligned_bytes(nbytes: int) -> np.ndarray:
    """`nbytes` fresh bytes starting on a cache line. numpy's large arrays start 16 bytes
    past a page (malloc's header), where each 64-byte row a kernel loads whole (an AMX
    tile's, a 16-float vector's) would straddle two lines. The array is made over a
    memoryview of a larger one, so it stays the base of the typed arrays viewed from it
    (numpy collapses a view of a view onto the array that owns the memory), as the pool's
    check of who still holds a buffer needs.

    >>> aligned_bytes(100).ctypes.data % CACHE_LINE, aligned_bytes(100).nbytes
    (0, 100)
    """
    big = np.empty(nbytes + CACHE_LINE, dtype=np.uint8)
    start = -big.ctypes.data % CACHE_LINE
    return np.frombuffer(big.data[start : start + nbytes], dtype=np.uint8)


def _forget_one_off_sizes() -> None:
    """Empty `_misses` of the sizes allocated once (under `_lock`). A size that has earned
    its place keeps it: forgetting it while its buffer is out (the loop's size, taken from
    the pool, which then holds none of it) would drop that buffer when it is freed, and the
    loop's next step would allocate anew. All are forgotten where even those are too many."""
    for size in [s for s, count in _misses.items() if count < 2]:
        del _misses[size]
    if len(_misses) >= 2 * POOL_SIZES:
        _misses.clear()


def clear_pool() -> None:
    """Free every pooled array now (the memory of tensors still alive stays theirs)."""
    global _pooled_bytes
    with _lock:
        _pool.clear()
        _misses.clear()
        _pooled_bytes = 0


def trim_pool(now: float | None = None) -> int:
    """Free the pooled arrays unused for `POOL_DECAY_S` seconds (by `now`, a
    `time.monotonic()` reading); the bytes freed. The trimming thread calls it."""
    global _pooled_bytes
    cutoff = (time.monotonic() if now is None else now) - POOL_DECAY_S
    freed = 0
    with _lock:
        for size in list(_pool):
            free = _pool[size]
            stale = 0
            while stale < len(free) and free[stale][3] <= cutoff:
                stale += 1
            if stale:
                del free[:stale]
                freed += size * stale
                if not free:
                    del _pool[size]
        _pooled_bytes -= freed
    return freed


_trimmer: list = []  # the trimming thread of this process, once started
_pool_filled = forksafe.Event()  # set while the pool may hold memory


def _start_trimmer() -> None:
    """Start the trimming thread (under `_lock`, on an allocation: never from a finalizer,
    which may run while the interpreter shuts down, when no new thread can start)."""
    thread = forksafe.Thread(target=_trim_forever, name="fusegrad-pool-trim", daemon=True)
    _trimmer.append(thread)
    thread.start()


def _trim_forever() -> None:
    """Sleep while the pool is empty; while it holds memory, free what has decayed every
    half `POOL_DECAY_S`."""
    while True:
        _pool_filled.wait()
        time.sleep(POOL_DECAY_S / 2)
        trim_pool()
        with _lock:
            if not _pooled_bytes:
                _pool_filled.clear()


@forksafe.at_fork
def _no_trimmer_in_child() -> None:
    """A forked child has no trimming thread (only the forking thread survives a fork), so
    it starts with an empty pool (the parent's pooled arrays are the parent's to reuse)
    and its first allocation starts a thread of its own."""
    global _pooled_bytes
    _trimmer.clear()
    _pool.clear()
    _pooled_bytes = 0
    _pool_filled.clear()
