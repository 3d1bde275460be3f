"""fusegrad.jit in several threads: a recording is the recording thread's alone.

A thread that records a jitted step must not pick up the host hooks, tracked tensors or
guards of another thread's eager step (issue 27: thread B's Adam step count advanced on
every replay of thread A's step), and each thread trains exactly as it would alone.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn import functional as F

JOIN_TIMEOUT = 120  # seconds: a hang fails the test instead of hanging the suite

OPTIMIZERS = {
    "sgd": lambda ps: fg.optim.SGD(ps, lr=0.05),
    "momentum": lambda ps: fg.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: fg.optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: fg.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
}


def _model(seed: int):
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    with fg.no_grad():  # deterministic weights without the global generator (shared by threads)
        for p in model.parameters():
            p.copy_(fg.tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.5))
    return model


def _batches(seed: int, n: int = 4):
    rng = np.random.default_rng(100 + seed)
    return [
        (
            fg.tensor(rng.standard_normal((6, 4)).astype(np.float32)),
            fg.tensor(rng.integers(0, 3, 6)),
        )
        for _ in range(n)
    ]


class _Trainer:
    """One model, its optimizer and its data; `step()` trains on the next batch."""

    def __init__(self, opt_name: str, seed: int, jitted: bool, during_step=None):
        self.model = _model(seed)
        self.opt = OPTIMIZERS[opt_name](self.model.parameters())
        self.data = _batches(seed)
        self.losses: list[float] = []
        self.calls = 0

        def step(x, y):
            loss = F.cross_entropy(self.model(x), y)
            if during_step is not None:
                during_step()  # (reads no Python value: this function is replayed)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            return loss

        self.fn = fg.jit(step) if jitted else step

    def step(self) -> None:
        x, y = self.data[self.calls % len(self.data)]
        self.calls += 1
        self.losses.append(self.fn(x, y).item())

    def result(self):
        steps = [s["step"] for s in self.opt.state.values() if "step" in s]
        return self.losses, [p.numpy().copy() for p in self.model.parameters()], steps


def _serial(opt_name: str, seed: int, jitted: bool, steps: int):
    t = _Trainer(opt_name, seed, jitted)
    for _ in range(steps):
        t.step()
    return t.result()


def _run_threads(targets) -> None:
    errors: list[BaseException] = []

    def guarded(f):
        def run():
            try:
                f()
            except BaseException as e:  # noqa: BLE001  (reported by the test below)
                errors.append(e)

        return run

    threads = [threading.Thread(target=guarded(f), daemon=True) for f in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=JOIN_TIMEOUT)
        assert not t.is_alive(), "a training thread hung"
    if errors:
        raise errors[0]


def _assert_same(got, expected) -> None:
    losses, params, steps = got
    want_losses, want_params, want_steps = expected
    assert steps == want_steps
    assert losses == want_losses
    for a, b in zip(params, want_params):
        np.testing.assert_array_equal(a, b)


def test_an_eager_step_in_another_thread_stays_out_of_a_recording():
    """Thread B's Adam step runs while thread A records its jitted Adam step (forced by
    events at exactly that point); A then replays 20 times. Neither sees the other."""
    steps_a, steps_b = 23, 6
    b_turn, b_done = threading.Event(), threading.Event()
    a_finished = threading.Event()

    def during_a():
        if a.calls in (2, 3):  # the two recorded calls (the first is a warm-up)
            b_turn.set()
            assert b_done.wait(JOIN_TIMEOUT)
            b_done.clear()

    a = _Trainer("adam", 1, jitted=True, during_step=during_a)
    b = _Trainer("adam", 2, jitted=False)

    def run_a():
        for _ in range(steps_a):
            a.step()
        a_finished.set()

    def run_b():
        for k in range(steps_b):
            if k < 2:  # inside A's recorded calls
                assert b_turn.wait(JOIN_TIMEOUT)
                b_turn.clear()
                b.step()
                b_done.set()
            else:  # the rest while A replays
                b.step()
        assert a_finished.wait(JOIN_TIMEOUT)

    _run_threads([run_a, run_b])
    assert a.fn.replays == steps_a - 3
    _assert_same(b.result(), _serial("adam", 2, False, steps_b))
    assert b.result()[2] == [steps_b] * 4  # Adam's step count: one per step, not per replay
    _assert_same(a.result(), _serial("adam", 1, True, steps_a))


def test_eight_models_in_eight_threads_train_as_they_do_alone():
    steps = 12
    configs = [
        (name, seed, jitted)
        for seed, (name, jitted) in enumerate(
            [(n, j) for n in sorted(OPTIMIZERS) for j in (True, False)]
        )
    ]
    # a pause inside each step's Python lets the other threads run their steps meanwhile
    # (so eager steps happen while jitted ones record)
    trainers = [
        _Trainer(name, seed, jitted, during_step=lambda: time.sleep(0.002))
        for name, seed, jitted in configs
    ]
    start = threading.Barrier(len(trainers), timeout=JOIN_TIMEOUT)

    def run(t):
        def go():
            start.wait()
            for _ in range(steps):
                t.step()

        return go

    _run_threads([run(t) for t in trainers])
    for (name, seed, jitted), t in zip(configs, trainers):
        if jitted:
            assert t.fn.replays == steps - 3, name
        _assert_same(t.result(), _serial(name, seed, jitted, steps))


def test_a_replay_leaves_the_tensors_of_models_it_does_not_use_alone():
    """A replay reads the current value of the parameters its kernels read, and only those:
    another model's parameter with a pending (lazy) value, as in the middle of another
    thread's optimizer step, is neither computed nor touched."""
    a = _Trainer("sgd", 1, jitted=True)
    other = nn.Linear(4, 2)
    for _ in range(4):
        a.step()
    with fg.no_grad():
        other.weight.assign_(other.weight * 2.0)
    pending = other.weight.node
    a.step()
    assert a.fn.replays == 2
    assert other.weight.node is pending
    assert not other.weight._has_value()


