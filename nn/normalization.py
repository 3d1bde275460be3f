"""Normalization layers: LayerNorm, BatchNorm1d/2d, GroupNorm, RMSNorm, InstanceNorm1d/2d/3d,
and `F.normalize`.

Statistics are biased means and variances over the normalized axes, computed
as graph (so they fuse, and their gradients come from the primitives'
rules). BatchNorm keeps PyTorch's running statistics as module buffers: in
training each forward updates them with `momentum` (the unbiased batch
variance, as PyTorch), or with a cumulative average when momentum is None;
`eval()` normalizes with them instead.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> ln = nn.LayerNorm(4)
>>> y = ln(fg.tensor([[1.0, 2.0, 3.0, 4.0]]))
>>> [round(v, 4) for v in y.tolist()[0]]
[-1.3416, -0.4472, 0.4472, 1.3416]
"""

from __future__ import annotations

import math
import warnings
import weakref

import numpy as np

from ..nnapi import (
    DTypeNotImplementedError,
    FusegradError,
    ShapeError,
    Tensor,
    autocast_op,
    default_float,
    fail,
    from_numpy,
    fused_layer_norm,
    no_grad,
    one_site,
    ones,
    tensor,
    where,
    zeros,
)
from ..nnapi import distributed as dist
from ..nnapi import realize as _realize
from . import init
from .module import Module, Parameter, place


def _normalized(x: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(axes, keepdim=True)
    return centered * (var + eps).rsqrt()


# ---------------------------------------------------------------- functions


def _shape_of(normalized_shape) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    return tuple(int(s) for s in shape)


def _normalized_axes(op: str, input: Tensor, normalized_shape) -> tuple[int, ...]:
    """`normalized_shape` as a tuple, where it is the input's last axes (else raise)."""
    shape = _shape_of(normalized_shape)
    k = len(shape)
    if k == 0 or input.ndim < k or tuple(input.shape[input.ndim - k :]) != shape:
        fail(
            ShapeError,
            op,
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], but got input of size {input.shape}",
        )
    return shape


@autocast_op("layer_norm")
@one_site
def layer_norm(
    input: Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5
) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the last len(normalized_shape) axes, then * w + b."""
    k = len(_normalized_axes("layer_norm", input, normalized_shape))
    x = input._float()
    fused = fused_layer_norm(x, k, eps, weight, bias)
    if fused is not None:
        return fused
    out = _normalized(x, tuple(range(x.ndim - k, x.ndim)), eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


@one_site
def rms_norm(input: Tensor, normalized_shape, weight=None, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the last len(normalized_shape) axes, then * weight, as
    torch.nn.functional.rms_norm: eps None is the machine epsilon of the type it computes
    in; a 16-bit input is normalized in float32 (float32's epsilon) and rounded once.

    >>> import fusegrad as fg
    >>> from fusegrad.nn import functional as F
    >>> [round(v, 4) for v in F.rms_norm(fg.tensor([[3.0, 4.0]]), (2,), eps=0.0)[0].tolist()]
    [0.8485, 1.1314]
    """
    k = len(_normalized_axes("rms_norm", input, normalized_shape))
    if not input.dtype.is_float:
        fail(DTypeNotImplementedError, "rms_norm", f"not implemented for {input.dtype.name}")
    x = input.float() if input.dtype.itemsize < 4 else input
    if eps is None:  # (of the type it computes in: a 16-bit input's is float32's, as torch's)
        eps = float(x.dtype.finfo.eps)
    axes = tuple(range(x.ndim - k, x.ndim))
    out = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    if weight is not None:
        out = out * weight
    return out.to(input.dtype) if out.dtype != input.dtype else out


