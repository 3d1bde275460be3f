"""torchvision's geometric transforms in the stand-in (datasets/torchvision_transforms.py):
Resize as PIL's bilinear resize, CenterCrop, RandomCrop, RandomHorizontalFlip. numpy is
the oracle; torch's `interpolate(..., antialias=True)` is a cross-check where torch is
installed (those tests skip without it): on floats to float32 rounding, on uint8 to within
1 (torch rounds its weights to 16-bit integers where PIL keeps 22 bits, so the two differ
by 1 at a few pixels, as torchvision's own tests of torch against PIL allow)."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.datasets import torchvision_shim as tv
from fusegrad.datasets.torchvision_transforms import filter_weights

SIZES = [((28, 28), (64, 64)), ((28, 28), (10, 13)), ((7, 9), (5, 21)), ((30, 17), (4, 3))]


def _torch_resized(image: np.ndarray, size) -> np.ndarray:
    """torch's antialiased bilinear resize of an H x W [x C] image (uint8 or float)."""
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(np.ascontiguousarray(image))
    t = t[None, None] if image.ndim == 2 else t.permute(2, 0, 1)[None]
    out = torch.nn.functional.interpolate(t, size=size, mode="bilinear", antialias=True)
    out = out[0, 0] if image.ndim == 2 else out[0].permute(1, 2, 0)
    return out.numpy()


@pytest.mark.parametrize("shape, size", SIZES)
def test_resize_of_bytes_is_pils_bilinear_within_torchs_rounding(shape, size):
    """(cross-check: needs torch)"""
    rng = np.random.default_rng(0)
    for image in (rng.integers(0, 256, shape, dtype=np.uint8),
                  rng.integers(0, 256, (*shape, 3), dtype=np.uint8)):  # fmt: skip
        out = tv.Resize(size)(image)
        assert out.dtype == np.uint8 and out.shape == size + image.shape[2:]
        diff = np.abs(out.astype(int) - _torch_resized(image, size).astype(int))
        assert diff.max() <= 1 and (diff == 0).mean() > 0.95


@pytest.mark.parametrize("shape, size", SIZES)
def test_resize_of_a_float_tensor_is_torchs_antialiased_bilinear_and_differentiable(shape, size):
    """(cross-check: needs torch)"""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    data = rng.standard_normal((2, 3, *shape)).astype(np.float32)
    x = fg.tensor(data, requires_grad=True)
    out = tv.Resize(size)(x)
    xt = torch.from_numpy(data).requires_grad_()
    want = torch.nn.functional.interpolate(xt, size=size, mode="bilinear", antialias=True)
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    g = rng.standard_normal(want.shape).astype(np.float32)
    (out * fg.tensor(g)).sum().backward()
    (want * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_resize_weights_average_when_shrinking_and_interpolate_when_growing():
    """PIL's rule without torch: halving averages pairs (the triangle widened to 2 pixels
    covers each pair and half its neighbours), doubling interpolates at quarter pixels,
    and every row sums to one."""
    np.testing.assert_allclose(filter_weights(2, 1), [[0.5, 0.5]])
    grown = filter_weights(2, 4)
    np.testing.assert_allclose(grown, [[1, 0], [0.75, 0.25], [0.25, 0.75], [0, 1]])
    for n_in, n_out in [(28, 64), (28, 10), (5, 21), (17, 3), (1, 1)]:
        np.testing.assert_allclose(filter_weights(n_in, n_out).sum(1), 1.0)
    # 8 -> 4 reads each output's pair and a quarter of each neighbour: (1/8, 3/8, 3/8, 1/8)
    np.testing.assert_allclose(filter_weights(8, 4)[1, 1:5], [1 / 8, 3 / 8, 3 / 8, 1 / 8])


def test_resize_of_bytes_rounds_as_pil_and_keeps_constants():
    assert tv.Resize((1, 1))(np.array([[0, 255]], np.uint8)).tolist() == [[128]]
    flat = np.full((9, 7, 3), 37, np.uint8)
    assert (tv.Resize((4, 11))(flat) == 37).all()
    ramp = np.array([[0, 100]], np.uint8)
    assert tv.Resize((1, 4))(ramp).tolist() == [[0, 25, 75, 100]]


def test_resize_size_rule_is_torchvisions():
    image = np.zeros((2, 6), np.uint8)
    assert tv.Resize(4)(image).shape == (4, 12)  # the shorter side to 4
    assert tv.Resize([4])(image).shape == (4, 12)
    assert tv.Resize((3, 5))(image).shape == (3, 5)
    assert tv.Resize(4, max_size=8)(image).shape == (2, 8)  # the longer side capped
    assert tv.Resize(5)(np.zeros((7, 3), np.uint8)).shape == (11, 5)  # (35 / 3, truncated)
    same = np.arange(6, dtype=np.uint8).reshape(2, 3)
    assert tv.Resize(2)(same) is same
    with pytest.raises(ValueError, match="max_size"):
        tv.Resize((3, 5), max_size=8)
        tv.Resize((3, 5), max_size=8)(image)
    with pytest.raises(ValueError, match="strictly greater"):
        tv.Resize(4, max_size=4)(image)


def test_resize_refuses_what_it_does_not_do_naming_it():
    with pytest.raises(NotImplementedError, match="interpolation=InterpolationMode.BICUBIC"):
        tv.transforms.Resize(8, interpolation=tv.transforms.InterpolationMode.BICUBIC)
    with pytest.raises(NotImplementedError, match="antialias=False"):
        tv.Resize(2, antialias=False)(fg.ones(1, 4, 4))
    with pytest.raises(TypeError, match="numpy image"):
        tv.Resize(2)([[1, 2]])
    with pytest.raises(TypeError, match="Size should be int"):
        tv.Resize((1, 2, 3))


def test_resize_of_a_byte_tensor_is_the_numpy_images():
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (3, 10, 12), dtype=np.uint8)
    out = tv.Resize((7, 5))(fg.tensor(image))
    assert out.dtype == fg.uint8 and out.shape == (3, 7, 5)
    want = tv.Resize((7, 5))(image.transpose(1, 2, 0)).transpose(2, 0, 1)
    np.testing.assert_array_equal(out.numpy(), want)


