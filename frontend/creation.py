"""Creating tensors: from data, constants, ranges and random numbers.

Constants (`zeros`, `ones`, `full`) are lazy nodes that take no memory until a
kernel writes them; `rand`/`randn` are the counter-based `RAND` primitive, so
random tensors too are computed inside the kernels that read them.

>>> import fusegrad as fg
>>> fg.manual_seed(0)
>>> fg.rand(2, 3).shape
(2, 3)

This module is above `tensor.py` and makes `Tensor`s; the nodes they are made of, the
random stream and `Tensor.new_*` are `creation_nodes.py`'s, below it, where the op
families make tensors of the class of one they hold.
"""

from __future__ import annotations

import math

import numpy as np

from . import creation_nodes as _nodes
from .creation_nodes import (  # noqa: F401  (fusegrad.creation's names, as before)
    _SHARED_LIMIT,
    _SHARED_RECENT,
    _like,
    _next_seed,
    _recent_shared,
    _seed,
    _shape,
    _shared_buffers,
    data_node,
    finish,
    full_node,
    host_rng,
    initial_seed,
    manual_seed,
    numpy_node,
    rand_node,
    shared_node,
)
from .devices import resolve
from .errors import ArgumentError, DTypeError, ShapeError, checked_dtype, fail, warn_user
from .ir import node as N
from .ir.dtypes import (  # noqa: F401  (nn reads default_float and to_dtype from here)
    DType,
    default_float,
    int64,
    to_dtype,
)
from .ir.dtypes import (
    from_numpy as dtype_of_numpy,
)
from .runtime.backend import HOST
from .runtime.buffer import Buffer
from .tensor import Tensor
from .tensor_base import broadcast_shapes
from .torch_settings import check_memory_format


