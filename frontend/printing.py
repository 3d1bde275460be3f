"""How a tensor prints: PyTorch's layout (torch/_tensor_str.py, default print options), so
that printed values read the same as torch's and scripts comparing printed text agree.

Floats print with 4 decimals (`tensor([1.0000, 2.5000])`), or as `1.` when every finite
value is an integer, or in scientific notation when the finite non-zero magnitudes span more
than a factor 1000, or exceed 1e8, or (with decimals) go below 1e-4. Every element is
padded to one width; rows wrap at 80 columns; tensors of more than 1000 elements show their
first and last 3 along each axis around `...`.

>>> import fusegrad as fg
>>> fg.tensor([[1.0, -2.5], [3.0, 4.0]])
tensor([[ 1.0000, -2.5000],
        [ 3.0000,  4.0000]])
>>> fg.tensor([1e-5, 1.0])
tensor([1.0000e-05, 1.0000e+00])
"""

from __future__ import annotations

import math

import numpy as np

from .ir.dtypes import default_float

PRECISION = 4
THRESHOLD = 1000  # more elements than this are summarized
EDGEITEMS = 3
LINEWIDTH = 80
SCI_MODE = None  # None: chosen from the values (torch's default); True/False: forced

_PROFILES = {
    "default": (4, 1000, 3, 80),
    "short": (2, 1000, 2, 80),
    "full": (4, float("inf"), 3, 80),
}


def set_printoptions(
    precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None
) -> None:
    """How tensors print, as torch.set_printoptions: digits after the point, how many
    elements print before a summary, how many edge items a summary shows, the line
    width; `profile` ("default", "short", "full") sets all four first; `sci_mode`
    True/False forces scientific notation on or off (None: chosen from the values).

    >>> import fusegrad as fg
    >>> fg.set_printoptions(precision=2); print(fg.tensor([1.23456]))
    tensor([1.23])
    >>> fg.set_printoptions(profile="default")
    """
    global PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH, SCI_MODE
    if profile is not None:
        PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = _PROFILES[profile]
    PRECISION = PRECISION if precision is None else int(precision)
    THRESHOLD = THRESHOLD if threshold is None else threshold
    EDGEITEMS = EDGEITEMS if edgeitems is None else int(edgeitems)
    LINEWIDTH = LINEWIDTH if linewidth is None else int(linewidth)
    SCI_MODE = sci_mode


class _Formatter:
    """One width and one notation for all the elements printed (torch's _Formatter)."""

    def __init__(self, values: np.ndarray):
        self.floating = values.dtype.kind == "f"
        self.int_mode, self.sci_mode, self.width = True, False, 1
        flat = values.reshape(-1)
        if not self.floating:
            for v in flat.tolist():
                self.width = max(self.width, len(str(v)))
            return
        finite = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if finite.size == 0:
            return
        mags = np.abs(finite)
        lo, hi = mags.min(), mags.max()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if self.int_mode:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8
        else:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        if SCI_MODE is not None:
            self.sci_mode = bool(SCI_MODE)
        for v in finite.tolist():
            if self.sci_mode:
                self.width = max(self.width, len(f"{v:.{PRECISION}e}"))
            elif self.int_mode:
                self.width = max(self.width, len(f"{v:.0f}") + 1)
            else:
                self.width = max(self.width, len(f"{v:.{PRECISION}f}"))

    def format(self, v) -> str:
        if not self.floating:
            s = str(v)
        elif self.sci_mode:
            s = f"{v:{self.width}.{PRECISION}e}"
        elif self.int_mode:
            s = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            s = f"{v:.{PRECISION}f}"
        return " " * (self.width - len(s)) + s


def _summarized(a: np.ndarray) -> np.ndarray:
    """The elements a summary shows: the first and last EDGEITEMS along each axis."""
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * EDGEITEMS:
        a = np.concatenate([a[:EDGEITEMS], a[-EDGEITEMS:]])
    return np.stack([_summarized(r) for r in a]) if a.ndim > 1 else a


def _body(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    if a.ndim == 0:
        return fmt.format(a.item())
    long = summarize and a.shape[0] > 2 * EDGEITEMS
    if a.ndim == 1:
        per_line = max(1, (LINEWIDTH - indent) // (fmt.width + 2))
        if long:
            items = [fmt.format(v) for v in a[:EDGEITEMS].tolist()] + [" ..."]
            items += [fmt.format(v) for v in a[-EDGEITEMS:].tolist()]
        else:
            items = [fmt.format(v) for v in a.tolist()]
        lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = range(a.shape[0])
    if long:
        rows = list(range(EDGEITEMS)) + [None] + list(range(a.shape[0] - EDGEITEMS, a.shape[0]))
    parts = ["..." if i is None else _body(a[i], indent + 1, summarize, fmt) for i in rows]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def tensor_repr(values: np.ndarray, dtype: str, tail: list[str]) -> str:
    """`tensor(...)` for a tensor's host `values`, with torch's suffixes: `dtype` (its text,
    `dtype=fusegrad.float64`) unless the dtype is a default one (float32, int64, bool; an
    empty tensor shows any but float32, and its size unless (0,)), then `tail` (device,
    grad)."""
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    default = default_float().name  # torch omits the dtype it is set to (set_default_dtype)
    if values.size == 0:
        if values.ndim != 1:
            suffixes.append(f"size={tuple(values.shape)}")
        if values.dtype.name != default:
            suffixes.append(dtype)
        body = "[]"
    else:
        if values.dtype.name not in (default, "int64", "bool"):
            suffixes.append(dtype)
        if values.dtype.itemsize == 2 and values.dtype.kind in "fV":  # float16, bfloat16
            values = values.astype(np.float32)  # exact; formatted as any float
        summarize = values.size > THRESHOLD
        fmt = _Formatter(_summarized(values) if summarize else values)
        body = _body(values, indent, summarize, fmt)
    out = prefix + body
    last = len(out) - out.rfind("\n") + 1
    for s in suffixes + tail:
        if last + len(s) + 2 > LINEWIDTH:
            out += ",\n" + " " * indent + s
            last = indent + len(s)
        else:
            out += ", " + s
            last += len(s) + 2
    return out + ")"
