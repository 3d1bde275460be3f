"""Fractional max pooling (`F.fractional_max_pool2d/3d`, their `_with_indices` forms and
`FractionalMaxPool2d/3d`), as torch's: windows of `kernel_size` whose starts step by a
random fraction, so that `output_size` cells cover the input (Graham, 2015).

Along an axis of size `n`, kernel `k` and `out` cells, with a sample `u` (one per batch
entry, channel and axis, drawn uniform in [0, 1) unless `_random_samples` gives them):
`alpha = (n - k) / (out - 1)`, cell i < out - 1 starts at
`trunc((i + u) * alpha) - trunc(u * alpha)` and the last at `n - k`, computed in the
input's dtype as torch's CPU kernel does, so the same samples give torch's windows.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> x = fg.arange(25.0).reshape(1, 1, 5, 5)
>>> values, indices = F.fractional_max_pool2d(
...     x, 2, output_size=2, return_indices=True, _random_samples=fg.tensor([[[0.5, 0.5]]]))
>>> values.tolist(), indices.tolist()
([[[[6.0, 9.0], [21.0, 24.0]]]], [[[[6, 9], [21, 24]]]])
"""

from __future__ import annotations

import math

import numpy as np

from ..nnapi import (
    DimError,
    DTypeNotImplementedError,
    ShapeError,
    Tensor,
    autocast_op,
    cat,
    fail,
    full,
    rand,
    where,
)
from ..nnapi import index_arange as arange
from .conv import first_max_gradient
from .module import Module

_AXES = {2: ("height", "width"), 3: ("time", "height", "width")}


def _ints(v, n: int, name: str, op: str) -> tuple[int, ...]:
    """`v` as n ints (an int is repeated), refused as torch's C++ argument check does."""
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(a) for a in v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        fail(ShapeError, op, f"{name} must either be a single Int or tuple of Ints")
    return v


def _output_sizes(x: Tensor, output_size, output_ratio, n: int, op: str) -> tuple[int, ...]:
    if output_size is None and output_ratio is None:
        raise ValueError(f"{op} requires specifying either an output_size or an output_ratio")
    if output_size is not None:
        return _ints(output_size, n, "output_size", op)
    if n == 2 and len(output_ratio) > 2:  # (torch's len(): a bare number is a TypeError here)
        raise ValueError(f"{op} requires output_ratio to either be a single Int or tuple of Ints.")
    ratios = (output_ratio,) * n if isinstance(output_ratio, (int, float)) else output_ratio
    ratios = tuple(ratios) * n if len(ratios) == 1 else tuple(ratios)
    return tuple(int(x.shape[-n + a] * ratios[a]) for a in range(n))


def _check_samples(samples: Tensor, x: Tensor, n: int, op: str) -> None:
    if samples.ndim != 3:
        fail(ShapeError, op, f"expects _random_samples to have 3 dimensions, got {samples.ndim}")
    if samples.shape[2] != n:
        fail(ShapeError, op, f"expects _random_samples.size(2) == {n}, got {samples.shape[2]}")
    if samples.shape[0] < x.shape[0]:
        fail(
            ShapeError,
            op,
            f"expects _random_samples.size(0) ({samples.shape[0]}) no less than the input's "
            f"batch size ({x.shape[0]})",
        )
    if samples.shape[1] != x.shape[1]:
        fail(
            ShapeError,
            op,
            f"expects _random_samples.size(1) ({samples.shape[1]}) to equal the input's "
            f"channels ({x.shape[1]})",
        )
    if samples.dtype != x.dtype:
        fail(
            ShapeError,
            op,
            f"expects _random_samples of the input's dtype {x.dtype}, got {samples.dtype}",
        )


