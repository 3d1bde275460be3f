"""The hand-written SGD loop takes opt.step()'s fast path (issue 26, `frontend/manualstep.py`):
`p -= lr * p.grad` (and its spellings) under no_grad is deferred and computed as one
cached step, with the same values as the eager path and as `fg.optim.SGD`; nothing
can read a parameter whose update is deferred without computing it first."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import manualstep, nn
from fusegrad.ir.ops import Ops
from fusegrad.nn import functional as F
from fusegrad.stepcache import StepCache
from fusegrad.versions import InplaceError

LR = 0.01
SPELLINGS = {
    "p -= lr * p.grad": lambda p: p.__isub__(LR * p.grad),
    "p.data -= lr * p.grad": lambda p: p.data.__isub__(LR * p.grad),
    "p.add_(p.grad, alpha=-lr)": lambda p: p.add_(p.grad, alpha=-LR),
    "p.sub_(lr * p.grad)": lambda p: p.sub_(LR * p.grad),
    "p += -lr * p.grad": lambda p: p.__iadd__(-LR * p.grad),
    "p.data.add_(p.grad, alpha=-lr)": lambda p: p.data.add_(p.grad, alpha=-LR),
}


def mlp_and_batch():
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 4))
    rng = np.random.default_rng(0)
    x = fg.tensor(rng.standard_normal((8, 20)).astype(np.float32))
    y = fg.tensor(rng.integers(0, 4, 8))
    return model, x, y


def train(update: str, steps: int, zero: str = "none"):
    model, x, y = mlp_and_batch()
    params = list(model.parameters())
    opt = fg.optim.SGD(params, lr=LR)
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        if update == "opt.step()":
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            loss.backward()
            with fg.no_grad():
                for p in params:
                    SPELLINGS[update](p)
                    if zero == "zero_":
                        p.grad.zero_()  # before the batch is computed: changes nothing
                    else:
                        p.grad = None
        losses.append(loss.item())
    return [p.numpy().copy() for p in params], losses


@pytest.mark.parametrize("zero", ["none", "zero_"])
@pytest.mark.parametrize("update", list(SPELLINGS))
def test_the_manual_loop_equals_opt_step(update, zero):
    want, want_losses = train("opt.step()", 6)
    got, losses = train(update, 6, zero)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)


def test_the_manual_loop_runs_the_cached_step_without_building_the_backward():
    model, x, y = mlp_and_batch()
    params = list(model.parameters())
    manualstep._local.cache = StepCache()  # (this thread's: none of the other tests' plans)
    for _ in range(5):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        record = params[0].grad.pending
        with fg.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        assert loss._has_value()  # computed with the update: loss.item() costs nothing
    assert manualstep._cache().hits == 4  # the first step records the plan
    assert record.grads is None  # the last step built no backward graph


def test_gradients_zeroed_in_place_keep_the_fast_path():
    model, x, y = mlp_and_batch()
    params = list(model.parameters())
    manualstep._local.cache = StepCache()
    for _ in range(4):
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # onto p.grad.zero_(): zeros + g, still unbuilt
        with fg.no_grad():
            for p in params:
                p -= LR * p.grad
        for p in params:
            p.grad.zero_()
    assert manualstep._cache().hits == 2  # steps 1 and 2 differ: no zeros, zeros + g
    assert params[0].grad.tolist()[0][:2] == [0.0, 0.0]


def test_torchs_values_for_a_tiny_loop():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    for _ in range(3):
        loss = (w * w).sum()
        loss.backward()
        with fg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    # torch 2.13: tensor([0.5120, 1.0240]), the last loss (before its update) 2.048
    assert w.tolist() == pytest.approx([0.512, 1.024], abs=1e-7)
    assert loss.item() == pytest.approx(2.048, abs=1e-6)
    assert w._version == 3 and w.is_leaf and w.requires_grad


def test_reads_between_updates_see_the_new_values():
    model, x, y = mlp_and_batch()
    params = list(model.parameters())
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad.numpy().copy() for p in params]
    olds = [p.numpy().copy() for p in params]
    model2, _, _ = mlp_and_batch()
    params2 = list(model2.parameters())
    F.cross_entropy(model2(x), y).backward()  # unread gradients: the updates are deferred
    with fg.no_grad():
        for k, p in enumerate(params2):
            p -= LR * p.grad
            # a read while the others are still to come computes the batch so far
            np.testing.assert_allclose(p.numpy(), olds[k] - np.float32(LR) * grads[k], atol=1e-7)
            assert type(p) is nn.Parameter


def test_an_update_of_some_parameters_only_is_computed_when_read():
    model, x, y = mlp_and_batch()
    w = model[0].weight
    old = w.numpy().copy()
    F.cross_entropy(model(x), y).backward()
    g = w.grad.numpy().copy()
    model2, _, _ = mlp_and_batch()
    F.cross_entropy(model2(x), y).backward()
    with fg.no_grad():
        model2[0].weight -= LR * model2[0].weight.grad  # the others keep their values
    np.testing.assert_allclose(model2[0].weight.numpy(), old - np.float32(LR) * g, atol=1e-7)
    np.testing.assert_array_equal(model2[2].bias.numpy(), model[2].bias.numpy())


def test_a_scaled_gradient_keeps_its_value():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    u = 0.5 * w.grad
    w.grad.zero_()
    assert u.tolist() == [1.0, 2.0] and u.dtype is fg.float32 and u.shape == (2,)
    assert (w.grad * 3).tolist() == [0.0, 0.0]


def test_a_graph_from_before_the_update_raises_at_backward():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    old_graph = (w * 3).sum()
    with fg.no_grad():
        w -= 0.1 * w.grad
    with pytest.raises(InplaceError, match="modified by an inplace operation"):
        old_graph.backward()


def test_a_graph_from_before_a_deferred_update_raises_at_backward():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    b = fg.tensor([0.5], requires_grad=True)
    (w * w + b).sum().backward()
    old_graph = (w * 3).sum()
    with fg.no_grad():
        w -= 0.1 * w.grad  # deferred: b's update is still to come
    with pytest.raises(InplaceError, match="modified by an inplace operation"):
        old_graph.backward()
    assert w.tolist() == pytest.approx([0.8, 1.6])


def test_versions_as_the_eager_update_counts_them():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    d = w.data
    d -= 0.1 * w.grad  # through .data: the view's version, not w's
    assert (w._version, d._version) == (0, 1)
    assert w.tolist() == pytest.approx([0.8, 1.6])


def test_outside_no_grad_the_update_still_raises():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    with pytest.raises(InplaceError, match="leaf Variable"):
        w -= 0.1 * w.grad


def test_a_learning_rate_that_changes_every_step():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    for lr in (0.1, 0.2, 0.05):
        (w * w).sum().backward()
        with fg.no_grad():
            w -= lr * w.grad
        w.grad = None
    assert w.tolist() == pytest.approx([0.8 * 0.6 * 0.9, 1.6 * 0.6 * 0.9], abs=1e-7)


def test_copying_or_pickling_a_parameter_mid_loop_sees_its_update():
    import copy
    import pickle

    model, x, y = mlp_and_batch()
    F.cross_entropy(model(x), y).backward()
    want = model[0].weight.numpy() - np.float32(LR) * model[0].weight.grad.numpy()
    for read in (copy.deepcopy, lambda w: pickle.loads(pickle.dumps(w)), copy.copy):
        model, x, y = mlp_and_batch()
        F.cross_entropy(model(x), y).backward()  # its gradients unread
        w = model[0].weight
        with fg.no_grad():
            w -= LR * w.grad  # deferred: the other parameters' updates are still to come
            assert type(w) is not nn.Parameter  # (while deferred)
            got = read(w)
        assert type(got) is nn.Parameter and type(w) is nn.Parameter
        np.testing.assert_allclose(got.numpy(), want, atol=1e-7)


def test_a_step_over_a_constant_computed_elsewhere_is_still_cached():
    """Nodes are shared: a constant's expansion that something else computed (and keeps)
    has a value, so an update graph that builds the same expansion (Rprop's `where(...,
    1.0)` on a bias of 2) reads it as an input. The optimizer's cached step still serves
    every later step (the value is the node's own) instead of building the whole update
    on every step."""
    from fusegrad.ir.node import toposort
    from fusegrad.runtime.engine import engine

    made = fg.where(fg.tensor([True, False]), fg.tensor(0.5), 1.0)  # (1.0 broadcast to (2,))
    (expansion,) = [
        n
        for n in toposort([made.node])
        if n.op is Ops.EXPAND and n.srcs[0].op is Ops.RESHAPE and n.srcs[0].srcs[0].op is Ops.CONST
    ]
    engine.realize([expansion])  # computed, and kept
    fg.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = fg.optim.Rprop(model.parameters(), lr=0.01)
    x = fg.tensor(np.ones((4, 3), np.float32))
    for _ in range(5):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
    assert engine.value(expansion) is not None
    # the first two steps record (the first reads the kept expansion as an input, its
    # graph three nodes larger); every later one runs the cached plan
    assert opt._steps.hits == 3
