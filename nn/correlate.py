"""The correlation that convolutions and transposed convolutions are built on, and the
argument and padding helpers both share (nn/conv.py, nn/conv_transpose.py).

>>> import fusegrad as fg
>>> from fusegrad.nn.correlate import correlate
>>> correlate(fg.ones(1, 1, 4), fg.ones(1, 1, 2), [(0, 0)], (1,), (1,), 1, "conv1d").tolist()
[[[2.0, 2.0, 2.0]]]
"""

from __future__ import annotations

from ..nnapi import (
    ShapeError,
    Tensor,
    fail,
    guards_windows_in_tiles,
    materialize,
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
    x = padded(x, pads, op)
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


def padded(x: Tensor, pads, op: str) -> Tensor:
    """x padded for a convolution, materialized on the CPU: every element is read by
    kernel-size windows, and one padded copy costs less than bounds checks on every read.
    On the GPU the contraction's tiles check the bounds once per element they stage in
    shared memory (codegen/gpu.py), which costs less than the copy's round trip."""
    flat_pad = [v for before, after in reversed(pads) for v in (before, after)]
    if not any(flat_pad):
        return x
    x = x.pad(flat_pad)
    if any(v < 0 for v in flat_pad) or guards_windows_in_tiles(x.node.device):  # a crop: a view
        return x
    return materialize(x, f"{op}: padded input, so windows read it unguarded")


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
