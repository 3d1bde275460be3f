"""Lowering: one scheduled kernel (a subgraph) becomes a loop nest in the loop IR (`lower`).

This module decides; the others build. Adjacent loops are merged when that removes no
affine access (a contiguous elementwise kernel becomes a single loop); a merge that would
turn a strided access into divisions is not made (`_merge_loops`). Then the kernel takes
one of the CPU's strategies, in this order: a row kernel's cascaded statistics, AMX or
`vdpbf16ps` tiles for a bfloat16 matmul (pipeline/amx.py, pipeline/dpbf16.py), a register
tile (pipeline/tile_choice.py, tuned by pipeline/tile_tuning.py, built by
pipeline/contraction.py), a max in vector lanes or a cascaded sum (pipeline/reductions.py,
pipeline/cascade.py), or the plain loop nest (pipeline/loop_nest.py), its edges peeled
(pipeline/peel.py). Each step can be recorded (`record_steps`).

`kernel_name`, `kernel_symbol` and `base_name` (pipeline/kernel_names.py) are importable
from here too, as the runtime imports them.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..ir.ops import REDUCE, Ops
from ..ir.symbolic import FloorDiv, Lin, Mod, Var, lin
from . import templates, tile_choice
from .amx import lower_amx
from .coords import split_lanes
from .dpbf16 import lower_dpbf16
from .kernel_names import base_name, kernel_name, kernel_symbol
from .loop_nest import Lowerer
from .loopir import Kernel, Load, Loop, Position, Rand, Select, Store
from .peel import (
    peel_guarded_loops,
    peel_padded_outputs,
    split_digits,
    split_phases,
    unrolled_by_period,
)
from .pieces import split_pieces
from .reductions import cascade_lanes, cascade_rows, lane_max
from .schedule import ScheduleItem
from .tile_choice import (
    SUM_MERGED_LANES,
    Tile,
    choose_tile,
    fits_siblings,
    ragged_rows,
    tile_reads,
    tile_text,
)
from .tile_tuning import tuning_space
from .tiling import MAX_ROW_PERIOD, row_period, rows_merge

__all__ = ["base_name", "kernel_name", "kernel_symbol", "lower", "record_steps"]


def _divmod_score(kernel: Kernel) -> int:
    """How many divisions and modulos the kernel's index expressions contain."""
    total = 0

    def count(e: Lin) -> int:
        return sum(isinstance(a, (FloorDiv, Mod)) for a in e.atoms())

    def walk(body):
        nonlocal total
        for s in body:
            if isinstance(s, Loop):
                walk(s.body)
            elif isinstance(s, (Load, Store, Rand, Position)):
                total += count(s.index) + sum(count(v) for v in getattr(s, "valid", ()))
            elif isinstance(s, Select):
                total += sum(count(v) for v in s.valid)

    walk(kernel.body)
    return total


def _merge_groups(axes: list[int], try_lower, apart=None) -> list[tuple[int, ...]]:
    """Greedily merge neighbouring axes (innermost first) while no division appears;
    never two that `apart(a, b)` keeps apart."""
    groups = [(a,) for a in axes]
    if apart is not None and all(apart(a, b) for a, b in zip(axes, axes[1:])):
        return groups  # (nothing may merge: nothing lowered to find out)
    best = try_lower(groups)
    i = len(groups) - 2
    while i >= 0:
        if apart is not None and apart(groups[i][-1], groups[i + 1][0]):
            i -= 1
            continue
        candidate = groups[:i] + [groups[i] + groups[i + 1]] + groups[i + 2 :]
        score = try_lower(candidate)
        if score <= best:
            groups, best = candidate, score
        i -= 1
    return groups


class _StepLog(threading.local):
    steps: list | None = None  # (step, loop IR text) while `record_steps` is open here


_step_log = _StepLog()


@contextmanager
def record_steps() -> Iterator[list[tuple[str, str]]]:
    """Within the block, `lower` on this thread appends each step it takes to the list it
    yields: (what the step did, the loop IR after it), from the loop nest with its loops
    merged to the kernel it returns (a register tile, edges peeled, unrolled by a row's
    period, an interleave split into phases). Off by default: one attribute test a step.
    Vector lanes are part of a tile, not a step of their own; the rest of vectorization
    is LLVM's (compare the LLVM IR before and after its passes)."""
    outer, _step_log.steps = _step_log.steps, []
    try:
        yield _step_log.steps
    finally:
        _step_log.steps = outer


