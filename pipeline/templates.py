"""Kernels that are the same up to their sizes: one compiled body, the sizes passed in.

A new sentence length, batch size or image size gives a new plan whose kernels are
mostly the kernels of the last plan with other numbers in them: a loop's trip count, a
row's stride, a sum's bound. Compiled one by one, each costs LLVM tens of milliseconds
(the sentence classifier of issue 56: 232 compiles over 27 lengths). Here a kernel's
LLVM source is read as a *shape* and its *literals*: every integer or float constant
that stands where a run-time value could stand (an operand of arithmetic, a comparison,
a select, a store, a phi, a scalar inserted into a vector, a one-index address) is cut
out of the text, in order. Two sources with the same shape differ only in those
literals.

Once a plan's sizes are seen to vary (the engine has compiled a plan of the same graph
with other sizes: `varying`), a kernel whose shape was compiled before with other
literals is not compiled itself: its *generic* form is, in which each literal that
differed between the kernels seen is read from an array (`%fg.lits`, after the buffers),
and the others stay as they were. The kernel then runs that code, given its own literals
after its buffers (`CompiledKernel.lits`: a launch passes them, and a plan's program
reads their address from its table of buffers): nothing is compiled for it. Literals
that never differed stay constants, so LLVM still sees a vector loop's constant trip
count where only an outer size moves.

A kernel of a shape met for the first time in such a plan (a form a size class bound
brought) has no other kernel to compare with: the CPU backend lowers it again at other
sizes (`probes`, `CpuBackend._predicted`), and the literals that move there (`moved`)
are read from the array from the start (`_Registry.predict`), so the next sizes of its
form compile nothing. A probe only chooses which literals are read: the kernel always
runs on its own.

The generic code computes what the kernel's own source computes: the texts are equal but
for those literals, and each of them sits where an instruction reads a value, which the
array supplies at run time; nothing else depends on it. Two things may differ: speed (a
trip count LLVM no longer knows), and the order of additions LLVM may reorder (`reassoc`,
the cascaded sums' vector lanes), which it picks knowing the trip count or not: such a
sum can differ in its last bits (docs/NUMERICS.md). Plans whose sizes never vary never
use it: their kernels are compiled as before, specialised.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..runtime import forksafe

# the array of literals, a parameter of every generic kernel after its buffers
LITS_PARAM = "ptr noalias readonly %fg.lits"
_CANCEL = "ptr %cancel.word"

GENERIC_SYMBOL = "fg_generic"  # a generic kernel's name until `code_of` names it by its digest
SCALARS = {"i64", "i32", "float", "double"}  # the types of the literals cut out
_BINARY = {
    "add", "sub", "mul", "sdiv", "srem", "udiv", "urem", "shl", "lshr", "ashr", "and", "or",
    "xor", "fadd", "fsub", "fmul", "fdiv", "frem", "icmp", "fcmp",
}  # fmt: skip
_WORDS_BEFORE_TYPE = {
    "nsw", "nuw", "exact", "disjoint", "contract", "fast", "nnan", "ninf", "nsz", "arcp",
    "afn", "reassoc", "eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge",
    "oeq", "one", "olt", "ole", "ogt", "oge", "ord", "uno", "ueq", "une", "true", "false",
}  # fmt: skip
_TOKEN = re.compile(
    r"[%@][-\w.$]+|0x[0-9A-Fa-f]+|-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+|[A-Za-z_][\w.]*|\S"
)
SEEN_MAX = 1024  # shapes remembered (least recently used go)
GENERICS_MAX = 8  # generic kernels of one shape, each keeping other literals constant


@dataclass(frozen=True)
class Shape:
    """A kernel's source cut at its literals: `text` with each one replaced by a mark,
    the literals themselves, where each stands in the source and its LLVM type."""

    text: str
    literals: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    types: tuple[str, ...]


def _literal(tok: str, ty: str) -> bool:
    """Whether `tok` is a literal a value of type `ty` can replace: an integer for an
    integer type, LLVM's hexadecimal form for a float type."""
    if ty in ("i64", "i32"):
        return tok[:1].isdigit() or (tok[:1] == "-" and tok[1:2].isdigit())
    return tok.startswith("0x")


