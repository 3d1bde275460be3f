"""Core ops, fusegrad against numpy and PyTorch, timed alternately in one process.

Run:  .venv/bin/python benchmarks/core_ops.py [--quick]   (about 10 minutes on 2 cores;
      `--only bf16`: the bfloat16 rows and the float32 sgemm beside them, about 5)

Five workloads (an elementwise chain over 2^24 floats, row softmax and row sum
of 4096x4096, the sum of all 2^24 floats, a 1024^3 matmul) plus the
memory-bandwidth floor of the chain: a plain copy of the same 2^24 floats, read
once and written once. Then the bfloat16 rows against PyTorch's bfloat16 (numpy has
none): a 2048^3 matmul beside the same matmul in float32 (the two timed in one
alternation, so their ratio is paired), the chain and the softmax (`--only bf16`
times only those). Every system runs the same inputs, taken from one `fg.randn`
(never zeros), and the answers are checked against numpy's (for bfloat16, numpy's
float64 answer on the same bfloat16 inputs, within BF16_TOLERANCE) before anything
is timed.

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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import fusegrad as fg

try:
    import torch
except ImportError:  # PyTorch is optional: its columns are left empty
    torch = None

PAUSE_AFTER_OTHERS_S = 0.2  # OpenBLAS / OpenMP workers spin about 0.1 s after a call
FUSEGRAD = "fusegrad"
NUMPY = "numpy"
TORCH = "torch"


@dataclass
class Case:
    """One workload: how much work it is, and a callable per system that computes it."""

    name: str
    work: float  # bytes moved (unit GB/s) or floating-point operations (unit GFLOP/s)
    unit: str
    runs: dict[str, Callable[[], object]]
    timings: dict[str, list[float]] = field(default_factory=dict)
    kernel_seconds: list[float] = field(default_factory=list)
    first_call_ms: float = 0.0
    compile_ms: float = 0.0
    # a 16-bit case has no numpy run: its answer is checked against `reference` (numpy,
    # float64, on the same rounded inputs) within `tolerance`, relative to its largest value
    reference: Callable[[], np.ndarray] | None = None
    tolerance: float = 1e-4


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
        torch_runs = [
            lambda: copy_dst_t.copy_(xt),
            lambda: torch.relu(torch.exp(xt * 0.5 + 1.0) * xt - 3.0) / (1 + xt * xt),
            lambda: torch.softmax(at, dim=1),
            lambda: at.sum(1),
            lambda: xt.sum(),
            lambda: bt @ ct,
        ]
        for case, run in zip(cases, torch_runs):
            case.runs[TORCH] = run
    return cases


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
        for case, run in zip(cases, torch_runs):
            case.runs[TORCH] = run
    return cases


def as_numpy(out) -> np.ndarray:
    if isinstance(out, fg.Tensor):
        return np.asarray(out.float().numpy() if out.dtype.is_half else out.numpy())
    if torch is not None and isinstance(out, torch.Tensor):
        return out.float().numpy() if out.dtype == torch.bfloat16 else out.numpy()
    return np.asarray(out)


def check_answers(case: Case) -> str:
    """Run each system once and compare with numpy (or the case's reference); returns the
    largest relative error seen."""
    want = case.reference() if case.reference is not None else as_numpy(case.runs[NUMPY]())
    scale = float(np.abs(want).max()) or 1.0
    worst = 0.0
    for name, run in case.runs.items():
        got = as_numpy(run())
        if got.shape != want.shape:
            raise SystemExit(f"{case.name}: {name} gave shape {got.shape}, numpy {want.shape}")
        err = float(np.abs(got.astype(np.float64) - want).max()) / scale
        worst = max(worst, err)
        if not err < case.tolerance:
            raise SystemExit(f"{case.name}: {name} differs from numpy by {err:.2e} (relative)")
    return f"{worst:.1e}"


# ---------------------------------------------------------------- the run


def first_call(case: Case) -> None:
    """fusegrad's first call, compiling into an empty cache; reported apart from the medians."""
    seconds, out = timed(case.runs[FUSEGRAD])
    records = fg.kernels(out)
    case.first_call_ms = seconds * 1e3
    case.compile_ms = sum(r.compile_seconds for r in records) * 1e3
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
            seconds = [r.seconds for r in fg.kernels(out)]
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
        f"{'op':<24}{'unit':>8}{'fg ms':>9}{'rate':>7}{'kernels':>9}{'np ms':>9}{'rate':>7}"
        f"{'torch ms':>10}{'rate':>7}{'np/fg':>7}{'torch/fg':>9}{'rounds':>7}{'first ms':>10}"
        f"{'compile':>9}{'max err':>9}"
    )
    print(head)
    print("-" * len(head))
    for case in cases:
        ms = {name: median_ms(t) for name, t in case.timings.items()}
        fg_ms, np_ms, t_ms = ms[FUSEGRAD], ms.get(NUMPY), ms.get(TORCH)
        print(
            f"{case.name:<24}{case.unit:>8}{fmt(fg_ms, 9)}{fmt(rate(case, fg_ms), 7, 1)}"
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
        for name, label in ((NUMPY, "np/fg"), (TORCH, "torch/fg")):
            if name not in case.timings:
                continue
            ratio, low, high, wins = paired(case.timings[name], mine)
            interval = f"[{low:4.2f}, {high:4.2f}]"
            parts.append(f"{label} {ratio:5.2f} {interval}, faster in {wins:>2} of {len(mine)}")
        print(f"  {case.name:<24}" + "   ".join(parts))


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


def print_sgemm_ratio(fp32: Case, bf16: Case) -> None:
    """The bfloat16 matmul's rate over the float32 one's, per system, round by round (the
    two were timed in one alternation): issue 30's target is fusegrad's at 1.6 or more."""
    print(f"\n{bf16.name} over {fp32.name}, rate ratio round by round (above 1: bf16 faster):")
    for name in (FUSEGRAD, TORCH):
        if name in fp32.timings and name in bf16.timings:
            ratio, low, high, wins = paired(fp32.timings[name], bf16.timings[name])
            print(
                f"  {name:<9} {ratio:5.2f} [{low:4.2f}, {high:4.2f}], bf16 faster in {wins:>2} "
                f"of {len(bf16.timings[name])}"
            )


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
            f"  {case.name:<24} 1 thread {one:9.2f} ms   {all_threads} threads {many:9.2f} ms"
            f"   speed-up {one / many:5.2f}x   ({len(times[1])} rounds)"
        )


