"""The backend-neutral loop IR that every renderer prints.

A kernel is a loop nest over its output whose outermost loop is parallel,
reduction loops inside it, and straight-line statements that load through
index expressions (`fusegrad.ir.symbolic`), compute, accumulate and store.
Values are named once (SSA): a statement defines `dst` and later statements
refer to it by name. Renderers decide nothing about semantics; they print this.

A row sum over a (4, 8) buffer reads, in `str(kernel)`:

    kernel sum_4x8(out0: float32[4], in0: float32[32])
      parallel for o0 in 0..4:
        acc0: float32 = 0.0
        for r0 in 0..8:
          v0 = load in0[o0*8 + r0]
          acc0 = add(acc0, v0)
        store out0[o0] = acc0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..ir.dtypes import DType
from ..ir.ops import Ops
from ..ir.symbolic import Lin, Var


@dataclass(frozen=True)
class Param:
    """A buffer argument: outputs come first, then inputs, in the order the runtime passes them."""

    name: str
    dtype: DType
    size: int
    output: bool


@dataclass
class Load:
    dst: str
    dtype: DType
    param: Param
    index: Lin
    valid: tuple[Lin, ...] = ()  # a conjunction of `expr >= 0`; out of it the value is 0
    # a concatenation's equal pieces read as one (`pipeline/pieces.py`): the buffer read is
    # pieces[piece] (`param` is the first), through a table of their addresses
    pieces: tuple[Param, ...] = ()
    piece: Lin | None = None


@dataclass
class LoadRow:
    """`param[row * row_size + col]`, where `row` is a value (an integer loaded or computed);
    0 where `row` is outside [0, rows) or a `valid` condition fails. A gather's read."""

    dst: str
    dtype: DType
    param: Param
    row: str
    rows: int
    row_size: int
    col: Lin
    valid: tuple[Lin, ...] = ()


@dataclass
class ScatterAdd:
    """`param[row * row_size + col] += value` unless `row` is outside [0, rows) or a `valid`
    condition fails. A scatter-add's write; threads own disjoint columns, so no two add
    to one element at once."""

    param: Param
    row: str
    rows: int
    row_size: int
    col: Lin
    value: str
    valid: tuple[Lin, ...] = ()


@dataclass
class Const:
    dst: str
    dtype: DType
    value: object


@dataclass
class Alu:
    """An elementwise op from `fusegrad.ir.ops` (CAST's target type is `dtype`)."""

    dst: str
    dtype: DType
    op: Ops
    args: tuple[str, ...]


@dataclass
class Select:
    """`cond ? value : 0` where `cond` is a conjunction of `expr >= 0` on loop variables."""

    dst: str
    dtype: DType
    valid: tuple[Lin, ...]
    value: str


@dataclass
class Rand:
    """Uniform [0, 1) from `fusegrad.ir.rand` at linear index `index`, keyed by value `key`."""

    dst: str
    dtype: DType
    key: str  # an int32 value
    index: Lin


@dataclass
class Position:
    """Integer `index` itself as a value of `dtype` (an `Ops.INDEX` element: no load)."""

    dst: str
    dtype: DType
    index: Lin


@dataclass
class AccInit:
    """A mutable accumulator, or `size` of them (a register tile) indexed by AccUpdate/AccRead."""

    acc: str
    dtype: DType
    value: object
    size: int = 1
    lanes: int = 1  # a tile is rows of this many lanes, each accessed as one vector
    memory: bool = False  # the rows lie one after another in memory (AMX stores tiles there)


@dataclass
class AccUpdate:
    """`acc = op(acc, value)`. A float sum's updates may be reordered by a renderer (a vector
    unit's lanes) unless `ordered`: a cascaded sum's levels are added exactly as written, so
    its error stays bounded by its tree's depth."""

    acc: str
    dtype: DType
    op: Ops  # ADD or MAX
    value: str
    index: Lin | None = None  # which element of a tile
    ordered: bool = False


@dataclass
class AccOnlineExp:
    """One step of an online softmax's statistics (the GPU's): `acc_max` is the running max
    of the values seen, `acc_sum` the sum of exp(value - acc_max), rescaled by
    exp(old - new) whenever the max grows, so both take one pass over the row. A -inf adds
    nothing; a NaN makes both NaN; a +inf makes the sum NaN (as exp(inf - inf) does in the
    two-pass sum)."""

    acc_max: str
    acc_sum: str
    dtype: DType
    value: str


