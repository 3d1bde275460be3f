"""A concatenation's pieces split apart, so each element reads only its own piece.

`cat` and `stack` are sums of zero-padded pieces (`frontend/shapeops.py`), and so is
the gradient of many reads of one sequence's rows (an RNN's time steps: `nn/rnn.py`).
Lowered as written, every element of the result loads every piece under a guard that
tells whether the element lies in it, and adds them all: 64 pieces cost 64 guarded
loads and 64 additions an element, where a copy costs one of each (an LSTM step's
stacked gradients ran at a fiftieth of a copy's bandwidth).

This pass finds a loop whose guards depend on its variable alone (`o`, or `o // c`: a
merged loop's row), cuts the loop at every point where one of them changes, and makes
each range a loop of its own with its variable shifted there, where every guard is
constant: a guard that always holds is dropped, a load or select under one that never
does is the zero it would give, a store under one is dropped, and additions of those
zeros go (`_folded`). The ranges run the same iterations in the same order, so a sum
over a split reduction loop adds the same values in the same order, but for what any sum
allows (docs/NUMERICS.md): a loop made simpler may be vectorized, its additions then
reordered across lanes.

The additions a piece no longer makes are exact to leave out: `x + 0.0` is `x` for
every `x` but -0.0, and after the first piece's addition no value is -0.0 any more
(-0.0 + 0.0 is 0.0), so a piece's value passes through the one addition it still makes,
and the result has the padded sum's bits.

A kernel's parallel loop is split over threads in chunks: cut into ranges, each range
is a parallel loop over its part of the parallel iterations (`Loop.first`), which the
renderer runs over its part of each chunk. Where the pieces are rows of a few elements
each (a stack of 64 steps: each piece one row) and the parallel loop's body one serial
loop, the two loops are interchanged instead (the kernel has no sum, so its iterations
are independent) and the row loop, now serial, is split: each range then copies a
contiguous run, which vectorizes. Rows of `INTERCHANGE_MAX_COLUMNS` or more elements are
long contiguous copies already, and are split as they are, each range a parallel loop.
"""

from __future__ import annotations

import dataclasses
import math

from ..ir.ops import Ops
from ..ir.symbolic import FloorDiv, Lin, Var, lin
from .loopir import (
    Alu,
    Const,
    Kernel,
    Load,
    LoadRow,
    Loop,
    Param,
    ScatterAdd,
    Select,
    Store,
    has_reduce_loop,
    reading_through,
    values_read,
)
from .peel import _accumulators, _all_guards, _shifted, _substituted
from .reductions import zero_value

MIN_PIECES = 3  # a loop is split where this many loads, or more, read pieces under guards...
MAX_RANGES = 256  # ...into at most this many ranges...
MAX_COPIED = 1 << 16  # ...making at most this many statements in all (before folding)
# a loop cut into this many ranges or more, of one length and alike but for the pieces
# they read, stays one loop reading its pieces through a table (`_runs`)
REROLL_MIN_PIECES = 8
# ...and where a piece's loads lie in the loop cut itself, only with this many iterations
# a piece or more, as a nest (`_runs`): a loop over 64 pieces of 3 rows each, a table
# entry a piece, ran at 0.6x the speed of its 64 copies (each unrolled whole by LLVM)
NEST_MIN_LENGTH = 16
MAX_ROWS_PER_PIECE = 4  # a parallel loop is interchanged where no piece has more rows...
# ...and its rows are shorter than this: a long row is a contiguous copy of its own, where
# interchanged every column wrote a row of each piece (a stack of 64 pieces of 16 x 1024:
# 0.64 ms interchanged, 0.33 not; of 64 x 16 x 256, 0.21 and 0.11; Intel Xeon)
INTERCHANGE_MAX_COLUMNS = 1024


