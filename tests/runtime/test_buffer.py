"""The CPU buffer pool (runtime/buffer.py): freed memory is reused, with its typed array
when the dtype matches, and never while anything outside still reads it."""

from __future__ import annotations

import subprocess
import sys
import time
import weakref

import numpy as np

from fusegrad.ir.dtypes import float32, int32
from fusegrad.runtime import buffer as B


def _second_allocation(size, dtype):
    """A buffer of a size allocated once before: the pool keeps such sizes (a size
    allocated only once is likely never asked for again)."""
    B.Buffer(size, dtype)
    return B.Buffer(size, dtype)


def test_a_freed_buffer_s_memory_and_typed_array_are_reused():
    B.clear_pool()
    a = _second_allocation(1000, float32)
    ptr, array = a.ptr, weakref.ref(a.array)  # a weak reference: the pool checks for others
    del a
    b = B.Buffer(1000, float32)
    assert b.ptr == ptr and b.array is array()  # no new memory, no new numpy array
    del b
    c = B.Buffer(1000, int32)  # the same bytes as another dtype: a fresh view of them
    assert c.ptr == ptr and c.array.dtype == np.int32 and c.array.size == 1000


def test_memory_still_read_outside_is_not_reused():
    B.clear_pool()
    a = _second_allocation(500, float32)
    ptr, kept = a.ptr, a.array.reshape(10, 50)  # the user kept a view (t.numpy())
    del a
    b = B.Buffer(500, float32)
    assert b.ptr != ptr
    kept[:] = 1.0  # still the user's: nothing else writes there


def test_a_read_only_typed_array_is_never_handed_out_again():
    B.clear_pool()
    a = _second_allocation(256, float32)
    ptr = a.ptr
    a.array.flags.writeable = False
    del a
    b = B.Buffer(256, float32)
    assert b.ptr == ptr and b.array.flags.writeable


def test_every_buffer_starts_on_a_cache_line_fresh_or_reused():
    # numpy's own large arrays start 16 bytes past a page: a 64-byte row (an AMX tile's, a
    # 16-float vector's) would straddle two cache lines
    B.clear_pool()
    for size in (1, 3, 1000, 1 << 18, 3 << 20):
        a = _second_allocation(size, float32)
        ptr = a.ptr
        assert ptr % B.CACHE_LINE == 0 and a.array.ctypes.data == ptr
        assert a.array.base is not None and a.array.base.nbytes == B.size_class(size * 4)
        del a
        b = B.Buffer(size, float32)  # from the pool: the same aligned memory
        assert b.ptr == ptr
    raw, ptr, _ = B.take_scratch(12345)
    assert ptr % B.CACHE_LINE == 0 and raw.nbytes == 12345
    B.give_scratch((raw, ptr, None))


def test_a_program_s_scratch_is_pooled_from_its_first_return():
    # a plan's next run asks for the same scratch (a training loop's second step), where
    # another size allocated only once is not pooled (its memory is freed)
    B.clear_pool()
    raw, ptr, _ = B.take_scratch(77777)
    B.give_scratch((raw, ptr, None))
    again = B.take_scratch(77777)
    assert again[0] is raw and again[1] == ptr
    B.give_scratch(again)
    once = B.Buffer(55555, float32)
    freed = weakref.ref(once.array.base)
    del once
    assert freed() is None


def test_a_loop_s_size_stays_pooled_when_the_table_of_one_off_sizes_fills():
    # every 4 x POOL_SIZES new sizes the table of sizes seen once is emptied; the loop's
    # own size, out of the pool at that moment, must not be forgotten with them (its next
    # allocation would be new memory: the same typed array proves it is not)
    B.clear_pool()
    kept = _second_allocation(1000, float32)
    array = weakref.ref(kept.array)
    del kept
    for n in range(1, 6 * B.POOL_SIZES):
        B.Buffer(n * 16 + 3, float32)  # a new size every step, freed at once
        again = B.Buffer(1000, float32)
        assert again.array is array(), n
        del again