@dataclass
class AccRead:
    """The current value of one element of an accumulator tile."""

    dst: str
    dtype: DType
    acc: str
    index: Lin


@dataclass
class AccReduceLanes:
    """Combine `lanes` adjacent accumulator elements, from `base` on, into one value."""

    dst: str
    dtype: DType
    acc: str
    base: Lin
    lanes: int
    op: Ops  # ADD or MAX


@dataclass
class AccDotPairs:
    """`vdpbf16ps` inside a vector loop of 16 lanes: the accumulator tile's row at `index`
    (16 float32, adjacent) += the products of 16 bfloat16 pairs of `b` (64 contiguous
    bytes from `b_index`, the first lane's) with one pair of `a` at `a_index` (the same in
    every lane), each lane the sum of its two products: `pipeline/dpbf16.py`."""

    acc: str
    index: Lin
    a: Param
    a_index: Lin
    b: Param
    b_index: Lin


@dataclass
class TileZero:
    """AMX: tile register `tile` (0-7; every tile 16 rows of 64 bytes) := 0."""

    tile: int


@dataclass
class TileLoad:
    """AMX: tile register `tile` := 16 rows of 64 bytes of `param`, the first at element
    `index`, each `stride` elements after the one before (a 16 x 32 bfloat16 block)."""

    tile: int
    param: Param
    index: Lin
    stride: int


@dataclass
class TileLoadAcc:
    """AMX: float32 tile register `tile` := 16 rows of 16 from accumulator `acc` (an AccInit
    in memory, rows of `lanes`), its first element at `offset`: what a TileStore left."""

    tile: int
    acc: str
    offset: int


@dataclass
class TileDot:
    """AMX `tdpbf16ps`: float32 tile `acc` (16 x 16) += bfloat16 tiles `a` (16 x 32) times
    `b` (32 x 16, stored as 16 rows of 16 pairs along the reduction: the VNNI layout)."""

    acc: int
    a: int
    b: int


@dataclass
class TileStore:
    """AMX: the float32 tile register `tile` into accumulator `acc` (an AccInit of `size`
    float32 in rows of `lanes`), its first element at `offset`, rows `lanes` apart."""

    tile: int
    acc: str
    offset: int


@dataclass
class TileStoreRows:
    """AMX: tile register `tile`'s 16 rows of 64 bytes into `param` (a scratch buffer of the
    thread's own), the first at element `index`, each `stride` elements after the one before:
    TileLoad's inverse."""

    tile: int
    param: Param
    index: Lin
    stride: int


@dataclass
class Store:
    param: Param
    index: Lin
    value: str
    valid: tuple[Lin, ...] = ()  # stored only where every `expr >= 0` (a tile's ragged edge)


@dataclass
class Prefetch:
    """A hint that `param[index]` is read soon (a row kernel's next row, fetched while this
    one computes). It changes no value and never faults; a renderer may leave it out."""

    param: Param
    index: Lin


@dataclass
class Loop:
    var: Var
    extent: int
    body: list = field(default_factory=list)
    # "parallel" (split over threads / GPU threads), "serial", "reduce", or "unroll" and
    # "vector" for the small constant loops of a register tile
    kind: str = "serial"
    # a plain loop's vector width for the renderer's own vectorizer (0: its choice); the
    # loop's iterations must be independent (no reduction inside)
    lanes: int = 0
    # a parallel loop over part of the kernel's parallel range, iterations first ..
    # first + extent - 1, its variable counting from 0 (a range of a concatenation's
    # pieces: `pipeline/pieces.py`); None: the whole range, its variable the iteration
    first: int | None = None


