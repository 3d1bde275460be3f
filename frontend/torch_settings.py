"""torch's top-level constants, type objects, type-promotion queries and process settings.

>>> import fusegrad as fg
>>> isinstance(fg.float32, fg.dtype), fg.promote_types(fg.uint8, fg.int8)
(True, fusegrad.int16)
>>> fg.result_type(fg.tensor([1, 2]), 1.0), fg.can_cast(fg.float64, fg.int32)
(fusegrad.float32, False)

The settings are torch's names for what fusegrad has: `set_float32_matmul_precision` is
`fg.config.allow_tf32` (TF32 on the cuda device; CPU float32 matmuls stay float32, as
"high" and "medium" only permit less precision), `use_deterministic_algorithms(True)`
turns the register-tile autotuner off (`fg.config.autotune`: the one source of run-to-run
differences in fusegrad's kernels). Those that cannot change a result here (inter-op
threads, warn-always) are kept and read back; `set_flush_denormal(True)` answers False,
torch's answer where the CPU cannot flush denormals (fusegrad never does).

Memory formats are accepted where torch takes `memory_format=` and change no value:
fusegrad lays tensors out its own way (each kernel's loop nest), and `stride()` stays
row-major whatever format was asked for.
"""

from __future__ import annotations

import math
import os
import warnings

from .errors import ShapeError, fail
from .ir.dtypes import DEFAULT_INT, DType, bool_, default_float, promote, scalar_dtype
from .runtime.config import config

# ---------------------------------------------------------------- constants

pi = math.pi
e = math.e
inf = math.inf
nan = math.nan
newaxis = None  # x[:, fg.newaxis] is x[:, None]

# torch.dtype: the class of every dtype (`isinstance(x, torch.dtype)`, annotations)
dtype = DType  # (fusegrad.dtype is set in __init__.py, after the functions taking dtype=)


class layout:  # noqa: N801  (torch's class name)
    """torch.layout: how a tensor's elements are arranged; fusegrad has `strided` only."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"fusegrad.{self.name}"

    def __reduce__(self):
        return self.name  # pickled as the module attribute of that name


strided = layout("strided")


class memory_format:  # noqa: N801  (torch's class name)
    """torch.memory_format: the order torch keeps a tensor's elements in. Accepted where torch
    takes `memory_format=`; fusegrad's layout is its own, so no value changes."""

    __slots__ = ("name", "rank")

    def __init__(self, name: str, rank: int | None = None):
        self.name, self.rank = name, rank  # rank: the only rank the format applies to

    def __repr__(self) -> str:
        return f"fusegrad.{self.name}"

    def __reduce__(self):
        return self.name


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last", 4)
channels_last_3d = memory_format("channels_last_3d", 5)


def check_memory_format(fmt, ndim: int, op: str) -> None:
    """Refuse what torch refuses for `memory_format=` on a tensor of `ndim` axes: a value
    that is not a memory format, or a channels-last format for another rank.

    >>> check_memory_format(channels_last, 4, "contiguous")
    >>> check_memory_format(channels_last, 3, "contiguous")
    Traceback (most recent call last):
    fusegrad.errors.ShapeError: contiguous: required rank 4 tensor to use channels_last format...
    """
    if fmt is None:
        return
    if not isinstance(fmt, memory_format):
        raise TypeError(
            f"{op}(): argument 'memory_format' must be torch.memory_format, "
            f"not {type(fmt).__name__}"
        )
    if fmt.rank is not None and ndim != fmt.rank:
        fail(ShapeError, op, f"required rank {fmt.rank} tensor to use {fmt.name} format")


def format_strides(shape: tuple[int, ...], fmt) -> tuple[int, ...]:
    """The strides torch gives a tensor of `shape` kept in `fmt` (channels last: the
    channel axis, 1, innermost).

    >>> format_strides((2, 3, 4, 5), channels_last)
    (60, 1, 15, 3)
    """
    order = list(range(len(shape)))
    if fmt is channels_last or fmt is channels_last_3d:
        order = [0, *range(2, len(shape)), 1]  # the axes from outermost to innermost
    strides, acc = [0] * len(shape), 1
    for axis in reversed(order):
        strides[axis] = acc
        acc *= shape[axis]
    return tuple(strides)


# ---------------------------------------------------------------- type promotion


def _dtype_argument(value, op: str, name: str, position: int) -> DType:
    if not isinstance(value, DType):
        raise TypeError(
            f"{op}(): argument '{name}' (position {position}) must be torch.dtype, "
            f"not {type(value).__name__}"
        )
    return value


