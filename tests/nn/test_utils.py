"""nn.utils: torch's names in one place (the submodules import by torch's dotted paths),
skip_init, and the memory-format conversions (the module unchanged: fusegrad keeps no
memory formats)."""

from __future__ import annotations

import importlib
import inspect

import pytest

import fusegrad as fg
from fusegrad import nn

# torch.nn.utils's __all__ (torch 2.13)
TORCH_UTILS = [
    "clip_grad_norm", "clip_grad_norm_", "clip_grads_with_norm_", "clip_grad_value_",
    "convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format",
    "fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
    "fuse_linear_bn_weights", "get_total_norm", "parameters_to_vector", "parametrizations",
    "parametrize", "remove_spectral_norm", "remove_weight_norm", "rnn", "skip_init",
    "spectral_norm", "stateless", "vector_to_parameters", "weight_norm",
]  # fmt: skip


def test_every_torch_name_is_here():
    assert sorted(nn.utils.__all__) == sorted(TORCH_UTILS)
    assert all(hasattr(nn.utils, name) for name in TORCH_UTILS)


@pytest.mark.parametrize("sub", ["parametrize", "parametrizations", "stateless", "rnn"])
def test_submodules_import_by_dotted_path(sub):
    module = importlib.import_module(f"fusegrad.nn.utils.{sub}")
    assert module is getattr(nn.utils, sub)


def test_skip_init_builds_the_module_on_the_device():
    lin = nn.utils.skip_init(nn.Linear, 3, 2, bias=False)
    assert type(lin) is nn.Linear and lin.weight.shape == (2, 3) and lin.bias is None
    assert lin.weight.device == fg.device("cpu")
    assert "device" in inspect.signature(nn.Conv2d).parameters


def test_skip_init_refusals_are_torchs():
    with pytest.raises(RuntimeError, match="Expected a Module; got"):
        nn.utils.skip_init(int)

    class NoDevice(nn.Module):
        def __init__(self, n):
            super().__init__()

    with pytest.raises(RuntimeError, match="Module must support a 'device' arg"):
        nn.utils.skip_init(NoDevice, 2)


def test_memory_format_conversions_return_the_module_unchanged():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Conv3d(2, 2, 1))
    before = [p.numpy().tolist() for p in model.parameters()]
    assert nn.utils.convert_conv2d_weight_memory_format(model, fg.channels_last) is model
    assert nn.utils.convert_conv3d_weight_memory_format(model, fg.channels_last_3d) is model
    assert [p.numpy().tolist() for p in model.parameters()] == before
