"""MNIST from the canonical gzipped IDX files, read with numpy (no network, no extra package).

>>> from fusegrad.datasets.mnist import load_mnist
>>> train_x, train_y, test_x, test_y = load_mnist()
>>> train_x.shape, train_x.dtype, test_y.shape
((60000, 28, 28), dtype('uint8'), (10000,))

The files ship in the repository under `examples/data/mnist/`; point `root`
(or the `FUSEGRAD_DATA` environment variable) at another folder holding the
same four files to read them from there.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}


def default_root() -> str:
    """`$FUSEGRAD_DATA/mnist` if set, else the copy shipped in the repository's examples/data."""
    env = os.environ.get("FUSEGRAD_DATA")
    if env:
        return os.path.join(env, "mnist")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(repo, "examples", "data", "mnist")


def read_idx(path: str) -> np.ndarray:
    """An IDX file (optionally gzipped) as a numpy array of its declared shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number)")
    dtypes = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if data[2] not in dtypes:
        raise ValueError(f"{path}: unknown IDX element type 0x{data[2]:02x}")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    offset = 4 + 4 * ndim
    arr = np.frombuffer(data, dtype=dtypes[data[2]], offset=offset)
    if arr.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {arr.size} elements")
    return arr.reshape(shape)


def load_mnist(root: str | None = None):
    """(train_images, train_labels, test_images, test_labels) as uint8 arrays."""
    root = root or default_root()
    missing = [f for f in FILES.values() if not os.path.exists(os.path.join(root, f))]
    if missing:
        raise FileNotFoundError(
            f"MNIST files {missing} not found in {root}; pass root= or set FUSEGRAD_DATA"
        )
    return tuple(read_idx(os.path.join(root, FILES[k])) for k in FILES)
