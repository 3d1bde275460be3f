"""LayerNorm, GroupNorm, BatchNorm (running statistics, momentum, eval) and F.normalize
against numpy, with float64 central-difference gradients."""

from __future__ import annotations

import numpy as np
import pytest
from _special_rows import special_rows

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn
from fusegrad.runtime.engine import engine
from fusegrad.testing import gradcheck

RNG = np.random.default_rng(3)


def t64(a):
    return fg.tensor(np.asarray(a, np.float64), dtype=fg.float64)


def np_norm(x, axes, eps):
    m = x.mean(axes, keepdims=True)
    v = x.var(axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps)


def test_layer_norm_values_and_gradients():
    x = RNG.standard_normal((2, 3, 4))
    w, b = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    out = F.layer_norm(t64(x), (3, 4), t64(w), t64(b), eps=1e-5)
    np.testing.assert_allclose(out.numpy(), np_norm(x, (1, 2), 1e-5) * w + b, rtol=1e-10)
    assert gradcheck(
        lambda a, ww, bb: F.layer_norm(a, (4,), ww, bb), [t64(x), t64(w[0]), t64(b[0])]
    )


def test_layer_norm_module_and_errors():
    ln = nn.LayerNorm(4)
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    assert ln.weight.tolist() == [1.0] * 4 and ln.bias.tolist() == [0.0] * 4
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(ln(fg.tensor(x)).numpy(), np_norm(x, (1,), 1e-5), atol=1e-5)
    assert list(nn.LayerNorm(4, elementwise_affine=False).parameters()) == []
    assert [n for n, _ in nn.LayerNorm(4, bias=False).named_parameters()] == ["weight"]
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(fg.ones(2, 3), (4,))


def test_group_norm_values_and_gradients():
    x = RNG.standard_normal((2, 6, 3))
    w, b = RNG.standard_normal(6), RNG.standard_normal(6)
    want = np_norm(x.reshape(2, 3, -1), (2,), 1e-5).reshape(x.shape) * w[:, None] + b[:, None]
    np.testing.assert_allclose(F.group_norm(t64(x), 3, t64(w), t64(b)).numpy(), want, rtol=1e-10)
    assert gradcheck(lambda a, ww: F.group_norm(a, 2, ww), [t64(x), t64(w)])
    gn = nn.GroupNorm(3, 6)
    np.testing.assert_allclose(
        gn(fg.tensor(x.astype(np.float32))).numpy(),
        np_norm(x.reshape(2, 3, -1), (2,), 1e-5).reshape(x.shape),
        atol=1e-5,
    )
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)


def test_batch_norm_training_values_and_gradients():
    x = RNG.standard_normal((4, 3, 5))
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    want = np_norm(x, (0, 2), 1e-5) * w[:, None] + b[:, None]
    out = F.batch_norm(t64(x), None, None, t64(w), t64(b), training=True)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10)

    def fn(a, ww, bb):
        return F.batch_norm(a, None, None, ww, bb, training=True)

    assert gradcheck(fn, [t64(x), t64(w), t64(b)])