def _operands(op: str, rest: list[tuple[str, int]]) -> list[tuple[int, str]]:
    """Positions in `rest` (the tokens after the opcode) of the literals the instruction
    reads as values, each with its type."""
    toks = [t for t, _ in rest]
    found: list[tuple[int, str]] = []
    if op in _BINARY:
        j = 0
        while j < len(toks) and toks[j] in _WORDS_BEFORE_TYPE:
            j += 1
        if j + 3 < len(toks) and toks[j] in SCALARS and toks[j + 2] == ",":
            found += [(j + 1, toks[j]), (j + 3, toks[j])]
    elif op == "fneg":  # fneg [flags] T a
        j = 0
        while j < len(toks) and toks[j] in _WORDS_BEFORE_TYPE:
            j += 1
        if j + 1 < len(toks) and toks[j] in SCALARS:
            found.append((j + 1, toks[j]))
    elif op == "select":  # select i1 %c, T a, T b
        for j in range(1, len(toks)):
            if toks[j - 1] in SCALARS and toks[j - 1] != "i1":
                found.append((j, toks[j - 1]))
    elif op == "store":  # store T v, ptr p
        if len(toks) > 2 and toks[0] in SCALARS and toks[2] == ",":
            found.append((1, toks[0]))
    elif op == "phi":  # phi T [v, %a], [v, %b]
        if toks and toks[0] in SCALARS:
            found += [(j, toks[0]) for j in range(1, len(toks)) if toks[j - 1] == "["]
    elif op == "insertelement":  # insertelement <N x T> v, T s, i32 k
        if "," in toks:
            j = toks.index(",") + 1
            if j + 2 < len(toks) and toks[j] in SCALARS and toks[j + 2] == ",":
                found.append((j + 1, toks[j]))
    return [(j, ty) for j, ty in found if j < len(toks) and _literal(toks[j], ty)]


_OPS = _BINARY | {"fneg", "select", "store", "phi", "insertelement", "getelementptr"}
_LITERAL_AFTER = re.compile(r"[\s\[,](?:-?\d|0x)")


_SCALAR = r"(i64|i32|float|double)"
_VALUE = r"([^ ,\[\]()<>]+)"
_BINARY_FORM = re.compile(rf"  %[-\w.$]+ = [a-z]+(?: [a-z]+)* {_SCALAR} {_VALUE}, {_VALUE}$")
_STORE_FORM = re.compile(rf"  store {_SCALAR} {_VALUE}, ptr ")
_ADDRESS_FORM = re.compile(
    r"  %[-\w.$]+ = getelementptr (?:inbounds )?\w+, ptr [%@][-\w.$]+, i64 (-?\d+)$"
)


def _common_form(op: str, line: str) -> list[tuple[int, str, str]] | None:
    """The (column, literal, type) of each literal of `line` (an instruction `op`) taken
    as a value, for the forms most lines have (arithmetic or a comparison on scalars, a
    scalar store, a one-index address), read by one regular expression; None for another
    form (then `_operands` reads its tokens)."""
    if op in _BINARY:
        m = _BINARY_FORM.match(line)
        if m is not None:
            ty = m.group(1)
            return [(m.start(g), m.group(g), ty) for g in (2, 3) if _literal(m.group(g), ty)]
    elif op == "store":
        m = _STORE_FORM.match(line)
        if m is not None:
            ty = m.group(1)
            return [(m.start(2), m.group(2), ty)] if _literal(m.group(2), ty) else []
    elif op == "getelementptr":
        m = _ADDRESS_FORM.match(line)
        return [] if m is None else [(m.start(1), m.group(1), "i64")]
    return None


def _token_form(line: str) -> list[tuple[int, str, str]]:
    """`_common_form`'s answer for any other line: its tokens, read by `_operands`."""
    toks = [(m.group(), m.start()) for m in _TOKEN.finditer(line)]
    if len(toks) > 2 and toks[1][0] == "=":
        op, rest = toks[2][0], toks[3:]
    else:
        op, rest = toks[0][0], toks[1:]
    return [(rest[j][1], rest[j][0], ty) for j, ty in _operands(op, rest)]


def _candidate(line: str) -> str | None:
    """The instruction of a line that may hold a literal `_operands` takes, else None (a
    quick test before the line is read: most lines are loads, branches and arithmetic on
    names only)."""
    body = line.lstrip()
    if body[:1] == "%":
        at = body.find(" = ")
        if at < 0:
            return None
        body = body[at + 3 :]
    space = body.find(" ")
    op = body[:space]
    if op in _OPS and _LITERAL_AFTER.search(body, space) is not None:
        return op
    return None


