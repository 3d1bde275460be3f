"""Models, data and the training loop shared by the DDP worker and its single-process oracle."""

from __future__ import annotations

import numpy as np

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn import functional as F
from fusegrad.nn.conv import Conv2d, MaxPool2d


class LeNet5(nn.Module):
    """examples/lenet_mnist.py's LeNet-5."""

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
        x = self.fc1(x.flatten(1)).relu()
        return self.fc3(self.fc2(x).relu())


def make_model(kind: str, seed: int, width: int = 16) -> nn.Module:
    fg.manual_seed(seed)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(6, width), nn.Tanh(), nn.Linear(width, 3))
    return LeNet5()


def global_batches(kind: str, steps: int, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The same batches on every rank and in the oracle (one per step)."""
    rng = np.random.default_rng(1)
    shape = (size, 6) if kind == "mlp" else (size, 1, 28, 28)
    classes = 3 if kind == "mlp" else 10
    return [
        (rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, size))
        for _ in range(steps)
    ]


def make_optimizer(name: str, params):
    if name == "adam":
        return fg.optim.Adam(params, lr=0.01)
    return fg.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)


def train(model, opt, batches, rows=None, micro: int = 1, no_sync=None) -> list[float]:
    """The plain loop; `rows` picks this rank's share of each batch, `micro` > 1 accumulates
    gradients over that many micro-batches (inside `no_sync` but the last, when given)."""
    losses = []
    for x, y in batches:
        if rows is not None:
            x, y = x[rows], y[rows]
        opt.zero_grad()
        parts = np.array_split(np.arange(len(x)), micro)
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            ctx = no_sync() if (no_sync is not None and not last) else _nothing()
            with ctx:
                loss = F.cross_entropy(model(fg.tensor(x[part])), fg.tensor(y[part]))
                # the mean over the whole step's batch: the micro-batches weigh equally
                (loss / len(parts)).backward()
            losses.append(loss.item())
        opt.step()
    return losses


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def parameters(model) -> dict[str, np.ndarray]:
    return {n: np.array(p.numpy()) for n, p in model.named_parameters()}
