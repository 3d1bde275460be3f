"""Lazy layers, as torch's (`torch.nn.modules.lazy`): `LazyLinear` infers `in_features`,
`LazyConv1d/2d/3d` and `LazyConvTranspose1d/2d/3d` `in_channels`, `LazyBatchNorm1d/2d/3d`
and `LazyInstanceNorm1d/2d/3d` `num_features` from their first input; their parameters
are `UninitializedParameter`s (the norms' running statistics `UninitializedBuffer`s)
until then.

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
(its class changes to its `cls_to_become`, as torch's).

>>> conv = nn.LazyConv2d(4, 3)
>>> conv(fg.ones(2, 3, 5, 5)).shape, conv
((2, 4, 3, 3), Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1)))
"""

from __future__ import annotations

from ..nnapi import (
    FusegradError,
    ShapeError,
    Tensor,
    default_float,
    empty,
    fail,
    is_host_device,
    tensor,
    to_dtype,
    zeros,
)
from .conv import Conv1d, Conv2d
from .conv3d import Conv3d, ConvTranspose3d
from .conv_transpose import ConvTranspose1d, ConvTranspose2d
from .layers import Linear
from .module import Buffer, Module, Parameter, place
from .normalization import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
)


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


class UninitializedBuffer(Buffer):
    """A buffer whose shape is not known yet (as torch.nn.UninitializedBuffer): a lazy
    norm's running statistics, until its first forward calls `materialize(shape)`, which
    gives it a value of that shape (zeros) and makes it a plain `nn.Buffer`, the same
    object. Assigned to a module's attribute it is registered as a buffer, persistent as
    `persistent` says.

    Where fusegrad differs: torch's refuses to be read (its shape raises RuntimeError) and
    becomes a `torch.Tensor`; fusegrad's reads as an empty (0,) tensor of its dtype and
    becomes an `nn.Buffer` (a Tensor subclass: `isinstance(b, Tensor)` holds in both).
    """

    def __init__(
        self, requires_grad: bool = False, device=None, dtype=None, persistent: bool = True
    ):
        dtype = to_dtype(dtype) if dtype is not None else default_float()
        super().__init__(empty(0, dtype=dtype, device=device), persistent=persistent)
        if requires_grad:
            self.requires_grad_()

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Give this buffer a value of `shape` (zeros; on `device`, as `dtype`, by default
        its own) and make it a plain `nn.Buffer`."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = to_dtype(dtype) if dtype is not None else self.dtype
        device = str(device if device is not None else self.device)
        self.__class__ = Buffer
        self.data = zeros(*shape, dtype=dtype, device=device)

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        out = type(self)(self.requires_grad, str(self.device), self.dtype, self.persistent)
        memo[id(self)] = out
        return out

    def __reduce_ex__(self, protocol):
        args = (self.requires_grad, str(self.device), self.dtype.name, self.persistent)
        return (_rebuild_uninitialized_buffer, args)

    def __repr__(self) -> str:
        return "<UninitializedBuffer>"


def _rebuild_uninitialized_buffer(
    requires_grad: bool, device: str, dtype: str, persistent: bool
) -> UninitializedBuffer:
    return UninitializedBuffer(requires_grad, device, dtype, persistent)


def _uninitialized(t) -> bool:
    return isinstance(t, (UninitializedParameter, UninitializedBuffer))


class LazyModuleMixin:
    """What the lazy layers share (as torch.nn.modules.lazy.LazyModuleMixin): a size the
    first input gives (`initialize_parameters`), after which the module's class becomes
    `cls_to_become` and its forward is that class's.

    Where fusegrad differs: torch runs the initialisation as a forward pre-hook (a hook
    registered on the module runs after it); fusegrad's runs inside `forward`, so such a
    hook sees the uninitialized parameters.
    """

    cls_to_become: type | None = None

    def has_uninitialized_params(self) -> bool:
        """Whether a parameter or buffer still waits for its shape."""
        tensors = (*self._parameters.values(), *self._buffers.values())
        return any(_uninitialized(t) for t in tensors)

    def initialize_parameters(self, input: Tensor) -> None:
        """Give the parameters the shapes `input` implies, initialise them as the concrete
        class does, and make the module that class."""
        if self.has_uninitialized_params():
            self._materialize(self._size_from(input))

    def forward(self, input: Tensor, *args, **kwargs) -> Tensor:
        concrete = self.cls_to_become
        self.initialize_parameters(input)
        return concrete.forward(self, input, *args, **kwargs)

    def _materialize(self, size: int) -> None:
        """The lazy size becomes `size`: each uninitialized tensor gets its shape (on the
        host, initialised there, then moved, as the concrete layer's placeholders)."""
        device = None
        self._set_size(size)
        shapes = self._shapes()
        for store in (self._parameters, self._buffers):
            for name, t in store.items():
                if _uninitialized(t):
                    device = t.device
                    t.materialize(shapes[name], device="cpu")
        self.__class__ = self.cls_to_become
        self.reset_parameters()
        if device is not None and not is_host_device(str(device)):
            place(self, device)

    def _take_shapes(self, state_dict, prefix: str) -> None:
        """Before `load_state_dict`: the checkpoint's tensors give the size (their values
        are then loaded as the concrete layer's)."""
        if self.has_uninitialized_params():
            size = self._size_in(state_dict, prefix)
            if size is not None:
                self._materialize(size)


