"""fg.amp.GradScaler (issue 30): scaling, unscaling, the step skipped on inf/NaN gradients,
the scale's backoff and growth, state_dict, and torch's errors, on the CPU."""

from __future__ import annotations

import math

import pytest

import fusegrad as fg


def _setup(init_scale=8.0, **kw):
    w = fg.tensor([1.0, -2.0], requires_grad=True)
    opt = fg.optim.SGD([w], lr=0.25)
    return w, opt, fg.amp.GradScaler("cpu", init_scale=init_scale, **kw)


def test_a_clean_step_unscales_and_steps_and_the_scale_grows_after_the_interval():
    w, opt, scaler = _setup(growth_interval=2)
    for k in range(2):
        opt.zero_grad()
        scaler.scale((w * w).sum()).backward()
        assert w.grad.tolist() == [16.0 * (0.5**k), -32.0 * (0.5**k)]  # 2w, times 8
        scaler.step(opt)
        assert w.grad.tolist() == [2.0 * 0.5**k, -4.0 * 0.5**k]  # unscaled
        scaler.update()
    assert w.tolist() == [0.25, -0.5]  # w - 0.25 * 2w, twice
    assert scaler.get_scale() == 16.0  # two clean updates in a row: doubled
    assert scaler.state_dict()["_growth_tracker"] == 0


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_step_with_an_inf_or_nan_gradient_is_skipped_and_the_scale_backs_off(bad):
    w, opt, scaler = _setup(growth_interval=1)
    scaler.scale((w * bad).sum()).backward()
    assert scaler.step(opt) is None
    scaler.update()
    assert w.tolist() == [1.0, -2.0]  # untouched
    assert scaler.get_scale() == 4.0 and scaler.state_dict()["_growth_tracker"] == 0


def test_a_mixed_precision_step_matches_float32():
    # float32 master weights, a float16 forward, the loss scaled by 2^10 (2^16 would
    # overflow the float16 gradient of w.half() here: a skipped step): the update is
    # float32's to float16's precision
    x = fg.tensor([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]])
    updated = []
    for half in (False, True):
        w = fg.tensor([0.3, -0.2, 0.1], requires_grad=True)
        opt = fg.optim.SGD([w], lr=0.1)
        scaler = fg.amp.GradScaler("cpu", init_scale=1024.0, enabled=half)
        y = (x.half() @ w.half()) if half else x @ w
        loss = (y * y).mean()
        assert loss.dtype is (fg.float16 if half else fg.float32)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        assert w.grad.dtype is fg.float32
        updated.append(w.tolist())
    assert updated[1] == pytest.approx(updated[0], rel=4 * 2.0**-10)
    assert updated[1] != updated[0]  # (the forward did run in float16)


def test_torchs_errors():
    w, opt, scaler = _setup()
    scaler.scale((w * w).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(AssertionError, match="No inf checks"):
        scaler.update()
    h = fg.tensor([1.0], dtype=fg.float16, requires_grad=True)
    (h * 2).sum().backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(fg.optim.SGD([h], lr=1.0))


def test_state_dict_round_trip_and_disabled_pass_through():
    _, _, scaler = _setup(init_scale=32.0, growth_factor=3.0, backoff_factor=0.25)
    state = scaler.state_dict()
    assert state == {
        "scale": 32.0,
        "growth_factor": 3.0,
        "backoff_factor": 0.25,
        "growth_interval": 2000,
        "_growth_tracker": 0,
    }
    other = fg.amp.GradScaler("cpu")
    other.load_state_dict(state)
    assert other.state_dict() == state
    off = fg.amp.GradScaler("cpu", enabled=False)
    x = fg.tensor([3.0])
    assert off.scale(x) is x and off.state_dict() == {} and off.get_scale() == 1.0
