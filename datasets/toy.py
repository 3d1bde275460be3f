"""MiniTorch's six 2-D toy datasets for binary classification.

Points are uniform in the unit square [0, 1]^2 (except `spiral`) and labelled
by a rule:

| name     | label 1 when                                             |
|----------|----------------------------------------------------------|
| simple   | x1 < 0.5                                                 |
| diag     | x1 + x2 < 0.5                                            |
| split    | x1 < 0.2 or x1 > 0.8                                     |
| xor      | x1 < 0.5 < x2 or x2 < 0.5 < x1                           |
| circle   | (x1 - 0.5)^2 + (x2 - 0.5)^2 > 0.1                        |
| spiral   | the point is on the second of two interleaved spirals    |

Each is a `TensorDataset` of (points float32 (N, 2), labels float32 (N,)),
also available as numpy arrays `.X` and `.y`.

>>> from fusegrad.datasets import toy
>>> ds = toy.xor(50, seed=0)
>>> ds.X.shape, ds.y.shape, len(ds)
((50, 2), (50,), 50)
"""

from __future__ import annotations

import numpy as np

from ..nn.data import TensorDataset
from ..nnapi import next_seed


class ToyDataset(TensorDataset):
    """Points `X` (N, 2) and 0/1 labels `y` (N,), both float32, with the dataset's name."""

    def __init__(self, name: str, X: np.ndarray, y: np.ndarray):
        self.name = name
        self.X = np.asarray(X, dtype=np.float32)
        self.y = np.asarray(y, dtype=np.float32)
        super().__init__(self.X, self.y)

    @property
    def N(self) -> int:
        return len(self.X)

    def __repr__(self) -> str:
        return f"ToyDataset({self.name!r}, N={self.N}, positives={int(self.y.sum())})"


def make_pts(n: int, seed: int | None = None) -> np.ndarray:
    """n points uniform in [0, 1)^2; drawn from the fg.manual_seed stream unless `seed` is given."""
    rng = np.random.default_rng(next_seed() if seed is None else seed)
    return rng.random((n, 2))


def simple(n: int = 50, seed: int | None = None) -> ToyDataset:
    X = make_pts(n, seed)
    return ToyDataset("simple", X, X[:, 0] < 0.5)


def diag(n: int = 50, seed: int | None = None) -> ToyDataset:
    X = make_pts(n, seed)
    return ToyDataset("diag", X, X[:, 0] + X[:, 1] < 0.5)


def split(n: int = 50, seed: int | None = None) -> ToyDataset:
    X = make_pts(n, seed)
    return ToyDataset("split", X, (X[:, 0] < 0.2) | (X[:, 0] > 0.8))


def xor(n: int = 50, seed: int | None = None) -> ToyDataset:
    X = make_pts(n, seed)
    left, low = X[:, 0] < 0.5, X[:, 1] < 0.5
    right, high = X[:, 0] > 0.5, X[:, 1] > 0.5
    return ToyDataset("xor", X, (left & high) | (right & low))


def circle(n: int = 50, seed: int | None = None) -> ToyDataset:
    X = make_pts(n, seed)
    r2 = (X[:, 0] - 0.5) ** 2 + (X[:, 1] - 0.5) ** 2
    return ToyDataset("circle", X, r2 > 0.1)


def spiral(n: int = 50, seed: int | None = None) -> ToyDataset:
    """Two interleaved spirals of n // 2 points each (deterministic; `seed` is unused).

    Spiral 0 is (t cos t, t sin t) / 20 + 0.5 for t = 10 i / (n // 2),
    i = 5 .. n // 2 + 4; spiral 1 swaps the coordinates and negates t.
    """
    half = n // 2
    t = 10.0 * np.arange(5, 5 + half) / half
    x, y = t * np.cos(t) / 20.0, t * np.sin(t) / 20.0
    # at -t: x(-t) = -x(t) and y(-t) = y(t); spiral 1 is (y(-t), x(-t))
    first = np.stack([x + 0.5, y + 0.5], axis=1)
    second = np.stack([y + 0.5, -x + 0.5], axis=1)
    labels = np.concatenate([np.zeros(half), np.ones(half)])
    return ToyDataset("spiral", np.concatenate([first, second]), labels)


DATASETS = {
    "simple": simple,
    "diag": diag,
    "split": split,
    "xor": xor,
    "circle": circle,
    "spiral": spiral,
}


def load(name: str, n: int = 50, seed: int | None = None) -> ToyDataset:
    """One of the six datasets by name (case-insensitive)."""
    key = name.lower()
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    return DATASETS[key](n, seed)
