"""`fusegrad.nn.parallel.DistributedDataParallel`: data-parallel training over MPI ranks
(and `DataParallel`, torch's single-process wrapper, which runs its module on one device).

Each rank runs the same model on its own share of the batch; after
`loss.backward()` the gradients are averaged across the ranks, so every rank
takes the same optimizer step, the step one process would take on the
global batch (to float rounding). The ordinary loop works unchanged:

    import fusegrad.distributed as dist
    dist.init_process_group()
    model = DistributedDataParallel(Net())          # rank 0's weights everywhere
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:                             # a DistributedSampler's shard
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()                                  # reads the averaged gradients

When the averaging happens. fusegrad's gradients are lazy: `backward()`
builds the backward graph and computes nothing. So the all-reduce waits until
a gradient is first read after a backward pass through this model: by the
optimizer's `step()`, or by your own `p.grad` (clipping, logging). That read
realizes the forward and backward passes, then averages every parameter's
gradient in buckets of at most `bucket_cap_mb` (one MPI all-reduce per
bucket, all in flight together), and every later read sees the averaged
value, exactly as after PyTorch's `backward()`. `sync_gradients()` does it
explicitly. (The read is noticed because DDP makes the model's parameters
`SyncedParameter`s: the same `Parameter`s, whose `.grad` getter asks DDP first.)

`no_sync()` skips the averaging for forward passes run inside it, so
gradients accumulate locally; the next forward and backward outside it
average the accumulated sum, as in PyTorch.

`fg.jit` does not compose with DDP: the all-reduce runs on the host between
the backward pass and the update, which a replay (native kernels, no Python)
cannot do. A jitted function that calls a DDP model fails with JitError when
it is recorded (its second call); train DDP models eagerly.
"""

from __future__ import annotations

import contextlib
import weakref

import numpy as np

from ..nnapi import (
    DeviceError,
    JitError,
    ShapeError,
    Tensor,
    cuda,
    fail,
    from_numpy,
    grad_enabled,
    is_host_device,
    take_pending_outputs,
)
from ..nnapi import device as torch_device
from ..nnapi import distributed as dist
from ..nnapi import jit_recording as _jit_recording
from ..nnapi import realize as _realize
from .module import Module, Parameter

__all__ = ["DataParallel", "DistributedDataParallel", "SyncedParameter"]

# id(parameter) -> weakref to the DistributedDataParallel that averages its gradient
_owners: dict[int, weakref.ref] = {}


class SyncedParameter(Parameter):
    """A Parameter of a DistributedDataParallel model: reading `.grad` first finishes the
    pending all-reduce; assigning `.grad` (zero_grad, your own value) is never averaged."""

    __slots__ = ()

    @property
    def grad(self):
        owner = _owner_of(self)
        if owner is not None:
            owner._before_grad_read(self)
        return Tensor.grad.fget(self)

    @grad.setter
    def grad(self, value):
        Tensor.grad.fset(self, value)
        owner = _owner_of(self)
        if owner is not None:
            owner._averaged[id(self)] = value


def _owner_of(p: Tensor):
    ref = _owners.get(id(p))
    return ref() if ref is not None else None