def test_pooled_memory_unused_for_the_decay_time_is_freed():
    B.clear_pool()
    a = _second_allocation(4096, float32)
    kept = _second_allocation(1024, float32)
    del a
    assert B._pooled_bytes == 4096 * 4
    now = B._pool[4096 * 4][0][3]
    assert B.trim_pool(now + B.POOL_DECAY_S / 2) == 0  # not yet decayed: kept for reuse
    del kept  # freed later: decays later
    assert B.trim_pool(now + B.POOL_DECAY_S) == 4096 * 4
    assert list(B._pool) == [1024 * 4] and B._pooled_bytes == 1024 * 4
    assert B.trim_pool(time.monotonic() + 3600) == 1024 * 4
    assert not B._pool and B._pooled_bytes == 0
    b = B.Buffer(4096, float32)  # a size that earned its place keeps it after a trim
    del b
    assert B._pooled_bytes == 4096 * 4


def test_the_pool_s_thread_frees_what_the_program_stopped_using(monkeypatch):
    # the thread wakes every half decay time while the pool holds memory, and sleeps
    # otherwise; a short decay time here so the test waits little
    B.clear_pool()
    monkeypatch.setattr(B, "POOL_DECAY_S", 0.05)
    a = _second_allocation(1 << 16, float32)
    del a
    assert B._pooled_bytes == 4 << 16
    deadline = time.monotonic() + 30
    while B._pooled_bytes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert B._pooled_bytes == 0 and not B._pool
    assert B._trimmer and B._trimmer[0].is_alive() and B._trimmer[0].daemon
    deadline = time.monotonic() + 30
    while B._pool_filled.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not B._pool_filled.is_set()  # asleep until the pool holds memory again


def test_a_pool_that_empties_and_fills_each_call_wakes_the_trimmer_once(monkeypatch):
    """A loop takes a buffer from the pool and gives it back every call (the pool empty,
    then not): the trimming thread's event is set once, not on every give (setting an Event
    takes its lock and notifies: a dozen Python calls each time)."""
    B.clear_pool()
    sets = []

    class Watched:  # the event, counting its sets (the thread keeps waiting on the real one)
        def __init__(self, event):
            self.event = event

        def is_set(self):
            return self.event.is_set()

        def set(self):
            sets.append(1)
            self.event.set()

    monkeypatch.setattr(B, "_pool_filled", Watched(B._pool_filled))
    _second_allocation(256, float32)  # freed at once: pooled from now on
    for _ in range(20):
        b = B.Buffer(256, float32)  # taken: the pool is empty again
        assert B._pooled_bytes == 0
        del b  # given back
        assert B._pooled_bytes == 256 * 4
    assert len(sets) <= 1 and B._pool_filled.is_set()


