"""The scheduler: cuts a graph into kernels, and says why at every cut.

Rules, applied to each node with its users already decided:

1. Elementwise ops and views inline into their consumer: they are recomputed
   inside every kernel that reads them (views become index maps, never copies).
2. A reduction absorbs all the elementwise work that feeds it, and the
   elementwise work that follows it at its output shape (an *epilogue*), when
   exactly one kernel reads it and the path to that kernel's output is
   elementwise only (dropping or adding size-1 axes is allowed).
3. Otherwise a reduction is materialized, with the reason in words: it is
   broadcast back, read through another view, read by several kernels, or feeds
   another reduction.
4. The save-or-recompute rule, one formula: an elementwise value is recomputed
   wherever it is read unless `(evaluations per element - 1) * cost >
   STORE_COST`. Evaluations count every read by every kernel, and a value read
   inside a reduction is evaluated once per step of it (a convolution's weight
   gradient reads each element of the output gradient kernel-size times).
   The cost counts ops down to materialized values (a transcendental costs
   `TRANSCENDENTAL_COST` units, other ops 1); `STORE_COST` is what writing
   and re-reading one element costs in the same units.
5. `contiguous()` and the requested outputs are always materialized.
6. Row-local fusion: a reduction over a tensor's trailing axes (a row) that would be
   materialized only to be broadcast back over that row (a softmax's max and sum, a layer
   norm's mean and variance, their backward's row sums) is computed inside the kernel that
   reads it, when every kernel that reads it loops over those rows and a row fits in cache
   (`ROW_CACHE_BYTES`). Codegen computes it once per row, before the loop over the row's
   elements (`pipeline/lower.py`, hoisting), so the row is read from memory once and
   re-read from cache: a softmax or a layer norm is one kernel. A value at the row's shape
   that is broadcast back over the row is evaluated once per row, not per element.
7. Sibling reductions: kernels whose reductions have the same op, dtype, source shape,
   axes and output shape, that stream a common input (read once per element of the sum:
   not a contraction's operand, which a register tile reuses) and do not depend on each
   other, become one kernel with several outputs (`_sibling_reductions`):
   a layer norm's or batch norm's weight and bias gradients, `sum(g * xhat, 0)` and
   `sum(g, 0)`, read `g` once. Codegen sums them in one loop nest with one accumulator
   each on the CPU, and in consecutive loops of one kernel on the GPU.
8. Stored inside the reduction that reads it: an elementwise value V stored for its other
   readers (a layer's output gradient `g`, which the weight and input gradients read many
   times) and summed by a plain reduction R at V's own coordinates (the bias gradient
   `sum(g, 0)`: R's source is V or elementwise of V and other values of its shape, no view
   of a loaded value, a sum whose source has V's shape) is computed and stored by R's
   kernel, inside R's loop nest at the source's coordinates (`ScheduleItem.at_source`), not
   by a kernel of its own: one pass computes each element of V, stores it and adds it, and
   R's kernel no longer reads V back. R's loops visit each source element once, from one
   thread, so each element of V is written once. Only where R's kernel is a plain one (no
   other reduction, no rule 7 siblings or extra outputs, not a contraction, whose register
   tiles reuse each operand: their sources broadcast what they load), V's own kernel is
   elementwise with no extra outputs, V is not 16-bit (a register would hold it unrounded),
   R has enough outputs to share its loops among the CPU's threads or V is small
   (`AT_SOURCE_MIN_OUTPUTS`, `AT_SOURCE_SHARED_ELEMENTS`; the GPU splits a sum of few
   outputs over blocks: `splits_reductions`), V is not a concatenation of more than
   `AT_SOURCE_MAX_PIECES` pieces (in its own kernel `pipeline/pieces.py` loads one piece an
   element; in a sum's cascaded loops every element loads every piece under a guard: an
   LSTM language model's stacked gate gradients, 64 pieces, took 5.9 ms so, and the step
   is 3% faster with them apart; `_padded_pieces`), and moving it makes no cycle among the
   kernels (`_stored_in_reductions`). The other readers of V run after R's kernel. The
   CPU and the GPU store V where the sum's thread meets each element (on the GPU, the
   thread whose share of a block's reduction holds it); a backend that cannot schedules
   without the rule (`Backend.stores_at_source`, passed as
   `schedule(..., stores_at_source=False)`).
9. Stored by its first reader: an elementwise value stored by rule 4 (a sigmoid's
   exp(-|x|), read by the sigmoid and by its gradient) is computed and stored by the
   first kernel that reads it, when that kernel is elementwise at the value's shape (or a
   `materialize` copy: an LSTM's cell state) and reads it at its own coordinates
   (`_stored_by_readers`): the value's own kernel goes, its other readers load it after
   that kernel. Not a 16-bit value (the reader would use it unrounded, its other readers
   rounded), not a value cut on request, not into or out of a kernel with a reduction, a
   gather, a scatter or extra outputs; a kernel stores every value that qualifies, a
   value moving with those its own kernel stored; a schedule whose moves would make a
   cycle among its kernels is made with one value a kernel, then without them.

Rules 2, 4 and 6 to 9 can be turned off by name (`RULES`, `schedule(..., disabled=...)`:
`fusegrad.debug.disable_rule`, FUSEGRAD_DISABLE_RULES), and single values can be cut or
fused on request (`ir/steering.py`): a cut value is stored by a kernel of its own, which
no later rule merges with another; a fuse request on a value rule 4 would store has it
recomputed by its readers, and on any other stored value is refused. Each request is
said in the reason of the kernels it touched ("cut requested at train.py:9", "merge
requested at train.py:9 could not be honoured: reduction broadcast back over axis 1").
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir import steering
from ..ir.macro import expand_all
from ..ir.node import Node, toposort
from ..ir.ops import ELEMENTWISE, LEAF, MOVEMENT, REDUCE, TRANSCENDENTAL, Ops
from ..ir.sites import Site, site_of
from ..ir.sites import note as note_site
from ..runtime.backend_registry import HOST, get_backend
from .layout import layout_for

STORE_COST = 32
MAX_KERNEL_OPS = 500  # elementwise ops inlined into one kernel before a value is stored
# rule 8 leaves a value of AT_SOURCE_SHARED_ELEMENTS or more elements in a kernel of its own
# where the sum has fewer than AT_SOURCE_MIN_OUTPUTS outputs, on a backend whose kernels are
# parallel over their outputs only (the CPU's: not `splits_reductions`, as the GPU's): the
# sum's loops run on about one thread (a tile of rows holds them all), and the value would
# be computed there too (LeNet's first convolution's bias gradient, 6 outputs, over its
# max-pool backward of 64x6x28x28: a kernel of its own shares that among the threads).
AT_SOURCE_MIN_OUTPUTS = 16
AT_SOURCE_SHARED_ELEMENTS = 1 << 14
AT_SOURCE_MAX_PIECES = 4  # rule 8 moves no concatenation of more pieces (padded sources)
COST_CAP = 10 * STORE_COST
TRANSCENDENTAL_COST = 8
# A row is fused (rule 6) while four arrays of its length fit in this: the kernel walks the
# row several times (max, sum, normalize), and each walk after the first must hit cache.
ROW_CACHE_BYTES = 256 * 1024
ROW_READERS_MAX = 2  # kernels that may each recompute one row statistic
MAX_SIBLINGS = 4  # reductions summed in one loop nest (rule 7): their accumulators share registers

# The rules a schedule can be made without (`schedule(..., disabled=...)`), by name: what
# each does, in one line. Rules 1, 3 and 5 are what a kernel is, not choices.
RULES: dict[str, str] = {
    "reduction_epilogues": "rule 2: a reduction is computed inside the kernel that reads "
    "it at its own coordinates (off: every reduction is stored by a kernel of its own)",
    "store_for_reuse": "rule 4: an elementwise value evaluated many times per element is "
    "stored once (off: always recomputed by its readers)",
    "row_fusion": "rule 6: a row statistic (softmax's max and sum, layer norm's mean) is "
    "computed inside the kernel that reads it",
    "sibling_reductions": "rule 7: reductions over the same input and loops become one "
    "kernel with several outputs",
    "stored_in_reductions": "rule 8: a value stored for its readers is computed and "
    "stored inside the loops of the sum that reads it",
    "stored_by_readers": "rule 9: a value stored for its readers is computed and stored "
    "by its first reader's kernel",
    "extra_outputs": "requested outputs computed from another kernel's output at its "
    "coordinates are stored by that kernel (an optimizer's parameter and momentum)",
}


@dataclass
class ScheduleItem:
    """One kernel: the node it stores, the reduction it absorbed, and why it is a kernel."""

    root: Node
    reduce: Node | None
    reason: str
    inputs: list[Node] = field(default_factory=list)  # nodes read from memory, in first-use order
    nodes: list[Node] = field(default_factory=list)  # every node computed inside, sources first
    # more outputs stored by the same loop nest at the root's coordinates (an optimizer's new
    # parameter next to its new momentum)
    extra: list[Node] = field(default_factory=list)
    # outputs stored inside the reduction's loops at the coordinates of the reduction's
    # source, which has their shape (rule 8: a layer's output gradient stored by the loop
    # that sums it into the bias gradient); `reduce` is never None where this is not empty
    at_source: list[Node] = field(default_factory=list)

    @property
    def outputs(self) -> list[Node]:
        """Every buffer the kernel writes: the root, the extra outputs, then `at_source`."""
        return [self.root, *self.extra, *self.at_source]

    @property
    def siblings(self) -> list[Node]:
        """The reductions besides `reduce` that this kernel computes over the same loops
        (rule 7: a layer norm's bias gradient next to its weight gradient), in the order
        of `nodes`. A row kernel (`reduce` None) has none: its reductions are statistics."""
        if self.reduce is None:
            return []
        return [n for n in self.nodes if n.op in REDUCE and n is not self.reduce]

    @property
    def ops(self) -> list[str]:
        return [n.op.name for n in self.nodes if n.op not in LEAF]

    @property
    def sites(self) -> list[Site]:
        """Where the ops inside were written (`ir/sites.py`), one per line, label and role."""
        return [s for s, _ in self.op_groups() if s is not None]

    def node_sites(self) -> dict[int, Site]:
        """id -> site of each node inside: its own, or, for a node no user line made
        (inside a composite), the site of its first user in the kernel."""
        out: dict[int, Site] = {}
        for n in reversed(self.nodes):
            s = site_of(n) or out.get(id(n))
            if s is not None:
                out[id(n)] = s
                for src in n.srcs:
                    out.setdefault(id(src), s)
        return out

    def op_groups(self, where: dict | None = None) -> list[tuple[Site | None, list[str]]]:
        """The user-level ops inside, each with its primitives: `(linear at train.py:9,
        [RESHAPE, EXPAND, MUL, SUM])` (see `node_sites`, or `where`, what it returned);
        constants are skipped (one constant is shared by every line that writes it)."""
        if where is None:
            where = self.node_sites()
        groups: dict[tuple | None, tuple[Site | None, list[str]]] = {}
        for n in self.nodes:
            if n.op in LEAF:
                continue
            s = where.get(id(n))
            key = (s.code, s.line, s.label, s.role) if s is not None else None
            groups.setdefault(key, (s, []))[1].append(n.op.name)
        return list(groups.values())


def without_values(item: ScheduleItem, sizes: dict[int, int] | None = None) -> ScheduleItem:
    """A copy of `item` over nodes of its own that hold no value: each input a `BUFFER`
    node without a buffer (its shape, dtype and device), each node computed inside a copy
    over those, noted at its original's user line. What a plan keeps to lower a kernel
    again later (`Plan.tune_items`: its tile tuned at the plan's tenth run) must not keep
    the graph it was scheduled from alive: that graph holds the step's inputs, the
    parameters' old values and every value computed before it, and a plan run fewer
    times than that (a batch size seen once) would hold them for as long as it is cached.

    With `sizes` (old size -> new), every dimension of those sizes in the copy's shapes,
    and in its views' shapes and bounds, has the new one, and a float constant of one of
    those sizes (or 1 over it) the new one's: the same kernel at other sizes,
    lowered only to see which of its literals move with them (`templates.probes` and
    `moved`, `CpuBackend._predicted`); nothing checks that the copy is a graph that could
    run."""
    new: dict[int, Node] = {}
    for n in item.inputs:
        new[id(n)] = _node_copy(n, Ops.BUFFER, (), None, sizes)

    def copy(start: Node) -> Node:
        stack = [start]
        while stack:
            n = stack[-1]
            if id(n) in new:
                stack.pop()
                continue
            waiting = [x for x in n.srcs if id(x) not in new]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            srcs = tuple(new[id(x)] for x in n.srcs)
            c = new[id(n)] = _node_copy(n, n.op, srcs, _resized_arg(n, sizes), sizes)
            site = site_of(n)
            if site is not None:
                note_site(c, site)
        return new[id(start)]

    return ScheduleItem(
        copy(item.root),
        copy(item.reduce) if item.reduce is not None else None,
        item.reason,
        [new[id(n)] for n in item.inputs],
        [copy(n) for n in item.nodes],
        [copy(n) for n in item.extra],
        [copy(n) for n in item.at_source],
    )


def _node_copy(n: Node, op: Ops, srcs: tuple, arg, sizes: dict[int, int] | None) -> Node:
    c = object.__new__(Node)  # (not `make`'s: a node of its own, equal to no other)
    shape = n.shape if not sizes else tuple(sizes.get(d, d) for d in n.shape)
    c.op, c.srcs, c.arg, c.shape, c.dtype, c.device = op, srcs, arg, shape, n.dtype, n.device
    return c


def _resized_arg(n: Node, sizes: dict[int, int] | None):
    """`n`'s argument in `without_values`'s copy at other `sizes`: a view's new shape or
    its bounds with those sizes replaced; any other argument as it is."""
    if not sizes:
        return n.arg
    if n.op in (Ops.RESHAPE, Ops.EXPAND):
        return tuple(sizes.get(d, d) for d in n.arg)
    if n.op is Ops.SHRINK:
        return tuple((a, sizes.get(b, b)) for a, b in n.arg)
    if n.op is Ops.CONST and type(n.arg) is float and n.arg:  # a mean's count, or 1 over it
        for old, new in sizes.items():
            if n.arg == old:
                return float(new)
            if n.arg == 1 / old:
                return 1 / new
    return n.arg


def is_squeeze(n: Node) -> bool:
    """A reshape that only adds or removes size-1 axes keeps every coordinate."""
    if n.op is not Ops.RESHAPE:
        return False
    return [s for s in n.shape if s != 1] == [s for s in n.srcs[0].shape if s != 1]


def _op_cost(n: Node) -> int:
    """Work per element: views are index arithmetic, free; ALU ops cost."""
    if n.op is Ops.RAND:
        return TRANSCENDENTAL_COST
    if n.op not in ELEMENTWISE:
        return 0
    return TRANSCENDENTAL_COST if n.op in TRANSCENDENTAL else 1


def schedule(
    roots: list[Node],
    has_value: Callable[[Node], bool],
    expanded: bool = False,
    stores_at_source: bool = True,
    splits_reductions: bool = False,
    disabled: frozenset[str] | set[str] = frozenset(),
) -> list[ScheduleItem]:
    """Kernels that compute `roots`, in an order where every input exists before it is read.

    `has_value(n)` says whether n's value is already in memory (a buffer, or a value the
    runtime computed earlier): such nodes are the kernels' inputs, never recomputed.
    Macros are scheduled as their expansions (ir/macro.py), under the layout options of
    the roots' device (`pipeline/layout.py`), as `compile_plan` expands them: a caller that
    finds its roots among the items' outputs passes roots it has expanded (`expand_all`),
    and says so (`expanded`: the walk looking for macros is not made twice).
    `stores_at_source`: the backend can store a value inside a reduction's loops (rule 8),
    a backend capability (`Backend.stores_at_source`); `splits_reductions`: the backend
    shares a sum of few outputs among its threads (`Backend.splits_reductions`: the GPU).
    `disabled`: names of `RULES` to schedule without. The requests of `ir/steering.py` on
    the graph's nodes (cut here, fuse this) are honoured where they can be, and said in
    the kernels' reasons either way.
    """
    unknown = set(disabled) - set(RULES)
    assert not unknown, f"unknown scheduling rules {sorted(unknown)}"
    if not expanded:
        device = next((r.device for r in roots if r.device is not None), HOST)
        roots = expand_all(roots, has_value, layout=layout_for(get_backend(device)))
    s = _Schedule.of(roots, has_value, frozenset(disabled))
    for n in reversed(s.graph):  # each node after its users
        _decide(s, n)

    graph, reason, claimed, held, pinned = s.graph, s.reason, s.claimed, s.held, s.pinned
    extra: dict[int, list[Node]] = {}
    if "extra_outputs" not in disabled:
        extra = _siblings(graph, reason, claimed, held, pinned)
        _absorb(graph, s.users, reason, claimed, extra, held)
    merged: set[int] = set()
    if "sibling_reductions" not in disabled:
        merged = _sibling_reductions(graph, reason, claimed, extra, held, pinned)
    at_source = {}
    if stores_at_source and "stored_in_reductions" not in disabled:
        at_source = _stored_in_reductions(
            graph, reason, claimed, extra, merged, held, splits_reductions, pinned
        )
    moved = {id(v) for vs in at_source.values() for v in vs}
    for k, vs in at_source.items():
        for v in vs:  # (v keeps its reason: its other readers load it)
            reason[k] += f"; stores {v.shape} from inside its loops, {reason[id(v)]}"
    if "stored_by_readers" not in disabled:
        tried: list[dict] = []
        for most in (None, 1):  # as many values a kernel as it reads, else one (a cycle)
            stored = _stored_by_readers(
                graph, reason, claimed, extra, merged, moved, held, s.reused, pinned, most
            )
            if not stored or stored in tried:
                break
            tried.append(stored)
            items = _items(graph, reason, claimed, extra, at_source, merged, moved, held, stored)
            order = _in_dependency_order(items, strict=False)
            if order is not None:
                return _with_notes(order, s.notes)
    items = _items(graph, reason, claimed, extra, at_source, merged, moved, held, {})
    return _with_notes(_in_dependency_order(items) if merged or moved else items, s.notes)


@dataclass
class _Schedule:
    """What the rules share while `schedule` walks the graph, each node after its users.

    The graph and what is known before the walk (`users`, `held`, the size cuts and
    recompute costs), then what the walk decides, by node id: `reason` (why a node is a
    kernel's output: the node rules' answers), `reach` (the kernel outputs that inline a
    node), `epilogue_ok`, `claimed` (kernel output -> the reduction fused into it), `evals`
    and the sets and notes that later rules and the graph-wide passes read.
    """

    graph: list[Node]
    held: set[int]  # ids of the values already in memory
    users: dict[int, list[Node]]  # id -> the computed nodes that read it
    root_ids: set[int]
    disabled: frozenset[str]
    too_big: dict[int, str]  # size cuts (`_size_cuts`): id -> reason
    cost: dict[int, int]  # id -> units of work to recompute it per element
    indices: set[int]  # ids of the computed values a gather's index is a view of
    by_id: dict[int, Node]
    steered: bool  # some node carries a request of `ir/steering.py`
    reason: dict[int, str] = field(default_factory=dict)  # id -> why it is a kernel's output
    reach: dict[int, set[int]] = field(default_factory=dict)  # id -> kernel outputs inlining it
    # id -> the path up to the kernel output keeps coordinates
    epilogue_ok: dict[int, bool] = field(default_factory=dict)
    claimed: dict[int, Node] = field(default_factory=dict)  # kernel output id -> its reduction
    evals: dict[int, int] = field(default_factory=dict)  # id -> times kernels evaluate it
    row_fused: set[int] = field(default_factory=set)  # outputs computing row statistics (rule 6)
    reused: set[int] = field(default_factory=set)  # elementwise values stored for reuse (rule 4)
    pinned: set[int] = field(default_factory=set)  # cut on request: no rule merges their kernels
    pinned_here: set[int] = field(default_factory=set)  # stored only because of the request
    notes: dict[int, list[str]] = field(default_factory=dict)  # output id -> what requests did

    @classmethod
    def of(cls, roots: list[Node], has_value, disabled: frozenset[str]) -> _Schedule:
        """The state before the walk: the graph under `roots` down to the values in memory."""
        graph = toposort(roots, stop=has_value)
        held = {id(n) for n in graph if has_value(n)}
        users: dict[int, list[Node]] = {}
        for n in graph:
            if id(n) not in held:
                for src in n.srcs:
                    users.setdefault(id(src), []).append(n)
        too_big = _size_cuts(graph, held)
        return cls(
            graph=graph,
            held=held,
            users=users,
            root_ids={id(r) for r in roots},
            disabled=disabled,
            too_big=too_big,
            cost=_recompute_costs(graph, held, too_big),
            indices=_computed_indices(graph, held),
            by_id={id(n): n for n in graph},
            steered=steering.any_requests(),
        )

    def reads(self, n: Node) -> set[int]:
        """The kernel outputs that read n: its users that are outputs, and the outputs
        that inline its other users."""
        out: set[int] = set()
        for u in self.users.get(id(n), ()):
            out |= {id(u)} if id(u) in self.reason else self.reach[id(u)]
        return out

    def evaluations(self, n: Node) -> int:
        """Times kernels compute n. Users that read n at their own coordinates inside the
        same kernels share one computation (codegen reuses it), so they count once."""
        total, same_coords = 0, {}
        for u in {id(u): u for u in self.users.get(id(n), ())}.values():
            per = u.numel if id(u) in self.reason else self.evals[id(u)]
            if u.op in REDUCE:
                total += per * (u.srcs[0].numel // max(u.numel, 1))
            elif id(u) not in self.reason and _row_broadcast(u) and self.hoisted(u):
                total += per * n.numel // max(u.numel, 1)  # once per row
            elif u.op is Ops.SCATTER_ADD:  # runs over its sources' elements, not its own
                total += u.srcs[0].numel
            elif u.op in ELEMENTWISE and id(u) not in self.reason:
                group = frozenset(self.reach[id(u)])
                same_coords[group] = max(same_coords.get(group, 0), per)
            else:
                total += per
        return total + sum(same_coords.values())

    def hoisted(self, u: Node) -> bool:
        """Whether every kernel that inlines broadcast u loops over u's own shape, row
        innermost, so that codegen computes what u broadcasts once per row. A kernel that
        reduces over other axes (a convolution's weight gradient reading a gradient
        broadcast over the kernel's positions) evaluates it at every element."""
        kernels = self.reach.get(id(u), ())
        return bool(kernels) and all(
            self.by_id[k].op in _SAME_COORDS and self.by_id[k].shape == u.shape for k in kernels
        )


def _decide(s: _Schedule, n: Node) -> None:
    """Whether n is a kernel's output, and why: the first of `_NODE_RULES` that gives a
    reason; then what a steering request on n did, and what n's sources need to know."""
    if id(n) in s.held:
        return
    if n.op in LEAF and id(n) not in s.root_ids:
        s.reach[id(n)] = s.reads(n)
        return
    reads = s.reads(n)
    s.evals[id(n)] = s.evaluations(n)
    asked = steering.request_of(n) if s.steered else None
    for rule in _NODE_RULES:
        why = rule(s, n, reads, asked)
        if why:
            s.reason[id(n)] = why
            break
    _note_request(s, n, reads, asked)
    s.reach[id(n)] = reads
    s.epilogue_ok[id(n)] = _keeps_coordinates(n, s.users.get(id(n), []), s.epilogue_ok, s.reason)


# A node rule: (state, node, the kernel outputs that read it, its steering request) -> why
# the node is a kernel's output, or None to leave it to the next rule (inlined if none).
_NodeRule = Callable[[_Schedule, Node, set[int], "tuple | None"], "str | None"]


def _output_rule(s: _Schedule, n: Node, reads, asked) -> str | None:
    """Rule 5: the requested outputs are stored."""
    return "output requested" if id(n) in s.root_ids else None


def _data_dependent_rule(s: _Schedule, n: Node, reads, asked) -> str | None:
    """Gathers, scatters, a gather's table and its computed index are stored."""
    if n.op is Ops.GATHER:
        return "gather: rows picked by an index"
    if n.op is Ops.SCATTER_ADD:
        return "scatter-add: rows summed in the order of an index"
    if any(u.op is Ops.GATHER and u.srcs[0] is n for u in s.users.get(id(n), ())):
        return "read at data-dependent rows (a gather's table)"
    if id(n) in s.indices:
        return "a gather's computed index: its rows are read from memory"
    return None


def _contiguous_rule(s: _Schedule, n: Node, reads, asked) -> str | None:
    """Rule 5: `contiguous()` is stored."""
    if n.op is not Ops.CONTIGUOUS:
        return None
    return n.arg or "user called contiguous()"


def _requested_cut_rule(s: _Schedule, n: Node, reads, asked) -> str | None:
    """A value cut on request (`ir/steering.py`) is stored; a view's source is instead."""
    if asked is None or asked[0] != steering.CUT or n.op in MOVEMENT:
        return None
    s.pinned_here.add(id(n))
    return f"cut requested at {asked[1]}"


def _size_rule(s: _Schedule, n: Node, reads, asked) -> str | None:
    """A value whose kernel would grow past MAX_KERNEL_OPS is stored (`_size_cuts`)."""
    return s.too_big.get(id(n))


def _reduction_rule(s: _Schedule, n: Node, reads: set[int], asked) -> str | None:
    """Rules 2, 3 and 6: a reduction is fused into the kernel that reads it (`claimed`),
    computed inside its readers as a row statistic (`row_fused`), or stored."""
    if n.op not in REDUCE:
        return None
    why = _reduce_cut(n, s.users, reads, s.epilogue_ok, s.claimed, s.reason, s.row_fused)
    if not why and "reduction_epilogues" in s.disabled:
        why = "reduction stored by a kernel of its own (rule reduction_epilogues off)"
    row_ok = "row_fusion" not in s.disabled
    if why and row_ok and _row_local(n, s.users, reads, s.reason, s.claimed, s.by_id):
        s.row_fused.update(reads)
        s.evals[id(n)] = n.numel * len(reads)
        return None
    if why:
        return why
    (root_id,) = reads
    s.claimed[root_id] = n
    return None


def _reuse_rule(s: _Schedule, n: Node, reads: set[int], asked) -> str | None:
    """Rule 4: an elementwise value is stored where recomputing it costs more than
    storing it (a view is never stored for reuse: its source is)."""
    if n.op not in ELEMENTWISE:
        return None
    reuse = s.evals[id(n)] / max(n.numel, 1)
    keep = "store_for_reuse" not in s.disabled and not (asked and asked[0] == steering.FUSE)
    if not (keep and (reuse - 1) * s.cost[id(n)] > STORE_COST):
        return None
    s.reused.add(id(n))
    how = _broadcast_note(n, s.users) or (
        f"read by {len(reads)} kernels" if len(reads) > 1 else "read inside a reduction"
    )
    return (
        f"{how}: evaluated {reuse:.3g} times per element, recomputing costs "
        f"{s.cost[id(n)]} units each time, storing {STORE_COST}"
    )


# The per-node rules, in order: the first that gives a reason decides.
_NODE_RULES: tuple[_NodeRule, ...] = (
    _output_rule,
    _data_dependent_rule,
    _contiguous_rule,
    _requested_cut_rule,
    _size_rule,
    _reduction_rule,
    _reuse_rule,
)


def _note_request(s: _Schedule, n: Node, reads: set[int], asked) -> None:
    """What a steering request on n did: a fuse request is noted (`_note_fuse`); a stored
    value cut on request stays a kernel of its own (`pinned`), said in its reason."""
    if asked is None:
        return
    if asked[0] == steering.FUSE:
        _note_fuse(n, asked[1], s.reason, reads, s.claimed, s.notes)
    elif id(n) in s.reason and n.op not in MOVEMENT:
        s.pinned.add(id(n))  # (a cut value stored anyway, an output: still its own kernel)
        if id(n) not in s.pinned_here:
            s.notes.setdefault(id(n), []).append(f"cut requested at {asked[1]}")


def _note_fuse(n: Node, where, reason, reads: set[int], claimed, notes) -> None:
    """Say what became of a request to fuse n (`ir/steering.py`): refused, with the reason
    n is stored, where it is a kernel's output; else done, in the kernels that compute it."""
    if id(n) in reason:
        why = (
            "it is an output you asked for"
            if reason[id(n)] == "output requested"
            else reason[id(n)]
        )
        notes.setdefault(id(n), []).append(
            f"merge requested at {where} could not be honoured: {why}"
        )
        return
    what = "reduction" if n.op in REDUCE else "value"
    for k in reads or {k for k, red in claimed.items() if red is n}:
        notes.setdefault(k, []).append(f"merge requested at {where}: {what} computed in here")


def _with_notes(items: list[ScheduleItem], notes: dict[int, list[str]]) -> list[ScheduleItem]:
    """The items, each reason followed by what steering requests did to its outputs."""
    if notes:
        for item in items:
            for out in item.outputs:
                for note in notes.get(id(out), ()):
                    item.reason += f"; {note}"
    return items


def _items(graph, reason, claimed, extra, at_source, merged, moved, held, stored):
    """The kernels, in the graph's order: each kernel output's item with its extra outputs
    (rules 7 and 9: `stored`, value id -> the kernel root id that stores it) and the values
    it stores inside its loops (rule 8)."""
    by_kernel: dict[int, list[Node]] = {}
    for n in graph:
        if id(n) in stored:
            by_kernel.setdefault(stored[id(n)], []).append(n)
    items = []
    for n in graph:
        k = id(n)
        if k in reason and k not in merged and k not in moved and k not in stored:
            fused = claimed.get(k, n if n.op in REDUCE else None)
            why = reason[k]
            for v in by_kernel.get(k, ()):
                why += f"; also stores {v.shape} for its other readers, {reason[id(v)]}"
            outs = extra.get(k, []) + by_kernel.get(k, []), at_source.get(k, [])
            items.append(_item(n, fused, why, reason, *outs, held))
    return items


def _stored_by_readers(
    graph, reason, claimed, extra, merged, moved, held, reused, pinned=frozenset(), most=None
):
    """Rule 9: an elementwise value V stored for its readers (rule 4: a sigmoid's exp,
    which the sigmoid and its gradient both read) is computed and stored by the first
    kernel that reads it, when that kernel is elementwise at V's shape and reads V at its
    own coordinates: one launch and one read of V go away, and V's other readers load it
    after that kernel. Neither kernel may hold a reduction, a gather or a scatter, or extra
    outputs (rules 7 and 8), a value cut on request is not moved, and each kernel stores at
    most `most` such values more. None: every one it qualifies for, and a value moved
    takes the values its kernel stores along (a sigmoid stored with its exp goes, exp and
    all, into the LSTM cell state's kernel, a copy that `materialize` made, which reads
    it); 1: one, and a kernel that stores one is not moved itself. The caller schedules
    with None, then 1, then without the rule, while the moves make a cycle among the
    kernels.
    Returns V's id -> the reader kernel's root id."""
    if not reused:  # (the usual case: no kernel of its own to look at)
        return {}
    position = {id(n): k for k, n in enumerate(graph)}
    busy = set(merged) | set(moved) | set(extra) | {id(v) for vs in extra.values() for v in vs}
    kernels: dict[int, tuple[list[Node], list[Node]]] = {}
    readers: dict[int, list[int]] = {}  # value id -> the kernels that load it, in order
    for n in graph:
        k = id(n)
        if k in reason and k not in busy:
            loads, body = _kernel_of(n, reason, held)
            kernels[k] = loads, body
            for x in loads:
                readers.setdefault(id(x), []).append(k)
    for k in [k for k in kernels if k in busy]:
        del kernels[k]

    def plain(k: int, reader: bool = False) -> bool:
        """No reduction, gather, scatter or copy inside; a reader's root may be a copy (a
        value `materialize`d: `contiguous()` at its own coordinates)."""
        if k not in kernels or k in claimed:
            return False
        body = kernels[k][1]
        if reader and body and body[-1].op is Ops.CONTIGUOUS and id(body[-1]) == k:
            body = body[:-1]
        return not any(x.op in REDUCE or x.op in _OWN_KERNEL for x in body)

    stored: dict[int, int] = {}
    holds: dict[int, list[int]] = {}  # kernel -> the values more it stores
    for m in graph:
        km = id(m)
        if km not in reused or not plain(km) or km in stored or km in pinned:
            continue
        if most is not None and km in holds:  # (one a kernel: not moved itself)
            continue
        if m.dtype.is_half:  # its reader would use it unrounded, its other readers rounded
            continue
        first = min(readers.get(km, ()), key=position.__getitem__, default=None)
        if first is None or first in stored or not plain(first, reader=True):
            continue
        if most is not None and len(holds.get(first, ())) >= most:
            continue
        n = graph[position[first]]
        if n.shape != m.shape or n.op not in _READS_IN_PLACE:
            continue
        if _reads_at_own_coordinates(kernels[first][1], m, n.shape):
            stored[km] = first  # (with the values m's kernel stores: read at m's coordinates)
            carried = holds.pop(km, [])
            for v in carried:
                stored[v] = first
            holds.setdefault(first, []).extend([km, *carried])
    return stored


def _computed_indices(graph: list[Node], held) -> set[int]:
    """The ids of the computed values a gather's index is a view of (a `cat` of sampled
    tokens, `argmax`'s result reshaped): each is stored, so that a kernel reading rows by
    it loads the row numbers, as the CPU's lowering and renderer need (a row is a scalar
    per element, never a vector lane's)."""
    out: set[int] = set()
    for g in graph:
        if g.op is not Ops.GATHER or id(g) in held:
            continue
        n = g.srcs[1]
        while n.op in MOVEMENT and id(n) not in held:
            n = n.srcs[0]
        if id(n) not in held and n.op not in LEAF:
            out.add(id(n))
    return out


_SAME_COORDS = ELEMENTWISE | {Ops.DETACH}
# what reads its sources at its own coordinates in a kernel's body: the above, and a copy
# that is the kernel's root (a value `materialize`d: an LSTM's cell state)
_READS_IN_PLACE = _SAME_COORDS | {Ops.CONTIGUOUS}
_DATA_DEPENDENT = (Ops.GATHER, Ops.SCATTER_ADD)  # kernels of their own shape (no extras)
_OWN_KERNEL = _DATA_DEPENDENT + (Ops.CONTIGUOUS,)  # never computed inside another kernel


def _kernel_of(root: Node, reason: dict[int, str], held) -> tuple[list[Node], list[Node]]:
    """(values it loads, nodes it computes) of the kernel `root` would be on its own."""

    def boundary(x: Node) -> bool:
        return x is not root and (id(x) in held or id(x) in reason)

    nodes = toposort([root], stop=boundary)
    return [x for x in nodes if boundary(x)], [x for x in nodes if not boundary(x)]


def _padded_pieces(loads: list[Node], body: list[Node]) -> int:
    """How many of a kernel's loaded values it reads through a PAD (by views only): the
    pieces of a concatenation (`cat`, `stack`, a sum of padded rows)."""
    loaded = {id(x) for x in loads}
    under: dict[int, set[int]] = {}  # id of a view node -> the loads it reads by views
    pieces: set[int] = set()
    for x in body:  # (in dependency order: sources first)
        if x.op not in MOVEMENT:
            continue
        (src,) = x.srcs
        reached = {id(src)} if id(src) in loaded else under.get(id(src), set())
        under[id(x)] = reached
        if x.op is Ops.PAD:
            pieces |= reached
    return len(pieces)


def _reads_at_own_coordinates(body: list[Node], m: Node, shape) -> bool:
    """Every node of `body` that depends on m is elementwise (or a copy: a kernel's root
    that `materialize` made) and of `shape`, so the kernel reads m at its own coordinates
    (and can take m's value from the same loop nest)."""
    reaches = {id(m)}
    for x in body:
        if any(id(s) in reaches for s in x.srcs):
            if x.op not in _READS_IN_PLACE or x.shape != shape:
                return False
            reaches.add(id(x))
    return True


def _siblings(graph, reason, claimed, held, pinned=frozenset()) -> dict[int, list[Node]]:
    """Requested outputs computed elementwise from another kernel's output, moved into that
    kernel as extra outputs: an optimizer's new parameter, `p - lr * m`, is stored by the
    kernel that computes the new momentum `m`, which it reads from registers instead of
    memory, and one kernel launch goes away.

    An output n joins kernel m when n has m's shape, every node between them is
    elementwise (so n reads m at m's own coordinates), n contains no reduction, and m is
    the only value n reads that this schedule computes (the rest are realized buffers).
    A later kernel that reads n recomputes it from m, like any inlined value.
    """
    extra: dict[int, list[Node]] = {}
    moved: set[int] = set()
    for n in graph:
        if reason.get(id(n)) != "output requested" or id(n) in claimed or id(n) in extra:
            continue
        if n.op not in _SAME_COORDS:
            continue
        loads, body = _kernel_of(n, reason, held)
        kernels = [x for x in loads if id(x) not in held]
        if len(kernels) != 1 or any(x.op in REDUCE for x in body):
            continue
        (m,) = kernels
        if m.shape != n.shape or id(m) in moved or m.op in _DATA_DEPENDENT or id(m) in pinned:
            continue
        if _reads_at_own_coordinates(body, m, n.shape):
            del reason[id(n)]
            extra.setdefault(id(m), []).append(n)
            moved.add(id(n))
    return extra


def _absorb(graph, users, reason, claimed, extra: dict[int, list[Node]], held) -> None:
    """Requested elementwise outputs read only by another requested output's kernel, at its
    own coordinates, are computed and stored by that kernel: Adam's new m and v are stored
    by the kernel of the new parameter, which reads them, instead of by two kernels of their
    own whose outputs it would load again."""

    def elementwise(body: list[Node]) -> bool:
        return not any(x.op in REDUCE or x.op in _OWN_KERNEL for x in body)

    for n in graph:
        if reason.get(id(n)) != "output requested" or id(n) in claimed:
            continue
        loads, body = _kernel_of(n, reason, held)
        if not elementwise(body):
            continue
        inside = {id(x) for x in body}
        for m in loads:
            if reason.get(id(m)) != "output requested" or id(m) in claimed or id(m) in extra:
                continue
            if m.shape != n.shape or not elementwise(_kernel_of(m, reason, held)[1]):
                continue
            if not all(id(u) in inside for u in users.get(id(m), ())):
                continue  # another kernel reads m's buffer
            if _reads_at_own_coordinates(body, m, n.shape):
                del reason[id(m)]
                extra.setdefault(id(n), []).append(m)


def _sibling_reductions(
    graph, reason, claimed, extra: dict[int, list[Node]], held, pinned=frozenset()
) -> set[int]:
    """Rule 7: merge reduction kernels that read the same input over the same loops.

    Kernels whose fused reductions have the same op, dtype, source shape, axes and output
    shape (and whose outputs have one shape) are grouped, in graph order, when they load a
    common value with one element per element of the sum (the input both sum over: a layer
    norm's weight gradient `sum(g * xhat, 0)` and bias gradient `sum(g, 0)` both read `g`;
    two linear layers' weight gradients share `x` too, but as contractions, whose register
    tiles would not hold both sums), and neither group reaches the other through other
    kernels (a merged kernel must not read what it writes), at most MAX_SIBLINGS and
    MAX_KERNEL_OPS a group. The first of a group keeps its kernel; the others' outputs (and
    their extra outputs) become its extra outputs, computed at its coordinates. Returns the
    ids of the outputs moved: they keep their `reason` (other kernels load them as before)
    but are no longer kernels of their own.
    """
    kernels = [n for n in graph if id(n) in reason]
    keys: dict[int, tuple] = {}  # candidate kernel -> what its siblings must share
    fused_sources: dict[int, int] = {}  # candidate kernel -> elements its reduction reads
    for n in kernels:
        red = claimed.get(id(n), n if n.op in REDUCE else None)
        if red is not None and n.op not in _OWN_KERNEL and red.numel and id(n) not in pinned:
            axes = tuple(sorted(red.arg))
            keys[id(n)] = (red.op, red.dtype, red.srcs[0].shape, axes, red.shape, n.shape)
            fused_sources[id(n)] = red.srcs[0].numel
    alike = {key for key, count in Counter(keys.values()).items() if count > 1}
    if not alike:  # (most graphs: nothing to do)
        return set()
    loaded: dict[int, tuple[list[Node], int]] = {}

    def loads_and_size(n: Node) -> tuple[list[Node], int]:
        """The values kernel n loads, and the elementwise ops it computes."""
        if id(n) not in loaded:

            def boundary(m: Node) -> bool:
                return m is not n and (id(m) in held or id(m) in reason)

            nodes = toposort([n, *extra.get(id(n), [])], stop=boundary)
            ops = sum(m.op in ELEMENTWISE for m in nodes)
            loaded[id(n)] = ([m for m in nodes if boundary(m)], ops)
        return loaded[id(n)]

    group = {id(n): id(n) for n in kernels}  # kernel -> the first kernel of its group
    members: dict[int, list[Node]] = {id(n): [n] for n in kernels}
    position = {id(n): k for k, n in enumerate(kernels)}  # a kernel reads earlier ones only

    def reaches(a: int, b: int) -> bool:
        """Whether group b reads, through kernels, a value group a computes."""
        first_of_a = min(position[id(m)] for m in members[a])
        seen, todo = set(), [b]
        while todo:
            g = todo.pop()
            for m in members[g]:
                for x in loads_and_size(m)[0]:
                    if id(x) not in reason:
                        continue
                    h = group[id(x)]
                    if h == a:
                        return True
                    if max(position[id(m)] for m in members[h]) < first_of_a:
                        continue  # all of h comes before a: nothing it reads is a's
                    if h not in seen and h != g:
                        seen.add(h)
                        todo.append(h)
        return False

    buckets: dict[tuple, list[int]] = {}
    merged: set[int] = set()
    for n in kernels:
        key = keys.get(id(n))
        if key not in alike:
            continue
        # an input the sum streams, each element once (a contraction, whose register tile
        # reuses each loaded value many times, keeps its kernel)
        streamed = fused_sources[id(n)]
        mine = {id(x) for x in loads_and_size(n)[0] if x.numel == streamed > n.numel}
        for first in buckets.get(key, []):
            group_loads = {id(x) for m in members[first] for x in loads_and_size(m)[0]}
            if len(members[first]) >= MAX_SIBLINGS or not mine & group_loads:
                continue
            ops = sum(loads_and_size(m)[1] for m in members[first]) + loads_and_size(n)[1]
            if ops > MAX_KERNEL_OPS:
                continue
            if reaches(first, id(n)) or reaches(id(n), first):
                continue
            members[first].append(n)
            del members[id(n)]
            group[id(n)] = first
            moved = extra.pop(id(n), [])
            extra.setdefault(first, []).extend([n, *moved])
            merged.add(id(n))
            break
        else:
            buckets.setdefault(key, []).append(id(n))
    for first, group_members in members.items():
        if len(group_members) > 1:
            reason[first] += (
                f"; with {len(group_members) - 1} sibling reduction"
                f"{'s' if len(group_members) > 2 else ''} over the same input in one loop nest"
            )
    return merged


def _stored_in_reductions(
    graph, reason, claimed, extra, merged, held, splits_reductions=False, pinned=frozenset()
) -> dict[int, list[Node]]:
    """Rule 8: elementwise values stored for other readers that a plain sum also reads, at
    their own coordinates, moved into the sum's kernel, which stores them from inside its
    loops (`ScheduleItem.at_source`). Returns kernel output id -> the values it stores so.

    A layer's output gradient `g` (64, 120), stored because both matmul gradients read it
    many times, and summed over the batch for the bias gradient: the bias kernel computes
    `g` from the values `g` is made of, stores it and adds it, and `g`'s own kernel goes.
    The conditions are in the module's docstring (rule 8); each is a test in
    tests/pipeline/test_schedule_at_source.py. A move that would make two kernels read each
    other's outputs (through any chain of kernels) is not made.
    """
    kernels = [n for n in graph if id(n) in reason and id(n) not in merged]
    owner: dict[int, int] = {}  # id of every stored value -> the kernel output storing it
    for n in kernels:
        owner[id(n)] = id(n)
        for x in extra.get(id(n), ()):
            owner[id(x)] = id(n)
    loaded: dict[int, set[int]] = {}  # kernel -> ids of the computed values it loads

    def loads_of(k: Node) -> set[int]:
        if id(k) not in loaded:
            own = {id(k)} | {id(x) for x in extra.get(id(k), ())}
            nodes = toposort(
                [k, *extra.get(id(k), ())],
                stop=lambda m: id(m) not in own and (id(m) in held or id(m) in reason),
            )
            loaded[id(k)] = {id(m) for m in nodes if id(m) not in own and id(m) in reason}
        return loaded[id(k)]

    by_id = {id(n): n for n in kernels}
    # Whether a move makes a cycle is asked of the kernel graph as it stands: `above[k]`,
    # the kernels k reads through (a bit each), made on the first question and kept up to
    # date as moves are made (a walk per question walks the whole graph: an LSTM step's
    # 1,600 kernels ask 128 questions).
    bit: dict[int, int] = {}
    above: dict[int, int] = {}

    def above_of(k: int) -> int:
        stack = [k]
        while stack:
            top = stack[-1]
            if top in above:
                stack.pop()
                continue
            deps = {owner[x] for x in loads_of(by_id[top])}
            missing = [d for d in deps if d not in above and d != top]
            if missing:
                stack.extend(missing)
                continue
            mask = 0
            for d in deps:
                mask |= bit[d] | above.get(d, 0)
            above[top] = mask
            stack.pop()
        return above[k]

    def cycle_if_moved(v: int, n: int, start: set[int]) -> bool:
        """Whether n would read itself through kernels once it computes v and loads
        `start`: some kernel it would load is n, reads n, or reads v (whose readers would
        read n instead)."""
        if not bit:
            bit.update((k, 1 << i) for i, k in enumerate(by_id))
        targets = bit[n] | bit[v]
        return any(owner[x] == n or above_of(owner[x]) & targets for x in start)

    def moved(v: int, n: int, start: set[int]) -> None:
        """Keep `above` true once n computes v and loads `start`."""
        if not above:
            return
        gained = above_of(n)
        for x in start:
            gained |= bit[owner[x]] | above_of(owner[x])
        touched = bit[n] | bit[v]
        for k, mask in above.items():
            if mask & touched:
                above[k] = mask | gained | bit[n]
        above[n] = gained

    moves: dict[int, list[Node]] = {}
    for n in kernels:
        red = claimed.get(id(n), n if n.op in REDUCE else None)
        if red is None or red.op is not Ops.SUM or n.op in _OWN_KERNEL or id(n) in pinned:
            continue
        src = red.srcs[0]
        if not red.numel or not src.numel or not src.shape:
            continue
        few = red.numel < AT_SOURCE_MIN_OUTPUTS and not splits_reductions
        if few and src.numel >= AT_SOURCE_SHARED_ELEMENTS:
            continue  # its few outputs run on one thread: the value's own kernel shares it
        # the kernel's nodes, with its extra outputs' (an optimizer's update of the bias)
        body = _item(n, red, "", reason, extra.get(id(n), []), [], held).nodes
        if any(x.op in REDUCE and x is not red for x in body):
            continue  # a sibling reduction (rule 7) or a row statistic
        for v in _streamed_values(red, body, held):
            if owner.get(id(v)) != id(v) or extra.get(id(v)) or id(v) in claimed:
                continue  # another kernel's output, or a kernel with more outputs
            if id(v) in pinned:
                continue  # cut on request: a kernel of its own
            if v.op not in ELEMENTWISE or v.dtype.is_half:
                continue
            v_loads, v_body = _kernel_of(v, reason, held)
            if any(x.op in REDUCE or x.op in _OWN_KERNEL for x in v_body):
                continue
            if _padded_pieces(v_loads, v_body) > AT_SOURCE_MAX_PIECES:
                continue  # a concatenation of many pieces: split apart in its own kernel
            ops = sum(x.op in ELEMENTWISE for x in [*body, *v_body])
            if ops > MAX_KERNEL_OPS:
                continue
            new_loads = (loads_of(n) - {id(v)}) | loads_of(v)
            if cycle_if_moved(id(v), id(n), new_loads):
                continue
            moved(id(v), id(n), new_loads)
            owner[id(v)] = id(n)  # v's other readers now wait for n
            moves.setdefault(id(n), []).append(v)
            loaded[id(n)] = new_loads
    return moves


def _streamed_values(red: Node, body: list[Node], held) -> list[Node]:
    """The computed values that sum `red` reads at its source's coordinates, each once per
    element of the sum: loads of the source's shape under elementwise nodes of that shape.
    None where the source reads a loaded value through a view (a broadcast operand: a
    contraction, whose register tile reuses it; a permute), or where a node outside the
    source (the epilogue) reads one of them too. `sum(g * y, 0)` with g and y computed
    values of shape (64, 120): [g, y]; `sum(g * w.expand(64, 120), 0)`: none.
    """
    src = red.srcs[0]
    inside = {id(x) for x in body}
    if id(src) not in inside:  # the sum's source is the loaded value itself
        return [] if id(src) in held else [src]
    below = toposort([src], stop=lambda x: id(x) not in inside)
    loaded_under: set[int] = set()  # ids of the nodes with a load under them
    values: list[Node] = []
    for x in below:
        if id(x) not in inside:
            loaded_under.add(id(x))
            if id(x) not in held and x.shape == src.shape:
                values.append(x)
        elif any(id(s) in loaded_under for s in x.srcs):
            if x.op not in _SAME_COORDS or x.shape != src.shape:
                return []
            loaded_under.add(id(x))
    in_source = {id(x) for x in below}
    epilogue = [x for x in body if id(x) not in in_source and x is not red]
    return [v for v in values if not any(s is v for x in epilogue for s in x.srcs)]


def _in_dependency_order(items: list[ScheduleItem], strict: bool = True):
    """The items, each after the items whose outputs it reads, otherwise in their order
    (merging sibling reductions moves a kernel's outputs earlier or later than their
    readers). Not `strict`: None where the kernels read each other's outputs in a cycle."""
    made_by = {id(out): k for k, item in enumerate(items) for out in item.outputs}
    readers: list[list[int]] = [[] for _ in items]
    waiting = [0] * len(items)  # items each one waits for
    for k, item in enumerate(items):
        for j in {made_by[id(x)] for x in item.inputs if id(x) in made_by}:
            readers[j].append(k)
            waiting[k] += 1
    ready = [k for k in range(len(items)) if not waiting[k]]
    heapq.heapify(ready)
    order: list[ScheduleItem] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(items[k])
        for r in readers[k]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, r)
    if len(order) != len(items) and not strict:
        return None
    assert len(order) == len(items), "schedule: kernels read each other's outputs (a cycle)"
    return order


def _same_coordinates(u: Node, ok: dict[int, bool]) -> bool:
    """User u reads its sources at its own coordinates, and so on up to the kernel output."""
    keeps = u.op in ELEMENTWISE or u.op in (Ops.CONTIGUOUS, Ops.DETACH) or is_squeeze(u)
    return keeps and ok.get(id(u), False)


def _keeps_coordinates(n: Node, users: list[Node], ok: dict[int, bool], reason) -> bool:
    """Whether n is read at the kernel output's coordinates along every path."""
    if id(n) in reason:
        return True
    return all(_same_coordinates(u, ok) for u in users)


def _row_broadcast(u: Node) -> bool:
    """u expands size-1 trailing axes (a row statistic broadcast back over its row): every
    axis it expands comes after every other axis of more than one element."""
    if u.op is not Ops.EXPAND:
        return False
    spread = [i for i, (a, b) in enumerate(zip(u.srcs[0].shape, u.shape)) if a != b]
    kept = [i for i, (a, b) in enumerate(zip(u.srcs[0].shape, u.shape)) if a == b and b != 1]
    return bool(spread) and (not kept or max(kept) < min(spread))


def _row_local(n: Node, users, reads: set[int], reason, claimed, by_id) -> bool:
    """Whether reduction n is a row statistic its readers can compute inside (rule 6).

    n reduces trailing axes of its source (the row) short enough for cache, and every path
    from n to a kernel output is: values at n's shape (elementwise, squeezes, other such row
    statistics), then one broadcast back to the row's shape, then elementwise ops up to an
    elementwise kernel output of that shape, or into another reduction over the same rows
    (a softmax's sum reads its max), from which the walk starts again at the row's shape.
    """
    src = n.srcs[0].shape
    axes = sorted(n.arg)
    kept = [i for i, s in enumerate(src) if s != 1 and i not in axes]
    if not axes or (kept and max(kept) > min(axes)):
        return False
    row = math.prod(src[a] for a in axes)
    if 4 * row * n.dtype.itemsize > ROW_CACHE_BYTES or row < 2:
        return False
    if not reads or len(reads) > ROW_READERS_MAX:
        return False
    for root_id in reads:
        root = by_id[root_id]
        if root_id in claimed or root.op not in _SAME_COORDS or root.shape != src:
            return False
    frontier, seen = [(u, False) for u in users.get(id(n), ())], set()
    while frontier:
        u, spread = frontier.pop()
        if (id(u), spread) in seen:
            continue
        seen.add((id(u), spread))
        if u.op in REDUCE:
            if not spread or id(u) in reason or u.srcs[0].shape != src or sorted(u.arg) != axes:
                return False
            spread = False
        elif u.op is Ops.EXPAND:
            if spread or u.shape != src or not _row_broadcast(u):
                return False
            spread = True
        elif u.op in _SAME_COORDS or is_squeeze(u):
            if u.shape != src if spread else u.numel != n.numel:
                return False
        else:
            return False
        if id(u) in reason:
            if not spread:
                return False
            continue
        frontier.extend((w, spread) for w in users.get(id(u), ()))
    return True


def _reduce_cut(n, users, reads, ok, claimed, reason, row_fused=()) -> str | None:
    """None if reduction `n` can be fused into its reader's kernel, else the reason it cannot."""
    if len(reads) > 1:
        return f"reduction read by {len(reads)} kernels"
    direct = users.get(id(n), [])
    if all(_same_coordinates(u, ok) for u in direct):
        (root_id,) = reads
        if root_id in claimed or root_id in row_fused:
            return "its consumer's kernel already fuses another reduction"
        return None
    # find what stands between the reduction and its reader's output, nearest first
    seen, frontier = set(), list(direct)
    first_view = None
    while frontier:
        u = frontier.pop(0)
        if id(u) in seen:
            continue
        seen.add(id(u))
        if u.op in REDUCE:
            return "reduction feeding another reduction"
        if u.op is Ops.EXPAND:
            axes = [i for i, (a, b) in enumerate(zip(u.srcs[0].shape, u.shape)) if a != b]
            return f"reduction broadcast back over axis {', '.join(map(str, axes))}"
        if first_view is None and not (u.op in ELEMENTWISE or is_squeeze(u)):
            first_view = u
        if id(u) not in reason:
            frontier.extend(users.get(id(u), []))
    bad = first_view or direct[0]
    return f"reduction read through {bad.op.name.lower()} by its consumer"


def _broadcast_note(n: Node, users, depth: int = 3) -> str | None:
    """'broadcast back over axis k' if n reaches an EXPAND through views, else None."""
    for u in users.get(id(n), ()):
        if u.op is Ops.EXPAND:
            axes = [i for i, (a, b) in enumerate(zip(u.srcs[0].shape, u.shape)) if a != b]
            return f"broadcast back over axis {', '.join(map(str, axes))}"
        if depth and u.op in (Ops.RESHAPE, Ops.PERMUTE):
            note = _broadcast_note(u, users, depth - 1)
            if note:
                return note
    return None


def _size_cuts(graph: list[Node], held) -> dict[int, str]:
    """Elementwise values stored because the kernel inlining them would grow past
    MAX_KERNEL_OPS ops: LLVM's time grows faster than a kernel's length, and a chain of
    100,000 additions is better as many kernels of equal shape, which compile once.

    A kernel computes each inlined node once, however many of its nodes read it, so its
    length is the number of distinct elementwise nodes above it. Summing the sources'
    counts (one pass, no sets) counts a shared node once per path to it, and a Horner
    polynomial in `t` (erf's) or a series in `x * x` counts `t` or `x * x` once per stage:
    that sum is the fast bound; only where it passes the limit are the distinct nodes
    counted (a walk that stops past the limit), and the value stored only if they pass it
    too. Otherwise their count replaces the sum, so the nodes above it start from the exact
    figure (a long chain of shared values is then walked about once, not once a node).
    """
    size: dict[int, int] = {}  # an upper bound of the distinct count: a sum, or the count
    cuts: dict[int, str] = {}

    def counted(n: Node) -> bool:
        return n.op in ELEMENTWISE

    def inside(n: Node) -> bool:  # computed in the kernel that inlines n, not loaded
        return id(n) not in held and id(n) not in cuts and (counted(n) or n.op in MOVEMENT)

    found_under: dict[int, set[int]] = {}  # id -> the counted nodes a walk found under it

    def distinct_over(root: Node, limit: int) -> int:
        """The distinct elementwise nodes inlined under root, counted up to limit + 1. A
        node walked before adds what its walk found, not walked again: an LSTM's cell
        states through 64 steps are each one step past the last one's walk."""
        seen, stack, found = {id(root)}, [root], set()
        while stack:
            n = stack.pop()
            if n is not root and id(n) in found_under:
                found |= found_under[id(n)]
            else:
                if counted(n):
                    found.add(id(n))
                for s in n.srcs:
                    if id(s) not in seen and inside(s):
                        seen.add(id(s))
                        stack.append(s)
            if len(found) > limit:
                return len(found)
        found_under[id(root)] = found
        return len(found)

    for n in graph:
        if id(n) in held or n.op not in ELEMENTWISE and n.op not in MOVEMENT:
            size[id(n)] = 0
            continue
        total = counted(n) + sum(size.get(id(s), 0) for s in n.srcs)
        if total > MAX_KERNEL_OPS and counted(n):
            # the exact count replaces the bound: the nodes above n then start from it
            total = distinct_over(n, MAX_KERNEL_OPS)
            if total > MAX_KERNEL_OPS:
                cuts[id(n)] = f"kernel too long: more than {MAX_KERNEL_OPS} ops inlined"
                total = 0
        size[id(n)] = total
    return cuts


def _recompute_costs(graph: list[Node], held, stored=()) -> dict[int, int]:
    """Units of work to recompute each node per element, down to leaves, reductions and
    the values `stored` whatever the rule decides (size cuts): reading one costs nothing
    more, so `1 + erf` over a stored erf costs 1, not erf's cost again."""
    cost: dict[int, int] = {}
    for n in graph:
        if id(n) in held or n.op in LEAF or n.op in REDUCE or n.op is Ops.CONTIGUOUS:
            cost[id(n)] = 0
        else:
            cost[id(n)] = min(
                _op_cost(n) + sum(0 if id(s) in stored else cost[id(s)] for s in n.srcs),
                COST_CAP,
            )
    return cost


def _item(
    root: Node,
    reduce: Node | None,
    why: str,
    reason: dict[int, str],
    extra: list[Node],
    at_source: list[Node],
    held,
) -> ScheduleItem:
    """Collect the nodes a kernel computes and the values it loads."""

    # a sibling reduction's output, or a value stored inside the reduction, is computed here
    own = {id(root)} | {id(m) for m in extra} | {id(m) for m in at_source}

    def boundary(m: Node) -> bool:
        return id(m) not in own and (id(m) in held or id(m) in reason)

    nodes = toposort([root, *extra], stop=boundary)
    inputs = [m for m in nodes if boundary(m)]
    inside = [m for m in nodes if not boundary(m)]
    return ScheduleItem(root, reduce, why, inputs, inside, list(extra), list(at_source))


def structural_key(roots: list[Node], has_value: Callable[[Node], bool]) -> tuple[tuple, list]:
    """A hashable description of the graph under `roots`, with values in memory as parameters.

    Two graphs with the same key schedule identically; the second list holds
    the nodes with values (the parameters) in the order the key numbers them, so a
    cached schedule can be re-run on new buffers. One pass, no recursion: each node
    contributes its op, argument, shape, dtype and the positions of its sources (a
    parameter: its shape, dtype and device), in one flat tuple (this runs on every
    realize and every cached training step). Requests on the graph's nodes
    (`ir/steering.py`: cut here, fuse this) are part of the key: a plan cached before a
    request is not the plan after it.
    """
    index: dict[Node, int] = {}  # (keyed by the nodes: their hash is their identity's)
    leaves: list[Node] = []
    flat: list = []
    const, buffer = Ops.CONST, Ops.BUFFER
    # the engine's predicate names the ids of its computed values: test them inline
    values = getattr(has_value, "values", None)
    count = 0  # (len(index), kept: a call per node otherwise)
    for root in roots:
        stack = [root]
        while stack:
            n = stack[-1]
            if n in index:
                stack.pop()
                continue
            op = n.op
            if op is const:
                arg = n.arg  # (`const_key`, inline)
                flat += (
                    const,
                    n.dtype,
                    n.shape,
                    (repr(arg),) if isinstance(arg, float) else (type(arg), arg),
                )
            elif op is buffer or (id(n) in values if values is not None else has_value(n)):
                leaves.append(n)
                flat += (None, n.shape, n.dtype, n.device)
            else:
                srcs = n.srcs
                waiting = False
                for s in srcs:
                    if s not in index:
                        stack.append(s)
                        waiting = True
                if waiting:
                    continue
                flat += (op, n.arg, n.shape, n.dtype, len(srcs))
                for s in srcs:  # (a loop, not a comprehension: no call per node)
                    flat.append(index[s])
            stack.pop()
            index[n] = count
            count += 1
    key = (tuple(flat), tuple([index[r] for r in roots]))
    if steering.any_requests():
        asked = steering.requests_in({id(n): k for n, k in index.items()})
        if asked:
            key = (*key, asked)
    return key, leaves


def const_family(roots: list[Node], has_value: Callable[[Node], bool]) -> tuple[tuple, list]:
    """`structural_key` with the constants' values left out, and the uses of the graph's
    constants in the order the walk meets them, each `(user, k)`: source k of node `user`
    (None for a root that is a constant, k its place among the roots). Graphs that differ
    only in the values of some constants (a learning rate a hand-written update anneals,
    an EMA's decay that warms up) have one family key, and their constants' uses pair up
    position by position (`runtime/engine.py`'s lifted constants). A use, not a node: one
    constant node serves every use of its value, so `x * v + 1.0` at v = 1.0 would
    otherwise have a node fewer than at v = 0.5. A graph with steering requests on its
    nodes (`ir/steering.py`) gives no uses. (`structural_key`'s walk, written apart: that
    one runs on every realize, this one only when a key was not found.)"""
    index: dict[int, int] = {}
    uses: list[tuple] = []
    flat: list = []
    const, buffer = Ops.CONST, Ops.BUFFER
    values = getattr(has_value, "values", None)

    def use(c: Node, user, k: int) -> None:
        flat.extend((const, c.dtype, c.shape, type(c.arg)))
        uses.append((user, k))

    for r, root in enumerate(roots):
        if root.op is const:
            use(root, None, r)
            continue
        stack = [root]
        while stack:
            n = stack[-1]
            k = id(n)
            if k in index:
                stack.pop()
                continue
            op = n.op
            if op is buffer or (k in values if values is not None else has_value(n)):
                flat += (None, n.shape, n.dtype, n.device)
            else:
                srcs = n.srcs
                waiting = False
                for s in srcs:
                    if s.op is not const and id(s) not in index:
                        stack.append(s)
                        waiting = True
                if waiting:
                    continue
                flat += (op, n.arg, n.shape, n.dtype, len(srcs))
                for j, s in enumerate(srcs):
                    if s.op is const:
                        use(s, n, j)
                    else:
                        flat.append(index[id(s)])
            stack.pop()
            index[k] = len(index)
    key = (tuple(flat), tuple([index.get(id(r)) for r in roots]))
    if steering.any_requests():
        asked = steering.requests_in(index)
        if asked:  # (requests name nodes: a graph rebuilt around its constants has others)
            return (*key, asked), []
    return key, uses


def const_key(value):
    """Constants differ as their values and signs (0.0 and -0.0) and NaN equals NaN here."""
    if isinstance(value, float):
        return (repr(value),)
    return (type(value), value)
