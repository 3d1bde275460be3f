"""The fp32 SIMT contraction (strict fp32 sgemm and convolution) on a real GPU: its variants
against cuBLAS and cuDNN.

Run:  python benchmarks/gpu_sgemm.py [--n 4096] [KIN,STAGES,BLOCKS,KC ...]
      (needs a GPU, PyCUDA and PyTorch with CUDA; FUSEGRAD_CUDA=emulate and --n 256: a dry
      run of the answers on the emulator, wall-clock times)

A float32 contraction with TF32 off (PyTorch's default for matmul) runs on the SIMT units as
one kernel (pipeline/cuda_simt.py's `simt_step`): a 128 x 128 tile of outputs, 8 x 8 per thread,
KC reduction steps staged in shared memory at a time in STAGES buffers where a side is copied
by `cp.async` (`pipeline.cuda_simt.SIMT_STAGES`), registers left for BLOCKS blocks per
multiprocessor (`pipeline.cuda.SIMT_MIN_BLOCKS`), KIN 1 where a side contiguous along the
reduction is staged [at][kk] by `cp.async` (`pipeline.gpu.SIMT_K_INNER`), 0 where it is read
into registers and stored transposed. Each variant runs in a process of its own with the
disk cache off (the constants are not part of a kernel's cache key), where:

- the n x n x n product of random inputs is checked against the float64 product, and so are
  ragged 1040 x 200 x 2200 ones: a @ b, a @ b.T and a.T @ b (the largest error relative to
  the largest element);
- the kernel alone is timed with CUDA events around back-to-back launches (as gpu.py's
  `kern` columns), the median of 5 such repetitions;
- so is the convolution of benchmarks/gpu.py (64 x 32 x 56^2 -> 64, 3 x 3, padding 1), whose
  sides are gathers (two buffers, the same register tile and unrolled steps).

cuBLAS and cuDNN (TF32 off) are timed the same way in the parent process; each variant's rate
is printed beside them as a fraction of theirs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = [  # (k_inner, stages, blocks, kc); the library's choice first
    (1, 3, 1, 16),
    (1, 4, 1, 16),
    (1, 2, 1, 16),
    (1, 3, 1, 32),
    (1, 2, 1, 32),
    (1, 4, 1, 32),
    (1, 3, 2, 16),
    (0, 3, 2, 16),
    (0, 4, 2, 16),
    (0, 3, 1, 16),
    (0, 2, 2, 32),
    (1, 3, 1, 8),
]
REPEATS = 5
CONV_X, CONV_W = (64, 32, 56, 56), (64, 32, 3, 3)
SMALL_CONV = (2, 8, 12, 12), (8, 8, 3, 3)  # a dry run's (n below 1024)


def conv_shapes(n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (CONV_X, CONV_W) if n >= 1024 else SMALL_CONV


def _events(torch):
    if not torch or not torch.cuda.is_available():  # a dry run on the emulator: wall time
        from gpu_tiles import _WallEvent

        return _WallEvent(), _WallEvent()
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_seconds(n: int) -> dict[str, float]:
    """cuBLAS's seconds per n^3 fp32 product and cuDNN's per convolution, TF32 off."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return {}
    from gpu import kernel_seconds

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", generator=g)
    b = torch.randn(n, n, device="cuda", generator=g)
    x = torch.randn(*CONV_X, device="cuda", generator=g)
    w = torch.randn(*CONV_W, device="cuda", generator=g)
    conv = torch.nn.functional.conv2d

    def events():
        return _events(torch)

    return {
        "sgemm": statistics.median(kernel_seconds(lambda: a @ b, events) for _ in range(REPEATS)),
        "conv": statistics.median(
            kernel_seconds(lambda: conv(x, w, padding=1), events) for _ in range(REPEATS)
        ),
    }