BUSY_LOAD = 1.0  # a 1-minute load average from which other work visibly shares 2 cores


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def source_version() -> str:
    """The git commit of the fusegrad being measured, marked + when the tree has local edits."""
    here = os.path.dirname(os.path.abspath(fg.__file__))
    try:
        commit = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown commit"
    return (commit + ("+" if dirty else "")) if commit else "unknown commit"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument(
        "--only", metavar="TEXT", help="time only the workloads whose name contains TEXT"
    )
    args = ap.parse_args()
    most, budget_s, warmup = (5, 4.0, 1) if args.quick else (31, 20.0, 2)

    if torch is not None:
        torch.set_num_threads(fg.config.threads)
    print(
        f"fusegrad core ops | {platform.machine()} {os.cpu_count()} cores | python "
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
            cases = make_cases(1 << 24, 4096, 1024) + bf16_cases(1 << 24, 4096, 2048)
            if args.only:
                # an sgemm row brings the other: their ratio is the point of them
                sgemm = any(args.only in c.name for c in cases if c.name.startswith("sgemm"))
                cases = [
                    case
                    for case in cases
                    if args.only in case.name or (sgemm and case.name.startswith("sgemm"))
                ]
            checks = {}
            for case in cases:
                first_call(case)
                checks[case.name] = check_answers(case)
            # the chain and its copy floor are timed in one alternation
            floor = [case for case in cases if case.name.startswith(("copy", "chain"))]
            groups = [floor] if len(floor) == 2 else [[case] for case in floor]
            # the float32 and bfloat16 sgemm rows likewise, for their ratio
            sgemm = [case for case in cases if case.name.startswith("sgemm")]
            groups += [sgemm] if sgemm else []
            groups += [[case] for case in cases if case not in floor + sgemm]
            for group in groups:
                measure(group, budget_s * len(group), most, warmup)
            print_table(cases, checks)
            print_paired(cases)
            if len(floor) == 2:
                print_floor(*floor)
            if len(sgemm) == 2:
                print_sgemm_ratio(*sgemm)
            thread_scaling(cases, budget_s, most)
    note = ""
    if busy_before != "unknown" and float(busy_before.split()[0]) >= BUSY_LOAD:
        note = " (the load was high before the run: other work was sharing the cores)"
    print(f"\nload average after: {load_average()}{note}")


if __name__ == "__main__":
    main()
