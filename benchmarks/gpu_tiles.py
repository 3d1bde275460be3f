"""The 16-bit tensor-core contraction's tile on a real GPU: a sweep of its shapes against cuBLAS.

Run:  python benchmarks/gpu_tiles.py [--n 4096] [RA,RB,KC,STAGES,BLOCKS ...]
      (needs a GPU, PyCUDA and PyTorch with CUDA)

A large bfloat16 or float16 matmul runs as one `mma.sync` kernel (pipeline/cuda_mma.py's
`mma16_step`) over a (16 RA) x (16 RB) tile of outputs, KC reduction steps staged in
shared memory at a time in STAGES buffers, registers left for BLOCKS blocks per
multiprocessor (`pipeline.gpu.HALF_TILE`, `pipeline.cuda_simt.HALF_STAGES`, `HALF_MIN_BLOCKS`);
past 48 KiB of staging the buffers are dynamic shared memory. WGMMA (sm_90a: Hopper) is the
buffers of the `wgmma.mma_async` pipeline rendered beside it (`pipeline.gpu.WGMMA_STAGES`; 0:
`mma.sync` only), SWAPPED 1 swaps its MN-major descriptors' offsets (a check of the layout
that must give wrong answers), IN_FLIGHT its wgmma groups left running per step
(`pipeline.cuda_wgmma.WGMMA_IN_FLIGHT`, 1 by default), TMA 1 stages its steps by the Tensor Memory
Accelerator instead of cp.async (`pipeline.cuda_wgmma.WGMMA_TMA`, the library's default; a shape
leaves it 0 unless its ninth field says 1). Each shape runs in a process
of its own with the disk cache off (the shape is not part of a kernel's cache key), where:

- the n x n x n product of random inputs is checked against the float64 product of the same
  16-bit values (the largest error relative to the largest element), and so are ragged
  1040 x 200 x 2200 ones (tiles cut at every edge): a @ b, a @ b.T and a.T @ b (each side
  contiguous along the reduction or along its outputs);
- the kernel alone is timed with CUDA events around 20 back-to-back launches (as gpu.py's
  `kern` columns), the median of 5 such repetitions.

cuBLAS (PyTorch's matmul, the same inputs) is timed the same way in the parent process, and
each shape's rate is printed beside it as a fraction of cuBLAS's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [  # (ra, rb, kc, stages, blocks): 128 x 128 outputs is ra = rb = 8
    (8, 8, 32, 3, 1),
    (8, 8, 32, 4, 1),
    (8, 8, 64, 2, 1),
    (8, 8, 64, 3, 1),
    (8, 8, 32, 3, 2),
    (8, 8, 32, 4, 2),
    (8, 8, 64, 2, 2),
    (8, 16, 32, 2, 1),
    (8, 16, 32, 3, 1),
    (8, 16, 32, 4, 1),
    (16, 8, 32, 3, 1),
    (8, 16, 64, 2, 1),
]
DTYPES = ("bfloat16", "float16")
REPEATS = 5


def torch_seconds(n: int) -> dict[str, float]:
    """cuBLAS's seconds per n^3 product, for each 16-bit type."""
    import torch

    sys.path.insert(0, HERE)
    from gpu import kernel_seconds

    def events():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    out = {}
    g = torch.Generator(device="cuda").manual_seed(0)
    for name in DTYPES:
        dt = getattr(torch, name)
        a = torch.randn(n, n, device="cuda", generator=g).to(dt)
        b = torch.randn(n, n, device="cuda", generator=g).to(dt)
        times = [kernel_seconds(lambda a=a, b=b: a @ b, events) for _ in range(REPEATS)]
        out[name] = statistics.median(times)
    return out


class _WallEvent:
    """A CUDA event's surface over the wall clock (a dry run with FUSEGRAD_CUDA=emulate)."""

    def record(self) -> None:
        import fusegrad as fg

        fg.cuda.synchronize()
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


def run_child(script: str, n: int, spec: str, env: dict, limit: float) -> dict | None:
    """What `script --n N --child SPEC` prints last (JSON), run in a process of its own for
    at most `limit` seconds; None, and the reason printed, where it failed or ran out."""
    try:
        run = subprocess.run(
            [sys.executable, script, "--n", str(n), "--child", spec],
            capture_output=True, text=True, env=env, timeout=limit,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        print(f"{spec:>16} timed out after {limit:.0f} s", flush=True)
        return None
    if run.returncode != 0:
        print(f"{spec:>16} failed:\n{run.stderr[-3000:]}", flush=True)
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])


