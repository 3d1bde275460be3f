"""Coordinates and linear indices of row-major arrays, shared by the CPU lowerings
(`pipeline/loop_nest.py`, `pipeline/amx.py`).

>>> from fusegrad.ir.symbolic import Var, lin
>>> i = Var("i", 0, 3)
>>> linear_index((lin(i), lin(2)), (4, 5))
i*5 + 2
"""

from __future__ import annotations

import math

from ..ir.symbolic import FloorDiv, Lin, Mod, lin


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


def split_lanes(e: Lin, t, lanes: int) -> tuple[Lin, int, int] | None:
    """`(x, d, jump)` where the `lanes` lanes of index `e` (lane variable `t`) read at most
    two contiguous runs: `e` moves by 1 per lane except where `x` (the lane's position
    along a merged group of axes, `x` moving by 1 per lane) crosses a multiple of `d`
    (`d` >= `lanes`, so once at most), where it jumps by a further `jump`. Such is a
    convolution's window read over a merged (row, column) output axis: row h, column w
    of a 58-wide padded input at `(p % 56) + (p // 56) * 58`, one more element skipped
    at each new row. None for any other index.

    >>> from fusegrad.ir.symbolic import Var, lin
    >>> q, t = Var("q", 0, 195), Var("t", 0, 15)
    >>> p = lin(q) * 16 + t
    >>> x, d, jump = split_lanes(p % 56 + (p // 56) * 58 + 7, t, 16)
    >>> (x == p, d, jump)
    (True, 56, 2)
    >>> split_lanes(p % 56 + (p // 56) * 58, t, 64) is None  # a row shorter than the lanes
    True
    >>> split_lanes((p + p // 3) % 56, t, 16) is None  # lanes that do not step by 1
    True
    """
    inner = [(a, k) for a, k in e.terms if isinstance(a, (FloorDiv, Mod)) and t in a.x.atoms()]
    if not inner:
        return None
    x, d = inner[0][0].x, inner[0][0].c
    if any(a.x != x or a.c != d for a, _ in inner) or d < lanes:
        return None
    nested = (a for a, _ in x.terms if isinstance(a, (FloorDiv, Mod)))
    if x.coef(t) != 1 or any(t in a.x.atoms() for a in nested):
        return None
    div = sum(k for a, k in inner if isinstance(a, FloorDiv))
    mod = sum(k for a, k in inner if isinstance(a, Mod))
    if e.coef(t) + mod != 1:  # each run contiguous: one element per lane
        return None
    return x, d, div - mod * d
