"""torch.autograd.functional (frontend/autograd_functional.py): jacobian, hessian, vjp,
jvp, hvp, vhp against derivatives written by hand in numpy (float64), torch's result
structures and its errors."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import autograd_functional as AF

X = np.array([0.3, -0.7])
Y = np.array([1.0, 2.0, -0.5])


def _t(a):
    return fg.tensor(a, dtype=fg.float64)


def _np(t):
    return np.asarray(t.numpy(), dtype=np.float64)


def f(x, y):
    return (x.sin() * y[:2]).exp(), (x * y[1:]).sum()


def g(x):
    return (x**3).sum() + (x[0] * x[1]).exp()


def g_hessian(x):
    e = np.exp(x[0] * x[1])
    return np.array(
        [
            [6 * x[0] + x[1] ** 2 * e, e + x[0] * x[1] * e],
            [e + x[0] * x[1] * e, 6 * x[1] + x[0] ** 2 * e],
        ]
    )


def test_jacobian_of_tuple_inputs_and_outputs():
    (j00, j01), (j10, j11) = AF.jacobian(f, (_t(X), _t(Y)))
    e = np.exp(np.sin(X) * Y[:2])
    np.testing.assert_allclose(_np(j00), np.diag(e * np.cos(X) * Y[:2]), rtol=1e-12)
    want01 = np.zeros((2, 3))
    want01[0, 0], want01[1, 1] = e[0] * np.sin(X[0]), e[1] * np.sin(X[1])
    np.testing.assert_allclose(_np(j01), want01, rtol=1e-12)
    np.testing.assert_allclose(_np(j10), Y[1:], rtol=1e-12)
    np.testing.assert_allclose(_np(j11), [0.0, X[0], X[1]], rtol=1e-12)


def test_jacobian_of_one_tensor_is_a_tensor_of_both_shapes():
    x = _t([[1.0, 2.0], [3.0, 4.0]])
    j = AF.jacobian(lambda t: t.sum(0) * 2, x)
    assert tuple(j.shape) == (2, 2, 2)
    want = np.zeros((2, 2, 2))
    for i in range(2):
        want[i, :, i] = 2
    np.testing.assert_array_equal(_np(j), want)
    assert not j.requires_grad


def test_jacobian_unused_input_zeros_or_strict_error():
    j0, j1 = AF.jacobian(lambda a, b: a * 2, (_t(X), _t(Y)))
    np.testing.assert_array_equal(_np(j1), np.zeros((2, 3)))
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.jacobian(lambda a, b: a * 2, (_t(X), _t(Y)), strict=True)


def test_jacobian_create_graph_is_differentiable():
    x = _t([1.0, 2.0]).requires_grad_()
    j = AF.jacobian(lambda t: t**3, x, create_graph=True)
    j.sum().backward()
    np.testing.assert_allclose(_np(x.grad), 6 * np.array([1.0, 2.0]))


def test_hessian():
    np.testing.assert_allclose(_np(AF.hessian(g, _t(X))), g_hessian(X), rtol=1e-12)
    (haa, hab), (hba, hbb) = AF.hessian(lambda a, b: (a * b[:2]).sin().sum(), (_t(X), _t(Y)))
    s = -np.sin(X * Y[:2])
    np.testing.assert_allclose(_np(haa), np.diag(s * Y[:2] ** 2), atol=1e-15)
    want = np.zeros((2, 3))
    for i in range(2):
        want[i, i] = s[i] * X[i] * Y[i] + np.cos(X[i] * Y[i])
    np.testing.assert_allclose(_np(hab), want, atol=1e-15)
    np.testing.assert_allclose(_np(hba), want.T, atol=1e-15)
    assert tuple(hbb.shape) == (3, 3)


def test_vjp_jvp_hvp_vhp():
    v = (_t([1.0, -2.0]), _t(0.5))
    (o0, o1), (vx, vy) = AF.vjp(f, (_t(X), _t(Y)), v)
    e = np.exp(np.sin(X) * Y[:2])
    np.testing.assert_allclose(_np(o0), e, rtol=1e-12)
    want_x = np.array([1.0, -2.0]) * e * np.cos(X) * Y[:2] + 0.5 * Y[1:]
    np.testing.assert_allclose(_np(vx), want_x, rtol=1e-12)
    want_y = np.array([1.0 * e[0] * np.sin(X[0]), -2.0 * e[1] * np.sin(X[1]), 0.0])
    want_y[1:] += 0.5 * X
    np.testing.assert_allclose(_np(vy), want_y, rtol=1e-12)
    tx, ty = np.array([1.0, -2.0]), np.array([0.5, 1.0, 2.0])
    (_, _), (j0, j1) = AF.jvp(f, (_t(X), _t(Y)), (_t(tx), _t(ty)))
    np.testing.assert_allclose(
        _np(j0), e * (np.cos(X) * Y[:2] * tx + np.sin(X) * ty[:2]), rtol=1e-12
    )
    np.testing.assert_allclose(_np(j1), float(ty[1:] @ X + Y[1:] @ tx), rtol=1e-12)
    w = np.array([1.0, 0.5])
    out, hv = AF.hvp(g, _t(X), _t(w))
    np.testing.assert_allclose(_np(hv), g_hessian(X) @ w, rtol=1e-12)
    np.testing.assert_allclose(float(out.item()), (X**3).sum() + np.exp(X[0] * X[1]))
    _, vh = AF.vhp(g, _t(X), _t(w))
    np.testing.assert_allclose(_np(vh), w @ g_hessian(X), rtol=1e-12)


def test_vjp_without_v_needs_one_element():
    _, gx = AF.vjp(g, _t(X))
    np.testing.assert_allclose(_np(gx), 3 * X**2 + X[::-1] * np.exp(X[0] * X[1]), rtol=1e-12)
    with pytest.raises(RuntimeError, match="v can only be None"):
        AF.vjp(f, (_t(X), _t(Y)))


def test_torchs_errors():
    with pytest.raises(RuntimeError, match="should return a single Tensor"):
        AF.hvp(f, (_t(X), _t(Y)), (_t(X), _t(Y)))
    with pytest.raises(RuntimeError, match="v has invalid size"):
        AF.jvp(g, _t(X), _t([1.0]))
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        AF.jacobian(lambda t: 3, _t(X))
    with pytest.raises(NotImplementedError, match="vectorize=True"):
        AF.jacobian(g, _t(X), strategy="forward-mode")


def test_doctests():
    assert doctest.testmod(AF).failed == 0