def split_pieces(kernel: Kernel) -> Kernel:
    """`kernel` with each loop whose guards cut it into a concatenation's pieces split
    into one loop per range (the module's docstring); `kernel` itself where none is.

    >>> from fusegrad.ir.dtypes import float32
    >>> from fusegrad.ir.symbolic import lin
    >>> from fusegrad.pipeline.loopir import Param
    >>> o, j = Var("o0", 0, 2), Var("o1", 0, 7)
    >>> ins = [Param(f"in{k}", float32, 8, False) for k in range(3)]
    >>> out = Param("out0", float32, 24, True)
    >>> body, last = [], None
    >>> for k in range(3):  # a stack of 3 rows of 8: piece k where o0 == k
    ...     at = (lin(o) - k, lin(o) * -1 + k)
    ...     body += [Load(f"v{k}", float32, ins[k], lin(j), at)]
    ...     body += [Select(f"s{k}", float32, at, f"v{k}")]
    ...     if last is not None:
    ...         body.append(Alu(f"a{k}", float32, Ops.ADD, (last, f"s{k}")))
    ...     last = f"a{k}" if k else "s0"
    >>> rows = Loop(o, 3, [Loop(j, 8, body + [Store(out, lin(o) * 8 + j, last)])], "parallel")
    >>> split = split_pieces(Kernel("stack", [out, *ins], [rows], 3))
    >>> print(split)  # each row one piece: one load and one addition of 0.0 (exact)
    kernel stack(out0: float32[24], in0: float32[8], in1: float32[8], in2: float32[8])
      parallel for o1 in 0..8:
        for o0 in 0..1:
          v0 = load in0[o1]
          s1 = 0.0
          a1 = add(v0, s1)
          store out0[o0*8 + o1] = a1
        for o0 in 0..1:
          s0 = 0.0
          v1 = load in1[o1]
          a1 = add(s0, v1)
          store out0[o0*8 + o1 + 8] = a1
        for o0 in 0..1:
          a1 = 0.0
          v2 = load in2[o1]
          a2 = add(a1, v2)
          store out0[o0*8 + o1 + 16] = a2
    """
    if kernel.uses_tiles:
        return kernel
    body, parallel_extent = kernel.body, kernel.parallel_extent
    swapped = _interchanged(kernel)
    if swapped is not None:
        body, parallel_extent = swapped
    split, changed = _split_block(body)
    if not changed:
        return kernel
    for s in split:  # a parallel loop made a nest over its pieces (`_runs`): now its extent
        if isinstance(s, Loop) and s.kind == "parallel" and s.first is None:
            parallel_extent = s.extent
    return dataclasses.replace(kernel, body=split, parallel_extent=parallel_extent)


def _interchanged(kernel: Kernel) -> tuple[list, int] | None:
    """The kernel's body with its parallel loop over a stack's rows and the serial loop
    inside it interchanged, and the new parallel extent; None where that does not hold."""
    body = kernel.body
    if len(body) != 1 or not isinstance(body[0], Loop) or body[0].kind != "parallel":
        return None
    rows = body[0]
    if len(rows.body) != 1 or not isinstance(rows.body[0], Loop) or has_reduce_loop(body):
        return None
    inner = rows.body[0]
    if inner.kind != "serial" or _accumulators(body) or inner.extent >= INTERCHANGE_MAX_COLUMNS:
        return None
    cut = _ranges(dataclasses.replace(rows, kind="serial"))
    if cut is None or max(b - a for a, b in cut[0]) > MAX_ROWS_PER_PIECE:
        return None
    row_loop = Loop(rows.var, rows.extent, inner.body, "serial")
    return [Loop(inner.var, inner.extent, [row_loop], "parallel")], inner.extent


