"""Host cost of the cuda device: microseconds of Python and driver calls per kernel launch
and per cached LeNet-5 step, with the GPU's work stubbed out, so it runs on every machine.

Run:  .venv/bin/python benchmarks/host_cost.py [--smoke]      (about a minute on 2 cores)

The cuda device runs its PyCUDA path through `runtime/cuda_stub.py`'s `StubDriver`
(`runtime.cuda.use_driver`): memory is host memory, a launch is counted and does
nothing, compiling returns the source. What is left is what the GPU machine's CPU does
for fusegrad between kernels: plans, buffers, argument binding, the launch calls into
the driver (the stub imitates PyCUDA's own Python work, `prepared_call` packing its
arguments with `struct` each call). A real driver adds its launch cost (a few
microseconds per `cuLaunchKernel`) on top; this benchmark measures everything before it.

Three figures, each the median of `rounds` rounds with a 95% bootstrap interval of that
median (resampling the rounds, as benchmarks/core_ops.py does), in CPU time of the
calling thread (what the host spends: robust on a shared machine, where wall time also
counts waiting for a core) and in wall time:

- **per launch**: a cached plan of a chain of small kernels (`y = y - y.sum(0)` over
  128 x 2, 16 times: 21 launches) run by `engine.execute`, its time divided by its
  launches; and the same chain realized from Python (graph building and the plan lookup
  included), per launch;
- **LeNet-5 step, plain loop**: `opt.zero_grad(); loss = cross_entropy(model(x), y);
  loss.backward(); opt.step(); loss.item()` at batch 64, the step cache hitting;
- **LeNet-5 step, `fg.jit`**: the same step replayed (no Python of the step runs);
- both steps again through a stand-in driver that captures CUDA graphs (as a driver
  module with stream capture would): once a step's buffers settle, one graph launch.

Targets (issue 28): at most 5 us per launch, at most 0.3 ms per cached LeNet step.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time

import numpy as np

import fusegrad as fg
from fusegrad.runtime import cuda
from fusegrad.runtime.cuda_stub import StubDriver
from fusegrad.runtime.engine import engine

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
CHAIN = 16  # sums in the chain
BOOTSTRAP_RESAMPLES = 2000


def median_interval(samples: list[float]) -> tuple[float, float, float]:
    """The median and a 95% bootstrap interval for it (seeded: same samples, same interval)."""
    a = np.array(samples)
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(a), size=(BOOTSTRAP_RESAMPLES, len(a)))
    low, high = np.percentile(np.median(a[picks], axis=1), [2.5, 97.5])
    return float(statistics.median(a)), float(low), float(high)


def per_call_us(run, rounds: int, calls: int, divide: int = 1) -> tuple[list, list]:
    """Microseconds per call (divided by `divide`) in each of `rounds` rounds of `calls`:
    the calling thread's CPU time, and wall time."""
    cpu, wall = [], []
    for _ in range(rounds):
        gc.collect()
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            run()
        cpu.append((time.thread_time() - c0) / calls / divide * 1e6)
        wall.append((time.perf_counter() - t0) / calls / divide * 1e6)
    return cpu, wall


def figures_of(name: str, samples: tuple[list, list], out: dict) -> None:
    cpu, wall = samples
    out[f"{name}, CPU (us)"] = median_interval(cpu)
    out[f"{name}, wall (us)"] = median_interval(wall)


def chain_cases(driver: StubDriver):
    """(launches, run the cached plan, realize the chain from Python)."""
    x = fg.ones(256, device="cuda").realize()

    def build():
        # column sums: each stays a kernel of its own (a row's sum fuses into its reader)
        y = x.reshape(-1, 2)
        for _ in range(CHAIN):
            y = y - y.sum(0)
        return y.reshape(-1)

    y = build().realize()  # compiles, and caches the plan
    plan, leaves, _ = engine.plan_for([build().node])
    bufs = [engine.value(n) for n in leaves]
    launches = sum(len(s.record.compiled.kernel.launches) for s in plan.steps)
    before = driver.launches
    engine.execute(plan, bufs)
    assert driver.launches - before == launches, "the plan's launches are not the ones counted"
    del y
    return launches, (lambda: engine.execute(plan, bufs)), (lambda: build().realize())


def lenet_cases():
    """A plain-loop and an `fg.jit` LeNet-5 step at batch 64, each warmed up (cached)."""
    from lenet_step import batches, make_fusegrad_train

    data = batches("lenet", 2)
    runs = {}
    for jit in (False, True):
        _, train = make_fusegrad_train("lenet", jit, device="cuda")
        dev = [(fg.tensor(x, device="cuda"), fg.tensor(y, device="cuda")) for x, y in data]
        i = [0]

        def step(train=train, dev=dev, i=i):
            x, y = dev[i[0] % len(dev)]
            i[0] += 1
            return train(x, y).item()

        for _ in range(4):  # compile, record, replay
            step()
        if jit:
            assert train.replays > 0, "the jitted step did not replay"
        runs["jit" if jit else "plain"] = step
    return runs


def measure(rounds: int, calls: int, lenet: bool = True, graphs: bool = True) -> dict:
    """Every figure, as name -> (median, low, high) in microseconds; with a few counts of
    the stub's calls per run (launches, packs)."""
    driver = StubDriver()
    out = {}
    with cuda.use_driver(driver):
        launches, run_plan, realize = chain_cases(driver)
        out["launches in the chain"] = launches
        packs = driver.packs
        run_plan()
        out["argument packs per chain run"] = driver.packs - packs
        figures_of("launch, cached plan", per_call_us(run_plan, rounds, calls, launches), out)
        figures_of("launch, realize", per_call_us(realize, rounds, calls, launches), out)
        if lenet:
            for name, step in lenet_cases().items():
                samples = per_call_us(step, rounds, max(1, calls // 4))
                figures_of(f"LeNet-5 b64 step, {name}", samples, out)
    if lenet and graphs:  # a driver that captures CUDA graphs (PyCUDA 2026.1 does not)
        driver = StubDriver(graphs=True)
        with cuda.use_driver(driver):
            for name, step in lenet_cases().items():
                for _ in range(8):  # the steps settle on their addresses, then are graphs
                    step()
                launches = driver.launches
                samples = per_call_us(step, rounds, max(1, calls // 4))
                assert driver.launches == launches, "a step launched kernels, not a graph"
                figures_of(f"LeNet-5 b64 step, {name}, CUDA graphs", samples, out)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="tiny counts: checks it runs")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=40, help="calls per round (LeNet: a quarter)")
    args = ap.parse_args(argv)
    rounds, calls = (3, 2) if args.smoke else (args.rounds, args.calls)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"host cost, stubbed GPU | {cpu} | {rounds} rounds x {calls} calls | median [95% CI]")
    figures = measure(rounds, calls)
    for name, v in figures.items():
        if isinstance(v, tuple):
            print(f"  {name:<48}{v[0]:9.2f}  [{v[1]:.2f}, {v[2]:.2f}]")
        else:
            print(f"  {name:<48}{v:9d}")
    return figures


if __name__ == "__main__":
    main()
