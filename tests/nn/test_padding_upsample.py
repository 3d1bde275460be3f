"""F.pad, pooling options, transposed convolutions, interpolate and Embedding(padding_idx)
against numpy references: values, and float64 central-difference gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn
from fusegrad.testing import gradcheck

RNG = np.random.default_rng(7)
NP_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def t64(a):
    return fg.tensor(np.asarray(a, np.float64), dtype=fg.float64)


# ---------------------------------------------------------------- F.pad


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(1, 2), (2, 0, 1, 3), (0, 1, 2, 2)])
def test_pad_matches_numpy(mode, pad):
    # non-constant modes pad the last len(pad) / 2 dims of an input with 1 or 2 more
    x = RNG.standard_normal((2, 3, 4, 5)[: 2 + len(pad) // 2])
    pairs = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        pairs[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    want = np.pad(x, pairs, mode=NP_MODE[mode])
    got = F.pad(t64(x), pad, mode=mode).numpy()
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_gradients(mode):
    x = t64(RNG.standard_normal((1, 2, 3, 4)))
    assert gradcheck(lambda t: F.pad(t, (2, 1, 1, 2), mode=mode), [x])


def test_pad_constant_value_and_crop():
    x = fg.tensor([[1.0, 2.0, 3.0]])
    assert F.pad(x, (1, 1), value=7.0).tolist() == [[7.0, 1.0, 2.0, 3.0, 7.0]]
    assert F.pad(x, (-1, 0)).tolist() == [[2.0, 3.0]]


def test_pad_value_keeps_the_dtype_and_a_negative_zero_as_torch():
    """A constant pad's value is the input's dtype's, as torch's: 2.5 pads an int64 tensor
    with 2 (-2.5 with -2), 0.5 a bool one with True; a value the integer type cannot hold
    raises, naming it (torch: RuntimeError). A -0.0 fill is -0.0 (`value != 0` had taken
    it for the default +0.0 padding); the gradient inside is the output's."""
    ints = fg.tensor([[1, 2]])
    for value, fill in ((2.5, 2), (-2.5, -2), (3, 3), (-0.0, 0)):
        got = F.pad(ints, (1, 1), value=value)
        assert got.dtype == fg.int64 and got.tolist() == [[fill, 1, 2, fill]], value
    flags = F.pad(fg.tensor([[True, False]]), (1, 0), value=0.5)
    assert flags.dtype == fg.bool and flags.tolist() == [[True, True, False]]
    half = F.pad(fg.tensor([[1.0]]).half(), (1, 0), value=2.5)
    assert half.dtype == fg.float16 and half.tolist() == [[2.5, 1.0]]
    for dtype, value in ((fg.int64, float("inf")), (fg.int64, float("nan")), (fg.uint8, 256)):
        with pytest.raises(fg.DTypeError, match="cannot be converted"):
            F.pad(ints.to(dtype), (1, 1), value=value)
    with pytest.raises(RuntimeError):  # (fusegrad's error is also a RuntimeError, as torch's)
        F.pad(ints.to(fg.uint8), (1, 1), value=-1)
    x = fg.tensor([[1.0, -0.0, float("nan")]], requires_grad=True)
    y = F.pad(x, (2, 1), value=-0.0)
    got = y.detach().numpy()
    assert np.signbit(got).tolist() == [[True, True, False, True, False, True]]
    assert np.isnan(got[0, 4])
    assert np.signbit(F.pad(x, (1, 1)).detach().numpy()).tolist() == [
        [False] + [False, True, False] + [False]
    ]
    (g,) = fg.grad(y, [x], grad_outputs=fg.tensor([[5.0, 6.0, -0.0, 1.0, 2.0, 7.0]]))
    assert g.tolist() == [[-0.0, 1.0, 2.0]] and np.signbit(g.numpy()[0, 0])


