"""What `import torchvision` gives a script run by `python -m fusegrad`: MNIST over the
shipped copy, the tensor transforms and the geometric ones (`Resize`, `CenterCrop`,
`RandomCrop`, `RandomHorizontalFlip`: datasets/torchvision_transforms.py), `save_image`,
and the ResNets of `torchvision.models` (`datasets/torchvision_models.py`).

The import hook of `fusegrad/torch_shim.py` maps `torchvision`, `torchvision.datasets`,
`torchvision.transforms`, `torchvision.utils` and `torchvision.models` to the namespaces
at the end of this file (`torchvision`, `datasets`, `transforms`, `utils`, `models`); a
name they lack is a gap the hook reports (`torchvision.datasets.FashionMNIST is not in
fusegrad ...`). Nothing is downloaded: `MNIST` reads the IDX files under `root/MNIST/raw`
if they are there and else the copy the repository ships (`fusegrad.datasets.mnist`).

There is no PIL here, so where torchvision hands a transform a PIL image, this hands it
the numpy array `np.asarray(image)` would give (uint8, H x W for MNIST's grey images);
`ToTensor` takes either.

>>> to_tensor = Compose([ToTensor(), Normalize((0.5,), (0.5,))])
>>> image = np.array([[0, 255]], np.uint8)  # H x W, as MNIST's items
>>> to_tensor(image).tolist()
[[[-1.0, 1.0]]]
"""

from __future__ import annotations

import math
import os
import struct
import types
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from fusegrad import Tensor, as_tensor, from_numpy, get_default_dtype

from ..nn.data import Dataset
from . import torchvision_models as _models
from .mnist import FILES, default_root, load_mnist, read_idx
from .torchvision_transforms import (
    CenterCrop,
    InterpolationMode,
    RandomCrop,
    RandomHorizontalFlip,
    Resize,
)

# ---------------------------------------------------------------- datasets


