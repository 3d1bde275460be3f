"""Real models' training steps on the GPU: fusegrad's cuda device beside PyTorch CUDA.

Run:  python benchmarks/gpu_models.py [--model resnet18|gpt|vit|lstm|all] [--rounds 6]
                                      [--images 128] [--autocast] [--compile]
                                      [--torch-conv-tf32 on|off] [--no-prefetch]
      (a GPU, PyCUDA and PyTorch with CUDA)

The models of `benchmarks/models.py` (the CIFAR ResNet-18, the GPT-style decoder, the small
ViT, the LSTM language model), written once against a torch-like namespace and built on
each system with "cuda" as the default device (`fg.set_default_device`,
`torch.set_default_device`); the CIFAR models take `--images` images a batch (128, as the
usual CIFAR recipe). fusegrad's weights are copied into PyTorch's, so both start alike; the
first losses are printed side by side. `--autocast` runs the forward pass and the loss
under bfloat16 autocast on both systems (the optimizer in float32, as torch's recipe).

Systems: fusegrad's plain loop, the same step under `fg.jit`, PyTorch eager and, with
`--compile`, the step under `torch.compile`. Each system's first step is timed alone (its
compiles included: fusegrad's kernels, nvcc's builds of them side by side; torch.compile's
graph), then the systems alternate in blocks of `BLOCK` steps, the order rotating each
round, on four batches already on the GPU. Each step ends with `loss.item()`, which waits
for the GPU. Reported: each system's median ms a step, and PyTorch eager's time over each
fusegrad system's as the median of the rounds' ratios with a 95% bootstrap interval (above
1: fusegrad is faster, as in benchmarks/gpu.py).

Precision: both systems at their defaults. PyTorch's float32 matmuls are true float32
(`torch.backends.cuda.matmul.allow_tf32` False) but its convolutions may take TF32 tensor
cores (`torch.backends.cudnn.allow_tf32` True); fusegrad's convolutions are its own kernels,
float32 whatever `fg.backends.cudnn.allow_tf32` says. `--torch-conv-tf32 off` turns
PyTorch's off too, for a float32 against float32 comparison; the header says which ran.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models  # noqa: E402  (benchmarks/models.py: the models and the bootstrap)

BLOCK = models.BLOCK  # steps a system runs back to back before the next one's turn


def systems(name: str, images: int, autocast: bool, compiled: bool) -> tuple[dict, list]:
    """({system: step(batch index) -> loss}, numpy batches) of model `name` on the GPU
    (PyTorch's on the CPU where it has no GPU and fusegrad runs the CUDA emulator: a check
    that the script runs, not a measurement)."""
    import torch

    import fusegrad as fg

    where = "cuda" if torch.cuda.is_available() else "cpu"

    def make(T, compile_with=None):
        model, batch, loss_of, optimizer, clip = models.build(T, name, images=images)
        model.train()
        kind = "cuda" if T is fg else where
        cast = contextlib.nullcontext
        if autocast:

            def cast():
                return T.autocast(kind, dtype=T.bfloat16)

        step = models.train_step(T, model, optimizer(model.parameters()), loss_of, clip, cast)
        return model, batch, compile_with(step) if compile_with else step

    fg.set_default_device("cuda")
    torch.set_default_device(where)
    out, data = {}, None
    for label, jit in (("fusegrad plain", False), ("fusegrad jit", True)):
        fg.manual_seed(0)
        model, batch, step = make(fg, fg.jit if jit else None)
        if data is None:
            data = [batch(i) for i in range(4)]
            weights = {k: np.array(v.cpu().numpy()) for k, v in model.state_dict().items()}
        on_gpu = [(fg.tensor(x), fg.tensor(y)) for x, y in data]
        out[label] = lambda i, step=step, on_gpu=on_gpu: step(*on_gpu[i]).item()
    torch_systems = [("torch eager", None)]
    if compiled:
        torch_systems.append(("torch.compile", torch.compile))
    for label, how in torch_systems:
        torch.manual_seed(0)
        model, _, step = make(torch, how)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        on_gpu = [(torch.from_numpy(x).to(where), torch.from_numpy(y).to(where)) for x, y in data]
        out[label] = lambda i, step=step, on_gpu=on_gpu: step(*on_gpu[i]).item()
    return out, data


def run(name: str, rounds: int, images: int, autocast: bool, compiled: bool) -> None:
    import fusegrad as fg

    steps, _ = systems(name, images, autocast, compiled)
    first, first_s = {}, {}
    for k, step in steps.items():
        t = time.perf_counter()
        first[k] = step(0)
        first_s[k] = time.perf_counter() - t
    for i in (1, 2):  # warm: the jit records, graphs are captured, caches fill
        for step in steps.values():
            step(i)
    times = models.alternate(steps, rounds, lambda step, i: step(i % 4))
    how = "bf16 autocast" if autocast else "fp32"
    print(f"\n{name} ({how}, images {images} where CIFAR): {rounds} rounds of {BLOCK} steps")
    print("  first losses: " + ", ".join(f"{k} {v:.5f}" for k, v in first.items()))
    print("  first step:   " + ", ".join(f"{k} {v:.2f} s" for k, v in first_s.items()))
    for k, blocks in times.items():
        ms = float(np.median([t for b in blocks for t in b])) * 1e3
        print(f"  {k:<16} {ms:9.2f} ms/step (median)")
    base = [float(np.median(b)) for b in times["torch eager"]]
    for k in [k for k in times if k.startswith("fusegrad")]:
        ratios = [t / float(np.median(b)) for b, t in zip(times[k], base)]
        med, low, high = models.bootstrap(ratios)
        print(f"  torch eager / {k} = {med:.2f} [{low:.2f}, {high:.2f}] (above 1: faster)")
    if "torch.compile" in times:
        tc = [float(np.median(b)) for b in times["torch.compile"]]
        ratios = [t / float(np.median(b)) for b, t in zip(times["fusegrad jit"], tc)]
        med, low, high = models.bootstrap(ratios)
        print(f"  torch.compile / fusegrad jit = {med:.2f} [{low:.2f}, {high:.2f}]")
    from fusegrad.runtime import cuda as fg_cuda

    graphs = bool(getattr(fg_cuda.backend(), "graphs", None))
    print(f"  fusegrad: {fg.cuda.get_device_name()}, CUDA graphs in use: {graphs}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="all", choices=[*models.MODELS, "all"])
    ap.add_argument("--rounds", type=int, default=6, help="rounds of alternating blocks")
    ap.add_argument("--images", type=int, default=128, help="CIFAR images a batch")
    ap.add_argument("--autocast", action="store_true", help="bfloat16 autocast on both")
    ap.add_argument("--compile", action="store_true", help="torch.compile beside (slow)")
    ap.add_argument(
        "--torch-conv-tf32",
        choices=["on", "off"],
        default="on",
        help="torch.backends.cudnn.allow_tf32 (on: PyTorch's default)",
    )
    ap.add_argument(
        "--no-prefetch",
        action="store_true",
        help="fusegrad's fp32 SIMT steps staged before their barrier, not through "
        "registers during the products (pipeline.cuda_simt.PREFETCH off)",
    )
    args = ap.parse_args()
    import torch

    import fusegrad as fg
    from fusegrad.pipeline import cuda_simt

    if args.no_prefetch:
        cuda_simt.PREFETCH = False

    torch.backends.cudnn.allow_tf32 = args.torch_conv_tf32 == "on"
    print(
        f"PyTorch: matmul allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
        f"cudnn allow_tf32={torch.backends.cudnn.allow_tf32}; fusegrad: float32 "
        f"convolutions, matmul allow_tf32={fg.backends.cuda.matmul.allow_tf32}",
        flush=True,
    )

    if not torch.cuda.is_available() and os.environ.get("FUSEGRAD_CUDA") != "emulate":
        raise SystemExit("gpu_models.py: PyTorch sees no CUDA device")
    if not fg.cuda.is_available():
        raise SystemExit(f"gpu_models.py: no cuda device for fusegrad: {fg.cuda.why_unavailable()}")
    for name in models.MODELS if args.model == "all" else (args.model,):
        try:
            run(name, args.rounds, args.images, args.autocast, args.compile)
        except Exception:  # one failing model must not cost the device run the others
            print(f"\n{name} FAILED:\n{traceback.format_exc()}", flush=True)


if __name__ == "__main__":
    main()
