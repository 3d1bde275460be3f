"""The engine: threads, fork, memory that stays flat, deep graphs, and the plain training
loop's cached steps (frontend/stepcache.py) computing exactly what the full path does."""

from __future__ import annotations

import gc
import os
import sys
import threading
import weakref

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.nn import functional as F
from fusegrad.runtime import buffer as buffer_module
from fusegrad.runtime import pool
from fusegrad.runtime.engine import engine

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))


# ---------------------------------------------------------------- threads and fork


def _mixed_steps(seed: int, steps: int, errors: list) -> None:
    """Forward, .numpy(), backward and matmul on shapes shared with other threads and
    shapes of this thread's own, some large enough to run on the worker pool."""
    rng = np.random.default_rng(seed)
    try:
        for i in range(steps):
            n = (64, 1 << 16, 32 + seed)[i % 3]  # equal shapes across threads, and a private one
            a = rng.standard_normal(n).astype(np.float32)
            x = fg.tensor(a, requires_grad=True)
            y = ((x * 0.5).exp() * x).sum()
            want = float(np.sum(np.exp(a.astype(np.float64) * 0.5) * a))
            got = y.item()
            assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (seed, i, got, want)
            y.backward()
            g = np.exp(a * 0.5) * (1 + 0.5 * a)
            np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-4, atol=1e-5)
            m = rng.standard_normal((48, 40 + (i % 2))).astype(np.float32)
            w = rng.standard_normal((40 + (i % 2), 24)).astype(np.float32)
            np.testing.assert_allclose(
                (fg.tensor(m) @ fg.tensor(w)).numpy(), m @ w, rtol=1e-4, atol=1e-4
            )
    except BaseException as e:  # reported by the main thread
        errors.append(e)


def test_four_threads_mixed_steps_give_right_answers_without_hanging():
    errors: list = []
    threads = [
        threading.Thread(target=_mixed_steps, args=(k, 200, errors), daemon=True) for k in range(4)
    ]
    with fg.config.override(threads=2):
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_computes_after_its_parent_used_the_pool():
    """The CPU's worker pool, so on the CPU whatever the test device: a child forked from
    a process that used a GPU may not use the GPU (tests/runtime/test_cuda_pool.py)."""
    with fg.config.override(threads=2):
        big = fg.ones(1 << 20, device="cpu")
        assert (big * 2).sum().item() == 2 * (1 << 20)  # the parent's pool has run
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its pool's threads do not exist until it makes new ones
            try:
                ok = (fg.ones(1 << 20, device="cpu") * 3).sum().item() == 3 * (1 << 20)
                os.write(w, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(w)
        got = os.read(r, 1)
        os.waitpid(pid, 0)
    assert got == b"1"


def test_more_threads_than_cpus_still_runs_programs_at_the_cpus_count():
    from fusegrad.runtime.launch import _usable_cpus, effective_threads

    with fg.config.override(threads=64):
        assert effective_threads() == min(64, _usable_cpus())
        x = fg.tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
        for _ in range(2):  # the second run is one native program
            out = (x.softmax(1) * 2).numpy()
    np.testing.assert_allclose(out.sum(1), [2, 2], rtol=1e-6)


# ---------------------------------------------------------------- memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_memory_stays_flat_over_500_eager_lenet_steps():
    from lenet_mnist import LeNet5

    fg.manual_seed(0)
    model = LeNet5()
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 8)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(fg.tensor(x)), fg.tensor(y))
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(50):  # compile, fill the pools
        step()
    gc.collect()
    live, values, rss = buffer_module.live_buffers, len(engine._values), _rss_mb()
    for _ in range(500):
        step()
    gc.collect()
    assert buffer_module.live_buffers <= live
    assert len(engine._values) <= values
    assert _rss_mb() - rss < 20, (rss, _rss_mb())


def test_eager_convolutions_do_not_keep_their_inputs_alive():
    conv = nn.Conv2d(1, 2, 3)
    gc.collect()
    start = buffer_module.live_buffers
    for _ in range(5):
        conv(fg.randn(2, 1, 6, 6)).sum().item()
        gc.collect()
    assert buffer_module.live_buffers <= start + 1


def test_the_plan_cache_is_bounded():
    with fg.config.override(plan_cache_size=8):
        for n in range(1, 30):
            (fg.ones(n) * 2).numpy()
        assert len(engine.plans) <= 8
    (fg.ones(3) * 2).numpy()