@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_batch_norm_running_statistics(momentum):
    bn = nn.BatchNorm2d(3, momentum=momentum)
    mean, var = np.zeros(3), np.ones(3)
    for step in range(1, 4):
        x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32) * step + step
        out = bn(fg.tensor(x))
        np.testing.assert_allclose(out.numpy(), np_norm(x, (0, 2, 3), 1e-5), atol=1e-5)
        m = 1.0 / step if momentum is None else momentum
        mean = (1 - m) * mean + m * x.mean((0, 2, 3))
        var = (1 - m) * var + m * x.var((0, 2, 3), ddof=1)  # unbiased, as PyTorch
        np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5)
        np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5)
        assert bn.num_batches_tracked.item() == step
    bn.eval()
    x = RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)
    want = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    np.testing.assert_allclose(bn(fg.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5)  # eval: unchanged
    assert set(bn.state_dict()) == {
        "weight",
        "bias",
        "running_mean",
        "running_var",
        "num_batches_tracked",
    }


def test_batch_norm_options_and_errors():
    bn = nn.BatchNorm1d(2, affine=False, track_running_stats=False)
    assert list(bn.parameters()) == [] and bn.running_mean is None
    x = RNG.standard_normal((5, 2)).astype(np.float32)
    bn.eval()  # no running statistics: batch statistics even in eval
    np.testing.assert_allclose(bn(fg.tensor(x)).numpy(), np_norm(x, (0,), 1e-5), atol=1e-5)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        nn.BatchNorm1d(2)(fg.ones(1, 2))
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        nn.BatchNorm1d(2)(fg.ones(2, 2, 2, 2))
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(2)(fg.ones(2, 2, 2))


def test_batch_norm_3d_training_running_statistics_and_eval():
    bn = nn.BatchNorm3d(2, momentum=0.3)
    x = RNG.standard_normal((3, 2, 2, 3, 2)).astype(np.float32) * 2 + 1
    np.testing.assert_allclose(bn(fg.tensor(x)).numpy(), np_norm(x, (0, 2, 3, 4), 1e-5), atol=1e-5)
    mean = 0.3 * x.mean((0, 2, 3, 4))
    var = 0.7 + 0.3 * x.var((0, 2, 3, 4), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5)
    bn.eval()
    want = (x - mean[:, None, None, None]) / np.sqrt(var[:, None, None, None] + 1e-5)
    np.testing.assert_allclose(bn(fg.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="expected 5D input"):
        bn(fg.ones(2, 2, 2, 2))

    def fn(a, ww, bb):
        return F.batch_norm(a, None, None, ww, bb, training=True)

    assert gradcheck(fn, [t64(x[:2, :, :2]), t64(RNG.standard_normal(2)), t64(np.ones(2))])


def test_batch_norm_trains_inside_a_model():
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    x = fg.tensor(RNG.standard_normal((16, 3)).astype(np.float32))
    y = fg.tensor(RNG.standard_normal((16, 1)).astype(np.float32))
    losses = []
    for _ in range(5):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert model[1].num_batches_tracked.item() == 5


def _conv_bn_net():
    """Two conv + BatchNorm layers and a head, SGD with momentum; (model, opt)."""
    fg.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4, momentum=None), nn.Flatten(), nn.Linear(64, 2),
    )  # fmt: skip
    return model, fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _bn_batches(n):
    rng = np.random.default_rng(7)
    return [
        (rng.standard_normal((5, 3, 8, 8)).astype(np.float32), rng.integers(0, 2, 5))
        for _ in range(n)
    ]


def _bn_inputs_expected(batches):
    """Each BatchNorm's running mean and var after training on `batches`, from the inputs
    a forward hook saw (numpy's statistics, torch's update rule), and the counts."""
    model, opt = _conv_bn_net()
    seen = {1: [], 4: []}
    for k in seen:
        model[k].register_forward_hook(lambda m, i, o, k=k: seen[k].append(i[0].numpy()))
    for x, y in batches:
        opt.zero_grad()
        F.cross_entropy(model(fg.tensor(x)), fg.tensor(y)).backward()
        opt.step()
    want = {}
    for k, inputs in seen.items():
        mean, var = np.zeros(4), np.ones(4)
        for step, a in enumerate(inputs, 1):
            m = model[k].momentum or 1.0 / step
            mean = (1 - m) * mean + m * a.mean((0, 2, 3))
            var = (1 - m) * var + m * a.var((0, 2, 3), ddof=1)
        want[k] = (mean, var)
    return want


