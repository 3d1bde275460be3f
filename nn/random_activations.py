"""Activations that draw random numbers, as torch's: `F.gumbel_softmax` and `F.rrelu` /
`nn.RReLU`.

Their draws are `fg.rand` (the counter-based generator: `fg.manual_seed` repeats them),
recomputed inside whichever kernels read them, so the backward pass sees the very
numbers the forward pass drew. The streams are fusegrad's: the same seed gives other
numbers than torch's.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> fg.manual_seed(0)
>>> y = F.gumbel_softmax(fg.zeros(2, 5), tau=0.5, hard=True)
>>> y.sum(-1).tolist(), sorted(set(y.flatten().tolist()))
([1.0, 1.0], [0.0, 1.0])
"""

from __future__ import annotations

import warnings

from ..nnapi import Tensor, index_arange, rand, where
from .activations import leaky_relu, softmax
from .module import Module


def gumbel_softmax(
    logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1
) -> Tensor:
    """A sample of the Gumbel-softmax distribution: softmax((logits + g) / tau) along `dim`,
    g ~ Gumbel(0, 1) drawn per element (-log(-log(u)), u uniform).

    With `hard`, the one-hot of the sample's argmax (the first, on a tie) in the value and
    the soft sample's gradient (the straight-through estimator, torch's
    `y_hard - y_soft.detach() + y_soft`). `eps` is deprecated and has no effect, as torch's.

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> fg.manual_seed(0)
    >>> round(F.gumbel_softmax(fg.tensor([[1.0, 2.0, 3.0]])).sum().item(), 6)
    1.0
    """
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    u = rand(*logits.shape, dtype=logits.dtype, device=logits.device)
    gumbels = -(-u.log()).log()
    y_soft = softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    d = dim % y_soft.ndim if y_soft.ndim else 0
    index = y_soft.argmax(d, keepdim=True)
    places = index_arange(y_soft.shape[d]).reshape(-1, *(1,) * (y_soft.ndim - 1 - d))
    y_hard = (index == places).cast(y_soft.dtype)
    return y_hard - y_soft.detach() + y_soft


def rrelu(
    input: Tensor,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    inplace: bool = False,
) -> Tensor:
    """Randomized leaky ReLU: x where x > 0; elsewhere, in training, x times a slope drawn
    per element uniformly from [lower, upper] (its gradient that slope, at 0 too), and
    outside training the fixed slope (lower + upper) / 2, as torch's.

    >>> import fusegrad as fg
    >>> import fusegrad.nn.functional as F
    >>> F.rrelu(fg.tensor([-1.0, 2.0]), 0.1, 0.3).tolist()
    [-0.20000000298023224, 2.0]
    """
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    u = rand(*input.shape, dtype=input.dtype, device=input.device)
    slope = lower + (upper - lower) * u
    out = where(input <= 0, input * slope, input)
    return input._inplace(out, "rrelu_") if inplace else out


def rrelu_(
    input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False
) -> Tensor:
    """`rrelu` written into `input`, which is returned (torch.nn.functional.rrelu_)."""
    return rrelu(input, lower, upper, training, inplace=True)


class RReLU(Module):
    """`F.rrelu` as a module: random slopes in training, (lower + upper) / 2 in eval()."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (
            ", inplace=True" if self.inplace else ""
        )
