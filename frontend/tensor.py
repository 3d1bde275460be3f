"""The lazy `Tensor`: PyTorch's names and semantics, building IR instead of computing.

>>> import fusegrad as fg
>>> x = fg.tensor([1.0, 2.0, 3.0])
>>> y = (x * 2 + 1).exp()        # nothing runs yet: y is a graph of four nodes
>>> y.shape
(3,)
>>> round(y.sum().item(), 2)     # reading a value compiles and runs the kernels
1265.13

Checks happen where the op is written; mistakes raise `ShapeError`,
`DTypeError` or `IndexingError` naming the op, the shapes and your line.
The class body holds the core (node, dtype, device, realize, the operators);
the other methods come from one static mixin per op family (`MIXINS` below):
movement ops (`reshape`, `permute`, slicing, `expand`, `pad`, ...) from
`movement.py`, reductions and composites from `reduce.py`, and so on. The
modules under this one never import it: they build results through the class of
the tensors they receive (`self._plain(node)`, `tensor_base.py`).
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from collections.abc import Sequence

import numpy as np

from . import autograd_state, host_scalar, manualstep, shared_memory
from . import devices as _device
from . import steering as _steering
from .autocast import autocast_op
from .autograd import (
    GradError,
    overwrite,
    realize,
    register_leaf,
    retain_grad,
    retains_grad,
    sibling_grads,
    tensor_backward,
)
from .autograd import backward as autograd_backward
from .autograd import drop_graph as drop_graph  # (fusegrad.tensor.drop_graph, as before)
from .carried import note_lazy, unnoted
from .carried import read_along as _read_along
from .copying import deepcopy_tensor, reduce_tensor, shallow_copy_tensor
from .creation_nodes import CreationMixin, _shape, data_node, full_node
from .errors import (
    ArgumentError,
    DimError,
    DTypeError,
    DTypeNotImplementedError,
    JitError,
    ShapeError,
    checked_dtype,
    fail,
    warn_user,
)
from .indexing import IndexingMixin, _storage_root, write_through, write_through_untracked
from .inplace_methods import InplaceMixin
from .inplace_methods import variants as inplace_variants
from .ir import node as N
from .ir import sites as _sites
from .ir.autodiff import DEFERRED_GRADS, with_vjp
from .ir.dtypes import TORCH_SCALAR_TYPES, DType, bool_, default_float, float32, promote_scalar
from .ir.macro import building as building_expansion
from .ir.macro import macro
from .ir.macro import register as register_macro
from .ir.ops import MOVEMENT, Ops
from .jithooks import host_read_refused, note_write, track
from .mathops import COMPOSED, MathMixin, clamp_tensors, deprecated_alpha
from .movement import MovementMixin, rows_of_buffer
from .printing import tensor_repr
from .reduce import ReduceMixin, argmax_composed, logsumexp_composed, matmul
from .runtime import attribution as _attribution
from .runtime.backend import to_device
from .runtime.buffer import HOST_BUFFERS
from .runtime.engine import engine
from .scalars import checked_fill
from .searching import SearchingMixin
from .shapeops import ShapeMixin
from .tensor_base import TensorBase, _broadcast_node, as_macro, broadcast_shapes, promote_tensors
from .tensor_base import broadcast_node_shapes as _broadcast_node_shapes
from .tensor_base import where as _where
from .tensor_hooks import HOOKED_BY, separate
from .tensor_hooks import register_hook as _register_hook
from .tensor_hooks import register_post_accumulate_grad_hook as _register_post_accumulate
from .torch_methods import TorchMethodsMixin
from .torch_settings import check_memory_format, format_strides
from .versions import InplaceError

Scalar = int | float | bool


def _from_empty(node, t, parents) -> bool:
    """Whether `node` (a result of t and parents) may be an empty value folded to a
    constant, or built on one (a crop to nothing, then padded)."""
    if not node.srcs or 0 in node.shape or 0 in t.node.shape:
        return True
    for s in node.srcs:  # (loops, not any(): this runs for every op that needs a gradient)
        if 0 in s.shape:
            return True
    for p in parents:
        if 0 in p.node.shape:
            return True
    return False


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    return _contiguous(tuple(shape))


@functools.lru_cache(maxsize=4096)  # a pure function of shapes, which repeat every step
def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


# Tensor's methods by op family, one static mixin per module (a method of the class body
# comes first; where two mixins have a name, the earlier one's is Tensor's)
MIXINS = (
    CreationMixin,  # t.new_zeros(), t.new_tensor(), ...
    SearchingMixin,  # t.bincount(), t.mode()
    ShapeMixin,  # cumsum, sort, topk, ...; sum/mean/... taking numpy's axis=/keepdims=
    MathMixin,  # elementwise functions, .data, % // & | ^ ~ << >>
    IndexingMixin,  # t[...], t[...] = v, gather, scatter, ...
    MovementMixin,  # views: reshape, permute, expand, basic slicing, ...
    ReduceMixin,  # sum, max, softmax, matmul, ...
    InplaceMixin,  # what the in-place tables need where nothing above has it
    TorchMethodsMixin,  # torch's smaller methods: type and storage queries, method forms
)


_BUFFER = Ops.BUFFER  # (a global: an enum member read through its class costs four times as much)

# views that take a one-element value's element where it is: `item()` reads it there
_SAME_ELEMENT = (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.FLIP)


class Tensor(*MIXINS, TensorBase):
    """A lazy n-dimensional array: a node of the IR graph plus PyTorch's tensor API."""

    __slots__ = ()  # TensorBase's
    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """`ndarray + tensor`, `np.float64(2) * tensor`, `ndarray == tensor`: numpy hands its
        operators to this hook, which gives them back to the tensor's, so the result is a
        tensor (dtype promoted as `tensor + ndarray`). Other numpy functions on tensors
        (`np.exp(t)`, `out=`) compute on the values and give numpy arrays, as before."""
        names = _UFUNC_OPERATORS.get(ufunc.__name__)
        if names is not None and method == "__call__" and not kwargs and len(inputs) == 2:
            a, b = inputs
            if isinstance(a, Tensor):
                return getattr(a, names[0])(b)
            return getattr(b, names[1])(a)
        args = [x.numpy() if isinstance(x, Tensor) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.numpy() if isinstance(x, Tensor) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*args, **kwargs)

    def __init__(self, node: N.Node = None, requires_grad: bool = False, strides=None, leaf=None):
        if type(node) is not N.Node:  # torch's legacy `Tensor([1, 2])` / `Tensor(2, 3)`
            node = legacy_constructor(float32, node, requires_grad, strides, leaf).node
            requires_grad, strides, leaf = False, None, None
        self.node = node
        self.requires_grad = requires_grad
        self._grad = None
        self._strides = strides
        self._is_leaf = leaf if leaf is not None else (node.op is _BUFFER or not requires_grad)
        self._version = 0  # in-place updates so far (versions.py)
        _sites.note_new(node)  # the user's line that asked for it, for kernels to report
        if _steering.open_blocks[0]:  # a `fg.debug.no_fusion()` block: a kernel per op
            _steering.note_tensor(node)
        if node.op is not _BUFFER:  # a value the next step computes if it outlives it
            note_lazy(self)

    # ---------------------------------------------------------------- properties
    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self.shape[self._dim(dim, "size")]

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    @property
    def device(self) -> _device.device:
        """Where the value lives (`fg.device`, equal to "cpu" or "cuda:0")."""
        return _device.of(self.node.device)

    @property
    def is_cuda(self) -> bool:
        return _device.of(self.node.device).type == "cuda"  # torch's: one type, by name

    @property
    def is_cpu(self) -> bool:
        """Whether the value is on the host, fusegrad's cpu device (torch's `is_cpu`)."""
        return _device.is_host(self.node.device)

    @property
    def is_xpu(self) -> bool:
        """False: fusegrad has no Intel GPU device (torch's `is_xpu`, read by device checks)."""
        return False

    @property
    def is_mps(self) -> bool:
        """False: fusegrad has no Apple GPU device (torch's `is_mps`, read by device checks)."""
        return False

    @property
    def is_leaf(self) -> bool:
        return self._is_leaf

    def numel(self) -> int:
        return math.prod(self.shape)

    def nelement(self) -> int:
        return self.numel()

    def element_size(self) -> int:
        """Bytes per element (4 for float32)."""
        return self.dtype.itemsize

    def is_floating_point(self) -> bool:
        return self.dtype.is_float

    def view_as(self, other) -> Tensor:
        return self.view(other.shape)

    def reshape_as(self, other) -> Tensor:
        return self.reshape(other.shape)

    def ravel(self) -> Tensor:
        return self.reshape(-1)

    @autocast_op("mm")
    def mm(self, other) -> Tensor:
        """The product of two matrices (as torch.mm: both must be 2-d)."""
        if self.ndim != 2 or other.ndim != 2:
            fail(
                ShapeError, "mm", f"expects two matrices, got shapes {self.shape} and {other.shape}"
            )
        return self @ other

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def stride(self, dim: int | None = None):
        """Strides of this view in elements, as PyTorch reports them (0 on broadcast axes)."""
        st = self._strides if self._strides is not None else contiguous_strides(self.shape)
        return st if dim is None else st[self._dim(dim, "stride")]

    def is_contiguous(self, memory_format=None) -> bool:
        """Whether the strides are row-major's (or, with `memory_format=fg.channels_last`,
        channels-last's; fusegrad's own strides are row-major, torch_settings.py)."""
        check_memory_format(memory_format, self.ndim, "is_contiguous")
        want = format_strides(self.shape, memory_format)
        return all(a == b or s == 1 for a, b, s in zip(self.stride(), want, self.shape))

    # ---------------------------------------------------------------- evaluation
    def realize(self) -> Tensor:
        """Compute this tensor's value now (it is kept; later reads are free)."""
        realize(self)
        return self

    def _realize_for_read(self) -> None:
        """Compute this tensor's value for the host to read, with the live lazy values the
        read ends a step for (`carried.read_along`: an evaluation or generation loop under
        no_grad, which has no optimizer step). A kind of tensor that realizes in its own
        way (a gradient, with its siblings) does."""
        if type(self).realize is not Tensor.realize or autograd_state.enabled():
            self.realize()
        else:
            realize(self, *_read_along(self))

    def _has_value(self) -> bool:
        """Whether this tensor's value is already computed (reading it runs nothing)."""
        return engine.value(self.node) is not None

    def _write_scalar(self, value) -> None:
        """Overwrite the one element of a realized 0-d buffer tensor in place (an
        optimizer's per-step scalars: the graph reads them as data, so their new values
        change no graph structure)."""
        node = self.node  # (no numel(): a step writes a dozen of these, each checked)
        assert node.op is Ops.BUFFER and node.arg.size == 1, "not a one-element buffer"
        node.arg.write_scalar(value)

    def numpy(self) -> np.ndarray:
        """The value as a read-only numpy array of this tensor's shape and dtype."""
        if not _device.is_host(self.node.device) and not _device.numpy_reads_devices:
            if _called_by_user():
                raise TypeError(
                    f"can't convert {self.node.device} device type tensor to numpy. Use "
                    "Tensor.cpu() to copy the tensor to host memory first."
                )
        if self.dtype.name == "bfloat16":  # numpy has no bfloat16: torch's refusal, verbatim
            raise TypeError("Got unsupported ScalarType BFloat16")
        return self._host()

    def _host(self) -> np.ndarray:
        """The value on the host, as a read-only array (a copy if it lives on a device);
        what item(), tolist() and print read, and fusegrad's own checks."""
        if jit_recording() and _called_by_user():
            host_read_refused("reading a value (.numpy(), .item(), bool(), float(), int())")
        self._realize_for_read()
        a = engine.value(self.node).numpy().reshape(self.shape).view()
        a.setflags(write=False)
        return a

    def item(self):
        if shared_memory._shared:  # (a tensor shared between processes: its value now)
            shared_memory.refresh()
        node = self.node
        if not engine.recording():  # (a jit recording refuses host reads: `_host`)
            if node.op is _BUFFER:
                # a value in host memory already (a loss after the step that computed it):
                # read it without the realize path
                buf = node.arg
            elif math.prod(node.shape) == 1:
                source = node
                while source.op in _SAME_ELEMENT:
                    source = source.srcs[0]
                if (
                    source.op is _BUFFER
                    and type(source.arg) in HOST_BUFFERS
                    and source.arg.size == 1
                ):
                    # one element of a computed value (`for i in ix: int(i)`, `x[k]`): its
                    # buffer's one element, through views that only reshape it, no kernel
                    buf = source.arg
                else:
                    # one integer of a few ops on host values (`int(i + 1)`): numpy's
                    value = host_scalar.value(node)
                    if value is not None:
                        return value
                    # a scalar to compute (`(x * 2).sum().item()`): realized, then read
                    # from its buffer, without `_host`'s read-only array of its shape
                    self._realize_for_read()
                    node = self.node  # (a buffer node now, unless its graph is needed)
                    buf = node.arg if node.op is _BUFFER else engine.value(node)
            else:
                buf = None
            # (no local name for the array: the buffer may die as this frame is cleared,
            # and an array still referenced then is not given back to the pool)
            if type(buf) in HOST_BUFFERS and buf.size == 1:
                return buf.array.item()
        if self.numel() != 1:
            fail(
                ShapeError,
                "item",
                f"only one-element tensors convert to a Python scalar; shape is {self.shape}",
            )
        return self._host().reshape(()).item()

    def tolist(self):
        return self._host().tolist()

    def __array__(self, dtype=None, copy=None):
        a = np.array(self.numpy())
        return a if dtype is None else a.astype(dtype)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            fail(
                ShapeError,
                "bool",
                f"truth value of a tensor with {self.numel()} elements is ambiguous",
            )
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        """An integer tensor of one element as a Python index: `xs[t]`, `range(t)`."""
        if self.dtype.is_float or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __format__(self, spec: str) -> str:
        """A 0-d tensor formats as its value (`f"{loss:.4f}"`), as in PyTorch."""
        if self.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __iter__(self):
        """The slices along the first axis; a 0-d tensor has none (a TypeError, as torch).

        A value still to compute, on the host and with no gradient, is computed first, as
        torch's is: its slices are then views of its memory (`for i in torch.randint(n,
        (12,))` reads twelve numbers, not twelve slices each computing its element)."""
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        if (
            self.node.op is not Ops.BUFFER
            and not self.requires_grad
            and _device.is_host(self.node.device)
            and not engine.recording()
            and self.numel() > 0
        ):
            self.realize()
        rows = rows_of_buffer(self)
        return iter(rows if rows is not None else self.unbind(0))

    def __repr__(self) -> str:
        """PyTorch's printed form (`frontend/printing.py`): `tensor([1.0000, 2.5000])`."""
        tail = []
        if not _device.is_host(self.node.device):
            tail.append(f"device='{self.node.device}'")
        grad_fn = self.grad_fn
        if grad_fn is not None:
            tail.append(f"grad_fn=<{grad_fn.name()}>")
        elif self.requires_grad:
            tail.append("requires_grad=True")
        return tensor_repr(self._host(), f"dtype={self.dtype!r}", tail)

    @property
    def grad_fn(self):
        """None for a leaf or a tensor without history; else the function that made it
        (`grad_fn.name()`, as `MulBackward0`), for printing and `grad_fn is None` checks."""
        if self._is_leaf or not self.requires_grad:
            return None
        return _grad_fn_class(self.node.op.name)(self.node)

    # ---------------------------------------------------------------- building blocks
    def _make(self, node: N.Node, *parents: Tensor, strides=None) -> Tensor:
        # only floating-point values have gradients (argmax, comparisons: none), as in torch
        wants = self.requires_grad
        if not wants:
            for p in parents:
                if p.requires_grad:
                    wants = True
                    break
        if wants and not node.dtype.is_float:
            wants = False
        elif wants and not autograd_state.enabled():
            node, wants = N.detach(node), False  # no_grad(): cut the result off the graph
        if node.device is None and self.node.device is not None:
            node = N.place(node, self.node.device)  # a constant result stays on self's device
        if wants and HOOKED_BY.data and node in HOOKED_BY:  # another tensor's hooks hang on node
            node = separate(node, (self, *parents))
        if wants and _from_empty(node, self, parents):
            # an empty value (or a reduction or crop of one) folds to a constant: keep
            # where it came from, for grad() (autograd_state.link_empty)
            autograd_state.link_empty(node, (self, *parents))
        return Tensor(node, requires_grad=wants, strides=strides, leaf=not wants)

    def _dim(self, dim: int, op: str) -> int:
        n = max(self.ndim, 1)
        if not isinstance(dim, (int, np.integer)) or not -n <= dim < n:
            fail(
                DimError,
                op,
                f"dim {dim} is out of range for a tensor of shape {self.shape} "
                f"(expected -{n} <= dim < {n})",
            )
        return int(dim) % n

    def _dims(self, dim, op: str) -> tuple[int, ...]:
        if dim is None:
            return tuple(range(self.ndim))
        if isinstance(dim, (list, tuple)):
            out = tuple(self._dim(d, op) for d in dim)
            if len(set(out)) != len(out):
                fail(ShapeError, op, f"dim {tuple(dim)} names an axis twice")
            return out
        d = self._dim(dim, op)  # a 0-d tensor takes dim 0 or -1, as in torch
        return (d,) if self.ndim else ()

    def cast(self, dtype) -> Tensor:
        dtype = checked_dtype(dtype, "cast")
        return self if dtype is self.dtype else self._make(N.cast(self.node, dtype))

    def to(
        self,
        *args,
        dtype=None,
        device=None,
        non_blocking: bool = False,
        copy: bool = False,
        memory_format=None,
    ):
        """This tensor on another device and/or as another dtype, as torch.Tensor.to:
        `t.to("cuda")`, `t.to("cpu")`, `t.to(fg.float64)`, `t.to("cuda", fg.float16)`,
        `t.to(other)` (other's device and dtype). Returns self when nothing changes
        (`memory_format=` is checked as torch checks it and changes no value).

        A move between devices copies the (computed) value. It is differentiable, as in
        torch: the gradient that reaches the copy is moved back to this tensor's device.
        """
        if len(args) > 2:
            fail(ArgumentError, "to", f"takes at most 2 positional arguments, got {len(args)}")
        check_memory_format(memory_format, self.ndim, "to")
        device, dtype = _device.to_arguments(args, device, dtype, Tensor)
        out = self if dtype is None else self.cast(checked_dtype(dtype, "to"))
        if device is not None:
            out = out._to_device(_device.resolve(device, "to"))
        if copy and out is self:
            out = self.clone()
        return out

    def _to_device(self, name: str) -> Tensor:
        here = self.node.device or _device.default_name()
        if name == here:
            return self
        differentiable = self.requires_grad and autograd_state.enabled()
        if differentiable and jit_recording():
            fail(
                JitError,
                "to",
                f"moving a tensor that requires grad from {here} to {name} inside a jitted "
                "function cannot be replayed (the copies of the value and of its gradient "
                "are not kernels): move it before the call, or run the function without jit",
            )
        self.realize()
        copied = to_device(engine.value(self.node), name)
        if not differentiable:
            return Tensor(N.buffer(copied, self.shape, self.dtype))
        return self._make(_device_copy(self.node, copied, here))

    def cuda(self, device=None, non_blocking: bool = False) -> Tensor:
        """This tensor on the CUDA device (`device`: an index or "cuda:N"; default cuda:0)."""
        return self.to(device="cuda" if device is None else device)

    def cpu(self) -> Tensor:
        """This tensor on the CPU (self if it is there already)."""
        return self.to(device="cpu")

    def type(self, dtype=None):
        """`t.type(fg.float64)` casts; `t.type()` names the type, as torch's
        ("fusegrad.FloatTensor")."""
        if dtype is None:
            return f"fusegrad.{TORCH_SCALAR_TYPES.get(self.dtype.name, self.dtype.name)}Tensor"
        return self.cast(dtype)

    def float(self) -> Tensor:
        return self.cast(float32)

    def double(self) -> Tensor:
        return self.cast("float64")

    def half(self) -> Tensor:
        """This tensor as float16 (rounded to nearest even; beyond 65504 it is inf)."""
        return self.cast("float16")

    def bfloat16(self) -> Tensor:
        """This tensor as bfloat16 (float32's range, 8 bits of precision)."""
        return self.cast("bfloat16")

    def long(self) -> Tensor:
        return self.cast("int64")

    def int(self) -> Tensor:
        return self.cast("int32")

    def bool(self) -> Tensor:
        return self.cast(bool_)

    def byte(self) -> Tensor:
        """This tensor as uint8 (floats truncate toward zero, then wrap modulo 256, as torch
        on the CPU: -1.0 -> 255)."""
        return self.cast("uint8")

    def char(self) -> Tensor:
        """This tensor as int8."""
        return self.cast("int8")

    def short(self) -> Tensor:
        """This tensor as int16."""
        return self.cast("int16")

    def type_as(self, other: Tensor) -> Tensor:
        """This tensor with `other`'s dtype and device (torch.Tensor.type_as)."""
        return self.to(device=other.device, dtype=other.dtype)

    def _float(self) -> Tensor:
        """Integers and bools become the default float, as PyTorch does for exp, log, /, ..."""
        return self if self.dtype.is_float else self.cast(default_float())

    # ---------------------------------------------------------------- broadcasting
    def _operands(self, other, op: str, reverse: bool = False) -> tuple[Tensor, Tensor]:
        """Both operands as tensors of one shape and one dtype (numpy broadcasting)."""
        a, b, other = self._operand_nodes(other, op)
        a = self if a is self.node else self._make(a)
        b = other if isinstance(other, Tensor) and b is other.node else Tensor._wrap(b, other)
        return (b, a) if reverse else (a, b)

    def _operand_nodes(self, other, op: str):
        """The nodes of both operands promoted to one dtype and broadcast to one shape, and
        `other` (as given, or as a 0-d constant tensor's stand-in `None` for a scalar).

        The hot path of every binary operator: it builds nodes only, no Tensor per cast or
        expand."""
        a = self.node
        if isinstance(other, Tensor):
            b = other.node
            if a.dtype is not b.dtype:
                dtype = promote_tensors(self, other)
                a, b = N.cast(a, dtype), N.cast(b, dtype)
        elif isinstance(other, (int, float, bool, np.number, np.bool_)):
            # a numpy scalar counts as a Python number (as on torch's right-hand side)
            value = other.item() if isinstance(other, (np.number, np.bool_)) else other
            dtype = promote_scalar(a.dtype, value)
            if dtype.is_int:
                value = dtype.wrap(value)  # uint8 + 300 wraps, as torch's does
            return N.cast(a, dtype), N.const(value, a.shape, dtype), None
        elif isinstance(other, np.ndarray):
            # as torch: the array is a tensor of its own dtype (a 0-d one if 0-d), here
            other = as_tensor(other, op).to(self.device)
            return self._operand_nodes(other, op)
        else:
            fail(
                DTypeError,
                op,
                f"unsupported operand type {type(other).__name__} (as in torch: make it a "
                "tensor first, fusegrad.tensor(...))",
            )
        if a.shape != b.shape:
            shape = _broadcast_node_shapes(a.shape, b.shape, op)
            a, b = _broadcast_node(a, shape), _broadcast_node(b, shape)
        return a, b, other

    @staticmethod
    def _wrap(node: N.Node, like) -> Tensor:
        """A tensor for `node`, derived from `like` (a Tensor, or None for a constant)."""
        if like is None:
            return Tensor(node)
        return like._make(node)

    def _binary(self, ir_op: Ops, other, op: str, reverse: bool = False) -> Tensor:
        a, b, other = self._operand_nodes(other, op)
        if reverse:
            a, b = b, a
        node = N.binary(ir_op, a, b)
        if other is None:
            return self._make(node)
        return self._make(node, other)

    def _unary(self, ir_op: Ops) -> Tensor:
        return self._make(N.unary(ir_op, self.node))

    # ---------------------------------------------------------------- arithmetic
    def __add__(self, o):
        return self._binary(Ops.ADD, o, "add")

    def __radd__(self, o):
        return self._binary(Ops.ADD, o, "add", reverse=True)

    def __sub__(self, o):
        self._refuse_bool_sub(o)
        a, b = self._operands(o, "sub")
        return a._binary(Ops.ADD, -b, "sub")

    def __rsub__(self, o):
        self._refuse_bool_sub(o)
        a, b = self._operands(o, "sub", reverse=True)
        return a._binary(Ops.ADD, -b, "sub")

    def _refuse_bool_sub(self, other) -> None:
        """Subtraction with a bool operand, either side (a bool tensor or array, a Python
        bool), raises, as PyTorch's does: promoted first, `mask - 1.5` would be a float.
        (A numpy bool scalar is a number to PyTorch, and here.)"""
        dt = getattr(other, "dtype", None)
        bool_other = (
            isinstance(other, bool)
            or dt is bool_
            or (isinstance(other, np.ndarray) and other.dtype == np.bool_)
        )
        if self.dtype.is_bool or bool_other:
            fail(
                DTypeError,
                "sub",
                "subtraction with a bool tensor is not supported (as in PyTorch); to invert "
                "a mask use ~ or logical_not()",
            )

    def __mul__(self, o):
        return self._binary(Ops.MUL, o, "mul")

    def __rmul__(self, o):
        return self._binary(Ops.MUL, o, "mul", reverse=True)

    def __truediv__(self, o):
        a, b = self._operands(o, "div")
        return a._float()._binary(Ops.DIV, b._float(), "div")

    def __rtruediv__(self, o):
        a, b = self._operands(o, "div", reverse=True)
        return a._float()._binary(Ops.DIV, b._float(), "div")

    def __neg__(self):
        return self._check_not_bool("neg")._unary(Ops.NEG)

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __pow__(self, o):
        return pow_(self, o)

    def __rpow__(self, o):
        base, exp = self._operands(o, "pow", reverse=True)
        return pow_(base, exp)

    def __matmul__(self, o):
        return matmul(self, o)

    def __rmatmul__(self, o):
        return matmul(as_tensor(o, "matmul"), self)

    def _check_not_bool(self, op: str) -> Tensor:
        if self.dtype.is_bool:
            fail(DTypeError, op, "not supported on bool tensors; use logical ops or cast first")
        return self

    # ---------------------------------------------------------------- comparisons
    def __lt__(self, o):
        return self._binary(Ops.CMPLT, o, "lt")

    def __gt__(self, o):
        return self._binary(Ops.CMPLT, o, "gt", reverse=True)

    def __le__(self, o):
        return self._or_equal(o, "le", reverse=False)

    def __ge__(self, o):
        return self._or_equal(o, "ge", reverse=True)

    def _or_equal(self, other, op: str, reverse: bool) -> Tensor:
        # (a < b) | (a == b), not ~(a > b): a comparison with NaN is false, as in torch
        a, b, _ = self._operand_nodes(other, op)
        less = N.binary(Ops.CMPLT, b, a) if reverse else N.binary(Ops.CMPLT, a, b)
        return Tensor(N.binary(Ops.ADD, less, N.binary(Ops.CMPEQ, a, b)))  # bool | is +

    def __eq__(self, o):  # type: ignore[override]
        if o is None:  # `t == None` is False, as torch's
            return False
        return self._binary(Ops.CMPEQ, o, "eq")

    def __ne__(self, o):  # type: ignore[override]
        if o is None:
            return True
        return (self == o).logical_not()

    __hash__ = object.__hash__

    def logical_not(self) -> Tensor:
        return self.bool()._unary(Ops.NEG)

    # ---------------------------------------------------------------- math
    # exp, sqrt, erfc, ...: one method per row of ir/ops.py's MATH (frontend/mathops.py)
    @autocast_op("rsqrt")
    def rsqrt(self):
        return self.sqrt().reciprocal()

    @autocast_op("reciprocal")
    def reciprocal(self):
        return self._float()._unary(Ops.RECIP)

    def abs(self):
        """|x|; its gradient is g * sign(x) (0 at 0 and at NaN), as torch.abs.

        A product, not a choice: where g is infinite at 0 (`x.abs().sqrt()`), the
        gradient is inf * 0 = NaN, as PyTorch's chain rule gives.
        """
        if self.dtype.is_bool:
            fail(DTypeNotImplementedError, "abs", "not implemented for bool (as in PyTorch)")
        if not self.dtype.is_float:
            return where(self < 0, -self, self)
        return self._make(_abs_node(self.node))

    def neg(self):
        return -self

    def relu(self):
        """max(x, 0); as torch.relu, -0.0 and NaN pass through, and the gradient is 0 at 0
        and 1 at NaN (0 where x <= 0)."""
        # built on nodes: relu runs in every layer of every step
        x = self.node
        if x.dtype.is_bool:
            fail(DTypeError, "relu", "bool inputs are not supported (as in PyTorch)")
        if x.dtype.is_float and x.op is not Ops.CONST:
            # one macro node (ir/macro.py) that expands to the nodes below, with their
            # gradient rule: a cached training step builds and keys one node per relu
            return self._make(macro("relu", (x,), (), x.shape, x.dtype))
        zero = N.const(0, x.shape, x.dtype)
        out = self._make(N.where(N.binary(Ops.CMPLT, x, zero), zero, x))  # relu(-0.0) = -0.0
        return _own_gradient(out, self, _relu_grad)

    @autocast_op("sigmoid")
    def sigmoid(self):
        """1 / (1 + e^-x), from z = e^-|x| <= 1 so that neither the value nor any derivative
        overflows: x >= 0 gives 1 / (1 + z), x < 0 gives z / (1 + z)."""
        x = self._float()
        if x.node.op is not Ops.CONST:
            # one macro node (ir/macro.py) that expands to `_sigmoid_node`'s nodes, with their
            # gradient rules: a cached training step builds and keys one node, not 14
            return composite("sigmoid", (x,), (), x.shape, x.dtype)
        return x._make(_sigmoid_node(x.node))

    @autocast_op("tanh")
    def tanh(self):
        """tanh(x) = 2 sigmoid(2x) - 1, with a series near 0 where that form cancels."""
        x = self._float()
        if x.node.op is not Ops.CONST:
            # one macro node (ir/macro.py) that expands to `_tanh_node`'s 30-odd nodes, with
            # their gradient rule: an LSTM step calls it twice, a plain loop every step
            return composite("tanh", (x,), (), x.shape, x.dtype)
        return x._make(_tanh_node(x.node))

    def square(self):
        """self * self; a bool tensor's square is int64, as torch's (it is self ** 2)."""
        x = self.cast("int64") if self.dtype.is_bool else self
        return x * x

    def maximum(self, o):
        return self._binary(Ops.MAX, o, "maximum")

    def minimum(self, o):
        """Elementwise min; NaN propagates, ties split the gradient evenly, as torch.minimum."""
        a, b = self._operands(o, "minimum")
        if a.dtype.is_bool:
            return a & b
        return a._order_flip().maximum(b._order_flip())._order_flip()

    def _order_flip(self) -> Tensor:
        """An order-reversing bijection: -x for floats (exact, NaN stays NaN), ~x = -x - 1 for
        integers (in wrapping arithmetic it never overflows: INT_MIN <-> INT_MAX), so that a
        min is a max of flipped values without negating INT_MIN."""
        return -self if self.dtype.is_float else -self + (-1)

    def clamp(self, min=None, max=None):
        """Limit to [min, max] (max wins where min > max). As torch.clamp: NaN stays NaN, and
        the gradient is 1 where min <= x <= max (the bounds included) and 0 elsewhere."""
        if min is None and max is None:
            fail(ShapeError, "clamp", "at least one of min and max must be given")
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            return clamp_tensors(self, min, max)
        out = self
        if self.requires_grad and self.dtype.is_float:  # NaN: value NaN, gradient 0
            out = where(self == self, self, self.detach())
        # a NaN bound gives NaN, as in torch (a comparison with NaN alone would ignore it)
        if min is not None:
            out = where(_or_nan(out < min, min), min, out)
        if max is not None:
            out = where(_or_nan(out > max, max), max, out)
        return out

    clip = clamp

    @staticmethod
    def where_(cond, a, b) -> Tensor:
        return where(cond, a, b)

    def where(self, cond, other) -> Tensor:
        return where(cond, self, other)

    # ---------------------------------------------------------------- autograd (see autograd.py)
    @property
    def grad(self):
        g = self._grad
        if g is None and self.requires_grad and not self._is_leaf and not self.retains_grad:
            warn_user(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
                "Its .grad attribute won't be populated during autograd.backward(). If you "
                "indeed want the .grad field to be populated for a non-leaf Tensor, use "
                ".retain_grad() on the non-leaf Tensor."
            )
        return g

    @grad.setter
    def grad(self, value):
        self._grad = value

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in `.grad` at backward() (as torch)."""
        retain_grad(self)

    def register_hook(self, hook):
        """Call `hook(grad)` with this tensor's gradient at each backward pass (a tensor it
        returns replaces the gradient), as torch's; `handle.remove()` takes it off. See
        `fusegrad.tensor_hooks`."""
        return _register_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call `hook(self)` after backward() has accumulated this leaf's gradient into
        `.grad` (torch's "optimizer in backward": `hook` may step an optimizer of this
        parameter); returns a handle with `remove()`. See `fusegrad.tensor_hooks`."""
        return _register_post_accumulate(self, hook)

    @property
    def retains_grad(self) -> bool:
        """Whether `retain_grad()` was called on this non-leaf tensor."""
        return retains_grad(self)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        """Make this leaf require grad (as PyTorch, only leaves can be changed)."""
        if flag and not self.dtype.is_float:
            fail(
                DTypeError,
                "requires_grad_",
                f"only float tensors can require grad, got {self.dtype.name}",
            )
        if not self._is_leaf:
            fail(
                GradError,
                "requires_grad_",
                "you can only change requires_grad of leaf tensors; use detach() first",
            )
        self.requires_grad = flag
        if flag:
            register_leaf(self)
            link = getattr(self, "_base", None)
            if link is not None and link[1] is None:  # `t.detach().requires_grad_()`: a
                self._base = None  # leaf of its own, which an optimizer updates alone
        return self

    def detach(self) -> Tensor:
        """The same value, with no gradient flowing back through it.

        As torch's, it shares this tensor's memory as far as writes go: an in-place write
        to it (or to a view of it) lands in this tensor as a write through `.data` does,
        recording no history (`p.detach().zero_()`, `ema.detach().mul_(0.9)`). Unlike
        torch's, it reads the value this tensor had when it was detached: a later write
        to this tensor is not seen through it (use `.data` for that). Made a leaf that
        requires grad (`t.detach().requires_grad_()`), it is a tensor of its own."""
        buf = None if building_expansion() else engine.value(self.node)
        if buf is not None:  # computed already: the buffer, not a copy of it
            node = N.buffer(buf, self.shape, self.dtype)
        else:
            node = N.detach(self.node)
        out = Tensor(node, requires_grad=False, strides=self._strides)
        owner = self.owner if type(self) is DataView and not self._moves else self
        link = getattr(owner, "_base", None)
        source = link[0]() if link is not None and link[1] is None else None
        if source is not None:  # a detached alias of one: writes go where that one's go
            out._base = link
        elif link is not None and _storage_root(owner)._is_leaf:
            # a view of a leaf's memory (`w[0].detach().zero_()`), often a temporary: kept
            # by the link (the leaf, a parameter or a buffer, is alive anyway)
            out._base = (lambda: owner, None)
        else:  # (a weak link: `losses.append(loss.detach())` must not keep each loss
            out._base = (weakref.ref(owner), None)  # tensor, and its history, alive)
        return out

    def assign_(self, value) -> Tensor:
        """Give this tensor a new value in place (lazily); a leaf stays the same leaf.

        This is how optimizers update parameters: `p.assign_(p - lr * p.grad)`.
        The value is detached: no gradient flows from the new value to the old.
        """
        value = as_tensor(value)
        if value.shape != self.shape:
            fail(
                ShapeError,
                "assign_",
                f"value of shape {value.shape} for a tensor of shape {self.shape}",
            )
        value = value.cast(self.dtype)
        here, there = self.node.device, value.node.device
        if here is not None and there is not None and here != there:  # copy_ across devices
            value = value.detach()._to_device(here)
        buf = engine.value(value.node)
        if buf is not None:
            self.node = N.buffer(buf, self.shape, self.dtype)
        else:
            self.node = N.detach(value.node)
            note_lazy(self)
        self._strides = None
        if jit_recording():
            _note_jit_write(self)
        if shared_memory._shared:  # (a tensor in shared memory: the value stored there)
            shared_memory.written(self)
        return self

    # ---------------------------------------------------------------- in-place updates
    def _inplace(self, value, op: str) -> Tensor:
        """Make `value` this tensor's value, with PyTorch's rules for in-place ops: the
        result keeps this tensor's shape and dtype (no float into an int tensor), a leaf that
        requires grad may only be updated under no_grad(), and a leaf stays the same leaf.

        An update with no history is computed at once where leaving it lazy would chain
        one training step's graph onto the next (`autograd.overwrite`)."""
        value = self._checked_update(value, op)
        if self.requires_grad and self._is_leaf and jit_recording():
            track([self])  # (a hand-written update of a parameter: fg.jit's replay state)
        link = getattr(self, "_base", None)
        if link is not None and link[1] is None:  # detached: lands as through `.data`
            write_through_untracked(self, value.cast(self.dtype), op)
        elif link is not None:  # a view: the write lands in its base first (which may refuse)
            write_through(link, value.cast(self.dtype), op)
        grad_mode = autograd_state.enabled()
        if grad_mode and self.requires_grad and self._is_leaf:
            fail(
                InplaceError,
                op,
                "a leaf Variable that requires grad is being used in an in-place operation "
                "(update it under `with fg.no_grad():`)",
            )
        if grad_mode and value.requires_grad:  # a differentiable update: no longer a leaf
            self._version += 1
            value = value.cast(self.dtype)
            self.node, self.requires_grad, self._is_leaf = value.node, True, False
            self._strides = None
            note_lazy(self)
            if jit_recording():
                _note_jit_write(self)
        else:
            overwrite(self, value)
        return self

    def _checked_update(self, value, op: str) -> Tensor:
        """`value` as a tensor, checked to fit this one: the same shape, a dtype whose kind
        (bool < int < float) this tensor's can hold."""
        value = as_tensor(value)
        if value.shape != self.shape:
            fail(
                ShapeError,
                op,
                f"output with shape {self.shape} doesn't match the broadcast shape {value.shape}",
            )
        kinds = "bif"
        if kinds.index(value.dtype.kind) > kinds.index(self.dtype.kind):
            fail(
                DTypeError,
                op,
                f"result type {value.dtype.name} can't be cast to the desired output type "
                f"{self.dtype.name}",
            )
        return value

    def detach_(self) -> Tensor:
        """Cut this tensor off the graph that made it, in place: it becomes a leaf that does
        not require grad (as torch.Tensor.detach_)."""
        self.node = self.detach().node
        self.requires_grad, self._is_leaf = False, True
        return self

    def __iadd__(self, o):
        if type(o) in _GRADIENTS and manualstep.defer(self, o, "add", 1):
            return self
        return self._inplace(self + o, "add_")

    def __isub__(self, o):
        if type(o) in _GRADIENTS and manualstep.defer(self, o, "sub", 1):
            return self
        return self._inplace(self - o, "sub_")

    def __imul__(self, o):
        return self._inplace(self * o, "mul_")

    def __itruediv__(self, o):
        return self._inplace(self / o, "div_")

    def add_(self, other, alpha=1) -> Tensor:
        """self += alpha * other, in place (see `_inplace` for the rules)."""
        other, alpha = deprecated_alpha(other, alpha, "add_")
        if type(other) in _GRADIENTS and manualstep.defer(self, other, "add", alpha):
            return self
        return self._inplace(self + (other if alpha == 1 else other * alpha), "add_")

    def sub_(self, other, alpha=1) -> Tensor:
        other, alpha = deprecated_alpha(other, alpha, "sub_")
        if type(other) in _GRADIENTS and manualstep.defer(self, other, "sub", alpha):
            return self
        return self._inplace(self - (other if alpha == 1 else other * alpha), "sub_")

    def mul_(self, other) -> Tensor:
        return self._inplace(self * other, "mul_")

    def div_(self, other) -> Tensor:
        return self._inplace(self / other, "div_")

    def fill_(self, value) -> Tensor:
        """Set every element to `value`, in place."""
        if isinstance(value, Tensor):
            return self._inplace(value.cast(self.dtype).expand(self.shape), "fill_")
        value = checked_fill(value, self.dtype, "fill_")  # 300 into uint8 raises, as in torch
        return self._inplace(Tensor(N.const(value, self.shape, self.dtype)), "fill_")

    def zero_(self) -> Tensor:
        """Set every element to zero, in place: `with fg.no_grad(): w.zero_()`."""
        return self.fill_(0)

    def copy_(self, src) -> Tensor:
        """Copy `src` (broadcast to this shape, cast to this dtype) into this tensor."""
        src = as_tensor(src)
        shape = broadcast_shapes(self.shape, src.shape, "copy_")
        if shape != self.shape:
            fail(ShapeError, "copy_", f"cannot copy shape {src.shape} into shape {self.shape}")
        return self._inplace(src.cast(self.dtype).expand(self.shape), "copy_")

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None):
        """Accumulate gradients into the `.grad` of every leaf this tensor depends on; with
        `inputs` (a tensor or a sequence), into those tensors' `.grad` alone, as torch's."""
        if inputs is not None:
            autograd_backward(self, gradient, retain_graph, create_graph, inputs=inputs)
            return
        tensor_backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph)

    # ---------------------------------------------------------------- copy and pickle
    def __deepcopy__(self, memo):
        """A leaf with its own copy of the value (and of `.grad`), as torch (copying.py)."""
        return deepcopy_tensor(self, memo)

    def __copy__(self):
        return shallow_copy_tensor(self)

    def __reduce_ex__(self, protocol):
        """Pickle the value as a numpy array, not the runtime buffer (copying.py)."""
        return reduce_tensor(self)

    # t.sqrt_(), t.unsqueeze_(), ...: the in-place variants of the ops above and the
    # mixins' that are not written by hand (inplace_methods.py's tables)
    locals().update(inplace_variants(locals(), MIXINS))


