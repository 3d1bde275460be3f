"""Activations against numpy formulas in float64, central-difference gradients, PyTorch's
gradients at the kinks, and float32 behaviour at large magnitudes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn
from fusegrad.ir.reference import evaluate_many
from fusegrad.nn import activations
from fusegrad.testing import gradcheck

ERF = np.vectorize(math.erf)
A, S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def np_softplus(x, beta=1.0, threshold=20.0):
    return np.where(x * beta > threshold, x, np.logaddexp(0, x * beta) / beta)


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


REFERENCES = {
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2)))),
    "gelu_tanh": (
        lambda t: F.gelu(t, approximate="tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    "silu": (F.silu, lambda x: x * np_sigmoid(x)),
    "mish": (F.mish, lambda x: x * np.tanh(np.logaddexp(0, x))),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda t: F.elu(t, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x))),
    "selu": (F.selu, lambda x: S * np.where(x > 0, x, A * np.expm1(x))),
    "celu": (lambda t: F.celu(t, 2.0), lambda x: np.where(x > 0, x, 2.0 * np.expm1(x / 2.0))),
    "softplus": (F.softplus, np_softplus),
    "softplus_beta": (
        lambda t: F.softplus(t, beta=2.0, threshold=3.0),
        lambda x: np_softplus(x, 2.0, 3.0),
    ),
    "hardtanh": (lambda t: F.hardtanh(t, -0.5, 2.0), lambda x: np.clip(x, -0.5, 2.0)),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6)),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "logsigmoid": (F.logsigmoid, lambda x: -np.logaddexp(0, -x)),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
}


def t64(a):
    return fg.tensor(np.asarray(a, np.float64), dtype=fg.float64)


# points away from every kink (0, +-3, +-0.5, 2, 6, the softplus thresholds)
SMOOTH = np.array([-7.3, -3.7, -2.2, -1.1, -0.31, -0.07, 0.04, 0.23, 0.8, 1.3, 1.7, 2.6, 4.1, 8.2])


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_values_match_numpy(name):
    fn, ref = REFERENCES[name]
    x = np.concatenate([np.linspace(-12, 12, 241), SMOOTH, [0.0, -3.0, 3.0, 6.0, 1e-5, -1e-5]])
    np.testing.assert_allclose(fn(t64(x)).numpy(), ref(x), rtol=2e-7, atol=2e-7)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_gradients_match_central_differences(name):
    fn, _ = REFERENCES[name]
    assert gradcheck(fn, [t64(SMOOTH)])


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_float32_large_inputs_stay_finite(name):
    fn, ref = REFERENCES[name]
    x = np.array([-1e4, -100.0, -30.0, 30.0, 100.0, 1e4], np.float32)
    t = fg.tensor(x, requires_grad=True)
    out = fn(t)
    out.sum().backward()
    assert np.isfinite(t.grad.numpy()).all()
    with np.errstate(over="ignore"):  # the numpy formulas overflow in branches not taken
        want = ref(x.astype(np.float64))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-30)


def grad_at(fn, points):
    x = t64(points)
    x.requires_grad_()
    fn(x).sum().backward()
    return x.grad.numpy().tolist()


def test_gradients_at_kinks_are_pytorchs():
    assert grad_at(lambda t: F.leaky_relu(t, 0.1), [0.0]) == [0.1]
    assert grad_at(F.elu, [0.0]) == [1.0]
    assert grad_at(lambda t: F.elu(t, 2.0), [0.0]) == [2.0]
    assert grad_at(F.selu, [0.0]) == pytest.approx([S * A])
    assert grad_at(lambda t: F.celu(t, 3.0), [0.0]) == [1.0]
    assert grad_at(F.hardtanh, [-1.0, 1.0]) == [0.0, 0.0]
    assert grad_at(F.relu6, [0.0, 6.0, 3.0]) == [0.0, 0.0, 1.0]
    assert grad_at(F.hardsigmoid, [-3.0, 3.0]) == [0.0, 0.0]
    assert grad_at(F.hardswish, [-3.0, 3.0]) == [0.0, 1.0]
    assert grad_at(F.softplus, [0.0]) == [0.5]
    assert grad_at(F.logsigmoid, [0.0]) == [0.5]
    assert grad_at(F.softsign, [0.0]) == [1.0]
    # exact gelu's derivative Phi(x) + x phi(x)
    xs = np.array([-2.0, -0.4, 0.0, 0.3, 1.7])
    want = 0.5 * (1 + ERF(xs / math.sqrt(2))) + xs * np.exp(-xs * xs / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(grad_at(F.gelu, xs), want, atol=1e-6)


def test_second_derivative_of_gelu_and_silu():
    x = t64([0.7, -1.2])
    x.requires_grad_()
    (g,) = fg.grad(F.silu(x).sum(), [x], create_graph=True)
    (h,) = fg.grad(g.sum(), [x])
    v = x.numpy()
    s = np_sigmoid(v)
    np.testing.assert_allclose(h.numpy(), s * (1 - s) * (2 + v * (1 - 2 * s)), rtol=1e-10)


def np_gelu_slopes(v):
    """Exact gelu's first and second derivatives in float64: Phi + x phi, phi (2 - x^2)."""
    phi = np.exp(-v * v / 2) / math.sqrt(2 * math.pi)
    return 0.5 * (1 + ERF(v / math.sqrt(2))) + v * phi, phi * (2 - v * v)


