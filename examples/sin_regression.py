"""Fit y = sin(x)^2 with a tiny MLP, one sample per step: norch's introductory example, as the
article ran it.

Run:  python examples/sin_regression.py [--epochs 10] [--lr 0.001] [--seed 0]
                                        [--init norch|torch] [--plot]

As in norch's article: 51 samples x = 0, 0.4, ..., 20.0 with targets sin(x)^2;
the model fc1 = Linear(1, 10) -> Sigmoid -> fc2 = Linear(10, 1); MSELoss;
SGD(lr=0.001), one optimizer step per sample, 10 epochs; after each epoch the
loss of the epoch's *last* sample (x = 20.0), printed `Epoch [e/10], Loss: L`.
Every weight and bias starts from U(-1, 1), as norch's `Parameter` draws it
(`random.uniform(-1, 1)`), drawn from one stream in construction order:
fc1.weight, fc1.bias, fc2.weight, fc2.bias (`--seed` seeds that stream;
`--init torch` uses PyTorch's Linear initialisation instead).

The article logged 1.7035, 0.7193, 0.3068, 0.1742, 0.1342, 0.1232, 0.1220,
0.1241, 0.1270, 0.1297: a steep drop over three epochs, then a plateau. Its
random draws cannot be reproduced, so expect that shape, not those digits (the
README sets fusegrad's curves for a few seeds beside it). A 10-unit sigmoid
layer fitted by plain SGD at this rate learns roughly the mean of sin(x)^2,
not its oscillation, so the plateau is where the article's run ends too.

Every step realizes forward, backward and update in one schedule; the first
step compiles it and the others reuse it (the line after training says so).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from tqdm import tqdm

import fusegrad as fg
from fusegrad import nn
from fusegrad.pipeline import compiler
from fusegrad.progress import progress
from fusegrad.runtime.engine import stats

# the loss the article printed after each of its 10 epochs
ARTICLE_LOSSES = (1.7035, 0.7193, 0.3068, 0.1742, 0.1342, 0.1232, 0.1220, 0.1241, 0.1270, 0.1297)


def article_data() -> tuple[np.ndarray, np.ndarray]:
    """The article's samples: x = 0.4 * i for i = 0..50 and sin(x)^2, in Python floats.

    >>> x, y = article_data()
    >>> len(x), float(x[-1]), float(y[0])
    (51, 20.0, 0.0)
    """
    x = 0.4 * np.arange(51, dtype=np.float64)
    return x, np.sin(x) ** 2


class SineModel(nn.Module):
    """The article's model: fc1 = Linear(1, 10), sigmoid, fc2 = Linear(10, 1)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1, 10)
        self.sigmoid = nn.Sigmoid()
        self.fc2 = nn.Linear(10, 1)

    def forward(self, x):
        return self.fc2(self.sigmoid(self.fc1(x)))


def build_model(init: str = "norch", seed: int = 0) -> SineModel:
    """The model, initialised as norch does (`init="norch"`) or as PyTorch does ("torch").

    norch: every parameter from U(-1, 1), one numpy stream seeded by `seed`, in the
    order the article's model constructs them (fc1.weight, fc1.bias, fc2.weight, fc2.bias).

    >>> m = build_model("norch", seed=0)
    >>> bool(np.abs(m.fc1.weight.numpy()).max() <= 1)
    True
    """
    if init not in ("norch", "torch"):
        raise ValueError(f"init must be 'norch' or 'torch', got {init!r}")
    fg.manual_seed(seed)
    model = SineModel()
    if init == "norch":
        stream = np.random.default_rng(seed)
        for p in (model.fc1.weight, model.fc1.bias, model.fc2.weight, model.fc2.bias):
            nn.init.uniform_(p, -1.0, 1.0, generator=stream)
    return model


def train(model, x_values, y_true, epochs: int, lr: float, log=print, bar=None) -> list[float]:
    """Per-sample SGD on MSE, as the article; returns every step's loss.

    After each epoch `log` gets `Epoch [e/epochs], Loss: L`, L the loss of the
    epoch's last sample (what the article's loop printed: its `loss` after the loop).
    """
    criterion = nn.MSELoss()
    optimizer = fg.optim.SGD(model.parameters(), lr=lr)
    losses: list[float] = []
    for epoch in range(epochs):
        for x, target in zip(x_values, y_true):
            inputs = fg.tensor([[x]], dtype=fg.float32)
            targets = fg.tensor([[target]], dtype=fg.float32)
            loss = criterion(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # forward + backward + update: one realize
            losses.append(loss.item())  # already computed by the step
            if bar is not None:
                bar.update()
                if len(losses) % 25 == 0:
                    bar.set_postfix(loss=f"{np.mean(losses[-25:]):.4f}")
        log(f"Epoch [{epoch + 1}/{epochs}], Loss: {losses[-1]:.4f}")
    return losses


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=0, help="seeds the initial weights")
    parser.add_argument(
        "--init",
        choices=["norch", "torch"],
        default="norch",
        help="norch (default): every weight and bias from U(-1, 1), as norch's Parameter; "
        "torch: PyTorch's default Linear initialisation",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (none is drawn either when stderr is not a terminal)",
    )
    parser.add_argument("--plot", action="store_true", help="save the loss curve and the fit")
    parser.add_argument("--plot-dir", default="plots", help="where --plot writes")
    args = parser.parse_args(argv)

    x_values, y_true = article_data()
    model = build_model(args.init, args.seed)
    print(model)

    steps = args.epochs * len(x_values)
    bar = progress(total=steps, unit="step", enabled=not args.no_progress, leave=False)
    before = dict(stats), dict(compiler.stats)
    t0 = time.perf_counter()
    losses = train(model, x_values, y_true, args.epochs, args.lr, log=tqdm.write, bar=bar)
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
        plot(model, x_values, y_true, losses, len(x_values), args.plot_dir)


def plot(model, x_values, y_true, losses, per_epoch: int, folder: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    epochs = len(losses) // per_epoch
    last = losses[per_epoch - 1 :: per_epoch]
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ax.plot(np.arange(1, len(losses) + 1) / per_epoch, losses, lw=0.6, alpha=0.6, label="step")
    ax.plot(np.arange(1, epochs + 1), last, "o-", label="last sample (printed)")
    ax.plot(np.arange(1, len(ARTICLE_LOSSES) + 1), ARTICLE_LOSSES, "s--", label="the article")
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
