"""nn.Softmax2d against torch 2.14's: softmax over dim -3 of a 3-d or 4-d input, values
and gradients (written in as literals, float64), infinities, and torch's ValueError."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

inf, nan = float("inf"), float("nan")

# torch 2.14.1: S4 = Softmax2d()(X4).flatten(), GS4 the gradient of sum(S4 * (arange % 5 - 2));
# S3 and GS3 the same for a (3, 1, 3) input with infinities, weights [1, 2, 3] per channel
S4 = [
    0.01714782554552039,
    0.01714782554552039,
    0.01714782554552039,
    0.26538792877224193,
    0.9362395518765058,
    0.9362395518765058,
    0.9362395518765058,
    0.013212886953789414,
    0.0466126225779739,
    0.0466126225779739,
    0.0466126225779739,
    0.7213991842739687,
    0.26538792877224193,
    0.9503302116973794,
    0.01714782554552039,
    0.01714782554552039,
    0.013212886953789414,
    0.04731415522182405,
    0.9362395518765058,
    0.9362395518765058,
    0.7213991842739687,
    0.0023556330807966807,
    0.0466126225779739,
    0.0466126225779739,
]
GS4 = [
    -0.06661580537813688,
    0.013656557143835665,
    0.01765308274476707,
    0.3864078113666748,
    0.10785847089176892,
    -0.19061679600115838,
    0.027586108369796487,
    0.006025225168599896,
    -0.041242665513632135,
    0.17696023885732273,
    -0.04523919111456354,
    -0.39243303653527467,
    0.3864078113666748,
    0.04944132971694829,
    0.017653082744767068,
    -0.06661580537813688,
    0.006025225168599895,
    -0.04485261635900824,
    0.027586108369796383,
    0.10785847089176892,
    -0.3924330365352748,
    -0.004588713357940197,
    -0.045239191114563544,
    -0.041242665513632135,
]
S3 = [0.24472847105479764, nan, 0.0, 0.6652409557748218, nan, 0.0, 0.09003057317038046, nan, 1.0]
GS3 = [
    -0.20686949103015298,
    nan,
    -0.0,
    0.10291137744498557,
    nan,
    -0.0,
    0.10395811358516754,
    nan,
    0.0,
]


def close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=1e-12, atol=1e-15)


def test_softmax2d_4d_values_and_gradient_as_torch():
    d = fg.float64
    x = (fg.arange(24, dtype=d).reshape(2, 3, 2, 2) % 7 - 3.0).requires_grad_()
    s = nn.Softmax2d()(x)
    assert s.shape == (2, 3, 2, 2)
    (s * (fg.arange(24, dtype=d).reshape(2, 3, 2, 2) % 5 - 2.0)).sum().backward()
    close(s.detach().numpy().reshape(-1), S4)
    close(x.grad.numpy().reshape(-1), GS4)


def test_softmax2d_3d_with_infinities_as_torch():
    x = fg.tensor(
        [[[0.0, inf, -inf]], [[1.0, -inf, -inf]], [[-1.0, 2.0, 0.0]]],
        dtype=fg.float64,
        requires_grad=True,
    )
    s = nn.Softmax2d()(x)
    weights = fg.tensor([1.0, 2.0, 3.0], dtype=fg.float64).reshape(3, 1, 1)
    (s * weights).sum().backward()
    close(s.detach().numpy().reshape(-1), S3)
    close(x.grad.numpy().reshape(-1), GS3)


def test_softmax2d_empty_inputs_and_repr():
    assert nn.Softmax2d()(fg.zeros(0, 3, 2, 2)).shape == (0, 3, 2, 2)
    assert nn.Softmax2d()(fg.zeros(2, 0, 2, 2)).shape == (2, 0, 2, 2)
    assert repr(nn.Softmax2d()) == "Softmax2d()"


@pytest.mark.parametrize("shape", [(), (2,), (2, 3), (1, 1, 2, 3, 4)])
def test_softmax2d_refuses_other_ranks_as_torch(shape):
    with pytest.raises(
        ValueError, match=f"expected input to be 3D or 4D, got {len(shape)}D instead"
    ):
        nn.Softmax2d()(fg.zeros(*shape))
