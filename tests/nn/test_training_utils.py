"""Learning-rate schedulers, gradient clipping, RMSprop and Adagrad, ModuleDict and
ParameterList, TensorDataset samples: against closed forms and numpy references."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.optim import lr_scheduler as L

RNG = np.random.default_rng(5)


def make_opt(cls=optim.SGD, lr=1.0, **kw):
    return cls([nn.Parameter(fg.zeros(2))], lr=lr, **kw)


def run(sched, steps):
    lrs = [sched.get_last_lr()[0]]
    for _ in range(steps):
        sched.optimizer.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs


# ---------------------------------------------------------------- schedulers


def test_step_multistep_exponential_lambda():
    assert run(L.StepLR(make_opt(), 3, gamma=0.5), 7) == pytest.approx(
        [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25]
    )
    assert run(L.MultiStepLR(make_opt(), [2, 5, 5], gamma=0.1), 6) == pytest.approx(
        [1, 1, 0.1, 0.1, 0.1, 0.001, 0.001]
    )
    assert run(L.ExponentialLR(make_opt(lr=2.0), 0.9), 4) == pytest.approx(
        [2 * 0.9**k for k in range(5)]
    )
    assert run(L.LambdaLR(make_opt(lr=0.5), lambda e: 1 / (e + 1)), 3) == pytest.approx(
        [0.5, 0.25, 0.5 / 3, 0.125]
    )


def test_cosine_annealing_matches_closed_form_through_restarts():
    lrs = run(L.CosineAnnealingLR(make_opt(lr=0.1), T_max=5, eta_min=0.01), 20)
    want = [0.01 + 0.09 * (1 + math.cos(math.pi * t / 5)) / 2 for t in range(21)]
    np.testing.assert_allclose(lrs, want, rtol=1e-10, atol=1e-12)


def np_one_cycle(step, total, max_lr, pct=0.3, div=25.0, final_div=1e4):
    start, top, low = max_lr / div, max_lr, max_lr / div / final_div
    up_end = pct * total - 1
    if step <= up_end:
        p, a, b = step / up_end, start, top
    else:
        p, a, b = (step - up_end) / (total - 1 - up_end), top, low
    return b + (a - b) / 2 * (math.cos(math.pi * p) + 1)


def test_one_cycle_lr_and_momentum():
    opt = make_opt(optim.SGD, lr=0.1, momentum=0.9)
    sched = L.OneCycleLR(opt, max_lr=1.0, total_steps=20)
    lrs = run(sched, 19)
    np.testing.assert_allclose(lrs, [np_one_cycle(t, 20, 1.0) for t in range(20)], rtol=1e-12)
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.95)  # back up at the end
    with pytest.raises(ValueError, match="Tried to step 21 times"):
        sched.step()
        sched.step()
    adam = make_opt(optim.Adam, lr=0.1)
    L.OneCycleLR(adam, max_lr=0.5, epochs=2, steps_per_epoch=5)
    assert adam.param_groups[0]["betas"][0] == pytest.approx(0.95)
    with pytest.raises(ValueError, match="total_steps OR"):
        L.OneCycleLR(make_opt(), max_lr=1.0)
    with pytest.raises(ValueError, match="momentum or beta1"):
        L.OneCycleLR(make_opt(optim.Adagrad), max_lr=1.0, total_steps=3)


def test_reduce_lr_on_plateau():
    opt = make_opt(lr=1.0)
    sched = L.ReduceLROnPlateau(opt, patience=2, factor=0.5, cooldown=1, min_lr=0.2)
    lrs = []
    for metric in [5, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]:
        sched.step(metric)
        lrs.append(opt.param_groups[0]["lr"])
    # bad epochs 1, 2, 3 > patience: halve; cooldown 1 epoch; then 3 more bad epochs; floor 0.2
    assert lrs == [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25]
    for _ in range(4):
        sched.step(4)
    assert opt.param_groups[0]["lr"] == 0.2
    up = L.ReduceLROnPlateau(make_opt(), mode="max", patience=0, threshold_mode="abs")
    up.step(1.0)
    up.step(1.0)
    assert up.get_last_lr() == [0.1]
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        L.ReduceLROnPlateau(make_opt(), factor=1.0)


def test_scheduler_state_dict_round_trips_through_fg_save(tmp_path):
    sched = L.MultiStepLR(make_opt(), [2, 4], gamma=0.1)
    run(sched, 3)
    fg.save(sched.state_dict(), tmp_path / "s.fg")
    fresh = L.MultiStepLR(make_opt(), [9], gamma=0.5)
    fresh.load_state_dict(fg.load(tmp_path / "s.fg"))
    assert fresh.last_epoch == 3 and fresh.gamma == 0.1
    fresh.optimizer.param_groups[0]["lr"] = fresh.get_last_lr()[0]
    assert run(fresh, 2)[1:] == pytest.approx([0.01, 0.01])


def test_scheduler_lr_reaches_the_update():
    p = nn.Parameter(fg.tensor([1.0]))
    opt = optim.SGD([p], lr=1.0)
    sched = L.StepLR(opt, 1, gamma=0.5)
    for lr in [1.0, 0.5, 0.25]:
        before = p.item()
        (p * 1.0).sum().backward()  # gradient 1
        opt.step()
        opt.zero_grad()
        sched.step()
        assert before - p.item() == pytest.approx(lr)


# ---------------------------------------------------------------- clipping


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm(norm_type):
    ps = [
        nn.Parameter(fg.tensor(RNG.standard_normal(s).astype(np.float32))) for s in [(3,), (2, 2)]
    ]
    gs = [RNG.standard_normal(p.shape).astype(np.float32) for p in ps]
    (sum((p * fg.tensor(g)).sum() for p, g in zip(ps, gs))).backward()
    flat = np.concatenate([g.ravel() for g in gs]).astype(np.float64)
    if norm_type == float("inf"):
        total = np.abs(flat).max()
    else:
        total = (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    got = nn.utils.clip_grad_norm_(ps, max_norm=0.5, norm_type=norm_type)
    np.testing.assert_allclose(got.item(), total, rtol=1e-5)
    coef = min(1.0, 0.5 / (total + 1e-6))
    for p, g in zip(ps, gs):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-5)


def test_clip_grad_norm_leaves_small_gradients_and_errors_on_nonfinite():
    p = nn.Parameter(fg.tensor([0.3, 0.4]))
    p.sum().backward()
    nn.utils.clip_grad_norm_(p, 10.0)
    assert p.grad.tolist() == [1.0, 1.0]
    q = nn.Parameter(fg.tensor([1.0]))
    (q * float("inf")).sum().backward()
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([q], 1.0, error_if_nonfinite=True)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf"), 0.0, -1.0, float("-inf")])
def test_get_total_norm_is_the_norm_of_the_norms(norm_type):
    """torch's: each tensor's vector norm, then the norm of those (for a positive order
    the norm of all elements together; for 0 the count of tensors not all zero)."""
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in [(3,), (2, 2)]]
    arrays.append(np.zeros(2, np.float32))
    with np.errstate(divide="ignore"):  # (a negative order of a zero: numpy's 1/0, then 0)
        norms = [np.linalg.norm(a.ravel().astype(np.float64), ord=norm_type) for a in arrays]
        want = np.linalg.norm(np.array(norms), ord=norm_type)
    got = nn.utils.get_total_norm([fg.tensor(a) for a in arrays], norm_type)
    assert got.shape == ()
    np.testing.assert_allclose(got.item(), want, rtol=1e-5)
    assert nn.utils.get_total_norm(fg.tensor([3.0, 4.0])).item() == 5.0
    assert nn.utils.get_total_norm([]).item() == 0.0


def test_get_total_norm_errors_on_nonfinite_and_records_no_history():
    with pytest.raises(RuntimeError, match="The total norm of order 2.0 for gradients"):
        nn.utils.get_total_norm([fg.tensor([1.0, float("nan")])], error_if_nonfinite=True)
    p = nn.Parameter(fg.tensor([3.0, 4.0]))
    assert not nn.utils.get_total_norm([p]).requires_grad


def test_clip_grads_with_norm_is_clip_grad_norm_in_two_steps():
    ps = [nn.Parameter(fg.tensor([3.0, 0.0])), nn.Parameter(fg.tensor([0.0, 4.0]))]
    (ps[0] * ps[0]).sum().backward()  # grad (6, 0)
    (ps[1] * ps[1]).sum().backward()  # grad (0, 8)
    total = nn.utils.get_total_norm([p.grad for p in ps])
    assert total.item() == 10.0
    assert nn.utils.clip_grads_with_norm_(ps, 5.0, total) is None
    np.testing.assert_allclose(ps[0].grad.numpy(), [6 * 5 / (10 + 1e-6), 0.0], rtol=1e-6)
    np.testing.assert_allclose(ps[1].grad.numpy(), [0.0, 8 * 5 / (10 + 1e-6)], rtol=1e-6)
    nn.utils.clip_grads_with_norm_(ps[0], 100.0, fg.tensor(1.0))  # never scaled up
    np.testing.assert_allclose(ps[0].grad.numpy(), [6 * 5 / (10 + 1e-6), 0.0], rtol=1e-6)
    nn.utils.clip_grads_with_norm_([nn.Parameter(fg.zeros(1))], 1.0, total)  # no grads: nothing


def test_clip_grad_norm_deprecated_name_and_empty_generator():
    p = nn.Parameter(fg.tensor([3.0, 4.0]))
    (p * p).sum().backward()
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        assert nn.utils.clip_grad_norm(p, 1.0).item() == 10.0
    with pytest.warns(UserWarning, match="empty generator"):
        assert nn.utils.clip_grad_norm_((q for q in []), 1.0).item() == 0.0


def test_clip_grad_value():
    p = nn.Parameter(fg.zeros(4))
    (p * fg.tensor([-3.0, -0.5, 0.5, 3.0])).sum().backward()
    nn.utils.clip_grad_value_([p], 1.0)
    assert p.grad.tolist() == [-1.0, -0.5, 0.5, 1.0]


# ---------------------------------------------------------------- RMSprop, Adagrad


def np_rmsprop(p, grads, lr, alpha, eps, wd, momentum, centered):
    v, a, b = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = g + wd * p
        v = alpha * v + (1 - alpha) * g * g
        if centered:
            a = a + (1 - alpha) * (g - a)
            denom = np.sqrt(v - a * a) + eps
        else:
            denom = np.sqrt(v) + eps
        if momentum > 0:
            b = momentum * b + g / denom
            p = p - lr * b
        else:
            p = p - lr * g / denom
    return p


def np_adagrad(p, grads, lr, lr_decay, wd, init, eps):
    s = np.full_like(p, init)
    for t, g in enumerate(grads, 1):
        g = g + wd * p
        s = s + g * g
        p = p - lr / (1 + (t - 1) * lr_decay) * g / (np.sqrt(s) + eps)
    return p


def run_optimizer(opt_cls, p0, grads, **kw):
    p = nn.Parameter(fg.tensor(p0, dtype=fg.float64))
    opt = opt_cls([p], **kw)
    for g in grads:
        (p * fg.tensor(g, dtype=fg.float64)).sum().backward()
        opt.step()
        opt.zero_grad()
    return p.numpy(), opt


@pytest.mark.parametrize(
    "kw",
    [
        dict(lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False),
        dict(lr=0.05, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.8, centered=True),
        dict(lr=0.02, alpha=0.95, eps=1e-8, weight_decay=0.0, momentum=0.5, centered=False),
    ],
)
def test_rmsprop_matches_numpy(kw):
    p0 = RNG.standard_normal(5)
    grads = [RNG.standard_normal(5) for _ in range(4)]
    got, opt = run_optimizer(optim.RMSprop, p0, grads, **kw)
    want = np_rmsprop(p0, grads, kw["lr"], kw["alpha"], kw["eps"], kw["weight_decay"],
                      kw["momentum"], kw["centered"])  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert opt.state_dict()["state"][0]["step"] == 4


@pytest.mark.parametrize(
    "kw",
    [
        dict(lr=0.1, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10),
        dict(lr=0.3, lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.5, eps=1e-6),
    ],
)
def test_adagrad_matches_numpy(kw):
    p0 = RNG.standard_normal(5)
    grads = [RNG.standard_normal(5) for _ in range(4)]
    got, _ = run_optimizer(optim.Adagrad, p0, grads, **kw)
    want = np_adagrad(p0, grads, kw["lr"], kw["lr_decay"], kw["weight_decay"],
                      kw["initial_accumulator_value"], kw["eps"])  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_new_optimizers_reject_bad_hyperparameters():
    with pytest.raises(ValueError, match="learning rate"):
        optim.RMSprop([nn.Parameter(fg.zeros(1))], lr=-1.0)
    with pytest.raises(ValueError, match="alpha"):
        optim.RMSprop([nn.Parameter(fg.zeros(1))], alpha=-0.1)
    with pytest.raises(ValueError, match="lr_decay"):
        optim.Adagrad([nn.Parameter(fg.zeros(1))], lr_decay=-0.1)


def test_optimizer_state_dict_round_trips_through_fg_save(tmp_path):
    p0 = RNG.standard_normal(3)
    grads = [RNG.standard_normal(3) for _ in range(4)]
    _, opt = run_optimizer(optim.Adam, p0, grads[:2], lr=0.1)
    fg.save(opt.state_dict(), tmp_path / "opt.fg")
    p = opt.param_groups[0]["params"][0]
    fresh = optim.Adam([p], lr=0.5)
    fresh.load_state_dict(fg.load(tmp_path / "opt.fg"))
    assert fresh.param_groups[0]["lr"] == 0.1
    for g in grads[2:]:
        (p * fg.tensor(g, dtype=fg.float64)).sum().backward()
        fresh.step()
        fresh.zero_grad()
    want, _ = run_optimizer(optim.Adam, p0, grads, lr=0.1)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-12)


# ---------------------------------------------------------------- containers and data


def test_module_dict():
    d = nn.ModuleDict({"a": nn.Linear(2, 3)})
    d["b"] = nn.ReLU()
    d.update([("c", nn.Linear(3, 1))])
    assert list(d) == ["a", "b", "c"] and "b" in d and len(d) == 3
    assert sorted(n for n, _ in d.named_parameters()) == [
        "a.bias",
        "a.weight",
        "c.bias",
        "c.weight",
    ]
    assert isinstance(d.pop("b"), nn.ReLU) and list(d.keys()) == ["a", "c"]
    net = nn.Sequential(d["a"], d["c"])
    assert net(fg.ones(4, 2)).shape == (4, 1)


def test_parameter_list():
    ps = nn.ParameterList([fg.zeros(2), nn.Parameter(fg.ones(3))])
    ps.append(fg.ones(1))
    assert [n for n, _ in ps.named_parameters()] == ["0", "1", "2"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in ps)
    assert ps[-1].shape == (1,) and len(ps) == 3

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([fg.ones(2) for _ in range(2)])

        def forward(self, x):
            for s in self.scales:
                x = x * s
            return x

    net = Net()
    assert len(list(net.parameters())) == 2
    net(fg.ones(2)).sum().backward()
    assert net.scales[0].grad.tolist() == [1.0, 1.0]


def test_tensor_dataset_scalar_labels_have_shape_unit():
    ds = fg.data.TensorDataset(np.zeros((4, 2)), np.arange(4))
    x, y = ds[2]
    assert x.shape == (2,) and y.shape == () and y.item() == 2


def test_docstring_examples_of_new_modules():
    import fusegrad.nn.clip_grad
    import fusegrad.nn.containers
    import fusegrad.nn.lr_scheduler
    import fusegrad.nn.utils
    import fusegrad.serialization

    for mod in (
        fusegrad.nn.clip_grad,
        fusegrad.nn.containers,
        fusegrad.nn.lr_scheduler,
        fusegrad.nn.utils,
        fusegrad.serialization,
    ):
        result = doctest.testmod(mod)
        assert result.failed == 0 and result.attempted > 0, mod.__name__


def test_scheduler_step_before_optimizer_step_warns_once_as_torch():
    import warnings

    opt = make_opt()
    sched = L.StepLR(opt, step_size=1, gamma=0.5)  # the constructor's own step: no warning
    with pytest.warns(UserWarning, match=r"Detected call of `lr_scheduler.step\(\)` before"):
        sched.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only the first step is checked, as in torch
        sched.step()
        opt.step()
        sched.step()
        # in the right order nothing is said; ReduceLROnPlateau never checks (as torch)
        good = make_opt()
        sched = L.CosineAnnealingLR(good, T_max=4)
        good.step()
        sched.step()
        L.ReduceLROnPlateau(make_opt()).step(1.0)
