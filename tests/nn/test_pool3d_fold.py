"""Adaptive max pooling, max_unpool, unfold/fold, conv3d and the 3-D pools against torch
2.13's values and gradients (of sum(y * w), w = arange % 5 - 2), written in as literals."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

NAN = float("nan")


def _t(a):
    return fg.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


def _backward(y):
    w = (np.arange(y.numel()) % 5 - 2).reshape(y.shape).astype(np.float64)
    (y * fg.tensor(w)).sum().backward()


def _eq(t, expected):
    np.testing.assert_array_equal(t.numpy(), np.asarray(expected))


def test_adaptive_max_pool1d_indices_ties_nan_and_gradient():
    x = _t([[[3, 1, 4, 1, 5, 9, 2]]])
    v, i = F.adaptive_max_pool1d(x, 3, return_indices=True)
    _backward(v)
    _eq(v, [[[4.0, 5.0, 9.0]]])
    _eq(i, [[[2, 4, 5]]])
    _eq(x.grad, [[[0.0, 0.0, -2.0, 0.0, -1.0, 0.0, 0.0]]])
    v, i = nn.AdaptiveMaxPool1d(3, return_indices=True)(fg.tensor([[[3, 1, 4, NAN, 5, 9, 2.0]]]))
    _eq(v, [[[4.0, NAN, 9.0]]])
    _eq(i, [[[2, 3, 5]]])


def test_adaptive_max_pool2d_overlapping_cells():
    x = _t((np.arange(30) * 7 % 11).reshape(1, 5, 6))
    v, i = nn.AdaptiveMaxPool2d((3, 4), return_indices=True)(x)
    _backward(v)
    _eq(v, [[[9.0, 7.0, 10.0, 6.0], [9.0, 10.0, 8.0, 9.0], [10.0, 10.0, 9.0, 9.0]]])
    _eq(i, [[[6, 1, 3, 4], [6, 14, 9, 17], [25, 25, 28, 28]]])
    _eq(
        x.grad,
        [
            [
                [0.0, -1.0, 0.0, 0.0, 1.0, 0.0],
                [0.0, 0.0, 0.0, -1.0, 0.0, 0.0],
                [0.0, 0.0, -2.0, 0.0, 0.0, 0.0],
                [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                [0.0, 3.0, 0.0, 0.0, -3.0, 0.0],
            ]
        ],
    )
    assert F.adaptive_max_pool2d(x, (2, None)).shape == (1, 2, 6)


def test_max_unpool2d_undoes_max_pool2d():
    x = _t((np.arange(24) * 5 % 7).reshape(1, 1, 4, 6))
    v, i = F.max_pool2d(x, 2, return_indices=True)
    u = nn.MaxUnpool2d(2)(v, i, output_size=(5, 6))
    _backward(u)
    _eq(
        u,
        [
            [
                [
                    [0.0, 5.0, 0.0, 0.0, 6.0, 0.0],
                    [0.0, 0.0, 5.0, 0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0, 5.0, 0.0, 0.0],
                    [6.0, 0.0, 0.0, 0.0, 5.0, 0.0],
                    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                ]
            ]
        ],
    )
    _eq(
        x.grad,
        [
            [
                [
                    [0.0, -1.0, 0.0, 0.0, 2.0, 0.0],
                    [0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0, -2.0, 0.0, 0.0],
                    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                ]
            ]
        ],
    )
    assert F.max_unpool2d(v, i, 2).shape == (1, 1, 4, 6)
    with pytest.raises(RuntimeError, match="Found an invalid max index: 9"):
        F.max_unpool2d(fg.ones(1, 1, 1, 1), fg.tensor([[[[9]]]]), 2)


def test_unfold_and_fold():
    x = _t(np.arange(16.0).reshape(1, 1, 4, 4))
    u = nn.Unfold((2, 3), padding=1, stride=(2, 1))(x)
    _backward(u)
    assert u.shape == (1, 6, 12)
    _eq(
        u,
        [
            [
                [0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 5.0, 6.0, 0.0, 12.0, 13.0, 14.0],
                [0.0, 0.0, 0.0, 0.0, 4.0, 5.0, 6.0, 7.0, 12.0, 13.0, 14.0, 15.0],
                [0.0, 0.0, 0.0, 0.0, 5.0, 6.0, 7.0, 0.0, 13.0, 14.0, 15.0, 0.0],
                [0.0, 0.0, 1.0, 2.0, 0.0, 8.0, 9.0, 10.0, 0.0, 0.0, 0.0, 0.0],
                [0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0, 0.0, 0.0, 0.0, 0.0],
                [1.0, 2.0, 3.0, 0.0, 9.0, 10.0, 11.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            ]
        ],
    )
    _eq(
        x.grad,
        [
            [
                [
                    [1.0, 1.0, -1.0, -1.0],
                    [-3.0, 0.0, 3.0, 0.0],
                    [-1.0, 3.0, 1.0, -3.0],
                    [0.0, -3.0, 0.0, 3.0],
                ]
            ]
        ],
    )
    c = _t(np.arange(32.0).reshape(1, 4, 8) % 5)
    f = nn.Fold((3, 4), 2, dilation=(1, 2), padding=(1, 0))(c)
    _backward(f)
    assert f.shape == (1, 1, 3, 4)
    _eq(f, [[[[3.0, 5.0, 4.0, 1.0], [7.0, 4.0, 3.0, 5.0], [1.0, 3.0, 7.0, 4.0]]]])
    _eq(
        c.grad,
        [
            [
                [0.0, 0.0, -2.0, -1.0, 2.0, -2.0, 1.0, 2.0],
                [0.0, 0.0, 0.0, 1.0, -1.0, 0.0, -2.0, -1.0],
                [-2.0, -1.0, 2.0, -2.0, 1.0, 2.0, 0.0, 0.0],
                [0.0, 1.0, -1.0, 0.0, -2.0, -1.0, 0.0, 0.0],
            ]
        ],
    )
    with pytest.raises(RuntimeError, match=r"number of sliding blocks 2 \* 2 = 4"):
        F.fold(fg.ones(1, 4, 3), 3, 2)


def _volume():
    return (np.arange(54) * 5 % 7).reshape(1, 2, 3, 3, 3).astype(np.float64) - 3


def test_conv3d_grouped_strided_padded():
    x = _t(_volume())
    w = _t((np.arange(16) % 3).reshape(2, 1, 2, 2, 2) - 1.0)
    b = fg.tensor([0.5, -1.0], dtype=fg.float64)
    y = F.conv3d(x, w, b, stride=(1, 2, 1), padding=(0, 1, 0), groups=2)
    _backward(y)
    assert y.shape == (1, 2, 2, 2, 2)
    _eq(
        y,
        [
            [
                [[[-4.5, 4.5], [1.5, -10.5]], [[-0.5, -5.5], [5.5, 0.5]]],
                [[[-2.0, 3.0], [-8.0, -8.0]], [[-6.0, -1.0], [6.0, -1.0]]],
            ]
        ],
    )
    _eq(
        x.grad,
        [
            [
                [
                    [[-2.0, 1.0, 1.0], [0.0, -1.0, 0.0], [0.0, 1.0, -1.0]],
                    [[4.0, -3.0, 2.0], [1.0, 0.0, 1.0], [-1.0, 0.0, 0.0]],
                    [[-2.0, 2.0, 0.0], [0.0, -1.0, 0.0], [1.0, 0.0, 0.0]],
                ],
                [
                    [[0.0, 1.0, 2.0], [-2.0, 1.0, 1.0], [0.0, -2.0, -1.0]],
                    [[1.0, 1.0, -1.0], [4.0, -3.0, 2.0], [-2.0, 3.0, -1.0]],
                    [[0.0, 1.0, -1.0], [-2.0, 2.0, 0.0], [2.0, -4.0, 2.0]],
                ],
            ]
        ],
    )
    _eq(
        w.grad,
        [
            [[[[2.0, 2.0], [3.0, -12.0]], [[2.0, -5.0], [8.0, 0.0]]]],
            [[[[6.0, 5.0], [-18.0, 8.0]], [[-3.0, -11.0], [13.0, -17.0]]]],
        ],
    )
    layer = nn.Conv3d(2, 4, (1, 2, 3), padding="same")
    assert layer.weight.shape == (4, 2, 1, 2, 3)
    assert layer(fg.ones(1, 2, 3, 4, 5)).shape == (1, 4, 3, 4, 5)


def test_max_pool3d_ties_and_avg_pool3d():
    x = _t(_volume())
    v, i = nn.MaxPool3d(2, stride=1, return_indices=True)(x)
    _backward(v)
    _eq(
        v,
        [
            [
                [[[3.0, 3.0], [3.0, 3.0]], [[3.0, 3.0], [3.0, 3.0]]],
                [[[3.0, 3.0], [3.0, 3.0]], [[3.0, 3.0], [3.0, 3.0]]],
            ]
        ],
    )
    _eq(i, [[[[[4, 4], [4, 4]], [[18, 11], [25, 25]]], [[[12, 5], [12, 5]], [[12, 19], [12, 26]]]]])
    _eq(
        x.grad,
        [
            [
                [
                    [[0.0, 0.0, 0.0], [0.0, -2.0, 0.0], [0.0, 0.0, 0.0]],
                    [[0.0, 0.0, -2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
                    [[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, -1.0, 0.0]],
                ],
                [
                    [[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]],
                    [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
                    [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, -2.0]],
                ],
            ]
        ],
    )
    x = _t(_volume())
    a = nn.AvgPool3d(2, stride=2, padding=1, ceil_mode=True, count_include_pad=False)(x)
    _backward(a)
    _eq(
        a,
        [
            [
                [[[-3.0, 1.0], [-1.5, 0.75]], [[1.5, 0.25], [-0.5, 0.0]]],
                [[[-1.0, -0.5], [0.5, -0.75]], [[0.0, 0.5], [-0.25, 0.25]]],
            ]
        ],
    )
    _eq(
        x.grad,
        [
            [
                [
                    [[-2.0, -0.5, -0.5], [0.0, 0.25, 0.25], [0.0, 0.25, 0.25]],
                    [[1.0, -0.5, -0.5], [-0.25, 0.0, 0.0], [-0.25, 0.0, 0.0]],
                    [[1.0, -0.5, -0.5], [-0.25, 0.0, 0.0], [-0.25, 0.0, 0.0]],
                ],
                [
                    [[1.0, 1.0, 1.0], [-1.0, -0.25, -0.25], [-1.0, -0.25, -0.25]],
                    [[0.0, 0.25, 0.25], [0.5, -0.25, -0.25], [0.5, -0.25, -0.25]],
                    [[0.0, 0.25, 0.25], [0.5, -0.25, -0.25], [0.5, -0.25, -0.25]],
                ],
            ]
        ],
    )


@pytest.mark.parametrize(
    "mode, out, x_grad, w_grad",
    [
        ("reflect", [7.0, 2.0, 1.0, 11.0, -2.0, 5.0], [2.0, 4.0, 4.0, 2.0], [12.0, 12.0, 12.0]),
        ("circular", [1.0, -1.0, 1.0, 11.0, 1.0, -1.0], [3.0, 1.0, 3.0, 5.0], [9.0, 6.0, 9.0]),
    ],
)
def test_conv_padding_mode(mode, out, x_grad, w_grad):
    conv = nn.Conv1d(1, 1, 3, padding=2, padding_mode=mode, bias=False, dtype=fg.float64)
    conv.weight.data = fg.tensor([[[1.0, 2.0, -1.0]]], dtype=fg.float64)
    x = _t([[[1.0, 2.0, 4.0, -1.0]]])
    y = conv(x)
    y.sum().backward()
    assert y.tolist() == [[out]] and x.grad.tolist() == [[x_grad]]
    assert conv.weight.grad.tolist() == [[w_grad]]
    assert repr(conv).endswith(f"bias=False, padding_mode={mode})")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(1, 1, 3, padding_mode="bad")


def test_adaptive_pools_3d():
    x = _t((np.arange(24) * 7 % 11).reshape(1, 1, 2, 3, 4))
    v, i = nn.AdaptiveMaxPool3d((1, 2, 3), return_indices=True)(x)
    a = F.adaptive_avg_pool3d(x, (2, 2, 3))
    (v.sum() + a.sum()).backward()
    assert v.numpy().ravel().tolist() == [9.0, 10.0, 10.0, 9.0, 9.0, 9.0]
    assert i.numpy().ravel().tolist() == [17, 14, 3, 17, 6, 6]  # the first maximum on ties
    assert a.numpy().ravel().tolist() == [
        3.75, 5.25, 6.75, 4.25, 5.75, 4.5, 5.25, 6.75, 5.5, 5.75, 4.5, 3.25
    ]  # fmt: skip
    assert x.grad.numpy().ravel().tolist() == [
        0.25, 0.5, 0.5, 1.25, 0.5, 1.0, 3.0, 0.5, 0.25, 0.5, 0.5, 0.25,
        0.25, 0.5, 1.5, 0.25, 0.5, 3.0, 1.0, 0.5, 0.25, 0.5, 0.5, 0.25,
    ]  # fmt: skip


def test_conv_transpose3d():
    x = _t([[[[[1.0, 2.0]], [[3.0, -1.0]]]]])
    w = _t([[[[[1.0, -2.0]], [[0.5, 1.0]]]]])
    y = F.conv_transpose3d(x, w, stride=(2, 1, 2), padding=(0, 0, 1))
    y.sum().backward()
    assert y.shape == (1, 1, 4, 1, 2)
    assert y.numpy().ravel().tolist() == [-2.0, 2.0, 1.0, 1.0, -6.0, -1.0, 3.0, -0.5]
    assert x.grad.numpy().ravel().tolist() == [-1.0, 1.5, -1.0, 1.5]
    assert w.grad.numpy().ravel().tolist() == [1.0, 4.0, 1.0, 4.0]
    layer = nn.ConvTranspose3d(2, 4, (2, 3, 2), stride=2, groups=2)
    assert layer.weight.shape == (2, 2, 2, 3, 2)
    assert layer(fg.ones(1, 2, 2, 2, 2)).shape == (1, 4, 4, 5, 4)