class Generator:
    """A random stream of its own, as torch.Generator: pass it as `generator=` to rand,
    randn, randint, randperm, normal, the random in-place fills, DataLoader and
    random_split; its draws leave the global `manual_seed` stream where it was.

    >>> import fusegrad as fg
    >>> g = fg.Generator().manual_seed(1)
    >>> a = fg.rand(3, generator=g)
    >>> g.manual_seed(1) is g, fg.rand(3, generator=g).tolist() == a.tolist()
    (True, True)
    """

    def __init__(self, device=None):
        self.device = device
        self._state = {"seed": 0, "counter": 0}

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from `seed`; returns the generator (torch's chaining habit)."""
        self._state = {"seed": int(seed), "counter": 0}
        return self

    def initial_seed(self) -> int:
        return self._state["seed"]

    def get_state(self) -> Tensor:
        return tensor([self._state["seed"], self._state["counter"]], dtype=int64)

    def set_state(self, state) -> Generator:
        self._state["seed"], self._state["counter"] = (int(v) for v in state.tolist())
        return self


def over_host_array(array: np.ndarray) -> Tensor:
    """A tensor over `array` itself, not a copy, where the default device is the host
    (elsewhere a copy there, as `from_numpy`). For an array nothing else holds or writes,
    in memory `runtime.buffer.aligned_bytes` made (cache-line aligned, as the kernels'
    buffers are): `fg.load`'s, which so holds one copy of a checkpoint's payload."""
    device = resolve(None, "from_numpy")
    if device != HOST or not array.flags.c_contiguous:
        return from_numpy(array, device=device)
    try:
        dt = dtype_of_numpy(array.dtype)
    except TypeError as e:
        fail(DTypeError, "from_numpy", str(e))
    flat = array.reshape(-1)
    return finish(Tensor, N.buffer(Buffer(flat.size, dt, array=flat), array.shape, dt), False)


def from_numpy(array: np.ndarray, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor holding a copy of a numpy array (its dtype must be one fusegrad has), on
    `device` (the default device if None: fusegrad copies, so unlike torch.from_numpy the
    tensor need not live on the CPU)."""
    return finish(Tensor, numpy_node(array, device), requires_grad)


def tensor(data, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor from nested lists, numbers, a numpy array or another tensor.

    Python floats become float32, ints int64, bools bool, as in PyTorch; a numpy array
    or numpy scalar keeps its dtype (`np.uint8` data gives a `fusegrad.uint8` tensor,
    `np.float64(1.5)` a float64 one). Data of a dtype fusegrad has not (float16, complex,
    datetime, object) is refused, never converted silently; ask for the conversion with
    `dtype=` or numpy's `astype`.
    """
    if isinstance(data, Tensor):
        data = data._host()
    return finish(Tensor, data_node(data, dtype, device), requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """`data` as a tensor, as torch.as_tensor: a tensor already of this dtype and device is
    returned itself (no copy: updates of one are updates of the other); one of another
    dtype or device is converted (`Tensor.to`); anything else is read as by `tensor()`.
    fusegrad keeps its own copy of a numpy array's values (as `from_numpy` does), so later
    writes to the array do not reach the tensor."""
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device)
    return tensor(data, dtype=dtype, device=device)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=None) -> Tensor:
    """`obj` as a tensor, as torch.asarray: a tensor is returned itself where neither
    `dtype` nor `device` changes it and `copy` is not True, else converted (a
    differentiable copy, as torch's); other data is read as by `tensor()`.

    `copy=False` refuses a conversion, as torch's does. fusegrad keeps its own copy of
    numpy data (as `from_numpy`), so a numpy array cannot be shared: `copy=False` refuses
    it too, and without it later writes to the array do not reach the tensor (torch's
    would). Left unset, `requires_grad` is the tensor's own, with torch's warning.

    >>> import fusegrad as fg
    >>> x = fg.ones(2)
    >>> fg.asarray(x) is x, fg.asarray(x, dtype=fg.float64).dtype, fg.asarray([1, 2]).dtype
    (True, fusegrad.float64, fusegrad.int64)
    """
    if isinstance(obj, Tensor):
        if requires_grad is None and obj.requires_grad:
            warn_user(
                "torch.asarray: unspecified requires_grad now defaults to obj.requires_grad "
                "instead of False. Pass requires_grad=False explicitly to get the old "
                "behavior and silence this warning."
            )
        out = obj.to(dtype=dtype, device=device)
        if copy is False and out is not obj:
            raise ValueError(
                f"can't alias tensor with dtype '{obj.dtype.name}' on {obj.device} into dtype "
                f"'{out.dtype.name}' on {out.device} (asarray with copy=False)"
            )
        if copy and out is obj:
            out = obj.clone()
        if requires_grad is False and out.requires_grad:
            out = out.detach()
        elif requires_grad and not out.requires_grad:
            out.requires_grad_(True)
        return out
    if copy is False:
        what = "a numpy array" if hasattr(obj, "__array_interface__") else "arbitrary sequence"
        raise ValueError(
            f"can't alias {what} into a tensor: fusegrad keeps its own copy of the data "
            "(asarray with copy=False)"
        )
    return tensor(obj, dtype=dtype, device=device, requires_grad=bool(requires_grad))


def scalar_tensor(s, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A 0-d tensor holding the number `s`, in the default float dtype unless `dtype` is
    given (a bool or int too), as torch.scalar_tensor.

    >>> import fusegrad as fg
    >>> fg.scalar_tensor(3), fg.scalar_tensor(2.5, dtype=fg.int64)
    (tensor(3.), tensor(2))
    """
    if isinstance(s, Tensor) and s.ndim == 0:
        s = s.item()
    if not isinstance(s, (bool, int, float)) and not isinstance(s, np.number | np.bool_):
        raise TypeError(
            f"scalar_tensor(): argument 's' (position 1) must be Number, not {type(s).__name__}"
        )
    return full(
        (), s.item() if hasattr(s, "item") else s, dtype or default_float(), requires_grad, device
    )


def full(size, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor of `size` filled with `fill_value` (a lazy constant: no memory until used)."""
    return finish(Tensor, full_node(size, fill_value, dtype, device), requires_grad)


def _sizes(sizes: tuple, size, op: str) -> tuple:
    """The sizes given as arguments (`zeros(2, 3)`, `zeros((2, 3))`), or torch's `size=`
    keyword (`zeros(size=(2, 3))`), not both."""
    if size is None:
        return sizes
    if sizes:
        raise TypeError(f"{op}() got multiple values for argument 'size'")
    return (size,)


def zeros(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    shape = _shape(_sizes(sizes, size, "zeros"))
    return full(shape, 0.0, dtype or default_float(), requires_grad, device)


def ones(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    shape = _shape(_sizes(sizes, size, "ones"))
    return full(shape, 1.0, dtype or default_float(), requires_grad, device)


def empty(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """torch's uninitialized tensor: here zeros (a lazy constant)."""
    sizes = _sizes(sizes, size, "empty")
    return zeros(*sizes, dtype=dtype, requires_grad=requires_grad, device=device)


def empty_strided(
    size, stride, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False
) -> Tensor:
    """torch.empty_strided: an uninitialized tensor of `size` (here zeros, as `empty`).
    fusegrad lays data out its own way, so `stride` is checked (one per dim, none
    negative, as torch) but not kept: `.stride()` reports the row-major strides."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        fail(
            ShapeError,
            "empty_strided",
            f"dimensionality of sizes ({len(size)}) must match dimensionality of strides "
            f"({len(stride)})",
        )
    if any(s < 0 for s in stride):
        fail(ArgumentError, "empty_strided", f"negative stride in {list(stride)}")
    return empty(size, dtype=dtype, requires_grad=requires_grad, device=device)


def frombuffer(
    buffer, *, dtype, count: int = -1, offset: int = 0, requires_grad: bool = False
) -> Tensor:
    """A 1-d tensor of `count` elements of `dtype` (-1: all) read from an object of
    Python's buffer protocol (bytes, bytearray, array.array, memoryview) from byte
    `offset` on, with torch's ValueErrors for a bad offset or count. fusegrad copies the
    bytes (torch shares the buffer's memory: later writes to it are not seen here)."""
    try:
        data = memoryview(buffer).cast("B")
    except TypeError:
        raise ValueError("object does not implement Python buffer protocol.") from None
    dt = checked_dtype(to_dtype(dtype), "frombuffer")
    length, size = len(data), dt.itemsize
    if length <= 0 or count == 0:
        raise ValueError(f"both buffer length ({length}) and count ({count}) must not be 0")
    if not 0 <= offset < length:
        raise ValueError(
            f"offset ({offset} bytes) must be non-negative and no greater than buffer length "
            f"({length} bytes) minus 1"
        )
    if count < 0:
        if (length - offset) % size:
            raise ValueError(
                f"buffer length ({length - offset} bytes) after offset ({offset} bytes) must "
                f"be a multiple of element size ({size})"
            )
        count = (length - offset) // size
    if length - offset < count * size:
        raise ValueError(
            f"requested buffer length ({count} * {size} bytes) after offset ({offset} bytes) "
            f"must not be greater than actual buffer length ({length} bytes)"
        )
    array = np.frombuffer(data, dtype=dt.np, count=count, offset=offset).copy()
    return from_numpy(array, requires_grad)


# the *_like functions take torch's `memory_format=` (checked as torch checks it; no value
# depends on it: fusegrad's layout is its own, torch_settings.py)


def zeros_like(
    t: Tensor, dtype=None, requires_grad: bool = False, device=None, *, memory_format=None
) -> Tensor:
    check_memory_format(memory_format, t.ndim, "zeros_like")
    return full(t.shape, 0, dtype or t.dtype, requires_grad, _like(t, device))


def ones_like(
    t: Tensor, dtype=None, requires_grad: bool = False, device=None, *, memory_format=None
) -> Tensor:
    check_memory_format(memory_format, t.ndim, "ones_like")
    return full(t.shape, 1, dtype or t.dtype, requires_grad, _like(t, device))


def full_like(
    t: Tensor,
    fill_value,
    dtype=None,
    requires_grad: bool = False,
    device=None,
    *,
    memory_format=None,
) -> Tensor:
    check_memory_format(memory_format, t.ndim, "full_like")
    return full(t.shape, fill_value, dtype or t.dtype, requires_grad, _like(t, device))


def empty_like(
    t: Tensor, dtype=None, requires_grad: bool = False, device=None, *, memory_format=None
) -> Tensor:
    check_memory_format(memory_format, t.ndim, "empty_like")
    return zeros_like(t, dtype, requires_grad, device)


def arange(start, end=None, step=1, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Evenly spaced values in [start, end), as torch.arange (int64 for ints, else float32)."""
    device = resolve(device, "arange")
    if end is None:
        start, end = 0, start
    if step == 0:
        fail(ShapeError, "arange", "step must be nonzero")
    _nodes._check_range(start, end, step)
    ints = all(isinstance(v, int) for v in (start, end, step))
    dt = (
        checked_dtype(dtype, "arange")
        if dtype is not None
        else (int64 if ints else default_float())
    )
    if dt.is_bool:
        fail(DTypeError, "arange", "is not supported for bool (as in torch); use a number dtype")
    if math.isinf(step):  # one step leaves the range: empty, as torch's ceil(length / inf)
        start = end = 0
    if requires_grad:
        return from_numpy(np.arange(start, end, step).astype(dt.np), requires_grad, device)
    key = ("arange", start, end, step, dt, device)
    return Tensor(shared_node(key, lambda: np.arange(start, end, step), dt, device))


def index_arange(start, end=None, step=1, dtype=None) -> Tensor:
    """`arange` as a table fusegrad builds for itself, to compare indices against
    (`creation_nodes.index_arange`, of no device)."""
    return _nodes.index_arange(Tensor, start, end, step, dtype)


def host_table(array: np.ndarray) -> Tensor:
    """A tensor over a copy of host data fusegrad built for itself (index positions read
    on the host): of no device, usable by a graph on any device."""
    return _nodes.host_table(Tensor, array)


def linspace(start: float, end: float, steps: int, dtype=None, device=None) -> Tensor:
    """`steps` evenly spaced values from start to end inclusive (float32 unless dtype says)."""
    dt = _spaced_dtype(dtype, steps, "linspace")
    return from_numpy(np.linspace(start, end, steps).astype(dt.np), device=device)


def _spaced_dtype(dtype, steps, op: str) -> DType:
    """The dtype of linspace or logspace (float32 unless told; not bool), `steps` checked."""
    dt = checked_dtype(dtype or default_float(), op)
    if dt.is_bool:
        fail(DTypeError, op, "is not supported for bool (as in torch); use a number dtype")
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool):
        fail(DTypeError, op, f"steps must be an int, got {steps!r}")
    if steps < 0:
        fail(ArgumentError, op, f"number of steps must be non-negative, got {steps}")
    return dt


def logspace(
    start: float, end: float, steps: int, base: float = 10.0, dtype=None, device=None
) -> Tensor:
    """`base` to the powers `linspace(start, end, steps)`, as torch.logspace (float32 unless
    dtype says; for an integer dtype the powers are the integer linspace's, as torch's).

    >>> import fusegrad as fg
    >>> fg.logspace(0, 2, 3).tolist(), fg.logspace(0, 2, 5, base=2, dtype=fg.int64).tolist()
    ([1.0, 10.0, 100.0], [1, 1, 2, 2, 4])
    """
    dt = _spaced_dtype(dtype, steps, "logspace")
    powers = np.linspace(start, end, steps)
    if not dt.is_float:
        powers = np.trunc(powers)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        values = np.power(float(base), powers)
    return from_numpy(values.astype(dt.np), device=device)


def eye(
    n: int, m: int | None = None, dtype=None, requires_grad: bool = False, device=None
) -> Tensor:
    array = np.eye(n, m, dtype=checked_dtype(dtype or default_float(), "eye").np)
    return from_numpy(array, requires_grad, device)


def rand(
    *sizes, size=None, generator=None, dtype=None, requires_grad: bool = False, device=None
) -> Tensor:
    """Uniform [0, 1) numbers from the counter-based generator (see manual_seed)."""
    sizes = _sizes(sizes, size, "rand")
    return finish(Tensor, rand_node(sizes, generator, dtype, device), requires_grad)


def randn(
    *sizes, size=None, generator=None, dtype=None, requires_grad: bool = False, device=None
) -> Tensor:
    """Standard normal numbers (Box-Muller over two uniform streams)."""
    z = _nodes.randn(Tensor, _sizes(sizes, size, "randn"), generator, dtype, device)
    return finish(Tensor, z.node, requires_grad)


def rand_like(t: Tensor, dtype=None, device=None, *, generator=None, memory_format=None) -> Tensor:
    check_memory_format(memory_format, t.ndim, "rand_like")
    return rand(t.shape, generator=generator, dtype=dtype or t.dtype, device=_like(t, device))


def randn_like(t: Tensor, dtype=None, device=None, *, generator=None, memory_format=None) -> Tensor:
    check_memory_format(memory_format, t.ndim, "randn_like")
    return randn(t.shape, generator=generator, dtype=dtype or t.dtype, device=_like(t, device))


def randint_like(
    t: Tensor,
    low: int = 0,
    high: int | None = None,
    *,
    dtype=None,
    device=None,
    generator=None,
    memory_format=None,
):
    """Integers uniform in [low, high) in t's shape and dtype (`randint_like(t, high)`
    draws from [0, high)), as torch.randint_like."""
    check_memory_format(memory_format, t.ndim, "randint_like")
    if high is None:
        low, high = 0, low
    return randint(
        low, high, t.shape, generator=generator, dtype=dtype or t.dtype, device=_like(t, device)
    )


def randperm(n: int, *, generator=None, dtype=None, device=None) -> Tensor:
    """A random permutation of 0..n-1 (int64), from the `manual_seed` stream: the order
    that sorts n uniform draws."""
    if n < 0:
        fail(ArgumentError, "randperm", f"n must be non-negative, got {n}")
    dtype = checked_dtype(dtype or int64, "randperm")
    draws = rand(
        n, generator=generator, dtype="float64"
    ).numpy()  # sorted on the host: a sort kernel is O(n^2)
    return tensor(np.argsort(draws, kind="stable"), dtype=dtype, device=device)


def bernoulli(input: Tensor, p=None, *, generator=None) -> Tensor:
    """1 with probability `input` (or `p`), else 0, elementwise, in input's dtype."""
    u = rand(*input.shape, generator=generator, dtype="float64", device=input.device)
    return (u < (input if p is None else p)).cast(input.dtype)


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None) -> Tensor:
    """Samples of N(mean, std^2): `normal(0.0, 1.0, size=(3,))`, or elementwise for tensor
    means and/or stds (the shape is theirs), as torch.normal."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        like = mean if isinstance(mean, Tensor) else std
        shape = like.shape if size is None else tuple(size)
        if isinstance(mean, Tensor) and isinstance(std, Tensor):
            shape = broadcast_shapes(mean.shape, std.shape, "normal")
        return randn(*shape, generator=generator, dtype=like.dtype, device=like.device) * std + mean
    if size is None:
        fail(ArgumentError, "normal", "with a number for mean and std, give size=")
    return randn(*_shape(tuple(size)), generator=generator, dtype=dtype, device=device) * std + mean


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator=None):
    """Indices drawn with the probabilities in each row of `input` (weights, need not sum
    to 1), with or without replacement (int64; drawn on the host from the manual_seed
    stream): `input.multinomial(...)` (frontend/torch_methods.py)."""
    return input.multinomial(num_samples, replacement, generator=generator)


def seed() -> int:
    """Seed the random stream from the operating system's entropy and return the seed
    (as torch.seed)."""
    import secrets

    value = secrets.randbits(63)
    manual_seed(value)
    return value


def get_rng_state() -> Tensor:
    """The random stream's position (seed, draws so far), for `set_rng_state`."""
    return tensor([_seed["seed"], _seed["counter"]], dtype=int64)


def set_rng_state(state) -> None:
    """Go back to a position `get_rng_state` returned: the same draws follow again."""
    _seed["seed"], _seed["counter"] = (int(v) for v in state.tolist())


def randint(
    low: int, high: int | None = None, size=(), *, generator=None, dtype=None, device=None
) -> Tensor:
    """Integers uniform in [low, high) (`randint(high, size)` draws from [0, high)), as
    torch.randint: int64 unless `dtype` says."""
    return _nodes.randint(Tensor, low, high, size, generator, dtype, device)


def _indices(kind: str, row: int, col: int, offset: int, dtype, device):
    rows, cols = (np.tril_indices if kind == "tril" else np.triu_indices)(row, offset, col)
    return tensor(np.stack([rows, cols]).astype(np.int64), dtype=dtype or int64, device=device)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None):
    """The (2, N) row and column indices of a row x col matrix's lower triangle, row by
    row, as torch.tril_indices."""
    return _indices("tril", row, col, offset, dtype, device)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None):
    """The (2, N) row and column indices of a row x col matrix's upper triangle."""
    return _indices("triu", row, col, offset, dtype, device)
