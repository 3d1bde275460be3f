"""fusegrad.jit: a replayed step must compute exactly what the eager step computes."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn import functional as F


def _model(dropout: float = 0.0):
    fg.manual_seed(0)
    layers = [nn.Linear(6, 16), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers, nn.Linear(16, 3))


def _data(n: int = 5, batch: int = 8):
    rng = np.random.default_rng(1)
    return [
        (
            fg.tensor(rng.standard_normal((batch, 6)).astype(np.float32)),
            fg.tensor(rng.integers(0, 3, batch)),
        )
        for _ in range(n)
    ]


def _stepper(model, opt):
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def _train(make_opt, steps: int, jitted: bool, dropout: float = 0.0, on_step=None):
    model = _model(dropout)
    opt = make_opt(model.parameters())
    step = _stepper(model, opt)
    if jitted:
        step = fg.jit(step)
    fg.manual_seed(7)  # the dropout masks' stream
    losses = []
    data = _data()
    for i in range(steps):
        if on_step:
            on_step(i, opt)
        losses.append(step(*data[i % len(data)]))
    return [t.item() for t in losses], [p.numpy().copy() for p in model.parameters()], step


OPTIMIZERS = {
    "sgd": lambda ps: fg.optim.SGD(ps, lr=0.05),
    "sgd_momentum_nesterov_wd": lambda ps: fg.optim.SGD(
        ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3
    ),
    "adam": lambda ps: fg.optim.Adam(ps, lr=1e-2),
    "adamw_amsgrad": lambda ps: fg.optim.AdamW(ps, lr=1e-2, amsgrad=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_replay_equals_eager(name):
    eager_losses, eager_params, _ = _train(OPTIMIZERS[name], 9, jitted=False)
    jit_losses, jit_params, step = _train(OPTIMIZERS[name], 9, jitted=True)
    assert step.replays == 9 - 3  # one warm-up call and two recorded calls
    assert jit_losses == eager_losses  # the same kernels on the same inputs: bit for bit
    for a, b in zip(eager_params, jit_params):
        np.testing.assert_array_equal(a, b)


def test_replay_draws_the_same_dropout_masks():
    def run(jitted):
        return _train(OPTIMIZERS["adam"], 8, jitted=jitted, dropout=0.5)

    eager_losses, eager_params, _ = run(False)
    jit_losses, jit_params, step = run(True)
    assert step.replays == 5
    assert jit_losses == eager_losses
    for a, b in zip(eager_params, jit_params):
        np.testing.assert_array_equal(a, b)


def test_learning_rate_changes_reach_replays():
    def schedule(i, opt):
        for g in opt.param_groups:
            g["lr"] = 0.1 / (1 + i)

    eager_losses, eager_params, _ = _train(OPTIMIZERS["sgd"], 8, False, on_step=schedule)
    jit_losses, jit_params, step = _train(OPTIMIZERS["sgd"], 8, True, on_step=schedule)
    assert step.replays == 5
    assert jit_losses == eager_losses
    for a, b in zip(eager_params, jit_params):
        np.testing.assert_array_equal(a, b)


def test_results_are_fresh_tensors_and_state_is_current():
    model = _model()
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    step = fg.jit(_stepper(model, opt))
    x, y = _data(1)[0]
    losses = [step(x, y) for _ in range(6)]
    values = [t.item() for t in losses]
    assert len(set(values)) == 6  # each call's loss is its own (training changes it)
    assert values == sorted(values, reverse=True)  # same batch: the loss goes down
    # the parameters the Python objects hold are the replayed ones: one more eager step agrees
    w = model[0].weight.numpy().copy()
    expected = F.cross_entropy(model(x), y).item()
    assert step(x, y).item() == pytest.approx(expected, rel=1e-6)
    assert not np.array_equal(model[0].weight.numpy(), w)
    assert fg.kernels(losses[-1])  # replayed results carry their kernel records


def test_new_shapes_record_again():
    model = _model()
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    step = fg.jit(_stepper(model, opt))
    small, big = _data(1, batch=4)[0], _data(1, batch=8)[0]
    for _ in range(4):
        step(*small)
    assert step.replays == 1
    step(*big)  # a new signature: eager again, then recorded
    assert step.replays == 1


def test_host_data_made_inside_the_step_is_refused():
    w = nn.Parameter(fg.ones(3))
    opt = fg.optim.SGD([w], lr=0.1)
    rng = np.random.default_rng(0)

    @fg.jit
    def step(x):
        noise = fg.tensor(rng.standard_normal(3).astype(np.float32))  # a new buffer every call
        loss = ((w * x + noise) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    x = fg.ones(3)
    step(x)
    step(x)
    refused = r"made at test_jit\.py:\d+\) that is a new buffer every call"
    with pytest.raises(fg.JitError, match=refused):
        step(x)


def test_bad_arguments_and_results():
    @fg.jit
    def number(x):
        return (x * 2).sum().item()

    with pytest.raises(fg.JitError, match="neither a tensor nor hashable"):
        number(fg.ones(3), [1, 2])
    with pytest.raises(fg.JitError, match="returns a tensor"):
        number(fg.ones(3))  # refused on the first call already, not only once recording starts
    for _ in range(2):  # recorded calls: the .item() inside is refused before the result
        with pytest.raises(fg.JitError, match="returns a tensor|reads a tensor's value"):
            number(fg.ones(3))


def test_a_graph_that_changes_is_refused():
    calls = {"n": 0}

    @fg.jit
    def step(x):
        calls["n"] += 1
        y = x * 2 if calls["n"] % 2 else x.exp()
        return y.sum()

    x = fg.ones(3)
    step(x)
    step(x)
    with pytest.raises(fg.JitError, match="different graphs"):
        step(x)


def test_forward_only_function():
    @fg.jit
    def f(a, b):
        return (a @ b).relu(), a.sum()

    rng = np.random.default_rng(3)
    for _ in range(5):
        a = rng.standard_normal((4, 5)).astype(np.float32)
        b = rng.standard_normal((5, 2)).astype(np.float32)
        y, s = f(fg.tensor(a), fg.tensor(b))
        np.testing.assert_allclose(y.numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)
        assert s.item() == pytest.approx(a.sum(), rel=1e-5)
    assert f.replays == 2


def test_shared_index_tables_are_read_only():
    a = fg.arange(5)
    with pytest.raises(ValueError):
        a.numpy()[0] = 7
    assert fg.arange(5).tolist() == [0, 1, 2, 3, 4]


def test_module_doc_example():
    import sys

    result = doctest.testmod(sys.modules["fusegrad.jit"])
    assert result.attempted > 0 and result.failed == 0


def test_interleaved_shapes_and_eager_steps_share_the_parameters():
    """Two batch shapes (two recordings) and eager steps, alternating, update one model."""

    def run(jitted):
        model = _model()
        opt = fg.optim.Adam(model.parameters(), lr=1e-2)
        step = _stepper(model, opt)
        fast = fg.jit(step) if jitted else step
        small, big = _data(3, batch=4), _data(3, batch=8)
        losses = []
        for i in range(12):
            x, y = (small if i % 2 else big)[i % 3]
            run_step = step if i % 5 == 4 else fast  # now and then an eager step in between
            losses.append(run_step(x, y).item())
        return losses, [p.numpy().copy() for p in model.parameters()], fast

    eager_losses, eager_params, _ = run(False)
    jit_losses, jit_params, fast = run(True)
    assert fast.replays > 0
    assert jit_losses == eager_losses
    for a, b in zip(eager_params, jit_params):
        np.testing.assert_array_equal(a, b)


UPDATES = {
    "p -= lr * p.grad": lambda p: p.sub_(0.2 * p.grad),
    "p.data.add_(p.grad, alpha=-lr)": lambda p: p.data.add_(p.grad, alpha=-0.2),
    "clip, then p.data.add_": None,  # (clip_grad_norm_ first)
}


@pytest.mark.parametrize("spelling", list(UPDATES))
def test_a_hand_written_update_is_replayed(spelling):
    """Parameters updated by hand inside the function (under no_grad, or through .data)
    are replay state, as an optimizer's: the replays train as the eager steps do."""

    def losses(jit: bool):
        model = _model()

        def step(x, y):
            loss = F.cross_entropy(model(x), y)
            model.zero_grad()
            loss.backward()
            if UPDATES[spelling] is None:
                nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            with fg.no_grad():
                for p in model.parameters():
                    (UPDATES[spelling] or UPDATES["p.data.add_(p.grad, alpha=-lr)"])(p)
            return loss

        fn = fg.jit(step) if jit else step
        out = [fn(x, y).item() for x, y in _data(8)]
        return out, [p.numpy().copy() for p in model.parameters()], getattr(fn, "replays", 0)

    (eager, eager_params, _), (jitted, jit_params, replays) = losses(False), losses(True)
    assert replays >= 4
    np.testing.assert_allclose(jitted, eager, rtol=1e-5)
    for a, b in zip(eager_params, jit_params):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_values_carried_between_calls_are_refused():
    state = {"h": fg.zeros(3)}

    @fg.jit
    def rnn_step(x):
        h = (state["h"] * 0.5 + x).tanh()
        h.realize()
        state["h"] = h
        return h

    x = fg.tensor([1.0, 2.0, 3.0])
    for _ in range(2):
        rnn_step(x)
    with pytest.raises(fg.JitError, match="carried from call to call"):
        rnn_step(x)


