"""Creating tensors: from data, constants, ranges and random numbers.

Constants (`zeros`, `ones`, `full`) are lazy nodes that take no memory until a
kernel writes them; `rand`/`randn` are the counter-based `RAND` primitive, so
random tensors too are computed inside the kernels that read them.

>>> import fusegrad as fg
>>> fg.manual_seed(0)
>>> fg.rand(2, 3).shape
(2, 3)
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from . import core
from .devices import default_name, resolve
from .errors import ArgumentError, DTypeError, ShapeError, checked_dtype, fail
from .ir import node as N
from .ir import rand as rand_spec
from .ir.dtypes import (
    NUMPY_DTYPES,
    DType,
    bool_,
    default_float,
    float32,
    int32,
    int64,
    promote,
    scalar_dtype,
    to_dtype,  # noqa: F401  (nn reads it from here)
    unsupported,
)
from .ir.dtypes import (
    from_numpy as dtype_of_numpy,
)
from .jithooks import key_buffer
from .runtime import forksafe
from .runtime.backend import HOST, get_backend
from .runtime.buffer import Buffer, HostTable
from .scalars import NumberOverflowError, check_data, checked_fill

if TYPE_CHECKING:
    from .tensor import Tensor

_seed = {"seed": 0, "counter": 0}


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand, randn and dropout (as torch.manual_seed)."""
    _seed["seed"] = int(seed)
    _seed["counter"] = 0


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


def _next_seed(generator: Generator | None = None) -> int:
    state = _seed if generator is None else generator._state
    state["counter"] += 1
    return (state["seed"] * 1_000_003 + state["counter"] * 7_919) & 0xFFFFFFFFFFFF


def host_rng(generator=None) -> np.random.Generator:
    """A numpy Generator for draws made on the host: `generator` itself if it is one,
    else seeded from the fusegrad Generator given or the `manual_seed` stream."""
    if isinstance(generator, np.random.Generator):
        return generator
    return np.random.default_rng(_next_seed(generator))


def _draw_key(generator: Generator | None = None) -> int:
    return rand_spec.key_as_int32(rand_spec.seed_key(_next_seed(generator)))


def _key(device: str = HOST, generator: Generator | None = None) -> N.Node:
    """A fresh random stream's key, as a 0-d int32 buffer (data, so kernels stay reusable).

    While `fusegrad.jit` records a call the buffer is one the jit keeps, so that a
    replay can draw the call's keys into it again.
    """
    buf = key_buffer(lambda: _draw_key(generator), device)
    if buf is None:
        buf = _buffer(np.array([_draw_key(generator)], dtype=np.int32), int32, device)
    return N.buffer(buf, (), int32)


def _buffer(array: np.ndarray, dt: DType, device: str):
    """A buffer holding a copy of `array` on `device`."""
    return get_backend(device).from_host(array, dt, device)