def _starts(u: Tensor, size: int, kernel: int, out: int) -> Tensor:
    """The window starts along one axis, (N, C, out) int64, from samples u (N, C): torch's
    intervals, each product and sum rounded to the input's dtype as its kernel's are."""
    last = full((*u.shape, 1), size - kernel, dtype=arange(1).dtype, device=u.device)
    if out <= 1:
        return last[..., :out]
    # alpha as the kernel's scalar_t division of two ints: a float32 quotient rounded to
    # the dtype for 16 bits
    if u.dtype.itemsize == 8:
        quotient = (size - kernel) / (out - 1)
    else:
        quotient = float(np.float32(size - kernel) / np.float32(out - 1))
    alpha = full((), quotient, dtype=u.dtype, device=u.device)
    i = arange(out - 1).to(u.dtype)
    u = u[..., None]
    if u.dtype.itemsize == 2:
        # torch's Half and BFloat16 round each sum and product; a fused kernel would
        # round only its output, so each is rounded by an explicit cast
        dtype = u.dtype
        i, u, alpha = i.float(), u.float(), alpha.float()
        ends = ((i + u).to(dtype).float() * alpha).to(dtype).float()
        offset = (u * alpha).to(dtype).float()
    else:
        ends, offset = (i + u) * alpha, u * alpha
    steps = ends.trunc().long() - offset.trunc().long()
    return cat([steps, last], -1)


@autocast_op("fractional_max_pool2d")
def _pool2d(x: Tensor, kernel, sizes, samples: Tensor, op: str):
    return _pool(x, kernel, sizes, samples, 2, op)


@autocast_op("fractional_max_pool3d")
def _pool3d(x: Tensor, kernel, sizes, samples: Tensor, op: str):
    return _pool(x, kernel, sizes, samples, 3, op)


def _pool(x: Tensor, kernel, sizes, samples: Tensor, n: int, op: str):
    """(values, indices) of a batched input (N, C, *spatial) with its samples."""
    _check_samples(samples, x, n, op)
    lead = tuple(x.shape[:2])
    spatial = tuple(x.shape[2:])
    plane = math.prod(spatial)
    # each window cell's flat position in its plane: sum over axes of (start + offset) * stride
    index = None
    stride = plane
    for a in range(n):
        stride //= spatial[a]
        # torch's 2-d kernel reads W's sample first, its 3-d one T's
        column = 1 - a if n == 2 else a
        start = _starts(samples[: lead[0], :, column], spatial[a], kernel[a], sizes[a])
        shape = [1] * (2 * n)
        shape[a] = sizes[a]
        start = start.reshape(*lead, *shape)
        shape[a], shape[n + a] = 1, kernel[a]
        term = (start + arange(kernel[a]).reshape(*shape)) * stride
        index = term if index is None else index + term
    index = index.expand(*lead, *sizes, *kernel).reshape(*lead, *sizes, math.prod(kernel))
    flat = x.reshape(*lead, plane)
    win = flat.gather(-1, index.reshape(*lead, math.prod(index.shape[2:]))).reshape(index.shape)
    best = win.amax(-1)
    if best.requires_grad:  # all of it to the first maximum, or to the last NaN (torch's)
        best = first_max_gradient(win, best, 1)
    first = where(win == best[..., None], index, plane).amin(-1)
    last_nan = where(win != win, index, -1).amax(-1)
    return best, where(best != best, last_nan, first)


def _fractional_max_pool(x, kernel_size, output_size, output_ratio, samples, n: int):
    op = f"fractional_max_pool{n}d"
    if x.ndim < n + 1:
        fail(DimError, op, f"expects a {n + 1}-d or {n + 2}-d input, got shape {x.shape}")
    sizes = _output_sizes(x, output_size, output_ratio, n, op)
    kernel = _ints(kernel_size, n, "kernel_size", op)
    if any(k <= 0 for k in kernel):
        fail(
            ShapeError,
            op,
            f"kernel size should be greater than zero, but got {'x'.join(map(str, kernel))}",
        )
    if x.ndim > n + 2:
        fail(ShapeError, op, f"expects a {n + 1}-d or {n + 2}-d input, got shape {x.shape}")
    if not x.dtype.is_float:
        fail(DTypeNotImplementedError, op, f"not implemented for {x.dtype}")
    for dim in range(x.ndim - n - 1, x.ndim):
        if x.shape[dim] == 0:
            fail(
                ShapeError,
                op,
                f"expects non-zero sizes for the non-batch dimensions, got {x.shape} "
                f"with dimension {dim} empty",
            )
    for name, out, k, size in zip(_AXES[n], sizes, kernel, x.shape[-n:]):
        if out < 0:
            fail(ShapeError, op, f"output {name} {out} is negative")
        # (torch's 3-d form, as of its FractionalMaxPool3d boundary checks, also refuses a
        # last window that ends at the input's end, which the 2-d form takes)
        if out + k - 1 > size or (n == 3 and out + k - 1 == size):
            fail(ShapeError, op, f"pool {name} {k} too large relative to input {name} {size}")
    batched = x if x.ndim == n + 2 else x[None]
    if samples is None:
        samples = rand(batched.shape[0], batched.shape[1], n, dtype=x.dtype, device=x.device)
    pool = _pool2d if n == 2 else _pool3d
    values, indices = pool(batched, kernel, sizes, samples, op)
    if x.ndim == n + 1:
        return values[0], indices[0]
    return values, indices


