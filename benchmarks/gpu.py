"""fusegrad's cuda device against PyTorch CUDA on the same GPU, timed alternately in one process.

Run:  python benchmarks/gpu.py [--quick] [--only TEXT] [--no-gather] [--no-prefetch]
      [--no-tf32-wgmma]
      (a GPU, PyCUDA and PyTorch with CUDA)

Workloads, each on the GPU for both systems, on the same random inputs:

- chain 2^24: relu(exp(x/2 + 1) * x - 3) / (1 + x*x), one fused kernel in fusegrad, six
  kernels in PyTorch eager;
- copy 2^24 (the measured copy bandwidth the memory-bound rows are held against);
- softmax 4096x4096 (rows), layer norm 8192x1024, row sum 4096x4096, full sum 2^24;
- sgemm 4096^3 in float32 (PyTorch with TF32 off, its default for matmul: true fp32),
  again with `allow_tf32` on both sides (tensor cores, TF32 inputs; b @ c, whose c
  fusegrad's Hopper kernel first copies K-major, and b @ c.T, which it reads as it is), and
  in bfloat16 and float16 (tensor cores, float32 accumulation);
- conv2d 64x32x56x56 -> 64, 3x3, padding 1, float32 (cuDNN with TF32 off), again with
  TF32 allowed on both sides (PyTorch's default for convolutions), and in
  bfloat16 and float16 (tensor cores, float32 accumulation: fusegrad's implicit GEMM on
  `mma.sync`, cuDNN's own);
- one LeNet-5 training step, batch 64, SGD momentum 0.9, as a user writes the plain loop
  (`opt.zero_grad(); loss = ...; loss.backward(); opt.step(); loss.item()`), and the same
  step under `fg.jit`.

Timing: the systems alternate call by call (A B A B ..., the order swapping every
round); each call is timed from the Python call to the end of the GPU's work
(`fg.cuda.synchronize()` / `torch.cuda.synchronize()` inside the timed region, so
launch and Python overhead count), and each figure is the median of the rounds.
A ratio above 1 means fusegrad is faster. Answers are checked against PyTorch's
before anything is timed.

Kernel-only times (the `kern` columns) take the launch and Python overhead out: CUDA
events bracket `KERNEL_REPEATS` back-to-back repetitions of just the GPU work, so
the GPU's queue never drains: fusegrad's compiled kernels of the op relaunched on
buffers of their sizes (`fusegrad.runtime.cuda.launch`), and PyTorch's op called
without a synchronization in between. Its rate is the bytes each kernel must move
(the op's `work`) over that time; last, the bytes fusegrad's kernels report they move
(`traffic` on each CUDA kernel) over the op's own minimum (its input read once, its
output written once: 2.00x for a softmax whose three kernels read its input thrice),
or for sgemm over the kernels' minimum.

`--compile` adds torch.compile's time beside (whole call and kernel-only), where it runs.
A row that fails prints its error and the run goes on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback

import numpy as np

import fusegrad as fg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
SIZES = (1 << 24, 4096, 4096)  # chain and full sum elements; softmax and row sum rows; sgemm n
LN = (8192, 1024)  # layer norm rows x columns
CONV_X, CONV_W = (64, 32, 56, 56), (64, 32, 3, 3)  # conv2d input and weight, padding 1


def timed_median(runs: dict, rounds: int) -> dict:
    """Median seconds of each callable over `rounds` alternating calls (each includes its sync)."""
    keys = list(runs)
    times = {k: [] for k in keys}
    for r in range(rounds):
        order = keys if r % 2 == 0 else keys[::-1]
        for key in order:
            t0 = time.perf_counter()
            runs[key]()
            times[key].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


KERNEL_REPEATS = 20


def kernel_seconds(launch_all, events, repeats: int = KERNEL_REPEATS) -> float:
    """GPU seconds per repetition of `launch_all()` (which launches without waiting),
    timed by `events()`: a (start, end) pair with record(), synchronize(), elapsed_time()
    in milliseconds, as torch.cuda.Event's."""
    launch_all()  # warm: compiled, allocated
    start, end = events()
    start.record()
    for _ in range(repeats):
        launch_all()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def fusegrad_kernels(build):
    """(a call that relaunches the kernels computing `build()` on buffers of their sizes,
    the bytes those kernels report they move, the minimum bytes)."""
    from fusegrad.runtime import cuda as fg_cuda

    records = fg.kernels(build())
    buffers = [[fg_cuda.DeviceBuffer(p.size, p.dtype) for p in r.loop.params] for r in records]

    def launch_all():
        for rec, bufs in zip(records, buffers):
            fg_cuda.launch(rec.compiled, bufs)

    moved = [rec.compiled.kernel.traffic for rec in records]
    return launch_all, sum(t.bytes for t in moved), sum(t.min_bytes for t in moved)


