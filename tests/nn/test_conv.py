"""Convolution and pooling against a direct numpy reference, values and gradients."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad.ir import autodiff
from fusegrad.ir.layout import NEUTRAL, using
from fusegrad.ir.macro import expand_all
from fusegrad.ir.node import toposort
from fusegrad.ir.ops import Ops
from fusegrad.nn import conv as C
from fusegrad.pipeline.layout import layout_for
from fusegrad.pipeline.tiling import SHUFFLED_LANE_STEPS
from fusegrad.runtime.backend_registry import get_backend
from fusegrad.runtime.engine import engine

CPU = layout_for(get_backend("cpu"))  # the options a CPU plan's macros are expanded under


@pytest.fixture
def fresh_plans():
    """No plan cached before the test or kept after it: the test changes a rule or constant
    that a convolution's expansion reads when its plan is compiled (ir/layout.py), which
    no plan key holds."""
    engine.plans.clear()
    yield
    engine.plans.clear()


def ref_conv(x, w, b, stride, pad, dil, groups):
    """Direct loops over output positions, in float64, for any number of spatial axes."""
    n = x.ndim - 2
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    outs = [(x.shape[2 + i] - dil[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1 for i in range(n)]
    cout, cin_g = w.shape[:2]
    og = cout // groups
    out = np.zeros((x.shape[0], cout, *outs))
    for o in range(cout):
        g = o // og
        for pos in np.ndindex(*outs):
            sl = tuple(
                slice(p * s, p * s + d * (k - 1) + 1, d)
                for p, s, d, k in zip(pos, stride, dil, w.shape[2:])
            )
            patch = x[(slice(None), slice(g * cin_g, (g + 1) * cin_g), *sl)]
            out[(slice(None), o, *pos)] = (patch * w[o]).reshape(x.shape[0], -1).sum(1)
    if b is not None:
        out += b.reshape(1, cout, *([1] * n))
    return out


def ref_pool(x, k, s, p, kind):
    n = x.ndim - 2
    fill = -np.inf if kind == "max" else 0.0
    x = np.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in p], constant_values=fill)
    outs = [(x.shape[2 + i] - k[i]) // s[i] + 1 for i in range(n)]
    out = np.zeros(x.shape[:2] + tuple(outs))
    for pos in np.ndindex(*outs):
        sl = tuple(slice(q * si, q * si + ki) for q, si, ki in zip(pos, s, k))
        win = x[(slice(None), slice(None), *sl)].reshape(*x.shape[:2], -1)
        out[(slice(None), slice(None), *pos)] = win.max(-1) if kind == "max" else win.mean(-1)
    return out


@st.composite
def conv_cases(draw, dims):
    groups = draw(st.sampled_from([1, 2]))
    cin = groups * draw(st.integers(1, 2))
    cout = groups * draw(st.integers(1, 2))
    k = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    stride = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(dims))
    size = tuple(d * (kk - 1) + 1 + draw(st.integers(0, 4)) for kk, d in zip(k, dil))
    batch = draw(st.integers(1, 2))
    bias = draw(st.booleans())
    return batch, cin, cout, k, stride, dil, pad, size, groups, bias


def _conv_fn(dims):
    return C.conv1d if dims == 1 else C.conv2d


@pytest.mark.parametrize("dims", [1, 2])
@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_conv_matches_numpy_values_and_gradients(dims, data):
    batch, cin, cout, k, stride, dil, pad, size, groups, bias = data.draw(conv_cases(dims))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cin, *size))
    w = rng.standard_normal((cout, cin // groups, *k))
    b = rng.standard_normal(cout) if bias else None
    conv = _conv_fn(dims)
    xt, wt = fg.tensor(x, dtype=fg.float64), fg.tensor(w, dtype=fg.float64)
    bt = fg.tensor(b, dtype=fg.float64) if bias else None
    out = conv(xt, wt, bt, stride, pad, dil, groups)
    np.testing.assert_allclose(out.numpy(), ref_conv(x, w, b, stride, pad, dil, groups), atol=1e-10)
    inputs = [xt, wt] + ([bt] if bias else [])

    def fn(*ts):
        return conv(ts[0], ts[1], ts[2] if bias else None, stride, pad, dil, groups)

    assert fg.testing.gradcheck(fn, inputs, atol=1e-6, rtol=1e-5)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(case=conv_cases(2))
def test_conv_own_gradient_equals_the_derived_one(case):
    batch, cin, cout, k, stride, dil, pad, size, groups, bias = case
    rng = np.random.default_rng(1)
    x = fg.tensor(rng.standard_normal((batch, cin, *size)), dtype=fg.float64, requires_grad=True)
    w = fg.tensor(
        rng.standard_normal((cout, cin // groups, *k)), dtype=fg.float64, requires_grad=True
    )
    shape = C.conv2d(x, w, None, stride, pad, dil, groups).shape
    proj = fg.tensor(rng.standard_normal(shape), dtype=fg.float64)
    grads = []
    try:
        for custom in (True, False):
            autodiff.use_custom_vjp = custom
            out = C.conv2d(x, w, None, stride, pad, dil, groups)
            grads.append([g.numpy() for g in fg.grad((out * proj).sum(), [x, w])])
    finally:
        autodiff.use_custom_vjp = True
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("kind", ["max", "avg"])
@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    extra=st.tuples(st.integers(0, 4), st.integers(0, 4)),
    padded=st.booleans(),
)
def test_pool2d_matches_numpy(kind, k, s, extra, padded):
    p = tuple(kk // 2 for kk in k) if padded else (0, 0)
    size = tuple(kk + e for kk, e in zip(k, extra))
    x = np.random.default_rng(2).standard_normal((2, 3, *size))
    pool = C.max_pool2d if kind == "max" else C.avg_pool2d
    out = pool(fg.tensor(x, dtype=fg.float64), k, s, p)
    np.testing.assert_allclose(out.numpy(), ref_pool(x, k, s, p, kind), atol=1e-12)
    assert fg.testing.gradcheck(
        lambda t: pool(t, k, s, p), [fg.tensor(x, dtype=fg.float64)], atol=1e-6, rtol=1e-5
    )


def test_same_padding_keeps_the_width_even_for_even_kernels():
    x = fg.randn(2, 3, 11, dtype=fg.float64)
    w = fg.randn(4, 3, 4, dtype=fg.float64)
    out = C.conv1d(x, w, padding="same")
    assert out.shape == (2, 4, 11)
    # PyTorch puts the extra padding after: left 1, right 2 for k = 4
    ref = ref_conv(
        np.pad(x.numpy(), ((0, 0), (0, 0), (1, 2))), w.numpy(), None, (1,), (0,), (1,), 1
    )
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-10)


def test_conv_modules_follow_pytorch_shapes_and_init():
    fg.manual_seed(0)
    m = C.Conv2d(3, 8, 3, stride=2, padding=1)
    assert m.weight.shape == (8, 3, 3, 3) and m.bias.shape == (8,)
    bound = 1 / np.sqrt(3 * 9)
    assert np.abs(m.weight.numpy()).max() <= bound + 1e-7
    assert np.abs(m.bias.numpy()).max() <= bound + 1e-7
    assert m(fg.randn(2, 3, 9, 9)).shape == (2, 8, 5, 5)
    assert C.MaxPool2d(2)(fg.randn(1, 2, 7, 7)).shape == (1, 2, 3, 3)
    assert "kernel_size=(3, 3)" in repr(m)


def test_conv_errors_name_the_problem():
    with pytest.raises(fg.ShapeError, match="channels"):
        C.conv2d(fg.ones(1, 2, 5, 5), fg.ones(3, 1, 3, 3))
    with pytest.raises(fg.ShapeError, match="groups"):
        C.conv2d(fg.ones(1, 4, 5, 5), fg.ones(3, 2, 3, 3), groups=2)
    with pytest.raises(fg.ShapeError, match="larger"):
        C.conv2d(fg.ones(1, 1, 2, 2), fg.ones(1, 1, 3, 3))
    with pytest.raises(fg.DTypeError):
        C.conv2d(fg.ones(1, 1, 5, 5), fg.ones(1, 1, 3, 3, dtype=fg.float64))


def test_lenet_shapes_through_conv_and_pool():
    x = fg.randn(4, 1, 28, 28)
    h = C.max_pool2d(C.conv2d(x, fg.randn(6, 1, 5, 5), padding=2).relu(), 2)
    h = C.max_pool2d(C.conv2d(h, fg.randn(16, 6, 5, 5)).relu(), 2)
    assert h.shape == (4, 16, 5, 5)


def test_torch_names_are_exported():
    """PyTorch's homes: nn.Conv2d & co., and the functional ops in nn.functional."""
    import fusegrad.nn.functional as F
    from fusegrad import nn

    for name in ("Conv1d", "Conv2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d"):
        assert getattr(nn, name) is getattr(C, name)
    for name in ("conv1d", "conv2d", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"):
        assert getattr(F, name) is getattr(C, name)
    y = F.conv2d(fg.ones(1, 1, 4, 4), fg.ones(2, 1, 3, 3), padding=1)
    assert y[0, 0].tolist()[0] == [4.0, 6.0, 6.0, 4.0]


# Rows of 40 or 56 outputs (8 mod 16): on AVX-512 their tiles take 16-lane vectors, the last
# one masked (pipeline/lower.py, RAGGED_16_FROM). Every stride, dilation, group and padding
# form of the small cases above, at those widths, in float32 against float64 numpy (values,
# and the input, weight and bias gradients of a weighted sum), and the gradients of a
# float64 twin against central differences.
WIDE_ROW_CASES = [
    # dims, cin, cout, kernel, stride, dilation, padding, groups, input size
    (2, 3, 8, 3, 1, 1, 1, 1, (5, 56)),  # a padded 3x3: out 5x56
    (2, 4, 6, 3, 2, 1, 1, 2, (6, 112)),  # stride 2, groups 2: out 3x56
    (2, 2, 4, 3, 1, 2, 2, 1, (5, 56)),  # dilation 2: out 5x56
    (2, 2, 3, 1, 1, 1, 0, 1, (3, 40)),  # a 1x1 kernel: out 3x40
    (2, 3, 4, (2, 5), 1, (1, 2), (0, 2), 1, (4, 52)),  # mixed kernel and dilation: out 3x48
    (1, 4, 8, 3, 1, 1, 1, 2, (56,)),  # 1-D, groups 2: out 56
    (1, 3, 5, 5, 1, 1, 0, 1, (60,)),  # 1-D valid: out 56
]


@pytest.mark.parametrize("case", WIDE_ROW_CASES)
def test_conv_at_16_lane_row_widths_values_and_gradients(case):
    dims, cin, cout, k, stride, dil, pad, groups, size = case
    k, stride, dil, pad = (C.int_tuple(v, dims, "", "") for v in (k, stride, dil, pad))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, cin, *size)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, *k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    conv = _conv_fn(dims)
    want = ref_conv(x.astype(np.float64), w.astype(np.float64), b, stride, pad, dil, groups)
    xt, wt, bt = (fg.tensor(a, requires_grad=True) for a in (x, w, b))
    out = conv(xt, wt, bt, stride, pad, dil, groups)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-4, atol=1e-4)
    proj = rng.standard_normal(want.shape)
    (out * fg.tensor(proj.astype(np.float32))).sum().backward()
    grads = _numpy_conv_grads(x, w, proj, stride, pad, dil, groups)
    for got, ref in zip((xt.grad, wt.grad, bt.grad), (*grads, proj.sum((0, *range(2, 2 + dims))))):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-3)
    x64 = fg.tensor(x[:1, :, ...], dtype=fg.float64)
    w64, b64 = fg.tensor(w, dtype=fg.float64), fg.tensor(b, dtype=fg.float64)
    assert fg.testing.gradcheck(
        lambda x, w, b: conv(x, w, b, stride, pad, dil, groups), [x64, w64, b64], rtol=1e-5
    )


