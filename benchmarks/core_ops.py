"""Core ops, fusegrad against numpy and PyTorch, timed alternately in one process.

Run:  .venv/bin/python benchmarks/core_ops.py [--quick]   (about 10 minutes on 2 cores;
      `--only bf16`: the bfloat16 rows and the float32 sgemm beside them, about 6)

Seven workloads (an elementwise chain over 2^24 floats, row softmax, log-softmax
and row sum of 4096x4096, layer norm of 8192x1024, the sum of all 2^24 floats, a
1024^3 matmul) plus the memory-bandwidth floor of the chain and of the row ops: a
plain copy of the same floats, read once and written once (the row ops and their
copies are timed in one alternation, and each op's ratio to the copy of its input
printed: a row op that reads its row from memory once and computes from cache
costs about one copy); then a convolution (64x32x56x56 -> 64, 3x3, padding 1,
bias and relu), forward alone, forward + backward, and each gradient alone (the input
gradient, the weight gradient, for a given output gradient), timed in one alternation
with the sgemm it is as an implicit GEMM (200704x288 @ 288x64), so their
GFLOP/s compare within a run; and in the same alternation the other convolutions
(CONV_FAMILY), each beside the sgemm of its own implicit GEMM's useful FLOPs: a strided
one (32x64x56x56 -> 128, 3x3, stride 2, padding 1: forward, each gradient alone, forward +
backward), a dilated one (dilation 2), a grouped one (4 groups: a batched sgemm), a
depthwise one (64 groups of one channel: no GEMM, so against PyTorch and the bytes it
must move, its GB/s over a fused copy of its input's timed beside it: forward, each
gradient alone, forward + backward) and a transposed one (DCGAN's 4x4 stride-2
upsampling, 32x128x16x16 -> 64) and a 1-D one (32x128x1024 -> 128, kernel 3: forward, each
gradient alone, forward + backward), each beside its own implicit GEMM's sgemm.
Then the bfloat16 rows against PyTorch's bfloat16 (numpy has none): a 2048^3 matmul
beside the same matmul in float32 (timed in one alternation, so their ratio is
paired; fusegrad packs B for its AMX tiles in every call's plan, as PyTorch packs it
every call); then the chain and the softmax (`--only bf16` times only those). Every
system runs the same inputs, taken from one `fg.randn` (never zeros), and the answers are
checked against numpy's (for bfloat16, numpy's float64 answer on the same bfloat16
inputs, within BF16_TOLERANCE) before anything is timed.

How the numbers are taken (see ../../shared/BENCHMARKS.md, and README.md here):

- the systems alternate, A B C A B C ..., the order rotating every round, and
  each figure is the median of the rounds, so drift on a shared machine hits
  every system alike; the ratios compare medians taken in the same run, and
  the chain and its copy floor share one alternation;
- fusegrad's first call runs against an empty compile cache (a temporary
  folder) and is reported apart; then every system is warmed up;
- a timed fusegrad call builds the lazy graph and realizes it (`.realize()`),
  so scheduling, launch and Python overhead are all inside the time; the
  "kernels" column is the time spent inside the compiled kernels alone;
- after every call the script pauses 0.2 s, because OpenBLAS and OpenMP keep
  their worker threads spinning for a while after a call (fusegrad's for at
  most 1 ms) and would steal cores from the next system; so every timed call,
  whichever system, starts with its worker threads asleep;
- PyTorch gets as many threads as fusegrad (`torch.set_num_threads`); numpy
  uses OpenBLAS's own default (all cores) for matmul;
- the systems' calls of one round ran within a second of each other, so each
  round also gives a paired ratio: the table below the main one has their median,
  a 95% bootstrap interval for it, and in how many rounds fusegrad was the faster.
  An interval that holds 1 means the run cannot tell the two systems apart.

A ratio above 1 means fusegrad is faster than that system.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from machine import (  # same folder (lstm.py and others take them from here)
    cpu_name,
    load_average,
    source_version,
)

import fusegrad as fg
from fusegrad.nn import functional as F

try:
    import torch
except ImportError:  # PyTorch is optional: its columns are left empty
    torch = None

LAYER_NORM_COLS = 1024  # layer norm's rows: half the row ops' floats, 8192x1024
PAUSE_AFTER_OTHERS_S = 0.2  # OpenBLAS / OpenMP workers spin about 0.1 s after a call
FUSEGRAD = "fusegrad"
NUMPY = "numpy"
TORCH = "torch"
TORCH_COMPILE = "torch.compile"


@dataclass
class Case:
    """One workload: how much work it is, and a callable per system that computes it."""

    name: str
    work: float  # bytes moved (unit GB/s) or floating-point operations (unit GFLOP/s)
    unit: str
    runs: dict[str, Callable[[], object]]
    reference: Callable[[], np.ndarray] | None = None  # the answer, where numpy runs no system
    timings: dict[str, list[float]] = field(default_factory=dict)
    kernel_seconds: list[float] = field(default_factory=list)
    first_call_ms: float = 0.0
    compile_ms: float = 0.0
    # fusegrad's register-tiled kernels: the tile each took and how it was chosen
    tiles: list[str] = field(default_factory=list)
    # a 16-bit case has no numpy run: its answer is checked against `reference` (numpy,
    # float64, on the same rounded inputs) within `tolerance`, relative to its largest value
    reference: Callable[[], np.ndarray] | None = None
    tolerance: float = 1e-4
    # a convolution row: the sgemm of its implicit GEMM's useful FLOPs, timed beside it
    sgemm: Case | None = None
    # a depthwise convolution row (no GEMM): the bytes it must move, and the fused copy of its
    # input timed beside it, so its GB/s compares with a copy's in the same run
    moved: float = 0.0
    copy: Case | None = None


# ---------------------------------------------------------------- timing


def timed(run: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = run()
    return time.perf_counter() - t0, out


def pause_if_needed(system) -> None:
    """After every call, wait until the system's spinning worker threads have gone to
    sleep: numpy's and PyTorch's spin about 0.1 s, fusegrad's at most 1 ms
    (runtime/pool.py). Every system then starts from the same state: its threads asleep."""
    time.sleep(PAUSE_AFTER_OTHERS_S)


def alternate(runs: dict, rounds: int, on_result=None, system_of=lambda key: key):
    """Time every run `rounds` times, interleaved, the order rotating each round."""
    keys = list(runs)
    times: dict = {k: [] for k in keys}
    for r in range(rounds):
        shift = r % len(keys)
        for key in keys[shift:] + keys[:shift]:
            gc.collect()
            seconds, out = timed(runs[key])
            times[key].append(seconds)
            if on_result is not None:
                on_result(key, out)
            del out  # free the result, so fusegrad's pool (and malloc) can reuse it
            pause_if_needed(system_of(key))
    return times


def rounds_for(seconds_per_round: float, budget_s: float, most: int, least: int = 3) -> int:
    """As many rounds as fit in the budget, within [least, most]."""
    if seconds_per_round <= 0:
        return most
    return max(least, min(most, int(budget_s / seconds_per_round)))


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


BOOTSTRAP_RESAMPLES = 2000


def paired(other: list[float], mine: list[float]) -> tuple[float, float, float, int]:
    """Round by round, other / mine: the median ratio, a 95% bootstrap interval for that
    median (resampling the rounds, seeded: the same samples give the same interval), and
    the rounds in which `mine` was the faster."""
    ratios = np.array(other) / np.array(mine)
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(ratios), size=(BOOTSTRAP_RESAMPLES, len(ratios)))
    low, high = np.percentile(np.median(ratios[picks], axis=1), [2.5, 97.5])
    return float(np.median(ratios)), float(low), float(high), int((ratios > 1).sum())


# ---------------------------------------------------------------- workloads


def fg_realized(build: Callable[[], fg.Tensor]) -> Callable[[], fg.Tensor]:
    """A fusegrad run: build the lazy graph and realize it, both inside the timed region."""
    return lambda: build().realize()


def make_cases(n_chain: int, n_rows: int, n_mm: int) -> list[Case]:
    fg.manual_seed(0)
    x = fg.randn(n_chain).realize()
    a = fg.randn(n_rows, n_rows).realize()
    b = fg.randn(n_mm, n_mm).realize()
    c = fg.randn(n_mm, n_mm).realize()
    # every system gets its own copy of the same random values
    xn, an, bn, cn = (np.array(t.numpy()) for t in (x, a, b, c))
    copy_dst = np.empty_like(xn)
    f4 = 4  # bytes per float32

    def chain_np():
        return np.maximum(np.exp(xn * 0.5 + 1.0) * xn - 3.0, 0.0) / (1 + xn * xn)

    def softmax_np():
        e = np.exp(an - an.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def copy_np():
        np.copyto(copy_dst, xn)
        return copy_dst

    row_copy_dst = np.empty_like(an)

    def row_copy_np():
        np.copyto(row_copy_dst, an)
        return row_copy_dst

    def log_softmax_np():
        shifted = an - an.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))

    # layer norm of 8192x1024 (half the floats): the first half of `a`, as its own buffer
    ln_rows, ln_cols = n_rows * n_rows // 2 // LAYER_NORM_COLS, LAYER_NORM_COLS
    an_ln = an[: n_rows // 2].reshape(ln_rows, ln_cols).copy()
    a_ln = fg.from_numpy(an_ln.copy()).realize()
    ln_copy_dst = np.empty_like(an_ln)

    def ln_copy_np():
        np.copyto(ln_copy_dst, an_ln)
        return ln_copy_dst

    def layer_norm_np():
        mean = an_ln.mean(axis=1, keepdims=True)
        var = an_ln.var(axis=1, keepdims=True)
        return (an_ln - mean) / np.sqrt(var + 1e-5)

    cases = [
        Case(
            f"copy 2^{n_chain.bit_length() - 1} (floor)",
            2 * n_chain * f4,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: x + 0), NUMPY: copy_np},
        ),
        Case(
            f"chain 2^{n_chain.bit_length() - 1}",
            2 * n_chain * f4,
            "GB/s",
            {
                FUSEGRAD: fg_realized(
                    lambda: (((x * 0.5 + 1.0).exp() * x - 3.0).relu()) / (1 + x * x)
                ),
                NUMPY: chain_np,
            },
        ),
        Case(
            f"softmax {n_rows}x{n_rows}",
            2 * n_rows * n_rows * f4,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: a.softmax(dim=1)), NUMPY: softmax_np},
        ),
        Case(
            f"copy {n_rows}x{n_rows} (row floor)",
            2 * n_rows * n_rows * f4,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: a + 0), NUMPY: row_copy_np},
        ),
        Case(
            f"log_softmax {n_rows}x{n_rows}",
            2 * n_rows * n_rows * f4,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: a.log_softmax(dim=1)), NUMPY: log_softmax_np},
        ),
        Case(
            f"copy {ln_rows}x{ln_cols} (row floor)",
            2 * ln_rows * ln_cols * f4,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: a_ln + 0), NUMPY: ln_copy_np},
        ),
        Case(
            f"layer norm {ln_rows}x{ln_cols}",
            2 * ln_rows * ln_cols * f4,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: F.layer_norm(a_ln, (ln_cols,))), NUMPY: layer_norm_np},
        ),
        Case(
            f"row sum {n_rows}x{n_rows}",
            (n_rows * n_rows + n_rows) * f4,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: a.sum(1)), NUMPY: lambda: an.sum(axis=1)},
        ),
        Case(
            f"full sum 2^{n_chain.bit_length() - 1}",
            n_chain * f4,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: x.sum()), NUMPY: lambda: xn.sum()},
        ),
        Case(
            f"matmul {n_mm}^3",
            2.0 * n_mm**3,
            "GFLOP/s",
            {FUSEGRAD: fg_realized(lambda: b @ c), NUMPY: lambda: bn @ cn},
        ),
    ]
    if torch is not None:
        xt, at, bt, ct = (torch.from_numpy(v.copy()) for v in (xn, an, bn, cn))
        copy_dst_t = torch.empty_like(xt)
        row_copy_dst_t = torch.empty_like(at)
        at_ln = torch.from_numpy(an_ln.copy())
        ln_copy_dst_t = torch.empty_like(at_ln)
        torch_runs = [
            lambda: copy_dst_t.copy_(xt),
            lambda: torch.relu(torch.exp(xt * 0.5 + 1.0) * xt - 3.0) / (1 + xt * xt),
            lambda: torch.softmax(at, dim=1),
            lambda: row_copy_dst_t.copy_(at),
            lambda: torch.log_softmax(at, dim=1),
            lambda: ln_copy_dst_t.copy_(at_ln),
            lambda: torch.nn.functional.layer_norm(at_ln, (ln_cols,)),
            lambda: at.sum(1),
            lambda: xt.sum(),
            lambda: bt @ ct,
        ]
        assert len(torch_runs) == len(cases)
        for case, run in zip(cases, torch_runs, strict=True):
            case.runs[TORCH] = run
    return cases


# the convolution: batch, input channels, image side, output channels, kernel side (padding k//2)
CONV = (64, 32, 56, 64, 3)


def conv_relu_np(x, w, b) -> tuple[np.ndarray, np.ndarray]:
    """relu(conv2d(x, w, b, padding=k//2)) in numpy, and the padded input's windows."""
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))  # N C H W k k
    y = np.einsum("nchwij,ocij->nohw", win, w, optimize=True) + b[None, :, None, None]
    return np.maximum(y, 0), win


