"""torch.utils.checkpoint (frontend/activation_checkpoint.py): a checkpointed block gives the
plain call's values and gradients; torch's warnings and errors around it are kept (no
`use_reentrant` given, keyword arguments with the reentrant variant, a reentrant block no
input of which requires grad gets no gradients); `checkpoint_sequential` composes the
modules in torch's segments; torch's module path resolves under the shim."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.utils.checkpoint import checkpoint, checkpoint_sequential


def _block():
    fg.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def _x():
    values = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    return fg.tensor(values, requires_grad=True)


def _grads(model, x, run):
    model.zero_grad()
    out = run(model, x)
    (out * out).sum().backward()
    return out.numpy(), x.grad.numpy(), [p.grad.numpy() for p in model.parameters()]


def _same(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    for g, h in zip(a[2], b[2]):
        np.testing.assert_array_equal(g, h)


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_block_has_the_plain_calls_values_and_gradients(reentrant):
    model = _block()
    want = _grads(model, _x(), lambda m, x: m(x))
    got = _grads(model, _x(), lambda m, x: checkpoint(m, x, use_reentrant=reentrant))
    _same(got, want)


def test_keyword_arguments_reach_the_function_unless_reentrant():
    x = _x()
    out = checkpoint(lambda t, scale=1.0: t * scale, x, use_reentrant=False, scale=3.0)
    np.testing.assert_array_equal(out.numpy(), x.numpy() * 3)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(lambda t, scale=1.0: t * scale, x, use_reentrant=True, scale=3.0)


def test_no_use_reentrant_warns_as_torch_does():
    with pytest.warns(UserWarning, match="the use_reentrant parameter should be passed"):
        checkpoint(lambda t: t + 1, _x())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checkpoint(lambda t: t + 1, _x(), use_reentrant=False)


def test_a_reentrant_block_whose_inputs_need_no_grad_gets_no_gradients():
    model = _block()
    x = fg.tensor(np.ones((2, 5), np.float32))
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        out = checkpoint(model, x, use_reentrant=True)
    assert not out.requires_grad  # (torch's outcome: the parameters get no gradient)
    # the non-reentrant variant records the parameters' gradients, as torch's does
    out = checkpoint(model, x, use_reentrant=False)
    assert out.requires_grad
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("segments", [1, 2, 3, 5])
def test_checkpoint_sequential_composes_the_modules(segments):
    model = _block()
    want = _grads(model, _x(), lambda m, x: m(x))
    run = lambda m, x: checkpoint_sequential(m, segments, x, use_reentrant=False)  # noqa: E731
    _same(_grads(model, _x(), run), want)
    listed = lambda m, x: checkpoint_sequential(list(m), segments, x, use_reentrant=False)  # noqa: E731
    _same(_grads(model, _x(), listed), want)


def test_more_segments_than_modules_is_refused():
    with pytest.raises(ValueError, match="6 segments of 5 functions"):
        checkpoint_sequential(_block(), 6, _x(), use_reentrant=False)


def test_torchs_module_path_resolves_under_the_shim():
    from fusegrad.torch_shim import TorchShim

    module = TorchShim().module("torch.utils.checkpoint")
    assert module.checkpoint is checkpoint
    assert module.checkpoint_sequential is checkpoint_sequential