def _step(what: str, kernel: Kernel, before: Kernel | None = None) -> Kernel:
    """`kernel`, noted as the result of step `what` while `record_steps` is open (not
    where `before`, the step's input, is the same kernel: the step changed nothing)."""
    steps = _step_log.steps
    if steps is not None and kernel is not before:
        steps.append((what, str(kernel)))
    return kernel


def lower(
    item: ScheduleItem, tile: bool = True, amx: bool = False, dpbf16: bool = False, tuner=None
) -> Kernel:
    """The loop IR of a scheduled kernel, with its loops merged where that stays affine.

    With `tile`, a reduction may get the CPU's register tile (`choose_tile`); the GPU
    lowering (`pipeline/gpu.py`) takes the plain loop nest (`tile=False`) and tiles it
    for the GPU's threads and shared memory instead. With `amx` (the runtime's word that
    the host has AMX-BF16 and may use it), a bfloat16 matmul in the layout `pipeline/amx.py`
    recognizes runs on AMX tiles; with `dpbf16` (the host has AVX512-BF16 and no AMX), on
    `vdpbf16ps` register tiles (`pipeline/dpbf16.py`). A `tuner` (the runtime's autotuner,
    `runtime/autotune.py`) is handed the tiles a float32 contraction could take
    (`tuning_space`) and a function that lowers one, and returns the kernel it picked;
    without one the tile is `choose_tile`'s, the fixed choice for this host. Either way
    the kernel's `tile_note` says which tile it has and why.

    >>> import fusegrad as fg
    >>> from fusegrad.pipeline.schedule import schedule
    >>> x = fg.randn(8, 4).realize()
    >>> (item,) = schedule([(x * 2).node], lambda n: n is x.node)
    >>> [loop.extent for loop in lower(item).body]  # one loop over the 32 elements
    [32]
    """
    kernel = _lowered(item, tile, amx, dpbf16, tuner)
    if not tile:  # (the GPU's lowering tiles the plain loop nest for its threads)
        return kernel
    return _step("a concatenation's pieces split apart", split_pieces(kernel), kernel)


def _lowered(item: ScheduleItem, tile: bool, amx: bool, dpbf16: bool, tuner) -> Kernel:
    """`lower`'s kernel before a concatenation's pieces are split apart."""
    if item.root.op is Ops.SCATTER_ADD:
        return Lowerer(item, [], []).lower_scatter()
    groups = _merge_loops(item, tile)
    if _step_log.steps is not None:
        what = f"loop nest, loops merged: outputs {groups.out}, sums {groups.red}"
        _step(what, groups.plain())
    if groups.row_stats and tile:  # the CPU cascades a row kernel's long sums; the GPU splits them
        kernel = Lowerer(item, groups.out, groups.red, row_cascade=True).lower()
        return _step("row kernel: each row's long sums cascaded", kernel)
    if tile and not item.siblings and not item.at_source:
        kernel = _on_matrix_units(item, groups, amx, dpbf16)
        if kernel is not None:
            return kernel
    plain = groups.plain()
    chosen = _register_tile(item, groups, plain) if tile else None
    if chosen is not None:
        space = None
        if tuner is not None and not item.siblings:
            space = tuning_space(chosen, item, groups.out, groups.red, plain)
        if space is not None:
            return tuner(space, functools.partial(_lower_tile, item, groups))
        kernel = _lower_tile(item, groups, chosen)
        kernel.tile_note += ": the fixed choice for this CPU"
        return kernel
    return _untiled(item, groups, plain, tile)


@dataclass
class _Groups:
    """The loops a kernel's axes are merged into (`out`, `red`: tuples of axes, one per
    loop), as `_merge_loops` leaves them, with the kernel lowered for each grouping the
    search tried, each once (`lowered`). `merged` and `summed`: the groups where the
    innermost two output (or reduction) groups were merged for a register tile whose
    vectors then cross rows (`_rows_merged`, `_sum_rows_merged`)."""

    item: ScheduleItem
    tile: bool
    out: list
    red: list
    row_stats: bool  # a row kernel: statistics inside an elementwise kernel, loops apart
    merged: list | None = None
    summed: list | None = None
    lowered: dict = field(default_factory=dict)

    def lowered_with(self, out_groups, red_groups) -> Kernel:
        """The plain loop nest with these groups (lowered once per grouping)."""
        key = (tuple(out_groups), tuple(red_groups))
        if key not in self.lowered:
            lowerer = Lowerer(self.item, out_groups, red_groups, one_loop_siblings=self.tile)
            self.lowered[key] = lowerer.lower()
        return self.lowered[key]

    def plain(self) -> Kernel:
        """The plain loop nest with the groups chosen."""
        return self.lowered_with(self.out, self.red)