@pytest.mark.parametrize("jit", [False, True], ids=["plain", "jit"])
def test_batch_norm_running_statistics_are_computed_with_the_step(jit):
    # each layer's update is computed by the optimizer's step, with the forward pass it
    # reads: one plan a step (it was one realize per BatchNorm, each running the forward
    # pass up to its layer again), the same values, and under fg.jit too (the count
    # num_batches_tracked, and momentum=None's 1 / count, replayed, not frozen)
    from fusegrad.runtime.engine import engine

    batches = _bn_batches(4)
    model, opt = _conv_bn_net()

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = fg.jit(step) if jit else step
    plans = []
    engine.observers.append(lambda plan, records: plans.append(plan))
    try:
        for x, y in batches:
            plans.clear()
            run(fg.tensor(x), fg.tensor(y)).item()
            assert len(plans) == 1
    finally:
        engine.observers.pop()
    for k, (mean, var) in _bn_inputs_expected(batches).items():
        np.testing.assert_allclose(model[k].running_mean.numpy(), mean, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(model[k].running_var.numpy(), var, rtol=1e-4, atol=1e-6)
        assert model[k].num_batches_tracked.item() == len(batches)


def test_batch_norm_updates_without_an_optimizer_step_stay_bounded_and_right():
    # train-mode forwards with no step (recalibrating the statistics): updates chain
    # lazily up to MAX_CHAINED_UPDATES, then the chain is computed, so the buffers' graphs
    # never grow with the loop
    from fusegrad.ir.node import toposort
    from fusegrad.nn import normalization

    bn = nn.BatchNorm2d(3)
    mean, var = np.zeros(3), np.ones(3)
    sizes = []
    cycle = normalization.MAX_CHAINED_UPDATES + 1
    for step in range(1, 6 * cycle + 1):
        x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32) + step
        with fg.no_grad():
            bn(fg.tensor(x))
        mean = 0.9 * mean + 0.1 * x.mean((0, 2, 3))
        var = 0.9 * var + 0.1 * x.var((0, 2, 3), ddof=1)
        sizes.append(len(toposort([bn.running_mean.node, bn.num_batches_tracked.node])))
    assert max(sizes) == max(sizes[:cycle])  # bounded
    assert sizes[:cycle] == sizes[-cycle:]  # and the same chain each cycle
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5)
    assert bn.num_batches_tracked.item() == 6 * cycle


def test_a_batch_norm_called_three_times_in_a_step_runs_its_forward_once():
    """A GAN's discriminator sees the real batch, the fake one detached and the fake one
    again in each step: its running buffers chain three updates, computed by the optimizer
    step, instead of running the forward pass up to the layer again at each call."""
    fg.manual_seed(0)
    bn = nn.BatchNorm2d(3)
    conv = nn.Conv2d(3, 3, 3)
    opt = fg.optim.SGD(conv.parameters(), lr=0.1)
    batches = [RNG.standard_normal((4, 3, 6, 6)).astype(np.float32) for _ in range(9)]
    mean, var = np.zeros(3), np.ones(3)
    for step in range(3):
        runs = engine.stats["scheduled"] + engine.stats["schedule_hits"]
        opt.zero_grad()
        loss = 0
        for x in batches[3 * step : 3 * step + 3]:
            y = conv(fg.tensor(x))
            with fg.no_grad():
                y_np = y.detach().numpy().astype(np.float64)
            runs += 1  # (the read above)
            loss = loss + bn(y).square().mean()
            mean = 0.9 * mean + 0.1 * y_np.mean((0, 2, 3))
            var = 0.9 * var + 0.1 * y_np.var((0, 2, 3), ddof=1)
        assert engine.stats["scheduled"] + engine.stats["schedule_hits"] == runs
        loss.backward()
        opt.step()
        np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-4, atol=1e-6)
    assert bn.num_batches_tracked.item() == 9


def test_a_batch_norm_models_first_training_step_plans_what_every_later_step_runs():
    """A BatchNorm's count and running statistics are written in place by every step and
    once before the first (their reset): the first step computes them, with the rest of
    the step, in the order this step wrote them, as every later step does, so the second
    step runs the first step's plan (a ResNet-18's second step scheduled and lowered its
    420 kernels again)."""
    fg.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 3))
    model.append(nn.BatchNorm2d(2))
    opt = fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduled = []
    for _ in range(3):
        x = fg.tensor(RNG.standard_normal((4, 3, 8, 8)).astype(np.float32))
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        scheduled.append(engine.stats["scheduled"])
    assert scheduled[1] == scheduled[0] and scheduled[2] == scheduled[0], scheduled
    assert model[1].num_batches_tracked.item() == 3 and model[4].num_batches_tracked.item() == 3


@pytest.mark.parametrize("p", [1, 2, 3.0, float("inf")])
def test_normalize(p):
    x = RNG.standard_normal((3, 4))
    if p == float("inf"):
        norm = np.abs(x).max(1, keepdims=True)
    else:
        norm = (np.abs(x) ** p).sum(1, keepdims=True) ** (1 / p)
    np.testing.assert_allclose(F.normalize(t64(x), p=p).numpy(), x / norm, rtol=1e-10)
    if p != float("inf"):
        assert gradcheck(lambda t: F.normalize(t, p=p, dim=0), [t64(x)])


