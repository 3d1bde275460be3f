"""Optimizers against numpy re-implementations of PyTorch's update rules, and the fused step.

The objective is a quadratic, loss = sum(d * (p - c)^2) / 2, whose gradient
d * (p - c) the numpy reference computes exactly; several steps are taken so
momentum, bias correction and amsgrad's running maximum all matter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.pipeline import compiler
from fusegrad.runtime.engine import stats

RNG = np.random.default_rng(7)
SHAPES = [(3, 4), (5,)]
STEPS = 5


def problem():
    start = [RNG.standard_normal(s).astype(np.float32) for s in SHAPES]
    centers = [RNG.standard_normal(s).astype(np.float32) for s in SHAPES]
    scales = [RNG.uniform(0.5, 2.0, s).astype(np.float32) for s in SHAPES]
    return start, centers, scales


def run_fusegrad(make_optimizer, start, centers, scales, steps=STEPS, lrs=None):
    params = [nn.Parameter(fg.from_numpy(a)) for a in start]
    opt = make_optimizer(params)
    cs = [fg.from_numpy(c) for c in centers]
    ds = [fg.from_numpy(d) for d in scales]
    losses = []
    for k in range(steps):
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs[k]
        opt.zero_grad()
        loss = sum(((d * (p - c) ** 2).sum() for p, c, d in zip(params, cs, ds)), fg.tensor(0.0))
        loss = loss * 0.5
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [p.numpy() for p in params], losses


def grads_np(params, centers, scales):
    return [d.astype(np.float64) * (p - c) for p, c, d in zip(params, centers, scales)]


def sgd_np(start, centers, scales, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
           nesterov=False, maximize=False, steps=STEPS, lrs=None):  # fmt: skip
    """torch.optim.SGD's documented algorithm."""
    params = [a.astype(np.float64) for a in start]
    bufs = [None] * len(params)
    for k in range(steps):
        lr_k = lrs[k] if lrs is not None else lr
        for i, g in enumerate(grads_np(params, centers, scales)):
            if maximize:
                g = -g
            if weight_decay:
                g = g + weight_decay * params[i]
            if momentum:
                bufs[i] = g if bufs[i] is None else momentum * bufs[i] + (1 - dampening) * g
                g = g + momentum * bufs[i] if nesterov else bufs[i]
            params[i] = params[i] - lr_k * g
    return params


def adam_np(start, centers, scales, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
            amsgrad=False, decoupled=False, maximize=False, steps=STEPS):  # fmt: skip
    """torch.optim.Adam / AdamW's documented algorithm, bias correction included."""
    b1, b2 = betas
    params = [a.astype(np.float64) for a in start]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    vmax = [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        for i, g in enumerate(grads_np(params, centers, scales)):
            if maximize:
                g = -g
            if weight_decay and decoupled:
                params[i] = params[i] * (1 - lr * weight_decay)
            elif weight_decay:
                g = g + weight_decay * params[i]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat = m[i] / (1 - b1**t)
            if amsgrad:
                vmax[i] = np.maximum(vmax[i], v[i])
                v_hat = vmax[i] / (1 - b2**t)
            else:
                v_hat = v[i] / (1 - b2**t)
            params[i] = params[i] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return params


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
    dict(lr=0.05, momentum=0.5, maximize=True),
]


