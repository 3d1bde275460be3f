"""The fixed problem the optimizer tests run on fusegrad and on torch 2.14.1 (whose
results they hold as literals), and the checks every optimizer gets.

loss = sum(scale * (p - target)^2 / 2 + sin(p)) over three parameters; its gradient
scale * (p - target) + cos(p) is exactly 0 at the third parameter's first element
(0.5 * (0 - 2) + cos 0), so each optimizer's zero-gradient path is in every run too.
The torch side ran the same loop: zero_grad, loss, backward, step, `STEPS` times (and
with `LRS[k]` written into every group's lr before step k where a case says so).
"""

from __future__ import annotations

import math

import numpy as np

import fusegrad as fg
from fusegrad import nn
from fusegrad.pipeline import compiler
from fusegrad.runtime.engine import stats

START = [[0.5, -1.25, 2.0], [[1.5, -0.75], [0.25, -2.0]], [0.0, 3.0, -0.5, 1.0]]
TARGET = [[1.0, 0.5, -1.0], [[0.0, 1.0], [-1.5, 0.5]], [2.0, -1.0, 0.75, 0.0]]
SCALE = [[1.0, 2.0, 0.5], [[1.5, 0.75], [1.0, 3.0]], [0.5, 1.25, 2.0, 1.0]]
STEPS = 8
LRS = [0.1, 0.05, 0.2, 0.2, 0.01, 0.1, 0.3, 0.1]


def make_params(dtype=fg.float32) -> list:
    return [nn.Parameter(fg.tensor(s, dtype=dtype)) for s in START]


def constants(dtype=fg.float32) -> tuple[list, list]:
    """The problem's targets and scales as tensors."""
    return [fg.tensor(t, dtype=dtype) for t in TARGET], [fg.tensor(c, dtype=dtype) for c in SCALE]


def loss_of(params, targets=None, scales=None) -> fg.Tensor:
    if targets is None:
        targets, scales = constants(params[0].dtype)
    terms = [(c * (p - t) ** 2 / 2 + p.sin()).sum() for p, t, c in zip(params, targets, scales)]
    return terms[0] + terms[1] + terms[2]


def train(opt, params, steps: int = STEPS, lrs=None, first: int = 0) -> None:
    """Steps `first` ... `first + steps - 1` of the problem's loop."""
    for k in range(first, first + steps):
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs[k]
        opt.zero_grad()
        loss_of(params).backward()
        opt.step()


def flat(params) -> list[list[float]]:
    return [p.numpy().reshape(-1).tolist() for p in params]


def assert_matches_torch(make, kwargs, lrs, want_params, want_state, rtol=2e-6):
    """`make(params, **kwargs)` trained as torch's was ends where torch's did, and its
    second parameter's state is torch's (its scalars exactly as torch stores them)."""
    params = make_params()
    opt = make(params, **kwargs)
    train(opt, params, lrs=lrs)
    for got, want in zip(flat(params), want_params):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-7)
    state = opt.state_dict()["state"][1]
    assert list(state) == list(want_state), "state keys in torch's order"
    for key, want in want_state.items():
        got = state[key]
        if isinstance(want, list):
            np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=1e-7, err_msg=key)
        else:
            assert got == np.float32(want), (key, got, want)  # torch's 0-d float32 scalars


def assert_float64_matches_torch(make, kwargs, want_params):
    params = make_params(fg.float64)
    opt = make(params, **kwargs)
    train(opt, params)
    for got, want in zip(flat(params), want_params):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def assert_state_dict_continues_identically(make, **kwargs):
    """Four steps, the state saved and loaded into a fresh optimizer, four more: the same
    parameters, bit for bit, as eight steps of one optimizer."""
    straight = make_params()
    opt = make(straight, **kwargs)
    train(opt, straight)
    resumed = make_params()
    opt = make(resumed, **kwargs)
    train(opt, resumed, steps=4)
    saved = opt.state_dict()
    fresh = make(resumed, **kwargs)
    fresh.load_state_dict(saved)
    assert fresh.state_dict()["state"][0].keys() == saved["state"][0].keys()
    train(fresh, resumed, steps=STEPS - 4, first=4)
    assert flat(resumed) == flat(straight)


def assert_none_gradients_are_skipped(make, **kwargs):
    """A parameter without a gradient is not moved and gets no state; zero_grad's
    set_to_none=False zeros are gradients (torch steps those)."""
    a, b = nn.Parameter(fg.tensor([1.0, -1.0])), nn.Parameter(fg.tensor([5.0]))
    opt = make([a, b], **kwargs)
    (a * a).sum().backward()
    opt.step()
    assert b.item() == 5.0 and b not in opt.state and opt.state[a]["step"] == 1
    assert a.tolist() != [1.0, -1.0]
    opt.zero_grad(set_to_none=False)
    assert b.grad is None and a.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert a.grad is None


def assert_steps_after_the_first_compile_nothing(make, **kwargs):
    """A training loop's steps: the first schedules and compiles; every later one (the
    step's scalars changing, as a bias correction does) is a cached plan that schedules
    and compiles nothing."""
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = make(model.parameters(), **kwargs)
    rng = np.random.default_rng(3)
    x = fg.from_numpy(rng.standard_normal((16, 4)).astype(np.float32))
    y = fg.from_numpy(rng.standard_normal((16, 2)).astype(np.float32))
    losses = []
    for step in range(7):
        before = stats["scheduled"], compiler.stats["compiled"]
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step >= 1:
            assert (stats["scheduled"], compiler.stats["compiled"]) == before, (
                f"step {step}: {before} -> {(stats['scheduled'], compiler.stats['compiled'])}"
            )
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]


def assert_jit_replays_equal_eager_steps(make, **kwargs):
    """`fg.jit` of a training step (with a scheduler-style lr change each call) replays
    the recorded step with each call's scalars (bias corrections, ASGD's eta and mu,
    RAdam's switch): the same parameters and state, bit for bit, as eager steps."""

    def run(jitted: bool):
        params = make_params()
        opt = make(params, **kwargs)

        def step(*tensors):  # (the three targets, then the three scales)
            opt.zero_grad()
            loss = loss_of(params, tensors[:3], tensors[3:])
            loss.backward()
            opt.step()
            return loss

        if jitted:
            step = fg.jit(step)
        for k in range(STEPS):
            for group in opt.param_groups:
                group["lr"] = kwargs.get("lr", 0.1) / (1 + k)
            targets, scales = constants()
            step(*targets, *scales)
        state = opt.state_dict()["state"][1]
        return (
            flat(params),
            {k: v.numpy().tolist() if isinstance(v, fg.Tensor) else v for k, v in state.items()},
            step,
        )

    eager_params, eager_state, _ = run(False)
    jit_params, jit_state, step = run(True)
    assert step.replays >= STEPS - 3
    assert jit_params == eager_params
    assert jit_state == eager_state
