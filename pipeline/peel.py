"""Peeling a register-tiled kernel's edges off its loops, so its interior runs unguarded.

A convolution that reads its input through a padding view (a depthwise one: no padded
copy, whose pass would cost about what the convolution does) loads every window tap
under bounds tests (`Load.valid`, one `expr >= 0` each). Only the tiles at an edge can
fail them. This pass splits a loop whose guards depend on its variable into up to three
loops over consecutive ranges, the edge before, the interior, the edge after, each a copy
of the body with the variable shifted to its range (`o -> o' + start`), and then drops
every guard that holds over the ranges its variables now have. The interior's loads are
plain vector loads; an edge keeps only the guards it needs. Splitting a loop into
consecutive ranges runs the same iterations in the same order, so every value, a sum's
rounding included, is what the unpeeled kernel computes.

A guard `a * o + rest >= 0` holds for every value of the other variables when
`a * o + min(rest) >= 0`: from `ceil(-min(rest) / a)` on if `a > 0`, up to
`floor(min(rest) / -a)` if `a < 0`. The interior of `o` is where all of its guards hold.

>>> from fusegrad.ir.symbolic import Var, lin
>>> o, t = Var("o", 0, 3), Var("t", 0, 15)
>>> interior_of(o, [o * 16 + t - 1, o * -16 - t + 55])
(1, 2)
"""

from __future__ import annotations

import dataclasses

from ..ir.symbolic import FloorDiv, Lin, Mod, Var, lin
from .loopir import (
    AccInit,
    Kernel,
    Load,
    LoadRow,
    Loop,
    ScatterAdd,
    Select,
    Store,
    has_reduce_loop,
    reading_through,
)

# how many copies of the innermost body peeling may make in all (three ranges a loop, so
# three loops peeled: a 2-D tile's row and column tiles, and one tap loop at an edge)
PEEL_MAX_COPIES = 27
_GUARDED = (Load, LoadRow, ScatterAdd, Select, Store)
_ACC_FIELDS = ("acc", "acc_max", "acc_sum")  # the fields that name an accumulator


def peel_guarded_loops(kernel: Kernel) -> Kernel:
    """`kernel` with each serial or reduction loop whose guards depend on its variable
    split into its edges and its interior (the module's docstring), where some load reads
    a window's taps through padding (`guards_taps`); otherwise `kernel` itself."""
    if not _guards_taps(kernel.body, set(), set()):
        return kernel
    body = _peel_block(kernel.body, PEEL_MAX_COPIES)
    return dataclasses.replace(kernel, body=[_simplified(s) for s in body])


def peel_padded_outputs(kernel: Kernel) -> Kernel:
    """`kernel`, a kernel with no sum (elementwise: a padded copy, or a producer written
    into one), with each serial loop whose guards depend on its variable split into its
    edges and its interior (the module's docstring); otherwise `kernel` itself. Guarded
    per element, such a loop reaches LLVM's vectorizer as masked gathers (a padded copy
    ran at under half a plain copy's bandwidth); its interior is then a plain copy."""
    if has_reduce_loop(kernel.body) or not any(_guarded_serial(s) for s in kernel.body):
        return kernel
    body = _short_rows_as_vectors(_peel_block(kernel.body, PEEL_MAX_COPIES, parallel=True))
    return dataclasses.replace(kernel, body=[_simplified(s) for s in body])


# Innermost loops of these extents in a peeled copy are rendered as one vector each
# (`_short_rows_as_vectors`)
SHORT_ROW_LANES = (8, 16, 32)


def _short_rows_as_vectors(body) -> list:
    """`body` with each innermost serial loop of `SHORT_ROW_LANES` iterations made a vector
    loop (the renderer's own vectors). Left to LLVM, such a short row (a 16-pixel row of a
    padded copy: a transposed convolution's 32x128x16^2 input) is unrolled whole and then
    vectorized across the rows, with gathers and scatters, three times slower than a
    vector a row. A kernel with no sum: the loop's iterations are independent."""
    out = []
    for s in body:
        if isinstance(s, Loop):
            innermost = not any(isinstance(b, Loop) for b in s.body)
            if innermost and s.kind == "serial" and s.extent in SHORT_ROW_LANES:
                s = dataclasses.replace(s, kind="vector")
            elif not innermost:
                s = dataclasses.replace(s, body=_short_rows_as_vectors(s.body))
        out.append(s)
    return out