@pytest.mark.parametrize("kwargs", SGD_CASES, ids=lambda kw: ",".join(kw))
def test_sgd_matches_torch_formulas(kwargs):
    start, centers, scales = problem()
    got, _ = run_fusegrad(lambda ps: optim.SGD(ps, **kwargs), start, centers, scales)
    for a, b in zip(got, sgd_np(start, centers, scales, **kwargs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def adadelta_np(start, centers, scales, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0,
                maximize=False, steps=STEPS):  # fmt: skip
    """torch.optim.Adadelta's documented algorithm."""
    params = [a.astype(np.float64) for a in start]
    v = [np.zeros_like(p) for p in params]
    u = [np.zeros_like(p) for p in params]
    for _ in range(steps):
        for i, g in enumerate(grads_np(params, centers, scales)):
            if maximize:
                g = -g
            if weight_decay:
                g = g + weight_decay * params[i]
            v[i] = rho * v[i] + (1 - rho) * g * g
            delta = np.sqrt(u[i] + eps) / np.sqrt(v[i] + eps) * g
            u[i] = rho * u[i] + (1 - rho) * delta * delta
            params[i] = params[i] - lr * delta
    return params


ADADELTA_CASES = [
    dict(),
    dict(lr=0.5, rho=0.8, eps=1e-3),
    dict(lr=2.0, weight_decay=0.1),
    dict(lr=1.0, maximize=True),
]


@pytest.mark.parametrize("kwargs", ADADELTA_CASES, ids=lambda kw: ",".join(kw) or "defaults")
def test_adadelta_matches_torch_formulas(kwargs):
    start, centers, scales = problem()
    steps = 12  # eps-sized first steps: enough of them that rho's averages move
    got, _ = run_fusegrad(lambda ps: optim.Adadelta(ps, **kwargs), start, centers, scales, steps)
    want = adadelta_np(start, centers, scales, **kwargs, steps=steps)
    assert not np.allclose(want[0], start[0], atol=1e-3)  # the parameters moved
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_adadelta_refuses_bad_arguments():
    w = [nn.Parameter(fg.zeros(2))]
    for kwargs, words in [
        (dict(lr=-1.0), "Invalid learning rate"),
        (dict(rho=1.5), "Invalid rho value"),
        (dict(eps=-1.0), "Invalid epsilon value"),
        (dict(weight_decay=-1.0), "Invalid weight_decay value"),
    ]:
        with pytest.raises(ValueError, match=words):
            optim.Adadelta(w, **kwargs)


ADAM_CASES = [
    (optim.Adam, dict(lr=0.05), {}),
    (optim.Adam, dict(lr=0.05, betas=(0.8, 0.99), weight_decay=0.1), {}),
    (optim.Adam, dict(lr=0.05, amsgrad=True, eps=1e-3), {}),
    (optim.Adam, dict(lr=0.05, maximize=True), {}),
    (optim.AdamW, dict(lr=0.05), dict(weight_decay=1e-2, decoupled=True)),
    (optim.AdamW, dict(lr=0.05, weight_decay=0.3, amsgrad=True), dict(decoupled=True)),
]


@pytest.mark.parametrize("cls, kwargs, extra", ADAM_CASES, ids=lambda v: str(v))
def test_adam_matches_torch_formulas(cls, kwargs, extra):
    start, centers, scales = problem()
    got, _ = run_fusegrad(lambda ps: cls(ps, **kwargs), start, centers, scales)
    for a, b in zip(got, adam_np(start, centers, scales, **kwargs, **extra)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_changing_lr_between_steps_changes_values_not_the_schedule():
    """A scheduler-style lr change is data: the same compiled step runs with the new value."""
    start, centers, scales = problem()
    lrs = [0.1, 0.05, 0.2, 0.01, 0.1]
    run_fusegrad(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), start, centers, scales, steps=1)
    before = stats["scheduled"], compiler.stats["compiled"]
    got, _ = run_fusegrad(
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), start, centers, scales, lrs=lrs
    )
    assert (stats["scheduled"], compiler.stats["compiled"]) == before
    for a, b in zip(got, sgd_np(start, centers, scales, 0.1, momentum=0.9, lrs=lrs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_param_groups_have_their_own_hyperparameters():
    a, b = nn.Parameter(fg.tensor([1.0, 2.0])), nn.Parameter(fg.tensor([3.0]))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    ((a * a).sum() + (b * b).sum()).backward()
    opt.step()
    np.testing.assert_allclose(a.numpy(), [1.0 - 0.1 * 2, 2.0 - 0.1 * 4])
    np.testing.assert_allclose(b.numpy(), [3.0 - 0.5 * 6])
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[1]["momentum"] == 0.0


def test_zero_grad_and_parameters_without_grad():
    a, b = nn.Parameter(fg.tensor([1.0])), nn.Parameter(fg.tensor([5.0]))
    opt = optim.Adam([a, b], lr=0.1)
    (a * 2).sum().backward()
    opt.step()  # b has no gradient: it is left alone and gets no state
    assert b.item() == 5.0 and b not in opt.state and opt.state[a]["step"] == 1
    assert a.item() == pytest.approx(1.0 - 0.1, rel=1e-6)  # Adam's first step moves by lr
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a.grad.numpy(), [0.0])
    opt.zero_grad()
    assert a.grad is None


def test_optimizer_state_dict_round_trip_continues_identically():
    start, centers, scales = problem()

    def make(ps):
        return optim.Adam(ps, lr=0.05, amsgrad=True)

    straight, _ = run_fusegrad(make, start, centers, scales, steps=4)

    params = [nn.Parameter(fg.from_numpy(a)) for a in start]
    first = make(params)
    cs, ds = [fg.from_numpy(c) for c in centers], [fg.from_numpy(d) for d in scales]

    def step(opt):
        opt.zero_grad()
        (sum(((d * (p - c) ** 2).sum() for p, c, d in zip(params, cs, ds))) * 0.5).backward()
        opt.step()

    step(first)
    step(first)
    saved = first.state_dict()
    assert saved["state"][0]["step"] == 2 and saved["param_groups"][0]["params"] == [0, 1]
    second = make(params)
    second.load_state_dict(saved)
    step(second)
    step(second)
    for a, b in zip(params, straight):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-6, atol=1e-7)


def test_bad_arguments_raise():
    p = nn.Parameter(fg.tensor([1.0]))
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD([p], lr=-1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="beta"):
        optim.Adam([p], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p * 2], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(TypeError, match="iterable"):
        optim.SGD(p, lr=0.1)


# ---------------------------------------------------------------- the fused, cached step


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4),
        lambda ps: optim.Adam(ps, lr=1e-2, amsgrad=True),
        lambda ps: optim.AdamW(ps, lr=1e-2),
        lambda ps: optim.Adadelta(ps, lr=1.0, weight_decay=1e-4),
    ],
    ids=["sgd", "adam", "adamw", "adadelta"],
)
def test_training_steps_after_the_first_schedule_and_compile_nothing(make):
    """Each step is ONE realize (forward + backward + update + state), and from the second
    step on it is a schedule-cache hit that compiles nothing; the loss is read for free."""
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = make(model.parameters())
    x = fg.from_numpy(RNG.standard_normal((32, 4)).astype(np.float32))
    y = fg.from_numpy(RNG.integers(0, 3, 32))
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for step in range(6):
        before = dict(stats), dict(compiler.stats)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        after_step = dict(stats)
        losses.append(loss.item())
        assert stats == after_step, "loss.item() after step() must not realize anything"
        assert stats["scheduled"] + stats["schedule_hits"] == (
            before[0]["scheduled"] + before[0]["schedule_hits"] + 1
        ), "one realize per step"
        if step >= 1:
            assert stats["scheduled"] == before[0]["scheduled"], f"step {step} scheduled"
            assert compiler.stats["compiled"] == before[1]["compiled"], f"step {step} compiled"
            assert compiler.stats["disk_hits"] == before[1]["disk_hits"]
    assert losses[-1] < losses[0]
    assert all(math.isfinite(v) for v in losses)