# ---------------------------------------------------------------- deep graphs


def test_a_100000_term_chain_and_its_gradient():
    """No recursion on graph depth: toposort, autodiff, key, schedule, lowering."""
    n = 100_000
    x = fg.tensor(np.ones(4, np.float32), requires_grad=True)
    ts = [fg.tensor(np.full(4, k % 5, np.float32)) for k in range(400)]  # distinct tensors
    y = x
    for i in range(n):
        y = y + ts[i % len(ts)]
    total = y.sum()
    assert total.item() == pytest.approx(4 * (1 + (n // 5) * (0 + 1 + 2 + 3 + 4)))
    total.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(4, np.float32))


def test_the_reference_evaluator_takes_deep_graphs():
    from fusegrad.ir.reference import evaluate

    x = fg.ones(3)
    y = x
    for _ in range(20_000):
        y = y * 1.0
    assert evaluate(y.node).tolist() == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------- the plain loop's cache


def _mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def _convnet():
    """Convolution, ReLU and max-pooling (whose gradient reads a shared `arange` table)."""
    return nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(48, 3)
    )


def _mlp_batches(rng, b):
    return rng.standard_normal((b, 6)).astype(np.float32), rng.integers(0, 3, b)


def _conv_batches(rng, b):
    return rng.standard_normal((b, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, b)


def _cached_and_full_agree(make_model, make_opt, batches, read_loss_first=False, micro=1):
    """The same loop twice: once with every step built in full (the step cache emptied
    before each step), once cached; parameters and losses must agree exactly, and the
    cached run must have hit the cache. `micro`: backward() calls a step, each over its
    share of the batch (gradient accumulation), the loss of each divided by `micro`."""
    runs = []
    for cached in (False, True):
        fg.manual_seed(3)
        model = make_model()
        opt = make_opt(model.parameters())
        losses = []
        for x, y in batches:
            if not cached:
                opt._steps.entries.clear()
            opt.zero_grad()
            for part in range(micro):
                rows = slice(part * len(x) // micro, (part + 1) * len(x) // micro)
                loss = F.cross_entropy(model(fg.tensor(x[rows])), fg.tensor(y[rows])) / micro
                loss.backward()
            if read_loss_first:
                losses.append(loss.item())
            opt.step()
            if not read_loss_first:
                losses.append(loss.item())
        runs.append((losses, [p.numpy().copy() for p in model.parameters()], opt._steps.hits))
    (l0, p0, hits0), (l1, p1, hits1) = runs
    assert hits0 == 0 and hits1 >= 4
    assert l0 == l1
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
        lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
        lambda ps: optim.AdamW(ps, lr=0.01),
    ],
)
@pytest.mark.parametrize("model_and_data", [(_mlp, _mlp_batches), (_convnet, _conv_batches)])
def test_cached_plain_steps_equal_the_full_path_bit_for_bit(make_opt, model_and_data):
    make_model, make_batch = model_and_data
    rng = np.random.default_rng(1)
    batches = [make_batch(rng, b) for b in (5, 5, 7, 5, 7, 5, 5, 5)]
    _cached_and_full_agree(make_model, make_opt, batches)


def _clip_runs(clip, steps: int = 8, deferred: bool = True, grads=None):
    """An AdamW loop over an MLP that clips its gradients (`clip(model)`, whose result is
    read after the step when it returns one) between backward() and step(): the losses,
    the read results, the parameters and the step cache's hits. `deferred` False: the
    clip is run eagerly (`clip_when_built` refused), as before deferral."""
    from fusegrad.nn import clip_grad

    real = clip_grad.clip_when_built
    if not deferred:
        clip_grad.clip_when_built = lambda *a, **k: None
    try:
        fg.manual_seed(3)
        model = _mlp()
        opt = optim.AdamW(model.parameters(), lr=0.05)
        rng = np.random.default_rng(1)
        losses, results = [], []
        for k in range(steps):
            x, y = _mlp_batches(rng, 5)
            if grads is not None:  # special points: the loss's scale, so the gradients'
                x = x * grads[k % len(grads)]
            opt.zero_grad()
            loss = F.cross_entropy(model(fg.tensor(x)), fg.tensor(y))
            loss.backward()
            result = clip(model)
            opt.step()
            losses.append(loss.item())
            if result is not None:
                results.append(result.item())
        return losses, results, [p.numpy().copy() for p in model.parameters()], opt._steps.hits
    finally:
        clip_grad.clip_when_built = real


_CLIPS = {
    "norm 2": lambda m: (nn.utils.clip_grad_norm_(m.parameters(), 0.3), None)[1],
    "norm inf": lambda m: (nn.utils.clip_grad_norm_(m.parameters(), 0.05, float("inf")), None)[1],
    "norm 1.5": lambda m: (nn.utils.clip_grad_norm_(m.parameters(), 0.2, 1.5), None)[1],
    "value": lambda m: nn.utils.clip_grad_value_(m.parameters(), 0.01),
    "norm, then value of a layer": lambda m: (
        nn.utils.clip_grad_norm_(m.parameters(), 0.3),
        nn.utils.clip_grad_value_(m[0].parameters(), 0.01),
    )[1],
    "norm of a layer": lambda m: (nn.utils.clip_grad_norm_(m[2].parameters(), 0.1), None)[1],
}


@pytest.mark.parametrize("name", sorted(_CLIPS))
def test_a_clipped_step_is_cached_and_equals_the_eager_clip_bit_for_bit(name):
    """`clip_grad_norm_` / `clip_grad_value_` of gradients backward() has not built run
    when they are built: the optimizer's cached step clips, where each step derived its
    gradients again before; losses and weights are the eager clip's, bit for bit."""
    eager = _clip_runs(_CLIPS[name], deferred=False)
    cached = _clip_runs(_CLIPS[name])
    assert eager[3] == 0 and cached[3] == 7
    assert eager[0] == cached[0]
    for a, b in zip(eager[2], cached[2]):
        np.testing.assert_array_equal(a, b)


def test_clipping_at_special_points_equals_the_eager_clip():
    """Gradients of zero (a norm of 0: nothing scaled), of 1, huge (scaled down), and
    NaN (an input of NaN: the norm and every gradient NaN, as torch without
    `error_if_nonfinite`), deferred and eager alike."""
    clip = _CLIPS["norm 2"]
    scales = [0.0, 1.0, 1e30, float("nan"), -0.0]
    eager = _clip_runs(clip, steps=5, deferred=False, grads=scales)
    cached = _clip_runs(clip, steps=5, grads=scales)
    np.testing.assert_array_equal(eager[0], cached[0])  # (NaN equal to NaN here)
    for a, b in zip(eager[2], cached[2]):
        np.testing.assert_array_equal(a, b)


def test_a_clips_norm_read_before_or_after_the_step_is_the_eager_one():
    """The norm `clip_grad_norm_` returns is built with the gradients when read: before
    the step (then the step builds them as before), or after it (a norm kept across the
    step is computed with it)."""
    kept = lambda m: nn.utils.clip_grad_norm_(m.parameters(), 0.3)  # noqa: E731
    eager, deferred = _clip_runs(kept, deferred=False), _clip_runs(kept)
    assert eager[1] == deferred[1] and len(eager[1]) == 8 and eager[0] == deferred[0]
    for a, b in zip(eager[2], deferred[2]):
        np.testing.assert_array_equal(a, b)

    def read_first(m):
        total = nn.utils.clip_grad_norm_(m.parameters(), 0.3)
        assert total.shape == () and total.dtype == fg.float32
        total.item()  # before the step: the gradients are built here
        return total

    eager, deferred = _clip_runs(read_first, deferred=False), _clip_runs(read_first)
    assert eager[1] == deferred[1] and eager[0] == deferred[0]


def test_a_scaled_gradient_taken_before_a_clip_keeps_the_unclipped_value():
    """`s = 0.5 * p.grad` made before `clip_grad_norm_` is half the gradient as it was then
    (`ScaledGrad`), eager or deferred; `p.grad` itself is clipped."""
    fg.manual_seed(0)
    model = _mlp()
    x = fg.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6))
    (model(x) ** 2).sum().backward()
    w = model[0].weight
    half = 0.5 * w.grad
    total = nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    raw = 2 * half.numpy()
    clipped = w.grad.numpy()
    np.testing.assert_allclose(clipped, raw * (1e-3 / (total.item() + 1e-6)), rtol=1e-5)
    assert np.abs(raw).max() > 10 * np.abs(clipped).max()


