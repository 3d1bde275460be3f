"""torch.func's transforms (frontend/func_transforms.py, frontend/func_vmap.py) against
numpy and hand-derived derivatives. (Checked against torch 2.14.1's torch.func in float64
too, off the test suite: per-example MLP gradients, hessians, jacrev/jacfwd, jvp, vjp,
vmap's dims, the ensembling recipe; all within 1e-15.)"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.func import (
    functional_call,
    grad,
    grad_and_value,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    stack_module_state,
    vjp,
    vmap,
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


# ---------------------------------------------------------------- vmap


def test_vmap_dims():
    x, y = RNG.normal(size=(2, 3)), RNG.normal(size=2)
    close(vmap(lambda c, v: (c * v).sum(), in_dims=(1, None))(t(x), t(y)), x.T @ y)
    a, b = vmap(lambda r: (r * 2, r.sum()), out_dims=(1, 0))(t(x))
    close(a, 2 * x.T)
    close(b, x.sum(1))
    close(vmap(lambda r: r.sum(), in_dims=-1)(t(x)), x.sum(0))
    close(vmap(vmap(lambda p, q: p * q + 1))(t(x), t(x)), x * x + 1)
    d = vmap(lambda m: m["a"] * m["b"], in_dims=({"a": 0, "b": 1},))({"a": t(x), "b": t(x.T)})
    close(d, x * x)
    close(vmap(lambda r: r.exp(), chunk_size=1)(t(x)), np.exp(x))
    close(vmap(lambda r, k: r * k)(t(x), k=3.0), 3 * x)  # keyword arguments: not mapped
    assert tuple(vmap(lambda r: r * 2)(fg.zeros(0, 3)).shape) == (0, 3)
    assert vmap(lambda r: (r, 5), out_dims=(0, None))(t(x))[1] == 5
    assert fg.vmap.__wrapped__ is vmap  # (torch.vmap; fusegrad's top level adds out=)
    close(fg.vmap(lambda r: r.sum())(t(x)), x.sum(1))


def test_vmap_errors_as_torchs():
    x = fg.ones(2, 3)
    with pytest.raises(ValueError, match=r"got sizes \[2, 3\] for the mapped dimension"):
        vmap(lambda p, q: p)(x, fg.ones(3, 3))
    with pytest.raises(ValueError, match="expected in_dim to satisfy -2 <= in_dim < 2"):
        vmap(lambda p: p, in_dims=2)(x)
    with pytest.raises(ValueError, match="in_dims is not compatible"):
        vmap(lambda p: p, in_dims=(0, 0))(x)
    with pytest.raises(ValueError, match="Expected at least one Tensor to vmap over"):
        vmap(lambda p: p, in_dims=(None,))(x)
    with pytest.raises(ValueError, match="must only return Tensors"):
        vmap(lambda p: 3)(x)
    with pytest.raises(ValueError, match="got no inputs"):
        vmap(lambda: 3)()
    with pytest.raises(IndexError, match="Dimension out of range"):
        vmap(lambda p: p, out_dims=2)(x)
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        vmap(lambda p: p, randomness="bad")


def test_vmap_randomness():
    x = fg.ones(3, 2)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        vmap(lambda r: fg.rand(2) + r)(x)
    same = np.asarray(vmap(lambda r: fg.rand(2) + r, randomness="same")(x).tolist())
    assert (same == same[0]).all()
    different = np.asarray(vmap(lambda r: fg.rand(2) + r, randomness="different")(x).tolist())
    assert len({tuple(row) for row in different}) == 3


def test_per_example_gradients():
    # loss (w . x - y)^2: gradient 2 (w . x - y) x for each example
    w, xs, ys = RNG.normal(size=3), RNG.normal(size=(5, 3)), RNG.normal(size=5)
    loss = lambda p, x, y: ((p * x).sum() - y) ** 2  # noqa: E731
    g = vmap(grad(loss), in_dims=(None, 0, 0))(t(w), t(xs), t(ys))
    close(g, 2 * (xs @ w - ys)[:, None] * xs)


def test_per_example_gradients_of_a_module_with_functional_call():
    model = nn.Linear(3, 2).to(fg.float64)
    params = {k: v.detach() for k, v in model.named_parameters()}
    xs, ys = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 2))

    def loss(p, x, y):
        return ((functional_call(model, p, (x,)) - y) ** 2).sum()

    g = vmap(grad(loss), in_dims=(None, 0, 0))(params, t(xs), t(ys))
    wn, bn = np.asarray(params["weight"].tolist()), np.asarray(params["bias"].tolist())
    r = 2 * (xs @ wn.T + bn - ys)  # (4, 2)
    close(g["weight"], r[:, :, None] * xs[:, None, :])
    close(g["bias"], r)


def test_ensemble_with_stack_module_state():
    models = [nn.Linear(3, 2).to(fg.float64) for _ in range(4)]
    params, buffers = stack_module_state(models)
    assert tuple(params["weight"].shape) == (4, 2, 3) and params["weight"].requires_grad
    x = RNG.normal(size=(5, 3))
    out = vmap(lambda p, b, v: functional_call(models[0], (p, b), (v,)), in_dims=(0, 0, None))(
        params, buffers, t(x)
    )
    for k, m in enumerate(models):
        ref = x @ np.asarray(m.weight.tolist()).T + np.asarray(m.bias.tolist())
        close(out[k], ref)
    with pytest.raises(RuntimeError, match="same class"):
        stack_module_state([nn.Linear(2, 2), nn.Tanh()])
