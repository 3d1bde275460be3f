"""torch.func's transforms (frontend/func_transforms.py, frontend/func_vmap.py) against
numpy and hand-derived derivatives. (Checked against torch 2.14.1's torch.func in float64
too, off the test suite: per-example MLP gradients, hessians, jacrev/jacfwd, jvp, vjp,
vmap's dims, the ensembling recipe; all within 1e-15.)"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.func import (
    grad,
    grad_and_value,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    vjp,
)

RNG = np.random.default_rng(7)


def t(a):
    return fg.tensor(np.asarray(a, dtype=np.float64).tolist(), dtype=fg.float64)


def close(x, ref, tol=1e-12):
    np.testing.assert_allclose(np.asarray(x.tolist()), ref, rtol=tol, atol=tol)


# ---------------------------------------------------------------- grad


def test_grad_and_its_second_derivative():
    x = RNG.normal(size=4)
    f = lambda v: (v.sin() * v).sum()  # noqa: E731
    close(grad(f)(t(x)), np.sin(x) + x * np.cos(x))
    # d/dx of the gradient's sum: the diagonal of the hessian, 2 cos x - x sin x
    close(grad(lambda v: grad(f)(v).sum())(t(x)), 2 * np.cos(x) - x * np.sin(x))
    assert grad(grad(lambda v: v**3))(t(2.0)).item() == pytest.approx(12.0)


def test_grad_argnums_trees_and_unused_inputs():
    a, b = RNG.normal(size=3), RNG.normal(size=3)
    ga, gb = grad(lambda x, y: (x * y.exp()).sum(), argnums=(0, 1))(t(a), t(b))
    close(ga, np.exp(b))
    close(gb, a * np.exp(b))
    g = grad(lambda d: (d["w"] ** 2).sum() + d["pair"][1].sum())({"w": t(a), "pair": (t(b), t(b))})
    assert set(g) == {"w", "pair"}
    close(g["w"], 2 * a)
    close(g["pair"][0], np.zeros(3))  # unused: zeros, as torch's
    close(g["pair"][1], np.ones(3))
    close(grad(lambda x, y: x.sum(), argnums=-1)(t(a), t(b)), np.zeros(3))


def test_a_captured_tensor_is_a_constant_even_if_it_is_the_input():
    y = t(RNG.normal(size=3))
    close(grad(lambda x: (x * y).sum())(y), np.asarray(y.tolist()))
    # perturbation confusion: d/dx [x * d/dy (x * y)] = d/dx x^2 = 2x
    assert grad(lambda x: x * grad(lambda z: x * z)(x))(t(3.0)).item() == pytest.approx(6.0)


def test_grad_and_value_with_aux():
    x = RNG.normal(size=3)
    g, (value, aux) = grad_and_value(lambda v: ((v**2).sum(), {"d": v * 3}), has_aux=True)(t(x))
    close(g, 2 * x)
    assert value.item() == pytest.approx((x**2).sum())
    close(aux["d"], 3 * x)
    g2, aux2 = grad(lambda v: (v.sum(), v + 1), has_aux=True)(t(x))
    close(g2, np.ones(3))
    close(aux2, x + 1)


def test_results_require_grad_only_through_outer_leaves():
    x = t(RNG.normal(size=3))
    assert not grad(lambda v: (v**3).sum())(x).requires_grad
    w = t(RNG.normal(size=3)).requires_grad_()
    gw = grad(lambda v: (v * w).sin().sum())(x)  # cos(x w) w
    assert gw.requires_grad
    gw.sum().backward()
    xn, wn = np.asarray(x.tolist()), np.asarray(w.detach().tolist())
    close(w.grad, np.cos(xn * wn) - xn * wn * np.sin(xn * wn))


def test_grad_errors_as_torchs():
    x = t([1.0, 2.0])
    with pytest.raises(RuntimeError, match="scalar Tensor, got tensor with 1 dims"):
        grad(lambda v: v)(x)
    with pytest.raises(RuntimeError, match="return a Tensor, got <class 'float'>"):
        grad(lambda v: 3.0)(x)
    with pytest.raises(RuntimeError, match=r"should be a tuple: \(output, aux\)"):
        grad(lambda v: v.sum(), has_aux=True)(x)
    with pytest.raises(RuntimeError, match="Expected tensors, got unsupported type <class 'int'>"):
        grad(lambda v: (v.sum(), 1), has_aux=True)(x)
    with pytest.raises(RuntimeError, match="Got argnum=1, but only 1 positional inputs"):
        grad(lambda v: v.sum(), argnums=1)(x)
    with pytest.raises(RuntimeError, match="argnums must be non-empty"):
        grad(lambda v: v.sum(), argnums=())(x)
    with pytest.raises(ValueError, match="must be Tensor, got <class 'float'>"):
        grad(lambda v: v)(3.0)
    with pytest.raises(RuntimeError, match="floating point"):
        grad(lambda v: v.sum())(fg.tensor([1, 2]))


# ---------------------------------------------------------------- vjp, jvp, Jacobians


def _tanh_affine():
    a = RNG.normal(size=(3, 4))
    x = RNG.normal(size=4)
    jac = (1 - np.tanh(a @ x) ** 2)[:, None] * a  # d tanh(A x) / dx
    return a, x, jac


def test_vjp_and_jvp():
    a, x, jac = _tanh_affine()
    A = t(a)
    f = lambda v: (A @ v).tanh()  # noqa: E731
    out, vjp_fn = vjp(f, t(x))
    close(out, np.tanh(a @ x))
    u = RNG.normal(size=3)
    (g,) = vjp_fn(t(u))
    close(g, jac.T @ u)
    tangent = RNG.normal(size=4)
    out2, jt = jvp(f, (t(x),), (t(tangent),))
    close(out2, np.tanh(a @ x))
    close(jt, jac @ tangent)


def test_jvp_and_vjp_of_several_inputs_and_outputs():
    x, y = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3))
    f = lambda p, q: ((p * q).sum(0), p.exp())  # noqa: E731
    dx, dy = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3))
    (s, e), (ds, de) = jvp(f, (t(x), t(y)), (t(dx), t(dy)))
    close(ds, (dx * y + x * dy).sum(0))
    close(de, np.exp(x) * dx)
    _, vjp_fn = vjp(f, t(x), t(y))
    cs, ce = RNG.normal(size=3), RNG.normal(size=(2, 3))
    gx, gy = vjp_fn((t(cs), t(ce)))
    close(gx, cs * y + ce * np.exp(x))
    close(gy, cs * x)
    with pytest.raises(RuntimeError, match="pytree structure of cotangents"):
        vjp_fn(t(cs))
    with pytest.raises(RuntimeError, match="Expected primals to be a tuple"):
        jvp(f, t(x), t(dx))


def test_jacrev_and_jacfwd():
    a, x, jac = _tanh_affine()
    A = t(a)
    close(jacrev(lambda v: (A @ v).tanh())(t(x)), jac)
    close(jacfwd(lambda v: (A @ v).tanh())(t(x)), jac)
    p, q = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3))
    (js_p, js_q), (je_p, je_q) = jacrev(lambda u, w: ((u * w).sum(0), u.exp()), argnums=(0, 1))(
        t(p), t(q)
    )
    ref = np.zeros((3, 2, 3))
    for i in range(3):
        ref[i, :, i] = q[:, i]
    close(js_p, ref)
    assert tuple(je_p.shape) == (2, 3, 2, 3) and tuple(js_q.shape) == (3, 2, 3)
    close(je_p.reshape(6, 6), np.diag(np.exp(p).ravel()))
    close(je_q, np.zeros((2, 3, 2, 3)))
    j, aux = jacrev(lambda v: (v**2, v.sum()), has_aux=True)(t(x))
    close(j, np.diag(2 * x))
    assert aux.item() == pytest.approx(x.sum())
    with pytest.raises(ValueError, match="chunk_size"):
        jacrev(lambda v: v, chunk_size=0)


def test_hessian():
    x = RNG.normal(size=3)
    h = hessian(lambda v: (v**3).sum() + v[0] * v[1] * v[2])(t(x))
    ref = np.diag(6 * x)
    ref[0, 1] = ref[1, 0] = x[2]
    ref[0, 2] = ref[2, 0] = x[1]
    ref[1, 2] = ref[2, 1] = x[0]
    close(h, ref)


def test_a_nan_derivative_fills_a_column_in_reverse_mode_and_a_row_in_forward_mode():
    # as torch's: jacrev's vector-Jacobian products carry 0 * NaN into every row,
    # jacfwd's Jacobian-vector products into every column of the NaN's output
    x = t([1.0, float("nan"), 2.0])
    rev = np.asarray(jacrev(lambda v: v.exp())(x).tolist())
    fwd = np.asarray(jacfwd(lambda v: v.exp())(x).tolist())
    assert np.isnan(rev[:, 1]).all() and not np.isnan(np.delete(rev, 1, axis=1)).any()
    assert np.isnan(fwd[1, :]).all() and not np.isnan(np.delete(fwd, 1, axis=0)).any()
    close(np.delete(np.delete(fwd, 1, 0), 1, 1), np.diag(np.exp([1.0, 2.0])))


def test_jacfwd_refuses_random_draws_in_error_mode_as_torchs():
    x = fg.ones(3, dtype=fg.float64)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        jacfwd(lambda v: v * fg.rand(3, dtype=fg.float64))(x)
    assert tuple(jacfwd(lambda v: v * fg.rand(3), randomness="same")(fg.ones(3)).shape) == (3, 3)
    assert tuple(jacrev(lambda v: v * fg.rand(3))(fg.ones(3)).shape) == (3, 3)  # as torch's