def test_center_crop_takes_the_middle_and_pads_a_small_image():
    image = np.arange(30, dtype=np.uint8).reshape(5, 6)
    np.testing.assert_array_equal(tv.CenterCrop(2)(image), image[2:4, 2:4])
    np.testing.assert_array_equal(tv.CenterCrop((3, 3))(image), image[1:4, 2:5])  # round(1.5)
    padded = tv.CenterCrop((7, 8))(image)
    want = np.zeros((7, 8), np.uint8)
    want[1:6, 1:7] = image
    np.testing.assert_array_equal(padded, want)
    t = fg.tensor(np.stack([image, image + 1]))  # (C, H, W): the last two axes
    np.testing.assert_array_equal(
        tv.CenterCrop(2)(t).numpy(), np.stack([image, image + 1])[:, 2:4, 2:4]
    )


def _windows(image: np.ndarray, h: int, w: int) -> list[np.ndarray]:
    return [image[i : i + h, j : j + w] for i in range(image.shape[0] - h + 1)
            for j in range(image.shape[1] - w + 1)]  # fmt: skip


def test_random_crop_is_a_window_of_the_padded_image_repeatable_by_seed():
    image = np.arange(1, 17, dtype=np.uint8).reshape(4, 4)
    crop = tv.RandomCrop(4, padding=2)
    fg.manual_seed(3)
    first = [crop(image) for _ in range(8)]
    fg.manual_seed(3)
    assert all((a == b).all() for a, b in zip(first, [crop(image) for _ in range(8)]))
    windows = _windows(np.pad(image, 2), 4, 4)
    assert all(any((c == w).all() for w in windows) for c in first)
    assert len({c.tobytes() for c in first}) > 1  # (the place is drawn)
    # (left/right, top/bottom) and (left, top, right, bottom) paddings, then pad_if_needed
    assert tv.RandomCrop((4 + 2, 4 + 4), padding=(2, 1))(image).shape == (6, 8)
    assert tv.RandomCrop((4 + 4, 4 + 1), padding=(1, 2, 0, 2))(image).shape == (8, 5)
    assert tv.RandomCrop(6, pad_if_needed=True)(image).shape == (6, 6)
    t = tv.RandomCrop(3, padding=1, fill=9)(fg.tensor(image[None].astype(np.float32)))
    assert t.shape == (1, 3, 3)
    with pytest.raises(ValueError, match="larger than input image size"):
        tv.RandomCrop(5)(image)
    with pytest.raises(NotImplementedError, match="padding_mode='reflect'"):
        tv.RandomCrop(4, padding=2, padding_mode="reflect")


def test_random_horizontal_flip_mirrors_with_its_probability():
    image = np.arange(6, dtype=np.uint8).reshape(2, 3)
    np.testing.assert_array_equal(tv.RandomHorizontalFlip(1.0)(image), image[:, ::-1])
    assert tv.RandomHorizontalFlip(0.0)(image) is image
    t = fg.tensor(image[None].astype(np.float32))
    np.testing.assert_array_equal(tv.RandomHorizontalFlip(1.0)(t).numpy(), image[None, :, ::-1])
    fg.manual_seed(0)
    flips = sum(tv.RandomHorizontalFlip()(image)[0, 0] == 2 for _ in range(400))
    assert 140 < flips < 260  # about half (binomial(400, 0.5): 6 standard deviations)


def test_the_dcgan_pipeline_resizes_mnist_as_torchvision_composes_it():
    """dcgan/main.py --dataset mnist: Resize(64), ToTensor, Normalize((0.5,), (0.5,))."""
    pipeline = tv.transforms.Compose(
        [
            tv.transforms.Resize(64),
            tv.transforms.ToTensor(),
            tv.transforms.Normalize((0.5,), (0.5,)),
        ]
    )
    digit = (np.arange(28 * 28) % 256).astype(np.uint8).reshape(28, 28)
    out = pipeline(digit)
    assert out.shape == (1, 64, 64)
    assert -1.0 <= float(out.min()) and float(out.max()) <= 1.0


def test_edges_one_pixel_images_exact_sizes_and_refusals():
    one = np.array([[200]], np.uint8)
    assert (tv.Resize((3, 4))(one) == 200).all()  # (one pixel: every weight on it)
    np.testing.assert_array_equal(tv.Resize((1, 1))(np.full((5, 7), 9, np.uint8)), [[9]])
    t = fg.tensor(np.full((1, 1, 1), -0.0, np.float32))
    grown = tv.Resize((2, 2))(t)
    assert grown.shape == (1, 2, 2) and (grown.numpy() == 0).all()
    np.testing.assert_array_equal(tv.CenterCrop(3)(one), [[0, 0, 0], [0, 200, 0], [0, 0, 0]])
    image = np.arange(12, dtype=np.uint8).reshape(3, 4)
    np.testing.assert_array_equal(tv.RandomCrop((3, 4))(image), image)  # (the one place)
    np.testing.assert_array_equal(tv.CenterCrop((3, 4))(image), image)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        tv.Resize(2)(fg.tensor(1.0))
    with pytest.raises(ValueError, match="H x W or H x W x C"):
        tv.Resize(2)(np.zeros(3, np.uint8))
