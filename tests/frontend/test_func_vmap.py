"""torch.func.vmap (frontend/func_vmap.py), alone and over grad / jacrev and
functional_call, against numpy and hand-derived derivatives. (Checked against torch
2.14.1's vmap in float64 too, off the test suite: per-example MLP gradients, in_dims and
out_dims forms, nested vmap, vmap(jacrev), vmap(hessian), the ensembling recipe; all
within 1e-15.)"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.func import (
    functional_call,
    grad,
    stack_module_state,
    vmap,
)

RNG = np.random.default_rng(7)


def t(a):
    return fg.tensor(np.asarray(a, dtype=np.float64).tolist(), dtype=fg.float64)


def close(x, ref, tol=1e-12):
    np.testing.assert_allclose(np.asarray(x.tolist()), ref, rtol=tol, atol=tol)


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


def test_backward_through_per_example_gradients_and_an_ensemble():
    w0, xs = RNG.normal(size=3), RNG.normal(size=(4, 3))
    w = t(w0).requires_grad_()
    g = vmap(grad(lambda p, v: (p * v).sin().sum()), in_dims=(None, 0))(w, t(xs))
    assert g.requires_grad
    g.sum().backward()  # d/dw sum_i cos(w x_i) x_i
    close(w.grad, (-np.sin(w0 * xs) * xs**2).sum(0))
    models = [nn.Linear(3, 2).to(fg.float64) for _ in range(3)]
    params, buffers = stack_module_state(models)
    out = vmap(lambda p, b, v: functional_call(models[0], (p, b), (v,)), in_dims=(0, 0, None))(
        params, buffers, t(xs)
    )
    out.sum().backward()
    close(params["weight"].grad, np.broadcast_to(xs.sum(0), (3, 2, 3)))
    close(params["bias"].grad, np.full((3, 2), 4.0))


def test_an_output_of_out_dim_none_that_varies_with_the_example_is_refused():
    """out_dims None takes the first example's output: one that depends on the mapped
    input would silently be the first example's alone, where torch refuses it."""
    xs = t(RNG.normal(size=(3, 2)))
    with pytest.raises(ValueError, match="can not return a BatchedTensor when out_dim is None"):
        vmap(lambda x: x * 2, out_dims=None)(xs)
    with pytest.raises(ValueError, match="out_dim is None"):
        vmap(lambda x, w: (x * w, x.sum()), in_dims=(0, None), out_dims=(0, None))(xs, t([1, 2]))
    w = t([1.0, 2.0])
    a, b = vmap(lambda x, w: (x * w, w * 2), in_dims=(0, None), out_dims=(0, None))(xs, w)
    close(b, [2.0, 4.0])
    close(vmap(lambda x: fg.ones(2, dtype=fg.float64), out_dims=None)(xs), [1.0, 1.0])