def test_pad_errors():
    x = fg.ones(1, 2, 3)
    with pytest.raises(ValueError, match="reflect"):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(ValueError, match="divisible by 2"):
        F.pad(x, (1,))
    with pytest.raises(NotImplementedError):
        F.pad(x, (1, 1), mode="wrap")
    with pytest.raises(NotImplementedError):
        F.pad(fg.ones(3), (1, 1), mode="reflect")  # 1-D input: PyTorch refuses too
    with pytest.raises(ValueError, match="circular"):
        F.pad(x, (4, 0), mode="circular")


def test_pad_modules():
    x = fg.tensor(np.arange(6.0, dtype=np.float32).reshape(1, 1, 2, 3))
    np.testing.assert_array_equal(
        nn.ReflectionPad2d(1)(x).numpy()[0, 0], np.pad(x.numpy()[0, 0], 1, mode="reflect")
    )
    np.testing.assert_array_equal(
        nn.ZeroPad2d((1, 0, 0, 1))(x).numpy()[0, 0], np.pad(x.numpy()[0, 0], ((0, 1), (1, 0)))
    )


# ---------------------------------------------------------------- pooling


def ref_pool2d(x, k, s, p, kind, ceil_mode, count_include_pad=True):
    """Direct loops with PyTorch's window bounds (ceil_mode windows clipped to input + pad)."""
    H, W = x.shape[2:]

    def outsize(i, kk, ss, pp):
        span = i + 2 * pp - kk
        o = (-(-span // ss) if ceil_mode else span // ss) + 1
        if ceil_mode and (o - 1) * ss >= i + pp:
            o -= 1
        return o

    oh, ow = outsize(H, k, s, p), outsize(W, k, s, p)
    out = np.zeros(x.shape[:2] + (oh, ow))
    idx = np.zeros(x.shape[:2] + (oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s - p, j * s - p
            h1, w1 = min(h0 + k, H + p), min(w0 + k, W + p)
            pool_size = (h1 - h0) * (w1 - w0)
            hs, ws = max(h0, 0), max(w0, 0)
            he, we = min(h1, H), min(w1, W)
            win = x[:, :, hs:he, ws:we].reshape(*x.shape[:2], -1)
            if kind == "max":
                out[:, :, i, j] = win.max(-1)
                a = win.argmax(-1)
                idx[:, :, i, j] = (hs + a // (we - ws)) * W + ws + a % (we - ws)
            else:
                div = pool_size if count_include_pad else (he - hs) * (we - ws)
                out[:, :, i, j] = win.sum(-1) / div
    return out, idx


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (2, 3, 1), (3, 3, 0)])
def test_max_pool2d_ceil_mode_and_indices(ceil_mode, k, s, p):
    x = RNG.standard_normal((2, 2, 7, 6))
    want, want_idx = ref_pool2d(x, k, s, p, "max", ceil_mode)
    out, idx = F.max_pool2d(t64(x), k, s, p, ceil_mode=ceil_mode, return_indices=True)
    np.testing.assert_allclose(out.numpy(), want)
    np.testing.assert_array_equal(idx.numpy(), want_idx)
    assert idx.dtype == fg.int64
    assert gradcheck(lambda t: F.max_pool2d(t, k, s, p, ceil_mode=ceil_mode), [t64(x[:1, :1])])


def test_max_pool_indices_first_on_ties():
    x = fg.ones(1, 1, 2, 4)
    _, idx = F.max_pool2d(x, 2, return_indices=True)
    assert idx.tolist() == [[[[0, 2]]]]
    _, idx1 = nn.MaxPool1d(2, return_indices=True)(fg.tensor([[[1.0, 3.0, 3.0, 2.0]]]))
    assert idx1.tolist() == [[[1, 2]]]


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (2, 3, 1)])
def test_avg_pool2d_ceil_mode(ceil_mode, include, k, s, p):
    x = RNG.standard_normal((1, 2, 7, 6))
    want, _ = ref_pool2d(x, k, s, p, "avg", ceil_mode, include)
    fn = lambda t: F.avg_pool2d(t, k, s, p, ceil_mode=ceil_mode, count_include_pad=include)  # noqa: E731
    np.testing.assert_allclose(fn(t64(x)).numpy(), want, rtol=1e-12)
    assert gradcheck(fn, [t64(x)])


def test_avg_pool_divisor_override_and_module():
    x = fg.ones(1, 1, 4, 4)
    assert F.avg_pool2d(x, 2, divisor_override=1).tolist() == [[[[4.0, 4.0], [4.0, 4.0]]]]
    assert nn.AvgPool2d(3, 2, ceil_mode=True)(x).shape == (1, 1, 2, 2)
    with pytest.raises(ValueError, match="divisor"):
        F.avg_pool2d(x, 2, divisor_override=0)


# ---------------------------------------------------------------- transposed convolution


def ref_conv_transpose(x, w, b, stride, pad, out_pad, dil, groups):
    """Scatter every input element over its output patch, in float64."""
    n = x.ndim - 2
    cin, cout_g = w.shape[:2]
    k = w.shape[2:]
    cin_g = cin // groups
    sizes = [
        (x.shape[2 + i] - 1) * stride[i] - 2 * pad[i] + dil[i] * (k[i] - 1) + out_pad[i] + 1
        for i in range(n)
    ]
    full = [s + 2 * p for s, p in zip(sizes, pad)]
    out = np.zeros(
        (x.shape[0], cout_g * groups, *[f + max(kk * d, 1) for f, kk, d in zip(full, k, dil)])
    )
    for ci in range(cin):
        g = ci // cin_g
        for pos in np.ndindex(*x.shape[2:]):
            for kp in np.ndindex(*k):
                o = tuple(pp * s + kk * d for pp, s, kk, d in zip(pos, stride, kp, dil))
                out[(slice(None), slice(g * cout_g, (g + 1) * cout_g), *o)] += (
                    x[(slice(None), ci, *pos)][:, None] * w[(ci, slice(None), *kp)][None]
                )
    crop = tuple(slice(p, p + s) for p, s in zip(pad, sizes))
    out = out[(slice(None), slice(None), *crop)]
    if b is not None:
        out = out + b.reshape(1, -1, *([1] * n))
    return out


@pytest.mark.parametrize(
    "n,stride,pad,out_pad,dil,groups",
    [
        (1, 1, 0, 0, 1, 1),
        (1, 2, 1, 1, 1, 1),
        (1, 3, 2, 2, 2, 2),
        (2, 2, 0, 1, 1, 1),
        (2, (2, 1), (1, 0), (1, 0), 1, 2),
        (2, 1, 1, 0, 2, 1),
    ],
)
def test_conv_transpose_matches_numpy(n, stride, pad, out_pad, dil, groups):
    def tup(v):
        return (v,) * n if isinstance(v, int) else v

    cin, cout = 2 * groups, 2 * groups
    x = RNG.standard_normal((2, cin, *([4] * n)))
    w = RNG.standard_normal((cin, cout // groups, *([3] * n)))
    b = RNG.standard_normal(cout)
    want = ref_conv_transpose(x, w, b, tup(stride), tup(pad), tup(out_pad), tup(dil), groups)
    fn = F.conv_transpose1d if n == 1 else F.conv_transpose2d

    def run(xt, wt, bt):
        return fn(xt, wt, bt, stride, pad, out_pad, groups, dil)

    np.testing.assert_allclose(run(t64(x), t64(w), t64(b)).numpy(), want, rtol=1e-10, atol=1e-10)
    if n == 1 or groups == 1:
        assert gradcheck(run, [t64(x[:1]), t64(w), t64(b)])


@pytest.mark.parametrize(
    "n,k,stride,pad,out_pad,dil,groups",
    [
        (2, 4, 1, 0, 0, 1, 1),  # DCGAN's first layer: the noise to 4 x 4
        (2, 4, 2, 1, 0, 1, 1),
        (1, 5, 3, 2, 0, 1, 1),
        (2, (3, 2), 1, (1, 0), 0, 1, 1),
        (2, 3, 2, 0, 1, 1, 1),  # output padding: the correlation's
        (2, 3, 1, 0, 0, 2, 1),  # dilated: the correlation's
        (2, 3, 1, 0, 0, 1, 2),  # grouped: the correlation's
    ],
)
def test_a_one_pixel_transposed_convolution_is_a_product(n, k, stride, pad, out_pad, dil, groups):
    """An input of one pixel (a generator's first layer) is a matrix product of its
    channels with the weight's taps, not a correlation of the input padded with zeros
    (16 times the multiply-adds at 4 x 4): values and gradients against numpy's scatter
    and central differences, and the multiply-adds the product's."""

    def tup(v):
        return (v,) * n if isinstance(v, int) else v

    cin, cout = 3 * groups, 2 * groups
    x = RNG.standard_normal((2, cin, *([1] * n)))
    w = RNG.standard_normal((cin, cout // groups, *tup(k)))
    want = ref_conv_transpose(x, w, None, tup(stride), tup(pad), tup(out_pad), tup(dil), groups)
    fn = F.conv_transpose1d if n == 1 else F.conv_transpose2d

    def run(xt, wt):
        return fn(xt, wt, None, stride, pad, out_pad, groups, dil)

    y = run(t64(x), t64(w))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-10, atol=1e-10)
    assert gradcheck(run, [t64(x), t64(w)])
    if pad == 0 and out_pad == 0 and dil == 1 and groups == 1:
        # the zero-filled correlation's multiply-adds: each output pixel's taps, x taps
        flops = sum(r.flops for r in fg.kernels(y))
        correlation = 2 * x.shape[0] * cin * cout * math.prod(y.shape[2:]) * taps(k, n)
        assert flops < correlation / 2, (flops, correlation)


def test_a_one_pixel_transposed_convolution_at_special_points_and_empty():
    # inputs 0, -0.0, +-1 and weights of both signs: every output a product's sum, its
    # zero signs as a sum from +0.0 gives them (torch's GEMM); the gradients the
    # product's; an empty batch gives an empty output and zero weight gradients
    x = np.array([[0.0, -0.0, 1.0], [-1.0, -0.0, -0.0]]).reshape(2, 3, 1, 1)
    w = np.array([1.0, -1.0, 0.5, -0.0] * 6).reshape(3, 2, 2, 2)
    xt, wt = t64(x), t64(w)
    xt.requires_grad_()
    wt.requires_grad_()
    y = F.conv_transpose2d(xt, wt)
    want = ref_conv_transpose(x, w, None, (1, 1), (0, 0), (0, 0), (1, 1), 1)
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(np.signbit(y.numpy()), np.signbit(want + 0.0))
    g = np.array([1.0, -1.0, 0.0, -0.0] * 4).reshape(2, 2, 2, 2)
    y.backward(t64(g))
    np.testing.assert_array_equal(wt.grad.numpy(), np.einsum("bc,bokl->cokl", x[:, :, 0, 0], g))
    np.testing.assert_array_equal(xt.grad.numpy()[:, :, 0, 0], np.einsum("bokl,cokl->bc", g, w))
    empty = t64(np.zeros((0, 3, 1, 1)))
    wt.grad = None
    out = F.conv_transpose2d(empty, wt)
    assert out.shape == (0, 2, 2, 2)
    out.sum().backward()
    np.testing.assert_array_equal(wt.grad.numpy(), np.zeros((3, 2, 2, 2)))


def taps(k, n: int) -> int:
    return math.prod((k,) * n if isinstance(k, int) else k)


@pytest.mark.parametrize(
    "k,stride,pad,out_pad,dil,groups",
    [
        (4, 2, 1, 0, 1, 1),  # DCGAN's upsampling
        (4, 2, 1, 0, 1, 2),
        (3, 2, 1, 1, 1, 1),
        (3, 3, 2, 2, 2, 1),  # dilation 2 at stride 3
        (2, 2, 0, 0, 2, 1),  # dilation 2 at stride 2: odd phases get no tap
        ((3, 4), (2, 1), (1, 0), (1, 0), 1, 1),  # one axis strided
    ],
)
def test_strided_conv_transpose_by_phases_values_and_gradients(
    k, stride, pad, out_pad, dil, groups
):
    """A strided transposed convolution runs phase by phase (no zeros inserted), with the
    convolution's own gradients: values and both gradients against numpy's scatter, and
    central differences."""

    def tup(v):
        return (v,) * 2 if isinstance(v, int) else v

    x = RNG.standard_normal((2, 2 * groups, 4, 5))
    w = RNG.standard_normal((2 * groups, 2, *tup(k)))
    want = ref_conv_transpose(x, w, None, tup(stride), tup(pad), tup(out_pad), tup(dil), groups)

    def run(xt, wt):
        return F.conv_transpose2d(xt, wt, None, stride, pad, out_pad, groups, dil)

    xt, wt = t64(x).requires_grad_(), t64(w).requires_grad_()
    out = run(xt, wt)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-10)
    # the gradients: x's is the convolution of g with w; w's the scatter's, by the chain rule
    g = RNG.standard_normal(want.shape)
    (out * t64(g)).sum().backward()
    eps_grads = []
    for leaf, arr in ((0, x), (1, w)):
        flat = arr.reshape(-1)
        grad = np.zeros_like(flat)
        for i in range(flat.size):  # the scatter is linear: one unit change per element
            unit = np.zeros_like(flat)
            unit[i] = 1.0
            args = [x, w]
            args[leaf] = unit.reshape(arr.shape)
            if leaf == 0:
                grad[i] = (
                    ref_conv_transpose(
                        args[0], w, None, tup(stride), tup(pad), tup(out_pad), tup(dil), groups
                    )
                    * g
                ).sum()
            else:
                grad[i] = (
                    ref_conv_transpose(
                        x, args[1], None, tup(stride), tup(pad), tup(out_pad), tup(dil), groups
                    )
                    * g
                ).sum()
        eps_grads.append(grad.reshape(arr.shape))
    np.testing.assert_allclose(xt.grad.numpy(), eps_grads[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(wt.grad.numpy(), eps_grads[1], rtol=1e-9, atol=1e-9)
    assert gradcheck(run, [t64(x[:1]), t64(w)])


def test_conv_transpose_modules_and_errors():
    fg.manual_seed(0)
    layer = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    assert layer.weight.shape == (4, 3, 3, 3)
    assert layer(fg.ones(1, 4, 5, 5)).shape == (1, 6, 10, 10)
    assert nn.ConvTranspose1d(2, 3, 2)(fg.ones(2, 4)).shape == (3, 5)
    with pytest.raises(ValueError, match="output padding"):
        F.conv_transpose1d(fg.ones(1, 1, 3), fg.ones(1, 1, 2), output_padding=1)
    with pytest.raises(ValueError, match="channels"):
        F.conv_transpose2d(fg.ones(1, 3, 3, 3), fg.ones(2, 1, 2, 2))


def test_conv_transpose_is_the_input_gradient_of_conv():
    x = t64(RNG.standard_normal((1, 2, 7, 6)))
    w = t64(RNG.standard_normal((3, 2, 3, 3)))
    g = t64(RNG.standard_normal((1, 3, 4, 3)))
    x.requires_grad_()
    (F.conv2d(x, w, stride=2, padding=1) * g).sum().backward()
    back = F.conv_transpose2d(g, w, stride=2, padding=1, output_padding=(0, 1))
    np.testing.assert_allclose(back.numpy(), x.grad.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- interpolate


def ref_linear_1d(x, out, align_corners, scale=None):
    i = x.shape[-1]
    dst = np.arange(out, dtype=np.float64)
    if align_corners:
        pos = dst * ((i - 1) / (out - 1) if out > 1 else 0.0)
    else:
        sc = 1 / scale if scale else i / out
        pos = np.maximum((dst + 0.5) * sc - 0.5, 0)
    lo = np.minimum(np.floor(pos).astype(int), i - 1)
    hi = np.minimum(lo + 1, i - 1)
    lam = pos - lo
    return x[..., lo] * (1 - lam) + x[..., hi] * lam


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(3, 7), (8, 2), (5, 5)])
def test_bilinear_matches_separable_reference(align_corners, size):
    x = RNG.standard_normal((2, 3, 4, 5))
    want = ref_linear_1d(x, size[1], align_corners)
    want = np.swapaxes(ref_linear_1d(np.swapaxes(want, -1, -2), size[0], align_corners), -1, -2)
    fn = lambda t: F.interpolate(t, size=size, mode="bilinear", align_corners=align_corners)  # noqa: E731
    np.testing.assert_allclose(fn(t64(x)).numpy(), want, rtol=1e-12)
    assert gradcheck(fn, [t64(x[:1, :1])])


def test_nearest_and_exact_values():
    x = fg.tensor([[[0.0, 1.0, 2.0, 3.0, 4.0]]])
    # PyTorch's legacy nearest: src = floor(dst * in / out)
    assert F.interpolate(x, size=3).tolist() == [[[0.0, 1.0, 3.0]]]
    assert F.interpolate(x, size=3, mode="nearest-exact").tolist() == [[[0.0, 2.0, 4.0]]]
    up = F.interpolate(fg.tensor([[[[1.0, 2.0], [3.0, 4.0]]]]), scale_factor=2)
    np.testing.assert_array_equal(up.numpy()[0, 0], np.kron([[1, 2], [3, 4]], np.ones((2, 2))))
    # scale_factor 1.5 on 4 -> 6; positions from 1 / scale, as PyTorch
    y = F.interpolate(fg.tensor([[[0.0, 1.0, 2.0, 3.0]]]), scale_factor=1.5, mode="linear")
    np.testing.assert_allclose(
        y.numpy(), ref_linear_1d(np.arange(4.0)[None, None], 6, False, 1.5), rtol=1e-6
    )
    assert nn.Upsample(scale_factor=2, mode="nearest")(fg.ones(1, 1, 3)).shape == (1, 1, 6)


@pytest.mark.parametrize(
    "mode, pads, values, grad",
    [
        (
            "reflect",
            (-1, 2, 2, -1),
            [[10, 11, 12, 11, 10], [6, 7, 8, 7, 6], [2, 3, 4, 3, 2], [6, 7, 8, 7, 6]],
            [[0, -2, 2, 1], [0, 4, 4, -2], [0, -2, 2, 1]],
        ),
        (
            "replicate",
            (2, -1, -1, 1),
            [[5, 5, 5, 6, 7], [9, 9, 9, 10, 11], [9, 9, 9, 10, 11]],
            [[0, 0, 0, 0], [0, 2, -1, 0], [2, 2, 0, 0]],
        ),
        (
            "circular",
            (-1, 3, 1, -1),
            [[6, 7, 8, 6, 7, 8], [2, 3, 4, 2, 3, 4], [6, 7, 8, 6, 7, 8]],
            [[0, 1, 3, 1], [0, 2, -2, 2], [0, 0, 0, 0]],
        ),
    ],
)
def test_negative_padding_crops_as_torch(mode, pads, values, grad):
    # torch's values: reflect and replicate pad the whole axis then crop; circular crops
    # then wraps what is left
    x = fg.arange(1.0, 13.0).reshape(1, 3, 4).requires_grad_()
    y = F.pad(x, pads, mode=mode)
    w = (np.arange(30.0).reshape(5, 6) % 4 - 1)[: y.shape[1], : y.shape[2]]
    (y * fg.tensor(w, dtype=fg.float32)).sum().backward()
    assert y.tolist() == [values] and x.grad.tolist() == [grad]


def test_negative_padding_errors():
    x = fg.ones(1, 6)
    with pytest.raises(RuntimeError, match="too small. Calculated output W: 0"):
        F.pad(x, (-3, -3), mode="replicate")
    with pytest.raises(RuntimeError, match="wrap around only once"):
        F.pad(x, (-4, 3), mode="circular")  # torch reads past the crop here
    assert F.pad(x, (-3, -3), mode="circular").shape == (1, 0)


def test_interpolate_errors():
    x = fg.ones(1, 1, 4)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, size=2, align_corners=True)
    with pytest.raises(NotImplementedError):
        F.interpolate(x, size=2, mode="bilinear")
    with pytest.raises(NotImplementedError):
        F.interpolate(x, size=2, mode="bicubic")


# ---------------------------------------------------------------- Embedding(padding_idx)


def test_embedding_padding_idx_row_gets_no_gradient():
    fg.manual_seed(0)
    emb = nn.Embedding(5, 3, padding_idx=1)
    assert emb.weight.numpy()[1].tolist() == [0.0, 0.0, 0.0]
    idx = fg.tensor([[1, 2, 1], [4, 1, 2]])
    g = RNG.standard_normal((2, 3, 3)).astype(np.float32)
    (emb(idx) * fg.tensor(g)).sum().backward()
    want = np.zeros((5, 3), np.float32)
    np.add.at(want, idx.numpy(), g)
    want[1] = 0.0
    np.testing.assert_allclose(emb.weight.grad.numpy(), want, rtol=1e-6)
    assert nn.Embedding(5, 3, padding_idx=-1).padding_idx == 4
    with pytest.raises(AssertionError, match="Padding_idx"):
        nn.Embedding(5, 3, padding_idx=5)


@pytest.mark.parametrize(
    "module, np_mode",
    [
        (nn.ReflectionPad3d((1, 2, 1, 0, 2, 1)), "reflect"),
        (nn.ReplicationPad3d((1, 2, 1, 0, 2, 1)), "edge"),
        (nn.CircularPad3d((1, 2, 1, 0, 2, 1)), "wrap"),
        (nn.ZeroPad3d((1, 2, 1, 0, 2, 1)), "constant"),
    ],
)
def test_3d_padding_modules_as_numpy(module, np_mode):
    x = np.arange(2 * 3 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 3, 4)
    want = np.pad(x, [(0, 0), (0, 0), (2, 1), (1, 0), (1, 2)], mode=np_mode)
    np.testing.assert_array_equal(module(fg.tensor(x)).numpy(), want)
    assert repr(module).endswith("((1, 2, 1, 0, 2, 1))")  # torch's repr: the padding alone


@pytest.mark.parametrize("shape, r", [((2, 8, 3, 5), 2), ((18, 2, 4), 3), ((2, 3, 4, 4, 6), 2)])
def test_pixel_shuffle_and_unshuffle_are_torchs_layout(shape, r):
    """pixel_shuffle's (*, C r^2, H, W) -> (*, C, H r, W r) as torch's: output channel c at
    (h r + i, w r + j) is input channel c r^2 + i r + j at (h, w); its gradient moves back;
    pixel_unshuffle is its inverse, exactly."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    xt = fg.tensor(x, dtype=fg.float64, requires_grad=True)
    y = F.pixel_shuffle(xt, r)
    *lead, c, h, w = shape
    want = x.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    want = want.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    want = want.reshape(*lead, c // (r * r), h * r, w * r)
    np.testing.assert_array_equal(y.detach().numpy(), want)
    g = rng.standard_normal(want.shape)
    (gx,) = fg.grad((y * fg.tensor(g)).sum(), [xt])
    np.testing.assert_array_equal(gx.numpy(), F.pixel_unshuffle(fg.tensor(g), r).numpy())
    np.testing.assert_array_equal(F.pixel_unshuffle(y.detach(), r).numpy(), x)
    m = nn.PixelShuffle(r)
    assert repr(m) == f"PixelShuffle(upscale_factor={r})"
    assert repr(nn.PixelUnshuffle(r)) == f"PixelUnshuffle(downscale_factor={r})"
    assert m(xt).shape == want.shape
    assert F.pixel_shuffle(fg.zeros(0, 4, 2, 2), 2).shape == (0, 1, 4, 4)


def test_pixel_shuffle_refusals():
    with pytest.raises(fg.ShapeError, match="divisible by the square of upscale_factor"):
        F.pixel_shuffle(fg.ones(1, 3, 2, 2), 2)
    with pytest.raises(fg.ShapeError, match="divisible by downscale_factor"):
        F.pixel_unshuffle(fg.ones(1, 3, 3, 2), 2)
    with pytest.raises(fg.ShapeError, match="at least 3 dimensions"):
        F.pixel_shuffle(fg.ones(4, 2), 2)
    with pytest.raises(fg.ShapeError, match="positive integer"):
        F.pixel_shuffle(fg.ones(1, 4, 2, 2), 0)
