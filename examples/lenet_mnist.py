"""LeNet-5 on real MNIST, compiled by fusegrad into fused LLVM kernels.

Run:  python examples/lenet_mnist.py [--epochs 1] [--arch lenet|minitorch]
                                     [--save w.npz] [--load w.npz] [--plot]
                                     [--device cpu|cuda] [--amp bf16|fp16]
On a GPU (PyCUDA), or on the CPU emulator of the generated CUDA C:
      python examples/lenet_mnist.py --device cuda
      FUSEGRAD_CUDA=emulate python examples/lenet_mnist.py --device cuda --limit 128 \
          --test-limit 100
On 2 processes (data-parallel, --batch images per process):
      python -m fusegrad.distributed.run --nproc 2 examples/lenet_mnist.py --ddp

Each training step (forward, backward, Adam or SGD-with-momentum update) is one
lazy graph; the first step schedules and compiles it, and `fusegrad.jit`
replays its kernels from the fourth step on without rebuilding the graph. The
60,000 training and 10,000 test images ship with the repository
(examples/data/mnist, with their provenance).

--amp bf16 runs the forward pass and the loss under `fg.autocast` (convolutions and linear
layers in bfloat16, parameters, gradients and the update in float32); --amp fp16 uses
float16 with `fg.amp.GradScaler` (its inf check reads the host: those steps run without jit).

--arch minitorch trains MiniTorch's network instead (conv 4@3x3, conv 8@3x3,
average-pool 4, linear 392->64, dropout 0.25, linear 10, log-softmax) and
prints MiniTorch's log lines: `Epoch e loss L valid acc c/16`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import minitorch_ops as mt  # examples/minitorch_ops.py, beside this script
import numpy as np

import fusegrad as fg
from fusegrad import nn
from fusegrad.datasets.mnist import load_mnist
from fusegrad.nn import functional as F
from fusegrad.nn.conv import AvgPool2d, Conv2d, MaxPool2d
from fusegrad.progress import progress

MEAN, STD = 0.1307, 0.3081  # of the MNIST training pixels, as everyone normalizes


class LeNet5(nn.Module):
    """conv 6@5x5 (pad 2), ReLU, max-pool 2; conv 16@5x5, ReLU, max-pool 2; 120, 84, 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = Conv2d(1, 6, 5, padding=2)
        self.conv2 = Conv2d(6, 16, 5)
        self.pool = MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(self.conv1(x).relu())
        x = self.pool(self.conv2(x).relu())
        x = x.flatten(1)
        x = self.fc1(x).relu()
        x = self.fc2(x).relu()
        return self.fc3(x)


