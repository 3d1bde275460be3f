"""Tile sizes that both graph building and code generation depend on.

They are the lowering's (pipeline/tile_choice.py's register tiles). A large matmul's right
operand is packed into panels by the frontend (a graph rewrite: a CONTIGUOUS of a
permuted view) so that the kernel the lowering makes for it streams one panel at a time:
the panel width must be a tile width of the lowering, and the size from which packing
pays is the cache size the lowering assumes. The frontend reads them from here (the one
module of the pipeline's lowering it may import: tests/test_layering.py).

>>> from fusegrad.pipeline.tiling import TILE_COLS
>>> TILE_COLS[0] in (8, 16, 32)
True
"""

import math

TILE_COLS = (32, 16, 8)  # vector lanes a register tile's row may have, widest first
PANEL_CACHE_BYTES = 1 << 21  # an input this big does not stay in cache across row tiles
# Lane steps a CPU vector load reads without a gather: a load whose address moves by s
# (2, 3 or 4) per lane is one masked load of s x W contiguous elements, every s-th lane
# picked by a shuffle (pipeline/llvm.py, `shuffled_load`). A strided convolution's windows
# read in place: the frontend keeps them in place at these strides (nn/conv.py).
SHUFFLED_LANE_STEPS = (2, 3, 4)
# From this width an output row that 16-lane vectors would leave ragged (56 pixels: 3.5
# vectors) takes 16-lane vectors, the last masked, on AVX-512; and a convolution's such rows
# are merged with each other where the tile then runs whole vectors along the merged
# pixels (pipeline/lower.py, `_rows_merged`). LeNet's 24-pixel rows keep 8-lane vectors.
RAGGED_16_FROM = 40
# ... and from this width such rows merge where the tile's vectors would be ragged: 56 and
# 40 (16 lanes a vector from RAGGED_16_FROM) and 28, a stride-2 convolution's output rows
# over 56 pixels (16 + 12 lanes unmerged, 49 whole vectors merged). Between 24 and 40 only
# 28 has a short period.
ROWS_MERGE_FROM = 24


# ... where the pattern of vectors crossing rows repeats within this many tiles (the tile
# loop is unrolled by it: 7 for 56-pixel rows at 32 lanes, compiled in 0.36 s; 15 for 60
# pixels took 0.56 s, and a prime width would take a copy per pixel)
MAX_ROW_PERIOD = 8


def row_period(lanes: int, width: int) -> int:
    """Tiles of `lanes` lanes along merged rows of `width` after which the pattern of
    vectors crossing a row repeats."""
    return math.lcm(lanes, width) // lanes


def rows_merge(width: int) -> bool:
    """Whether rows of `width` are of the width whose tiles merge rows on an AVX-512 host
    (`ROWS_MERGE_FROM` on, not a multiple of 8, or from `RAGGED_16_FROM` not of 16: 16-lane
    vectors would leave them ragged; a short period at 16 lanes: 28, 40 and 56). The
    lowering's merges ask it first (pipeline/lower.py, `_rows_merged`, `_sum_rows_merged`),
    and nn/conv.py of a convolution's output rows."""
    ragged = width % 8 != 0 or (width >= RAGGED_16_FROM and width % 16 != 0)
    return width >= ROWS_MERGE_FROM and ragged and row_period(16, width) <= MAX_ROW_PERIOD