def fractional_max_pool2d_with_indices(
    input: Tensor,
    kernel_size,
    output_size=None,
    output_ratio=None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """`F.fractional_max_pool2d(..., return_indices=True)`: always (values, indices), each
    index flat into its H*W plane (the first maximum on ties, the last NaN), as torch's.

    As torch 2.14's, `output_ratio` must be a sequence here (a bare number is a TypeError);
    the module takes a number.
    """
    return _fractional_max_pool(input, kernel_size, output_size, output_ratio, _random_samples, 2)


def fractional_max_pool3d_with_indices(
    input: Tensor,
    kernel_size,
    output_size=None,
    output_ratio=None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """`F.fractional_max_pool3d(..., return_indices=True)`: always (values, indices), each
    index flat into its T*H*W volume."""
    return _fractional_max_pool(input, kernel_size, output_size, output_ratio, _random_samples, 3)


def fractional_max_pool2d(
    input: Tensor,
    kernel_size,
    output_size=None,
    output_ratio=None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
):
    """Max over (N, C, H, W) or (C, H, W) in `kernel_size` windows at random fractional
    steps, into `output_size` cells (or `output_ratio` of the input's size, rounded down);
    `_random_samples` (N, C, 2), in the input's dtype, fixes the steps (W's sample first).
    With `return_indices`, also each maximum's flat index into its plane."""
    values, indices = fractional_max_pool2d_with_indices(
        input, kernel_size, output_size, output_ratio, return_indices, _random_samples
    )
    return (values, indices) if return_indices else values


def fractional_max_pool3d(
    input: Tensor,
    kernel_size,
    output_size=None,
    output_ratio=None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
):
    """`fractional_max_pool2d` over (N, C, T, H, W) or (C, T, H, W); `_random_samples`
    is (N, C, 3)."""
    values, indices = fractional_max_pool3d_with_indices(
        input, kernel_size, output_size, output_ratio, return_indices, _random_samples
    )
    return (values, indices) if return_indices else values


class FractionalMaxPool2d(Module):
    """`F.fractional_max_pool2d` as a module, as torch.nn.FractionalMaxPool2d: exactly one
    of `output_size` and `output_ratio` (each ratio in (0, 1)); `_random_samples`, when
    given, is a buffer."""

    n = 2

    def __init__(
        self,
        kernel_size,
        output_size=None,
        output_ratio=None,
        return_indices: bool = False,
        _random_samples=None,
    ):
        super().__init__()
        name = type(self).__name__
        if self.n == 3 and any(k <= 0 for k in _ints(kernel_size, 3, "kernel_size", name)):
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        self.kernel_size = _ints(kernel_size, self.n, "kernel_size", name)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = None if output_size is None else _ints(output_size, self.n, "", name)
        self.output_ratio = None
        if output_ratio is not None:
            ratios = output_ratio if isinstance(output_ratio, (tuple, list)) else [output_ratio]
            self.output_ratio = tuple(ratios) * self.n if len(ratios) == 1 else tuple(ratios)
        if output_size is None and output_ratio is None:
            raise ValueError(
                f"{name} requires specifying either an output size, or a pooling ratio"
            )
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input: Tensor):
        pool = fractional_max_pool2d if self.n == 2 else fractional_max_pool3d
        return pool(
            input,
            self.kernel_size,
            self.output_size,
            self.output_ratio,
            self.return_indices,
            _random_samples=self._random_samples,
        )


class FractionalMaxPool3d(FractionalMaxPool2d):
    """`F.fractional_max_pool3d` as a module, as torch.nn.FractionalMaxPool3d."""

    n = 3
