"""PyTorch habits that must never be silently wrong: writes through `.data`, a gradient
used as a tensor, the hand-written SGD loop (which must not chain steps together), and
the everyday in-place and constructor methods. Expected values are PyTorch 2.13's."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn


def reachable(node) -> int:
    """The number of nodes of the graph behind `node`."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.srcs)
    return len(seen)


# ---------------------------------------------------------------- writes through .data


def test_inplace_writes_through_data_land_in_the_tensor():
    x = fg.tensor([1.0, 2.0])
    x.data.zero_()
    assert x.tolist() == [0.0, 0.0]
    m = nn.Linear(2, 2)
    m.weight.data.fill_(0.5)
    assert m.weight.tolist() == [[0.5, 0.5], [0.5, 0.5]]
    m.weight.data.copy_(fg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert m.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert m.weight.is_leaf and m.weight.requires_grad
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    w.data.mul_(3)
    w.data -= 1  # under grad mode too: .data has no history
    assert w.tolist() == [2.0, 5.0] and w.requires_grad and w.is_leaf
    assert not w.data.requires_grad and not (w.data * 2).requires_grad


def test_zeroing_the_gradient_through_data_stops_accumulation():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    w.grad.data.zero_()
    (w * w).sum().backward()
    assert w.grad.tolist() == [2.0, 4.0]  # one backward's gradient, not two


def test_data_kept_across_steps_sees_and_updates_the_parameter():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    d = w.data  # optimizers written by users keep these
    opt = fg.optim.SGD([w], lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()  # w = w - 0.5 * 2w = 0
        assert d.tolist() == w.tolist()
    w.data.copy_(fg.tensor([3.0, 4.0]))
    assert d.tolist() == [3.0, 4.0]
    d.mul_(2)
    assert w.tolist() == [6.0, 8.0]


def test_data_versions_follow_pytorch():
    w = fg.ones(2, requires_grad=True)
    d = w.data
    d.add_(1)
    w.data.mul_(2)
    assert w.tolist() == [4.0, 4.0]
    assert (w._version, d._version) == (0, 1)  # torch: .data has its own version counter


def test_assigning_data_rebinds_the_value_and_keeps_the_leaf():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    ident = id(w)
    w.data = fg.tensor([5.0, 6.0])
    assert id(w) == ident and w.tolist() == [5.0, 6.0] and w.is_leaf and w.requires_grad
    w.data = fg.zeros(3, dtype=fg.float64)  # torch allows another shape and dtype
    assert w.shape == (3,) and w.dtype == fg.float64
    (w * w).sum().backward()
    assert w.grad.tolist() == [0.0, 0.0, 0.0]


def test_backward_through_a_graph_older_than_a_data_write_raises():
    w = fg.ones(2, requires_grad=True)
    loss = (w * w).sum()
    w.data.add_(1)  # fusegrad's graph holds the old value: a gradient would be wrong
    with pytest.raises(RuntimeError, match="modified through .data"):
        loss.backward()


def test_data_write_to_a_non_leaf_keeps_its_gradient():
    x = fg.ones(3, requires_grad=True)
    y = x * 2
    y.data.mul_(3)
    y.sum().backward()
    assert y.tolist() == [6.0, 6.0, 6.0] and y.requires_grad
    assert x.grad.tolist() == [2.0, 2.0, 2.0]  # torch: the gradient of the graph, unchanged


# ---------------------------------------------------------------- the gradient is a tensor


def fresh_grad():
    w = fg.tensor([[1.0, -4.0, 9.0], [0.25, 1.0, -1.0]], requires_grad=True)
    (w * w).sum().backward()  # grad = 2w
    assert type(w.grad).__name__ == "LazyGrad"
    return w


@pytest.mark.parametrize(
    "call, want",
    [
        (lambda g: g.zero_(), [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
        (lambda g: g.detach_(), [[2.0, -8.0, 18.0], [0.5, 2.0, -2.0]]),
        (lambda g: g.fill_(1), [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]),
        (lambda g: g.add_(1), [[3.0, -7.0, 19.0], [1.5, 3.0, -1.0]]),
        (lambda g: g.mul_(0.5), [[1.0, -4.0, 9.0], [0.25, 1.0, -1.0]]),
        (lambda g: g.neg_(), [[-2.0, 8.0, -18.0], [-0.5, -2.0, 2.0]]),
        (lambda g: g.abs_(), [[2.0, 8.0, 18.0], [0.5, 2.0, 2.0]]),
        (lambda g: g.clamp_(-2, 2), [[2.0, -2.0, 2.0], [0.5, 2.0, -2.0]]),
        (lambda g: g.copy_(fg.ones(3)), [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]),
        (lambda g: g.t_(), [[2.0, 0.5], [-8.0, 2.0], [18.0, -2.0]]),
        (lambda g: g.data.zero_(), [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
        (lambda g: g.sqrt_().nan_to_num_(), [[2.0**0.5, 0.0, 18.0**0.5], [0.5**0.5, 2**0.5, 0.0]]),
    ],
)
def test_inplace_methods_on_a_gradient(call, want):
    w = fresh_grad()
    g = w.grad
    call(g)
    assert w.grad is g  # changed in place, as torch's
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-6)


def test_common_methods_on_a_gradient():
    w = fresh_grad()
    g = w.grad
    assert g.shape == (2, 3) and g.dtype == fg.float32 and g.is_leaf and not g.requires_grad
    assert g.sum().item() == 12.5 and g.max().item() == 18.0
    assert g.reshape(-1).tolist() == [2.0, -8.0, 18.0, 0.5, 2.0, -2.0]
    assert g.clone().tolist() == g.tolist() and g.detach().tolist() == g.tolist()
    assert g.new_zeros(2).tolist() == [0.0, 0.0] and g.norm().item() == pytest.approx(400.25**0.5)
    assert g.unsqueeze_(0).shape == (1, 2, 3) and g.numpy().shape == (1, 2, 3)


def test_detach_inplace_makes_a_leaf_without_grad():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    assert y.detach_() is y and y.is_leaf and not y.requires_grad
    assert not (y * 2).requires_grad and y.tolist() == [3.0, 6.0]
    x.detach_()
    assert not x.requires_grad and x.is_leaf


# ---------------------------------------------------------------- the hand-written SGD loop

SPELLINGS = {
    "isub": lambda p, lr: p.__isub__(lr * p.grad),
    "data isub": lambda p, lr: p.data.__isub__(lr * p.grad),
    "add_ alpha": lambda p, lr: p.add_(p.grad, alpha=-lr),
    "sub_": lambda p, lr: p.sub_(lr * p.grad),
    "data sub_": lambda p, lr: p.data.sub_(lr * p.grad),
}


def manual_sgd(spelling: str, steps: int, zero: str, seed: int = 0):
    """A two-layer MLP trained `steps` manual SGD steps; returns (model, losses)."""
    rng = np.random.default_rng(seed)
    x = fg.tensor(rng.normal(size=(16, 4)).astype(np.float32))
    y = fg.tensor(rng.normal(size=(16, 1)).astype(np.float32))
    fg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    update = SPELLINGS[spelling]
    losses = []
    for _ in range(steps):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        with fg.no_grad():
            for p in model.parameters():
                update(p, 0.1)
        for p in model.parameters():
            if zero == "none":
                p.grad = None
            else:
                p.grad.zero_()
        losses.append(loss)
    return model, [loss.item() for loss in losses]


@pytest.mark.parametrize("zero", ["none", "zero_"])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_manual_sgd_keeps_no_history(spelling, zero):
    model, _ = manual_sgd(spelling, 3, zero)
    sizes = [reachable(p.node) for p in model.parameters()]
    model, _ = manual_sgd(spelling, 12, zero)
    assert [reachable(p.node) for p in model.parameters()] == sizes
    assert sizes == [1] * len(sizes)  # each parameter is its value alone
    assert all(p.is_leaf and p.requires_grad for p in model.parameters())


def test_manual_momentum_buffers_keep_no_history():
    w = fg.tensor([1.0, -2.0], requires_grad=True)
    buf = fg.zeros(2)
    sizes = []
    for _ in range(12):
        (w * w).sum().backward()
        with fg.no_grad():
            buf.mul_(0.9).add_(w.grad)
            w.sub_(0.1 * buf)
        w.grad = None
        sizes.append(reachable(buf.node))
    assert max(sizes) <= 2  # at most the last update, not yet computed, on a value


def test_manual_sgd_matches_the_same_loop_in_numpy():
    model, losses = manual_sgd("isub", 5, "none", seed=1)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 4)).astype(np.float32)
    y = rng.normal(size=(16, 1)).astype(np.float32)
    fg.manual_seed(1)
    ref = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    w1, b1, w2, b2 = (p.numpy().astype(np.float64) for p in ref.parameters())
    want = []
    for _ in range(5):
        h = np.tanh(x @ w1.T + b1)
        out = h @ w2.T + b2
        want.append(((out - y) ** 2).mean())
        g_out = 2 * (out - y) / out.size
        g_w2, g_b2 = g_out.T @ h, g_out.sum(0)
        g_h = (g_out @ w2) * (1 - h * h)
        g_w1, g_b1 = g_h.T @ x, g_h.sum(0)
        w1, b1, w2, b2 = w1 - 0.1 * g_w1, b1 - 0.1 * g_b1, w2 - 0.1 * g_w2, b2 - 0.1 * g_b2
    np.testing.assert_allclose(losses, want, rtol=1e-4)
    for p, q in zip(model.parameters(), (w1, b1, w2, b2)):
        np.testing.assert_allclose(p.numpy(), q, rtol=1e-4, atol=1e-6)


def test_manual_step_computes_the_loss_with_the_update():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    with fg.no_grad():
        w -= 0.1 * w.grad
    assert loss._has_value() and w._has_value()  # one plan: forward, backward, update
    assert loss.item() == 5.0 and w.tolist() == pytest.approx([0.8, 1.6])
    assert w.grad.tolist() == [2.0, 4.0]  # (kept out of the plan, as opt.step() does)


def test_a_chain_of_inplace_updates_stays_short():
    t = fg.tensor([0.0, 1.0, 2.0])
    for _ in range(20):
        t.add_(1).mul_(2)  # x -> 2 (x + 1)
    assert reachable(t.node) <= 4  # the last update on a computed value
    assert t.tolist() == [2.0**20 * x + 2.0**21 - 2 for x in (0, 1, 2)]


def test_assigning_data_to_a_non_leaf_keeps_its_gradient():
    x = fg.ones(2, requires_grad=True)
    y = x * 2
    y.data = fg.tensor([5.0, 7.0])
    (y * y).sum().backward()  # torch: d/dx of sum(y_graph * y) with y's new values: 2 * 2y
    assert y.tolist() == [5.0, 7.0] and x.grad.tolist() == [20.0, 28.0]


def test_zeroing_an_unread_gradient_builds_no_backward_graph():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    w.grad.zero_()
    assert w.grad.built and w.grad._version == 1 and w.grad.tolist() == [0.0, 0.0]
    assert w.grad.pending.grads is None  # autodiff never ran
    w.grad = None
    (w * w).sum().backward()
    w.grad.data.zero_()
    assert w.grad.tolist() == [0.0, 0.0] and w.grad.pending.grads is None


def test_an_update_that_reads_no_gradient_leaves_the_step_cached():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    ema = fg.tensor([0.0, 0.0])
    opt = fg.optim.SGD([w], lr=0.1)
    for _ in range(4):
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        with fg.no_grad():  # an average of the weights, kept between backward and step
            ema.mul_(0.5).add_(w, alpha=0.5)
        opt.step()
    assert opt._steps.hits == 3  # the first step records the plan, the others run it
    np.testing.assert_allclose(w.numpy(), [0.4096, 0.8192], rtol=1e-6)


@pytest.mark.cpu_device  # the examples print CPU tensors
@pytest.mark.parametrize(
    "name", ["inplace_methods", "autograd_state", "versions", "creation", "tensor"]
)
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"fusegrad.{name}"))
    assert result.attempted > 0 and result.failed == 0