def test_two_threads_compiling_one_structure_keep_one_plan(monkeypatch):
    """Both threads miss the plan cache and compile (forced by a barrier in the compiler):
    they must end up with the same plan, as jit tells recorded calls apart by plan."""
    import fusegrad.runtime.engine as engine_module

    both_missed = threading.Barrier(2, timeout=JOIN_TIMEOUT)
    compile_plan = engine_module.compile_plan

    def compile_after_both_missed(*args, **kwargs):
        both_missed.wait()
        return compile_plan(*args, **kwargs)

    monkeypatch.setattr(engine_module, "compile_plan", compile_after_both_missed)
    plans = []

    def plan():
        x = fg.tensor(np.ones((3, 7919), np.float32))  # a shape no other test uses
        y = (x * 1.25 + 0.5).sum(1)
        plans.append(engine_module.engine.plan_for([y.node])[0])

    _run_threads([plan, plan])
    assert plans[0] is plans[1]


def test_grad_mode_is_per_thread():
    """As in torch: `no_grad()` (or `inference_mode()`) in one thread leaves gradients on
    in another, including a thread that never set a mode."""
    inside, leave = threading.Event(), threading.Event()
    seen = {}
    w = nn.Parameter(fg.ones(3))

    def without_grad():
        with fg.no_grad(), fg.inference_mode():
            inside.set()
            assert leave.wait(JOIN_TIMEOUT)
            seen["no_grad"] = (w * 2).requires_grad

    def with_grad():
        assert inside.wait(JOIN_TIMEOUT)
        seen["grad"] = (w * 2).requires_grad
        seen["inference"] = fg.is_inference_mode_enabled()
        with fg.no_grad(), fg.enable_grad():
            seen["enable_grad"] = (w * 2).requires_grad
        leave.set()

    _run_threads([without_grad, with_grad])
    assert seen == {"no_grad": False, "grad": True, "inference": False, "enable_grad": True}


class _RunningMean(nn.Module):
    """A hand-written running mean: a lazy new value for a module attribute each call."""

    def __init__(self, in_place: bool):
        super().__init__()
        self.in_place = in_place
        self.mean = fg.zeros(4)

    def forward(self, x):
        new = 0.9 * self.mean + 0.1 * x.mean(0)
        if self.in_place:
            with fg.no_grad():
                self.mean.copy_(new)
        else:
            self.mean = new
        return x - self.mean


@pytest.mark.parametrize("in_place", [False, True], ids=["rebound", "in_place"])
def test_module_attributes_another_thread_writes_stay_out_of_a_recording(in_place):
    """Thread B updates its own module's running mean (lazily) while thread A records its
    jitted step: A neither computes B's update nor replays it."""
    b_turn, b_done = threading.Event(), threading.Event()

    def during_a():
        if a.calls in (2, 3):
            b_turn.set()
            assert b_done.wait(JOIN_TIMEOUT)
            b_done.clear()

    a = _Trainer("sgd", 1, jitted=True, during_step=during_a)
    running = _RunningMean(in_place)
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(2)]
    xs = [fg.tensor(x) for x in batches]

    def run_a():
        for _ in range(8):
            a.step()

    def run_b():
        for x in xs:
            assert b_turn.wait(JOIN_TIMEOUT)
            b_turn.clear()
            running(x)
            b_done.set()

    _run_threads([run_a, run_b])
    assert a.fn.replays == 5
    _assert_same(a.result(), _serial("sgd", 1, True, 8))
    want = np.zeros(4, np.float32)
    for x in batches:
        want = 0.9 * want + 0.1 * x.mean(0)
    np.testing.assert_allclose(running.mean.numpy(), want, rtol=1e-5)


def test_a_value_read_in_another_thread_is_not_refused_while_one_records():
    """`nonzero` reads its input on the host (refused inside a recording): thread B may
    call it eagerly while thread A records."""
    b_turn, b_done = threading.Event(), threading.Event()

    def during_a():
        if a.calls == 2:
            b_turn.set()
            assert b_done.wait(JOIN_TIMEOUT)

    a = _Trainer("sgd", 1, jitted=True, during_step=during_a)
    found = []

    def run_a():
        for _ in range(4):
            a.step()

    def run_b():
        assert b_turn.wait(JOIN_TIMEOUT)
        try:
            found.append(fg.tensor([0.0, 2.0, 0.0, 3.0]).nonzero().tolist())
        finally:
            b_done.set()

    _run_threads([run_a, run_b])
    assert found == [[[1], [3]]]
    assert a.fn.replays == 1