def _split_block(body) -> tuple[list, bool]:
    out, changed = [], False
    for s in body:
        if not isinstance(s, Loop):
            out.append(s)
            continue
        whole = s.kind == "parallel" and s.first is None
        cut = _ranges(s) if s.kind in ("serial", "reduce") or whole else None
        if cut is None:
            inner, deeper = _split_block(s.body)
            out.append(dataclasses.replace(s, body=inner) if deeper else s)
            changed |= deeper
            continue
        ranges, holds = cut
        # every guard on the loop's variable is settled for each range first (`_pruned`),
        # the pieces it never reads fold away, and only what is left is copied
        settled = _settled(s.body, holds)
        bodies = [
            _dead_dropped(_folded(_pruned(settled, start, stop), _Known()))
            for start, stop in ranges
        ]
        runs = list(_runs(s, ranges, bodies, whole))
        for k, (first, last, body) in enumerate(runs):
            start, stop = ranges[first][0], ranges[last - 1][1]
            if isinstance(body, Loop):  # a nest over alike pieces (`_run_from`)
                names = {a: f"{a}_{s.var.name}{k}" for a in _accumulators(body.body)}
                part = _substituted(body, {}, names)
            elif stop - start == s.extent:  # one run of alike pieces: the loop as it was
                part = dataclasses.replace(s, body=body)
            else:
                part = _shifted(dataclasses.replace(s, body=body), start, stop, k)
                if whole:  # a range of the kernel's parallel iterations (`Loop.first`)
                    part = dataclasses.replace(part, first=start)
            inner, _ = _split_block(part.body)
            out.append(dataclasses.replace(part, body=inner))
        changed = True
    return out, changed


# ---------------------------------------------------------------- equal pieces as one loop


def _runs(loop: Loop, ranges: list[tuple[int, int]], bodies: list, whole: bool):
    """The ranges of `loop` in runs: (first range, range past the last, the run's body,
    or a loop nest in its place). A run of `REROLL_MIN_PIECES` ranges or more of one length
    whose bodies (each settled for its range) compute the same but for the loads of the
    pieces, each range's reading its own buffer at the same place relative to the range's
    start (`_Alike`), is one loop whose body reads its pieces through a table of their
    buffers (`Load.pieces`); every other range is a run of its own, with its own body.

    A stack of 64 time steps' vectors is then one loop, not 64 copies of it, which LLVM
    compiled in 0.5-1 s a kernel (each copy vectorized and unrolled on its own). Each
    iteration computes what its range's copy computed, in the same order.

    Where a piece's loads lie directly in the loop cut (a flat concatenation: no loop
    inside), a run of ranges of `NEST_MIN_LENGTH` iterations or more is a nest, a loop
    over the pieces around a loop over a piece's iterations, so the inner loop reads one
    buffer (and vectorizes as the range's copy did); a parallel loop becomes such a nest
    only whole (the kernel's parallel iterations are then its pieces: `split_pieces`).
    Shorter pieces stay split."""
    i = 0
    while i < len(ranges):
        j, body = _run_from(loop, ranges, bodies, i, whole)
        if body is None:  # alike, but left split
            yield from ((k, k + 1, bodies[k]) for k in range(i, j))
        else:
            yield i, j, body
        i = j


