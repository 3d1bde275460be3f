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


def test_an_entry_goes_when_its_node_dies():
    base = len(N._CACHE)
    x = _leaf()
    for i in range(20_000):
        N.binary(Ops.MUL, x, N.const(float(i), (4,), float32))  # each dies at once
    # x's entry and the constants made last (`RECENT_CONSTANTS`, kept), none of the dead ones
    assert len(N._CACHE) <= base + 4 + N.RECENT_CONSTANTS


def test_dead_nodes_leave_nothing_for_the_collectors_oldest_generation():
    """What a training step builds and drops must die with the step: entries that lingered
    in the table (a key and a reference a node) were promoted to the garbage collector's
    oldest generation, and a full collection walked the program's every object once every
    hundred steps of a small model."""
    x = _leaf()

    def build(count: int) -> None:
        for i in range(count):
            N.unary(Ops.EXP, N.binary(Ops.MUL, x, N.const(float(i), (4,), float32)))

    build(200)  # what the first graphs of a process make once (tables, the recent constants)
    gc.collect()
    before = len(gc.get_objects())
    build(5_000)
    gc.collect()
    assert len(gc.get_objects()) - before < 50


def test_deaths_inside_a_collection_whose_finalizers_build_nodes():
    """A garbage collection may free nodes (their entries' callbacks run) while finalizers
    build nodes (inserting into the table): no error, and the table ends with exactly the
    live nodes' entries."""
    x = _leaf()
    built, stop = [], []

    class BuildsOnDeath:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it
            self.node = N.unary(Ops.SQRT, N.binary(Ops.ADD, x, _leaf()))  # dies with it

        def __del__(self):
            if not stop:
                built.append(N.unary(Ops.EXP, N.binary(Ops.ADD, x, _leaf())))
                BuildsOnDeath()  # garbage for the next collection: every one builds nodes

    old = gc.get_threshold()
    try:
        BuildsOnDeath()
        gc.set_threshold(1)  # a collection at nearly every allocation
        for i in range(2_000):
            N.binary(Ops.MUL, x, N.const(float(i), (4,), float32))
    finally:
        stop.append(True)
        gc.set_threshold(*old)
        gc.collect()
    assert built
    assert all(ref() is not None for ref in list(N._CACHE.values()))


def test_threads_building_and_dropping_nodes():
    """Threads that build, drop and share nodes (entries going as their nodes die, in
    whichever thread drops the last reference) never see an error. (Two threads building
    one node at once may, rarely, each get their own copy: equal values, a missed
    sharing, never a wrong one.)"""
    import threading

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


def test_an_index_node_is_each_elements_position_through_every_view():
    # INDEX holds no data: the reference evaluator, the CPU's kernels and a view of it agree
    import fusegrad as fg
    from fusegrad.ir import node as N
    from fusegrad.ir.dtypes import int32, int64
    from fusegrad.ir.reference import evaluate

    for dt in (int64, int32):
        n = N.index((6, 5), dt)
        views = [
            n,
            N.permute(n, (1, 0)),
            N.flip(n, (0,)),
            N.pad(n, ((1, 2), (0, 3))),
            N.shrink(n, ((1, 4), (2, 5))),
            N.expand(N.reshape(N.index((5,), dt), (1, 5)), (3, 5)),
        ]
        for v in views:
            want = evaluate(v)
            got = fg.Tensor(N.add(v, N.const(0, v.shape, dt))).numpy()
            assert got.dtype == dt.np and (got == want).all(), v
    assert evaluate(N.index((2, 3), int64)).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_promote_scalar_s_fast_cases_agree_with_the_categories():
    """A Python float with a float tensor, and a Python int with a non-bool one, keep the
    tensor's dtype (promote_scalar answers those without comparing categories); every other
    pair is still promoted by category, as PyTorch does."""
    from fusegrad.ir import dtypes as D

    every = [D.bool_, D.uint8, D.int8, D.int32, D.int64, D.float16, D.bfloat16, D.float32]
    every.append(D.float64)
    for t in every:
        for value in (2.5, -0.0, 3, 0, True, False):
            s = D.scalar_dtype(value)
            if s.category > t.category:
                want = D.default_float() if s.kind == "f" else D.int64 if s.kind == "i" else s
            else:
                want = t
            assert D.promote_scalar(t, value) is want, (t, value)


def test_constants_keep_their_kind_sign_and_nan_apart():
    from fusegrad.ir.dtypes import bool_, int32

    assert N.const(2, (2,), float32).arg == 2.0 and type(N.const(2, (2,), float32).arg) is float
    assert type(N.const(2.7, (2,), int32).arg) is int and N.const(2.7, (2,), int32).arg == 2
    assert N.const(3, (2,), bool_).arg is True
    assert N.const(0.0, (2,), float32) is not N.const(-0.0, (2,), float32)
    assert N.const(1.5, (2,), float32) is N.const(1.5, (2,), float32)
    nan = float("nan")  # (two NaN objects: never one node; the same object is equal to itself)
    assert N.const(nan, (2,), float32) is not N.const(float("nan"), (2,), float32)
