"""nn.AdaptiveLogSoftmaxWithLoss against a numpy adaptive softmax from the same weights
(values, log_prob, predict), float64 central differences (gradients of the loss for the
input and every weight), torch 2.14's values for one case, its layout and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.testing import gradcheck


def _log_softmax(z):
    z = z - z.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


def _reference_log_prob(asm, x):
    """numpy: the head's shortlist, then each cluster's tail plus its head entry."""
    w = {k: v.numpy().astype(np.float64) for k, v in asm.state_dict().items()}
    head = x @ w["head.weight"].T + w.get("head.bias", 0.0)
    head = _log_softmax(head)
    parts = [head[:, : asm.shortlist_size]]
    for i in range(asm.n_clusters):
        hidden = x @ w[f"tail.{i}.0.weight"].T
        tail = _log_softmax(hidden @ w[f"tail.{i}.1.weight"].T)
        parts.append(tail + head[:, asm.shortlist_size + i : asm.shortlist_size + i + 1])
    return np.concatenate(parts, 1)


def _model(seed=0, dtype=fg.float64, **kwargs):
    fg.manual_seed(seed)
    return nn.AdaptiveLogSoftmaxWithLoss(
        8, 10, cutoffs=[3, 6], div_value=2.0, dtype=dtype, **kwargs
    )


def test_layout_and_repr():
    asm = _model(head_bias=True)
    assert asm.cutoffs == [3, 6, 10] and asm.shortlist_size == 3 and asm.head_size == 5
    assert [(n, tuple(p.shape)) for n, p in asm.named_parameters()] == [
        ("head.weight", (5, 8)),
        ("head.bias", (5,)),
        ("tail.0.0.weight", (4, 8)),
        ("tail.0.1.weight", (3, 4)),
        ("tail.1.0.weight", (2, 8)),
        ("tail.1.1.weight", (4, 2)),
    ]
    assert repr(asm).splitlines()[:5] == [
        "AdaptiveLogSoftmaxWithLoss(",
        "  (head): Linear(in_features=8, out_features=5, bias=True)",
        "  (tail): ModuleList(",
        "    (0): Sequential(",
        "      (0): Linear(in_features=8, out_features=4, bias=False)",
    ]


def test_output_loss_log_prob_and_predict_against_numpy():
    asm = _model()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 8))
    target = np.array([0, 2, 3, 5, 9, 7, 6])
    full = _reference_log_prob(asm, x)
    result = asm(fg.tensor(x), fg.tensor(target))
    assert type(result).__name__ == "_ASMoutput" and result._fields == ("output", "loss")
    output, loss = result
    np.testing.assert_allclose(output.numpy(), full[np.arange(7), target], rtol=1e-12)
    np.testing.assert_allclose(loss.item(), -full[np.arange(7), target].mean(), rtol=1e-12)
    np.testing.assert_allclose(asm.log_prob(fg.tensor(x)).numpy(), full, rtol=1e-12)
    np.testing.assert_allclose(np.exp(full).sum(1), 1.0, rtol=1e-12)
    # predict: scaled inputs make the head pick clusters for some rows and not for others
    for scale in (1.0, 5.0, 40.0):
        assert asm.predict(fg.tensor(x * scale)).tolist() == list(
            _reference_log_prob(asm, x * scale).argmax(1)
        )
    # one row: a 1-D input with a 0-d target
    one = asm(fg.tensor(x[4]), fg.tensor(9))
    assert one.output.shape == () and one.loss.shape == ()
    np.testing.assert_allclose(one.output.item(), full[4, 9], rtol=1e-12)


def test_gradients_against_central_differences():
    asm = _model()
    target = fg.tensor([0, 2, 3, 5, 9, 7, 4])
    names = [n for n, _ in asm.named_parameters()]

    def loss(x, *weights):
        for name, w in zip(names, weights):
            module_name, _, attr = name.rpartition(".")
            asm.get_submodule(module_name)._parameters[attr] = w
        return asm(x, target).loss

    x = fg.tensor(np.random.default_rng(2).standard_normal((7, 8)))
    assert gradcheck(loss, [x, *[p.detach() for p in asm.parameters()]])


def test_torchs_values():
    asm = nn.AdaptiveLogSoftmaxWithLoss(2, 4, cutoffs=[2], div_value=2.0)
    asm.load_state_dict(
        {
            "head.weight": fg.tensor([[0.5, -1.0], [1.5, 0.25], [-0.75, 2.0]]),
            "tail.0.0.weight": fg.tensor([[1.0, -2.0]]),
            "tail.0.1.weight": fg.tensor([[0.5], [-1.5]]),
        }
    )
    output, loss = asm(fg.tensor([[1.0, 2.0], [-1.0, 0.5]]), fg.tensor([3, 0]))
    # torch 2.14, float32
    np.testing.assert_allclose(output.tolist(), [-0.26110718, -2.8524346], rtol=1e-6)
    np.testing.assert_allclose(loss.item(), 1.5567709, rtol=1e-6)


def test_empty_batch_and_errors():
    asm = _model()
    empty = asm(fg.zeros(0, 8, dtype=fg.float64), fg.zeros(0, dtype=fg.int64))
    assert empty.output.shape == (0,) and np.isnan(empty.loss.item())  # torch: nan
    x = fg.zeros(6, 8, dtype=fg.float64)
    cases = [
        (x, fg.tensor([0, 1, 2]), "^Input and target should have the same size"),
        (x, fg.zeros(2, 3, dtype=fg.int64), "^0D or 1D target tensor expected"),
        (x[0], fg.tensor([0, 1, 2, 3, 4, 5, 6, 7]), r"^1D target tensor expects 2D input"),
        (x, fg.tensor([0, 1, 2, 3, 4, 10]), r"^Target values should be in \[0, 9\], but values "),
        (x, fg.tensor([0, 1, 2, 3, 4, -1]), r"in range \[-1, 4\] were found"),
        (fg.zeros(8, dtype=fg.float64)[None, :, None], fg.tensor([1]), "^1D target tensor"),
        (fg.zeros(1, 8, dtype=fg.float64), fg.tensor(1), "^0D target tensor expects 1D"),
    ]
    for inp, target, message in cases:
        with pytest.raises(RuntimeError, match=message):
            asm(inp, target)
    bad = "^cutoffs should be a sequence of unique, positive integers sorted"
    for cutoffs in ([3, 3], [0], [10], [5, 3], [2.5]):
        with pytest.raises(ValueError, match=bad):
            nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs)
    with pytest.raises(ValueError, match="^cutoffs should be a sequence of length larger than 0"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [])