class LazyLinear(LazyModuleMixin, Linear):
    """A `Linear` whose `in_features` is the size of the last axis of its first input, as
    torch.nn.LazyLinear: `weight` and `bias` are `UninitializedParameter`s until then,
    initialised as Linear's when they get their shapes, and the module becomes a `Linear`.

    A `load_state_dict` before the first forward gives the parameters the checkpoint's
    shapes, as torch's; fusegrad's module is a Linear at once (torch's stays a LazyLinear
    with `in_features=0` until its first forward). A forward pre-hook registered on the
    module sees the uninitialized parameters (torch's own hook runs first).
    """

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        Module.__init__(self)
        self.in_features, self.out_features = 0, out_features
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)

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


# ---------------------------------------------------------------- convolutions


class _LazyConvMixin(LazyModuleMixin):
    """A convolution's lazy `in_channels`: dim 1 of a batched input, dim 0 of an unbatched
    one, as torch's `_LazyConvXdMixin`."""

    transposed = False

    def _lazy_init(self, out_channels: int, bias: bool, device, dtype) -> None:
        """After the concrete __init__ with in_channels 0: the parameters wait."""
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            self.cls_to_become.reset_parameters(self)

    def _size_from(self, input: Tensor) -> int:
        n = self.n
        if input.ndim not in (n + 1, n + 2):
            fail(
                ShapeError,
                type(self).__name__,
                f"Expected {n + 1}D (unbatched) or {n + 2}D (batched) input to "
                f"{type(self).__name__}, but got input of size: {list(input.shape)}",
            )
        return input.shape[0 if input.ndim == n + 1 else 1]

    def _set_size(self, in_channels: int) -> None:
        if in_channels % self.groups:
            raise ValueError("in_channels must be divisible by groups")
        self.in_channels = in_channels

    def _shapes(self) -> dict:
        if self.transposed:
            weight = (self.in_channels, self.out_channels // self.groups, *self.kernel_size)
        else:
            weight = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
        return {"weight": weight, "bias": (self.out_channels,)}

    def _size_in(self, state_dict, prefix: str) -> int | None:
        weight = state_dict.get(prefix + "weight")
        if weight is None or len(weight.shape) != self.n + 2:
            return None  # load_state_dict reports the mismatch
        shape = tuple(weight.shape)
        if self.transposed:
            ok = shape[1] * self.groups == self.out_channels and shape[0] % self.groups == 0
            size = shape[0]
        else:
            ok = shape[0] == self.out_channels
            size = shape[1] * self.groups
        return size if ok and shape[2:] == self.kernel_size else None


class _LazyConvNd(_LazyConvMixin):
    def __init__(
        self,
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
        self.cls_to_become.__init__(
            self, 0, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            padding_mode,
        )  # fmt: skip
        self._lazy_init(out_channels, bias, device, dtype)


class _LazyConvTransposeNd(_LazyConvMixin):
    transposed = True

    def __init__(
        self,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        self.cls_to_become.__init__(
            self, 0, out_channels, kernel_size, stride, padding, output_padding, groups, bias,
            dilation, padding_mode,
        )  # fmt: skip
        self._lazy_init(out_channels, bias, device, dtype)


class LazyConv1d(_LazyConvNd, Conv1d):
    """A `Conv1d` whose `in_channels` is its first input's channel count (dim 1 of
    (N, C, L), dim 0 of unbatched (C, L)), as torch.nn.LazyConv1d; it then becomes a
    Conv1d, initialised as one."""

    cls_to_become = Conv1d


class LazyConv2d(_LazyConvNd, Conv2d):
    """A `Conv2d` whose `in_channels` its first input gives, as torch.nn.LazyConv2d."""

    cls_to_become = Conv2d


class LazyConv3d(_LazyConvNd, Conv3d):
    """A `Conv3d` whose `in_channels` its first input gives, as torch.nn.LazyConv3d."""

    cls_to_become = Conv3d


class LazyConvTranspose1d(_LazyConvTransposeNd, ConvTranspose1d):
    """A `ConvTranspose1d` whose `in_channels` its first input gives, as
    torch.nn.LazyConvTranspose1d (`forward(input, output_size=None)` as the layer's)."""

    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTransposeNd, ConvTranspose2d):
    """A `ConvTranspose2d` whose `in_channels` its first input gives, as
    torch.nn.LazyConvTranspose2d."""

    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTransposeNd, ConvTranspose3d):
    """A `ConvTranspose3d` whose `in_channels` its first input gives, as
    torch.nn.LazyConvTranspose3d."""

    cls_to_become = ConvTranspose3d


# ---------------------------------------------------------------- normalization


class _LazyNormBase(LazyModuleMixin):
    """A norm's lazy `num_features`, as torch's `_LazyNormBase`: its defaults are affine
    and tracking running statistics, also for the instance norms (as torch's)."""

    def __init__(
        self,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        self.cls_to_become.__init__(self, 0, eps, momentum, False, False, bias=False)
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)
        if track_running_stats:
            self.register_buffer("running_mean", UninitializedBuffer(device=device, dtype=dtype))
            self.register_buffer("running_var", UninitializedBuffer(device=device, dtype=dtype))
            count = tensor(0, dtype="int64", device=device).realize()
            self.register_buffer("num_batches_tracked", count)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            self.cls_to_become.reset_parameters(self)

    def _size_from(self, input: Tensor) -> int:
        if input.ndim < 2:  # (torch: IndexError)
            fail(
                LazyShapeError,
                type(self).__name__,
                f"a {input.ndim}-d input has no dim 1 to read num_features from",
            )
        self._check_dims(input)
        return input.shape[1]

    def _check_dims(self, input: Tensor) -> None:
        """The concrete class's check of the input's dims, before anything changes."""

    def _set_size(self, num_features: int) -> None:
        self.num_features = num_features

    def _shapes(self) -> dict:
        n = (self.num_features,)
        return {"weight": n, "bias": n, "running_mean": n, "running_var": n}

    def _size_in(self, state_dict, prefix: str) -> int | None:
        for name in ("weight", "bias", "running_mean", "running_var"):
            t = state_dict.get(prefix + name)
            if _uninitialized(getattr(self, name)) and t is not None and len(t.shape) == 1:
                return int(t.shape[0])
        return None


class _LazyBatchNorm(_LazyNormBase):
    def _check_dims(self, input: Tensor) -> None:
        if input.ndim not in self.dims:
            wanted = " or ".join(f"{d}D" for d in self.dims)
            raise ValueError(f"expected {wanted} input (got {input.ndim}D input)")


class _LazyInstanceNorm(_LazyNormBase):
    def _check_dims(self, input: Tensor) -> None:
        n = self.unbatched_dims
        if input.ndim not in (n, n + 1):
            raise ValueError(f"expected {n}D or {n + 1}D input (got {input.ndim}D input)")

    def _size_from(self, input: Tensor) -> int:
        size = _LazyNormBase._size_from(self, input)
        return input.shape[0] if input.ndim == self.unbatched_dims else size


class LazyBatchNorm1d(_LazyBatchNorm, BatchNorm1d):
    """A `BatchNorm1d` whose `num_features` is dim 1 of its first input, as
    torch.nn.LazyBatchNorm1d: weight, bias and running statistics wait until then, and
    the module then becomes a BatchNorm1d (weight ones, bias zeros, statistics reset).

    An input of under 2 dims raises IndexError, as torch's. Where fusegrad differs: an
    input of another wrong number of dims raises ValueError before the module takes a
    size (torch's takes dim 1's, then raises the same error)."""

    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyBatchNorm, BatchNorm2d):
    """A `BatchNorm2d` whose `num_features` its first input gives, as
    torch.nn.LazyBatchNorm2d."""

    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyBatchNorm, BatchNorm3d):
    """A `BatchNorm3d` whose `num_features` its first input gives, as
    torch.nn.LazyBatchNorm3d."""

    cls_to_become = BatchNorm3d


class LazyInstanceNorm1d(_LazyInstanceNorm, InstanceNorm1d):
    """An `InstanceNorm1d` whose `num_features` is its first input's channel count, as
    torch.nn.LazyInstanceNorm1d (affine and track_running_stats on by default, as
    torch's lazy instance norms).

    Where fusegrad differs: an unbatched (C, L) input gives C (torch's reads dim 1, L,
    and then refuses the input)."""

    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyInstanceNorm, InstanceNorm2d):
    """An `InstanceNorm2d` whose `num_features` its first input gives, as
    torch.nn.LazyInstanceNorm2d."""

    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyInstanceNorm, InstanceNorm3d):
    """An `InstanceNorm3d` whose `num_features` its first input gives, as
    torch.nn.LazyInstanceNorm3d."""

    cls_to_become = InstanceNorm3d
