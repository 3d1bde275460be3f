"""The first training step with an empty and with a warm compile cache, phase by phase.

Run:  .venv/bin/python benchmarks/cold_start.py [--model MODEL] [--runs 3]
                                                [--against OTHER_PYTHON]

MODEL: lenet, transformer, both (the default: those two), resnet18, gpt, vit or lstm.

Each first step runs in a fresh process (`python -c`), so nothing is compiled or
imported beforehand: LeNet-5 (batch 64, SGD with momentum, the loop body of
lenet_step.py) and the char transformer (batch 32 x 64 chars, dim 64, 4 heads, 2
layers, AdamW with clipping: char_transformer_step.py's step), or one of models.py's
real models (its plain-loop step). "cold" is a new, empty
`FUSEGRAD_CACHE` folder; "warm" is a second fresh process on the folder the cold one
filled (the disk cache only: no plan or kernel survives a process).

For each run it prints the step's wall time, its CPU time (this process and the forked
compilers it waited for: on a loaded machine the wall time says little, the CPU time
still says how much work the first step is), and where compile time went
(`fusegrad.runtime.phases`: schedule, lower, render, llvm, program), and how many
kernels were compiled or read from disk. The import of fusegrad and the building of
the model are not in `first`.

`--against PYTHON` alternates every run with another interpreter (another checkout's
virtual environment, say main's), cold A, cold B, warm A, warm B, the order swapped
each run, and prints the paired ratio of each run and their median: on a shared,
noisy machine only such ratios compare. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PHASES = ("autodiff", "key", "schedule", "lower", "render", "llvm", "program")

CPU_SECONDS = """
import resource
def cpu_seconds():  # this process's CPU time and its (forked compilers') children's
    usage = map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return sum(r.ru_utime + r.ru_stime for r in usage)
"""

LENET = """
import sys, time
sys.path.insert(0, {here!r})
import lenet_step as b
data = b.batches("lenet", 1)
model, step = b.make_fusegrad_step("lenet")
cpu0, t = cpu_seconds(), time.perf_counter()
step(*data[0])
first, cpu = time.perf_counter() - t, cpu_seconds() - cpu0
"""

TRANSFORMER = """
import sys, time
sys.path.insert(0, {here!r})
import char_transformer_step as b
ct, model, opt, x, y = b.first_batch_step()
cpu0, t = cpu_seconds(), time.perf_counter()
ct.train_step(model, opt, x, y).item()
first, cpu = time.perf_counter() - t, cpu_seconds() - cpu0
"""

REAL = """
import sys, time
sys.path.insert(0, {here!r})
import models
_, batch, step = models.fusegrad_step({name!r})
x, y = batch(0)
cpu0, t = cpu_seconds(), time.perf_counter()
step(x, y)
first, cpu = time.perf_counter() - t, cpu_seconds() - cpu0
"""

REPORT = """
import json
from fusegrad.pipeline import compiler
from fusegrad.runtime import phases
print(json.dumps({"first": first, "cpu": cpu, **compiler.stats, **phases.snapshot()}))
"""

MODELS = {"lenet": LENET, "transformer": TRANSFORMER}
REAL_MODELS = ("resnet18", "gpt", "vit", "lstm")  # benchmarks/models.py's, by their step


def first_step(model: str, cache: str, python: str = sys.executable) -> dict:
    """The first step of `model` in a fresh process of `python` on the cache folder."""
    body = MODELS.get(model, REAL).format(here=HERE, name=model)
    code = CPU_SECONDS + body + REPORT
    env = dict(os.environ, FUSEGRAD_CACHE=cache)
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{python}: the first step of {model} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def describe(r: dict) -> str:
    parts = " ".join(f"{k} {r.get(k, 0.0):.2f}" for k in PHASES)
    cpu = f", cpu {r['cpu']:.2f} s" if "cpu" in r else ""
    return (
        f"{r['first']:6.2f} s  ({parts}; {r['compiled']} compiled, {r['disk_hits']} from disk{cpu})"
    )


def bench(model: str, runs: int, against: str | None) -> None:
    systems = {"this": sys.executable}
    if against:
        systems["other"] = against
    results = {(s, how): [] for s in systems for how in ("cold", "warm")}
    print(f"\n{model}: first step, {runs} run(s), each in a fresh process")
    for r in range(runs):
        order = list(systems) if r % 2 == 0 else list(systems)[::-1]
        folders = {s: tempfile.TemporaryDirectory() for s in systems}
        try:
            for how in ("cold", "warm"):
                for s in order:
                    got = first_step(model, folders[s].name, systems[s])
                    results[s, how].append(got)
                    print(f"  run {r + 1} {how} {s:<5} {describe(got)}")
        finally:
            for f in folders.values():
                f.cleanup()
    for how in ("cold", "warm"):
        for s in systems:
            firsts = [g["first"] for g in results[s, how]]
            cpus = [g["cpu"] for g in results[s, how] if "cpu" in g]
            print(
                f"  {how} {s:<5} median {statistics.median(firsts):.2f} s, runs "
                f"{[round(f, 2) for f in firsts]}"
                + (f"; CPU (with children) median {statistics.median(cpus):.2f} s" if cpus else "")
            )
        if against:
            ratios = [
                a["first"] / b["first"] for a, b in zip(results["this", how], results["other", how])
            ]
            print(
                f"  {how}: this / other per run {[round(x, 2) for x in ratios]}, "
                f"median {statistics.median(ratios):.2f} (below 1: this is faster)"
            )
            cpus = [
                a["cpu"] / b["cpu"]
                for a, b in zip(results["this", how], results["other", how])
                if a.get("cpu") and b.get("cpu")
            ]
            if cpus:
                print(
                    f"  {how}: CPU this / other per run {[round(x, 2) for x in cpus]}, "
                    f"median {statistics.median(cpus):.2f}"
                )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--model", choices=["lenet", "transformer", "both", *REAL_MODELS], default="both"
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--against", help="another python (venv) to alternate with")
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()}, cpus {os.cpu_count()}")
    for model in ["lenet", "transformer"] if args.model == "both" else [args.model]:
        bench(model, args.runs, args.against)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
