"""`torch.profiler` under its names (fusegrad.torch_profiler): torch's arguments, regions,
schedules and their cycles, `key_averages().table()`, trace handlers, cuda kernels as device
time, and its errors."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad.torch_profiler import (
    ProfilerAction,
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    supported_activities,
    tensorboard_trace_handler,
)

N, W, R, S = (ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD,
              ProfilerAction.RECORD_AND_SAVE)  # fmt: skip


def _step(w, rows: int = 8):
    """One realize of a fresh graph over `w` (new numbers, the same kernels)."""
    return (fg.randn(rows, w.shape[0]) @ w).relu().sum().item()


def test_the_torch_shim_answers_torch_profiler():
    from fusegrad import torch_shim

    shim = torch_shim.install()
    try:
        import torch.profiler
        from torch.profiler import ProfilerActivity as Activity

        assert torch.profiler.profile is profile and Activity is ProfilerActivity
    finally:
        torch_shim.uninstall(shim)
    assert ProfilerActivity.CPU in supported_activities()


@pytest.mark.parametrize(
    "args, want",
    [  # torch 2.14's answers for the first steps
        (dict(wait=1, warmup=1, active=2, repeat=1, skip_first=1), [N, N, W, R, S, N, N, N]),
        (dict(wait=0, warmup=1, active=1), [W, S, W, S, W, S, W, S]),
        (dict(wait=2, warmup=0, active=1, repeat=2), [N, N, S, N, N, S, N, N]),
        (dict(wait=2, warmup=1, active=1, skip_first_wait=1), [W, S, N, N, W, S, N, N]),
    ],
)
def test_a_schedule_says_what_each_step_does_as_torchs(args, want):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (warmup=0 warns, as torch does)
        assert [schedule(**args)(i) for i in range(8)] == want


def test_a_bad_schedule_is_refused_and_no_warmup_warns():
    with pytest.raises(AssertionError, match="Invalid profiler schedule"):
        schedule(wait=0, warmup=1, active=0)
    with pytest.warns(UserWarning, match="warmup"):
        schedule(wait=0, warmup=0, active=1)


@pytest.mark.cpu_device  # (CPU kernels: a cuda kernel's time is device time, tested below)
def test_regions_and_kernels_are_averaged_and_tabled():
    w = fg.randn(32, 32).realize()
    _step(w)  # compiled before the profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            with record_function("model_inference"):
                _step(w)
    rows = {e.key: e for e in prof.key_averages()}
    region = rows["model_inference"]
    assert region.count == 3 and region.cpu_time_total > 0
    assert 0 <= region.self_cpu_time_total <= region.cpu_time_total
    kernels = [e for e in rows.values() if e.key != "model_inference"]
    assert kernels and all(e.count == 3 for e in kernels)
    assert all(e.device_time_total == 0 and e.cpu_time_total > 0 for e in kernels)
    assert sum(e.flops for e in kernels) >= 3 * 2 * 8 * 32 * 32
    text = prof.key_averages().table(sort_by="cpu_time_total", row_limit=10)
    assert "model_inference" in text and "# of Calls" in text and "Self CPU time total" in text
    by_shape = prof.key_averages(group_by_input_shape=True)
    assert all(e.input_shapes for e in by_shape if e.key != "model_inference")
    assert "Input Shapes" in by_shape.table()
    with pytest.raises(AttributeError):
        prof.key_averages().table(sort_by="no_such_column")
    assert prof.kernels  # and it is fusegrad's Profile too
    assert "phase" in prof.table()


def test_shapes_need_record_shapes_and_activities_must_be_activities():
    with profile() as prof:
        _step(fg.randn(4, 4).realize())
    with pytest.raises(RuntimeError, match="record_shapes"):
        prof.key_averages(group_by_input_shape=True)
    with pytest.raises(TypeError, match="ProfilerActivity"):
        profile(activities=["cpu"])


def test_record_function_decorates_too():
    @record_function("loss_fn")
    def loss(w):
        return _step(w)

    w = fg.randn(16, 16).realize()
    with profile() as prof:
        loss(w)
        loss(w)
    assert {e.key: e.count for e in prof.key_averages()}["loss_fn"] == 2
    outside = record_function("nobody listens")  # no profile: nothing recorded, no error
    with outside:
        pass


def test_a_scheduled_profile_records_each_cycles_active_steps_and_hands_them_over(tmp_path):
    w = fg.randn(16, 16).realize()
    _step(w)
    seen = []

    def ready(prof):
        seen.append((prof.step_num, {k.name: k.calls for k in prof.kernels}))

    plan = schedule(wait=1, warmup=1, active=2, repeat=2)
    with profile(schedule=plan, on_trace_ready=ready) as prof:
        for _ in range(10):  # steps 0-3 one cycle, 4-7 the second, 8-9 nothing
            _step(w)
            prof.step()
    assert [n for n, _ in seen] == [4, 8]  # handed over as each cycle's last step ends
    for _, calls in seen:
        assert calls and set(calls.values()) == {2}  # the active steps alone, afresh
    handler = tensorboard_trace_handler(str(tmp_path / "log"), worker_name="w0")
    with profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
                 on_trace_ready=handler) as prof:  # fmt: skip
        for _ in range(3):
            with record_function("train_step"):
                _step(w)
            prof.step()
    (name,) = os.listdir(tmp_path / "log")
    assert name.startswith("w0.") and name.endswith(".pt.trace.json")
    trace = json.loads((tmp_path / "log" / name).read_text())
    cats = {e.get("cat", "").split(",")[0] for e in trace["traceEvents"]}
    assert "kernel" in cats and "user_annotation" in cats


def test_a_block_without_a_schedule_hands_itself_over_at_its_end(tmp_path):
    got = []
    with profile(on_trace_ready=got.append) as prof:
        _step(fg.randn(8, 8).realize())
    assert got == [prof] and prof.wall > 0
    prof2 = profile(on_trace_ready=tensorboard_trace_handler(str(tmp_path), use_gzip=True))
    prof2.start()
    x = fg.tensor(np.arange(6.0, dtype=np.float32))
    assert (x * 2).sum().item() == 30.0
    prof2.stop()
    assert [p.endswith(".pt.trace.json.gz") for p in os.listdir(tmp_path)] == [True]


@pytest.mark.usefixtures("emulated")
def test_kernels_on_the_cuda_device_count_as_device_time():
    x = fg.tensor(np.arange(64, dtype=np.float32), device="cuda")
    (x * 2).sum().item()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("on the gpu"):
            for _ in range(2):
                assert (x * 2).sum().item() == 4032.0
    rows = {e.key: e for e in prof.key_averages()}
    kernels = [e for k, e in rows.items() if k != "on the gpu"]
    assert kernels and all(e.count == 2 for e in kernels)
    assert all(e.device_time_total > 0 and e.cpu_time_total == 0 for e in kernels)
    assert rows["on the gpu"].cpu_time_total > 0  # a region is the host's wall time
    assert "Self CUDA time total" in prof.key_averages().table(sort_by="device_time_total")
