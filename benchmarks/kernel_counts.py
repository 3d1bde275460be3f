"""Kernels launched and bytes moved per step: layer norm, softmax, cross-entropy, batch
norm (forward + backward alone), and the LeNet, MLP and char transformer training steps.

Run:  .venv/bin/python benchmarks/kernel_counts.py [--only NAME] [--kernels]

Every kernel a step launches is counted (the engine's observers see each plan's kernel
records; a step that realizes several times counts every run), with the bytes each
kernel reads and writes as its record reports them. The step is run twice first (the
first compiles, the second is what a training loop repeats), then counted once. No
timing: the figures are exact and the same on a quiet and a loaded machine. `--kernels`
lists each kernel with its reason, to see which cuts remain.

Where PyTorch is installed, the forward + backward workloads also print how many
kernels Inductor generates (torch.compile, a fresh compile per workload; its kernel
counter `generated_kernel_count`): `-` without it.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fusegrad as fg  # noqa: E402
from fusegrad.nn import functional as F  # noqa: E402
from fusegrad.runtime.engine import engine  # noqa: E402


def count(step, show: bool = False) -> tuple[int, int]:
    """(kernels, bytes) one call of `step` launches, after two calls to warm up."""
    step()
    step()
    records: list = []

    def observe(plan, recs) -> None:
        records.extend(recs)

    engine.observers.append(observe)
    try:
        step()
    finally:
        engine.observers.remove(observe)
    if show:
        for r in records:
            print(f"    {r.name:<40} {r.shape!s:<16} {r.bytes / 1e3:9.1f} kB  {r.reason}")
    return len(records), sum(r.bytes for r in records)


def norm_step(kind: str):
    """Forward + backward of one op on fresh leaves (a new batch each call, as a training
    loop has: a graph computed before would be found in memory); realizes the gradients
    (one plan)."""
    rng = np.random.default_rng(0)
    shape = {"batch norm": (64, 128), "cross-entropy": (32, 10)}.get(kind, (32, 512))
    arrays = [rng.standard_normal(s).astype(np.float32) for s in (shape, shape[1:], shape[1:])]
    r_array = rng.standard_normal(shape).astype(np.float32)
    target = rng.integers(0, shape[1], shape[0])

    def step():
        x, w, b = (fg.tensor(a, requires_grad=True) for a in arrays)
        r = fg.tensor(r_array)
        if kind == "layer norm affine":
            loss = (F.layer_norm(x, (shape[1],), w, b) * r).sum()
            wanted = (x, w, b)
        elif kind == "layer norm":
            loss = (F.layer_norm(x, (shape[1],)) * r).sum()
            wanted = (x,)
        elif kind == "softmax":
            loss = (F.softmax(x, 1) * r).sum()
            wanted = (x,)
        elif kind == "batch norm":
            loss = (F.batch_norm(x, None, None, w, b, training=True) * r).sum()
            wanted = (x, w, b)
        else:
            loss = F.cross_entropy(x, fg.tensor(target))
            wanted = (x,)
        loss.backward()
        fg.realize(loss, *[t.grad for t in wanted])

    return step


def model_step(name: str):
    import lenet_step

    data = lenet_step.batches(name, 1)
    _, step = lenet_step.make_fusegrad_step(name)
    return lambda: step(*data[0])


def char_transformer_step():
    import char_transformer_step as bench

    ct = bench.load_example()
    data = ct.CharData(ct.load_text())
    x, y = data.batch(np.random.default_rng(0), 32, 64)
    fg.manual_seed(0)
    model = ct.CharTransformer(data.vocab_size, 64, 64, 4, 2)
    opt = ct.make_optimizer(model, 3e-3)
    xs, ys = fg.tensor(x), fg.tensor(y)
    return lambda: ct.train_step(model, opt, xs, ys).item()


def inductor_kernels(kind: str) -> int | None:
    """Kernels Inductor generates for the same forward + backward, or None without torch."""
    try:
        import torch
        import torch._dynamo
        from torch._inductor import metrics
    except ImportError:
        return None
    tF = torch.nn.functional
    shape = {"batch norm": (64, 128), "cross-entropy": (32, 10)}.get(kind, (32, 512))
    x = torch.randn(shape, requires_grad=True)
    w = torch.randn(shape[1], requires_grad=True)
    b = torch.randn(shape[1], requires_grad=True)
    r = torch.randn(shape)
    target = torch.randint(0, shape[1], (shape[0],))

    def fn(x, w, b):
        if kind == "layer norm affine":
            loss = (tF.layer_norm(x, (shape[1],), w, b) * r).sum()
        elif kind == "layer norm":
            loss = (tF.layer_norm(x, (shape[1],)) * r).sum()
        elif kind == "softmax":
            loss = (tF.softmax(x, 1) * r).sum()
        elif kind == "batch norm":
            loss = (tF.batch_norm(x, None, None, w, b, training=True) * r).sum()
        else:
            loss = tF.cross_entropy(x, target)
        return torch.autograd.grad(loss, [x, w, b], allow_unused=True)

    torch._dynamo.reset()
    metrics.reset()
    torch.compile(fn)(x, w, b)
    return metrics.generated_kernel_count


OPS = ["layer norm affine", "layer norm", "softmax", "cross-entropy", "batch norm"]
MODELS = {
    "lenet": lambda: model_step("lenet"),
    "mlp": lambda: model_step("mlp"),
    "char transformer": char_transformer_step,
}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", default="", help="workloads whose name contains this")
    ap.add_argument("--kernels", action="store_true", help="list each kernel and its reason")
    ap.add_argument("--inductor", action="store_true", help="Inductor's counts (needs torch)")
    args = ap.parse_args()
    print(f"fusegrad kernels per step, threads {fg.config.threads}")
    print(f"{'workload':<40} {'kernels':>8} {'MB moved':>10} {'Inductor':>9}")
    for kind in OPS:
        if args.only in kind:
            kernels, moved = count(norm_step(kind), args.kernels)
            ind = inductor_kernels(kind) if args.inductor else None
            label = f"{kind} {'64x128' if kind == 'batch norm' else '32x512'}, fwd + bwd"
            if kind == "cross-entropy":
                label = "cross-entropy 32x10, fwd + bwd"
            print(f"{label:<40} {kernels:>8} {moved / 1e6:>10.3f} {ind if ind else '-':>9}")
    for name, make in MODELS.items():
        if args.only in name:
            kernels, moved = count(make(), args.kernels)
            print(f"{name + ' training step':<40} {kernels:>8} {moved / 1e6:>10.3f} {'-':>9}")


if __name__ == "__main__":
    main()
