"""The correlation that convolutions and transposed convolutions are built on, the
argument and padding helpers both share (nn/conv.py, nn/conv_transpose.py), and the two
forms a strided one takes on the CPU: its windows gathered (`gather_windows`, im2col) for
the forward at a stride the vector loads do not read in place (past 4), and its transposed
convolution phase by phase (`transposed_by_phases`).

>>> import fusegrad as fg
>>> from fusegrad.nn.correlate import correlate
>>> correlate(fg.ones(1, 1, 4), fg.ones(1, 1, 2), [(0, 0)], (1,), (1,), 1, "conv1d").tolist()
[[[2.0, 2.0, 2.0]]]
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..nnapi import (
    ShapeError,
    Tensor,
    composite,
    expansion_layout,
    fail,
    materialize,
    reads_out_of_order,
    reads_stored_values,
    register_composite,
    sliding_windows,
    stack,
    zeros,
)


def int_tuple(v, n: int, name: str, op: str) -> tuple[int, ...]:
    """`v` as n ints (an int is repeated): a stride, padding or kernel size argument."""
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(a) for a in v)
    if len(v) != n:
        fail(ShapeError, op, f"{name} must be an int or {n} ints, got {v}")
    return v


def correlate(
    x: Tensor, weight: Tensor, pads, stride, dilation, groups: int, op: str, keepdim=False
) -> Tensor:
    """sum over (Cin/G, kernel) of windows(pad(x)) * weight: the convolution itself
    ((N, Cout, *out); with `keepdim`, the sum itself, (N, G, Cout/G, 1, *out, *1))."""
    n = len(pads)
    batch, cin = x.shape[:2]
    cout, cin_g = weight.shape[:2]
    kernel = weight.shape[2:]
    reads = window_reads(weight.shape, stride, groups)
    in_place = pads_in_place(x, weight.shape, groups)
    x = padded(x, pads, op, reads, in_place=in_place, lane_stride=stride[-1])
    win = sliding_windows(x, kernel, stride, dilation)  # (N, Cin, *out, *kernel)
    outs = win.shape[2 : 2 + n]
    g, cout_g = groups, cout // groups
    # (N, G, 1, Cin/G, *out, *kernel) * (1, G, Cout/G, Cin/G, *1, *kernel),
    # summed over Cin/G and the kernel axes
    win = win.reshape(batch, g, 1, cin_g, *outs, *kernel)
    w = weight.reshape(1, g, cout_g, cin_g, *([1] * n), *kernel)
    axes = (3,) + tuple(range(4 + n, 4 + 2 * n))
    total = (win * w).sum(axes, keepdim=True)
    return total if keepdim else total.reshape(batch, cout, *outs)


def correlated_shape(total: Tensor, groups: int) -> tuple[int, ...]:
    """(N, Cout, *out) of a keepdim `correlate` sum (N, G, Cout/G, 1, *out, *1)."""
    n = (total.ndim - 4) // 2
    return (total.shape[0], groups * total.shape[2], *total.shape[4 : 4 + n])


# A copy reads and writes each element once; below this many reads of each element by
# the windows, reading the view in place costs no more than copying it first.
COPY_PAYS_FROM_READS = 2


def window_reads(w_shape, stride, groups: int) -> float:
    """About how many times a convolution's windows read each input element: once per
    output channel of its group and kernel position, over the stride's skips."""
    reads = w_shape[0] // groups
    for k, s in zip(w_shape[2:], stride):
        reads *= k / s
    return reads


def pads_in_place(x: Tensor, w_shape, groups: int) -> bool:
    """Whether a correlation of `x` with a weight of `w_shape` in `groups` groups reads its
    padding in place, through bounds tests, rather than from a padded copy: where there are
    several groups of one input channel each (a depthwise convolution, and its input
    gradient at channel multiplier 1) and `x` is stored values read in order
    (`reads_stored_values`). Such a correlation is no GEMM: it moves its input and output
    once and multiplies 9 times per element for a 3x3, so a padded copy is a second pass
    over memory about as long as the convolution (the forward of 32x64x56x56 by 3x3 took
    2.5x a copy's time with it, 1.15x without). Its tiles test bounds only at the edges
    (`pipeline/peel.py` peels them off the interior). An elementwise input (an activation
    not stored) keeps its copy, computed there once rather than again at every tap; so does
    a single-channel image under one group (LeNet's first layer: six filters of 25 taps
    over 28-pixel rows, all of its tiles at an edge, measured 3% slower in place).

    >>> import fusegrad as fg
    >>> x, depthwise = fg.randn(1, 4, 8, 8).realize(), (4, 1, 3, 3)
    >>> pads_in_place(x, depthwise, 4), pads_in_place(x, (4, 2, 3, 3), 2)
    (True, False)
    >>> pads_in_place(x + 1, depthwise, 4), pads_in_place(x[:, :1], (6, 1, 5, 5), 1)
    (False, False)
    """
    return groups > 1 and w_shape[1] == 1 and reads_stored_values(x)


