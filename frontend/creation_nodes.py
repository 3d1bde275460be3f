"""Creation below the Tensor class: the nodes tensors are made of, and the random stream.

`creation.py` (above `tensor.py`) holds the public functions, `fg.zeros`, `fg.tensor`,
`fg.rand`, ...; what they build before it is a tensor lives here, so that the op
families under `tensor.py` make tensors too, through the class of a tensor they hold
(`like._plain`, see `tensor_base.TensorBase`):

    node = full_node((2, 3), 0.0, float32, "cpu")       # a lazy constant
    t = like._plain(node)                               # a Tensor, as fg.zeros(2, 3)
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict

import numpy as np

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
    unsupported,
)
from .ir.dtypes import (
    from_numpy as dtype_of_numpy,
)
from .ir.macro import building as building_expansion
from .jithooks import key_buffer
from .runtime import forksafe
from .runtime.backend import HOST, get_backend
from .runtime.buffer import Buffer, HostTable
from .scalars import NumberOverflowError, check_data, checked_fill

_seed = {"seed": 0, "counter": 0}


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand, randn and dropout (as torch.manual_seed)."""
    _seed["seed"] = int(seed)
    _seed["counter"] = 0


def _next_seed(generator=None) -> int:
    state = _seed if generator is None else generator._state
    state["counter"] += 1
    return (state["seed"] * 1_000_003 + state["counter"] * 7_919) & 0xFFFFFFFFFFFF


def host_rng(generator=None) -> np.random.Generator:
    """A numpy Generator for draws made on the host: `generator` itself if it is one,
    else seeded from the fusegrad Generator given or the `manual_seed` stream."""
    if isinstance(generator, np.random.Generator):
        return generator
    return np.random.default_rng(_next_seed(generator))


def _draw_key(generator=None) -> int:
    return rand_spec.key_as_int32(rand_spec.seed_key(_next_seed(generator)))


def _key(device: str = HOST, generator=None) -> N.Node:
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


def finish(cls: type, node: N.Node, requires_grad: bool):
    """A leaf tensor of class `cls` over `node`, that requires grad if asked (a float one)."""
    if requires_grad and not node.dtype.is_float:
        fail(
            DTypeError,
            "requires_grad",
            f"only float tensors can require grad, got {node.dtype.name}",
        )
    t = cls(node, requires_grad=False, leaf=True)
    return t.requires_grad_() if requires_grad else t


def numpy_node(array: np.ndarray, device=None, op: str = "from_numpy") -> N.Node:
    """A buffer node holding a copy of `array` on `device` (the default device if None)."""
    try:
        dt = dtype_of_numpy(array.dtype)
    except TypeError as e:
        fail(DTypeError, op, str(e))
    buf = _buffer(array, dt, resolve(device, op))
    return N.buffer(buf, array.shape, dt)


def data_node(data, dtype=None, device=None) -> N.Node:
    """The buffer node of `fg.tensor(data, dtype, device=device)`, for data that is not a
    tensor (`creation.tensor` reads a tensor's values first).

    Python floats become float32, ints int64, bools bool, as in PyTorch; a numpy array
    or numpy scalar keeps its dtype (`np.uint8` data gives a `fusegrad.uint8` tensor,
    `np.float64(1.5)` a float64 one). Data of a dtype fusegrad has not (float16, complex,
    datetime, object) is refused, never converted silently; ask for the conversion with
    `dtype=` or numpy's `astype`.
    """
    if dtype is None and type(data) is np.ndarray and data.dtype in _KEPT:
        return numpy_node(data, device)  # the usual batch: no conversion
    device = resolve(device, "tensor")
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
    return numpy_node(arr, device)


def tensor_like(like, data, dtype=None, device=None):
    """`fg.tensor(data, dtype, device=device)` (data that is not a tensor), of the class of
    `like`, a tensor (or the Tensor class)."""
    return like._plain(data_node(data, dtype, device))


def full_node(size, fill_value, dtype=None, device=None) -> N.Node:
    """The node of `fg.full(size, fill_value, dtype, device=device)`: a lazy constant."""
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
    return N.const(checked_fill(fill_value, dtype, "full"), shape, dtype, device)