@dataclass
class Kernel:
    name: str
    params: list[Param]
    # statements; the Loop of kind "parallel" is split over threads (or several, each over a
    # range of the parallel iterations: `Loop.first`)
    body: list
    parallel_extent: int  # iterations of the parallel loop (1 if there is none)
    flops: int = 0  # ALU ops executed, for the debug report
    # a register-tiled kernel's tile and how it was chosen (the dump's header says it):
    # "register tile 8 rows x 32 lanes: the fixed choice for this CPU"
    tile_note: str = ""
    # whether an autotuner chose the tile without finishing (its budget ran out): such a
    # kernel is not kept in the disk cache of lowered kernels, so a later run tunes it
    tile_provisional: bool = False
    # whether the autotuner put off timing this kernel's tiles (it was made beside other
    # kernels, in forked copies that share the cores: `runtime/cpu_backend.py` makes it
    # again, alone, once the others are done)
    tune_later: bool = False
    # buffers of the kernel's own, not passed in: a row kernel's float32 scratch row (one per
    # thread, on its stack; pipeline/loop_nest.py, `Lowerer.stash_buffer`), addressed as a Param is
    scratch: list[Param] = field(default_factory=list)

    @property
    def uses_tiles(self) -> bool:
        """Whether the kernel runs on AMX tiles (`pipeline/amx.py`) or `vdpbf16ps` register
        tiles (`pipeline/dpbf16.py`): CPU instructions that only the LLVM renderer writes."""
        return _has_tiles(self.body)

    def __str__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.dtype.name}[{p.size}]" for p in self.params)
        lines = [f"kernel {self.name}({sig})"]
        for p in self.scratch:
            lines.append(f"  scratch {p.name}: {p.dtype.name}[{p.size}] (each thread's own)")
        _print_block(self.body, 1, lines)
        return "\n".join(lines)


def values_read(s) -> list[str]:
    """The values (and accumulators read as values) statement `s` reads by name; a loop's
    are its body's."""
    if isinstance(s, Loop):
        return [v for b in s.body for v in values_read(b)]
    names = list(s.args) if isinstance(s, Alu) else []
    if isinstance(s, (Select, Store, ScatterAdd, AccUpdate, AccOnlineExp)):
        names.append(s.value)
    if isinstance(s, (LoadRow, ScatterAdd)):
        names.append(s.row)
    if isinstance(s, Rand):
        names.append(s.key)
    return names


def reading_through(s, names: dict[str, str]):
    """Statement `s` reading each value it names through `names` (a value, or an
    accumulator read as one, renamed); a loop as it is (its body is renamed statement by
    statement by the caller)."""
    if not names or isinstance(s, Loop):
        return s
    get = names.get
    if isinstance(s, Alu):
        args = tuple(get(a, a) for a in s.args)
        return s if args == s.args else dataclasses.replace(s, args=args)
    if isinstance(s, (Select, Store, ScatterAdd, AccUpdate, AccOnlineExp)) and s.value in names:
        s = dataclasses.replace(s, value=names[s.value])
    if isinstance(s, (LoadRow, ScatterAdd)) and s.row in names:
        s = dataclasses.replace(s, row=names[s.row])
    if isinstance(s, Rand) and s.key in names:
        s = dataclasses.replace(s, key=names[s.key])
    return s


def has_reduce_loop(body) -> bool:
    """Whether a loop of kind "reduce" is in `body`, at any depth."""
    return any(
        isinstance(s, Loop) and (s.kind == "reduce" or has_reduce_loop(s.body)) for s in body
    )


def gpu_only(body) -> bool:
    """Whether `body` holds, at any depth, a statement only the GPU's loop nests have and
    only the CUDA C renderer renders (`AccOnlineExp`, an online softmax's statistics)."""
    return any(
        isinstance(s, AccOnlineExp) or (isinstance(s, Loop) and gpu_only(s.body)) for s in body
    )


def _has_tiles(body) -> bool:
    tiles = (TileZero, TileLoad, TileLoadAcc, TileDot, TileStore, TileStoreRows, AccDotPairs)
    return any(isinstance(s, tiles) or (isinstance(s, Loop) and _has_tiles(s.body)) for s in body)


def _valid_str(valid) -> str:
    return " and ".join(f"{v} >= 0" for v in valid)


