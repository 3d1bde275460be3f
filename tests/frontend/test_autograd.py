"""PyTorch's autograd as a user sees it: backward(), .grad, fusegrad.grad(), gradcheck.

Every gradient is checked against a closed form or a float64 central
difference. The last sections check the two promises of symbolic autodiff
beyond PyTorch's semantics: a training step leaves no buffer alive that can no
longer be needed, and the backward graph fuses with the forward graph (and with
the optimizer update) into few kernels.
"""

from __future__ import annotations

import gc
import re
import weakref

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline.schedule import STORE_COST
from fusegrad.runtime import buffer as buffer_module
from fusegrad.runtime import cuda as runtime_cuda
from fusegrad.runtime.engine import engine
from fusegrad.testing import GradcheckError, central_difference

RNG = np.random.default_rng(2024)

# every test once per backend (tests/conftest.py: `backend`; the others beside the CPU for
# the tests marked backend_slice, all of them under --all-backends)
pytestmark = pytest.mark.usefixtures("backend")


def f64(a, requires_grad: bool = False) -> fg.Tensor:
    return fg.from_numpy(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def numeric_grad(fn, a: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar fn(array) in float64, one element at a time."""
    g = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[idx] += eps
        down[idx] -= eps
        g[idx] = (fn(up) - fn(down)) / (2 * eps)
    return g


# ---------------------------------------------------------------- requires_grad


def test_requires_grad_argument_and_method():
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    assert a.requires_grad and a.is_leaf and a.grad is None
    b = fg.tensor([1.0, 2.0])
    assert not b.requires_grad
    assert b.requires_grad_() is b
    assert b.requires_grad and b.is_leaf
    y = a * b
    assert y.requires_grad and not y.is_leaf
    assert not (fg.tensor([1.0]) * 2).requires_grad


def test_requires_grad_on_a_non_leaf_or_an_integer_tensor_is_an_error():
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(fg.GradError, match="leaf"):
        (a * 2).requires_grad_()
    with pytest.raises(fg.DTypeError, match="float"):
        fg.tensor([1, 2]).requires_grad_()
    with pytest.raises(fg.DTypeError, match="float"):
        fg.tensor([1, 2], requires_grad=True)


def test_requires_grad_method_makes_backward_reach_the_tensor():
    a = f64([0.5, -1.0, 2.0]).requires_grad_()
    (a.exp() * a).sum().backward()
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(a.grad.numpy(), np.exp(x) * (1 + x), rtol=1e-12)


# ---------------------------------------------------------------- backward


def test_backward_of_a_one_element_tensor_needs_no_gradient():
    x = f64([[3.0]], requires_grad=True)
    (x * x * x).backward()  # shape (1, 1): one element
    np.testing.assert_allclose(x.grad.numpy(), [[27.0]])


def test_backward_of_a_non_scalar_needs_a_gradient():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    y = x.sin()
    with pytest.raises(fg.GradError, match=r"scalar outputs.*\(3,\)"):
        y.backward()
    with pytest.raises(fg.ShapeError, match=r"\(2,\)"):
        y.backward(f64([1.0, 2.0]))
    v = np.array([1.0, 0.5, -2.0])
    y.backward(f64(v))
    np.testing.assert_allclose(x.grad.numpy(), np.cos([1.0, 2.0, 3.0]) * v, rtol=1e-12)


def test_backward_gradient_may_be_a_list():
    x = f64([1.0, 2.0], requires_grad=True)
    (x * x).backward([1.0, 10.0])
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 40.0])


def test_grad_accumulates_until_it_is_set_to_none():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    (x * 5).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [7.0, 9.0, 11.0])
    (x * x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [10.0, 21.0, 38.0])
    x.grad = None
    (x * 5).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0, 5.0])


def test_grad_accumulates_across_backward_calls_before_it_is_read():
    x = f64([1.0, -2.0], requires_grad=True)
    for _ in range(3):
        (x * x).sum().backward()  # .grad stays lazy: three graphs summed, realized once
    np.testing.assert_allclose(x.grad.numpy(), [6.0, -12.0])


def test_grad_is_not_a_graph_that_requires_grad():
    x = f64([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    assert not x.grad.requires_grad
    assert x.grad.shape == x.shape and x.grad.dtype is x.dtype


def test_value_used_twice_by_one_op_accumulates():
    x = f64([1.0, -2.0, 0.5], requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0, 1.0])


def test_diamond_accumulates_both_paths():
    a0 = np.array([[1.0, -2.0], [0.5, 3.0]])
    x = f64(a0, requires_grad=True)
    a = x * 2
    b = x * 3
    (a * b).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 12 * a0)  # d/dx 6x^2


def test_deep_diamond_accumulates_every_path():
    a0 = np.array([0.3, -0.7, 1.1])
    x = f64(a0, requires_grad=True)
    y = x
    for _ in range(6):  # each level uses the previous value twice: y = sin(y) * y
        y = y.sin() * y

    def f(v):
        for _ in range(6):
            v = np.sin(v) * v
        return v.sum()

    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), numeric_grad(f, a0), rtol=1e-6, atol=1e-8)


def test_backward_reaches_every_leaf_the_output_depends_on():
    x = f64([1.0, 2.0], requires_grad=True)
    w = f64([[1.0, -1.0], [0.5, 2.0]], requires_grad=True)
    unused = f64([9.0], requires_grad=True)
    (w @ x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.5, 1.0])
    np.testing.assert_allclose(w.grad.numpy(), [[1.0, 2.0], [1.0, 2.0]])
    assert unused.grad is None


@pytest.mark.backend_slice
def test_broadcasting_sums_the_gradient_back_to_the_leaf_shape():
    a = f64(RNG.standard_normal((3, 1)), requires_grad=True)
    b = f64(RNG.standard_normal((4,)), requires_grad=True)
    (a * b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.full((3, 1), b.numpy().sum()), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), np.full(4, a.numpy().sum()), rtol=1e-12)


# ---------------------------------------------------------------- detach and no_grad


def test_detach_cuts_the_gradient_and_shares_the_value():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad
    np.testing.assert_array_equal(d.numpy(), x.numpy())
    (x * d).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])  # not 2x


def test_detach_of_an_intermediate():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    (y.detach() * x + y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0 + 2.0, 4.0 + 4.0, 9.0 + 6.0])


def test_no_grad_results_do_not_require_grad():
    x = f64([1.0, 2.0], requires_grad=True)
    with fg.no_grad():
        y = x * 2
        z = (x.exp() + 1).sum()
    assert not y.requires_grad and not z.requires_grad
    np.testing.assert_allclose(y.numpy(), [2.0, 4.0])
    with pytest.raises(fg.GradError, match="does not require grad"):
        z.backward()
    w = x * 3  # outside the block, recording is back on
    assert w.requires_grad


def test_no_grad_value_used_in_a_graph_is_a_constant():
    x = f64([1.0, 2.0], requires_grad=True)
    with fg.no_grad():
        c = x * x
    (c * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 4.0])


def test_no_grad_restores_the_state_after_an_exception():
    x = f64([1.0], requires_grad=True)
    with pytest.raises(ValueError), fg.no_grad():
        raise ValueError
    assert (x * 2).requires_grad


def test_backward_on_a_tensor_that_does_not_require_grad_is_a_clear_error():
    x = f64([1.0, 2.0])
    with pytest.raises(fg.GradError, match="does not require grad") as info:
        (x * 2).sum().backward()
    assert "requires_grad_()" in str(info.value)
    assert "test_autograd.py" in str(info.value)  # names the user's line


# ---------------------------------------------------------------- retain_graph


def test_second_backward_without_retain_graph_raises():
    x = f64([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(fg.GradError, match="retain_graph=True"):
        y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])  # the failed call added nothing


def test_retain_graph_allows_a_second_backward():
    x = f64([1.0, 2.0], requires_grad=True)
    y = (x * x * x).sum()
    y.backward(retain_graph=True)
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 24.0])
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [9.0, 36.0])
    with pytest.raises(fg.GradError):
        y.backward()


# ---------------------------------------------------------------- fusegrad.grad


def test_grad_returns_instead_of_accumulating():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    (g,) = fg.grad((x * x).sum(), x)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0, 6.0])
    assert x.grad is None
    assert not g.requires_grad


@pytest.mark.backend_slice
def test_grad_of_several_inputs_and_outputs():
    x = f64([1.0, 2.0], requires_grad=True)
    y = f64([3.0, -1.0], requires_grad=True)
    gx, gy = fg.grad([(x * y).sum(), (x * x).sum()], [x, y])
    np.testing.assert_allclose(gx.numpy(), [3.0 + 2.0, -1.0 + 4.0])
    np.testing.assert_allclose(gy.numpy(), [1.0, 2.0])


def test_grad_outputs_weight_a_non_scalar_output():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    v = f64([1.0, -1.0, 0.5])
    (g,) = fg.grad(x.exp(), x, grad_outputs=v)
    np.testing.assert_allclose(g.numpy(), np.exp([1.0, 2.0, 3.0]) * [1.0, -1.0, 0.5])
    with pytest.raises(fg.GradError, match="scalar"):
        fg.grad(x.exp(), x)


def test_grad_with_grad_outputs_per_output():
    x = f64([1.0, 2.0], requires_grad=True)
    (g,) = fg.grad([x * 2, x * x], x, grad_outputs=[f64([1.0, 1.0]), f64([10.0, 100.0])])
    np.testing.assert_allclose(g.numpy(), [2.0 + 20.0, 2.0 + 400.0])


def test_grad_allow_unused():
    x = f64([1.0, 2.0], requires_grad=True)
    unused = f64([5.0], requires_grad=True)
    with pytest.raises(fg.GradError, match="allow_unused=True"):
        fg.grad((x * 2).sum(), [x, unused])
    gx, gu = fg.grad((x * 2).sum(), [x, unused], allow_unused=True)
    np.testing.assert_allclose(gx.numpy(), [2.0, 2.0])
    assert gu is None


def test_grad_materialize_grads_gives_zeros_for_unused_inputs_as_torch():
    x = f64([1.0, 2.0], requires_grad=True)
    unused = f64([[5.0, -0.0]], requires_grad=True)
    gx, gu = fg.grad((x * 2).sum(), [x, unused], materialize_grads=True)
    np.testing.assert_allclose(gx.numpy(), [2.0, 2.0])
    assert gu.shape == (1, 2) and gu.dtype == fg.float64 and gu.tolist() == [[0.0, 0.0]]
    assert not gu.requires_grad
    # create_graph: the zeros are differentiable as torch's zeros_like(requires_grad=True)
    (gx2, gu2) = fg.grad((x * x).sum(), [x, unused], create_graph=True, materialize_grads=True)
    assert gu2.requires_grad and gx2.requires_grad
    (second,) = fg.grad((gx2 * gx2).sum() + gu2.sum(), [x])
    np.testing.assert_allclose(second.numpy(), [8.0, 16.0])  # d/dx (2x)^2 = 8x
    with pytest.raises(ValueError, match="allow_unused to be True or not passed"):
        fg.grad((x * 2).sum(), [x, unused], allow_unused=False, materialize_grads=True)


def test_grad_of_an_output_that_does_not_require_grad_is_an_error():
    x = f64([1.0, 2.0], requires_grad=True)
    with pytest.raises(fg.GradError, match="does not require grad"):
        fg.grad(x.detach().sum(), x)


def test_grad_with_respect_to_an_intermediate():
    x = f64([1.0, 2.0], requires_grad=True)
    h = x * 3
    (g,) = fg.grad((h * h).sum(), h)
    np.testing.assert_allclose(g.numpy(), [6.0, 12.0])


# ---------------------------------------------------------------- higher order


@pytest.mark.backend_slice
def test_second_and_third_derivative_of_sin_times_cube():
    a0 = np.array([-1.3, -0.4, 0.2, 0.9, 2.1])
    x = f64(a0, requires_grad=True)
    y = x.sin() * x**3
    (d1,) = fg.grad(y.sum(), x, create_graph=True)
    assert d1.requires_grad
    (d2,) = fg.grad(d1.sum(), x, create_graph=True)
    (d3,) = fg.grad(d2.sum(), x)
    s, c = np.sin(a0), np.cos(a0)
    want1 = c * a0**3 + 3 * s * a0**2
    want2 = -s * a0**3 + 6 * c * a0**2 + 6 * s * a0
    want3 = -c * a0**3 - 9 * s * a0**2 + 18 * c * a0 + 6 * s
    np.testing.assert_allclose(d1.numpy(), want1, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(d2.numpy(), want2, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(d3.numpy(), want3, rtol=1e-9, atol=1e-12)


def test_backward_with_create_graph_gives_a_differentiable_grad():
    x = f64([0.5, 1.5], requires_grad=True)
    (x**4).sum().backward(create_graph=True)
    g = x.grad
    assert g.requires_grad
    np.testing.assert_allclose(g.numpy(), 4 * np.array([0.5, 1.5]) ** 3)
    (h,) = fg.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), 12 * np.array([0.5, 1.5]) ** 2)


def mlp_loss(params, x, y):
    """Two tanh layers and a squared error; works on tensors and numpy arrays alike."""
    w1, b1, w2, b2 = params
    if isinstance(x, np.ndarray):
        h = np.tanh(x @ w1 + b1)
        return ((np.tanh(h @ w2 + b2) - y) ** 2).mean()
    h = (x @ w1 + b1).tanh()
    return (((h @ w2 + b2).tanh() - y) ** 2).mean()


def mlp_data(rng, n_in=3, n_hidden=5, n_out=2, batch=4):
    shapes = [(n_in, n_hidden), (n_hidden,), (n_hidden, n_out), (n_out,)]
    params = [rng.standard_normal(s) * 0.8 for s in shapes]
    return params, rng.standard_normal((batch, n_in)), rng.standard_normal((batch, n_out))


def test_mlp_gradient_matches_central_differences():
    params, x, y = mlp_data(np.random.default_rng(5))
    ps = [f64(p, requires_grad=True) for p in params]
    mlp_loss(ps, f64(x), f64(y)).backward()
    for i, p in enumerate(params):

        def loss_of(v, i=i):
            return mlp_loss(params[:i] + [v] + params[i + 1 :], x, y)

        np.testing.assert_allclose(
            ps[i].grad.numpy(), numeric_grad(loss_of, p), rtol=1e-6, atol=1e-9
        )


def test_mlp_hessian_vector_product_matches_differences_of_the_gradient():
    rng = np.random.default_rng(11)
    params, x, y = mlp_data(rng)
    vs = [rng.standard_normal(p.shape) for p in params]

    def gradient_at(arrays):
        ps = [f64(p, requires_grad=True) for p in arrays]
        return [g.numpy() for g in fg.grad(mlp_loss(ps, f64(x), f64(y)), ps)]

    ps = [f64(p, requires_grad=True) for p in params]
    grads = fg.grad(mlp_loss(ps, f64(x), f64(y)), ps, create_graph=True)
    dot = sum((g * f64(v)).sum() for g, v in zip(grads, vs))
    hvp = [h.numpy() for h in fg.grad(dot, ps)]
    # H v = d/dt grad(params + t v) at t = 0
    eps = 1e-5
    up = gradient_at([p + eps * v for p, v in zip(params, vs)])
    down = gradient_at([p - eps * v for p, v in zip(params, vs)])
    for h, u, d in zip(hvp, up, down):
        np.testing.assert_allclose(h, (u - d) / (2 * eps), rtol=1e-6, atol=1e-9)


# ---------------------------------------------------------------- gradcheck


def test_central_difference_of_python_scalars():
    assert central_difference(lambda a, b: a * a * b, 3.0, 2.0, arg=0) == pytest.approx(12.0)
    assert central_difference(lambda a, b: a * a * b, 3.0, 2.0, arg=1) == pytest.approx(9.0)


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda a: (a.sin() * a).sum(), [(4,)]),
        (lambda a, b: a @ b, [(2, 3), (3, 4)]),
        (lambda a: a.softmax(-1), [(2, 5)]),
        (lambda a, b: (a / (b * b + 1)).tanh().amax(0), [(3, 4), (1, 4)]),
        (lambda a: a.T.reshape(6)[1::2].exp(), [(2, 3)]),
    ],
)
def test_gradcheck_passes_on_correct_functions(fn, shapes):
    inputs = [f64(RNG.standard_normal(s)) for s in shapes]
    assert fg.testing.gradcheck(fn, inputs) is True


def test_gradcheck_names_the_worst_element_of_a_wrong_gradient():
    # d/dt [t * stop(t)] is t, but the function's value is t^2: its slope is 2t
    x = f64([0.1, -3.0, 0.5])
    with pytest.raises(GradcheckError) as info:
        fg.testing.gradcheck(lambda t: t * t.detach(), [x])
    msg = str(info.value)
    assert "input 0" in msg and "worst at index (1,)" in msg, msg
    assert fg.testing.gradcheck(lambda t: t * t.detach(), [x], raise_exception=False) is False


def test_gradcheck_names_the_input_with_the_wrong_gradient():
    a = f64(RNG.standard_normal((2, 3)))
    b = np.array([[0.1, 0.2, 0.3], [0.4, 4.0, 0.6]])

    def fn(s, t):
        return s.sin() * (t * t.detach())

    with pytest.raises(GradcheckError, match=r"input 1 .*worst at index \(1, 1\)"):
        fg.testing.gradcheck(fn, [a, f64(b)])


def test_gradcheck_error_is_an_assertion_error():
    assert issubclass(GradcheckError, AssertionError)


# ---------------------------------------------------------------- memory


def mlp_params(rng):
    shapes = [(8, 16), (16,), (16, 4), (4,)]
    return [f64(rng.standard_normal(s) * 0.5, requires_grad=True) for s in shapes]


def relu_mlp(params, x):
    w1, b1, w2, b2 = params
    return (x @ w1 + b1).relu() @ w2 + b2


def update(params, lr=0.1):
    for p in params:
        p.assign_(p - lr * p.grad)


def zero_grad(params):
    for p in params:
        p.grad = None


def sgd_step(params, x, y):
    """Forward, backward, SGD update via assign_, grads set to None; returns the loss tensor."""
    loss = ((relu_mlp(params, x) - y) ** 2).mean()
    loss.backward()
    update(params)
    fg.realize(loss, *params)
    zero_grad(params)
    return loss


def live_buffers() -> int:
    """Buffers alive on the CPU and in GPU memory (the suite may run on the cuda device)."""
    return buffer_module.live_buffers + runtime_cuda.live_buffers


def test_training_step_leaves_no_buffer_alive():
    gc.collect()
    before = live_buffers()
    rng = np.random.default_rng(0)
    params = mlp_params(rng)
    x, y = f64(rng.standard_normal((32, 8))), f64(rng.standard_normal((32, 4)))
    old = [weakref.ref(engine.value(p.node)) for p in params]
    hidden = (x @ params[0] + params[1]).relu().realize()  # an intermediate with a buffer
    hidden_buffer = weakref.ref(engine.value(hidden.node))
    loss = ((hidden @ params[2] + params[3] - y) ** 2).mean()
    loss.backward()
    grads = [p.grad for p in params]
    fg.realize(*grads)
    grad_buffers = [weakref.ref(engine.value(g.node)) for g in grads]
    del grads
    update(params)
    first = loss.item()
    fg.realize(*params)
    zero_grad(params)
    del loss, hidden
    gc.collect()
    assert all(r() is None for r in grad_buffers)
    assert hidden_buffer() is None
    assert all(r() is None for r in old)  # the parameters' values before the update
    assert live_buffers() == before + 6  # four parameters, x and y
    # steady state: more steps leave the same number alive, and training works
    for _ in range(5):
        last = sgd_step(params, x, y).item()
    gc.collect()
    assert live_buffers() == before + 6
    assert last < first
    del params, x, y
    gc.collect()
    assert live_buffers() == before


def test_realizing_gradients_frees_every_intermediate_buffer():
    rng = np.random.default_rng(1)
    params = mlp_params(rng)
    x, y = f64(rng.standard_normal((32, 8))), f64(rng.standard_normal((32, 4)))
    grads = fg.grad(((relu_mlp(params, x) - y) ** 2).mean(), params)
    gc.collect()
    before = live_buffers()
    ks = fg.kernels(*grads)
    assert len(ks) > len(grads)  # there were intermediates
    gc.collect()
    assert live_buffers() == before + len(grads)


def test_a_realized_loss_does_not_keep_the_old_parameters_alive():
    """After backward() (without retain_graph) and the update, the loss is a value: the
    parameter values it was computed from can no longer be needed by anything."""
    rng = np.random.default_rng(2)
    params = mlp_params(rng)
    x, y = f64(rng.standard_normal((32, 8))), f64(rng.standard_normal((32, 4)))
    old = [weakref.ref(engine.value(p.node)) for p in params]
    loss = sgd_step(params, x, y)  # the user keeps the loss to log it
    gc.collect()
    alive = [i for i, r in enumerate(old) if r() is not None]
    assert not alive, f"old values of parameters {alive} are still alive (loss={loss.item()})"


# ---------------------------------------------------------------- fusion across the boundary

# why a kernel's output is materialized: the scheduler's reasons, as it words them
KNOWN_REASONS = [
    r"output requested",
    r"reduction read by \d+ kernels",
    r"reduction broadcast back over axis [\d, ]+",
    r"reduction read through \w+ by its consumer",
    r"reduction feeding another reduction",
    r"its consumer's kernel already fuses another reduction",
    r"(broadcast back over axis [\d, ]+|read by \d+ kernels|read inside a reduction): evaluated "
    r"(?P<reuse>[\d.e+]+) times per element, recomputing costs (?P<cost>\d+) units each time, "
    r"storing (?P<store>\d+)",
]


def relu_mlp_gradients(seed: int = 3):
    """Parameters, data (as numpy), loss and lazy gradients of a 2-layer relu MLP, MSE loss."""
    rng = np.random.default_rng(seed)
    params = mlp_params(rng)
    x, y = rng.standard_normal((32, 8)), rng.standard_normal((32, 4))
    loss = ((relu_mlp(params, f64(x)) - f64(y)) ** 2).mean()
    return params, (x, y), loss, fg.grad(loss, params)


def test_gradient_kernels_materialize_only_for_known_reasons():
    *_, grads = relu_mlp_gradients()
    for k in fg.kernels(*grads):
        match = next((m for p in KNOWN_REASONS if (m := re.fullmatch(p, k.reason))), None)
        assert match, f"{k.name}: unknown reason {k.reason!r}"
        if match.groupdict().get("cost"):
            # an elementwise value is stored only where recomputing it costs more
            reuse, cost = float(match["reuse"]), int(match["cost"])
            assert int(match["store"]) == STORE_COST
            assert (reuse - 1) * cost > STORE_COST, k.reason


def test_no_gradient_kernel_computes_a_constant():
    """A kernel that reads no buffer computes a value known before anything runs (here: the
    1/numel of mean()'s gradient); it belongs folded into the kernels that use it."""
    *_, grads = relu_mlp_gradients()
    constant = [(k.name, k.ops, k.reason) for k in fg.kernels(*grads) if not k.input_shapes]
    assert not constant


def test_mlp_gradients_kernel_count():
    """The gradients of a 2-layer relu MLP with an MSE loss, realized together.

    Each matmul and each reduction is a kernel: the forward pass's two matmuls
    (x @ w1, read by three kernels; h @ w2, with the loss's elementwise gradient
    fused after it), and the backward pass's five reductions: dh = dout @ w2.T
    (read by two kernels), dw1 and dw2 (sums over the batch), db1 and db2.
    h = relu(x @ w1 + b1) is a compare and a select, recomputed where it is read
    (h @ w2 and dw2); dw1 and dw2 leave their reductions in (out, in) order,
    so each is written once more through a transpose: 2 + 5 + 2 = 9 kernels
    that read data. The loss, h and the relu's mask are never stored.
    """
    *_, grads = relu_mlp_gradients()
    ks = fg.kernels(*grads)
    data_kernels = [k for k in ks if k.input_shapes]  # see test_no_gradient_kernel_computes...
    assert len(data_kernels) == 9, [(k.name, k.reason) for k in ks]
    assert sum("SUM" in k.ops for k in data_kernels) == 7


def test_mlp_gradients_are_correct_when_fused():
    params, (x, y), _, grads = relu_mlp_gradients()
    arrays = [p.numpy().copy() for p in params]

    def loss_of(i):
        def f(v):
            w1, b1, w2, b2 = arrays[:i] + [v] + arrays[i + 1 :]
            return (((np.maximum(x @ w1 + b1, 0) @ w2 + b2) - y) ** 2).mean()

        return f

    fg.realize(*grads)
    for i, (a, g) in enumerate(zip(arrays, grads)):
        np.testing.assert_allclose(g.numpy(), numeric_grad(loss_of(i), a), rtol=1e-6, atol=1e-8)


@pytest.mark.backend_slice
def test_optimizer_update_fuses_into_the_gradient_kernels():
    """p - lr * grad is elementwise after each gradient's last kernel: it adds no kernel."""
    *_, grads = relu_mlp_gradients()
    alone = len(fg.kernels(*grads))
    params, _, loss, _ = relu_mlp_gradients()
    loss.backward()
    updated = [p - 0.1 * p.grad for p in params]
    ks = fg.kernels(*updated)
    assert len(ks) == alone, [(k.name, k.reason) for k in ks]


def test_integer_and_bool_results_never_require_grad():
    """As in torch: argmax, comparisons and integer casts of a differentiable tensor have no
    gradient, so realizing them drops their graph and detach() reads their buffer."""
    x = fg.randn(3, 4, requires_grad=True)
    assert not x.argmax(1).requires_grad
    assert not (x > 0).requires_grad
    assert not x.long().requires_grad
    assert (x * 2).requires_grad and x.sum().requires_grad
    pred = x.argmax(1)
    pred.realize()
    assert pred.detach().node.op.name == "BUFFER"  # the computed buffer, not a copy kernel


# ---------------------------------------------------------------- retain_grad


def test_retain_grad_keeps_a_non_leafs_gradient_as_torch():
    """Oracle: d(sum(y*y))/dy = 2y, and y = 2x so d/dx = 8x; equal nodes (y and z are one
    node) both keep it; a leaf's retain_grad is a no-op; accumulation over two backward()
    calls, as for leaves."""
    x = fg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x * 2
    z = x * 2
    untouched = x * 3
    y.retain_grad()
    z.retain_grad()
    assert y.retains_grad and not untouched.retains_grad and not x.retains_grad
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [4.0, -8.0, 12.0])
    np.testing.assert_array_equal(z.grad.numpy(), [4.0, -8.0, 12.0])
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, -16.0, 24.0])
    assert untouched.grad is None
    (y * 3).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [7.0, -5.0, 15.0])
    x.retain_grad()  # a leaf keeps its gradient anyway
    assert not x.retains_grad


