"""Clipping, then a hand-written update: the update reads the clipped gradient.

`clip_grad_norm_` and `clip_grad_value_` on gradients backward() has not built yet are
deferred to their build (`tensor.clip_when_built`), and so are hand-written updates
(`frontend/manualstep.py`). Whatever the spelling of the update, it must read the
gradient as it was when the update was written: clipped if the clip came first, as
PyTorch's in-place clip leaves `.grad`. Checked over several steps (the first builds the
step's plan, the later ones run it cached) against a numpy reference of the same math.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

X = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
W0 = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
B0 = np.random.default_rng(2).standard_normal(3).astype(np.float32)
LR, MAX_NORM, MAX_VALUE = 0.5, 0.25, 0.05


def reference(steps: int, clip: str, clip_first: bool = True):
    """Losses of `loss = 10 * sum((x W^T + b)^2)` under SGD with the clip, in float64."""
    w, b = W0.astype(np.float64), B0.astype(np.float64)
    x = X.astype(np.float64)
    losses = []
    for _ in range(steps):
        y = x @ w.T + b
        losses.append(10 * (y**2).sum())
        gy = 20 * y
        gw, gb = gy.T @ x, gy.sum(0)
        if clip == "norm":
            total = np.sqrt((gw**2).sum() + (gb**2).sum())
            coef = min(1.0, MAX_NORM / (total + 1e-6))
            cw, cb = gw * coef, gb * coef
        else:
            cw, cb = gw.clip(-MAX_VALUE, MAX_VALUE), gb.clip(-MAX_VALUE, MAX_VALUE)
        uw, ub = (cw, cb) if clip_first else (gw, gb)
        w, b = w - LR * uw, b - LR * ub
    return np.array(losses)


def _model() -> nn.Linear:
    m = nn.Linear(4, 3)
    with fg.no_grad():
        m.weight.copy_(fg.tensor(W0))
        m.bias.copy_(fg.tensor(B0))
    return m


def _clip(m, clip: str):
    if clip == "norm":
        return nn.utils.clip_grad_norm_(m.parameters(), MAX_NORM)
    return nn.utils.clip_grad_value_(m.parameters(), MAX_VALUE)


UPDATES = {
    "data.add_ alpha": lambda p: p.data.add_(p.grad, alpha=-LR),
    "add_ alpha under no_grad": lambda p: p.add_(p.grad, alpha=-LR),
    "-= lr * grad": lambda p: p.data.sub_(LR * p.grad),
    "-= grad * lr": lambda p: p.data.sub_(p.grad * LR),
}


@pytest.mark.parametrize("clip", ["norm", "value"])
@pytest.mark.parametrize("update", list(UPDATES))
def test_an_update_after_a_clip_reads_the_clipped_gradient(update, clip):
    m, x, losses = _model(), fg.tensor(X), []
    for _ in range(4):
        m.zero_grad()
        loss = (m(x) ** 2).sum() * 10
        loss.backward()
        _clip(m, clip)
        with fg.no_grad():
            for p in m.parameters():
                UPDATES[update](p)
        losses.append(loss.item())
    np.testing.assert_allclose(losses, reference(4, clip), rtol=2e-5)


def test_an_update_scaled_before_the_clip_reads_the_gradient_unclipped():
    """`s = lr * p.grad` made before the clip is a value of its own, as in PyTorch."""
    m, x, losses = _model(), fg.tensor(X), []
    for _ in range(3):
        m.zero_grad()
        loss = (m(x) ** 2).sum() * 10
        loss.backward()
        steps = [(p, LR * p.grad) for p in m.parameters()]
        nn.utils.clip_grad_norm_(m.parameters(), MAX_NORM)
        with fg.no_grad():
            for p, s in steps:
                p.data.sub_(s)
        losses.append(loss.item())
    np.testing.assert_allclose(losses, reference(3, "norm", clip_first=False), rtol=2e-5)
    # (and the clip did happen to the gradients themselves)
    assert float(np.sqrt(sum((p.grad.numpy() ** 2).sum() for p in m.parameters()))) < 0.26


def test_a_gradient_accumulated_after_a_clip_adds_onto_the_clipped_one():
    """backward(), clip, backward() again: the second gradient adds onto the clipped first."""
    m, x = _model(), fg.tensor(X)
    ((m(x) ** 2).sum() * 10).backward()
    nn.utils.clip_grad_value_(m.parameters(), MAX_VALUE)
    ((m(x) ** 2).sum() * 10).backward()
    y = X.astype(np.float64) @ W0.T.astype(np.float64) + B0
    gw = (20 * y).T @ X.astype(np.float64)
    want = gw.clip(-MAX_VALUE, MAX_VALUE) + gw
    np.testing.assert_allclose(m.weight.grad.numpy(), want, rtol=1e-5)