class DistributedDataParallel(Module):
    """Wrap `module` for data-parallel training across the ranks of the process group.

    At construction every rank must have built the same model: the parameter
    names, shapes and dtypes are compared across ranks (a mismatch raises
    ShapeError on every rank, naming the parameter), then rank 0's parameters
    and buffers are broadcast to all. Gradients are averaged in buckets of at
    most `bucket_cap_mb` megabytes, filled in reverse parameter order (the
    last layers' gradients first, as PyTorch does). A parameter that has no
    gradient on some ranks (unused in their forward pass) counts as zero
    there, so `find_unused_parameters` is not needed; it, `device_ids` and
    `output_device` are accepted for PyTorch's signature and ignored.

    >>> import fusegrad as fg, fusegrad.distributed as dist
    >>> from fusegrad import nn
    >>> dist.init_process_group()
    >>> model = nn.parallel.DistributedDataParallel(nn.Linear(3, 1))
    >>> model(fg.ones(2, 3)).sum().backward()
    >>> model.module.weight.grad.tolist()    # averaged over the ranks
    [[2.0, 2.0, 2.0]]
    >>> dist.destroy_process_group()
    """

    def __init__(
        self,
        module: Module,
        device_ids=None,
        output_device=None,
        broadcast_buffers: bool = True,
        bucket_cap_mb: float = 25.0,
        find_unused_parameters: bool = False,
    ):
        super().__init__()
        if not dist.is_initialized():
            raise dist.DistributedError(
                "DistributedDataParallel: the default process group has not been "
                "initialized; call fusegrad.distributed.init_process_group() first"
            )
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        self.bucket_cap_mb = bucket_cap_mb
        self.require_backward_grad_sync = True  # False inside no_sync()
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._params: list[Parameter] = [p for _, p in named]
        self._check_same_model(module)
        self._broadcast_from_rank0(module, broadcast_buffers)
        self.buckets: list[list[int]] = _plan_buckets(self._params, bucket_cap_mb * 2**20)
        self._averaged: dict[int, Tensor | None] = {id(p): p.grad for p in self._params}
        self._pending = False  # a forward pass outside no_sync() since the last averaging
        self._outputs: list[weakref.ref] = []  # the last forward's results
        for p in self._params:
            _adopt(p, self)

    # ---------------------------------------------------------------- construction
    def _check_same_model(self, module: Module) -> None:
        mine = [(n, tuple(t.shape), t.dtype.name) for n, t in _state_tensors(module)]
        everyone = dist.allgather_object(mine)
        reference = everyone[0]
        for rank, theirs in enumerate(everyone):
            if theirs == reference:
                continue
            if len(theirs) != len(reference):
                fail(
                    ShapeError,
                    "DistributedDataParallel",
                    f"rank 0's model has {len(reference)} parameters and buffers but rank "
                    f"{rank}'s has {len(theirs)}; every rank must build the same model",
                )
            for r, t in zip(reference, theirs):
                if r != t:
                    fail(
                        ShapeError,
                        "DistributedDataParallel",
                        f"parameter {r[0]!r} has shape {r[1]} ({r[2]}) on rank 0 but "
                        f"{t[0]!r} has shape {t[1]} ({t[2]}) on rank {rank}; "
                        "every rank must build the same model",
                    )

    def _broadcast_from_rank0(self, module: Module, buffers: bool) -> None:
        tensors = [t for n, t in _state_tensors(module) if buffers or isinstance(t, Parameter)]
        arrays = [np.array(t.numpy(), copy=True, order="C") for t in tensors]
        dist.broadcast_arrays(arrays, src=0)
        if dist.get_rank() != 0:
            for t, a in zip(tensors, arrays):
                t.assign_(from_numpy(a))

    # ---------------------------------------------------------------- forward and no_sync
    def forward(self, *args, **kwargs):
        _refuse_inside_jit()
        if grad_enabled():  # under no_grad() (evaluation) a pending average stays pending
            self._pending = self.require_backward_grad_sync
        out = self.module(*args, **kwargs)
        # computed with the gradients, so predictions read from them later (argmax, say)
        # do not run the forward pass a second time
        self._outputs = [weakref.ref(t) for t in _tensors_in(out)]
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Forward passes inside this block accumulate gradients locally, unaveraged.

        >>> import fusegrad as fg, fusegrad.distributed as dist
        >>> from fusegrad import nn
        >>> dist.init_process_group()
        >>> ddp = nn.parallel.DistributedDataParallel(nn.Linear(3, 1))
        >>> with ddp.no_sync():
        ...     ddp(fg.ones(1, 3)).sum().backward()     # local only
        >>> ddp(fg.ones(1, 3)).sum().backward()         # averages the sum of both
        >>> ddp.module.weight.grad.tolist()             # with one process: the sum
        [[2.0, 2.0, 2.0]]
        >>> dist.destroy_process_group()
        """
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # ---------------------------------------------------------------- the averaging
    def _before_grad_read(self, p: Tensor) -> None:
        """Average now if a backward pass left new gradients: in p, or, when p has none
        here (unused by this rank's forward pass), in any parameter, so that every rank
        sees p's gradient from its first read on, whichever order they are read in."""
        if not self._pending:
            return
        mine = Tensor.grad.fget(p)
        if mine is not None:
            fresh = mine is not self._averaged.get(id(p))
        else:
            fresh = any(Tensor.grad.fget(q) is not self._averaged.get(id(q)) for q in self._params)
        if fresh:
            self.sync_gradients()

    def sync_gradients(self) -> None:
        """Average the gradients across the ranks now (a step does this by itself).

        Every rank must call it (or read a gradient) the same number of times.
        A parameter without a gradient on some ranks counts as zero there; one
        without a gradient on every rank keeps None.
        """
        self._pending = False
        params = self._params
        local = [Tensor.grad.fget(p) for p in params]
        present = np.array([g is not None for g in local], dtype=np.uint8)
        dist.allreduce_arrays([present], "max")
        # compute the forward and backward passes in one schedule, with the losses
        # backward() was called on and the model's outputs (the step, or a prediction,
        # would otherwise run the forward pass once more)
        outputs = [t for t in (ref() for ref in self._outputs) if t is not None]
        self._outputs = []
        _realize(*[g for g in local if g is not None], *take_pending_outputs(), *outputs)
        flats, members = [], []
        for bucket in self.buckets:
            used = [i for i in bucket if present[i]]
            if not used:
                continue
            dtype = params[used[0]].dtype.np
            flats.append(
                np.concatenate(
                    [
                        np.zeros(params[i].numel(), dtype)
                        if local[i] is None
                        else np.asarray(local[i].numpy(), dtype).ravel()
                        for i in used
                    ]
                )
            )
            members.append(used)
        dist.allreduce_arrays(flats, "sum")
        world = dist.get_world_size()
        for flat, used in zip(flats, members):
            flat /= world
            offset = 0
            for i in used:
                p = params[i]
                n = p.numel()
                g = from_numpy(flat[offset : offset + n].reshape(p.shape))
                offset += n
                p.grad = g  # through SyncedParameter's setter: recorded as averaged

    def extra_repr(self) -> str:
        sizes = [sum(self._params[i].numel() for i in b) for b in self.buckets]
        return f"buckets={len(self.buckets)} (elements {sizes}), world_size={dist.get_world_size()}"


class DataParallel(Module):
    """torch.nn.DataParallel where there is one device to run on: `module` (its `.module`,
    so state_dict keys read `module.<name>`) is called with the inputs, as torch's.

    Without a usable CUDA device, as torch's on such a machine, `device_ids` and
    `output_device` are ignored (`device_ids` is []) and the call runs `module` as it is.
    With CUDA, `device_ids` (by default every CUDA device) must name one device: the
    module's parameters and buffers must be on it (RuntimeError otherwise, as torch's),
    and tensors among the inputs are moved there. Where fusegrad differs: several
    devices raise DeviceError here, since fusegrad does not scatter a batch, replicate
    the module and gather the outputs across devices.

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> model = nn.DataParallel(nn.Linear(2, 3))
    >>> model(fg.ones(4, 2)).shape, list(model.state_dict())
    ((4, 3), ['module.weight', 'module.bias'])
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        self.module = module
        self.dim = dim
        if not cuda.is_available():
            self.device_ids, self.output_device = [], None
            return
        if device_ids is None:
            device_ids = list(range(cuda.device_count()))
        device_ids = [_cuda_index(d) for d in device_ids]
        if len(device_ids) > 1:
            fail(
                DeviceError,
                "DataParallel",
                f"asked to split batches across {len(device_ids)} CUDA devices "
                f"{device_ids}; fusegrad runs a module on one device (pass device_ids=[i], "
                "or use DistributedDataParallel with one rank per device)",
            )
        self.device_ids = device_ids
        self.output_device = _cuda_index(output_device) if output_device is not None else None
        if device_ids and self.output_device is None:
            self.output_device = device_ids[0]

    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        device = f"cuda:{self.device_ids[0]}"
        for t in (*self.module.parameters(), *self.module.buffers()):
            if _cuda_name(str(t.device)) != device:
                raise RuntimeError(
                    f"module must have its parameters and buffers on device {device} "
                    f"(device_ids[0]) but found one of them on device: {t.device}"
                )
        return self.module(*_moved(inputs, device), **_moved(kwargs, device))


def _cuda_index(spec) -> int:
    """A CUDA device's index, from an int, "cuda:i" or a device object."""
    if isinstance(spec, int):
        return spec
    d = torch_device(spec)
    if is_host_device(d.canonical()):
        raise ValueError(f"Expected a cuda device, but got: {d}")
    return d.index or 0


def _cuda_name(name: str) -> str:
    """A device's name with its index ("cuda" reads as "cuda:0", as torch's)."""
    return name if is_host_device(torch_device(name).canonical()) else f"cuda:{_cuda_index(name)}"


def _moved(value, device: str):
    """`value` with each tensor in it (in tuples, lists and dicts) moved to `device`."""
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_moved(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v, device) for k, v in value.items()}
    return value


