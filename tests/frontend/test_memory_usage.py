"""`fusegrad.memory_report`: a plan's peak and what is alive then, checked against plans
whose buffers can be counted by hand, a step function's report, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as nn

HERE = __file__.rsplit("/", 1)[-1]


def _chain():
    """Four kernels, each a reduction the next one needs whole: x (64x32) -> s1 (64, 256
    bytes) -> s2 (32, 128 bytes) -> s3 (64, 256 bytes) -> a scalar (4 bytes)."""
    x = fg.from_numpy(np.random.default_rng(0).random((64, 32), np.float32)).realize()
    s1 = x.sum(1, keepdim=True)
    s2 = (x * s1).sum(0, keepdim=True)
    s3 = (x * s2).sum(1)
    return (s3 * s3).sum()


def test_kernel_by_kernel_the_peak_is_the_most_alive_during_one_kernel():
    with fg.config.override(program=False):
        report = fg.memory_report(_chain())
    (plan,) = report.plans
    assert len(report.kernels) == 4
    assert report.mode == "kernel by kernel"
    # kernel 0 holds s1 (256); kernel 1 s1 and s2 (384), then s1 goes; kernel 2 s2 and s3
    # (384), then s2 goes; kernel 3 s3 and the result (260): the first 384 is the peak
    assert report.peak_bytes == 256 + 128 == plan.stepwise_peak_bytes
    assert plan.peak_step == 1 and plan.arena_bytes == 0
    assert report.peak_bytes == sum(b.bytes for b in report.live_at_peak)
    assert [(b.bytes, b.shape) for b in report.live_at_peak] == [(256, (64, 1)), (128, (1, 32))]
    first, second = report.live_at_peak
    assert first.kernel == report.kernels[0].name and second.kernel == report.kernels[1].name
    line = _chain.__code__.co_firstlineno + 5  # s2's line
    assert second.lines == [f"{HERE}:{line}"] and f"sum ({HERE}:{line})" in second.user_ops
    assert plan.input_bytes == 64 * 32 * 4
    assert report.by_line() == {f"{HERE}:{line - 1}": 256, f"{HERE}:{line}": 128}


def test_a_native_program_holds_every_intermediate_in_its_arena():
    report = fg.memory_report(_chain())
    (plan,) = report.plans
    assert report.mode == "arena"  # a CPU plan of several kernels, FUSEGRAD_PROGRAM on
    assert plan.arena_bytes == 256 + 128 + 256  # each a multiple of the 64-byte line
    assert report.peak_bytes == plan.arena_bytes + 4 == 644  # and the returned scalar
    assert report.peak_bytes == sum(b.bytes for b in report.live_at_peak)
    assert plan.stepwise_peak_bytes == 384  # what reusing the arena's space would need
    assert [b.returned for b in report.live_at_peak] == [False, False, False, True]
    text = str(report)
    assert "peak 644 B (arena" in text and "(returned)" in text


def test_an_arena_rounds_each_value_up_to_its_line():
    x = fg.ones(10).realize()
    a = x.sum() * x  # a scalar (4 bytes, 64 in the arena), then 10 floats returned
    report = fg.memory_report((a * x.sum()).exp().sum() + a.sum())
    assert report.mode == "arena"
    assert report.peak_bytes == report.plans[0].arena_bytes + 4
    assert all(b.bytes % 64 == 0 for b in report.live_at_peak if not b.returned)
    assert report.peak_bytes == sum(b.bytes for b in report.live_at_peak)


def test_bytes_moved_counts_a_second_read_of_an_input():
    v = fg.from_numpy(np.arange(1024, dtype=np.float32)).realize()
    (k,) = fg.memory_report(v + v.flip(0)).kernels
    assert k.min_bytes == 2 * 4096  # v read once, the result written once
    assert k.bytes_moved == 3 * 4096 and k.ratio == 1.5  # v read at two indices
    (k,) = fg.memory_report((v * 2).exp()).kernels
    assert k.bytes_moved == k.min_bytes == 2 * 4096


def test_a_step_function_reports_each_realize_of_its_call():
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    x, y = fg.randn(8, 16).realize(), fg.tensor([0, 1, 2, 3, 0, 1, 2, 3])

    @fg.jit
    def step(x, y):
        opt.zero_grad()
        loss = fg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):  # recorded on the second and third calls, replayed from the fourth
        step(x, y)
    replays = step.replays
    report = fg.memory_report(step, x, y)
    assert step.replays == replays + 1  # a replay's plans are reported too
    assert isinstance(report.result, fg.Tensor) and np.isfinite(report.result.item())
    assert report.plans and report.kernels
    assert report.peak_bytes == max(p.peak_bytes for p in report.plans)
    assert report.peak_bytes == sum(b.bytes for b in report.live_at_peak)
    lines = {line for b in report.live_at_peak for line in b.lines}
    assert any(line.startswith(HERE) for line in lines)
    assert all(k.min_bytes > 0 and k.bytes_moved > 0 for k in report.kernels)


def test_refusals_name_what_to_do():
    t = (fg.ones(4) * 3).realize()
    with pytest.raises(ValueError, match="before .item()"):
        fg.memory_report(t)
    with pytest.raises(TypeError, match="got int"):
        fg.memory_report(t, 3)
    with pytest.raises(ValueError, match="ran no kernel"):
        fg.memory_report(lambda: None)
