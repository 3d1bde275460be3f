"""Large row inputs at special points, for the row ops' macro tests (softmax, log_softmax,
layer norm over 2^21 elements): a normal matrix whose first rows are a constant (ties, a
row's variance 0), -0.0, and alternating +-1, each test then putting its own infinities
and NaNs in the rows after; and an output gradient."""

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