def one_variant(variant: tuple[int, ...], n: int) -> dict:
    """Run in the child: the variant's errors and kernel seconds."""
    import numpy as np

    import fusegrad as fg
    from fusegrad.pipeline import cuda, cuda_simt, gpu

    sys.path.insert(0, HERE)
    from gpu import fusegrad_kernels, kernel_seconds

    kin, stages, blocks, kc = variant
    gpu.SIMT_K_INNER, cuda_simt.SIMT_STAGES, cuda.SIMT_MIN_BLOCKS = bool(kin), stages, blocks
    gpu.SIMT_BIG_K = kc
    torch = _torch()

    def events():
        return _events(torch)

    rng = np.random.default_rng(0)
    errors = []
    for m, k, p, ta, tb in ((n, n, n, 0, 0), (1040, 200, 2200, 0, 0),
                            (1040, 200, 2200, 0, 1), (1040, 200, 2200, 1, 0)):  # fmt: skip
        a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.standard_normal((p, k) if tb else (k, p), dtype=np.float32)
        fa, fb = fg.tensor(a, device="cuda").realize(), fg.tensor(b, device="cuda").realize()
        fa, fb = (fa.T if ta else fa), (fb.T if tb else fb)
        got = (fa @ fb).cpu().numpy()
        want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b)
        errors.append(float(np.abs(got - want).max() / np.abs(want).max()))
    fa = fg.tensor(rng.standard_normal((n, n), dtype=np.float32), device="cuda").realize()
    fb = fg.tensor(rng.standard_normal((n, n), dtype=np.float32), device="cuda").realize()
    launch_all, _, _ = fusegrad_kernels(lambda: fa @ fb)
    sgemm = statistics.median(kernel_seconds(launch_all, events) for _ in range(REPEATS))
    shape_x, shape_w = conv_shapes(n)
    x = rng.standard_normal(shape_x, dtype=np.float32)
    w = rng.standard_normal(shape_w, dtype=np.float32) * 0.05
    fx, fw = fg.tensor(x, device="cuda").realize(), fg.tensor(w, device="cuda").realize()
    conv_of = fg.nn.functional.conv2d
    got = conv_of(fx, fw, padding=1).cpu().numpy()
    if torch is not None:  # the convolution's answer against PyTorch's float64 one, on the CPU
        want = torch.nn.functional.conv2d(
            torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=1
        ).numpy()
        errors.append(float(np.abs(got - want).max() / np.abs(want).max()))
    launch_all, _, _ = fusegrad_kernels(lambda: conv_of(fx, fw, padding=1))
    conv = statistics.median(kernel_seconds(launch_all, events) for _ in range(REPEATS))
    return {"variant": list(variant), "errors": errors, "sgemm": sgemm, "conv": conv}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("variants", nargs="*", help="KIN,STAGES,BLOCKS,KC (default: a sweep)")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    if args.child:
        variant = tuple(int(v) for v in args.child.split(","))
        print(json.dumps(one_variant(variant, args.n)))
        return
    variants = [tuple(int(v) for v in s.split(",")) for s in args.variants] or VARIANTS
    flops = 2.0 * args.n**3
    conv_flops = 2.0 * CONV_X[0] * CONV_W[0] * CONV_X[2] * CONV_X[3] * 32 * 9
    base = torch_seconds(args.n)
    if base:
        blas, dnn = base["sgemm"], base["conv"]
        print(f"n = {args.n}; cuBLAS fp32 {flops / blas / 1e12:.1f} TFLOP/s "
              f"({blas * 1e3:.3f} ms); cuDNN conv fp32 "
              f"{conv_flops / dnn / 1e12:.1f} TFLOP/s ({dnn * 1e3:.3f} ms)")  # fmt: skip
    print(f"{'kin,st,bl,kc':>13} {'sgemm ms':>9} {'TFLOP/s':>8} {'of cuBLAS':>9} "
          f"{'conv ms':>8} {'of cuDNN':>8}  max rel errors")  # fmt: skip
    limit = float(os.environ.get("FG_TILE_TIMEOUT", 300))  # seconds a variant may take
    specs = [",".join(map(str, variant)) for variant in variants]
    with tempfile.TemporaryDirectory() as cache:
        # every variant's kernels compiled side by side first, into one disk cache (a
        # cubin's key is its source), then each variant timed alone
        env = dict(os.environ, FUSEGRAD_CACHE=cache)
        warm = [
            subprocess.Popen(
                [sys.executable, __file__, "--n", str(args.n), "--child", spec],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )  # fmt: skip
            for spec in specs[: os.cpu_count() or 1]
        ]
        for child in warm:
            try:
                child.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                child.kill()
        for spec in specs:
            time_variant(spec, args.n, env, limit, base, flops)


def time_variant(spec: str, n: int, env: dict, limit: float, base: dict, flops: float) -> None:
    """One variant's row, from a process of its own."""
    from gpu_tiles import run_child

    r = run_child(__file__, n, spec, env, limit)
    if r is None:
        return
    s, cs = r["sgemm"], r["conv"]
    of_blas = f"{base['sgemm'] / s:9.2f}" if base else f"{'-':>9}"
    of_dnn = f"{base['conv'] / cs:8.2f}" if base else f"{'-':>8}"
    err = "/".join(f"{e:.1e}" for e in r["errors"])
    print(f"{spec:>13} {s * 1e3:9.3f} {flops / s / 1e12:8.1f} {of_blas} {cs * 1e3:8.3f} "
          f"{of_dnn}  {err}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
