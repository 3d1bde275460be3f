"""Lazy layers, as torch's (`torch.nn.modules.lazy`): `LazyLinear` infers `in_features`
from its first input, its parameters `UninitializedParameter`s until then.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> layer = nn.LazyLinear(3)
>>> layer
LazyLinear(in_features=0, out_features=3, bias=True)
>>> layer(fg.ones(5, 4)).shape, layer
((5, 3), Linear(in_features=4, out_features=3, bias=True))

The parameters are the same objects before and after: an optimizer built on them before
the first forward updates them after it, as in torch. After the first forward (or a
`load_state_dict` that gives every parameter its shape) the module *is* a `Linear`
(its class changes, as torch's `cls_to_become`).
"""

from __future__ import annotations

from ..nnapi import (
    FusegradError,
    Tensor,
    default_float,
    empty,
    fail,
    is_host_device,
    to_dtype,
    zeros,
)
from .layers import Linear
from .module import Module, Parameter, place


class UninitializedParameter(Parameter):
    """A parameter whose shape is not known yet (as torch.nn.UninitializedParameter): a
    lazy layer's, until its first forward calls `materialize(shape)`, which gives it a
    value of that shape (zeros, which the layer's `reset_parameters` then sets) and makes
    it a plain `Parameter`, the same object.

    Where fusegrad differs: torch's refuses to be read (its shape raises RuntimeError,
    ops on it ValueError); fusegrad's reads as an empty (0,) tensor of its dtype, so
    `state_dict()` before the first forward holds empty tensors.
    """

    __slots__ = ()

    def __init__(self, requires_grad: bool = True, device=None, dtype=None):
        dtype = to_dtype(dtype) if dtype is not None else default_float()
        super().__init__(empty(0, dtype=dtype, device=device), requires_grad)

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Give this parameter a value of `shape` (zeros; on `device`, as `dtype`, by
        default its own) and make it a plain `Parameter`."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = to_dtype(dtype) if dtype is not None else self.dtype
        device = str(device if device is not None else self.device)
        self.__class__ = Parameter
        self.data = zeros(*shape, dtype=dtype, device=device)

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        out = type(self)(self.requires_grad, str(self.device), self.dtype)
        memo[id(self)] = out
        return out

    def __reduce_ex__(self, protocol):
        return (_rebuild_uninitialized, (self.requires_grad, str(self.device), self.dtype.name))

    def __repr__(self) -> str:
        return "<UninitializedParameter>"


def _rebuild_uninitialized(requires_grad: bool, device: str, dtype: str) -> UninitializedParameter:
    return UninitializedParameter(requires_grad, device, dtype)


class LazyLinear(Linear):
    """A `Linear` whose `in_features` is the size of the last axis of its first input, as
    torch.nn.LazyLinear: `weight` and `bias` are `UninitializedParameter`s until then,
    initialised as Linear's when they get their shapes, and the module becomes a `Linear`.

    A `load_state_dict` before the first forward gives the parameters the checkpoint's
    shapes, as torch's; fusegrad's module is a Linear at once (torch's stays a LazyLinear
    with `in_features=0` until its first forward). A forward pre-hook registered on the
    module sees the uninitialized parameters (torch's own hook runs first).
    """

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        Module.__init__(self)
        self.in_features, self.out_features = 0, out_features
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)

    def has_uninitialized_params(self) -> bool:
        """Whether a parameter still waits for its shape."""
        return any(isinstance(p, UninitializedParameter) for p in self._parameters.values())

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            Linear.reset_parameters(self)

    def initialize_parameters(self, input: Tensor) -> None:
        """Give the parameters the shapes `input` implies and initialise them, as Linear."""
        if not self.has_uninitialized_params():
            return
        if input.ndim == 0:
            fail(
                LazyShapeError,
                "LazyLinear",
                "a 0-d input has no last axis to read in_features from",
            )
        self._materialize(input.shape[-1])

    def forward(self, input: Tensor) -> Tensor:
        self.initialize_parameters(input)
        return Linear.forward(self, input)  # (its class is Linear now)

    def _materialize(self, in_features: int) -> None:
        device = self.weight.device
        self.in_features = in_features
        # zeros on the host, initialised there and then moved, as Linear's placeholders
        self.weight.materialize((self.out_features, in_features), device="cpu")
        if self.bias is not None:
            self.bias.materialize((self.out_features,), device="cpu")
        self.reset_parameters()
        if not is_host_device(str(device)):
            place(self, device)
        self.__class__ = Linear

    def _take_shapes(self, state_dict, prefix: str) -> None:
        """Before `load_state_dict`: the checkpoint's weight gives the parameters their
        shapes (its values are then loaded as any Linear's)."""
        if not self.has_uninitialized_params():
            return
        weight = state_dict.get(prefix + "weight")
        if weight is None or len(weight.shape) != 2 or weight.shape[0] != self.out_features:
            return  # load_state_dict reports the mismatch
        self._materialize(int(weight.shape[1]))


class LazyShapeError(FusegradError, IndexError):
    """A lazy layer's input whose shape does not say the layer's size (torch raises
    IndexError)."""
