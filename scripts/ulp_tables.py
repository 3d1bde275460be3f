"""Ulp error tables of fusegrad's exp, log, sin, cos, tanh and sigmoid, written to docs/NUMERICS.md.

    .venv/bin/python scripts/ulp_tables.py            # writes docs/NUMERICS.md
    .venv/bin/python scripts/ulp_tables.py --print    # prints the tables only

The oracle is numpy in float64 (float32 results) or mpmath-free float64 with the
float64 function's own rounding (float64 results: numpy's libm, itself within about
1 ulp, so float64 figures near 1 ulp are limited by the oracle). Points are evenly
spaced over each range (1,000,001 of them), plus the range's ends.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np

import fusegrad as fg

N = 1_000_001


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


FUNCTIONS = {
    "exp": (np.exp, [(-87.0, 88.0), (-700.0, 700.0)]),
    "log": (np.log, [(1e-30, 1e30), (1e-6, 10.0)]),
    "sin": (np.sin, [(-100.0, 100.0), (-1e4, 1e4), (-1e6, 1e6)]),
    "cos": (np.cos, [(-100.0, 100.0), (-1e4, 1e4), (-1e6, 1e6)]),
    "tanh": (np.tanh, [(-10.0, 10.0), (-0.5, 0.5)]),
    "sigmoid": (_sigmoid, [(-30.0, 30.0), (-1.0, 1.0)]),
}


def ulp_errors(name: str, lo: float, hi: float, dtype: str) -> np.ndarray:
    ref, _ = FUNCTIONS[name]
    npdt = np.dtype(dtype)
    if name == "log" and lo > 0 and hi / lo > 1e3:
        x = np.geomspace(lo, hi, N)
    else:
        x = np.linspace(lo, hi, N)
    x = x.astype(npdt)
    if name == "exp" and dtype == "float32":
        x = x[np.abs(x) <= 88]
    got = getattr(fg.tensor(x), name)().numpy().astype(np.float64)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    spacing = np.spacing(np.abs(want).astype(npdt)).astype(np.float64)
    spacing = np.maximum(spacing, np.finfo(npdt).smallest_subnormal)
    return np.abs(got - want) / spacing


def table(dtype: str) -> str:
    rows = [
        f"| function | range | max ulp | 99.9% ulp | points > 2 ulp | ({dtype}) |",
        "|---|---|---|---|---|---|",
    ]
    for name, (_, ranges) in FUNCTIONS.items():
        for lo, hi in ranges:
            if dtype == "float32" and name == "exp" and hi > 88:
                continue
            e = ulp_errors(name, lo, hi, dtype)
            rows.append(
                f"| {name} | [{lo:g}, {hi:g}] | {e.max():.2f} | {np.percentile(e, 99.9):.2f} | "
                f"{(e > 2).mean() * 100:.3f}% | |"
            )
    return "\n".join(rows)


HEADER = """# Numerics

fusegrad's transcendentals are polynomials in LLVM IR (`codegen/llvm_math.py`), so the
loop vectorizer can widen them; this page is how accurate they are. Regenerate it with

    .venv/bin/python scripts/ulp_tables.py

Errors are in ulps of the result's dtype against numpy in float64 (for float64 results
the oracle is itself about 1 ulp off, which bounds what the float64 table can show).
sin and cos reduce the argument by pi/2 in double with a three-part (Cody-Waite) pi/2,
so float32 results are correctly rounded or 1 ulp off to |x| ~ 1e9; cos is its own
function of the same reduction (one quadrant on), not sin(x + pi/2). tanh and sigmoid
are compositions of exp in the frontend (`frontend/tensor.py`).

## Sums