Tensor._plain = Tensor  # what an op on any tensor builds (tensor_base.TensorBase)


def _device_copy(src: N.Node, copied, source_device: str) -> N.Node:
    """A differentiable device move: a node whose value is `copied` (src's value, already
    copied to another device) and whose gradient is moved back to `source_device`.

    A plan runs on one device, so the move is not a kernel: the value is copied now, and
    the gradient when the backward graph is built (it is computed then, as torch
    synchronizes at a copy). The gradient's own move is differentiable too, so a second
    derivative (create_graph=True) crosses back as well."""
    target = copied.device
    node = N.device_copy(src, target)
    engine.bind(node, copied)

    def rule(g: N.Node):
        g = N.place(g, target)  # a gradient of constants alone has no device yet
        engine.realize([g])
        back = to_device(engine.value(g), source_device)
        return [(src, _device_copy(g, back, target))]

    return with_vjp(node, rule)


def jit_recording() -> bool:
    return engine.recording()


def _note_jit_write(t: Tensor) -> None:
    note_write(t)


_THIS_FILE = __file__


def _called_by_user() -> bool:
    """Whether the first frame outside this file is the user's (not fusegrad's own code,
    which reads values on the host for its checks)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == _THIS_FILE:
        f = f.f_back
    return f is not None and not f.f_code.co_filename.startswith(_attribution.library_dirs())


def _unbuilt(t: Tensor) -> None:
    """A stand-in's tensor fields (`LazyGrad`, `ScaledGrad`, `LazyNorm`): no node yet (its
    `node` property builds it), a leaf without a gradient of its own."""
    _NODE.__set__(t, None)
    t.requires_grad = False
    t._grad = None
    t._strides = None
    t._is_leaf = True
    t._version = 0


class LazyGrad(Tensor):
    """A leaf's gradient from backward(), built only when first used.

    Its shape and dtype are known at once; its node (the backward graph) is built the
    first time anything reads it, for all the gradients of that backward() call together
    (`autograd.PendingGrads`). An optimizer step that finds every gradient still unbuilt
    may run a cached plan instead (`frontend/stepcache.py`).

    `seen`: None for the gradient backward() left in `.grad`, which a deferred clipping
    changes in place; for a copy of it (an accumulation's earlier term, the gradient an
    update or a `ScaledGrad` read), how many clippings of its backward() call had been
    asked for when it was made: its value is the gradient after those, not after later
    ones (`PendingGrads.value_of`), as an eager copy would be.

    `base`: a gradient accumulated onto zeros (`p.grad.zero_()`, then backward()) is
    `zeros + g`, still unbuilt: its node is that sum, built when first read. One
    accumulated onto another backward() call's unbuilt gradient (gradient accumulation
    over micro-batches, a GAN's discriminator on real and fake batches) is `earlier + g`,
    `base` a private copy of the earlier one (`_accumulated`), also unbuilt: a step over
    several backward() calls may be cached too.
    """

    __slots__ = ("pending", "index", "base", "seen")
    _copies_plain = True  # a copy is a plain tensor (copying.py)

    def __init__(self, pending, index: int, base: N.Node | None = None, seen: int | None = None):
        self.pending, self.index, self.base, self.seen = pending, index, base, seen
        _unbuilt(self)

    @property
    def node(self) -> N.Node:
        n = _NODE.__get__(self, Tensor)
        if n is None:
            grads = self.pending.materialize()
            n = _NODE.__get__(self, Tensor)  # (a deferred clip gave it its node)
            if n is not None:
                return n
            seen = self.seen
            n = grads[self.index] if seen is None else self.pending.value_of(self.index, seen)
            base = self.base
            if base is not None:  # as `zeros + g`, or `earlier + g`, builds it
                if type(base) is not N.Node:
                    base = base.node
                    self.base = None  # (the earlier calls' records: no longer needed)
                n = Tensor.__add__(Tensor(base), Tensor(n)).node
            _NODE.__set__(self, n)
        return n

    def __add__(self, o):
        if (
            type(o) is LazyGrad
            and not o.built
            and o.base is None
            and o.shape == self.shape
            and o.dtype is self.dtype
        ):
            if _zeros(self):
                return LazyGrad(o.pending, o.index, base=self.node)  # backward() onto zero_()
            if type(self) is LazyGrad and not self.built:  # onto an earlier backward()'s
                return LazyGrad(o.pending, o.index, base=self._accumulated())
        return Tensor.__add__(self, o)

    def _accumulated(self) -> LazyGrad:
        """A private copy of this unbuilt gradient, to accumulate onto: a later write to this
        one (`zero_()`) changes this one alone, as the eager sum it stands for."""
        return self._copy()

    def _copy(self) -> LazyGrad:
        """An unbuilt copy of this gradient's value now (a later clipping leaves it)."""
        seen = self.seen
        if seen is None:
            seen = self.pending.clip_count()
        return LazyGrad(self.pending, self.index, self.base, seen)

    def _terms(self) -> list[tuple] | None:
        """`(pending backward, index)` of each backward() call summed into this gradient,
        the first first, while none is built and nothing else is summed in (zeros); else
        None."""
        out, g = [], self
        while True:
            if type(g) is not LazyGrad or g.built:
                return None
            out.append((g.pending, g.index))
            g = g.base
            if g is None:
                out.reverse()
                return out

    @node.setter
    def node(self, value: N.Node) -> None:
        _NODE.__set__(self, value)

    @property
    def built(self) -> bool:
        """Whether the backward graph behind this gradient has been built."""
        return _NODE.__get__(self, Tensor) is not None

    def __mul__(self, o):
        if not self.built and _plain_number(o):
            return ScaledGrad(self, o, "mul")
        return Tensor.__mul__(self, o)

    def __rmul__(self, o):
        if not self.built and _plain_number(o):
            return ScaledGrad(self, o, "rmul")
        return Tensor.__rmul__(self, o)

    def realize(self) -> Tensor:
        """Compute this gradient now, with the other gradients of the same backward() call
        not computed yet: their graphs share the backward pass, so reading the gradients
        one by one (an optimizer on the host, a gradient log) runs it once, not once per
        gradient."""
        if not self._has_value():
            realize(self, *sibling_grads(self))
        return self

    def _inplace(self, value, op: str) -> Tensor:
        if self.built:
            return super()._inplace(value, op)
        self._take(self._checked_update(value, op))
        self._version += 1
        return self

    def _take(self, value: Tensor) -> None:
        """Take `value` (checked) while unbuilt: nothing read this gradient, so `value` does
        not use it (zero_, fill_, copy_), and the backward graph need not be built."""
        value = value.detach().cast(self.dtype)
        buf = engine.value(value.node)
        self.node = value.node if buf is None else N.buffer(buf, self.shape, self.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        n = _NODE.__get__(self, Tensor)  # (an in-place view op such as t_() changes it)
        return (n if n is not None else self.pending.targets[self.index]).shape

    @property
    def dtype(self) -> DType:
        n = _NODE.__get__(self, Tensor)
        return (n if n is not None else self.pending.targets[self.index]).dtype


Tensor._lazy_grad = LazyGrad  # what autograd.tensor_backward() builds
_NODE = TensorBase.__dict__["node"]  # the slot itself, under LazyGrad's property


def _plain_number(o) -> bool:
    return type(o) is float or type(o) is int


def _zeros(g: LazyGrad) -> bool:
    """Whether gradient `g` was set to +0.0 everywhere (`zero_()`) and not changed since."""
    n = _NODE.__get__(g, Tensor)
    if n is not None and n.op is Ops.DETACH:
        n = n.srcs[0]
    return (
        n is not None
        and n.op is Ops.CONST
        and n.dtype.is_float
        and n.arg == 0
        and math.copysign(1.0, n.arg) > 0
    )


class ScaledGrad(Tensor):
    """`lr * g` for a gradient `g` that backward() has not built yet (`LazyGrad`), built
    only when first used: the hand-written update `p -= lr * p.grad` can then be
    deferred into one cached step (`frontend/manualstep.py`) without building the
    backward graph. Its value is `lr * g` as g was when it was made (a later
    `p.grad.zero_()` does not change it), and anything else that reads it builds it.
    """

    __slots__ = ("pending", "index", "base", "seen", "coef", "side")

    def __init__(self, grad: LazyGrad, coef, side: str):
        self.pending, self.index, self.coef, self.side = grad.pending, grad.index, coef, side
        self.base, seen = grad.base, grad.seen
        self.seen = grad.pending.clip_count() if seen is None else seen  # (as `_copy`)
        _unbuilt(self)

    def scaled(self) -> Tensor:
        """The product as the eager path builds it (`g * c` or `c * g`)."""
        g = LazyGrad(self.pending, self.index, self.base, self.seen)
        return Tensor.__mul__(g, self.coef) if self.side == "mul" else Tensor.__rmul__(g, self.coef)

    def _node(self) -> N.Node:
        n = _NODE.__get__(self, Tensor)
        if n is None:
            n = self.scaled().node
            _NODE.__set__(self, n)
        return n

    node = property(_node, LazyGrad.node.fset)  # built when first read, as LazyGrad's
    built = LazyGrad.built

    @property
    def shape(self) -> tuple[int, ...]:
        n = _NODE.__get__(self, Tensor)
        return (n if n is not None else self.pending.targets[self.index]).shape

    @property
    def dtype(self) -> DType:
        n = _NODE.__get__(self, Tensor)
        if n is not None:
            return n.dtype
        return promote_scalar(self.pending.targets[self.index].dtype, self.coef)


_GRADIENTS = (LazyGrad, ScaledGrad)  # what an in-place update may defer (manualstep.defer)


class DeferredClip:
    """A gradient clipping (`clip_grad_norm_`, `clip_grad_value_`) of unbuilt gradients,
    run when backward()'s gradients are built (`PendingGrads.materialize`): `fn(grads)`
    on the same gradient tensors, as the call would have run it then, so every value,
    node and later read is the eager call's. `key` names it in a cached step's key."""

    def __init__(self, grads: list[LazyGrad], fn, key: tuple, dtype: DType, site):
        self.grads, self.fn, self.key, self.dtype, self.site = grads, fn, key, dtype, site
        self.total: N.Node | None = None  # fn's result's node, once applied
        self.result = None  # weak reference to the tensor the call returned
        self.after: dict[int, N.Node] = {}  # each gradient's node after it, once applied

    def apply(self) -> None:
        with _attribution.fixed(self.site), autograd_state.no_grad():
            out = self.fn(self.grads)
        self.total = None if out is None else out.node
        self.after = {g.index: g.node for g in self.grads}


class LazyNorm(Tensor):
    """The total norm a deferred `clip_grad_norm_` returns (`clip_when_built`): a 0-d
    value built with the gradients, the first time anything reads it."""

    __slots__ = ("clip",)

    def __init__(self, clip: DeferredClip):
        self.clip = clip
        _unbuilt(self)

    def _node(self) -> N.Node:
        n = _NODE.__get__(self, Tensor)
        if n is None:
            self.clip.grads[0].pending.materialize()
            n = self.clip.total
            _NODE.__set__(self, n)
        return n

    node = property(_node, LazyGrad.node.fset)
    built = LazyGrad.built

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self) -> DType:
        n = _NODE.__get__(self, Tensor)
        return self.clip.dtype if n is None else n.dtype


