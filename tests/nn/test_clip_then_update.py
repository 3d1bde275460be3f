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


# ------------------------------------------------ random orders of gradient operations

OPS = ("clip_norm", "clip_value", "clip_norm_weight", "read_bias", "backward_again")


def _np_grads(w, b):
    y = X.astype(np.float64) @ w.T + b
    gy = 20 * y
    return 10 * (y**2).sum(), {"weight": gy.T @ X.astype(np.float64), "bias": gy.sum(0)}


def _np_apply(op: str, g: dict, w, b) -> None:
    if op == "clip_norm" or op == "clip_norm_weight":
        names = ["weight", "bias"] if op == "clip_norm" else ["weight"]
        total = np.sqrt(sum((g[n] ** 2).sum() for n in names))
        coef = min(1.0, MAX_NORM / (total + 1e-6))
        for n in names:
            g[n] = g[n] * coef
    elif op == "clip_value":
        for n in g:
            g[n] = g[n].clip(-MAX_VALUE, MAX_VALUE)
    elif op == "backward_again":
        _, more = _np_grads(w, b)
        for n in g:
            g[n] = g[n] + more[n]


def _program(seed: int):
    rng = np.random.default_rng(seed)
    ops = [str(o) for o in rng.choice(OPS, size=int(rng.integers(1, 4)))]
    take_at = int(rng.integers(0, len(ops) + 1))  # where the update reads its gradient
    spelling = str(rng.choice(["data.add_ alpha", "-= lr * grad", "scaled early"]))
    return ops, take_at, spelling


@pytest.mark.parametrize("seed", range(24))
def test_random_orders_of_clips_reads_and_accumulation_before_an_update(seed):
    """Each step: backward(), then a random sequence of clips (all gradients or only the
    weight's), reads and a second backward(), with the update's gradient taken at a
    random point in it (`lr * p.grad` made there), or read at the end: against numpy."""
    ops, take_at, spelling = _program(seed)
    if spelling != "scaled early":
        take_at = len(ops)
    m, x = _model(), fg.tensor(X)
    w, b = W0.astype(np.float64), B0.astype(np.float64)
    for _ in range(3):
        m.zero_grad()
        loss = (m(x) ** 2).sum() * 10
        loss.backward()
        want_loss, g = _np_grads(w, b)
        taken, want_taken = None, None
        for k, op in enumerate([*ops, None]):
            if k == take_at:
                taken = [LR * p.grad for p in m.parameters()] if spelling == "scaled early" else 0
                want_taken = {n: LR * v for n, v in g.items()}
            if op is None:
                break
            if op == "clip_norm":
                nn.utils.clip_grad_norm_(m.parameters(), MAX_NORM)
            elif op == "clip_norm_weight":
                nn.utils.clip_grad_norm_([m.weight], MAX_NORM)
            elif op == "clip_value":
                nn.utils.clip_grad_value_(m.parameters(), MAX_VALUE)
            elif op == "read_bias":
                m.bias.grad.numpy()
            else:
                ((m(x) ** 2).sum() * 10).backward()
            _np_apply(op, g, w, b)
        with fg.no_grad():
            for k, p in enumerate(m.parameters()):
                if spelling == "scaled early":
                    p.data.sub_(taken[k])
                elif spelling == "data.add_ alpha":
                    p.data.add_(p.grad, alpha=-LR)
                else:
                    p.data.sub_(LR * p.grad)
        w, b = w - want_taken["weight"], b - want_taken["bias"]
        np.testing.assert_allclose(loss.item(), want_loss, rtol=2e-5, err_msg=f"{ops} {spelling}")
    np.testing.assert_allclose(m.weight.numpy(), w, rtol=1e-4, atol=1e-6)