# float32 gelu's erf changes branch at |x / sqrt 2| = 0.5: both sides of it, 0, the tails
GELU_POINTS = [-30, -9, -5.5, -3, -1.2, -0.7072, -0.7071, -0.5, -1e-3, 0, 1e-3, 0.5]
GELU_POINTS += [0.7071, 0.7072, 1.2, 3, 5.5, 9, 30]


def test_float32_gelu_values_and_gradients_against_float64():
    """float32 gelu runs the short erf (nn/activations.py, `_erf`), whose gradient is the
    exact 2/sqrt(pi) e^-x^2 rather than the derivative of its polynomial."""
    xs = np.array(GELU_POINTS, np.float32)
    g = np.random.default_rng(5).uniform(0.5, 2.0, xs.shape).astype(np.float32)
    x = fg.tensor(xs, requires_grad=True)
    y = F.gelu(x)
    (y * fg.tensor(g)).sum().backward()
    v = xs.astype(np.float64)
    slope, _ = np_gelu_slopes(v)
    np.testing.assert_allclose(y.numpy(), 0.5 * v * (1 + ERF(v / math.sqrt(2))), atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), g * slope, rtol=2e-6, atol=1e-7)


def test_second_derivative_of_float32_gelu():
    xs = np.array(GELU_POINTS, np.float32)
    x = fg.tensor(xs, requires_grad=True)
    (d1,) = fg.grad(F.gelu(x).sum(), [x], create_graph=True)
    (d2,) = fg.grad(d1.sum(), [x])
    slope, curve = np_gelu_slopes(xs.astype(np.float64))
    np.testing.assert_allclose(d1.numpy(), slope, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(d2.numpy(), curve, rtol=2e-6, atol=1e-7)


def test_gelu_backward_reads_x_and_the_gradient_only():
    """Forward and backward of float32 gelu over n elements: erf stored once (read by
    both), the output, the input's gradient from x, erf and g. Through the polynomial,
    the backward stored and read back each of its Horner stages: 46 kernels."""
    n = 1 << 14
    rng = np.random.default_rng(6)
    xs = rng.standard_normal(n).astype(np.float32) * 3
    gs = rng.standard_normal(n).astype(np.float32)
    x = fg.tensor(xs, requires_grad=True)
    y = F.gelu(x)
    (dx,) = fg.grad(y, [x], grad_outputs=fg.tensor(gs))
    ks = fg.kernels(y, dx)
    assert len(ks) <= 3, [(k.name, k.reason) for k in ks]
    assert sum(k.bytes for k in ks) <= 9 * 4 * n + 4096, [(k.name, k.bytes) for k in ks]
    v = xs.astype(np.float64)
    np.testing.assert_allclose(dx.numpy(), gs * np_gelu_slopes(v)[0], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gelu_is_one_macro_node_with_the_composed_forms_bits(dtype):
    """float32 (and 16-bit) gelu builds one macro node a call (its ~60 primitives made when a
    plan is compiled, its gradient a macro too): the values and gradients are the composed
    form's bit for bit, at the branch points, 0 and -0, the tails, infinities and NaN."""
    from fusegrad.ir.ops import Ops
    from fusegrad.nn import activations as A

    pts = GELU_POINTS + [0.0, -0.0, np.inf, -np.inf, np.nan]
    xs = np.array(pts, np.float32)
    g = np.random.default_rng(7).uniform(0.5, 2.0, xs.shape).astype(np.float32)
    x1 = fg.tensor(xs, requires_grad=True).to(getattr(fg, dtype))
    x2 = fg.tensor(xs, requires_grad=True).to(getattr(fg, dtype))
    y1 = F.gelu(x1)
    y2 = A._gelu(x2._float(), A._erf)
    assert y1.node.op is Ops.MACRO and y1.node.arg[0] == "gelu"
    (d1,) = fg.grad((y1 * fg.tensor(g).to(y1.dtype)).sum(), [x1])
    (d2,) = fg.grad((y2 * fg.tensor(g).to(y2.dtype)).sum(), [x2])
    for a, b in ((y1, y2), (d1, d2)):
        a, b = a.float().numpy(), b.float().numpy()
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (a, b)


def test_softmin_and_glu():
    x = np.random.default_rng(0).standard_normal((3, 4))
    e = np.exp(-x - (-x).max(1, keepdims=True))
    np.testing.assert_allclose(F.softmin(t64(x), dim=1).numpy(), e / e.sum(1, keepdims=True))
    np.testing.assert_allclose(
        F.glu(t64(x), dim=1).numpy(), x[:, :2] * np_sigmoid(x[:, 2:]), rtol=1e-12
    )
    assert gradcheck(lambda t: F.glu(t, 0), [t64(x[:2])])
    assert gradcheck(lambda t: F.softmin(t, 1), [t64(x)])
    with pytest.raises(ValueError, match="Halving dimension must be even"):
        F.glu(t64(x), dim=0)


def test_errors():
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(fg.ones(2), approximate="erf")
    with pytest.raises(ValueError, match="max_val"):
        nn.Hardtanh(1.0, -1.0)


@pytest.mark.parametrize(
    "module,fn",
    [
        (nn.GELU("tanh"), lambda t: F.gelu(t, approximate="tanh")),
        (nn.SiLU(), F.silu),
        (nn.Mish(), F.mish),
        (nn.LeakyReLU(0.3), lambda t: F.leaky_relu(t, 0.3)),
        (nn.ELU(0.5), lambda t: F.elu(t, 0.5)),
        (nn.SELU(), F.selu),
        (nn.CELU(0.7), lambda t: F.celu(t, 0.7)),
        (nn.Softplus(2.0, 5.0), lambda t: F.softplus(t, 2.0, 5.0)),
        (nn.Hardtanh(-2.0, 2.0), lambda t: F.hardtanh(t, -2.0, 2.0)),
        (nn.ReLU6(), F.relu6),
        (nn.Hardsigmoid(), F.hardsigmoid),
        (nn.Hardswish(), F.hardswish),
        (nn.LogSigmoid(), F.logsigmoid),
        (nn.Softsign(), F.softsign),
        (nn.Softmin(dim=-1), lambda t: F.softmin(t, -1)),
        (nn.GLU(), F.glu),
    ],
)
def test_modules_apply_their_function(module, fn):
    x = fg.tensor(np.linspace(-5, 5, 24, dtype=np.float32).reshape(3, 8))
    np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy())


# ---------------------------------------------------------------- compiled vs reference

# kink points and formula switches included on purpose: compiled and reference run one graph
SPECIAL = [0.0, -3.0, 3.0, 6.0, -1.0, 1.0, 0.1, -0.1, 0.7071067811865476, 20.0, -20.0, 1e-4]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(sorted(REFERENCES)),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    data=st.data(),
)
def test_compiled_activation_and_gradient_match_the_reference_evaluator(name, shape, data):
    """Random shapes and values (kinks included) through an activation and a broadcast affine
    map: fused kernels against the op-by-op numpy reference, for values and gradients."""
    fn, _ = REFERENCES[name]
    n = int(np.prod(shape))
    values = data.draw(
        st.lists(
            st.one_of(st.sampled_from(SPECIAL), st.floats(-8, 8, allow_nan=False)),
            min_size=n,
            max_size=n,
        )
    )
    x = t64(np.array(values).reshape(shape))
    x.requires_grad_()
    scale = t64(np.linspace(0.5, 1.5, shape[-1]))
    out = fn(x * scale) * 1.5
    weights = t64(np.random.default_rng(n).uniform(0.5, 1.5, size=shape))
    (g,) = fg.grad((out * weights).sum(), [x])
    want_out, want_g = evaluate_many([out.node, g.node])
    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g.numpy(), want_g, rtol=1e-12, atol=1e-14)