def clip_when_built(grads: list, fn, key: tuple) -> LazyNorm | None:
    """Defer `fn(grads)` (a clipping that changes `grads` in place, and returns a 0-d
    tensor or None) to the build of these gradients, where they are all one backward()
    call's, unbuilt, each once: an optimizer step that finds them so runs its cached plan,
    which clips (`key`, a tuple of plain values, tells such plans apart). Returns the
    stand-in of `fn`'s result (`LazyNorm`); None where it cannot be deferred (the caller
    clips now)."""
    if not grads or engine.recording():
        return None
    first = grads[0]
    if type(first) is not LazyGrad:
        return None
    pending = first.pending
    if pending.grads is not None:
        return None
    for g in grads:
        if type(g) is not LazyGrad or g.pending is not pending or g.built or g.base is not None:
            return None
        if not g.dtype.is_float or g.dtype is not first.dtype:
            return None
    if len({g.index for g in grads}) != len(grads):
        return None
    site = _attribution.capture(1)
    clip = DeferredClip(list(grads), fn, (*key, tuple(g.index for g in grads)), first.dtype, site)
    pending.clips.append(clip)
    total = LazyNorm(clip)
    clip.result = weakref.ref(total)
    return total


def legacy_constructor(dtype, *args) -> Tensor:
    """torch's `Tensor(data)`, `Tensor(2, 3)` and `FloatTensor`-style constructors: sizes
    give a tensor of zeros (torch's is uninitialized), data a copy in `dtype`."""
    args = [a for a in args if a is not None and a is not False]
    if not args:
        return Tensor(full_node((0,), 0.0, dtype))
    if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return Tensor(full_node(_shape(args), 0.0, dtype))
    if len(args) > 1:
        fail(DTypeError, "Tensor", f"expects sizes or one sequence of data, got {args!r}")
    data = args[0]
    if isinstance(data, Tensor):
        return data.detach().cast(dtype)
    return Tensor(data_node(data, dtype))