def _merge_loops(item: ScheduleItem, tile: bool) -> _Groups:
    """The search for the kernel's loops: the reduction axes merged first, with the
    output axes unmerged, then the output axes (`_merge_groups`); a row kernel keeps its
    rows' loops apart. With `tile`, a reduction's innermost two groups may merge for its
    register tile (`_rows_merged`, else `_sum_rows_merged`). The search lowers each
    grouping it scores; the one it ends on is the plain kernel, so each is lowered once."""
    red = item.reduce
    out_axes = [i for i, s in enumerate(item.root.shape) if s != 1]
    red_axes = [a for a in red.arg] if red is not None else []
    row_stats = red is None and any(m.op in REDUCE for m in item.nodes)
    groups = _Groups(item, tile, [(a,) for a in out_axes], [(a,) for a in red_axes], row_stats)
    if len(red_axes) > 1:
        # the sums' axes merge in runs with nothing but axes of size 1 between them: a
        # batch norm's sums over N, H and W of N x C x H x W merge H and W (one loop
        # over each image's plane, long enough for cascaded lanes), never N with them
        summed = red.srcs[0].shape

        def apart(a: int, b: int) -> bool:
            return any(summed[k] != 1 for k in range(a + 1, b))

        groups.red = _merge_groups(
            red_axes, lambda g: _divmod_score(groups.lowered_with(groups.out, g)), apart
        )
        groups.red = _contiguous_inside(groups.plain(), groups.red)
    if len(out_axes) > 1 and not row_stats:  # a row kernel keeps its rows' loops apart
        groups.out = _merge_groups(
            out_axes, lambda g: _divmod_score(groups.lowered_with(g, groups.red))
        )
    if tile and red is not None and not row_stats and not item.siblings:
        groups.merged = _rows_merged(item, groups.out, groups.red, groups.lowered_with)
        if groups.merged is not None:
            groups.out = groups.merged
        else:
            groups.summed = _sum_rows_merged(item, groups.out, groups.red, groups.lowered_with)
            if groups.summed is not None:
                groups.red = groups.summed
    return groups


def _contiguous_inside(plain: Kernel, red_groups: list) -> list:
    """The reduction groups reordered so that the innermost is the one along which the
    largest input is read contiguously, where another is not: a sum over a transposed
    view (the norm of a weight gradient a product stored transposed, `W.T.sum()`) then
    walks memory in order instead of one cache line an element. The order of a sum's
    loops is free (docs/NUMERICS.md: a sum's order is the kernel's); the groups stay
    as they are where the innermost is contiguous already, or no group is."""
    if len(red_groups) < 2:
        return red_groups
    names = [f"r{g}" for g in range(len(red_groups))]
    loads = [s for s in _statements(plain.body) if isinstance(s, Load)]
    if not loads:
        return red_groups
    read = max(loads, key=lambda s: s.param.size)
    steps = {}
    for atom in read.index.atoms():
        if isinstance(atom, Var) and atom.name in names:
            steps[atom.name] = abs(read.index.coef(atom))
    if steps.get(names[-1]) == 1:
        return red_groups
    along = [g for g, name in enumerate(names) if steps.get(name) == 1]
    if not along:
        return red_groups
    g = along[0]
    return [*red_groups[:g], *red_groups[g + 1 :], red_groups[g]]


def _statements(body):
    """Every statement of a loop body, loops entered."""
    for s in body:
        if isinstance(s, Loop):
            yield from _statements(s.body)
        else:
            yield s


