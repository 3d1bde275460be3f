"""Tensor.register_hook, Module.register_full_backward_hook / _pre_hook and the forward
hooks' with_kwargs / prepend, against torch 2.13's behaviour (its values written here)."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn, tensor_hooks
from fusegrad.nn import hooks as module_hooks


def test_non_leaf_hook_replaces_the_gradient_and_retain_grad_keeps_the_hooked_one():
    """torch: y = x * 3; y.retain_grad(); y.register_hook(g * 10); x.register_hook(g + 1);
    (y * y).sum().backward() -> y.grad [60, 120], the leaf hook sees [180, 360],
    x.grad [181, 361]."""
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    y.register_hook(lambda g: g * 10)
    seen = []
    x.register_hook(lambda g: seen.append(g.tolist()) or g + 1)
    (y * y).sum().backward()
    assert seen == [[180.0, 360.0]]  # ran inside backward(), before anything was read
    assert y.grad.tolist() == [60.0, 120.0]
    assert x.grad.tolist() == [181.0, 361.0]


def test_hooks_run_in_order_none_keeps_the_gradient_and_remove_takes_off():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    order = []
    first = y.register_hook(lambda g: order.append("first") or g + 1)
    y.register_hook(lambda g: order.append(("second", g.tolist())))  # None: unchanged
    y.sum().backward(retain_graph=True)
    assert order == ["first", ("second", [2.0, 2.0])]
    assert x.grad.tolist() == [4.0, 4.0]
    first.remove()
    x.grad = None
    order.clear()
    y.sum().backward()
    assert order == [("second", [1.0, 1.0])] and x.grad.tolist() == [2.0, 2.0]


def test_a_hook_on_a_view_sees_the_gradient_of_views_built_on_it():
    """torch: [10, 20, 30] for both: reshape(reshape(x)) folds into one node here."""
    x = fg.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    y = x.reshape(3)
    early = y * 1  # built before the hook: still seen
    y.register_hook(lambda g: g * 10)
    late = y.reshape(1, 3)
    (late * fg.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    assert x.grad.tolist() == [[10.0, 20.0, 30.0]]
    x.grad = None
    (early * fg.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [[10.0, 20.0, 30.0]]


def test_a_hooked_gradient_fuses_with_the_backward_pass():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3).exp()
    with y.register_hook(lambda g: g * 10):  # a `with` block removes it on leaving
        y.sum().backward()
    assert len(fg.kernels(x.grad)) == 1
    np.testing.assert_allclose(x.grad.numpy(), 30 * np.exp([3.0, 6.0]), rtol=1e-6)
    assert not fg.ir.autodiff.GRAD_HOOKS.get(y.node)


def test_only_a_backward_through_a_hook_builds_its_gradients_at_once():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.register_hook(lambda g: g * 10)
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()  # no hook below: the gradient stays unbuilt (step cache)
    assert w.grad.pending.grads is None
    y.sum().backward()
    assert x.grad.pending.grads is not None and x.grad.tolist() == [30.0, 30.0]


def test_a_leaf_hook_stays_across_optimizer_steps():
    w = nn.Parameter(fg.tensor([1.0, -1.0]))
    w.register_hook(lambda g: g * 0)  # torch: the parameter never moves
    opt = fg.optim.SGD([w], lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    assert w.tolist() == [1.0, -1.0]


def test_hook_errors():
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't"):
        fg.ones(2).register_hook(lambda g: g)
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g.sum())
    with pytest.raises(fg.ShapeError, match=r"hook returned \(\), expected a gradient"):
        y.sum().backward()


def test_a_hook_under_jit_replays_as_recorded():
    def run(jitted):
        w = nn.Parameter(fg.tensor([1.0, 2.0, 3.0]))
        opt = fg.optim.SGD([w], lr=0.1)

        def step(x):
            h = w * x
            h.register_hook(lambda g: g * 0.5)
            loss = (h * h).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        step = fg.jit(step) if jitted else step
        losses = [step(fg.ones(3)).item() for _ in range(4)]
        return losses, w.numpy(), getattr(step, "replays", 0)

    eager, w_eager, _ = run(False)
    jitted, w_jit, replays = run(True)
    assert replays == 1
    np.testing.assert_allclose(jitted, eager, rtol=1e-6)
    np.testing.assert_allclose(w_eager, np.array([1.0, 2.0, 3.0]) * 0.9**4, rtol=1e-6)
    np.testing.assert_allclose(w_jit, w_eager, rtol=1e-6)


class _Two(nn.Module):
    def forward(self, a, k, b):
        return a * b * k, a + b


def test_full_backward_hook_and_pre_hook_as_torch():
    """torch's log and gradients for this module, pre hook doubling grad_output[0] and
    the full hook scaling grad_input[0] by 10 (b's None: b.grad stays None, as torch's)."""
    m = _Two()
    log = []

    def full(module, grad_input, grad_output):
        assert module is m
        log.append(
            (
                "full",
                [None if g is None else g.tolist() for g in grad_input],
                [g.tolist() for g in grad_output],
            )
        )
        return (grad_input[0] * 10, None, None)

    def pre(module, grad_output):
        log.append(("pre", [g.tolist() for g in grad_output]))
        return (grad_output[0] * 2, grad_output[1])

    h = m.register_full_backward_hook(full)
    hp = m.register_full_backward_pre_hook(pre)
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    b = fg.tensor([3.0, 4.0], requires_grad=True)
    p, q = m(a, 2.0, b)
    (p.sum() + 3 * q.sum()).backward()
    assert log == [
        ("pre", [[1.0, 1.0], [3.0, 3.0]]),
        ("full", [[15.0, 19.0], None, [7.0, 11.0]], [[2.0, 2.0], [3.0, 3.0]]),
    ]
    assert a.grad.tolist() == [150.0, 190.0] and b.grad is None
    h.remove()
    hp.remove()
    log.clear()
    a.grad = None
    p, q = m(a, 2.0, b)
    p.sum().backward()
    assert log == [] and a.grad.tolist() == [6.0, 8.0]


def test_dead_graphs_take_their_backward_hooks_with_them():
    import gc

    m = _Two()
    m.register_full_backward_hook(lambda mod, gi, go: None)
    m.register_full_backward_pre_hook(lambda mod, go: None)
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    gc.collect()
    before = len(fg.ir.autodiff.GRAD_HOOKS)
    for _ in range(3):
        p, q = m(a, 2.0, a)
        (p.sum() + q.sum()).backward()
    del p, q
    a.grad = None  # (an unread gradient holds the graph it is computed from)
    gc.collect()
    assert len(fg.ir.autodiff.GRAD_HOOKS) == before


def _hooked_mlp():
    rng = np.random.default_rng(3)
    shapes = [("0.weight", (4, 3)), ("0.bias", (4,)), ("2.weight", (2, 4)), ("2.bias", (2,))]
    state = {k: rng.standard_normal(s).astype(np.float32) * 0.5 for k, s in shapes}
    x = fg.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model.load_state_dict(state)
    model[2].register_full_backward_hook(lambda m, gi, go: (gi[0] * 0.5,))
    model[2].register_full_backward_pre_hook(lambda m, go: (go[0] * 2,))
    return model, x


def test_module_backward_hooks_in_a_network_as_torch_and_under_jit():
    """torch's gradients for this MLP with the same weights and hooks on its last layer
    (grad_output doubled, grad_input halved), then a jitted training step equals the eager."""
    model, x = _hooked_mlp()
    (model(x) ** 2).mean().backward()
    first = [0.0219, -0.17724, 0.04592, -0.07871, -0.18629, 0.03771, -0.06859, -0.11927]
    first += [0.01976, 0.02666, 0.08351, -0.03431]
    last = [2.0525, 0.04553, 0.0782, 0.31931, 0.21238, 0.07436, 0.13302, -0.60297]
    np.testing.assert_allclose(model[0].weight.grad.numpy().reshape(-1), first, atol=2e-5)
    np.testing.assert_allclose(model[2].weight.grad.numpy().reshape(-1), last, atol=2e-5)

    def train(jitted):
        model, x = _hooked_mlp()
        opt = fg.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            loss = (model(x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        step = fg.jit(step) if jitted else step
        losses = [step(x).item() for _ in range(4)]
        return losses, model[0].weight.numpy(), getattr(step, "replays", 0)

    eager, w_eager, _ = train(False)
    jitted, w_jit, replays = train(True)
    assert replays == 1
    np.testing.assert_allclose(jitted, eager, rtol=1e-6)
    np.testing.assert_allclose(w_jit, w_eager, rtol=1e-6)


def test_full_backward_hook_without_inputs_needing_grad_and_bad_returns():
    lin = nn.Linear(2, 1)
    seen = []
    lin.register_full_backward_hook(lambda m, gi, go: seen.append((gi, go[0].shape)))
    lin(fg.ones(3, 2)).sum().backward()
    assert seen == [((None,), (3, 1))]  # as torch: called when grad_output is known
    m = _Two()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[2]))
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but expected 3"):
        m(a, 2.0, a)[0].sum().backward()


def test_forward_hooks_with_kwargs_and_prepend_as_torch():
    """torch: Identity with these hooks returns 3.0 and logs
    [('prekw', {}), 'post0', 'post1', ('postkw', {})]."""
    order = []
    layer = nn.Identity()
    layer.register_forward_hook(lambda m, a, o: order.append("post1"))
    layer.register_forward_hook(lambda m, a, o: order.append("post0"), prepend=True)
    layer.register_forward_pre_hook(
        lambda m, a, kw: (order.append(("prekw", kw)), ((a[0] * 2,), kw))[1], with_kwargs=True
    )
    layer.register_forward_hook(
        lambda m, a, kw, o: order.append(("postkw", kw)) or o + 1, with_kwargs=True
    )
    assert layer(fg.ones(1)).tolist() == [3.0]
    assert order == [("prekw", {}), "post0", "post1", ("postkw", {})]
    bad = nn.Identity()
    bad.register_forward_pre_hook(lambda m, a, kw: 5, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"must return None or a tuple of \(new_args, new_kw"):
        bad(fg.ones(1))


def test_always_call_hooks_run_when_forward_raises():
    """torch: a hook with always_call=True is called with output None, then the error."""
    layer = nn.Identity()
    seen = []
    layer.register_forward_hook(lambda m, a, o: seen.append(o), always_call=True)
    layer.register_forward_hook(lambda m, a, o: seen.append("never"))
    with pytest.raises(TypeError):
        layer(1, 2)
    assert seen == [None]


def test_fg_grad_runs_hooks_as_torch_autograd_grad():
    """torch.autograd.grad(y.sum(), x) with a non-leaf hook (* 10) and a leaf hook (* 2)
    on x gives 2 * 10 * 3 = 60 per element."""
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: g * 2)
    y = x * 3
    y.register_hook(lambda g: g * 10)
    (g,) = fg.grad(y.sum(), x)
    assert g.tolist() == [60.0, 60.0]


@pytest.mark.parametrize("module", [tensor_hooks, module_hooks])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
