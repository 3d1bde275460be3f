"""`fg.autocast`: run a region's matmuls and convolutions in 16 bits, as torch.autocast.

Inside `with fg.autocast("cpu"):` (bfloat16; `"cuda"`: float16) each op of PyTorch's
per-device policy (`frontend/autocast_policy.py`, one table) casts its floating inputs
before it runs: matmuls, linear layers, convolutions and attention to the region's
16-bit dtype, ops that need range or precision (losses, exp/log on cuda, ...) to float32,
and ops like `cat` to the widest input type. Other ops follow their inputs. The casts are
nodes of the graph, so backward casts each gradient back: a float32 parameter gets a
float32 gradient, a 16-bit one a 16-bit gradient, as in torch.

>>> import fusegrad as fg
>>> w = fg.ones(3, 2, requires_grad=True)
>>> x = fg.ones(4, 3)
>>> with fg.autocast("cpu"):
...     y = x @ w
...     print(y.dtype, fg.is_autocast_enabled("cpu"), fg.get_autocast_dtype("cpu"))
fusegrad.bfloat16 True fusegrad.bfloat16
>>> y.float().sum().backward()
>>> w.grad.dtype, w.grad.tolist()[0]
(fusegrad.float32, [4.0, 4.0])

The state is per thread, as torch's: a thread started inside a region runs without it.
Regions nest; an inner `enabled=False` turns autocast off for its extent. An op runs its
own inner ops with autocast off (torch's dispatcher does the same), so a composite is
cast once, at its entry. Under `fg.jit` the region's state is part of a recording's key.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings

from .autocast_policy import (
    BANNED,
    DEFAULT_DTYPE,
    FP32,
    FP32_SET_OPT_DTYPE,
    LOWER,
    NATIVE,
    POLICY,
    PROMOTE,
    SUPPORTED_DTYPES,
)
from .errors import ArgumentError, DTypeError, checked_dtype, fail
from .ir import dtypes
from .ir.dtypes import float32, float64
from .runtime.backend import get_backend
from .tensor_base import TensorBase


class _State(threading.local):
    """One thread's autocast: per device type whether it is on and its dtype, the nesting
    depth of regions (the cast cache lives until the outermost one ends), and `active`,
    the one flag an op reads when autocast is off (its fast path)."""

    def __init__(self):
        self.enabled: dict[str, bool] = {}
        # the DType records themselves: to_dtype("bfloat16") raises without ml_dtypes
        self.dtype = {kind: getattr(dtypes, name) for kind, name in DEFAULT_DTYPE.items()}
        self.cache_enabled = True
        self.depth = 0
        self.cache: dict[int, tuple] = {}  # id(leaf) -> (leaf, its node, dtype, the cast)
        self.saved: list[tuple] = []  # what each open region replaced, innermost last
        self.active = False


_state = _State()


def _refresh() -> None:
    _state.active = any(_state.enabled.values())


def _device_type(device_type, op: str) -> str:
    """The device type autocast knows `device_type` by ("cuda:1" -> "cuda")."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    kind = device_type.split(":")[0]
    if kind not in POLICY:
        fail(
            ArgumentError,
            op,
            f"no autocast for device type {device_type!r}: fusegrad's are {sorted(POLICY)}",
        )
    return kind


