"""`copy.deepcopy`, `copy.copy` and `pickle` of tensors, with PyTorch's semantics.

A tensor's value lives in a runtime buffer (a pooled numpy array, or device
memory) that neither pickle nor deepcopy can copy field by field: its address
would be copied with it. So a tensor copies its *value* instead:

- `copy.deepcopy(t)` computes `t` (if it is still lazy) and gives a tensor with
  its own copy of the value, of the same class, requires_grad and strides; its
  `.grad` is deep-copied too. As in torch, only leaves can be deep-copied (a
  tensor in the middle of a graph raises), and a `Parameter` copies its value
  and requires_grad but not its `.grad` (nn/module.py).
- `copy.copy(t)` gives a tensor with the same value now, of the same class and
  requires_grad, with no `.grad`. fusegrad's in-place ops rebind a tensor to a
  new value instead of writing into memory (docs/NUMERICS.md), so a later
  `t.add_(1)` is not seen through the copy, as it is not through a view.
- `pickle` stores the value as a numpy array with the dtype, device,
  requires_grad and strides; `.grad` is not stored (as torch). A non-leaf
  that requires grad pickles (and `copy.copy`s) as a leaf that requires grad,
  as torch 2.x does.

>>> import copy, pickle
>>> import fusegrad as fg
>>> w = fg.tensor([1.0, 2.0], requires_grad=True)
>>> (w * w).sum().backward()
>>> c = copy.deepcopy(w)
>>> c.tolist(), c.requires_grad, c.grad.tolist()
([1.0, 2.0], True, [2.0, 4.0])
>>> pickle.loads(pickle.dumps(w * 3)).tolist()
[3.0, 6.0]
"""

from __future__ import annotations

import copy

import numpy as np

from . import devices as _device
from .autograd import GradError, realize
from .ir import node as N
from .ir.dtypes import to_dtype
from .runtime.backend import HOST, to_device
from .runtime.buffer import Buffer
from .runtime.engine import engine

# torch's own words (torch/_tensor.py), so code that matches on them keeps working
NOT_A_LEAF = (
    "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
    "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
    "because of a torch.nn.utils.weight_norm usage, see "
    "https://github.com/pytorch/pytorch/pull/103001"
)


def value_copy(t):
    """A new leaf tensor holding a copy of `t`'s value (computed first if lazy), on the
    same device, with no gradient history and requires_grad False."""
    buf = _computed(t)
    here = getattr(buf, "device", None) or HOST
    node = N.buffer(to_device(buf, here), t.shape, t.dtype)  # a device copy goes via host
    return t._plain(node, requires_grad=False, strides=t._strides, leaf=True)


def deepcopy_tensor(t, memo: dict):
    """`copy.deepcopy(t)`: see the module docstring."""
    if id(t) in memo:
        return memo[id(t)]
    if not t.is_leaf:
        raise GradError(NOT_A_LEAF)
    out = _as_class(value_copy(t), _copy_class(t))
    memo[id(t)] = out
    if t.requires_grad:
        out.requires_grad_()
    if t.grad is not None:
        out.grad = copy.deepcopy(t.grad, memo)
    if hasattr(t, "__dict__"):  # a user's Tensor subclass may keep attributes
        out.__dict__.update(copy.deepcopy(t.__dict__, memo))
    return out


def shallow_copy_tensor(t):
    """`copy.copy(t)`: see the module docstring."""
    buf = engine.value(t.node)
    if buf is not None:
        node = N.buffer(buf, t.shape, t.dtype)  # the same memory under a node of its own
    elif t.requires_grad:
        node = N.detach(t.node)  # a leaf of its own (requires_grad_ computes it)
    else:
        node = t.node  # nodes never change: sharing a lazy graph is safe
    out = _as_class(t._plain(node, strides=t._strides, leaf=True), _copy_class(t))
    if t.requires_grad:
        out.requires_grad_()
    if hasattr(t, "__dict__"):
        out.__dict__.update(t.__dict__)
    return out


def reduce_tensor(t):
    """`t.__reduce_ex__`: rebuild from the value as a numpy array (see `rebuild_tensor`)."""
    array = np.asarray(_host_copy(t), order="C")  # (ascontiguousarray makes 0-d 1-d)
    state = getattr(t, "__dict__", None) or None
    device = str(t.device)
    return (
        rebuild_tensor,
        (_copy_class(t), array, t.dtype.name, device, bool(t.requires_grad), t._strides, state),
    )


def rebuild_tensor(cls, array, dtype: str, device: str, requires_grad: bool, strides, state):
    """A tensor from what `reduce_tensor` stored (pickle calls this on load)."""
    dt = to_dtype(dtype)
    buf = Buffer.from_numpy(array, dt)
    name = _device.resolve(device, "pickle")
    if not _device.is_host(name):
        buf = to_device(buf, name)
    out = _as_class(cls._plain(N.buffer(buf, array.shape, dt), strides=strides, leaf=True), cls)
    if requires_grad:
        out.requires_grad_()
    if state:
        out.__dict__.update(state)
    return out


def host_copy(t) -> np.ndarray:
    """`t`'s value as a numpy array of its own (for a Parameter's pickle, nn/module.py)."""
    return np.asarray(_host_copy(t), order="C")  # (ascontiguousarray makes 0-d 1-d)


def _host_copy(t) -> np.ndarray:
    buf = _computed(t)
    return np.array(buf.numpy()[: t.numel()].reshape(t.shape))


def _computed(t):
    """The buffer holding `t`'s value, computing it if it is still a graph."""
    buf = engine.value(t.node)
    if buf is None:
        realize(t)
        buf = engine.value(t.node)
    return buf


def _copy_class(t) -> type:
    """The class a copy of `t` gets: its own, except a gradient still being built
    (`LazyGrad`) and a tensor's `.data` (`DataView`), whose copies are plain tensors:
    neither is a class a value of its own can have (a copy of `.data` is not a view)."""
    return t._plain if t._copies_plain else type(t)


def _as_class(t, cls):
    """`t` as an instance of the Tensor subclass `cls` (same slots, no constructor run)."""
    if cls is t._plain:
        return t
    out = cls.__new__(cls)
    t._plain.__init__(out, t.node, requires_grad=False, strides=t._strides, leaf=True)
    return out
