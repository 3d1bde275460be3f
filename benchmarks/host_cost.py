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

Targets: at most 5 us per launch, at most 0.3 ms per cached LeNet step.

Before and after, paired:  .venv/bin/python benchmarks/host_cost.py --against REF [--pairs 5]
runs this benchmark alternately on fusegrad at git REF (extracted into a temporary folder)
and on this tree, `--pairs` times each, in fresh processes, and prints each figure's
medians and the ratio before / after of every pair (above 1: this tree is faster), with
the load average and the commits measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import fusegrad as fg
from fusegrad.runtime import cuda
from fusegrad.runtime.cuda_stub import StubDriver
from fusegrad.runtime.engine import engine

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from machine import cpu_name, load_average, source_version  # noqa: E402  (same folder; no torch)

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


def row_op_cases() -> dict:
    """gpu.py's memory-bound ops as whole calls (graph building, plan lookup, launches,
    the result's buffer), on small inputs: their host cost over the kernel's time (a layer norm's
    the most)."""
    F = fg.nn.functional
    rng = np.random.default_rng(0)
    a = fg.tensor(rng.standard_normal((64, 1024)).astype(np.float32), device="cuda").realize()
    x = fg.tensor(rng.standard_normal(1 << 16).astype(np.float32), device="cuda").realize()
    runs = {
        "copy": lambda: (x + 0).realize(),
        "softmax": lambda: a.softmax(1).realize(),
        "layer norm": lambda: F.layer_norm(a, (1024,)).realize(),
        "row sum": lambda: a.sum(1).realize(),
        "full sum": lambda: x.sum().realize(),
    }
    for run in runs.values():
        for _ in range(3):  # compiled, cached
            run()
    return runs


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
        for name, run in row_op_cases().items():
            figures_of(f"{name}, whole call", per_call_us(run, rounds, calls), out)
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


def importable_tree(ref: str, root: str) -> str:
    """fusegrad at git `ref`, extracted into a temporary folder laid out as Python imports
    it (pyproject maps fusegrad to frontend/, fusegrad.ir to ir/, ...): the folder to put
    on PYTHONPATH."""
    tmp = tempfile.mkdtemp(prefix="fusegrad-host-cost-")
    tree = os.path.join(tmp, "tree")
    os.mkdir(tree)
    archive = subprocess.run(["git", "-C", root, "archive", ref], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    package = os.path.join(tmp, "path", "fusegrad")
    shutil.copytree(os.path.join(tree, "frontend"), package)
    # (codegen: the folder of refs from before the pipeline package)
    for sub in ("ir", "codegen", "pipeline", "runtime", "nn", "datasets", "distributed"):
        if os.path.isdir(os.path.join(tree, sub)) and not os.path.exists(
            os.path.join(package, sub)
        ):
            os.symlink(os.path.join(tree, sub), os.path.join(package, sub))
    return os.path.join(tmp, "path")


def paired(ref: str, pairs: int, rounds: int, calls: int) -> None:
    """Before (fusegrad at `ref`) and after (this tree), alternately, each in a fresh process
    running this file's `measure`; each figure's medians and per-pair ratios."""
    root = os.path.dirname(HERE)
    path = importable_tree(ref, root)
    commit = subprocess.run(
        ["git", "-C", root, "rev-parse", "--short", ref], capture_output=True, text=True
    ).stdout.strip()
    print(f"host cost, stubbed GPU, paired | {cpu_name()} | {rounds} rounds x {calls} calls")
    print(f"before: {ref} ({commit}) | after: {source_version(root)} | {pairs} pairs")
    print(f"load average before: {load_average()}")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        for i in range(pairs):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for which in order:
                env = dict(os.environ)
                if which == "before":
                    env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
                out = os.path.join(os.path.dirname(path), f"{which}{i}.json")
                argv = [sys.executable, os.path.abspath(__file__), "--json", out]
                argv += ["--rounds", str(rounds), "--calls", str(calls)]
                subprocess.run(argv, env=env, check=True, capture_output=True)
                with open(out) as f:
                    runs[which].append(json.load(f))
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    print(f"load average after:  {load_average()}")
    assert runs["before"][0]["fusegrad"].startswith(path), "before did not import REF's tree"
    print(f"{'CPU time, us (median of rounds)':<52}{'before':>10}{'after':>10}   before/after")
    for name in runs["after"][0]["figures"]:
        if not name.endswith("CPU (us)") or name not in runs["before"][0]["figures"]:
            continue
        b = [r["figures"][name][0] for r in runs["before"]]
        a = [r["figures"][name][0] for r in runs["after"]]
        ratios = sorted(x / y for x, y in zip(b, a))
        print(
            f"  {name[: -len(', CPU (us)')]:<50}{statistics.median(b):10.1f}"
            f"{statistics.median(a):10.1f}   {statistics.median(ratios):.2f} "
            f"(pairs {ratios[0]:.2f}-{ratios[-1]:.2f})"
        )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="tiny counts: checks it runs")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=40, help="calls per round (LeNet: a quarter)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--against", metavar="REF", help="pair this tree with fusegrad at git REF")
    ap.add_argument("--pairs", type=int, default=5, help="with --against: before/after pairs")
    args = ap.parse_args(argv)
    rounds, calls = (3, 2) if args.smoke else (args.rounds, args.calls)
    if args.against:
        paired(args.against, args.pairs, rounds, calls)
        return {}
    print(
        f"host cost, stubbed GPU | {cpu_name()} | {rounds} rounds x {calls} calls | median [95% CI]"
    )
    print(f"fusegrad at {source_version(os.path.dirname(HERE))} | load average {load_average()}")
    figures = measure(rounds, calls)
    for name, v in figures.items():
        if isinstance(v, tuple):
            print(f"  {name:<48}{v[0]:9.2f}  [{v[1]:.2f}, {v[2]:.2f}]")
        else:
            print(f"  {name:<48}{v:9d}")
    print(f"load average after: {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"fusegrad": os.path.abspath(fg.__file__), "figures": figures}, f)
    return figures


if __name__ == "__main__":
    main()
