"""Sine waves predicted by stacked LSTM cells trained with L-BFGS, in the common shape of
time-series scripts: waves made in numpy and read with `torch.from_numpy`, the model in
float64 (`.double()`), a loop over time steps with `split(1, dim=1)`, `nn.LSTMCell` states
carried by hand, outputs gathered with `torch.cat`, L-BFGS stepping with a closure, and
a prediction past the end under no_grad. Runs unchanged under `python -m fusegrad` and
under PyTorch.

Prints `step S loss L` (the closure's first loss of each step) and `test_loss L`."""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


def sine_waves(count, length, period, rng):
    shifts = rng.integers(-4 * period, 4 * period, count)
    return np.sin((np.arange(length) + shifts[:, None]) / period).astype(np.float64)


class Sequence(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden
        self.cell1 = nn.LSTMCell(1, hidden)
        self.cell2 = nn.LSTMCell(hidden, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, series, future=0):
        outputs = []
        batch = series.size(0)
        h1 = torch.zeros(batch, self.hidden, dtype=torch.double)
        c1 = torch.zeros(batch, self.hidden, dtype=torch.double)
        h2 = torch.zeros(batch, self.hidden, dtype=torch.double)
        c2 = torch.zeros(batch, self.hidden, dtype=torch.double)
        for value in series.split(1, dim=1):
            h1, c1 = self.cell1(value, (h1, c1))
            h2, c2 = self.cell2(h1, (h2, c2))
            output = self.out(h2)
            outputs += [output]
        for _ in range(future):  # feed the prediction back in
            h1, c1 = self.cell1(output, (h1, c1))
            h2, c2 = self.cell2(h1, (h2, c2))
            output = self.out(h2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def main():
    parser = argparse.ArgumentParser(description="LSTMCell + LBFGS on sine waves")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--waves", type=int, default=16)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=24)
    parser.add_argument("--future", type=int, default=10)
    parser.add_argument("--max-iter", type=int, default=20, help="L-BFGS iterations a step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--numpy-init",
        action="store_true",
        help="draw the weights with numpy, so any framework starts alike",
    )
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    data = sine_waves(args.waves, args.length, 20, rng)
    train_in = torch.from_numpy(data[3:, :-1])
    train_target = torch.from_numpy(data[3:, 1:])
    test_in = torch.from_numpy(data[:3, :-1])
    test_target = torch.from_numpy(data[:3, 1:])

    model = Sequence(args.hidden).double()
    if args.numpy_init:
        with torch.no_grad():
            for _, parameter in model.named_parameters():
                drawn = rng.uniform(-0.3, 0.3, tuple(parameter.shape))
                parameter.copy_(torch.from_numpy(drawn))
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(model.parameters(), lr=0.8, max_iter=args.max_iter)
    losses = []  # each evaluation's loss

    def closure():
        optimizer.zero_grad()
        loss = criterion(model(train_in), train_target)
        losses.append(loss.item())
        loss.backward()
        return loss

    for step in range(args.steps):
        first = len(losses)
        optimizer.step(closure)
        print(f"step {step} loss {losses[first]:.8f}")

    with torch.no_grad():
        prediction = model(test_in, future=args.future)
        loss = criterion(prediction[:, : -args.future], test_target)
        print(f"test_loss {loss.item():.8f}")
    assert prediction.shape == (3, args.length - 1 + args.future)


if __name__ == "__main__":
    main()