def conv_grads_np(x, w, gz) -> list[np.ndarray]:
    """dx and dw of conv2d(x, w, padding=k//2) for the output gradient gz."""
    k, side = w.shape[-1], x.shape[-1]
    dxp = np.zeros((x.shape[0], x.shape[1], side + k - 1, side + k - 1), np.float32)
    for i in range(k):
        for j in range(k):
            dxp[:, :, i : i + side, j : j + side] += np.einsum("nohw,oc->nchw", gz, w[:, :, i, j])
    dx = dxp[:, :, k // 2 : k // 2 + side, k // 2 : k // 2 + side]
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))  # N C H W k k
    dw = np.einsum("nchwij,nohw->ocij", win, gz, optimize=True)
    return [dx, dw]


def conv_relu_grads_np(x, w, b, gy) -> list[np.ndarray]:
    """relu(conv2d(x, w, b)) and its gradients dx, dw, db for the output gradient gy."""
    y, _ = conv_relu_np(x, w, b)
    gz = gy * (y > 0)
    return [y, *conv_grads_np(x, w, gz), gz.sum((0, 2, 3))]


# the other convolutions: name, batch, in channels, side, out channels, kernel side, stride,
# padding, dilation, groups; and which rows each gets (forward, input and weight gradient alone,
# forward + backward)
CONV_FAMILY = [
    ("s2", 32, 64, 56, 128, 3, 2, 1, 1, 1, ("fwd", "dx", "dw", "fwd+bwd")),  # ResNet downsampling
    ("d2", 64, 32, 56, 64, 3, 1, 2, 2, 1, ("fwd", "fwd+bwd")),  # dilation 2
    ("g4", 32, 64, 56, 64, 3, 1, 1, 1, 4, ("fwd", "fwd+bwd")),  # 4 groups
    ("dw", 32, 64, 56, 64, 3, 1, 1, 1, 64, ("fwd", "dx", "dw", "fwd+bwd")),  # depthwise: no GEMM
]