def test_a_loss_read_before_the_step_still_hits_the_cache():
    """`loss.backward(); loss.item(); opt.step()`: the step computes the loss again with
    the backward (its activations were not kept) and is cached like any other."""
    rng = np.random.default_rng(2)
    batches = [_conv_batches(rng, 5) for _ in range(6)]
    _cached_and_full_agree(
        _convnet,
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
        batches,
        read_loss_first=True,
    )


def test_a_gradient_read_after_a_cached_step_is_the_step_gradient():
    fg.manual_seed(0)
    model = _mlp()
    opt = optim.SGD(model.parameters(), lr=0.1)
    x = fg.tensor(np.ones((2, 6), np.float32))
    for _ in range(3):
        opt.zero_grad()
        model(x).sum().backward()
        w_before = model[0].weight.numpy().copy()
        opt.step()
    assert opt._steps.hits >= 1
    g = model[0].weight.grad.numpy()  # built now, from the graph of that step's backward()
    np.testing.assert_allclose(model[0].weight.numpy(), w_before - 0.1 * g, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("micro", [2, 3])
@pytest.mark.parametrize("model_and_data", [(_mlp, _mlp_batches), (_convnet, _conv_batches)])
def test_gradients_accumulated_over_micro_batches_hit_the_cache_bit_for_bit(micro, model_and_data):
    """Several backward() calls before a step (gradient accumulation): each gradient is
    the sum of theirs, still unbuilt, so the step is cached as a single backward's is."""
    make_model, make_batch = model_and_data
    rng = np.random.default_rng(4)
    batches = [make_batch(rng, 6) for _ in range(7)]
    make_opt = lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.01)  # noqa: E731
    _cached_and_full_agree(make_model, make_opt, batches, micro=micro)
    _cached_and_full_agree(make_model, make_opt, batches, read_loss_first=True, micro=micro)


