"""A concatenation's pieces split apart (`pipeline/pieces.py`): each element of a stack or
a cat of many pieces loads its own piece only, and computes the bits the padded sum did."""

from __future__ import annotations

import numpy as np
import pytest
from _special_rows import special_values

import fusegrad as fg
from fusegrad.ir.ops import Ops
from fusegrad.pipeline import lower as L
from fusegrad.pipeline.loopir import Load, Loop
from fusegrad.pipeline.pieces import split_pieces
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.cpu_backend import CpuBackend

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _joins_as_kernels(monkeypatch):
    """These tests lower joins of computed pieces, which `cat` and `stack` would otherwise
    copy on the host without a kernel (frontend/movement.py, `_host_values`)."""
    from fusegrad import movement

    monkeypatch.setattr(movement, "HOST_JOIN_PIECES", float("inf"))
    monkeypatch.setattr(movement, "HOST_JOIN_BYTES", -1)


def special(*shape) -> np.ndarray:
    """Random float32 values with the special points mixed in (`special_values`)."""
    return special_values(RNG, *shape, nonfinite=True)


def item_of(pieces: list[np.ndarray], build):
    """The one schedule item of `build(tensors)` and the input values in its order."""
    tensors = [fg.tensor(p) for p in pieces]
    values = {id(t.node): p for t, p in zip(tensors, pieces)}
    (item,) = schedule([build(tensors).node], lambda n: n.op is Ops.BUFFER)
    return item, [values[id(n)] for n in item.inputs]


