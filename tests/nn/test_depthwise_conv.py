"""Depthwise convolutions (one input channel per group) against numpy: values and both
gradients, 1-D and 2-D, at the edges the kernel's peeled tiles guard (padding 0, 1, 2; widths
odd, even, and just past a vector: 17, 33), stride 2, dilation 2, a channel multiplier of 2,
float32 and bfloat16; and the structure that makes them fast: no padded copy of a stored
input, and an interior that loads with no bounds test (pipeline/peel.py)."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.nn import conv as C
from fusegrad.nn import functional as F


def depthwise_np(x, w, g, stride, pad, dil):
    """y, dx, dw of a depthwise convolution (w: (C * m, 1, *kernel)) with output gradient g,
    tap by tap over strided slices of the padded input, in float64."""
    x, w, g = (a.astype(np.float64) for a in (x, w, g))
    n, (batch, c) = x.ndim - 2, x.shape[:2]
    m = w.shape[0] // c
    xp = np.repeat(np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad]), m, axis=1)
    outs = g.shape[2:]
    y, dxp, dw = np.zeros(g.shape), np.zeros(xp.shape), np.zeros(w.shape)
    for tap in np.ndindex(*w.shape[2:]):
        at = tuple(
            slice(d * t, d * t + s * (o - 1) + 1, s) for t, s, d, o in zip(tap, stride, dil, outs)
        )
        win = xp[(slice(None), slice(None), *at)]
        wt = w[(slice(None), 0, *tap)].reshape(1, -1, *([1] * n))
        y += win * wt
        dxp[(slice(None), slice(None), *at)] += g * wt
        dw[(slice(None), 0, *tap)] = (g * win).sum((0, *range(2, 2 + n)))
    dxp = dxp.reshape(batch, c, m, *xp.shape[2:]).sum(2)
    inner = tuple(slice(p, p + s) for p, s in zip(pad, x.shape[2:]))
    return y, dxp[(slice(None), slice(None), *inner)], dw


def _run(x, w, g, stride, pad, dil, dtype=fg.float32):
    """fusegrad's y, dx, dw (as float64 arrays) of the depthwise convolution."""
    n, c = x.ndim - 2, x.shape[1]
    conv = F.conv2d if n == 2 else F.conv1d
    # (stored values: a cast left lazy would be an elementwise input, with a padded copy)
    xt, wt, gt = (fg.tensor(a).to(dtype).realize() for a in (x, w, g))
    xt, wt = xt.requires_grad_(), wt.requires_grad_()
    y = conv(xt, wt, None, stride, pad, dil, c)
    dx, dw = fg.grad(y, [xt, wt], grad_outputs=gt)
    return [t.float().numpy().astype(np.float64) for t in (y, dx, dw)]


def _out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


CASES = [
    # dims, channels, multiplier, kernel, stride, padding, dilation, width
    (2, 4, 1, 3, 1, 1, 1, 56),  # the benchmark's shape class: 16, 16, 16, 8 lanes
    (2, 3, 1, 3, 1, 0, 1, 17),
    (2, 3, 1, 3, 1, 1, 1, 17),
    (2, 3, 1, 3, 1, 2, 1, 33),
    (2, 3, 1, 3, 1, 1, 1, 16),  # even, one whole vector
    (2, 3, 1, 5, 1, 2, 1, 20),
    (2, 3, 1, 3, 2, 1, 1, 33),  # stride 2
    (2, 3, 1, 3, 2, 1, 1, 16),
    (2, 3, 1, 3, 1, 2, 2, 17),  # dilation 2
    (2, 3, 2, 3, 1, 1, 1, 17),  # two filters per channel
    (2, 3, 2, 3, 2, 1, 1, 18),
    (2, 2, 1, 3, 1, 1, 1, 1),  # a 1x1 input: every tap but the centre is padding
    (1, 4, 1, 3, 1, 1, 1, 1024),  # the 1-D benchmark's shape class
    (1, 4, 1, 7, 1, 3, 1, 33),
    (1, 3, 1, 3, 1, 0, 1, 17),
    (1, 3, 1, 3, 1, 2, 1, 18),
    (1, 3, 1, 3, 2, 1, 1, 33),
    (1, 3, 1, 3, 1, 2, 2, 34),
    (1, 3, 2, 3, 1, 1, 1, 33),
]


@pytest.mark.parametrize("case", CASES)
def test_depthwise_values_and_gradients_in_float32(case):
    dims, c, m, k, s, p, d, width = case
    rng = np.random.default_rng(width * 7 + k)
    size = (width,) if dims == 1 else (width - 1 if width > 1 else 1, width)
    x = rng.standard_normal((2, c, *size)).astype(np.float32)
    w = rng.standard_normal((c * m, 1, *(k,) * dims)).astype(np.float32)
    outs = tuple(_out_size(v, k, s, p, d) for v in size)
    g = rng.standard_normal((2, c * m, *outs)).astype(np.float32)
    geometry = ((s,) * dims, (p,) * dims, (d,) * dims)
    for got, want in zip(_run(x, w, g, *geometry), depthwise_np(x, w, g, *geometry)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[9], CASES[13]])