def padded(
    x: Tensor, pads, op: str, reads: float, in_place: bool = False, lane_stride: int = 1
) -> Tensor:
    """x padded for a convolution, materialized where the layout the plan is compiled for
    copies padding (ir/layout.py `copy_padding`: the CPU's): every element is read by
    kernel-size windows (`reads` times), and one padded copy costs less than bounds checks
    on every read. An unpadded input that is a view reordering its source (the user's
    permute or F.pad: (B, L, D) word vectors permuted to (B, D, L)) is copied too, by the
    same cost: read in place, its windows are strided or guarded and the contraction
    loses its vector tiles (a sentiment CNN's conv1d ran as a scalar loop).
    On the GPU the contraction's tiles check the bounds once per element they stage in
    shared memory (pipeline/gpu.py), which costs less than the copy's round trip. With
    `in_place` (`pads_in_place`) the padding is a view on the CPU too.
    Where the windows step `lane_stride` > 1 along the last axis (the lanes' axis), the copy
    splits that axis into its stride phases (`_phase_split`): the same one pass, and the
    windows then read it at stride 1."""
    flat_pad = [v for before, after in reversed(pads) for v in (before, after)]
    if any(flat_pad):
        x = x.pad(flat_pad)
    if any(v < 0 for v in flat_pad) or not expansion_layout().copy_padding:  # a crop: a view
        return x
    if in_place:
        return x
    copy = any(flat_pad) or (reads >= COPY_PAYS_FROM_READS and reads_out_of_order(x))
    if copy and lane_stride > 1:
        return _phase_split(x, lane_stride, op)
    if any(flat_pad):
        return materialize(x, f"{op}: padded input, so windows read it unguarded")
    if reads >= COPY_PAYS_FROM_READS and reads_out_of_order(x):
        return materialize(x, f"{op}: input read through a permute, pad or flip, copied in order")
    return x


