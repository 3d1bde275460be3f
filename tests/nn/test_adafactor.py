"""Adafactor against a numpy transcription of torch 2.14's update rule (float64, over the
problem of tests/_optim_problem.py and over 3-d and 0-d parameters), torch's defaults,
state keys and argument errors, checkpoints, skipped parameters and the cached step."""

from __future__ import annotations

import numpy as np
import pytest
from _optim_problem import (
    SCALE,
    START,
    STEPS,
    TARGET,
    assert_jit_replays_equal_eager_steps,
    assert_none_gradients_are_skipped,
    assert_state_dict_continues_identically,
    assert_steps_after_the_first_compile_nothing,
    flat,
    make_params,
    train,
)

import fusegrad as fg
from fusegrad import nn, optim


def lerp(a, b, w):
    """torch's lerp: two-sided, exact at both ends."""
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - w)


def reference(starts, grad_of, steps, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
              weight_decay=0.0, maximize=False):  # fmt: skip
    """Adafactor's steps in numpy float64, written from torch 2.14's formulas."""
    ps = [np.array(s, dtype=np.float64) for s in starts]
    eps1 = np.finfo(np.float64).eps if eps[0] is None else eps[0]
    state = [{} for _ in ps]
    for t in range(1, steps + 1):
        grads = grad_of(ps)
        for p, g, s in zip(ps, grads, state):
            g = -g if maximize else g
            beta, rho = t**beta2_decay, min(lr, 1 / t**0.5)
            alpha = max(eps[1], np.sqrt((p * p).sum()) / np.sqrt(p.size)) * rho
            p *= 1 - lr * weight_decay
            if p.ndim > 1:
                row = lerp(s.get("row", 0.0), (g * g).mean(-1, keepdims=True), beta)
                col = lerp(s.get("col", 0.0), (g * g).mean(-2, keepdims=True), beta)
                s["row"], s["col"] = row, col
                v = row * col / np.maximum(row.mean(-2, keepdims=True), eps1)
            else:
                v = s["var"] = lerp(s.get("var", 0.0), g * g, beta)
            u = g / np.sqrt(np.maximum(v, eps1 * eps1))
            clip = max(1.0, np.sqrt((u * u).sum()) / (np.sqrt(u.size) * d))
            p -= alpha / clip * u
    return ps, state


def problem_grads(ps):
    """The gradient of tests/_optim_problem.py's loss: scale * (p - target) + cos(p)."""
    pairs = zip(ps, map(np.array, TARGET), map(np.array, SCALE))
    return [c * (p - t) + np.cos(p) for p, t, c in pairs]


CASES = [
    {},
    {"lr": 0.1},
    {"lr": 0.05, "weight_decay": 0.2},
    {"maximize": True, "lr": 0.1},
    {"eps": (1e-4, 1e-2), "d": 1.5, "beta2_decay": -0.5, "lr": 0.1},
]


@pytest.mark.parametrize("kwargs", CASES, ids=str)
def test_the_problem_matches_the_numpy_update_rule(kwargs):
    params = make_params(fg.float64)
    opt = optim.Adafactor(params, **kwargs)
    train(opt, params)
    want, want_state = reference(START, problem_grads, STEPS, **kwargs)
    for got, w in zip(flat(params), want):
        np.testing.assert_allclose(got, w.reshape(-1), rtol=1e-12, atol=1e-14)
    state = opt.state_dict()["state"]
    assert list(state[1]) == ["step", "row_var", "col_var"] and state[1]["step"] == STEPS
    assert list(state[0]) == ["step", "variance"]
    np.testing.assert_allclose(state[1]["row_var"].numpy(), want_state[1]["row"], rtol=1e-12)
    np.testing.assert_allclose(state[1]["col_var"].numpy(), want_state[1]["col"], rtol=1e-12)
    np.testing.assert_allclose(state[0]["variance"].numpy(), want_state[0]["var"], rtol=1e-12)


def test_a_3d_and_a_0d_parameter_factor_the_last_two_dimensions():
    rng = np.random.default_rng(5)
    starts = [rng.standard_normal((2, 3, 4)), np.array(0.7)]
    coefs = [rng.standard_normal((2, 3, 4)), np.array(-1.3)]
    params = [nn.Parameter(fg.tensor(s, dtype=fg.float64)) for s in starts]
    opt = optim.Adafactor(params, lr=0.1)
    for _ in range(6):
        opt.zero_grad()
        sum(((p.sin() * c) + p * p).sum() for p, c in zip(params, coefs)).backward()
        opt.step()
    want, _ = reference(
        starts, lambda ps: [np.cos(p) * c + 2 * p for p, c in zip(ps, coefs)], 6, lr=0.1
    )
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-12, atol=1e-14)
    assert opt.state[params[0]]["row_var"].shape == (2, 3, 1)
    assert opt.state[params[0]]["col_var"].shape == (2, 1, 4)
    assert opt.state[params[1]]["variance"].shape == ()


def test_float32_uses_float32_epsilon():
    params = make_params()
    opt = optim.Adafactor(params, lr=0.1)
    train(opt, params)
    want, _ = reference(START, problem_grads, STEPS, lr=0.1)
    for got, w in zip(flat(params), want):
        np.testing.assert_allclose(got, w.reshape(-1), rtol=2e-5, atol=1e-6)


def test_defaults_and_argument_errors_are_torchs():
    opt = optim.Adafactor([nn.Parameter(fg.zeros(2))])
    assert {k: v for k, v in opt.param_groups[0].items() if k != "params"} == {
        "lr": 0.01,
        "beta2_decay": -0.8,
        "eps": (None, 0.001),
        "d": 1.0,
        "weight_decay": 0.0,
        "foreach": None,
        "maximize": False,
    }
    p = [nn.Parameter(fg.zeros(2))]
    for kwargs, words in [
        ({"lr": -1.0}, "Learning rate should be >= 0 but is: -1.0"),
        ({"beta2_decay": 0.5}, "beta2_decay should be <= 0 but is: 0.5"),
        ({"eps": (-1.0, 1e-3)}, "epsilon1 should be >= 0 but is: -1.0"),
        ({"eps": (None, -1.0)}, "epsilon2 should be >= 0 but is: -1.0"),
        ({"d": 0.5}, "Clipping threshold d should be >= 1 but is: 0.5"),
        ({"weight_decay": -0.1}, "weight_decay should be >= 0 but is: -0.1"),
    ]:
        with pytest.raises(ValueError, match=words.replace("(", r"\(")):
            optim.Adafactor(p, **kwargs)


def test_a_checkpoint_continues_identically():
    assert_state_dict_continues_identically(optim.Adafactor, lr=0.1, weight_decay=0.1)


def test_none_gradients_are_skipped():
    assert_none_gradients_are_skipped(optim.Adafactor)


def test_steps_after_the_first_compile_nothing():
    assert_steps_after_the_first_compile_nothing(optim.Adafactor, lr=0.05)


def test_jit_replays_equal_eager_steps():
    assert_jit_replays_equal_eager_steps(optim.Adafactor, lr=0.1)
