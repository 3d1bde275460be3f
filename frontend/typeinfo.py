"""`fg.finfo` and `fg.iinfo`: the limits of a dtype, as torch.finfo / torch.iinfo give them.

>>> import fusegrad as fg
>>> fg.finfo(fg.float32).eps, fg.iinfo(fg.uint8).max
(1.1920928955078125e-07, 255)
>>> fg.finfo().dtype  # the default float dtype; `dtype` is a name, as in torch
'float32'
"""

from __future__ import annotations

import numpy as np

from .errors import DTypeError, checked_dtype, fail
from .ir.dtypes import default_float


class finfo:  # noqa: N801  (torch's name)
    """The limits of a float dtype (float16, bfloat16, float32, float64), as torch.finfo.

    `bits`, `eps` (1.0's distance to the next float), `max`, `min`, `tiny` and
    `smallest_normal` (the smallest positive normal number), `resolution`
    (10 ** -digits) and `dtype` (the name). No argument: the default float dtype.

    >>> import fusegrad as fg
    >>> f = fg.finfo(fg.float64)
    >>> f.bits, f.max, f.resolution
    (64, 1.7976931348623157e+308, 1e-15)
    """

    def __init__(self, type=None):  # noqa: A002  (torch's argument name)
        dt = default_float() if type is None else checked_dtype(type, "finfo")
        if not dt.is_float:
            fail(
                DTypeError,
                "finfo",
                f"requires a floating point input type, got {dt.name}; use fusegrad.iinfo "
                "for integer types",
            )
        info = dt.finfo  # numpy's finfo, and bfloat16's
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -int(info.precision)  # as torch: 1e-06, not float32(1e-06)
        self.dtype = dt.name

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
            f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
            f"tiny={self.tiny:g}, dtype={self.dtype})"
        )


class iinfo:  # noqa: N801  (torch's name)
    """The limits of an integer dtype (uint8, int8, int16, int32, int64), as torch.iinfo:
    `bits`, `max`, `min` and `dtype` (the name). bool is refused, as in torch.

    >>> import fusegrad as fg
    >>> i = fg.iinfo(fg.int16)
    >>> i.bits, i.min, i.max, i.dtype
    (16, -32768, 32767, 'int16')
    """

    def __init__(self, type):  # noqa: A002  (torch's argument name)
        dt = checked_dtype(type, "iinfo")
        if dt.is_bool:
            fail(DTypeError, "iinfo", "bool is not supported by iinfo (as in torch)")
        if not dt.is_int:
            fail(
                DTypeError,
                "iinfo",
                f"requires an integer input type, got {dt.name}; use fusegrad.finfo "
                "for float types",
            )
        info = np.iinfo(dt.np)
        self.bits = int(info.bits)
        self.max = int(info.max)
        self.min = int(info.min)
        self.dtype = dt.name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"