def shape_of(code: str) -> Shape:
    """`code` as a shape and its literals (`_shape_of`), the last few remembered: one
    kernel's code is read by `new_object`, `compile_kernels` and `varying`."""
    with _shapes_lock:
        shape = _shapes.get(code)
    if shape is None:
        shape = _shape_of(code)
        with _shapes_lock:
            _shapes[code] = shape
            while len(_shapes) > SHAPES_KEPT:
                _shapes.popitem(last=False)
    return shape


# codes whose shapes are remembered: each holds a kernel's code and its shape's text (tens
# of KB), and a plan whose sizes vary reads new codes at every size (256 held 8 MB more
# over an MLP's 80 batch sizes, tests/runtime/test_memory.py)
SHAPES_KEPT = 64
_shapes: OrderedDict[str, Shape] = OrderedDict()
_shapes_lock = forksafe.Lock()


def _shape_of(code: str) -> Shape:
    """`code` (a kernel's LLVM source, as `compiler.code_of` makes it) as a shape and its
    literals. Only the kernel's own function is read (the one taking `%start`), not the
    math functions before it, and its name is cut out too.

    >>> a = _shape_of("define void @k(i64 %start, i64 %end) {\\n  %t = mul i64 %start, 14\\n}")
    >>> b = _shape_of("define void @j(i64 %start, i64 %end) {\\n  %t = mul i64 %start, 20\\n}")
    >>> a.text == b.text, a.literals, b.literals
    (True, ('14',), ('20',))
    """
    pieces, literals, spans, types = [], [], [], []
    at = 0  # where the text not yet copied begins
    inside = False
    offset = 0
    for line in code.split("\n"):
        if line.startswith("define ") and "%start" in line:
            inside = True
            name = re.search(r"@[-\w.$\"]+\(", line)
            if name:
                pieces.append(code[at : offset + name.start()] + "@K(")
                at = offset + name.end()
        elif inside and line.startswith("}"):
            inside = False
        elif inside and line[:1] == " " and (op := _candidate(line)):
            found = _common_form(op, line)
            for col, tok, ty in _token_form(line) if found is None else found:
                start = offset + col
                pieces.append(code[at:start] + "\x00")
                at = start + len(tok)
                literals.append(tok)
                spans.append((start, at))
                types.append(ty)
        offset += len(line) + 1
    pieces.append(code[at:])
    return Shape("".join(pieces), tuple(literals), tuple(spans), tuple(types))


Groups = tuple[tuple[int, ...], ...]  # positions of literals, those of a group read one slot


def words(shape: Shape, groups: Groups) -> np.ndarray:
    """The array a generic kernel reads: for each group of positions, the literal there,
    as 64 bits (a float's literal is LLVM's hexadecimal double, its bits)."""
    out = np.zeros(max(len(groups), 1), dtype=np.uint64)
    for k, group in enumerate(groups):
        tok = shape.literals[group[0]]
        out[k] = int(tok, 16) if tok.startswith("0x") else int(tok) & 0xFFFFFFFFFFFFFFFF
    return out


def generic_source(code: str, shape: Shape, groups: Groups) -> str:
    """`code` with the literals at each group's positions read from one slot of `%fg.lits`
    (loaded at the function's entry), that parameter added after the buffers. Literals
    that were equal in every kernel seen read one value: LLVM then sees one stride where
    the kernel's rows share one, and addresses them from one base."""
    slot = {p: k for k, group in enumerate(groups) for p in group}
    out, at = [], 0
    for p, (start, end) in enumerate(shape.spans):
        if p in slot:
            out.append(code[at:start] + f"%fg.lit.{slot[p]}")
            at = end
    out.append(code[at:])
    text = "".join(out)
    head_at = text.index("%start")
    head_end = text.index(")", head_at)
    params = text[head_at:head_end]
    if params.endswith(_CANCEL):
        params = params[: -len(_CANCEL)] + LITS_PARAM + ", " + _CANCEL
    else:
        params = params + ", " + LITS_PARAM
    text = text[:head_at] + params + text[head_end:]
    name, paren = text.rindex("@", 0, head_at), text.rindex("(", 0, head_at)
    text = text[:name] + f"@{GENERIC_SYMBOL}" + text[paren:]
    loads = []
    for k, group in enumerate(groups):
        ty, v = shape.types[group[0]], f"%fg.lit.{k}"
        loads += [
            f"  {v}.at = getelementptr inbounds i64, ptr %fg.lits, i64 {k}",
            f"  {v}.w = load i64, ptr {v}.at, align 8",
        ]
        if ty == "i64":
            loads.append(f"  {v} = add i64 {v}.w, 0")
        elif ty == "i32":
            loads.append(f"  {v} = trunc i64 {v}.w to i32")
        elif ty == "double":
            loads.append(f"  {v} = bitcast i64 {v}.w to double")
        else:  # float: LLVM writes its literal as the double of the same value
            loads += [
                f"  {v}.d = bitcast i64 {v}.w to double",
                f"  {v} = fptrunc double {v}.d to float",
            ]
    entry = text.index("\nentry:\n", head_end) + len("\nentry:\n")
    return text[:entry] + "\n".join(loads) + ("\n" if loads else "") + text[entry:]


