"""Errors that name the op, the shapes or dtypes, and the user's file and line.

Every check runs when the op is written, not when a value is computed, so the
traceback and the message both point at the user's line:

    fusegrad.ShapeError: add: shapes (3, 4) and (5,) cannot be broadcast together
    (axis -1: 4 vs 5) at train.py:12
"""

from __future__ import annotations

from .ir.dtypes import to_dtype
from .runtime import attribution as _sites
from .runtime.attribution import one_site  # noqa: F401  (for nn's composite ops: one stack walk each)


def register_package_dirs(dirs) -> None:
    """The folders whose frames are fusegrad's own, not the user's."""
    _sites.register_library_dirs(dirs)


def at_callers_site(label: str | None = None, role: str = "forward"):
    """Within this block every new node gets the site of the user's call that opened it
    (labelled `label` in `role`, when given: an optimizer's step is "sgd update").

    backward() and optimizer steps build hundreds of nodes from one user line; looking
    the line up once instead of walking the stack for each node saves real time per step.
    """
    site = _sites.capture()
    if site is not None and label is not None:
        site = site.with_label(label, role)
    return _sites.fixed(site)


def user_site() -> str | None:
    """`file:line` of the innermost frame outside fusegrad (and outside the standard
    library: a `with` block's contextlib frames are not the user's)."""
    site = _sites.capture()
    return str(site) if site is not None else None


class FusegradError(Exception):
    """Base class of the errors fusegrad raises on bad input."""


class GradError(FusegradError, RuntimeError):
    """Differentiating something that cannot be differentiated (as PyTorch's RuntimeError)."""


class ShapeError(FusegradError, ValueError, RuntimeError):
    """Shapes that do not fit the op (broadcasting, reshape, matmul, dim). PyTorch raises
    RuntimeError for most of these and ValueError for some (a loss's batch sizes): both
    catch it."""


class DTypeError(FusegradError, TypeError, RuntimeError):
    """A dtype, or a mix of dtypes, the op does not support. PyTorch raises RuntimeError
    for most of these (`mean` of an int tensor, matmul of int and float) and TypeError for
    some: both catch it."""


class DTypeNotImplementedError(DTypeError, NotImplementedError):
    """An op with no kernel for the dtype, where PyTorch raises NotImplementedError
    (`"floor" not implemented for 'Bool'`, softmax of an integer tensor): a DTypeError too."""


class IndexingError(FusegradError, IndexError, RuntimeError):
    """An index or slice outside the tensor. PyTorch raises IndexError for most of these
    and RuntimeError for some (`gather`, `index_select` with a float index): both catch it."""


class JitError(FusegradError):
    """A function cannot be recorded and replayed by `fusegrad.jit`."""


class DimError(ShapeError, IndexingError):
    """A dim out of range: an IndexError, as PyTorch raises (and a ShapeError, as before)."""


class ArgumentError(FusegradError, RuntimeError):
    """Arguments the op does not accept, where PyTorch raises RuntimeError."""


class LinAlgError(ArgumentError):
    """A matrix a linear-algebra op cannot factor (singular for inv, not positive-definite
    for cholesky): torch.linalg.LinAlgError, a RuntimeError (`fg.linalg.LinAlgError`)."""


class DeviceError(FusegradError, RuntimeError):
    """A device that does not exist here (no GPU, no PyCUDA)."""


def checked_dtype(dtype, op: str):
    """`fusegrad.ir.dtypes.to_dtype`, with an error naming the op and the user's line."""
    try:
        return to_dtype(dtype)
    except (TypeError, ValueError) as e:
        fail(DTypeError, op, str(e))


def warn_user(message: str) -> None:
    """A UserWarning (one of torch's) pointing at the user's line."""
    import warnings

    site = _sites.capture()
    if site is None:
        warnings.warn(message, UserWarning, stacklevel=3)
    else:
        warnings.warn_explicit(message, UserWarning, site.path, site.line)


def fail(kind: type[FusegradError], op: str, message: str):
    """Raise `kind` with the op name, the message and the user's file:line."""
    site = user_site()
    where = f" at {site}" if site else ""
    raise kind(f"{op}: {message}{where}")
