"""The bilinear layer: `F.bilinear` and `nn.Bilinear`, as torch's
(`torch.nn.modules.linear.Bilinear`).

y[..., o] = sum over i, j of x1[..., i] * W[o, i, j] * x2[..., j], plus b[o]:

>>> import fusegrad as fg
>>> x1, x2 = fg.ones(5, 3), fg.ones(5, 4)
>>> bilinear(x1, x2, fg.ones(2, 3, 4), fg.zeros(2)).tolist()[0]
[12.0, 12.0]
"""

from __future__ import annotations

import math

from ..nnapi import DTypeError, ShapeError, Tensor, fail, one_site
from . import init
from .module import Module, place, placeholder_parameter


@one_site
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None):
    """x1^T W[o] x2 + b[o] for each output feature o, over the last axis of each input
    (their leading axes must be the same), as torch.nn.functional.bilinear.

    Computed as one matrix product of x1 with W seen as (in1, out * in2), then a product
    with x2 summed over in2: no (batch, out, in1, in2) intermediate.
    """
    _check(input1, input2, weight, bias)
    out_features, in1, in2 = weight.shape
    lead = input1.shape[:-1]
    x1 = input1.reshape(-1, in1)
    x2 = input2.reshape(-1, 1, in2)
    folded = weight.permute(1, 0, 2).reshape(in1, out_features * in2)
    y = ((x1 @ folded).reshape(-1, out_features, in2) * x2).sum(-1)
    if bias is not None:
        y = y + bias
    return y.reshape(lead + (out_features,))


def _check(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """torch's checks, with its messages (RuntimeError; fusegrad's ShapeError is one)."""
    tensors = [("input1", input1), ("input2", input2), ("weight", weight)]
    if bias is not None:
        tensors.append(("bias", bias))
    if len({t.dtype for _, t in tensors}) > 1:
        listed = ", ".join(f"{name}: {t.dtype.name}" for name, t in tensors)
        fail(DTypeError, "bilinear", f"All tensors must have the same dtype, got {listed}")
    if weight.ndim != 3:
        fail(
            ShapeError,
            "bilinear",
            f"weight must be 3-d (out_features, in1_features, in2_features), got shape "
            f"{weight.shape}",
        )
    if input1.ndim != input2.ndim:
        fail(
            ShapeError,
            "bilinear",
            f"input dimensions do not match: got {input1.ndim} and {input2.ndim}",
        )
    if input1.ndim == 0:
        fail(ShapeError, "bilinear", "inputs must have at least one dimension, got 0-d tensors")
    for d, (a, b) in enumerate(zip(input1.shape[:-1], input2.shape[:-1])):
        if a != b:
            fail(
                ShapeError,
                "bilinear",
                f"input batch dimensions do not match at dim {d}: got {a} and {b}",
            )
    for name, size, expected in (
        ("input1", input1.shape[-1], weight.shape[1]),
        ("input2", input2.shape[-1], weight.shape[2]),
    ):
        if size != expected:
            fail(
                ShapeError,
                "bilinear",
                f"{name} size does not match weight size: got {size} but expected {expected}",
            )
    if bias is not None and bias.shape != weight.shape[:1]:
        fail(
            ShapeError,
            "bilinear",
            f"bias size does not match weight size: got shape {bias.shape} but expected "
            f"({weight.shape[0]},)",
        )


class Bilinear(Module):
    """y = x1^T W x2 + b, W of shape (out_features, in1_features, in2_features), as
    torch.nn.Bilinear; initialised as torch's: W and b from U(-1/sqrt(in1_features),
    1/sqrt(in1_features)) (drawn from fusegrad's `manual_seed` stream, not torch's).

    >>> import fusegrad as fg
    >>> layer = Bilinear(3, 4, 2)
    >>> layer
    Bilinear(in1_features=3, in2_features=4, out_features=2, bias=True)
    >>> layer(fg.ones(5, 3), fg.ones(5, 4)).shape
    (5, 2)
    """

    def __init__(
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = placeholder_parameter(out_features, in1_features, in2_features, dtype=dtype)
        if bias:
            self.bias = placeholder_parameter(out_features, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        place(self, device)

    def reset_parameters(self) -> None:
        if self.in1_features <= 0:
            raise ValueError(
                f"in1_features must be > 0, but got (in1_features={self.in1_features})"
            )
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )
