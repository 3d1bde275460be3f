"""PyTorch's in-place method variants, generated from tables rather than written one by one.

>>> import fusegrad as fg
>>> t = fg.tensor([1.0, 4.0, 9.0])
>>> t.sqrt_().clamp_(max=2.5)
tensor([1.0000, 2.0000, 2.5000])

Each variant in `SAME_SHAPE` is `self._inplace(self.op(*args, **kwargs), "op_")`, so it
follows `Tensor._inplace`'s rules: the result keeps this tensor's shape and dtype (no
float into an int tensor: `int_tensor.sqrt_()` raises, as in torch), a leaf that
requires grad is updated only under no_grad(), and a differentiable update keeps its
gradient. `VIEWS` change the shape (`unsqueeze_`, `t_`, ...), `RANDOM` draw new values
(`normal_`, `uniform_`, ...). A variant fusegrad writes by hand (`add_`, `copy_`,
`index_add_`, ...) is left as it is.
"""

from __future__ import annotations

import math
import warnings

from . import autograd_state
from .autocast import autocast_op
from .creation_nodes import rand_node, randint, randn
from .errors import ArgumentError, DTypeError, fail
from .tensor_base import TensorBase, where
from .versions import InplaceError, retire

# in-place variants of elementwise (and same-shape) ops: name_ is _inplace(name(...))
SAME_SHAPE = (
    # unary math
    "abs absolute neg negative sign sgn exp exp2 expm1 log log2 log10 log1p sqrt rsqrt "
    "reciprocal square sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh arcsin "
    "arccos arctan arcsinh arccosh arctanh erf erfc sigmoid relu floor ceil round trunc fix "
    "frac nan_to_num logical_not bitwise_not "
    # with arguments
    "clamp clip clamp_min clamp_max pow fmod remainder floor_divide div divide true_divide "
    "mul multiply sub subtract atan2 arctan2 copysign lerp addcmul addcdiv "
    "bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift "
    "logical_and logical_or logical_xor eq ne lt le gt ge not_equal less less_equal "
    "greater greater_equal "
    # same-shape ops along a dimension, and indexed writes
    "cumsum cumprod tril triu masked_fill masked_scatter index_fill index_add index_copy "
    "scatter scatter_add scatter_reduce index_put index_reduce put renorm "
    # torch's other same-shape ops: their variants appear as soon as fusegrad has the op
    "hypot xlogy float_power logit lgamma digamma erfinv i0 sinc deg2rad rad2deg heaviside "
    "nextafter ldexp gcd lcm igamma igammac polygamma mvlgamma addmm addmv addr addbmm baddbmm"
).split()

# in-place variants that change the tensor's shape (metadata only in torch)
VIEWS = ("unsqueeze", "squeeze", "t", "transpose", "swapaxes", "swapdims", "as_strided")


def _same_shape(name: str):
    def method(self, *args, **kwargs) -> TensorBase:
        return self._inplace(getattr(self, name)(*args, **kwargs), name + "_")

    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"`{name}` in place: `t.{name}_(...)` gives t the value of `t.{name}(...)`."
    return method


def _view(name: str):
    def method(self, *args, **kwargs) -> TensorBase:
        if autograd_state.enabled() and self.requires_grad and self._is_leaf:
            fail(
                InplaceError,
                name + "_",
                "a leaf Variable that requires grad is being used in an in-place operation "
                "(update it under `with fg.no_grad():`)",
            )
        out = getattr(self, name)(*args, **kwargs)
        old = self.node
        self._version += 1
        self.node, self._strides = out.node, out._strides
        if self.requires_grad and self._is_leaf:
            retire(old, self)
        return self

    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"`{name}` in place: this tensor takes the shape `t.{name}(...)` has."
    return method


# ---------------------------------------------------------------- methods the table needs


def clamp_min(self, min) -> TensorBase:  # noqa: A002  (torch's name)
    """`clamp(min=min)`."""
    return self.clamp(min=min)


def clamp_max(self, max) -> TensorBase:  # noqa: A002
    """`clamp(max=max)`."""
    return self.clamp(max=max)


@autocast_op("addcmul")
def addcmul(self, tensor1, tensor2, *deprecated, value=1) -> TensorBase:
    """self + value * tensor1 * tensor2 (torch.addcmul; also its deprecated
    `addcmul(value, tensor1, tensor2)`, with torch's warning)."""
    value, tensor1, tensor2 = _value_first(value, tensor1, tensor2, deprecated, "addcmul")
    return self + value * tensor1 * tensor2


@autocast_op("addcdiv")
def addcdiv(self, tensor1, tensor2, *deprecated, value=1) -> TensorBase:
    """self + value * tensor1 / tensor2 (torch.addcdiv; also its deprecated
    `addcdiv(value, tensor1, tensor2)`, with torch's warning)."""
    value, tensor1, tensor2 = _value_first(value, tensor1, tensor2, deprecated, "addcdiv")
    return self + value * (tensor1 / tensor2)


