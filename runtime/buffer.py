"""CPU buffers: flat numpy arrays, recycled through a pool.

First-touching a fresh 64 MiB allocation costs about 7 ms here, more than a
whole elementwise kernel over it, so a freed buffer goes back to a pool keyed
by size and the next allocation of that size reuses it. A buffer whose array
is still referenced from outside (a user kept `t.numpy()`) is not recycled.

A training loop allocates the same few sizes every step (LeNet-5: 25 sizes, 13 MB);
a program whose shapes keep changing (a new batch size each call) allocates new ones,
which nothing asks for again. So a size is pooled only once it has been allocated
anew twice (a loop's second step; the first 4 x `POOL_SIZES` such sizes are
remembered), and the pool is bounded three ways, what was least recently freed dropped
first: at most `POOL_SIZES` distinct sizes; at most `POOL_LIMIT_BYTES` in all; and at most
`POOL_PEAK_FACTOR` times the most bytes the program ever had in use from it at once (or
`POOL_FLOOR_BYTES`, if more). The last bound keeps memory flat when sizes keep changing:
an MLP stepped over 40 batch sizes would otherwise pool every size's buffers (several
hundred MB where a step uses 15), while a loop over one or a few sizes pools what its
steps use, as before.

What the program stops asking for goes back to the system: a pooled array that stays
unused for `POOL_DECAY_S` seconds is freed by a thread of the pool's own (as jemalloc
decays its dirty pages), so memory is not kept once the tensors are gone and the
program has moved on, while a loop whose steps come faster than that reuses its
buffers. A large size (from `MAP_FROM`) learns its loop's pace: once its buffer has
waited longer than that to be asked for again (freed by the trimmer, then allocated
anew), its buffers are kept twice that wait, up to `POOL_GAP_MAX_S`, so a loop of long
steps stops faulting its memory in at every step. `clear_pool()` gives everything back
at once.

A warm start's first step would fault all its buffers' pages in as its kernels first
write them: `prefill` makes the sizes an earlier run of the same program had to allocate
(`first_sizes`, kept by `runtime/engine.py`) while the program starts, their pages
faulted in by the system without the GIL, and pools them for the first step to take.
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
# the pool holds at most this many times the peak of bytes in use (taken and not returned):
# room for the buffers of a few alternating steps (training and evaluation, a GAN's two
# models), not for every size a program ever used
POOL_PEAK_FACTOR = 4
POOL_FLOOR_BYTES = 64 << 20  # ... or this much, whatever the peak
# seconds a pooled array may stay unused before it is freed: longer keeps memory a program
# no longer needs; shorter makes a loop whose steps take longer first-touch its buffers
# anew each step (about 7 ms for 64 MiB, small beside such a step)
POOL_DECAY_S = 2.0
# ... or twice the time a size's buffer last waited to be asked for again, up to this: a
# loop whose steps take longer than the decay (a large model's step, an evaluation pass)
# keeps its buffers instead of faulting gigabytes in again at every step
POOL_GAP_MAX_S = 30.0
# bytes -> how long its buffer last waited between being freed and being asked for again
# (seen when the pool gives it, or when a size the trimmer freed is allocated anew)
_gaps: dict[int, float] = {}
_decayed: dict[int, float] = {}  # bytes -> when the newest buffer the trimmer freed was freed
# bytes -> free (raw array, address, the typed array last made of it or None, when it was
# freed by `time.monotonic()`), the size least recently freed first, each size's list
# least recently freed first
_pool: OrderedDict[int, list[tuple[np.ndarray, int, np.ndarray | None, float]]] = OrderedDict()
_pooled_bytes = 0
# bytes -> how many times an array of that size was allocated anew (the pool had none)
_misses: dict[int, int] = {}
_in_use = 0  # bytes taken (`_take`) and not yet returned: live buffers and scratch
_peak_in_use = 0  # the most `_in_use` has been
_lock = forksafe.Lock()  # Python threads allocate and free at once
# the sizes from `PREFILL_FROM` bytes this process took that the pool did not hold (or held
# only as `prefill` made them), in order, up to `SIZES_NOTED_MAX`: what a warm start of
# the same program prefills (`first_sizes`, `prefill`)
_noted: list[int] = []
_prefilled: set[int] = set()  # addresses of arrays `prefill` pooled, not yet taken
_NP = {d: np.dtype(d.np) for d in NUMPY_DTYPES}  # numpy's dtype object for each of ours
live_buffers = 0  # buffers allocated and not yet freed, for tests of memory planning


class Buffer:
    """`size` elements of `dtype` in one contiguous array, on the CPU."""

    __slots__ = ("size", "dtype", "array", "kernels", "ptr", "taken", "__weakref__")
    device = "cpu"

    def __init__(self, size: int, dtype: DType, array: np.ndarray | None = None):
        global live_buffers
        self.size, self.dtype = size, dtype
        self.taken = 0  # bytes this buffer holds from the pool's accounting (`_in_use`)
        if array is None and size:
            nbytes = size * dtype.itemsize
            raw, self.ptr, typed = _take(nbytes)
            self.taken = raw.nbytes
            if typed is None or typed.dtype is not _NP[dtype] or typed.size != size:
                # (the array a freed buffer of this size and dtype had: no numpy call)
                typed = (raw if raw.nbytes == nbytes else raw[:nbytes]).view(_NP[dtype])
            array = typed
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
        taken = self.taken
        # 3 references: the slot, the local name, getrefcount's argument
        if sys.getrefcount(a) > 3 or a.base is None:
            _free(taken, None)  # out of the pool's hands: the user's array holds it now
            return
        raw = a.base
        view = raw.base  # the pool's arrays are over a memoryview of an array,
        if type(view) is memoryview and type(view.obj) is mmap.mmap:  # the CUDA emulator's
            _free(taken, None)  # guarded memory over one of an mmap: never pooled
            return
        if sys.getrefcount(raw) > 3:  # (the local name, the typed array's base, the argument)
            _free(taken, None)
            return
        # its typed array goes with it, unless someone made it read-only
        _free(taken, (raw, self.ptr, a if a.flags.writeable else None, time.monotonic()))

    def __repr__(self) -> str:
        return f"<Buffer {self.size} x {self.dtype.name}>"


def take_scratch(nbytes: int) -> tuple[np.ndarray, int, None]:
    """At least `nbytes` raw bytes (`size_class`) for values that live only inside one
    native program run (from the pool), and their address."""
    raw, ptr, _ = _take(nbytes)
    return raw, ptr, None


def give_scratch(scratch: tuple[np.ndarray, int, None]) -> None:
    """Return `take_scratch` memory to the pool once the program that used it has run.
    It is pooled from its first return: a program's scratch is asked for again by the
    plan's next run (a training loop's second step), where another size is pooled only
    once allocated twice."""
    global _in_use
    entry = (*scratch, time.monotonic())
    with _lock:
        _in_use -= scratch[0].nbytes
        _give(scratch[0].nbytes, entry, reused=True)
        if _deferred:
            _free_deferred()


# finalizers' frees not yet made, as (bytes taken, pool entry or None): each is made
# at once where the pool's lock is free, else (held by another thread, or by the
# finalizer's own) by its next holder. (A cyclic collection
# may start at any allocation of a container, under the lock too, and it runs the dead
# buffers' `__del__` on the thread that started it: waiting for the lock there would be
# waiting for itself, for ever.) The lock's next holder makes them (`_free_deferred`).
_deferred: list[tuple[int, tuple | None]] = []


def _free(taken: int, entry: tuple | None) -> None:
    """A buffer's finalizer: `taken` bytes are no longer in use, and `entry` (if any) goes
    to the pool. It never waits for `_lock`: the free goes into `_deferred` (`list.append`:
    atomic, and it starts no collection), made here where the lock is free, else by the
    lock's next holder."""
    _deferred.append((taken, entry))
    if _lock.acquire(blocking=False):
        try:
            _free_deferred()
        finally:
            _lock.release()


