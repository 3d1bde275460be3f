"""Where a plain training step's time goes, line by line of the loop body.

Run:  python benchmarks/step_phases.py [--model mlp|lenet] [--steps 600]

Times each line of the engine issue's loop (`fg.tensor` of the batch,
`opt.zero_grad()`, the forward, the loss, `loss.backward()`, `opt.step()`,
`loss.item()`) and, inside the step, the native program alone, over `--steps`
steps in one process after 100 warm-up steps; prints the median and mean of each
in microseconds. A profile, not a comparison: for fusegrad against PyTorch use
lenet_step.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lenet_step  # noqa: E402  (the same models and batches)

import fusegrad as fg  # noqa: E402
from fusegrad.nn import functional as F  # noqa: E402
from fusegrad.runtime import cpu_backend  # noqa: E402

PHASES = ["fg.tensor", "zero_grad", "forward", "loss", "backward", "step", "item"]
WARMUP = 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", choices=["mlp", "lenet"], default="mlp")
    ap.add_argument("--steps", type=int, default=600)
    args = ap.parse_args()

    model = lenet_step.fusegrad_model(args.model)
    opt = fg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = lenet_step.batches(args.model, 8)
    program: list[float] = []
    run_threads = cpu_backend.run_threads

    def timed(fn, threads, ptrs, work=0):  # the native program, as the engine runs it
        t = time.perf_counter()
        run_threads(fn, threads, ptrs, work)
        program.append(time.perf_counter() - t)

    cpu_backend.run_threads = timed
    spent = {p: [] for p in PHASES + ["  native program", "whole step"]}
    clock = time.perf_counter
    for i in range(WARMUP + args.steps):
        x, y = data[i % len(data)]
        program.clear()
        t0 = clock()
        xt, yt = fg.tensor(x), fg.tensor(y)
        t1 = clock()
        opt.zero_grad()
        t2 = clock()
        out = model(xt)
        t3 = clock()
        loss = F.cross_entropy(out, yt)
        t4 = clock()
        loss.backward()
        t5 = clock()
        opt.step()
        t6 = clock()
        loss.item()
        t7 = clock()
        if i >= WARMUP:
            marks = [t0, t1, t2, t3, t4, t5, t6, t7]
            for p, a, b in zip(PHASES, marks, marks[1:]):
                spent[p].append((b - a) * 1e6)
            spent["  native program"].append(sum(program) * 1e6)
            spent["whole step"].append((t7 - t0) * 1e6)
    cpu_backend.run_threads = run_threads
    print(f"{args.model}, {args.steps} steps, {fg.config.threads} thread(s): us per step")
    for p, v in spent.items():
        print(f"  {p:<18} median {statistics.median(v):8.1f}   mean {statistics.mean(v):8.1f}")


if __name__ == "__main__":
    main()
