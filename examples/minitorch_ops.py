"""MiniTorch's NN functions, with MiniTorch's definitions, as fusegrad graph builders.

MiniTorch (module 4) defines its own `tile`, `avgpool2d`, `maxpool2d`, `max`,
`argmax` (a one-hot tensor, not indices), `softmax`, `logsoftmax` and
`dropout`, and a left-anchored, same-width convolution: output position w
reads input positions w, w+1, ..., w+k-1, with zeros past the end. Students
of MiniTorch can port their code unchanged; everything below is a few lines
over fusegrad's own ops, so it fuses and compiles the same way. This is example
code (`examples/lenet_mnist.py --arch minitorch` uses it), built on fusegrad's
public API only.

>>> import fusegrad as fg
>>> import minitorch_ops as mt
>>> mt.argmax(fg.tensor([[1.0, 3.0, 2.0]]), 1).tolist()
[[0.0, 1.0, 0.0]]
"""

from __future__ import annotations

from fusegrad import ShapeError, Tensor
from fusegrad.nn import functional as F


def tile(input: Tensor, kernel: tuple[int, int]) -> tuple[Tensor, int, int]:
    """Cut (batch, channel, height, width) into non-overlapping kh x kw tiles.

    Returns the tiles as (batch, channel, height/kh, width/kw, kh*kw) and the new
    height and width, as MiniTorch's `tile`. Height and width must divide evenly.
    """
    batch, channel, height, width = input.shape
    kh, kw = kernel
    if height % kh or width % kw:
        raise ShapeError(f"tile: kernel {kernel} must divide height and width {(height, width)}")
    nh, nw = height // kh, width // kw
    t = input.reshape(batch, channel, nh, kh, nw, kw).permute(0, 1, 2, 4, 3, 5)
    return t.reshape(batch, channel, nh, nw, kh * kw), nh, nw


def avgpool2d(input: Tensor, kernel: tuple[int, int]) -> Tensor:
    """Mean over each tile: (batch, channel, height/kh, width/kw)."""
    tiles, _, _ = tile(input, kernel)
    return tiles.mean(4)


def maxpool2d(input: Tensor, kernel: tuple[int, int]) -> Tensor:
    """Max over each tile: (batch, channel, height/kh, width/kw)."""
    tiles, _, _ = tile(input, kernel)
    return tiles.amax(4)


def max(input: Tensor, dim: int) -> Tensor:  # noqa: A001 - MiniTorch's name
    """The maximum along `dim`, keeping the axis (MiniTorch's max reduction).

    Its gradient goes to the maximal elements; where several tie, fusegrad
    splits it evenly (as torch.amax), where MiniTorch gives each the whole.
    """
    return input.amax(dim, keepdim=True)


def argmax(input: Tensor, dim: int) -> Tensor:
    """1.0 where an element is the maximum along `dim`, else 0.0 (a one-hot tensor)."""
    return (input == input.amax(dim, keepdim=True)).float()


def softmax(input: Tensor, dim: int) -> Tensor:
    return input.softmax(dim)


def logsoftmax(input: Tensor, dim: int) -> Tensor:
    return input.log_softmax(dim)


def dropout(input: Tensor, rate: float, ignore: bool = False) -> Tensor:
    """Zero each element with probability `rate` unless `ignore` (MiniTorch's signature).

    Like PyTorch (and unlike MiniTorch) the kept elements are scaled by 1/(1 - rate),
    so the expected value is unchanged.
    """
    return F.dropout(input, rate, training=not ignore)


def conv1d(input: Tensor, weight: Tensor) -> Tensor:
    """MiniTorch's left-anchored, same-width 1-D convolution (no bias).

    out[b, o, w] = sum over c, k of input[b, c, w + k] * weight[o, c, k], with zeros
    past the end: a convolution of the input right-padded by k - 1.
    """
    k = weight.shape[2]
    return F.conv1d(input.pad((0, k - 1)), weight)


def conv2d(input: Tensor, weight: Tensor) -> Tensor:
    """MiniTorch's left-anchored, same-size 2-D convolution: right/bottom padding kh-1, kw-1."""
    kh, kw = weight.shape[2:]
    return F.conv2d(input.pad((0, kw - 1, 0, kh - 1)), weight)
