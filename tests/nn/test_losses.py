"""Losses against numpy re-implementations of PyTorch's formulas: values and gradients.

Each reference below is written from PyTorch's documented definition
(reduction 'mean' of nll_loss divides by the summed class weights of the
non-ignored targets; label smoothing mixes in the uniform distribution; ...),
and the gradient is checked by central differences of that reference in float64.
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

RNG = np.random.default_rng(99)
REDUCTIONS = ["mean", "sum", "none"]


def reduce_np(loss, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction](loss)


def numeric_grad(f, x, eps=1e-6):
    """d sum(f(x) * weights) / dx by central differences; f returns float64 arrays."""
    x = x.astype(np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (f(up) - f(down)) / (2 * eps)
    return grad


def check(loss_fn, reference, inputs: dict, grad_of: list[str], rtol=1e-5, atol=1e-6):
    """Value of loss_fn(**tensors) == reference(**arrays); gradients of a weighted sum too."""
    tensors = {
        k: fg.from_numpy(v, requires_grad=k in grad_of) if v is not None else None
        for k, v in inputs.items()
    }
    out = loss_fn(**tensors)
    expected = reference(
        **{
            k: v.astype(np.float64) if v is not None and v.dtype.kind == "f" else v
            for k, v in inputs.items()
        }
    )
    np.testing.assert_allclose(out.numpy(), expected, rtol=rtol, atol=atol)
    weights = RNG.uniform(0.5, 1.5, np.shape(expected))
    (out * fg.from_numpy(weights.astype(np.float32))).sum().backward()
    for name in grad_of:

        def scalar(value, name=name):
            args = {
                k: v.astype(np.float64) if v is not None and v.dtype.kind == "f" else v
                for k, v in inputs.items()
            }
            args[name] = value
            return float((reference(**args) * weights).sum())

        expected_grad = numeric_grad(scalar, inputs[name])
        np.testing.assert_allclose(
            tensors[name].grad.numpy(), expected_grad, rtol=1e-3, atol=1e-4, err_msg=name
        )


def log_softmax_np(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


# ---------------------------------------------------------------- regression and binary


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_loss(reduction):
    inputs = dict(input=RNG.standard_normal((4, 3)).astype(np.float32))
    inputs["target"] = RNG.standard_normal((4, 3)).astype(np.float32)
    check(
        lambda input, target: F.mse_loss(input, target, reduction=reduction),
        lambda input, target: reduce_np((input - target) ** 2, reduction),
        inputs,
        ["input", "target"],
    )


def bce_np(input, target, weight=None, reduction="mean"):
    with np.errstate(divide="ignore"):
        loss = -(
            target * np.maximum(np.log(input), -100)
            + (1 - target) * np.maximum(np.log(1 - input), -100)
        )
    if weight is not None:
        loss = loss * weight
    return reduce_np(loss, reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    inputs = dict(
        input=RNG.uniform(0.05, 0.95, (5, 2)).astype(np.float32),
        target=RNG.uniform(0, 1, (5, 2)).astype(np.float32),
        weight=RNG.uniform(0.5, 2, (5, 2)).astype(np.float32) if weighted else None,
    )
    check(
        lambda input, target, weight: F.binary_cross_entropy(input, target, weight, reduction),
        lambda input, target, weight: bce_np(input, target, weight, reduction),
        inputs,
        ["input", "target"],
    )


def test_binary_cross_entropy_saturated_probabilities():
    """At probabilities of exactly 0 or 1 each log clamps at -100 and the gradient is torch's,
    (x - y) / max(x (1 - x), 1e-12): finite, and zero where the prediction is right."""
    x_np = np.array([0.0, 1.0, 1.0, 0.0, 0.25], np.float32)
    y_np = np.array([0.0, 1.0, 0.0, 1.0, 1.0], np.float32)
    x = fg.from_numpy(x_np, requires_grad=True)
    loss = F.binary_cross_entropy(x, fg.from_numpy(y_np), reduction="sum")
    assert loss.item() == pytest.approx(bce_np(x_np, y_np, reduction="sum"))
    loss.backward()
    expected = (x_np - y_np) / np.maximum(x_np * (1 - x_np), 1e-12)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)


def bce_logits_np(input, target, weight=None, pos_weight=None, reduction="mean"):
    log_sig = -np.logaddexp(0, -input)  # log(sigmoid(x))
    log_one_minus = -np.logaddexp(0, input)  # log(1 - sigmoid(x))
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * target * log_sig + (1 - target) * log_one_minus)
    if weight is not None:
        loss = loss * weight
    return reduce_np(loss, reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy_with_logits(reduction, weighted):
    inputs = dict(
        input=(RNG.standard_normal((4, 3)) * 4).astype(np.float32),
        target=RNG.uniform(0, 1, (4, 3)).astype(np.float32),
        weight=RNG.uniform(0.5, 2, (4, 3)).astype(np.float32) if weighted else None,
        pos_weight=RNG.uniform(0.5, 3, (3,)).astype(np.float32) if weighted else None,
    )
    check(
        lambda input, target, weight, pos_weight: F.binary_cross_entropy_with_logits(
            input, target, weight, reduction, pos_weight
        ),
        lambda input, target, weight, pos_weight: bce_logits_np(
            input, target, weight, pos_weight, reduction
        ),
        inputs,
        ["input", "target"],
    )


def test_binary_cross_entropy_with_logits_is_stable_for_large_logits():
    x = fg.tensor([-500.0, 500.0, 80.0], requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(x, fg.tensor([1.0, 0.0, 1.0]), reduction="sum")
    assert loss.item() == pytest.approx(1000.0, rel=1e-6)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [-1.0, 1.0, 0.0], atol=1e-6)


# ---------------------------------------------------------------- classification


def nll_np(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """input (N, C, *), target (N, *): -w[y] x[n, y, ...], 'mean' divides by the summed w[y]."""
    classes = input.shape[1]
    x = np.moveaxis(input, 1, -1).reshape(-1, classes)
    t = target.reshape(-1)
    w = np.ones(classes) if weight is None else weight
    valid = t != ignore_index
    safe_t = np.where(valid, t, 0)
    picked = x[np.arange(len(t)), safe_t]
    wn = np.where(valid, w[safe_t], 0.0)
    loss = -wn * picked
    if reduction == "mean":
        return loss.sum() / wn.sum()
    return reduce_np(loss.reshape(target.shape), reduction)


def cross_entropy_np(input, target, weight=None, ignore_index=-100, reduction="mean", ls=0.0):
    classes = input.shape[1]
    logp = log_softmax_np(input, 1)
    w = np.ones(classes) if weight is None else weight
    wshape = [1] * input.ndim
    wshape[1] = classes
    if target.dtype.kind == "f":  # class probabilities
        y = target * (1 - ls) + ls / classes
        loss = -(logp * y * w.reshape(wshape)).sum(1)
        if reduction == "mean":
            return loss.sum() / (input.size / classes)
        return reduce_np(loss, reduction)
    nll = nll_np(logp, target, weight, ignore_index, reduction)
    valid = target != ignore_index
    smooth = np.where(valid, -(logp * w.reshape(wshape)).sum(1), 0.0)
    if reduction == "mean":
        denom = np.where(valid, w[np.where(valid, target, 0)], 0.0).sum()
        smooth = smooth.sum() / denom
    else:
        smooth = reduce_np(smooth, reduction)
    return (1 - ls) * nll + ls / classes * smooth


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    logp = log_softmax_np(RNG.standard_normal((6, 4)), 1).astype(np.float32)
    target = np.array([0, 3, 1, 1, 2, 3])
    inputs = dict(input=logp, target=target)
    inputs["weight"] = RNG.uniform(0.5, 2, 4).astype(np.float32) if weighted else None
    check(
        lambda input, target, weight: F.nll_loss(input, target, weight, 1, reduction),
        lambda input, target, weight: nll_np(input, target, weight, 1, reduction),
        inputs,
        ["input"],
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_indices(reduction, label_smoothing, weighted):
    inputs = dict(
        input=(RNG.standard_normal((6, 4)) * 2).astype(np.float32),
        target=np.array([0, 3, 1, 1, 2, 3]),
        weight=RNG.uniform(0.5, 2, 4).astype(np.float32) if weighted else None,
    )
    check(
        lambda input, target, weight: F.cross_entropy(
            input, target, weight, 3, reduction, label_smoothing
        ),
        lambda input, target, weight: cross_entropy_np(
            input, target, weight, 3, reduction, label_smoothing
        ),
        inputs,
        ["input"],
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ignored_row", [False, True])
@pytest.mark.parametrize("spatial", [False, True])
def test_cross_entropy_default_ignore_index(reduction, ignored_row, spatial):
    """With every target a class, the loss takes a shorter graph (no weights to sum);
    a target equal to the default ignore_index (-100) takes the general one. Both agree
    with the reference, values and gradients."""
    shape, tshape = ((3, 4, 2), (3, 2)) if spatial else ((6, 4), (6,))
    target = RNG.integers(0, 4, tshape)
    if ignored_row:
        target.flat[1] = -100
    inputs = dict(input=(RNG.standard_normal(shape) * 2).astype(np.float32), target=target)
    check(
        lambda input, target: F.cross_entropy(input, target, reduction=reduction),
        lambda input, target: cross_entropy_np(input, target, reduction=reduction),
        inputs,
        ["input"],
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_spatial_input(reduction):
    """(N, C, d) input with (N, d) targets: the class axis is dim 1, as in torch."""
    inputs = dict(
        input=RNG.standard_normal((2, 3, 5)).astype(np.float32),
        target=RNG.integers(0, 3, (2, 5)),
    )
    check(
        lambda input, target: F.cross_entropy(
            input, target, reduction=reduction, label_smoothing=0.1
        ),
        lambda input, target: cross_entropy_np(input, target, reduction=reduction, ls=0.1),
        inputs,
        ["input"],
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_class_probabilities(reduction):
    probs = RNG.uniform(0, 1, (5, 4))
    inputs = dict(
        input=RNG.standard_normal((5, 4)).astype(np.float32),
        target=(probs / probs.sum(1, keepdims=True)).astype(np.float32),
        weight=RNG.uniform(0.5, 2, 4).astype(np.float32),
    )
    check(
        lambda input, target, weight: F.cross_entropy(
            input, target, weight, reduction=reduction, label_smoothing=0.1
        ),
        lambda input, target, weight: cross_entropy_np(
            input, target, weight, reduction=reduction, ls=0.1
        ),
        inputs,
        ["input", "target"],
    )


def test_cross_entropy_unbatched():
    x_np = RNG.standard_normal(5).astype(np.float32)
    out = F.cross_entropy(fg.from_numpy(x_np), fg.tensor(2), reduction="none")
    assert out.shape == ()
    assert out.item() == pytest.approx(-log_softmax_np(x_np.astype(np.float64), 0)[2], rel=1e-5)


def test_loss_modules_match_functions():
    x_np = RNG.standard_normal((4, 3)).astype(np.float32)
    x, target = fg.from_numpy(x_np), fg.tensor([2, 0, 1, 1])
    w = fg.tensor([1.0, 2.0, 0.5])
    probs = fg.from_numpy(1 / (1 + np.exp(-x_np)))
    y = fg.from_numpy((x_np > 0).astype(np.float32))
    pairs = [
        (nn.MSELoss(reduction="sum")(x, y), F.mse_loss(x, y, reduction="sum")),
        (nn.BCELoss(weight=w)(probs, y), F.binary_cross_entropy(probs, y, w)),
        (
            nn.BCEWithLogitsLoss(pos_weight=w)(x, y),
            F.binary_cross_entropy_with_logits(x, y, pos_weight=w),
        ),
        (nn.NLLLoss(w, ignore_index=0)(x, target), F.nll_loss(x, target, w, ignore_index=0)),
        (
            nn.CrossEntropyLoss(w, label_smoothing=0.1)(x, target),
            F.cross_entropy(x, target, w, label_smoothing=0.1),
        ),
    ]
    for module_value, function_value in pairs:
        assert module_value.item() == pytest.approx(function_value.item(), rel=1e-6)
    assert repr(nn.CrossEntropyLoss()) == "CrossEntropyLoss()"
    assert repr(nn.MSELoss(reduction="sum")) == "MSELoss(reduction=sum)"


def test_bad_arguments_raise():
    x = fg.tensor([[0.5, 0.5]])
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.mse_loss(x, x, reduction="average")
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        nn.CrossEntropyLoss(reduction="avg")
    with pytest.raises(ValueError, match="target"):
        F.cross_entropy(x, fg.tensor([0, 1]))
    with pytest.raises(TypeError, match="integer class indices"):
        F.nll_loss(x, fg.tensor([0.0]))
    with pytest.raises(ValueError, match="same size"):
        F.binary_cross_entropy(x, fg.tensor([0.5, 0.5]))


def test_one_hot():
    idx = np.array([[0, 2], [1, 2]])
    out = F.one_hot(fg.from_numpy(idx), 4)
    assert out.dtype == fg.int64
    np.testing.assert_array_equal(out.numpy(), np.eye(4, dtype=np.int64)[idx])
    assert F.one_hot(fg.from_numpy(idx)).shape == (2, 2, 3)  # num_classes = max + 1
    with pytest.raises(TypeError):
        F.one_hot(fg.tensor([1.0]))


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize(
    "loss, op",
    [
        (lambda x, t: F.cross_entropy(x, t), "cross_entropy"),
        (lambda x, t: nn.CrossEntropyLoss()(x, t), "cross_entropy"),
        (lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), "nll_loss"),
        (lambda x, t: F.nll_loss(x.log_softmax(1), t), "nll_loss"),
        (lambda x, t: nn.NLLLoss()(x.log_softmax(1), t), "nll_loss"),
    ],
)
def test_a_class_out_of_range_names_the_line_of_the_loss_call(loss, op, lazy):
    x = fg.randn(2, 3, requires_grad=True)
    t = fg.tensor([0, 5])
    if lazy:  # a target still to be computed is computed at the loss call, and checked
        t = (t + 0).long()
    with pytest.raises(IndexError) as info:
        loss(x, t)
    assert isinstance(info.value, fg.FusegradError) and isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert message.startswith(f"{op}: Target 5 is out of bounds.")
    assert f"at {os.path.basename(__file__)}:" in message  # the lambda's line: the loss call


def test_a_class_out_of_range_of_a_computed_target_names_the_exact_line():
    x, t = fg.randn(2, 3), fg.tensor([1, 2]) * 2  # lazy: [2, 4]
    try:
        F.cross_entropy(x, t)
    except IndexError as e:
        where = int(re.search(rf"{os.path.basename(__file__)}:(\d+)", str(e)).group(1))
        assert "Target 4 is out of bounds." in str(e)
    assert where == sys._getframe().f_lineno - 4


def test_one_hot_class_errors_name_the_line():
    with pytest.raises(
        RuntimeError, match=r"one_hot: Class values must be non-negative\..*test_losses"
    ):
        F.one_hot(fg.tensor([-1, 0]), 3)


def test_nll_loss_2d_is_the_deprecated_nll_loss():
    with pytest.warns(FutureWarning, match="`NLLLoss2d` has been deprecated"):
        m = nn.NLLLoss2d(ignore_index=1)
    assert isinstance(m, nn.NLLLoss) and m.ignore_index == 1 and m.reduction == "mean"
    rng = np.random.default_rng(0)
    logp = np.log(rng.dirichlet(np.ones(3), size=(2, 4, 4))).transpose(0, 3, 1, 2)
    target = rng.integers(0, 3, size=(2, 4, 4))
    picked = np.take_along_axis(logp, target[:, None], 1)[:, 0]
    keep = target != 1
    got = m(fg.tensor(logp), fg.tensor(target)).item()
    np.testing.assert_allclose(got, -picked[keep].mean(), rtol=1e-12)
    with pytest.warns(UserWarning, match="please use reduction='sum' instead"):
        with pytest.warns(FutureWarning):
            summed = nn.NLLLoss2d(size_average=False)
    assert summed.reduction == "sum"
    np.testing.assert_allclose(
        summed(fg.tensor(logp), fg.tensor(target)).item(), -picked.sum(), rtol=1e-12
    )