def _phase_split(x: Tensor, s: int, op: str) -> Tensor:
    """x, copied with its last axis split into its s phases (element w stored at phase
    w % s, place w // s), and seen again through a view as x. A window at stride s reads
    element s * o + t, which the view finds at phase t % s, place o + t // s: consecutive
    outputs o read consecutive places, so a strided convolution's tiles load whole vectors
    (no shuffle), and the copy is the one the padding makes anyway. (3x3 at stride 2,
    32x64x56^2 -> 128, alternating in one process with the shuffled loads of the plain
    padded copy, load ~2: forward 1.15 and 1.32 of the sgemm against 1.04 and 1.11,
    weight gradient 0.81 and 0.89 against 0.82 and 0.84, forward + backward 0.97 and 0.90
    against 0.82 and 0.86.)

    >>> import fusegrad as fg
    >>> _phase_split(fg.arange(5.0).reshape(1, 5), 2, "conv1d").tolist()
    [[0.0, 1.0, 2.0, 3.0, 4.0]]
    """
    w = x.shape[-1]
    wq = -(-w // s)
    if wq * s != w:
        x = x.pad([0, wq * s - w])
    lead = x.shape[:-1]
    split = x.reshape(*lead, wq, s).transpose(-1, -2)
    copy = materialize(split, f"{op}: padded input split into stride phases, read at stride 1")
    whole = copy.transpose(-1, -2).reshape(*lead, wq * s)
    return whole if wq * s == w else whole[..., :w]


def dilate(t: Tensor, stride, n: int) -> Tensor:
    """Insert stride-1 zeros between the elements of the last n axes."""
    if all(s == 1 for s in stride):
        return t
    lead = t.shape[: t.ndim - n]
    sizes = t.shape[t.ndim - n :]
    t = t.reshape(*lead, *[v for o in sizes for v in (o, 1)])
    t = t.pad([v for s in reversed(stride) for v in (0, s - 1, 0, 0)])
    t = t.reshape(*lead, *[o * s for o, s in zip(sizes, stride)])
    return t[
        (slice(None),) * len(lead) + tuple(slice(0, (o - 1) * s + 1) for o, s in zip(sizes, stride))
    ]


def transposed_by_phases(
    g: Tensor, weight: Tensor, in_shape, pads, stride, dilation, groups: int, op: str
) -> Tensor:
    """The input gradient of a strided convolution (its transposed convolution), one
    stride-1 correlation per phase of the input with exactly that phase's taps
    (`_phases_composed`), as one macro node where g and the weight share a dtype: its
    hundred-odd nodes (slices, flips, pads, the phases' correlations, the interleave) cost
    1.1-1.3 ms of Python to build in every call, and a call whose plan is cached never
    expands it (ir/macro.py).

    >>> import fusegrad as fg
    >>> transposed_by_phases(fg.ones(1, 1, 2), fg.ones(1, 1, 3), (1, 1, 4), [(1, 1)], (2,),
    ...                      (1,), 1, "conv1d").tolist()
    [[[1.0, 2.0, 1.0, 1.0]]]
    """
    params = (
        tuple(in_shape),
        tuple(tuple(p) for p in pads),
        tuple(stride),
        tuple(dilation),
        groups,
        op,
    )
    if g.dtype is not weight.dtype:
        return _phases_composed([g, weight], params)
    return composite("transposed_by_phases", [g, weight], params, tuple(in_shape), g.dtype)


def _phases_composed(tensors, params) -> Tensor:
    """`transposed_by_phases` in primitives: see there and `_transposed_by_phases`."""
    g, weight = tensors
    return _transposed_by_phases(g, weight, *params)


def _transposed_by_phases(
    g: Tensor, weight: Tensor, in_shape, pads, stride, dilation, groups: int, op: str
) -> Tensor:
    """The input gradient of a strided convolution (its transposed convolution), one
    stride-1 correlation per phase of the input with exactly that phase's taps.

    Along an axis of stride s and dilation d, tap t of output o reads the padded input at
    u = s * o + d * t; with d * t = s * m + r, tap t reaches only the input phase
    u = r (mod s), at u = s * (o + m) + r. So phase r's gradient at s * a + r is the
    output gradient at a - m correlated with the taps t whose d * t leaves r, m rising
    by d / gcd(d, s) from tap to tap: a correlation with that dilation over a window of
    the output gradient, no zeros inserted between its elements, no zero taps (a phase no
    tap reaches is zero). One padded copy of the gradient serves every phase (each reads
    a slice of it); the phases are interleaved and cropped to the input in one copy.
    """
    n = len(pads)
    batch, cin = in_shape[:2]
    cout, cin_g = weight.shape[:2]
    kernel = weight.shape[2:]
    cout_g = cout // groups
    # the transposed weight: (Cin, Cout/G, *kernel), each group's block transposed
    wt = weight.reshape(groups, cout_g, cin_g, *kernel).transpose(1, 2)
    wt = wt.reshape(cin, cout_g, *kernel)
    axes = [
        [_AxisPhase.of(r, k, s, d, i, before) for r in range(s)]
        for i, (before, _), k, s, d in zip(in_shape[2:], pads, kernel, stride, dilation)
    ]
    # one copy of g padded for every phase: phase r's window a reads g from
    # a + shift - m0 - reach
    lead = [max(p.m0 + p.reach for p in phases) for phases in axes]
    trail = [
        max(0, *(p.shift + p.length - p.m0 - o for p in phases))
        for phases, o in zip(axes, g.shape[2:])
    ]
    gp = padded(g, list(zip(lead, trail)), op, window_reads(wt.shape, (1,) * n, groups))
    longest = [phases[0].length for phases in axes]  # phase 0 is the longest
    parts = []
    for picks in itertools.product(*axes):  # the last axis' phase varying fastest
        if any(p.taps == 0 or p.length <= 0 for p in picks):  # no tap reaches this phase
            parts.append(zeros(batch, cin, *longest, dtype=g.dtype, device=g.device))
            continue
        window = tuple(
            slice(lo + p.shift - p.m0 - p.reach, lo + p.shift - p.m0 + p.length)
            for lo, p in zip(lead, picks)
        )
        taps = tuple(slice(p.first, p.first + p.step * (p.taps - 1) + 1, p.step) for p in picks)
        wp = wt[(slice(None), slice(None), *taps)].flip(tuple(range(2, 2 + n)))
        if expansion_layout().pack_panels:
            # read in place, a tile's rows of the phase's weight lie 9 floats apart and
            # each row's taps far apart (a 3x3 stride-2 weight's phase); copied (a few KB),
            # each row is contiguous: the 32x64x56^2 -> 128 input gradient's four phase
            # kernels 17.0-17.4 -> 14.6 ms, the call 19.9-20.4 -> 17.6-17.9 ms on Zen 5
            wp = materialize(wp, f"{op}: the phase's flipped weight, its rows contiguous")
        dils = tuple(p.m_step for p in picks)
        part = correlate(
            gp[(slice(None), slice(None), *window)], wp, [(0, 0)] * n, (1,) * n, dils, groups, op
        )
        grow = [
            v for p, top in zip(reversed(picks), reversed(longest)) for v in (0, top - p.length)
        ]
        parts.append(part.pad(grow) if any(grow) else part)
    # (N, Cin, *longest, *stride) -> (N, Cin, longest_1 * s_1, ...), cut to the input: the
    # phases are the input's own (not the padded input's), so where the stride divides the
    # input the interleave is a plain reshape of the stack, whose copy indexes by shifts
    # and masks (3.4x a copy's time with the padding's offset in it, 1.3x without)
    mixed = stack(parts, -1).reshape(batch, cin, *longest, *stride)
    mixed = mixed.permute(0, 1, *(v for a in range(n) for v in (2 + a, 2 + n + a)))
    mixed = mixed.reshape(batch, cin, *(a * s for a, s in zip(longest, stride)))
    if mixed.shape[2:] == tuple(in_shape[2:]):
        return mixed
    return mixed[(slice(None), slice(None), *(slice(0, i) for i in in_shape[2:]))]


register_composite("transposed_by_phases", _phases_composed)


@dataclass(frozen=True)
class _AxisPhase:
    """Phase r of one axis of a strided convolution's input (its positions s * a + r,
    a < `length`; at s * (a + shift) + (r + before) % s in the padded input): the taps
    that reach it (`taps` of them, from tap `first` every `step`), the output offset m0 of
    the first (its tap t reads the padded input at s * (o + m) + (r + before) % s with
    d * t = s * m + (r + before) % s), and m's rise `m_step` from tap to tap."""

    first: int
    step: int
    taps: int
    m0: int
    m_step: int
    length: int
    shift: int

    @property
    def reach(self) -> int:
        """How far the phase's taps reach back in the output gradient past m0."""
        return self.m_step * max(self.taps - 1, 0)

    @staticmethod
    def of(r: int, k: int, s: int, d: int, size: int, before: int) -> _AxisPhase:
        """Phase r of an axis of `size` inputs, `before` of padding, kernel k, stride s,
        dilation d."""
        padded_r, shift = (r + before) % s, (r + before) // s
        step = s // math.gcd(d, s)
        first = next((t for t in range(min(k, step)) if d * t % s == padded_r), 0)
        taps = len(range(first, k, step)) if d * first % s == padded_r else 0
        length = -(-(size - r) // s)
        return _AxisPhase(first, step, taps, d * first // s, d * step // s, length, shift)


def gather_windows(x: Tensor, weight: Tensor, pads, stride, dilation, op: str):
    """A strided convolution as a 1x1 one: the padded input's windows gathered into
    channels (im2col: a copy, channel c's tap t becoming channel c * K + t for the K taps
    of the kernel, in row-major order), the weight flattened likewise (a view).

    Read in place at stride s, the windows walk the vector lanes with a stride: up to 4
    the lanes load them as shuffled vectors (pipeline/llvm.py) and no copy is made
    (`gather_pays`, nn/conv.py); beyond, each vector would be a gather (a 3x3 stride-2
    convolution ran at 0.09 of the sgemm's GFLOP/s that way); the copy is a plain GEMM
    operand, every output pixel's K taps of each channel, so the multiply-adds are the
    useful ones, no zero taps, and the contraction runs on whole rows of output pixels. It
    costs K / prod(stride) of the padded input (9/4 for a 3x3 at stride 2); the weight
    gradient reads the same copy.

    >>> import fusegrad as fg
    >>> cols, wc = gather_windows(fg.arange(5.0).reshape(1, 1, 5), fg.ones(1, 1, 3),
    ...                           [(1, 1)], (2,), (1,), "conv1d")
    >>> cols.tolist(), wc.shape
    ([[[0.0, 1.0, 3.0], [0.0, 2.0, 4.0], [1.0, 3.0, 0.0]]], (1, 3, 1))
    """
    n = len(pads)
    batch, cin = x.shape[:2]
    cout, cin_g = weight.shape[:2]
    kernel = weight.shape[2:]
    flat = [v for before, after in reversed(pads) for v in (before, after)]
    xp = x.pad(flat) if any(flat) else x
    win = sliding_windows(xp, kernel, stride, dilation)  # (N, C, *outs, *kernel)
    outs = win.shape[2 : 2 + n]
    win = win.permute(0, 1, *range(2 + n, 2 + 2 * n), *range(2, 2 + n))
    cols = materialize(
        win.reshape(batch, cin * math.prod(kernel), *outs),
        f"{op}: strided windows gathered (im2col), so the contraction reads them at stride 1",
    )
    return cols, weight.reshape(cout, cin_g * math.prod(kernel), *([1] * n))
