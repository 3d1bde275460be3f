"""The hash-consing table: equal nodes are one node, and the table keeps none alive."""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np

from fusegrad.ir import node as N
from fusegrad.ir.dtypes import float32
from fusegrad.ir.ops import Ops
from fusegrad.runtime.buffer import Buffer


def _leaf(n: int = 4) -> N.Node:
    return N.buffer(Buffer.from_numpy(np.arange(n, dtype=np.float32), float32), (n,), float32)


def test_equal_nodes_are_one_node_and_sources_tell_them_apart():
    x, y = _leaf(), _leaf()
    assert N.unary(Ops.EXP, x) is N.unary(Ops.EXP, x)
    assert N.binary(Ops.ADD, x, y) is N.binary(Ops.ADD, x, y)
    assert N.binary(Ops.ADD, x, y) is not N.binary(Ops.ADD, y, x)
    assert N.unary(Ops.EXP, x) is not N.unary(Ops.EXP, y)
    assert N.const(0.0, (2,), float32) is not N.const(-0.0, (2,), float32)


def test_the_table_holds_no_node_alive():
    x = _leaf()
    chain = N.unary(Ops.EXP, N.binary(Ops.ADD, x, x))
    refs = [weakref.ref(chain), weakref.ref(chain.srcs[0])]
    del chain
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_node_rebuilt_after_its_twin_died_is_a_fresh_node_on_its_own_sources():
    # a dead entry's key names ids that new objects may reuse: such an entry never answers
    for _ in range(200):
        x = _leaf()
        e = N.unary(Ops.EXP, x)
        assert e.srcs[0] is x
        del x, e


def test_dead_entries_are_swept_as_the_table_grows():
    base = len(N._CACHE)
    x = _leaf()
    for i in range(3 * N._SWEEP_MIN):
        N.binary(Ops.MUL, x, N.const(float(i), (4,), float32))  # each dies at once
    # swept whenever it doubled: never more than twice the live entries (and the minimum)
    assert len(N._CACHE) <= max(2 * base, N._SWEEP_MIN) + 2


def test_a_sweep_survives_finalizers_that_build_nodes(monkeypatch):
    """A garbage collection may run mid-sweep (the sweep allocates) and with it finalizers
    that build nodes (inserting into the table): the sweep walks a private copy, so that
    never raises "dictionary changed size during iteration"."""
    x = _leaf()
    built, stop = [], []

    class BuildsOnDeath:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it

        def __del__(self):
            if not stop:
                built.append(N.unary(Ops.EXP, N.binary(Ops.ADD, x, _leaf())))
                BuildsOnDeath()  # garbage for the next collection: every one builds nodes

    monkeypatch.setattr(N, "_sweep_at", [1 << 30])  # no sweep while the table fills
    for i in range(20_000):  # dead entries, more than the 2-tuple free list holds
        N.binary(Ops.MUL, x, N.const(float(i), (4,), float32))
    old = gc.get_threshold()
    gc.disable()  # the cycle waits for the sweep's allocations
    try:
        BuildsOnDeath()
        gc.set_threshold(1)  # a collection at nearly every allocation
        gc.enable()
        N._sweep()
    finally:
        stop.append(True)
        gc.set_threshold(*old)
        gc.enable()
        gc.collect()
    assert built


def test_threads_building_nodes_while_the_table_is_swept(monkeypatch):
    """Sweeps run often here (a small table): threads that build, drop and share nodes
    meanwhile never see an error. (Two threads building one node at once may, rarely,
    each get their own copy: equal values, a missed sharing, never a wrong one.)"""
    import threading

    monkeypatch.setattr(N, "_SWEEP_MIN", 256)
    monkeypatch.setattr(N, "_sweep_at", [256])
    x = _leaf()
    errors: list = []

    def work(k: int) -> None:
        try:
            for i in range(3000):
                c = N.const(float(i % 97), (4,), float32)
                a = N.binary(Ops.MUL, x, c)
                assert a.op is Ops.MUL and a.srcs[0] is x and a.srcs[1] is c
                N.unary(
                    Ops.EXP, N.binary(Ops.ADD, a, N.const(float(k * 10_000 + i), (4,), float32))
                )
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns between almost any two bytecodes
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
