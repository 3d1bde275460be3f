"""Programs whose sizes or constants vary from call to call: what each new one costs.

Run:  .venv/bin/python benchmarks/varying_sizes.py [--only classifier|mlp|rate] [--sizes 40]
                                                   [--compare] [--mark]

- classifier (issue 56's): a sentence classifier (embedding 500 x 64, linear 64 -> 128,
  ReLU, max over time, linear 128 -> 2, cross-entropy, Adam) trained on 40 batches of 16
  sentences whose lengths are drawn from 5..59, twice over the same batches. The first
  pass meets every length for the first time; the second meets none. Each system runs in
  a fresh process, fusegrad's with an empty `FUSEGRAD_CACHE`, PyTorch eager beside it
  where it is installed. Reported: both passes' seconds, the first over the second, the
  plans fusegrad compiled, its compile phases (`fusegrad.runtime.phases`) and its LLVM
  compiles beside the kernels its plans hold (kernels of the same code compile once).
- mlp: a 784-256-10 MLP's forward and backward (SGD) at `--sizes` batch sizes spread over
  1..2000, in one fresh process with an empty cache: the plans compiled (and the LLVM
  compiles of their kernels), the batch sizes whose step compiled anything (each one a
  set of kernels compiled), the seconds of the whole sweep against a second sweep over
  the same sizes, the process's resident memory after each tenth of the sweep and
  after the second (flat, or growing with the sizes seen), and a step's time at five of
  the sizes once met (the min of 15).

- rate: a 784-256-10 MLP (batch 64) trained by a hand-written SGD update
  (`p.add_(p.grad, alpha=-lr)` under no_grad) whose learning rate changes every step
  (`0.01 / (1 + step)`), beside the same loop at a fixed rate: the plans compiled and
  the time per step after 20 warm-up steps, fusegrad (constants whose values change read
  from buffers, `FUSEGRAD_LIFT_CONSTANTS`; with `--compare` also without) and PyTorch eager.

`--device cuda` runs the classifier on the cuda device (the GPU, or the CPU emulator of
its CUDA C with FUSEGRAD_CUDA=emulate), counting the CUDA modules built (generic kernels of
CUDA C: pipeline/cuda_templates.py); its torch row is still PyTorch's on the CPU.
`--compare` runs fusegrad a second time with FUSEGRAD_SIZE_TEMPLATES=0: every kernel of a
new size compiled for its sizes, none run through a generic kernel (pipeline/templates.py).
`--mark` marks the varying dimension dynamic ahead (`fg.mark_dynamic`) in the classifier and
the MLP, as a torch user marks it for torch.compile.

No figure here is a test: the machine is shared and noisy, so figures go to
benchmarks/README.md with the CPU and load they were taken under.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from machine import cpu_name, load_average, source_version  # noqa: E402

COMMON = """
import json, os, resource, sys, time
import numpy as np
MARK = os.environ.get("VARYING_MARK") == "1"
rng = np.random.default_rng(0)
lengths = rng.integers(5, 60, size=40)
batches = [(rng.integers(0, 500, size=(16, int(n))), rng.integers(0, 2, size=16)) for n in lengths]
def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")
"""

CLASSIFIER_FUSEGRAD = """
import fusegrad as fg
from fusegrad import nn
from fusegrad.runtime import phases
from fusegrad.runtime.engine import engine
DEVICE = os.environ.get("VARYING_DEVICE", "cpu")
fg.set_default_device(DEVICE)
fg.manual_seed(0)
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.l1, self.l2 = nn.Embedding(500, 64), nn.Linear(64, 128), nn.Linear(128, 2)
    def forward(self, ids):
        return self.l2(self.l1(self.emb(ids)).relu().max(dim=1).values)
model = Classifier()
opt = fg.optim.Adam(model.parameters(), lr=1e-3)
def one_pass():
    t = time.perf_counter()
    for ids, y in batches:
        x = fg.tensor(ids)
        if MARK:  # (--mark: the sentence length marked dynamic, as torch users mark it)
            fg.mark_dynamic(x, 1)
        loss = nn.functional.cross_entropy(model(x), fg.tensor(y))
        opt.zero_grad(); loss.backward(); opt.step(); loss.item()
    return time.perf_counter() - t
from fusegrad.pipeline import compiler
before = phases.snapshot()
first = one_pass()
after = phases.snapshot()
plans = engine.stats["scheduled"]
compiled = compiler.stats["compiled"]
kernels = len({id(s.record.compiled) for p in engine.plans.values() for s in p.steps})
if DEVICE != "cpu":  # the CUDA modules the plans launch: each one built once
    steps = [s for p in engine.plans.values() for s in p.steps]
    compiled = len({s.record.compiled.kernel.symbol for s in steps})
