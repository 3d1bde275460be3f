"""The float32 sgemm kernel with each register tile it could take, numpy and PyTorch beside.

Run:  .venv/bin/python benchmarks/sgemm_tiles.py [--size 2048] [--rounds 15] [--threads N]

The kernel of fusegrad's `a @ b` (n x n x n, b already packed in 32-column panels, as
`matmul` packs it) is lowered once with each candidate tile of its tuning space
(`pipeline.tile_tuning.tuning_space`: the same 32 lanes with 4, 8, 12 or 16 rows where they
divide n and fit the registers; 4 rows is the Zen 4 tile, 8 the fixed choice where
AVX-512 runs full width), compiled, checked against numpy's float64 product, and timed
alone (the kernel, no graph building or packing) alternately with numpy's and PyTorch's
`a @ b`, round by round, the order rotating and a 0.2 s pause after every call (OpenBLAS
and OpenMP workers spin after a call). It prints the CPU, the load average before and
after, each system's median ms and GFLOP/s, and every system's time over the fixed
choice's, round by round (median and 95% bootstrap interval): above 1, the fixed choice
is faster.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from core_ops import paired  # same folder
from machine import cpu_name, load_average, source_version

import fusegrad as fg
from fusegrad.ir.ops import Ops
from fusegrad.pipeline import lower as L
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.cpu_backend import CpuBackend
from fusegrad.runtime.launch import launch

try:
    import torch
except ImportError:
    torch = None

PAUSE_S = 0.2
PANEL = 32


def sgemm_kernels(n: int) -> tuple[dict, int, bool]:
    """{label: (loop kernel, compiled)} for every candidate tile of the n^3 sgemm's kernel
    (the fixed choice first), the kernel's multiply-adds, and whether it reads b packed."""
    a = fg.tensor(np.zeros((n, n), np.float32))
    b = fg.tensor(np.zeros((n, n), np.float32))
    items = schedule([(a @ b).node], lambda node: node.op is Ops.BUFFER)
    item = items[-1]  # (the first packs b in panels)
    got = {}

    def capture(space, lowered):
        got["space"], got["lowered"] = space, lowered
        return lowered(space.default)

    fixed = L.lower(item, tuner=capture)
    if "space" not in got:
        raise SystemExit(f"the {n}^3 sgemm has no tiles to compare ({fixed.tile_note})")
    backend = CpuBackend()
    kernels = {}
    for tile in got["space"].candidates:
        kernel = got["lowered"](tile)
        label = f"fg {tile.rows}x{tile.cols}" + (" (fixed)" if tile == got["space"].default else "")
        kernels[label] = (kernel, backend.compile(kernel))
    return kernels, got["space"].work, len(item.inputs[1].shape) == 3


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size", type=int, default=2048, help="n of the n x n x n product")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=fg.config.threads)
    args = ap.parse_args()
    n = args.size
    if n % PANEL:
        raise SystemExit(f"--size must be a multiple of {PANEL} (the panel width), got {n}")
    fg.config.threads = args.threads
    if torch is not None:
        torch.set_num_threads(args.threads)
    print(
        f"sgemm tiles | {cpu_name()} | fusegrad at {source_version()} | {n}^3 float32 | "
        f"threads {args.threads} | load average before: {load_average()}"
    )
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    kernels, work, packs = sgemm_kernels(n)
    packed = (
        np.ascontiguousarray(b.reshape(n, n // PANEL, PANEL).transpose(1, 0, 2)) if packs else b
    )
    runs = {}
    for label, (kernel, compiled) in kernels.items():
        ptrs = [out.ctypes.data, a.ctypes.data, packed.ctypes.data]

        def run(kernel=kernel, compiled=compiled, ptrs=ptrs):
            launch(compiled, kernel.parallel_extent, work, ptrs)

        out.fill(np.nan)
        run()
        err = np.abs(out - want).max() / np.abs(want).max()
        if not err < 1e-5:
            raise SystemExit(f"{label}: wrong answer, largest relative error {err:.1e}")
        runs[label] = run
    runs["numpy"] = lambda: a @ b
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        runs["torch"] = lambda: ta @ tb
    for run in runs.values():  # warm-up
        run()
        time.sleep(PAUSE_S)
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - t0)
            time.sleep(PAUSE_S)
    fixed = names[0]
    print(f"\n{'system':<18}{'median ms':>10}{'GFLOP/s':>9}   time / fixed choice's, paired")
    for name in names:
        ms = np.median(times[name]) * 1e3
        ratio, low, high, _ = paired(times[name], times[fixed])
        rate = 2 * work / ms / 1e6
        print(f"{name:<18}{ms:>10.2f}{rate:>9.1f}   {ratio:5.2f} [{low:.2f}, {high:.2f}]")
    print(f"\n{args.rounds} rounds; load average after: {load_average()}")


if __name__ == "__main__":
    main()