@autocast_op("group_norm")
@one_site
def group_norm(input: Tensor, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalize each of `num_groups` channel groups of each sample, then per-channel w, b."""
    if input.ndim < 2:
        fail(ShapeError, "group_norm", f"expected at least 2 dims (N, C, ...), got {input.shape}")
    n, c = input.shape[:2]
    if c % num_groups:
        fail(
            ShapeError,
            "group_norm",
            f"Expected number of channels in input to be divisible by num_groups, but got "
            f"input of shape {input.shape} and num_groups={num_groups}",
        )
    # (the group's size spelled out: -1 cannot be inferred for an empty batch)
    x = input._float().reshape(n, num_groups, c // num_groups * math.prod(input.shape[2:]))
    out = _normalized(x, (2,), eps).reshape(*input.shape)
    per_channel = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


@autocast_op("batch_norm")
@one_site
def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float | None = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize each channel (dim 1) over the batch and spatial axes, as F.batch_norm.

    training=True uses the batch's statistics and, when running buffers are
    given, updates them in place: r = (1 - momentum) r + momentum * s, with
    the unbiased variance (momentum=None: the caller passes the cumulative
    factor; see BatchNorm). training=False uses the running statistics.
    """
    if input.ndim < 2:
        fail(ShapeError, "batch_norm", f"expected at least 2 dims (N, C, ...), got {input.shape}")
    c = input.shape[1]
    x = input._float()
    axes = (0,) + tuple(range(2, x.ndim))
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is not None and t.shape != (c,):
            fail(ShapeError, "batch_norm", f"{name} should have shape ({c},), got {t.shape}")
    if training:
        count = x.numel() // c
        if count == 1:
            raise ValueError(
                "Expected more than 1 value per channel when training, "
                f"got input size {input.shape}"
            )
        mean = x.mean(axes, keepdim=True)
        centered = x - mean
        var = (centered * centered).mean(axes, keepdim=True)
        out = centered * (var + eps).rsqrt()
        # (an empty batch leaves the running statistics as they are, as torch's does)
        if count and (running_mean is not None or running_var is not None):
            _update_running(running_mean, running_var, mean, var, count, momentum)
    else:
        if running_mean is None or running_var is None:
            fail(ShapeError, "batch_norm", "running_mean and running_var are needed in eval mode")
        out = _normalized_by_running(x, running_mean, running_var, eps, per_channel)
    return _affine(out, weight, bias, per_channel)


def _normalized_by_running(x, running_mean, running_var, eps: float, per_channel) -> Tensor:
    """x normalized by the running statistics (eval mode), each channel by its own."""
    mean, var = running_mean.reshape(per_channel), running_var.reshape(per_channel)
    return (x - mean) * (var + eps).rsqrt()


def _affine(out, weight, bias, per_channel) -> Tensor:
    """out * weight + bias, per channel, each where given."""
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


def _update_running(running_mean, running_var, mean, var, count: int, momentum) -> None:
    """r = (1 - m) r + m s, lazily: the step's optimizer computes it with the step
    (carried.py), from the statistics the forward pass computes anyway. Computing it here
    would run the forward pass up to this layer once more for every layer (a ResNet-18
    step computed its convolutions 4x over). Updates no step computed yet chain, up to
    `MAX_CHAINED_UPDATES` (`bound_chain`), so the chain of updates never grows with a
    loop. `momentum`: a float, or a 0-d tensor (BatchNorm's cumulative average, 1 / count)."""
    m = 0.1 if momentum is None else momentum if isinstance(momentum, Tensor) else float(momentum)
    updated = []
    with no_grad():
        if running_mean is not None:
            new = (1.0 - m) * running_mean + m * mean.detach().reshape(-1)
            updated.append((running_mean, new.cast(running_mean.dtype)))
        if running_var is not None:
            unbiased = var.detach().reshape(-1) * (count / (count - 1))
            new = (1.0 - m) * running_var + m * unbiased
            updated.append((running_var, new.cast(running_var.dtype)))
        bound_chain(updated)
        for target, value in updated:
            target.assign_(value)


# Updates of running buffers chained lazily, not yet computed by an optimizer step (which
# computes them with its own outputs, carried.py) or a read: past this many (a loop of
# train-mode forwards with no step, a statistics pass under no_grad), the chain is
# computed, so its graph does not grow with the loop. A module called several times in a
# step (a GAN's discriminator, on real, fake and fake again) chains its updates instead
# of running the forward pass up to each of its layers once more at every call.
MAX_CHAINED_UPDATES = 4
_chained: dict[int, tuple] = {}  # id(buffer) -> (weak reference, updates chained on it)


def bound_chain(updated: list[tuple]) -> None:
    """Before each `(buffer, new value)` is assigned: compute the new values now when a
    buffer's chain of lazy updates is `MAX_CHAINED_UPDATES` long, and count the chain."""
    depth = 0
    for target, _ in updated:
        if not target._has_value():
            ref, count = _chained.get(id(target), (None, 0))
            depth = max(depth, count if ref is not None and ref() is target else 1)
    if depth >= MAX_CHAINED_UPDATES:
        _realize(*[v for _, v in updated])
        depth = -1
    for target, _ in updated:
        key = id(target)
        ref = _chained.get(key, (None, 0))[0]
        if ref is None or ref() is not target:  # (one reference a buffer, made once)
            ref = weakref.ref(target, lambda _, key=key: _chained.pop(key, None))
        _chained[key] = (ref, depth + 1)


def _verify_spatial_size(shape: tuple[int, ...]) -> None:
    if math.prod(shape[2:]) == 1:
        raise ValueError(
            f"Expected more than 1 spatial element when training, got input size {shape}"
        )


@autocast_op("instance_norm")
@one_site
def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize each channel of each sample (N, C, *spatial) over its spatial axes, then
    per-channel weight and bias, as F.instance_norm. With use_input_stats (training) the
    running buffers, when given, move toward the batch's mean of the samples' statistics
    (the unbiased variance, as batch_norm's): r = mean over samples of (1 - m) r + m s;
    without it they normalize instead.

    >>> import fusegrad as fg
    >>> from fusegrad.nn import functional as F
    >>> [round(v, 4) for v in F.instance_norm(fg.tensor([[[1.0, 2.0, 3.0]]]))[0, 0].tolist()]
    [-1.2247, 0.0, 1.2247]
    """
    if use_input_stats:
        _verify_spatial_size(input.shape)
    elif running_mean is None or running_var is None:
        fail(
            ShapeError,
            "instance_norm",
            "Expected running_mean and running_var to be defined when use_input_stats is false",
        )
    if input.ndim < 2:
        fail(
            ShapeError, "instance_norm", f"expected at least 2 dims (N, C, ...), got {input.shape}"
        )
    if not input.dtype.is_float:
        fail(DTypeNotImplementedError, "instance_norm", f"not implemented for {input.dtype.name}")
    b, c = input.shape[:2]
    channels = dict(weight=weight, bias=bias, running_mean=running_mean, running_var=running_var)
    for name, t in channels.items():
        if t is not None and b and t.numel() != c:  # (torch's check, of them repeated b times)
            fail(
                ShapeError,
                "instance_norm",
                f"{name} should contain {b * c} elements not {t.numel() * b}",
            )
    x = input._float()
    axes = tuple(range(2, x.ndim))
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    if use_input_stats:
        mean = x.mean(axes, keepdim=True)
        centered = x - mean
        var = (centered * centered).mean(axes, keepdim=True)
        out = centered * (var + eps).rsqrt()
        count = math.prod(x.shape[2:])
        if count and (running_mean is not None or running_var is not None):
            _update_from_samples(running_mean, running_var, mean, var, count, momentum)
    else:
        out = _normalized_by_running(x, running_mean, running_var, eps, per_channel)
    return _affine(out, weight, bias, per_channel)


def _update_from_samples(running_mean, running_var, mean, var, count: int, momentum) -> None:
    """Each sample's update of the running buffers, averaged over the batch, as torch's
    instance_norm (an empty batch leaves NaN there, as torch's mean of no samples)."""
    m = float(momentum)
    updated = []
    with no_grad():
        for target, stat in ((running_mean, mean), (running_var, var * (count / (count - 1)))):
            if target is not None:
                samples = (1.0 - m) * target + m * stat.detach().reshape(stat.shape[:2])
                updated.append((target, samples.mean(0).cast(target.dtype)))
        bound_chain(updated)  # (as _update_running)
        for target, value in updated:
            target.assign_(value)


@one_site
def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along `dim`, as F.normalize.

    At a zero vector the gradient is 1 / eps, as PyTorch's (the norm's own gradient
    there is taken as 0, not NaN).
    """
    x = input._float()
    d = x._dim(dim, "normalize")
    a = x.abs()
    if p == float("inf"):
        norm = a.amax(d, keepdim=True)
    elif p == 1:
        norm = a.sum(d, keepdim=True)
    elif p == 2:
        ss = (x * x).sum(d, keepdim=True)
        norm = where(ss == 0, 0.0, where(ss == 0, 1.0, ss).sqrt())  # (NaN stays NaN)
    elif p > 0:
        total = (where(a > 0, a, 1.0) ** p * (a > 0)).sum(d, keepdim=True)
        norm = where(total == 0, 0.0, where(total == 0, 1.0, total) ** (1.0 / p))
    else:
        raise ValueError(f"normalize: p must be positive, got {p}")
    return x / norm.maximum(eps)


# ---------------------------------------------------------------- modules


def _param(*shape: int, value: float) -> Parameter:
    return Parameter(from_numpy(np.full(shape, value, default_float().np)))


class LayerNorm(Module):
    """Normalize over the last axes `normalized_shape`, with a learned scale and shift."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.normalized_shape = _shape_of(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = _param(*self.normalized_shape, value=1.0)
            if bias:
                self.bias = _param(*self.normalized_shape, value=0.0)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        place(self, device, dtype)

    def forward(self, input):
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class RMSNorm(Module):
    """Root-mean-square normalization over the last axes `normalized_shape`, with a learned
    scale (`weight`, ones), as torch.nn.RMSNorm (eps None: `rms_norm`'s default)."""

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.normalized_shape = _shape_of(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = _param(*self.normalized_shape, value=1.0)
        else:
            self.register_parameter("weight", None)
        place(self, device, dtype)

    def forward(self, input):
        return rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class GroupNorm(Module):
    """Normalize channel groups of each sample, as torch.nn.GroupNorm."""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups,
            num_channels,
            eps,
            affine,
        )
        if affine:
            self.weight = _param(num_channels, value=1.0)
            self.bias = _param(num_channels, value=0.0)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        place(self, device, dtype)

    def forward(self, input):
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _BatchNorm(Module):
    dims: tuple[int, ...] = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = _param(num_features, value=1.0)
            if bias:
                self.bias = _param(num_features, value=0.0)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features).realize())
            self.register_buffer("running_var", ones(num_features).realize())
            self.register_buffer("num_batches_tracked", tensor(0, dtype="int64").realize())
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        place(self, device, dtype)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.assign_(zeros(self.num_features, dtype=self.running_mean.dtype))
            self.running_var.assign_(ones(self.num_features, dtype=self.running_var.dtype))
            self.num_batches_tracked.assign_(tensor(0, dtype="int64"))

    def reset_parameters(self) -> None:
        """As torch's: the running statistics reset, weight ones and bias zeros."""
        self.reset_running_stats()
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def _check_input_dim(self, input) -> None:
        if input.ndim not in self.dims:
            wanted = " or ".join(f"{d}D" for d in self.dims)
            raise ValueError(f"expected {wanted} input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            fail(
                ShapeError,
                type(self).__name__,
                f"expected {self.num_features} channels (dim 1), got input of shape {input.shape}",
            )
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            # a count in the graph, not read here: `fg.jit` replays it, and nothing waits
            # on it (a count still lazy from a forward without an optimizer step is
            # computed first, so its graph never grows)
            done = self.num_batches_tracked + 1
            bound_chain([(self.num_batches_tracked, done)])
            self.num_batches_tracked.assign_(done)
            if self.momentum is None:  # cumulative moving average
                # (torch's factor is a Python float: float64 statistics keep it unrounded)
                wide = self.running_mean.dtype.name == "float64"
                factor = 1.0 / (done.double() if wide else done.float())
        use_batch = self.training or not self.track_running_stats
        # running buffers are updated only while training with tracking on
        track = self.training and self.track_running_stats
        return batch_norm(
            input,
            self.running_mean if track or not use_batch else None,
            self.running_var if track or not use_batch else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalization over (N, C) or (N, C, L), as torch.nn.BatchNorm1d."""

    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization over (N, C, H, W), as torch.nn.BatchNorm2d."""

    dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization over (N, C, D, H, W), as torch.nn.BatchNorm3d."""

    dims = (5,)


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over (N, C, ...) inputs of at least 2 dims, as
    torch.nn.SyncBatchNorm: in one process, BatchNorm over the batch (torch's falls back
    to BatchNorm there too), with BatchNorm's parameters, buffers and repr.

    Where fusegrad differs: statistics are not all-reduced across ranks. A training
    forward with `fusegrad.distributed` initialized over more than one rank raises
    NotImplementedError rather than normalize each rank's share by its own statistics;
    in a group of one it is BatchNorm (torch's refuses a CPU input once a group exists).
    `process_group` is kept, never used. In eval mode it is BatchNorm everywhere.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group=None,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
        )
        self.process_group = process_group

    def _check_input_dim(self, input) -> None:
        if input.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        use_batch = self.training or self.running_mean is None
        if use_batch and self.training and dist.is_initialized():
            world = dist.get_world_size()
            if world > 1:
                fail(
                    SyncBatchNormError,
                    "SyncBatchNorm",
                    f"all-reducing the batch statistics across {world} ranks is not "
                    "supported; each rank would normalize by its own share's statistics "
                    "(use BatchNorm for that, or normalize in eval mode)",
                )
        return super().forward(input)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group=None) -> Module:
        """`module` with each BatchNorm1d/2d/3d in it replaced by a SyncBatchNorm holding
        the same parameter and buffer objects (an optimizer over them keeps working) and
        the same training mode, as torch's; a BatchNorm itself gives a new SyncBatchNorm.
        Instance norms and lazy norms still waiting for their size stay as they are."""
        out = module
        lazy = hasattr(module, "cls_to_become")  # a lazy norm not yet given its size
        if isinstance(module, _BatchNorm) and not isinstance(module, _InstanceNorm) and not lazy:
            out = cls(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_group,
                bias=module.bias is not None,
            )
            if module.affine:
                out.weight = module.weight
                out.bias = module.bias
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                out.register_buffer(name, getattr(module, name))
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in list(module.named_children()):
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out


class SyncBatchNormError(FusegradError, NotImplementedError):
    """A SyncBatchNorm training forward over more than one rank: fusegrad does not
    all-reduce the statistics."""


class _InstanceNorm(_BatchNorm):
    """torch's _InstanceNorm: BatchNorm's parameters and buffers (off by default), each
    sample normalized alone; an unbatched input (`unbatched_dims`) is one sample."""

    unbatched_dims = 0

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
        )

    def forward(self, input):
        n = self.unbatched_dims
        if input.ndim not in (n, n + 1):
            raise ValueError(f"expected {n}D or {n + 1}D input (got {input.ndim}D input)")
        feature_dim = input.ndim - n
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(
                    f"expected input's size at dim={feature_dim} to match num_features"
                    f" ({self.num_features}), but got: {input.shape[feature_dim]}."
                )
            warnings.warn(
                f"input's size at dim={feature_dim} does not match num_features. You can "
                "silence this warning by not passing in num_features, which is not used "
                "because affine=False",
                stacklevel=2,
            )
        if input.ndim == n:
            return self._normalize(input.unsqueeze(0)).squeeze(0)
        return self._normalize(input)

    def _normalize(self, input):
        return instance_norm(
            input,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            self.momentum if self.momentum is not None else 0.0,
            self.eps,
        )


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization over (N, C, L) or unbatched (C, L), as torch.nn.InstanceNorm1d
    (affine and track_running_stats off by default)."""

    unbatched_dims = 2


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization over (N, C, H, W) or (C, H, W), as torch.nn.InstanceNorm2d."""

    unbatched_dims = 3


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization over (N, C, D, H, W) or (C, D, H, W), as torch.nn.InstanceNorm3d."""

    unbatched_dims = 4
