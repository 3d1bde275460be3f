"""`fusegrad.nn.utils`, as torch.nn.utils: gradient clipping (clip_grad.py), the
parameters as one vector, parametrizations (`parametrize`, `parametrizations`), the
hook-based `weight_norm` and `spectral_norm` (norm_hooks.py), BatchNorm folding
(fusion.py), `stateless.functional_call`, `skip_init`, and the packed sequences of `rnn`.
Its submodules import as torch's do: `import fusegrad.nn.utils.parametrize as P`.

>>> from fusegrad import nn
>>> nn.utils.clip_grad_norm_ is nn.clip_grad.clip_grad_norm_
True
"""

import inspect
import sys

from ..nnapi import (
    Tensor,
    cat,
    no_grad,
)
from . import parametrizations, parametrize, stateless
from . import utils_rnn as rnn  # nn.utils.rnn.pad_sequence, ... as torch.nn.utils.rnn
from .clip_grad import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)
from .fusion import (
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
)
from .module import Module
from .norm_hooks import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm

__all__ = [
    "clip_grad_norm",
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "convert_conv2d_weight_memory_format",
    "convert_conv3d_weight_memory_format",
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
    "get_total_norm",
    "parameters_to_vector",
    "parametrizations",
    "parametrize",
    "remove_spectral_norm",
    "remove_weight_norm",
    "rnn",
    "skip_init",
    "spectral_norm",
    "stateless",
    "vector_to_parameters",
    "weight_norm",
]

# `import fusegrad.nn.utils.parametrize` and the like find them (this is a module, not a
# package): the import system looks in sys.modules before it looks for a file
for _name, _module in (
    ("parametrize", parametrize),
    ("parametrizations", parametrizations),
    ("stateless", stateless),
    ("rnn", rnn),
):
    sys.modules.setdefault(f"{__name__}.{_name}", _module)


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


def skip_init(module_cls, *args, **kwargs):
    """`module_cls(*args, **kwargs)` without its parameters' initialization, as torch's:
    the class must be a Module taking `device=`. Where fusegrad differs: torch's
    parameters hold uninitialized memory (any values), fusegrad's the layer's usual
    initial values (a layer's initialization is a few lazy kernels here, run with the
    first step, not a pass over memory worth skipping).

    >>> from fusegrad import nn
    >>> nn.utils.skip_init(nn.Linear, 3, 2).weight.shape
    (2, 3)
    """
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    kwargs.setdefault("device", "cpu")
    return module_cls(*args, **kwargs)


def convert_conv2d_weight_memory_format(module: Module, memory_format) -> Module:
    """torch's conversion of the 2-D convolutions' weights to `memory_format`
    (channels_last): fusegrad keeps no memory formats (each kernel's layout is chosen when
    its plan is compiled), so the module is returned unchanged."""
    return module


def convert_conv3d_weight_memory_format(module: Module, memory_format) -> Module:
    """torch's conversion of the 3-D convolutions' weights to `memory_format`
    (channels_last_3d): fusegrad keeps no memory formats, so the module is returned
    unchanged."""
    return module