def test_step_realizes_pending_losses_with_the_update():
    w = nn.Parameter(fg.tensor([3.0]))
    opt = optim.SGD([w], lr=0.25)
    first = (w * w).sum()
    second = (w * 4.0).sum()
    first.backward()
    second.backward()  # gradients accumulate: 2w + 4 = 10
    hits = stats["scheduled"] + stats["schedule_hits"]
    opt.step()
    assert stats["scheduled"] + stats["schedule_hits"] == hits + 1
    assert (first.item(), second.item()) == (9.0, 12.0)  # values from before the update
    assert stats["scheduled"] + stats["schedule_hits"] == hits + 1
    assert w.item() == pytest.approx(3.0 - 0.25 * 10)
    assert w.is_leaf and w.requires_grad


def test_step_realizes_with_outputs_in_the_same_schedule():
    w = nn.Parameter(fg.tensor([1.0, -2.0, 3.0]))
    opt = optim.SGD([w], lr=0.5)
    x = fg.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    logits = x * w
    pred = logits.argmax(1)
    logits.sum().backward()
    hits = stats["scheduled"] + stats["schedule_hits"]
    opt.step(with_outputs=[pred])
    assert pred.tolist() == [0, 2]  # the predictions of the weights before the update
    assert stats["scheduled"] + stats["schedule_hits"] == hits + 1  # one realize for both
    assert w.tolist() == [0.5, -2.0, 2.5]