def _refuse_inside_jit() -> None:
    """Fail at the user's line when a jitted function being recorded calls a DDP model
    (its averaged gradients are new host buffers each call: a replay would be stale)."""
    if _jit_recording():
        fail(
            JitError,
            "DistributedDataParallel",
            "cannot run inside fg.jit: gradients are averaged across ranks on the host "
            "between the backward pass and the update, which a replay cannot do; "
            "train DDP models without fg.jit",
        )


def _tensors_in(value) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    return []


def _state_tensors(module: Module) -> list[tuple[str, Tensor]]:
    return list(module.named_parameters()) + list(module.named_buffers())


def _plan_buckets(params: list[Parameter], cap_bytes: float) -> list[list[int]]:
    """Parameter indices in buckets: reverse order, one dtype per bucket, each at most
    `cap_bytes` (a single larger parameter gets a bucket of its own)."""
    buckets: list[list[int]] = []
    size, dtype = 0, None
    for i in reversed(range(len(params))):
        p = params[i]
        nbytes = p.numel() * np.dtype(p.dtype.np).itemsize
        if not buckets or p.dtype != dtype or size + nbytes > cap_bytes:
            buckets.append([])
            size, dtype = 0, p.dtype
        buckets[-1].append(i)
        size += nbytes
    return buckets


def _adopt(p: Parameter, owner: DistributedDataParallel) -> None:
    current = _owner_of(p)
    if current is not None and current is not owner:
        raise ValueError(
            "DistributedDataParallel: a parameter already belongs to another "
            "DistributedDataParallel model; wrap each module once"
        )
    if type(p) is Parameter:
        p.__class__ = SyncedParameter  # same layout (no new slots): only .grad differs
    elif not isinstance(p, SyncedParameter):
        raise TypeError(
            f"DistributedDataParallel: parameters must be fusegrad.nn.Parameter, "
            f"got {type(p).__name__}"
        )
    _owners[id(p)] = weakref.ref(owner)
    weakref.finalize(p, _owners.pop, id(p), None)
