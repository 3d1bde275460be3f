"""`fusegrad.profile()`: kernels and phases of a training loop, and its Chrome trace."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as nn
import fusegrad.nn.functional as F
from fusegrad.profiler import machine_limits
from fusegrad.runtime.engine import engine


def make_step(seed: int, hidden: int = 7):
    fg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, hidden), nn.ReLU(), nn.Linear(hidden, 3))
    opt = fg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = fg.from_numpy(np.random.default_rng(seed).standard_normal((6, 10), np.float32))
    y = fg.tensor([0, 1, 2, 0, 1, 2])

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def test_profile_counts_each_kernel_and_splits_the_time_into_phases():
    step = make_step(0)
    step()  # compile outside the profile
    step()
    with fg.profile() as prof:
        for _ in range(3):
            step()
    assert prof.kernels
    for k in prof.kernels:
        assert k.calls == 3, (k.name, k.calls)
        assert k.seconds > 0 and k.mean_seconds == k.seconds / 3
        assert k.user_ops and k.bytes > 0
    phases = prof.phases()
    assert set(phases) == {"trace", "autodiff", "schedule", "compile", "run", "python"}
    assert 0 <= phases["trace"] <= prof.wall
    assert phases["compile"] == 0.0  # every schedule was compiled before the block
    assert phases["run"] == pytest.approx(sum(k.seconds for k in prof.kernels), rel=1e-9)
    assert phases["run"] > 0
    assert abs(sum(phases.values()) - prof.wall) < 1e-9 or phases["python"] == 0.0
    table = prof.table()
    for k in prof.kernels:
        assert k.name in table
    limits = machine_limits()
    assert limits["GB/s"] > 0 and limits["GFLOP/s"] > 0
    assert "sgd update" in table and "linear" in table and "wall" in table
    assert not fg.config.kernel_times  # the block's timing of each kernel ends with it


def test_chrome_trace_has_one_track_per_thread_and_the_compile_phases(tmp_path):
    steps = [make_step(1, hidden=11), make_step(2, hidden=11)]  # shapes no other test uses
    engine.plans.clear()  # so that the first step schedules, even after other tests
    with fg.profile() as prof:
        steps[0]()  # compiles: the compile track gets spans
        worker = threading.Thread(target=lambda: [steps[1]() for _ in range(2)], name="worker")
        worker.start()
        worker.join(timeout=120)
        assert not worker.is_alive()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M"}
    assert sorted(names.values()) == ["MainThread", "compile", "worker"]
    kernels = [e for e in trace if e["ph"] == "X" and e["cat"].startswith("kernel")]
    by_track = {names[e["tid"]] for e in kernels}
    assert by_track == {"MainThread", "worker"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in trace if e["ph"] == "X")
    compile_spans = {e["name"] for e in trace if e["ph"] == "X" and e["cat"] == "compile"}
    backend = "llvm" if fg.get_default_device() == "cpu" else "cuda"  # the device's compiler
    assert {"schedule", "lower", backend} <= compile_spans
    assert all(e["args"]["user ops"] for e in kernels)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 10)

    def forward(self, x):
        return self.fc(x).relu()


def test_profile_totals_per_line_and_per_module_sum_to_the_kernels_time():
    fg.manual_seed(1)
    model = nn.Sequential(_Block(), _Block(), nn.Linear(10, 3))
    x = fg.randn(6, 10).realize()

    def step():
        model.zero_grad()
        out = model(x)
        loss = (out * out).mean()  # the loss line: outside any module
        loss.backward()
        fg.realize(*[p.grad for p in model.parameters()])

    step()
    with fg.profile() as prof:
        step()
        step()
    total = sum(k.seconds for k in prof.kernels)
    by_line, by_module = prof.by_line(), prof.by_module()
    for rows in (by_line, by_module):
        assert abs(sum(r.seconds for r in rows) - total) <= 1e-9 * max(1.0, total)
        assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)
    lines = {r.name for r in by_line}
    here = __file__.rsplit("/", 1)[-1]
    block_line = _Block.forward.__code__.co_firstlineno + 1
    loss_line = step.__code__.co_firstlineno + 3
    # the forward and the backward of a line count under the line: no "backward" rows
    assert f"{here}:{block_line}" in lines and f"{here}:{loss_line}" in lines
    assert all(" " not in name for name in lines - {"(no user line)"})
    modules = {r.name for r in by_module}
    assert {"Sequential.0.fc", "Sequential.1.fc", "Sequential.2", "(no module)"} <= modules
    # Sequential.0's own ops (its relu) ran in its scope, not its child's
    assert "Sequential.0" in modules
    table = prof.table(by="module")
    assert "Sequential.1.fc" in table and "total (kernels)" in table
    assert f"{here}:{loss_line}" in prof.table(by="line")


def test_profile_table_refuses_an_unknown_grouping():
    with fg.profile() as prof:
        (fg.ones(3) * 2).realize()
    with pytest.raises(ValueError, match="'kernel', 'line' or 'module'"):
        prof.table(by="file")


@pytest.mark.cpu_device  # (the CPU's native program; a cuda plan runs its launch list)
def test_a_profiled_plan_runs_as_its_program_and_times_each_kernel_inside_it():
    """Inside the block a cached plan of several kernels runs as one native program, as
    it does outside (worker threads awake, its scratch memory in use), and each kernel's
    time comes from the program's clock readings: all positive, consecutive (each
    kernel starts where the one before ended), and together within the run's time."""
    from fusegrad.runtime import pool

    if not pool.available():
        pytest.skip("the cycle counter is read through the native pool (Linux)")
    step = make_step(1, hidden=64)
    step()
    step()
    runs = []

    def observe(plan, records):
        runs.append((plan, records))

    engine.observers.append(observe)
    try:
        with fg.profile():
            step()
    finally:
        engine.observers.remove(observe)
    plan, records = max(runs, key=lambda run: len(run[0].steps))
    assert len(plan.steps) >= 2 and plan.program is not None
    assert records is not plan.records  # copies, each with this run's time
    assert all(r.seconds > 0 for r in records)
    for before, after in zip(records, records[1:]):
        assert after.started == pytest.approx(before.started + before.seconds, abs=2e-6)


def test_the_profile_keeps_no_frame_of_the_profiled_thread_alive():
    """The sampler that measures graph building looks at the profiled thread's frames but
    keeps none between samples: a function's locals die when it returns, as outside a
    profile (a lazy tensor kept alive would be computed by the next optimizer step, a
    plan the loop never runs otherwise)."""
    import time
    import weakref

    class Local:
        pass

    def work():
        local = Local()
        end = time.perf_counter() + 0.006  # three of the sampler's periods
        while time.perf_counter() < end:
            pass
        return weakref.ref(local)

    alive = 0
    with fg.profile():
        for _ in range(20):
            alive += work()() is not None
    assert alive <= 2  # (a sample taken at the very moment work() returns holds it)