def test_normalize_zero_vector_gradient_is_one_over_eps():
    x = t64(np.zeros((2, 3)))
    x.requires_grad_()
    out = F.normalize(x, dim=1)
    assert out.tolist() == [[0.0] * 3] * 2
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 1e12))  # 1 / eps, as PyTorch


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: nn.BatchNorm1d(4), (0, 4)),
        (lambda: nn.BatchNorm2d(4), (0, 4, 3, 3)),
        (lambda: nn.BatchNorm2d(4), (2, 4, 0, 3)),  # no pixels
        (lambda: nn.BatchNorm3d(4), (0, 4, 2, 3, 3)),
        (lambda: nn.BatchNorm3d(4), (2, 4, 2, 0, 3)),  # no voxels
        (lambda: nn.GroupNorm(2, 4), (0, 4, 3)),
        (lambda: nn.LayerNorm(4), (0, 4)),
    ],
)
def test_normalization_of_an_empty_batch(make, shape):
    """As torch: an empty output, zero gradients for the affine parameters, and in training
    BatchNorm's running statistics left as they are (only the batch count moves). fusegrad
    raised for BatchNorm ("Expected more than 1 value per channel": torch raises for one
    value only) and for GroupNorm (its reshape to (0, groups, -1))."""
    m = make()
    y = m(fg.zeros(*shape))
    assert y.shape == shape
    y.sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and not p.grad.numpy().any(), name
    if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d | nn.BatchNorm3d):
        assert m.running_mean.tolist() == [0.0] * 4 and m.running_var.tolist() == [1.0] * 4
        assert m.num_batches_tracked.item() == 1


# ---------------------------------------------------------------- layer_norm as one node


def _composed_layer_norm(x, shape, w, b, eps):
    from fusegrad.nn.normalization import _normalized

    out = _normalized(x._float(), tuple(range(x.ndim - len(shape), x.ndim)), eps)
    out = out * w if w is not None else out
    return out + b if b is not None else out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
@pytest.mark.parametrize("shape", [(6,), (5, 6)])
def test_layer_norm_is_one_macro_node_expanding_to_the_composed_nodes(dtype, affine, shape):
    """A step builds one node for a layer norm (14 before: its host time), and the node's
    expansion is the very graph the Tensor operators build: same kernels, same bits, same
    gradients."""
    from fusegrad.ir.macro import expand_all
    from fusegrad.ir.ops import Ops

    dt = getattr(fg, dtype)
    rng = np.random.default_rng(4)
    x = fg.tensor(rng.standard_normal((4, 5, 6)), dtype=dt, requires_grad=True)
    w = fg.tensor(rng.standard_normal(shape), dtype=dt, requires_grad=True)
    b = fg.tensor(rng.standard_normal(shape), dtype=dt, requires_grad=True)
    w = w if affine in ("weight", "both") else None
    b = b if affine in ("bias", "both") else None
    y = F.layer_norm(x, shape, w, b, eps=1e-3)
    assert y.node.op is Ops.MACRO
    want = _composed_layer_norm(x, shape, w, b, 1e-3)
    assert expand_all([y.node])[0] is want.node
    leaves = [t for t in (x, w, b) if t is not None]
    g = fg.tensor(rng.standard_normal(y.shape), dtype=dt)
    got_grads = fg.grad(y, leaves, grad_outputs=g)
    want_grads = fg.grad(want, leaves, grad_outputs=g)
    np.testing.assert_array_equal(y.numpy(), want.numpy())
    for a, c in zip(got_grads, want_grads):
        np.testing.assert_array_equal(a.numpy(), c.numpy())


