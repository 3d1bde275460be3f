"""What building one op's graph costs: the Python each call of an op adds to every step.

Run:  .venv/bin/python benchmarks/op_build.py [--calls 200] [--only erf,floor]

A training loop builds its graph again on every step, even when the step's plan is cached,
so an op written as dozens of tensor operations costs that many tensors' Python on every
call. For each op: the microseconds one call takes to build its graph on an 8 x 16 float32
tensor (nothing computed), the median of 5 blocks of `--calls` calls, and the number of IR
nodes the call leaves under its result (one for an op built as a macro node). Beside it, where
PyTorch is installed, PyTorch eager's microseconds for the same call (computed: its whole
cost). Compare commits by running this file from each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from machine import cpu_name, load_average, source_version  # noqa: E402

OPS = {
    "x.floor()": lambda m, x, y: x.floor(),
    "x.round()": lambda m, x, y: x.round(),
    "x // y": lambda m, x, y: x // y,
    "x % y": lambda m, x, y: x % y,
    "fmod(x, y)": lambda m, x, y: m.fmod(x, y),
    "x.erf()": lambda m, x, y: x.erf(),
    "x.log1p()": lambda m, x, y: x.log1p(),
    "x.expm1()": lambda m, x, y: x.expm1(),
    "x.atan()": lambda m, x, y: x.atan(),
    "x.asin()": lambda m, x, y: (x * 0.5).asin(),
    "atan2(x, y)": lambda m, x, y: m.atan2(x, y),
    "hypot(x, y)": lambda m, x, y: m.hypot(x, y),
    "x.sinh()": lambda m, x, y: x.sinh(),
    "x ** 2.5": lambda m, x, y: x**2.5,
    "x ** y": lambda m, x, y: x**y,
    "x.exp2()": lambda m, x, y: x.exp2(),
    "softplus(x)": lambda m, x, y: m.nn.functional.softplus(x),
    "mish(x)": lambda m, x, y: m.nn.functional.mish(x),
    "elu(x)": lambda m, x, y: m.nn.functional.elu(x),
    "gelu(x, tanh)": lambda m, x, y: m.nn.functional.gelu(x, approximate="tanh"),
    "x.sigmoid()": lambda m, x, y: x.sigmoid(),
    "x * y + 1": lambda m, x, y: x * y + 1,
    "x.sort(-1)": lambda m, x, y: x.sort(-1),
    "x.topk(3)": lambda m, x, y: x.topk(3),
    "x.cumsum(-1)": lambda m, x, y: x.cumsum(-1),
    "x.logsumexp(-1)": lambda m, x, y: x.logsumexp(-1),
    "x.argmax(-1)": lambda m, x, y: x.argmax(-1),
}


def per_call_us(fn, calls: int) -> float:
    fn()
    blocks = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        blocks.append((time.perf_counter() - t) / calls * 1e6)
    return float(np.median(blocks))


def nodes_under(t) -> int:
    from fusegrad.ir.node import toposort

    node = (t[0] if isinstance(t, tuple) else t).node
    return len(toposort([node]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--only", default="", help="comma-separated op names as listed")
    args = ap.parse_args()
    import fusegrad as fg

    rng = np.random.default_rng(0)
    a = (rng.random((8, 16), dtype=np.float32) + 0.1).astype(np.float32)
    b = (rng.random((8, 16), dtype=np.float32) + 0.1).astype(np.float32)
    x, y = fg.tensor(a), fg.tensor(b)
    try:
        import torch

        torch.set_num_threads(fg.config.threads)
        xt, yt = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
    except ImportError:
        torch = None
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    print(f"CPU: {cpu_name()} | {source_version()} | load {load_average()}")
    print(f"{'op':18s} {'fusegrad build us':>18s} {'nodes':>6s} {'torch eager us':>15s}")
    for name, op in OPS.items():
        if wanted and name not in wanted:
            continue
        us = per_call_us(lambda op=op: op(fg, x, y), args.calls)
        nodes = nodes_under(op(fg, x, y))
        ref = "-"
        if torch is not None:
            try:
                ref = f"{per_call_us(lambda op=op: op(torch, xt, yt), args.calls):.1f}"
            except (AttributeError, RuntimeError, TypeError):
                ref = "n/a"
        print(f"{name:18s} {us:18.1f} {nodes:6d} {ref:>15s}")
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
