"""Kernels launched and bytes moved per step: layer norm, softmax, cross-entropy, batch
norm (forward + backward alone), and the LeNet, MLP and char transformer training steps.

Run:  .venv/bin/python benchmarks/kernel_counts.py [--only NAME] [--kernels] [--inductor]
      .venv/bin/python benchmarks/kernel_counts.py --time [--rounds 15]

Every kernel a step launches is counted (the engine's observers see each plan's kernel
records; a step that realizes several times counts every run), with the bytes each
kernel reads and writes as its record reports them. The step is run twice first (the
first compiles, the second is what a training loop repeats), then counted once. No
timing: the figures are exact and the same on a quiet and a loaded machine. `--kernels`
lists each kernel with its reason, to see which cuts remain.

With `--inductor`, where PyTorch is installed, the forward + backward workloads also
print how many kernels Inductor generates (torch.compile, a fresh compile per workload;
each C++ kernel its output code compiles, `AsyncCompile.cpp_pybinding`, counted; its
own `metrics.generated_kernel_count` counts candidates too): `-` otherwise.

`--time` times what sibling reductions (pipeline/schedule.py, rule 7) change, paired in one
process: each workload's graph is compiled into two plans, with rule 7 and without it
(`_sibling_reductions` replaced by one that merges nothing, for that compile only), the
outputs of both are checked equal, then the two plans run on the same input buffers in
alternating rounds of back-to-back calls (the order rotating), and the median of the
rounds' ratios (without / with: above 1, rule 7 is faster) is printed with its range and
the load average before and after; then each kernel is launched alone and timed in
alternating rounds, and the medians of each kernel's times are summed (steadier under
load than whole runs; it leaves out the launches a native program saves). The training
steps are timed the same way: every plan one step runs is captured with its input buffers
(the engine's `plan_for`), compiled both ways, and the step's kernels replayed in order
(Python's share of a step is left out).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fusegrad as fg  # noqa: E402
from fusegrad.ir.node import toposort  # noqa: E402
from fusegrad.ir.ops import Ops  # noqa: E402
from fusegrad.nn import functional as F  # noqa: E402
from fusegrad.pipeline import schedule as schedule_module  # noqa: E402
from fusegrad.pipeline.compiler import batch as compiler_batch  # noqa: E402
from fusegrad.pipeline.driver import compile_plan  # noqa: E402
from fusegrad.runtime.engine import engine  # noqa: E402
from fusegrad.stepcache import StepCache  # noqa: E402


def count(step, show: bool = False) -> tuple[int, int]:
    """(kernels, bytes) one call of `step` launches, after two calls to warm up."""
    step()
    step()
    records: list = []

    def observe(plan, recs) -> None:
        records.extend(recs)

    engine.observers.append(observe)
    try:
        step()
    finally:
        engine.observers.remove(observe)
    if show:
        for r in records:
            print(f"    {r.name:<40} {r.shape!s:<16} {r.bytes / 1e3:9.1f} kB  {r.reason}")
    return len(records), sum(r.bytes for r in records)


def norm_step(kind: str, shape=None, realize: bool = True):
    """Forward + backward of one op on fresh leaves (a new batch each call, as a training
    loop has: a graph computed before would be found in memory); realizes the gradients
    (one plan), or with `realize=False` returns the loss and gradients unrealized."""
    rng = np.random.default_rng(0)
    default = {"batch norm": (64, 128), "cross-entropy": (32, 10)}.get(kind, (32, 512))
    shape = shape or default
    arrays = [rng.standard_normal(s).astype(np.float32) for s in (shape, shape[1:], shape[1:])]
    r_array = rng.standard_normal(shape).astype(np.float32)
    target = rng.integers(0, shape[1], shape[0])

    def step():
        x, w, b = (fg.tensor(a, requires_grad=True) for a in arrays)
        r = fg.tensor(r_array)
        if kind == "layer norm affine":
            loss = (F.layer_norm(x, (shape[1],), w, b) * r).sum()
            wanted = (x, w, b)
        elif kind == "layer norm":
            loss = (F.layer_norm(x, (shape[1],)) * r).sum()
            wanted = (x,)
        elif kind == "softmax":
            loss = (F.softmax(x, 1) * r).sum()
            wanted = (x,)
        elif kind == "batch norm":
            loss = (F.batch_norm(x, None, None, w, b, training=True) * r).sum()
            wanted = (x, w, b)
        else:
            loss = F.cross_entropy(x, fg.tensor(target))
            wanted = (x,)
        loss.backward()
        if not realize:
            return [loss, *[t.grad for t in wanted]]
        fg.realize(loss, *[t.grad for t in wanted])

    return step


def model_step(name: str):
    import lenet_step

    data = lenet_step.batches(name, 1)
    _, step = lenet_step.make_fusegrad_step(name)
    return lambda: step(*data[0])


def char_transformer_step():
    import char_transformer_step as bench

    ct, model, opt, xs, ys = bench.first_batch_step()
    return lambda: ct.train_step(model, opt, xs, ys).item()


def inductor_kernels(kind: str) -> int | None:
    """Kernels Inductor generates for the same forward + backward, or None without torch."""
    try:
        import torch
        import torch._dynamo
        from torch._inductor.async_compile import AsyncCompile
    except ImportError:
        return None
    tF = torch.nn.functional
    shape = {"batch norm": (64, 128), "cross-entropy": (32, 10)}.get(kind, (32, 512))
    x = torch.randn(shape, requires_grad=True)
    w = torch.randn(shape[1], requires_grad=True)
    b = torch.randn(shape[1], requires_grad=True)
    r = torch.randn(shape)
    target = torch.randint(0, shape[1], (shape[0],))

    def fn(x, w, b):
        if kind == "layer norm affine":
            return (tF.layer_norm(x, (shape[1],), w, b) * r).sum()
        if kind == "layer norm":
            return (tF.layer_norm(x, (shape[1],)) * r).sum()
        if kind == "softmax":
            return (tF.softmax(x, 1) * r).sum()
        if kind == "batch norm":
            return (tF.batch_norm(x, None, None, w, b, training=True) * r).sum()
        return tF.cross_entropy(x, target)

    made = []  # each C++ kernel Inductor compiles (the CPU's)
    original = AsyncCompile.cpp_pybinding

    def counted(self, *args, **kwargs):
        made.append(args[:1])
        return original(self, *args, **kwargs)

    torch._dynamo.reset()
    AsyncCompile.cpp_pybinding = counted
    try:
        torch.compile(fn)(x, w, b).backward()  # the forward and the backward graph
    finally:
        AsyncCompile.cpp_pybinding = original
    return len(made)


TIMED = [
    ("layer norm affine", (32, 512)),
    ("layer norm affine", (2048, 64)),
    ("layer norm affine", (8192, 1024)),
    ("batch norm", (64, 128)),
    ("batch norm", (4096, 256)),
]


def paired_time(kind: str, shape, rounds: int) -> None:
    """Rule 7 on and off for one workload's graph, alternating (see the module docstring)."""
    outs = norm_step(kind, shape, realize=False)()
    todo = [t.node for t in outs]
    leaves = [n for n in toposort(todo) if n.op is Ops.BUFFER]
    runs = [(both_plans(todo, leaves), [n.arg for n in leaves])]
    calls = max(3, min(200, int(2e6 // max(np.prod(shape), 1))))
    alternate(f"{kind} {shape[0]}x{shape[1]}", runs, rounds, calls)


def both_plans(todo, leaves) -> dict:
    """The plan of `todo` compiled with rule 7 ("with") and without it ("without"), as the
    engine compiles a plan (`Engine.plan_for`), the cache left alone."""
    merge = schedule_module._sibling_reductions
    plans = {}
    for name, rule in (("with", merge), ("without", lambda *args: set())):
        schedule_module._sibling_reductions = rule
        try:
            with compiler_batch():
                plan = compile_plan(todo, leaves, lambda n: n.op is Ops.BUFFER)
                plan.backend.prepare(plan)
        finally:
            schedule_module._sibling_reductions = merge
        plans[name] = plan
    return plans


def alternate(label: str, runs, rounds: int, calls: int) -> None:
    """Check that both versions of every plan agree, then time `calls` replays of all the
    plans in `runs` ([(plans, input buffers)], in their order), the versions alternating."""
    for plans, buffers in runs:
        got = {
            k: [b.numpy().copy() for b in engine.execute(p, buffers)[0]] for k, p in plans.items()
        }
        for x, y in zip(got["with"], got["without"]):
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    kernels = {k: sum(len(plans[k].steps) for plans, _ in runs) for k in ("with", "without")}
    times: dict[str, list[float]] = {"with": [], "without": []}
    order = list(times)
    for r in range(rounds):
        for k in order[r % 2 :] + order[: r % 2]:
            t0 = time.perf_counter()
            for _ in range(calls):
                for plans, buffers in runs:
                    engine.execute(plans[k], buffers)
            times[k].append((time.perf_counter() - t0) / calls)
    # each kernel launched alone and timed (`timed=True`): the median of each kernel's
    # times, summed over the step, is steadier under load than a whole run's time
    alone: dict[tuple, list[float]] = {}
    for r in range(rounds):
        for k in order[r % 2 :] + order[: r % 2]:
            for j, (plans, buffers) in enumerate(runs):
                for i, rec in enumerate(engine.execute(plans[k], buffers, timed=True)[1]):
                    alone.setdefault((k, j, i), []).append(rec.seconds)
    summed = {
        k: sum(statistics.median(v) for (kk, _, _), v in alone.items() if kk == k) * 1e6
        for k in order
    }
    ratios = sorted(x / y for x, y in zip(times["without"], times["with"]))
    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(
        f"{label:<30} {kernels['without']:>3} -> {kernels['with']:<3} "
        f"{us['without']:9.1f} {us['with']:9.1f}"
        f"  {statistics.median(ratios):5.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]"
        f"  {summed['without']:9.1f} {summed['with']:9.1f}"
    )


def step_time(name: str, make, rounds: int) -> None:
    """A training step's kernels replayed: every plan one step runs (captured as the engine
    finds it, with its input buffers) compiled with and without rule 7, then alternated."""
    step = make()
    step()
    step()
    with warnings.catch_warnings():  # (isinstance on torch's deprecated module aliases)
        warnings.simplefilter("ignore")
        caches = [c for c in gc.get_objects() if isinstance(c, StepCache)]
    for cache in caches:
        cache.entries.clear()  # an optimizer's cached step would run without plan_for
    runs = []
    find = engine.plan_for

    def capture(todo, has_value=None):
        plan, leaves, fresh = find(todo, has_value)
        runs.append((list(todo), leaves, [engine.value(n) for n in leaves]))
        return plan, leaves, fresh

    engine.plan_for = capture
    try:
        step()
    finally:
        del engine.plan_for
    runs = [(both_plans(todo, leaves), buffers) for todo, leaves, buffers in runs]
    alternate(f"{name} training step", runs, rounds, 5)


OPS = ["layer norm affine", "layer norm", "softmax", "cross-entropy", "batch norm"]
MODELS = {
    "lenet": lambda: model_step("lenet"),
    "mlp": lambda: model_step("mlp"),
    "char transformer": char_transformer_step,
}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", default="", help="workloads whose name contains this")
    ap.add_argument("--kernels", action="store_true", help="list each kernel and its reason")
    ap.add_argument("--inductor", action="store_true", help="Inductor's counts (needs torch)")
    ap.add_argument("--time", action="store_true", help="rule 7 on vs off, paired")
    ap.add_argument("--rounds", type=int, default=15, help="alternating rounds for --time")
    args = ap.parse_args()
    if args.time:
        print(f"threads {fg.config.threads}, load average {os.getloadavg()}, {args.rounds} rounds")
        print(
            f"{'kernels of':<30} kernels  us without   us with  without/with [range]"
            "  us without, with: kernels alone, summed"
        )
        for kind, shape in TIMED:
            if args.only in kind:
                paired_time(kind, shape, args.rounds)
        for name, make in MODELS.items():
            if args.only in name:
                step_time(name, make, args.rounds)
        print(f"load average after: {os.getloadavg()}")
        return
    print(f"fusegrad kernels per step, threads {fg.config.threads}")
    print(f"{'workload':<40} {'kernels':>8} {'MB moved':>10} {'Inductor':>9}")
    for kind in OPS:
        if args.only in kind:
            kernels, moved = count(norm_step(kind), args.kernels)
            ind = inductor_kernels(kind) if args.inductor else None
            label = f"{kind} {'64x128' if kind == 'batch norm' else '32x512'}, fwd + bwd"
            if kind == "cross-entropy":
                label = "cross-entropy 32x10, fwd + bwd"
            print(f"{label:<40} {kernels:>8} {moved / 1e6:>10.3f} {ind if ind else '-':>9}")
    for name, make in MODELS.items():
        if args.only in name:
            kernels, moved = count(make(), args.kernels)
            print(f"{name + ' training step':<40} {kernels:>8} {moved / 1e6:>10.3f} {'-':>9}")


if __name__ == "__main__":
    main()