def _value_first(value, tensor1, tensor2, deprecated: tuple, op: str) -> tuple:
    """(value, tensor1, tensor2) of a call in torch's deprecated order, the number first
    (old optimizers: `exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)`)."""
    if not deprecated:
        return value, tensor1, tensor2
    if len(deprecated) != 1 or isinstance(tensor1, TensorBase) or value != 1:
        raise TypeError(
            f"{op}() takes 2 positional arguments after the tensor (tensor1, tensor2), "
            f"or torch's deprecated (value, tensor1, tensor2)"
        )
    warnings.warn(
        f"This overload of {op} is deprecated:\n\t{op}(Number value, Tensor tensor1, Tensor "
        f"tensor2)\nConsider using one of the following signatures instead:\n\t{op}(Tensor "
        "tensor1, Tensor tensor2, *, Number value = 1)",
        UserWarning,
        stacklevel=4,
    )
    return tensor1, tensor2, deprecated[0]


def masked_scatter(self, mask, source) -> TensorBase:
    """Where `mask` (broadcast to self's shape) is true, the next elements of `source` in
    row-major order; elsewhere self (torch.masked_scatter).

    >>> import fusegrad as fg
    >>> m = fg.tensor([[True, False, True], [False, True, False]])
    >>> fg.zeros(2, 3).masked_scatter(m, fg.arange(6.0)).tolist()
    [[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]
    """
    if not mask.dtype.is_bool:
        fail(DTypeError, "masked_scatter", f"mask must be a bool tensor, got {mask.dtype.name}")
    mask = mask.expand(self.shape)
    flat = source.reshape(-1)
    taken = mask.reshape(-1).long().cumsum(0) - 1  # the source element each true place takes
    picked = flat[taken.clamp(0, max(flat.shape[0] - 1, 0))].reshape(self.shape)
    return where(mask, picked.cast(self.dtype), self)


def _compare(op: str):
    return lambda self, other: getattr(self, op)(other)


BASE = {
    "clamp_min": clamp_min,
    "clamp_max": clamp_max,
    "addcmul": addcmul,
    "addcdiv": addcdiv,
    "masked_scatter": masked_scatter,
    "negative": lambda self: -self,
    "absolute": lambda self: self.abs(),
    "eq": _compare("__eq__"),
    "ne": _compare("__ne__"),
    "lt": _compare("__lt__"),
    "le": _compare("__le__"),
    "gt": _compare("__gt__"),
    "ge": _compare("__ge__"),
    "not_equal": _compare("__ne__"),
    "less": _compare("__lt__"),
    "less_equal": _compare("__le__"),
    "greater": _compare("__gt__"),
    "greater_equal": _compare("__ge__"),
}


# ---------------------------------------------------------------- random fills


def normal_(self, mean=0.0, std=1.0, *, generator=None) -> TensorBase:
    """Fill with samples of N(mean, std^2), in place."""
    z = randn(self, self.shape, generator, self.dtype, self.device)
    return self._inplace(z * std + mean, "normal_")


def uniform_(self, a=0.0, b=1.0, *, generator=None) -> TensorBase:
    """Fill with samples of U[a, b), in place (torch names the bounds `from` and `to`)."""
    u = self._plain(rand_node(self.shape, generator, self.dtype, self.device))
    return self._inplace(u * (b - a) + a, "uniform_")


def bernoulli_(self, p=0.5, *, generator=None) -> TensorBase:
    """Fill with 1 (probability `p`, a number or a tensor) or 0, in place."""
    u = self._plain(rand_node(self.shape, generator, "float64", self.device))
    return self._inplace((u < p).cast(self.dtype), "bernoulli_")


def exponential_(self, lambd=1.0, *, generator=None) -> TensorBase:
    """Fill with samples of the exponential distribution of rate `lambd`, in place."""
    u = self._plain(rand_node(self.shape, generator, self.dtype, self.device))
    return self._inplace(-(1 - u).log() / lambd, "exponential_")


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None) -> TensorBase:
    """Fill with samples of the Cauchy distribution (`median` + `sigma` tan(pi (u - 1/2))),
    in place."""
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    u = self._plain(rand_node(self.shape, generator, "float64", self.device))
    return self._inplace((((u - 0.5) * math.pi).tan() * sigma + median).cast(self.dtype), "cauchy_")


def log_normal_(self, mean=1.0, std=2.0, *, generator=None) -> TensorBase:
    """Fill with exp of samples of N(`mean`, `std`^2), in place."""
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    z = randn(self, self.shape, generator, self.dtype, self.device)
    return self._inplace((z * std + mean).exp(), "log_normal_")


