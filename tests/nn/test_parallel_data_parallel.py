"""nn.DataParallel as torch 2.14's on a machine without several GPUs: it calls its
`.module` (state dict keys prefixed `module.`), ignores device_ids without CUDA, and
refuses several CUDA devices clearly."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn import parallel


def _no_cuda(monkeypatch):
    monkeypatch.setattr(fg.cuda, "is_available", lambda: False)


def test_without_cuda_it_calls_the_module(monkeypatch):
    _no_cuda(monkeypatch)
    inner = nn.Linear(2, 3)
    model = nn.DataParallel(inner, device_ids=[0, 1], output_device=1)
    assert model.module is inner and model.device_ids == [] and model.output_device is None
    assert repr(model) == (
        "DataParallel(\n  (module): Linear(in_features=2, out_features=3, bias=True)\n)"
    )
    assert list(model.state_dict()) == ["module.weight", "module.bias"]
    assert [n for n, _ in model.named_modules()] == ["", "module"]
    assert list(model.parameters()) == [inner.weight, inner.bias]
    x = fg.randn(4, 2)
    np.testing.assert_array_equal(model(x).numpy(), inner(x).numpy())
    assert model(input=fg.ones(1, 2)).shape == (1, 3)  # keywords pass through
    model.eval()
    assert not inner.training


def test_a_checkpoint_round_trip_and_training_through_it(monkeypatch):
    _no_cuda(monkeypatch)
    model = nn.DataParallel(nn.Linear(2, 1, bias=False))
    model.module.weight.data = fg.tensor([[1.0, 2.0]])
    opt = fg.optim.SGD(model.parameters(), lr=0.5)
    model(fg.ones(3, 2)).sum().backward()
    opt.step()
    assert model.module.weight.tolist() == [[-0.5, 0.5]]
    twin = nn.DataParallel(nn.Linear(2, 1, bias=False))
    twin.load_state_dict(model.state_dict())
    assert twin.module.weight.tolist() == [[-0.5, 0.5]]


def test_several_cuda_devices_are_refused(monkeypatch):
    monkeypatch.setattr(fg.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fg.cuda, "device_count", lambda: 2)
    with pytest.raises(RuntimeError, match="split batches across 2 CUDA devices"):
        nn.DataParallel(nn.Linear(2, 3))
    with pytest.raises(RuntimeError, match=r"\[0, 1\]"):
        nn.DataParallel(nn.Linear(2, 3), device_ids=["cuda:0", 1])
    one = nn.DataParallel(nn.Linear(2, 3), device_ids=[1])
    assert one.device_ids == [1] and one.output_device == 1
    # torch: "module must have its parameters and buffers on device cuda:1 (device_ids[0])
    # but found one of them on device: cpu"
    with pytest.raises(RuntimeError, match="on device cuda:1 .device_ids.0.. but found"):
        one(fg.ones(1, 2))


def test_moved_reaches_tensors_in_containers():
    x = fg.ones(2)
    moved = parallel._moved((x, [x, 3], {"a": x}), "cpu")
    assert isinstance(moved, tuple) and isinstance(moved[1], list) and moved[1][1] == 3
    assert moved[2]["a"].tolist() == [1.0, 1.0]