def _run_from(loop: Loop, ranges, bodies, i: int, whole: bool):
    """The range past the longest run of alike ranges from range i, and its body or nest
    (`_runs`); (i + 1, range i's body) where the run is too short."""
    length = ranges[i][1] - ranges[i][0]
    v, first = loop.var, ranges[i][0]
    inside = Var(f"{v.name}.in", 0, length - 1)  # the place in a range

    def relative(e: Lin, start: int) -> Lin:
        return e.substitute({v: lin(inside) + start})

    tables: dict[int, list[Param]] = {}  # id of a load of range i's -> later pieces' buffers
    keys, flat = None, False  # the loads that read pieces; whether one lies in the loop cut
    j = i + 1
    while j < len(ranges) and ranges[j][1] - ranges[j][0] == length:
        start = ranges[j][0]
        alike = _Alike(lambda e: relative(e, first), lambda e, at=start: relative(e, at))
        if not alike.bodies(bodies[i], bodies[j], {}, {}, 0):
            break
        if keys is not None and alike.read.keys() != keys:
            break
        keys, flat = alike.read.keys(), flat or alike.flat
        for key, param in alike.read.items():
            tables.setdefault(key, []).append(param)
        j += 1
    count = j - i
    if count < REROLL_MIN_PIECES:
        return i + 1, bodies[i]
    if flat:
        if length < NEST_MIN_LENGTH:
            return j, None  # (a stack's few rows a piece, as columns: split, it runs faster)
        if loop.kind == "parallel" and not (whole and count == len(ranges)):
            return j, None  # (a nest of part of the parallel iterations: none)
        p = Var(f"{v.name}p", 0, count - 1)
        u = Var(f"{v.name}u", 0, length - 1)
        place = {inside: lin(u)}
        body = _tabled(bodies[i], tables, lambda e: relative(e, first).substitute(place), lin(p))
        at = {v: lin(p) * length + u + first}
        body = [_substituted(s, at, {}) for s in body]
        inner = Loop(u, length, body, "serial" if loop.kind == "parallel" else loop.kind)
        return j, Loop(p, count, [inner], loop.kind)
    offset = lin(v) - first
    place = {inside: offset % length}

    def index_of(e: Lin) -> Lin:
        return relative(e, first).substitute(place)

    return j, _tabled(bodies[i], tables, index_of, offset // length)


class _Alike:
    """Whether a later range's body computes what the first range's does (`_runs`): its
    effects (stores, accumulations, loops) the same, in the same order, of values computed
    alike, whichever order a body computes them in and either way round an addition or a
    product of two values takes its operands (x + y and y + x are the same bits), but for
    loads of pieces: each reads a buffer of its own (`read`: id of the first range's load ->
    the later range's buffer) at the same place relative to its range's start (`a_rel` and
    `b_rel` of an index). `flat`: a piece's load lies in the loop cut itself, not in a loop
    inside it."""

    def __init__(self, a_rel, b_rel):
        self.a_rel, self.b_rel = a_rel, b_rel
        self.read: dict[int, Param] = {}
        self.same: set[int] = set()  # ids of the first range's loads read alike
        self.flat = False
        self.pairs: dict[tuple, bool] = {}  # (a value, b value) -> alike
        self.made: dict[str, str] = {}  # b's value -> a's, of values effects make

    def bodies(self, a_body, b_body, a_defs: dict, b_defs: dict, depth: int) -> bool:
        a_defs, b_defs = dict(a_defs), dict(b_defs)
        a_fx = [s for s in a_body if not self._pure(s, a_defs, depth)]
        b_fx = [s for s in b_body if not self._pure(s, b_defs, depth)]
        if len(a_fx) != len(b_fx):
            return False
        for a, b in zip(a_fx, b_fx):
            if type(a) is not type(b):
                return False
            if isinstance(a, Loop):
                if dataclasses.replace(a, body=[]) != dataclasses.replace(b, body=[]):
                    return False  # (another variable, extent, kind, lanes or range)
                if not self.bodies(a.body, b.body, a_defs, b_defs, depth + 1):
                    return False
                continue
            a_vals, b_vals = values_read(a), values_read(b)
            if len(a_vals) != len(b_vals):
                return False
            if not all(self.value(x, y, a_defs, b_defs) for x, y in zip(a_vals, b_vals)):
                return False
            b = reading_through(b, dict(zip(b_vals, a_vals)))
            if getattr(a, "dst", None) is not None:
                self.made[b.dst] = a.dst
                b = dataclasses.replace(b, dst=a.dst)
            if a != b:
                return False
        return True

    @staticmethod
    def _pure(s, defs: dict, depth: int) -> bool:
        if isinstance(s, _PURE):
            defs[s.dst] = (s, depth)
            return True
        return False

    def value(self, x: str, y: str, a_defs: dict, b_defs: dict) -> bool:
        da, db = a_defs.get(x), b_defs.get(y)
        key = (id(da[0]) if da else x, id(db[0]) if db else y)
        if key not in self.pairs:
            self.pairs[key] = False  # (while it is being compared)
            if da is None or db is None:  # made by an effect, or an accumulator's name
                ok = da is None and db is None and self.made.get(y, y) == x
            else:
                ok = self._statement(da[0], db[0], da[1], a_defs, b_defs)
            self.pairs[key] = ok
        return self.pairs[key]

    def _statement(self, a, b, depth: int, a_defs: dict, b_defs: dict) -> bool:
        if type(a) is not type(b) or a.dtype != b.dtype:
            return False
        if isinstance(a, Const):
            return repr(a.value) == repr(b.value)  # (0.0 is not -0.0)
        if isinstance(a, Alu):
            if a.op is not b.op or len(a.args) != len(b.args):
                return False
            pairs = zip(a.args, b.args)
            if all(self.value(x, y, a_defs, b_defs) for x, y in pairs):
                return True
            if a.op in (Ops.ADD, Ops.MUL) and len(a.args) == 2:  # (commutative, bit for bit)
                pairs = zip(a.args, reversed(b.args))
                return all(self.value(x, y, a_defs, b_defs) for x, y in pairs)
            return False
        if isinstance(a, Select):
            return a.valid == b.valid and self.value(a.value, b.value, a_defs, b_defs)
        if isinstance(a, LoadRow):
            return self.value(a.row, b.row, a_defs, b_defs) and a == dataclasses.replace(
                b, dst=a.dst, row=a.row
            )
        b = dataclasses.replace(b, dst=a.dst)
        if a == b and id(a) not in self.read:
            self.same.add(id(a))
            return True  # read alike in every range
        if (
            id(a) in self.same
            or a.pieces
            or b.pieces
            or a.param.dtype != b.param.dtype
            or self.a_rel(a.index) != self.b_rel(b.index)
            or tuple(map(self.a_rel, a.valid)) != tuple(map(self.b_rel, b.valid))
            or self.read.get(id(a), b.param) != b.param
        ):
            return False
        self.read[id(a)] = b.param
        self.flat = self.flat or depth == 0
        return True


def _tabled(body, tables: dict, index_of, piece: Lin) -> list:
    """`body` with each load of `tables` (id -> the later pieces' buffers) reading the
    piece `piece` picks, at its place in the piece (`index_of`)."""
    out = []
    for s in body:
        if isinstance(s, Loop):
            s = dataclasses.replace(s, body=_tabled(s.body, tables, index_of, piece))
        elif id(s) in tables:
            s = dataclasses.replace(
                s,
                index=index_of(s.index),
                valid=tuple(map(index_of, s.valid)),
                pieces=(s.param, *tables[id(s)]),
                piece=piece,
            )
        out.append(s)
    return out


# ---------------------------------------------------------------- where a loop is cut


def _ranges(loop: Loop) -> tuple[list[tuple[int, int]], dict] | None:
    """[start, stop) ranges of `loop` over each of which every guard on its variable is
    constant, where the guards read pieces (MIN_PIECES loads or more) of the variable alone,
    and where each such guard holds (guard -> (+1, from) or (-1, until)); None otherwise."""
    v = loop.var
    guards = {g for g in _all_guards(loop.body) if v in g.atoms()}
    if not guards or _guarded_loads(loop.body, v) < MIN_PIECES:
        return None
    cuts, holds = set(), {}
    for g in guards:
        sign = _direction(g, v)
        if sign is None:  # (a cascaded sum's levels, j1*16 + j2: left guarded, as measured
            # cut a range a value, its copies of the loops inside took LLVM seconds to compile
            # and ran no faster)
            return None
        cut = _first(g, v, loop.extent, sign)
        holds[g] = (sign, cut)
        if 0 < cut < loop.extent:
            cuts.add(cut)
    bounds = [0, *sorted(cuts), loop.extent]
    ranges = list(zip(bounds, bounds[1:]))
    if len(ranges) < 2 or len(ranges) > MAX_RANGES:
        return None
    if len(ranges) * _count(loop.body) > MAX_COPIED:
        return None
    return ranges, holds


def _settled(body, holds: dict) -> list:
    """`body` read once for `_pruned`: each statement under a guard on the loop's variable
    (`holds`, from `_ranges`) with the holds of those guards, the statement without them
    (where they all hold) and what stands for it where one never holds (its zero; None
    for a store, dropped); a loop with its body read alike; any other statement as it is.
    A loop cut into R ranges is then settled statement by statement once, not R times
    (an LSTM's 64 time steps: every guard's hash was looked up 64 times a statement)."""
    out = []
    for s in body:
        if isinstance(s, Loop):
            out.append((_LOOP, s, _settled(s.body, holds)))
        elif isinstance(s, (Load, LoadRow, Select, Store, ScatterAdd)) and any(
            g in holds for g in s.valid
        ):
            on = tuple([holds[g] for g in s.valid if g in holds])
            kept = dataclasses.replace(s, valid=tuple(g for g in s.valid if g not in holds))
            zero = (
                None
                if isinstance(s, (Store, ScatterAdd))
                else Const(s.dst, s.dtype, zero_value(s.dtype))
            )
            out.append((on, kept, zero))
        else:
            out.append((None, s, None))
    return out


_LOOP = object()  # (`_settled`'s mark of a loop)


def _pruned(settled: list, start: int, stop: int) -> list:
    """The body `_settled` read, over iterations [start, stop) of its loop: each guard on
    the loop's variable settled there: a load or select under one that never holds made
    the zero it gives, a store under one dropped, one that always holds left out."""
    out = []
    for on, s, other in settled:  # (other: a loop's settled body, or a statement's zero)
        if on is None:
            out.append(s)
        elif on is _LOOP:
            out.append(dataclasses.replace(s, body=_pruned(other, start, stop)))
        elif any(_never_in(hold, start, stop) for hold in on):
            if other is not None:  # (a store is dropped)
                out.append(other)
        else:  # (the range lies where each of them holds: `_ranges` cut it so)
            out.append(s)
    return out


def _never_in(hold, start: int, stop: int) -> bool:
    """Whether a guard that holds from (sign +1) or until (sign -1) `at` never holds over
    [start, stop); False for a guard not on the loop's variable (`hold` None)."""
    if hold is None:
        return False
    sign, at = hold
    return stop <= at if sign > 0 else start >= at


def _guarded_loads(body, v: Var, read: set | None = None) -> int:
    """How many distinct buffers the loads in `body` guarded on `v` read."""
    read = set() if read is None else read
    for s in body:
        if isinstance(s, Loop):
            _guarded_loads(s.body, v, read)
        elif isinstance(s, (Load, LoadRow)) and any(v in g.atoms() for g in s.valid):
            read.add(s.param.name)
    return len(read)


def _direction(g: Lin, v: Var) -> int | None:
    """+1 where guard `g` never decreases as `v` grows, -1 where it never increases; None
    where it reads another variable, a remainder, or both ways."""
    signs = set()
    for atom, c in g.terms:
        if atom == v:
            signs.add(c > 0)
        elif isinstance(atom, FloorDiv) and atom.x.atoms() == {v} and len(atom.x.terms) == 1:
            signs.add(c * atom.x.coef(v) > 0)
        else:
            return None
    return (1 if signs.pop() else -1) if len(signs) == 1 else None


def _first(g: Lin, v: Var, extent: int, sign: int) -> int:
    """The first value of `v` in [0, extent] where `g >= 0` changes: where it starts to
    hold (sign +1) or stops (sign -1); `extent` where it never does."""
    lo, hi = 0, extent
    while lo < hi:  # the first k with (g(k) >= 0) == (sign > 0)
        mid = (lo + hi) // 2
        if (_at(g, v, mid) >= 0) == (sign > 0):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _at(g: Lin, v: Var, k: int) -> int:
    total = g.const
    for atom, c in g.terms:
        if atom == v:
            total += c * k
        else:  # v // d, from `_direction`
            total += c * ((atom.x.const + atom.x.coef(v) * k) // atom.c)
    return total


def _count(body) -> int:
    return sum(1 + _count(s.body) if isinstance(s, Loop) else 1 for s in body)


# ---------------------------------------------------------------- the zeros folded away


def _never(valid) -> bool:
    return any(g.max < 0 for g in valid)


@dataclasses.dataclass
class _Known:
    """What `_folded` knows of a copy's values so far."""

    names: dict = dataclasses.field(default_factory=dict)  # value -> the value it is
    zeros: dict = dataclasses.field(default_factory=dict)  # values that are +0 -> dtype
    ones: set = dataclasses.field(default_factory=set)  # values that are 1 (or True)
    settled: set = dataclasses.field(default_factory=set)  # not -0.0: x + 0.0 made them

    def scoped(self) -> _Known:
        """What a loop's body starts from: all this, which the body adds to on its own."""
        return _Known(dict(self.names), dict(self.zeros), set(self.ones), set(self.settled))


def _folded(body, known: _Known) -> list:
    """`body` with the statements under a guard that never holds made the zero they give
    (loads, selects) or dropped (stores, scatters), a select whose guard always holds made
    its value, a `where` on a known condition its chosen value, a product by 1 its other
    factor, and additions of zero left out where that is exact (the module's docstring)."""
    out = []
    zeros = known.zeros
    for s in body:
        s = reading_through(s, known.names)
        if isinstance(s, Loop):  # its values are its own (the copies of an unrolled loop
            # name theirs alike): what it learns stays inside
            out.append(dataclasses.replace(s, body=_folded(s.body, known.scoped())))
            continue
        if isinstance(s, Const):
            if s.value == zero_value(s.dtype) and not _negative_zero(s.value):
                zeros[s.dst] = s.dtype
            elif s.value is True or (s.value == 1 and not s.dtype.is_bool):
                known.ones.add(s.dst)
        elif isinstance(s, (Load, LoadRow, Select)) and _never(s.valid):
            zeros[s.dst] = s.dtype
            s = Const(s.dst, s.dtype, zero_value(s.dtype))
        elif isinstance(s, (Store, ScatterAdd)) and _never(s.valid):
            continue
        else:
            same = _same_as(s, known)
            if same is not None:
                known.names[s.dst] = same
                continue
            if isinstance(s, Alu) and s.op is Ops.ADD and len(s.args) == 2:
                s = _added(s, known)
        out.append(s)
    return out


def _same_as(s, known: _Known) -> str | None:
    """The value statement `s` computes, where that is another value, bit for bit."""
    if isinstance(s, Select) and not s.valid:
        return s.value
    if not isinstance(s, Alu):
        return None
    if s.op is Ops.WHERE and s.args[0] in known.zeros:
        return s.args[2]  # where(False, a, b) is b
    if s.op is Ops.WHERE and s.args[0] in known.ones:
        return s.args[1]  # where(True, a, b) is a
    if s.op is Ops.MUL and len(s.args) == 2:  # x * 1 is x
        a, b = s.args
        return a if b in known.ones else b if a in known.ones else None
    if s.op is Ops.ADD and len(s.args) == 2:  # x + 0 is x where x is not -0.0
        a, b = s.args
        exact = not s.dtype.is_float
        if b in known.zeros and (exact or a in known.settled):
            return a
        if a in known.zeros and (exact or b in known.settled):
            return b
    return None


def _negative_zero(value) -> bool:
    return isinstance(value, float) and math.copysign(1.0, value) < 0


def _added(s: Alu, known: _Known):
    """An addition `s` that `_same_as` left: a zero if both its operands are, and noted
    as not -0.0 if one is (-0.0 + 0.0 is 0.0)."""
    a, b = s.args
    if a in known.zeros and b in known.zeros:
        known.zeros[s.dst] = s.dtype
        return Const(s.dst, s.dtype, zero_value(s.dtype))
    if a in known.zeros or b in known.zeros:
        known.settled.add(s.dst)
    return s


_PURE = (Const, Load, LoadRow, Select, Alu)


def _dead_dropped(body, live: set | None = None) -> list:
    """`body` without the values nothing reads (the zeros and the loads they replaced, and
    what only they read), by one sweep from the end; `live`: the values read after it."""
    live = set() if live is None else live
    out = []
    for s in reversed(body):
        if isinstance(s, Loop):
            s = dataclasses.replace(s, body=_dead_dropped(s.body, set(live)))
        elif isinstance(s, _PURE) and s.dst not in live:
            continue
        live.update(values_read(s))
        out.append(s)
    return out[::-1]
