"""Float64 numpy references of softmax and log_softmax (NaN rows where a row is all -inf,
as PyTorch's), for the row-kernel tests."""

from __future__ import annotations

import numpy as np


def softmax64(x: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)


def log_softmax64(x: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        shifted = x - x.max(axis, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))