def test_shrink_and_threshold_modules_as_torchs():
    """The modules' reprs and options are torch's; threshold in place writes its input;
    a negative softshrink lambda raises ValueError, as torch's."""
    assert repr(nn.Hardshrink()) == "Hardshrink(0.5)"
    assert repr(nn.Softshrink(1.5)) == "Softshrink(1.5)"
    assert repr(nn.Tanhshrink()) == "Tanhshrink()"
    assert repr(nn.Threshold(0.1, 20.0)) == "Threshold(threshold=0.1, value=20.0)"
    assert repr(nn.Threshold(0.1, 20, True)) == "Threshold(threshold=0.1, value=20, inplace=True)"
    x = fg.tensor([-1.0, 0.5, 0.6, 2.0])
    assert nn.Hardshrink()(x).tolist() == [-1.0, 0.0, 0.6000000238418579, 2.0]
    assert nn.Softshrink(1.0)(x).tolist() == [0.0, 0.0, 0.0, 1.0]
    y = nn.Threshold(0.5, -9.0, inplace=True)(x)
    assert y is x and x.tolist() == [-9.0, -9.0, 0.6000000238418579, 2.0]
    with pytest.raises(ValueError, match="lambda must be greater or equal to 0"):
        F.softshrink(x, -0.5)