def _guarded_serial(s) -> bool:
    """Whether loop `s` or one inside it is serial with a guard depending on its variable."""
    if not isinstance(s, Loop):
        return False
    if s.kind == "serial" and any(g.coef(s.var) for g in _all_guards(s.body)):
        return True
    return any(_guarded_serial(b) for b in s.body)


def unrolled_by_period(kernel: Kernel, name: str, period: int) -> Kernel:
    """`kernel` with its loop over variable `name` (a tile loop over a merged row and
    column) unrolled by `period`: `for q: body(q)` becomes `for b: body(P*b), body(P*b+1),
    ..., body(P*b+P-1)`, the same iterations in the same order. Each copy's tile starts at
    a fixed place in the row pattern, so its index expressions simplify there: a vector
    that stays in one row reads one contiguous run, and one that crosses a row is known
    to (`pipeline/coords.py`, `split_lanes`), at a cut fixed when the kernel is compiled.
    `kernel` itself where there is no such loop or `period` does not divide it."""
    if period <= 1:
        return kernel
    found = []
    body = _unrolled_in(kernel.body, name, period, found)
    if not found:
        return kernel
    extent = kernel.parallel_extent
    if found[0].kind == "parallel":
        extent //= period
    return dataclasses.replace(kernel, body=body, parallel_extent=extent)