def _shape(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
        # as torch: zeros(1.5) is a TypeError, not a silent zeros(1)
        fail(DTypeError, "shape", f"sizes must be integers, got {tuple(shape)}")
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        fail(ShapeError, "shape", f"sizes must be non-negative, got {shape}")
    return shape


def _finish(node: N.Node, requires_grad: bool) -> Tensor:
    if requires_grad and not node.dtype.is_float:
        fail(
            DTypeError,
            "requires_grad",
            f"only float tensors can require grad, got {node.dtype.name}",
        )
    t = core.Tensor(node, requires_grad=False, leaf=True)
    return t.requires_grad_() if requires_grad else t


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
    return _finish(N.buffer(Buffer(flat.size, dt, array=flat), array.shape, dt), False)


def from_numpy(array: np.ndarray, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor holding a copy of a numpy array (its dtype must be one fusegrad has), on
    `device` (the default device if None: fusegrad copies, so unlike torch.from_numpy the
    tensor need not live on the CPU)."""
    try:
        dt = dtype_of_numpy(array.dtype)
    except TypeError as e:
        fail(DTypeError, "from_numpy", str(e))
    buf = _buffer(array, dt, resolve(device, "from_numpy"))
    return _finish(N.buffer(buf, array.shape, dt), requires_grad)


# numpy dtypes `tensor` keeps as they are (float64 arrays stay float64, uint8 stay uint8, as in
# torch); uint16, uint32 and uint64 become int64 (torch keeps them, as types with few ops;
# fusegrad has none), refused where a value does not fit
_KEPT = frozenset(
    np.dtype(t)
    for t in (np.float32, np.float64, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_)
) | {np.dtype(d.np) for d in NUMPY_DTYPES if d.is_half}


def _as_int64(arr: np.ndarray) -> np.ndarray:
    """A uint16/32/64 array as int64, values kept; a uint64 value above int64's range raises."""
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > INT64_RANGE[1]:
        fail(
            NumberOverflowError,
            "tensor",
            f"a uint64 array holds {int(arr.max())}, beyond int64 (fusegrad has no uint64: "
            "its uint16/32/64 data becomes int64); convert it first, e.g. "
            ".astype(np.float64), or pass dtype= to cast with wrap-around",
        )
    return arr.astype(np.int64)


def _element_types(data, found: set) -> set:
    """The Python types of the numbers in nested lists/tuples `data` (one pass, per level)."""
    if not isinstance(data, (list, tuple)):
        found.add(type(data))
        return found
    kinds = set(map(type, data))
    found.update(kinds - {list, tuple})
    if list in kinds or tuple in kinds:
        for v in data:
            if isinstance(v, (list, tuple)):
                _element_types(v, found)
    return found


def _inferred_with_numpy_scalars(data) -> DType | None:
    """The dtype torch infers for data holding numpy scalars, None if it holds none.

    A numpy scalar counts with its own dtype, as a numpy array would (`np.float64(1.5)`
    is float64, `[np.int32(3)]` int32), a Python number with its default (float32, int64,
    bool), and the elements promote as tensors do: `[np.float64(1), 2.0]` is float64.
    """
    types = _element_types(data, set())
    if not any(issubclass(t, np.generic) for t in types):
        return None
    out = None
    for t in types:
        if issubclass(t, np.generic):
            try:
                dt = dtype_of_numpy(np.dtype(t))
            except TypeError:
                return None  # float16 and the like: refused by the array path
        elif t in (bool, int, float):
            dt = scalar_dtype(t())
        else:
            continue
        out = dt if out is None else promote(out, dt)
    return out


def tensor(data, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor from nested lists, numbers, a numpy array or another tensor.

    Python floats become float32, ints int64, bools bool, as in PyTorch; a numpy array
    or numpy scalar keeps its dtype (`np.uint8` data gives a `fusegrad.uint8` tensor,
    `np.float64(1.5)` a float64 one). Data of a dtype fusegrad has not (float16, complex,
    datetime, object) is refused, never converted silently; ask for the conversion with
    `dtype=` or numpy's `astype`.
    """
    if dtype is None and type(data) is np.ndarray and data.dtype in _KEPT:
        return from_numpy(data, requires_grad, device)  # the usual batch: no conversion
    device = resolve(device, "tensor")
    if isinstance(data, core.Tensor):
        data = data._host()
    if isinstance(data, np.ndarray):
        arr = data
    else:
        try:
            arr = np.array(data)
        except ValueError as e:
            fail(ShapeError, "tensor", f"data is ragged or not numeric: {e}")
        # Python numbers are checked against the dtype they go into, as torch does: never
        # wrapped (an array given with dtype= is cast, with wrap-around, as in torch)
        arr = check_data(arr, None if dtype is None else checked_dtype(dtype, "tensor"), data)
        kept = None if dtype is not None else _inferred_with_numpy_scalars(data)
        if kept is not None and arr.dtype.kind in "biuf":
            arr = arr.astype(kept.np)
        elif arr.dtype == np.float64 and dtype is None:
            arr = arr.astype(default_float().np)
        elif arr.dtype.kind in "iu" and dtype is None:
            arr = arr.astype(np.int64)
    if arr.dtype.kind in "USVMmc" and arr.dtype not in _KEPT:
        fail(DTypeError, "tensor", f"data of {type(data).__name__}: {unsupported(arr.dtype.name)}")
    if arr.dtype.kind == "O" and (dtype is None or not checked_dtype(dtype, "tensor").is_float):
        fail(DTypeError, "tensor", f"data of {type(data).__name__}: {unsupported(arr.dtype.name)}")
    if dtype is not None:
        with np.errstate(over="ignore"):  # 1e300 into float32 is inf, silently as in torch
            arr = arr.astype(checked_dtype(dtype, "tensor").np)
    elif arr.dtype.kind in "iu" and arr.dtype not in _KEPT:
        arr = _as_int64(arr)
    return from_numpy(arr, requires_grad, device)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """`data` as a tensor, as torch.as_tensor: a tensor already of this dtype and device is
    returned itself (no copy: updates of one are updates of the other); one of another
    dtype or device is converted (`Tensor.to`); anything else is read as by `tensor()`.
    fusegrad keeps its own copy of a numpy array's values (as `from_numpy` does), so later
    writes to the array do not reach the tensor."""
    if isinstance(data, core.Tensor):
        return data.to(dtype=dtype, device=device)
    return tensor(data, dtype=dtype, device=device)


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """`fill_value` everywhere in a tensor of `size`, with this tensor's dtype and device
    unless told (Tensor.new_full; new_zeros, new_ones and new_empty likewise).

    >>> import fusegrad as fg
    >>> fg.zeros(2, dtype=fg.int32).new_full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    """
    return full(_shape(size), fill_value, dtype or self.dtype, requires_grad, _like(self, device))


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return new_full(self, size, 0, dtype=dtype, device=device, requires_grad=requires_grad)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return new_full(self, size, 1, dtype=dtype, device=device, requires_grad=requires_grad)


def new_empty(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return new_zeros(self, *size, dtype=dtype, device=device, requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A new tensor of `data`, with this tensor's dtype and device unless told (as torch:
    `int_tensor.new_tensor([1.5])` is int)."""
    data = data.detach() if isinstance(data, core.Tensor) else data
    return tensor(data, dtype or self.dtype, requires_grad, _like(self, device))


NEW_METHODS = {
    "new_full": new_full,
    "new_zeros": new_zeros,
    "new_ones": new_ones,
    "new_empty": new_empty,
    "new_tensor": new_tensor,
}


class CreationMixin:
    """Tensor's t.new_zeros(...), t.new_tensor(...), ... (`NEW_METHODS`)."""

    __slots__ = ()
    locals().update(NEW_METHODS)


def full(size, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor of `size` filled with `fill_value` (a lazy constant: no memory until used)."""
    device = resolve(device, "full")
    if not isinstance(fill_value, (int, float, bool, np.number, np.bool_)):
        fail(DTypeError, "full", f"fill_value must be a number, got {type(fill_value).__name__}")
    shape = _shape(size if isinstance(size, (tuple, list)) else (size,))
    if dtype is None:
        dtype = (
            bool_
            if isinstance(fill_value, bool)
            else int64
            if isinstance(fill_value, int)
            else default_float()
        )
    dtype = checked_dtype(dtype, "full")
    node = N.const(checked_fill(fill_value, dtype, "full"), shape, dtype, device)
    return _finish(node, requires_grad)


def zeros(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(_shape(size), 0.0, dtype or default_float(), requires_grad, device)


def ones(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(_shape(size), 1.0, dtype or default_float(), requires_grad, device)


def empty(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return zeros(*size, dtype=dtype, requires_grad=requires_grad, device=device)


def _like(t: Tensor, device) -> str:
    """The device a *_like op makes its tensor on: t's unless told."""
    return t.node.device or default_name() if device is None else device


def zeros_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(t.shape, 0, dtype or t.dtype, requires_grad, _like(t, device))


def ones_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(t.shape, 1, dtype or t.dtype, requires_grad, _like(t, device))


def full_like(
    t: Tensor, fill_value, dtype=None, requires_grad: bool = False, device=None
) -> Tensor:
    return full(t.shape, fill_value, dtype or t.dtype, requires_grad, _like(t, device))


def empty_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return zeros_like(t, dtype, requires_grad, device)


def arange(start, end=None, step=1, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Evenly spaced values in [start, end), as torch.arange (int64 for ints, else float32)."""
    device = resolve(device, "arange")
    if end is None:
        start, end = 0, start
    if step == 0:
        fail(ShapeError, "arange", "step must be nonzero")
    _check_range(start, end, step)
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
    return _shared(key, lambda: np.arange(start, end, step), dt, device)


INT64_RANGE = (-(1 << 63), (1 << 63) - 1)


def _check_range(start, end, step) -> None:
    """torch.arange's checks: int arguments within int64 (numpy would wrap 2**63 into an
    empty range), finite bounds, and a step that goes from start towards end."""
    for name, v in (("start", start), ("end", end), ("step", step)):
        if isinstance(v, int) and not INT64_RANGE[0] <= v <= INT64_RANGE[1]:
            fail(ArgumentError, "arange", f"{name} = {v} does not fit in int64")
        if isinstance(v, float) and math.isnan(v):
            fail(ArgumentError, "arange", f"{name} is NaN")
    if not (math.isfinite(start) and math.isfinite(end)):
        fail(ArgumentError, "arange", f"unsupported range: {start} -> {end}")
    if (step > 0 and end < start) or (step < 0 and end > start):
        fail(
            ArgumentError,
            "arange",
            f"the bounds {start} -> {end} are inconsistent with the step's sign (step = {step})",
        )


def index_arange(start, end=None, step=1, dtype=None) -> Tensor:
    """`arange` as a table fusegrad builds for itself (to compare indices against): host
    data of no device, usable by a graph on any device (see `runtime.buffer.HostTable`).

    A table of more than `_SHARED_LIMIT` elements is no data at all: an `INDEX` node (times
    `step`, plus `start`) that each kernel reading it computes. Stored, a whole tensor's
    positions (argmax's, a write's) cost 8 bytes an element and a read of them; small tables
    stay buffers, so a step's changing `start` (a recurrent step's time) changes data, not
    the graph."""
    if end is None:
        start, end = 0, start
    dt = checked_dtype(dtype, "arange") if dtype is not None else int64
    ints = all(isinstance(v, int) for v in (start, end, step)) and dt.is_int
    size = len(range(start, end, step)) if ints else 0
    if size > _SHARED_LIMIT:
        node = N.index((size,), dt)
        if step != 1:
            node = N.mul(node, N.const(step, node.shape, dt))
        if start != 0:
            node = N.add(node, N.const(start, node.shape, dt))
        return core.Tensor(node)
    key = ("arange", start, end, step, dt, None)
    return _shared(key, lambda: np.arange(start, end, step), dt, None)


def host_table(array: np.ndarray) -> Tensor:
    """A tensor over a copy of host data fusegrad built for itself (index positions read
    on the host): of no device, usable by a graph on any device."""
    dt = dtype_of_numpy(array.dtype)
    return core.Tensor(N.buffer(HostTable.from_numpy(array, dt), array.shape, dt))


_SHARED_LIMIT = 1 << 16  # elements: tables this small are shared, one buffer per distinct call
_SHARED_RECENT = 64  # tables kept after their last tensor goes: the most recently asked for
# key -> the table's buffer, while a tensor holds it; `_recent_shared` holds the last
# _SHARED_RECENT asked for, so a program asking for 20,000 distinct tables keeps 64
_shared_buffers: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_recent_shared: OrderedDict[tuple, Buffer] = OrderedDict()
_shared_lock = forksafe.Lock()


def _shared(key: tuple, make, dt: DType, device: str | None = HOST) -> Tensor:
    """A new tensor over the one read-only buffer that holds `make()` for this key.

    Index tables (`arange` for one-hot targets, masks) are rebuilt by every step
    that asks for them; sharing the buffer saves the copy, and keeps a step's
    inputs the same buffers from call to call (what `fusegrad.jit` needs) even when
    the step drops its tables: the last `_SHARED_RECENT` stay. Others live as long as
    a tensor holds them.
    """
    with _shared_lock:
        buf = _shared_buffers.get(key)
        if buf is not None:
            _recent_shared[key] = buf
            _recent_shared.move_to_end(key)
    if buf is None:
        array = np.asarray(make()).astype(dt.np)
        if device is None:  # a table of no device
            buf = HostTable.from_numpy(array, dt)
        else:
            buf = _buffer(array, dt, device)
        if array.size > _SHARED_LIMIT:
            return core.Tensor(N.buffer(buf, array.shape, dt))
        if device is None or get_backend(device).is_host:  # writing to t.numpy() must fail
            buf.array.flags.writeable = False
        with _shared_lock:  # another thread may have made it meanwhile: one buffer wins
            buf = _shared_buffers.setdefault(key, buf)
            _recent_shared[key] = buf
            while len(_recent_shared) > _SHARED_RECENT:
                _recent_shared.popitem(last=False)
    shape = (buf.size,)
    return core.Tensor(N.buffer(buf, shape, dt))


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


def rand(*size, generator=None, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Uniform [0, 1) numbers from the counter-based generator (see manual_seed)."""
    device = resolve(device, "rand")
    dt = checked_dtype(dtype or default_float(), "rand")
    if not dt.is_float:
        fail(DTypeError, "rand", f"needs a float dtype, got {dt.name}")
    return _finish(N.rand(_key(device, generator), _shape(size), dt), requires_grad)


def randn(*size, generator=None, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Standard normal numbers (Box-Muller over two uniform streams)."""
    device = resolve(device, "randn")
    dt: DType = checked_dtype(dtype or default_float(), "randn")
    if not dt.is_float:
        fail(DTypeError, "randn", f"needs a float dtype, got {dt.name}")
    shape = _shape(size)
    wide = float32 if dt.is_half else dt  # 16-bit uniforms are too coarse for the tails
    u1 = core.Tensor(N.rand(_key(device, generator), shape, wide))
    u2 = core.Tensor(N.rand(_key(device, generator), shape, wide))
    r = ((1 - u1).log() * -2).sqrt()  # 1 - u1 is in (0, 1], so the log is finite
    z = r * (u2 * (2 * math.pi)).cos()
    return _finish(z.cast(dt).node, requires_grad)


def rand_like(t: Tensor, dtype=None, device=None, *, generator=None) -> Tensor:
    return rand(t.shape, generator=generator, dtype=dtype or t.dtype, device=_like(t, device))


def randn_like(t: Tensor, dtype=None, device=None, *, generator=None) -> Tensor:
    return randn(t.shape, generator=generator, dtype=dtype or t.dtype, device=_like(t, device))


def randint_like(
    t: Tensor, low: int = 0, high: int | None = None, *, dtype=None, device=None, generator=None
):
    """Integers uniform in [low, high) in t's shape and dtype (`randint_like(t, high)`
    draws from [0, high)), as torch.randint_like."""
    if high is None:
        low, high = 0, low
    return randint(
        low, high, t.shape, generator=generator, dtype=dtype or t.dtype, device=_like(t, device)
    )


def seed() -> int:
    """Seed the random stream from the operating system's entropy and return the seed
    (as torch.seed)."""
    import secrets

    value = secrets.randbits(63)
    manual_seed(value)
    return value


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
    if isinstance(mean, core.Tensor) or isinstance(std, core.Tensor):
        like = mean if isinstance(mean, core.Tensor) else std
        shape = like.shape if size is None else tuple(size)
        if isinstance(mean, core.Tensor) and isinstance(std, core.Tensor):
            shape = core.broadcast_shapes(mean.shape, std.shape, "normal")
        return randn(*shape, generator=generator, dtype=like.dtype, device=like.device) * std + mean
    if size is None:
        fail(ArgumentError, "normal", "with a number for mean and std, give size=")
    return randn(*_shape(tuple(size)), generator=generator, dtype=dtype, device=device) * std + mean


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator=None):
    """Indices drawn with the probabilities in each row of `input` (weights, need not sum
    to 1), with or without replacement (int64; drawn on the host from the manual_seed
    stream)."""
    w = np.asarray(input.detach().numpy(), dtype=np.float64)
    rows = w.reshape(1, -1) if w.ndim == 1 else w
    if w.ndim not in (1, 2) or (rows < 0).any() or not np.isfinite(rows).all():
        fail(ArgumentError, "multinomial", "expects 1-d or 2-d finite non-negative weights")
    if not replacement and num_samples > rows.shape[1]:
        fail(
            ArgumentError,
            "multinomial",
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement",
        )
    rng = host_rng(generator)
    out = []
    for r in rows:
        if r.sum() <= 0:
            fail(
                ArgumentError,
                "multinomial",
                "invalid multinomial distribution (sum of probabilities <= 0)",
            )
        if not replacement and np.count_nonzero(r) < num_samples:
            fail(
                ArgumentError,
                "multinomial",
                "invalid multinomial distribution (with replacement=False, not enough "
                "non-negative category to sample)",
            )
        out.append(rng.choice(r.size, num_samples, replace=replacement, p=r / r.sum()))
    out = np.asarray(out, dtype=np.int64)
    return tensor(out[0] if w.ndim == 1 else out, device=input.device)


def initial_seed() -> int:
    """The seed `manual_seed` set last (0 until then)."""
    return _seed["seed"]


def get_rng_state() -> Tensor:
    """The random stream's position (seed, draws so far), for `set_rng_state`."""
    return tensor([_seed["seed"], _seed["counter"]], dtype=int64)


def set_rng_state(state) -> None:
    """Go back to a position `get_rng_state` returned: the same draws follow again."""
    _seed["seed"], _seed["counter"] = (int(v) for v in state.tolist())


def randint(
    low: int, high: int | None = None, size=(), *, generator=None, dtype=None, device=None
) -> Tensor:
    if high is None:
        low, high = 0, low
    elif isinstance(high, (tuple, list)):  # randint(high, size), as torch allows
        low, high, size = 0, low, high
    u = rand(*_shape(tuple(size)), generator=generator, dtype="float64", device=device)
    # floor, not the cast's truncation: a negative low must come up as often as the others,
    # and a float dtype holds whole numbers, as torch's
    return (u * (high - low) + low).floor().cast(checked_dtype(dtype or int64, "randint"))
