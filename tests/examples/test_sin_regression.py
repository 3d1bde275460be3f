"""examples/sin_regression.py: norch's sin(x)^2 regression as the article ran it.

Oracles: the article's own numbers (51 samples, x = 0 ... 20.0), one numpy
stream drawn in construction order, and the same per-sample SGD written in
float64 numpy with hand-derived gradients.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from _files import load_file

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "sin_regression.py")


@pytest.fixture(scope="module")
def example():
    module = load_file("sin_regression_example", EXAMPLE)
    return module


def numpy_sgd(params, x_values, y_true, epochs, lr):
    """The article's loop in float64: per-sample SGD on (fc2(sigmoid(fc1(x))) - y)^2."""
    w1, b1, w2, b2 = (np.array(p, dtype=np.float64) for p in params)
    losses = []
    for _ in range(epochs):
        for x, y in zip(x_values, y_true):
            h = 1 / (1 + np.exp(-(w1[:, 0] * x + b1)))
            out = w2[0] @ h + b2[0]
            losses.append((out - y) ** 2)
            g = 2 * (out - y)
            gz = g * w2[0] * h * (1 - h)
            w2[0] -= lr * g * h
            b2 -= lr * g
            w1[:, 0] -= lr * gz * x
            b1 -= lr * gz
    return np.array(losses)


def test_the_article_samples(example):
    x, y = example.article_data()
    assert len(x) == 51 and x[0] == 0 and x[-1] == 20.0
    np.testing.assert_allclose(np.diff(x), 0.4, rtol=1e-12)
    np.testing.assert_allclose(y, np.sin(x) ** 2)


def test_norch_init_is_uniform_minus_one_one_in_construction_order(example):
    model = example.build_model("norch", seed=7)
    stream = np.random.default_rng(7)
    order = [
        ("fc1.weight", (10, 1)), ("fc1.bias", (10,)), ("fc2.weight", (1, 10)), ("fc2.bias", (1,)),
    ]  # fmt: skip
    params = dict(model.named_parameters())
    assert [name for name, _ in order] == list(params)
    for name, shape in order:
        want = stream.uniform(-1.0, 1.0, shape).astype(np.float32)
        np.testing.assert_array_equal(params[name].numpy(), want)
    everything = np.concatenate([p.numpy().ravel() for p in params.values()])
    assert everything.min() < 0  # U(-1, 1), not the U(0, 1) of before


def test_torch_init_differs_and_a_bad_init_is_refused(example):
    torch_like = example.build_model("torch", seed=7)
    bound = 1.0  # Linear(1, 10): U(-1/sqrt(1), 1/sqrt(1)); Linear(10, 1): 1/sqrt(10)
    assert np.abs(torch_like.fc1.weight.numpy()).max() <= bound
    assert np.abs(torch_like.fc2.weight.numpy()).max() <= 10**-0.5 + 1e-7
    with pytest.raises(ValueError, match="init must be"):
        example.build_model("glorot")


@pytest.mark.parametrize("seed", [0, 3])
def test_training_matches_numpy_and_prints_the_last_sample_loss(example, seed):
    x, y = example.article_data()
    model = example.build_model("norch", seed=seed)
    start = [p.numpy().copy() for p in model.parameters()]
    lines = []
    losses = example.train(model, x, y, epochs=2, lr=0.001, log=lines.append)
    want = numpy_sgd(start, x, y, epochs=2, lr=0.001)
    assert len(losses) == 2 * 51
    np.testing.assert_allclose(losses, want, rtol=2e-4, atol=1e-6)
    assert len(lines) == 2
    for epoch, line in enumerate(lines, 1):
        match = re.fullmatch(rf"Epoch \[{epoch}/2\], Loss: (\d+\.\d{{4}})", line)
        assert match, line
        assert float(match.group(1)) == pytest.approx(want[epoch * 51 - 1], abs=6e-5)


def test_main_prints_the_article_lines(example, capsys):
    example.main(["--epochs", "1", "--no-progress", "--seed", "3"])
    out = capsys.readouterr().out
    assert re.search(r"^Epoch \[1/1\], Loss: \d+\.\d{4}$", out, re.M), out
    assert "51 steps in" in out