class GradFn:
    """What `t.grad_fn` returns: names the op that made `t` (its IR op, in torch's style:
    `type(t.grad_fn).__name__` and `t.grad_fn.name()` are `MulBackward0` for a product)."""

    __slots__ = ("node",)

    def __init__(self, node: N.Node):
        self.node = node

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.name()} object>"


@functools.cache
def _grad_fn_class(op_name: str) -> type:
    return type(op_name.title().replace("_", "") + "Backward0", (GradFn,), {"__slots__": ()})


class DataView(Tensor):
    """`t.data`: t's value without its history, as torch's `.data`.

    Reads see t's current value, even from a `d = p.data` kept across optimizer steps;
    in-place updates (`p.data -= lr * p.grad`, `w.data.clamp_(-c, c)`, `g.data.zero_()`)
    land in t itself, under grad mode too, and record no history. As in PyTorch they bump
    the view's version, not t's; a graph built before such a write to a leaf that requires
    grad raises at backward() (fusegrad's graph holds the old value, PyTorch's the new).

    >>> import fusegrad as fg
    >>> w = fg.ones(2, requires_grad=True)
    >>> w.data.mul_(3)
    tensor([3., 3.])
    >>> w
    tensor([3., 3.], requires_grad=True)

    Movements in place (`t_ transpose_ swapaxes_ swapdims_ squeeze_ unsqueeze_`) change
    the view's shape, not t's, as torch's change the metadata of the tensor `.data` gave:
    the view then reads t moved, and writes through it land in t moved back.

    >>> w = fg.zeros(2, 3)
    >>> d = w.data.t_()
    >>> d.shape, w.shape
    ((3, 2), (2, 3))
    >>> d[0] = 1.0
    >>> w.tolist()
    [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    """

    __slots__ = ("owner", "_seen", "_moves")
    _copies_plain = True  # a copy is a plain tensor (copying.py): not a view

    def __init__(self, owner: Tensor, moves: tuple = ()):
        self.owner = owner
        self._seen = (None, None, None)  # (the owner's node, this view's node, its strides)
        self._moves = moves  # (method name, args, the shape before) per movement in place
        self.requires_grad = False
        self._grad = None
        self._is_leaf = True
        self._version = 0

    @property
    def node(self) -> N.Node:
        return self._current()[0]

    def _current(self):
        # one node per owner node, kept: a value computed for it stays found
        source, mine, strides = self._seen
        now = self.owner.node
        if now is not source:
            buf = engine.value(now)
            mine = N.detach(now) if buf is None else N.buffer(buf, now.shape, now.dtype)
            strides = None
            if self._moves:
                moved = Tensor(mine, strides=self.owner._strides)
                for name, args, _ in self._moves:
                    moved = getattr(moved, name)(*args)
                mine, strides = moved.node, moved._strides
            self._seen = (now, mine, strides)
        return mine, strides

    def _move_(self, name: str, args: tuple) -> Tensor:
        """A movement in place: this view's shape changes, the owner's does not."""
        before = self.shape
        getattr(Tensor(self.node), name)(*args)  # its checks (dims in range), at the user's line
        self._moves = (*self._moves, (name, args, before))
        self._seen = (None, None, None)
        self._version += 1
        return self

    def _unmoved(self, value: Tensor) -> Tensor:
        """`value`, of this view's shape, brought back to the owner's: each movement undone."""
        for name, args, before in reversed(self._moves):
            if name in ("squeeze", "unsqueeze"):
                value = value.reshape(before)
            else:  # t, transpose, swapaxes, swapdims: each undoes itself
                value = getattr(value, name)(*args)
        return value

    @node.setter
    def node(self, value: N.Node) -> None:
        # a realize() re-pointing this view at its computed value: the owner holds it
        if value.op is Ops.BUFFER and value.arg is engine.value(self.node):
            return
        fail(ArgumentError, "data", "a tensor's .data is a view of it: assign to .data instead")

    @property
    def _strides(self):
        return self._current()[1] if self._moves else self.owner._strides

    @_strides.setter
    def _strides(self, value) -> None:
        pass  # the owner's strides are the view's

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape if self._moves else self.owner.shape

    @property
    def dtype(self) -> DType:
        return self.owner.dtype

    def assign_(self, value) -> Tensor:
        return self._inplace(value, "assign_")

    def _inplace(self, value, op: str) -> Tensor:
        value = self._unmoved(self._checked_update(value, op).detach())
        self._version += 1
        owner = self.owner
        if owner.requires_grad and owner._is_leaf and jit_recording():
            track([owner])  # (`p.data.add_(...)`: a hand-written update, replay state)
        if owner.requires_grad and not owner._is_leaf:
            # torch's value changes and its gradient still flows through the old graph
            old = owner.node
            same = N.binary(Ops.CMPEQ, old, old)
            always = N.binary(Ops.ADD, same, N.unary(Ops.NEG, same))  # NaN == NaN or not
            new = N.where(always, N.cast(value.node, owner.dtype), old)
            owner.node = with_vjp(new, lambda g: [(old, g)])
            owner._strides = None
        elif type(owner) is LazyGrad and not owner.built:
            owner._take(value)  # `p.grad.data.zero_()`: no backward graph built for nothing
        else:
            overwrite(owner, value, counted=False)
        # the owner's memory is another's too (a view's base, a detached alias' source)
        write_through_untracked(owner, value.cast(owner.dtype), op)
        return self

    def requires_grad_(self, flag: bool = True) -> Tensor:
        fail(
            GradError,
            "requires_grad_",
            "a tensor's .data can't require grad; use .detach().requires_grad_() for a new leaf",
        )

    def detach_(self) -> Tensor:
        return self  # it has no history


