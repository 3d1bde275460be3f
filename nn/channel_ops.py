"""Ops across the channels (dim 1) of an (N, C, *) input, as torch's:
`F.local_response_norm` / `nn.LocalResponseNorm` and `F.channel_shuffle` /
`nn.ChannelShuffle`.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> F.channel_shuffle(fg.arange(6.0).reshape(1, 6, 1), 2).flatten().tolist()
[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
"""

from __future__ import annotations

from ..nnapi import ShapeError, Tensor, fail
from .conv import avg_pool2d
from .module import Module
from .padding import pad


def local_response_norm(
    input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0
) -> Tensor:
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta, as torch's: the
    window of channel c runs from c - size // 2 to c + (size - 1) // 2, channels past the
    edges count as zeros, and the divisor is always `size` (an average pool of the squares
    over the channel dim, zero-padded). An integer input is normalized as floats (torch's
    integer average pool rounds its means down).

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> x = fg.tensor([[[1.0], [2.0]]])
    >>> F.local_response_norm(x, 2, alpha=1.0, beta=1.0).flatten().tolist()
    [0.6666666865348816, 0.5714285969734192]
    """
    if input.ndim < 3:
        raise ValueError(
            f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)"
        )
    if size <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {size} kW: 1")
    if input.numel() == 0:
        return input
    x = input if input.dtype.is_float else input.float()
    n, c = x.shape[:2]
    squares = (x * x).reshape(n, 1, c, -1)
    squares = pad(squares, (0, 0, size // 2, (size - 1) // 2))
    mean = avg_pool2d(squares, (size, 1), stride=1).reshape(x.shape)
    return x / (mean * alpha + k) ** beta


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """(N, C, *) with its channels read as a (groups, C / groups) table and transposed:
    channel g * (C / groups) + i moves to i * groups + g (a reshape and a permute), as
    torch's.

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> F.channel_shuffle(fg.arange(4.0).reshape(1, 4, 1), 2).flatten().tolist()
    [0.0, 2.0, 1.0, 3.0]
    """
    op = "channel_shuffle"
    if input.ndim <= 2:
        fail(
            ShapeError,
            op,
            f"channel_shuffle expects input with > 2 dims, but got input with sizes "
            f"{list(input.shape)}",
        )
    if groups <= 0:
        fail(
            ShapeError,
            op,
            f"Number of groups to divide channels in must be positive. Value of groups:{groups}",
        )
    n, c, *rest = input.shape
    if c % groups:
        fail(
            ShapeError,
            op,
            f"Number of channels must be divisible by groups. Got {c} channels and {groups} "
            "groups.",
        )
    x = input.reshape(n, groups, c // groups, *rest).transpose(1, 2)
    return x.reshape(input.shape)


class LocalResponseNorm(Module):
    """`F.local_response_norm` as a module."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class ChannelShuffle(Module):
    """`F.channel_shuffle` as a module."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