class autocast:
    """`with fg.autocast("cpu"):` or `@fg.autocast("cuda")`: torch.autocast's policy for
    the ops of the region (see the module doc). `dtype`: the 16-bit type (default: the
    device type's current one, bfloat16 on the cpu and float16 on cuda); a dtype the
    device type does not support warns and disables the region, as torch. `cache_enabled`
    (default True) reuses, within the outermost region, one cast of each float32
    parameter (a leaf that requires grad) that several ops read.

    >>> import fusegrad as fg
    >>> @fg.autocast("cpu", dtype=fg.float16)
    ... def f(a, b):
    ...     return a @ b
    >>> f(fg.ones(2, 2), fg.ones(2, 2)).dtype
    fusegrad.float16
    >>> with fg.autocast("cpu"), fg.autocast("cpu", enabled=False):
    ...     (fg.ones(2, 2) @ fg.ones(2, 2)).dtype
    fusegrad.float32
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        kind = _device_type(device_type, "autocast")
        if not isinstance(enabled, bool):
            raise TypeError(f"autocast: enabled must be bool, not {type(enabled).__name__}")
        self.device = kind
        self.fast_dtype = _state.dtype[kind] if dtype is None else checked_dtype(dtype, "autocast")
        self._enabled = enabled
        if enabled and self.fast_dtype.name not in SUPPORTED_DTYPES[kind]:
            allowed = ", ".join(f"fusegrad.{n}" for n in SUPPORTED_DTYPES[kind])
            warnings.warn(
                f"In {kind} autocast, but the target dtype {self.fast_dtype.name} is not "
                f"supported. Disabling autocast.\n{kind} autocast only supports dtypes of "
                f"{allowed} currently.",
                stacklevel=2,
            )
            self._enabled = False
        why = get_backend(kind).why_unavailable() if enabled else None
        if why is not None:
            warnings.warn(f"{kind} is not available ({why}). Disabling autocast.", stacklevel=2)
            self._enabled = False
        self._cache_enabled = True if cache_enabled is None else bool(cache_enabled)

    def __enter__(self):
        st, kind = _state, self.device
        # saved on the thread, not the object: one region object may be entered by threads
        st.saved.append((kind, st.enabled.get(kind, False), st.dtype[kind], st.cache_enabled))
        st.enabled[kind], st.dtype[kind] = self._enabled, self.fast_dtype
        st.cache_enabled = self._cache_enabled
        st.depth += 1
        _refresh()
        return self

    def __exit__(self, *exc) -> bool:
        st, kind = _state, self.device
        st.depth -= 1
        if st.depth == 0:
            st.cache.clear()
        kind, st.enabled[kind], st.dtype[kind], st.cache_enabled = st.saved.pop()
        _refresh()
        return False

    def __call__(self, func):
        # the dtype resolved now, as torch's decorator enters this object; a region disabled
        # with a warning here stays disabled without warning again on every call
        args = (self.device, self.fast_dtype, self._enabled, self._cache_enabled)

        @functools.wraps(func)
        def in_region(*a, **k):
            with autocast(*args):
                return func(*a, **k)

        return in_region


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether autocast is on for `device_type` in this thread (torch's default: "cuda").

    >>> import fusegrad as fg
    >>> fg.is_autocast_enabled("cpu")
    False
    """
    return _state.enabled.get(_device_type(device_type, "is_autocast_enabled"), False)


def get_autocast_dtype(device_type: str):
    """The dtype autocast gives `device_type`'s LOWER ops in this thread (outside a region:
    bfloat16 for "cpu", float16 for "cuda").

    >>> import fusegrad as fg
    >>> fg.get_autocast_dtype("cuda")
    fusegrad.float16
    """
    return _state.dtype[_device_type(device_type, "get_autocast_dtype")]


def has_policy(name: str) -> bool:
    """Whether op `name` is in a row of the policy (or NATIVE) on some device type."""
    return name in NATIVE or any(name in rows for rows in POLICY.values())


def state_key() -> tuple:
    """This thread's autocast state as a hashable value (part of a jit recording's key)."""
    if not _state.active:
        return ()
    return tuple(sorted((k, _state.dtype[k].name) for k, on in _state.enabled.items() if on))


# ---------------------------------------------------------------- applying the policy


def autocast_op(name: str):
    """Decorate the definition of op `name` (a row of `autocast_policy.POLICY`, or of its
    NATIVE list): inside an autocast region its tensor arguments are cast as the policy
    says, and the ops it calls run with autocast off. Outside a region the call costs one
    thread-local read."""

    def wrap(fn):
        params = list(inspect.signature(fn).parameters)
        dtype_at = params.index("dtype") if "dtype" in params else None

        # named `wrapper`: profiles and error sites pass through it to the op (attribution)
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not _state.active:
                return fn(*args, **kwargs)
            args, kwargs = autocast_inputs(name, dtype_at, args, kwargs)
            _state.active = False  # the op's own inner ops run as it calls them (torch's)
            try:
                return fn(*args, **kwargs)
            finally:
                _refresh()

        return wrapper

    return wrap


