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


@pytest.mark.cpu_device  # (the CPU's arena: a cuda arena gives each value its own place)
def test_a_native_program_holds_every_intermediate_in_its_arena():
    report = fg.memory_report(_chain())
    (plan,) = report.plans
    assert report.mode == "arena"  # a CPU plan of several kernels, FUSEGRAD_PROGRAM on
    # s1 (256 bytes) at 0 and s2 (128) at 256; s1 is dead once s2 is made, so s3 (256)
    # takes its place: the arena holds 384 bytes, as kernel by kernel
    assert plan.arena_bytes == 256 + 128 == plan.stepwise_peak_bytes
    assert report.peak_bytes == plan.arena_bytes + 4 == 388  # and the returned scalar
    assert report.peak_bytes == sum(b.bytes for b in report.live_at_peak)
    assert sorted((b.bytes, b.returned) for b in report.live_at_peak) == [
        (4, True),
        (128, False),
        (256, False),
    ]
    text = str(report)
    assert "peak 388 B (arena" in text and "(returned)" in text


@pytest.mark.cpu_device  # (the CPU's arena)
def test_the_arena_gives_a_dead_values_place_to_later_values_never_to_a_live_one():
    """The CPU arena's places (`cpu_backend._scratch_layout`) on a longer chain: two
    values share bytes only if one is dead (after its last reader) before the other is
    written, and the program computes what the values say."""
    from fusegrad.runtime.cpu_backend import _scratch_layout
    from fusegrad.runtime.engine import engine

    x = fg.from_numpy(np.random.default_rng(1).random((64, 32), np.float32)).realize()
    s = x.sum(1, keepdim=True)
    for _ in range(6):
        s = (x * s.mean(0, keepdim=True)).mean(1, keepdim=True)
    loss = (s * s).sum()
    plan, _, _ = engine.plan_for([loss.node])
    layout = _scratch_layout(plan)
    born = {g: k for k, st in enumerate(plan.steps) for g, _, _ in st.outs}
    dies = {g: k for k, st in enumerate(plan.steps) for g in st.frees}
    end = len(plan.steps)
    for i, (g1, o1, r1) in enumerate(layout):
        for g2, o2, r2 in layout[i + 1 :]:
            if o1 < o2 + r2 and o2 < o1 + r1:  # the places overlap: the lives must not
                assert dies.get(g1, end) < born[g2] or dies.get(g2, end) < born[g1]
    report = fg.memory_report(loss)
    assert report.plans[0].arena_bytes < sum(r for _, _, r in layout)  # places shared
    got = loss.item()
    ref = x.numpy().astype(np.float64)
    r = ref.sum(1, keepdims=True)
    for _ in range(6):
        r = (ref * r.mean(0, keepdims=True)).mean(1, keepdims=True)
    np.testing.assert_allclose(got, (r * r).sum(), rtol=1e-4)
    again = (x * 1.0).sum()  # (another plan runs between: the arena's program is reused)
    assert again.item() > 0 and loss.item() == got


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
    held = sum(b.bytes for b in report.live_at_peak)
    # equal where the arena gives a dead value's place to later values (the CPU's); a cuda
    # arena keeps each value's place for the whole run, holes included
    assert report.peak_bytes == held if x.device.type == "cpu" else report.peak_bytes >= held
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
