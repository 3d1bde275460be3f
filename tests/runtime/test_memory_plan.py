"""runtime/memory_plan.py: the arena a report describes is the one the native program
allocates, and the kernel-by-kernel count follows the engine's frees."""

from __future__ import annotations

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad.runtime import cuda as runtime_cuda
from fusegrad.runtime.engine import engine
from fusegrad.runtime.memory_plan import plan_memory


def _graph():
    x = fg.from_numpy(np.random.default_rng(1).random((48, 40), np.float32)).realize()
    m = x.amax(1, keepdim=True)
    e = (x - m).exp()
    return (e / e.sum(1, keepdim=True)).sum(0) * x.sum(), x


def test_the_arena_is_the_native_programs_scratch():
    y, _ = _graph()
    plan, leaves, _ = engine.plan_for([y.node])
    assert len(plan.steps) >= 2
    fg.realize(y)  # the first run: the native program, timed
    again, _ = _graph()
    fg.realize(again)  # cached: the native program, whose scratch is now laid out
    where, offsets, nbytes = plan.scratch
    report = plan_memory(plan)
    assert report.mode == "arena" and report.arena_bytes == nbytes > 0
    in_arena = [b for b in report.live_at_peak if b.in_arena]
    assert len(in_arena) == len(where)
    returned = sum(b.numel * b.dtype.itemsize for b in report.live_at_peak if b.returned)
    assert report.peak_bytes == nbytes + returned


def test_kernel_by_kernel_follows_the_engines_frees():
    y, _ = _graph()
    plan, _, _ = engine.plan_for([y.node])
    report = plan_memory(plan, arena=None)
    assert report.mode == "kernel by kernel" and report.arena_bytes == 0
    alive, best = {}, 0
    for s in plan.steps:  # the engine's loop (Engine._execute_steps), counted here again
        alive.update({g: n * d.itemsize for g, n, d in s.outs})
        best = max(best, sum(alive.values()))
        for g in s.frees:
            del alive[g]
    assert report.peak_bytes == best == report.stepwise_peak_bytes
    assert report.peak_bytes == sum(b.bytes for b in report.live_at_peak)
    assert report.input_bytes == 48 * 40 * 4


@pytest.mark.usefixtures("emulated")
def test_a_cuda_plans_arena_is_laid_out_as_its_launch_list_lays_it():
    def chain(x):  # column sums: each a kernel of its own
        y = x.reshape(-1, 2)
        for _ in range(3):
            y = y - y.sum(0) * 0.5
        return y.reshape(-1)

    # (another test's plans of the same chain, tests/runtime/test_launch_list.py's and
    # test_cuda_graphs.py's, forgotten: the first run here must be the plan's first)
    engine.forget_plans(lambda key: True)
    x = fg.ones(1000, device="cuda").realize()
    chain(x).realize()  # the first run: kernel by kernel, no launch list yet
    plan, _, fresh = engine.plan_for([chain(x).node])
    assert not fresh and plan.__dict__.get("launch_list") is None
    before = runtime_cuda.arena_layout(plan)
    chain(x).realize()  # cached: through the launch list
    assert plan.__dict__.get("launch_list") is not None
    after = runtime_cuda.arena_layout(plan)
    assert before == after
    report = plan_memory(plan)
    if after is None:  # an emulator that keeps each value between guard pages
        assert report.mode == "kernel by kernel"
    else:
        assert report.mode == "arena" and report.arena_bytes == sum(r for _, _, r in after)
    assert report.peak_bytes == sum(b.bytes for b in report.live_at_peak)
