"""Lazy expressions and the kernels they compile to.

Run:  python examples/expressions.py [--show llvm|asm|cuda|loop]

Nothing is computed while the expressions are written; reading a value
schedules the graph into fused kernels, compiles them with LLVM and runs them
on all cores. For each expression this prints the kernels, why each one is a
separate kernel, the user lines fused into it, and one kernel's code.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fusegrad as fg


def show(title: str, *tensors, code: str = "loop") -> None:
    t0 = time.perf_counter()
    ks = fg.kernels(*tensors)
    ms = (time.perf_counter() - t0) * 1e3
    print(f"\n=== {title}: {len(ks)} kernel(s), {ms:.1f} ms including compilation")
    for k in ks:
        print(f"  {k.name:<36} ops={' '.join(k.ops)}")
        print(f"  {'':<36} lines={', '.join(k.lines)}  cut because: {k.reason}")
    text = {"loop": "loop_ir", "llvm": "llvm_ir_optimized", "asm": "asm", "cuda": "cuda_c"}[code]
    print(f"--- {code} of {ks[-1].name}:")
    body = getattr(ks[-1], text)
    lines = body.splitlines()
    print("\n".join(lines[:40]) + ("\n  ..." if len(lines) > 40 else ""))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--show", choices=["loop", "llvm", "asm", "cuda"], default="loop")
    ap.add_argument(
        "--no-progress", action="store_true", help="accepted as by every example (no bar here)"
    )
    args = ap.parse_args()
    fg.manual_seed(0)

    x = fg.randn(1 << 20).realize()
    y = (((x * 0.5 + 1.0).exp() * x - 3.0).relu()) / (1 + x * x)
    show("an elementwise chain fuses into one kernel", y, code=args.show)

    a = fg.randn(512, 1024).realize()
    show("row softmax: max, sum of exp, normalize", a.softmax(dim=1), code=args.show)

    b, c = fg.randn(256, 128).realize(), fg.randn(128, 64).realize()
    prod = b @ c
    show("matmul: broadcast multiply + sum, one kernel", prod, code=args.show)
    err = np.abs(prod.numpy() - b.numpy() @ c.numpy()).max()
    print(f"max |fusegrad - numpy| = {err:.2e}")

    t = fg.arange(12).reshape(3, 4)
    print("\nviews are index maps, not copies:")
    print(f"  t.T.stride() = {t.T.stride()}, contiguous: {t.T.is_contiguous()}")
    print(f"  t[:, ::2] =\n{t[:, ::2]}")


if __name__ == "__main__":
    main()