Tensor._data_view = DataView  # what `t.data` is (mathops.py)


def _data_view_move(name: str):
    def method(self, *args):
        return self._move_(name, args)

    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"`{name}` in place: this view takes the shape `t.{name}(...)` has."
    return method


for _name in ("t", "transpose", "swapaxes", "swapdims", "squeeze", "unsqueeze"):
    setattr(DataView, _name + "_", _data_view_move(_name))


# ---------------------------------------------------------------- module functions


# numpy ufunc -> (the tensor's method when it is on the left, when it is on the right)
_UFUNC_OPERATORS = {
    "add": ("__add__", "__radd__"),
    "subtract": ("__sub__", "__rsub__"),
    "multiply": ("__mul__", "__rmul__"),
    "divide": ("__truediv__", "__rtruediv__"),  # np.true_divide's name
    "power": ("__pow__", "__rpow__"),
    "matmul": ("__matmul__", "__rmatmul__"),
    "less": ("__lt__", "__gt__"),
    "greater": ("__gt__", "__lt__"),
    "less_equal": ("__le__", "__ge__"),
    "greater_equal": ("__ge__", "__le__"),
    "equal": ("__eq__", "__eq__"),
    "not_equal": ("__ne__", "__ne__"),
    "bitwise_and": ("__and__", "__and__"),  # of bools: logical, which is symmetric
    "bitwise_or": ("__or__", "__or__"),
}