def _print_block(body, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    for s in body:
        if isinstance(s, Loop):
            kind = {"parallel": "parallel for", "unroll": "unrolled for", "vector": "vector for"}
            kind = kind.get(s.kind, "for")
            lanes = f" ({s.lanes} lanes)" if s.lanes else ""
            part = f" (iterations {s.first}..)" if s.first is not None else ""
            lines.append(f"{pad}{kind} {s.var} in 0..{s.extent}{part}{lanes}:")
            _print_block(s.body, depth + 1, lines)
        elif isinstance(s, Load):
            guard = f" if {_valid_str(s.valid)}" if s.valid else ""
            buf = s.param.name
            if s.pieces:  # (in0 | in1 | ... | in63)[o0]: the piece o0 picks
                buf = f"({s.pieces[0].name} | ... | {s.pieces[-1].name})[{s.piece}]"
            lines.append(f"{pad}{s.dst} = load {buf}[{s.index}]{guard}")
        elif isinstance(s, LoadRow):
            guard = f" if {_valid_str(s.valid)}" if s.valid else ""
            at = f"{s.row}*{s.row_size} + {s.col}"
            lines.append(
                f"{pad}{s.dst} = load {s.param.name}[{at}] (row {s.row} < {s.rows}){guard}"
            )
        elif isinstance(s, ScatterAdd):
            guard = f" if {_valid_str(s.valid)}" if s.valid else ""
            at = f"{s.row}*{s.row_size} + {s.col}"
            lines.append(f"{pad}{s.param.name}[{at}] += {s.value} (row {s.row} < {s.rows}){guard}")
        elif isinstance(s, Const):
            lines.append(f"{pad}{s.dst} = {s.value!r}")
        elif isinstance(s, Alu):
            cast = f" to {s.dtype.name}" if s.op is Ops.CAST else ""
            lines.append(f"{pad}{s.dst} = {s.op.name.lower()}({', '.join(s.args)}){cast}")
        elif isinstance(s, Select):
            guard = f" if {_valid_str(s.valid)} else 0" if s.valid else ""
            lines.append(f"{pad}{s.dst} = {s.value}{guard}")
        elif isinstance(s, Rand):
            lines.append(f"{pad}{s.dst} = rand(key={s.key}, index={s.index})")
        elif isinstance(s, Position):
            lines.append(f"{pad}{s.dst} = position {s.index}")
        elif isinstance(s, AccInit):
            size = f"[{s.size}]" if s.size > 1 else ""
            lines.append(f"{pad}{s.acc}{size}: {s.dtype.name} = {s.value!r}")
        elif isinstance(s, AccUpdate):
            at = f"[{s.index}]" if s.index is not None else ""
            how = " (in order)" if s.ordered else ""
            lines.append(f"{pad}{s.acc}{at} = {s.op.name.lower()}({s.acc}{at}, {s.value}){how}")
        elif isinstance(s, AccOnlineExp):
            lines.append(
                f"{pad}{s.acc_max}, {s.acc_sum} = online_exp({s.acc_max}, {s.acc_sum}, {s.value})"
            )
        elif isinstance(s, AccRead):
            lines.append(f"{pad}{s.dst} = {s.acc}[{s.index}]")
        elif isinstance(s, AccReduceLanes):
            what = f"{s.acc}[{s.base} : {s.base} + {s.lanes}]"
            lines.append(f"{pad}{s.dst} = {s.op.name.lower()} over {what}")
        elif isinstance(s, AccDotPairs):
            at = f"{s.acc}[{s.index}]"
            pairs = f"{s.a.name}[{s.a_index} : +2], {s.b.name}[{s.b_index} : +2]"
            lines.append(f"{pad}{at} = dot_pairs({at}, {pairs})")
        elif isinstance(s, TileZero):
            lines.append(f"{pad}tile{s.tile} = 0")
        elif isinstance(s, TileLoad):
            at = f"{s.param.name}[{s.index} + row*{s.stride}]"
            lines.append(f"{pad}tile{s.tile} = load 16 rows of 32 from {at}")
        elif isinstance(s, TileLoadAcc):
            lines.append(f"{pad}tile{s.tile} = load {s.acc}[{s.offset} + ...]")
        elif isinstance(s, TileDot):
            lines.append(f"{pad}tile{s.acc} += dot(tile{s.a}, tile{s.b})")
        elif isinstance(s, TileStore):
            lines.append(f"{pad}store tile{s.tile} into {s.acc}[{s.offset} + ...]")
        elif isinstance(s, TileStoreRows):
            at = f"{s.param.name}[{s.index} + row*{s.stride}]"
            lines.append(f"{pad}store tile{s.tile} as 16 rows of 32 into {at}")
        elif isinstance(s, Prefetch):
            lines.append(f"{pad}prefetch {s.param.name}[{s.index}]")
        elif isinstance(s, Store):
            guard = f" if {_valid_str(s.valid)}" if s.valid else ""
            lines.append(f"{pad}store {s.param.name}[{s.index}] = {s.value}{guard}")
        else:
            raise TypeError(s)
