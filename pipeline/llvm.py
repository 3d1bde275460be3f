"""Render a loop-IR kernel as LLVM IR text.

The function takes the parallel loop's range and one pointer per buffer:

    define void @SYMBOL(i64 %start, i64 %end, ptr noalias %out0, ptr noalias readonly %in0, ...)

so a thread pool can give each thread a slice of the outermost loop. Loop
counters and accumulators live in allocas that LLVM's O3 pipeline promotes to
registers; floating-point reductions carry `reassoc nsz` so the loop
vectorizer may reorder them (their results leave through a plain `+ 0.0`, so a
sum of -0.0s is torch's +0.0), and multiplies and adds carry `contract` so they
may fuse into FMAs; nothing else changes IEEE semantics (no fast-math).

The loop IR's register tiles are rendered as written, not left to LLVM's
heuristics: an `unroll` loop is emitted once per iteration, and the body of a
`vector` loop of extent W is emitted once with `<W x T>` values. There, a
value that does not depend on the vector variable stays scalar; a load is a
vector load where its index moves by 1 per lane, a scalar load where it does
not move, one wider load and a shuffle where it moves by a small constant step
(`SHUFFLED_LANE_STEPS`: a strided convolution's windows), and a masked gather
otherwise.

Ctrl-C: the pool reads its cancel word only between chunks of the parallel loop, and a
chunk is at least one iteration, so a kernel whose iteration is long (a full sum's
partial of 2^33 random numbers, a max over 10^12 values with no parallel loop at all)
also reads it as it goes: it takes the word's address as a last parameter
(`CANCEL_PARAM`), and its outermost plain loop that is long as a whole but short per
iteration runs in blocks of about POLL_WORK inner iterations, reading the word before
each block and returning at once when it is set (the outputs are then incomplete: the
caller raises). Other kernels are rendered as before; the callers pass the address to
every kernel, which ignores an argument it does not declare.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

from ..ir import rand
from ..ir.dtypes import DType, float32
from ..ir.ops import COMPARISON, Ops
from ..ir.symbolic import FloorDiv, Lin, Mod, Var, lin
from . import templates
from .coords import split_lanes
from .llvm_math import (
    fconst,
    function_name,
    host_converts_bf16,
    intrinsic_suffix,
    math_functions,
    vector_type,
    vector_variants,
)
from .loopir import (
    AccDotPairs,
    AccInit,
    AccRead,
    AccReduceLanes,
    AccUpdate,
    Alu,
    Const,
    Kernel,
    Load,
    LoadRow,
    Loop,
    Position,
    Prefetch,
    Rand,
    ScatterAdd,
    Select,
    Store,
    TileDot,
    TileLoad,
    TileLoadAcc,
    TileStore,
    TileStoreRows,
    TileZero,
    has_reduce_loop,
)
from .optable import SAFE_DIV, SAFE_UDIV, Intrinsic, MathFn, op_row
from .tiling import SHUFFLED_LANE_STEPS

CACHE_LINE_BYTES = 64
# a kernel whose parallel iteration (or whole body, without a parallel loop) runs more
# inner iterations than this reads the cancel word inside it (runtime/launch.py's
# WATCHED_WORK: a run this long on the main thread can be interrupted)...
POLLED_ROW_WORK = 1 << 20
# ...once per block of at most this many inner iterations (a few hundred microseconds
# of costly iterations; one load and branch per block)
POLL_WORK = 1 << 16
# the last parameter of a kernel that reads the cancel word: the word's address
CANCEL_PARAM = "ptr %cancel.word"
# the most iterations of a reduction kernel's loop that LLVM's unroller may take apart
# (`loop_hints`): a convolution's window rows and columns, not a sum's rows (figures:
# benchmarks/README.md)
UNROLL_MOST = 8


def mem_type(dt: DType) -> str:
    """How a dtype is stored in memory (bools are bytes, bfloat16 the top half of a float)."""
    return "i8" if dt.is_bool else dt.storage or dt.llvm


def literal(value, dt: DType) -> str:
    if dt.is_float:
        return fconst(float(value), dt.llvm)
    if dt.is_bool:
        return "true" if value else "false"
    return str(dt.wrap(int(value)))


def _imax(dt: DType) -> str:
    """The integer max intrinsic's name for `dt`."""
    return "umax" if dt.unsigned else "smax"


def _i32(v: int) -> str:
    v &= 0xFFFFFFFF
    return str(v - (1 << 32) if v >= 1 << 31 else v)


# a line that makes an address from another (`pieces_apart`), one that reads through one
# (a load, a masked load or a gather), and a call that writes (a masked store or scatter)
_ADDRESS = re.compile(r"\s*(%[\w.]+) = getelementptr [^,]+, (?:ptr|<\d+ x ptr>) (%[\w.]+)")
_READ = re.compile(
    r"= (?:load [^,]+, |call .*@llvm\.masked\.(?:load|gather)\S*\()(?:ptr|<\d+ x ptr>) (%[\w.]+)"
)
_WRITE = re.compile(r"call void @llvm\.masked\.(?:store|scatter)")