@pytest.mark.cpu_device  # reads a CPU buffer's array
def test_scalar_slots_skip_only_the_very_float_written_last():
    """A step writes its scalars only when they changed (the same float object as last
    step is the same value); an equal value of the other sign, or NaN, is written."""
    from fusegrad.nn.optimizer import _scalar_slots

    like = nn.Parameter(fg.tensor([1.0]))
    slots, lr = {}, 0.25
    (t,) = _scalar_slots(slots, "k", [lr], like)
    assert t.item() == 0.25
    t.node.arg.array[0] = 7.0  # (stands for a write the skip would lose)
    _scalar_slots(slots, "k", [lr], like)
    assert t.item() == 7.0  # the same object: not written again
    _scalar_slots(slots, "k", [0.0], like)
    _scalar_slots(slots, "k", [-0.0], like)
    assert t.item() == 0.0 and np.signbit(t.item())
    _scalar_slots(slots, "k", [float("nan")], like)
    assert np.isnan(t.item())
    _scalar_slots(slots, "k", [0.5 + 0.25], like)  # a new object, a new value
    assert t.item() == 0.75


def test_an_lr_set_back_to_an_earlier_value_is_used():
    """lr 0.1 -> 0.2 -> 0.1 (the same float object as the first step's) on the cached step."""
    start, centers, scales = problem()
    lr = 0.1
    lrs = [lr, 0.2, lr, 0.2, lr]
    got, _ = run_fusegrad(
        lambda ps: optim.SGD(ps, lr=lr, momentum=0.9), start, centers, scales, lrs=lrs
    )
    for a, b in zip(got, sgd_np(start, centers, scales, lr, momentum=0.9, lrs=lrs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_adadelta_at_special_points():
    # a zero gradient with weight decay: the update is the decay's alone (torch's formulas,
    # by hand); a -0.0 parameter with a zero gradient keeps its sign (-0.0 - lr * 0.0)
    p = fg.tensor([0.0, -0.0, 1.0, -1.0], requires_grad=True)
    opt = optim.Adadelta([p], lr=1.0, weight_decay=0.1)
    (p * 0.0).sum().backward()
    opt.step()
    g = 0.1 * np.array([0.0, -0.0, 1.0, -1.0])
    sq = 0.1 * g * g  # rho = 0.9
    want = np.array([0.0, -0.0, 1.0, -1.0]) - np.sqrt(1e-6) / np.sqrt(sq + 1e-6) * g
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-6)
    assert list(np.signbit(p.numpy())) == [False, True, False, True]
    # lr=0: nothing moves; an empty parameter steps without error
    q, e = fg.tensor([2.0, -3.0], requires_grad=True), fg.zeros(0, requires_grad=True)
    opt = optim.Adadelta([q, e], lr=0.0)
    ((q * q).sum() + e.sum()).backward()
    opt.step()
    assert q.tolist() == [2.0, -3.0] and e.shape == (0,)