def test_touching_a_fresh_buffers_pages_faults_them_in_before_its_kernel_writes():
    """`touch_pages` (done before a kernel timed on its own runs: a first run, a
    FUSEGRAD_DEBUG run) leaves no page of a fresh allocation for the kernel to fault in,
    so its time is the kernel's."""
    import ctypes
    import resource

    from fusegrad.runtime.buffer import PAGE, touch_pages

    def faults_filling(buf):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        buf.array.fill(1)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    def small_pages(buf):
        # 4 KiB pages only (MADV_NOHUGEPAGE): one fault a page, and no huge page that the
        # kernel's khugepaged assembles from touched pages later, which faults again
        # (47 faults after touching in a CI run with transparent huge pages)
        libc = ctypes.CDLL(None)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        start = -(-buf.ptr // PAGE) * PAGE
        end = (buf.ptr + buf.array.nbytes) // PAGE * PAGE
        libc.madvise(start, end - start, 15)  # (where unsupported: nothing changes)
        return buf

    # (sizes no other test pools: fresh allocations of thousands of pages)
    nbytes = 64 << 20
    untouched = small_pages(B.Buffer(nbytes // 4 + 4099, float32))
    assert faults_filling(untouched) >= 16  # what the kernel would pay
    touched = small_pages(B.Buffer(nbytes // 4 + 8191, float32))
    touch_pages(touched)
    assert faults_filling(touched) <= 2
    assert touched.array.nbytes // PAGE > 16000


def test_a_large_buffer_serves_every_size_of_its_class():
    # from MAP_FROM bytes a buffer is pages of its own, rounded up to a quarter class (four
    # per power of two): a batch size that changes every step reuses the same memory
    B.clear_pool()
    a = _second_allocation(300_000, float32)  # 1.2 MB: the 1.25 MiB class
    ptr, raw = a.ptr, weakref.ref(a.array.base)
    assert a.array.size == 300_000 and raw().nbytes == 5 << 18
    a.array[:] = 7.0
    del a
    b = B.Buffer(320_000, float32)  # another size of the class: the same pages
    assert b.ptr == ptr and b.array.size == 320_000 and b.array.base is raw()
    b.array[:] = -1.0
    del b
    c = B.Buffer(300_000, int32)
    assert c.ptr == ptr and c.array.size == 300_000 and c.array.dtype == np.int32
    assert B.size_class(B.MAP_FROM - 1) == B.MAP_FROM - 1  # below: malloc's, exact sizes
    assert B.size_class((3 << 20) + 4) == 7 << 19  # 3.5 MiB: at most a quarter more
    for n in [B.MAP_FROM + k * 99_991 for k in range(200)] + [(3 << 30) // 4 * 3 + 5]:
        assert n <= B.size_class(n) < 1.25 * n


def test_a_scratch_just_over_a_power_of_two_is_pooled_under_a_bound_below_the_next(monkeypatch):
    # a plan's scratch of 2.3 units with the pool bounded at 3.9 (a ResNet's evaluation on
    # 2,000 images: 2.3 GB against a 24 GB machine's 3.9 GiB): its class must fit the
    # bound, or every run maps and faults its pages in again
    B.clear_pool()
    unit = B.MAP_FROM
    monkeypatch.setattr(B, "POOL_LIMIT_BYTES", int(3.9 * unit))
    monkeypatch.setattr(B, "POOL_FLOOR_BYTES", 0)
    scratch = B.take_scratch(int(2.3 * unit))
    ptr = scratch[1]
    B.give_scratch(scratch)
    again = B.take_scratch(int(2.3 * unit))
    assert again[1] == ptr  # the same pages: pooled
    B.give_scratch(again)
    B.clear_pool()


def test_a_large_size_asked_for_after_the_decay_is_kept_longer_from_then_on(monkeypatch):
    # a loop whose steps take longer than the decay: the trimmer frees its scratch, the
    # next step maps it anew; from then on that size is kept twice the wait
    B.clear_pool()
    trim = B.trim_pool  # called here, not by the pool's thread (which would race this)
    monkeypatch.setattr(B, "trim_pool", lambda now=None: 0)
    monkeypatch.setattr(B, "POOL_DECAY_S", 0.1)
    size = 3 * B.MAP_FROM
    B.give_scratch(B.take_scratch(size))
    time.sleep(0.3)
    assert trim() == B.size_class(size)  # decayed: freed
    again = B.take_scratch(size)  # allocated anew: it waited 0.3 s
    assert 0.3 <= B.decay_of(B.size_class(size)) / 2 < 1.0
    ptr = again[1]
    B.give_scratch(again)
    time.sleep(0.3)
    assert trim() == 0  # kept now: 0.3 s is within twice the wait
    third = B.take_scratch(size)
    assert third[1] == ptr
    B.give_scratch(third)
    assert trim(now=time.monotonic() + 5) == B.size_class(size)  # past twice the wait
    assert B.decay_of(1000) == B.POOL_DECAY_S  # a small size: the plain decay
    B.clear_pool()


def test_a_dropped_large_buffer_goes_back_to_the_system():
    B.clear_pool()
    a = B.Buffer(1 << 20, float32)  # allocated once: not pooled when freed
    pages = weakref.ref(a.array.base.base.obj)  # array -> raw -> memoryview -> the pages
    assert isinstance(pages(), B._Pages)
    del a
    assert pages() is None  # unmapped at once, not left in malloc's heap


def test_bytes_in_use_are_counted_back_whoever_keeps_the_memory():
    B.clear_pool()
    start = B._in_use
    a = B.Buffer(1000, float32)
    b = B.Buffer(300_000, float32)
    raw, ptr, _ = B.take_scratch(5000)
    assert B._in_use == start + 4000 + (5 << 18) + 5000
    assert B._peak_in_use >= B._in_use
    kept = b.array  # the user keeps the array (t.numpy()): no longer the pool's to count
    del a, b
    B.give_scratch((raw, ptr, None))
    assert B._in_use == start
    kept[:] = 1.0


def test_the_pool_holds_a_few_times_the_peak_in_use_not_every_size_seen(monkeypatch):
    # an MLP stepped over many batch sizes: each size's buffers are pooled once allocated
    # twice, and without a bound tied to what a step uses the pool would keep them all
    import gc

    gc.collect()
    B.clear_pool()
    monkeypatch.setattr(B, "POOL_FLOOR_BYTES", 0)
    # counted from zero: other tests' tensors still alive would raise the peak (what this
    # test takes it gives back, so the count is the same when it is restored)
    monkeypatch.setattr(B, "_in_use", 0)
    monkeypatch.setattr(B, "_peak_in_use", 0)
    for n in range(1000, 1400, 10):  # 40 "batch sizes", 3 buffers a step, twice over
        for _ in range(2):
            step = [B.Buffer(n * k, float32) for k in (1, 2, 3)]
            del step
    bound = B.POOL_PEAK_FACTOR * B._peak_in_use
    assert B._peak_in_use <= 2 * 6 * 1400 * 4
    assert 0 < B._pooled_bytes <= bound
    assert sum(size * len(free) for size, free in B._pool.items()) == B._pooled_bytes
    assert 1390 * 3 * 4 in B._pool  # the latest sizes kept, not the first ones
    assert 1000 * 4 not in B._pool and B._in_use == 0


# ---------------------------------------------------------------- made ahead (`prefill`)


def _addresses() -> set[int]:
    return {entry[1] for free in B._pool.values() for entry in free}


def test_prefilled_arrays_serve_the_first_allocations_of_their_sizes(monkeypatch):
    B.clear_pool()
    monkeypatch.setattr(B, "_noted", [])  # (the process's first sizes: full after many tests)
    small, large = 1 << 17, 3 << 20  # (a large size is its class, as `_take` asks for it)
    made = B.prefill([small, small, large], peak=1 << 24)
    assert made == 2 * small + large and B._pooled_bytes == made
    ahead = _addresses()
    assert len(ahead) == 3 and B._prefilled == ahead
    noted = len(B.first_sizes()[0])
    a, b = B.Buffer(small // 4, float32), B.Buffer(small // 4, float32)
    c = B.Buffer(large // 4, float32)
    assert {a.ptr, b.ptr, c.ptr} == ahead and not B._prefilled and B._pooled_bytes == 0
    assert all(x.ptr % B.CACHE_LINE == 0 for x in (a, b, c))
    # taken from what was made ahead, they are the sizes the next run makes ahead too
    assert B.first_sizes()[0][noted:] == [small, small, large]
    ptr = a.ptr
    del a  # a size made ahead is one the program allocates again: pooled from its first free
    assert B.Buffer(small // 4, float32).ptr == ptr


def test_only_sizes_from_prefill_from_are_noted_and_made(monkeypatch):
    B.clear_pool()
    monkeypatch.setattr(B, "_noted", [])  # (the process's first sizes: full after many tests)
    noted = len(B.first_sizes()[0])
    kept = [B.Buffer(n // 4, float32) for n in (4096, B.PREFILL_FROM, 2 * B.PREFILL_FROM)]
    assert B.first_sizes()[0][noted:] == [B.PREFILL_FROM, 2 * B.PREFILL_FROM]
    assert B.first_sizes()[1] >= sum(b.array.nbytes for b in kept)


def test_prefill_makes_no_more_than_its_budget_and_the_pool_s_bound(monkeypatch):
    B.clear_pool()
    monkeypatch.setattr(B, "PREFILL_MAX_BYTES", 5 << 20)
    assert B.prefill([2 << 20] * 4, peak=1 << 30) == 4 << 20  # the budget
    B.clear_pool()
    monkeypatch.setattr(B, "PREFILL_MAX_BYTES", 1 << 40)
    monkeypatch.setattr(B, "POOL_FLOOR_BYTES", 1 << 20)
    monkeypatch.setattr(B, "_peak_in_use", 0)  # (not what the tests before it had in use)
    # a peak of 1 MiB: the pool holds 4 MiB (`POOL_PEAK_FACTOR`), so only that is made
    assert B.prefill([1 << 20] * 8, peak=1 << 20) == 4 << 20
    assert B._pooled_bytes == 4 << 20


def test_prefilled_arrays_wait_for_the_program_then_decay():
    B.clear_pool()
    B.prefill([1 << 17, 2 << 20], peak=1 << 24)
    now = time.monotonic()
    # (the program is still building its model: kept past the decay time)
    assert B.trim_pool(now + B.POOL_DECAY_S + 1) == 0
    assert B.trim_pool(now + B.PREFILL_WAIT_S + B.POOL_DECAY_S + 1) == (1 << 17) + (2 << 20)
    assert not B._pool and not B._prefilled and B._pooled_bytes == 0
    # never taken, so nothing learned of the program's pace (`_note_gap`, `decay_of`)
    assert (2 << 20) not in B._decayed


def test_a_freed_array_behind_one_made_ahead_still_decays():
    B.clear_pool()
    size = 1 << 17
    kept = _second_allocation(size // 4, float32)
    B.prefill([size], peak=1 << 24)  # dated later than the array freed below
    ptr = kept.ptr
    del kept
    assert len(B._pool[size]) == 2
    freed_at = [e[3] for e in B._pool[size] if e[1] == ptr][0]
    assert B.trim_pool(freed_at + B.POOL_DECAY_S + 0.5) == size
    assert [e[1] for e in B._pool[size]] == list(B._prefilled)


TRIM_UNDER_COLLECTIONS = """
import gc, time
from fusegrad.ir.dtypes import float32
from fusegrad.runtime import buffer as B

B.clear_pool()
for n in (4096, 1 << 17, 3 << 20):
    for _ in range(3):
        kept = [B.Buffer(n // 4, float32) for _ in range(2)]
        del kept  # (pooled: allocated twice)
B.prefill([1 << 17] * 4, peak=1 << 24)
started = []  # whether the pool's lock was held as each collection started
gc.callbacks.append(lambda phase, info: phase == "start" and started.append(B._lock.locked()))
gc.set_threshold(1)  # a collection at every allocation of a container
freed = B.trim_pool(time.monotonic() + 3600)
gc.set_threshold(700)
gc.callbacks.clear()
print(freed, len(started), sum(started))
"""


def test_a_collection_started_inside_a_trim_never_waits_for_the_pool_s_lock():
    """`trim_pool` holds the pool's lock; a cyclic collection started by an allocation in
    there would run a dead Buffer's `__del__`, which takes the same lock, and the trimming
    thread would wait for itself for ever (every later allocation with it). Nothing is
    allocated under the lock: a collection is forced at every allocation, in a child
    process, and none starts while the lock is held."""
    out = subprocess.run(
        [sys.executable, "-c", TRIM_UNDER_COLLECTIONS], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    freed, collections, under_the_lock = map(int, out.stdout.split()[-3:])
    assert freed > 0 and collections > 0  # (it trimmed, and collections did start)
    assert under_the_lock == 0


FREE_UNDER_THE_LOCK = """
import sys
from fusegrad.ir.dtypes import float32
from fusegrad.runtime import buffer as B

B.clear_pool()
base = B._in_use
B.Buffer(1 << 14, float32)
buf = B.Buffer(1 << 14, float32)  # (a size allocated twice: pooled when freed)
ptr = buf.ptr
with B._lock:  # as a collection started under the lock runs a dead buffer's __del__
    del buf
    pending = len(B._deferred)
again = B.Buffer(1 << 14, float32)  # the lock's next holder makes the frees left waiting
print(pending, len(B._deferred), again.ptr == ptr, B._in_use - base)
"""


def test_a_buffer_freed_while_its_thread_holds_the_pool_s_lock_waits_for_no_one():
    """A cyclic collection may start at any allocation of a container, under the pool's
    lock too (`_take`, `_give`), and it runs the dead buffers' `__del__` on the thread
    that holds the lock: a `__del__` that waited for the lock would wait for itself, and
    every thread after it (the hang of a program whose model holds a reference cycle).
    The free waits in `_deferred` instead, and the lock's next holder makes it: the memory
    is pooled and the bytes in use counted back. In a child process, with a timeout."""
    out = subprocess.run(
        [sys.executable, "-c", FREE_UNDER_THE_LOCK], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    pending, left, reused, in_use = out.stdout.split()
    assert (pending, left, reused) == ("1", "0", "True")
    assert int(in_use) == (1 << 14) * 4  # `again`'s bytes alone
