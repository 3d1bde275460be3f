"""Train MiniTorch's MLP on its six 2-D toy datasets (simple, diag, split, xor, circle, spiral).

Run:  python examples/toy_datasets.py --dataset xor        (or all, to run the six in turn)
      python examples/toy_datasets.py --dataset spiral --plot

The model is MiniTorch's: Linear(2, hidden) -> ReLU -> Linear(hidden, hidden)
-> ReLU -> Linear(hidden, 1) -> Sigmoid, trained full batch with binary
cross-entropy on N = 50 points, with plain SGD as MiniTorch does (Adam for
the spiral, which SGD fits only slowly and erratically). Each epoch is one
fused step: forward, backward and update realize together in one cached
schedule (the first epoch compiles; the rest only launch kernels).

Defaults per dataset (override with --hidden/--lr/--epochs/--optimizer):

| dataset | hidden | optimizer | lr   | epochs |
|---------|--------|-----------|------|--------|
| simple  | 10     | sgd       | 0.5  | 1000   |
| diag    | 10     | sgd       | 0.5  | 1000   |
| split   | 10     | sgd       | 0.5  | 1000   |
| xor     | 10     | sgd       | 0.5  | 1000   |
| circle  | 10     | sgd       | 0.5  | 1000   |
| spiral  | 50     | adam      | 0.02 | 1000   |

With these defaults and --seed 0 every dataset ends with at least 48 of 50
points correct. `--plot` writes the loss curve and the decision boundary as
PNG files into --plot-dir (needs matplotlib: `pip install fusegrad[plot]`).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from tqdm import tqdm

import fusegrad as fg
from fusegrad import nn
from fusegrad.datasets import toy as datasets
from fusegrad.progress import progress

DEFAULTS = {
    "simple": dict(hidden=10, optimizer="sgd", lr=0.5, epochs=1000),
    "diag": dict(hidden=10, optimizer="sgd", lr=0.5, epochs=1000),
    "split": dict(hidden=10, optimizer="sgd", lr=0.5, epochs=1000),
    "xor": dict(hidden=10, optimizer="sgd", lr=0.5, epochs=1000),
    "circle": dict(hidden=10, optimizer="sgd", lr=0.5, epochs=1000),
    "spiral": dict(hidden=50, optimizer="adam", lr=0.02, epochs=1000),
}
OPTIMIZERS = {"sgd": fg.optim.SGD, "adam": fg.optim.Adam}


def mlp(hidden: int) -> nn.Module:
    """MiniTorch's Network: three linear layers, ReLU between, a sigmoid at the end."""
    return nn.Sequential(
        nn.Linear(2, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
        nn.Sigmoid(),
    )


def count_correct(model: nn.Module, X: fg.Tensor, y: fg.Tensor) -> int:
    with fg.no_grad():
        predicted = (model(X) > 0.5).float()
        return int((predicted == y).sum().item())


def train(name: str, args) -> dict:
    cfg = {
        k: v if getattr(args, k) is None else getattr(args, k) for k, v in DEFAULTS[name].items()
    }
    fg.manual_seed(args.seed)
    ds = datasets.load(name, args.points, seed=args.seed)
    X, y = fg.from_numpy(ds.X), fg.from_numpy(ds.y[:, None])
    model = mlp(cfg["hidden"])
    optimizer = OPTIMIZERS[cfg["optimizer"]](model.parameters(), lr=cfg["lr"])
    loss_fn = nn.BCELoss()
    losses = []
    t0 = time.perf_counter()
    bar = progress(
        range(1, cfg["epochs"] + 1),
        desc=f"{name:>6}",
        unit="step",
        enabled=not args.no_progress,
        leave=False,
    )
    for epoch in bar:
        optimizer.zero_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        optimizer.step()  # forward + backward + update: one realize
        losses.append(loss.item())  # already computed by the step
        if epoch % args.log_every == 0 or epoch == cfg["epochs"]:
            correct = count_correct(model, X, y)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", correct=f"{correct}/{ds.N}")
            if args.verbose:
                tqdm.write(f"{name}: epoch {epoch} loss {losses[-1]:.4f} correct {correct}/{ds.N}")
    bar.close()
    seconds = time.perf_counter() - t0
    correct = count_correct(model, X, y)
    print(
        f"{name:>6}: epoch {cfg['epochs']} loss {losses[-1]:.4f} correct {correct}/{ds.N} "
        f"(hidden {cfg['hidden']}, {cfg['optimizer']} lr {cfg['lr']}, "
        f"{cfg['epochs'] / seconds:.0f} steps/s)"
    )
    if args.plot:
        plot(name, model, ds, losses, args.plot_dir)
    return dict(name=name, correct=correct, n=ds.N, loss=losses[-1])


def plot(name: str, model: nn.Module, ds, losses: list[float], folder: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(np.arange(1, len(losses) + 1), losses)
    ax.set(xlabel="epoch", ylabel="binary cross-entropy", title=f"{name}: training loss")
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(os.path.join(folder, f"{name}_loss.png"), dpi=120)
    plt.close(fig)

    grid = np.linspace(0.0, 1.0, 101, dtype=np.float32)
    gx, gy = np.meshgrid(grid, grid)
    points = np.stack([gx.ravel(), gy.ravel()], axis=1)
    with fg.no_grad():
        prob = model(fg.from_numpy(points)).numpy().reshape(gx.shape)
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.contourf(gx, gy, prob, levels=np.linspace(0, 1, 11), cmap="RdBu", alpha=0.8)
    ax.contour(gx, gy, prob, levels=[0.5], colors="k", linewidths=1)
    ax.scatter(ds.X[:, 0], ds.X[:, 1], c=ds.y, cmap="RdBu", edgecolors="black", vmin=0, vmax=1)
    ax.set(xlim=(0, 1), ylim=(0, 1), title=f"{name}: decision boundary")
    fig.tight_layout()
    fig.savefig(os.path.join(folder, f"{name}_boundary.png"), dpi=120)
    plt.close(fig)
    print(f"        wrote {folder}/{name}_loss.png and {folder}/{name}_boundary.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="xor", choices=[*DEFAULTS, "all"])
    parser.add_argument("--points", type=int, default=50, help="number of points (MiniTorch: 50)")
    parser.add_argument("--hidden", type=int, default=None, help="hidden width (default: table)")
    parser.add_argument("--optimizer", default=None, choices=list(OPTIMIZERS))
    parser.add_argument("--lr", type=float, default=None, help="learning rate")
    parser.add_argument("--epochs", type=int, default=None, help="full-batch steps")
    parser.add_argument("--seed", type=int, default=0, help="seeds the points and the weights")
    parser.add_argument("--log-every", type=int, default=10, help="epochs between reports")
    parser.add_argument("--verbose", action="store_true", help="print a line every --log-every")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (none is drawn either when stderr is not a terminal)",
    )
    parser.add_argument("--plot", action="store_true", help="save loss and boundary PNGs")
    parser.add_argument("--plot-dir", default="plots", help="where --plot writes")
    args = parser.parse_args()

    names = list(DEFAULTS) if args.dataset == "all" else [args.dataset]
    results = [train(name, args) for name in names]
    if len(results) > 1:
        summary = ", ".join(f"{r['name']} {r['correct']}/{r['n']}" for r in results)
        print(f"correct: {summary}")


if __name__ == "__main__":
    main()
