"""Where a real model's training step spends its time, kernel by kernel (`fg.profile`).

Run:  python benchmarks/model_profile.py --model lstm [--warmup 12] [--steps 3] [--top 25]

One of benchmarks/models.py's models (resnet18, gpt, vit, lstm) is trained for `--warmup`
steps (compiled, its plans tuned at their tenth run), then `--steps` more inside
`fusegrad.profile()`. Printed: the kernel time of a step, the kernels a step runs many
times (at least `MANY` calls a step: a recurrence's time steps) summed together and one
by one, the `--top` other kernels by their time a step with their user ops, then the
profile's own table of phases. The profile times each kernel inside the plan's native
program, as the training loop runs it (frontend/profiler.py), so the figures are the
loop's; the step itself is somewhat slower inside the profile (each kernel's record is
copied with its time).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MANY = 20  # calls a step from which a kernel counts as a recurrence's


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="lstm", choices=["resnet18", "gpt", "vit", "lstm"])
    ap.add_argument("--warmup", type=int, default=12, help="steps before the profile")
    ap.add_argument("--steps", type=int, default=3, help="steps profiled")
    ap.add_argument("--top", type=int, default=25, help="other kernels listed")
    args = ap.parse_args()

    import models

    import fusegrad as fg

    _, batch, step = models.fusegrad_step(args.model)
    x, y = batch(0)
    for _ in range(args.warmup):
        step(x, y)
    with fg.profile() as prof:
        for _ in range(args.steps):
            step(x, y)
    per_step = args.steps
    kernels = sorted(prof.kernels, key=lambda k: -k.seconds)
    total = sum(k.seconds for k in kernels) / per_step
    print(f"{args.model}: {total * 1e3:.2f} ms of kernels a step, {args.steps} steps profiled")
    many = [k for k in kernels if k.calls >= MANY * per_step]
    if many:
        calls = sum(k.calls for k in many) / per_step
        ms = sum(k.seconds for k in many) / per_step * 1e3
        print(
            f"kernels run {MANY} times a step or more: {len(many)}, {calls:.0f} calls, {ms:.2f} ms"
        )
        for k in many:
            ms = k.seconds / per_step * 1e3
            print(
                f"  {k.name:44s} {k.calls // per_step:5d} a step {ms:7.3f} ms"
                f" {k.mean_seconds * 1e6:7.1f} us each"
            )
    print("the others, by their time a step:")
    for k in [k for k in kernels if k.calls < MANY * per_step][: args.top]:
        ops = ", ".join(k.user_ops)
        print(
            f"  {k.name:44s} {k.calls // per_step:3d} a step {k.seconds / per_step * 1e3:7.3f} ms"
            f" {k.gflops:7.1f} GFLOP/s  {ops[:80]}"
        )
    print("\n".join(prof.table().splitlines()[-9:]))


if __name__ == "__main__":
    main()