def test_accumulated_gradients_are_the_sum_of_each_call_s():
    # two calls, x then 2x, through a linear layer: 2 + 4 per weight (the rows summed);
    # a parameter only the second call reaches has that call's gradient alone; the
    # gradient read after a cached step is built from both calls' graphs
    fg.manual_seed(0)
    model, extra = nn.Linear(6, 3), nn.Linear(6, 3)
    opt = optim.SGD([*model.parameters(), *extra.parameters()], lr=0.5)
    x = fg.tensor(np.ones((2, 6), np.float32))
    w = model.weight.numpy().copy()
    for step in range(1, 5):
        opt.zero_grad()
        model(x).sum().backward()
        (model(x * 2) + extra(x)).sum().backward()
        opt.step()
        np.testing.assert_allclose(model.weight.numpy(), w - 0.5 * 6 * step, rtol=1e-6)
    assert opt._steps.hits >= 2
    np.testing.assert_array_equal(model.weight.grad.numpy(), np.full((3, 6), 6.0))
    np.testing.assert_array_equal(model.bias.grad.numpy(), np.full(3, 4.0))
    np.testing.assert_array_equal(extra.weight.grad.numpy(), np.full((3, 6), 2.0))


def test_accumulated_gradients_keep_negative_zero_as_torch():
    # -0.0 + -0.0 is -0.0 (torch's `grad += new`), read after the steps; onto zero_()'s
    # +0.0 it is +0.0, as torch's
    w = nn.Parameter(fg.tensor([1.0, 2.0]))
    opt = optim.SGD([w], lr=1.0)
    for _ in range(4):
        opt.zero_grad()
        (w * -0.0).sum().backward()
        (w * -0.0).sum().backward()
        opt.step()
        assert w.grad.tolist() == [0.0, 0.0] and np.signbit(w.grad.numpy()).all()
    w.grad.zero_()
    (w * -0.0).sum().backward()
    (w * -0.0).sum().backward()
    assert not np.signbit(w.grad.numpy()).any()


def test_an_earlier_gradient_changed_after_accumulation_leaves_the_sum_alone():
    fg.manual_seed(1)
    w = nn.Parameter(fg.tensor([1.0, -2.0]))
    (w * 3).sum().backward()
    first = w.grad
    (w * w).sum().backward()
    first.zero_()  # (torch's p.grad would be this very tensor: fusegrad's sum is new)
    assert w.grad.tolist() == [5.0, -1.0]