def _on_matrix_units(item: ScheduleItem, groups: _Groups, amx: bool, dpbf16: bool):
    """A bfloat16 matmul's kernel on AMX tiles (with `amx`) or `vdpbf16ps` register tiles
    (with `dpbf16`), or None where the kernel is not one they take."""
    if amx:
        kernel = lower_amx(Lowerer(item, groups.out, groups.red), kernel_name(item))
        if kernel is not None:
            return _step("AMX tiles (pipeline/amx.py)", kernel)
    if dpbf16:
        kernel = lower_dpbf16(Lowerer(item, groups.out, groups.red), kernel_name(item))
        if kernel is not None:
            return _step("vdpbf16ps register tiles (pipeline/dpbf16.py)", kernel)
    return None


def _register_tile(item: ScheduleItem, groups: _Groups, plain: Kernel) -> Tile | None:
    """`choose_tile`'s tile for the kernel, where it takes the kernel's sibling reductions
    (`fits_siblings`): else one row of lanes per sum, or None (the plain loop nest, one
    accumulator per sum)."""
    sum_lanes = SUM_MERGED_LANES if groups.summed is not None else None
    chosen = choose_tile(plain, item, groups.out, sum_lanes)
    siblings = len(item.siblings)
    if chosen is not None and siblings and not fits_siblings(chosen, siblings):
        one_row = None if chosen.lanes else Tile(chosen.col, chosen.cols)
        chosen = one_row if one_row is not None and fits_siblings(one_row, siblings) else None
    return chosen


def _lower_tile(item: ScheduleItem, groups: _Groups, t: Tile) -> Kernel:
    """The kernel register-tiled by `t`: a window read through padding has its edge tiles
    guarded and its interior not (`peel_guarded_loops`), and a tile whose vectors cross
    merged rows is unrolled by the rows' period."""
    # (a plan whose sizes vary, without a guarded load: `tile_choice.ragged_rows`)
    shifted = templates.active() and ragged_rows(tile_reads(groups.plain(), item, groups.out))
    tiled = Lowerer(item, groups.out, groups.red, t, shifted_last=shifted).lower()
    _step(f"register tile {tile_text(t)}", tiled)
    kernel = _step("edge tiles peeled", peel_guarded_loops(tiled), tiled)
    merged, summed = groups.merged, groups.summed
    if merged is not None and t.col == len(merged) - 1 and not t.lanes:
        before = kernel
        kernel = unrolled_by_period(kernel, f"o{t.col}", _row_period(item, merged, t))
        _step("unrolled by the row's period", kernel, before)
    if summed is not None and t.lanes:
        period = row_period(t.cols, item.reduce.srcs[0].shape[summed[-1][-1]])
        before = kernel
        kernel = unrolled_by_period(kernel, f"r{len(summed) - 1}", period)
        _step("unrolled by the row's period", kernel, before)
    kernel.tile_note = f"register tile {tile_text(t)}"
    return kernel


def _untiled(item: ScheduleItem, groups: _Groups, plain: Kernel, tile: bool) -> Kernel:
    """A kernel without a register tile: on the CPU (`tile`) a float max in vector lanes,
    a cascaded sum (several rows at once where there are rows enough), or an elementwise
    kernel with its interleave split into phases and its padded edges peeled; on the GPU,
    and for any other reduction, the plain loop nest."""
    out, red = groups.out, groups.red
    if tile and lane_max(plain, item, red):
        kernel = Lowerer(item, out, red, lane_max=True).lower()
        return _step("a max over vector lanes", kernel)
    # cascaded sums are the CPU's (tile=True); the GPU lowering reduces a plain loop over a block
    lanes = cascade_lanes(plain, item) if tile else 0
    if lanes:
        rows = None if item.siblings else cascade_rows(item, out, red)
        if rows is not None:
            row, count = rows
            chosen = Tile(None, lanes, row, count, lanes=True, cascade=True)
            kernel = Lowerer(item, out, red, chosen).lower()
            return _step(f"sums cascaded over {lanes} lanes, {count} rows at once", kernel)
        kernel = Lowerer(item, out, red, cascade_lanes=lanes).lower()
        return _step(f"sums cascaded over {lanes} lanes", kernel)
    if not tile or item.reduce is not None:
        return plain
    # an interleave split into its phases; a padded copy's edges guarded, its interior a
    # plain copy for the CPU's vectorizer
    phased = _step("interleave split into its phases", split_phases(plain), plain)
    digits = _step("loops split into their digits", split_digits(phased), phased)
    return _step("padded output's edges peeled", peel_padded_outputs(digits), digits)


