"""Convolutions and pooling as graph builders: sliding-window views plus one reduction.

A convolution is the windows of the (padded) input times the weight, summed
over input channels and kernel positions; pooling is the windows reduced by
max or mean. The windows are a view (`fusegrad.movement.sliding_windows`), so
the scheduler sees one multiply-and-sum and emits one register-tiled kernel,
with bias and activation fused after it; gradients come from the primitives'
rules.

>>> import fusegrad as fg
>>> from fusegrad.nn.conv import conv2d
>>> x, w = fg.ones(1, 1, 4, 4), fg.ones(2, 1, 3, 3)
>>> conv2d(x, w, padding=1)[0, 0].tolist()[0]
[4.0, 6.0, 6.0, 4.0]
"""

from __future__ import annotations

import math

import numpy as np

from ..nnapi import (
    PANEL_CACHE_BYTES,
    SHUFFLED_LANE_STEPS,
    DTypeError,
    ShapeError,
    Tensor,
    autocast_op,
    composite,
    custom_gradient,
    expansion_layout,
    fail,
    gradient_wanted,
    materialize,
    one_site,
    ones,
    register_composite,
    rows_merge,
    sliding_windows,
    where,
)
from ..nnapi import index_arange as arange
from . import init
from .correlate import (
    COPY_PAYS_FROM_READS,
    correlate,
    correlated_shape,
    dilate,
    gather_windows,
    int_tuple,
    padded,
    pads_in_place,
    transposed_by_phases,
    window_reads,
)
from .fold import add_blocks
from .module import Module, place, placeholder_parameter
from .padding import pad