def test_depthwise_values_and_gradients_in_bfloat16(case):
    """On bfloat16 inputs (rounded once), against float64 numpy on the same values: each
    output is rounded once to bfloat16, 2^-8 of it; the sums (a weight gradient adds
    batch x pixels products) are float32 inside."""
    dims, c, m, k, s, p, d, width = case
    rng = np.random.default_rng(5)
    size = (width,) if dims == 1 else (9, width)
    rounded = [
        fg.tensor(rng.standard_normal(shape).astype(np.float32)).to(fg.bfloat16).float().numpy()
        for shape in ((2, c, *size), (c * m, 1, *(k,) * dims))
    ]
    x, w = rounded
    outs = tuple(_out_size(v, k, s, p, d) for v in size)
    g = fg.tensor(rng.standard_normal((2, c * m, *outs)).astype(np.float32))
    g = g.to(fg.bfloat16).float().numpy()
    geometry = ((s,) * dims, (p,) * dims, (d,) * dims)
    got = _run(x, w, g, *geometry, dtype=fg.bfloat16)
    for a, want in zip(got, depthwise_np(x, w, g, *geometry)):
        np.testing.assert_allclose(a, want, rtol=2**-7, atol=2**-7 * np.abs(want).max())


def test_depthwise_at_special_values_and_on_an_empty_batch():
    """-0, +-1, +-inf and NaN at the corners and edges (the peeled tiles' guarded loads):
    padding is +0, so a window of signed zeros sums to +0; inf and NaN reach exactly the
    windows that cover them, as in numpy."""
    x = np.ones((1, 2, 17, 17), np.float32)
    x[0, 0, 0, 0], x[0, 0, 0, 16], x[0, 0, 16, 0] = -0.0, np.inf, np.nan
    x[0, 1] = -0.0
    x[0, 1, 8, 8], x[0, 1, 16, 16] = -1.0, -np.inf
    w = np.ones((2, 1, 3, 3), np.float32)
    w[1] = -0.0
    w[1, 0, 1, 1] = 1.0
    got = F.conv2d(fg.tensor(x), fg.tensor(w), None, 1, 1, 1, 2).numpy()
    with np.errstate(invalid="ignore"):  # (inf * 0 in the reference's own products)
        want = depthwise_np(x, w, np.zeros((1, 2, 17, 17)), (1, 1), (1, 1), (1, 1))[0]
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert not np.signbit(got[0, 1][want[0, 1] == 0]).any()  # +0, never -0
    empty = F.conv2d(fg.zeros(0, 4, 17, 17), fg.ones(4, 1, 3, 3), None, 1, 1, 1, 4)
    assert empty.shape == (0, 4, 17, 17) and empty.numpy().size == 0
    # the rule's gradients on an empty batch (fg.grad through the folded sum is zeros too:
    # tests/nn/test_conv.py's empty-batch test)
    x0, w0 = fg.zeros(0, 4, 33).realize(), fg.ones(4, 1, 3).realize()
    geometry = (x0.shape, w0.shape, [(1, 1)], (1,), (1,), 4, True)
    dx, dw = C.conv_vjp(fg.zeros(0, 4, 33).realize(), x0, w0, geometry, "conv1d")
    assert dx.shape == (0, 4, 33) and dw.shape == (4, 1, 3) and not dw.numpy().any()


@pytest.mark.cpu_device  # the CPU lowering
def test_a_stored_input_is_read_in_place_and_its_interior_unguarded():
    """The forward, the input gradient and the weight gradient of a depthwise convolution over
    stored values make no padded copy (a groups=1 convolution still does), and each kernel's
    interior loads its window with no bounds test, its edges with them."""
    x = fg.randn(2, 8, 20, 40).realize().requires_grad_()
    w = fg.randn(8, 1, 3, 3).realize().requires_grad_()
    y = F.conv2d(x, w, None, 1, 1, 1, 8)
    dx, dw = fg.grad(y, [x, w], grad_outputs=fg.randn(2, 8, 20, 40).realize())
    kernels = fg.kernels(y, dx, dw)
    assert not [k for k in kernels if "padded" in k.reason], [k.reason for k in kernels]
    for k in kernels:
        if k.name.startswith("r_pad_sum"):  # the three convolutions
            loads = [line for line in k.loop_ir.splitlines() if "= load in" in line]
            assert any(" if " not in line for line in loads), k.loop_ir
            assert any(" if " in line for line in loads), k.loop_ir
    dense = F.conv2d(x.detach(), fg.randn(8, 8, 3, 3), None, 1, 1)
    assert [k for k in fg.kernels(dense) if "padded" in k.reason]


@pytest.mark.cpu_device  # the CPU lowering
def test_a_computed_input_keeps_its_padded_copy():
    """An input that is an elementwise value (an activation not stored) is computed once, in
    the padded copy, not again at each of the kernel's taps."""
    x, w = fg.randn(2, 4, 12, 12).realize(), fg.randn(4, 1, 3, 3).realize()
    y = F.conv2d(fg.exp(x), w, None, 1, 1, 1, 4)
    assert [k for k in fg.kernels(y) if "padded" in k.reason]
    g = np.zeros(y.shape)
    want = depthwise_np(np.exp(x.numpy()), w.numpy(), g, (1, 1), (1, 1), (1, 1))[0]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