def promote_types(type1, type2) -> DType:
    """The dtype a binary op on tensors of these dtypes gives (torch.promote_types).

    >>> import fusegrad as fg
    >>> fg.promote_types(fg.int32, fg.float16), fg.promote_types(fg.bfloat16, fg.float16)
    (fusegrad.float16, fusegrad.float32)
    """
    a = _dtype_argument(type1, "promote_types", "type1", 1)
    return promote(a, _dtype_argument(type2, "promote_types", "type2", 2))


def _is_number(x) -> bool:
    return (
        isinstance(x, (bool, int, float)) or type(x).__module__ == "numpy" and hasattr(x, "dtype")
    )


def result_type(tensor, other) -> DType:
    """The dtype of an arithmetic op on `tensor` and `other` (tensors or numbers), by
    torch's rule: tensors with axes decide, then 0-d tensors, then numbers, each lifting
    the result only to a higher kind (bool < integer < float); a float number lifts to the
    default dtype (torch.result_type).

    >>> import fusegrad as fg
    >>> fg.result_type(fg.tensor([1], dtype=fg.uint8), fg.tensor(5)), fg.result_type(2, 3.0)
    (fusegrad.uint8, fusegrad.float32)
    """
    from_tensors: list[DType | None] = [None, None]  # [with axes, 0-d]
    from_numbers: DType | None = None
    for x in (tensor, other):
        if hasattr(x, "node") and hasattr(x, "ndim"):  # a tensor (no import of tensor.py)
            k = 0 if x.ndim else 1
            seen = from_tensors[k]
            from_tensors[k] = x.dtype if seen is None else promote(seen, x.dtype)
        elif _is_number(x):
            d = scalar_dtype(x.item() if hasattr(x, "item") else x)
            d = default_float() if d.is_float else (DEFAULT_INT if d.is_int else bool_)
            from_numbers = d if from_numbers is None else promote(from_numbers, d)
        else:
            kinds = ", ".join(type(v).__name__ for v in (tensor, other))
            raise TypeError(
                f"result_type() received an invalid combination of arguments - got ({kinds}), "
                "but expected tensors or numbers"
            )
    out = None
    for d in (*from_tensors, from_numbers):
        if d is not None and (out is None or d.category > out.category):
            out = d
    return out


def can_cast(from_, to) -> bool:
    """Whether torch's casting rule allows `from_` into `to`: not a float into an integer
    or bool, not a number into bool (torch.can_cast).

    >>> import fusegrad as fg
    >>> fg.can_cast(fg.float64, fg.float16), fg.can_cast(fg.int64, fg.bool)
    (True, False)
    """
    a = _dtype_argument(from_, "can_cast", "from_", 1)
    b = _dtype_argument(to, "can_cast", "to", 2)
    if a.is_float and not b.is_float:
        return False
    return not (b.is_bool and not a.is_bool)


def typename(obj) -> str:
    """A string naming the type of `obj`: a tensor's `type()` ("fusegrad.FloatTensor"),
    else its module and qualified name (torch.typename).

    >>> import fusegrad as fg
    >>> fg.typename(fg.zeros(1)), fg.typename(3), fg.typename(fg.Size)
    ('fusegrad.FloatTensor', 'int', 'fusegrad.Size')
    """
    if hasattr(obj, "node") and callable(getattr(obj, "type", None)):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    if hasattr(obj, "__qualname__"):
        qualname = obj.__qualname__
    elif hasattr(obj, "__name__"):
        qualname = obj.__name__
    else:
        module = obj.__class__.__module__ or ""
        qualname = obj.__class__.__qualname__
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"


# ---------------------------------------------------------------- settings

_PRECISIONS = ("highest", "high", "medium")
# what the process asked for; "highest" whenever TF32 is off (fg.config.allow_tf32, which
# fg.backends.cuda.matmul.allow_tf32 also sets, as torch's precision and flag are one)
_matmul_precision = ["high"]


def set_float32_matmul_precision(precision: str) -> None:
    """torch.set_float32_matmul_precision: "highest" keeps float32 matmuls in float32,
    "high" and "medium" let the cuda device's take TF32 tensor cores (`fg.config.allow_tf32`,
    as torch sets `torch.backends.cuda.matmul.allow_tf32`). CPU float32 matmuls stay float32
    at every setting ("medium" permits bfloat16 there in torch; fusegrad does not use it).
    Another string warns and changes nothing, as torch's.

    >>> import fusegrad as fg
    >>> fg.set_float32_matmul_precision("high"); fg.config.allow_tf32
    True
    >>> fg.set_float32_matmul_precision("highest"); fg.get_float32_matmul_precision()
    'highest'
    """
    if not isinstance(precision, str):
        raise RuntimeError(
            f"set_float32_matmul_precision expects a str, but got {type(precision).__name__}"
        )
    if precision not in _PRECISIONS:
        warnings.warn(
            f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
            "set_float32_matmul_precision call has no effect.",
            UserWarning,
            stacklevel=2,
        )
        return
    if precision != "highest":
        _matmul_precision[0] = precision
    config.allow_tf32 = precision != "highest"