def as_tensor(x, op: str = "tensor") -> Tensor:
    """`x` itself if it is a tensor, else `fg.tensor(x)` (what an operator makes of a
    number or a list it is handed)."""
    if isinstance(x, Tensor):
        return x
    return Tensor(data_node(x))


def where(cond, a=None, b=None) -> Tensor:
    """`a` where `cond` is true, else `b`, broadcasting all three; with `cond` alone,
    `nonzero(cond, as_tuple=True)`.

    >>> import fusegrad as fg
    >>> fg.where(fg.tensor([True, False]), 1.0, 0.0).tolist()
    [1.0, 0.0]
    >>> [t.tolist() for t in fg.where(fg.tensor([0, 3, 0, 4]))]
    [[1, 3]]
    """
    if a is None and b is None:
        return as_tensor(cond).nonzero(as_tuple=True)
    if a is None or b is None:
        fail(ShapeError, "where", "give both a and b, or neither")
    if not isinstance(cond, Tensor) and not isinstance(a, Tensor) and not isinstance(b, Tensor):
        cond = as_tensor(cond)  # no tensor to take the class from
    return _where(cond, a, b)


def _own_gradient(out: Tensor, x: Tensor, rule) -> Tensor:
    """`out`, a function of `x` alone, with the gradient rule(g, out_node, x_node) -> the
    gradient of x (a node), in place of the chain rule through out's composition
    (`_own_gradient_node`), where `out` wants a gradient."""
    if out.requires_grad:
        _own_gradient_node(out.node, x.node, rule)
    return out


