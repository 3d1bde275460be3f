"""Errors that name the op, the shapes or dtypes, and the user's file and line.

Every check runs when the op is written, not when a value is computed, so the
traceback and the message both point at the user's line:

    fusegrad.ShapeError: add: shapes (3, 4) and (5,) cannot be broadcast together
    (axis -1: 4 vs 5) at train.py:12
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

_PACKAGE_DIRS: tuple[str, ...] = ()


def register_package_dirs(dirs) -> None:
    """The folders whose frames are fusegrad's own, not the user's."""
    global _PACKAGE_DIRS
    _PACKAGE_DIRS = tuple(os.path.abspath(d) + os.sep for d in dirs)
    _is_ours.clear()


_is_ours: dict[str, bool] = {}  # file name -> inside fusegrad (called for every new node)
_fixed = threading.local()


@contextlib.contextmanager
def at_callers_site():
    """Within this block every new node gets the site of the user's call that opened it.

    backward() and optimizer steps build hundreds of nodes from one user line; looking
    the line up once instead of walking the stack for each node saves real time per step.
    """
    outer = getattr(_fixed, "site", None)
    _fixed.site = outer or user_site()
    try:
        yield
    finally:
        _fixed.site = outer


def user_site() -> str | None:
    """`file:line` of the innermost frame outside fusegrad."""
    fixed = getattr(_fixed, "site", None)
    if fixed is not None:
        return fixed
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        ours = _is_ours.get(name)
        if ours is None:
            ours = _is_ours[name] = name.startswith(_PACKAGE_DIRS) or name.startswith("<frozen")
        if not ours:
            key = (name, f.f_lineno)
            text = _site_text.get(key)
            if text is None:
                text = _site_text[key] = f"{os.path.basename(name)}:{key[1]}"
            return text
        f = f.f_back
    return None


_site_text: dict[tuple[str, int], str] = {}  # (file, line) -> "file:line", made once


class FusegradError(Exception):
    """Base class of the errors fusegrad raises on bad input."""


class ShapeError(FusegradError, ValueError):
    """Shapes that do not fit the op (broadcasting, reshape, matmul, dim)."""


class DTypeError(FusegradError, TypeError):
    """A dtype, or a mix of dtypes, the op does not support."""


class IndexingError(FusegradError, IndexError):
    """An index or slice outside the tensor."""


class JitError(FusegradError):
    """A function cannot be recorded and replayed by `fusegrad.jit`."""


class DimError(ShapeError, IndexingError):
    """A dim out of range: an IndexError, as PyTorch raises (and a ShapeError, as before)."""


class ArgumentError(FusegradError, RuntimeError):
    """Arguments the op does not accept, where PyTorch raises RuntimeError."""


class DeviceError(FusegradError, RuntimeError):
    """A device that does not exist here (no GPU, no PyCUDA)."""


def checked_dtype(dtype, op: str):
    """`fusegrad.ir.dtypes.to_dtype`, with an error naming the op and the user's line."""
    from .ir.dtypes import to_dtype

    try:
        return to_dtype(dtype)
    except (TypeError, ValueError) as e:
        fail(DTypeError, op, str(e))


def fail(kind: type[FusegradError], op: str, message: str):
    """Raise `kind` with the op name, the message and the user's file:line."""
    site = user_site()
    where = f" at {site}" if site else ""
    raise kind(f"{op}: {message}{where}")