def op_cases(torch):
    """(name, work, unit, fusegrad call, torch call, check) for the core ops."""
    fg.manual_seed(0)
    n, rows, mm = SIZES
    host = {
        "x": np.array(fg.randn(n).numpy()),
        "a": np.array(fg.randn(rows, rows).numpy()),
        "b": np.array(fg.randn(mm, mm).numpy()),
        "c": np.array(fg.randn(mm, mm).numpy()),
        "ln": np.array(fg.randn(*LN).numpy()),
        "cx": np.array(fg.randn(*CONV_X).numpy()),
        "cw": np.array((fg.randn(*CONV_W) * 0.05).numpy()),
    }
    f = {k: fg.tensor(v, device="cuda").realize() for k, v in host.items()}
    t = {k: torch.from_numpy(v).cuda() for k, v in host.items()}
    sync_fg, sync_t = fg.cuda.synchronize, torch.cuda.synchronize

    def fg_run(build, tf32=False):
        def go():
            with fg.config.override(allow_tf32=tf32):  # fg.backends.cuda.matmul.allow_tf32
                out = build().realize()
            sync_fg()
            return out

        go.build, go.tf32 = build, tf32  # for the kernel-only timing
        return go

    def t_run(build, tf32=False):
        def flagged():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32  # on by default for convolutions
            try:
                return build()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False

        def go():
            out = flagged()
            sync_t()
            return out

        go.build = flagged
        return go

    x, a, b, c = f["x"], f["a"], f["b"], f["c"]
    xt, at, bt, ct = t["x"], t["a"], t["b"], t["c"]
    ln, lnt, cx, cxt, cw, cwt = f["ln"], t["ln"], f["cx"], t["cx"], f["cw"], t["cw"]
    types16 = (("bf16", fg.bfloat16, torch.bfloat16), ("fp16", fg.float16, torch.float16))
    half = {
        name: (b.to(dt).realize(), c.to(dt).realize(), bt.to(tdt), ct.to(tdt))
        for name, dt, tdt in types16
    }
    conv16 = {  # the convolution's input and weight in 16 bits (cuDNN's tensor cores)
        name: (cx.to(dt).realize(), cw.to(dt).realize(), cxt.to(tdt), cwt.to(tdt))
        for name, dt, tdt in types16
    }
    f4 = 4
    rows_ln, cols_ln = LN
    out_hw = CONV_X[2] * CONV_X[3]
    conv_flops = 2.0 * CONV_X[0] * CONV_W[0] * out_hw * CONV_W[1] * CONV_W[2] * CONV_W[3]
    F = fg.nn.functional
    return [
        ("copy 2^24", 2 * n * f4, "GB/s", fg_run(lambda: x + 0), t_run(lambda: xt.clone())),
        (
            "chain 2^24",
            2 * n * f4,
            "GB/s",
            fg_run(lambda: (((x * 0.5 + 1.0).exp() * x - 3.0).relu()) / (1 + x * x)),
            t_run(lambda: torch.relu(torch.exp(xt * 0.5 + 1.0) * xt - 3.0) / (1 + xt * xt)),
        ),
        (
            "softmax 4096x4096",
            2 * rows * rows * f4,
            "GB/s",
            fg_run(lambda: a.softmax(dim=1)),
            t_run(lambda: torch.softmax(at, dim=1)),
        ),
        (
            "layer norm 8192x1024",
            2 * rows_ln * cols_ln * f4,
            "GB/s",
            fg_run(lambda: F.layer_norm(ln, (cols_ln,))),
            t_run(lambda: torch.nn.functional.layer_norm(lnt, (cols_ln,))),
        ),
        (
            "row sum 4096x4096",
            (rows * rows + rows) * f4,
            "GB/s",
            fg_run(lambda: a.sum(1)),
            t_run(lambda: at.sum(1)),
        ),
        ("full sum 2^24", n * f4, "GB/s", fg_run(lambda: x.sum()), t_run(lambda: xt.sum())),
        ("sgemm 4096^3", 2.0 * mm**3, "GFLOP/s", fg_run(lambda: b @ c), t_run(lambda: bt @ ct)),
        (
            "sgemm 4096^3 tf32",
            2.0 * mm**3,
            "GFLOP/s",
            fg_run(lambda: b @ c, tf32=True),
            t_run(lambda: bt @ ct, tf32=True),
        ),
        (  # both sides K-major: no copy of c before the product (nn.Linear's forward)
            "sgemm 4096^3 tf32 b@c.T",
            2.0 * mm**3,
            "GFLOP/s",
            fg_run(lambda: b @ c.T, tf32=True),
            t_run(lambda: bt @ ct.T, tf32=True),
        ),
        *(
            (
                f"sgemm 4096^3 {name}",
                2.0 * mm**3,
                "GFLOP/s",
                fg_run(lambda h=h: h[0] @ h[1]),
                t_run(lambda h=h: h[2] @ h[3]),
            )
            for name, h in half.items()
        ),
        (
            "conv2d 64x32x56^2",
            conv_flops,
            "GFLOP/s",
            fg_run(lambda: F.conv2d(cx, cw, padding=1)),
            t_run(lambda: torch.nn.functional.conv2d(cxt, cwt, padding=1)),
        ),
        (  # PyTorch's default for convolutions (torch.backends.cudnn.allow_tf32)
            "conv2d 64x32x56^2 tf32",
            conv_flops,
            "GFLOP/s",
            fg_run(lambda: F.conv2d(cx, cw, padding=1), tf32=True),
            t_run(lambda: torch.nn.functional.conv2d(cxt, cwt, padding=1), tf32=True),
        ),
        *(
            (
                f"conv2d 64x32x56^2 {name}",
                conv_flops,
                "GFLOP/s",
                fg_run(lambda h=h: F.conv2d(h[0], h[1], padding=1)),
                t_run(lambda h=h: torch.nn.functional.conv2d(h[2], h[3], padding=1)),
            )
            for name, h in conv16.items()
        ),
    ]


