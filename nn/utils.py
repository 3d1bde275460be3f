"""`fusegrad.nn.utils`: the name PyTorch users reach for; the functions live in clip_grad.py.

>>> from fusegrad import nn
>>> nn.utils.clip_grad_norm_ is nn.clip_grad.clip_grad_norm_
True
"""

from ..nnapi import (
    Tensor,
    cat,
    no_grad,
)
from . import utils_rnn as rnn  # nn.utils.rnn.pad_sequence, ... as torch.nn.utils.rnn
from .clip_grad import clip_grad_norm_, clip_grad_value_

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "parameters_to_vector",
    "rnn",
    "vector_to_parameters",
]


def parameters_to_vector(parameters):
    """The parameters' values flattened and joined into one vector (differentiable)."""
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters) -> None:
    """Copy consecutive pieces of `vec` into the parameters (in place, no history)."""

    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    start = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[start : start + n].reshape(p.shape))
            start += n
