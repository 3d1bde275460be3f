"""The codegen's tile sizes that the frontend's matmul panel packing must agree with
(codegen/tiling.py), passed up through the runtime: the frontend never imports codegen.

>>> from fusegrad.runtime.tiling import TILE_COLS
>>> TILE_COLS[0] in (8, 16, 32)
True
"""

from ..codegen.tiling import PANEL_CACHE_BYTES, SHUFFLED_LANE_STEPS, TILE_COLS, rows_merge

__all__ = ["PANEL_CACHE_BYTES", "SHUFFLED_LANE_STEPS", "TILE_COLS", "rows_merge"]
