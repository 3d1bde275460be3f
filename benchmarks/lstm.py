"""One training step of an LSTM, fusegrad (plain loop and fg.jit) against PyTorch eager.

Run:  .venv/bin/python benchmarks/lstm.py [--quick] [--batch 32] [--length 50] [--hidden 128]

The step: `nn.LSTM(input 128, hidden 128)` over a (length 50, batch 32)
sequence, a linear layer on the last hidden state, MSE against a target,
backward, Adam. A timed step is what a training loop does: build the graph,
backward, the optimizer step, read the loss (`loss.item()`), so fusegrad's
scheduling, launch and Python overhead are inside the time, as PyTorch's are.

fusegrad runs it two ways: **plain** (every call builds the graph, differentiates
it and looks its schedule up) and **fg.jit** (the step recorded once and replayed).
PyTorch (optional; its columns print `-`) runs eagerly with the same number of threads.

How the numbers are taken (see README.md here):
- all systems start from the same weights; before anything is timed, one step's
  loss and gradients are checked against PyTorch's;
- the systems alternate in rounds (a block of steps each, the order rotating),
  with a 0.2 s pause after PyTorch (its OpenMP workers spin after a call);
- each round gives a paired ratio (PyTorch's median over fusegrad's, in the same
  seconds); the table prints the median step times, the median ratio and a 95%
  bootstrap interval for it (`core_ops.paired`): an interval holding 1 cannot tell
  the two apart;
- the first step (schedule + compile, with whatever the compile cache holds) is
  printed apart.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np
from core_ops import paired, source_version  # same folder

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn import functional as F

try:
    import torch
except ImportError:  # PyTorch is optional: its column is left empty
    torch = None

PAUSE_AFTER_TORCH_S = 0.2


def make_data(length: int, batch: int, size: int, count: int = 4):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((length, batch, size)).astype(np.float32) for _ in range(count)]
    ys = [rng.standard_normal((batch, 1)).astype(np.float32) for _ in range(count)]
    return list(zip(xs, ys))


class FusegradStep:
    def __init__(self, size: int, hidden: int, jit: bool):
        fg.manual_seed(0)
        self.lstm, self.fc = nn.LSTM(size, hidden), nn.Linear(hidden, 1)
        params = list(self.lstm.parameters()) + list(self.fc.parameters())
        self.opt = fg.optim.Adam(params, lr=1e-3)
        self.step = fg.jit(self.graph_step) if jit else self.graph_step

    def loss(self, x, y):
        _, (h, _) = self.lstm(x)
        return F.mse_loss(self.fc(h[-1]), y)

    def graph_step(self, x, y):
        loss = self.loss(x, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss

    def __call__(self, x, y) -> float:
        return self.step(fg.tensor(x), fg.tensor(y)).item()


class TorchStep:
    def __init__(self, mine: FusegradStep):
        torch.manual_seed(0)
        hidden = mine.lstm.hidden_size
        self.lstm, self.fc = torch.nn.LSTM(mine.lstm.input_size, hidden), torch.nn.Linear(hidden, 1)
        for module, source in ((self.lstm, mine.lstm), (self.fc, mine.fc)):
            module.load_state_dict(
                {k: torch.from_numpy(np.array(v.numpy())) for k, v in source.state_dict().items()}
            )
        params = list(self.lstm.parameters()) + list(self.fc.parameters())
        self.opt = torch.optim.Adam(params, lr=1e-3)

    def loss(self, x, y):
        _, (h, _) = self.lstm(torch.from_numpy(x))
        return torch.nn.functional.mse_loss(self.fc(h[-1]), torch.from_numpy(y))

    def __call__(self, x, y) -> float:
        loss = self.loss(x, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()


def check_answers(size: int, hidden: int, data) -> float:
    """The loss and every gradient of one step, fusegrad against PyTorch (relative error)."""
    mine = FusegradStep(size, hidden, jit=False)
    theirs = TorchStep(mine)
    x, y = data[0]
    a, b = mine.loss(fg.tensor(x), fg.tensor(y)), theirs.loss(x, y)
    a.backward()
    b.backward()
    pairs = [(a, b)]
    mods = ((mine.lstm, theirs.lstm), (mine.fc, theirs.fc))
    for m, t in mods:
        pairs += [(p.grad, q.grad) for p, q in zip(m.parameters(), t.parameters())]
    worst = 0.0
    for p, q in pairs:
        p, q = np.asarray(p.numpy(), np.float64), q.detach().numpy().astype(np.float64)
        err = float(np.abs(p - q).max() / (np.abs(q).max() + 1e-12))
        if not err < 1e-3:
            raise SystemExit(f"fusegrad and PyTorch differ by {err:.2e} (relative)")
        worst = max(worst, err)
    return worst


def alternate(steps: dict, data, rounds: int, per_block: int) -> dict[str, list[float]]:
    """Per round and system, the median of a block of steps; the order rotates each round."""
    names = list(steps)
    medians: dict[str, list[float]] = {n: [] for n in names}
    k = 0
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            times = []
            for _ in range(per_block):
                x, y = data[k % len(data)]
                k += 1
                t0 = time.perf_counter()
                steps[name](x, y)
                times.append(time.perf_counter() - t0)
            medians[name].append(statistics.median(times))
            if name == "torch":
                time.sleep(PAUSE_AFTER_TORCH_S)
    return medians


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--input", type=int, default=128, help="input features per step")
    args = ap.parse_args()
    if torch is not None:
        torch.set_num_threads(fg.config.threads)
    rounds, per_block = (4, 3) if args.quick else (12, 5)
    print(
        f"LSTM training step, batch {args.batch}, length {args.length}, input {args.input}, "
        f"hidden {args.hidden} | fusegrad {source_version()}, {fg.config.threads} threads | "
        f"torch {torch.__version__ + f', {torch.get_num_threads()} threads' if torch else '-'}"
    )
    data = make_data(args.length, args.batch, args.input)
    err = check_answers(args.input, args.hidden, data) if torch is not None else None
    steps = {
        "plain": FusegradStep(args.input, args.hidden, jit=False),
        "jit": FusegradStep(args.input, args.hidden, jit=True),
    }
    first = {}
    for name, step in steps.items():
        t0 = time.perf_counter()
        step(*data[0])
        first[name] = time.perf_counter() - t0
    if torch is not None:
        steps["torch"] = TorchStep(steps["plain"])
    alternate(steps, data, 1, 2)  # warm-up: record, fill pools, let PyTorch settle
    medians = alternate(steps, data, rounds, per_block)
    ms = {name: statistics.median(v) * 1e3 for name, v in medians.items()}
    print(
        f"\nfirst step (schedule + compile): plain {first['plain']:.1f} s, "
        f"jit {first['jit']:.1f} s; max err vs PyTorch "
        + (f"{err:.1e}" if err is not None else "-")
    )
    print(f"\nmedian ms per training step over {rounds} rounds of {per_block} steps")
    for name in ("plain", "jit"):
        line = f"  fusegrad {name:<6}{ms[name]:9.2f} ms"
        if torch is not None:
            ratio, low, high, wins = paired(medians["torch"], medians[name])
            line += (
                f"   torch/{name} {ratio:5.2f} [{low:4.2f}, {high:4.2f}], "
                f"faster in {wins} of {rounds} rounds"
            )
        print(line)
    print(f"  torch eager    {ms['torch']:9.2f} ms" if torch is not None else "  torch -")
    print("(torch/... above 1 means fusegrad is faster)")


if __name__ == "__main__":
    main()