def autocast_inputs(name: str, dtype_at, args, kwargs):
    """`args` and `kwargs` with the tensors op `name` casts in this thread's region (its
    casts show as `autocast_inputs` in profiles)."""
    st = _state
    kind = _first_device(args, kwargs)
    category = POLICY[kind].get(name) if kind is not None and st.enabled.get(kind) else None
    if category == BANNED:
        fail(
            ArgumentError,
            name,
            f"{name} is unsafe to autocast (torch.nn.functional.{name} and "
            f"torch.nn.BCELoss are unsafe under {kind} autocast). Many models use a sigmoid "
            "layer right before the binary cross entropy layer. In this case, combine the two "
            "layers using binary_cross_entropy_with_logits or BCEWithLogitsLoss, which are "
            "safe to autocast.",
        )
    if category is None:
        return args, kwargs
    target = _target(category, name, kind, dtype_at, args, kwargs)
    if target is None:
        return args, kwargs
    args = tuple(_cast_arg(a, target, kind) for a in args)
    return args, {k: _cast_arg(v, target, kind) for k, v in kwargs.items()}


def _tensors(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, TensorBase):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, TensorBase))


def _first_device(args, kwargs) -> str | None:
    for t in _tensors(args, kwargs):
        return t.device.type
    return None


def _eligible(t, kind: str) -> bool:
    """torch's is_eligible: a floating tensor of this device type, not float64."""
    return t.dtype.is_float and t.dtype is not float64 and t.device.type == kind


def _target(category: str, name: str, kind: str, dtype_at, args, kwargs):
    """The dtype the op's eligible inputs are cast to (None: none are)."""
    lower = _state.dtype[kind]
    if category == LOWER:
        return lower
    if category == FP32:
        return float32
    if category == FP32_SET_OPT_DTYPE:
        given = kwargs.get("dtype") is not None or (
            dtype_at is not None and len(args) > dtype_at and args[dtype_at] is not None
        )
        first = next(_tensors(args, kwargs), None)
        return float32 if not given and first is not None and _eligible(first, kind) else None
    assert category == PROMOTE, category
    widest = lower
    for t in _tensors(args, kwargs):
        if not _eligible(t, kind):
            continue
        if t.dtype is float32 or widest is float32:
            widest = float32
        elif t.dtype is not lower:
            fail(
                DTypeError,
                name,
                f"an input of dtype {t.dtype.name} in a {lower.name} autocast region: the "
                f"widest type of {[u.dtype.name for u in _tensors(args, kwargs)]} is not "
                "defined there (torch's 'Unexpected floating ScalarType in "
                "at::autocast::prioritize'); cast it to float32 or to the region's dtype",
            )
    return widest


def _cast_arg(a, dtype, kind: str):
    if isinstance(a, TensorBase):
        return _cast(a, dtype, kind)
    if isinstance(a, (list, tuple)) and any(isinstance(t, TensorBase) for t in a):
        return type(a)(_cast(t, dtype, kind) if isinstance(t, TensorBase) else t for t in a)
    return a


def _cast(t, dtype, kind: str):
    """`t` as `dtype` if autocast casts it (an eligible tensor of another dtype): a cast
    node of the graph. A float32 parameter's cast is kept and reused until the outermost
    region ends (torch's weight cache), unless the parameter was updated meanwhile."""
    if t.dtype is dtype or not _eligible(t, kind):
        return t
    st = _state
    if not (
        st.cache_enabled
        and dtype is st.dtype[kind]
        and t.dtype is float32
        and t.requires_grad
        and t.is_leaf
    ):
        return t.cast(dtype)
    hit = st.cache.get(id(t))
    if hit is not None and hit[0] is t and hit[1] is t.node and hit[2] is dtype:
        return hit[3]
    out = t.cast(dtype)
    st.cache[id(t)] = (t, t.node, dtype, out)
    return out
