"""A small training loop on the cuda device, for the tests of its launch paths (a stubbed
driver: runtime/cuda_stub.py): an MLP 8-16-4, SGD with momentum, one fixed batch."""

from __future__ import annotations

import numpy as np

import fusegrad as fg


def mlp_training_step(jit: bool):
    """`step()`: one training step of a fresh seeded MLP on the cuda device (under `fg.jit`
    if `jit`), returning the loss. Build it inside the driver the test runs with."""
    from fusegrad import nn
    from fusegrad.nn import functional as F

    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("cuda")
    opt = fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = fg.jit(train) if jit else train
    x = fg.tensor(np.ones((4, 8), np.float32), device="cuda")
    y = fg.tensor(np.array([0, 1, 2, 3]), device="cuda")
    return lambda: run(x, y)
