"""One training step (forward, backward, optimizer update), fusegrad vs PyTorch eager.

Run:  python benchmarks/train_step.py [--model lenet|mlp|both] [--steps 60] [--quick]

- lenet: LeNet-5 on a 64-image MNIST-shaped batch, SGD with momentum 0.9
- mlp:   784-128-64-10 ReLU MLP, batch 64, SGD with momentum 0.9

The two systems alternate step by step (A B A B ...) in one process, on the same
data, with torch.set_num_threads equal to fusegrad's threads; the report is the
median ms per step and the ratio fusegrad / PyTorch (below 1: fusegrad is
faster). Each fusegrad step realizes loss, gradients and updated parameters
(`loss.item()` reads the value the step computed). Also reported: fusegrad's
first step with an empty compile cache and with a warm one (each in a fresh
process, so the in-memory caches are empty too) and the kernels per step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PAUSE = 0.05  # seconds between the two systems (BENCHMARKS.md: spinning threads fight)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def fusegrad_model(name: str):
    import fusegrad as fg
    from fusegrad import nn

    fg.manual_seed(0)
    if name == "lenet":
        from lenet_mnist import LeNet5

        return LeNet5()
    return nn.Sequential(
        nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10)
    )


def torch_model(name: str, fg_model):
    import torch

    if name == "lenet":
        m = torch.nn.Sequential(
            torch.nn.Conv2d(1, 6, 5, padding=2),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(6, 16, 5),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(400, 120),
            torch.nn.ReLU(),
            torch.nn.Linear(120, 84),
            torch.nn.ReLU(),
            torch.nn.Linear(84, 10),
        )
    else:
        m = torch.nn.Sequential(
            torch.nn.Linear(784, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, 10),
        )
    # same starting weights as fusegrad's model
    with torch.no_grad():
        for p, q in zip([p for p in m.parameters()], fg_model.parameters()):
            p.copy_(torch.from_numpy(np.array(q.numpy())))
    return m


def batches(name: str, n: int):
    rng = np.random.default_rng(0)
    shape = (64, 1, 28, 28) if name == "lenet" else (64, 784)
    return [
        (rng.standard_normal(shape).astype(np.float32), rng.integers(0, 10, 64)) for _ in range(n)
    ]


def make_fusegrad_step(name: str):
    import fusegrad as fg
    from fusegrad.nn import functional as F

    model = fusegrad_model(name)
    opt = fg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        loss = F.cross_entropy(model(fg.tensor(x)), fg.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return model, step


def make_torch_step(name: str, fg_model):
    import torch

    model = torch_model(name, fg_model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()

    def step(x, y):
        loss = lossf(model(torch.from_numpy(x)), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def first_step_seconds(name: str, cache_dir: str) -> dict:
    """Time the first step in a fresh process with the given compile cache folder."""
    code = "\n".join(
        [
            f"import time, sys; sys.path.insert(0, {HERE!r}); import train_step as b",
            f"data = b.batches({name!r}, 2)",
            f"model, step = b.make_fusegrad_step({name!r})",
            "t = time.perf_counter(); step(*data[0]); first = time.perf_counter() - t",
            "from fusegrad.runtime import compiler",
            "import json; print(json.dumps({'first': first, **compiler.stats}))",
        ]
    )
    env = dict(os.environ, FUSEGRAD_CACHE=cache_dir)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(name: str, steps: int) -> None:
    import fusegrad as fg

    data = batches(name, 8)
    model, fg_step = make_fusegrad_step(name)
    try:
        import torch

        torch.set_num_threads(fg.config.threads)
        th_step = make_torch_step(name, model)
    except ImportError:
        th_step = None
    # warm up (the first fusegrad step schedules and compiles)
    for i in range(3):
        fg_step(*data[i % len(data)])
        if th_step:
            th_step(*data[i % len(data)])
    from fusegrad.runtime.realize import stats

    fg_times, th_times = [], []
    scheduled = stats["scheduled"]
    for i in range(steps):
        x, y = data[i % len(data)]
        t = time.perf_counter()
        fg_step(x, y)
        fg_times.append(time.perf_counter() - t)
        if th_step:
            time.sleep(PAUSE)  # let fusegrad's worker park before torch runs
            t = time.perf_counter()
            th_step(x, y)
            th_times.append(time.perf_counter() - t)
            time.sleep(PAUSE)  # torch's OpenMP threads spin after each op: let them sleep
    per_step, moved, floor = _kernels_per_step(name)
    fg_ms = np.median(fg_times) * 1e3
    print(f"\n{name}: {steps} steps, threads {fg.config.threads}")
    print(f"  fusegrad       {fg_ms:8.2f} ms/step (median)   kernels per step: {per_step}")
    print(
        f"  bytes moved by the step's kernels: {moved / 1e6:.2f} MB; the tensors a step must "
        f"touch (batch, parameters and momentum read, parameters, momentum and loss written): "
        f"{floor / 1e6:.2f} MB (ratio {moved / floor:.1f})"
    )
    if th_step:
        th_ms = np.median(th_times) * 1e3
        print(f"  PyTorch eager  {th_ms:8.2f} ms/step (median)")
        print(f"  ratio fusegrad / PyTorch = {fg_ms / th_ms:.2f}  (below 1: fusegrad is faster)")
    else:
        print("  PyTorch not installed: no side-by-side figure")
    print(f"  schedules built during the timed steps: {stats['scheduled'] - scheduled}")
    with tempfile.TemporaryDirectory() as cache:
        cold = first_step_seconds(name, cache)
        warm = first_step_seconds(name, cache)
    print(
        f"  first step, empty compile cache: {cold['first']:.2f} s "
        f"({cold['compiled']} kernels compiled)"
    )
    print(
        f"  first step, warm disk cache:     {warm['first']:.2f} s "
        f"({warm['compiled']} compiled, {warm['disk_hits']} from disk)"
    )


def _kernels_per_step(name: str) -> tuple[int, int, int]:
    """Kernels of one step, the bytes they move, and the bytes a step cannot avoid."""
    data = batches(name, 1)
    model, step = make_fusegrad_step(name)
    step(*data[0])
    import fusegrad as fg

    records = fg.kernels(next(iter(model.parameters())))
    moved = sum(r.bytes for r in records)
    params = sum(p.numel() * 4 for p in model.parameters())
    x, y = data[0]
    floor = x.nbytes + y.nbytes + 2 * params + 2 * params + 4
    return len(records), moved, floor


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", choices=["lenet", "mlp", "both"], default="both")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="20 steps")
    args = ap.parse_args()
    steps = 20 if args.quick else args.steps
    print(f"load average: {os.getloadavg()}")
    for name in ["lenet", "mlp"] if args.model == "both" else [args.model]:
        bench(name, steps)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