def test_retain_grad_on_a_tensor_without_grad_is_refused():
    with pytest.raises(fg.GradError, match="can't retain_grad on Tensor that has requires_grad"):
        fg.tensor([1.0]).retain_grad()


def test_retain_grad_in_a_training_loop_gives_the_activations_gradient():
    """The optimizer's cached step still runs (the retained gradient is built only when
    read); the activation's gradient is the one `fg.grad` gives on the same graph."""
    fg.manual_seed(0)
    model = fg.nn.Sequential(fg.nn.Linear(6, 5), fg.nn.ReLU(), fg.nn.Linear(5, 3))
    opt = fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = fg.randn(4, 6).realize(), fg.tensor([0, 2, 1, 2])
    for _ in range(3):
        opt.zero_grad()
        h = model[0](x)
        h.retain_grad()
        loss = fg.nn.functional.cross_entropy(model[2](model[1](h)), y)
        (want,) = fg.grad(loss, [h], retain_graph=True)
        want = want.numpy()
        loss.backward()
        opt.step()
        np.testing.assert_allclose(h.grad.numpy(), want, rtol=1e-6, atol=1e-7)
    assert opt._steps.hits >= 1


def test_gradients_read_one_by_one_run_the_backward_pass_once(monkeypatch):
    # an optimizer on the host (LBFGS), a gradient log: each gradient's first read computes
    # the other gradients of the same backward() with it, instead of a plan each
    rng = np.random.default_rng(0)
    ws = [fg.tensor(rng.standard_normal((8, 8)), requires_grad=True) for _ in range(4)]
    x = fg.tensor(rng.standard_normal((5, 8)))
    h = x
    for w in ws:
        h = (h @ w).tanh()
    loss = (h * h).sum()
    loss.item()
    loss.backward()
    runs = []
    run = engine.run

    def counted(plan, *args, **kwargs):
        runs.append(plan)
        return run(plan, *args, **kwargs)

    monkeypatch.setattr(engine, "run", counted)
    got = [w.grad.numpy() for w in ws]
    assert len(runs) == 1, f"{len(runs)} plans ran for {len(ws)} gradients"
    # the values are those of each gradient alone, by autograd.grad's own graphs
    want = fg.autograd.grad((lambda h: (h * h).sum())(_chain(x, ws)), ws)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-12, atol=0)
    # a second backward's gradients are not the first's siblings: each read alone again
    runs.clear()
    ws[0].grad = None
    (ws[0] * 2).sum().backward()
    ws[0].grad.numpy()
    assert len(runs) == 1


def _chain(x, ws):
    for w in ws:
        x = (x @ w).tanh()
    return x
