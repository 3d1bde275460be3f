"""nn.SyncBatchNorm and SyncBatchNorm.convert_sync_batchnorm against torch 2.14: BatchNorm
over the batch in one process (values and running statistics), its errors, and a clear
refusal where several ranks would each normalize by their own statistics."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.distributed as dist
from fusegrad import nn


def test_one_process_is_batchnorm_over_any_number_of_dims():
    m = nn.SyncBatchNorm(3)
    assert repr(m) == (
        "SyncBatchNorm(3, eps=1e-05, momentum=0.1, affine=True, bias=True, "
        "track_running_stats=True)"
    )
    assert list(m.state_dict()) == [
        "weight",
        "bias",
        "running_mean",
        "running_var",
        "num_batches_tracked",
    ]
    for shape in [(4, 3), (2, 3, 4), (2, 3, 2, 2), (2, 3, 1, 2, 2)]:
        x = np.sin(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape)
        m = nn.SyncBatchNorm(3, dtype=fg.float64)
        y = m(fg.tensor(x)).numpy()
        axes = tuple(i for i in range(len(shape)) if i != 1)
        mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
        np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-10)
        n = x.size // 3
        np.testing.assert_allclose(m.running_mean.numpy(), 0.1 * mean.ravel(), rtol=1e-10)
        unbiased = var.ravel() * n / (n - 1)
        np.testing.assert_allclose(m.running_var.numpy(), 0.9 + 0.1 * unbiased, rtol=1e-10)
        assert m.num_batches_tracked.item() == 1
    m.eval()
    np.testing.assert_allclose(
        m(fg.tensor(x)).numpy(),
        (x - m.running_mean.numpy().reshape(1, 3, 1, 1, 1))
        / np.sqrt(m.running_var.numpy().reshape(1, 3, 1, 1, 1) + 1e-5),
        rtol=1e-10,
    )


def test_torchs_values_and_errors():
    m = nn.SyncBatchNorm(3)
    x = fg.arange(24.0).reshape(2, 3, 4).sin()
    m(x)
    # torch 2.14's running statistics for this input
    np.testing.assert_allclose(
        m.running_mean.numpy(), [0.0427047238, -0.0398570821, 0.0093999328], rtol=1e-6
    )
    np.testing.assert_allclose(
        m.running_var.numpy(), [0.9280640483, 0.9332105517, 0.9660507441], rtol=1e-6
    )
    with pytest.raises(ValueError, match=r"^expected at least 2D input \(got 1D input\)$"):
        m(fg.ones(3))
    with pytest.raises(ValueError, match="^SyncBatchNorm number of input channels should be"):
        m(fg.ones(2, 0, 3))


def test_several_ranks_in_training_are_refused(monkeypatch):
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    m = nn.SyncBatchNorm(3)
    with pytest.raises(NotImplementedError, match="across 2 ranks is not supported"):
        m(fg.ones(4, 3))
    assert m.num_batches_tracked.item() == 0
    m.eval()  # the running statistics: the same on every rank
    assert m(fg.ones(4, 3)).shape == (4, 3)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    assert nn.SyncBatchNorm(3)(fg.ones(4, 3)).shape == (4, 3)


def test_convert_sync_batchnorm_keeps_the_parameters_and_buffers():
    net = nn.Sequential(
        nn.Linear(2, 3),
        nn.BatchNorm1d(3),
        nn.Sequential(nn.BatchNorm2d(4, affine=False)),
        nn.InstanceNorm1d(3),
        nn.LazyBatchNorm1d(),
    )
    net.eval()
    weight, mean = net[1].weight, net[1].running_mean
    opt = fg.optim.SGD(net.parameters(), lr=0.1)
    out = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    assert out is net
    assert repr(net).splitlines()[2:5] == [
        "  (1): SyncBatchNorm(3, eps=1e-05, momentum=0.1, affine=True, bias=True, "
        "track_running_stats=True)",
        "  (2): Sequential(",
        "    (0): SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=False, bias=False, "
        "track_running_stats=True)",
    ]
    assert type(net[3]) is nn.InstanceNorm1d and type(net[4]) is nn.LazyBatchNorm1d
    assert net[1].weight is weight and net[1].running_mean is mean and not net[1].training
    assert opt.param_groups[0]["params"][2] is net[1].weight
    names = [n for n, _ in net.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias"]
    alone = nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm3d(2, momentum=None))
    assert type(alone) is nn.SyncBatchNorm and alone.momentum is None
