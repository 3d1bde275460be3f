"""F.bilinear and nn.Bilinear against torch 2.14's: values and gradients of every argument
(written in as literals, float64), shapes with leading axes, torch's errors and its
initialisation's bounds, parameter shapes and repr."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

# torch 2.14.1: F.bilinear(X1, X2, W, B), and the gradients of sum(y * [[1, -2], [0.5, 3]])
Y = [[-0.06249999999999989, -0.775], [-0.4375, -0.2500000000000002]]
G1 = [
    [1.1999999999999997, -0.37499999999999994, -1.5749999999999997],
    [-2.7755575615628914e-17, 2.0624999999999996, -0.18750000000000008],
]
G2 = [
    [0.0, 1.1999999999999997, 1.65, -0.8999999999999999],
    [-3.2249999999999996, -0.825, 1.1999999999999997, 2.0999999999999996],
]
GW = [
    [[0.8125, 0.625, 0.4375, 0.25], [0.5, 0.5, 0.5, 0.5], [0.1875, 0.375, 0.5625, 0.75]],
    [[-1.125, -0.25, 0.625, 1.5], [0.0, 1.0, 2.0, 3.0], [1.125, 2.25, 3.375, 4.5]],
]
GB = [1.5, 1.0]


def close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=1e-12, atol=1e-15)


def _arguments():
    d = fg.float64
    x1 = (fg.arange(6, dtype=d).reshape(2, 3) * 0.5 - 1.0).requires_grad_()
    x2 = (fg.arange(8, dtype=d).reshape(2, 4) * 0.25 - 0.75).requires_grad_()
    w = (fg.arange(24, dtype=d).reshape(2, 3, 4) % 5 * 0.3 - 0.6).requires_grad_()
    b = fg.tensor([0.5, -1.0], dtype=d, requires_grad=True)
    return x1, x2, w, b


def test_bilinear_values_and_gradients_as_torch():
    x1, x2, w, b = _arguments()
    y = F.bilinear(x1, x2, w, b)
    (y * fg.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=fg.float64)).sum().backward()
    close(y.tolist(), Y)
    close(x1.grad.tolist(), G1)
    close(x2.grad.tolist(), G2)
    close(w.grad.tolist(), GW)
    close(b.grad.tolist(), GB)


def test_bilinear_without_bias_and_with_leading_axes():
    x1, x2, w, b = _arguments()
    plain = F.bilinear(x1, x2, w)
    close(plain.tolist(), (np.asarray(Y) - [0.5, -1.0]).tolist())  # Y less the bias
    # (3, 2, in) inputs: each of the 3 copies gives the (2, out) answer
    lead = F.bilinear(x1.expand(3, 2, 3), x2.expand(3, 2, 4), w, b)
    assert lead.shape == (3, 2, 2)
    for row in lead.tolist():
        close(row, Y)
    one = F.bilinear(x1[0], x2[0], w, b)  # 1-d inputs give (out,)
    assert one.shape == (2,)
    close(one.tolist(), Y[0])
    assert F.bilinear(fg.zeros(0, 3), fg.zeros(0, 4), fg.ones(2, 3, 4)).shape == (0, 2)


@pytest.mark.parametrize(
    "shapes, message",
    [
        # torch's RuntimeError messages, "bilinear(): ..."
        (((3,), (1, 4), (2, 3, 4), None), "input dimensions do not match: got 1 and 2"),
        (((5, 3), (6, 4), (2, 3, 4), None), "batch dimensions do not match at dim 0: got 5 and 6"),
        (((5, 3), (5, 5), (2, 3, 4), None), "input2 size does not match weight size: got 5 but "),
        (((5, 2), (5, 4), (2, 3, 4), None), "input1 size does not match weight size: got 2 but "),
        (((5, 3), (5, 4), (2, 3, 4), (3,)), "bias size does not match weight size"),
        (((5, 3), (5, 4), (2, 3, 4), (1, 2)), "bias size does not match weight size"),
        (((5, 3), (5, 4), (3, 4), None), "weight must be 3-d"),  # torch: a size mismatch
    ],
)
def test_bilinear_errors_as_torch_at_the_users_line(shapes, message):
    s1, s2, sw, sb = shapes
    bias = None if sb is None else fg.zeros(*sb)
    with pytest.raises(RuntimeError, match=message) as info:
        F.bilinear(fg.zeros(*s1), fg.zeros(*s2), fg.zeros(*sw), bias)
    assert "test_bilinear.py" in str(info.value)


def test_bilinear_refuses_mixed_dtypes_as_torch():
    # torch: "All tensors must have the same dtype, got input1: double, input2: float, ..."
    with pytest.raises(RuntimeError, match="All tensors must have the same dtype"):
        F.bilinear(fg.zeros(5, 3, dtype=fg.float64), fg.zeros(5, 4), fg.zeros(2, 3, 4))


def test_bilinear_layer_shapes_init_and_repr():
    fg.manual_seed(0)
    layer = nn.Bilinear(3, 4, 2)
    assert repr(layer) == "Bilinear(in1_features=3, in2_features=4, out_features=2, bias=True)"
    assert layer.weight.shape == (2, 3, 4) and layer.bias.shape == (2,)
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    bound = 1 / math.sqrt(3)  # torch: U(-1/sqrt(in1_features), 1/sqrt(in1_features))
    for p in (layer.weight, layer.bias):
        values = p.numpy()
        assert np.all(np.abs(values) <= bound) and len(np.unique(values)) == values.size
    assert np.abs(layer.weight.numpy()).max() > 0.8 * bound  # drawn over the whole range
    unbiased = nn.Bilinear(3, 4, 2, bias=False)
    assert unbiased.bias is None
    assert repr(unbiased).endswith("bias=False)")
    assert nn.Bilinear(3, 4, 2, dtype=fg.float64).weight.dtype == fg.float64
    assert nn.Bilinear(3, 0, 2).weight.shape == (2, 3, 0)
    with pytest.raises(ValueError, match=r"in1_features must be > 0, but got \(in1_features=0\)"):
        nn.Bilinear(0, 4, 2)


def test_bilinear_layer_forward_is_the_function_and_trains():
    fg.manual_seed(1)
    layer = nn.Bilinear(3, 4, 2, dtype=fg.float64)
    x1, x2, _, _ = _arguments()
    y = layer(x1, x2)
    close(y.tolist(), F.bilinear(x1, x2, layer.weight, layer.bias).tolist())
    (y * fg.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=fg.float64)).sum().backward()
    close(layer.weight.grad.tolist(), GW)
    close(layer.bias.grad.tolist(), GB)