def _numpy_conv_grads(x, w, g, stride, pad, dil, groups):
    """dx and dw of sum(conv(x, w) * g), by the chain rule on ref_conv's loops, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    cout, cin_g = w.shape[:2]
    og = cout // groups
    for o in range(cout):
        cs = slice((o // og) * cin_g, (o // og + 1) * cin_g)
        for pos in np.ndindex(*g.shape[2:]):
            sl = tuple(
                slice(p * s, p * s + d * (k - 1) + 1, d)
                for p, s, d, k in zip(pos, stride, dil, w.shape[2:])
            )
            go = g[(slice(None), o, *pos)].reshape(-1, *([1] * (n + 1)))
            dxp[(slice(None), cs, *sl)] += go * w[o]
            dw[o] += (go * xp[(slice(None), cs, *sl)]).sum(0)
    inner = tuple(slice(p, p + s) for p, s in zip(pad, x.shape[2:]))
    return dxp[(slice(None), slice(None), *inner)], dw


def _check_input_and_weight_grads(out, g, xs, ws, geometry) -> None:
    """Backward from `out` with output gradient g; the input's and weight's gradients
    against numpy's (xs, ws: the leaf and its numpy value; geometry: stride, padding,
    dilation, groups)."""
    (xt, x), (wt, w) = xs, ws
    (out * fg.tensor(g)).sum().backward()
    dx, dw = _numpy_conv_grads(x, w, g, *geometry)
    np.testing.assert_allclose(xt.grad.numpy(), dx, atol=1e-10)
    np.testing.assert_allclose(wt.grad.numpy(), dw, atol=1e-10)


@pytest.mark.parametrize(
    "shape, kernel, padding",
    [
        ((1, 2, 3, 56), (3, 56), 0),  # a kernel as wide as the input: one output column
        ((2, 2, 4, 40), (4, 40), 0),  # a kernel as big as the input: a 1x1 output
        ((1, 2, 1, 56), (1, 1), 0),  # batch of 1, 1x1 kernel
        ((0, 2, 3, 56), (3, 3), 1),  # an empty batch
    ],
)
def test_conv_special_shapes_at_wide_rows(shape, kernel, padding):
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(shape), rng.standard_normal((3, shape[1], *kernel))
    xt = fg.tensor(x, dtype=fg.float64, requires_grad=True)
    wt = fg.tensor(w, dtype=fg.float64, requires_grad=True)
    out = C.conv2d(xt, wt, None, 1, padding)
    pads = (padding, padding)
    # (ref_conv's reshape cannot take an empty batch: a batch of one, cut to none)
    some = x if shape[0] else np.zeros((1, *shape[1:]))
    want = ref_conv(some, w, None, (1, 1), pads, (1, 1), 1)[: shape[0]]
    assert out.shape == want.shape
    np.testing.assert_allclose(out.detach().numpy(), want, atol=1e-10)
    g = rng.standard_normal(want.shape)
    (out * fg.tensor(g)).sum().backward()
    if not shape[0]:  # an empty batch: an empty input gradient and a zero weight one, as torch
        assert xt.grad.shape == shape and wt.grad.tolist() == np.zeros_like(w).tolist()
        return
    dx, dw = _numpy_conv_grads(x, w, g, (1, 1), pads, (1, 1), 1)
    np.testing.assert_allclose(xt.grad.numpy(), dx, atol=1e-10)
    np.testing.assert_allclose(wt.grad.numpy(), dw, atol=1e-10)


@pytest.mark.cpu_device  # the CPU lowering's phases, chunks and copies
@pytest.mark.parametrize("user_pad", [True, False])
def test_conv1d_of_permuted_word_vectors_is_copied_in_order_and_tiled(user_pad):
    """MiniTorch's sentiment CNN: (B, L, D) vectors, permute(0, 2, 1), F.pad(x, (0, k - 1)),
    conv1d. Read in place, the windows of that view are strided along L and guarded by the
    pad, and the contraction ran as a scalar loop; a copy in order (one read and write of
    each element, against the 100 x 3 reads of the windows) keeps its register tiles."""
    from fusegrad.nn import functional as F

    rng = np.random.default_rng(5)
    v = rng.standard_normal((3, 20, 6)).astype(np.float32)
    w = rng.standard_normal((16, 6, 3)).astype(np.float32)
    vt, wt = fg.tensor(v, requires_grad=True), fg.tensor(w, requires_grad=True)
    x = vt.permute(0, 2, 1)
    y = F.conv1d(F.pad(x, (0, 2)) if user_pad else x, wt)
    ks = fg.kernels(y)
    copy = [k for k in ks if "copied in order" in k.reason]
    assert len(copy) == 1, [(k.name, k.reason) for k in ks]
    assert "unrolled for i" in ks[-1].loop_ir and "vector for t" in ks[-1].loop_ir
    xp = np.pad(v.transpose(0, 2, 1), ((0, 0), (0, 0), (0, 2) if user_pad else (0, 0)))
    want = ref_conv(xp.astype(np.float64), w.astype(np.float64), None, (1,), (0,), (1,), 1)
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-4, atol=1e-4)
    g = rng.standard_normal(want.shape)
    (y * fg.tensor(g.astype(np.float32))).sum().backward()
    dxp, dw = _numpy_conv_grads(xp, w, g, (1,), (0,), (1,), 1)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-3)
    dv = dxp[:, :, :20].transpose(0, 2, 1)
    np.testing.assert_allclose(vt.grad.numpy(), dv, rtol=1e-4, atol=1e-3)


def test_an_input_read_once_by_its_windows_is_not_copied():
    """A 1x1 convolution with one output channel per group reads each element once: reading
    the permuted view in place costs no more than a copy would, so there is none."""
    x = fg.randn(2, 5, 4).permute(0, 2, 1)  # (2, 4, 5)
    w = fg.randn(4, 1, 1)
    y = C.conv1d(x, w, groups=4)
    assert not [k for k in fg.kernels(y) if "copied in order" in k.reason]
    want = x.numpy()[:, :, :] * w.numpy()[:, 0, 0][None, :, None]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)


def test_weight_grad_chunk_is_the_largest_divisor_that_fits_the_cache(monkeypatch):
    monkeypatch.setattr(C, "PANEL_CACHE_BYTES", 1000)
    assert C.weight_grad_chunk(64, 10) == 64  # all of it fits: one sum
    assert C.weight_grad_chunk(64, 300) == 2  # 3 would fit, but does not divide 64
    assert C.weight_grad_chunk(12, 300) == 3
    assert C.weight_grad_chunk(7, 300) == 1  # a prime batch: image by image
    assert C.weight_grad_chunk(4, 5000) == 1  # not even one image fits
    assert C.weight_grad_chunk(0, 5000) == 1  # an empty batch: one empty chunk


# The weight gradient summed in chunks of images (`weight_grad_chunk`), forced here with a tiny
# cache: every stride, dilation, group and padding form, special shapes, against float64 numpy
# and central differences.
CHUNKED_CASES = [
    # dims, cin, cout, kernel, stride, dilation, padding, groups, input size, batch
    (2, 3, 4, 3, 1, 1, 1, 1, (5, 6), 4),
    (2, 4, 6, 3, 2, 1, 1, 2, (6, 7), 4),
    (2, 2, 4, 3, 1, 2, 2, 1, (5, 5), 3),
    (2, 3, 4, (2, 3), (2, 1), (1, 2), (0, 2), 1, (5, 8), 6),
    (2, 2, 3, 1, 1, 1, 0, 1, (3, 4), 4),  # a 1x1 kernel
    (2, 2, 3, (3, 4), 1, 1, 0, 1, (3, 4), 4),  # a kernel as big as the input: output 1x1
    (2, 2, 3, 3, 1, 1, 1, 1, (4, 4), 1),  # batch 1
    (1, 4, 8, 3, 1, 1, 1, 2, (9,), 4),
    (1, 3, 5, 3, 3, 2, 0, 1, (11,), 5),
]


@pytest.mark.cpu_device  # the CPU lowering's phases, chunks and copies
@pytest.mark.parametrize("cache", [1, 600])  # image by image; two images at a time (mostly)
@pytest.mark.parametrize("case", CHUNKED_CASES)
@pytest.mark.usefixtures("fresh_plans")
def test_conv_weight_gradient_in_image_chunks(case, cache, monkeypatch):
    dims, cin, cout, k, stride, dil, pad, groups, size, batch = case
    k, stride, dil, pad = (C.int_tuple(v, dims, "", "") for v in (k, stride, dil, pad))
    monkeypatch.setattr(C, "PANEL_CACHE_BYTES", cache)
    chunks = []
    rule = C.weight_grad_chunk
    monkeypatch.setattr(C, "weight_grad_chunk", lambda *a: chunks.append(rule(*a)) or chunks[-1])
    rng = np.random.default_rng(6)
    x = rng.standard_normal((batch, cin, *size))
    w = rng.standard_normal((cout, cin // groups, *k))
    conv = _conv_fn(dims)
    xt = fg.tensor(x, dtype=fg.float64, requires_grad=True)
    wt = fg.tensor(w, dtype=fg.float64, requires_grad=True)
    out = conv(xt, wt, None, stride, pad, dil, groups)
    want = ref_conv(x, w, None, stride, pad, dil, groups)
    np.testing.assert_allclose(out.detach().numpy(), want, atol=1e-10)
    g = rng.standard_normal(want.shape)
    _check_input_and_weight_grads(out, g, (xt, x), (wt, w), (stride, pad, dil, groups))
    assert chunks and (batch == 1 or chunks[0] < batch), chunks  # the chunked path ran
    x1, w1 = fg.tensor(x[:2], dtype=fg.float64), fg.tensor(w, dtype=fg.float64)
    assert fg.testing.gradcheck(lambda x, w: conv(x, w, None, stride, pad, dil, groups), [x1, w1])


def test_conv_weight_gradient_of_an_empty_batch_in_chunks_is_zero(monkeypatch):
    """(backward() prunes an empty batch's graph: the rule itself, on an empty gradient)"""
    monkeypatch.setattr(C, "PANEL_CACHE_BYTES", 1)
    x, w = fg.zeros(0, 2, 5, 5, dtype=fg.float64), fg.ones(3, 2, 3, 3, dtype=fg.float64)
    g = fg.ones(0, 3, 5, 5, dtype=fg.float64)
    geometry = (x.shape, w.shape, [(1, 1), (1, 1)], (1, 1), (1, 1), 1, True)
    dx, dw = C.conv_vjp(g, x, w, geometry, "conv2d")
    assert dx.shape == (0, 2, 5, 5) and dw.shape == (3, 2, 3, 3) and not dw.numpy().any()


@pytest.mark.cpu_device  # the CPU lowering's phases, chunks and copies
def test_one_padded_copy_of_the_gradient_serves_both_gradients():
    """Stride 1: the input gradient reads the output gradient padded "full", the weight
    gradient its interior, from one copy that relu's backward writes straight into."""
    from fusegrad.nn import functional as F

    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 3, 9, 9)), rng.standard_normal((4, 3, 3, 3))
    g = rng.standard_normal((2, 4, 9, 9))
    xt = fg.tensor(x, dtype=fg.float64, requires_grad=True)
    wt = fg.tensor(w, dtype=fg.float64, requires_grad=True)
    y = F.relu(C.conv2d(xt, wt, None, 1, 1))
    dx, dw = fg.grad(y, [xt, wt], grad_outputs=fg.tensor(g, dtype=fg.float64))
    ks = fg.kernels(dx, dw)
    pads = [k for k in ks if "padded input" in k.reason]
    assert len(pads) == 2 and len(ks) == 5, [(k.name, k.reason) for k in ks]  # x's, g's
    (weight_grad,) = [k for k in ks if k.name.startswith("r_sum_4x3x3x3")]
    assert "float64[968]" in weight_grad.loop_ir  # reads the padded (2, 4, 11, 11) gradient
    gz = g * (ref_conv(x, w, None, (1, 1), (1, 1), (1, 1), 1) > 0)
    want_dx, want_dw = _numpy_conv_grads(x, w, gz, (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(dx.numpy(), want_dx, atol=1e-10)
    np.testing.assert_allclose(dw.numpy(), want_dw, atol=1e-10)


# Strided convolutions: the forward and weight gradient read their windows in place at a last
# axis' stride of 2, 3 or 4 (shuffled vector loads, pipeline/llvm.py), over their gathered
# windows (im2col, nn/correlate.py gather_windows) at a larger one where the copy pays (5 and 6
# below); the input gradient phase by
# phase with exact taps (transposed_by_phases): every axis' kernel below, above and at the
# stride, odd sizes, padding, dilation with stride (sharing a factor with it or not), groups and
# depthwise, one axis strided, output size 1, a kernel as big as the padded input, batch 1.
STRIDED_CASES = [
    # dims, cin, cout, kernel, stride, padding, dilation, groups, input size, batch
    (2, 3, 8, 3, 2, 1, 1, 1, (7, 8), 2),
    (2, 4, 8, 1, 2, 0, 1, 1, (5, 6), 2),  # 1x1 at stride 2: a subsample
    (2, 2, 8, 5, 2, 2, 1, 1, (9, 11), 2),  # 5x5 s2
    (2, 2, 8, 5, 3, 2, 1, 1, (9, 10), 2),
    (2, 2, 8, 2, 3, 0, 1, 1, (7, 8), 1),  # 2x2 s3: a phase no tap reaches
    (2, 2, 8, 2, 2, 0, 1, 1, (6, 7), 1),
    (2, 3, 8, (3, 4), (2, 1), (1, 0), 1, 1, (7, 9), 2),  # only the rows strided
    (2, 3, 8, (3, 4), (1, 2), (0, 1), 1, 1, (7, 9), 2),  # only the columns strided
    (2, 4, 8, 3, 2, 1, 1, 2, (6, 6), 2),  # groups
    (2, 4, 8, 3, 2, 1, 1, 4, (7, 9), 2),  # depthwise, two filters each
    (2, 2, 8, 3, 2, 2, 2, 1, (9, 8), 2),  # dilation 2 at stride 2: odd phases get no tap
    (2, 2, 8, 3, 3, 2, 2, 1, (11, 10), 2),  # dilation 2 at stride 3
    (2, 2, 8, 3, 2, 0, 1, 1, (3, 4), 2),  # output 1x1
    (2, 2, 8, (5, 4), 4, 1, 1, 1, (3, 2), 2),  # the kernel covers the padded input: 1x1
    (1, 3, 8, 3, 2, 1, 1, 1, (11,), 3),
    (1, 2, 8, 4, 3, 0, 1, 1, (13,), 2),
    (1, 2, 8, 3, 2, 1, 3, 2, (14,), 2),  # 1-D, dilation 3, groups
    (1, 2, 4, 3, 3, 0, 1, 1, (4,), 2),  # 1-D, output size 1
    (1, 3, 6, 1, 2, 0, 1, 3, (9,), 1),  # 1-D 1x1 depthwise-like, batch 1
    (3, 3, 8, (3, 2, 3), (2, 1, 3), (1, 0, 1), 1, 1, (7, 6, 5), 2),  # conv3d
    (2, 2, 8, 5, 5, 2, 1, 1, (12, 13), 2),  # stride 5: gathered windows
    (1, 3, 8, 7, 6, 3, 1, 1, (25,), 2),  # 1-D stride 6: gathered windows
    (2, 4, 8, 3, (1, 3), 1, (1, 2), 2, (6, 21), 2),  # stride 3 with dilation and groups
    (1, 4, 6, 5, 4, 2, 2, 2, (37,), 2),  # 1-D stride 4, dilation 2, groups: in place
]


@pytest.mark.cpu_device  # the CPU lowering's phases, chunks and copies
@pytest.mark.parametrize("case", STRIDED_CASES)
def test_strided_conv_values_and_gradients(case, monkeypatch):
    from fusegrad.nn import correlate as R
    from fusegrad.nn import functional as F

    dims, cin, cout, k, stride, pad, dil, groups, size, batch = case
    k, stride, pad, dil = (C.int_tuple(v, dims, "", "") for v in (k, stride, pad, dil))
    rng = np.random.default_rng(8)
    x = rng.standard_normal((batch, cin, *size))
    w = rng.standard_normal((cout, cin // groups, *k))
    b = rng.standard_normal(cout)
    conv = F.conv3d if dims == 3 else _conv_fn(dims)
    xt, wt, bt = (fg.tensor(a, dtype=fg.float64, requires_grad=True) for a in (x, w, b))
    out = conv(xt, wt, bt, stride, pad, dil, groups)
    gathered = [k for k in fg.kernels(out) if "im2col" in k.reason]
    pays = R.window_reads(w.shape, stride, groups) >= R.COPY_PAYS_FROM_READS
    # read in place (a phase-split copy or shuffled vector loads), but for a depthwise one
    in_place = stride[-1] in SHUFFLED_LANE_STEPS and not (groups > 1 and cin == groups)
    want_gathered = stride[-1] > 1 and pays and not in_place
    assert len(gathered) == want_gathered, [k.reason for k in fg.kernels(out)]
    want = ref_conv(x, w, b, stride, pad, dil, groups)
    np.testing.assert_allclose(out.detach().numpy(), want, atol=1e-10)
    # the input gradient's phases: their taps together are the kernel's, no zero tap
    phase_taps = []
    rule = R.correlate
    monkeypatch.setattr(
        R,
        "correlate",
        lambda x, w, *a, **kw: phase_taps.append(w.shape[2:]) or rule(x, w, *a, **kw),
    )
    g = rng.standard_normal(want.shape)
    _check_input_and_weight_grads(out, g, (xt, x), (wt, w), (stride, pad, dil, groups))
    # (an axis shorter than its stride has empty phases: the taps that reach only padding are
    # left out)
    every_phase = all(i >= s for i, s in zip(size, stride))
    assert sum(int(np.prod(t)) for t in phase_taps) <= int(np.prod(k)), phase_taps
    assert not every_phase or sum(int(np.prod(t)) for t in phase_taps) == int(np.prod(k))
    np.testing.assert_allclose(bt.grad.numpy(), g.sum((0, *range(2, 2 + dims))), atol=1e-10)
    x1, w1 = fg.tensor(x[:1], dtype=fg.float64), fg.tensor(w, dtype=fg.float64)
    assert fg.testing.gradcheck(lambda x, w: conv(x, w, None, stride, pad, dil, groups), [x1, w1])


def test_strided_conv_in_float32_on_an_empty_batch_and_at_special_values():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 16, 21, 19)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    xt, wt = fg.tensor(x, requires_grad=True), fg.tensor(w, requires_grad=True)
    out = C.conv2d(xt, wt, None, 2, 1)
    want = ref_conv(x.astype(np.float64), w.astype(np.float64), None, (2, 2), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-4, atol=1e-4)
    g = rng.standard_normal(want.shape)
    (out * fg.tensor(g.astype(np.float32))).sum().backward()
    dx, dw = _numpy_conv_grads(x, w, g, (2, 2), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-3)
    # an empty batch: an empty output, and the rule's gradients (zeros) on an empty gradient
    empty = C.conv2d(fg.zeros(0, 16, 20, 20), fg.tensor(w), None, 2, 1)
    assert empty.shape == (0, 32, 10, 10)
    x0, w64 = fg.zeros(0, 16, 20, 20, dtype=fg.float64), fg.tensor(w, dtype=fg.float64)
    geometry = (x0.shape, w64.shape, [(1, 1), (1, 1)], (2, 2), (1, 1), 1, True)
    dx0, dw0 = C.conv_vjp(fg.zeros(0, 32, 10, 10, dtype=fg.float64), x0, w64, geometry, "conv2d")
    assert dx0.shape == (0, 16, 20, 20) and dw0.shape == w.shape and not dw0.numpy().any()
    empty1 = C.conv1d(fg.zeros(0, 3, 11), fg.ones(4, 3, 3), None, 2, 1)
    assert empty1.shape == (0, 4, 6) and empty1.numpy().size == 0
    # -0, +-inf and NaN: signed zeros sum to +0 as in numpy; inf and NaN reach their windows
    xs = np.zeros((1, 1, 5, 5), np.float32)
    xs[0, 0, 0, 0], xs[0, 0, 2, 2], xs[0, 0, 4, 4] = -0.0, np.inf, np.nan
    got = C.conv2d(fg.tensor(xs), fg.ones(1, 1, 3, 3), None, 2, 1).numpy()
    want = ref_conv(xs.astype(np.float64), np.ones((1, 1, 3, 3)), None, (2, 2), (1, 1), (1, 1), 1)
    np.testing.assert_array_equal(got, want.astype(np.float32))


# (dims, cin, cout, kernel, stride, padding, dilation, groups, size, batch, chunk): float32,
# Cout/G a multiple of 16, so the weight gradient takes the output channels as lanes
CHANNELS_LAST_CASES = [
    (2, 8, 32, 3, 2, 1, 1, 1, (11, 12), 3, None),
    (2, 6, 32, 3, 2, 1, 1, 2, (9, 10), 2, None),  # groups: 16 channels a group
    (2, 4, 16, (3, 2), (2, 3), (1, 0), (2, 1), 1, (13, 11), 2, None),  # dilation, odd strides
    (1, 5, 16, 4, 3, 2, 1, 1, (23,), 4, None),
    (2, 8, 32, 3, 2, 1, 1, 1, (11, 12), 4, 1),  # a partial sum per image
    (2, 8, 32, 3, 2, 1, 1, 1, (2, 2), 2, None),  # one output pixel
]


@pytest.mark.cpu_device  # the CPU lowering's choice of lanes
@pytest.mark.parametrize("case", CHANNELS_LAST_CASES)
@pytest.mark.usefixtures("fresh_plans")
def test_a_strided_weight_gradient_takes_the_output_channels_as_lanes(case, monkeypatch):
    dims, cin, cout, k, stride, pad, dil, groups, size, batch, chunk = case
    k, stride, pad, dil = (C.int_tuple(v, dims, "", "") for v in (k, stride, pad, dil))
    if chunk:
        monkeypatch.setattr(C, "weight_grad_chunk", lambda batch, per_image: chunk)
    rng = np.random.default_rng(21)
    x = rng.standard_normal((batch, cin, *size)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, *k)).astype(np.float32)
    xt, wt = fg.tensor(x, requires_grad=True), fg.tensor(w, requires_grad=True)
    out = _conv_fn(dims)(xt, wt, None, stride, pad, dil, groups)
    g = rng.standard_normal(out.shape).astype(np.float32)
    g.reshape(-1)[:4] = [0.0, -0.0, 1.0, -1.0]  # (special values among the gradient's)
    (out * fg.tensor(g)).sum().backward()
    dx, dw = _numpy_conv_grads(x, w, g, stride, pad, dil, groups)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-5, atol=1e-4)
    reasons = [r.reason for r in fg.kernels(wt.grad)]
    assert any("channels last" in r for r in reasons), reasons


@pytest.mark.cpu_device  # the CPU lowering's choice of lanes
@pytest.mark.parametrize(
    "cout, dtype, stride, width, pad",
    [(24, "float32", 2, 9, 1), (32, "float64", 2, 9, 1), (32, "float32", 1, 9, 1),
     (32, "float32", 2, 32, 1), (32, "float32", 2, 9, 0)],
)  # fmt: skip
def test_other_weight_gradients_keep_the_pixels_as_lanes(cout, dtype, stride, width, pad):
    # (Cout/G not whole registers, another type, no stride, output rows of whole 16-lane
    # registers, or an input read in place, unpadded: the sum as before)
    x = fg.randn(2, 4, 9, width, dtype=getattr(fg, dtype))
    w = fg.randn(cout, 4, 3, 3, dtype=getattr(fg, dtype), requires_grad=True)
    C.conv2d(x, w, None, stride, pad).sum().backward()
    assert not any("channels last" in r.reason for r in fg.kernels(w.grad))


def test_a_strided_weight_gradient_by_channels_on_an_empty_batch_and_at_inf_and_nan():
    w = fg.ones(32, 3, 3, 3, requires_grad=True)
    C.conv2d(fg.zeros(0, 3, 8, 8), w, None, 2, 1).sum().backward()
    assert w.grad.shape == (32, 3, 3, 3) and not w.grad.numpy().any()
    x = np.zeros((1, 3, 6, 6), np.float32)
    x[0, 0, 1, 1], x[0, 1, 2, 2] = np.inf, np.nan
    w = fg.ones(32, 3, 3, 3, requires_grad=True)
    C.conv2d(fg.tensor(x), w, None, 2, 1).sum().backward()
    want = _numpy_conv_grads(x, np.ones((32, 3, 3, 3), np.float32), np.ones((1, 32, 3, 3)),
                             (2, 2), (1, 1), (1, 1), 1)[1]  # fmt: skip
    np.testing.assert_array_equal(w.grad.numpy(), want.astype(np.float32))


@pytest.mark.cpu_device  # the CPU lowering's choice of lanes
def test_a_strided_weight_gradient_by_channels_is_differentiable_again():
    # a gradient penalty through it (float32) against the same through the pixel-lane sum
    # (float64), each derivative within float32 rounding
    rng = np.random.default_rng(13)
    x0 = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    w0 = (rng.standard_normal((16, 3, 3, 3)) / 4).astype(np.float32)
    proj = rng.standard_normal((2, 16, 4, 4)).astype(np.float32)

    def penalty_grads(dtype):
        x, w = (fg.tensor(a, dtype=dtype, requires_grad=True) for a in (x0, w0))
        y = C.conv2d(x * x, w, None, 2, 1)
        (dw,) = fg.grad((y * y * fg.tensor(proj, dtype=dtype)).sum(), [w], create_graph=True)
        (dw * dw).sum().backward()
        return x.grad.numpy(), w.grad.numpy(), dw

    gx32, gw32, dw32 = penalty_grads(fg.float32)
    gx64, gw64, _ = penalty_grads(fg.float64)
    assert any("channels last" in r.reason for r in fg.kernels(dw32))
    np.testing.assert_allclose(gx32, gx64, rtol=1e-4, atol=1e-3 * np.abs(gx64).max())
    np.testing.assert_allclose(gw32, gw64, rtol=1e-4, atol=1e-3 * np.abs(gw64).max())


def test_strided_conv_gradients_are_differentiable_again():
    """The phase-by-phase input gradient and the gathered windows' weight gradient are graphs
    of differentiable ops: a gradient penalty through them matches central differences."""
    rng = np.random.default_rng(12)
    x = fg.tensor(rng.standard_normal((2, 3, 7, 8)), dtype=fg.float64)
    w = fg.tensor(rng.standard_normal((4, 3, 3, 3)), dtype=fg.float64)
    proj = fg.tensor(rng.standard_normal((2, 4, 4, 4)), dtype=fg.float64)

    def penalty(x, w):
        # (the central differences call it on plain tensors: grad() wants leaves that need it)
        x, w = (t if t.requires_grad else t.detach().requires_grad_() for t in (x, w))
        xx = x * x  # (so the input gradient depends on x, and its square on w)
        y = C.conv2d(xx, w, None, 2, 1)
        dx, dw = fg.grad((y * y * proj).sum(), [xx, w], create_graph=True)
        return (dx * dx).sum() + (dw * dw).sum()

    assert fg.testing.gradcheck(penalty, [x, w])


def test_a_strided_conv_that_reads_each_element_once_is_not_gathered():
    """A depthwise 1x1 convolution at stride 2 reads a quarter of its input once: the
    gathered copy would cost more than the strided reads it saves."""
    x = fg.randn(1, 4, 6, 6)
    y = C.conv2d(x, fg.randn(4, 1, 1, 1), None, 2, 0, 1, 4)
    assert not [k for k in fg.kernels(y) if "im2col" in k.reason]
    assert y.shape == (1, 4, 3, 3)


@pytest.mark.cpu_device  # the CPU lowering's phases, chunks and copies
def test_a_weight_gradient_alone_reads_the_output_gradient_with_no_padded_copy():
    """A first layer (an input without a gradient): no padded copy of the output gradient."""
    rng = np.random.default_rng(10)
    x = fg.tensor(rng.standard_normal((2, 3, 9, 9)), dtype=fg.float64)
    w = fg.tensor(rng.standard_normal((4, 3, 3, 3)), dtype=fg.float64, requires_grad=True)
    g = rng.standard_normal((2, 4, 9, 9))
    (dw,) = fg.grad(C.conv2d(x, w, None, 1, 1), [w], grad_outputs=fg.tensor(g, dtype=fg.float64))
    ks = fg.kernels(dw)
    assert len([k for k in ks if "padded input" in k.reason]) == 1, [k.reason for k in ks]
    _, want = _numpy_conv_grads(x.numpy(), w.detach().numpy(), g, (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(dw.numpy(), want, atol=1e-10)


def test_a_gradient_that_padding_grows_much_is_not_shared_with_the_weight_gradient():
    """LeNet's second convolution: 8x8 outputs, a 5x5 kernel, the gradient padded to 16x16
    (4x): the weight gradient reads the (2, 4, 8, 8) gradient, not the padded copy's interior."""
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((2, 3, 12, 12)), rng.standard_normal((4, 3, 5, 5))
    g = rng.standard_normal((2, 4, 8, 8))
    xt = fg.tensor(x, dtype=fg.float64, requires_grad=True)
    wt = fg.tensor(w, dtype=fg.float64, requires_grad=True)
    y = C.conv2d(xt, wt)
    dx, dw = fg.grad(y, [xt, wt], grad_outputs=fg.tensor(g, dtype=fg.float64))
    (weight_grad,) = [k for k in fg.kernels(dx, dw) if k.name.startswith("r_sum_4x3x5x5")]
    assert "float64[2048]" not in weight_grad.loop_ir  # not the padded (2, 4, 16, 16)
    want_dx, want_dw = _numpy_conv_grads(x, w, g, (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_allclose(dx.numpy(), want_dx, atol=1e-10)
    np.testing.assert_allclose(dw.numpy(), want_dw, atol=1e-10)


@pytest.mark.cpu_device  # the CPU lowering
@pytest.mark.parametrize("pad", [0, 1])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("dims, stride", [(1, 2), (1, 3), (2, 2), (2, (1, 4))])
def test_strided_conv_in_16_bit_storage_reads_windows_in_place(dtype, dims, stride, pad):
    """A 16-bit strided convolution reads its windows in place (no im2col): unpadded, as
    shuffled 16-bit vector loads; padded, from the phase-split copy. Forward and both
    gradients within a few 16-bit ulps of float64 on the rounded values; rows of 40-41
    outputs at stride 2 (two 16-lane vectors and a masked one)."""
    dt = getattr(fg, dtype)
    rng = np.random.default_rng(16)
    size = (83,) if dims == 1 else (9, 81)
    x32 = rng.standard_normal((2, 8, *size)).astype(np.float32)
    w32 = rng.standard_normal((16, 8, *([3] * dims))).astype(np.float32)
    xt = fg.tensor(x32).to(dt).detach().requires_grad_()
    wt = fg.tensor(w32).to(dt).detach().requires_grad_()
    s = C.int_tuple(stride, dims, "", "")
    out = _conv_fn(dims)(xt, wt, None, s, pad, 1, 1)
    reasons = [k.reason for k in fg.kernels(out)]
    assert not [r for r in reasons if "im2col" in r]
    assert len([r for r in reasons if "stride phases" in r]) == pad, reasons
    (forward,) = [k for k in fg.kernels(out) if k.name.startswith("r_sum")]
    # every step-th lane of a wider load picked
    shuffled = re.search(r"poison, <\d+ x i32> <i32 0, i32 [234], ", forward.llvm_ir)
    assert bool(shuffled) == (pad == 0) and "masked.gather" not in forward.llvm_ir
    x, w = (t.detach().float().numpy().astype(np.float64) for t in (xt, wt))
    want = ref_conv(x, w, None, s, (pad,) * dims, (1,) * dims, 1)
    scale = np.abs(want).max()
    tol = (2.0**-7 if dtype == "bfloat16" else 2.0**-10) * scale
    np.testing.assert_allclose(out.float().numpy(), want, atol=tol)
    g = rng.standard_normal(want.shape).astype(np.float32)
    gt = fg.tensor(g).to(dt)
    dx, dw = fg.grad(out, [xt, wt], grad_outputs=gt)
    want_dx, want_dw = _numpy_conv_grads(
        x, w, gt.float().numpy().astype(np.float64), s, (pad,) * dims, (1,) * dims, 1
    )
    for got, ref in ((dx, want_dx), (dw, want_dw)):
        unit = 2.0**-7 if dtype == "bfloat16" else 2.0**-10
        np.testing.assert_allclose(got.float().numpy(), ref, atol=4 * unit * np.abs(ref).max())


@pytest.mark.cpu_device  # the CPU lowering
@pytest.mark.parametrize("stride", [2, 3])
def test_a_padded_strided_convolution_reads_its_phase_split_copy_at_stride_1(stride):
    """The padded copy of a convolution strided along its last axis is split into the
    stride's phases (nn/correlate.py, `_phase_split`): the forward's and the weight
    gradient's windows read it with no step per lane in their loop IR, one copy shared
    by both; the input gradient's phase correlations read each phase's flipped
    weight copied with its rows contiguous; and the values and gradients are numpy's."""
    rng = np.random.default_rng(33)
    x = rng.standard_normal((2, 5, 11, 37)).astype(np.float32)
    w = rng.standard_normal((16, 5, 3, 3)).astype(np.float32)
    xt, wt = fg.tensor(x, requires_grad=True), fg.tensor(w, requires_grad=True)
    y = C.conv2d(xt, wt, None, stride, 1)
    g = rng.standard_normal(y.shape).astype(np.float32)
    dx, dw = fg.grad(y, [xt, wt], grad_outputs=fg.tensor(g))
    kernels = fg.kernels(y, dx, dw)
    splits = [k for k in kernels if "split into stride phases" in k.reason]
    assert len(splits) == 1, [k.reason for k in kernels]
    weights = [k for k in kernels if "phase's flipped weight" in k.reason]
    assert len(weights) == stride * stride, [k.reason for k in kernels]  # one tap each at 3
    phases = [k for k in kernels if k.name.startswith("r_sum_2x1x5x1x")]
    # the forward and the weight gradient (16 output channels: its lanes, the windows
    # broadcast from the same copy)
    sums = [k for k in kernels if k.name.startswith("r_sum_") and k not in phases]
    assert len(sums) == 2, [k.name for k in kernels]
    # each reads its phase's weight (5 x 16 x its taps), not the whole 16 x 5 x 3 x 3 (720)
    heads = [k.loop_ir.splitlines()[0] for k in phases]
    assert len(heads) == stride * stride and not any("[720]" in h for h in heads), heads
    for k in sums:
        assert f"t*{stride}]" not in k.loop_ir and "vector for t" in k.loop_ir, k.loop_ir
    s, p = (stride, stride), (1, 1)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = ref_conv(x64, w64, None, s, p, (1, 1), 1)
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-4, atol=1e-4)
    want_dx, want_dw = _numpy_conv_grads(x64, w64, g.astype(np.float64), s, p, (1, 1), 1)
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dw.numpy(), want_dw, rtol=1e-4, atol=1e-3)


@pytest.mark.cpu_device  # the CPU lowering's merged rows and split interleave
def test_a_stride_2_convolution_over_56_pixels_merges_its_28_pixel_rows_at_special_values(
    monkeypatch,
):
    """A stride-2 convolution of 56-pixel rows has 28-pixel output rows (16 + 12 lanes):
    its forward's tile runs along the merged pixels (49 whole vectors of 16 per image,
    loads of `% 28`), and its input gradient's phases are interleaved by a kernel split into
    its phases (pipeline/peel.py, `split_phases`: no `//` or `%` left in its loop IR, where
    per element a choice of phase was gathered). Values and gradients against float64
    numpy with -0.0, inf and NaN at a row's first and last columns, where a vector crosses
    from one row into the next, and -0.0 where the interleave copies a phase's gradient."""
    from fusegrad.pipeline import tile_choice

    monkeypatch.setattr(tile_choice, "wide_registers", lambda: True)
    rng = np.random.default_rng(14)
    x = rng.standard_normal((2, 3, 8, 56)).astype(np.float32)
    x[0, 0, :, -1] = np.inf
    x[0, 0, 2, 0] = -0.0
    x[1, 2, 5, 0] = np.nan
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    xt, wt = fg.tensor(x), fg.tensor(w)
    y = C.conv2d(xt, wt, None, 2, 1)
    (forward,) = [k for k in fg.kernels(y) if k.name.startswith("r_sum")]
    assert any("%28)" in i for i in _window_loads(forward)), "rows not merged"
    with np.errstate(invalid="ignore"):
        want = ref_conv(x.astype(np.float64), w.astype(np.float64), None, (2, 2), (1, 1), (1, 1), 1)
    got = y.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4)
    # the gradients of finite inputs; an output gradient of -0.0 at one pixel's window
    xc = np.nan_to_num(x, nan=0.5, posinf=2.0)
    g = rng.standard_normal(want.shape).astype(np.float32)
    g[:, :, 1:3, 3:5] = -0.0
    xt2, wt2 = fg.tensor(xc, requires_grad=True), fg.tensor(w, requires_grad=True)
    dx, dw = fg.grad(C.conv2d(xt2, wt2, None, 2, 1), [xt2, wt2], grad_outputs=fg.tensor(g))
    (interleave,) = [k for k in fg.kernels(dx) if k.name.startswith("e_pad_2x3x8x56")]
    body = interleave.loop_ir.split("\n", 9)[-1]
    assert "//" not in body and "%" not in body, interleave.loop_ir
    want_dx, want_dw = _numpy_conv_grads(xc, w, g.astype(np.float64), (2, 2), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dw.numpy(), want_dw, rtol=1e-4, atol=1e-3)
    # the gradient of a pixel whose every tap reads -0.0 is -0.0's products summed: +0.0
    np.testing.assert_array_equal(np.signbit(dx.numpy()), np.signbit(want_dx + 0.0))


@pytest.mark.parametrize(
    "op, x_shape, w_shape, kwargs",
    [
        ("conv2d", (0, 3, 8, 8), (4, 3, 3, 3), {"padding": 1}),
        ("conv2d", (0, 4, 9, 9), (6, 2, 3, 3), {"stride": 2, "groups": 2}),
        ("conv2d", (0, 4, 9, 9), (4, 1, 3, 3), {"padding": 1, "groups": 4}),  # depthwise
        ("conv1d", (0, 3, 11), (4, 3, 3), {"stride": 2, "padding": 1, "dilation": 2}),
        ("conv_transpose2d", (0, 4, 5, 5), (4, 2, 4, 4), {"stride": 2, "padding": 1}),
    ],
)
def test_an_empty_batch_gives_the_weight_and_bias_zero_gradients(op, x_shape, w_shape, kwargs):
    """torch: an empty batch's convolution leaves zeros in the weight's and bias's .grad (an
    optimizer with momentum or weight decay still updates them) and fg.grad returns zeros;
    fusegrad had None and raised "not used" (the weight's reshape, a temporary linked to the
    empty windows by a weak reference, was gone before the gradient was asked for)."""
    from fusegrad.nn import functional as F

    x = fg.zeros(*x_shape, requires_grad=True)
    w = fg.ones(*w_shape, requires_grad=True)
    b = fg.ones(w_shape[1] * kwargs.get("groups", 1) if "transpose" in op else w_shape[0])
    b.requires_grad_()
    y = getattr(F, op)(x, w, b, **kwargs)
    assert y.shape[0] == 0
    gx, gw, gb = fg.grad(y.sum(), [x, w, b])
    assert gx.shape == x_shape and not gw.numpy().any() and not gb.numpy().any()
    assert gw.shape == w_shape
    getattr(F, op)(x, w, b, **kwargs).sum().backward()
    assert w.grad is not None and w.grad.shape == w_shape and not w.grad.numpy().any()
    assert b.grad is not None and not b.grad.numpy().any()


def test_a_detached_weight_on_an_empty_batch_is_unused():
    """As in torch, fg.grad raises for a weight used only detached. (Empty values of one
    shape are one shared constant, which keeps the links of every computation that made
    it: a weight used undetached on the same shapes earlier in the process reads as used,
    with a zero gradient. The shapes here are this test's own.)"""
    from fusegrad.nn import functional as F

    x, w = fg.zeros(0, 7, 5, 5, requires_grad=True), fg.ones(3, 7, 2, 2, requires_grad=True)
    with pytest.raises(fg.GradError, match="not used"):
        fg.grad(F.conv2d(x, w.detach()).sum(), [w])


@pytest.mark.cpu_device  # the CPU lowering's blocks of channels and tiles
@pytest.mark.parametrize(
    "cout, dilation, blocks, width",
    [
        (64, 1, 2, 64),
        (48, 1, 2, 64),
        (40, 1, 1, 64),
        (128, 2, 4, 64),
        (512, 1, 1, 64),
        (45, 1, 1, 64),
        (64, 1, 1, 56),
    ],
)
def test_an_input_gradient_over_many_channels_is_summed_in_blocks(cout, dilation, blocks, width):
    """Where the window rows of a 2-D input gradient's sum over the output channels outgrow
    L1 (64 channels of 3 padded 66-pixel rows: 50.7 KB), the sum is partial sums over
    blocks of channels, added (`_blocked_correlate`): at most MAX_CHANNEL_BLOCKS, else one
    sum (512 channels would take 16); 40 channels (31.7 KB) fit; a channel count that
    halves no further stays one sum (45, odd). Rows whose tiles merge (56 pixels:
    `rows_merge`) are one sum, measured faster. Values and gradients against float64
    numpy either way."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4, width)).astype(np.float32)
    w = rng.standard_normal((cout, 3, 3, 3)).astype(np.float32)
    pad, dil = (dilation, dilation), (dilation, dilation)
    xt, wt = fg.tensor(x, requires_grad=True), fg.tensor(w, requires_grad=True)
    out = fg.nn.functional.conv2d(xt, wt, None, 1, pad, dil)
    proj = rng.standard_normal(out.shape).astype(np.float32)
    (dx,) = fg.grad((out * fg.tensor(proj)).sum(), [xt])
    sums = [k for k in fg.kernels(dx) if k.name.startswith("r_sum")]
    assert len(sums) == blocks, [k.name for k in sums]
    want_dx, _ = _numpy_conv_grads(x, w, proj.astype(np.float64), (1, 1), pad, dil, 1)
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-4, atol=1e-3)
    want = ref_conv(x.astype(np.float64), w.astype(np.float64), None, (1, 1), pad, dil, 1)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.cpu_device  # the CPU lowering's blocks of channels and tiles
def test_an_input_gradient_in_blocks_at_special_values():
    """The blocked input gradient (64 output channels over 64-pixel rows: two blocks) for an
    output gradient of zeros, -0.0, ties of +-1, an inf and a NaN: every entry as float64's
    chain rule gives it (inf where one infinite term reaches it, NaN where the NaN does),
    and an all -0.0 gradient gives zeros; against torch where it is installed."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 4, 64)).astype(np.float32)
    w = np.where(rng.standard_normal((64, 3, 3, 3)) > 0, 1.0, -1.0).astype(np.float32)
    g = np.where(rng.standard_normal((2, 64, 4, 64)) > 0, 1.0, -1.0).astype(np.float32)
    g[0, :32] = 0.0
    g[1, 40:] = -0.0
    g[0, 35, 2, 20] = np.inf
    g[1, 3, 1, 50] = np.nan
    xt, wt = fg.tensor(x, requires_grad=True), fg.tensor(w)
    (dx,) = fg.grad(fg.nn.functional.conv2d(xt, wt, None, 1, 1), [xt], grad_outputs=fg.tensor(g))
    assert len([k for k in fg.kernels(dx) if k.name.startswith("r_sum")]) == 2
    with np.errstate(invalid="ignore"):
        want, _ = _numpy_conv_grads(x, w, g.astype(np.float64), (1, 1), (1, 1), (1, 1), 1)
    got = dx.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.isinf(got).sum() == np.isinf(want).sum() > 0
    assert np.isnan(got).sum() == np.isnan(want).sum() > 0
    (dz,) = fg.grad(
        fg.nn.functional.conv2d(xt, wt, None, 1, 1), [xt], grad_outputs=fg.full(g.shape, -0.0)
    )
    assert (dz.numpy() == 0).all()
    try:
        import torch
    except ImportError:
        return
    xt2 = torch.tensor(x, requires_grad=True)
    torch.nn.functional.conv2d(xt2, torch.tensor(w), None, 1, 1).backward(torch.tensor(g))
    np.testing.assert_allclose(got, xt2.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.cpu_device  # the CPU lowering's blocks of channels and tiles
def test_a_weight_gradient_with_16_lanes_over_56_pixel_rows_at_special_values():
    """Lanes along the summed pixels, 16 wide with the last vector masked: an inf at the
    end of one row and a NaN at the start of the next reach exactly the weights float64's
    chain rule says (a lane past the row's end reads nothing), ties of +-1, zeros and -0.0
    elsewhere; against torch where it is installed."""
    from fusegrad.pipeline.tile_choice import wide_registers

    rng = np.random.default_rng(9)
    x = np.where(rng.standard_normal((2, 4, 5, 56)) > 0, 1.0, -1.0).astype(np.float32)
    x[0, 1] = 0.0
    x[1, 2] = -0.0
    x[0, 0, 2, 55] = np.inf
    x[1, 3, 3, 0] = np.nan
    g = rng.standard_normal((2, 8, 5, 56)).astype(np.float32)
    xt, wt = fg.tensor(x), fg.tensor(np.ones((8, 4, 3, 3), np.float32), requires_grad=True)
    (dw,) = fg.grad(fg.nn.functional.conv2d(xt, wt, None, 1, 1), [wt], grad_outputs=fg.tensor(g))
    if wide_registers():
        notes = [k.loop.tile_note for k in fg.kernels(dw) if "along the sum" in k.loop.tile_note]
        assert notes and all("x 16 lanes along the sum" in n for n in notes), notes
    with np.errstate(invalid="ignore"):
        _, want = _numpy_conv_grads(
            x, np.ones((8, 4, 3, 3)), g.astype(np.float64), (1, 1), (1, 1), (1, 1), 1
        )
    got = dw.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert (np.isinf(got) == np.isinf(want)).all() and np.isinf(want).any()
    assert (np.isnan(got) == np.isnan(want)).all() and np.isnan(want).any()
    try:
        import torch
    except ImportError:
        return
    wt2 = torch.ones((8, 4, 3, 3), requires_grad=True)
    torch.nn.functional.conv2d(torch.tensor(x), wt2, None, 1, 1).backward(torch.tensor(g))
    np.testing.assert_allclose(got, wt2.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.usefixtures("fresh_plans")
def test_a_gradient_nothing_asks_for_is_not_built(stride, monkeypatch):
    """A network's first layer: its input wants no gradient, so the backward does not build
    the input gradient's graph (0.4 ms of Python a call); a frozen weight's likewise. What
    is asked for is still exact, a non-leaf's or one that does not require a gradient
    (fusegrad differentiates for any tensor it is asked about) included, at special
    values (zeros, -0.0, ties, inf) against float64 numpy."""
    built = []
    for name in ("_blocked_correlate", "transposed_by_phases", "_input_weight_grad"):
        orig = getattr(C, name)

        def counted(*a, _orig=orig, _name=name, **kw):
            built.append(_name)
            return _orig(*a, **kw)

        monkeypatch.setattr(C, name, counted)
    x = np.zeros((2, 3, 7, 8))
    x[0, 0, 1:3] = [[-0.0, 1.0, 1.0, np.inf, 2.0, -1.0, 0.0, 3.0]] * 2
    x[1] = np.arange(3 * 7 * 8).reshape(3, 7, 8) % 5 - 2.0
    w = np.arange(4 * 3 * 9).reshape(4, 3, 3, 3) % 7 - 3.0
    g = np.ones((2, 4, *(((7 + 2 - 3) // stride + 1), ((8 + 2 - 3) // stride + 1))))
    geometry = ((stride, stride), (1, 1), (1, 1), 1)

    def conv(xt, wt):
        return C.conv2d(xt, wt, None, stride, 1)

    xt = fg.tensor(x, dtype=fg.float64)
    wt = fg.tensor(w, dtype=fg.float64, requires_grad=True)
    (dw,) = fg.grad(conv(xt, wt), [wt], grad_outputs=fg.tensor(g))
    input_grads = {"_blocked_correlate", "transposed_by_phases"}  # (by stride and device)
    with np.errstate(invalid="ignore"):
        want_dx, want_dw = _numpy_conv_grads(x, w, g, geometry[0], *geometry[1:])
    # (the rules run where the plan's macros are expanded: when it is compiled)
    np.testing.assert_allclose(dw.numpy(), want_dw, atol=1e-10)
    assert not input_grads & set(built), built
    built.clear()
    xg = fg.tensor(x, dtype=fg.float64, requires_grad=True)
    (dx,) = fg.grad(conv(xg * 1, fg.tensor(w, dtype=fg.float64)), [xg], grad_outputs=fg.tensor(g))
    np.testing.assert_allclose(dx.numpy(), want_dx, atol=1e-10)
    assert input_grads & set(built) and "_input_weight_grad" not in built, built
    (dx_asked,) = fg.grad(conv(xt, wt), [xt], grad_outputs=fg.tensor(g))  # xt: no requires_grad
    np.testing.assert_allclose(dx_asked.numpy(), want_dx, atol=1e-10)


def _window_loads(kernel) -> list[str]:
    from fusegrad.pipeline.loopir import Load, Loop

    def walk(body):
        for s in body:
            if isinstance(s, Loop):
                yield from walk(s.body)
            elif isinstance(s, Load):
                yield str(s.index)

    return list(walk(kernel.loop.body))


# Rows of 28 to 60 pixels whose vectors would be ragged: the tile's lanes run along the
# merged (row, column) output group instead (pipeline/lower.py, `_rows_merged`), each vector
# read as one contiguous run or, where it crosses a row, two (`split_lanes`): heights such
# that the pattern of crossings repeats a whole number of times (lcm(32, row) pixels), and
# widths whose pattern is short (`MAX_ROW_PERIOD`: a 60-pixel row, period 15, is not merged).
MERGED_ROW_CASES = [
    # (batch, cin, height, width), cout, kernel, padding, dilation, groups
    ((2, 5, 4, 56), 16, 3, 1, 1, 1),  # 56 wide: 7 tiles of 32 lanes every 4 rows
    ((1, 3, 8, 56), 8, 3, 1, 1, 1),  # 8 rows: the pattern twice
    ((2, 4, 12, 40), 8, 5, 2, 1, 1),  # 40: lcm 160, every 4 rows; a 5x5
    ((1, 4, 4, 56), 6, 3, 2, 2, 2),  # dilation 2 and groups
    ((2, 3, 4, 28), 8, 3, 1, 1, 1),  # 28 wide (`ROWS_MERGE_FROM`): 7 tiles of 16 every 4 rows
]


@pytest.mark.cpu_device  # the CPU lowering's tiles
@pytest.mark.parametrize("case", MERGED_ROW_CASES)
def test_conv_tiles_merged_rows_at_special_values(case, monkeypatch):
    """The forward and the input gradient (the same correlation) over merged rows: values
    and all three gradients against float64 numpy, with inf, NaN and -0.0 at the first and
    last columns, where a vector crosses from one row into the next (on any host: the
    AVX-512 tiles are what is tested; LLVM splits them where the registers are narrower)."""
    from fusegrad.pipeline import tile_choice

    monkeypatch.setattr(tile_choice, "wide_registers", lambda: True)
    shape, cout, k, pad, dil, groups = case
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, :, -1] = np.inf  # the last column of every row of one channel
    x[0, 0, 1, 0] = -0.0
    x[-1, -1, -1, 0] = np.nan  # a first column
    x[0, 1 % shape[1], :2] = 1.0  # ties
    w = rng.standard_normal((cout, shape[1] // groups, k, k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    xt, wt, bt = (fg.tensor(a, requires_grad=True) for a in (x, w, b))
    out = C.conv2d(xt, wt, bt, 1, pad, dil, groups)
    (forward,) = [r for r in fg.kernels(out) if r.name.startswith("r_sum")]
    width = shape[3]
    assert any(f"%{width})" in i or f"//{width})" in i for i in _window_loads(forward)), (
        "rows not merged"
    )
    with np.errstate(invalid="ignore"):
        want = ref_conv(
            x.astype(np.float64), w.astype(np.float64), b, (1, 1), (pad,) * 2, (dil,) * 2, groups
        )
    got = out.detach().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4)
    g = rng.standard_normal(want.shape).astype(np.float32)
    xc = np.nan_to_num(x, nan=0.5, posinf=2.0)  # the gradients of finite inputs
    xt2, wt2, bt2 = (fg.tensor(a, requires_grad=True) for a in (xc, w, b))
    (C.conv2d(xt2, wt2, bt2, 1, pad, dil, groups) * fg.tensor(g)).sum().backward()
    dx, dw = _numpy_conv_grads(xc, w, g.astype(np.float64), (1, 1), (pad,) * 2, (dil,) * 2, groups)
    np.testing.assert_allclose(xt2.grad.numpy(), dx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(wt2.grad.numpy(), dw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(bt2.grad.numpy(), g.sum((0, 2, 3)), rtol=1e-4, atol=1e-3)
    # the weight gradient sums over the merged pixels too, inf and NaN inputs included
    (dw_special,) = fg.grad(
        C.conv2d(fg.tensor(x), wt2, None, 1, pad, dil, groups), [wt2], grad_outputs=fg.tensor(g)
    )
    kernels = [r for r in fg.kernels(dw_special) if r.name.startswith("r_sum")]
    assert any(f"%{width})" in i for r in kernels for i in _window_loads(r)), "sum not merged"
    with np.errstate(invalid="ignore"):
        _, want_dw = _numpy_conv_grads(
            x, w, g.astype(np.float64), (1, 1), (pad,) * 2, (dil,) * 2, groups
        )
    got = dw_special.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want_dw))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want_dw))
    fin = np.isfinite(want_dw)
    np.testing.assert_allclose(got[fin], want_dw[fin], rtol=1e-4, atol=1e-3)


@pytest.mark.cpu_device  # the CPU lowering's copies
def test_merged_rows_read_a_contiguous_output_gradient_for_the_weight():
    """Over rows whose tiles merge (56 pixels), relu's gradient is stored contiguous for
    the weight gradient, whose 16-lane vectors would straddle cache lines in the padded
    copy's rows, and padded from there for the input gradient; values and all three
    gradients against float64 numpy, at relu's kink (zero pre-activations) and ties."""
    from fusegrad.nn import functional as F

    rng = np.random.default_rng(12)
    x = np.where(rng.standard_normal((2, 3, 8, 56)) > 0, 1.0, -1.0).astype(np.float32)
    x[0, :, 1:4] = 0.0  # with a zero bias, a whole row of zero pre-activations: the kink
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 5, 8, 56)).astype(np.float32)
    xt, wt = fg.tensor(x, requires_grad=True), fg.tensor(w, requires_grad=True)
    bt = fg.zeros(5, requires_grad=True)
    y = F.relu(C.conv2d(xt, wt, bt, 1, 1))
    dx, dw, db = fg.grad(y, [xt, wt, bt], grad_outputs=fg.tensor(g))
    reasons = [k.reason for k in fg.kernels(dx, dw, db)]
    assert any("contiguous for the weight gradient" in r for r in reasons), reasons
    z = ref_conv(x.astype(np.float64), w.astype(np.float64), None, (1, 1), (1, 1), (1, 1), 1)
    assert (z[0, :, 2] == 0).all()
    gz = np.where(z > 0, g, 0.0)
    want_dx, want_dw = _numpy_conv_grads(x, w, gz, (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(y.numpy(), np.maximum(z, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw.numpy(), want_dw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(db.numpy(), gz.sum((0, 2, 3)), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- the phases as one node


@pytest.mark.cpu_device  # the CPU's macro node (the cuda device composes the phases)
def test_a_strided_transposed_convolution_is_one_macro_node_with_the_composed_values():
    """`conv_transpose2d` builds one MACRO node (its expansion under the CPU's layout: the
    composed phases, `transposed_by_phases`), so a call whose plan is cached builds no
    phase graph; its value is the composed form's bit for bit, its first and second
    derivatives to the last bits."""
    from fusegrad.nn import correlate as K

    rng = np.random.default_rng(5)
    xs, ws = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((3, 2, 3, 3))
    xs[0, 0, 0, :2] = [0.0, -0.0]

    params = []

    def run(composed: bool):
        x = fg.tensor(xs, requires_grad=True)
        w = fg.tensor(ws, requires_grad=True)
        if composed:
            pads, _, stride, dilation, groups, _, op = params[0]
            with using(CPU):
                y = K._phases_composed(
                    [x, w],
                    ((2, 2, 10, 7), [(p, p) for p in pads], stride, dilation, groups, op),
                )
        else:
            y = fg.nn.functional.conv_transpose2d(x, w, None, 2, 1, output_padding=(1, 0))
            assert y.node.op is Ops.MACRO and y.node.arg[0] == "conv_transpose"
            params.append(y.node.arg[1])
        assert y.shape == (2, 2, 10, 7)
        gx, gw = fg.grad((y * y).sum(), [x, w], create_graph=True)
        (ggx,) = fg.grad((gx * gx).sum() + gw.sum(), [x])
        return [t.detach().numpy() for t in (y, gx, gw, ggx)]

    got, want = run(False), run(True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(want[0]))
    for g, w in zip(got[1:], want[1:]):  # the same terms, fused into kernels apart: 1e-15
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13)


def test_a_strided_convolutions_input_gradient_is_one_macro_node():
    # one "layout_grad" node, whose expansion under the CPU's layout is the transposed
    # convolution phase by phase (each phase's flipped weight copied), and under the
    # neutral one (the GPU's) the correlation of the stride-dilated gradient
    x = fg.randn(2, 3, 9, 9, dtype=fg.float64, requires_grad=True)
    w = fg.randn(4, 3, 3, 3, dtype=fg.float64)
    y = fg.nn.functional.conv2d(x, w, None, 2, 1)
    (gx,) = fg.grad(y.sum(), [x])
    node = gx.node.srcs[0] if gx.node.op is Ops.DETACH else gx.node
    assert node.op is Ops.MACRO and node.arg[0] == "layout_grad"

    def copies(layout):
        (root,) = expand_all([node], layout=layout)
        return [str(n.arg) for n in toposort([root]) if n.op is Ops.CONTIGUOUS]

    assert any("phase's flipped weight" in r for r in copies(CPU))
    assert not copies(NEUTRAL)
    # against torch's
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x.detach().numpy(), requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, torch.tensor(w.numpy()), None, 2, 1)
    (gt,) = torch.autograd.grad(yt.sum(), [xt])
    np.testing.assert_allclose(gx.numpy(), gt.numpy(), rtol=1e-12, atol=1e-12)


# (x shape, weight shape, stride, padding, dilation, bias): every one takes the sgemm path
# (`pixel_gemm_pays`): output rows shorter than 16 lanes, windows of >= 256 values or a
# 1x1 kernel
PIXEL_GEMM_CASES = [
    ((2, 32, 4, 4), (16, 32, 3, 3), 1, 1, 1, False),
    ((3, 32, 7, 7), (32, 32, 3, 3), 2, 1, 1, True),  # stride 2, odd size
    ((2, 32, 8, 9), (16, 32, 3, 3), 2, 0, 1, False),  # rows and columns left uncovered
    ((2, 32, 6, 5), (16, 32, 3, 3), 1, 2, 2, True),  # dilated, non-square
    ((2, 256, 8, 8), (32, 256, 1, 1), 2, 0, 1, False),  # a ResNet shortcut: 1x1, stride 2
    ((3, 64, 7, 7), (32, 64, 1, 1), 2, 0, 1, False),  # a shallow shortcut: 64 values a window
    ((2, 16, 8, 8), (16, 16, 1, 1), 2, 0, 1, True),  # 16 values a window
    ((2, 128, 5, 5), (16, 128, 2, 2), 1, "same", 1, True),  # padding (0, 1) on each axis
]


def _conv_both(x0, w0, b0, stride, padding, dilation, dtype):
    """(y, dx, dw, db) of conv2d in `dtype` (float64: the correlation's path, the oracle)."""
    x = fg.tensor(x0, dtype=dtype, requires_grad=True)
    w = fg.tensor(w0, dtype=dtype, requires_grad=True)
    b = None if b0 is None else fg.tensor(b0, dtype=dtype, requires_grad=True)
    y = C.conv2d(x, w, b, stride, padding, dilation)
    proj = np.random.default_rng(5).standard_normal(y.shape)
    (y * fg.tensor(proj, dtype=dtype)).sum().backward()
    grads = [x.grad.numpy(), w.grad.numpy()] + ([] if b is None else [b.grad.numpy()])
    return y, [y.numpy(), *grads]


@pytest.mark.cpu_device  # the CPU lowering's sgemm path (its kernels' reasons)
@pytest.mark.parametrize("case", PIXEL_GEMM_CASES)
def test_small_images_run_as_sgemms_values_and_gradients(case):
    x_shape, w_shape, stride, padding, dilation, bias = case
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(x_shape).astype(np.float32)
    w0 = (rng.standard_normal(w_shape) / 16).astype(np.float32)
    b0 = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    xt, wt = fg.tensor(x0), fg.tensor(w0)
    pads = [(0, 1)] * 2 if padding == "same" else [(padding, padding)] * 2
    with using(CPU):  # (as the CPU's plan expands the convolution)
        assert C.pixel_gemm_pays(xt, wt, pads, (stride,) * 2, (dilation,) * 2, 1)
    y32, got = _conv_both(x0, w0, b0, stride, padding, dilation, fg.float32)
    assert any("pixel by pixel" in r.reason for r in fg.kernels(y32))
    _, want = _conv_both(x0, w0, b0, stride, padding, dilation, fg.float64)
    if padding != "same":  # (the numpy loops pad both sides alike)
        f64 = [None if a is None else a.astype(np.float64) for a in (x0, w0, b0)]
        ref = ref_conv(*f64, (stride,) * 2, (padding,) * 2, (dilation,) * 2, 1)
        np.testing.assert_allclose(want[0], ref, atol=1e-10)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())


def _same_special(got, want):
    """float32 results where the float64 ones are NaN or infinite, and close elsewhere."""
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(np.isinf(a), np.isinf(b))
        ok = np.isfinite(b)
        np.testing.assert_allclose(a[ok], b[ok], rtol=1e-4, atol=1e-5 * np.abs(b[ok]).max())


def _empty_batch(w0, image, stride, padding, out):
    """An empty batch gives an empty output, an empty input gradient and a zero weight's."""
    x = fg.zeros(0, *image, requires_grad=True)
    w = fg.tensor(w0, requires_grad=True)
    y = C.conv2d(x, w, None, stride, padding)
    assert y.shape == (0, *out)
    y.sum().backward()
    assert x.grad.shape == (0, *image) and not w.grad.numpy().any()


def test_small_images_as_sgemms_at_special_values_and_on_an_empty_batch():
    # a NaN and an infinity in the input reach exactly the outputs (and gradients) whose
    # windows hold them, as the correlation's; a -0 input is a plain 0; an empty batch
    # gives an empty output and zero weight gradients
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((2, 32, 4, 4)).astype(np.float32)
    x0[0, 3, 1, 2], x0[1, 7, 3, 3], x0[1, 0, 0, 0] = np.nan, np.inf, -0.0
    w0 = (rng.standard_normal((16, 32, 3, 3)) / 16).astype(np.float32)
    _, got = _conv_both(x0, w0, None, 1, 1, 1, fg.float32)
    _, want = _conv_both(x0, w0, None, 1, 1, 1, fg.float64)
    _same_special(got, want)
    _empty_batch(w0, (32, 4, 4), 1, 1, (16, 4, 4))


def test_a_strided_1x1_as_an_sgemm_at_special_values_and_on_an_empty_batch():
    # a shallow 1x1 shortcut at stride 2 (the sgemm path by its kernel, not its depth): a
    # NaN, an infinity and a -0 on sampled pixels reach exactly their outputs and
    # gradients; a NaN on a pixel the stride skips reaches nothing, its gradient is 0
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((2, 64, 7, 7)).astype(np.float32)
    x0[0, 3, 2, 2], x0[1, 7, 4, 4], x0[1, 0, 0, 0] = np.nan, np.inf, -0.0
    x0[0, 5, 1, 1] = np.nan  # (odd coordinates: skipped by the stride)
    w0 = (rng.standard_normal((32, 64, 1, 1)) / 8).astype(np.float32)
    with using(CPU):
        assert C.pixel_gemm_pays(fg.tensor(x0), fg.tensor(w0), [(0, 0)] * 2, (2, 2), (1, 1), 1)
    y32, got = _conv_both(x0, w0, None, 2, 0, 1, fg.float32)
    if y32.device.type == "cpu":  # (the CPU's lowering: the cuda device has its own)
        assert any("pixel by pixel" in r.reason for r in fg.kernels(y32))
    _, want = _conv_both(x0, w0, None, 2, 0, 1, fg.float64)
    _same_special(got, want)
    assert np.isnan(got[0][0, :, 1, 1]).all() and not np.isnan(got[0][0, :, 0, 0]).any()
    assert got[1][0, 5, 1, 1] == 0  # the skipped pixel's gradient
    _empty_batch(w0, (64, 7, 7), 2, 0, (32, 4, 4))


def test_small_images_as_sgemms_are_differentiable_again():
    # a gradient penalty through both gradients (float32) against the correlation's
    # (float64), each derivative within float32 rounding
    rng = np.random.default_rng(6)
    x0 = rng.standard_normal((2, 32, 4, 4)).astype(np.float32)
    w0 = (rng.standard_normal((16, 32, 3, 3)) / 16).astype(np.float32)

    def penalty_grads(dtype):
        x, w = (fg.tensor(a, dtype=dtype, requires_grad=True) for a in (x0, w0))
        xx = x * x
        y = C.conv2d(xx, w, None, 1, 1)
        dx, dw = fg.grad((y * y).sum(), [xx, w], create_graph=True)
        ((dx * dx).sum() + (dw * dw).sum()).backward()
        return x.grad.numpy(), w.grad.numpy()

    for a, b in zip(penalty_grads(fg.float32), penalty_grads(fg.float64)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max())


@pytest.mark.parametrize(
    "x_shape, w_shape, groups",
    [
        ((2, 32, 16, 16), (16, 32, 3, 3), 1),  # rows of 16 pixels fill the lanes
        ((2, 16, 4, 4), (16, 16, 3, 3), 1),  # 144 values a window
        ((2, 32, 4, 4), (24, 32, 3, 3), 1),  # 24 output channels: no whole registers
        ((2, 64, 4, 4), (32, 32, 3, 3), 2),  # grouped
    ],
)
def test_other_convolutions_keep_the_correlation(x_shape, w_shape, groups):
    x, w = fg.ones(*x_shape), fg.ones(*w_shape)
    assert not C.pixel_gemm_pays(x, w, [(1, 1)] * 2, (1, 1), (1, 1), groups)
    assert not C.pixel_gemm_pays(
        x.to(fg.bfloat16), w.to(fg.bfloat16), [(1, 1)] * 2, (1, 1), (1, 1), groups
    )


# ---------------------------------------------------------------- output_size


@pytest.mark.parametrize(
    "n, shape, stride, padding, dilation, size",
    [
        (1, (2, 3, 5), 2, 1, 1, [10]),
        (2, (2, 2, 4, 4), 2, 1, 1, [8, 8]),
        (2, (2, 2, 4, 3), (3, 2), (1, 0), (1, 2), [2, 2, 11, 10]),  # (with batch, channels)
        (3, (1, 2, 2, 3, 2), 2, 0, 1, [5, 8, 6]),
        (2, (2, 4, 4), 2, 1, 1, [2, 7, 8]),  # unbatched: channels and sizes
    ],
)
def test_transposed_convolution_output_size_picks_the_output_padding(
    n, shape, stride, padding, dilation, size
):
    """`forward(x, output_size)` equals the layer run with the output padding that gives
    those sizes (torch's `_output_padding`), inside the range the stride allows."""
    layer = getattr(fg.nn, f"ConvTranspose{n}d")(
        shape[-n - 1], 3, 3, stride=stride, padding=padding, dilation=dilation
    )
    x = fg.tensor(np.random.default_rng(5).standard_normal(shape).astype(np.float32))
    out = layer(x, output_size=size)
    assert list(out.shape[-n:]) == size[-n:]
    pads = tuple(a - b for a, b in zip(size[-n:], layer(x).shape[-n:]))
    fn = getattr(fg.nn.functional, f"conv_transpose{n}d")
    want = fn(x, layer.weight, layer.bias, layer.stride, layer.padding, pads, 1, layer.dilation)
    np.testing.assert_array_equal(out.numpy(), want.numpy())


def test_transposed_convolution_output_size_out_of_range_raises():
    layer = fg.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    x = fg.ones(1, 2, 4, 4)
    said = r"output size of \[9, 8\], but valid sizes range from \[7, 7\] to \[8, 8\]"
    with pytest.raises(ValueError, match=said):
        layer(x, output_size=[9, 8])
    with pytest.raises(ValueError, match="output_size must have 2 or 4 elements"):
        layer(x, output_size=[8])
    assert layer(x, output_size=(1, 3, 7, 8)).shape == (1, 3, 7, 8)
    assert layer(fg.ones(0, 2, 4, 4), output_size=[8, 7]).shape == (0, 3, 8, 7)  # an empty batch
