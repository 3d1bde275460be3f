"""Rule 9 (pipeline/schedule.py, `_stored_by_readers`): an elementwise value stored for its
readers (rule 4) is computed and stored by the first kernel that reads it, where that
kernel is elementwise at its shape (or a copy `materialize` made) and reads it at its own
coordinates; a kernel stores as many such values as qualify, a value moving with the ones
its own kernel stored.

A sigmoid computes exp(-|x|) once, stores it for its gradient and divides by it: with the
rule that is one forward kernel, not two. Kernel counts are pinned, and every value and
gradient is checked against float64 numpy; the LSTM cell's values equal those of the
schedule without the rule bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.pipeline import schedule as schedule_module
from fusegrad.runtime.engine import engine

RNG = np.random.default_rng(9)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def sigmoid64(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a.astype(np.float64)))


@pytest.fixture(autouse=True)
def fresh_plans():
    """Plans are cached by graph structure: each test schedules its graphs anew."""
    engine.forget_plans(lambda key: True)
    yield
    engine.forget_plans(lambda key: True)


def without_rule_9(monkeypatch) -> None:
    monkeypatch.setattr(schedule_module, "_stored_by_readers", lambda *args: {})
    engine.forget_plans(lambda key: True)


def _sigmoid_layer(a: np.ndarray, w: np.ndarray):
    """tanh(sigmoid(x) @ w).sum() and both gradients, in one plan as a training step has
    them: the sigmoid's exp is read by the sigmoid and by its gradient."""
    x = fg.tensor(a, requires_grad=True)
    W = fg.tensor(w, requires_grad=True)
    y = (x.sigmoid() @ W).tanh().sum()
    y.backward()
    engine.realize([y.node, x.grad.node, W.grad.node])
    return y, x.grad, W.grad


def test_a_sigmoids_exp_is_stored_by_the_kernel_that_divides_by_it(monkeypatch):
    a, w = f32(64, 32), f32(32, 16)
    a[0, :4] = [0.0, -0.0, 88.0, -88.0]  # zeros of both signs, and near exp's overflow
    y, gx, gw = _sigmoid_layer(a, w)
    s = sigmoid64(a)
    t = np.tanh(s @ w.astype(np.float64))
    np.testing.assert_allclose(y.item(), t.sum(), rtol=1e-5)
    dt = 1 - t * t
    np.testing.assert_allclose(gw.numpy(), s.T @ dt, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gx.numpy(), (dt @ w.T) * s * (1 - s), rtol=1e-4, atol=1e-5)
    kernels = fg.kernels(y)
    assert "also stores" in kernels[0].reason, kernels[0].reason
    without_rule_9(monkeypatch)
    y0, gx0, gw0 = _sigmoid_layer(a, w)
    assert len(fg.kernels(y0)) == len(kernels) + 1  # the exp's own kernel
    assert y0.item() == y.item()
    np.testing.assert_array_equal(gx0.numpy(), gx.numpy())
    np.testing.assert_array_equal(gw0.numpy(), gw.numpy())


def test_an_lstm_step_has_fewer_kernels_and_the_same_values(monkeypatch):
    def run():
        fg.manual_seed(0)
        rnn = nn.LSTM(12, 20, num_layers=2)
        x = fg.tensor(np.random.default_rng(1).random((6, 3, 12)).astype(np.float32))
        opt = fg.optim.SGD(rnn.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            h, _ = rnn(x)
            loss = (h * h).sum()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        weights = [p.numpy().copy() for p in rnn.parameters()]
        return losses, weights, len(fg.kernels(next(iter(rnn.parameters()))))

    with_rule = run()
    without_rule_9(monkeypatch)
    without = run()
    assert with_rule[0] == without[0]
    for a, b in zip(with_rule[1], without[1]):
        np.testing.assert_array_equal(a, b)
    assert with_rule[2] < without[2] * 0.85, (with_rule[2], without[2])


def test_an_lstm_time_step_is_three_kernels_that_store_what_the_backward_reads():
    # the gates' product; the cell state's copy (`materialize`), which reads the input,
    # forget and cell gates and stores them (and each sigmoid's exp) for the backward; the
    # hidden state's, which stores the output gate and tanh(c)
    steps = 4
    fg.manual_seed(0)
    rnn = nn.LSTM(12, 20)
    x = fg.tensor(np.random.default_rng(1).random((steps, 3, 12)).astype(np.float32))
    h, _ = rnn(x)
    (h * h).sum().backward()
    ks = fg.kernels(*[p.grad for p in rnn.parameters()])
    lstm = [k for k in ks if k.reason.startswith("LSTM")]
    assert [k.reason.split(";")[0] for k in lstm] == steps * [
        "LSTM gates",
        "LSTM cell state",
        "LSTM hidden state",
    ]
    for k in lstm[1:]:  # (the first step's cell state reads a zero state: less to store)
        if k.reason.startswith("LSTM cell state"):
            assert len(k.outputs) >= 6, k.reason
        elif k.reason.startswith("LSTM hidden state"):
            assert len(k.outputs) >= 4, k.reason
    grads = [p.grad.numpy() for p in rnn.parameters()]
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_an_lstm_at_special_points_has_the_values_and_gradients_of_the_schedule_without_it(
    monkeypatch,
):
    # inputs at 0, -0, +-1 and near exp's overflow (+-88: saturated gates), an empty-ish
    # state of zeros and a state at +-1: the gates the cell state's kernel now stores (and
    # their exps) give the same bits, forward and backward, as their own kernels did
    a = np.zeros((3, 2, 4), np.float32)
    a[0] = [[0.0, -0.0, 1.0, -1.0], [88.0, -88.0, 0.5, -0.5]]
    a[1] = [[1.0, 1.0, -1.0, -1.0], [0.0, 0.0, 0.0, 0.0]]
    a[2] = [[-0.0, 88.0, -88.0, 2.0], [1e-30, -1e-30, 3.0, -3.0]]
    h0 = np.array([[[0.0, -0.0, 1.0, -1.0, 0.25]] * 2], np.float32)
    c0 = np.array([[[1.0, -1.0, 0.0, -0.0, 88.0]] * 2], np.float32)

    def run():
        fg.manual_seed(0)
        rnn = nn.LSTM(4, 5)
        x = fg.tensor(a, requires_grad=True)
        h, c = fg.tensor(h0, requires_grad=True), fg.tensor(c0, requires_grad=True)
        out, (hn, cn) = rnn(x, (h, c))
        loss = (out * out).sum() + cn.sum() + hn.sum()
        loss.backward()
        grads = [x.grad, h.grad, c.grad, *[p.grad for p in rnn.parameters()]]
        engine.realize([loss.node, *[g.node for g in grads]])
        return [loss.numpy(), out.numpy(), *[g.numpy() for g in grads]]

    with_rule = run()
    without_rule_9(monkeypatch)
    without = run()
    for got, want in zip(with_rule, without, strict=True):
        assert got.tobytes() == want.tobytes()
    assert all(np.all(np.isfinite(v)) for v in with_rule)


def test_a_value_read_first_by_a_reduction_keeps_its_own_kernel():
    # the exp is read first by a sum (not elementwise at its shape): no move
    a = f32(32, 40)
    x = fg.tensor(a)
    e = x.exp()
    total = e.sum(1, keepdim=True)
    out = e / total + e.sqrt()
    want = np.exp(a.astype(np.float64))
    want = want / want.sum(1, keepdims=True) + np.sqrt(want)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