class MNIST(Dataset):
    """torchvision's `datasets.MNIST(root, train=True, transform=None,
    target_transform=None, download=False)`: (image, label) pairs, 60,000 to train on
    and 10,000 to test.

    The four IDX files are read from `root/MNIST/raw` (gzipped or not) where they are,
    else from the repository's copy (`$FUSEGRAD_DATA/mnist` if set). `download=True` is
    accepted and downloads nothing. An item is `(transform(image), target_transform(label))`
    with the image a uint8 28 x 28 numpy array (where torchvision has a PIL image) and the
    label an int. `data` (uint8, N x 28 x 28) and `targets` (int64, N) are tensors, as
    torchvision's.
    """

    classes = [f"{d} - {name}" for d, name in enumerate(
        "zero one two three four five six seven eight nine".split())]  # fmt: skip

    def __init__(
        self,
        root: str | os.PathLike,
        train: bool = True,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        download: bool = False,
    ):
        self.root = os.fspath(root) if root is not None else None
        self.train, self.transform, self.target_transform = train, transform, target_transform
        images, labels = _read_mnist(self.root, train)
        self._images, self._labels = images, labels.astype(np.int64)
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    @property
    def data(self) -> Tensor:
        return from_numpy(self._images)

    @property
    def targets(self) -> Tensor:
        return from_numpy(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, index: int):
        image, target = self._images[index], int(self._labels[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def __repr__(self) -> str:
        split = "Train" if self.train else "Test"
        return f"Dataset MNIST\n    Number of datapoints: {len(self)}\n    Split: {split}"


def _read_mnist(root: str | None, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of one split: from `root/MNIST/raw` if it holds them, else the
    shipped copy."""
    keys = ("train_images", "train_labels") if train else ("test_images", "test_labels")
    if root is not None:
        raw = os.path.join(root, "MNIST", "raw")
        paths = []
        for key in keys:
            found = [p for p in (os.path.join(raw, FILES[key]),
                                 os.path.join(raw, FILES[key][: -len(".gz")]))
                     if os.path.exists(p)]  # fmt: skip
            paths.append(found[0] if found else None)
        if all(paths):
            return read_idx(paths[0]), read_idx(paths[1])
    try:
        train_x, train_y, test_x, test_y = load_mnist()
    except FileNotFoundError as e:
        raise RuntimeError(
            f"Dataset not found: MNIST is neither under {root!r}/MNIST/raw nor in the "
            f"repository's copy ({default_root()}); fusegrad downloads nothing ({e})"
        ) from None
    return (train_x, train_y) if train else (test_x, test_y)


class FakeData(Dataset):
    """torchvision's `datasets.FakeData(size=1000, image_size=(3, 224, 224),
    num_classes=10, transform=None, target_transform=None, random_offset=0)`: random
    images and labels, item `i` drawn from a generator seeded with `i + random_offset`
    (so an item is the same each time it is read; the draws are not torch's). An image
    is a uint8 H x W x C numpy array (H x W for one channel), as `np.asarray` of
    torchvision's PIL image; the label an int."""

    def __init__(
        self,
        size: int = 1000,
        image_size: Sequence[int] = (3, 224, 224),
        num_classes: int = 10,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        random_offset: int = 0,
    ):
        self.size, self.image_size, self.num_classes = size, tuple(image_size), num_classes
        self.transform, self.target_transform = transform, target_transform
        self.random_offset = random_offset

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        if not -self.size <= index < self.size:
            raise IndexError(f"FakeData index {index} out of range for {self.size} items")
        rng = np.random.default_rng(index % self.size + self.random_offset)
        channels, height, width = self.image_size
        image = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
        image = image[:, :, 0] if channels == 1 else image
        target = int(rng.integers(0, self.num_classes))
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


# ---------------------------------------------------------------- transforms


class Compose:
    """torchvision's `transforms.Compose(transforms)`: each transform in turn.

    >>> Compose([Lambda(lambda x: x + 1), Lambda(lambda x: 2 * x)])(3)
    8
    """

    def __init__(self, transforms: Sequence[Callable]):
        self.transforms = list(transforms)

    def __call__(self, value):
        for transform in self.transforms:
            value = transform(value)
        return value

    def __repr__(self) -> str:
        inner = "".join(f"\n    {t}" for t in self.transforms)
        return f"Compose({inner}\n)"


class ToTensor:
    """torchvision's `transforms.ToTensor()`: a numpy image, H x W x C or H x W, to a
    C x H x W tensor; uint8 values are divided by 255 into the default float dtype,
    other dtypes are kept as they are (as torchvision does for an ndarray).

    >>> ToTensor()(np.zeros((4, 5, 3), np.uint8)).shape
    (3, 4, 5)
    """

    def __call__(self, pic) -> Tensor:
        if isinstance(pic, Tensor) or not isinstance(pic, np.ndarray):
            raise TypeError(f"pic should be PIL Image or ndarray. Got {type(pic)}")
        if pic.ndim not in (2, 3):
            raise ValueError(f"pic should be 2/3 dimensional. Got {pic.ndim} dimensions.")
        if pic.ndim == 2:
            pic = pic[:, :, None]
        image = from_numpy(np.ascontiguousarray(pic.transpose(2, 0, 1)))
        if pic.dtype == np.uint8:
            return image.to(get_default_dtype()).div(255)
        return image

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """torchvision's `transforms.Normalize(mean, std, inplace=False)`: each channel of a
    float tensor (..., C, H, W) less its mean, over its standard deviation.

    >>> Normalize((1.0,), (2.0,))(as_tensor([[[3.0]]])).tolist()
    [[[1.0]]]
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False):
        self.mean, self.std, self.inplace = mean, std, inplace

    def __call__(self, tensor: Tensor) -> Tensor:
        if not isinstance(tensor, Tensor):
            raise TypeError(f"Input tensor should be a torch tensor. Got {type(tensor)}.")
        if not tensor.is_floating_point():
            raise TypeError(f"Input tensor should be a float tensor. Got {tensor.dtype}.")
        if tensor.ndim < 3:
            raise ValueError(
                "Expected tensor to be a tensor image of size (..., C, H, W). Got "
                f"tensor.size() = {tuple(tensor.shape)}."
            )
        mean = as_tensor(self.mean, dtype=tensor.dtype, device=tensor.device)
        std = as_tensor(self.std, dtype=tensor.dtype, device=tensor.device)
        if bool((std == 0).any()):
            raise ValueError(
                f"std evaluated to zero after conversion to {tensor.dtype}, leading to "
                "division by zero."
            )
        mean = mean.view(-1, 1, 1) if mean.ndim == 1 else mean
        std = std.view(-1, 1, 1) if std.ndim == 1 else std
        if self.inplace:
            return tensor.sub_(mean).div_(std)
        return tensor.sub(mean).div(std)

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


class Lambda:
    """torchvision's `transforms.Lambda(lambd)`: a function as a transform."""

    def __init__(self, lambd: Callable):
        if not callable(lambd):
            raise TypeError(f"Argument lambd should be callable, got {type(lambd).__name__!r}")
        self.lambd = lambd

    def __call__(self, value):
        return self.lambd(value)

    def __repr__(self) -> str:
        return "Lambda()"


# ---------------------------------------------------------------- utils


def make_grid(
    tensor,
    nrow: int = 8,
    padding: int = 2,
    normalize: bool = False,
    value_range: tuple[float, float] | None = None,
    scale_each: bool = False,
    pad_value: float = 0.0,
) -> Tensor:
    """torchvision's `utils.make_grid`: a batch of images (B x C x H x W, or a list of
    C x H x W) laid out `nrow` to a row, `padding` pixels of `pad_value` apart; grey
    images become three channels. `normalize` maps `value_range` (default: the min and
    max, of each image with `scale_each`) to [0, 1]. Computed on the host: the grid is a
    picture, not part of a graph.

    >>> make_grid(np.zeros((3, 1, 2, 2), np.float32), nrow=2, padding=1).shape
    (3, 7, 7)
    """
    if isinstance(tensor, (list, tuple)):
        images = np.stack([_host(t) for t in tensor])
    else:
        images = _host(tensor).copy()
    if images.ndim == 2:
        images = images[None]
    if images.ndim == 3:
        images = images[None]
    if images.ndim != 4:
        raise ValueError(f"make_grid takes images of 2 to 4 dims, got shape {images.shape}")
    if images.shape[1] == 1:
        images = np.concatenate([images] * 3, axis=1)
    if normalize:
        parts = images if scale_each else [images]
        for part in parts:
            low, high = value_range if value_range is not None else (part.min(), part.max())
            np.clip(part, low, high, out=part)
            part -= low
            part /= max(high - low, 1e-5)
    if images.shape[0] == 1:
        return from_numpy(images[0])
    count, channels, height, width = images.shape
    columns = min(nrow, count)
    rows = math.ceil(count / columns)
    cell_h, cell_w = height + padding, width + padding
    grid = np.full((channels, cell_h * rows + padding, cell_w * columns + padding),
                   pad_value, images.dtype)  # fmt: skip
    for k in range(count):
        y, x = divmod(k, columns)
        top, left = y * cell_h + padding, x * cell_w + padding
        grid[:, top : top + height, left : left + width] = images[k]
    return from_numpy(grid)


def save_image(tensor, fp, format: str | None = None, **grid_options) -> None:
    """torchvision's `utils.save_image(tensor, fp, nrow=8, padding=2, normalize=False,
    value_range=None, scale_each=False, pad_value=0, format=None)`: `make_grid` of the
    images, values in [0, 1] scaled to bytes as torchvision rounds them, written as a
    PNG (the one format here) to a path or a binary file."""
    name = os.fspath(fp) if isinstance(fp, (str, os.PathLike)) else None
    kind = (format or (os.path.splitext(name)[1][1:] if name else "png")).lower()
    if kind != "png":
        raise ValueError(
            f"save_image writes PNG only in fusegrad (no PIL); asked for {kind!r} ({fp!r})"
        )
    grid = make_grid(tensor, **grid_options).numpy().astype(np.float32)
    pixels = np.clip(grid * 255 + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0)
    data = _png(np.ascontiguousarray(pixels))
    if name is None:
        fp.write(data)
    else:
        with open(name, "wb") as f:
            f.write(data)


def _host(image) -> np.ndarray:
    if isinstance(image, Tensor):
        return image.detach().cpu().numpy().astype(np.float32, copy=False)
    return np.asarray(image, dtype=np.float32)


def _png(pixels: np.ndarray) -> bytes:
    """An 8-bit RGB (or grey, for H x W x 1) PNG of an H x W x C uint8 array."""
    height, width, channels = pixels.shape
    color = {1: 0, 3: 2, 4: 6}[channels]
    rows = np.concatenate([np.zeros((height, 1), np.uint8), pixels.reshape(height, -1)], 1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes()))
        + chunk(b"IEND", b"")
    )


# ---------------------------------------------------------------- the modules' namespaces


def _namespace(name: str, doc: str, *members) -> types.ModuleType:
    namespace = types.ModuleType(f"fusegrad's torchvision.{name}".rstrip("."), doc)
    namespace.__file__ = __file__
    namespace.__dict__.update({m.__name__: m for m in members})
    return namespace


torchvision = _namespace("", "torchvision's stand-in: datasets, transforms, utils, models.")
torchvision.__version__ = "0.0+fusegrad"
datasets = _namespace("datasets", "torchvision.datasets: MNIST and FakeData.", MNIST, FakeData)
transforms = _namespace(
    "transforms",
    "torchvision.transforms: the transforms of tensors and numpy images.",
    Compose,
    ToTensor,
    Normalize,
    Lambda,
    Resize,
    CenterCrop,
    RandomCrop,
    RandomHorizontalFlip,
)
transforms.InterpolationMode = InterpolationMode
utils = _namespace("utils", "torchvision.utils: make_grid, save_image.", make_grid, save_image)
models = _namespace(
    "models",
    "torchvision.models: the ResNets (datasets/torchvision_models.py), weights=None only.",
    *[getattr(_models, name) for name in _models.__all__],
)
