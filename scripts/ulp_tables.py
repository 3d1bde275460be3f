"""Ulp error tables of fusegrad's exp, log, sin, cos, tanh and sigmoid, written to docs/NUMERICS.md.

    .venv/bin/python scripts/ulp_tables.py            # rewrites docs/NUMERICS.md's tables
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


# the generated part of docs/NUMERICS.md: its last sections, from this heading to the end
# (the prose above them is written by hand and kept as it is)
TABLES_HEADING = "## float32\n"


def with_tables(doc: str, tables: str) -> str:
    """`doc` (docs/NUMERICS.md's text) with everything from TABLES_HEADING on replaced by
    `tables`; the hand-written prose above it kept as it is."""
    prose, found, _ = doc.partition(TABLES_HEADING)
    if not found:
        raise ValueError(f"no {TABLES_HEADING.strip()!r} heading to replace the tables from")
    return prose + tables


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--print", action="store_true")
    args = ap.parse_args()
    text = TABLES_HEADING + "\n" + table("float32") + "\n\n## float64\n\n" + table("float64") + "\n"
    if args.print:
        print(text)
        return
    out = pathlib.Path(__file__).resolve().parent.parent / "docs" / "NUMERICS.md"
    out.write_text(with_tables(out.read_text(), text))
    print(f"wrote the tables of {out}")


if __name__ == "__main__":
    main()
