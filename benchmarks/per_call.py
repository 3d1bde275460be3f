"""One small call from the user's line to its result, fusegrad beside PyTorch eager.

Run:  .venv/bin/python benchmarks/per_call.py [--rounds 15] [--calls 2000]

The call is issue 56's: `(x * 2 + 1).sum().item()` on 1,000 float32 values, a graph of
three ops built, its plan looked up and its one kernel run, and the float read back;
also the same with `.realize()` in place of `.item()` (no read back). The systems
alternate in blocks of `--calls` calls, the order swapped each round, after a warm-up
(fusegrad's plan compiled and its pool's code compiled and settled: the first second of
a process also pays for that thread, `runtime/pool.py`), with
`torch.set_num_threads` at fusegrad's thread count. Reported: each system's median
microseconds a call and fusegrad's over PyTorch's, the median of the rounds' ratios with
a 95% bootstrap interval. Instructions instead of time, stable on a loaded machine:
benchmarks/host_instructions.py.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from machine import cpu_name, load_average, source_version  # noqa: E402

PAUSE = 0.3  # seconds after each block: PyTorch's spinning OpenMP threads park (BENCHMARKS.md)


def bootstrap(ratios: list[float], draws: int = 2000) -> tuple[float, float, float]:
    rng = random.Random(0)
    medians = sorted(float(np.median([rng.choice(ratios) for _ in ratios])) for _ in range(draws))
    return float(np.median(ratios)), medians[draws // 40], medians[-draws // 40 - 1]


def per_call_us(fn, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000, help="calls a system makes per block")
    args = ap.parse_args()
    import fusegrad as fg

    data = np.random.default_rng(0).random(1000, dtype=np.float32)
    x = fg.tensor(data)
    systems = {
        "fusegrad item": lambda: (x * 2 + 1).sum().item(),
        "fusegrad realize": lambda: (x * 2 + 1).sum().realize(),
    }
    try:
        import torch

        torch.set_num_threads(fg.config.threads)
        xt = torch.from_numpy(data.copy())
        systems["torch item"] = lambda: (xt * 2 + 1).sum().item()
        systems["torch realize"] = lambda: (xt * 2 + 1).sum()
    except ImportError:
        pass
    got = systems["fusegrad item"]()
    assert abs(got - float((data.astype(np.float64) * 2 + 1).sum())) < 1e-2, got
    print(f"CPU: {cpu_name()} | {source_version()} | load {load_average()}")
    warm_until = time.perf_counter() + 2.0  # the pool's compile thread, settled
    while time.perf_counter() < warm_until:
        for fn in systems.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in systems}
    order = list(systems)
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            times[name].append(per_call_us(systems[name], args.calls))
            time.sleep(PAUSE)
    for name, ts in times.items():
        print(f"  {name:18s} {np.median(ts):8.2f} us a call (median of {len(ts)} blocks)")
    for what in ("item", "realize"):
        if f"torch {what}" in times:
            ratios = [a / b for a, b in zip(times[f"fusegrad {what}"], times[f"torch {what}"])]
            mid, lo, hi = bootstrap(ratios)
            print(f"  fusegrad / torch, {what}: {mid:.2f} [{lo:.2f}, {hi:.2f}] (below 1: faster)")
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
