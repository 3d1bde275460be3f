"""One LeNet-5 training step (forward, backward, SGD-momentum update), fusegrad vs PyTorch.

Run:  python benchmarks/lenet_step.py [--model lenet|mlp|both] [--steps 60] [--quick]

- lenet: LeNet-5 on a 64-image MNIST-shaped batch, SGD with momentum 0.9
- mlp:   784-128-64-10 ReLU MLP, batch 64, SGD with momentum 0.9 (`--model mlp`)

Three steps alternate in blocks of 10 back-to-back steps (A B C, B C A, ...) in one
process, on the same data, with torch.set_num_threads equal to fusegrad's
threads, and a 0.2 s pause after each block so that no system's spinning worker
threads steal cores from the next:

- fusegrad eager: the step as a user writes it; every call builds the graph,
  differentiates it and looks its schedule up (no compiling after the first);
- fusegrad jit: the same function under `fusegrad.jit`, which replays the
  step's recorded native programs without running its Python;
- PyTorch eager.

The report is the median ms per step and the ratios fusegrad / PyTorch (below
1: fusegrad is faster). Each step returns the loss as a Python float
(`loss.item()`), so every step has finished when it is timed. Also reported:
fusegrad's first step with an empty compile cache and with a warm one (each in a
fresh process, so the in-memory caches are empty too), the kernels per step, and
the bytes they move.
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
PAUSE = 0.2  # seconds between blocks of two systems (BENCHMARKS.md: spinning threads fight)
BLOCK = 10  # steps each system runs back to back before the other's turn
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


def make_fusegrad_train(name: str, jit: bool = False, device: str | None = None):
    """(model, train): train(x, y) on fusegrad tensors on `device` (the default device
    where None) trains one batch and returns the loss tensor (under `fg.jit` when `jit`)."""
    import fusegrad as fg
    from fusegrad.nn import functional as F

    model = fusegrad_model(name)
    if device is not None:
        model = model.to(device)
    opt = fg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train(x, y):  # the loop body as the engine issue writes it
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, fg.jit(train) if jit else train


def make_fusegrad_step(name: str, jit: bool = False):
    """(model, step): step(x, y) on numpy arrays trains one batch and returns the loss."""
    import fusegrad as fg

    model, run = make_fusegrad_train(name, jit)

    def step(x, y):
        return run(fg.tensor(x), fg.tensor(y)).item()

    return model, step


def make_torch_step(name: str, fg_model):
    import torch

    model = torch_model(name, fg_model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        loss = lossf(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        return loss.item()

    return step


def first_step_seconds(name: str, cache_dir: str) -> dict:
    """Time the first step in a fresh process with the given compile cache folder."""
    code = "\n".join(
        [
            f"import time, sys; sys.path.insert(0, {HERE!r}); import lenet_step as b",
            f"data = b.batches({name!r}, 2)",
            f"model, step = b.make_fusegrad_step({name!r})",
            "t = time.perf_counter(); step(*data[0]); first = time.perf_counter() - t",
            "from fusegrad.pipeline import compiler",
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
    model, eager_step = make_fusegrad_step(name)
    _, jit_step = make_fusegrad_step(name, jit=True)
    steps_by_system = {"fusegrad eager": eager_step, "fusegrad jit": jit_step}
    try:
        import torch

        torch.set_num_threads(fg.config.threads)
        steps_by_system["PyTorch eager"] = make_torch_step(name, model)
    except ImportError:
        pass
    for i in range(4):  # warm up: the first fusegrad step compiles, the jit records two
        for step in steps_by_system.values():
            step(*data[i % len(data)])
    from fusegrad.runtime.engine import stats

    times: dict[str, list[float]] = {k: [] for k in steps_by_system}
    scheduled = stats["scheduled"]
    order = list(steps_by_system)
    rounds = max(1, steps // BLOCK)
    for r in range(rounds):
        for k in order[r % len(order) :] + order[: r % len(order)]:  # rotate who goes first
            for i in range(BLOCK):  # a block of steps back to back, as a training loop runs
                x, y = data[(r * BLOCK + i) % len(data)]
                t = time.perf_counter()
                steps_by_system[k](x, y)
                times[k].append(time.perf_counter() - t)
            time.sleep(PAUSE)  # spinning worker threads (ours, OpenMP's) park before the next
    per_step, moved, floor = _kernels_per_step(name)
    ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    print(f"\n{name}: {rounds * BLOCK} steps each, threads {fg.config.threads}")
    for k, v in ms.items():
        print(f"  {k:<15} {v:8.2f} ms/step (median)")
    print(f"  kernels per step: {per_step}")
    print(
        f"  bytes moved by the step's kernels: {moved / 1e6:.2f} MB; the tensors a step must "
        f"touch (batch, parameters and momentum read, parameters, momentum and loss written): "
        f"{floor / 1e6:.2f} MB (ratio {moved / floor:.1f})"
    )
    if "PyTorch eager" in ms:
        torch_ms = ms["PyTorch eager"]
        for k in ("fusegrad eager", "fusegrad jit"):
            print(f"  ratio {k} / PyTorch eager = {ms[k] / torch_ms:.2f}  (below 1: faster)")
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
