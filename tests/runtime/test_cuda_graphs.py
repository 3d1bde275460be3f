"""CUDA graphs through libcuda's entry points (runtime/cuda_graphs.py), as PyCUDA, which has
no graph API, gets them: captured, replayed, and every failure falling back to plain
launches that run exactly the same kernels.

No GPU here: runtime/cuda_stub.py's `StubLibcuda` stands in for libcuda (its entry points,
called through ctypes as the real ones are, with the stub driver's stream handles), and
the stub driver logs every kernel "run" (a graph's as its captured launches), so each test
checks that what ran is what plain launches would have run. Untested on a real GPU."""

from __future__ import annotations

import gc

import pytest
from _cuda_training import mlp_training_step

import fusegrad as fg
from fusegrad.runtime import cuda as runtime_cuda
from fusegrad.runtime import cuda_graphs
from fusegrad.runtime.cuda_stub import StubDriver, StubLibcuda
from fusegrad.runtime.engine import engine


def chain(x: fg.Tensor, n: int = 3) -> fg.Tensor:
    y = x.reshape(-1, 2)  # column sums: a kernel each
    for _ in range(n):
        y = y - y.sum(0) * 0.5
    return y.reshape(-1)


def cached_plan(x: fg.Tensor):
    chain(x).realize()  # compiles, and caches the plan
    plan, leaves, fresh = engine.plan_for([chain(x).node])
    assert not fresh
    return plan, [engine.value(n) for n in leaves]


def runs(drv: StubDriver, plan, leaves, n: int) -> list[list]:
    """What each of n runs of the plan ran (its kernels, in order)."""
    out = []
    for _ in range(n):
        drv.ran.clear()
        engine.execute(plan, leaves)
        out.append(list(drv.ran))
    return out


def test_plans_are_captured_and_replayed_through_libcuda():
    drv = StubDriver(libcuda=True, log=True)
    with runtime_cuda.use_driver(drv) as b:
        assert b.graphs and isinstance(b.capture, cuda_graphs.DriverCapture)
        plan, leaves = cached_plan(fg.ones(256, device="cuda").realize())
        ran = runs(drv, plan, leaves, runtime_cuda.GRAPH_AFTER_RUNS + 3)
        assert drv.captures == 1 and drv.graph_launches == 3
        assert len(ran[0]) >= 4 and all(r == ran[0] for r in ran)  # the graph: the same kernels
        lib = drv.libcuda
        assert lib.live_graphs == 0 and lib.live_execs == 1  # the graph went at instantiation


@pytest.mark.parametrize(
    "fail", ["cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags"]
)
def test_a_failed_capture_turns_graphs_off_and_launches_plainly(fail):
    drv = StubDriver(log=True)
    drv.libcuda = StubLibcuda(drv, fail=fail)
    with runtime_cuda.use_driver(drv) as b:
        assert b.graphs
        plan, leaves = cached_plan(fg.ones(256, device="cuda").realize())
        ran = runs(drv, plan, leaves, runtime_cuda.GRAPH_AFTER_RUNS + 3)
        assert not b.graphs and drv.graph_launches == 0 and not drv.capturing
        assert all(r == ran[0] for r in ran) and len(ran[0]) >= 4
        assert drv.libcuda.live_graphs == 0 and drv.libcuda.live_execs == 0  # nothing leaks


def test_a_graph_launch_the_driver_refuses_runs_plainly_instead():
    drv = StubDriver(log=True)
    drv.libcuda = lib = StubLibcuda(drv)
    with runtime_cuda.use_driver(drv) as b:
        plan, leaves = cached_plan(fg.ones(256, device="cuda").realize())
        ran = runs(drv, plan, leaves, runtime_cuda.GRAPH_AFTER_RUNS + 1)
        assert drv.graph_launches == 1
        lib.fail = "cuGraphLaunch"
        ran += runs(drv, plan, leaves, 2)  # the refused replay launched its kernels plainly
        assert all(r == ran[0] for r in ran)
        assert not b.graphs and drv.graph_launches == 1


