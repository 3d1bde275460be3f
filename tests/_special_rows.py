"""Large row inputs at special points, for the row ops' macro tests (softmax, log_softmax,
layer norm over 2^21 elements): a normal matrix whose first rows are a constant (ties, a
row's variance 0), -0.0, and alternating +-1, each test then putting its own infinities
and NaNs in the rows after; and an output gradient. Also `special_values`: small arrays
with the special points strewn through them."""

from __future__ import annotations

import numpy as np


def special_rows(rows: int, cols: int, constant: float, seed: int):
    """(x, g): float32 (rows, cols) inputs whose rows 0-2 are `constant`, -0.0 and +-1
    ties, the rest standard normal; g a standard normal output gradient."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[0] = constant
    x[1] = -0.0
    x[2] = np.where(np.arange(cols) % 2 == 0, 1.0, -1.0)
    return x, rng.standard_normal((rows, cols)).astype(np.float32)


def special_values(rng, *shape, nonfinite: bool = False) -> np.ndarray:
    """Random float32 values of `shape` with the special points mixed in: 0, -0, +-1 and
    ties at 0.5 (the relu's boundary in a product's epilogue); with `nonfinite`, a NaN and
    a -inf as well."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::7] = 0.0
    flat[1::11] = -0.0
    flat[2::13] = 1.0
    flat[3::17] = -1.0
    flat[4::19] = 0.5
    if nonfinite and flat.size:
        flat[5 % flat.size] = np.nan
        flat[6 % flat.size] = -np.inf
    return x
