"""torchvision's stand-in (fusegrad.datasets.torchvision_shim): MNIST over the shipped
copy or a root's own files, the transforms with torchvision's semantics, make_grid and
save_image; numpy is the oracle, and torchvision itself where it is installed."""

from __future__ import annotations

import gzip
import io
import struct
import zlib

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.data import DataLoader
from fusegrad.datasets import torchvision_shim as tv
from fusegrad.datasets.mnist import load_mnist


@pytest.fixture(scope="module")
def mnist_arrays():
    return load_mnist()


# ---------------------------------------------------------------- transforms


def test_to_tensor_moves_channels_first_and_scales_only_bytes():
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, (4, 5), dtype=np.uint8)
    out = tv.ToTensor()(grey)
    assert out.shape == (1, 4, 5) and out.dtype == fg.float32
    np.testing.assert_allclose(out.numpy()[0], grey / np.float32(255), rtol=1e-7)
    color = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    np.testing.assert_allclose(
        tv.ToTensor()(color).numpy(), color.transpose(2, 0, 1) / np.float32(255), rtol=1e-7
    )
    floats = rng.standard_normal((4, 5, 2)).astype(np.float32)  # kept, not divided
    np.testing.assert_array_equal(tv.ToTensor()(floats).numpy(), floats.transpose(2, 0, 1))
    with pytest.raises(TypeError, match="PIL Image or ndarray"):
        tv.ToTensor()(fg.zeros(2, 2))
    with pytest.raises(ValueError, match="2/3 dimensional"):
        tv.ToTensor()(np.zeros(3, np.uint8))


def test_normalize_takes_each_channels_mean_and_std():
    x = np.random.default_rng(1).random((2, 3, 4, 4), dtype=np.float32)
    mean, std = (0.1, 0.2, 0.3), (0.5, 1.5, 2.0)
    expected = (x - np.float32(mean)[:, None, None]) / np.float32(std)[:, None, None]
    t = fg.from_numpy(x.copy())
    np.testing.assert_allclose(tv.Normalize(mean, std)(t).numpy(), expected, rtol=1e-6)
    np.testing.assert_array_equal(t.numpy(), x)  # not in place by default
    tv.Normalize(mean, std, inplace=True)(t)
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-6)
    with pytest.raises(TypeError, match="float tensor. Got fusegrad.uint8"):
        tv.Normalize((0,), (1,))(fg.zeros(1, 2, 2, dtype=fg.uint8))
    with pytest.raises(ValueError, match="division by zero"):
        tv.Normalize((0,), (0,))(fg.zeros(1, 2, 2))
    with pytest.raises(ValueError, match=r"\(\.\.\., C, H, W\)"):
        tv.Normalize((0,), (1,))(fg.zeros(2, 2))


def test_normalize_is_differentiable():
    x = fg.ones(1, 2, 2, requires_grad=True)
    tv.Normalize((0.0,), (4.0,))(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((1, 2, 2), 0.25))


def test_to_tensor_and_normalize_at_special_points():
    # bytes 0 and 255 are exactly 0 and 1; an empty image keeps its shape
    edges = tv.ToTensor()(np.array([[0, 1, 254, 255]], np.uint8)).numpy()[0, 0]
    assert edges[0] == 0.0 and edges[3] == 1.0 and edges[1] == np.float32(1) / np.float32(255)
    empty = tv.ToTensor()(np.zeros((0, 3), np.uint8))
    assert empty.shape == (1, 0, 3) and empty.dtype == fg.float32
    assert tv.Normalize((1.0,), (1.0,))(fg.zeros(1, 0, 2)).shape == (1, 0, 2)
    # signed zeros, infinities and NaN through a negative std, as torch's sub and div;
    # the gradient is 1 / std everywhere
    points = np.array([[[-0.0, 0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]]], np.float32)
    x = fg.tensor(points, requires_grad=True)
    y = tv.Normalize((0.0,), (-1.0,))(x)
    got = y.numpy()[0, 0]
    want = (points - np.float32(0.0)) / np.float32(-1.0)
    np.testing.assert_array_equal(got, want[0, 0])
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want[0, 0]))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(points.shape, -1.0, np.float32))


def test_compose_runs_in_order_and_lambda_checks_its_argument():
    pipeline = tv.Compose([tv.ToTensor(), tv.Lambda(lambda t: t.view(-1))])
    assert pipeline(np.zeros((2, 3), np.uint8)).shape == (6,)
    assert "ToTensor()" in repr(pipeline)
    with pytest.raises(TypeError, match="callable"):
        tv.Lambda(3)


# ---------------------------------------------------------------- datasets


def test_mnist_items_are_an_image_and_an_int_label(mnist_arrays):
    _, _, test_x, test_y = mnist_arrays
    dataset = tv.MNIST("no/such/root", train=False, download=True)  # the shipped copy
    assert len(dataset) == 10_000 and len(tv.MNIST("no/such/root")) == 60_000
    image, label = dataset[3]
    assert isinstance(label, int) and label == int(test_y[3])
    np.testing.assert_array_equal(image, test_x[3])
    assert dataset.data.dtype == fg.uint8 and dataset.data.shape == (10_000, 28, 28)
    assert dataset.targets.dtype == fg.int64
    np.testing.assert_array_equal(dataset.targets.numpy(), test_y)
    assert dataset.classes[7] == "7 - seven"