@pytest.mark.parametrize("rows, cols", [(2048, 1024), (4, 1 << 21)])
def test_a_large_layer_norm_is_one_macro_node_unless_its_rows_sums_are_split(rows, cols):
    """8 MB and more of input: rows of 1024 are still one reduce each, so the layer norm
    is one node (it was 14 nodes above 2^21 elements: a cold call's host time, issue 32);
    four rows of 2^21 are summed in parts (`_sum_in_parts`), so the composed form is
    built, as the Tensor operators build it."""
    from fusegrad.ir.macro import expand_all
    from fusegrad.ir.ops import Ops

    x = fg.randn(rows, cols)
    y = F.layer_norm(x, (cols,))
    want = _composed_layer_norm(x, (cols,), None, None, 1e-5)
    if cols == 1024:
        assert y.node.op is Ops.MACRO
        assert expand_all([y.node])[0] is want.node
    else:
        assert y.node.op is not Ops.MACRO
        assert y.node is want.node
    np.testing.assert_array_equal(y.numpy(), want.numpy())


@pytest.mark.parametrize(
    "case",
    ["float16", "broadcast input", "weight of another dtype", "weight of another shape"],
)
def test_layer_norm_outside_the_macro_takes_the_composed_form(case):
    from fusegrad.ir.ops import Ops

    x, w = fg.randn(3, 8), fg.randn(8)
    if case == "float16":
        x, w = x.half(), w.half()
    elif case == "broadcast input":
        x = fg.randn(1, 8).expand(3, 8)
    elif case == "weight of another dtype":
        w = w.double()
    else:
        w = fg.randn(1, 8)  # broadcastable, not the normalized shape
    y = F.layer_norm(x, (8,), w)
    assert y.node.op is not Ops.MACRO
    want = _composed_layer_norm(x, (8,), w, None, 1e-5)
    np.testing.assert_array_equal(y.float().numpy(), want.float().numpy())


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def test_layer_norm_at_special_points_values_and_gradients():
    """Rows that are constant (ties: var 0), of -0.0, of +-1, with an inf or a NaN; one
    normalized element; an empty batch. Values and the three gradients as torch's formula
    gives them (biased variance, eps inside the root); against live torch where it is
    installed."""
    rows = np.array(
        [
            [2.0, 2.0, 2.0, 2.0],  # constant: 0 out, gradient (g - mean g) / sqrt(eps)
            [-0.0, -0.0, -0.0, -0.0],
            [1.0, -1.0, 1.0, -1.0],
            [0.0, 1.0, 0.0, 1.0],  # ties
            [np.inf, 0.0, 1.0, 2.0],  # NaN row, as torch
            [np.nan, 0.0, 1.0, 2.0],
        ]
    )
    g = np.arange(1.0, 25.0).reshape(6, 4) / 10
    w0, b0 = np.array([1.0, -1.0, 2.0, 0.5]), np.array([0.0, 0.5, -0.0, 1.0])
    x, w, b = (fg.tensor(a, dtype=fg.float64, requires_grad=True) for a in (rows, w0, b0))
    y = F.layer_norm(x, (4,), w, b, eps=1e-5)
    dx, dw, db = fg.grad(y, [x, w, b], grad_outputs=fg.tensor(g))
    # torch's formula in float64 numpy, the NaN rows aside
    mean = rows.mean(1, keepdims=True)
    var = ((rows - mean) ** 2).mean(1, keepdims=True)
    rstd = 1 / np.sqrt(var + 1e-5)
    xhat = (rows - mean) * rstd
    gx = g * w0
    want_dx = rstd * (gx - gx.mean(1, keepdims=True) - xhat * (gx * xhat).mean(1, keepdims=True))
    finite = slice(0, 4)
    np.testing.assert_allclose(y.numpy()[finite], (xhat * w0 + b0)[finite], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx.numpy()[finite], want_dx[finite], rtol=1e-9, atol=1e-9)
    assert np.isnan(y.numpy()[4:]).all() and np.isnan(dx.numpy()[4:]).all()
    # (a column's six terms summed in the device's order: within a few ulps of numpy's)
    assert np.isnan(dw.numpy()).all()
    np.testing.assert_array_max_ulp(db.numpy(), g.sum(0), maxulp=4)
    assert y.numpy()[0].tolist() == b0.tolist()  # a constant row is its bias exactly
    # one normalized element: always 0 (then the bias); an empty batch: empty, zero grads
    one = fg.tensor([[3.0], [-0.0]], dtype=fg.float64, requires_grad=True)
    out = F.layer_norm(one, (1,))
    assert out.numpy().tolist() == [[0.0], [0.0]]
    (d1,) = fg.grad(out.sum(), [one])
    assert d1.numpy().tolist() == [[0.0], [0.0]]
    empty = fg.zeros(0, 4, dtype=fg.float64, requires_grad=True)
    we = fg.ones(4, dtype=fg.float64, requires_grad=True)
    ye = F.layer_norm(empty, (4,), we)
    assert ye.shape == (0, 4)
    (dwe,) = fg.grad(ye.sum(), [we])
    assert dwe.numpy().tolist() == [0.0] * 4
    torch = _torch()
    if torch is None:
        return
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (rows, w0, b0))
    ty = torch.nn.functional.layer_norm(tx, (4,), tw, tb, eps=1e-5)
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(dx.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(dw.numpy(), tw.grad.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(db.numpy(), tb.grad.numpy(), rtol=1e-9, atol=1e-9)


def test_a_large_layer_norm_at_special_rows_values_and_gradients():
    """The macro over 2^21 elements at special rows: a constant row (var 0: x - mean is 0,
    the output 0), a row of -0.0, a row of +-1 ties, a row with an inf (NaN, as torch) and
    one with a NaN; values and the input's gradient against the float64 formula (biased
    variance, eps inside the root), and against torch where it is installed."""
    rows, cols = 2048, 1024
    x, g = special_rows(rows, cols, 3.0, seed=6)
    x[3, 5] = np.inf
    x[4, 7] = np.nan
    xt = fg.tensor(x, requires_grad=True)
    y = F.layer_norm(xt, (cols,))
    assert y.node.op.name == "MACRO"
    (dx,) = fg.grad(y, [xt], grad_outputs=fg.tensor(g))
    xd, gd = x.astype(np.float64), g.astype(np.float64)
    with np.errstate(invalid="ignore"):
        mean = xd.mean(1, keepdims=True)
        rstd = 1 / np.sqrt(((xd - mean) ** 2).mean(1, keepdims=True) + 1e-5)
        want = (xd - mean) * rstd
        want_dx = rstd * (
            gd - gd.mean(1, keepdims=True) - want * (gd * want).mean(1, keepdims=True)
        )
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-3, atol=1e-2)
    assert (y.numpy()[0] == 0).all() and (y.numpy()[1] == 0).all()
    assert np.isnan(y.numpy()[3]).all() and np.isnan(y.numpy()[4]).all()
    torch = _torch()
    if torch is not None:
        xt2 = torch.tensor(x, requires_grad=True)
        yt = torch.nn.functional.layer_norm(xt2, (cols,))
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(dx.numpy(), xt2.grad.numpy(), rtol=1e-3, atol=1e-2)


RMS_ROWS = np.array(
    [
        [0.0, -0.0, 1.0],
        [3.0, 4.0, np.nan],
        [0.0, 0.0, 0.0],
        [-0.0, -0.0, -0.0],
        [1e-30, -1e-30, 2e-30],
        [np.inf, 1.0, 2.0],
        [-1.0, 1.0, -1.0],
    ]
)


def _rms64(x, w=None, eps=None):
    eps = np.finfo(np.float32 if x.dtype != np.float64 else np.float64).eps if eps is None else eps
    with np.errstate(invalid="ignore", over="ignore"):
        out = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return out if w is None else out * w


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("affine", [False, True])
def test_rms_norm_at_special_points(dtype, affine):
    """torch.nn.functional.rms_norm's values: -0.0 keeps its sign, a row of zeros is zeros
    (the eps), NaN or inf poisons its row; eps None is the machine epsilon of the type it
    computes in (a 16-bit input's: float32's, so [1e-30, ...] scales by 1/sqrt(eps))."""
    dt = getattr(fg, dtype)
    w = np.array([1.0, -2.0, 0.5]) if affine else None
    x = fg.tensor(RMS_ROWS).to(dt)
    got = F.rms_norm(x, (3,), None if w is None else fg.tensor(w).to(dt))
    assert got.dtype == dt
    xr = x.float().numpy().astype(np.float64 if dtype == "float64" else np.float32)
    want = _rms64(xr, w)
    if dtype == "bfloat16":  # computed in float32, rounded once
        want = fg.tensor(want.astype(np.float32)).bfloat16().float().numpy()
    a = got.float().numpy()
    np.testing.assert_array_equal(np.isnan(a), np.isnan(want))
    ok = ~np.isnan(a)
    np.testing.assert_allclose(a[ok], want[ok], rtol=1e-6 if dtype != "bfloat16" else 0)
    assert np.array_equal(np.signbit(a[ok]), np.signbit(want[ok]))


def test_rms_norm_gradients_module_and_errors():
    rng = np.random.default_rng(5)
    x = fg.tensor(rng.standard_normal((4, 2, 5)), dtype=fg.float64)
    w = fg.tensor(rng.standard_normal((2, 5)), dtype=fg.float64)
    assert gradcheck(lambda x, w: F.rms_norm(x, (2, 5), w, eps=1e-3), [x, w])
    z = fg.zeros(1, 3, requires_grad=True)  # at a row of zeros: 1 / sqrt(eps), as torch's
    (g,) = fg.grad(F.rms_norm(z, (3,)).sum(), [z])
    np.testing.assert_allclose(g.numpy(), np.full((1, 3), 1 / np.sqrt(np.float32(2**-23))))
    m = nn.RMSNorm(5)
    assert repr(m) == "RMSNorm((5,), eps=None, elementwise_affine=True)"
    assert list(m.state_dict()) == ["weight"] and m.weight.tolist() == [1.0] * 5
    assert list(nn.RMSNorm([2, 5], eps=1e-6, elementwise_affine=False).state_dict()) == []
    y = m(fg.ones(2, 5))
    np.testing.assert_allclose(y.numpy(), np.ones((2, 5)), rtol=1e-6)
    with pytest.raises(fg.ShapeError, match="normalized_shape"):
        F.rms_norm(fg.ones(2, 3), (2,))
    with pytest.raises(fg.DTypeNotImplementedError, match="rms_norm: not implemented for int64"):
        F.rms_norm(fg.tensor([[1, 2]]), (2,))


# ---------------------------------------------------------------- instance norm


def test_instance_norm_values_gradients_and_running_statistics_are_torchs():
    """torch 2.13's F.instance_norm (float64): a sample's constant channel is its bias, a
    channel of signed zeros and a tie; the running buffers move to the samples' mean update
    (unbiased variance)."""
    x = fg.tensor(
        [[[1.0, 2.0, 4.0], [0.0, -0.0, 3.0]], [[2.0, 2.0, 2.0], [5.0, -1.0, 2.0]]],
        dtype=fg.float64,
        requires_grad=True,
    )
    rm, rv = t64([0.5, -1.0]), t64([2.0, 1.0])
    w = fg.tensor([2.0, -1.0], dtype=fg.float64, requires_grad=True)
    b = fg.tensor([0.5, 0.0], dtype=fg.float64, requires_grad=True)
    y = F.instance_norm(x, rm, rv, w, b, momentum=0.25, eps=1e-3)
    (y * fg.arange(12, dtype=fg.float64).reshape(2, 2, 3)).sum().backward()
    want = [
        [[-1.637403023277894, -0.034350755819473555, 3.1717537790973673]]
        + [[0.7069300707549023, 0.7069300707549023, -1.4138601415098047]],
        [[0.5, 0.5, 0.5], [-1.2246428220749606, 1.2246428220749606, 0.0]],
    ]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-13, atol=1e-15)
    gx = [
        [[-0.22989021381426006, 0.3432905134110402, -0.1134002995967797]]
        + [[0.353641679573042, -0.3532883911818603, -0.0003532883911817779]],
        [[-63.24555320336759, 0.0, 63.24555320336759]]
        + [[0.20414114919996426, 0.20407312482502257, -0.40821427402498683]],
    ]
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(w.grad.numpy(), [2.40457840118763, 0.8961473901897465], rtol=1e-12)
    assert b.grad.tolist() == [24.0, 42.0]
    np.testing.assert_allclose(rm.numpy(), [0.9166666666666667, -0.375], rtol=1e-15)
    np.testing.assert_allclose(rv.numpy(), [1.7916666666666667, 2.25], rtol=1e-15)
    # use_input_stats=False normalizes with the buffers, and leaves them
    y = F.instance_norm(x.detach()[:1], t64([1.0, 0.0]), t64([4.0, 1.0]), use_input_stats=False)
    np.testing.assert_allclose(y.numpy()[0, 0], (np.array([1.0, 2.0, 4.0]) - 1) / np.sqrt(4 + 1e-5))
    assert gradcheck(lambda t, w: F.instance_norm(t, weight=w, eps=0.1), [x.detach(), w.detach()])
    assert F.instance_norm(fg.tensor([[[1.0, 2.0, 4.0]]])).dtype is fg.float32


