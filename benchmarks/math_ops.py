"""Elementwise math over a large tensor: what one kernel of each op takes, beside PyTorch.

Run:  .venv/bin/python benchmarks/math_ops.py [--n 4194304] [--rounds 15] [--only fmod,tan]
                                              [--dtype float32|float64|both]

For each op, `--n` elements (a normal sample times 100, the divisor uniform on [0.5, 3)),
fusegrad's call (the graph built and realized, its plan cached) and PyTorch eager's
alternate round by round, the order flipping each round (shared/BENCHMARKS.md); reported:
each system's median milliseconds and the median of the rounds' ratios, PyTorch's time over
fusegrad's (above 1: fusegrad faster), with a 95% bootstrap interval. Both use every core
(`torch.set_num_threads`). fusegrad's values are exact or within a few ulps where PyTorch's
are not (docs/NUMERICS.md: fmod at huge ratios, sin/cos/tan at huge arguments); the inputs
here are where both are right.

No figure here is a test: the machine is shared and noisy, so figures go to
benchmarks/README.md with the CPU and load they were taken under.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from machine import cpu_name, load_average, source_version  # noqa: E402

OPS = {
    "fmod(x, y)": lambda m, x, y: m.fmod(x, y),
    "x % y": lambda m, x, y: x % y,
    "x // y": lambda m, x, y: x // y,
    "fmod(x, 2.5)": lambda m, x, y: m.fmod(x, 2.5),
    "x.sin()": lambda m, x, y: x.sin(),
    "x.cos()": lambda m, x, y: x.cos(),
    "x.tan()": lambda m, x, y: x.tan(),
    "x.exp()": lambda m, x, y: (x * 0.01).exp(),
    "x.log1p()": lambda m, x, y: y.log1p(),
    "x.atan()": lambda m, x, y: x.atan(),
    "x.erf()": lambda m, x, y: (x * 0.02).erf(),
    "x.erfinv()": lambda m, x, y: ((y - 1.75) * 0.79).erfinv(),
    "x.exp2()": lambda m, x, y: (x * 0.5).exp2(),
    "x.expm1()": lambda m, x, y: (x * 0.01).expm1(),
    "x.round()": lambda m, x, y: x.round(),
}
BOOTSTRAP = 2000


def ratio_interval(torch_s: list[float], fg_s: list[float]) -> tuple[float, float, float]:
    """The median of the rounds' torch / fusegrad ratios and a 95% bootstrap interval."""
    r = np.array(torch_s) / np.array(fg_s)
    picks = np.random.default_rng(0).integers(0, len(r), size=(BOOTSTRAP, len(r)))
    low, high = np.percentile(np.median(r[picks], axis=1), [2.5, 97.5])
    return float(np.median(r)), float(low), float(high)


def compare(fg, torch, op, fg_args, torch_args, rounds: int) -> dict[str, list[float]]:
    """Seconds of each of `rounds` calls of `op`, fusegrad's (realized) and PyTorch's
    alternating, the order flipping each round, after three warm-up calls each."""
    runs = {"fusegrad": lambda: op(fg, *fg_args).realize()}
    if torch:
        runs["torch"] = lambda: op(torch, *torch_args)
    for run in runs.values():  # the plan compiled and cached, the pages faulted
        for _ in range(3):
            run()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(rounds):
        for k in list(runs) if r % 2 == 0 else list(runs)[::-1]:
            t0 = time.perf_counter()
            runs[k]()
            times[k].append(time.perf_counter() - t0)
            time.sleep(0.05)  # (worker threads park, each system's alike)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 22, help="elements")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--only", help="comma-separated op names as listed (a substring each)")
    ap.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    args = ap.parse_args()

    import fusegrad as fg

    try:
        import torch

        torch.set_num_threads(fg.config.threads)
    except ImportError:
        torch = None
    print(f"CPU: {cpu_name()} | {source_version()} | load {load_average()}")
    version = torch.__version__ if torch else "-"
    print(f"{args.n:,} elements, {args.rounds} rounds; torch: {version}")
    wanted = args.only.split(",") if args.only else None
    ops = {k: v for k, v in OPS.items() if wanted is None or any(s in k for s in wanted)}
    dtypes = ["float32", "float64"] if args.dtype == "both" else [args.dtype]
    rng = np.random.default_rng(0)
    for dt in dtypes:
        xn = (rng.standard_normal(args.n) * 100).astype(dt)
        yn = rng.uniform(0.5, 3.0, args.n).astype(dt)
        x, y = fg.tensor(xn).realize(), fg.tensor(yn).realize()
        tx, ty = (torch.from_numpy(xn), torch.from_numpy(yn)) if torch else (None, None)
        print(f"\n{dt:8s} {'op':14s} {'fusegrad ms':>11s} {'torch ms':>9s}  torch / fusegrad")
        for name, op in ops.items():
            times = compare(fg, torch, op, (x, y), (tx, ty), args.rounds)
            fg_ms = statistics.median(times["fusegrad"]) * 1e3
            if torch:
                med, low, high = ratio_interval(times["torch"], times["fusegrad"])
                t_ms = statistics.median(times["torch"]) * 1e3
                said = f"{med:.2f} [{low:.2f}, {high:.2f}]"
                print(f"{'':8s} {name:14s} {fg_ms:11.2f} {t_ms:9.2f}  {said}")
            else:
                print(f"{'':8s} {name:14s} {fg_ms:11.2f} {'-':>9s}")
    print(f"\nload after: {load_average()}")


if __name__ == "__main__":
    main()