def _own_gradient_node(out: N.Node, x: N.Node, rule) -> N.Node:
    """`out`, a node computed from `x` alone, with the gradient rule(g, out, x) -> the
    gradient of x (a node), in place of the chain rule through out's composition.

    The rule is kept by the graph (`ir.autodiff.with_vjp`) while `out` lives; it is handed
    that node, so that it need not hold it (that would keep it alive forever). An empty or
    constant-folded result keeps the derived gradient (there is no point).
    """
    if out.op is Ops.CONST or out.op in MOVEMENT:
        return out
    ref = weakref.ref(out)
    with_vjp(out, lambda g: [(x, rule(g, ref(), x))])
    return out


def in_memory(t: Tensor) -> Tensor:
    """`t`, or where its value is a constant (`zeros`, `new_zeros`: a node computed inline
    wherever it is read, in no memory) that no gradient flows into, the same values in a
    buffer of their own, made now on the host (outside `fusegrad.jit`'s recording). A
    recurrent layer's initial state given as zeros (`init_hidden`) is then an input of the
    first step's graph as the state carried to the next steps is of theirs: one plan for
    all of them, not the first compiled apart (a word language model's 900 kernels)."""
    node = t.node
    if node.op is not Ops.CONST or t.requires_grad or engine.recording():
        return t
    values = np.full(node.shape, node.arg)
    return Tensor(data_node(values, node.dtype, node.device or t.device))


def computed_now(t: Tensor) -> Tensor:
    """`t`, computed now where its value is a graph still to compute (not data, not a
    constant: `zeros` stays a node computed inline wherever it is read) that no gradient
    flows into, outside `fusegrad.jit`'s recording. A module's buffer given as such a graph
    (a positional encoding's table, written into `zeros` when the module is built:
    `Module.register_buffer`) is then read from memory by the first step as by every later
    one, so the first step's plan is theirs, not one that computes the table too."""
    if t.node.op in (Ops.BUFFER, Ops.CONST) or t.requires_grad or engine.recording():
        return t
    from .carried import from_constants, note_constant_value  # (carried imports tensors)

    constant = from_constants(t)
    t.realize()
    if constant:  # (a graph over it, a view kept of the table, is still a constant's)
        note_constant_value(t)
    return t


def hardtanh_values(x: Tensor, lo: float, hi: float) -> Tensor:
    """x limited to [lo, hi] as F.hardtanh: -0.0 and NaN pass (< and >, not <= and >=),
    and torch's gradient: 0 at and beyond the limits, 1 at NaN."""
    out = where(x < lo, lo, where(x > hi, hi, x))
    if not out.dtype.is_float:
        return out

    def rule(g, y, xn):
        low, high = N.const(lo, xn.shape, xn.dtype), N.const(hi, xn.shape, xn.dtype)
        le = N.add(N.binary(Ops.CMPLT, xn, low), N.binary(Ops.CMPEQ, xn, low))
        ge = N.add(N.binary(Ops.CMPLT, high, xn), N.binary(Ops.CMPEQ, xn, high))
        return N.where(N.add(le, ge), N.const(0, g.shape, g.dtype), g)

    return _own_gradient(out, x, rule)


def _relu_grad(g: N.Node, y: N.Node | None, x: N.Node) -> N.Node:
    """g where relu's input was above 0 or NaN, else 0, read off its output `y` (as torch's
    threshold_backward: y <= 0 exactly where x <= 0, -0.0 included, and y is NaN where x
    is): the output is what a training step stores, and the kernel computing it (a
    convolution's or matmul's epilogue) then stores nothing else. Off `x` where there is
    no output node to read."""
    v = x if y is None else y
    zero = N.const(0, v.shape, v.dtype)
    at_most_zero = N.binary(Ops.ADD, N.binary(Ops.CMPLT, v, zero), N.binary(Ops.CMPEQ, v, zero))
    return N.where(at_most_zero, N.const(0, g.shape, g.dtype), g)


def _relu_rule(srcs, params) -> N.Node:
    """The expansion of a "relu" macro: `Tensor.relu`'s nodes on a float x, with its
    gradient rule (0 at and below 0, 1 at NaN)."""
    (x,) = srcs
    zero = N.const(0, x.shape, x.dtype)
    out = N.where(N.binary(Ops.CMPLT, x, zero), zero, x)  # relu(-0.0) = -0.0
    if out.op is Ops.WHERE:  # (not folded: x is no constant)
        ref = weakref.ref(out)  # (the rule lives while `out` does: it must not hold it)
        with_vjp(out, lambda g: [(x, _relu_grad(g, ref(), x))])
    return out


register_macro("relu", _relu_rule)


def _sigmoid_node(x: N.Node) -> N.Node:
    """`Tensor.sigmoid` of a float node, composed: z = e^-|x|, then 1 / (1 + z) where
    x >= 0 and z / (1 + z) where not, with its gradient rule.

    Built on nodes (as `_relu_rule`), node for node what the tensor operations
    `where(x >= 0, 1, z) / (1 + z)` build inside an expansion: an LSTM's expansion makes
    three a time step, and a tensor per node cost it 0.15 ms each."""
    shape, dtype = x.shape, x.dtype
    z = N.unary(Ops.EXP, N.unary(Ops.NEG, _abs_node(x)))
    zero, one = N.const(0, shape, dtype), N.const(1, shape, dtype)
    at_least_zero = N.add(N.binary(Ops.CMPLT, zero, x), N.binary(Ops.CMPEQ, x, zero))
    out = N.binary(Ops.DIV, N.where(at_least_zero, one, z), N.add(one, z))
    # s (1 - s) = z / (1 + z)^2, with no cancellation where s is near 1, rather than
    # the chain rule through |x| (whose gradient at 0 is 0: sigmoid'(0) would be 0)
    return _own_gradient_node(out, x, lambda g, y, x: N.mul(g, _over_square_of_1_plus(z, z)))


def _abs_node(x: N.Node) -> N.Node:
    """`Tensor.abs` of a float node, the same nodes: |-0.0| is +0.0, NaN stays NaN, and the
    gradient is g * sign(x) (0 at 0 and at NaN)."""
    zero = N.const(0, x.shape, x.dtype)
    magnitude = N.where(N.binary(Ops.CMPEQ, x, zero), zero, x)
    out = N.where(N.binary(Ops.CMPLT, x, zero), N.unary(Ops.NEG, x), magnitude)
    return _own_gradient_node(out, x, lambda g, y, x: N.mul(g, _sign_node(x)))


def register_composite(kind: str, composed, deferred_grad: bool = False, gradient=None) -> None:
    """Make `kind` a macro (ir/macro.py) whose expansion is what `composed(tensors, params)`
    builds: a library op written with Tensor operations, its gradient rules included
    (`composite` then builds the one node). The expansion is built with gradients on,
    whatever the caller's mode, and on sources that all want gradients: it is kept, and
    differentiated later, for whichever sources do. `deferred_grad`: its gradient is one
    macro node too, expanded and derived only when a plan is compiled (ir/autodiff.py
    `DEFERRED_GRADS`: for a large expansion, a recurrent layer's). `gradient(tensors,
    params, grad_output)`: for an expansion that depends on the layout it is built for
    (ir/layout.py), the gradients of the form it builds under the current layout, one
    tensor or None per source, as a `custom_gradient` rule gives them, or None (no list)
    to derive them from that form."""
    if deferred_grad:
        DEFERRED_GRADS.add(kind)

    def rule(srcs, params) -> N.Node:
        with autograd_state.enable_grad(), unnoted():
            tensors = [Tensor(n, requires_grad=True, leaf=False) for n in srcs]
            return composed(tensors, params).node

    def own_gradient(srcs, params, g):
        grads = gradient([Tensor(n) for n in srcs], params, Tensor(g))
        return None if grads is None else [None if t is None else t.node for t in grads]

    register_macro(kind, rule, own_gradient if gradient is not None else None)


def composite(kind: str, tensors: Sequence[Tensor], params: tuple, shape, dtype) -> Tensor:
    """The one macro node of a `register_composite` op on `tensors`: its value is
    `composed(tensors, params)`'s (of that `shape` and `dtype`), its gradients too."""
    node = macro(kind, tuple(t.node for t in tensors), params, tuple(shape), dtype)
    return tensors[0]._make(node, *tensors[1:])


