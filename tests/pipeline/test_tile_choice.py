"""Register tiles chosen from a plain loop nest's loads (pipeline/tile_choice.py): the
lanes' axis scored by the data it loads contiguously, the rows' axis by the data the rows
share, and the tiles that take a kernel's sibling reductions."""

from __future__ import annotations

import numpy as np

import fusegrad as fg
from fusegrad.ir.ops import Ops
from fusegrad.pipeline import lower as L
from fusegrad.pipeline import tile_choice as T
from fusegrad.pipeline.schedule import schedule


def plain_of(t):
    """(item, plain loop nest, output groups) of t's one kernel, as `lower` groups it."""
    (item,) = schedule([t.node], lambda n: n.op is Ops.BUFFER)
    groups = L._merge_loops(item, True)
    return item, groups.plain(), groups.out


def test_a_matmuls_columns_run_along_the_right_operands_contiguous_axis():
    """In a @ b, lanes along the output's columns load b contiguously (+ b's size) and
    leave a unchanged; lanes along its rows would gather a (- a's size). The rows unrolled
    are the output's rows, which share each vector of b."""
    m, k, n = 64, 48, 96
    a, b = fg.randn(m, k).realize(), fg.randn(k, n).realize()
    item, plain, out_groups = plain_of(a @ b)
    reads = T.tile_reads(plain, item, out_groups)
    assert sorted(ld.param.size for ld in reads.loads) == sorted([m * k, k * n])
    assert reads.extents == [m, n] and reads.inner.max + 1 == k
    widths = [T._column_width(e) for e in reads.extents]
    assert [T.column_score(reads, widths, g) for g in (0, 1)] == [-m * k, k * n]
    tile = T.choose_tile(plain, item, out_groups)
    assert (tile.col, tile.row, tile.lanes) == (1, 0, False)
    assert tile.cols in T.TILE_COLS and n % tile.cols == 0
    # (a host with 16 registers may leave a ragged last tile of 6 rows: NARROW_RAGGED_FROM)
    assert m % tile.rows == 0 or (not T.wide_registers() and m >= T.NARROW_RAGGED_FROM)


def test_a_long_row_sum_is_left_to_the_vectorizer():
    """Every load contiguous along a long sum and no output axis a load does not move
    with: no tile (the sum cascades, pipeline/reductions.py)."""
    x = fg.randn(64, 4096).realize()
    item, plain, out_groups = plain_of(x.sum(1))
    assert T.choose_tile(plain, item, out_groups) is None


def test_a_column_sum_takes_lanes_along_its_columns():
    """A sum down the columns reads x with a stride along the sum: its lanes run along
    the contiguous columns."""
    x = fg.randn(512, 64).realize()
    item, plain, out_groups = plain_of(x.sum(0))
    tile = T.choose_tile(plain, item, out_groups)
    assert tile is not None and not tile.lanes and 64 % tile.cols == 0


def test_sibling_reductions_fit_a_tile_while_their_accumulators_fit_the_registers():
    most = T.TILE_MAX_ACCUMULATORS
    tile = T.Tile(1, 32, 0, most // 32)
    assert T.fits_siblings(tile, 0)
    assert not T.fits_siblings(tile, 1)  # twice the accumulators
    assert T.fits_siblings(T.Tile(1, 32), most // 32 - 1)
    assert not T.fits_siblings(T.Tile(None, 32, 0, 1, lanes=True), 1)  # lanes along the sum


def test_a_packed_operand_moves_with_its_columns_loop():
    """16 rows times a weight packed in panels of 32 columns (a recurrent step's h @ W.T):
    the panel's index holds the columns' variable only inside `% 32` and `// 32`, and it
    moves with that loop all the same, so the columns' tiles go outermost: each panel is
    read once and stays in L1 while both row tiles use it, where with the rows outermost
    every row tile read the whole 1 MB weight again (and each thread all of it)."""
    h = fg.randn(16, 256).realize()
    w = fg.randn(1024, 256).realize()
    panels = w.T.reshape(256, 32, 32).permute(1, 0, 2).contiguous().realize()
    packed = panels.permute(1, 0, 2).reshape(256, 1024)
    item, plain, out_groups = plain_of(h @ packed)
    tile = T.choose_tile(plain, item, out_groups)
    assert (tile.col, tile.row) == (1, 0)
    assert tile.first == 1  # the columns' tiles outermost
    np.testing.assert_allclose((h @ packed).numpy(), h.numpy() @ w.numpy().T, rtol=1e-4, atol=1e-4)