class _Renderer:
    def __init__(self, kernel: Kernel, symbol: str):
        self.k, self.symbol = kernel, symbol
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.tables: dict[tuple, str] = {}  # a concatenation's pieces -> their table
        self.piece_addresses: set[str] = set()  # pieces' addresses loaded from a table
        self.metadata: list[str] = []  # loops' hints (`!llvm.loop`), after the function
        # LLVM's unroller is for loops that accumulate; a kernel without any is left as
        # it is vectorized (see `loop_hints`)
        self.unroll = has_reduce_loop(kernel.body)
        # ...and only for its short loops, but in a plan whose sizes vary (`loop_hints`)
        self.unroll_long = self.unroll and templates.active()
        self.math: set[tuple[str, str, int | None]] = set()
        self.decls: set[str] = set()
        self.n = 0
        self.values: dict[str, tuple[str, bool]] = {}  # loop-IR name -> (SSA value, varying)
        self.types: dict[str, DType] = {}
        self.loop_names: dict[str, str] = {}
        self.unrolled: dict[str, int] = {}
        self.loop_count = 0
        self.width: int | None = None  # lanes while inside a vector loop
        self.acc_lanes: dict[str, int] = {}  # a tile accumulator's row width
        self.loose_sums: set[str] = set()  # float accumulators added with `reassoc nsz`
        self.vec_var: Var | None = None
        self.amx = False  # the kernel uses AMX tiles: configure them on entry, release on exit
        # AMX accumulators (AccInit in memory) and the values read from them: `tdpbf16ps`
        # flushes subnormal results, so none of these values is subnormal
        self.tile_accs: set[str] = set()
        self.normal_values: set[str] = set()
        # whether a loop met now may poll the cancel word (inside a long iteration of the
        # parallel loop, in no loop that polls already), and whether one does
        self.may_poll = (
            not any(isinstance(s, Loop) and s.kind == "parallel" for s in kernel.body)
            and _inner_work(kernel.body) > POLLED_ROW_WORK
        )
        self.polls = False

    # ---------------------------------------------------------------- helpers
    def emit(self, text: str) -> str:
        self.n += 1
        name = f"%t{self.n}"
        self.lines.append(f"  {name} = {text}")
        return name

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def ty(self, dt_llvm: str, varying: bool) -> str:
        return vector_type(dt_llvm, self.width if varying else None)

    def const(self, value, dt: DType, varying: bool) -> str:
        lit = literal(value, dt)
        return f"splat ({dt.llvm} {lit})" if varying else lit

    def intrinsic(self, name: str, ty: str, nargs: int, ret: str | None = None) -> str:
        fn = f"@llvm.{name}.{intrinsic_suffix(ty)}"
        self.decls.add(f"declare {ret or ty} {fn}({', '.join([ty] * nargs)})")
        return fn

    def splat(self, value: str, elem: str) -> str:
        vt = vector_type(elem, self.width)
        one = self.emit(f"insertelement {vt} poison, {elem} {value}, i64 0")
        return self.emit(
            f"shufflevector {vt} {one}, {vt} poison, <{self.width} x i32> zeroinitializer"
        )

    def moves(self, e: Lin) -> bool:
        """Whether index expression `e` depends on the vector loop's variable."""
        return self.vec_var is not None and self.vec_var in e.atoms()

    def buffer(self, s: Load) -> str:
        """The address `s` reads from: its buffer's parameter, or, for a concatenation's
        pieces read as one (`Load.pieces`), the address its piece's table entry holds."""
        if not s.pieces:
            return f"%{s.param.name}"
        assert not self.moves(s.piece), "a piece is picked per iteration, never per lane"
        table = self.tables.get(s.pieces)
        if table is None:  # filled once, where the kernel starts
            table = self.tables[s.pieces] = f"%pieces.{len(self.tables)}"
            n = len(s.pieces)
            self.allocas.append(f"  {table} = alloca [{n} x ptr], align 8")
            for i, q in enumerate(s.pieces):
                self.allocas.append(
                    f"  {table}.{i} = getelementptr inbounds [{n} x ptr], ptr {table}, "
                    f"i64 0, i64 {i}"
                )
                self.allocas.append(f"  store ptr %{q.name}, ptr {table}.{i}")
        at = self.emit(f"getelementptr inbounds ptr, ptr {table}, i64 {self.index(s.piece)}")
        address = self.emit(f"load ptr, ptr {at}")
        self.piece_addresses.add(address)
        return address

    def pieces_apart(self) -> None:
        """Say that no store of the kernel writes what a load through a pieces' table
        reads (alias scope metadata): they are input buffers, and the stores write its
        outputs and its own stack. Without it LLVM must assume an address loaded from the
        table may be an output's, and copies a piece element by element."""
        scope = f"!{len(self.metadata) + 2}"
        domain, reads = f"!{len(self.metadata)}", f"!{len(self.metadata) + 1}"
        self.metadata += [
            f'{domain} = distinct !{{{domain}, !"fusegrad.pieces"}}',
            f'{reads} = distinct !{{{reads}, {domain}, !"fusegrad.pieces.read"}}',
            f"{scope} = !{{{reads}}}",
        ]
        derived = set(self.piece_addresses)
        for k, line in enumerate(self.lines):
            m = _ADDRESS.match(line)
            if m and m.group(2) in derived:
                derived.add(m.group(1))
            elif (m := _READ.search(line)) and m.group(1) in derived:
                self.lines[k] = f"{line}, !alias.scope {scope}"
            elif line.startswith("  store ") or _WRITE.search(line):
                self.lines[k] = f"{line}, !noalias {scope}"

    # ---------------------------------------------------------------- indices
    def index(self, e: Lin) -> str:
        """A scalar i64 for an index expression that does not move with the vector variable."""
        acc = str(e.const)
        for atom, coef in e.terms:
            a = self.atom(atom)
            if a.lstrip("-").isdigit():
                acc = (
                    str(int(acc) + int(a) * coef)
                    if acc.lstrip("-").isdigit()
                    else self.emit(f"add nsw i64 {acc}, {int(a) * coef}")
                )
                continue
            term = a if coef == 1 else self.emit(f"mul nsw i64 {a}, {coef}")
            acc = term if acc == "0" else self.emit(f"add nsw i64 {acc}, {term}")
        return acc

    def atom(self, a) -> str:
        if isinstance(a, Var):
            if a.name in self.unrolled:
                return str(self.unrolled[a.name])
            return f"%{self.loop_names[a.name]}"
        if isinstance(a, FloorDiv):
            x = self.index(a.x)
            return (
                str(int(x) // a.c) if x.lstrip("-").isdigit() else self.emit(f"sdiv i64 {x}, {a.c}")
            )
        if isinstance(a, Mod):
            x = self.index(a.x)
            return (
                str(int(x) % a.c) if x.lstrip("-").isdigit() else self.emit(f"srem i64 {x}, {a.c}")
            )
        raise TypeError(a)

    def vindex(self, e: Lin) -> str:
        """A <W x i64> of the index in every lane of the vector loop."""
        step = self.lane_step(e)
        if step is not None:  # lane k is base + k * step: one substitution, not W
            base = e.substitute({self.vec_var: lin(0)})
            # (a constant base too is added to the lanes' offsets, not folded into them:
            # LLVM folds it, and the text keeps the base a scalar literal, one that a
            # kernel of other sizes reads from its literals: pipeline/templates.py)
            b = self.splat(self.index(base), "i64")
            if step == 0:
                return b
            offs = "<" + ", ".join(f"i64 {k * step}" for k in range(self.width)) + ">"
            return self.emit(f"add <{self.width} x i64> {b}, {offs}")
        return self.vindex_lane_by_lane(e)

    def vindex_lane_by_lane(self, e: Lin) -> str:
        """`vindex` from each lane's own expression (any `e`; W substitutions)."""
        lanes = []
        for k in range(self.width):
            lanes.append(e.substitute({self.vec_var: lin(k)}))
        if all(isinstance(x, Lin) and x.is_const for x in lanes):
            return "<" + ", ".join(f"i64 {x.const}" for x in lanes) + ">"
        base = lanes[0]
        steps = [(x - base) for x in lanes]
        if all(s.is_const for s in steps):  # affine in the vector variable
            b = self.splat(self.index(base), "i64")
            offs = "<" + ", ".join(f"i64 {s.const}" for s in steps) + ">"
            return self.emit(f"add <{self.width} x i64> {b}, {offs}")
        vec = "poison"
        for k, x in enumerate(lanes):
            vec = self.emit(
                f"insertelement <{self.width} x i64> {vec}, i64 {self.index(x)}, i64 {k}"
            )
        return vec

    def lane_step(self, e: Lin) -> int | None:
        """The vector variable's coefficient in `e` where it appears only as a term of its
        own (so `e` is affine in it), else None (it is inside a division or a remainder)."""
        step = 0
        for atom, coef in e.terms:
            if atom == self.vec_var:
                step = coef
            elif isinstance(atom, (FloorDiv, Mod)) and self.vec_var in atom.x.atoms():
                return None
        return step

    def valid(self, conds) -> tuple[str, bool]:
        """The conjunction of `cond >= 0`, scalar i1 or a lane mask if a condition moves."""
        varying = any(self.moves(c) for c in conds)
        bt = self.ty("i1", varying)
        ok = None
        for c in conds:
            if varying:
                idx = self.vindex(c) if self.moves(c) else self.splat(self.index(c), "i64")
                v = self.emit(f"icmp sge <{self.width} x i64> {idx}, zeroinitializer")
            else:
                v = self.emit(f"icmp sge i64 {self.index(c)}, 0")
            ok = v if ok is None else self.emit(f"and {bt} {ok}, {v}")
        return ok or "true", varying

    # ---------------------------------------------------------------- values
    def bind(self, name: str, value: str, dt: DType, varying: bool = False) -> None:
        self.values[name] = (value, varying)
        self.types[name] = dt

    def lookup(self, name: str) -> tuple[str, bool]:
        """(SSA value, varying) of a loop-IR name; a scalar accumulator is loaded where read."""
        if name in self.values:
            return self.values[name]
        value = self.emit(f"load {self.types[name].llvm}, ptr %{name}.addr")
        if name in self.loose_sums:
            value = self.positive_zero(value, self.types[name], False)
        return value, False

    def ref(self, name: str, want_vector: bool = False) -> str:
        value, varying = self.lookup(name)
        if want_vector and not varying:
            return self.splat(value, self.types[name].llvm)
        return value

    # ---------------------------------------------------------------- statements
    def block(self, body) -> None:
        for s in body:
            getattr(self, "stmt_" + type(s).__name__)(s)

    def stmt_Loop(self, s: Loop) -> None:
        if s.kind == "unroll":
            for k in range(s.extent):
                self.unrolled[s.var.name] = k
                self.block(s.body)
            del self.unrolled[s.var.name]
            return
        if s.kind == "vector":
            assert self.width is None, "nested vector loops"
            self.width, self.vec_var = s.extent, s.var
            self.block(s.body)
            self.width, self.vec_var = None, None
            return
        # a variable may name several loops (a tile's accumulate and epilogue loops)
        self.loop_count += 1
        v = f"{s.var.name}.{self.loop_count}"
        self.loop_names[s.var.name] = v
        self.allocas.append(f"  %{v}.addr = alloca i64")
        start = "%start" if s.kind == "parallel" else "0"
        end = "%end" if s.kind == "parallel" else str(s.extent)
        if s.kind == "parallel" and s.first is not None:  # this range's part of the chunk
            start, end = self.clamped(s.first, s.extent)
        may_poll, block = self.may_poll, 0
        if s.kind == "parallel":
            self.may_poll = _inner_work(s.body) > POLLED_ROW_WORK
        elif may_poll:
            each = _inner_work(s.body)
            if each <= POLL_WORK < s.extent * each:
                block, self.may_poll = _poll_block(s.extent, POLL_WORK // each), False
        self.lines.append(f"  store i64 {start}, ptr %{v}.addr")
        if block:
            end = self.poll_block(v, end, block)
        else:
            self.lines.append(f"  br label %{v}.cond")
        self.label(f"{v}.cond")
        self.lines.append(f"  %{v} = load i64, ptr %{v}.addr")
        c = self.emit(f"icmp slt i64 %{v}, {end}")
        after = f"{v}.poll" if block else f"{v}.exit"
        self.lines.append(f"  br i1 {c}, label %{v}.body, label %{after}")
        self.label(f"{v}.body")
        self.block(s.body)
        self.may_poll = may_poll
        nxt = self.emit(f"add nsw i64 %{v}, 1")
        self.lines.append(f"  store i64 {nxt}, ptr %{v}.addr")
        self.lines.append(f"  br label %{v}.cond{self.loop_hints(s)}")
        self.label(f"{v}.exit")

    def loop_hints(self, s: Loop) -> str:
        """The `!llvm.loop` metadata of loop `s`'s back edge, or "": the loop vectorizer's
        width for this loop alone (`Loop.lanes`), and `llvm.loop.unroll.disable` on every
        loop of a kernel with no reduction and on a reduction's loops of more than
        `UNROLL_MOST` iterations. In an elementwise kernel LLVM's full unrolling of a short
        inner loop turns the loop around it into interleaved groups of strided stores,
        which its vectorizer can take half a second over, for no faster a kernel: the
        vectorizer interleaves an elementwise loop's vector body itself. In a reduction the
        unroller still takes a convolution's 3 x 3 window apart (its offsets constants),
        but no longer unrolls 64 rows of 32-lane vectors (a BatchNorm's statistics: 0.1 s
        of O3 each) nor a tile's long sum, which run as fast as loops. Not in a plan whose
        sizes vary (`templates.active()`): there a loop's extent may be a literal its
        generic kernel is given, and the code must be the same at every size
        (docs/pipeline/6-compiling.md)."""
        hints = []
        if s.lanes:
            hints.append(f'!{{!"llvm.loop.vectorize.width", i32 {s.lanes}}}')
        long = s.kind != "parallel" and s.extent > UNROLL_MOST
        if not self.unroll or (long and not self.unroll_long):
            hints.append('!{!"llvm.loop.unroll.disable"}')
        if not hints:
            return ""
        node = f"!{len(self.metadata)}"
        names = [f"!{len(self.metadata) + 1 + i}" for i in range(len(hints))]
        self.metadata.append(f"{node} = distinct !{{{', '.join([node, *names])}}}")
        self.metadata += [f"{name} = {hint}" for name, hint in zip(names, hints)]
        return f", !llvm.loop {node}"

    def clamped(self, first: int, extent: int) -> tuple[str, str]:
        """The iterations of a range of the parallel loop (`Loop.first`) in this call's
        chunk [%start, %end), counted from the range's first: max(%start - first, 0) and
        min(%end - first, extent)."""
        lo = self.emit(f"sub nsw i64 %start, {first}")
        below = self.emit(f"icmp slt i64 {lo}, 0")
        lo = self.emit(f"select i1 {below}, i64 0, i64 {lo}")
        hi = self.emit(f"sub nsw i64 %end, {first}")
        above = self.emit(f"icmp sgt i64 {hi}, {extent}")
        hi = self.emit(f"select i1 {above}, i64 {extent}, i64 {hi}")
        return lo, hi

    def poll_block(self, v: str, end: str, block: int) -> str:
        """Blocks {v}.poll and {v}.block: before each `block` iterations of loop `v`,
        leave it once none is left, return (block `cancelled`) once the cancel word is
        set, else run them; the end of this block's iterations, for {v}.cond."""
        self.polls = True
        self.lines.append(f"  br label %{v}.poll")
        self.label(f"{v}.poll")
        self.lines.append(f"  %{v}.from = load i64, ptr %{v}.addr")
        more = self.emit(f"icmp slt i64 %{v}.from, {end}")
        self.lines.append(f"  br i1 {more}, label %{v}.check, label %{v}.exit")
        self.label(f"{v}.check")
        word = self.emit("load atomic i64, ptr %cancel.word monotonic, align 8")
        stop = self.emit(f"icmp ne i64 {word}, 0")
        self.lines.append(f"  br i1 {stop}, label %cancelled, label %{v}.block")
        self.label(f"{v}.block")
        if int(end) % block or (templates.active() and int(end) > block):
            # the last block is shorter (or may be: in a plan whose sizes vary, a loop of
            # more than one block keeps one form for every size, `_poll_block`)
            to = self.emit(f"add nsw i64 %{v}.from, {block}")
            over = self.emit(f"icmp sgt i64 {to}, {end}")
            self.lines.append(f"  %{v}.to = select i1 {over}, i64 {end}, i64 {to}")
        else:  # every block as long: LLVM sees a constant trip count, as without polls
            self.lines.append(f"  %{v}.to = add nsw i64 %{v}.from, {block}")
        self.lines.append(f"  br label %{v}.cond")
        return f"%{v}.to"

    def stmt_Load(self, s: Load) -> None:
        # a value is loaded as its buffer holds it and named with the load's dtype: they
        # differ only for a 16-bit value kept in a float32 scratch row (the same registers)
        mt, dt = mem_type(s.param.dtype), s.param.dtype
        moves = self.moves(s.index) or any(self.moves(c) for c in s.valid)
        if moves and self.width:
            self.bind(s.dst, self.vector_load(s), s.dtype, True)
            return
        idx = self.index(s.index)
        ok = self.valid(s.valid)[0] if s.valid else None
        if ok:
            idx = self.emit(f"select i1 {ok}, i64 {idx}, i64 0")
        ptr = self.emit(f"getelementptr inbounds {mt}, ptr {self.buffer(s)}, i64 {idx}")
        v = self.emit(f"load {mt}, ptr {ptr}")
        if dt.is_bool:
            v = self.emit(f"icmp ne i8 {v}, 0")
        v = self.widen(v, dt, None)
        if ok:
            v = self.emit(f"select i1 {ok}, {dt.llvm} {v}, {dt.llvm} {literal(0, dt)}")
        self.bind(s.dst, v, s.dtype)

    def vector_load(self, s: Load) -> str:
        mt, dt, w = mem_type(s.param.dtype), s.param.dtype, self.width
        vt, buf = f"<{w} x {mt}>", self.buffer(s)
        contiguous = s.index.coef(self.vec_var) == 1 and not self.moves(s.index - lin(self.vec_var))
        ok, ok_varying = self.valid(s.valid) if s.valid else (None, False)
        if contiguous and not ok_varying:
            base = self.index(s.index.substitute({self.vec_var: lin(0)}))
            if ok:
                base = self.emit(f"select i1 {ok}, i64 {base}, i64 0")
            ptr = self.emit(f"getelementptr inbounds {mt}, ptr {buf}, i64 {base}")
            v = self.emit(f"load {vt}, ptr {ptr}, align {dt.itemsize}")
            if ok:
                v = self.emit(f"select i1 {ok}, {vt} {v}, {vt} zeroinitializer")
        elif contiguous:  # lanes past an edge are masked off: they read nothing, give 0
            base = self.index(s.index.substitute({self.vec_var: lin(0)}))
            ptr = self.emit(f"getelementptr {mt}, ptr {buf}, i64 {base}")
            fn = f"@llvm.masked.load.{intrinsic_suffix(vt)}.p0"
            self.decls.add(f"declare {vt} {fn}(ptr, i32, <{w} x i1>, {vt})")
            v = self.emit(
                f"call {vt} {fn}(ptr {ptr}, i32 {dt.itemsize}, <{w} x i1> {ok}, "
                f"{vt} zeroinitializer)"
            )
        elif step := self.shuffled_step(s.index):
            v = self.shuffled_load(s, step, ok, ok_varying)
        elif (split := split_lanes(s.index, self.vec_var, w)) and self.cut_known(split):
            v = self.split_load(s, split, ok, ok_varying)
        else:
            idx = self.vindex(s.index)
            ptrs = self.emit(f"getelementptr inbounds {mt}, ptr {buf}, <{w} x i64> {idx}")
            mask = ok if ok_varying else (self.splat(ok, "i1") if ok else "splat (i1 true)")
            fn = f"@llvm.masked.gather.{intrinsic_suffix(vt)}.v{w}p0"
            self.decls.add(f"declare {vt} {fn}(<{w} x ptr>, i32, <{w} x i1>, {vt})")
            v = self.emit(
                f"call {vt} {fn}(<{w} x ptr> {ptrs}, i32 {dt.itemsize}, <{w} x i1> {mask}, "
                f"{vt} zeroinitializer)"
            )
        if dt.is_bool:
            v = self.emit(f"icmp ne {vt} {v}, zeroinitializer")
        return self.widen(v, dt, w)

    def cut_known(self, split) -> bool:
        """Whether a `split_lanes` vector's crossing is known when the kernel is compiled."""
        x, d, _ = split
        return (x.substitute({self.vec_var: lin(0)}) % d).is_const

    def split_load(self, s: Load, split, ok: str | None, ok_varying: bool) -> str:
        """A vector whose lanes read two contiguous runs, the second `jump` elements further
        on from where the lanes' position `x` crosses a multiple of `d` (`split_lanes`: a
        convolution's windows over a merged output row and column), where the crossing is
        known when the kernel is compiled (`unrolled_by_period` fixes each tile copy's
        place in the row pattern): one plain load where the lanes stay in one run, else two
        masked loads with constant masks, merged (a masked lane reads nothing, so neither
        reads past its run). Where the crossing is known only at run time (`cut_known`) the
        load is a gather: branching between one load and two at run time was left to LLVM
        to unswitch, which it did for a convolution's forward, not for its input gradient."""
        x, d, jump = split
        cut = d - (x.substitute({self.vec_var: lin(0)}) % d).const  # the second run's lane
        mask = None if ok is None else ok if ok_varying else self.splat(ok, "i1")
        mt, dt, w = mem_type(s.param.dtype), s.param.dtype, self.width
        vt = f"<{w} x {mt}>"
        base = self.index(s.index.substitute({self.vec_var: lin(0)}))
        ptr = self.emit(f"getelementptr {mt}, ptr {self.buffer(s)}, i64 {base}")
        if cut >= w and mask is None:
            return self.emit(f"load {vt}, ptr {ptr}, align {dt.itemsize}")
        fn = f"@llvm.masked.load.{intrinsic_suffix(vt)}.p0"
        self.decls.add(f"declare {vt} {fn}(ptr, i32, <{w} x i1>, {vt})")
        runs = [(ptr, [k < cut for k in range(w)])]
        if cut < w:
            after = self.emit(f"getelementptr {mt}, ptr {ptr}, i64 {jump}")
            runs.append((after, [k >= cut for k in range(w)]))
        v = "zeroinitializer"
        for at, lanes in runs:
            m = "<" + ", ".join(f"i1 {'true' if b else 'false'}" for b in lanes) + ">"
            if mask is not None:
                m = self.emit(f"and <{w} x i1> {m}, {mask}")
            v = self.emit(f"call {vt} {fn}(ptr {at}, i32 {dt.itemsize}, <{w} x i1> {m}, {vt} {v})")
        return v

    def shuffled_step(self, e: Lin) -> int | None:
        """The step s of an index that moves by s per lane (s in `SHUFFLED_LANE_STEPS`, the
        rest of it the same in every lane), else None."""
        step = self.lane_step(e)
        if step not in SHUFFLED_LANE_STEPS or self.moves(e - lin(self.vec_var) * step):
            return None
        return step

    def shuffled_load(self, s: Load, step: int, ok: str | None, ok_varying: bool) -> str:
        """Lane k of `s` reads base + step * k: one masked load of step * W contiguous
        elements from base, whose mask lets through exactly the lanes picked (every
        step-th, where the lane's own mask is set), then a shuffle of those W lanes.
        Nothing is read past lane W - 1's element, nor for a masked lane, so the last row of
        a buffer reads nothing beyond it. On AVX-512 the load is s vector loads (the one
        over the tail masked) and the shuffle one `vpermt2ps` per pair of registers: a gather
        of 16 lanes instead runs at a small fraction of a contraction's rate."""
        mt, dt, w = mem_type(s.param.dtype), s.param.dtype, self.width
        wide, vt = step * w, f"<{step * w} x {mt}>"
        base = self.index(s.index.substitute({self.vec_var: lin(0)}))
        ptr = self.emit(f"getelementptr {mt}, ptr {self.buffer(s)}, i64 {base}")
        picked = [j // step if j % step == 0 else w for j in range(wide)]  # w: a false lane
        if ok is None:
            mask = "<" + ", ".join("i1 true" if j < w else "i1 false" for j in picked) + ">"
        else:
            lanes = ok if ok_varying else self.splat(ok, "i1")
            order = "<" + ", ".join(f"i32 {j}" for j in picked) + ">"
            mask = self.emit(
                f"shufflevector <{w} x i1> {lanes}, <{w} x i1> zeroinitializer, "
                f"<{wide} x i32> {order}"
            )
        fn = f"@llvm.masked.load.{intrinsic_suffix(vt)}.p0"
        self.decls.add(f"declare {vt} {fn}(ptr, i32, <{wide} x i1>, {vt})")
        whole = self.emit(
            f"call {vt} {fn}(ptr {ptr}, i32 {dt.itemsize}, <{wide} x i1> {mask}, "
            f"{vt} zeroinitializer)"
        )
        every = "<" + ", ".join(f"i32 {step * k}" for k in range(w)) + ">"
        return self.emit(f"shufflevector {vt} {whole}, {vt} poison, <{w} x i32> {every}")

    # ---------------------------------------------------------------- 16-bit floats
    # float16 and bfloat16 are float32 in registers: widened where loaded, rounded once
    # (to nearest even) where stored or cast, so a fused kernel rounds each output once
    def widen(self, v: str, dt: DType, lanes: int | None) -> str:
        """A loaded 16-bit float (`v`, its storage type) as float32; other types unchanged."""
        if not dt.storage:
            return v
        f32, i16, i32 = (vector_type(t, lanes) for t in ("float", dt.storage, "i32"))
        if dt.storage == "half":  # vcvtph2ps with F16C
            return self.emit(f"fpext {i16} {v} to {f32}")
        wide = self.emit(f"zext {i16} {v} to {i32}")  # bfloat16: the top half of a float32
        top = self.emit(f"shl {i32} {wide}, {self.int_splat(16, lanes)}")
        return self.emit(f"bitcast {i32} {top} to {f32}")

    def narrow(self, v: str, dt: DType, lanes: int | None, normal: bool = False) -> str:
        """A float32 value rounded to nearest even into 16-bit `dt`'s storage type. `normal`:
        the value is never subnormal (an AMX accumulator's), so a bfloat16 vector may take
        `vcvtne2ps2bf16`, which flushes subnormal inputs and otherwise rounds as below."""
        if not dt.storage:
            return v
        f32, i16, i32 = (vector_type(t, lanes) for t in ("float", dt.storage, "i32"))
        if dt.storage == "half":  # vcvtps2ph with F16C: overflow to inf, subnormals exact
            return self.emit(f"fptrunc {f32} {v} to {i16}")
        if normal and lanes == 32 and host_converts_bf16():
            return self.narrow_bf16_normal(v)
        # bfloat16, exactly in integers (`vcvtneps2bf16` would flush a subnormal value):
        # add 0x7fff plus the kept part's lowest bit, so ties go to even; a NaN keeps its
        # sign and top payload with the quiet bit set (the add could carry it into inf)
        bits = self.emit(f"bitcast {f32} {v} to {i32}")
        lsb = self.emit(f"lshr {i32} {bits}, {self.int_splat(16, lanes)}")
        lsb = self.emit(f"and {i32} {lsb}, {self.int_splat(1, lanes)}")
        bias = self.emit(f"add {i32} {lsb}, {self.int_splat(0x7FFF, lanes)}")
        rounded = self.emit(f"add {i32} {bits}, {bias}")
        quiet = self.emit(f"or {i32} {bits}, {self.int_splat(0x400000, lanes)}")
        nan = self.emit(f"fcmp uno {f32} {v}, {v}")
        bits = self.emit(f"select {vector_type('i1', lanes)} {nan}, {i32} {quiet}, {i32} {rounded}")
        if lanes:
            # each lane's top half, as the odd halves of the vector: LLVM 22 stores the
            # `trunc (lshr v, 16)` form's lanes 4 bytes wide where a masked store keeps one
            # (a tile's ragged last column), zeroing the next element
            halves = self.emit(f"bitcast {i32} {bits} to <{2 * lanes} x {dt.storage}>")
            odd = ", ".join(f"i32 {2 * k + 1}" for k in range(lanes))
            return self.emit(
                f"shufflevector <{2 * lanes} x {dt.storage}> {halves}, "
                f"<{2 * lanes} x {dt.storage}> poison, <{lanes} x i32> <{odd}>"
            )
        top = self.emit(f"lshr {i32} {bits}, {self.int_splat(16, lanes)}")
        return self.emit(f"trunc {i32} {top} to {i16}")

    def narrow_bf16_normal(self, v: str) -> str:
        """32 float32 lanes, none subnormal, to bfloat16 by `vcvtne2ps2bf16` (its first operand
        gives the upper 16 lanes): round to nearest even, a NaN quieted keeping its sign
        and top payload, as `narrow`'s integer path."""
        f16x, b32 = "<16 x float>", "<32 x bfloat>"
        fn = "@llvm.x86.avx512bf16.cvtne2ps2bf16.512"
        self.decls.add(f"declare {b32} {fn}({f16x}, {f16x})")
        halves = []
        for first in (16, 0):
            idx = ", ".join(f"i32 {first + k}" for k in range(16))
            f32x = "<32 x float>"
            halves.append(self.emit(f"shufflevector {f32x} {v}, {f32x} poison, <16 x i32> <{idx}>"))
        got = self.emit(f"call {b32} {fn}({f16x} {halves[0]}, {f16x} {halves[1]})")
        return self.emit(f"bitcast {b32} {got} to <32 x i16>")

    def int_splat(self, k: int, lanes: int | None) -> str:
        return f"splat (i32 {k})" if lanes else str(k)

    def row_address(self, row: str, rows: int, row_size: int, col: Lin, valid) -> tuple[str, str]:
        """(i1 in range, i64 element index) of a data-dependent row's element; the index is
        0 when out of range, so the address stays inside the buffer."""
        assert self.width is None, "a data-dependent row is read in a scalar loop"
        r, dt = self.lookup(row)[0], self.types[row]
        widen = "zext" if dt.unsigned else "sext"
        r64 = r if dt.itemsize == 8 else self.emit(f"{widen} {dt.llvm} {r} to i64")
        lo = self.emit(f"icmp sge i64 {r64}, 0")
        hi = self.emit(f"icmp slt i64 {r64}, {rows}")
        ok = self.emit(f"and i1 {lo}, {hi}")
        if valid:
            ok = self.emit(f"and i1 {ok}, {self.valid(valid)[0]}")
        base = self.emit(f"mul nsw i64 {r64}, {row_size}")
        at = self.emit(f"add nsw i64 {base}, {self.index(col)}")
        return ok, self.emit(f"select i1 {ok}, i64 {at}, i64 0")

    def stmt_LoadRow(self, s: LoadRow) -> None:
        ok, at = self.row_address(s.row, s.rows, s.row_size, s.col, s.valid)
        mt = mem_type(s.dtype)
        ptr = self.emit(f"getelementptr inbounds {mt}, ptr %{s.param.name}, i64 {at}")
        v = self.emit(f"load {mt}, ptr {ptr}")
        if s.dtype.is_bool:
            v = self.emit(f"icmp ne i8 {v}, 0")
        v = self.widen(v, s.dtype, None)
        zero = literal(0, s.dtype)
        self.bind(
            s.dst, self.emit(f"select i1 {ok}, {s.dtype.llvm} {v}, {s.dtype.llvm} {zero}"), s.dtype
        )

    def stmt_ScatterAdd(self, s: ScatterAdd) -> None:
        dt = s.param.dtype
        assert not dt.is_bool, "scatter-add of bools"
        ok, at = self.row_address(s.row, s.rows, s.row_size, s.col, s.valid)
        value = self.ref(s.value)
        with self.only_if(ok):
            mt = mem_type(dt)
            ptr = self.emit(f"getelementptr inbounds {mt}, ptr %{s.param.name}, i64 {at}")
            cur = self.widen(self.emit(f"load {mt}, ptr {ptr}"), dt, None)
            add = "fadd" if dt.is_float else "add"
            new = self.narrow(self.emit(f"{add} {dt.llvm} {cur}, {value}"), dt, None)
            self.lines.append(f"  store {mt} {new}, ptr {ptr}")

    @contextmanager
    def only_if(self, ok: str):
        """Emit the statements of the block in a branch taken only where the i1 `ok` holds."""
        self.loop_count += 1
        yes, done = f"then.{self.loop_count}", f"done.{self.loop_count}"
        self.lines.append(f"  br i1 {ok}, label %{yes}, label %{done}")
        self.label(yes)
        yield
        self.lines.append(f"  br label %{done}")
        self.label(done)

    def stmt_Const(self, s: Const) -> None:
        self.bind(s.dst, literal(s.value, s.dtype), s.dtype)

    def stmt_Select(self, s: Select) -> None:
        ok, ok_varying = self.valid(s.valid)
        varying = ok_varying or self.lookup(s.value)[1]
        t = self.ty(s.dtype.llvm, varying)
        val = self.ref(s.value, want_vector=varying)
        zero = "zeroinitializer" if varying else literal(0, s.dtype)
        cond_ty = self.ty("i1", ok_varying)
        self.bind(
            s.dst, self.emit(f"select {cond_ty} {ok}, {t} {val}, {t} {zero}"), s.dtype, varying
        )

    def stmt_Position(self, s: Position) -> None:
        varying = self.moves(s.index)
        value = self.vindex(s.index) if varying else self.index(s.index)
        if s.dtype.llvm != "i64":  # an int32 (or narrower) table
            value = self.emit(
                f"trunc {self.ty('i64', varying)} {value} to {self.ty(s.dtype.llvm, varying)}"
            )
        self.bind(s.dst, value, s.dtype, varying)

    def stmt_Rand(self, s: Rand) -> None:
        varying = self.moves(s.index)
        i32 = self.ty("i32", varying)
        if varying:
            idx = self.emit(f"trunc <{self.width} x i64> {self.vindex(s.index)} to {i32}")
        else:
            idx = self.emit(f"trunc i64 {self.index(s.index)} to i32")

        def c(v: int) -> str:
            return f"splat (i32 {_i32(v)})" if varying else _i32(v)

        key = self.ref(s.key, want_vector=varying)
        x = self.emit(f"xor {i32} {idx}, {key}")
        for shift, mul in ((16, rand.MIX1), (13, rand.MIX2), (16, None)):
            sh = self.emit(f"lshr {i32} {x}, {c(shift)}")
            x = self.emit(f"xor {i32} {x}, {sh}")
            if mul is not None:
                x = self.emit(f"mul {i32} {x}, {c(mul)}")
        bits = rand.uniform_bits(s.dtype)
        top = self.emit(f"lshr {i32} {x}, {c(32 - bits)}")
        t = self.ty(s.dtype.llvm, varying)
        f = self.emit(f"uitofp {i32} {top} to {t}")
        scale = self.const(1.0 / (1 << bits), s.dtype, varying)
        self.bind(s.dst, self.emit(f"fmul {t} {f}, {scale}"), s.dtype, varying)

    def stmt_Alu(self, s: Alu) -> None:
        varying = any(self.lookup(a)[1] for a in s.args)
        args = [self.ref(a, want_vector=varying) for a in s.args]
        src = self.types[s.args[0]]
        if s.op is Ops.WHERE:
            c_varying = self.lookup(s.args[0])[1]
            t = self.ty(s.dtype.llvm, varying)
            bt = self.ty("i1", c_varying or varying)
            v = self.emit(f"select {bt} {args[0]}, {t} {args[1]}, {t} {args[2]}")
        elif s.op is Ops.CAST:
            v = self.cast(args[0], src, s.dtype, varying)
        else:
            if s.op in COMPARISON and src.is_half:
                # compared as their type holds them: a value recomputed here in float32
                # must equal its rounded copy in memory (a max's ties, as torch finds them)
                lanes = self.width if varying else None
                args = [self.widen(self.narrow(a, src, lanes), src, lanes) for a in args]
            v = self.table_op(s.op, args, src, varying)
        self.bind(s.dst, v, s.dtype, varying)

    def table_op(self, op: Ops, a: list[str], dt: DType, varying: bool) -> str:
        """`op` on operands of type `dt`, as its row in `pipeline/optable.py` spells it."""
        spelling = op_row(op, dt).llvm
        t = self.ty(dt.llvm, varying)
        if isinstance(spelling, Intrinsic):
            args = ", ".join(f"{t} {x}" for x in a[: spelling.nargs])
            return self.emit(f"call {t} {self.intrinsic(spelling.name, t, spelling.nargs)}({args})")
        if isinstance(spelling, MathFn):
            width = self.width if varying else None
            self.math.add((spelling.name, dt.llvm, width))
            fn = function_name(spelling.name, dt.llvm, width)
            call = f"call {t} {fn}({', '.join(f'{t} {x}' for x in a)})"
            if spelling.branches and width is None:  # (LLVM's vectorizer calls its vector forms)
                forms = vector_variants(spelling.name, dt.llvm, len(a))
                self.math.update((spelling.name, dt.llvm, w) for w, _ in forms)
                call += f' "vector-function-abi-variant"="{",".join(m for _, m in forms)}"'
            return self.emit(call)
        if spelling in (SAFE_DIV, SAFE_UDIV):  # division by zero gives 0 instead of a crash
            bt = self.ty("i1", varying)
            zero, one = self.const(0, dt, varying), self.const(1, dt, varying)
            is_zero = self.emit(f"icmp eq {t} {a[1]}, {zero}")
            safe = self.emit(f"select {bt} {is_zero}, {t} {one}, {t} {a[1]}")
            if spelling == SAFE_UDIV:
                q = self.emit(f"udiv {t} {a[0]}, {safe}")
            elif dt.itemsize < 4:
                # int8 -128 / -1 overflows sdiv (poison in LLVM); in i32 it is 128, which
                # truncates back to -128: the wrapped answer, as C and torch give
                wt = self.ty("i32", varying)
                x, y = (self.emit(f"sext {t} {v} to {wt}") for v in (a[0], safe))
                q = self.emit(f"trunc {wt} {self.emit(f'sdiv {wt} {x}, {y}')} to {t}")
            else:
                q = self.emit(f"sdiv {t} {a[0]}, {safe}")
            return self.emit(f"select {bt} {is_zero}, {t} {zero}, {t} {q}")
        consts = {"one": 1, "zero": 0, "true": True}
        named = {k: self.const(v, dt, varying) for k, v in consts.items() if f"{{{k}}}" in spelling}
        return self.emit(spelling.format(*a, t=t, **named))

    def cast(self, v: str, src: DType, dst: DType, varying: bool) -> str:
        if src is dst:
            return v
        if dst.is_half:  # an explicit cast rounds, even inside a kernel (as torch's would)
            v = self.cast(v, src, float32, varying)
            lanes = self.width if varying else None
            return self.widen(self.narrow(v, dst, lanes), dst, lanes)
        if src.is_half:
            # its registers hold float32, maybe a value computed here and never rounded: a
            # cast reads it as its type holds it (`(a @ b).float()` of 16-bit a and b, as torch)
            lanes = self.width if varying else None
            v = self.widen(self.narrow(v, src, lanes), src, lanes)
            src = float32
        s, d = self.ty(src.llvm, varying), self.ty(dst.llvm, varying)
        if src is dst:
            return v
        if dst.is_bool:
            if src.is_float:
                return self.emit(f"fcmp une {s} {v}, {self.const(0.0, src, varying)}")
            return self.emit(f"icmp ne {s} {v}, {self.const(0, src, varying)}")
        if dst.is_float:
            if src.is_float:
                op = "fpext" if src.itemsize < dst.itemsize else "fptrunc"
            else:
                op = "uitofp" if src.is_bool or src.unsigned else "sitofp"
            return self.emit(f"{op} {s} {v} to {d}")
        if src.is_float:
            if dst.itemsize >= 4:
                return self.emit(f"fptosi {s} {v} to {d}")
            # to a byte or a short through i32, then wrap: what torch gives on the CPU for
            # -1.0 -> uint8 (255); fptoui of a negative value would be poison
            wide = self.emit(f"fptosi {s} {v} to {self.ty('i32', varying)}")
            return self.emit(f"trunc {self.ty('i32', varying)} {wide} to {d}")
        if src.is_bool:
            return self.emit(f"zext {s} {v} to {d}")
        if src.itemsize == dst.itemsize:  # uint8 <-> int8: the same bits
            return v
        op = ("zext" if src.unsigned else "sext") if src.itemsize < dst.itemsize else "trunc"
        return self.emit(f"{op} {s} {v} to {d}")

    # ---------------------------------------------------------------- accumulators
    def stmt_AccInit(self, s: AccInit) -> None:
        t = s.dtype.llvm
        self.types[s.acc] = s.dtype
        if s.size == 1:
            self.allocas.append(f"  %{s.acc}.addr = alloca {t}")
            self.lines.append(f"  store {t} {literal(s.value, s.dtype)}, ptr %{s.acc}.addr")
            return
        # a tile: one <lanes x T> slot per row, each read and written whole, so LLVM keeps
        # every row in a vector register (one flat array gets split into scalars instead)
        self.acc_lanes[s.acc] = s.lanes
        vt = f"<{s.lanes} x {t}>"
        if s.memory:  # rows adjacent, written whole by TileStore before any is read
            self.tile_accs.add(s.acc)
            self.allocas.append(f"  %{s.acc}.mem = alloca [{s.size} x {t}], align 64")
            for row in range(s.size // s.lanes):
                self.allocas.append(
                    f"  %{s.acc}.{row}.addr = getelementptr inbounds {t}, ptr %{s.acc}.mem, "
                    f"i64 {row * s.lanes}"
                )
            return
        for row in range(s.size // s.lanes):
            self.allocas.append(f"  %{s.acc}.{row}.addr = alloca {vt}, align 64")
            self.lines.append(
                f"  store {vt} splat ({t} {literal(s.value, s.dtype)}), ptr %{s.acc}.{row}.addr"
            )

    def acc_ptr(self, acc: str, index: Lin | None) -> tuple[str, bool]:
        """Pointer to an accumulator element (the first lane's, if the index moves by lane)."""
        if index is None:
            return f"%{acc}.addr", False
        t = self.types[acc].llvm
        moves = self.moves(index)
        if moves:
            assert index.coef(self.vec_var) == 1, "a tile's lanes must be adjacent accumulators"
            index = index.substitute({self.vec_var: lin(0)})
        flat = self.index(index)
        assert flat.lstrip("-").isdigit(), "a tile's accumulators are addressed by unrolled loops"
        row, lane = divmod(int(flat), self.acc_lanes[acc])
        ptr = f"%{acc}.{row}.addr"
        if lane:
            ptr = self.emit(f"getelementptr inbounds {t}, ptr {ptr}, i64 {lane}")
        return ptr, moves

    def positive_zero(self, value: str, dt: DType, varying: bool) -> str:
        """`value + 0.0`, without fast-math flags: -0.0 becomes +0.0 and nothing else changes
        (NaN included). A float sum's result leaves its accumulator through it: `nsz` lets
        LLVM fold the accumulator's `0.0 + x` to `x`, so a sum of -0.0s would be -0.0 where
        torch's (an accumulator from +0.0, in order) is +0.0. Without `nsz` LLVM may not
        fold this add; it costs one add per output, not per element."""
        t = self.ty(dt.llvm, varying)
        return self.emit(f"fadd {t} {value}, {self.const(0.0, dt, varying)}")

    def stmt_AccRead(self, s: AccRead) -> None:
        ptr, moves = self.acc_ptr(s.acc, s.index)
        t = self.ty(s.dtype.llvm, moves)
        value = self.emit(f"load {t}, ptr {ptr}")
        if s.acc in self.loose_sums:  # (a cascade's in-order levels never hold -0.0)
            value = self.positive_zero(value, s.dtype, moves)
        if s.acc in self.tile_accs:
            self.normal_values.add(s.dst)
        self.bind(s.dst, value, s.dtype, moves)

    def stmt_AccReduceLanes(self, s: AccReduceLanes) -> None:
        dt, w = s.dtype, s.lanes
        t, vt = dt.llvm, f"<{w} x {dt.llvm}>"
        ptr, _ = self.acc_ptr(s.acc, s.base)
        vec = self.emit(f"load {vt}, ptr {ptr}")
        sfx = intrinsic_suffix(vt)
        if dt.is_float and s.op is Ops.ADD:
            fn = f"@llvm.vector.reduce.fadd.{sfx}"
            self.decls.add(f"declare {t} {fn}({t}, {vt})")
            v = self.emit(f"call reassoc nsz {t} {fn}({t} {literal(-0.0, dt)}, {vt} {vec})")
            v = self.positive_zero(v, dt, False)
        else:
            kind = (
                "fmaximum"
                if dt.is_float
                else ("or" if dt.is_bool else "add" if s.op is Ops.ADD else _imax(dt))
            )
            fn = f"@llvm.vector.reduce.{kind}.{sfx}"
            self.decls.add(f"declare {t} {fn}({vt})")
            v = self.emit(f"call {t} {fn}({vt} {vec})")
        self.bind(s.dst, v, dt)

    def stmt_AccUpdate(self, s: AccUpdate) -> None:
        dt = s.dtype
        ptr, moves = self.acc_ptr(s.acc, s.index)
        t = self.ty(dt.llvm, moves)
        cur = self.emit(f"load {t}, ptr {ptr}")
        val = self.ref(s.value, want_vector=moves)
        if dt.is_float and s.op is Ops.ADD:
            flags = "contract" if s.ordered else "reassoc nsz contract"
            if not s.ordered:
                self.loose_sums.add(s.acc)
            new = self.emit(f"fadd {flags} {t} {cur}, {val}")
        elif dt.is_float:
            fn = self.intrinsic("maximum", t, 2)
            new = self.emit(f"call reassoc nsz {t} {fn}({t} {cur}, {t} {val})")
        elif dt.is_bool:
            new = self.emit(f"or {t} {cur}, {val}")
        elif s.op is Ops.ADD:
            new = self.emit(f"add {t} {cur}, {val}")
        else:
            new = self.emit(f"call {t} {self.intrinsic(_imax(dt), t, 2)}({t} {cur}, {t} {val})")
        self.lines.append(f"  store {t} {new}, ptr {ptr}")

    def stmt_AccDotPairs(self, s: AccDotPairs) -> None:
        """`vdpbf16ps`: A's pair a 32-bit broadcast, the intrinsic's last operand (the one
        the instruction may read from memory, `{1to16}`); B's 16 pairs one 64-byte load."""
        assert self.width == 16 and self.moves(s.index), "dot_pairs fills a 16-lane row"
        ptr, _ = self.acc_ptr(s.acc, s.index)
        f16x, i16x, b32 = "<16 x float>", "<16 x i32>", "<32 x bfloat>"
        cur = self.emit(f"load {f16x}, ptr {ptr}")
        a_ptr = self.emit(
            f"getelementptr inbounds i16, ptr %{s.a.name}, i64 {self.index(s.a_index)}"
        )
        a_pair = self.splat(self.emit(f"load i32, ptr {a_ptr}, align 2"), "i32")
        b_base = self.index(s.b_index.substitute({self.vec_var: lin(0)}))
        b_ptr = self.emit(f"getelementptr inbounds i16, ptr %{s.b.name}, i64 {b_base}")
        b_pairs = self.emit(f"load {i16x}, ptr {b_ptr}, align 2")
        a_bf = self.emit(f"bitcast {i16x} {a_pair} to {b32}")
        b_bf = self.emit(f"bitcast {i16x} {b_pairs} to {b32}")
        fn = "@llvm.x86.avx512bf16.dpbf16ps.512"
        self.decls.add(f"declare {f16x} {fn}({f16x}, {b32}, {b32})")
        new = self.emit(f"call {f16x} {fn}({f16x} {cur}, {b32} {b_bf}, {b32} {a_bf})")
        self.lines.append(f"  store {f16x} {new}, ptr {ptr}")

    # ---------------------------------------------------------------- AMX tiles
    def amx_call(self, name: str, *args: str) -> None:
        types = {"tilezero": "i8 immarg", "tileloadd64": "i8 immarg, ptr, i64"}
        types |= {
            "tdpbf16ps": "i8 immarg, i8 immarg, i8 immarg",
            "tilestored64": types["tileloadd64"],
        }
        self.decls.add(f"declare void @llvm.x86.{name}({types[name]})")
        self.lines.append(f"  call void @llvm.x86.{name}({', '.join(args)})")
        self.amx = True

    def stmt_TileZero(self, s: TileZero) -> None:
        self.amx_call("tilezero", f"i8 {s.tile}")

    def tile_rows(self, s: TileLoad | TileStoreRows) -> tuple[str, str]:
        """(pointer, row stride in bytes) of the 16 rows a tile load or store names."""
        mt, size = mem_type(s.param.dtype), s.param.dtype.itemsize
        ptr = self.emit(
            f"getelementptr inbounds {mt}, ptr %{s.param.name}, i64 {self.index(s.index)}"
        )
        return f"ptr {ptr}", f"i64 {s.stride * size}"

    def stmt_TileLoad(self, s: TileLoad) -> None:
        self.amx_call("tileloadd64", f"i8 {s.tile}", *self.tile_rows(s))

    def stmt_TileLoadAcc(self, s: TileLoadAcc) -> None:
        t, lanes = self.types[s.acc].llvm, self.acc_lanes[s.acc]
        ptr = self.emit(f"getelementptr inbounds {t}, ptr %{s.acc}.mem, i64 {s.offset}")
        self.amx_call("tileloadd64", f"i8 {s.tile}", f"ptr {ptr}", f"i64 {lanes * 4}")

    def stmt_TileDot(self, s: TileDot) -> None:
        self.amx_call("tdpbf16ps", f"i8 {s.acc}", f"i8 {s.a}", f"i8 {s.b}")

    def stmt_TileStore(self, s: TileStore) -> None:
        t, lanes = self.types[s.acc].llvm, self.acc_lanes[s.acc]
        ptr = self.emit(f"getelementptr inbounds {t}, ptr %{s.acc}.mem, i64 {s.offset}")
        self.amx_call("tilestored64", f"i8 {s.tile}", f"ptr {ptr}", f"i64 {lanes * 4}")

    def stmt_TileStoreRows(self, s: TileStoreRows) -> None:
        self.amx_call("tilestored64", f"i8 {s.tile}", *self.tile_rows(s))

    def tile_config(self) -> list[str]:
        """Entry code that configures the eight AMX tiles as 16 rows of 64 bytes (palette 1)."""
        config = [0] * 64
        config[0] = 1
        for tile in range(8):
            config[16 + 2 * tile] = 64  # bytes per row (little-endian u16)
            config[48 + tile] = 16  # rows
        self.decls.add("declare void @llvm.x86.ldtilecfg(ptr)")
        self.decls.add("declare void @llvm.x86.tilerelease()")
        data = ", ".join(f"i8 {b}" for b in config)
        return [
            "  %tilecfg = alloca [64 x i8], align 64",
            f"  store <64 x i8> <{data}>, ptr %tilecfg, align 64",
            "  call void @llvm.x86.ldtilecfg(ptr %tilecfg)",
        ]

    def stmt_Store(self, s: Store) -> None:
        dt = s.param.dtype
        mt = mem_type(dt)
        value, varying = self.lookup(s.value)
        moves = self.moves(s.index) or any(self.moves(c) for c in s.valid)
        if self.width and (moves or varying):
            value = self.ref(s.value, want_vector=True)
            vt = f"<{self.width} x {mt}>"
            if dt.is_bool:
                value = self.emit(f"zext <{self.width} x i1> {value} to {vt}")
            value = self.narrow(value, dt, self.width, s.value in self.normal_values)
            contiguous = s.index.coef(self.vec_var) == 1 and not self.moves(
                s.index - lin(self.vec_var)
            )
            if contiguous or s.valid:
                self.vector_store(s, value, vt, contiguous)
                return
            for k in range(self.width):  # a scatter, lane by lane
                lane = self.emit(f"extractelement {vt} {value}, i64 {k}")
                idx = self.index(s.index.substitute({self.vec_var: lin(k)}))
                ptr = self.emit(f"getelementptr inbounds {mt}, ptr %{s.param.name}, i64 {idx}")
                self.lines.append(f"  store {mt} {lane}, ptr {ptr}")
            return
        if dt.is_bool:
            value = self.emit(f"zext i1 {value} to i8")
        value = self.narrow(value, dt, None)
        idx = self.index(s.index)
        ptr = self.emit(f"getelementptr inbounds {mt}, ptr %{s.param.name}, i64 {idx}")
        if not s.valid:
            self.lines.append(f"  store {mt} {value}, ptr {ptr}")
            return
        with self.only_if(self.valid(s.valid)[0]):  # a scalar store past an edge is skipped
            self.lines.append(f"  store {mt} {value}, ptr {ptr}")

    def stmt_Prefetch(self, s: Prefetch) -> None:
        """`prefetcht1` of each cache line a contiguous vector of `s.index` covers (a scalar
        index: its one line); elsewhere nothing. The address may lie past the buffer (a
        thread's last row): a prefetch never faults, and the GEP is not `inbounds`."""
        size, mt = s.param.dtype.itemsize, mem_type(s.param.dtype)
        base, count = s.index, 1
        if self.width:
            if s.index.coef(self.vec_var) != 1 or self.moves(s.index - lin(self.vec_var)):
                return
            base = s.index.substitute({self.vec_var: lin(0)})
            count = max(1, self.width * size // CACHE_LINE_BYTES)
        fn = "@llvm.prefetch.p0"
        self.decls.add(f"declare void {fn}(ptr, i32, i32, i32)")
        for k in range(count):
            idx = self.index(base + k * CACHE_LINE_BYTES // size)
            ptr = self.emit(f"getelementptr {mt}, ptr %{s.param.name}, i64 {idx}")
            self.lines.append(f"  call void {fn}(ptr {ptr}, i32 0, i32 2, i32 1)")

    def vector_store(self, s: Store, value: str, vt: str, contiguous: bool) -> None:
        """A vector store, masked where a lane is past the tile's edge (s.valid)."""
        dt, mt, w = s.param.dtype, mem_type(s.param.dtype), self.width
        if s.valid:
            ok, ok_varying = self.valid(s.valid)
            mask = ok if ok_varying else self.splat(ok, "i1")
        else:
            mask = "splat (i1 true)"
        if contiguous:
            base = self.index(s.index.substitute({self.vec_var: lin(0)}))
            ptr = self.emit(f"getelementptr {mt}, ptr %{s.param.name}, i64 {base}")
            if not s.valid:
                self.lines.append(f"  store {vt} {value}, ptr {ptr}, align {dt.itemsize}")
                return
            fn = f"@llvm.masked.store.{intrinsic_suffix(vt)}.p0"
            self.decls.add(f"declare void {fn}({vt}, ptr, i32, <{w} x i1>)")
            self.lines.append(
                f"  call void {fn}({vt} {value}, ptr {ptr}, i32 {dt.itemsize}, <{w} x i1> {mask})"
            )
            return
        ptrs = self.emit(
            f"getelementptr {mt}, ptr %{s.param.name}, <{w} x i64> {self.vindex(s.index)}"
        )
        fn = f"@llvm.masked.scatter.{intrinsic_suffix(vt)}.v{w}p0"
        self.decls.add(f"declare void {fn}({vt}, <{w} x ptr>, i32, <{w} x i1>)")
        self.lines.append(
            f"  call void {fn}({vt} {value}, <{w} x ptr> {ptrs}, i32 {dt.itemsize}, "
            f"<{w} x i1> {mask})"
        )

    # ---------------------------------------------------------------- module
    def render(self) -> str:
        self.block(self.k.body)
        if self.tables:
            self.pieces_apart()
        params = ["i64 %start", "i64 %end"]
        for p in self.k.params:
            attrs = "noalias" if p.output else "noalias readonly"
            params.append(f"ptr {attrs} %{p.name}")
        if self.polls:
            params.append(CANCEL_PARAM)
        # "no-builtins": never turn loops into memset/memcpy calls; kernels call nothing
        head = f'define void @{self.symbol}({", ".join(params)}) nounwind "no-builtins" {{'
        # each thread's scratch rows, on its stack (the calling thread's stack, a few KB)
        scratch = [
            f"  %{p.name} = alloca [{p.size} x {mem_type(p.dtype)}], align 64"
            for p in self.k.scratch
        ]
        entry, leave = scratch + self.allocas, ["  ret void"]
        if self.amx:
            entry = entry + self.tile_config()
            leave = ["  call void @llvm.x86.tilerelease()"] + leave
        body = ["entry:"] + entry + ["  br label %top", "top:"] + self.lines + leave
        if self.polls:  # (cut short: the caller raises instead of reading the outputs)
            body += ["cancelled:"] + leave
        math_text, math_decls = math_functions(self.math)
        return "\n".join(
            [
                f"; kernel {self.k.name}",
                *sorted(self.decls | math_decls),
                math_text,
                head,
                *body,
                "}",
                *self.metadata,
                "",
            ]
        )


def render_llvm(kernel: Kernel, symbol: str) -> str:
    """LLVM IR text of `kernel` as a function named `symbol`."""
    return _Renderer(kernel, symbol).render()


def reads_cancel_word(source: str) -> bool:
    """Whether a kernel rendered by `render_llvm` takes the cancel word's address after
    its buffers (see the module's docstring)."""
    return f"{CANCEL_PARAM})" in source


def _poll_block(extent: int, most: int) -> int:
    """Iterations of a loop of `extent` between two reads of the cancel word: at most
    `most`, a divisor of `extent` where one is at least half of that (the blocks are then
    all alike, so LLVM sees each one's constant trip count, and a max over 2^25 values
    was not 25% slower), else `most`. In a plan whose sizes vary (`templates.active()`),
    `most` (the last block clamped) or the whole loop where it is no longer: a loop's form
    then does not change with the divisors of its length.

    >>> _poll_block(524288, 1024), _poll_block(62500000, 512), _poll_block(1000003, 512)
    (1024, 500, 512)
    """
    if templates.active():  # (a plan whose sizes vary: blocks of one length at every size)
        return min(extent, most)
    return next((b for b in range(most, most // 2, -1) if extent % b == 0), most)


def _inner_work(body: list) -> int:
    """Inner iterations one run of `body` takes: its loops' extents multiplied down the
    nest, summed over siblings (at least 1).

    >>> from fusegrad.ir.symbolic import Var
    >>> r, t = Var("r", 0, 9), Var("t", 0, 3)
    >>> _inner_work([Loop(r, 10, [Loop(t, 4, [])]), Loop(t, 4, [])])
    44
    """
    return max(1, sum(s.extent * _inner_work(s.body) for s in body if isinstance(s, Loop)))