def grouped(shape: Shape, varying: list[int], known: list[tuple[str, ...]]) -> Groups:
    """The positions in `varying` grouped by their literals in every kernel in `known` and
    in `shape` (and their type): those always equal read one slot."""
    groups: dict[tuple, list[int]] = {}
    for p in varying:
        values = (shape.types[p], shape.literals[p], *(lits[p] for lits in known))
        groups.setdefault(values, []).append(p)
    return tuple(tuple(g) for g in groups.values())


def probes(sizes: frozenset[int], kept: frozenset[int] = frozenset()) -> list[dict[int, int]]:
    """The other sizes a kernel of a plan whose `sizes` vary is lowered at (old size ->
    new) to see which of its literals move with them (`moved`): each size one more (a
    remainder moves), and a third more and 17 (a quotient moves; at one of them the
    kernel may take another form, and is left out). Each probe is a lowering: two, not
    more, since a plan of two sizes (a ragged last batch) has no use for them.
    A size times one of the sizes `kept` (a batch of sentences flattened to rows) moves
    with it, where that product is no size of its own."""
    out = []
    for step in (lambda n: n + 1, lambda n: n + n // 3 + 17):
        new = {n: step(n) for n in sizes}
        products = {n * k: m * k for n, m in new.items() for k in kept}
        for old, m in products.items():
            if old not in kept and old not in new:
                new[old] = m
        out.append(new)
    return out


def moved(shape: Shape, others: list[str]) -> Groups | None:
    """The groups of `shape`'s literals that differ in any of `others` (the code of the
    same kernel lowered at other sizes, `probes`; those of another shape, whose sizes took
    another form, left out), those equal in every kernel one slot; None where no literal
    moved."""
    theirs = [t.literals for t in map(shape_of, others) if t.text == shape.text]
    positions = [p for p, a in enumerate(shape.literals) if any(lits[p] != a for lits in theirs)]
    if not positions:
        return None
    return grouped(shape, positions, theirs)


def shared(candidates: list[tuple[int, str, Shape, int]]) -> dict[int, tuple]:
    """For (index, code, shape, level) candidates of one batch, those whose shape and level
    another candidate has with other literals, as index -> (shape, generic kernel, code):
    one generic kernel for each such shape, reading the literals that differ between them
    (those equal in all of them one slot, `grouped`), kept by none of the registry's
    tables. Candidates whose literals are all equal share one code already (`code_of`)."""
    by_form: dict[tuple[str, int], list[tuple[int, str, Shape]]] = {}
    for i, code, shape, opt in candidates:
        by_form.setdefault((shape.text, opt), []).append((i, code, shape))
    out: dict[int, tuple] = {}
    for members in by_form.values():
        first = members[0][2]
        others = [shape.literals for _, _, shape in members[1:]]
        varying = [
            p for p in range(len(first.literals)) if any(o[p] != first.literals[p] for o in others)
        ]
        if not varying:
            continue
        g = Generic.of(members[0][1], first, grouped(first, varying, others))
        for i, code, shape in members:
            out[i] = (shape, g, code)
    return out


@dataclass
class Generic:
    """A generic kernel: which of its shape's literals it reads from the array (in groups
    that read one slot each), and the values it keeps of the others."""

    groups: Groups
    kept: tuple[str, ...]  # the literals at the other positions, in order
    code: str  # its source (compiled as any kernel, cached by its own digest)

    @staticmethod
    def of(code: str, shape: Shape, groups: Groups, make=None) -> Generic:
        """`make`: how the generic source is written (`generic_source`, LLVM's, by
        default; pipeline/cuda_templates.py's for CUDA C)."""
        chosen = {p for group in groups for p in group}
        kept = tuple(t for p, t in enumerate(shape.literals) if p not in chosen)
        return Generic(groups, kept, (make or generic_source)(code, shape, groups))

    def serves(self, shape: Shape) -> bool:
        """Whether this kernel computes `shape`'s: the literals it keeps are the same, and
        those of each group are equal."""
        lits = shape.literals
        if any(len({lits[p] for p in group}) > 1 for group in self.groups):
            return False
        chosen = {p for group in self.groups for p in group}
        return self.kept == tuple(t for p, t in enumerate(lits) if p not in chosen)


class _Registry:
    """Shapes compiled so far with their literals, and the generic kernels made of them,
    for the plans whose sizes vary (a lock: compiles may run on several threads)."""

    def __init__(self):
        self.lock = forksafe.Lock()
        self.seen: OrderedDict[tuple[str, int], list[tuple[str, ...]]] = OrderedDict()
        self.generics: dict[tuple[str, int], list[Generic]] = {}
        # (code, level, groups) of generic kernels that plans read from disk ran through,
        # adopted when something is next looked up (`adopt_later`)
        self.pending: list[tuple[str, int, Groups]] = []
        self.refused: set[tuple] = set()  # shapes whose generic kernel did not build

    def note(self, shape: Shape, opt: int) -> None:
        key = (shape.text, opt)
        with self.lock:
            known = self.seen.setdefault(key, [])
            if shape.literals not in known and len(known) < 64:
                known.append(shape.literals)
            self.seen.move_to_end(key)
            while len(self.seen) > SEEN_MAX:
                old, _ = self.seen.popitem(last=False)
                self.generics.pop(old, None)

    def generic_for(self, code: str, shape: Shape, opt, make=None) -> Generic | None:
        """The generic kernel that runs `code`: one made already, or a new one reading the
        literals that differ between `code` and the kernels of its shape seen so far (those
        equal in all of them one slot); None where no kernel of its shape was seen with
        other literals. Where those made before do not serve it (a literal that had not
        differed does, or two that were equal no longer are), the new one reads what each
        of them read as well, each literal from a slot of its own, so that one more serves
        the sizes to come. `make`: as `Generic.of`'s (the language of `code`)."""
        self._settle()
        key = (shape.text, opt)
        with self.lock:
            if key in self.refused:
                return None
            for g in self.generics.get(key, ()):
                if g.serves(shape):
                    return g
            known = self.seen.get(key)
            if not known or all(lits == shape.literals for lits in known):
                return None
            if len(self.generics.get(key, ())) >= GENERICS_MAX:
                return None  # (compiled for its own sizes)
            varying = [
                p
                for p in range(len(shape.literals))
                if any(lits[p] != shape.literals[p] for lits in known)
            ]
            made = self.generics.get(key, ())
            if made:  # a wider one: what each read before too, each literal a slot of its own
                read = {p for g in made for group in g.groups for p in group}
                groups = tuple((p,) for p in sorted(read.union(varying)))
            else:
                groups = grouped(shape, varying, known)
            g = Generic.of(code, shape, groups, make)
            self.generics.setdefault(key, []).append(g)
            return g

    def refuse(self, shape: Shape, opt, g: Generic) -> None:
        """`g` did not build: forget it, and make no more generic kernels of `shape`'s (its
        kernels are then built for their own sizes)."""
        key = (shape.text, opt)
        with self.lock:
            made = self.generics.get(key, [])
            if g in made:
                made.remove(g)
            self.refused.add(key)

    def adopt_later(self, code: str, opt: int, groups: Groups) -> None:
        """`adopt` at the next look-up, not now: a plan read from disk runs its kernels
        without parsing their code (`plan_store.load`), and most runs never compile a
        plan of new sizes that could use them (at most `SEEN_MAX` wait)."""
        with self.lock:
            self.pending.append((code, opt, groups))
            del self.pending[:-SEEN_MAX]

    def _settle(self) -> None:
        """Adopt what `adopt_later` left (before a look-up)."""
        if not self.pending:  # (read without the lock: a plan loaded meanwhile waits)
            return
        with self.lock:
            pending, self.pending = self.pending, []
        for code, opt, groups in pending:
            self.adopt(code, opt, groups)

    def adopt(self, code: str, opt: int, groups: Groups) -> None:
        """Make the generic kernel of `code` reading the literals of `groups` known (a
        plan read from disk ran its kernel through it), so `generic_for` finds it."""
        shape = shape_of(code)
        key = (shape.text, opt)
        g = Generic.of(code, shape, groups)
        with self.lock:
            known = self.generics.setdefault(key, [])
            if not any(h.groups == g.groups and h.kept == g.kept for h in known):
                known.append(g)

    def unseen(self, shape: Shape, opt: int) -> bool:
        """Whether no kernel of `shape` was seen or made generic before: at its first
        sighting in a plan whose sizes vary, `predict` may make its generic kernel."""
        self._settle()
        key = (shape.text, opt)
        with self.lock:
            return key not in self.seen and not self.generics.get(key)

    def predict(self, code: str, opt: int, groups: Groups) -> None:
        """Make the generic kernel of `code` reading the literals of `groups`, those seen to
        move with the plan's sizes (`moved`), before any other kernel of its shape: this
        kernel runs through it, and so do those of the sizes to come whose literals differ
        in those groups only."""
        self.adopt(code, opt, groups)
        self.note(shape_of(code), opt)  # (a size it does not serve widens it: `generic_for`)

    def would_serve(self, shape: Shape, opt: int) -> bool:
        """Whether `generic_for` would give a kernel of `shape` a generic kernel (without
        making one): `new_object` then leaves it uncompiled."""
        self._settle()
        key = (shape.text, opt)
        with self.lock:
            made = self.generics.get(key, ())
            if any(g.serves(shape) for g in made):
                return True
            known = self.seen.get(key)
            if len(made) >= GENERICS_MAX or not known:
                return False
            return any(lits != shape.literals for lits in known)

    def clear(self) -> None:
        with self.lock:
            self.pending.clear()
            self.seen.clear()
            self.generics.clear()
            self.refused.clear()


registry = _Registry()
_varying = threading.local()  # .on: this thread compiles a plan whose sizes vary


class varying:
    """`with varying(codes, sizes):` the kernels compiled on this thread inside belong to a
    plan whose sizes vary: each may run as a generic kernel (`compiler.compile_kernels`).
    `codes`: (code, level) of the kernels of the plans of the same graph compiled before,
    noted as seen first (a `Shape` in place of the code: CUDA C's, read by
    pipeline/cuda_templates.py); `sizes`: the plan's sizes that differ from theirs, `kept`
    those that do not (a kernel of a shape not seen before is lowered at other sizes too,
    `probes`). `with varying(None):` changes nothing."""

    def __init__(self, codes, sizes=(), kept=()):
        self.codes = codes
        self.sizes = (frozenset(sizes), frozenset(kept))

    def __enter__(self):
        self.was = getattr(_varying, "on", False), getattr(_varying, "sizes", _NO_SIZES)
        if self.codes is not None:
            for code, opt in self.codes:
                registry.note(code if isinstance(code, Shape) else shape_of(code), opt)
            _varying.on, _varying.sizes = True, self.sizes
        return self

    def __exit__(self, *exc):
        _varying.on, _varying.sizes = self.was


class fixed:
    """`with fixed():` what this thread compiles inside is compiled as its own code, never
    run through a generic kernel, whatever plan it is part of (a plan's native program:
    its callers pass no literals)."""

    def __enter__(self):
        self.was = getattr(_varying, "on", False), getattr(_varying, "sizes", _NO_SIZES)
        _varying.on, _varying.sizes = False, _NO_SIZES
        return self

    def __exit__(self, *exc):
        _varying.on, _varying.sizes = self.was


def active() -> bool:
    """Whether this thread is compiling a plan whose sizes vary."""
    return getattr(_varying, "on", False)


_NO_SIZES: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())


def varying_sizes() -> tuple[frozenset[int], frozenset[int]]:
    """The sizes of the plan this thread compiles that differ from its graph's first
    plan's, and those that do not (both empty outside `varying`)."""
    return getattr(_varying, "sizes", _NO_SIZES) if active() else _NO_SIZES