@pytest.mark.parametrize(
    ("kind", "call"),
    [
        ("softplus", lambda x: F.softplus(x, beta=2.0, threshold=5.0)),
        ("mish", F.mish),
        ("elu", lambda x: F.elu(x, alpha=0.5)),
        ("celu", lambda x: F.celu(x, alpha=2.0)),
        ("logsigmoid", F.logsigmoid),
        ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ],
)
def test_composed_activations_are_one_node_with_their_parameters(kind, call):
    """Each is one macro node whose parameters are part of it (two betas: two nodes), and
    its value and gradient are the composed form's, at the thresholds and signed zeros."""
    x = fg.tensor([-30.0, -2.5, -0.0, 0.0, 0.5, 2.4999, 2.5001, 30.0], requires_grad=True)
    y = call(x)
    assert y.node.arg[0] == kind and len(y.node.srcs) == 1
    assert call(x).node is y.node  # (equal macro nodes are one node)
    composed = getattr(activations, "_" + kind)
    params = y.node.arg[1]
    want = composed(x, *params)
    assert np.array_equal(y.numpy(), want.numpy(), equal_nan=True)
    assert np.array_equal(np.signbit(y.numpy()), np.signbit(want.numpy()))
    (g,) = fg.autograd.grad(y.sum(), [x])
    (h,) = fg.autograd.grad(want.sum(), [x])
    assert np.array_equal(g.numpy(), h.numpy(), equal_nan=True)
    if kind == "softplus":
        assert F.softplus(x, beta=3.0).node is not y.node


@pytest.mark.parametrize(
    "call",
    [
        lambda x: F.softplus(x, beta=2.0, threshold=5.0),
        F.mish,
        lambda x: F.elu(x, alpha=0.5),
        lambda x: F.celu(x, alpha=2.0),
        F.logsigmoid,
        lambda x: F.gelu(x, approximate="tanh"),
    ],
)
def test_composed_activations_of_0d_and_empty_tensors(call):
    """0-d inputs (-0.0, +-1) give the composed form's values and zero signs, and their
    gradients; an empty input an empty result of its shape."""
    for v in (-0.0, 1.0, -1.0):
        x = fg.tensor(v, requires_grad=True)
        y = call(x)
        assert y.shape == ()
        (g,) = fg.autograd.grad(y, [x])
        kind = y.node.arg[0]
        want = getattr(activations, "_" + kind)(x, *y.node.arg[1])
        assert np.array_equal(y.numpy(), want.numpy())
        assert np.signbit(y.item()) == np.signbit(want.item())
        (h,) = fg.autograd.grad(want, [x])
        assert g.item() == h.item()
    assert call(fg.zeros(0)).shape == (0,) and call(fg.zeros(3, 0)).shape == (3, 0)
