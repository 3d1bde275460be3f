"""frontend/tensor_hooks.py: `Tensor.register_post_accumulate_grad_hook` (called with the
leaf after backward() has accumulated its gradient, as torch's; an optimizer step inside it,
"optimizer in backward", gives the same parameters as the plain loop, computed here in
numpy), and hooks and gradient rules on empty values."""

import subprocess
import sys

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn, optim


def test_hook_sees_the_accumulated_gradient_until_removed():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    handle = x.register_post_accumulate_grad_hook(lambda p: seen.append((p, p.grad.tolist())))
    (x * 3).sum().backward()
    (x * x).sum().backward()
    assert [s[0] is x for s in seen] == [True, True]
    assert [s[1] for s in seen] == [[3.0, 3.0], [5.0, 7.0]]
    handle.remove()
    (x * 3).sum().backward()
    assert len(seen) == 2 and x.grad.tolist() == [8.0, 10.0]


def test_hook_runs_after_register_hook_changed_the_gradient_and_not_for_grad():
    x = fg.tensor([1.0, 1.0], requires_grad=True)
    x.register_hook(lambda g: g * 10)
    seen = []
    x.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.tolist()))
    (x * 2).sum().backward()
    assert seen == [[20.0, 20.0]]
    fg.grad((x * 2).sum(), x)  # nothing accumulated: no call, as torch's
    assert seen == [[20.0, 20.0]]


def test_refusals_as_torch():
    with pytest.raises(RuntimeError, match="non-leaf"):
        (fg.ones(2, requires_grad=True) * 2).register_post_accumulate_grad_hook(print)
    with pytest.raises(RuntimeError, match="require"):
        fg.ones(2).register_post_accumulate_grad_hook(print)
    x = fg.ones(2, requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda p: p.grad)
    with pytest.raises(RuntimeError, match="should return None"):
        (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]  # accumulated before the hook ran, as torch's


def _numpy_sgd_momentum(params, grads_of, steps, lr, momentum):
    bufs = [None] * len(params)
    for _ in range(steps):
        grads = grads_of(params)
        for k, g in enumerate(grads):
            bufs[k] = g if bufs[k] is None else momentum * bufs[k] + g
            params[k] = params[k] - lr * bufs[k]
    return params


def test_an_optimizer_step_in_the_hook_trains_as_the_plain_loop():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    b0 = rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = rng.standard_normal((5, 3)).astype(np.float32)

    def grads_of(params):  # d/dw, d/db of mean((x w^T + b - y)^2), by hand
        w, b = params
        r = 2 * (x @ w.T + b - y) / y.size
        return [r.T @ x, r.sum(0)]

    want = _numpy_sgd_momentum(
        [w0.astype(np.float64), b0.astype(np.float64)], grads_of, 4, 0.1, 0.9
    )

    layer = nn.Linear(4, 3)
    with fg.no_grad():
        layer.weight.copy_(fg.tensor(w0))
        layer.bias.copy_(fg.tensor(b0))
    optimizers = {p: optim.SGD([p], lr=0.1, momentum=0.9) for p in layer.parameters()}

    def step(p):
        optimizers[p].step()
        optimizers[p].zero_grad()

    for p in layer.parameters():
        p.register_post_accumulate_grad_hook(step)
    for _ in range(4):
        ((layer(fg.tensor(x)) - fg.tensor(y)) ** 2).mean().backward()
        assert layer.weight.grad is None or not layer.weight.grad.numpy().any()
    np.testing.assert_allclose(layer.weight.numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), want[1], rtol=1e-5, atol=1e-6)


EMPTY_HOOKS = """
import fusegrad as fg

class Twice(fg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2

x = fg.zeros(0, 3, requires_grad=True)
a, b = Twice.apply(x), Twice.apply(x)
(a.sum() + b.sum()).backward()
y = fg.zeros(0, requires_grad=True)
y.register_hook(lambda g: g)
y.register_hook(lambda g: g)
(y * 2).sum().backward()
print(a.shape, b.shape, x.grad.shape, y.grad.shape)
"""


def test_a_second_rule_or_hook_on_an_empty_value_does_not_hang():
    """Every node of an empty value is its one constant, so the search for a node free of
    earlier hooks and gradient rules (`fresh_node`) found none and looped for ever (a
    custom Function applied twice to an empty tensor hung). Run apart, so a hang is a
    failure."""
    run = subprocess.run(
        [sys.executable, "-c", EMPTY_HOOKS], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["(0,", "3)", "(0,", "3)", "(0,", "3)", "(0,)"]
