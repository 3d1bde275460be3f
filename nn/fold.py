"""Sliding blocks and unpooling, as torch's: `F.unfold` (im2col), `F.fold` (col2im, the
sum of overlapping blocks) and `F.max_unpool1d/2d/3d`, with the modules Unfold, Fold and
MaxUnpool1d/2d/3d.

`unfold` is a view of the sliding windows rearranged; `fold` is its adjoint, the sum
over kernel positions of each position's column spread out by the stride and shifted
into place (pads and adds, which fuse); `max_unpool` scatters each value to its index.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> cols = F.unfold(fg.arange(9.0).reshape(1, 1, 3, 3), kernel_size=2)
>>> cols.shape, cols[0, :, 0].tolist()
((1, 4, 4), [0.0, 1.0, 3.0, 4.0])
>>> F.fold(fg.ones(1, 4, 4), output_size=3, kernel_size=2)[0, 0].tolist()
[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]
"""

from __future__ import annotations

import math

from ..nnapi import ShapeError, Tensor, autocast_op, fail, host_values, sliding_windows, zeros
from .correlate import dilate, int_tuple
from .module import Module


def _blocks(size: int, k: int, d: int, p: int, s: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """The sliding blocks of (N, C, H, W) (or (C, H, W)) as columns: (N, C*kh*kw, L), L the
    number of blocks, each column one block's values in (C, kh, kw) order."""
    op = "unfold"
    if input.ndim not in (3, 4):
        fail(ShapeError, op, f"expected a 3-D or 4-D input, got shape {input.shape}")
    if input.ndim == 3:
        return unfold(input.unsqueeze(0), kernel_size, dilation, padding, stride)[0]
    k = int_tuple(kernel_size, 2, "kernel_size", op)
    d = int_tuple(dilation, 2, "dilation", op)
    p = int_tuple(padding, 2, "padding", op)
    s = int_tuple(stride, 2, "stride", op)
    blocks = [_blocks(n, *a) for n, *a in zip(input.shape[2:], k, d, p, s)]
    if any(b <= 0 for b in blocks):
        fail(
            ShapeError,
            op,
            f"the sliding blocks of kernel_size={k}, dilation={d}, padding={p}, stride={s} "
            f"do not fit input {input.shape}: calculated block counts {tuple(blocks)}",
        )
    n, c = input.shape[:2]
    x = input.pad((p[1], p[1], p[0], p[0])) if any(p) else input
    win = sliding_windows(x, k, s, d)  # (N, C, bh, bw, kh, kw)
    return win.permute(0, 1, 4, 5, 2, 3).reshape(n, c * k[0] * k[1], blocks[0] * blocks[1])


def add_blocks(cols: Tensor, padded, stride, dilation) -> Tensor:
    """The 2-D blocks `cols` (N, C, kh, kw, blocks_h, blocks_w) summed into an image of the
    `padded` size (N, C, *padded): each kernel position's column spread out by the stride
    and shifted into place, then added (pads and adds, which fuse). `fold`'s sum, and a
    convolution's input gradient from its windows' rows (nn/conv.py)."""
    kh, kw, bh, bw = cols.shape[2:]
    spread = [(b - 1) * st + 1 for b, st in zip((bh, bw), stride)]
    out = None
    for i in range(kh):
        for j in range(kw):
            piece = dilate(cols[:, :, i, j], stride, 2)  # (N, C, spread_h, spread_w)
            top, left = i * dilation[0], j * dilation[1]
            piece = piece.pad(
                (left, padded[1] - left - spread[1], top, padded[0] - top - spread[0])
            )
            out = piece if out is None else out + piece
    return out


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sum the columns of (N, C*kh*kw, L) (or (C*kh*kw, L)) back into (N, C, H, W): the
    adjoint of `unfold`, where overlapping blocks add up."""
    op = "fold"
    if input.ndim not in (2, 3):
        fail(ShapeError, op, f"expected a 2-D or 3-D input, got shape {input.shape}")
    if input.ndim == 2:
        return fold(input.unsqueeze(0), output_size, kernel_size, dilation, padding, stride)[0]
    size = int_tuple(output_size, 2, "output_size", op)
    k = int_tuple(kernel_size, 2, "kernel_size", op)
    d = int_tuple(dilation, 2, "dilation", op)
    p = int_tuple(padding, 2, "padding", op)
    s = int_tuple(stride, 2, "stride", op)
    n, ck, length = input.shape
    if ck % (k[0] * k[1]):
        fail(
            ShapeError,
            op,
            f"expected size of input's dimension 1 to be divisible by the product of "
            f"kernel_size, but got input.size(1)={ck} and kernel_size={k}",
        )
    blocks = [_blocks(v, *a) for v, *a in zip(size, k, d, p, s)]
    if any(b <= 0 for b in blocks) or length != blocks[0] * blocks[1]:
        fail(
            ShapeError,
            op,
            f"given output_size={size}, kernel_size={k}, dilation={d}, padding={p}, "
            f"stride={s}, expected size of input's dimension 2 to match the calculated "
            f"number of sliding blocks {blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, "
            f"but got input.size(2)={length}",
        )
    c = ck // (k[0] * k[1])
    cols = input.reshape(n, c, k[0], k[1], blocks[0], blocks[1])
    out = add_blocks(cols, (size[0] + 2 * p[0], size[1] + 2 * p[1]), s, d)
    if any(p):
        out = out[:, :, p[0] : p[0] + size[0], p[1] : p[1] + size[1]]
    return out


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, n: int, op: str):
    if input.ndim not in (n + 1, n + 2):
        fail(ShapeError, op, f"expected a {n + 1}-D or {n + 2}-D input, got shape {input.shape}")
    if tuple(indices.shape) != tuple(input.shape):
        fail(
            ShapeError,
            op,
            f"expected shape of indices to be same as that of the input tensor "
            f"({input.shape}) but got indices tensor with shape: {indices.shape}",
        )
    if indices.dtype.is_float or indices.dtype.is_bool:
        fail(ShapeError, op, f"indices must be an int64 tensor, got {indices.dtype.name}")
    k = int_tuple(kernel_size, n, "kernel_size", op)
    s = k if stride is None else int_tuple(stride, n, "stride", op)
    p = int_tuple(padding, n, "padding", op)
    spatial = input.shape[-n:]
    if output_size is None:
        size = tuple((i - 1) * st - 2 * pp + kk for i, st, pp, kk in zip(spatial, s, p, k))
    else:
        size = tuple(int(v) for v in output_size)[-n:]
        if len(size) != n:
            fail(ShapeError, op, f"output_size must have {n} or {n + 2} elements")
    lead = tuple(input.shape[:-n])
    plane = math.prod(size)
    known = host_values(indices)
    if known is not None and known.size and (known.min() < 0 or known.max() >= plane):
        bad = int(known.min() if known.min() < 0 else known.max())
        fail(
            ShapeError,
            op,
            f"Found an invalid max index: {bad} (output volumes are of size "
            f"{'x'.join(map(str, size))})",
        )
    flat = zeros(*lead, plane, dtype=input.dtype, device=input.device)
    out = flat.scatter(-1, indices.reshape(*lead, -1), input.reshape(*lead, -1))
    return out.reshape(*lead, *size)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Undo max_pool1d: each value to its index along L, zeros elsewhere."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1, "max_unpool1d")


@autocast_op("max_unpool2d")
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Undo max_pool2d: each value to its flat index in the H*W plane, zeros elsewhere; the
    plane is (H-1)*stride - 2*padding + kernel_size unless `output_size` says."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2, "max_unpool2d")


@autocast_op("max_unpool3d")
def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Undo max_pool3d: each value to its flat index in the D*H*W volume, zeros elsewhere."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3, "max_unpool3d")


class Unfold(Module):
    """`F.unfold` as a module, as torch.nn.Unfold."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input):
        return unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
            f"padding={self.padding}, stride={self.stride}"
        )


class Fold(Unfold):
    """`F.fold` as a module, as torch.nn.Fold."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(kernel_size, dilation, padding, stride)
        self.output_size = output_size

    def forward(self, input):
        return fold(
            input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride
        )

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}, " + super().extra_repr()


class _MaxUnpoolNd(Module):
    n = 2

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding

    def forward(self, input, indices, output_size=None):
        fn = {1: max_unpool1d, 2: max_unpool2d, 3: max_unpool3d}[self.n]
        return fn(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """`F.max_unpool1d` as a module, as torch.nn.MaxUnpool1d."""

    n = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """`F.max_unpool2d` as a module, as torch.nn.MaxUnpool2d."""


class MaxUnpool3d(_MaxUnpoolNd):
    """`F.max_unpool3d` as a module, as torch.nn.MaxUnpool3d."""

    n = 3