def test_a_gradient_read_between_backward_calls_takes_the_full_path():
    fg.manual_seed(0)
    model = _mlp()
    opt = optim.SGD(model.parameters(), lr=0.1)
    x = fg.tensor(np.ones((2, 6), np.float32))
    for _ in range(3):
        opt.zero_grad()
        model(x).sum().backward()
        norm = float(model[0].weight.grad.norm())  # builds the first call's gradients
        model(x * 2).sum().backward()
        w = model[0].weight.numpy().copy()
        opt.step()
    assert opt._steps.hits == 0 and norm > 0
    g = model[0].weight.grad.numpy()
    np.testing.assert_allclose(model[0].weight.numpy(), w - 0.1 * g, rtol=1e-6)


# ---------------------------------------------------------------- jit: never stale


def test_jit_refuses_a_branch_on_a_value_read_while_recording():
    w = nn.Parameter(fg.ones(3))

    @fg.jit
    def f(x):
        s = (x * w).sum()
        return s * 2 if s.item() > 0 else s * -1

    f(fg.ones(3))  # the first call runs eagerly
    with pytest.raises(fg.JitError, match="reads a tensor's value"):
        f(fg.ones(3))


def test_jit_keeps_a_hand_written_running_mean_running():
    class RunningMean(nn.Module):
        def __init__(self):
            super().__init__()
            self.mean = fg.zeros(3)

        def forward(self, x):
            self.mean = 0.9 * self.mean + 0.1 * x.mean(0)
            return x - self.mean

    m = RunningMean()
    f = fg.jit(lambda x: m(x))
    want = np.zeros(3)
    for k in range(8):
        x = np.full((2, 3), float(k), np.float32)
        f(fg.tensor(x))
        want = 0.9 * want + 0.1 * x.mean(0)
        np.testing.assert_allclose(m.mean.numpy(), want, rtol=1e-5)
    assert f.replays >= 3


def test_jit_reads_a_reassigned_module_tensor_attribute():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = fg.tensor(2.0)

        def forward(self, x):
            return x * self.s

    m = Scale()
    f = fg.jit(lambda x: m(x))
    for _ in range(4):
        f(fg.ones(2))
    m.s = fg.tensor(5.0)
    assert f(fg.ones(2)).tolist() == [5.0, 5.0]


def test_jit_records_again_when_a_python_number_changes():
    temp = {"t": 2.0}

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.temp = 2.0

        def forward(self, x):
            return x / self.temp

    net = Net()
    f = fg.jit(lambda x: net(x))
    for _ in range(4):
        f(fg.ones(2))
    net.temp = 4.0
    assert f(fg.ones(2)).tolist() == [0.25, 0.25]
    assert temp  # (a plain dict is not watched: only modules, closures and globals)


SCALE = 3.0


def test_jit_records_again_when_a_global_number_changes():
    global SCALE
    SCALE = 3.0

    @fg.jit
    def f(x):
        return x * SCALE

    for _ in range(4):
        f(fg.ones(2))
    SCALE = 7.0
    try:
        assert f(fg.ones(2)).tolist() == [7.0, 7.0]
    finally:
        SCALE = 3.0


def test_compiling_a_new_graph_leaves_no_cycle_that_keeps_it_alive():
    """The first realize of a structure schedules, lowers and compiles it; nothing made on
    the way may hold the graph (and so its values) until a garbage collection."""
    import gc
    import weakref

    x = fg.randn(64, 4099).realize()  # a shape no other test sums: a new plan
    gc.collect()
    gc.disable()
    try:
        s = (x * 1.5).sum(1)  # a float row sum: a cascade of accumulators
        node = weakref.ref(s.node)
        s.realize()
        del s
        assert node() is None
    finally:
        gc.enable()


def test_a_macro_whose_expansion_was_computed_before_is_computed_again():
    """F.linear(x, w) expands to the very node `x @ w.T` made (hash-consed), computed just
    before: its plan, keyed by the graph as written, takes only x and w (a KeyError in
    compile_plan before)."""
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((4, 64), np.float32), rng.standard_normal((8, 64), np.float32)
    x, w = fg.tensor(xv), fg.tensor(wv)
    a = x @ w.T
    b = F.linear(x, w)
    c = (x.reshape(4, 1, 64) * w.reshape(1, 8, 64)).sum(2)
    want = xv.astype(np.float64) @ wv.T.astype(np.float64)
    for t in (a, b, c):
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-4)
    again = F.linear(fg.tensor(xv), fg.tensor(wv))  # the cached plan, on new inputs
    np.testing.assert_allclose(again.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not pool.available(), reason="the program's cycle counter: Linux only")
