"""A kernel's name and symbol: what it mainly does and its output shape (`r_sum_64x128`),
plus a hash of its source once rendered."""

from __future__ import annotations

import hashlib

from ..ir.ops import REDUCE, TRANSCENDENTAL, Ops
from .schedule import ScheduleItem

# what a kernel name mentions besides its reductions: the float functions (ir/ops.py's
# MATH), random numbers, padding, gathers and scatters
_NOTABLE = TRANSCENDENTAL | {Ops.RAND, Ops.PAD, Ops.GATHER, Ops.SCATTER_ADD}


def kernel_name(item: ScheduleItem) -> str:
    """A readable, stable name: what the kernel mainly does, and its output shape."""
    notable = []
    for n in item.nodes:
        name = n.op.name.lower()
        if n.op in REDUCE or n.op in _NOTABLE:
            name = {"reduce_max": "max"}.get(name, name)
            if name not in notable:
                notable.append(name)
    kind = "r" if any(n.op in REDUCE for n in item.nodes) else "e"
    shape = "x".join(map(str, item.root.shape)) or "scalar"
    return "_".join([kind] + notable[:4] + [shape])


def kernel_symbol(source: str, name: str) -> str:
    """The symbol a compiled kernel is exported as: its name plus a hash of its source."""
    return f"{name}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"


def base_name(symbol: str) -> str:
    """A kernel's name without the hash `kernel_symbol` adds (`r_sum_64x128`)."""
    head, _, tail = symbol.rpartition("_")
    return head if len(tail) == 12 and all(c in "0123456789abcdef" for c in tail) else symbol