def lenet_steps(torch):
    """fusegrad eager, fusegrad jit and PyTorch LeNet-5 steps on the GPU, same weights."""
    from lenet_step import batches, fusegrad_model, make_fusegrad_train, torch_model

    data = batches("lenet", 4)

    def fg_step(jit):
        _, run = make_fusegrad_train("lenet", jit, device="cuda")
        dev = [(fg.tensor(x, device="cuda"), fg.tensor(y, device="cuda")) for x, y in data]
        i = [0]

        def step():
            x, y = dev[i[0] % len(dev)]
            i[0] += 1
            return run(x, y).item()

        return step

    tm = torch_model("lenet", fusegrad_model("lenet")).cuda()
    topt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
    tdev = [(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()) for x, y in data]
    j = [0]

    def torch_step():
        x, y = tdev[j[0] % len(tdev)]
        j[0] += 1
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tm(x), y)
        loss.backward()
        topt.step()
        return loss.item()

    return {"fusegrad": fg_step(False), "fusegrad jit": fg_step(True), "torch": torch_step}


def op_row(name, work, unit, fg_call, t_call, rounds, events, compiled, torch) -> None:
    """Check one op's answer against PyTorch's, time both (whole call, alternating, and
    kernel-only) and print the row; torch.compile beside where `compiled`."""
    t0 = time.perf_counter()
    got = fg_call()
    first = (time.perf_counter() - t0) * 1e3
    want = t_call().double().cpu().numpy()
    err = float(np.abs(np.asarray(got.float().cpu().numpy(), np.float64) - want).max())
    err /= float(np.abs(want).max()) or 1.0
    for _ in range(3):
        fg_call(), t_call()
    runs = {"fg": fg_call, "t": t_call}
    if compiled:
        build = torch.compile(t_call.build)

        def tc_call():
            out = build()
            torch.cuda.synchronize()
            return out

        for _ in range(3):
            tc_call()
        runs["tc"] = tc_call
    ms = {k: v * 1e3 for k, v in timed_median(runs, rounds).items()}
    with fg.config.override(allow_tf32=fg_call.tf32):
        launch_all, moved, least = fusegrad_kernels(fg_call.build)
    fk = kernel_seconds(launch_all, events) * 1e3
    tk = kernel_seconds(t_call.build, events) * 1e3
    extra = ""
    if compiled:
        tck = kernel_seconds(build, events) * 1e3
        extra = f"{ms['tc']:>9.3f}{ms['tc'] / ms['fg']:>7.2f}{tck:>9.3f}"
    print(
        f"{name:<20}{unit:>8}{ms['fg']:>10.3f}{work / ms['fg'] / 1e6:>9.1f}"
        f"{ms['t']:>10.3f}{work / ms['t'] / 1e6:>9.1f}"
        f"{ms['t'] / ms['fg']:>10.2f}{first:>10.1f}{err:>10.1e}"
        f"{fk:>10.3f}{work / fk / 1e6:>9.1f}{tk:>10.3f}{work / tk / 1e6:>9.1f}"
        f"{moved / (work if unit == 'GB/s' else least):>8.2f}x" + extra,
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--compile", action="store_true", help="torch.compile beside (slow to build)")
    ap.add_argument(
        "--only",
        metavar="TEXT",
        help="run just the rows whose name contains TEXT ('lenet' for the training step alone)",
    )
    ap.add_argument(
        "--no-gather",
        action="store_true",
        help="convolution windows staged value by value, not through their tables "
        "(pipeline.cuda_simt.GATHER off)",
    )
    ap.add_argument(
        "--no-prefetch",
        action="store_true",
        help="fp32 SIMT steps staged before their barrier, not through registers during "
        "the products (pipeline.cuda_simt.PREFETCH off)",
    )
    ap.add_argument(
        "--no-tf32-wgmma",
        action="store_true",
        help="large TF32 matmuls on the WMMA pipeline on Hopper too, not its wgmma one "
        "(pipeline.gpu.TF32_WGMMA off)",
    )
    args = ap.parse_args()
    if args.no_tf32_wgmma:
        from fusegrad.pipeline import gpu as gpu_map

        gpu_map.TF32_WGMMA = False
    from fusegrad.pipeline import cuda_simt

    if args.no_gather:
        cuda_simt.GATHER = False
    if args.no_prefetch:
        cuda_simt.PREFETCH = False
    rounds = 10 if args.quick else 40

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu.py: PyTorch sees no CUDA device")
    if not fg.cuda.is_available():
        raise SystemExit(f"gpu.py: fusegrad's cuda device cannot run: {fg.cuda.why_unavailable()}")
    torch.backends.cuda.matmul.allow_tf32 = False  # fusegrad computes sgemm in true fp32
    print(
        f"GPU: {torch.cuda.get_device_name(0)} | fusegrad cuda: {fg.cuda.get_device_name()} | "
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) | {rounds} rounds, alternating"
    )
    with tempfile.TemporaryDirectory(prefix="fusegrad-gpu-cache-") as cache:
        with fg.config.override(cache=cache):

            def events():
                return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

            print(
                f"\n{'op':<20}{'unit':>8}{'fg ms':>10}{'rate':>9}{'torch ms':>10}{'rate':>9}"
                f"{'torch/fg':>10}{'first ms':>10}{'max err':>10}"
                f"{'fg kern':>10}{'rate':>9}{'t kern':>10}{'rate':>9}{'traffic':>9}"
                + (f"{'tc ms':>9}{'tc/fg':>7}{'tc kern':>9}" if args.compile else "")
            )
            for name, work, unit, fg_call, t_call in op_cases(torch):
                if args.only and args.only not in name:
                    continue
                try:
                    op_row(name, work, unit, fg_call, t_call, rounds, events, args.compile, torch)
                except Exception:  # one failing row must not cost the device run the rest
                    print(f"{name:<20} FAILED:\n{traceback.format_exc()}", flush=True)

            if args.only and args.only != "lenet":
                return
            steps = lenet_steps(torch)
            losses = {k: [s() for _ in range(3)] for k, s in steps.items()}  # compile, warm
            first = ", ".join(f"{k} {v[0]:.4f}" for k, v in losses.items())
            print(f"\nLeNet-5 step, batch 64, SGD momentum (first losses: {first})")
            ms = {k: v * 1e3 for k, v in timed_median(steps, rounds * 2).items()}
            for k in ("fusegrad", "fusegrad jit"):
                print(f"  {k:<14}{ms[k]:8.3f} ms   torch / {k} = {ms['torch'] / ms[k]:5.2f}")
            print(f"  {'torch':<14}{ms['torch']:8.3f} ms")
            from fusegrad.runtime import cuda as fg_cuda

            print(f"  CUDA graphs in use after the steps: {bool(fg_cuda.backend().graphs)}")


if __name__ == "__main__":
    main()