def test_mnist_transforms_and_a_dataloader_batch_as_torchvisions(mnist_arrays):
    _, _, test_x, test_y = mnist_arrays
    transform = tv.Compose([tv.ToTensor(), tv.Normalize((0.1307,), (0.3081,))])
    dataset = tv.MNIST(".", train=False, transform=transform, target_transform=lambda y: y + 1)
    images, labels = next(iter(DataLoader(dataset, batch_size=5)))
    assert images.shape == (5, 1, 28, 28) and images.dtype == fg.float32
    assert labels.dtype == fg.int64
    np.testing.assert_array_equal(labels.numpy(), test_y[:5] + 1)
    expected = (test_x[:5, None] / np.float32(255) - np.float32(0.1307)) / np.float32(0.3081)
    np.testing.assert_allclose(images.numpy(), expected, rtol=1e-5, atol=1e-6)


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    return header + array.astype(np.uint8).tobytes()


def test_mnist_reads_a_roots_own_files_gzipped_or_not(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = np.arange(2 * 28 * 28).reshape(2, 28, 28) % 256
    (raw / "t10k-images-idx3-ubyte").write_bytes(_idx(images))
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(np.array([4, 2]))))
    dataset = tv.MNIST(tmp_path, train=False)
    assert len(dataset) == 2 and dataset[1][1] == 2
    np.testing.assert_array_equal(dataset[1][0], images[1])
    assert len(tv.MNIST(tmp_path, train=True)) == 60_000  # its train files are not there


def test_fake_data_is_the_same_each_read_and_of_the_asked_shape():
    dataset = tv.FakeData(size=4, image_size=(3, 6, 5), num_classes=3, transform=tv.ToTensor())
    (a, la), (b, lb) = dataset[2], dataset[2]
    assert a.shape == (3, 6, 5) and 0 <= la < 3 and la == lb
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert 0.0 <= a.numpy().min() and a.numpy().max() <= 1.0
    assert tv.FakeData(2, (1, 4, 4))[0][0].shape == (4, 4)
    with pytest.raises(IndexError):
        dataset[4]


# ---------------------------------------------------------------- utils


def _expected_grid(images, nrow, padding, pad_value):
    count, channels, height, width = images.shape
    columns, rows = min(nrow, count), -(-count // min(nrow, count))
    grid = np.full((3, rows * (height + padding) + padding, columns * (width + padding) +
                    padding), pad_value, np.float32)  # fmt: skip
    for k in range(count):
        y, x = divmod(k, columns)
        top, left = padding + y * (height + padding), padding + x * (width + padding)
        grid[:, top : top + height, left : left + width] = images[k]  # 1 channel broadcasts
    return grid


def test_make_grid_lays_images_out_in_rows():
    images = np.random.default_rng(2).random((5, 1, 3, 4), dtype=np.float32)
    grid = tv.make_grid(fg.from_numpy(images), nrow=2, padding=1, pad_value=0.5)
    np.testing.assert_array_equal(grid.numpy(), _expected_grid(images, 2, 1, 0.5))
    low, high = images.min(), images.max()
    normalized = tv.make_grid(fg.from_numpy(images), normalize=True).numpy()
    np.testing.assert_allclose(normalized, _expected_grid((images - low) / (high - low), 8, 2, 0),
                               rtol=1e-6)  # fmt: skip
    assert tv.make_grid(fg.zeros(1, 1, 3, 4)).shape == (3, 3, 4)  # one image: no padding


def _read_png(data: bytes) -> np.ndarray:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, shape = 8, b"", None
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert (depth, color) == (8, 2)
            shape = (height, width, 3)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(shape[0], -1)
    assert (rows[:, 0] == 0).all()  # no row filter
    return rows[:, 1:].reshape(shape)


def test_save_image_writes_the_grid_as_an_rgb_png(tmp_path):
    images = np.random.default_rng(3).random((3, 1, 4, 5), dtype=np.float32)
    path = tmp_path / "grid.png"
    tv.save_image(fg.from_numpy(images), str(path), nrow=3)
    expected = np.clip(_expected_grid(images, 3, 2, 0) * 255 + 0.5, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(_read_png(path.read_bytes()), expected.transpose(1, 2, 0))
    buffer = io.BytesIO()
    tv.save_image(fg.from_numpy(images), buffer, format="png", nrow=3)
    assert buffer.getvalue() == path.read_bytes()
    with pytest.raises(ValueError, match="PNG only"):
        tv.save_image(fg.from_numpy(images), str(tmp_path / "grid.jpg"))


def test_the_transforms_and_grid_match_torchvisions():
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    image = np.random.default_rng(4).integers(0, 256, (6, 7, 3), dtype=np.uint8)
    steps = [(0.4, 0.5, 0.6), (0.2, 0.3, 0.4)]
    ours = tv.Compose([tv.ToTensor(), tv.Normalize(*steps)])(image).numpy()
    T = torchvision.transforms  # noqa: N806
    theirs = T.Compose([T.ToTensor(), T.Normalize(*steps)])(image).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    batch = np.random.default_rng(5).random((5, 1, 3, 4), dtype=np.float32)
    for options in ({"nrow": 2, "padding": 1, "pad_value": 0.5}, {"normalize": True}):
        ours = tv.make_grid(fg.from_numpy(batch), **options).numpy()
        theirs = torchvision.utils.make_grid(torch.from_numpy(batch), **options).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_the_docstring_examples_run():
    # (tests/test_doctests.py reads the library's packages, not datasets/)
    import doctest

    result = doctest.testmod(tv)
    assert result.attempted >= 5 and result.failed == 0