def _like(t, device) -> str:
    """The device a *_like op makes its tensor on: t's unless told."""
    return t.node.device or default_name() if device is None else device


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


def index_arange(like, start, end=None, step=1, dtype=None):
    """`arange` as a table fusegrad builds for itself (to compare indices against): host
    data of no device, usable by a graph on any device (see `runtime.buffer.HostTable`).

    A table of more than `_SHARED_LIMIT` elements is no data at all: an `INDEX` node (times
    `step`, plus `start`) that each kernel reading it computes. Stored, a whole tensor's
    positions (argmax's, a write's) cost 8 bytes an element and a read of them; small tables
    stay buffers, so a step's changing `start` (a recurrent step's time) changes data, not
    the graph. The result is of `like`'s class (`like._plain`: a Tensor)."""
    if end is None:
        start, end = 0, start
    dt = checked_dtype(dtype, "arange") if dtype is not None else int64
    ints = all(isinstance(v, int) for v in (start, end, step)) and dt.is_int
    size = len(range(start, end, step)) if ints else 0
    if size > _SHARED_LIMIT or (building_expansion() and ints):
        # (inside a macro's expansion too, which may read no buffer but its sources')
        node = N.index((size,), dt)
        if step != 1:
            node = N.mul(node, N.const(step, node.shape, dt))
        if start != 0:
            node = N.add(node, N.const(start, node.shape, dt))
        return like._plain(node)
    key = ("arange", start, end, step, dt, None)
    return like._plain(shared_node(key, lambda: np.arange(start, end, step), dt, None))


def host_table(like, array: np.ndarray):
    """A tensor over a copy of host data fusegrad built for itself (index positions read
    on the host): of no device, usable by a graph on any device; of `like`'s class."""
    dt = dtype_of_numpy(array.dtype)
    return like._plain(N.buffer(HostTable.from_numpy(array, dt), array.shape, dt))


_SHARED_LIMIT = 1 << 16  # elements: tables this small are shared, one buffer per distinct call


_SHARED_RECENT = 64  # tables kept after their last tensor goes: the most recently asked for


# key -> the table's buffer, while a tensor holds it; `_recent_shared` holds the last
# _SHARED_RECENT asked for, so a program asking for 20,000 distinct tables keeps 64
_shared_buffers: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


_recent_shared: OrderedDict[tuple, Buffer] = OrderedDict()


# every buffer `shared_node` made, while it lives (`is_table`)
_tables: weakref.WeakSet = weakref.WeakSet()


def is_table(buf) -> bool:
    """Whether `buf` is a read-only table fusegrad built for itself (`shared_node`'s:
    `arange`, index tables; `host_table`'s), never a user's data nor a parameter."""
    return isinstance(buf, HostTable) or buf in _tables


_shared_lock = forksafe.Lock()