@pytest.mark.parametrize("missing", ["cuGraphLaunch", "cuStreamBeginCapture_v2"])
def test_a_library_without_the_entry_points_means_plain_launches(missing):
    drv = StubDriver(log=True)
    drv.libcuda = StubLibcuda(drv, missing=missing)
    with runtime_cuda.use_driver(drv) as b:
        assert not b.graphs and b.capture is None
        plan, leaves = cached_plan(fg.ones(256, device="cuda").realize())
        ran = runs(drv, plan, leaves, runtime_cuda.GRAPH_AFTER_RUNS + 2)
        assert drv.captures == 0 and all(r == ran[0] for r in ran)


def test_no_library_or_graphs_switched_off_means_plain_launches():
    assert cuda_graphs.driver_capture(object(), None) is None
    with runtime_cuda.use_driver(StubDriver()) as b:  # a stub's library: none
        assert not b.graphs
    with fg.config.override(cuda_graphs=False):
        with runtime_cuda.use_driver(StubDriver(libcuda=True)) as b:
            assert not b.graphs and b.capture is None
        with runtime_cuda.use_driver(StubDriver(graphs=True)) as b:
            assert not b.graphs


def test_a_stand_in_driver_never_reaches_the_machines_libcuda(monkeypatch):
    """On a machine with a real libcuda (a GPU run), a stub driver without a library of its
    own must not be given the real one: its stream handles are not CUstreams, and
    cuStreamBeginCapture on one crashed the process on an H100."""

    def real_library(name, *args, **kwargs):
        raise AssertionError(f"a stand-in driver loaded the machine's {name}")

    monkeypatch.setattr(cuda_graphs.ctypes, "CDLL", real_library)
    drv = StubDriver(log=True)
    with runtime_cuda.use_driver(drv) as b:
        assert not b.graphs and b.capture is None
        plan, leaves = cached_plan(fg.ones(256, device="cuda").realize())
        ran = runs(drv, plan, leaves, runtime_cuda.GRAPH_AFTER_RUNS + 2)
        assert drv.captures == 0 and ran[0] and all(r == ran[0] for r in ran)


def test_dropped_graphs_are_destroyed_at_the_next_capture():
    drv = StubDriver(libcuda=True)
    lib = drv.libcuda
    with runtime_cuda.use_driver(drv):
        plan, _ = cached_plan(fg.ones(256, device="cuda").realize())
        inputs = [fg.full((256,), float(i), device="cuda").realize() for i in range(8)]
        for x in inputs:  # 8 sets of addresses: the oldest bound sets (and graphs) go
            for _ in range(runtime_cuda.GRAPH_AFTER_RUNS):
                engine.execute(plan, [engine.value(x.node)])
        gc.collect()
        assert drv.captures == 8
        assert lib.live_execs <= runtime_cuda.BINDINGS_KEPT + 1
        assert lib.destroyed_execs >= 8 - runtime_cuda.BINDINGS_KEPT - 1


def test_a_training_loop_replays_graphs_through_libcuda_and_trains_as_plainly():
    """fg.jit and the plain loop on the libcuda path: after a few steps each step is graph
    launches only, and the kernels run are the plain launches' (same names and arguments,
    step for step, as a driver without graphs runs them)."""

    def kernels_run(drv, jit: bool) -> list:
        # (no generic kernels: each run plans the same graphs anew, on a driver of its own,
        # and a plan of a graph met before runs generic kernels where two are alike)
        with runtime_cuda.use_driver(drv), fg.config.override(size_templates=False):
            step = mlp_training_step(jit)
            per_step = []
            for _ in range(14):
                drv.ran.clear()
                step().item()
                per_step.append(
                    [(name, grid, block, shared) for name, grid, block, _, shared in drv.ran]
                )
            return per_step

    for jit in (True, False):
        graphs = StubDriver(libcuda=True, log=True)
        with_graphs = kernels_run(graphs, jit)
        plain = kernels_run(StubDriver(log=True), jit)
        assert graphs.graph_launches > 0 and graphs.captures >= 1
        assert with_graphs == plain