Float sums (`sum`, `mean`, `var`/`std`, softmax denominators, norms: every `SUM` that
reads its operand contiguously, or in columns through a small register tile) are
cascaded as PyTorch's are: vectors of 64 (or 32) accumulators, each receiving at most
16 values before its total is added, once and in order, into the level above
(`gen_cascade` in `codegen/lower.py`). The error grows with the tree's depth (log16 n),
not with n: sums of 2^24 uniform float32 values are within 1 ulp of the float64 sum (a
single loop: 1-18 ulp), and `fg.tensor(np.full(20_000_000, .1, np.float32)).mean()` is
0.099999994 (PyTorch 0.09999994; a single loop 0.1006). A sum of at least 2^21 elements
into fewer than 16 outputs is cut into up to 512 parts of contiguous slices, summed by
every thread, then one small sum (`_sum_in_parts` in `frontend/reduce.py`); the parts
depend on the shape alone, so the result is the same for any thread count. A sum over
broadcast elements is an exact count times the smaller sum (`ones(1).expand(3e9).sum()`
is 3e9). Matmuls (tiles of 128 accumulators) still add each output's K products in one
loop.

## Where fusegrad differs from PyTorch on purpose

- An in-place update of a tensor that is not a leaf keeps graphs built before it right
  (they hold the old value), so `backward()` through them does not raise as PyTorch's
  version check would; updating a leaf that an older graph uses does raise.
- In-place operators rebind the tensor itself; a view (`v = x[0]; v += 1`) does not write
  through to the tensor it was taken from.
- Class indices and one_hot inputs are checked when their values are already known
  (data passed in); a target computed lazily in the same graph is not read early.
- Gradient of amax over a row with a NaN: shared among the NaNs (as torch's full max());
  torch's amax gives NaN there.

## float16 and bfloat16

Both are stored in 2 bytes and computed in float32 (PyTorch's "opmath" rule): a CPU
kernel widens each 16-bit value where it loads it (`vcvtph2ps` with F16C for float16;
bfloat16 is the top half of a float32, a shift) and rounds to nearest even where it
stores (`vcvtps2ph`; bfloat16 in integer instructions: add 0x7fff plus the kept part's
lowest bit, a NaN kept quiet with its sign). Sum, mean, max, matmul and convolution
accumulators are float32, so a 16-bit sum of 4096 ones is 4096 (a float16 accumulator
stops at 2048). Python scalars in an op (`h * 0.1`) enter as float32, not rounded first;
a filled tensor's value (`full`, `fill_`, `x[i] = v`) is rounded where it is made. `rand`
in 16 bits takes 11 (float16) or 8 (bfloat16) random bits, as torch: every value exact and
below 1; `randn` draws float32 uniforms and rounds its result.

Where fusion differs from PyTorch: PyTorch rounds after every op; fusegrad rounds once
per fused kernel output, so the values between ops of one kernel keep float32 precision.
`(x + 2**-11) - 1` with `x = 1` in float16 is `2**-11` here (one kernel) and 0 in PyTorch;
results are within an ulp of the 16-bit type of PyTorch's, and usually closer to the exact
value. An explicit cast (`.half()`, `.to(fg.bfloat16)`) always rounds, inside a kernel too,
and so does every kernel boundary (a realized tensor, a reduction's output read by the next
kernel), so the schedule decides where the other roundings fall. The reference evaluator
(`ir/reference.py`) rounds at casts and at its roots, as one fused kernel does.
Conversions: to float16 a value at or above 65520 is inf; float16 subnormals and
float32 subnormals into bfloat16 are kept (no flush to zero); float64 is converted through
float32, as PyTorch's CPU does (a double rounding in rare ties). `tests/frontend/test_half.py`
pins the bits at these points against PyTorch's. The cuda backend stores `__half` and
`__nv_bfloat16` and computes the same way (float registers, float32 partial sums, no
16-byte vector accesses or tensor cores for them yet); the emulator gives the CPU's bits.

"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--print", action="store_true")
    args = ap.parse_args()
    text = (
        HEADER
        + "## float32\n\n"
        + table("float32")
        + "\n\n## float64\n\n"
        + table("float64")
        + "\n"
    )
    if args.print:
        print(text)
        return
    out = pathlib.Path(__file__).resolve().parent.parent / "docs" / "NUMERICS.md"
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
