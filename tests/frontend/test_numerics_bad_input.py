"""Bad input raises as PyTorch raises; empty tensors reduce as PyTorch reduces them."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

# ---------------------------------------------------------------- class indices


@pytest.mark.parametrize("bad", [5, 3, -1])
def test_cross_entropy_target_out_of_range_raises_index_error(bad):
    logits = fg.randn(2, 3)
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds."):
        F.cross_entropy(logits, fg.tensor([0, bad]))
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds."):
        F.nll_loss(logits.log_softmax(1), fg.tensor([bad, 0]))
    with pytest.raises(IndexError):
        nn.CrossEntropyLoss()(logits, fg.tensor([bad, 1]))


def test_ignore_index_may_be_out_of_range():
    logits = fg.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]])
    loss = F.cross_entropy(logits, fg.tensor([2, -100])).item()
    want = -np.log(np.exp(3.0) / np.exp([1.0, 2.0, 3.0]).sum())
    assert loss == pytest.approx(want, rel=1e-6)
    loss = F.cross_entropy(logits, fg.tensor([7, 1]), ignore_index=7).item()
    assert loss == pytest.approx(-np.log(1.0 / np.exp([0.5, 0.0, -1.0]).sum()), rel=1e-6)


def test_one_hot_out_of_range_raises():
    with pytest.raises(IndexError, match="smaller than num_classes"):
        F.one_hot(fg.tensor([0, 5]), 3)
    with pytest.raises(RuntimeError, match="non-negative"):  # torch raises RuntimeError here
        F.one_hot(fg.tensor([-1, 0]), 3)
    assert F.one_hot(fg.tensor([0, 2]), 3).tolist() == [[1, 0, 0], [0, 0, 1]]


# ---------------------------------------------------------------- dims of 0-d tensors


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.squeeze(10),
        lambda t: t.sum(1),
        lambda t: t.sum(-2),
        lambda t: t.mean(3),
        lambda t: t.amax(1),
        lambda t: t.argmax(2),
    ],
)
def test_dim_out_of_range_on_a_0d_tensor_raises_index_error(fn):
    with pytest.raises(IndexError, match="out of range"):
        fn(fg.tensor(2.0))


def test_dims_0_and_minus_1_are_fine_on_a_0d_tensor():
    t = fg.tensor(2.0)
    assert t.squeeze(0).shape == () and t.squeeze(-1).shape == ()
    assert t.sum(0).item() == 2.0 and t.sum(-1).item() == 2.0


def test_dim_errors_stay_shape_errors_too():
    with pytest.raises(fg.ShapeError):
        fg.ones(3, 4).sum(2)


# ---------------------------------------------------------------- creation


def test_linspace_bool_raises():
    with pytest.raises(TypeError, match="bool"):
        fg.linspace(5, 10, 3, dtype="bool")


@pytest.mark.parametrize("size", [(1.5,), (2, 0.5), ("3",)])
def test_non_integer_sizes_raise_type_error(size):
    with pytest.raises(TypeError, match="integers"):
        fg.zeros(*size)
    with pytest.raises(TypeError):
        fg.ones(*size)


def test_integer_sizes_still_work():
    assert fg.zeros(np.int64(2), 3).shape == (2, 3)
    assert fg.ones((2, 0)).shape == (2, 0)


# ---------------------------------------------------------------- empty tensors


def test_zero_size_reductions_match_torch():
    z = fg.zeros(4, 0)
    assert z.sum().item() == 0.0
    assert z.sum(1).tolist() == [0.0] * 4
    assert z.sum(0).shape == (0,)
    assert math.isnan(z.mean().item())
    assert z.mean(1).numpy().shape == (4,) and np.isnan(z.mean(1).numpy()).all()
    assert fg.zeros(0, dtype="int32").sum().item() == 0
    assert z.amax(0).shape == (0,)
    with pytest.raises(IndexError, match="empty"):
        z.amax()
    with pytest.raises(IndexError, match="empty"):
        z.amax(1)


def test_softmax_of_an_empty_batch():
    for f in (lambda x: x.softmax(1), lambda x: x.log_softmax(1), lambda x: x.softmax(0)):
        out = f(fg.zeros(0, 3))
        assert out.shape == (0, 3) and out.numpy().size == 0


def test_sum_of_empty_has_zero_gradient_shape():
    x = fg.zeros(3, 0, requires_grad=True)
    (x.sum() + fg.tensor(1.0, requires_grad=True)).backward()
    assert x.grad is None or x.grad.shape == (3, 0)


# ---------------------------------------------------------------- environment


@pytest.mark.parametrize(
    "name, value",
    [
        ("FUSEGRAD_THREADS", "abc"),
        ("FUSEGRAD_THREADS", "-2"),
        ("FUSEGRAD_DEBUG", "yes"),
        ("FUSEGRAD_PROGRAM", "maybe"),
    ],
)
def test_bad_environment_variables_name_the_variable(name, value):
    env = dict(os.environ, **{name: value})
    proc = subprocess.run(
        [sys.executable, "-c", "import fusegrad"], env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert name in last and repr(value) in last, last


def test_good_environment_variables_are_read():
    env = dict(os.environ, FUSEGRAD_THREADS="3", FUSEGRAD_DEBUG="0", FUSEGRAD_PROGRAM="0")
    code = "import fusegrad as fg; print(fg.config.threads, fg.config.program)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["3", "False"], out.stderr
