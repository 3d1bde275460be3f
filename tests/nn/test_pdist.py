"""pdist at every p torch's kernel tells apart (0, below 1, 1, below 2, 2, above 2, inf),
with equal rows, ties, NaN and inf: values and gradients (of sum(y * w)) as torch 2.14's,
written in as literals (float64); its pair order, shapes and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F

NAN, INF = math.nan, math.inf
X = [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0], [1.0, -1.0, 2.0], [3.0, 1.0, 0.0]]  # rows 0, 1 equal
XS = [[0.0, 1.0], [1.0, 1.0], [NAN, 1.0], [INF, 1.0], [-INF, -1.0]]


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 3.0, INF])
def test_pdist_values_and_gradients_as_torchs(p, special):
    value, grad = (SPECIAL if special else EXPECTED)[p]
    x = fg.tensor(XS if special else X, dtype=fg.float64, requires_grad=True)
    y = F.pdist(x, p)
    assert y.shape == (len(value),) and y.dtype == fg.float64
    w = fg.tensor((np.arange(y.numel()) % 3 - 1) + 0.5)
    (y * w).sum().backward()
    np.testing.assert_allclose(y.numpy(), value, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(x.grad.numpy().ravel(), grad, rtol=1e-12, atol=1e-15)


def test_pdist_order_shapes_and_refusals():
    x = fg.tensor([[0.0], [1.0], [3.0], [7.0]])
    assert F.pdist(x).tolist() == [1.0, 3.0, 7.0, 2.0, 6.0, 4.0]  # (0,1) (0,2) (0,3) (1,2) ...
    assert F.pdist(x, p=1).dtype == fg.float32
    assert F.pdist(fg.ones(1, 2)).shape == (0,)
    assert F.pdist(fg.ones(0, 2)).shape == (0,)
    assert F.pdist(fg.ones(3, 0)).tolist() == [0.0, 0.0, 0.0]
    for bad in (fg.ones(2, 3, 4), fg.ones(3)):
        with pytest.raises(RuntimeError, match=f"pdist only supports 2D tensors, got: {bad.ndim}D"):
            F.pdist(bad)
    with pytest.raises(RuntimeError, match="pdist only supports non-negative p values"):
        F.pdist(x, -1)
    with pytest.raises(RuntimeError, match="pdist only supports floating-point dtypes"):
        F.pdist(fg.ones(3, 2, dtype=fg.int64))


EXPECTED = {
    0.0: (
        [0.0, 2.0, 2.0, 2.0, 2.0, 3.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    0.5: (
        [
            0.0,
            5.82842712474619,
            9.898979485566358,
            5.82842712474619,
            9.898979485566358,
            18.000000000000004,
        ],
        [
            -3.9318516525781364,
            0.8535533905932737,
            3.3371173070873836,
            0.29885849072268444,
            -0.8535533905932737,
            1.1123724356957945,
            -4.5,
            -4.5,
            4.5,
            8.132993161855453,
            4.5,
            -8.949489742783179,
        ],
    ),
    1.0: (
        [0.0, 3.0, 5.0, 3.0, 5.0, 6.0],
        [-2.0, 0.5, 1.5, 0.0, -0.5, 0.5, -1.5, -1.5, 1.5, 3.5, 1.5, -3.5],
    ),
    2.0: (
        [
            0.0,
            2.23606797749979,
            3.605551275463989,
            2.23606797749979,
            3.605551275463989,
            3.4641016151377544,
        ],
        [
            -1.4716822392567446,
            0.4472135954999579,
            0.8320502943378437,
            -0.1924183494189429,
            -0.4472135954999579,
            0.2773500981126146,
            -0.8660254037844387,
            -0.8660254037844387,
            0.8660254037844387,
            2.530125992460126,
            0.8660254037844387,
            -1.9754257962348971,
        ],
    ),
    3.0: (
        [
            0.0,
            2.080083823051904,
            3.2710663101885897,
            2.080083823051904,
            3.2710663101885897,
            2.8844991406148166,
        ],
        [
            -1.3772572177502285,
            0.4622408495670898,
            0.5607542246037582,
            -0.30500545606104623,
            -0.4622408495670898,
            0.18691807486791942,
            -0.7211247851537042,
            -0.7211247851537042,
            0.7211247851537042,
            2.403387458964979,
            0.7211247851537042,
            -1.4687970846253817,
        ],
    ),
    INF: (
        [0.0, 2.0, 3.0, 2.0, 3.0, 2.0],
        [-1.5, 0.5, 0.0, -0.5, -0.5, 0.0, -1.5, -1.5, 1.5, 3.5, 1.5, -1.5],
    ),
}
SPECIAL = {
    0.0: (
        [1.0, NAN, 1.0, 2.0, NAN, 1.0, 2.0, NAN, NAN, 2.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    0.5: (
        [1.0, NAN, INF, INF, NAN, INF, INF, NAN, NAN, INF],
        [NAN, -INF, NAN, -INF, NAN, NAN, NAN, -INF, NAN, NAN],
    ),
    1.0: (
        [1.0, NAN, INF, INF, NAN, INF, INF, NAN, NAN, INF],
        [NAN, -0.5, NAN, -0.5, NAN, 1.5, NAN, -0.5, NAN, 0.0],
    ),
    2.0: (
        [1.0, NAN, INF, INF, NAN, INF, INF, NAN, NAN, INF],
        [NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN],
    ),
    3.0: (
        [1.0, NAN, INF, INF, NAN, INF, INF, NAN, NAN, INF],
        [NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN],
    ),
    INF: (
        [1.0, NAN, INF, INF, NAN, INF, INF, NAN, NAN, INF],
        [NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN],
    ),
}
