"""Fit y = sin(x)^2 with a tiny MLP, one sample per step: norch's introductory example.

Run:  python examples/sin_regression.py [--epochs 10] [--lr 0.001] [--plot]

As in norch's article: 50 samples x = 0, 0.4, ..., 19.6, targets sin(x)^2,
the model Linear(1, 10) -> Sigmoid -> Linear(10, 1), MSELoss, SGD(lr=0.001),
one optimizer step per sample, 10 epochs, and after each epoch
the epoch's mean loss, `Epoch [e/10], Loss: ...` (the last sample's loss is
printed beside it). Weights and biases start from U(0, 1) as norch's
Parameter draws them (`--init torch` uses PyTorch's initialisation instead,
which starts near the plateau). The loss falls steeply for about three
epochs, from ~8 to ~0.15, then plateaus at ~0.13 as norch's does (1.70 -> 0.13):
a 10-unit sigmoid layer fitted by plain SGD at this rate learns the mean of
sin(x)^2 (about 0.5), not its oscillation.

Every step realizes forward, backward and update in one schedule; the first
step compiles it and the other 499 reuse it (the line after training says so).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from tqdm import tqdm

import fusegrad as fg
from fusegrad import nn
from fusegrad.runtime import compiler
from fusegrad.runtime.engine import stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=0, help="seeds the initial weights")
    parser.add_argument(
        "--init",
        choices=["norch", "torch"],
        default="norch",
        help="norch: every weight and bias from U(0, 1), as norch's Parameter; "
        "torch: PyTorch's default Linear initialisation",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--plot", action="store_true", help="save the loss curve and the fit")
    parser.add_argument("--plot-dir", default="plots", help="where --plot writes")
    args = parser.parse_args()

    fg.manual_seed(args.seed)
    x_values = np.arange(50, dtype=np.float32) * np.float32(0.4)  # 0, 0.4, ..., 19.6
    y_true = np.sin(x_values) ** 2

    model = nn.Sequential(nn.Linear(1, 10), nn.Sigmoid(), nn.Linear(10, 1))
    if args.init == "norch":
        for p in model.parameters():
            nn.init.uniform_(p, 0.0, 1.0)
    criterion = nn.MSELoss()
    optimizer = fg.optim.SGD(model.parameters(), lr=args.lr)
    print(model)

    steps = args.epochs * len(x_values)
    bar = tqdm(total=steps, unit="step", disable=args.no_progress, leave=False)
    losses, epoch_means = [], []
    before = dict(stats), dict(compiler.stats)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        for x, target in zip(x_values, y_true):
            inputs = fg.tensor([[x]])
            targets = fg.tensor([[target]])
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # forward + backward + update: one realize
            losses.append(loss.item())  # already computed by the step
            bar.update()
            if len(losses) % 25 == 0:
                bar.set_postfix(loss=f"{np.mean(losses[-25:]):.4f}")
        epoch_means.append(float(np.mean(losses[-len(x_values) :])))
        tqdm.write(
            f"Epoch [{epoch + 1}/{args.epochs}], Loss: {epoch_means[-1]:.4f}   "
            f"(last sample: {losses[-1]:.4f})"
        )
    bar.close()
    seconds = time.perf_counter() - t0
    scheduled = stats["scheduled"] - before[0]["scheduled"]
    compiled = compiler.stats["compiled"] - before[1]["compiled"]
    from_disk = compiler.stats["disk_hits"] - before[1]["disk_hits"]
    print(
        f"{steps} steps in {seconds:.2f} s ({steps / seconds:.0f} steps/s); schedules built: "
        f"{scheduled}, kernels compiled: {compiled} (+{from_disk} from the disk cache)"
    )
    if args.plot:
        plot(model, x_values, y_true, losses, epoch_means, args.plot_dir)


def plot(model, x_values, y_true, losses, epoch_means, folder: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    per_epoch = len(losses) // len(epoch_means)
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ax.plot(np.arange(1, len(losses) + 1) / per_epoch, losses, lw=0.6, alpha=0.6, label="step")
    ax.plot(np.arange(1, len(epoch_means) + 1), epoch_means, "o-", label="epoch mean")
    ax.set(xlabel="epoch", ylabel="MSE", title="sin(x)^2 regression: loss", yscale="log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "sin_regression_loss.png"), dpi=120)
    plt.close(fig)

    grid = np.linspace(0, 20, 400, dtype=np.float32)[:, None]
    with fg.no_grad():
        fit = model(fg.from_numpy(grid)).numpy()
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ax.plot(x_values, y_true, "o", ms=3, label="sin(x)^2")
    ax.plot(grid[:, 0], fit[:, 0], label="model")
    ax.set(xlabel="x", ylabel="y", title="sin(x)^2 regression: fit")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "sin_regression_fit.png"), dpi=120)
    plt.close(fig)
    print(f"wrote {folder}/sin_regression_loss.png and {folder}/sin_regression_fit.png")


if __name__ == "__main__":
    main()