def geometric_(self, p, *, generator=None) -> TensorBase:
    """Fill with the number of Bernoulli(`p`) trials up to the first success (1, 2, ...),
    in place."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    u = self._plain(rand_node(self.shape, generator, "float64", self.device))
    # u in [0, 1): 1 - u in (0, 1], so the log is finite and the count at least 1
    draws = ((1 - u).log() / math.log1p(-p)).ceil().maximum(1.0)
    return self._inplace(draws.cast(self.dtype), "geometric_")


def bernoulli(self, p=None, *, generator=None) -> TensorBase:
    """1 with probability this tensor's elements (or `p`), else 0, in this dtype: a new
    tensor (`bernoulli_` fills in place)."""
    u = self._plain(rand_node(self.shape, generator, "float64", self.device))
    return (u < (self if p is None else p)).cast(self.dtype)


def random_(self, a=None, b=None, *, generator=None) -> TensorBase:
    """Fill with integers drawn uniformly from [a, b) (`random_(b)`: [0, b); `random_()`:
    [0, 2^mantissa] for floats, [0, max] for integers), in place."""
    if a is None:
        a, b = 0, _random_bound(self)
    elif b is None:
        a, b = 0, a
    drawn = randint(self, a, b, self.shape, generator, "int64", self.device)
    return self._inplace(drawn.cast(self.dtype), "random_")


def _random_bound(t: TensorBase) -> int:
    if t.dtype.is_bool:
        return 2
    if t.dtype.is_float:
        return 2 ** {2: 11, 4: 24, 8: 53}[t.dtype.itemsize] + 1
    return 2 ** (8 * t.dtype.itemsize - 1)


# ---------------------------------------------------------------- resizing


def resize_(self, *sizes, memory_format=None) -> TensorBase:
    """Give this tensor the shape `sizes` (ints, or one tuple or list of them), in place:
    its first elements in row-major order are kept (all of them, in the new shape, when
    it grows), as torch's. torch leaves the elements a growing tensor gains
    uninitialized; fusegrad fills them with zeros. A tensor that requires grad is
    refused, as torch refuses it (under no_grad too).

    The kept elements are the tensor's own in row-major order, where torch takes those
    of its storage (they differ for a non-contiguous tensor, a transpose). A view that
    shrinks stays a view (writes to it land in its base, as torch's); one that grows
    becomes a tensor of its own (torch's keeps writing to the storage while that is
    large enough), and other views of this tensor keep their values.

    >>> import fusegrad as fg
    >>> fg.arange(6.0).reshape(2, 3).resize_(4).tolist()
    [0.0, 1.0, 2.0, 3.0]
    >>> fg.arange(3.0).resize_(2, 2).tolist()
    [[0.0, 1.0], [2.0, 0.0]]
    """
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    shape = tuple(int(s) for s in sizes)
    return _resize(self, shape, "resize_")


def resize_as_(self, other, *, memory_format=None) -> TensorBase:
    """`resize_(other.shape)`: this tensor takes `other`'s shape, in place (see
    `resize_`: new elements are zeros here, uninitialized in torch)."""
    return _resize(self, tuple(other.shape), "resize_as_")


def _resize(self, shape: tuple[int, ...], op: str) -> TensorBase:
    if self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    if any(s < 0 for s in shape):
        fail(
            ArgumentError,
            op,
            f"negative size in {list(shape)} (torch: numel: integer multiplication overflow)",
        )
    n, old_shape = math.prod(shape), tuple(self.shape)
    if shape == old_shape:
        return self
    out = self.reshape(-1).pad((0, n - self.numel())).reshape(shape)
    link = getattr(self, "_base", None)
    if link is not None and link[1] is not None and n <= self.numel():
        # a view that shrinks stays one: its first elements are where they were in the base
        base, redo = link
        self._base = (base, lambda t: redo(t).reshape(-1)[:n].reshape(shape))
    elif link is not None:
        self._base = None  # grown, or detached: a tensor of its own from now on
    self._version += 1
    self.node, self._strides = out.node, out._strides
    return self


RANDOM = {
    "normal_": normal_,
    "uniform_": uniform_,
    "bernoulli_": bernoulli_,
    "exponential_": exponential_,
    "random_": random_,
    "cauchy_": cauchy_,
    "log_normal_": log_normal_,
    "geometric_": geometric_,
    "bernoulli": bernoulli,
    "resize_": resize_,
    "resize_as_": resize_as_,
}


class InplaceMixin:
    """The methods the tables need (`BASE`) and the random fills (`RANDOM`): the last of
    Tensor's bases, so a method of Tensor's own or of another mixin comes first."""

    __slots__ = ()
    locals().update(BASE)
    locals().update(RANDOM)


def variants(namespace: dict, bases: tuple) -> dict:
    """The in-place variants (name_) of the ops of the tables that a class with this
    `namespace` and `bases` has and does not write by hand: TensorBase's class body adds them
    to itself."""

    def has(name: str) -> bool:
        return name in namespace or any(hasattr(b, name) for b in bases)

    return {
        name + "_": make(name)
        for table, make in ((SAME_SHAPE, _same_shape), (VIEWS, _view))
        for name in table
        if has(name) and not has(name + "_")
    }
