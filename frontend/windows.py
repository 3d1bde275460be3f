"""torch's signal windows: hann, hamming, blackman, bartlett and kaiser.

>>> import fusegrad as fg
>>> fg.hann_window(4).tolist()
[0.0, 0.5, 1.0, 0.5]

Each is computed in float64 on the host and rounded once to its dtype (torch computes in the
dtype itself, so a float32 or float16 value may differ from torch's in its last bit: a
periodic float32 blackman window starts at 0.0, where torch's is -2.98e-08). `periodic`
(the default) gives the first `window_length` points of a symmetric window one longer, as
for spectral analysis; a window of length 1 is [1.0], of length 0 empty.
"""

from __future__ import annotations

import math

import numpy as np

from .creation import tensor
from .errors import ArgumentError, DTypeError, fail
from .halfdtypes import get_default_dtype
from .ir.dtypes import to_dtype


def _window(op: str, window_length, periodic, dtype, device, requires_grad, shape_of):
    if isinstance(window_length, bool) or not isinstance(window_length, int):
        raise TypeError(
            f"{op}(): argument 'window_length' (position 1) must be int, not "
            f"{type(window_length).__name__}"
        )
    if window_length < 0:
        fail(
            ArgumentError,
            op,
            f"{op} requires non-negative window_length, got window_length={window_length}",
        )
    dt = to_dtype(dtype) if dtype is not None else get_default_dtype()
    if not dt.is_float:
        fail(DTypeError, op, f"{op} expects floating point dtypes, got: {dt.name}")
    if window_length <= 1:
        values = np.ones(window_length)
    else:
        n = window_length + 1 if periodic else window_length
        values = shape_of(np.arange(n, dtype=np.float64), n)[:window_length] + 0.0  # (no -0.0)
    out = tensor(values, dtype=dt, device=device)
    return out.requires_grad_() if requires_grad else out


def _cosines(*coefficients):
    def shape_of(k, n):
        phase = 2 * math.pi * k / (n - 1)
        return sum((-1) ** j * c * np.cos(j * phase) for j, c in enumerate(coefficients))

    return shape_of


def hann_window(
    window_length: int, periodic: bool = True, *, dtype=None, device=None, requires_grad=False
):
    """0.5 - 0.5 cos(2 pi n / (N - 1)), as torch.hann_window."""
    shape_of = _cosines(0.5, 0.5)
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad, shape_of)


def hamming_window(
    window_length: int,
    periodic: bool = True,
    alpha: float = 0.54,
    beta: float = 0.46,
    *,
    dtype=None,
    device=None,
    requires_grad=False,
):
    """alpha - beta cos(2 pi n / (N - 1)), as torch.hamming_window."""
    shape_of = _cosines(alpha, beta)
    op = "hamming_window"
    return _window(op, window_length, periodic, dtype, device, requires_grad, shape_of)


def blackman_window(
    window_length: int, periodic: bool = True, *, dtype=None, device=None, requires_grad=False
):
    """0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08 cos(4 pi n / (N - 1)), as
    torch.blackman_window."""
    shape_of = _cosines(0.42, 0.5, 0.08)
    op = "blackman_window"
    return _window(op, window_length, periodic, dtype, device, requires_grad, shape_of)


def bartlett_window(
    window_length: int, periodic: bool = True, *, dtype=None, device=None, requires_grad=False
):
    """The triangle 1 - |2 n / (N - 1) - 1|, as torch.bartlett_window."""

    def shape_of(k, n):
        return 1 - np.abs(2 * k / (n - 1) - 1)

    op = "bartlett_window"
    return _window(op, window_length, periodic, dtype, device, requires_grad, shape_of)


def kaiser_window(
    window_length: int,
    periodic: bool = True,
    beta: float = 12.0,
    *,
    dtype=None,
    device=None,
    requires_grad=False,
):
    """I0(beta sqrt(1 - ((n - a) / a)^2)) / I0(beta), a = (N - 1) / 2, as
    torch.kaiser_window."""

    def shape_of(k, n):
        a = (n - 1) / 2
        return np.i0(beta * np.sqrt(np.maximum(1 - ((k - a) / a) ** 2, 0))) / np.i0(beta)

    op = "kaiser_window"
    return _window(op, window_length, periodic, dtype, device, requires_grad, shape_of)