def run(kernel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The kernel's outputs (every output parameter, NaN-filled first) on `inputs`."""
    compiled = CpuBackend().compile(kernel)
    outs = [np.full(p.size, np.nan, np.float32) for p in kernel.params if p.output]
    arrays = outs + [np.ascontiguousarray(x, np.float32).reshape(-1) for x in inputs]
    ptrs = [x.ctypes.data for x in arrays]
    word = np.zeros(1, np.int64)  # the cancel word, never set, for a kernel that reads it
    ptrs += [word.ctypes.data] * (compiled.nparams - len(ptrs))
    compiled.fn(0, kernel.parallel_extent, *ptrs)
    return outs


def loads(body) -> list[Load]:
    out = []
    for s in body:
        out += loads(s.body) if isinstance(s, Loop) else [s] if isinstance(s, Load) else []
    return out


def loops(body, kind: str) -> int:
    return sum((s.kind == kind) + loops(s.body, kind) for s in body if isinstance(s, Loop))


def unsplit(item):
    """The kernel `lower` made before this pass."""
    return L._lowered(item, True, False, False, None)


def test_a_stack_of_many_rows_loads_each_piece_once_an_element_with_the_same_bits():
    pieces = [special(4, 32) for _ in range(64)]
    item, inputs = item_of(pieces, fg.stack)
    kernel, before = L.lower(item), unsplit(item)
    assert len(loads(before.body)) == 64 and all(ld.valid for ld in loads(before.body))
    assert len(loads(kernel.body)) == 64  # one per piece, each in a loop of its own
    assert not any(ld.valid for ld in loads(kernel.body))  # and none guarded
    (got,), (was,) = run(kernel, inputs), run(before, inputs)
    assert got.tobytes() == was.tobytes()
    assert np.array_equal(got.reshape(64, 4, 32), np.stack(pieces), equal_nan=True)


@pytest.mark.parametrize("cols", [32, 512])
def test_a_stack_of_long_rows_copies_its_pieces_in_one_parallel_loop(cols):
    # 16 rows of 32 (512 elements a piece): the loops interchanged, each column a serial
    # loop over the pieces' rows, split (a row a piece: too short for a nest); 16 rows of
    # 512 (8192 a piece, INTERCHANGE_MAX_COLUMNS or more): one parallel loop over the rows,
    # each row reading its piece through a table
    from fusegrad.pipeline import pieces as P

    assert 16 * 32 < P.INTERCHANGE_MAX_COLUMNS <= 16 * 512
    parts = [special(16, cols) for _ in range(8)]
    item, inputs = item_of(parts, fg.stack)
    kernel, before = L.lower(item), unsplit(item)
    assert loops(kernel.body, "parallel") == 1
    assert [len(ld.pieces) for ld in loads(kernel.body)] == ([0] * 8 if cols == 32 else [8])
    (got,), (was,) = run(kernel, inputs), run(before, inputs)
    assert got.tobytes() == was.tobytes()
    assert np.array_equal(got.reshape(8, 16, cols), np.stack(parts), equal_nan=True)


@pytest.mark.parametrize("rows, cols", [(16, 64), (16, 1024)])
def test_a_sum_over_a_concatenations_rows_is_split_along_the_sum_and_adds_in_order(rows, cols):
    """The sum down a cat's columns (a bias's gradient over an RNN's time steps): lanes
    along the columns, the pieces' rows read down them (`step_along`), split apart."""
    pieces = [special(rows, cols) for _ in range(32)]
    item, inputs = item_of(pieces, lambda ts: fg.stack(ts).sum((0, 1)))
    kernel, before = L.lower(item), unsplit(item)
    assert "register tile" in kernel.tile_note  # a vector of columns, not one column a loop
    assert not any(ld.valid for ld in loads(kernel.body))
    (load,) = loads(kernel.body)  # one load, its piece picked by the row summed
    assert len(load.pieces) == 32 and len(loads(before.body)) == 32
    (got,), (was,) = run(kernel, inputs), run(before, inputs)
    assert got.tobytes() == was.tobytes()  # the same values added in the same order
    want = np.stack(pieces).astype(np.float64).sum((0, 1))
    assert np.allclose(got, want, rtol=1e-5, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_a_pieces_zero_keeps_the_padded_sums_sign(zero):
    """x + 0.0 is 0.0 where x is -0.0: the one addition a piece still makes keeps that."""
    pieces = [np.full((2, 8), zero, np.float32) for _ in range(8)]
    item, inputs = item_of(pieces, lambda ts: fg.cat(ts, 1))
    (got,), (was,) = run(L.lower(item), inputs), run(unsplit(item), inputs)
    assert got.tobytes() == was.tobytes()
    assert np.array_equal(
        fg.cat([fg.tensor(p) for p in pieces], 1).numpy(), np.concatenate(pieces, 1)
    )


def test_two_pieces_are_left_as_they_are():
    item, _ = item_of([special(4, 8), special(4, 8)], lambda ts: fg.cat(ts, 0))
    kernel = unsplit(item)
    assert split_pieces(kernel) is kernel


def test_a_stacks_gradient_through_its_steps_reads_is_right():
    """An LSTM's per-step reads of a sequence: the stacked gradient of 40 row reads."""
    seq = fg.tensor(special(40, 3, 16), requires_grad=True)
    w = special(40, 3, 16)
    rows = [seq[t] * fg.tensor(w[t]) for t in range(40)]
    fg.stack(rows).sum().backward()
    assert np.array_equal(seq.grad.numpy(), w, equal_nan=True)


def test_a_flat_concatenation_runs_each_piece_over_its_own_part_of_the_parallel_loop():
    """A 1-D cat has no loop but the parallel one: each range is a parallel loop over its
    part of the iterations (`Loop.first`), run over its part of every chunk."""
    pieces = [special(n) for n in (1000, 3, 2000, 517)]
    item, inputs = item_of(pieces, lambda ts: fg.cat(ts))
    kernel, before = L.lower(item), unsplit(item)
    parts = [s for s in kernel.body if isinstance(s, Loop) and s.kind == "parallel"]
    assert [p.first for p in parts] == [0, 1000, 1003, 3003]
    assert kernel.parallel_extent == before.parallel_extent == 3520
    assert not any(ld.valid for ld in loads(kernel.body))
    (got,), (was,) = run(kernel, inputs), run(before, inputs)
    assert got.tobytes() == was.tobytes()
    compiled = CpuBackend().compile(kernel)  # chunks that start and end inside the ranges
    out = np.full(3520, np.nan, np.float32)
    ptrs = [out.ctypes.data] + [np.ascontiguousarray(x).ctypes.data for x in inputs]
    for start, end in ((0, 999), (999, 1002), (1002, 3500), (3500, 3520)):
        compiled.fn(start, end, *ptrs)
    assert out.tobytes() == was.tobytes()


def test_a_long_flat_concatenation_on_every_thread_is_right():
    pieces = [special(n) for n in (300_001, 500_000, 1 << 20)]
    got = fg.cat([fg.tensor(p) for p in pieces]).numpy()
    assert np.array_equal(got, np.concatenate(pieces), equal_nan=True)


def test_row_sums_of_a_concatenations_rows_keep_their_accumulators_apart():
    """Each range of the parallel loop makes its own accumulator and stores it (a value read
    straight from an accumulator is read under the range's name for it)."""
    pieces = [special(3, 40) for _ in range(6)]
    item, inputs = item_of(pieces, lambda ts: fg.cat(ts, 0).sum(1))
    kernel = L.lower(item)
    assert len([s for s in kernel.body if isinstance(s, Loop)]) > 1
    # (the sums may round otherwise: a simpler loop is vectorized, its additions reordered)
    (got,) = run(kernel, inputs)
    want = np.concatenate(pieces).astype(np.float64).sum(1)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_a_stack_of_0d_tensors_and_a_cat_with_empty_pieces():
    """Pieces of one element each (a stack of scalars: a flat parallel loop cut into
    ranges of one) and empty pieces among full ones: values as numpy's, gradients each
    piece's own rows (empty pieces get empty gradients)."""
    values = [0.0, -0.0, 1.0, -1.0, 0.5, 0.5, np.inf, np.nan]
    scalars = [fg.tensor(np.float32(v), requires_grad=True) for v in values]
    stacked = fg.stack(scalars)
    assert np.array_equal(stacked.numpy(), np.array(values, np.float32), equal_nan=True)
    assert np.array_equal(np.signbit(stacked.numpy()), np.signbit(np.array(values, np.float32)))
    w = special(8)
    (stacked * fg.tensor(w)).sum().backward()
    assert [s.grad.shape for s in scalars] == [()] * 8
    assert np.array_equal(np.array([s.grad.item() for s in scalars], np.float32), w, equal_nan=True)

    shapes = [(3, 4), (0, 4), (2, 4), (0, 4), (1, 4), (5, 4)]
    arrays = [special(*s) for s in shapes]
    parts = [fg.tensor(a, requires_grad=True) for a in arrays]
    joined = fg.cat(parts, 0)
    assert np.array_equal(joined.numpy(), np.concatenate(arrays), equal_nan=True)
    g = special(11, 4)
    (joined * fg.tensor(g)).sum().backward()
    rows = np.cumsum([0] + [s[0] for s in shapes])
    for p, a, b in zip(parts, rows[:-1], rows[1:]):
        assert p.grad.shape == p.shape
        assert np.array_equal(p.grad.numpy(), g[a:b], equal_nan=True)


# ---------------------------------------------------------------- equal pieces as one loop


def tables(kernel) -> list[int]:
    """The pieces each load reads through a table (`Load.pieces`), 0 for a plain load."""
    return [len(ld.pieces) for ld in loads(kernel.body)]


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_equal_pieces_are_one_loop_reading_them_through_a_table_with_the_split_kernels_bits(
    rows,
):
    """A stack of 16 pieces of `rows` rows of 1024 (an RNN's time steps): one parallel loop
    over every row, a row's piece picked from a table of the 16 buffers."""
    parts = [special(rows, 1024) for _ in range(16)]
    item, inputs = item_of(parts, fg.stack)
    kernel, before = L.lower(item), unsplit(item)
    assert tables(kernel) == [16] and loops(kernel.body, "parallel") == 1
    assert "| ... |" in str(kernel)  # the dump says which buffers the table holds
    (got,), (was,) = run(kernel, inputs), run(before, inputs)
    assert got.tobytes() == was.tobytes()
    assert np.array_equal(got.reshape(16, rows, 1024), np.stack(parts), equal_nan=True)
    assert CpuBackend().compile(kernel).source.count("alloca [16 x ptr]") == 1


def test_a_piece_unlike_the_others_keeps_a_range_of_its_own():
    """A zero first piece (an RNN's initial state) and an odd-sized one in the middle: the
    alike pieces around them are two tables, the odd ones ranges of their own."""
    parts = [special(1, 2048) for _ in range(20)] + [special(3, 2048)]
    parts += [special(1, 2048) for _ in range(9)]
    tensors = [fg.tensor(p) for p in parts]
    zero = fg.zeros(1, 2048)
    (item,) = schedule([fg.cat([zero, *tensors]).node], lambda n: n.op is Ops.BUFFER)
    inputs = [parts[[id(t.node) for t in tensors].index(id(n))] for n in item.inputs]
    kernel, before = L.lower(item), unsplit(item)
    assert sorted(tables(kernel)) == [0, 9, 20]  # (the odd piece: a plain load)
    (got,), (was,) = run(kernel, inputs), run(before, inputs)
    assert got.tobytes() == was.tobytes()
    want = np.concatenate([np.zeros((1, 2048), np.float32), *parts])
    assert np.array_equal(got.reshape(want.shape), want, equal_nan=True)


def test_fewer_pieces_than_a_table_takes_stay_split():
    from fusegrad.pipeline import pieces as P

    parts = [special(2, 2048) for _ in range(P.REROLL_MIN_PIECES - 1)]
    item, inputs = item_of(parts, fg.stack)
    kernel = L.lower(item)
    assert tables(kernel) == [0] * len(parts)
    (got,) = run(kernel, inputs)
    assert np.array_equal(got.reshape(len(parts), 2, 2048), np.stack(parts), equal_nan=True)


def test_a_long_stack_compiles_as_one_loop_and_runs_on_every_thread():
    """65 time steps of 16 x 256 (an LSTM language model's outputs): one loop, not 65
    copies of it for LLVM to vectorize, and right whichever thread runs which rows."""
    parts = [special(16, 256) for _ in range(65)]
    got = fg.stack([fg.tensor(p) for p in parts]).numpy()
    assert np.array_equal(got, np.stack(parts), equal_nan=True)
    item, _ = item_of(parts, fg.stack)
    source = CpuBackend().compile(L.lower(item)).source
    assert source.count(".cond:") <= 3 and "alloca [65 x ptr]" in source


def test_a_flat_concatenation_of_alike_pieces_is_a_parallel_loop_over_its_pieces():
    """12 pieces of 1000: a nest, the parallel loop over the pieces around a loop over a
    piece's elements (which reads one buffer, and vectorizes), the kernel's parallel
    iterations the 12 pieces; right whichever chunks of them the threads take."""
    pieces = [special(1000) for _ in range(12)]
    item, inputs = item_of(pieces, lambda ts: fg.cat(ts))
    kernel, before = L.lower(item), unsplit(item)
    assert kernel.parallel_extent == 12 and before.parallel_extent == 12000
    assert tables(kernel) == [12] and loops(kernel.body, "parallel") == 1
    (was,) = run(before, inputs)
    compiled = CpuBackend().compile(kernel)
    out = np.full(12000, np.nan, np.float32)
    ptrs = [out.ctypes.data] + [np.ascontiguousarray(x).ctypes.data for x in inputs]
    for start, end in ((0, 5), (5, 6), (6, 12)):
        compiled.fn(start, end, *ptrs)
    assert out.tobytes() == was.tobytes()
    assert np.array_equal(out, np.concatenate(pieces), equal_nan=True)


def test_a_pieces_loads_are_told_apart_from_the_kernels_stores():
    """An address loaded from the table could be an output's for all LLVM knows: the loads
    through it are in an alias scope every store is outside of, so a stack along a middle
    axis (64 steps of 50 x 64: a piece is 64 contiguous floats a row) copies in vectors,
    where it copied element by element."""
    parts = [special(50, 64) for _ in range(64)]
    item, inputs = item_of(parts, lambda ts: fg.stack(ts, 1))
    kernel, before = L.lower(item), unsplit(item)
    assert tables(kernel) == [64]
    compiled = CpuBackend().compile(kernel)
    assert "!alias.scope" in compiled.source and "!noalias" in compiled.source
    assert "load <" in compiled.optimized_ir  # vectors, after LLVM's passes
    (got,), (was,) = run(kernel, inputs), run(before, inputs)
    assert got.tobytes() == was.tobytes()
    assert np.array_equal(got.reshape(50, 64, 64), np.stack(parts, 1), equal_nan=True)


def test_a_table_of_pieces_with_empty_ones_among_them_keeps_values_and_gradients():
    """12 pieces of 2 x 1024 read through a table, empty pieces among them (they make no
    range): the values and their signs as numpy's at 0, -0, +-1, 0.5, NaN and -inf, and
    each piece's gradient its own rows of the incoming one (empty pieces: empty)."""
    shapes = [(2, 1024)] * 4 + [(0, 1024)] + [(2, 1024)] * 5 + [(0, 1024)] + [(2, 1024)] * 3
    arrays = [special(*s) for s in shapes]
    tensors = [fg.tensor(a, requires_grad=True) for a in arrays]
    item, _ = item_of(arrays, lambda ts: fg.cat(ts))
    assert tables(L.lower(item)) == [12]  # one table over the 12 full pieces
    joined = fg.cat(tensors)
    want = np.concatenate(arrays)
    assert np.array_equal(joined.numpy(), want, equal_nan=True)
    assert np.array_equal(np.signbit(joined.numpy()), np.signbit(want))
    w = special(24, 1024)
    (joined * fg.tensor(w)).sum().backward()
    at = 0
    for t, a in zip(tensors, arrays):
        assert t.grad.shape == a.shape
        assert np.array_equal(t.grad.numpy(), w[at : at + len(a)], equal_nan=True)
        at += len(a)
