"""`fg.poisson` and `fg.binomial`: counts drawn on the host, as torch's.

The parameters are computed first, then numpy's `poisson` / `binomial` draw from a
generator seeded by fusegrad's (`fg.manual_seed`, or the `generator=` given, repeats
them), as `distributions.Poisson` does; `fusegrad.jit` refuses them (it cannot replay a
host draw). The counts are floats of the parameters' dtype, as torch's.

>>> import fusegrad as fg
>>> fg.manual_seed(0)
>>> counts = fg.poisson(fg.tensor([0.0, 3.0]))
>>> counts.dtype, counts[0].item()
(fusegrad.float32, 0.0)
>>> fg.binomial(fg.tensor([5.0, 0.0]), fg.tensor([1.0, 0.5])).tolist()
[5.0, 0.0]
"""

from __future__ import annotations

import numpy as np

from .autograd_state import no_grad
from .creation import tensor as _tensor
from .creation_nodes import host_rng
from .errors import ArgumentError, DTypeError, DTypeNotImplementedError, JitError, fail
from .function import Function
from .jithooks import recording
from .tensor import Tensor, broadcast_shapes


def _host(t: Tensor, shape) -> np.ndarray:
    with no_grad():
        return t.detach().expand(shape).double().numpy()


class _Poisson(Function):
    """Poisson draws of `rates`; their gradient is zero, as torch's (PoissonBackward0)."""

    @staticmethod
    def forward(ctx, rates, generator):
        host = _host(rates, rates.shape)
        if not (host >= 0).all():  # (NaN too, as torch)
            fail(ArgumentError, "poisson", "invalid Poisson rate, expected rate to be non-negative")
        draws = host_rng(generator).poisson(host)
        return _tensor(draws, dtype=rates.dtype, device=rates.device)

    @staticmethod
    def backward(ctx, grad):
        return grad * 0, None


def poisson(input: Tensor, generator=None) -> Tensor:
    """Counts drawn from Poisson(`input`) elementwise (rates >= 0), in input's float dtype
    (torch.poisson); the gradient with respect to the rates is zero, as torch's."""
    if recording():
        fail(JitError, "poisson", "Poisson draws are made on the host: fusegrad.jit cannot replay")
    if not input.dtype.is_float:
        fail(DTypeNotImplementedError, "poisson", f"not implemented for '{input.dtype.name}'")
    return _Poisson.apply(input, generator)


class _Binomial(Function):
    """Binomial draws; torch has no derivative for them, so backward refuses."""

    @staticmethod
    def forward(ctx, count, prob, generator):
        shape = broadcast_shapes(count.shape, prob.shape, "binomial")
        n = np.maximum(np.nan_to_num(_host(count, shape)), 0).astype(np.int64)
        p = np.clip(np.nan_to_num(_host(prob, shape)), 0.0, 1.0)
        draws = host_rng(generator).binomial(n, p).astype(np.float64)
        return _tensor(draws, dtype=count.dtype, device=count.device)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("derivative for aten::binomial is not implemented")


def binomial(count: Tensor, prob: Tensor, generator=None) -> Tensor:
    """The number of successes in `count` trials of probability `prob`, elementwise (the
    two broadcast; float tensors of one dtype), in count's dtype (torch.binomial).
    Counts are truncated to whole numbers and negative ones read as 0, probabilities
    clamped to [0, 1]. torch has no gradient for it: a backward pass through it raises
    RuntimeError, as torch's."""
    if recording():
        fail(JitError, "binomial", "binomial draws are made on the host: the jit cannot replay")
    if not count.dtype.is_float:
        raise ValueError(
            f"binomial only supports floating-point dtypes for count, got: {count.dtype.name}"
        )
    if prob.dtype != count.dtype:
        fail(
            DTypeError,
            "binomial",
            f"Found dtype {prob.dtype.name} but expected {count.dtype.name}",
        )
    return _Binomial.apply(count, prob, generator)