def test_a_new_plans_first_run_is_its_program_with_each_kernel_timed(monkeypatch):
    """A new CPU plan of several kernels runs its native program at once, not a kernel at a
    time from Python; each kernel's record is its compile's, with the time the program's
    cycle counter gave it. Under FUSEGRAD_DEBUG the first run goes kernel by kernel."""
    from fusegrad.runtime import cpu_backend

    launched, programs = [], []
    launch, run_threads = cpu_backend.CpuBackend.launch, cpu_backend.run_threads

    def one_kernel(self, step, *args):
        launched.append(step)
        return launch(self, step, *args)

    def program(*args, **kwargs):
        programs.append(args[0])
        return run_threads(*args, **kwargs)

    monkeypatch.setattr(cpu_backend.CpuBackend, "launch", one_kernel)
    monkeypatch.setattr(cpu_backend, "run_threads", program)
    a = np.linspace(-3, 3, 12 * 7, dtype=np.float32).reshape(12, 7)
    a[0, :3] = (0.0, -0.0, 1.0)
    for debug, scale in ((0, 1.0 + np.random.default_rng().random()), (1, 0.75)):
        launched.clear(), programs.clear()
        with fg.config.override(debug=debug, cache=None):
            s = (fg.tensor(a) * scale).softmax(1)  # a new plan: a new constant
            y = s - s.sum(0)  # (rows, then columns: kernels of their own)
            got = y.numpy()
        records = fg.kernels(y)
        e = np.exp(a.astype(np.float64) * np.float32(scale))
        want = e / e.sum(1, keepdims=True)
        np.testing.assert_allclose(got, want - want.sum(0), rtol=1e-5, atol=1e-6)
        assert len(records) >= 2 and all(r.cache == "compiled" for r in records)
        assert all(r.seconds is not None and r.seconds >= 0 for r in records)
        if debug:
            assert len(launched) == len(records) and not programs
        else:
            assert not launched and len(programs) == 1


def test_plans_compare_by_identity():
    """`fusegrad.jit` compares the plans two recorded calls ran; two plans of one structure
    (one compiled again after the cache dropped the other) are different plans, and
    comparing them must not compare their numpy arrays (a ValueError before)."""
    import numpy as np

    from fusegrad.pipeline.plan import Plan

    a, b = Plan([], [0], 1, 1), Plan([], [0], 1, 1)
    a.fns = np.zeros(3, np.uint64)
    b.fns = np.zeros(3, np.uint64)
    assert a != b and a == a and [a, b] != [b, a]


class _Cyclic:
    me: object = None


def test_a_big_new_plan_freezes_the_collectors_view_at_the_next_realize(monkeypatch):
    # `config.gc_freeze`: a new plan of at least that many kernels has the next realize
    # collect once and gc.freeze() what is alive; smaller plans, cached plans and 0 do not
    from fusegrad.runtime.config import config

    gc.unfreeze()
    try:
        monkeypatch.setattr(config, "gc_freeze", 3)
        x = fg.tensor(np.arange(6, dtype=np.float32))
        (x + 1).realize()  # one kernel: nothing due
        assert not engine.freeze_pending
        s = x.sum()
        y = (x * s).sum()
        z = (x - y).amax()  # three reductions, each reading the one before: three kernels
        engine.realize([z.node])
        assert engine.freeze_pending and gc.get_freeze_count() == 0
        junk = _Cyclic()
        junk.me = junk  # a reference cycle, garbage once dropped
        gone = weakref.ref(junk)
        del junk
        (x * 7).realize()  # the next realize collects, then freezes
        assert not engine.freeze_pending and gc.get_freeze_count() > 0
        assert gone() is None  # the cycle was collected before the freeze, not frozen
        assert (y.item(), z.item()) == (225.0, -220.0)
        gc.unfreeze()
        monkeypatch.setattr(config, "gc_freeze", 0)  # never
        s2 = (x * 3).sum()
        engine.realize([(x - (x * s2).sum()).amax().node])
        assert not engine.freeze_pending
    finally:
        gc.unfreeze()


def _three_reductions():
    x = fg.tensor(np.arange(7, dtype=np.float32))  # (a size the test above does not use)
    y = (x * x.sum()).sum()
    return (x - y).amax()  # three reductions, each reading the one before: three kernels


