"""The correlation that convolutions and transposed convolutions are built on, and the
argument and padding helpers both share (nn/conv.py, nn/conv_transpose.py).

>>> import fusegrad as fg
>>> from fusegrad.nn.correlate import correlate
>>> correlate(fg.ones(1, 1, 4), fg.ones(1, 1, 2), [(0, 0)], (1,), (1,), 1, "conv1d").tolist()
[[[2.0, 2.0, 2.0]]]
"""

from __future__ import annotations

import math

from ..nnapi import (
    ShapeError,
    Tensor,
    fail,
    guards_windows_in_tiles,
    materialize,
    reads_out_of_order,
    sliding_windows,
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
    x = padded(x, pads, op, window_reads(weight.shape, stride, groups))
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


def padded(x: Tensor, pads, op: str, reads: float) -> Tensor:
    """x padded for a convolution, materialized on the CPU: every element is read by
    kernel-size windows (`reads` times), and one padded copy costs less than bounds checks
    on every read. An unpadded input that is a view reordering its source (the user's
    permute or F.pad: (B, L, D) word vectors permuted to (B, D, L)) is copied too, by the
    same cost: read in place, its windows are strided or guarded and the contraction
    loses its vector tiles (a sentiment CNN's conv1d ran as a scalar loop).
    On the GPU the contraction's tiles check the bounds once per element they stage in
    shared memory (codegen/gpu.py), which costs less than the copy's round trip."""
    flat_pad = [v for before, after in reversed(pads) for v in (before, after)]
    if any(flat_pad):
        x = x.pad(flat_pad)
    if any(v < 0 for v in flat_pad) or guards_windows_in_tiles(x.node.device):  # a crop: a view
        return x
    if any(flat_pad):
        return materialize(x, f"{op}: padded input, so windows read it unguarded")
    if reads >= COPY_PAYS_FROM_READS and reads_out_of_order(x):
        return materialize(x, f"{op}: input read through a permute, pad or flip, copied in order")
    return x


def split_phases(x: Tensor, weight: Tensor, pads, stride, op: str) -> tuple[Tensor, Tensor]:
    """A strided convolution as a stride-1 one: the padded input split into its stride
    phases (a copy, channel c's phase p becoming channel c * P + p), the weight's taps
    likewise (also a copy), zero taps added where the kernel is not a multiple of the stride.

    Along an axis of stride s and kernel k, tap i = s * a + p reads the padded input at
    s * (o + a) + p: phase p of the input at o + a, a stride-1 window of ceil(k / s) taps
    over that phase. Only the first min(s, k) phases are kept (a 1x1 kernel at stride 2
    reads phase 0 only: the copy is a subsample). Read in place at stride s, the windows
    walk the vector lanes with a stride and the contraction loses its tiles (a 3x3
    stride-2 convolution ran at 0.09 of the sgemm's GFLOP/s); at stride 1 it keeps them,
    for ceil(k / s) * min(s, k) / k of the FLOPs (4/3 per axis for k = 3, s = 2).
    The gradients are the stride-1 convolution's (no zeros inserted between the
    gradient's elements) and the copy's (a view back).

    >>> import fusegrad as fg
    >>> xph, wph = split_phases(fg.ones(1, 1, 5), fg.ones(1, 1, 3), [(1, 1)], (2,), "conv1d")
    >>> xph.shape, wph.shape, wph.tolist()
    ((1, 2, 4), (1, 2, 2), [[[1.0, 1.0], [1.0, 0.0]]])
    """
    n = len(pads)
    batch, cin = x.shape[:2]
    cout, cin_g = weight.shape[:2]
    kernel = weight.shape[2:]
    sizes = x.shape[2:]
    outs = [(i + b + a - k) // s + 1 for i, (b, a), k, s in zip(sizes, pads, kernel, stride)]
    taps = [-(-k // s) for k, s in zip(kernel, stride)]
    phases = [min(s, k) for k, s in zip(kernel, stride)]
    span = [o + a - 1 for o, a in zip(outs, taps)]
    # the padded input cut or extended to s * span along each axis (F.pad's order)
    flat = []
    for i, (b, _), s, h in zip(reversed(sizes), reversed(pads), reversed(stride), reversed(span)):
        flat += [b, s * h - i - b]
    pairs = [v for h, s in zip(span, stride) for v in (h, s)]
    keep = (slice(None),) * 2 + tuple(v for p in phases for v in (slice(None), slice(0, p)))
    order = (0, 1, *range(3, 2 + 2 * n, 2), *range(2, 2 + 2 * n, 2))
    xp = x.pad(flat).reshape(batch, cin, *pairs)[keep].permute(*order)
    xph = materialize(
        xp.reshape(batch, cin * math.prod(phases), *span),
        f"{op}: strided input split into its phases, so windows read it at stride 1",
    )
    flat = [
        v
        for k, s, a in zip(reversed(kernel), reversed(stride), reversed(taps))
        for v in (0, s * a - k)
    ]
    pairs = [v for a, s in zip(taps, stride) for v in (a, s)]
    wp = weight.pad(flat).reshape(cout, cin_g, *pairs)[keep].permute(*order)
    # the weight is small: a copy keeps the phase arithmetic and the zero taps' bounds
    # tests out of the contraction's inner loop
    wph = materialize(
        wp.reshape(cout, cin_g * math.prod(phases), *taps), f"{op}: weight taps split into phases"
    )
    return xph, wph


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