def _free_deferred() -> None:
    """Make the frees waiting in `_deferred` (under `_lock`; a finalizer run meanwhile by
    a collection `_give` starts adds to it, and is made too)."""
    global _in_use
    while _deferred:
        taken, entry = _deferred.pop()
        _in_use -= taken
        if entry is not None:
            _give(entry[0].nbytes, entry)
        entry = None  # (dropped if not pooled: its memory goes back now)


def _untake(nbytes: int) -> None:
    """`nbytes` taken from the pool are no longer in use, and not given back to it."""
    global _in_use
    if nbytes:
        with _lock:
            _in_use -= nbytes


def _give(nbytes: int, entry: tuple, reused: bool = False) -> None:
    """Pool `entry` (under `_lock`), then drop what was least recently freed while the
    pool is over a bound. Dropped arrays are freed here: numpy frees their memory
    and runs no Python code. `reused`: pooled even if its size was allocated only once."""
    global _pooled_bytes
    once = nbytes not in _pool and _misses.get(nbytes, 0) < 2 and not reused
    limit = min(POOL_LIMIT_BYTES, max(POOL_FLOOR_BYTES, POOL_PEAK_FACTOR * _peak_in_use))
    if nbytes > limit or once:
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
        if _prefilled:
            _prefilled.difference_update(e[1] for e in dropped)
    while _pooled_bytes > limit:  # the oldest size's coldest array first
        size, oldest = next(iter(_pool.items()))
        _prefilled.discard(oldest.pop(0)[1])
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