def test_a_big_plan_read_from_disk_freezes_the_collectors_view_at_once(monkeypatch, tmp_path):
    # it made only objects that live on (no scheduling's garbage): collected and frozen
    # before its first run, nothing left for the next realize
    from fusegrad.runtime.config import config

    gc.unfreeze()
    try:
        monkeypatch.setattr(config, "gc_freeze", 3)
        with fg.config.override(cache=str(tmp_path / "cache"), disk_plans=True):
            assert _three_reductions().item() == -435.0  # compiled, kept on disk
            engine.freeze_pending = False
            gc.unfreeze()
            engine.forget_plans(lambda key: True)  # a new process's plans: none
            before = engine.stats["plans_from_disk"]
            junk = _Cyclic()
            junk.me = junk
            gone = weakref.ref(junk)
            del junk
            z = _three_reductions()
            engine.realize([z.node])
            assert engine.stats["plans_from_disk"] == before + 1
            assert not engine.freeze_pending and gc.get_freeze_count() > 0
            assert gone() is None  # collected before the freeze, not frozen
            assert z.item() == -435.0
    finally:
        gc.unfreeze()


def test_the_collector_is_off_while_a_plan_is_compiled_and_on_again_after(monkeypatch):
    from fusegrad.runtime import engine as engine_module

    seen = []
    compile_plan = engine_module.compile_plan

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return compile_plan(*args, **kwargs)

    monkeypatch.setattr(engine_module, "compile_plan", watched)
    assert gc.isenabled()
    x = fg.tensor(np.linspace(-1, 1, 4103, dtype=np.float32))  # a size no other test uses
    assert abs((x * 3).tanh().sum().item()) < 1e-3
    assert seen == [False] and gc.isenabled()


def test_importing_fusegrad_freezes_what_the_import_made_unless_told_not_to():
    import subprocess

    code = "import gc, fusegrad; print(gc.get_freeze_count() > 10000)"
    env = {k: v for k, v in os.environ.items() if k != "FUSEGRAD_GC_FREEZE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr[-2000:]
    env["FUSEGRAD_GC_FREEZE"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_empty_values_realize_alone_and_beside_others_without_a_kernel():
    """A lone empty tensor (the one-node path) and empty ones realized with a non-empty
    one each get an empty buffer; only the non-empty one runs a kernel."""
    x = fg.tensor(np.arange(6, dtype=np.float32))
    lone = x[:0] * 2
    assert fg.realize(lone) == [] and engine.value(lone.node).size == 0
    assert lone.numpy().shape == (0,)
    a, b, c = x[:0] + 1, x * 3, x.reshape(2, 3)[:, :0] - 1
    records = fg.realize(a, b, c)
    assert len(records) == 1
    assert a.numpy().shape == (0,) and c.numpy().shape == (2, 0)
    np.testing.assert_array_equal(b.numpy(), np.arange(6) * 3)


def test_a_deferred_clip_that_raises_raises_at_every_build():
    """A clip run at the gradients' build that raises leaves them unbuilt: every later read
    raises again, none reads them unclipped."""
    from fusegrad.nn import clip_grad

    fg.manual_seed(0)
    model = _mlp()
    model(fg.tensor(np.ones((2, 6), np.float32))).sum().backward()
    grads = [p.grad for p in model.parameters()]

    def broken(gs):
        raise ValueError("a clip that fails")

    clip_grad.clip_when_built(grads, broken, ("broken",))
    for _ in range(2):
        with pytest.raises(ValueError, match="a clip that fails"):
            model[0].weight.grad.numpy()
    other = _mlp()
    other(fg.tensor(np.ones((2, 6), np.float32))).sum().backward()
    # a clip that asks for the norm's value is not deferred: it raises at the call
    nan = _mlp()
    nan(fg.tensor(np.full((2, 6), np.nan, np.float32))).sum().backward()
    with pytest.raises(RuntimeError, match="The total norm of order 2.0 for gradients"):
        nn.utils.clip_grad_norm_(nan.parameters(), 1.0, error_if_nonfinite=True)
    # nor is order 0 (torch's count of the gradients not all zero: the norm of the norms)
    total = nn.utils.clip_grad_norm_(other.parameters(), 1.0, norm_type=0.0)
    assert total.item() == 4.0