def test_instance_norm_refusals_are_torchs():
    with pytest.raises(ValueError, match="more than 1 spatial element when training"):
        F.instance_norm(fg.ones(2, 3, 1))
    with pytest.raises(ValueError, match=r"got input size \(2, 3\)"):
        F.instance_norm(fg.ones(2, 3))
    with pytest.raises(RuntimeError, match="running_mean and running_var to be defined"):
        F.instance_norm(fg.ones(2, 3, 4), use_input_stats=False)
    with pytest.raises(RuntimeError, match="running_mean should contain 6 elements not 4"):
        F.instance_norm(fg.ones(2, 3, 4), fg.zeros(2), fg.ones(3))
    with pytest.raises(RuntimeError, match="weight should contain 6 elements not 4"):
        F.instance_norm(fg.ones(2, 3, 4), weight=fg.ones(2))
    with pytest.raises(NotImplementedError):  # torch: "batch_norm" not implemented for 'Long'
        F.instance_norm(fg.tensor([[[1, 2, 3]]]))
    rm, rv = fg.zeros(3), fg.ones(3)  # an empty batch: the mean of no samples, as torch's
    assert F.instance_norm(fg.ones(0, 3, 4), rm, rv).shape == (0, 3, 4)
    assert np.isnan(rm.numpy()).all() and np.isnan(rv.numpy()).all()


