"""optim.swa_utils against numpy: AveragedModel's EMA and SWA (every averaging function,
buffers copied or averaged) equal the running averages of the model's weights after each
step; an EMA loop runs the same kernels every step; update_bn's statistics are the mean
of the batches' means and unbiased variances; SWALR's lrs are the closed form of its
annealing; torch's errors and state-dict keys."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.ir.ops import Ops
from fusegrad.optim import swa_utils
from fusegrad.optim.swa_utils import SWALR, AveragedModel, update_bn
from fusegrad.runtime.engine import engine


def _model():
    fg.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.Tanh(), nn.Linear(5, 2))


def _train(model, averaged, steps: int, per_step=None):
    """SGD steps on random batches, `averaged.update_parameters(model)` after each; the
    model's state after each step as numpy arrays."""
    rng = np.random.default_rng(4)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    seen = []
    for _ in range(steps):
        if per_step is not None:
            per_step()
        x = fg.tensor(rng.standard_normal((8, 3)).astype(np.float32))
        y = fg.tensor(rng.standard_normal((8, 2)).astype(np.float32))
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        averaged.update_parameters(model)
        seen.append({k: v.numpy().copy() for k, v in model.state_dict().items()})
    return seen


def _ema(snapshots, key, decay):
    want = snapshots[0][key].astype(np.float64)
    for s in snapshots[1:]:
        want = decay * want + (1 - decay) * s[key]
    return want


def _mean(snapshots, key):
    return np.mean([s[key] for s in snapshots], axis=0, dtype=np.float64)


PARAMS = ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"]
BUFFERS = ["1.running_mean", "1.running_var"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"multi_avg_fn": swa_utils.get_ema_multi_avg_fn(0.8)},
        {"avg_fn": swa_utils.get_ema_avg_fn(0.8)},
    ],
    ids=["multi_avg_fn", "avg_fn"],
)
def test_ema_equals_numpys_and_copies_the_buffers(kwargs):
    model = _model()
    ema = AveragedModel(model, **kwargs)
    seen = _train(model, ema, 6)
    state = ema.state_dict()
    assert list(state) == ["n_averaged"] + [f"module.{k}" for k in model.state_dict()]
    assert state["n_averaged"].dtype == fg.int64 and state["n_averaged"].item() == 6
    for key in PARAMS:
        got = state[f"module.{key}"].numpy()
        np.testing.assert_allclose(got, _ema(seen, key, 0.8), rtol=1e-5, atol=1e-6, err_msg=key)
    for key in BUFFERS + ["1.num_batches_tracked"]:
        np.testing.assert_array_equal(state[f"module.{key}"].numpy(), seen[-1][key])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"multi_avg_fn": swa_utils.get_swa_multi_avg_fn()},
        {"avg_fn": swa_utils.get_swa_avg_fn()},
    ],
    ids=["default", "multi_avg_fn", "avg_fn"],
)
def test_swa_is_the_mean_of_the_steps_weights(kwargs):
    model = _model()
    swa = AveragedModel(model, **kwargs)
    seen = _train(model, swa, 5)
    for key in PARAMS:
        got = swa.state_dict()[f"module.{key}"].numpy()
        np.testing.assert_allclose(got, _mean(seen, key), rtol=1e-5, atol=1e-6, err_msg=key)


def test_use_buffers_averages_the_buffers_too():
    model = _model()
    swa = AveragedModel(model, use_buffers=True)
    seen = _train(model, swa, 4)
    state = swa.state_dict()
    for key in PARAMS + BUFFERS:
        got = state[f"module.{key}"].numpy()
        np.testing.assert_allclose(got, _mean(seen, key), rtol=1e-5, atol=1e-6, err_msg=key)
    # an integer buffer's running average is truncated back into it at every update
    counts = [int(s["1.num_batches_tracked"]) for s in seen]
    assert counts == [1, 2, 3, 4]
    want = counts[0]
    for n, count in enumerate(counts[1:], start=1):
        want = int(want + (count - want) / (n + 1))  # 1 + 1/2, 1 + 2/3, 1 + 3/4: stays 1
    assert state["module.1.num_batches_tracked"].item() == want == 1


def test_the_copy_is_deep_and_forward_calls_it():
    model = _model()
    averaged = AveragedModel(model)
    assert averaged.module is not model
    assert averaged.module[0].weight is not model[0].weight
    x = fg.tensor(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32))
    model.eval()
    averaged.eval()
    np.testing.assert_array_equal(averaged(x).numpy(), model(x).numpy())


def test_averaging_function_arguments_are_checked():
    with pytest.raises(AssertionError, match="Only one of avg_fn and multi_avg_fn"):
        AveragedModel(
            _model(),
            avg_fn=swa_utils.get_swa_avg_fn(),
            multi_avg_fn=swa_utils.get_swa_multi_avg_fn(),
        )
    for make in (swa_utils.get_ema_multi_avg_fn, swa_utils.get_ema_avg_fn):
        for decay in (-0.1, 1.5):
            with pytest.raises(ValueError, match=f"Invalid decay value {decay} provided"):
                make(decay)


