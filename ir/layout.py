"""Layout options: the data-layout choices a backend makes when macros are expanded.

The frontend and nn build one graph for every device. Where the fastest kernels on one
device want the data in another layout (a matmul's right operand copied into panels of
columns, or into AMX's pairs; a convolution's input padded in a copy rather than read
through bounds checks), the library op is a macro (ir/macro.py) and its expansion asks
`current()` which layout to build. `compile_plan` (pipeline/driver.py) expands a plan's
macros under its backend's options (`pipeline/layout.py`, from the backend's flags);
everything else that expands a graph (autodiff, the reference evaluator, `graph_dot`)
gets `NEUTRAL`, the form with no copies for layout's sake.

>>> current() is NEUTRAL
True
>>> with using(Layout(pack_panels=True)):
...     current().pack_panels
True
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """What an expansion copies for the kernels of the device it is compiled for.

    - `pack_panels`: a matmul's right operand too big for cache (or read along K by
      enough rows) is copied into panels of columns (frontend/reduce.py `_product`), and
      convolutions block their input gradient's channels and copy strided weights;
    - `pack_bf16_pairs`: an AMX-shaped bfloat16 matmul packs its right operand in pairs
      along K and its left one in 16 x 32 tiles (pipeline/amx.py, pipeline/dpbf16.py);
    - `copy_padding`: a convolution's padded input (or gathered windows, or stride
      phases) is a copy its tiles read unguarded, rather than a view whose windows the
      tiles read through bounds checks (nn/correlate.py `padded`).
    """

    pack_panels: bool = False
    pack_bf16_pairs: bool = False
    copy_padding: bool = False


NEUTRAL = Layout()


class _State(threading.local):
    layout = NEUTRAL
    read = False  # whether an expansion built under `layout` asked for it


_state = _State()


def current() -> Layout:
    """The layout the expansion being built asks for (NEUTRAL outside `using`)."""
    _state.read = True
    return _state.layout


@contextmanager
def using(layout: Layout):
    """Build expansions under `layout` inside the block (on this thread)."""
    before = _state.layout
    _state.layout = layout
    try:
        yield
    finally:
        _state.layout = before


@contextmanager
def noting_reads():
    """Yields a list that gets one bool when the block ends: whether `current()` was
    called inside it (an expansion that never asked is the same under every layout)."""
    before = _state.read
    _state.read = False
    out: list[bool] = []
    try:
        yield out
    finally:
        out.append(_state.read)
        _state.read = before or _state.read
