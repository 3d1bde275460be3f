"""The CUDA C spelling of values, types and indices, shared by the CUDA renderer's modules.

    >>> from fusegrad.ir.dtypes import float16, float32, int64
    >>> literal(0.5, float32), literal(3, int64), mem_type(float16)
    ('0.5f', '3LL', '__half')
    >>> widened("x[i]", float16), narrowed("v", float16)
    ('fg_f32(x[i])', 'fg_to_f16(v)')

An affine index prints as a sum of its terms, each integer literal 64-bit (`LL`) unless
the caller knows every index is small (`narrow_indices`).
"""

from __future__ import annotations

import contextlib
import contextvars

from ..ir.dtypes import DType, float32
from ..ir.symbolic import FloorDiv, Lin, Mod, Var
from .llvm_math import FLOAT_MAX, float32_rounded

# 16-bit floats: stored as CUDA's __half / __nv_bfloat16, float in registers (widened at
# loads by fg_f32, rounded to nearest even at stores and explicit casts)
HALF_STORAGE = {"float16": "__half", "bfloat16": "__nv_bfloat16"}
_TO_HALF = {"float16": "fg_to_f16", "bfloat16": "fg_to_bf16"}


PARTIAL = "fg_partial"  # the scratch buffer of a split reduction's partials


def mem_type(dt: DType) -> str:
    """The C type a buffer of `dt` holds: bools as bytes, 16-bit floats as CUDA's own."""
    return "unsigned char" if dt.is_bool else HALF_STORAGE.get(dt.name, dt.cuda)


def reg_type(dt: DType) -> DType:
    """The type a value of `dt` is computed in: float32 for the 16-bit floats."""
    return float32 if dt.is_half else dt


def widened(ref: str, dt: DType) -> str:
    """`ref`, a value of memory type `dt`, as its register type (`reg_type`)."""
    return f"fg_f32({ref})" if dt.is_half else ref


def narrowed(value: str, dt: DType) -> str:
    """`value`, computed in registers, rounded to memory type `dt` where it is 16-bit."""
    return f"{_TO_HALF[dt.name]}({value})" if dt.is_half else value


def literal(value, dt: DType) -> str:
    """`value` as a C literal of `dt`'s register type (NaN and the infinities included)."""
    dt = reg_type(dt)
    if dt.is_bool:
        return "true" if value else "false"
    if dt.is_int:
        v = dt.wrap(int(value))
        return f"{v}LL" if dt.itemsize == 8 else f"({dt.cuda}){v}" if dt.itemsize < 4 else str(v)
    v = float(value)
    if dt.itemsize == 4 and v == v and abs(v) > FLOAT_MAX:  # (what rounds past it: inf)
        v = float32_rounded(v)
    if v != v:
        text = (
            "__int_as_float(0x7fc00000)"
            if dt.itemsize == 4
            else "__longlong_as_double(0x7ff8000000000000LL)"
        )
        return text
    if v in (float("inf"), float("-inf")):
        sign = "-" if v < 0 else ""
        return f"{sign}(1.0{'f' if dt.itemsize == 4 else ''}/0.0{'f' if dt.itemsize == 4 else ''})"
    return f"{v!r}f" if dt.itemsize == 4 else repr(v)


# Whether `index` renders its arithmetic in 32-bit ints: set while a contraction's staging
# prints a side whose indices and buffers are all small (`narrow_indices`); a context
# variable, as kernels are rendered in several threads at once
_NARROW_INDEX = contextvars.ContextVar("fg_narrow_index", default=False)


@contextlib.contextmanager
def narrow_indices(narrow: bool = True):
    """Within it, `index` prints 32-bit arithmetic where `narrow` (the caller knows every
    index and buffer it prints is small enough)."""
    token = _NARROW_INDEX.set(narrow)
    try:
        yield
    finally:
        _NARROW_INDEX.reset(token)


# Texts that stand for some affine indices and conditions while a contraction's gather side
# is staged (`cuda_simt.Gather`): the part along the side's own loops computed once a tile,
# the reduction's part read from a table; keys are `Lin`s and tuples of them (`valid`)
_TEXTS = contextvars.ContextVar("fg_index_texts", default=None)


@contextlib.contextmanager
def index_texts(texts: dict):
    """Within it, `index` and `valid` print `texts[e]` for an index or conjunction in it."""
    token = _TEXTS.set(texts)
    try:
        yield
    finally:
        _TEXTS.reset(token)


def _suffix() -> str:
    """The suffix of an index's integer literals: none in 32-bit rendering."""
    return "" if _NARROW_INDEX.get() else "LL"


def index(e: Lin) -> str:
    """An affine index as C: `(i*4LL + j + 2LL)`."""
    texts = _TEXTS.get()
    if texts and e in texts:
        return texts[e]
    ll = _suffix()
    parts = []
    for atom, coef in e.terms:
        a = _atom(atom)
        parts.append(a if coef == 1 else f"{a}*{coef}{ll}")
    if e.const or not parts:
        parts.append(f"{e.const}{ll}")
    return "(" + " + ".join(parts) + ")"


def _atom(a) -> str:
    if isinstance(a, Var):
        return a.name
    if isinstance(a, FloorDiv):
        return f"({index(a.x)}/{a.c}{_suffix()})"
    if isinstance(a, Mod):
        return f"({index(a.x)}%{a.c}{_suffix()})"
    raise TypeError(a)


def valid(conds) -> str:
    """The C condition that every index of `conds` is at least 0 (`true` for none)."""
    texts = _TEXTS.get()
    if texts and tuple(conds) in texts:
        return texts[tuple(conds)]
    return " && ".join(f"{index(c)} >= 0" for c in conds) or "true"