def _same_padding(kernel, dilation) -> list[tuple[int, int]]:
    """PyTorch's padding='same' (stride 1): extra padding goes after, as PyTorch puts it."""
    out = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        out.append((total // 2, total - total // 2))
    return out


def convnd(
    x: Tensor, weight: Tensor, bias, stride, padding, dilation, groups: int, n: int, op: str
) -> Tensor:
    if x.ndim not in (n + 1, n + 2):
        fail(
            ShapeError,
            op,
            f"expected a {n + 2}-D (batched) or {n + 1}-D input, got shape {x.shape}",
        )
    if x.ndim == n + 1:
        return convnd(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups, n, op)[0]
    if weight.ndim != n + 2:
        fail(
            ShapeError,
            op,
            f"weight must be {n + 2}-D (out, in/groups, *kernel), got {weight.shape}",
        )
    if x.dtype is not weight.dtype:
        fail(DTypeError, op, f"input is {x.dtype.name} but weight is {weight.dtype.name}")
    batch, cin = x.shape[:2]
    cout, cin_g = weight.shape[:2]
    kernel = weight.shape[2:]
    if groups < 1 or cin % groups or cout % groups:
        fail(
            ShapeError, op, f"groups={groups} must divide in_channels={cin} and out_channels={cout}"
        )
    if cin_g * groups != cin:
        fail(
            ShapeError,
            op,
            f"input has {cin} channels but weight {weight.shape} expects "
            f"{cin_g * groups} (= {cin_g} x groups {groups})",
        )
    stride = int_tuple(stride, n, "stride", op)
    dilation = int_tuple(dilation, n, "dilation", op)
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * n
        elif padding == "same":
            if any(s != 1 for s in stride):
                fail(ShapeError, op, "padding='same' is not supported for strided convolutions")
            pads = _same_padding(kernel, dilation)
        else:
            fail(
                ShapeError,
                op,
                f"padding must be 'valid', 'same', an int or a tuple, got {padding!r}",
            )
    else:
        pads = [(p, p) for p in int_tuple(padding, n, "padding", op)]
    if bias is not None and bias.shape != (cout,):
        fail(ShapeError, op, f"bias must have shape ({cout},), got {bias.shape}")
    tensors = [x, weight] + ([] if bias is None else [bias])
    # (whether the input's gradient is wanted: the backward shares a padded copy only then)
    params = (tuple(pads), stride, dilation, groups, n, op, x.requires_grad)
    spatial = output_sizes(x.shape[2:], pads, kernel, stride, dilation)
    if all(o > 0 for o in spatial) and all(t.dtype is x.dtype for t in tensors):
        # every layer of a convolutional network, every step: one macro node, not 17-29
        return composite("conv", tensors, params, (batch, cout, *spatial), x.dtype)
    return _conv(tensors, params)


def _conv(tensors: list, params: tuple) -> Tensor:
    """`convnd` composed, on checked arguments: [x, weight(, bias)] and (the padding pairs,
    stride, dilation, groups, n, the op's name, whether x's gradient is wanted)."""
    x, weight = tensors[:2]
    bias = tensors[2] if len(tensors) > 2 else None
    pads, stride, dilation, groups, n, op, wants_dx = params
    pads = list(pads)
    cout = weight.shape[0]
    if pixel_gemm_pays(x, weight, pads, stride, dilation, groups):
        out = _conv_as_gemm(x, weight, pads, stride, dilation, op)
        return out if bias is None else out + bias.reshape(1, cout, *([1] * n))
    geometry = (x.shape, weight.shape, pads, stride, dilation, groups, wants_dx)
    gathered = gather_pays(x, weight, pads, stride, dilation, groups)
    if gathered:
        cols, wc = gather_windows(x, weight, pads, stride, dilation, op)
        total = correlate(cols, wc, [(0, 0)] * n, (1,) * n, (1,) * n, groups, op, keepdim=True)
    else:
        # the rule sits on the reduction (keepdim): a view around it could be folded away
        total = correlate(x, weight, pads, stride, dilation, groups, op, keepdim=True)
    out_shape = correlated_shape(total, groups)
    total = custom_gradient(
        total,
        [x, weight],
        lambda g, x, w: conv_vjp(
            g.reshape(out_shape),
            x,
            w,
            geometry,
            op,
            gathered,
            (gradient_wanted(x), gradient_wanted(w)),
        ),
        same_rule=True,  # an equal reduction is this convolution's
    )
    out = total.reshape(out_shape)
    if bias is not None:
        out = out + bias.reshape(1, cout, *([1] * n))
    return out


register_composite("conv", _conv)


# A convolution whose output rows are shorter than a vector register of float32 lanes
# (CHANNEL_LANES) and whose windows hold at least this many values (input channels x
# taps), or whose kernel is 1x1, runs as sgemms over its windows gathered pixel by pixel
# (`_conv_as_gemm`).
PIXEL_GEMM_MIN_DEPTH = 256


def pixel_gemm_pays(x: Tensor, weight: Tensor, pads, stride, dilation, groups: int) -> bool:
    """Whether a convolution runs as sgemms over its windows gathered pixel by pixel
    (`_conv_as_gemm`): where the layout it is expanded for copies padding (the CPU's;
    a device whose tiles stage their own windows, the GPU, never), 2-D, float32, one
    group, whole registers of output channels, output rows shorter than a register's
    lanes and windows of at least PIXEL_GEMM_MIN_DEPTH values, or of a 1x1 kernel (whose
    gathered windows are its pixels, no larger than its input): the late layers of a
    ResNet (512 channels over 4 x 4 pixels) and its strided shortcuts. There the
    correlation's tiles, whose lanes walk an output row, leave most lanes idle: the
    forward, input-gradient and weight-gradient kernels run far below the sgemm's rate, and
    a 1x1 shortcut fused with the batch norm and residual before it recomputes them for
    each output channel.

    >>> import fusegrad as fg
    >>> from fusegrad.ir.layout import Layout, using
    >>> w = fg.ones(512, 512, 3, 3)
    >>> with using(Layout(copy_padding=True)):  # (the CPU's, as `compile_plan` expands)
    ...     [pixel_gemm_pays(fg.ones(16, 512, s, s), w, [(1, 1)] * 2, (1, 1), (1, 1), 1)
    ...      for s in (4, 8, 16)]
    [True, True, False]
    """
    n = len(pads)
    if n != 2 or groups != 1 or not expansion_layout().copy_padding:
        return False
    if x.dtype.name != "float32" or weight.shape[0] % CHANNEL_LANES:
        return False
    kernel = weight.shape[2:]
    outs = output_sizes(x.shape[2:], pads, kernel, stride, dilation)
    if any(o <= 0 for o in outs) or 0 in x.shape:
        return False
    depth = weight.shape[1] * math.prod(kernel)
    pointwise = all(k == 1 for k in kernel)  # (its windows are its pixels: no copy grows)
    return outs[-1] < CHANNEL_LANES and (depth >= PIXEL_GEMM_MIN_DEPTH or pointwise)


def _pixel_columns(x: Tensor, w_shape, pads, stride, dilation, op: str) -> Tensor:
    """The padded input's windows, one row per output pixel (batch-major), one column per
    (input channel, tap): (N * prod(outs), C * K), stored (im2col, pixel by pixel). The
    forward's sgemm and the weight gradient's read the same rows: built again from the same
    input, it is the same node, so the same buffer."""
    n = len(pads)
    batch, cin = x.shape[:2]
    flat = [v for before, after in reversed(pads) for v in (before, after)]
    xp = x.pad(flat) if any(flat) else x
    win = sliding_windows(xp, w_shape[2:], stride, dilation)  # (N, C, *outs, *kernel)
    outs = win.shape[2 : 2 + n]
    win = win.permute(0, *range(2, 2 + n), 1, *range(2 + n, 2 + 2 * n))
    rows = win.reshape(batch * math.prod(outs), cin * math.prod(w_shape[2:]))
    return materialize(rows, f"{op}: windows gathered pixel by pixel (im2col), an sgemm operand")


def _columns_to_image(cols: Tensor, x_shape, w_shape, pads, stride, dilation) -> Tensor:
    """The adjoint of `_pixel_columns` (col2im): the rows (N * prod(outs), C * K) summed
    back into the padded input (`add_blocks`, F.fold's sum), then the padding cut."""
    batch, cin = x_shape[:2]
    spatial = x_shape[2:]
    outs = output_sizes(spatial, pads, w_shape[2:], stride, dilation)
    cols = cols.reshape(batch, *outs, cin, *w_shape[2:]).permute(0, 3, 4, 5, 1, 2)
    padded = [size + b + a for size, (b, a) in zip(spatial, pads)]
    out = add_blocks(cols, padded, stride, dilation)
    (top, _), (left, _) = pads
    return out[:, :, top : top + spatial[0], left : left + spatial[1]]


def output_sizes(spatial, pads, kernel, stride, dilation) -> list[int]:
    """A convolution's output sizes along its spatial axes (padding pairs per axis)."""
    return [
        (size + b + a - d * (k - 1) - 1) // s + 1
        for size, (b, a), k, s, d in zip(spatial, pads, kernel, stride, dilation)
    ]


def _conv_as_gemm(x: Tensor, weight: Tensor, pads, stride, dilation, op: str) -> Tensor:
    """A 2-D convolution as sgemms (`pixel_gemm_pays`): the windows' rows (`_pixel_columns`)
    times the flattened weight, transposed, gives each output pixel's channels; the
    gradients are the sgemm's: the weight's the output gradient's rows (stored, pixel by
    pixel) transposed times the windows' rows, the input's the output gradient's rows times
    the weight summed back into the image (`_columns_to_image`). The tiles' lanes walk the
    output channels, every lane busy; the sums are the same, in the sgemm's order: within
    float32 rounding of the correlation's."""
    batch, cout = x.shape[0], weight.shape[0]
    w_shape, x_shape = weight.shape, x.shape
    rows = _pixel_columns(x, w_shape, pads, stride, dilation, op)
    flat = weight.reshape(cout, rows.shape[1])
    y = rows @ flat.t()  # (N * pixels, Cout)
    outs = output_sizes(x_shape[2:], pads, w_shape[2:], stride, dilation)
    wanted = (gradient_wanted(x), gradient_wanted(weight))

    def rule(g, x, weight):
        g = materialize(g, f"{op}: output gradient, pixel by pixel, an sgemm operand")
        dx = dw = None
        if wanted[0]:
            back = g @ weight.reshape(cout, -1)  # (N * pixels, C * K)
            dx = _columns_to_image(back, x_shape, w_shape, pads, stride, dilation)
        if wanted[1]:
            cols = _pixel_columns(x, w_shape, pads, stride, dilation, op)
            dw = (g.t() @ cols).reshape(w_shape)
        return [dx, dw]

    y = custom_gradient(y, [x, weight], rule, own_node=True)
    return y.reshape(batch, *outs, cout).permute(0, 3, 1, 2)


def gather_pays(x: Tensor, weight: Tensor, pads, stride, dilation, groups: int) -> bool:
    """Whether a convolution strided along its last axis (the one its tiles' vector lanes
    walk) runs over its gathered windows (`gather_windows`, im2col): under a layout that
    copies no padding (a device whose tiles read windows through their own guarded
    staging, the GPU), never; at a stride of
    2, 3 or 4 (`SHUFFLED_LANE_STEPS`), never: the windows are read in place, from the
    padded copy split into the stride's phases (`padded`) or, unpadded, by vector loads
    that shuffle a wider load (pipeline/llvm.py), except for a depthwise convolution
    (whose padding `pads_in_place` reads through bounds tests: it keeps the rule below);
    else when the windows read each input element often enough that the copy pays
    (`COPY_PAYS_FROM_READS`, as for a padded copy) and every output axis is nonempty (an
    input smaller than the kernel is the in-place path's error). A stride along another
    axis only moves whole rows: those windows are read in place.

    >>> import fusegrad as fg
    >>> from fusegrad.ir.layout import Layout, using
    >>> x, w = fg.ones(1, 8, 9, 9), fg.ones(16, 8, 5, 5)
    >>> with using(Layout(copy_padding=True)):
    ...     [gather_pays(x, w, [(1, 1)] * 2, s, (1, 1), 1) for s in ((1, 1), (1, 2), (1, 5))]
    [False, False, True]
    """
    if stride[-1] == 1 or not expansion_layout().copy_padding:
        return False
    depthwise = groups > 1 and weight.shape[1] == 1
    if stride[-1] in SHUFFLED_LANE_STEPS and not depthwise:
        return False
    sizes, kernel = x.shape[2:], weight.shape[2:]
    if any(i + b + a < d * (k - 1) + 1 for i, (b, a), k, d in zip(sizes, pads, kernel, dilation)):
        return False
    return window_reads(weight.shape, stride, groups) >= COPY_PAYS_FROM_READS


# The weight gradient reads the interior of the shared padded gradient only while padding
# grows it little: LeNet's second convolution (8x8 outputs, a 5x5 kernel) pads its gradient
# to 16x16, whose short interior rows would waste most of each cache line the weight
# gradient reads (its step moved 0.9 MB more); a 3x3 over 56x56 grows it by 7%.
SHARED_PAD_MAX_GROWTH = 1.5


def conv_vjp(
    g: Tensor, x: Tensor, weight: Tensor, geometry, op: str, gathered=False, wanted=(True, True)
):
    """The convolution's own gradients: a transposed convolution for the input, a
    correlation of input windows with the output gradient for the weight. The derived
    gradient of the window view is correct but full of index divisions (tested equal).
    A gradient not `wanted` (the input's and the weight's: `gradient_wanted`, no node the
    backward differentiates for lies below it, as a network's first layer's input) is None,
    and its graph is not built: building the input gradient's took about 0.4 ms of Python.

    A strided convolution's input gradient runs phase by phase with exact taps
    (`transposed_by_phases`); where the forward read its gathered windows (`gather_windows`:
    `gathered`), the weight gradient reads that copy too (the same graph, built again from
    the rule's x: the same node, so the same buffer, and no tensor kept from the forward).
    `geometry`: the input's and weight's shapes, the padding pairs, stride, dilation,
    groups, and whether the input wants a gradient.

    >>> import fusegrad as fg
    >>> x, w = fg.ones(1, 1, 4), fg.ones(1, 1, 2)
    >>> geometry = (x.shape, w.shape, [(0, 0)], (1,), (1,), 1, True)
    >>> [t.tolist() for t in conv_vjp(fg.ones(1, 1, 3), x, w, geometry, "conv1d")]
    [[[[1.0, 2.0, 2.0, 1.0]]], [[[3.0, 3.0]]]]
    """
    x_shape, w_shape, pads, stride, dilation, groups, x_grad = geometry
    dx_wanted, dw_wanted = wanted
    n = len(pads)
    batch, cin = x_shape[:2]
    cout, cin_g = w_shape[:2]
    kernel = w_shape[2:]
    outs = g.shape[2:]
    cout_g = cout // groups
    copied = expansion_layout().copy_padding  # (else `padded` is a guarded view)
    if copied and any(v > 1 for v in stride):
        dx = None
        if dx_wanted:
            dx = transposed_by_phases(g, weight, x_shape, pads, stride, dilation, groups, op)
        if not dw_wanted:
            return [dx, None]
        if not gathered:
            reads = window_reads(w_shape, stride, groups)
            in_place = pads_in_place(x, w_shape, groups)
            xp = padded(x, pads, op, reads, in_place=in_place, lane_stride=stride[-1])
            # (measured where the input is padded: split into phases, its windows' lanes
            # plain loads; read in place at stride 2 the pixels stay the lanes)
            by_channels = any(map(any, pads)) and lanes_along_channels(g.dtype, cout_g, outs)
            dw = _weight_grad(g, xp, w_shape, stride, dilation, groups, copied, by_channels)
            return [dx, dw]
        # the forward's gathered windows: a 1x1 convolution's weight gradient
        cols, _ = gather_windows(x, weight, pads, stride, dilation, op)
        flat = (cout, cin_g * math.prod(kernel), *([1] * n))
        ones = (1,) * n
        return [dx, _weight_grad(g, cols, flat, ones, ones, groups, copied).reshape(w_shape)]
    if not dx_wanted:
        return [None, _input_weight_grad(g, x, geometry, op, copied) if dw_wanted else None]
    # input: correlate the stride-dilated gradient, padded "full", with the flipped weight
    gd = dilate(g, stride, n)
    tpads = []
    for i, (before, after), k, d, s, o in zip(x_shape[2:], pads, kernel, dilation, stride, outs):
        covered = (o - 1) * s + 1 + d * (k - 1)
        extra = i + before + after - covered
        tpads.append((d * (k - 1) - before, d * (k - 1) - after + extra))
    wt = weight.reshape(groups, cout_g, cin_g, *kernel).transpose(1, 2)
    wt = wt.reshape(cin, cout_g, *kernel)
    wt = wt.flip(tuple(range(2, 2 + n)))
    g_reads = window_reads((cin, cout_g, *kernel), (1,) * n, groups)
    if (
        x_grad
        and dw_wanted
        and copied
        and not pads_in_place(g, wt.shape, groups)  # (a depthwise one reads g's padding in place)
        and all(v == 1 for v in stride)
        and all(b >= 0 and a >= 0 for b, a in tpads)
        and math.prod(o + b + a for o, (b, a) in zip(outs, tpads))
        <= SHARED_PAD_MAX_GROWTH * math.prod(outs)
    ):
        # one padded copy of the gradient serves both: the transposed convolution reads it
        # whole, the weight gradient its interior (a view with the padded rows' stride), so
        # the gradient's producer (relu's backward) writes straight into it. Where the
        # input wants no gradient (a first layer), the weight gradient reads g, no copy.
        # (Where the weight wants none, the input gradient's correlation pads g itself.)
        if rows_merge(outs[-1]):
            # rows whose tiles merge: the weight gradient reads the gradient as 16-lane
            # vectors along the merged pixels, aligned when it is stored contiguous and
            # split across cache lines in the padded copy's rows (one more pass over g,
            # and the weight gradient of 64x32x56^2 -> 64 3x3 17.4 ms, not 23.3; forward
            # and backward 62-64 -> 58 ms on Zen 5)
            g = materialize(g, f"{op}: output gradient, contiguous for the weight gradient")
            gd = padded(g, tpads, op, g_reads)
        else:
            gd = padded(g, tpads, op, g_reads)
            inner = tuple(slice(b, b + o) for (b, _), o in zip(tpads, outs))
            g = gd[(slice(None), slice(None), *inner)]
        tpads = [(0, 0)] * n
    # (a backend that packs panels for its cores' caches, the CPU's, blocks channels too)
    dx = _blocked_correlate(gd, wt, tpads, dilation, groups, op, expansion_layout().pack_panels)
    return [dx, _input_weight_grad(g, x, geometry, op, copied) if dw_wanted else None]


def _input_weight_grad(g: Tensor, x: Tensor, geometry, op: str, copied: bool) -> Tensor:
    """The weight gradient of a stride-1 (or guarded) convolution, from its padded input."""
    _, w_shape, pads, stride, dilation, groups, _ = geometry
    reads = window_reads(w_shape, stride, groups)
    xp = padded(x, pads, op, reads, in_place=pads_in_place(x, w_shape, groups))
    return _weight_grad(g, xp, w_shape, stride, dilation, groups, copied)


# The bytes of the windows' rows one output row of a 2-D correlation reads (the reduced
# channels x the kernel's rows x the padded row), which its register tiles read again for
# each of the kernel's rows, should stay in L1 (48 KiB on Zen 5 and Sapphire Rapids) beside
# the tile's weights. Past this, an input gradient's sum over the output channels is cut
# into blocks of channels that fit (at most MAX_CHANNEL_BLOCKS): a partial correlation per
# block, each added to the one before (`_blocked_correlate`).
WINDOW_ROWS_BYTES = 32 << 10
MAX_CHANNEL_BLOCKS = 4


def _blocked_correlate(
    gd: Tensor, wt: Tensor, tpads, dilation, groups: int, op: str, blocks: bool
) -> Tensor:
    """The input gradient's correlation of `gd` with the flipped weight `wt`: one sum, or
    where its window rows overflow WINDOW_ROWS_BYTES (a 2-D convolution of 64 output
    channels over 64-pixel rows: 50.7 KB), partial sums over blocks of the channels, each
    added to the one before (the later ones in the same kernel as the add). Measured on
    Zen 5 (64x32x56^2 -> 64 3x3, kernel alone, before its rows merged): one sum over 64
    channels 222 useful GFLOP/s, over 32 309-328; the input gradient's call 40 -> 33 ms.
    Rows whose tiles merge (`rows_merge`: 56 pixels) run faster in one sum, the same call
    23.0 ms in two blocks and 20.2 in one, and are not blocked. The sum
    is then the blocks' sums added, not one sum in channel order: within float32 rounding
    of it (docs/NUMERICS.md)."""
    n = len(tpads)
    channels, kernel = wt.shape[1], wt.shape[2:]
    block = channels
    width = gd.shape[-1] + sum(tpads[-1])  # the padded row
    merged = rows_merge(width - dilation[-1] * (kernel[-1] - 1))  # (the output row's)
    if n == 2 and groups == 1 and blocks and kernel[0] > 1 and not merged:
        per_channel = kernel[0] * width * gd.dtype.itemsize
        while block % 2 == 0 and block * per_channel > WINDOW_ROWS_BYTES:
            block //= 2
        if channels // block > MAX_CHANNEL_BLOCKS:
            block = channels
    if block == channels:  # (with groups, `gd` holds every group's channels)
        return correlate(gd, wt, tpads, (1,) * n, dilation, groups, op)
    total = None
    for c in range(0, channels, block):
        part = correlate(
            gd[:, c : c + block], wt[:, c : c + block], tpads, (1,) * n, dilation, groups, op
        )
        total = part if total is None else total + part
    return total


def _weight_grad(
    g: Tensor, xp: Tensor, w_shape, stride, dilation, groups: int, copied: bool,
    by_channels: bool = False,
):  # fmt: skip
    """The weight gradient: sum over batch and output positions of windows(xp) * g (xp the
    padded input), one partial sum per chunk of images that stays in cache, then the
    partial sums added (on the GPU, whose contraction stages its own tiles through shared
    memory, one sum: the cache rule is the CPU's, and it is unmeasured there). With
    `by_channels` (`lanes_along_channels`), the tiles' lanes along the output channels."""
    n = len(stride)
    batch = xp.shape[0]
    cout, cin_g = w_shape[:2]
    kernel = w_shape[2:]
    cout_g = cout // groups
    outs = g.shape[2:]
    win = sliding_windows(xp, kernel, stride, dilation)
    per_image = (math.prod(xp.shape[1:]) + math.prod(g.shape[1:])) * xp.dtype.itemsize
    chunk = max(batch, 1) if not copied else weight_grad_chunk(batch, per_image)
    if by_channels:
        return _weight_grad_channels_last(g, win, w_shape, groups, chunk)
    win = win.reshape(batch // chunk, chunk, groups, 1, cin_g, *outs, *kernel)
    gw = g.reshape(batch // chunk, chunk, groups, cout_g, 1, *outs, *([1] * n))
    partial = (win * gw).sum((1,) + tuple(range(5, 5 + n)))
    return (partial[0] if batch == chunk else partial.sum(0)).reshape(*w_shape)


CHANNEL_LANES = 16  # float32 lanes of a CPU vector register (AVX-512), a tile's lanes


def lanes_along_channels(dtype, cout_g: int, outs) -> bool:
    """Whether a strided, padded convolution's weight gradient on the CPU takes the output
    channels as its tiles' lanes (`_weight_grad_channels_last`): float32, whole registers
    of them, where its output rows do not fill whole registers of pixels. (Rows of 16
    pixels keep them: a transposed convolution's weight gradient, 32x128x16^2 -> 64 4x4 at
    stride 2, took 6.9 ms with the pixels as lanes and 7.5 with the channels, on Zen 5.)"""
    return dtype.name == "float32" and cout_g % CHANNEL_LANES == 0 and outs[-1] % CHANNEL_LANES != 0


def _weight_grad_channels_last(g: Tensor, win: Tensor, w_shape, groups: int, chunk: int):
    """`_weight_grad` of a strided convolution on the CPU, with the output gradient copied
    channels last ((N, G, *outs, Cout/G): one pass over it) so that the sum's tiles are an
    sgemm's: lanes along the output channels, rows along the input channels (a broadcast
    window value each), no horizontal sums. With the pixels as lanes instead, a stride-2
    window row is a phase's, 28 pixels for 16-lane vectors, and each tile ends in a
    horizontal sum of every accumulator: the weight gradient of 32x64x56^2 -> 128 3x3 at
    stride 2 took 12.1 ms in its kernel (306 GFLOP/s on Zen 5), 8.7 ms this way (424) plus
    0.9 ms for the copy. The same sums, in another order: within float32 rounding."""
    n = len(w_shape) - 2
    batch = g.shape[0]
    cout, cin_g = w_shape[:2]
    kernel, outs = w_shape[2:], g.shape[2:]
    cout_g = cout // groups
    gl = g.reshape(batch, groups, cout_g, *outs).permute(0, 1, *range(3, 3 + n), 2)
    gl = materialize(gl, "conv weight gradient: output gradient, channels last")
    gl = gl.reshape(batch // chunk, chunk, groups, *([1] * n), 1, *outs, cout_g)
    # windows (N, C, *outs, *kernel) as (N/chunk, chunk, G, *kernel, C/G, *outs, 1)
    win = win.reshape(batch, groups, cin_g, *outs, *kernel)
    win = win.permute(0, 1, *range(3 + n, 3 + 2 * n), 2, *range(3, 3 + n))
    win = win.reshape(batch // chunk, chunk, groups, *kernel, cin_g, *outs, 1)
    partial = (win * gl).sum((1,) + tuple(range(4 + n, 4 + 2 * n)))  # (., G, *kernel, C/G, Cout/G)
    total = partial[0] if batch == chunk else partial.sum(0)
    total = total.permute(0, 2 + n, 1 + n, *range(1, 1 + n))  # (G, Cout/G, C/G, *kernel)
    return total.reshape(*w_shape)


def weight_grad_chunk(batch: int, per_image: int) -> int:
    """Images per partial sum of a convolution's weight gradient: the whole batch when its
    input and output gradient (`per_image` bytes an image) fit the cache together, else the
    largest divisor of the batch that does.

    The weight gradient is a GEMM whose K (batch x pixels) is long and whose output
    (Cout x Cin/G x kernel) is small: each register tile of the output reads all of K, so
    with the whole batch in one sum every tile streams both operands from memory again. A
    chunk that stays in cache is read from there by every tile; the partial sums (one
    weight-sized array per chunk) cost one more small kernel. The convolution of
    64x32x56x56 by 64 3x3 filters, weight gradient alone, alternating with the sgemm of its
    implicit GEMM: 0.22-0.61 of the sgemm's GFLOP/s in one sum, 0.55-3.4 in 64 (noisy load).

    >>> weight_grad_chunk(64, 1 << 20), weight_grad_chunk(64, 1 << 10)
    (2, 64)
    """
    if batch * per_image <= PANEL_CACHE_BYTES:
        return max(batch, 1)  # an empty batch: one (empty) chunk
    fitting = [
        d for d in range(1, batch + 1) if batch % d == 0 and d * per_image <= PANEL_CACHE_BYTES
    ]
    return max(fitting, default=1)


@autocast_op("conv1d")
@one_site
def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """1-D convolution over (N, C, L) with PyTorch's semantics (padding may be 'same')."""
    return convnd(x, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


@autocast_op("conv2d")
@one_site
def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """2-D convolution over (N, C, H, W) with PyTorch's semantics (padding may be 'same')."""
    return convnd(x, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def poolnd(
    x: Tensor,
    kernel_size,
    stride,
    padding,
    n: int,
    kind: str,
    op: str,
    count_include_pad: bool = True,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    divisor_override: int | None = None,
):
    if x.ndim < n + 1:
        fail(ShapeError, op, f"expected at least {n + 1} dims, got shape {x.shape}")
    kernel = int_tuple(kernel_size, n, "kernel_size", op)
    stride = kernel if stride is None or stride == [] else int_tuple(stride, n, "stride", op)
    pads = int_tuple(padding, n, "padding", op)
    dilation = int_tuple(dilation, n, "dilation", op)
    if any(2 * p > k for p, k in zip(pads, kernel)):
        fail(ShapeError, op, f"padding {pads} must be at most half of kernel_size {kernel}")
    if divisor_override is not None and divisor_override == 0:
        fail(ShapeError, op, "divisor must be not zero")
    spatial = x.shape[x.ndim - n :]
    outs = [
        _pool_out_size(i, k, s, p, d, ceil_mode)
        for i, k, s, p, d in zip(spatial, kernel, stride, pads, dilation)
    ]
    if any(o <= 0 for o in outs):
        fail(
            ShapeError,
            op,
            f"output size {tuple(outs)} is too small for input {x.shape} "
            f"(kernel {kernel}, stride {stride}, padding {pads})",
        )
    # ceil_mode: the last window may reach past the padding; pad it further with the fill
    extra = [
        max(0, (o - 1) * s + d * (k - 1) + 1 - (i + 2 * p))
        for o, i, k, s, p, d in zip(outs, spatial, kernel, stride, pads, dilation)
    ]
    flat_pad = [v for p, e in zip(reversed(pads), reversed(extra)) for v in (p, p + e)]
    fill = 0.0
    if kind == "max":  # the smallest value of the dtype, so integers stay integers
        fill = float("-inf") if x.dtype.is_float else int(np.iinfo(x.dtype.np).min)
    xp = x.pad(flat_pad, value=fill) if any(flat_pad) else x
    win = sliding_windows(xp, kernel, stride, dilation)
    axes = tuple(range(win.ndim - n, win.ndim))
    if kind == "max":
        best = win.amax(axes)
        if best.requires_grad:
            if n == 2 and any(k > st for k, st in zip(kernel, stride)):
                # overlapping windows (a ResNet's 3x3 stride-2 pool): each window's
                # gradient added back by F.fold's sum, not the window view's own gradient,
                # whose sum over the overlaps took 1.3 s a step at 4 x 64 x 112 x 112
                back = (flat_pad, fill, kernel, stride, dilation, spatial)
                best = first_max_gradient(win, best, n, x=x, back=back)
            else:
                best = first_max_gradient(win, best, n)
        if not return_indices:
            return best
        return best, _argmax_indices(win, best, spatial, flat_pad, kernel, stride, dilation)
    total = win.sum(axes)
    if divisor_override is not None:
        return total / divisor_override
    if not any(flat_pad) or (count_include_pad and not any(extra)):
        return total / math.prod(kernel)

    # the divisor counts the window's cells inside the input, or inside input + padding
    # (count_include_pad), never the cells ceil_mode adds beyond the padding (as PyTorch)
    ones_in = ones(*spatial, device=total.device)
    if count_include_pad:
        ones_in = ones_in.pad([v for p in reversed(pads) for v in (p, p)], value=1.0)
        ones_in = ones_in.pad([v for e in reversed(extra) for v in (0, e)])
    else:
        ones_in = ones_in.pad(flat_pad)
    counts = sliding_windows(ones_in, kernel, stride, dilation).sum(tuple(range(n, 2 * n)))
    return total / counts


def first_max_gradient(win: Tensor, out: Tensor, n: int, x=None, back=None) -> Tensor:
    """The pooled maxima `out` with torch's gradient: all of it to the first maximum of each
    window (in row-major window order), none to later ties; where the window holds a NaN, to
    its last NaN (torch's CPU kernel takes each NaN it meets). With `x` and `back` (a 2-D
    pool's padding, fill, kernel, stride, dilation and input size), the gradient is `x`'s:
    the windows' gradients summed back into the image by `add_blocks` (F.fold's sum)."""

    lead = win.shape[: win.ndim - n]
    size = 1
    for k in win.shape[win.ndim - n :]:
        size *= k

    def window_gradient(g, win):
        flat = win.detach().reshape(*lead, size)
        best = out.detach()[..., None]
        pos = arange(size)
        first = where(flat == best, pos, size).amin(-1, keepdim=True)
        last_nan = where(flat != flat, pos, -1).amax(-1, keepdim=True)
        pick = where(best != best, last_nan, first)
        return where(pos == pick, g[..., None], 0.0).reshape(win.shape)

    if back is None:
        # a node of its own for the rule: `out` may equal an amax built elsewhere
        return custom_gradient(out, [win], lambda g, win: [window_gradient(g, win)], own_node=True)
    flat_pad, fill, kernel, stride, dilation, spatial = back

    def rule(g, x):
        xp = x.detach().pad(flat_pad, value=fill) if any(flat_pad) else x.detach()
        win = sliding_windows(xp, kernel, stride, dilation)  # (*lead, oh, ow, kh, kw)
        d = window_gradient(g, win)
        rows = math.prod(d.shape[:-4])  # (the batch and channels)
        blocks = d.reshape(rows, 1, *d.shape[-4:]).permute(0, 1, 4, 5, 2, 3)
        image = add_blocks(blocks, xp.shape[-2:], stride, dilation)  # (rows, 1, Hp, Wp)
        left, top = flat_pad[0], flat_pad[2]
        image = image[:, 0, top : top + spatial[0], left : left + spatial[1]]
        return [image.reshape(x.shape)]

    return custom_gradient(out, [x], rule, own_node=True)


def _pool_out_size(i: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size; with ceil_mode the last window must start inside
    the input or its left padding."""
    span = i + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= i + p:
        out -= 1
    return out


def _argmax_indices(win, best, spatial, flat_pad, kernel, stride, dilation) -> Tensor:
    """Flat index (into each input plane) of the first largest element of every window, or
    of its last NaN (as torch's CPU kernel)."""

    n = len(kernel)
    plane = math.prod(spatial)
    idx = arange(plane).reshape(*spatial)
    if any(flat_pad):
        idx = idx.pad(flat_pad, value=plane)  # padding never wins: it is -inf
    idx_win = sliding_windows(idx, kernel, stride, dilation)
    axes = tuple(range(win.ndim - n, win.ndim))
    expanded = best.reshape(*best.shape, *([1] * n))
    first = where(win == expanded, idx_win, plane).amin(axes)
    last_nan = where(win != win, idx_win, -1).amax(axes)
    return where(best != best, last_nan, first)


@one_site
def max_pool1d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """Max over sliding windows of the last axis; with return_indices, also their flat indices."""
    return poolnd(
        x,
        kernel_size,
        stride,
        padding,
        1,
        "max",
        "max_pool1d",
        dilation=dilation,
        ceil_mode=ceil_mode,
        return_indices=return_indices,
    )


@one_site
def max_pool2d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """Max over sliding windows of the last two axes (stride defaults to kernel_size).

    With `return_indices`, also each maximum's flat index into its H*W plane
    (the first one on ties), as torch.nn.functional.max_pool2d.
    """
    return poolnd(
        x,
        kernel_size,
        stride,
        padding,
        2,
        "max",
        "max_pool2d",
        dilation=dilation,
        ceil_mode=ceil_mode,
        return_indices=return_indices,
    )


@autocast_op("avg_pool1d")
def avg_pool1d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Mean over sliding windows of the last axis."""
    return poolnd(
        x,
        kernel_size,
        stride,
        padding,
        1,
        "avg",
        "avg_pool1d",
        count_include_pad,
        ceil_mode=ceil_mode,
    )


@autocast_op("avg_pool2d")
@one_site
def avg_pool2d(
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """Mean over sliding windows of the last two axes (stride defaults to kernel_size)."""
    return poolnd(
        x,
        kernel_size,
        stride,
        padding,
        2,
        "avg",
        "avg_pool2d",
        count_include_pad,
        ceil_mode=ceil_mode,
        divisor_override=divisor_override,
    )


# ---------------------------------------------------------------- modules


class ConvNd(Module):
    """Shared parts of Conv1d/Conv2d: PyTorch's parameters, initialisation and repr."""

    n = 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        name = f"Conv{self.n}d"
        modes = ("zeros", "reflect", "replicate", "circular")
        if padding_mode not in modes:
            raise ValueError(
                f"padding_mode must be one of {set(modes)}, but got padding_mode='{padding_mode}'"
            )
        self.padding_mode = padding_mode
        if in_channels % groups or out_channels % groups:
            fail(
                ShapeError,
                name,
                f"groups={groups} must divide in_channels={in_channels} "
                f"and out_channels={out_channels}",
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = int_tuple(kernel_size, self.n, "kernel_size", name)
        self.stride = int_tuple(stride, self.n, "stride", name)
        self.padding = (
            padding if isinstance(padding, str) else int_tuple(padding, self.n, "padding", name)
        )
        self.dilation = int_tuple(dilation, self.n, "dilation", name)
        if self.padding == "same":
            pads = _same_padding(self.kernel_size, self.dilation)
        elif self.padding == "valid":
            pads = [(0, 0)] * self.n
        else:
            pads = [(p, p) for p in self.padding]
        # F.pad's order (the last dim first), for a padding_mode other than zeros
        self._reversed_padding_repeated_twice = [v for pair in reversed(pads) for v in pair]
        self.weight = placeholder_parameter(
            out_channels, in_channels // groups, *self.kernel_size, dtype=dtype
        )
        if bias:
            self.bias = placeholder_parameter(out_channels, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        place(self, device)

    def reset_parameters(self) -> None:
        """As torch: kaiming_uniform(a=sqrt(5)) weights, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) bias."""
        fan_in = (self.in_channels // self.groups) * math.prod(self.kernel_size)
        init.torch_default_(self.weight, self.bias, fan_in)

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * self.n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self.n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    def _padded_input(self, x):
        """x and the padding left for the convolution: a padding_mode other than 'zeros'
        pads here with F.pad's mode, and the convolution pads no more (as torch's)."""
        if self.padding_mode == "zeros":
            return x, self.padding
        return pad(x, self._reversed_padding_repeated_twice, self.padding_mode), 0


class Conv1d(ConvNd):
    """1-D convolution layer over (N, C, L), as torch.nn.Conv1d."""

    n = 1

    def forward(self, x):
        x, padding = self._padded_input(x)
        return conv1d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv2d(ConvNd):
    """2-D convolution layer over (N, C, H, W), as torch.nn.Conv2d."""

    n = 2

    def forward(self, x):
        x, padding = self._padded_input(x)
        return conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class PoolNd(Module):
    n, kind = 2, "max"

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        dilation=1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x):
        fn = {1: max_pool1d, 2: max_pool2d}[self.n]
        return fn(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            self.return_indices,
        )

    def extra_repr(self) -> str:
        stride = self.kernel_size if self.stride is None else self.stride
        return (
            f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(PoolNd):
    """Max over sliding windows, as torch.nn.MaxPool1d."""

    n = 1


class MaxPool2d(PoolNd):
    """Max over sliding windows, as torch.nn.MaxPool2d."""


class AvgPoolNd(Module):
    n = 2

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x):
        if self.n == 1:
            return avg_pool1d(
                x,
                self.kernel_size,
                self.stride,
                self.padding,
                self.ceil_mode,
                self.count_include_pad,
            )
        return avg_pool2d(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self) -> str:
        stride = self.kernel_size if self.stride is None else self.stride
        return f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}"


class AvgPool1d(AvgPoolNd):
    """Mean over sliding windows, as torch.nn.AvgPool1d."""

    n = 1

    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
    ):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool2d(AvgPoolNd):
    """Mean over sliding windows, as torch.nn.AvgPool2d."""
