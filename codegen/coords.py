"""Coordinates and linear indices of row-major arrays, shared by the CPU lowerings
(`codegen/lower.py`, `codegen/amx.py`).

>>> from fusegrad.ir.symbolic import Var, lin
>>> i = Var("i", 0, 3)
>>> linear_index((lin(i), lin(2)), (4, 5))
i*5 + 2
"""

from __future__ import annotations

import math

from ..ir.symbolic import Lin, lin


def strides_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements: strides_of((2, 3, 4)) == (12, 4, 1)."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def linear_index(coords: tuple[Lin, ...], shape: tuple[int, ...]) -> Lin:
    idx = lin(0)
    for c, st, s in zip(coords, strides_of(shape), shape):
        if s != 1:
            idx = idx + c * st
    return idx


def squeeze_coords(coords, shape, target_shape) -> tuple[Lin, ...]:
    """Coordinates in `target_shape` of the same element, for shapes equal up to size-1 axes."""
    if tuple(shape) == tuple(target_shape):
        return tuple(coords)
    flat = linear_index(coords, shape)
    return tuple(
        lin(0) if s == 1 else (flat // st) % s
        for st, s in zip(strides_of(target_shape), target_shape)
    )


def coords_from_groups(shape, groups, loop_vars) -> tuple[Lin, ...]:
    """Coordinates of every axis, given one loop variable per group of adjacent axes."""
    coords = [lin(0)] * len(shape)
    for group, v in zip(groups, loop_vars):
        rest = lin(v)
        sizes = [shape[a] for a in group]
        for k, a in enumerate(group):
            inner = math.prod(sizes[k + 1 :])
            coords[a] = (rest // inner) % shape[a] if k else rest // inner
    return tuple(coords)
