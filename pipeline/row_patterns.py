"""The values a row kernel (pipeline/schedule.py, rule 6) computes once where it could twice.

A row kernel computes its row statistics (a max, a sum) in passes over the row, then its
output in a last pass. Three patterns let the CPU's lowering (`pipeline/loop_nest.py`)
do less: a softmax's max and its sum of exponentials in one pass (`online_exp_max`, the
GPU's online softmax), its division by the sum as a multiply by the sum's reciprocal
(`softmax_divisions`), and a value both a sum's pass and the output pass compute, stored
by the first and loaded by the second (`stashed_row_value`).
"""

from __future__ import annotations

from ..ir.dtypes import float32, float64
from ..ir.node import Node
from ..ir.ops import ELEMENTWISE, REDUCE, Ops
from .schedule import ScheduleItem, is_squeeze


def online_exp_max(n: Node) -> Node | None:
    """The pattern the GPU computes as an online softmax (`AccOnlineExp`), its one entry:
    `sum(exp(y - expand(detach?(max(y)))))`, the max and the sum over the same axes of the
    same y. Returns the max node, or None.

    >>> import fusegrad as fg
    >>> x = fg.randn(4, 8)
    >>> e = (x - x.amax(1, keepdim=True).detach()).exp()
    >>> online_exp_max(e.sum(1, keepdim=True).node).op.name
    'REDUCE_MAX'
    """
    if n.op is not Ops.SUM or n.srcs[0].op is not Ops.EXP:
        return None
    diff = n.srcs[0].srcs[0]
    if diff.op is not Ops.ADD:
        return None
    for y, neg in (diff.srcs, diff.srcs[::-1]):
        if neg.op is not Ops.NEG:
            continue
        m = neg.srcs[0]
        while m.op in (Ops.EXPAND, Ops.DETACH) or is_squeeze(m):
            m = m.srcs[0]
        if m.op is Ops.REDUCE_MAX and m.srcs[0] is y and m.arg == n.arg and m.shape == n.shape:
            return m
    return None


def softmax_divisions(item: ScheduleItem) -> set[int]:
    """ids of a row kernel's softmax divisions, `e / expand(sum(e))` with e = exp(y - max(y))
    (`online_exp_max`), which the CPU computes as `e * (1 / sum)`: one reciprocal per row
    and a multiply per element, as PyTorch's CPU softmax does (`_vec_softmax_lastdim`,
    `tmp_sum = 1 / tmp_sum`), instead of a division per element, which costs as much as the
    rest of the output pass (docs/NUMERICS.md: within 1.5 ulp of the quotient, 0.5 before).

    >>> import fusegrad as fg
    >>> from fusegrad.pipeline.schedule import schedule
    >>> x = fg.randn(4, 8).realize()
    >>> (item,) = schedule([x.softmax(-1).node], lambda n: n is x.node)
    >>> [n.op.name for n in item.nodes if id(n) in softmax_divisions(item)]
    ['DIV']
    """
    found = set()
    for n in item.nodes:
        if n.op is not Ops.DIV:
            continue
        e, den = n.srcs
        while den.op is Ops.EXPAND or is_squeeze(den):
            den = den.srcs[0]
        if den.op is Ops.SUM and den.srcs[0] is e and online_exp_max(den) is not None:
            found.add(id(n))
    return found


def stashed_row_value(item: ScheduleItem) -> Node | None:
    """The value a row kernel (pipeline/schedule.py, rule 6) computes for every element both in
    a row sum's pass and in its output pass, which the sum's pass should store into the
    output buffer and the output pass load back and overwrite in place: a softmax's
    `exp(x - max)` (its transcendental then runs once per element), a log-softmax's
    `x - max`, a layer norm's `x - mean`. Besides the work saved, the output's memory
    traffic (its lines fetched for writing) moves into a pass that computes, where it
    overlaps the arithmetic; the reload hits cache (the row fits, `ROW_CACHE_BYTES`).

    The value: elementwise, computed inside a row SUM's source, of the output's shape and
    dtype, read by the output at its own coordinates only; of several, the last computed
    (the most work). The kernel has one output and several rows, so each thread owns whole
    rows and no thread's statistics pass writes where another's output pass already has.
    A float32 or float64 value is stored into the output (what is stored is what was
    computed); a float16 or bfloat16 one into a float32 scratch row of the thread's own
    (`Lowerer.stash_buffer`), since the output would round it before the output pass reads
    it: `exp` then runs once per element and the output is rounded once, as for float32.
    """
    root = item.root
    if item.reduce is not None or item.extra:
        return None
    if root.dtype not in (float32, float64) and not root.dtype.is_half:
        return None
    inside = {id(m) for m in item.nodes}
    summed: set[int] = set()  # computed inside a row sum's pass
    for n in item.nodes:
        if n.op is Ops.SUM and n.numel > 1:
            summed |= _computed_for(n.srcs[0], inside)
    best = None
    for v in item.nodes:  # sources first: the last that qualifies is the most work
        if id(v) not in summed or v.op not in ELEMENTWISE or v.op is Ops.CONST:
            continue
        if v.shape != root.shape or v.dtype != root.dtype:
            continue
        if _read_at_own_coordinates(item.nodes, v, root) and _varies(v, inside):
            best = v
    return best


def row_axis(item: ScheduleItem, sums: set[int]) -> int:
    """The first axis of the row that the row sums `sums` reduce: their axes are the trailing
    ones (pipeline/schedule.py, rule 6), so an element's index within its row is the linear index
    of its coordinates from this axis on."""
    axes = {tuple(sorted(n.arg)) for n in item.nodes if id(n) in sums}
    assert len(axes) == 1, "a stashed value's sums reduce one row"
    return min(axes.pop())


def sums_computing(item: ScheduleItem, v: Node | None) -> set[int]:
    """ids of the row sums of a kernel whose passes compute v."""
    if v is None:
        return set()
    inside = {id(m) for m in item.nodes}
    return {
        id(n) for n in item.nodes if n.op is Ops.SUM and id(v) in _computed_for(n.srcs[0], inside)
    }


def _computed_for(v: Node, inside: set[int]) -> set[int]:
    """ids of the nodes computed inside a kernel to get v (down to reductions and loads)."""
    stack, seen = [v], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or id(m) not in inside or m.op in REDUCE:
            continue
        seen.add(id(m))
        stack.extend(m.srcs)
    return seen


def _read_at_own_coordinates(nodes: list[Node], v: Node, root: Node) -> bool:
    """Whether root reads v, and every path from v up to root is elementwise at root's shape
    (reductions reading v on the way are passes of their own, not the output's)."""
    reaches = {id(v)}
    for m in nodes:  # sources first
        if m.op in REDUCE or not any(id(s) in reaches for s in m.srcs):
            continue
        if m.op not in ELEMENTWISE or m.shape != root.shape:
            return False
        reaches.add(id(m))
    return id(root) in reaches


def _varies(v: Node, inside: set[int]) -> bool:
    """Whether v changes along the row: it reads an element of a buffer, not only row
    statistics broadcast back (`-max` is one value per row, cheaper computed than loaded)."""
    stack, seen = [v], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or m.op in REDUCE or m.op is Ops.CONST:
            continue
        seen.add(id(m))
        if id(m) not in inside or m.op in (Ops.RAND, Ops.INDEX):  # a loaded value
            return True
        if m.op is Ops.EXPAND:
            continue  # a broadcast: the same value along the axes it spreads
        stack.extend(m.srcs)
    return False