def test_a_jitted_evaluation_sees_weights_trained_elsewhere():
    model = _model()
    opt = fg.optim.SGD(model.parameters(), lr=0.5)
    train = _stepper(model, opt)

    @fg.jit
    def evaluate(x):
        with fg.no_grad():
            return model(x)

    x, y = _data(1)[0]
    for _ in range(3):
        evaluate(x)  # recorded while the weights stand still
    for _ in range(3):
        train(x, y)  # eager training gives the parameters new buffers
        np.testing.assert_array_equal(evaluate(x).numpy(), model(x).numpy())
    assert evaluate.replays == 3


def test_guards_record_again_when_the_graph_would_change():
    def run(jitted):
        model = _model(dropout=0.5)
        opt = fg.optim.SGD(model.parameters(), lr=0.05)
        step = _stepper(model, opt)
        step = fg.jit(step) if jitted else step
        fg.manual_seed(3)
        losses = []
        for i, (x, y) in enumerate(_data(5) * 3):
            if i == 6:
                model.eval()  # no dropout from here: a different graph
            if i == 10:
                opt.param_groups[0]["momentum"] = 0.9  # a momentum term appears
            losses.append(step(x, y).item())
        return losses, step

    eager, _ = run(False)
    jitted, step = run(True)
    assert jitted == eager
    assert step.replays > 0