def shared_node(key: tuple, make, dt: DType, device: str | None = HOST) -> N.Node:
    """A new node over the one read-only buffer that holds `make()` for this key.

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
            return N.buffer(buf, array.shape, dt)
        if device is None or get_backend(device).is_host:  # writing to t.numpy() must fail
            buf.array.flags.writeable = False
        with _shared_lock:  # another thread may have made it meanwhile: one buffer wins
            buf = _shared_buffers.setdefault(key, buf)
            _tables.add(buf)
            _recent_shared[key] = buf
            while len(_recent_shared) > _SHARED_RECENT:
                _recent_shared.popitem(last=False)
    shape = (buf.size,)
    return N.buffer(buf, shape, dt)


def rand_node(size, generator=None, dtype=None, device=None) -> N.Node:
    """The node of `fg.rand(*size, ...)`: uniform [0, 1) numbers of the counter-based
    generator (see manual_seed)."""
    device = resolve(device, "rand")
    dt = checked_dtype(dtype or default_float(), "rand")
    if not dt.is_float:
        fail(DTypeError, "rand", f"needs a float dtype, got {dt.name}")
    return N.rand(_key(device, generator), _shape(size), dt)


def randn(like, size, generator=None, dtype=None, device=None):
    """`fg.randn(*size, ...)`, of `like`'s class (`like._plain`: `like` is a tensor, or the
    Tensor class itself): standard normal numbers, Box-Muller over two uniform streams."""
    device = resolve(device, "randn")
    dt: DType = checked_dtype(dtype or default_float(), "randn")
    if not dt.is_float:
        fail(DTypeError, "randn", f"needs a float dtype, got {dt.name}")
    shape = _shape(size)
    wide = float32 if dt.is_half else dt  # 16-bit uniforms are too coarse for the tails
    u1 = like._plain(N.rand(_key(device, generator), shape, wide))
    u2 = like._plain(N.rand(_key(device, generator), shape, wide))
    r = ((1 - u1).log() * -2).sqrt()  # 1 - u1 is in (0, 1], so the log is finite
    z = r * (u2 * (2 * math.pi)).cos()
    return z.cast(dt)


def randint(
    like, low: int, high: int | None = None, size=(), generator=None, dtype=None, device=None
):
    """`fg.randint(low, high, size, ...)`, of `like`'s class (`like._plain`)."""
    if high is None:
        low, high = 0, low
    elif isinstance(high, (tuple, list)):  # randint(high, size), as torch allows
        low, high, size = 0, low, high
    out_dtype = checked_dtype(dtype or int64, "randint")
    _check_randint_range(low, high, out_dtype)
    u = like._plain(rand_node(_shape(tuple(size)), generator, "float64", device))
    drawn = u * (high - low) + low
    if low >= 0:
        # never negative: the cast's truncation is the floor, and whole numbers cast to a
        # float dtype are the floor's (the same values without floor's sixty-odd ops)
        return drawn.cast(int64).cast(out_dtype)
    # floor, not the cast's truncation: a negative low must come up as often as the others,
    # and a float dtype holds whole numbers, as torch's
    return drawn.floor().cast(out_dtype)


# torch's names of the types in randint's range errors, and the most-significant-bit count
# of a float type's whole numbers (2^digits: the largest range it draws from exactly)
_RANDINT_NAMES = {
    "uint8": "unsigned char", "int8": "signed char", "int16": "short", "int32": "int",
    "int64": "long", "float16": "c10::Half", "bfloat16": "c10::BFloat16", "float32": "float",
    "float64": "double",
}  # fmt: skip
_FLOAT_DIGITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _check_randint_range(low, high, dtype) -> None:
    """Raise as torch's randint does for an empty range, or one the dtype cannot hold
    (`high - 1` past an integer type's largest value, or past 2^digits of a float type's,
    where whole numbers stop being exact), rather than draw wrapped or rounded values."""
    if not low < high:
        fail(
            ArgumentError,
            "randint",
            f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}",
        )
    name = _RANDINT_NAMES.get(dtype.name)
    if name is None:  # (bool: torch's randint draws it from any range)
        return
    if dtype.is_float:
        most = 1 << _FLOAT_DIGITS[dtype.name]
        least = -most
    else:
        info = np.iinfo(dtype.np)
        least, most = int(info.min), int(info.max)
    if low < least:
        fail(ArgumentError, "randint", f"from is out of bounds for {name}")
    if high - 1 > most:
        fail(ArgumentError, "randint", f"to - 1 is out of bounds for {name}")


def initial_seed() -> int:
    """The seed `manual_seed` set last (0 until then)."""
    return _seed["seed"]


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """`fill_value` everywhere in a tensor of `size`, with this tensor's dtype and device
    unless told (Tensor.new_full; new_zeros, new_ones and new_empty likewise).

    >>> import fusegrad as fg
    >>> fg.zeros(2, dtype=fg.int32).new_full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    """
    node = full_node(_shape(size), fill_value, dtype or self.dtype, _like(self, device))
    return finish(self._plain, node, requires_grad)


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    return new_full(self, size, 0, dtype=dtype, device=device, requires_grad=requires_grad)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    return new_full(self, size, 1, dtype=dtype, device=device, requires_grad=requires_grad)


def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
    return new_zeros(self, *size, dtype=dtype, device=device, requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    """A new tensor of `data`, with this tensor's dtype and device unless told (as torch:
    `int_tensor.new_tensor([1.5])` is int)."""
    data = data.detach()._host() if isinstance(data, self._plain) else data
    node = data_node(data, dtype or self.dtype, _like(self, device))
    return finish(self._plain, node, requires_grad)


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