def one_shape(shape: tuple[int, ...], n: int) -> dict:
    """Run in the child: the shape's errors and kernel seconds, per type."""
    import numpy as np
    import torch

    import fusegrad as fg
    from fusegrad.pipeline import cuda, cuda_simt, cuda_wgmma, gpu

    sys.path.insert(0, HERE)
    from gpu import fusegrad_kernels, kernel_seconds

    defaults = (8, 16, 64, 2, 1, 0, 0, 1, 0)  # the fields a shape leaves out
    ra, rb, kc, stages, blocks, wgmma, swapped, in_flight, tma = (*shape, *defaults[len(shape) :])
    gpu.HALF_TILE = (ra, rb, kc)
    cuda_simt.HALF_STAGES = stages
    cuda.HALF_MIN_BLOCKS = blocks
    gpu.WGMMA_STAGES = wgmma
    cuda_wgmma.WGMMA_MN_SWAPPED = bool(swapped)
    cuda_wgmma.WGMMA_IN_FLIGHT = in_flight
    cuda_wgmma.WGMMA_TMA = bool(tma)
    gpu.HALF_SHARED = 227 * 1024  # let the stages say

    def events():
        if not torch.cuda.is_available():  # a dry run on the emulator: wall time
            return _WallEvent(), _WallEvent()
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    rng = np.random.default_rng(0)
    result = {"shape": list(shape)}
    for name in DTYPES:
        dt = getattr(fg, name)
        errors = []
        # a @ b, then a @ b.T and a.T @ b (a side contiguous along its outputs, the other
        # along the reduction: each of the tensor cores' operand layouts) ragged
        for m, k, p, ta, tb in ((n, n, n, 0, 0), (1040, 200, 2200, 0, 0),
                                (1040, 200, 2200, 0, 1), (1040, 200, 2200, 1, 0)):  # fmt: skip
            a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
            b = rng.standard_normal((p, k) if tb else (k, p), dtype=np.float32)
            fa, fb = fg.tensor(a, device="cuda").to(dt), fg.tensor(b, device="cuda").to(dt)
            fa, fb = fa.realize(), fb.realize()
            fa, fb = (fa.T if ta else fa), (fb.T if tb else fb)
            got = (fa @ fb).float().cpu().numpy()
            want = fa.float().cpu().numpy().astype(np.float64) @ fb.float().cpu().numpy()
            errors.append(float(np.abs(got - want).max() / np.abs(want).max()))
        fa = fg.tensor(rng.standard_normal((n, n), dtype=np.float32), device="cuda").to(dt)
        fb = fg.tensor(rng.standard_normal((n, n), dtype=np.float32), device="cuda").to(dt)
        fa, fb = fa.realize(), fb.realize()
        launch_all, _, _ = fusegrad_kernels(lambda fa=fa, fb=fb: fa @ fb)
        times = [kernel_seconds(launch_all, events) for _ in range(REPEATS)]
        result[name] = {"seconds": statistics.median(times), "errors": errors}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument(
        "shapes",
        nargs="*",
        help="RA,RB,KC,STAGES,BLOCKS[,WGMMA[,SWAPPED[,IN_FLIGHT[,TMA]]]] "
        "(default: a sweep; WGMMA: the wgmma pipeline's buffers, 0 for mma.sync)",
    )
    args = ap.parse_args()
    if args.child:
        shape = tuple(int(v) for v in args.child.split(","))
        print(json.dumps(one_shape(shape, args.n)))
        return
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] or SHAPES
    flops = 2.0 * args.n**3
    base = torch_seconds(args.n)
    print(f"n = {args.n}; cuBLAS: " + ", ".join(
        f"{name} {flops / s / 1e12:.1f} TFLOP/s" for name, s in base.items()))  # fmt: skip
    columns = [f"{name + ' TFLOP/s':>17} {'of cuBLAS':>9} {'max rel err':>19}" for name in DTYPES]
    print(f"{'ra,rb,kc,st,bl':>16} {'tile':>9} " + " ".join(columns))
    env = dict(os.environ, FUSEGRAD_CACHE="off")
    limit = float(os.environ.get("FG_TILE_TIMEOUT", 600))  # seconds a shape may take
    for shape in shapes:
        spec = ",".join(map(str, shape))
        r = run_child(__file__, args.n, spec, env, limit)
        if r is None:
            continue
        cells = []
        for name in DTYPES:
            s, errors = r[name]["seconds"], r[name]["errors"]
            err = "/".join(f"{e:.1e}" for e in errors)
            cells.append(f"{flops / s / 1e12:17.1f} {base[name] / s:9.2f} {err:>19}")
        tile = f"{16 * shape[0]}x{16 * shape[1]}"
        print(f"{spec:>16} {tile:>9} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
