"""Every kernel a fixed set of workloads compiles, name and source, sorted, in one file.

The check that a change of where layout decisions are made (pipeline/layout.py) leaves
the kernels alone: run it before and after, and diff the two files.

    python scripts/kernel_sources.py out.txt              # the CPU's LLVM IR
    FUSEGRAD_CUDA=emulate python scripts/kernel_sources.py out.txt --device cuda

The workloads: float32 matmuls (512x1024 @ 1024x1024; `x @ w.T` with 512 rows and its
gradients; a right operand beyond PANEL_CACHE_BYTES), a bfloat16 matmul of AMX shape with
its gradients, one LeNet-5 training step, a strided conv2d and a strided conv_transpose2d
with their gradients. Tiles are not timed (FUSEGRAD_AUTOTUNE=0) and nothing comes from
the disk cache, so two runs on one machine compile the same kernels.
"""

from __future__ import annotations

import os
import sys

os.environ["FUSEGRAD_AUTOTUNE"] = "0"
os.environ["FUSEGRAD_CACHE"] = "off"
os.environ["FUSEGRAD_DISK_PLANS"] = "0"

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import fusegrad as fg  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples"))


def leaf(rng, shape, device, dtype=np.float32, grad=False):
    t = fg.tensor(rng.standard_normal(shape).astype(dtype), device=device)
    return t.requires_grad_() if grad else t


def workloads(device: str):
    """(name, function returning the records of the kernels it ran)."""
    rng = np.random.default_rng(0)

    def matmul():
        return fg.kernels(leaf(rng, (512, 1024), device) @ leaf(rng, (1024, 1024), device))

    def linear_t():
        x, w = leaf(rng, (512, 256), device, grad=True), leaf(rng, (384, 256), device, grad=True)
        (x @ w.T).relu().sum().backward()
        return fg.kernels(x.grad, w.grad)

    def big_b():
        x, w = leaf(rng, (64, 1024), device, grad=True), leaf(rng, (1024, 1024), device, grad=True)
        y = x @ w
        (y * y).sum().backward()
        return fg.kernels(y, x.grad, w.grad)

    def bf16():
        bf = ml_dtypes.bfloat16
        a, b = leaf(rng, (64, 128), device, bf, True), leaf(rng, (128, 96), device, bf, True)
        y = a @ b
        (y.float() * y.float()).sum().backward()
        return fg.kernels(y, a.grad, b.grad)

    def lenet():
        from lenet_mnist import LeNet5

        fg.manual_seed(0)
        model = LeNet5().to(device)
        opt = fg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = leaf(rng, (64, 1, 28, 28), device)
        labels = fg.tensor(rng.integers(0, 10, 64), device=device)
        loss = fg.nn.functional.cross_entropy(model(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return fg.kernels(loss, *model.parameters())

    def strided(op, x_shape, w_shape):
        """op(x, w) with stride 2 and padding 1, forward and backward."""
        x, w = leaf(rng, x_shape, device, grad=True), leaf(rng, w_shape, device, grad=True)
        y = op(x, w, stride=2, padding=1)
        (y * y).sum().backward()
        return fg.kernels(y, x.grad, w.grad)

    def conv():
        return strided(fg.nn.functional.conv2d, (4, 8, 17, 17), (16, 8, 3, 3))

    def conv_t():
        return strided(fg.nn.functional.conv_transpose2d, (4, 8, 9, 9), (8, 6, 3, 3))

    return [(f.__name__, f) for f in (matmul, linear_t, big_b, bf16, lenet, conv, conv_t)]


def main(argv: list[str]) -> None:
    out, device = argv[0], "cpu"
    if "--device" in argv:
        device = argv[argv.index("--device") + 1]
    lines = []
    for name, run in workloads(device):
        records = run()
        sources = sorted(f"{r.name}\n{r.cuda_c if device != 'cpu' else r.llvm_ir}" for r in records)
        lines.append(f"==== {name}: {len(records)} kernel(s)")
        lines.extend(f"---- kernel\n{s}" for s in sources)
        print(f"{name}: {len(records)} kernel(s)", file=sys.stderr)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