def _rows_merged(item: ScheduleItem, out_groups, red_groups, lowered_with) -> list | None:
    """The output groups with the innermost two merged, where the innermost's vectors
    would be ragged and the merged group's are not, and the register tile then takes its
    lanes along the merged group: a convolution's rows of 56 pixels are 3.5 vectors of 16
    lanes (an eighth of every multiply-add masked off, and where FMA units are 512 bits wide a
    half-empty one costs a full one), where 56 x 56 pixels are 196. Its windows then read each
    vector as at most two contiguous runs (`split_lanes`, `LLVMRenderer.split_load`).
    None where that does not hold (the window reads of another layout would gather)."""
    if len(out_groups) < 2 or not tile_choice.wide_registers():
        return None
    shape = item.root.shape
    inner = math.prod(shape[a] for a in out_groups[-1])
    outer = math.prod(shape[a] for a in out_groups[-2])
    if not rows_merge(inner):  # (nn/conv.py asks the same of a convolution's rows)
        return None
    candidate = [*out_groups[:-2], out_groups[-2] + out_groups[-1]]
    plain = lowered_with(candidate, red_groups)
    chosen = choose_tile(plain, item, candidate)
    if (
        chosen is None
        or chosen.lanes
        or chosen.col != len(candidate) - 1
        or (inner * outer) % math.lcm(chosen.cols, inner)
        or row_period(chosen.cols, inner) > MAX_ROW_PERIOD
    ):
        return None
    # (a matmul's left operand over merged rows would be a gather: `A[p // 56, k]`)
    col = Var(f"o{chosen.col}", 0, inner * outer - 1)
    return candidate if _lanes_read_runs(plain, col, chosen.cols) else None


def _sum_rows_merged(item: ScheduleItem, out_groups, red_groups, lowered_with) -> list | None:
    """The reduction groups with the innermost two merged, as `_rows_merged` merges output
    groups, for a tile whose lanes run along the sum (a convolution's weight gradient,
    summed over the pixels of 56-pixel rows: 3.5 vectors of 16 lanes a row, 98 of 32 over
    the merged image), under the same conditions: the merged sum a whole number of repeats
    of the row pattern, and every load that moves with the lanes one run or two."""
    if len(red_groups) < 2 or not tile_choice.wide_registers():
        return None
    src = item.reduce.srcs[0].shape
    inner = math.prod(src[a] for a in red_groups[-1])
    outer = math.prod(src[a] for a in red_groups[-2])
    if not rows_merge(inner):
        return None
    candidate = [*red_groups[:-2], red_groups[-2] + red_groups[-1]]
    plain = lowered_with(out_groups, candidate)
    chosen = choose_tile(plain, item, out_groups, SUM_MERGED_LANES)
    extent = inner * outer
    if (
        chosen is None
        or not chosen.lanes
        or extent % math.lcm(chosen.cols, inner)
        or row_period(chosen.cols, inner) > MAX_ROW_PERIOD
    ):
        return None
    red = Var(f"r{len(candidate) - 1}", 0, extent - 1)
    return candidate if _lanes_read_runs(plain, red, chosen.cols) else None


def _lanes_read_runs(plain: Kernel, var: Var, lanes: int) -> bool:
    """Whether, with `var` split into tiles of `lanes` lanes, every load of `plain` that
    moves with the lanes reads them as one contiguous run or two (`split_lanes`), and
    every store as one run (a store is never split)."""
    q, t = Var("q", 0, (var.max + 1) // lanes - 1), Var("t", 0, lanes - 1)

    def walk(body):
        for s in body:
            if isinstance(s, Loop):
                yield from walk(s.body)
            elif isinstance(s, (Load, Store)) and var in s.index.atoms():
                yield s

    for s in walk(plain.body):
        index = s.index.substitute({var: lin(q) * lanes + t})
        contiguous = index.coef(t) == 1 and t not in (index - lin(t)).atoms()
        if not contiguous and not (isinstance(s, Load) and split_lanes(index, t, lanes)):
            return False
    return True


def _row_period(item: ScheduleItem, groups, t: Tile) -> int:
    """Tiles of `t.cols` lanes along a merged (row, column) group after which the pattern
    of vectors crossing a row repeats: lcm(cols, row) / cols (7 for 32 lanes over 56)."""
    return row_period(t.cols, item.root.shape[groups[t.col][-1]])