# the buffers whose array holds a computed value in host memory, read in place by the
# frontend (`x[k]` blocks, `item()`, joins, writes by numpy): not fusegrad's own tables,
# nor a device's buffers
HOST_BUFFERS = (Buffer, BufferView)

# how a block of a computed value's memory is viewed, by the exact type of the buffer
# holding the value: `(buffer, start, size)` -> a buffer of its elements start..start +
# size, in its memory (`frontend/movement.py`'s blocks: `source[i : i + bptt]`).
# runtime/cuda.py adds the device buffers; fusegrad's own tables are not there.
BLOCK_VIEWS: dict[type, type] = {Buffer: BufferView, BufferView: BufferView}


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


def quarter_class(nbytes: int) -> int:
    """`nbytes` rounded up to one of four classes per power of two (5/4, 6/4, 7/4 and 8/4
    of the power below it): at most a quarter more. The CUDA pool's classes too.

    >>> quarter_class(1 << 20), quarter_class((1 << 20) + 1), quarter_class(3 << 20)
    (1048576, 1310720, 3145728)
    """
    step = 1 << max(nbytes.bit_length() - 3, 0)
    return -(-nbytes // step) * step


def size_class(nbytes: int) -> int:
    """The bytes a buffer of `nbytes` is given: `nbytes` itself, or from `MAP_FROM` its
    `quarter_class`. A large buffer is pages of its own (`_Pages`), of which the system
    backs only those touched, so the rounding costs addresses, not memory, and one pooled
    buffer serves every size of its class: a program whose batch size changes from step to
    step reuses its buffers instead of mapping new ones. (At most a quarter more keeps a
    large scratch within the pool's bound: rounded to the next power of two, a 2.3 GB one
    would take 4 GiB, past a sixth of 24 GB, and be mapped anew at every run.)

    >>> size_class(1000), size_class(MAP_FROM), size_class(MAP_FROM + 1) == 1.25 * MAP_FROM
    (1000, 1048576, True)
    """
    return nbytes if nbytes < MAP_FROM else quarter_class(nbytes)


def _take(nbytes: int) -> tuple[np.ndarray, int, np.ndarray | None]:
    """At least `nbytes` raw bytes (`size_class`), their address and the typed array last
    made of them: a pooled array of that class, or a new one."""
    global _pooled_bytes, _in_use, _peak_in_use
    nbytes = max(nbytes, 1)
    if nbytes >= MAP_FROM:
        nbytes = size_class(nbytes)
    with _lock:
        if _deferred:  # (first: one may be of this size)
            _free_deferred()
        _in_use += nbytes
        if _in_use > _peak_in_use:
            _peak_in_use = _in_use
        free = _pool.get(nbytes)
        if free:
            _pooled_bytes -= nbytes
            entry = free.pop()
            if not free:  # sizes in the pool are sizes with memory to give
                del _pool[nbytes]
            if _prefilled and entry[1] in _prefilled:  # (made ahead: it waited for nothing)
                _prefilled.discard(entry[1])
                _note_size(nbytes)
            elif nbytes >= MAP_FROM:  # (how long it waited: the trimmer waits longer than that)
                _note_gap(nbytes, time.monotonic() - entry[3])
            return entry[:3]
        _note_size(nbytes)
        if nbytes in _decayed:  # freed by the trimmer, asked for again: it waited too little
            _note_gap(nbytes, time.monotonic() - _decayed.pop(nbytes))
        if len(_misses) >= 4 * POOL_SIZES:  # bounded: the sizes seen once are forgotten
            _forget_one_off_sizes()
        _misses[nbytes] = _misses.get(nbytes, 0) + 1
        if not _trimmer:  # a size is pooled once allocated twice: the thread is there by then
            _start_trimmer()
    try:
        raw = aligned_bytes(nbytes)
    except MemoryError:
        _untake(nbytes)
        raise
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
# bytes from which a buffer is pages of its own (`_Pages`) rather than malloc's memory
MAP_FROM = 1 << 20


class _Pages(mmap.mmap):
    """Anonymous pages holding one large buffer: given back to the system the moment the
    pool drops them. Large numpy arrays come from malloc, whose threshold for mapping an
    allocation of its own rises to the largest block freed so far (up to 32 MiB): a
    program whose sizes keep changing then gets its buffers from malloc's heap, whose
    freed holes it keeps (an MLP over 40 batch sizes: 60 MB more after each sweep)."""


def aligned_bytes(nbytes: int) -> np.ndarray:
    """`nbytes` fresh bytes starting on a cache line. numpy's large arrays start 16 bytes
    past a page (malloc's header), where each 64-byte row a kernel loads whole (an AMX
    tile's, a 16-float vector's) would straddle two lines. The array is made over a
    memoryview of a larger one (or of `_Pages`, from `MAP_FROM` bytes), so it stays the
    base of the typed arrays viewed from it (numpy collapses a view of a view onto the
    array that owns the memory), as the pool's check of who still holds a buffer needs.

    >>> aligned_bytes(100).ctypes.data % CACHE_LINE, aligned_bytes(100).nbytes
    (0, 100)
    >>> aligned_bytes(MAP_FROM).ctypes.data % PAGE
    0
    """
    if nbytes >= MAP_FROM:
        try:
            pages = _Pages(-1, nbytes, flags=mmap.MAP_PRIVATE)
        except OSError as e:  # (ENOMEM, or a size past what the system can map)
            raise MemoryError(f"cannot allocate {nbytes:,} bytes ({e.strerror})") from None
        return np.frombuffer(memoryview(pages), dtype=np.uint8)
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
    """Free every pooled array now (the memory of tensors still alive stays theirs), and
    measure the peak of bytes in use that bounds the pool afresh from now."""
    global _pooled_bytes, _peak_in_use
    with _lock:
        if _deferred:
            _free_deferred()
        _pool.clear()
        _prefilled.clear()
        _misses.clear()
        _gaps.clear()
        _decayed.clear()
        _pooled_bytes = 0
        _peak_in_use = _in_use


PREFILL_FROM = 16 * mmap.PAGESIZE  # bytes: a smaller buffer costs its kernel few faults
SIZES_NOTED_MAX = 4096  # sizes `first_sizes` gives
PREFILL_MAX_BYTES = 512 << 20  # the most `prefill` makes
# seconds what `prefill` pooled waits for the program before the trimmer may free it: the
# program is still importing and building its model when it starts
PREFILL_WAIT_S = 20.0


def _note_size(nbytes: int) -> None:
    """Note a size taken fresh (under `_lock`), for `first_sizes`."""
    if nbytes >= PREFILL_FROM and len(_noted) < SIZES_NOTED_MAX:
        _noted.append(nbytes)


def first_sizes() -> tuple[list[int], int]:
    """The sizes this process took from the pool that it had to allocate (from
    `PREFILL_FROM` bytes, the first `SIZES_NOTED_MAX`), and the most bytes it had in use
    at once: what `prefill` makes for the next run of the same program."""
    with _lock:
        return list(_noted), _peak_in_use


def prefill(sizes: list[int], peak: int) -> int:
    """Pool arrays of `sizes` (`first_sizes` of an earlier run of this program, `peak` its
    most bytes in use) with their pages faulted in, ahead of the program's first step; the
    bytes pooled.

    A warm start's first step otherwise faults every page of its buffers in as its
    kernels first write them (a small ViT's: 36,000 faults, about a quarter of the
    step). Here each array is mapped with `MAP_POPULATE`, one system call that faults its
    pages in without the GIL, so a thread of fusegrad's own does it while the program
    imports and builds its model (`runtime/engine.py`). At most `PREFILL_MAX_BYTES`
    and the pool's bound for `peak`; each waits `PREFILL_WAIT_S` for the program before
    the trimmer may free it, and is then an array like any other in the pool. Nothing
    where the system has no `MAP_POPULATE`."""
    global _peak_in_use
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if not populate:
        return 0
    with _lock:
        _peak_in_use = max(_peak_in_use, peak)
        limit = min(POOL_LIMIT_BYTES, max(POOL_FLOOR_BYTES, POOL_PEAK_FACTOR * _peak_in_use))
    budget = min(limit, PREFILL_MAX_BYTES)
    made = 0
    for nbytes in sizes:
        if made + nbytes > budget:
            break
        try:
            pages = _Pages(-1, nbytes, flags=mmap.MAP_PRIVATE | populate)
        except OSError:  # (out of memory: the program faults its pages in as before)
            break
        raw = np.frombuffer(memoryview(pages), dtype=np.uint8)
        entry = (raw, raw.ctypes.data, None, time.monotonic() + PREFILL_WAIT_S)  # (not under
        with _lock:  # the lock: see `trim_pool`)
            # (a size the program allocates again and again: freed, it is pooled at once)
            _misses[nbytes] = max(_misses.get(nbytes, 0), 2)
            _prefilled.add(entry[1])
            _give(nbytes, entry, True)
            if not _trimmer:  # (what the program never asks for goes after its wait)
                _start_trimmer()
        made += nbytes
    return made


def _note_gap(nbytes: int, waited: float) -> None:
    """A buffer of `nbytes` was asked for `waited` seconds after it was freed (under
    `_lock`): the trimmer keeps that size's buffers twice as long (`decay_of`)."""
    if len(_gaps) >= 4 * POOL_SIZES:  # bounded: start afresh
        _gaps.clear()
    _gaps[nbytes] = min(waited, POOL_GAP_MAX_S)


def decay_of(nbytes: int) -> float:
    """Seconds a pooled buffer of `nbytes` may stay unused before the trimmer frees it:
    `POOL_DECAY_S`, or twice the time it last waited to be asked for again."""
    return max(POOL_DECAY_S, 2 * _gaps.get(nbytes, 0.0))


def trim_pool(now: float | None = None) -> int:
    """Free the pooled arrays unused for longer than their size's `decay_of` (by `now`, a
    `time.monotonic()` reading); the bytes freed. The trimming thread calls it."""
    global _pooled_bytes
    now = time.monotonic() if now is None else now
    freed = 0
    sizes = list(_pool)  # (made before the lock: see below)
    with _lock:
        # nothing under the lock makes a container (a list, a tuple), so no cyclic
        # collection starts in here with the lock held (one that did would run the dead
        # buffers' `__del__`, which leave their frees to `_deferred`: `_free`)
        k = 0
        while k < len(sizes):  # (not a `for`: its iterator is a container too)
            size = sizes[k]
            k += 1
            free = _pool.get(size)
            if not free:
                continue
            cutoff = now - decay_of(size)
            # oldest first, but for what `prefill` pooled, dated later: kept till then
            stale, newest, i = 0, None, 0
            while i < len(free):
                entry = free[i]
                if entry[3] > cutoff:
                    i += 1
                    continue
                if entry[1] in _prefilled:  # (made ahead, never taken: not the program's pace)
                    _prefilled.discard(entry[1])
                elif newest is None or entry[3] > newest:
                    newest = entry[3]
                del free[i]
                entry = None  # (its memory goes back now, before `_pooled_bytes` says so)
                stale += 1
            if stale:
                if size >= MAP_FROM and newest is not None:  # (asked for again later: it
                    if len(_decayed) >= 4 * POOL_SIZES:  # waited too little)
                        _decayed.clear()
                    _decayed[size] = newest
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
            if _deferred:  # (a program that stopped allocating still gets them back)
                _free_deferred()
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
    _prefilled.clear()
    _noted.clear()
    _pooled_bytes = 0
    _pool_filled.clear()
