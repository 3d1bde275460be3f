"""The bookkeeping of `packed_pairs` (frontend/reduce.py), which keeps the AMX-packed copies
of matmul's right operands: on stand-in buffers, so it runs on every host (the products
that use it are in tests/pipeline/test_amx.py, where the host has AMX tiles)."""

from __future__ import annotations

import gc

from fusegrad.ir.dtypes import bfloat16
from fusegrad.reduce import _PackedPairs


class Buf:
    """A stand-in for a CPU buffer: a size, a dtype, and weak references."""

    def __init__(self, size: int):
        self.size, self.dtype = size, bfloat16


def test_a_buffer_is_noted_first_and_its_copy_kept_second():
    cache, b, view = _PackedPairs(1 << 20), Buf(1024), ((32, 32), ())
    assert cache.look(b, view) == (False, None)
    assert cache.look(b, view) == (True, None)
    copy = Buf(1024)
    cache.keep(b, view, copy)
    assert cache.look(b, view) == (True, copy) and cache.bytes == 2048
    # another view of the same buffer is another copy
    assert cache.look(b, ((32, 32), (("PERMUTE", (1, 0), (32, 32)),))) == (False, None)


def test_an_entry_goes_with_its_buffer():
    cache, view = _PackedPairs(1 << 20), ((32, 32), ())
    b = Buf(1024)
    cache.look(b, view)
    cache.keep(b, view, Buf(1024))
    assert cache.bytes == 2048
    del b
    gc.collect()
    assert cache.entries == {} and cache.bytes == 0


def test_the_least_recently_used_copies_go_past_the_bound():
    cache, view = _PackedPairs(3 * 2048), ((32, 32), ())
    bufs = [Buf(1024) for _ in range(4)]
    for b in bufs[:3]:
        cache.look(b, view)
        cache.keep(b, view, Buf(1024))
    cache.look(bufs[0], view)  # used again: bufs[1] is now the least recently used
    cache.look(bufs[3], view)
    cache.keep(bufs[3], view, Buf(1024))
    kept = [cache.look(b, view)[1] is not None for b in bufs]
    assert kept == [True, False, True, True] and cache.bytes == 3 * 2048
    # a copy bigger than the bound is never kept; the buffer stays noted
    big = Buf(4096)
    cache.look(big, view)
    cache.keep(big, view, Buf(4096))
    assert cache.look(big, view) == (True, None) and cache.bytes == 3 * 2048


def test_a_copy_for_a_buffer_not_noted_or_gone_is_not_kept():
    cache, view = _PackedPairs(1 << 20), ((32, 32), ())
    cache.keep(Buf(1024), view, Buf(1024))
    assert cache.entries == {} and cache.bytes == 0