def get_float32_matmul_precision() -> str:
    """ "highest", "high" or "medium": what `set_float32_matmul_precision` set, "highest"
    while TF32 is off (torch.get_float32_matmul_precision)."""
    return _matmul_precision[0] if config.allow_tf32 else "highest"


def _bool_argument(value, op: str, name: str, position: int | None = None) -> bool:
    if not isinstance(value, bool):
        where = f" (position {position})" if position else ""
        raise TypeError(
            f"{op}(): argument '{name}'{where} must be bool, not {type(value).__name__}"
        )
    return value


# [enabled, warn_only, fg.config.autotune before it was enabled]
_deterministic: list = [False, False, None]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms: with `mode` True every kernel gives the same bits
    for the same inputs. fusegrad's kernels do, but for the register-tile autotuner: a
    contraction's kernel is swapped for a tuned one after a few runs, and two tiles may
    round an epilogue differently (docs/DEBUGGING.md, FUSEGRAD_AUTOTUNE). So True turns the
    tuner off (`fg.config.autotune`; kernels tuned before keep their tiles), and False
    gives it back its setting. No op raises or warns for want of a deterministic version.

    >>> import fusegrad as fg
    >>> before = fg.config.autotune
    >>> fg.use_deterministic_algorithms(True); fg.config.autotune
    False
    >>> fg.use_deterministic_algorithms(False); fg.config.autotune == before
    True
    """
    mode = _bool_argument(mode, "use_deterministic_algorithms", "mode", 1)
    warn_only = _bool_argument(warn_only, "use_deterministic_algorithms", "warn_only")
    if mode and not _deterministic[0]:
        _deterministic[2] = config.autotune
        config.autotune = False
    elif not mode and _deterministic[0] and _deterministic[2] is not None:
        config.autotune = _deterministic[2]
    _deterministic[0], _deterministic[1] = mode, mode and warn_only


def are_deterministic_algorithms_enabled() -> bool:
    """Whether `use_deterministic_algorithms(True)` is in force."""
    return _deterministic[0]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """Whether it was set with `warn_only=True`."""
    return _deterministic[1]


_interop_threads: list[int | None] = [None]


def set_num_interop_threads(n: int) -> None:
    """torch.set_num_interop_threads: kept and read back. fusegrad runs one graph's kernels
    at a time, each on `fg.get_num_threads()` threads, so it has no inter-op pool and the
    number changes nothing. As torch's, it may be set once."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise RuntimeError(f"set_num_interop_threads expects an int, but got {type(n).__name__}")
    if n < 1:
        raise RuntimeError("set_num_interop_threads expects a positive integer")
    if _interop_threads[0] is not None:
        raise RuntimeError(
            "Error: cannot set number of interop threads after parallel work has started "
            "or set_num_interop_threads called"
        )
    _interop_threads[0] = n


def get_num_interop_threads() -> int:
    """What `set_num_interop_threads` set, else the number of CPUs (torch's default)."""
    return _interop_threads[0] or os.cpu_count() or 1


_warn_always = [False]


def set_warn_always(b: bool) -> None:
    """torch.set_warn_always: kept and read back. fusegrad's warnings are Python's, which
    the `warnings` filters decide (torch's flag repeats its C++ warn-once messages)."""
    if not isinstance(b, bool):
        raise RuntimeError(f"set_warn_always expects a bool, but got {type(b).__name__}")
    _warn_always[0] = b


def is_warn_always_enabled() -> bool:
    """What `set_warn_always` set (False at first)."""
    return _warn_always[0]


def set_flush_denormal(mode: bool) -> bool:
    """torch.set_flush_denormal: whether the setting took. fusegrad's kernels keep
    denormal numbers, so True answers False (what torch answers on a CPU that cannot flush
    them) and changes nothing; False answers True.

    >>> import fusegrad as fg
    >>> fg.set_flush_denormal(True), fg.set_flush_denormal(False)
    (False, True)
    """
    if not isinstance(mode, bool):
        raise RuntimeError(f"flush_denormal expects a bool, but got {type(mode).__name__}")
    return not mode
