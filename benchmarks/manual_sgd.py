"""The textbook hand-written SGD loop: does a step cost the same at step 1000 as at step 10?

Run:  python benchmarks/manual_sgd.py [--steps 1000] [--quick]

A 784-128-64-10 ReLU MLP, batch 64, cross entropy, trained with

    loss = F.cross_entropy(model(x), y)
    loss.backward()
    with no_grad():
        for p in model.parameters():
            <update>
            p.grad = None            (or p.grad.zero_())
    loss.item()

for each spelling of the update: `p -= lr * p.grad`, `p.data -= lr * p.grad`,
`p.add_(p.grad, alpha=-lr)`, `p.sub_(lr * p.grad)` (and the first with
`p.grad.zero_()`), and `opt.step()` of `fg.optim.SGD` for comparison; the same
loops in PyTorch when it is importable (torch.set_num_threads equal to
fusegrad's threads). Reported: the ms per step around steps 10, 100 and 1000
(the fastest of steps 6-15, 91-110 and the last 20: other processes on a shared
machine only add time, while an update that chained each step onto the last would
raise every step of the window), and the ratio step1000 / step10 (the target is
within 1.5).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

LR = 0.01


def batch():
    rng = np.random.default_rng(0)
    return rng.standard_normal((64, 784)).astype(np.float32), rng.integers(0, 10, 64)


FG_UPDATES = {
    "p -= lr * p.grad": lambda p: p.__isub__(LR * p.grad),
    "p.data -= lr * p.grad": lambda p: p.data.__isub__(LR * p.grad),
    "p.add_(p.grad, alpha=-lr)": lambda p: p.add_(p.grad, alpha=-LR),
    "p.sub_(lr * p.grad)": lambda p: p.sub_(LR * p.grad),
}


def fusegrad_loop(update: str, zero: str):
    """step(): one training step of the loop with this update spelling; returns the loss."""
    import fusegrad as fg
    from fusegrad import nn
    from fusegrad.nn import functional as F

    fg.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10)
    )
    x, y = (fg.tensor(a) for a in batch())
    params = list(model.parameters())
    if update == "opt.step()":
        opt = fg.optim.SGD(params, lr=LR)

        def step():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()

        return step
    apply = FG_UPDATES[update]

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        with fg.no_grad():
            for p in params:
                apply(p)
        for p in params:
            if zero == "zero_":
                p.grad.zero_()
            else:
                p.grad = None
        return loss.item()

    return step


def torch_loop(update: str, zero: str):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )
    x, y = (torch.from_numpy(a) for a in batch())
    params = list(model.parameters())
    lossf = torch.nn.CrossEntropyLoss()
    if update == "opt.step()":
        opt = torch.optim.SGD(params, lr=LR)

        def step():
            opt.zero_grad()
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()

        return step
    updates = {
        "p -= lr * p.grad": lambda p: p.__isub__(LR * p.grad),
        "p.data -= lr * p.grad": lambda p: p.data.__isub__(LR * p.grad),
        "p.add_(p.grad, alpha=-lr)": lambda p: p.add_(p.grad, alpha=-LR),
        "p.sub_(lr * p.grad)": lambda p: p.sub_(LR * p.grad),
    }
    apply = updates[update]

    def step():
        loss = lossf(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                apply(p)
        for p in params:
            if zero == "zero_":
                p.grad.zero_()
            else:
                p.grad = None
        return loss.item()

    return step


def timed(step, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        out.append(time.perf_counter() - t)
    return out


def at(times: list[float], lo: int, hi: int) -> float:
    """The fastest of steps lo..hi (1-based, inclusive), in ms."""
    return min(times[lo - 1 : hi]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="200 steps")
    args = ap.parse_args()
    steps = 200 if args.quick else args.steps
    import fusegrad as fg

    systems = {"fusegrad": fusegrad_loop}
    try:
        import torch

        torch.set_num_threads(fg.config.threads)
        systems["PyTorch"] = torch_loop
    except ImportError:
        print("PyTorch not installed: no side-by-side figures")
    print(f"load average: {os.getloadavg()}; threads {fg.config.threads}; {steps} steps each")
    loops = [(u, "none") for u in FG_UPDATES] + [
        ("p -= lr * p.grad", "zero_"),
        ("opt.step()", "none"),
    ]
    last = (max(steps - 19, 1), steps)
    head = f"  {'update':<27} {'grads':<6} {'system':<9} {'step 10':>8} {'step 100':>9} "
    print(head + f"{'step ' + str(steps):>10} {'ratio':>6}  (ms per step, fastest of a window)")
    for update, zero in loops:
        for name, make in systems.items():
            times = timed(make(update, zero), steps)
            s10, s100, s_last = at(times, 6, 15), at(times, 91, 110), at(times, *last)
            print(
                f"  {update:<27} {zero:<6} {name:<9} {s10:8.2f} {s100:9.2f} {s_last:10.2f} "
                f"{s_last / s10:6.2f}"
            )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