def conv_np(x, w, gy, s: int, p: int, d: int, groups: int) -> list[np.ndarray]:
    """conv2d(x, w, stride=s, padding=p, dilation=d, groups=groups) and, for the output
    gradient gy, its input and weight gradients, in numpy (float32)."""
    n, c, side = x.shape[0], x.shape[1], x.shape[2]
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    span = d * (k - 1) + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (span, span), axis=(2, 3))
    win = win[:, :, ::s, ::s, ::d, ::d]  # N C H W k k
    oh = win.shape[2]
    win = win.reshape(n, groups, c // groups, oh, oh, k, k)
    wg = w.reshape(groups, -1, c // groups, k, k)
    gg = gy.reshape(n, groups, -1, oh, oh)
    y = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True).reshape(gy.shape)
    dw = np.einsum("ngchwij,ngohw->gocij", win, gg, optimize=True).reshape(w.shape)
    dxp = np.zeros(xp.shape, np.float32)
    for i in range(k):
        for j in range(k):
            part = np.einsum("ngohw,goc->ngchw", gg, wg[..., i, j]).reshape(n, c, oh, oh)
            dxp[:, :, d * i : d * i + s * oh : s, d * j : d * j + s * oh : s] += part
    return [y, dxp[:, :, p : p + side, p : p + side], dw]


def make_conv_cases(compile_torch: bool) -> list[Case]:
    """The convolution, forward and forward + backward, beside the sgemm it is as an
    implicit GEMM (batch * pixels x in-channels * kernel @ that x out-channels): the same
    FLOPs, timed in one alternation, so their GFLOP/s compare within the run."""
    from fusegrad.nn import functional as F

    batch, cin, side, cout, k = CONV
    fg.manual_seed(1)
    rows, depth = batch * side * side, cin * k * k

    def on_grid(shape, step: float):
        # random values on a grid of `step`: every sum here is exact in float32 in any order,
        # so relu's ties (an output of exactly 0) fall alike in every system and numpy
        return fg.tensor(np.round(np.array(fg.randn(*shape).numpy()) / step) * step)

    x, gy = on_grid((batch, cin, side, side), 1 / 8), on_grid((batch, cout, side, side), 1 / 8)
    w, b = (on_grid((cout, cin, k, k), 1 / 64) / 16).realize(), on_grid((cout,), 1 / 64)
    a_mm, b_mm = fg.randn(rows, depth).realize(), fg.randn(depth, cout).realize()
    xn, wn, bn, gyn, an, bmn = (np.array(t.numpy()) for t in (x, w, b, gy, a_mm, b_mm))
    xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
    flops = 2.0 * batch * cout * side * side * depth
    shape = f"{batch}x{cin}x{side}^2->{cout} {k}x{k}"

    def fg_forward():
        return F.relu(F.conv2d(x, w, b, padding=k // 2)).realize()

    def fg_step():
        y = F.relu(F.conv2d(xg, wg, bg, padding=k // 2))
        grads = fg.grad(y, [xg, wg, bg], grad_outputs=gy)
        fg.realize(y, *grads)
        return (y, *grads)

    def fg_input_grad():
        (dx,) = fg.grad(F.conv2d(xg, w, None, padding=k // 2), [xg], grad_outputs=gy)
        return dx.realize()

    def fg_weight_grad():
        (dw,) = fg.grad(F.conv2d(x, wg, None, padding=k // 2), [wg], grad_outputs=gy)
        return dw.realize()

    cases = [
        Case(
            f"sgemm of conv {rows}x{depth}x{cout}",
            flops,
            "GFLOP/s",
            {FUSEGRAD: fg_realized(lambda: a_mm @ b_mm), NUMPY: lambda: an @ bmn},
        ),
        Case(
            f"conv {shape} relu",
            flops,
            "GFLOP/s",
            {FUSEGRAD: fg_forward},
            reference=lambda: conv_relu_np(xn, wn, bn)[0],
        ),
        Case(
            f"conv {shape} fwd+bwd",
            3 * flops,
            "GFLOP/s",
            {FUSEGRAD: fg_step},
            reference=lambda: conv_relu_grads_np(xn, wn, bn, gyn),
        ),
        # each gradient alone (no relu: the output gradient is gy itself), the same FLOPs
        Case(
            f"conv {shape} dx",
            flops,
            "GFLOP/s",
            {FUSEGRAD: fg_input_grad},
            reference=lambda: conv_grads_np(xn, wn, gyn)[0],
        ),
        Case(
            f"conv {shape} dw",
            flops,
            "GFLOP/s",
            {FUSEGRAD: fg_weight_grad},
            reference=lambda: conv_grads_np(xn, wn, gyn)[1],
        ),
    ]
    for case in cases[1:]:
        case.sgemm = cases[0]
    family = [case for spec in CONV_FAMILY for case in conv_family_cases(spec, on_grid)]
    family += conv1d_cases(on_grid)
    family += conv_transpose_cases(on_grid)
    if torch is None:
        return cases + family
    xt, wt, bt, gyt, at, bmt = (torch.from_numpy(v.copy()) for v in (xn, wn, bn, gyn, an, bmn))
    leaves = [v.clone().requires_grad_() for v in (xt, wt, bt)]

    def torch_forward(conv):
        return lambda: conv(xt, wt, bt)

    def torch_step(conv):
        def step():
            y = conv(*leaves)
            return (y, *torch.autograd.grad(y, leaves, gyt))

        return step

    def eager(x, w, b):
        return torch.relu(torch.nn.functional.conv2d(x, w, b, padding=k // 2))

    cases[0].runs[TORCH] = lambda: at @ bmt
    cases[1].runs[TORCH] = torch_forward(eager)
    cases[2].runs[TORCH] = torch_step(eager)
    grad_input, grad_weight = torch.nn.grad.conv2d_input, torch.nn.grad.conv2d_weight
    cases[3].runs[TORCH] = lambda: grad_input(xt.shape, wt, gyt, padding=k // 2)
    cases[4].runs[TORCH] = lambda: grad_weight(xt, wt.shape, gyt, padding=k // 2)
    if compile_torch:
        compiled = torch.compile(eager)
        try:
            with torch.no_grad():
                compiled(xt, wt, bt)
            torch_step(compiled)()
        except Exception as e:  # noqa: BLE001 (torch.compile needs a C compiler, ...)
            print(f"torch.compile does not run here ({type(e).__name__}: {e}); left out")
        else:
            cases[1].runs[TORCH_COMPILE] = torch_forward(compiled)
            cases[2].runs[TORCH_COMPILE] = torch_step(compiled)
    return cases + family


def conv_row(conv, x, w, gy, row: str) -> Callable[[], object]:
    """fusegrad's run of one convolution row: `conv(x, w)` forward ("fwd"), the input or
    weight gradient alone for output gradient gy ("dx", "dw"), or the value and both
    gradients ("fwd+bwd"); each row differentiates only what it times."""

    def run():
        xs = x if row in ("dx", "fwd+bwd") else x.detach()
        ws = w if row in ("dw", "fwd+bwd") else w.detach()
        y = conv(xs, ws)
        if row == "fwd":
            return y.detach().realize()
        wanted = {"dx": [xs], "dw": [ws], "fwd+bwd": [xs, ws]}[row]
        grads = fg.grad(y, wanted, grad_outputs=gy)
        if row != "fwd+bwd":
            return grads[0].realize()
        fg.realize(y, *grads)
        return (y, *grads)

    return run


def conv_answer(numpy_conv, row: str) -> Callable[[], object]:
    """numpy's answer for one convolution row, from `numpy_conv()`'s (y, dx, dw)."""

    def answer():
        y, dx, dw = numpy_conv()
        return {"fwd": y, "dx": dx, "dw": dw, "fwd+bwd": [y, dx, dw]}[row]

    return answer


def conv_family_cases(spec, on_grid) -> list[Case]:
    """The rows of one CONV_FAMILY convolution, each beside the sgemm of its implicit GEMM's
    useful FLOPs (groups: a batched sgemm, one per group), all timed in one alternation.
    A depthwise convolution (one input channel per group) is no GEMM: its rows have no sgemm,
    only PyTorch's time beside them, and their GB/s against the memory it must move."""
    from fusegrad.nn import functional as F

    name, batch, cin, side, cout, k, s, p, d, groups, rows = spec
    out = (side + 2 * p - d * (k - 1) - 1) // s + 1
    m, depth, cols = batch * out * out, cin // groups * k * k, cout // groups
    flops = 2.0 * m * depth * cols * groups
    x = on_grid((batch, cin, side, side), 1 / 8).requires_grad_()
    w = (on_grid((cout, cin // groups, k, k), 1 / 64) / 16).realize().requires_grad_()
    gy = on_grid((batch, cout, out, out), 1 / 8)
    xn, wn, gyn = (np.array(t.detach().numpy()) for t in (x, w, gy))
    geometry = {"stride": s, "padding": p, "dilation": d, "groups": groups}
    label = f"conv {name} {batch}x{cin}x{side}^2->{cout} {k}x{k}"

    def fg_rows(row):
        return conv_row(lambda xs, ws: F.conv2d(xs, ws, None, **geometry), x, w, gy, row)

    def reference(row):
        return conv_answer(lambda: conv_np(xn, wn, gyn, s, p, d, groups), row)

    cases = []
    # the arrays each row must move, in units of x's bytes (x and y are one size at stride 1,
    # one channel per group): forward x and y, dx gy and dx, dw x and gy; fwd+bwd all six
    arrays = {"fwd": 2, "dx": 2, "dw": 2, "fwd+bwd": 6}
    x_bytes = 4.0 * batch * cin * side * side
    copy = None
    if cin // groups == 1:  # no GEMM: a fused copy of x beside it (reads x, writes as much)
        x_kept = x.detach().realize()
        copy = Case(
            f"{label} copy of x (floor)",
            2 * x_bytes,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: x_kept + 0)},
            reference=lambda: xn,
        )
        cases.append(copy)
    if cin // groups > 1:  # a GEMM: its sgemm beside it
        a_mm = fg.randn(groups, m, depth).realize()
        b_mm = fg.randn(groups, depth, cols).realize()
        an, bn = (np.array(t.numpy()) for t in (a_mm, b_mm))
        mm = f"{groups}x" if groups > 1 else ""
        cases.append(
            Case(
                f"sgemm of conv {name} {mm}{m}x{depth}x{cols}",
                flops,
                "GFLOP/s",
                {FUSEGRAD: fg_realized(lambda: a_mm @ b_mm), NUMPY: lambda: an @ bn},
            )
        )
    for row in rows:
        work = 3 * flops if row == "fwd+bwd" else flops
        case = Case(f"{label} {row}", work, "GFLOP/s", {FUSEGRAD: fg_rows(row)}, reference(row))
        case.sgemm = cases[0] if cases and cases[0].name.startswith("sgemm") else None
        if copy is not None and s == 1 and cout == cin:
            case.copy, case.moved = copy, arrays[row] * x_bytes
        cases.append(case)
    if torch is None:
        return cases
    xt, wt, gyt = (torch.from_numpy(v.copy()) for v in (xn, wn, gyn))
    leaves = [v.clone().requires_grad_() for v in (xt, wt)]

    def torch_row(row):
        if row == "fwd":
            return lambda: torch.nn.functional.conv2d(xt, wt, None, **geometry)
        if row == "dx":
            return lambda: torch.nn.grad.conv2d_input(xt.shape, wt, gyt, **geometry)
        if row == "dw":
            return lambda: torch.nn.grad.conv2d_weight(xt, wt.shape, gyt, **geometry)

        def step():
            y = torch.nn.functional.conv2d(*leaves, None, **geometry)
            return (y, *torch.autograd.grad(y, leaves, gyt))

        return step

    if cin // groups > 1:
        cases[0].runs[TORCH] = lambda: torch.from_numpy(an) @ torch.from_numpy(bn)
    for case, row in zip(cases[-len(rows) :], rows):
        case.runs[TORCH] = torch_row(row)
    return cases


# a 1-D convolution (a text CNN's layer over a long batch): batch, in channels, length, out
# channels, kernel, padding
CONV1D = (32, 128, 1024, 128, 3, 1)


def conv1d_np(x, w, gy, p: int) -> list[np.ndarray]:
    """conv1d(x, w, padding=p) and, for the output gradient gy, its input and weight
    gradients, in numpy (float32)."""
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p)))
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=2)  # N C L k
    y = np.einsum("ncli,oci->nol", win, w, optimize=True)
    dw = np.einsum("ncli,nol->oci", win, gy, optimize=True)
    dxp = np.zeros(xp.shape, np.float32)
    length = gy.shape[-1]
    for i in range(k):
        dxp[:, :, i : i + length] += np.einsum("nol,oc->ncl", gy, w[..., i])
    return [y, dxp[:, :, p : p + x.shape[-1]], dw]


def conv1d_cases(on_grid) -> list[Case]:
    """conv1d forward, each gradient alone and forward + backward, beside the sgemm of its
    implicit GEMM (batch * length x in channels * kernel @ that x out channels), all in the
    convolutions' alternation."""
    from fusegrad.nn import functional as F

    batch, cin, length, cout, k, p = CONV1D
    out = length + 2 * p - k + 1
    m, depth = batch * out, cin * k
    flops = 2.0 * m * depth * cout
    x = on_grid((batch, cin, length), 1 / 8).requires_grad_()
    w = (on_grid((cout, cin, k), 1 / 64) / 16).realize().requires_grad_()
    gy = on_grid((batch, cout, out), 1 / 8)
    xn, wn, gyn = (np.array(t.detach().numpy()) for t in (x, w, gy))
    a_mm, b_mm = fg.randn(m, depth).realize(), fg.randn(depth, cout).realize()
    an, bn = (np.array(t.numpy()) for t in (a_mm, b_mm))
    label = f"conv1d {batch}x{cin}x{length}->{cout} k{k}"
    rows = ("fwd", "dx", "dw", "fwd+bwd")

    def fg_row(row):
        return conv_row(lambda xs, ws: F.conv1d(xs, ws, None, padding=p), x, w, gy, row)

    def reference(row):
        return conv_answer(lambda: conv1d_np(xn, wn, gyn, p), row)

    sgemm = Case(
        f"sgemm of conv1d {m}x{depth}x{cout}",
        flops,
        "GFLOP/s",
        {FUSEGRAD: fg_realized(lambda: a_mm @ b_mm), NUMPY: lambda: an @ bn},
    )
    cases = [sgemm]
    for row in rows:
        work = 3 * flops if row == "fwd+bwd" else flops
        case = Case(f"{label} {row}", work, "GFLOP/s", {FUSEGRAD: fg_row(row)}, reference(row))
        case.sgemm = sgemm
        cases.append(case)
    if torch is None:
        return cases
    xt, wt, gyt = (torch.from_numpy(v.copy()) for v in (xn, wn, gyn))
    leaves = [v.clone().requires_grad_() for v in (xt, wt)]

    def torch_step():
        y = torch.nn.functional.conv1d(*leaves, None, padding=p)
        return (y, *torch.autograd.grad(y, leaves, gyt))

    torch_rows = {
        "fwd": lambda: torch.nn.functional.conv1d(xt, wt, None, padding=p),
        "dx": lambda: torch.nn.grad.conv1d_input(xt.shape, wt, gyt, padding=p),
        "dw": lambda: torch.nn.grad.conv1d_weight(xt, wt.shape, gyt, padding=p),
        "fwd+bwd": torch_step,
    }
    sgemm.runs[TORCH] = lambda: torch.from_numpy(an) @ torch.from_numpy(bn)
    for case, row in zip(cases[1:], rows):
        case.runs[TORCH] = torch_rows[row]
    return cases


# a transposed convolution (DCGAN's upsampling): batch, in channels, side, out channels, kernel
# side, stride, padding
CONV_TRANSPOSE = (32, 128, 16, 64, 4, 2, 1)


def conv_transpose_cases(on_grid) -> list[Case]:
    """conv_transpose2d forward and forward + backward beside the sgemm of its implicit GEMM
    (batch x input pixels x in channels @ in channels x out channels x kernel: every input
    element times every tap, the useful FLOPs), all in the convolutions' alternation."""
    from fusegrad.nn import functional as F

    batch, cin, side, cout, k, s, p = CONV_TRANSPOSE
    out = (side - 1) * s - 2 * p + k
    flops = 2.0 * batch * side * side * cin * cout * k * k
    x = on_grid((batch, cin, side, side), 1 / 8).requires_grad_()
    w = (on_grid((cin, cout, k, k), 1 / 64) / 16).realize().requires_grad_()
    gy = on_grid((batch, cout, out, out), 1 / 8)
    xn, wn, gyn = (np.array(t.detach().numpy()) for t in (x, w, gy))
    a_mm = fg.randn(batch * side * side, cin).realize()
    b_mm = fg.randn(cin, cout * k * k).realize()
    an, bn = (np.array(t.numpy()) for t in (a_mm, b_mm))
    label = f"conv_transpose {batch}x{cin}x{side}^2->{cout} {k}x{k} s{s}"

    def fg_forward():
        return F.conv_transpose2d(x.detach(), w.detach(), None, s, p).realize()

    def fg_step():
        y = F.conv_transpose2d(x, w, None, s, p)
        grads = fg.grad(y, [x, w], grad_outputs=gy)
        fg.realize(y, *grads)
        return (y, *grads)

    def reference(step: bool):
        # the transposed convolution is the input gradient of conv2d(., w): numpy's conv of
        # gy gives x's gradient, its input gradient for output gradient x the value, and its
        # weight gradient w's
        def answer():
            dx, y, dw = conv_np(gyn, wn, xn, s, p, 1, 1)
            return [y, dx, dw] if step else y

        return answer

    sgemm = Case(
        f"sgemm of conv_transpose {batch * side * side}x{cin}x{cout * k * k}",
        flops,
        "GFLOP/s",
        {FUSEGRAD: fg_realized(lambda: a_mm @ b_mm), NUMPY: lambda: an @ bn},
    )
    rows = [
        Case(f"{label} fwd", flops, "GFLOP/s", {FUSEGRAD: fg_forward}, reference(False)),
        Case(f"{label} fwd+bwd", 3 * flops, "GFLOP/s", {FUSEGRAD: fg_step}, reference(True)),
    ]
    for row in rows:
        row.sgemm = sgemm
    if torch is not None:
        xt, wt, gyt = (torch.from_numpy(v.copy()) for v in (xn, wn, gyn))
        leaves = [v.clone().requires_grad_() for v in (xt, wt)]

        def torch_step():
            y = torch.nn.functional.conv_transpose2d(*leaves, None, s, p)
            return (y, *torch.autograd.grad(y, leaves, gyt))

        sgemm.runs[TORCH] = lambda: torch.from_numpy(an) @ torch.from_numpy(bn)
        rows[0].runs[TORCH] = lambda: torch.nn.functional.conv_transpose2d(xt, wt, None, s, p)
        rows[1].runs[TORCH] = torch_step
    return [sgemm, *rows]


def print_conv(convs: list[Case]) -> None:
    """Each system's convolution GFLOP/s against fusegrad's sgemm of the same FLOPs (the
    sgemm of its implicit GEMM, `Case.sgemm`), from the same alternation: the paired ratio
    is the issue's target (>= 0.8). A row with no sgemm (depthwise: no GEMM) is compared
    with PyTorch's time instead, and its GB/s of the bytes it must move (forward: x read, y
    written; dx: gy read, dx written; dw: x and gy read; fwd+bwd: all six) against the fused
    copy of x timed in the same alternation, round by round ("over a copy": the target is
    0.8 or more)."""
    print("\nthe convolutions against fusegrad's sgemm of their implicit GEMM's useful FLOPs,")
    print("timed in one alternation; GFLOP/s, and round by round conv rate / sgemm rate:")
    for case in convs:
        if case.name.startswith("sgemm"):
            ms = median_ms(case.timings[FUSEGRAD])
            print(f"  {case.name:<44} fusegrad      {rate(case, ms):7.1f} GFLOP/s")
            continue
        for name, samples in case.timings.items():
            per_flop = np.array(samples) / case.work
            line = f"  {case.name:<44} {name:<14}{rate(case, median_ms(samples)):7.1f} GFLOP/s"
            if case.sgemm is not None:
                mine = np.array(case.sgemm.timings[FUSEGRAD]) / case.sgemm.work
                ratio, low, high, _ = paired(list(mine), list(per_flop))
                line += f"   / fusegrad sgemm {ratio:5.2f} [{low:4.2f}, {high:4.2f}]"
            elif name != FUSEGRAD and FUSEGRAD in case.timings:
                ratio, low, high, _ = paired(samples, case.timings[FUSEGRAD])
                line += f"   {name} / fusegrad time {ratio:5.2f} [{low:4.2f}, {high:4.2f}]"
            elif case.copy is not None:  # the bytes it must move, against the copy's rate
                gbs = case.moved / (median_ms(samples) / 1e3) / 1e9
                per_byte = np.array(case.copy.timings[FUSEGRAD]) * (case.moved / case.copy.work)
                ratio, low, high, _ = paired(list(per_byte), samples)
                line += f"   {gbs:6.1f} GB/s moved, over a copy {ratio:4.2f}"
                line += f" [{low:4.2f}, {high:4.2f}]"
            elif case.unit == "GB/s":  # the copy a depthwise row is measured against
                line = f"  {case.name:<44} {name:<14}{rate(case, median_ms(samples)):7.1f} GB/s"
            elif case.name.endswith(" fwd"):  # read x once, write y once
                x_bytes, y_bytes = conv_bytes(case.name)
                gbs = (x_bytes + y_bytes) / (median_ms(samples) / 1e3) / 1e9
                line += f"   {gbs:6.1f} GB/s (input read, output written once)"
            print(line)


def conv_bytes(name: str) -> tuple[float, float]:
    """The float32 input and output bytes of a CONV_FAMILY forward row, from its name."""
    spec = next(spec for spec in CONV_FAMILY if name.startswith(f"conv {spec[0]} "))
    _, batch, cin, side, cout, k, s, p, d, _, _ = spec
    out = (side + 2 * p - d * (k - 1) - 1) // s + 1
    return 4.0 * batch * cin * side * side, 4.0 * batch * cout * out * out


# bfloat16 keeps 8 significant bits: one rounding is off by at most 2^-9 of the value.
# PyTorch eager rounds every op of the chain (about 8 roundings, some amplified by exp),
# so the check allows 2^-4 of the answer's largest magnitude: it catches a wrong answer
# (a dropped term, a transposed operand), not the last bits.
BF16_TOLERANCE = 2.0**-4


def bf16_cases(n_chain: int, n_rows: int, n_mm: int) -> list[Case]:
    """The bfloat16 rows: fusegrad's and PyTorch's bfloat16, with a float32 matmul of the
    same size beside the bfloat16 one (`sgemm ...`: the two are timed in one alternation)."""
    fg.manual_seed(1)
    x, a, b, c = (
        t.realize()
        for t in (
            fg.randn(n_chain),
            fg.randn(n_rows, n_rows),
            fg.randn(n_mm, n_mm),
            fg.randn(n_mm, n_mm),
        )
    )
    xh, ah, bh, ch = (t.bfloat16().realize() for t in (x, a, b, c))
    # numpy's float64 answers on the very values the bfloat16 runs read
    xr, ar, br, cr = (t.float().numpy().astype(np.float64) for t in (xh, ah, bh, ch))
    bn, cn = (np.array(t.numpy()) for t in (b, c))
    h2 = 2  # bytes per bfloat16

    def chain_ref():
        return np.maximum(np.exp(xr * 0.5 + 1.0) * xr - 3.0, 0.0) / (1 + xr * xr)

    def softmax_ref():
        e = np.exp(ar - ar.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    log2 = n_chain.bit_length() - 1
    cases = [
        Case(
            f"sgemm {n_mm}^3 fp32",
            2.0 * n_mm**3,
            "GFLOP/s",
            {FUSEGRAD: fg_realized(lambda: b @ c), NUMPY: lambda: bn @ cn},
        ),
        Case(
            f"sgemm {n_mm}^3 bf16",
            2.0 * n_mm**3,
            "GFLOP/s",
            {FUSEGRAD: fg_realized(lambda: bh @ ch)},
            reference=lambda: br @ cr,
            tolerance=BF16_TOLERANCE,
        ),
        Case(
            f"chain 2^{log2} bf16",
            2 * n_chain * h2,
            "GB/s",
            {
                FUSEGRAD: fg_realized(
                    lambda: (((xh * 0.5 + 1.0).exp() * xh - 3.0).relu()) / (1 + xh * xh)
                )
            },
            reference=chain_ref,
            tolerance=BF16_TOLERANCE,
        ),
        Case(
            f"softmax {n_rows}x{n_rows} bf16",
            2 * n_rows * n_rows * h2,
            "GB/s",
            {FUSEGRAD: fg_realized(lambda: ah.softmax(dim=1))},
            reference=softmax_ref,
            tolerance=BF16_TOLERANCE,
        ),
    ]
    if torch is not None:
        bt, ct = (torch.from_numpy(v.copy()) for v in (bn, cn))
        xth, ath, bth, cth = (
            torch.from_numpy(v.astype(np.float32)).bfloat16() for v in (xr, ar, br, cr)
        )
        torch_runs = [
            lambda: bt @ ct,
            lambda: bth @ cth,
            lambda: torch.relu(torch.exp(xth * 0.5 + 1.0) * xth - 3.0) / (1 + xth * xth),
            lambda: torch.softmax(ath, dim=1),
        ]
        for case, run in zip(cases, torch_runs, strict=True):
            case.runs[TORCH] = run
    return cases


def as_numpy(out) -> np.ndarray:
    if isinstance(out, (tuple, list)):  # several answers (a value and its gradients)
        return [as_numpy(part) for part in out]
    if isinstance(out, fg.Tensor):
        return np.asarray(out.float().numpy() if out.dtype.is_half else out.numpy())
    if torch is not None and isinstance(out, torch.Tensor):
        out = out.detach()
        return out.float().numpy() if out.dtype == torch.bfloat16 else out.numpy()
    return np.asarray(out)


def check_answers(case: Case) -> str:
    """Run each system once and compare with numpy; returns the largest relative error seen
    (each part of a several-part answer relative to its own largest magnitude;
    a 16-bit case within its `tolerance`)."""
    want = as_numpy(case.reference() if case.reference else case.runs[NUMPY]())
    want = want if isinstance(want, list) else [want]
    worst = 0.0
    for name, run in case.runs.items():
        got = as_numpy(run())
        got = got if isinstance(got, list) else [got]
        for part, (g, w) in enumerate(zip(got, want, strict=True)):
            if g.shape != w.shape:
                raise SystemExit(f"{case.name}: {name} gave shape {g.shape}, numpy {w.shape}")
            scale = float(np.abs(w).max()) or 1.0
            err = float(np.abs(g.astype(np.float64) - w).max()) / scale
            worst = max(worst, err)
            if not err < case.tolerance:
                raise SystemExit(
                    f"{case.name}: {name} (part {part}) differs from numpy by {err:.2e} (relative)"
                )
    return f"{worst:.1e}"


# ---------------------------------------------------------------- the run


def first_call(case: Case) -> None:
    """fusegrad's first call, compiling into an empty cache; reported apart from the medians."""
    seconds, out = timed(case.runs[FUSEGRAD])
    records = fg.kernels(*out) if isinstance(out, tuple) else fg.kernels(out)
    case.first_call_ms = seconds * 1e3
    case.compile_ms = sum(r.compile_seconds for r in records) * 1e3
    case.tiles = [
        f"{r.name}: {note}" for r in records if (note := getattr(r.loop, "tile_note", ""))
    ]
    if case.name.startswith("copy"):
        # the floor must be one kernel that reads x and writes a new buffer, nothing folded away
        if len(records) != 1 or records[0].bytes != case.work:
            raise SystemExit(
                f"the copy floor `(x + 0).realize()` ran {len(records)} kernel(s) moving "
                f"{[r.bytes for r in records]} bytes; expected one kernel moving {case.work:.0f}"
            )


def measure(group: list[Case], budget_s: float, most: int, warmup: int) -> None:
    """Time every system of every case in `group` in one alternation.

    The chain and its copy floor are one group, so the ratio between them
    compares times taken in the same minutes, whatever else the machine did.
    """
    runs = {(i, name): run for i, case in enumerate(group) for name, run in case.runs.items()}
    seconds_per_round = 0.0
    for _ in range(warmup):
        seconds_per_round = 0.0
        for (_, name), run in runs.items():
            seconds_per_round += timed(run)[0]
            pause_if_needed(name)
    # every call is followed by its pause: they are most of a round's time
    seconds_per_round += PAUSE_AFTER_OTHERS_S * len(runs)
    rounds = rounds_for(seconds_per_round, budget_s, most)
    names = " + ".join(case.name for case in group)
    print(f"  timing {names}: {rounds} rounds ...", file=sys.stderr)

    def keep_kernel_time(key, out):
        if key[1] == FUSEGRAD:
            seconds = [r.seconds for r in fg.kernels(*out if isinstance(out, tuple) else (out,))]
            if None not in seconds:  # a multi-kernel schedule runs as one untimed program
                group[key[0]].kernel_seconds.append(sum(seconds))

    times = alternate(runs, rounds, keep_kernel_time, system_of=lambda key: key[1])
    for (i, name), samples in times.items():
        group[i].timings[name] = samples


def rate(case: Case, ms: float) -> float:
    return case.work / (ms / 1e3) / 1e9


def fmt(v: float | None, width: int, digits: int = 2) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


def print_table(cases: list[Case], checks: dict[str, str]) -> None:
    print("\nmedian ms per call (rate = GB/s for memory-bound ops, GFLOP/s for matmul; the bf16")
    print("rows count 2 bytes an element and have no numpy column: numpy has no bfloat16);")
    print("ratio = other system's time / fusegrad's time (above 1: fusegrad is faster)\n")
    head = (
        f"{'op':<32}{'unit':>8}{'fg ms':>9}{'rate':>7}{'kernels':>9}{'np ms':>9}{'rate':>7}"
        f"{'torch ms':>10}{'rate':>7}{'np/fg':>7}{'torch/fg':>9}{'rounds':>7}{'first ms':>10}"
        f"{'compile':>9}{'max err':>9}"
    )
    print(head)
    print("-" * len(head))
    for case in cases:
        ms = {name: median_ms(t) for name, t in case.timings.items()}
        fg_ms, np_ms, t_ms = ms[FUSEGRAD], ms.get(NUMPY), ms.get(TORCH)
        print(
            f"{case.name:<32}{case.unit:>8}{fmt(fg_ms, 9)}{fmt(rate(case, fg_ms), 7, 1)}"
            f"{fmt(median_ms(case.kernel_seconds) if case.kernel_seconds else None, 9)}"
            f"{fmt(np_ms, 9)}{fmt(None if np_ms is None else rate(case, np_ms), 7, 1)}"
            f"{fmt(t_ms, 10)}{fmt(None if t_ms is None else rate(case, t_ms), 7, 1)}"
            f"{fmt(None if np_ms is None else np_ms / fg_ms, 7)}"
            f"{fmt(None if t_ms is None else t_ms / fg_ms, 9)}"
            f"{len(case.timings[FUSEGRAD]):>7}{fmt(case.first_call_ms, 10, 1)}"
            f"{fmt(case.compile_ms, 9, 1)}{checks[case.name]:>9}"
        )
    print(
        "\n'kernels' is fusegrad's time inside its compiled kernels (the rest is graph building,"
        "\n'-' where several kernels run as one native program, timed as a whole;"
        "\nscheduling and launch); 'first ms' is fusegrad's first call against an empty compile"
        "\ncache and 'compile' the compile time inside it; 'max err' is the largest difference"
        "\nfrom numpy's answer over all systems, relative to the answer's largest magnitude"
        "\n(bf16 rows: numpy's float64 answer on the same bfloat16 inputs)."
    )


def print_paired(cases: list[Case]) -> None:
    print(
        "\nround by round (each round's calls ran within a second of each other): median of"
        "\nthe rounds' ratios [95% bootstrap interval], and the rounds fusegrad was faster in\n"
    )
    for case in cases:
        mine = case.timings[FUSEGRAD]
        parts = []
        labels = ((NUMPY, "np/fg"), (TORCH, "torch/fg"), (TORCH_COMPILE, "compiled/fg"))
        for name, label in labels:
            if name not in case.timings:
                continue
            ratio, low, high, wins = paired(case.timings[name], mine)
            interval = f"[{low:4.2f}, {high:4.2f}]"
            parts.append(f"{label} {ratio:5.2f} {interval}, faster in {wins:>2} of {len(mine)}")
        print(f"  {case.name:<34} " + "   ".join(parts))


def print_floor(copy: Case, chain: Case) -> None:
    print("\nthe chain against the memory-bandwidth floor (one read + one write of 2^24 floats):")
    for name in copy.timings:
        if name not in chain.timings:
            continue
        c_ms, f_ms = median_ms(chain.timings[name]), median_ms(copy.timings[name])
        what = {FUSEGRAD: "(x + 0).realize()", NUMPY: "np.copyto", TORCH: "Tensor.copy_"}[name]
        print(
            f"  {name:<9} chain {c_ms:8.2f} ms / copy {f_ms:7.2f} ms ({what}) = {c_ms / f_ms:5.2f}"
        )
    fg_chain = median_ms(chain.timings[FUSEGRAD])
    np_copy = median_ms(copy.timings[NUMPY])
    print(f"  fusegrad chain / numpy copy into a preallocated array = {fg_chain / np_copy:5.2f}")


SGEMM_PAIR = ("sgemm 2048^3 fp32", "sgemm 2048^3 bf16")  # timed in one alternation
ROW_OPS = ("softmax", "log_softmax", "layer norm")  # timed with their copy, "(row floor)"


def print_row_floor(rows: list[Case]) -> None:
    """Each row op's time over the copy of its own input (the copy of as many floats), per
    system: medians, then the median of the rounds' paired ratios [95% bootstrap interval]
    for fusegrad. At most 1.3 is the target (issues 32, 28)."""
    copies = {c.work: c for c in rows if c.name.endswith("(row floor)")}
    print(
        "\nrow ops against a copy of their input (one alternation; 'paired': median of the"
        "\nrounds' ratios [95% bootstrap interval]):"
    )
    for case in rows:
        copy = copies.get(case.work)
        if copy is None or case is copy:
            continue
        parts = []
        for name in (FUSEGRAD, NUMPY, TORCH):
            if name in case.timings and name in copy.timings:
                ratio = median_ms(case.timings[name]) / median_ms(copy.timings[name])
                parts.append(f"{name} {ratio:5.2f}")
        mid, low, high, _ = paired(case.timings[FUSEGRAD], copy.timings[FUSEGRAD])
        print(
            f"  {case.name:<22} / {copy.name.split(' (')[0]}: "
            + "   ".join(parts)
            + f"   fusegrad paired {mid:4.2f} [{low:4.2f}, {high:4.2f}]"
        )


def print_sgemm_ratio(fp32: Case, *bf16s: Case) -> None:
    """Each bfloat16 matmul's rate over the float32 one's, per system, round by round (all
    were timed in one alternation): the target is fusegrad's at 1.6 or more."""
    for bf16 in bf16s:
        print(f"\n{bf16.name} over {fp32.name}, rate ratio round by round (above 1: bf16 faster):")
        for name in (FUSEGRAD, TORCH):
            if name in fp32.timings and name in bf16.timings:
                ratio, low, high, wins = paired(fp32.timings[name], bf16.timings[name])
                print(
                    f"  {name:<9} {ratio:5.2f} [{low:4.2f}, {high:4.2f}], bf16 faster in "
                    f"{wins:>2} of {len(bf16.timings[name])}"
                )


def print_tiles(cases: list[Case]) -> None:
    """The register tile of each contraction fusegrad ran, and how it was chosen (the fixed
    choice for this CPU, or timed by the autotuner: FUSEGRAD_AUTOTUNE, its first call)."""
    tiled = [case for case in cases if case.tiles]
    if not tiled:
        return
    state = "on" if fg.config.autotune else "off (FUSEGRAD_AUTOTUNE=0)"
    print(f"\nfusegrad's register tiles (autotuner {state}; on {cpu_name()}):")
    for case in tiled:
        for line in case.tiles:
            print(f"  {case.name}: {line}")


def thread_scaling(cases: list[Case], budget_s: float, most: int) -> None:
    all_threads = fg.config.threads
    print(f"\nfusegrad from 1 thread to {all_threads} (median ms, alternating 1 / {all_threads}):")
    if all_threads <= 1:
        print("  only one thread is configured here; nothing to compare")
        return

    def with_threads(run, n):
        def go():
            with fg.config.override(threads=n):
                return run()

        return go

    time.sleep(1.0)  # numpy's and torch's worker threads spin for a while after their last op
    for case in cases:
        run = case.runs[FUSEGRAD]
        runs = {1: with_threads(run, 1), all_threads: with_threads(run, all_threads)}
        guess = 3 * median_ms(case.timings[FUSEGRAD]) / 1e3  # ~1 + 2x the all-threads time
        times = alternate(runs, rounds_for(guess, budget_s, most))
        one, many = median_ms(times[1]), median_ms(times[all_threads])
        print(
            f"  {case.name:<32} 1 thread {one:9.2f} ms   {all_threads} threads {many:9.2f} ms"
            f"   speed-up {one / many:5.2f}x   ({len(times[1])} rounds)"
        )


BUSY_LOAD = 1.0  # a 1-minute load average from which other work visibly shares 2 cores


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument(
        "--only",
        metavar="TEXT[,TEXT...]",
        help="time only the workloads whose name contains one of the TEXTs "
        "(the row ops and their copies: --only softmax,layer,row floor)",
    )
    ap.add_argument(
        "--no-torch-compile",
        action="store_true",
        help="leave torch.compile out of the convolution rows (it compiles for ~a minute)",
    )
    args = ap.parse_args()
    most, budget_s, warmup = (5, 4.0, 1) if args.quick else (31, 20.0, 2)

    if torch is not None:
        torch.set_num_threads(fg.config.threads)
    print(
        f"fusegrad core ops | {cpu_name()} | {platform.machine()} {os.cpu_count()} cores | python "
        f"{platform.python_version()} | numpy {np.__version__} | "
        f"torch {torch.__version__ if torch is not None else '(not installed)'}"
    )
    print(
        f"threads: fusegrad {fg.config.threads}, torch "
        f"{torch.get_num_threads() if torch is not None else '-'}, numpy/OpenBLAS default | "
        f"rounds: up to {most} per system, {warmup} warm-up | pause after every call "
        f"{PAUSE_AFTER_OTHERS_S} s"
    )

    busy_before = load_average()
    print(f"fusegrad at {source_version()} | load average before: {busy_before}")
    with tempfile.TemporaryDirectory(prefix="fusegrad-bench-cache-") as cache:
        with fg.config.override(cache=cache):
            cases = make_cases(1 << 24, 4096, 1024)
            conv = make_conv_cases(torch is not None and not args.no_torch_compile)
            cases += conv + bf16_cases(1 << 24, 4096, 2048)
            if args.only:
                wanted = args.only.split(",")
                chosen = [case for case in cases if any(w in case.name for w in wanted)]
                # an sgemm row brings the other: their ratio is the point of them
                if any(case.name.startswith(SGEMM_PAIR) for case in chosen):
                    chosen += [c for c in cases if c.name.startswith(SGEMM_PAIR)]
                # a convolution row brings the sgemm it is measured against
                chosen += [case.sgemm for case in chosen if case.sgemm is not None]
                cases = [case for case in cases if case in chosen]
            checks = {}
            for case in cases:
                first_call(case)
                checks[case.name] = check_answers(case)
            # the chain and its copy floor are timed in one alternation
            floor = [
                case
                for case in cases
                if case.name.startswith(("copy 2^", "chain")) and not case.name.endswith("bf16")
            ]
            groups = [floor] if len(floor) == 2 else [[case] for case in floor]
            # the row ops and their copy floor, likewise
            rows = [case for case in cases if case.name.endswith("(row floor)")]
            rows += [
                case
                for case in cases
                if case.name.startswith(ROW_OPS) and not case.name.endswith("bf16")
            ]
            groups += [rows]
            # the convolutions and their sgemm, and the float32 and bfloat16 sgemm rows
            # (for their ratio), are timed in one alternation each too
            conv = [case for case in conv if case in cases]
            sgemm = [case for case in cases if case.name.startswith(SGEMM_PAIR)]
            groups += [[case] for case in cases if case not in floor + rows + conv + sgemm]
            groups += [group for group in (conv, sgemm) if group]
            for group in groups:
                if group:  # (`--only bf16` has no row ops: their group is empty)
                    measure(group, budget_s * len(group), most, warmup)
            print_table(cases, checks)
            print_paired(cases)
            if len(floor) == 2:
                print_floor(*floor)
            if any(case.name.endswith("(row floor)") for case in rows):
                print_row_floor(rows)
            if any(case.sgemm or case.copy or TORCH in case.timings for case in conv):
                print_conv(conv)
            if len(sgemm) >= 2 and sgemm[0].name == SGEMM_PAIR[0]:
                print_sgemm_ratio(*sgemm)
            print_tiles(cases)
            thread_scaling(cases, budget_s, most)
    note = ""
    if busy_before != "unknown" and float(busy_before.split()[0]) >= BUSY_LOAD:
        note = " (the load was high before the run: other work was sharing the cores)"
    print(f"\nload average after: {load_average()}{note}")


if __name__ == "__main__":
    main()
