"""Which layout each backend's kernels want: the options `compile_plan` expands macros under.

The frontend and nn build one graph for every device; the layout decisions (a matmul's
right operand packed into panels or AMX pairs, a convolution's padded input copied, its
windows gathered, its strided input gradient split into phases) are made inside the
expansions of their macros (ir/macro.py), which read the options given here
(`ir/layout.py`). This module is the one place that turns a backend's capability flags
(`runtime/backend_registry.py`: `packs_panels`, `packs_bf16_pairs`,
`guards_windows_in_tiles`) into them: the CPU packs panels, packs bfloat16 pairs where it
has AMX or AVX512-BF16, and copies padding; the GPU does none of these (its tiles stage
operands through shared memory, bounds-checked), so its graph is the neutral one.

>>> from fusegrad.runtime.backend_registry import get_backend
>>> layout_for(get_backend("cpu")).pack_panels
True
"""

from __future__ import annotations

from ..ir.layout import Layout


def layout_for(backend) -> Layout:
    """The layout options of `backend`'s kernels (a `Backend`, runtime/backend_registry.py)."""
    return Layout(
        pack_panels=bool(backend.packs_panels),
        pack_bf16_pairs=bool(backend.packs_bf16_pairs),
        copy_padding=not backend.guards_windows_in_tiles,
    )