def _unrolled_in(body, name: str, period: int, found: list) -> list:
    out = []
    for s in body:
        if not isinstance(s, Loop):
            out.append(s)
        elif s.var.name == name and s.kind != "vector" and s.extent % period == 0:
            found.append(s)
            var = Var(name, 0, s.extent // period - 1)
            copies = []
            for j in range(period):
                env = {s.var: lin(var) * period + j}
                names = {a: f"{a}_{name}u{j}" for a in _accumulators(s.body)}
                copies += [_substituted(b, env, names) for b in s.body]
            out.append(dataclasses.replace(s, var=var, extent=s.extent // period, body=copies))
        else:
            out.append(dataclasses.replace(s, body=_unrolled_in(s.body, name, period, found)))
    return out


def guards_taps(guards, reduce_vars: set, lane_vars: set = frozenset()) -> bool:
    """Whether a guard ties a reduction variable to an output one: a window's tap (output
    position plus tap) tested against the padding. A sum's ragged last vector tests the
    reduction variable and the lanes alone, and does not count.

    >>> from fusegrad.ir.symbolic import Var
    >>> o, r, t = Var("o", 0, 3), Var("r", 0, 2), Var("t", 0, 15)
    >>> guards_taps([o * 16 + r + t - 1], {r}, {t}), guards_taps([r * -16 - t + 19], {r}, {t})
    (True, False)
    """
    for g in guards:
        atoms = {a for a in g.atoms() if isinstance(a, Var)}
        if atoms & reduce_vars and atoms - reduce_vars - lane_vars:
            return True
    return False


def _guards_taps(body, reduce_vars: set, lane_vars: set) -> bool:
    """Whether some load in `body` reads a window's taps through padding (`guards_taps`)."""
    for s in body:
        if isinstance(s, Loop):
            reduce = reduce_vars | {s.var} if s.kind == "reduce" else reduce_vars
            lanes = lane_vars | {s.var} if s.kind == "vector" else lane_vars
            if _guards_taps(s.body, reduce, lanes):
                return True
        elif isinstance(s, (Load, LoadRow)) and guards_taps(s.valid, reduce_vars, lane_vars):
            return True
    return False


def interior_of(var: Var, guards) -> tuple[int, int] | None:
    """The range (inclusive) of `var` over which every guard that depends on it holds for
    all values of the other variables; None when no guard depends on `var` as a plain term
    (or one sits inside a division, which this does not solve)."""
    lo, hi, found = var.min, var.max, False
    for g in guards:
        a = g.coef(var)
        if any(isinstance(t, (FloorDiv, Mod)) and var in t.x.atoms() for t in g.atoms()):
            return None
        if a == 0:
            continue
        found = True
        least = (g - lin(var) * a).min
        if a > 0:
            lo = max(lo, -(least // a))  # ceil(-least / a)
        else:
            hi = min(hi, least // -a)
    return (lo, hi) if found else None


def _all_guards(body):
    for s in body:
        if isinstance(s, Loop):
            yield from _all_guards(s.body)
        elif isinstance(s, _GUARDED):
            yield from s.valid


def _peel_block(body, budget: int, parallel: bool = False) -> list:
    """`body` with its serial and reduction loops peeled (`_ranges`), and with
    `parallel`, the kernel's parallel loop too: each of its ranges a parallel loop over
    that part of the parallel iterations (`Loop.first`), as `pieces` cuts one (a matmul's
    right operand packed in panels of 32 columns, 5000 of them: the last panel's guards
    depend on the panel, so the others copy their rows unguarded)."""
    out = []
    for s in body:
        if not isinstance(s, Loop):
            out.append(s)
            continue
        whole_range = parallel and s.kind == "parallel" and s.first is None
        peeled = s.kind in ("serial", "reduce") or whole_range
        parts = _ranges(s, budget) if peeled else [(0, s.extent)]
        share = max(budget // len(parts), 1)
        for k, (start, stop) in enumerate(parts):
            loop = s if (start, stop) == (0, s.extent) else _shifted(s, start, stop, k)
            if whole_range and loop is not s:
                loop = dataclasses.replace(loop, first=start)
            out.append(dataclasses.replace(loop, body=_peel_block(loop.body, share)))
    return out


def _ranges(loop: Loop, budget: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of the loop's iterations: its edges and its interior."""
    whole = [(0, loop.extent)]
    if budget < 2:
        return whole
    interior = interior_of(loop.var, list(_all_guards(loop.body)))
    if interior is None:
        return whole
    lo, hi = max(interior[0], 0), min(interior[1], loop.extent - 1)
    if lo > hi or (lo, hi) == (0, loop.extent - 1):
        return whole
    cuts = [(0, lo), (lo, hi + 1), (hi + 1, loop.extent)]
    cuts = [(a, b) for a, b in cuts if b > a]
    return cuts if len(cuts) <= budget else whole


def _shifted(loop: Loop, start: int, stop: int, part: int) -> Loop:
    """The loop over iterations [start, stop), as a loop from 0 with its variable shifted;
    the accumulators it makes are renamed for `part` (a renderer declares each name once)."""
    var = Var(loop.var.name, 0, stop - start - 1)
    env = {loop.var: lin(var) + start}
    names = {a: f"{a}_{loop.var.name}{part}" for a in _accumulators(loop.body)}
    body = [_substituted(s, env, names) for s in loop.body]
    return dataclasses.replace(loop, var=var, extent=stop - start, body=body)


def _accumulators(body) -> list[str]:
    out = []
    for s in body:
        if isinstance(s, Loop):
            out += _accumulators(s.body)
        elif isinstance(s, AccInit):
            out.append(s.acc)
    return out


def _substituted(s, env: dict, names: dict[str, str]):
    """A copy of statement `s` with every index expression's variables replaced per `env`
    and its accumulators renamed per `names` (where they are made, updated, and read as
    values: a store of an accumulator)."""
    if isinstance(s, Loop):
        return dataclasses.replace(s, body=[_substituted(b, env, names) for b in s.body])
    s = reading_through(s, names)
    changes = {}
    for name, v in _expr_fields(s):
        changes[name] = (
            v.substitute(env) if isinstance(v, Lin) else tuple(e.substitute(env) for e in v)
        )
    for name in _ACC_FIELDS:
        if getattr(s, name, None) in names:
            changes[name] = names[getattr(s, name)]
    return dataclasses.replace(s, **changes)


def _expr_fields(s):
    """(name, value) of each field of statement `s` that holds an index or guard
    expression (a Lin) or a tuple of them."""
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        if isinstance(v, Lin) or (
            isinstance(v, tuple) and v and all(isinstance(e, Lin) for e in v)
        ):
            yield f.name, v


def _simplified(s):
    """`s` without the guards that hold wherever its variables range."""
    if isinstance(s, Loop):
        return dataclasses.replace(s, body=[_simplified(b) for b in s.body])
    if isinstance(s, _GUARDED) and s.valid:
        kept = tuple(g for g in s.valid if g.min < 0)
        if len(kept) != len(s.valid):
            return dataclasses.replace(s, valid=kept)
    return s


# strides of an interleave whose phases a loop is split into (`split_phases`), and the
# most copies of the innermost body the splits may make (a 2-D stride 2: 4)
PHASE_STRIDES = (2, 3, 4)
PHASE_MAX_COPIES = 16


def split_phases(kernel: Kernel) -> Kernel:
    """`kernel`, a kernel with no sum, with each serial loop whose variable `o` its
    indices and guards read only as `o // s` and `o % s` (s in `PHASE_STRIDES`, dividing
    the loop's extent) split into its phases: `o = s * a + b`, a loop over `a` whose body
    is `s` copies of the loop's body, one per `b` (at most `PHASE_MAX_COPIES` copies of the
    innermost body in all). The interleave of a strided convolution's input gradient from
    its phases (`nn/correlate.py`, `transposed_by_phases`) reads phase `b`'s own array at
    `o // s`: per element a choice of array by `o % s`, which LLVM's vectorizer loaded as
    gathers (its 32x64x56^2 interleave at 12 GB/s). Split, each copy reads one array at
    `a`, contiguous, its guards constant (and dropped), and the innermost copies' stores
    at `s * a + b` are one interleaved group, which LLVM stores whole with shuffles (the
    same interleave at 45 GB/s, a copy's speed). The same iterations run, in another
    order: the kernel has no sum, so no value changes. `kernel` itself where no loop is
    such.

    >>> from fusegrad.ir.dtypes import float32
    >>> from fusegrad.pipeline.loopir import Param
    >>> o = Var("o", 0, 7)
    >>> even, odd = Param("in0", float32, 4, False), Param("in1", float32, 4, False)
    >>> out = Param("out0", float32, 8, True)
    >>> body = [Load("v", float32, even, lin(o) // 2, (lin(o) % 2 * -1,)),
    ...         Load("w", float32, odd, lin(o) // 2, (lin(o) % 2 - 1,)),
    ...         Store(out, lin(o), "v")]
    >>> loop = split_phases(Kernel("k", [out, even, odd], [Loop(o, 8, body)], 1)).body[0]
    >>> (loop.var.name, loop.extent, [(s.index, s.valid) for p in loop.body for s in p.body])
    ('o', 4, [(o, ()), (o, (-1,)), (o*2, ()), (o, (-1,)), (o, ()), (o*2 + 1, ())])
    """
    if has_reduce_loop(kernel.body):
        return kernel
    body, copies = _split_block(kernel.body)
    if copies == 1:
        return kernel
    extent = next((s.extent for s in body if isinstance(s, Loop) and s.kind == "parallel"), None)
    return dataclasses.replace(
        kernel,
        body=[_simplified(s) for s in body],
        parallel_extent=kernel.parallel_extent if extent is None else extent,
    )


def _split_block(body) -> tuple[list, int]:
    """`body` with its loops split (`split_phases`), and how many copies of its innermost
    statements that made."""
    out, most = [], 1
    for s in body:
        if not isinstance(s, Loop):
            out.append(s)
            continue
        inner, copies = _split_block(s.body)
        s = dataclasses.replace(s, body=inner) if copies > 1 else s
        split = _phase_split(s, copies) if s.kind in ("serial", "parallel") else None
        if split is not None:
            s, copies = split
        out.append(s)
        most = max(most, copies)
    return out, most


def _phase_split(loop: Loop, copies: int) -> tuple[Loop, int] | None:
    """`loop` split into its phases (`split_phases`) and the copies of the innermost body
    it then holds (`copies` before), or None where it is not such a loop."""
    v = loop.var
    uses = {a for e in _exprs(loop.body) for a in e.atoms() if isinstance(a, (FloorDiv, Mod))}
    uses = {a for a in uses if v in a.x.atoms()}
    strides = {a.c for a in uses}
    if len(strides) != 1:
        return None
    (s,) = strides
    if s not in PHASE_STRIDES or loop.extent % s or any(a.x.coef(v) != 1 for a in uses):
        return None
    if copies * s > PHASE_MAX_COPIES:
        return None
    a = Var(v.name, 0, loop.extent // s - 1)
    body = []
    for b in range(s):
        names = {n: f"{n}_{v.name}p{b}" for n in _accumulators(loop.body)}
        copy = [_substituted(x, {v: lin(a) * s + b}, names) for x in loop.body]
        # each copy in a scope of its own (a loop of one iteration, unrolled: LLVM sees
        # straight-line code), whose values are named as the other copies' (C declares each
        # name once a scope: the kernel's CUDA C view)
        body.append(Loop(Var(f"{v.name}_p{b}", 0, 0), 1, copy, "unroll"))
    left = {t for e in _exprs(body) for t in e.atoms()}
    if any(isinstance(t, (FloorDiv, Mod)) and a in t.x.atoms() for t in left):
        return None  # an index the split leaves divided: not an interleave
    return dataclasses.replace(loop, var=a, extent=a.max + 1, body=body), copies * s


def _exprs(body):
    """Every index and guard expression of the statements in `body`."""
    for s in body:
        if isinstance(s, Loop):
            yield from _exprs(s.body)
            continue
        for _, v in _expr_fields(s):
            yield from (v,) if isinstance(v, Lin) else v


def split_digits(kernel: Kernel) -> Kernel:
    """`kernel`, a padded copy (no sum, a guarded load), with each loop whose variable `o`
    its indices and guards read only as digits of one mixed radix (`o // d`, `o % m`,
    `(o // d) % m`, and `o` itself: an im2col's 1024 pixels as 16 x 8 x 8 and its 2304
    taps as 256 x 3 x 3) made one loop per digit, outermost first: `o = sum d_i v_i`. The
    digits' indices and the window's bounds are then affine, so the edges peel off
    (`peel_padded_outputs`) and no element divides; the same iterations run in the same
    order. A loop with a single cut (`o // s`, `o % s`) is `split_phases`' to take; a
    parallel loop keeps its most significant digit parallel (`Kernel.parallel_extent`)."""
    if has_reduce_loop(kernel.body) or next(_all_guards(kernel.body), None) is None:
        return kernel
    body, extent = _digits_block(kernel.body)
    if body is None:
        return kernel
    return dataclasses.replace(
        kernel, body=body, parallel_extent=kernel.parallel_extent if extent is None else extent
    )


def _digits_block(body) -> tuple[list | None, int | None]:
    """`body` with its loops split into digits (`split_digits`), or None where none is;
    and the parallel loop's new extent, where it was split."""
    out, changed, extent = [], False, None
    for s in body:
        if not isinstance(s, Loop):
            out.append(s)
            continue
        inner, _ = _digits_block(s.body)  # (an inner loop is serial)
        if inner is not None:
            s, changed = dataclasses.replace(s, body=inner), True
        cuts = _digit_cuts(s) if s.kind in ("serial", "parallel") and s.first is None else None
        if cuts is not None:
            s, changed = _split_into_digits(s, cuts), True
            if s.kind == "parallel":
                extent = s.extent
        out.append(s)
    return (out if changed else None), extent


def _digit_cuts(loop: Loop) -> list[int] | None:
    """The radix's place values [1, d1, d2, ..., extent] of `loop`'s variable, each
    dividing the next, where the body reads it only through them (`o // d`, `o % m`,
    `(o // d) % m`) and needs two or more cuts; else None."""
    o, cuts = loop.var, set()
    for atom in {a for e in _exprs(loop.body) for a in e.atoms()}:
        if not isinstance(atom, (FloorDiv, Mod)) or o not in atom.x.atoms():
            continue
        if atom.x == lin(o):
            cuts.add(atom.c)
            continue
        # the one other form: (o // d) % m
        (inner, coef), *rest = atom.x.terms
        digit = isinstance(atom, Mod) and not rest and coef == 1 and atom.x.const == 0
        if not (digit and isinstance(inner, FloorDiv) and inner.x == lin(o)):
            return None
        cuts.update((inner.c, inner.c * atom.c))
    places = sorted({1, loop.extent} | {c for c in cuts if 1 < c < loop.extent})
    if len(places) < 4 or any(b % a for a, b in zip(places, places[1:])):
        return None  # (fewer than two cuts: `split_phases`' or nothing to split)
    return places


def _split_into_digits(loop: Loop, places: list[int]) -> Loop:
    """`loop` as nested loops over its digits (`_digit_cuts`' place values), the most
    significant outermost, of the loop's kind; the others serial."""
    digits = [
        Var(f"{loop.var.name}_{k}", 0, places[k + 1] // places[k] - 1)
        for k in range(len(places) - 1)
    ]
    value = lin(0)
    for d, place in zip(digits, places):
        value = value + lin(d) * place
    body = [_substituted(s, {loop.var: value}, {}) for s in loop.body]
    for k, d in enumerate(digits):  # innermost (least significant) first
        kind = loop.kind if k == len(digits) - 1 else "serial"
        body = [dataclasses.replace(loop, var=d, extent=d.max + 1, body=body, kind=kind)]
    return body[0]
