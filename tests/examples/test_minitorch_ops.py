"""examples/minitorch_ops.py: MiniTorch's tile, pooling, max/argmax and left-anchored conv."""

from __future__ import annotations

import os
import sys

import numpy as np

import fusegrad as fg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import minitorch_ops as mt  # noqa: E402

RNG = np.random.default_rng(7)


def test_tile_groups_each_block_in_row_major_order():
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    tiles, nh, nw = mt.tile(fg.tensor(x), (2, 3))
    assert (nh, nw) == (2, 2) and tiles.shape == (2, 3, 2, 2, 6)
    want = x.reshape(2, 3, 2, 2, 2, 3).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 2, 2, 6)
    np.testing.assert_array_equal(tiles.numpy(), want)


def test_pools_are_means_and_maxima_of_tiles():
    x = RNG.standard_normal((2, 2, 4, 4))
    t = fg.tensor(x, dtype=fg.float64)
    blocks = x.reshape(2, 2, 2, 2, 2, 2)
    np.testing.assert_allclose(mt.avgpool2d(t, (2, 2)).numpy(), blocks.mean((3, 5)))
    np.testing.assert_allclose(mt.maxpool2d(t, (2, 2)).numpy(), blocks.max((3, 5)))


def test_argmax_is_one_hot_and_max_keeps_the_axis():
    x = fg.tensor([[1.0, 5.0, 2.0], [4.0, 0.0, 4.0]])
    np.testing.assert_array_equal(mt.argmax(x, 1).numpy(), [[0, 1, 0], [1, 0, 1]])
    np.testing.assert_array_equal(mt.max(x, 1).numpy(), [[5.0], [4.0]])


def test_left_anchored_conv1d_reads_forward_with_zeros_past_the_end():
    x = RNG.standard_normal((2, 3, 7))
    w = RNG.standard_normal((4, 3, 3))
    out = mt.conv1d(fg.tensor(x, dtype=fg.float64), fg.tensor(w, dtype=fg.float64)).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (0, 2)))
    want = np.einsum("bckw,ock->bow", np.stack([xp[..., k : k + 7] for k in range(3)], 2), w)
    assert out.shape == (2, 4, 7)
    np.testing.assert_allclose(out, want, atol=1e-12)


def test_left_anchored_conv2d_keeps_the_size():
    x = RNG.standard_normal((1, 2, 5, 6))
    w = RNG.standard_normal((3, 2, 2, 3))
    out = mt.conv2d(fg.tensor(x, dtype=fg.float64), fg.tensor(w, dtype=fg.float64)).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 2)))
    want = np.zeros((1, 3, 5, 6))
    for i in range(5):
        for j in range(6):
            want[:, :, i, j] = np.einsum("bckl,ockl->bo", xp[:, :, i : i + 2, j : j + 3], w)
    np.testing.assert_allclose(out, want, atol=1e-12)


def test_gradients_of_the_minitorch_ops():
    x = fg.tensor(RNG.standard_normal((1, 2, 4, 4)), dtype=fg.float64)
    w = fg.tensor(RNG.standard_normal((2, 2, 2, 2)), dtype=fg.float64)
    assert fg.testing.gradcheck(lambda a, b: mt.maxpool2d(mt.conv2d(a, b), (2, 2)), [x, w])
    assert fg.testing.gradcheck(lambda a: mt.avgpool2d(a, (2, 2)).tanh(), [x])