# ---------------------------------------------------------------- the EMA loop's cost
@pytest.fixture
def kernels_per_step(monkeypatch):
    """[kernels run, graph nodes scheduled] per step; call `.append([0, 0])` before each."""
    steps: list[list[int]] = []
    run = engine.run

    def counting(plan, leaves, nodes, targets, timed=False):
        seen, stack = set(), list(nodes)
        while stack:
            n = stack.pop()
            if id(n) in seen or n.op in (Ops.BUFFER, Ops.CONST) or engine.value(n) is not None:
                continue
            seen.add(id(n))
            stack.extend(n.srcs)
        if steps:
            steps[-1][0] += len(plan.steps)
            steps[-1][1] += len(seen)
        return run(plan, leaves, nodes, targets, timed)

    monkeypatch.setattr(engine, "run", counting)
    return steps


def test_an_ema_loop_runs_the_same_kernels_every_step(kernels_per_step):
    """200 steps: the same kernels and scheduled nodes each step after the first two (no
    lazy chain grows from step to step), and the EMA equals numpy's."""
    model = _model()
    ema = AveragedModel(model, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.9))
    seen = _train(model, ema, 200, per_step=lambda: kernels_per_step.append([0, 0]))
    counts = kernels_per_step[2:]
    assert all(c == counts[0] for c in counts), counts
    assert counts[0][0] > 0
    for p in ema.parameters():
        assert p.node.op is Ops.BUFFER  # computed, not a graph waiting
    for key in PARAMS:
        got = ema.state_dict()[f"module.{key}"].numpy()
        np.testing.assert_allclose(got, _ema(seen, key, 0.9), rtol=1e-5, atol=1e-6, err_msg=key)


# ---------------------------------------------------------------- update_bn
def test_update_bn_is_the_cumulative_average_over_the_loader():
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((n, 4, 3)) for n in (5, 3, 6)]
    model = nn.Sequential(nn.BatchNorm1d(4, momentum=0.3), nn.InstanceNorm1d(4))
    model.double()
    model.eval()
    loader = [
        fg.tensor(batches[0]),
        (fg.tensor(batches[1]), fg.zeros(3)),
        [fg.tensor(batches[2])],
    ]
    update_bn(loader, model)
    bn = model[0]
    means = [b.mean(axis=(0, 2)) for b in batches]
    variances = [b.var(axis=(0, 2), ddof=1) for b in batches]
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean(means, axis=0), rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), np.mean(variances, axis=0), rtol=1e-12)
    assert bn.num_batches_tracked.item() == 3
    assert bn.momentum == 0.3 and not model.training and not bn.training


def test_update_bn_without_batch_norm_reads_nothing():
    class Untouchable:
        def __iter__(self):
            raise AssertionError("the loader was read")

    update_bn(Untouchable(), nn.Linear(2, 2))


# ---------------------------------------------------------------- SWALR
def _closed_form(lr0, swa_lr, epochs, strategy, k):
    t = 1.0 if epochs == 0 else min(1.0, k / epochs)
    alpha = (1 - math.cos(math.pi * t)) / 2 if strategy == "cos" else t
    return swa_lr * alpha + lr0 * (1 - alpha)


@pytest.mark.parametrize("strategy", ["cos", "linear"])
@pytest.mark.parametrize("epochs", [0, 1, 4, 10])
def test_swalr_anneals_to_swa_lr(strategy, epochs):
    groups = [{"params": [nn.Parameter(fg.zeros(1))]}, {"params": [nn.Parameter(fg.zeros(1))]}]
    groups[1]["lr"] = 0.3
    opt = optim.SGD(groups, lr=1.0)
    sched = SWALR(opt, swa_lr=[0.05, 0.01], anneal_epochs=epochs, anneal_strategy=strategy)
    assert [g["swa_lr"] for g in opt.param_groups] == [0.05, 0.01]
    for k in range(25):
        want = [_closed_form(1.0, 0.05, epochs, strategy, k)]
        want.append(_closed_form(0.3, 0.01, epochs, strategy, k))
        np.testing.assert_allclose(sched.get_last_lr(), want, rtol=1e-12, err_msg=str(k))
        opt.step()
        sched.step()


def test_swalr_state_dict_resumes_the_schedule():
    def fresh(strategy):
        opt = optim.SGD([nn.Parameter(fg.zeros(1))], lr=1.0)
        return opt, SWALR(opt, swa_lr=0.1, anneal_epochs=6, anneal_strategy=strategy)

    opt, sched = fresh("cos")
    for _ in range(3):
        opt.step()
        sched.step()
    saved = sched.state_dict()
    assert "optimizer" not in saved and "anneal_func" not in saved
    opt2, sched2 = fresh("linear")
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(saved)
    for k in range(4, 9):
        opt2.step()
        sched2.step()
        assert sched2.get_last_lr()[0] == pytest.approx(_closed_form(1.0, 0.1, 6, "cos", k))


def test_swalr_errors_are_torchs():
    def opt():
        return optim.SGD([nn.Parameter(fg.zeros(1))], lr=1.0)

    with pytest.raises(ValueError, match="anneal_strategy must be one of 'cos' or 'linear'"):
        SWALR(opt(), 0.1, anneal_strategy="exp")
    for epochs in (-1, 2.0):
        with pytest.raises(ValueError, match="anneal_epochs must be equal or greater than 0"):
            SWALR(opt(), 0.1, anneal_epochs=epochs)
    with pytest.raises(ValueError, match="swa_lr has 2 values, param_groups has 1"):
        SWALR(opt(), [0.1, 0.2])