def test_instance_norm_modules_as_torchs():
    for cls, dims in [(nn.InstanceNorm1d, 3), (nn.InstanceNorm2d, 4), (nn.InstanceNorm3d, 5)]:
        name = cls.__name__
        assert repr(cls(3)) == (
            f"{name}(3, eps=1e-05, momentum=0.1, affine=False, bias=False, "
            "track_running_stats=False)"
        )
        m = cls(3, eps=1e-3, momentum=None, affine=True, track_running_stats=True)
        assert repr(m) == (
            f"{name}(3, eps=0.001, momentum=None, affine=True, bias=True, track_running_stats=True)"
        )
        assert list(m.state_dict()) == [
            "weight", "bias", "running_mean", "running_var", "num_batches_tracked"
        ]  # fmt: skip
        assert list(cls(3).state_dict()) == []
        with pytest.raises(ValueError, match=f"expected {dims - 1}D or {dims}D input"):
            cls(3)(fg.ones(*[2] * (dims + 1)))
        with pytest.raises(ValueError, match=r"size at dim=1 to match num_features \(4\)"):
            cls(4, affine=True)(fg.ones(*[3] * dims))
        with pytest.warns(UserWarning, match="size at dim=0 does not match num_features"):
            cls(4)(fg.ones(*[3] * (dims - 1)))  # unbatched
    # torch's values: running statistics of a batch, unbatched input, eval
    x = t64([[[1.0, 2.0, 4.0], [0.0, -0.0, 3.0]], [[2.0, 2.0, 2.0], [5.0, -1.0, 2.0]]])
    m = nn.InstanceNorm1d(2, track_running_stats=True)
    m(x)
    np.testing.assert_allclose(m.running_mean.numpy(), [0.21666666865348816, 0.15], rtol=1e-7)
    np.testing.assert_allclose(m.running_var.numpy(), [1.0166666507720947, 1.5], rtol=1e-7)
    assert m.num_batches_tracked.item() == 0  # (torch's instance norm does not count)
    m.eval()
    got = m(fg.tensor([[1.0, 2.0, 4.0], [0.0, -0.0, 3.0]]))
    want = [[0.7768821716308594, 1.7686467170715332, 3.7521755695343018]]
    want += [[-0.12247408181428909, -0.12247408181428909, 2.327007532119751]]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    m = nn.InstanceNorm1d(2, track_running_stats=True, momentum=None)  # momentum 0: no move
    m(fg.ones(2, 2, 3))
    assert m.running_mean.tolist() == [0.0, 0.0] and m.running_var.tolist() == [1.0, 1.0]