second = one_pass()
spent = {k: round(after[k] - before.get(k, 0.0), 3) for k in after}
spent = {k: v for k, v in spent.items() if v >= 0.005}
out = {"first": first, "second": second, "plans": plans, "phases": spent}
print(json.dumps({**out, "compiled": compiled, "kernels": kernels}))
"""

CLASSIFIER_TORCH = """
import torch
torch.manual_seed(0); torch.set_num_threads(int(sys.argv[1]))
class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(500, 64)
        self.l1, self.l2 = torch.nn.Linear(64, 128), torch.nn.Linear(128, 2)
    def forward(self, ids):
        return self.l2(self.l1(self.emb(ids)).relu().max(dim=1).values)
model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
def one_pass():
    t = time.perf_counter()
    for ids, y in batches:
        loss = torch.nn.functional.cross_entropy(model(torch.tensor(ids)), torch.tensor(y))
        opt.zero_grad(); loss.backward(); opt.step(); loss.item()
    return time.perf_counter() - t
first = one_pass()
second = one_pass()
print(json.dumps({"first": first, "second": second}))
"""

MLP = """
import fusegrad as fg
from fusegrad import nn
from fusegrad.runtime.engine import engine
fg.manual_seed(0)
from fusegrad.pipeline import compiler
model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
opt = fg.optim.SGD(model.parameters(), lr=0.01)
count = int(sys.argv[1])
sizes = sorted({max(1, round(1 + k * 1999 / max(count - 1, 1))) for k in range(count)})
STEADY = [sizes[len(sizes) * q // 4] for q in (0, 1, 2, 3)] + [sizes[-1]]
data = {}
for n in sizes:
    data[n] = (rng.standard_normal((n, 784), dtype=np.float32), rng.integers(0, 10, size=n))
compiled_at = []  # the batch sizes whose step compiled something (a set of kernels)
def sweep(memory):
    t = time.perf_counter()
    for k, n in enumerate(sizes):
        x, y = data[n]
        before = compiler.stats["compiled"]
        x = fg.tensor(x)
        if MARK:  # (--mark: the batch size marked dynamic)
            fg.mark_dynamic(x, 0)
        loss = nn.functional.cross_entropy(model(x), fg.tensor(y))
        opt.zero_grad(); loss.backward(); opt.step(); loss.item()
        if compiler.stats["compiled"] > before:
            compiled_at.append(n)
        if memory is not None and (k + 1) % max(1, len(sizes) // 10) == 0:
            memory.append(round(rss_mb()))
    return time.perf_counter() - t
memory = []
first = sweep(memory)
plans = engine.stats["scheduled"]
compiled = compiler.stats["compiled"]
second = sweep(None)
out = {"sizes": len(sizes), "first": first, "second": second, "plans": plans, "rss_mb": memory}
out["rss_second"] = round(rss_mb())
out["compiled"] = compiled
out["compiled_at"] = compiled_at
steps = {}  # a step at a size met before: the min of 15 (a generic kernel's, past the first)
for n in STEADY:
    x, y = data[n]
    times = []
    for k in range(18):
        t = time.perf_counter()
        loss = nn.functional.cross_entropy(model(fg.tensor(x)), fg.tensor(y))
        opt.zero_grad(); loss.backward(); opt.step(); loss.item()
        times.append(time.perf_counter() - t)
    steps[n] = round(min(times[3:]) * 1000, 2)
out["steps_ms"] = steps
print(json.dumps(out))
"""


RATE = """
import numpy as np
vary = sys.argv[1] == "1"
if sys.argv[2] == "torch":
    import torch as fg
    from torch import nn
    fg.set_num_threads(int(sys.argv[3]))
    tensor = fg.from_numpy
    plans = lambda: 0
else:
    import fusegrad as fg
    from fusegrad import nn
    from fusegrad.runtime.engine import engine
    tensor = fg.tensor
    plans = lambda: engine.stats["scheduled"]
fg.manual_seed(0)
model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
x = tensor(rng.standard_normal((64, 784), dtype=np.float32))
y = tensor(rng.integers(0, 10, 64))
def step(lr):
    loss = nn.functional.cross_entropy(model(x), y)
    model.zero_grad(); loss.backward()
    with fg.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-lr)
    return loss.item()
for k in range(20):
    step(0.01 / (1 + k) if vary else 0.01)
t = time.perf_counter()
for k in range(20, 120):
    step(0.01 / (1 + k) if vary else 0.01)
print(json.dumps({"ms": (time.perf_counter() - t) * 10, "plans": plans()}))
"""


def run(
    code: str,
    python: str,
    *args: str,
    cache: str | None = None,
    generic: bool = True,
    lift: bool = True,
) -> dict:
    env = dict(os.environ)
    if cache is not None:
        env["FUSEGRAD_CACHE"] = cache
    env["FUSEGRAD_SIZE_TEMPLATES"] = "1" if generic else "0"
    env["FUSEGRAD_LIFT_CONSTANTS"] = "1" if lift else "0"
    out = subprocess.run(
        [python, "-c", COMMON + code, *args], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"the child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def has_torch(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True, check=False)
    return probe.returncode == 0


def classifier(python: str, compare: bool, device: str = "cpu") -> None:
    print("classifier: 40 Adam steps, batch 16, lengths from 5..59, twice over")
    if device != "cpu":
        print(f"  on the {device} device (FUSEGRAD_CUDA={os.environ.get('FUSEGRAD_CUDA', '')})")
    os.environ["VARYING_DEVICE"] = device
    builds = "LLVM compiles" if device == "cpu" else "CUDA modules built"
    for generic in (True, False) if compare else (True,):
        with tempfile.TemporaryDirectory() as cache:
            fg = run(CLASSIFIER_FUSEGRAD, python, cache=cache, generic=generic)
        label = "fusegrad    " if generic else "no generics "
        print(
            f"  {label} first pass {fg['first']:7.3f} s, second {fg['second']:7.3f} s,"
            f" first / second {fg['first'] / fg['second']:6.1f}; {fg['plans']} plans compiled"
        )
        print(
            f"               {fg['compiled']} {builds} for the {fg['kernels']} kernels the"
            " plans hold (kernels of the same code compile once)"
        )
        print(f"               compile phases in the first pass (s): {fg['phases']}")
    if has_torch(python):
        threads = str(os.cpu_count() or 1)
        pt = run(CLASSIFIER_TORCH, python, threads)
        print(
            f"  torch eager  first pass {pt['first']:7.3f} s, second {pt['second']:7.3f} s,"
            f" first / second {pt['first'] / pt['second']:6.1f}"
        )
    else:
        print("  torch eager  - (torch is not installed)")


def mlp(python: str, count: int, compare: bool) -> None:
    for generic in (True, False) if compare else (True,):
        with tempfile.TemporaryDirectory() as cache:
            r = run(MLP, python, str(count), cache=cache, generic=generic)
        label = "" if generic else " (no generic kernels)"
        sweep = f"{r['sizes']} batch sizes in 1..2000"
        print(f"mlp 784-256-10, forward + backward + SGD at {sweep}{label}")
        print(
            f"  plans compiled {r['plans']} ({r['compiled']} LLVM compiles); first sweep"
            f" {r['first']:.2f} s,"
            f" second {r['second']:.2f} s;"
            f" resident MB after each tenth: {r['rss_mb']}, after the second sweep"
            f" {r['rss_second']}"
        )
        at = r["compiled_at"]
        print(f"  sizes whose step compiled kernels: {len(at)} ({', '.join(map(str, at))})")
        steps = ", ".join(f"{n} rows {ms} ms" for n, ms in r["steps_ms"].items())
        print(f"  a step at a size met before (min of 15): {steps}")


def rate(python: str, compare: bool) -> None:
    print("rate: MLP 784-256-10, batch 64, hand-written SGD; 100 steps after 20 (ms a step)")
    threads = str(os.cpu_count() or 1)
    for lift in (True, False) if compare else (True,):
        label = "fusegrad" if lift else "fusegrad, constants in the code"
        for vary in ("0", "1"):
            with tempfile.TemporaryDirectory() as cache:
                r = run(RATE, python, vary, "fg", cache=cache, lift=lift)
            what = "rate 0.01 / (1 + step)" if vary == "1" else "fixed rate 0.01      "
            print(f"  {label:32s} {what}: {r['ms']:7.2f} ms a step, {r['plans']} plans")
    if has_torch(python):
        for vary in ("0", "1"):
            r = run(RATE, python, vary, "torch", threads)
            what = "rate 0.01 / (1 + step)" if vary == "1" else "fixed rate 0.01      "
            print(f"  {'torch eager':32s} {what}: {r['ms']:7.2f} ms a step")
    else:
        print("  torch eager  - (torch is not installed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["classifier", "mlp", "rate"])
    parser.add_argument("--sizes", type=int, default=40, help="batch sizes the MLP sweeps")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run fusegrad without generic kernels (FUSEGRAD_SIZE_TEMPLATES=0) and with"
        " constants kept in the code (FUSEGRAD_LIFT_CONSTANTS=0)",
    )
    parser.add_argument(
        "--mark",
        action="store_true",
        help="the classifier's sentence length and the MLP's batch size marked dynamic"
        " (fg.mark_dynamic) at every step, as a torch user marks them",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="the classifier's device (cuda: the GPU, or the emulator with FUSEGRAD_CUDA="
        "emulate; its builds counted as CUDA modules); the MLP and rate runs stay on the CPU",
    )
    args = parser.parse_args()
    if args.mark:
        os.environ["VARYING_MARK"] = "1"  # (read by the children: `COMMON`)
    python = sys.executable
    print(f"CPU: {cpu_name()} | {source_version()} | load {load_average()}")
    if args.only in (None, "classifier"):
        classifier(python, args.compare, args.device)
    if args.only in (None, "mlp"):
        mlp(python, args.sizes, args.compare)
    if args.only in (None, "rate"):
        rate(python, args.compare)
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