register_macro("sigmoid", lambda srcs, params: _sigmoid_node(srcs[0]))
register_composite("logsumexp", lambda tensors, params: logsumexp_composed(tensors[0], *params))
register_composite("argmax", lambda tensors, params: argmax_composed(tensors[0], *params))
for _kind, _composed in COMPOSED.items():  # floor, erf, atan2, ...: mathops.py's composed ops
    register_composite(_kind, lambda tensors, params, composed=_composed: composed(*tensors))


def _tanh_node(x: N.Node) -> N.Node:
    """`Tensor.tanh` of a float node, composed: from e = e^-2|x|, sign(x) (1 - e) / (1 + e),
    and an odd series where |x| is small (that form cancels there), with its gradient rule;
    built on nodes, as `_sigmoid_node`."""
    shape, dtype = x.shape, x.dtype

    def c(value) -> N.Node:
        return N.const(value, shape, dtype)

    magnitude = _abs_node(x)
    e = N.unary(Ops.EXP, N.mul(c(-2), magnitude))  # <= 1: no overflow, nor in derivatives
    # the sign as `where(x < 0, -1, 1)` makes it: integers, broadcast, then cast
    whole = promote_scalar(bool_, -1)
    minus, plus = (_broadcast_node(N.const(v, (), whole), shape) for v in (-1, 1))
    sign = N.cast(N.where(N.binary(Ops.CMPLT, x, c(0)), minus, plus), dtype)
    big = N.binary(Ops.DIV, N.mul(sign, N.add(c(1), N.unary(Ops.NEG, e))), N.add(c(1), e))
    # odd Taylor series to x^9: error < 1e-8 for |x| < 0.25
    x2 = N.mul(x, x)
    series = N.mul(x2, c(62 / 2835))
    for k in (-17 / 315, 2 / 15, -1 / 3):
        series = N.mul(x2, N.add(c(k), series))
    small = N.mul(x, N.add(c(1), series))
    # the series is exact to the last bit below 0.25 in float32, below 0.02 in float64
    limit = 0.25 if dtype.itemsize == 4 else 0.02
    out = N.where(N.binary(Ops.CMPLT, magnitude, c(limit)), small, big)
    # 1 - t^2 = 4e / (1 + e)^2, with no cancellation where t is near +-1
    four_e = N.mul(e, c(4))
    return _own_gradient_node(out, x, lambda g, y, x: N.mul(g, _over_square_of_1_plus(four_e, e)))


register_macro("tanh", lambda srcs, params: _tanh_node(srcs[0]))


def _over_square_of_1_plus(a: N.Node, z: N.Node) -> N.Node:
    """a / (1 + z)^2, as nodes."""
    d = N.add(N.const(1, z.shape, z.dtype), z)
    return N.binary(Ops.DIV, a, N.mul(d, d))


def _sign_node(x: N.Node) -> N.Node:
    """-1, 0 or 1, and 0 at NaN (torch.sign), as nodes: the factor of abs's gradient."""
    zero, one = N.const(0, x.shape, x.dtype), N.const(1, x.shape, x.dtype)
    neg = N.where(N.binary(Ops.CMPLT, x, zero), N.const(-1, x.shape, x.dtype), zero)
    return N.where(N.binary(Ops.CMPLT, zero, x), one, neg)


@autocast_op("pow")
def pow_(base: Tensor, exponent) -> Tensor:
    """x ** y with torch.pow's values and gradients.

    A Python integer exponent is repeated multiplication (exact for integers, which stay
    integers; x ** 0 is 1 with a zero gradient). Otherwise: integral exponents below 64 are
    repeated multiplication chosen per element, others exp(y log|x|) computed in float64,
    with the sign of a negative base, and C's special cases (0 ** 0 = 1 ** nan = nan ** 0 = 1,
    0 ** -y = inf, (-1) ** inf = 1).
    """
    # (an integer tensor to a Python float is a float one, as torch's: 2 ** 2.0 is 4.0)
    scalar = isinstance(exponent, (int, float)) and not isinstance(exponent, bool)
    if scalar and (base.dtype.is_float or isinstance(exponent, int)):
        if base.dtype.is_bool:  # torch: a bool tensor to an int is int64
            base = base.cast("int64")
        if float(exponent).is_integer() and (abs(exponent) <= 64 or not base.dtype.is_float):
            return _int_power(base, int(exponent))
        if exponent == 0.5 and base.dtype.is_float:
            return base.sqrt()
        if exponent == -0.5 and base.dtype.is_float:
            # as torch: the value is rsqrt's ((-inf) ** -0.5 is NaN, not C's 0), the
            # gradient pow's, g (-0.5) x^-1.5
            return _own_gradient(
                base.rsqrt(),
                base,
                lambda g, y, x: N.mul(g, N.mul(pow_(Tensor(x), -1.5).node, _c(-0.5, x))),
            )
    b, e = base._operands(exponent, "pow")
    if not b.dtype.is_float:
        if b.dtype.is_bool:  # bool to a Python bool: torch's is bool (computed in int64)
            if not isinstance(exponent, bool):
                fail(DTypeError, "pow", "not implemented for bool tensors (as torch)")
            return _int_tensor_power(b.cast("int64"), e.cast("int64")).cast("bool")
        return _int_tensor_power(b, e)
    # one macro node, not `_float_power`'s 35 to 130 nodes built on every call
    return as_macro("pow", (b, e), (), b.shape, b.dtype, _float_power)


def _power_by_squaring(x: Tensor, n: int) -> Tensor:
    out, p = None, x
    while n:
        if n & 1:
            out = p if out is None else out * p
        n >>= 1
        if n:
            p = p * p
    return out


def _int_power(base: Tensor, n: int) -> Tensor:
    if n == 0:
        # 1 everywhere (NaN included), still a function of base: its gradient is 0, as torch's
        keep = (base == base) | (base != base)
        return (
            where(keep, 1, base)
            if base.dtype.is_float
            else base._make(N.const(1, base.shape, base.dtype))
        )
    if n < 0 and not base.dtype.is_float:
        fail(ArgumentError, "pow", "Integers to negative integer powers are not allowed.")
    if base.dtype.is_bool:
        return base.clone()
    out = _power_by_squaring(base, abs(n))
    if out is base:
        out = base.clone()  # (x ** 1: a new tensor, as torch's)
    if n > 0:
        return out
    # torch's g n x^(n-1): the chain rule through 1 / x^|n| gives inf * 0 = NaN at 0 and inf
    out = out.reciprocal()
    return _own_gradient(
        out, base, lambda g, y, x: N.mul(g, N.mul(_int_power(Tensor(x), n - 1).node, _c(n, x)))
    )


def _c(value, like: N.Node) -> N.Node:
    return N.const(value, like.shape, like.dtype)


def _int_tensor_power(b: Tensor, e: Tensor) -> Tensor:
    """Integers to integer tensor powers, exactly (wrapping on overflow, as torch). A
    negative exponent gives torch's integer result (its scalar form refuses one): 1 for a
    base of 1, +-1 for -1 by the exponent's parity, else 0 (0 too)."""
    bits = 8 * e.dtype.itemsize - 1
    negative = e < 0
    out, p, k = None, b, where(negative, 0, e)
    for i in range(bits):
        factor = where(_low_bit(k), p, 1)
        out = factor if out is None else out * factor
        if i + 1 < bits:
            p, k = p * p, _half(k)
    minus_one = where(_low_bit(e.abs()), -1, 1).cast(out.dtype)
    inverse = where(b == 1, 1, where(b == -1, minus_one, 0)).cast(out.dtype)
    return where(negative, inverse, out)


def _low_bit(k: Tensor) -> Tensor:
    return k - _half(k) * 2 != 0


def _half(k: Tensor) -> Tensor:
    """k // 2 for k >= 0 (integer division truncates)."""
    return k._make(N.binary(Ops.DIV, k.node, N.const(2, k.shape, k.dtype)))


def _or_nan(mask: Tensor, bound) -> Tensor:
    """`mask`, also True where the clamp bound `bound` (a number or a tensor) is NaN."""
    if isinstance(bound, Tensor) and bound.dtype.is_float:
        return mask | (bound != bound)
    if isinstance(bound, float) and math.isnan(bound):
        return mask | True
    return mask


def _float_power(b: Tensor, e: Tensor) -> Tensor:
    wide = "float64"
    x, y = b.cast(wide), e.cast(wide)  # not detached: the rule below needs b, e reachable
    ax = x.abs()
    # integral exponents: per-element repeated squaring over 6 bits (exact, as torch)
    # beyond 2^53 every float is an even integer; NaN would not convert to an integer
    yc = where(y == y, y.clamp(-(2.0**62), 2.0**62), 0.5)
    k = yc.cast("int64")
    integral = k.cast(wide) == yc
    odd = integral & _low_bit(k.abs())
    small = integral & (yc.abs() < 64)
    ks, p, exact = where(small, k.abs(), 0), ax, None
    for i in range(6):
        factor = where(_low_bit(ks), p, 1.0)
        exact = factor if exact is None else exact * factor
        if i < 5:
            p, ks = p * p, _half(ks)
    exact = where(yc < 0, 1.0 / exact, exact)
    general = (y * ax.log()).exp()
    mag = where(small, exact, general)
    negative = (x < 0) | (1.0 / x < 0)  # -0.0 included: (-0.0) ** -1 is -inf
    value = where(negative & odd, -mag, mag)
    value = where((x < 0) & ~integral & (x != float("-inf")), float("nan"), value)
    value = where((ax == 1) & (y.abs() == float("inf")), 1.0, value)
    value = where((x == 1) | (y == 0), 1.0, value).cast(b.dtype)
    if not (b.requires_grad or e.requires_grad):
        return value
    node = N.mul(value.node, N.const(1, value.shape, value.dtype))  # a node of its own
    # the operands as they are now: an in-place update (`x.pow_(y)`) rebinds b.node
    b = Tensor(b.node, requires_grad=b.requires_grad, leaf=False)
    e = Tensor(e.node, requires_grad=e.requires_grad, leaf=False)

    def rule(g):
        gt = Tensor(g)
        gx = where(e == 0, 0.0, gt * e * pow_(b, e - 1))
        gy = gt * where((b == 0) & (e >= 0), 0.0, value * b.log())
        return [(b.node, gx.node), (e.node, gy.node)]

    return b._make(with_vjp(node, rule), e)


register_composite("pow", lambda tensors, params: _float_power(*tensors))