class MiniTorchNet(nn.Module):
    """MiniTorch's MNIST network: two left-anchored 3x3 convolutions (MiniTorch's own
    definition), average-pool 4, linear 392 -> 64, dropout 0.25, linear 10, log-softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = Conv2d(1, 4, 3)
        self.conv2 = Conv2d(4, 8, 3)
        self.pool = AvgPool2d(4)
        self.fc1 = nn.Linear(392, 64)
        self.drop = nn.Dropout(0.25)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        for conv in (self.conv1, self.conv2):
            x = (mt.conv2d(x, conv.weight) + conv.bias.reshape(1, -1, 1, 1)).relu()
        x = self.pool(x).flatten(1)
        x = self.drop(self.fc1(x).relu())
        return self.fc2(x).log_softmax(1)


def normalize(images: np.ndarray) -> np.ndarray:
    return ((images.astype(np.float32) / 255.0 - MEAN) / STD)[:, None, :, :]


def evaluate(
    model, images: np.ndarray, labels: np.ndarray, batch: int = 1000, device="cpu", amp=None
):
    """Accuracy over all images, and the predictions (`amp`: an fg.autocast region to run in)."""
    model.eval()
    preds = []
    with fg.no_grad(), amp or contextlib.nullcontext():
        for i in range(0, len(images), batch):
            logits = model(fg.tensor(images[i : i + batch], device=device))
            preds.append(logits.argmax(1).cpu().numpy())
    model.train()
    pred = np.concatenate(preds)
    return float((pred == labels).mean()), pred


def plot(history: dict, images, labels, pred, path_prefix: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib: pip install -e .[plot]")
        return
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot(history["step"], history["loss"])
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("training loss")
    ax[1].plot(range(1, len(history["test_acc"]) + 1), history["test_acc"], marker="o")
    ax[1].set_xlabel("epoch")
    ax[1].set_ylabel("test accuracy")
    fig.tight_layout()
    fig.savefig(path_prefix + "_curves.png")
    wrong = np.nonzero(pred != labels)[0][:36]
    fig, axes = plt.subplots(6, 6, figsize=(8, 8))
    for a in axes.flat:
        a.axis("off")
    for a, i in zip(axes.flat, wrong):
        a.imshow(images[i], cmap="gray")
        a.set_title(f"{labels[i]} as {pred[i]}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path_prefix + "_misclassified.png")
    print(f"wrote {path_prefix}_curves.png and {path_prefix}_misclassified.png")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--arch", choices=["lenet", "minitorch"], default="lenet")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--optim", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--lr", type=float, default=None, help="default 2e-3 (adam), 0.02 (sgd)")
    ap.add_argument("--momentum", type=float, default=0.9, help="for --optim sgd")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", help="write the trained weights to this .npz file")
    ap.add_argument("--load", help="start from weights in this .npz file")
    ap.add_argument(
        "--plot", action="store_true", help="write loss/accuracy curves and misclassified digits"
    )
    ap.add_argument("--data", help="folder with the four MNIST .gz files (default: shipped copy)")
    ap.add_argument("--limit", type=int, default=None, help="use only this many training images")
    ap.add_argument("--test-limit", type=int, default=None, help="test on only this many images")
    ap.add_argument(
        "--amp",
        choices=["bf16", "fp16"],
        default=None,
        help="mixed precision: the forward pass under fg.autocast (fp16: with a GradScaler)",
    )
    ap.add_argument("--device", default="cpu", help="cpu or cuda (a GPU, or FUSEGRAD_CUDA=emulate)")
    ap.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (none is drawn either when stderr is not a terminal)",
    )
    ap.add_argument(
        "--stages",
        metavar="DIR",
        help="write the IR of one training step after each compiler stage into DIR, and the "
        "page DIR/index.html (fg.debug.stages, python -m fusegrad.debug_view), then stop",
    )
    ap.add_argument(
        "--ddp",
        action="store_true",
        help="data-parallel over MPI ranks (run it under the launcher)",
    )
    args = ap.parse_args()
    rank, world = 0, 1
    if args.ddp:  # each rank trains on its shard of every epoch; gradients averaged
        import fusegrad.distributed as dist

        dist.init_process_group()
        rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)

    fg.manual_seed(args.seed)
    train_x, train_y, test_x, test_y = load_mnist(args.data)
    if args.limit:
        train_x, train_y = train_x[: args.limit], train_y[: args.limit]
    if args.test_limit:
        test_x, test_y = test_x[: args.test_limit], test_y[: args.test_limit]
    xs, xt = normalize(train_x), normalize(test_x)
    minitorch = args.arch == "minitorch"
    model = MiniTorchNet() if minitorch else LeNet5()
    if args.load:
        model.load_state_dict(nn.load(args.load))
    device = args.device
    model.to(device)  # before the optimizer is built, as in PyTorch
    net = model  # the module itself: evaluation and saving
    if args.ddp:
        model = nn.parallel.DistributedDataParallel(net)  # rank 0's weights everywhere
        sampler = fg.data.DistributedSampler(range(len(xs)), seed=args.seed)
    lr = args.lr if args.lr is not None else (2e-3 if args.optim == "adam" else 0.02)
    if args.optim == "adam":
        opt = fg.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = fg.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum)
    rng = np.random.default_rng(args.seed)
    steps_per_epoch = (len(sampler) if args.ddp else len(xs)) // args.batch
    history = {"step": [], "loss": [], "test_acc": []}
    say(
        f"{args.arch}: {sum(p.numel() for p in model.parameters())} parameters, "
        f"{len(xs)} training images, batch {args.batch}, {args.optim} lr {lr}"
        + (f", {world} ranks" if args.ddp else "")
        + (f", autocast {args.amp}" if args.amp else "")
    )
    loss_fn = F.nll_loss if minitorch else F.cross_entropy
    amp_dtype = {"bf16": fg.bfloat16, "fp16": fg.float16}.get(args.amp)
    amp = fg.autocast(fg.device(device).type, amp_dtype, enabled=amp_dtype is not None)
    scaler = fg.amp.GradScaler(fg.device(device).type, enabled=args.amp == "fp16")

    def train_step(x, y):
        with amp:  # with --amp: convolutions and linear layers in 16 bits, the loss in float32
            out = model(x)
            loss = loss_fn(out, y)
        pred = out.argmax(1)
        opt.zero_grad()
        scaler.scale(loss).backward()  # without fp16: loss.backward(), opt.step(...)
        scaler.step(opt, with_outputs=[pred])  # forward, backward, update, predictions: one step
        scaler.update()
        return loss, pred

    # DDP averages gradients on the host mid-step, and so does GradScaler's inf check: neither
    # composes with jit
    if not args.ddp and args.amp != "fp16":
        train_step = fg.jit(train_step)  # from the 4th call on, replays kernels without Python

    if args.stages:  # one step, pass by pass
        idx = rng.permutation(len(xs))[: args.batch]
        x = fg.tensor(xs[idx], device=device)
        y = fg.tensor(train_y[idx].astype(np.int64), device=device)
        st = fg.debug.stages(train_step, x, y, dump_dir=args.stages)
        with open(os.path.join(args.stages, "index.html"), "w") as f:
            f.write(st.html())
        say(f"{len(st)} stages, {len(st.kernels)} kernels: {args.stages}/index.html")
        return

    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(xs))
        if args.ddp:
            sampler.set_epoch(epoch)
            order = np.fromiter(sampler, dtype=np.int64)
        bar = range(steps_per_epoch)
        if rank == 0:
            bar = progress(bar, steps_per_epoch, f"epoch {epoch}", enabled=not args.no_progress)
        t0, seen, correct, recent = time.perf_counter(), 0, 0, []
        for step in bar:
            idx = order[step * args.batch : (step + 1) * args.batch]
            x = fg.tensor(xs[idx], device=device)
            y = fg.tensor(train_y[idx].astype(np.int64), device=device)
            loss, pred = train_step(x, y)
            value = loss.item()
            recent.append(value)
            history["step"].append((epoch - 1) * steps_per_epoch + step)
            history["loss"].append(value)
            correct += int((pred.cpu().numpy() == train_y[idx]).sum())
            seen += len(idx)
            if step % 50 == 0 or step == steps_per_epoch - 1:
                rate = (step + 1) / (time.perf_counter() - t0)
                if hasattr(bar, "set_postfix"):
                    bar.set_postfix(
                        loss=f"{np.mean(recent[-50:]):.3f}",
                        acc=f"{correct / seen:.3f}",
                        steps_s=f"{rate:.0f}",
                    )
            if minitorch and step % 100 == 0:
                vi = rng.choice(len(xt), 16, replace=False)
                acc, _ = evaluate(net, xt[vi], test_y[vi], batch=16, device=device, amp=amp)
                mean = np.mean(recent[-100:])
                say(f"Epoch {epoch} loss {mean:.4f} valid acc {round(acc * 16)}/16")
        acc, pred = evaluate(net, xt, test_y, device=device, amp=amp)
        history["test_acc"].append(acc)
        elapsed = time.perf_counter() - start
        say(
            f"epoch {epoch}: train loss {np.mean(recent):.4f}, test accuracy {acc * 100:.2f}% "
            f"({int(acc * len(test_y))}/{len(test_y)}), {elapsed:.1f} s so far"
        )
    if args.save and rank == 0:
        nn.save(net.state_dict(), args.save)
        print(f"saved weights to {args.save}")
    if args.plot and rank == 0:
        plot(history, test_x, test_y, pred, os.path.splitext(args.save or "lenet")[0])


if __name__ == "__main__":
    main()