def test_no_grad_around_a_call_is_its_own_recording():
    w = nn.Parameter(fg.tensor([1.0, 2.0]))

    @fg.jit
    def f(x):
        return (w * x).sum()

    x = fg.tensor([3.0, 4.0])
    for _ in range(4):
        assert f(x).requires_grad is False  # results are plain values either way
    with fg.no_grad():
        assert f(x).item() == 11.0


def test_frozen_parameters_are_read_at_their_current_value():
    table = nn.Parameter(fg.tensor(np.arange(6, dtype=np.float32).reshape(3, 2)), False)

    @fg.jit
    def lookup(ids):
        return F.embedding(ids, table)

    ids = fg.tensor(np.array([2, 0]))
    for _ in range(4):
        assert lookup(ids).tolist() == [[4.0, 5.0], [0.0, 1.0]]
    table.assign_(fg.tensor(np.full((3, 2), 7.0, np.float32)))  # as load_state_dict does
    table.realize()
    assert lookup(ids).tolist() == [[7.0, 7.0], [7.0, 7.0]]
    assert lookup.replays >= 2


@settings(max_examples=8, deadline=None)
@given(
    widths=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    act=st.sampled_from(["relu", "tanh", "sigmoid"]),
    dropout=st.sampled_from([0.0, 0.3]),
    opt_name=st.sampled_from(sorted(OPTIMIZERS)),
    batches=st.lists(st.sampled_from([3, 5]), min_size=4, max_size=9),
)
def test_random_models_replay_exactly_as_they_run_eagerly(widths, act, dropout, opt_name, batches):
    """Any small model, optimizer and sequence of batch shapes: jit and eager agree bit for bit."""
    acts = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}
    rng = np.random.default_rng(len(batches))
    data = {
        b: (
            fg.tensor(rng.standard_normal((b, 4)).astype(np.float32)),
            fg.tensor(rng.integers(0, 3, b)),
        )
        for b in (3, 5)
    }

    def run(jitted):
        fg.manual_seed(1)
        layers, width = [], 4
        for w in widths:
            layers += [nn.Linear(width, w), acts[act]()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = w
        model = nn.Sequential(*layers, nn.Linear(width, 3))
        step = _stepper(model, OPTIMIZERS[opt_name](model.parameters()))
        step = fg.jit(step) if jitted else step
        fg.manual_seed(2)
        losses = [step(*data[b]).item() for b in batches]
        return losses, [p.numpy().copy() for p in model.parameters()]

    (eager, eager_params), (jitted, jit_params) = run(False), run(True)
    assert jitted == eager
    for a, b in zip(eager_params, jit_params):
        np.testing.assert_array_equal(a, b)


def test_numpy_arguments_are_converted_before_the_call():
    w = nn.Parameter(fg.tensor([1.0, 2.0]))
    opt = fg.optim.SGD([w], lr=0.1)

    @fg.jit
    def step(x):
        loss = (w * x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    values = [step(np.array([1.0, float(i)], np.float32)).item() for i in range(5)]
    assert step.replays == 2
    w_eager = np.array([1.0, 2.0])
    want = []
    for i in range(5):
        x = np.array([1.0, float(i)])
        want.append(float((w_eager * x).sum()))
        w_eager = w_eager - 0.1 * x
    np.testing.assert_allclose(values, want, rtol=1e-6)


@pytest.mark.parametrize("in_place", [False, True], ids=["rebound", "in_place"])
def test_a_running_mean_updated_in_place_keeps_running(in_place):
    """A module attribute given a lazy new value in place (`copy_`, `+=` under no_grad) is
    computed by each replay, as one reassigned is."""

    class RunningMean(nn.Module):
        def __init__(self):
            super().__init__()
            self.mean = fg.zeros(3)

        def forward(self, x):
            new = 0.9 * self.mean + 0.1 * x.mean(0)
            if in_place:
                with fg.no_grad():
                    self.mean.copy_(new)
            else:
                self.mean = new
            return x - self.mean

    m = RunningMean()
    f = fg.jit(lambda x: m(x))
    want = np.zeros(3)
    for k in range(8):
        x = np.full((2, 3), float(k), np.float32)
        f(fg.tensor(x))
        want = 0.9 * want + 0.1 * x.mean(0)
        np.testing.assert_allclose(m.mean.numpy(), want, rtol=1e-5)
    assert f.replays == 5
