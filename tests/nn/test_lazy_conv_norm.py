"""nn.LazyConv*/LazyConvTranspose*, nn.LazyBatchNorm*/LazyInstanceNorm* and
nn.UninitializedBuffer against torch 2.14's behaviour: the size inferred at the first
forward, the module the concrete class after it, the parameters and buffers the same
objects, reprs, state dicts, copies and errors."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

# (lazy module, its repr before, input, output shape, repr after): torch 2.14's
CONVS = [
    (
        lambda: nn.LazyConv1d(4, 3),
        "LazyConv1d(0, 4, kernel_size=(3,), stride=(1,))",
        (2, 3, 6),
        (2, 4, 4),
        "Conv1d(3, 4, kernel_size=(3,), stride=(1,))",
    ),
    (
        lambda: nn.LazyConv2d(4, 3, stride=2, bias=False),
        "LazyConv2d(0, 4, kernel_size=(3, 3), stride=(2, 2), bias=False)",
        (3, 5, 5),
        (4, 2, 2),
        "Conv2d(3, 4, kernel_size=(3, 3), stride=(2, 2), bias=False)",
    ),
    (
        lambda: nn.LazyConv3d(4, 2, groups=2),
        "LazyConv3d(0, 4, kernel_size=(2, 2, 2), stride=(1, 1, 1), groups=2)",
        (1, 6, 3, 3, 3),
        (1, 4, 2, 2, 2),
        "Conv3d(6, 4, kernel_size=(2, 2, 2), stride=(1, 1, 1), groups=2)",
    ),
    (
        lambda: nn.LazyConvTranspose1d(4, 3),
        "LazyConvTranspose1d(0, 4, kernel_size=(3,), stride=(1,))",
        (2, 3, 6),
        (2, 4, 8),
        "ConvTranspose1d(3, 4, kernel_size=(3,), stride=(1,))",
    ),
    (
        lambda: nn.LazyConvTranspose2d(4, 3, groups=2),
        "LazyConvTranspose2d(0, 4, kernel_size=(3, 3), stride=(1, 1), groups=2)",
        (1, 2, 2, 2),
        (1, 4, 4, 4),
        "ConvTranspose2d(2, 4, kernel_size=(3, 3), stride=(1, 1), groups=2)",
    ),
    (
        lambda: nn.LazyConvTranspose3d(2, 2),
        "LazyConvTranspose3d(0, 2, kernel_size=(2, 2, 2), stride=(1, 1, 1))",
        (3, 2, 2, 2),
        (2, 3, 3, 3),
        "ConvTranspose3d(3, 2, kernel_size=(2, 2, 2), stride=(1, 1, 1))",
    ),
]


@pytest.mark.parametrize("make, before, shape, out, after", CONVS)
def test_lazy_convolutions_take_in_channels_from_the_first_input(make, before, shape, out, after):
    fg.manual_seed(0)
    m = make()
    assert repr(m) == before and m.in_channels == 0 and m.has_uninitialized_params()
    assert type(m.weight) is nn.UninitializedParameter
    concrete = type(m).cls_to_become
    assert isinstance(m, concrete) and type(m) is not concrete
    names = ["weight", "bias"] if m.bias is not None else ["weight"]
    assert [n for n, _ in m.named_parameters()] == names and list(m.state_dict()) == names
    weight = m.weight
    x = fg.randn(*shape)
    y = m(x)
    assert y.shape == out and repr(m) == after and type(m) is concrete
    assert m.weight is weight and type(weight) is nn.Parameter
    # the concrete layer's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = weight[1] * k
    fan_in = m.weight.shape[1] * math.prod(m.kernel_size)
    assert np.all(np.abs(m.weight.numpy()) <= 1 / math.sqrt(fan_in))
    assert len(np.unique(m.weight.numpy())) == m.weight.numel()
    # the same values as the concrete layer with these parameters
    twin = concrete(
        m.in_channels, m.out_channels, m.kernel_size, m.stride, groups=m.groups,
        bias=m.bias is not None,
    )  # fmt: skip
    twin.load_state_dict(m.state_dict())
    np.testing.assert_allclose(y.numpy(), twin(x).numpy(), rtol=1e-6)


def test_lazy_conv_weight_shapes_and_padding_mode():
    m = nn.LazyConv2d(6, (1, 2), groups=3, padding=1, padding_mode="reflect")
    assert repr(m) == (
        "LazyConv2d(0, 6, kernel_size=(1, 2), stride=(1, 1), padding=(1, 1), groups=3, "
        "padding_mode=reflect)"
    )
    m(fg.ones(1, 9, 4, 4))
    assert m.weight.shape == (6, 3, 1, 2) and m.bias.shape == (6,)
    t = nn.LazyConvTranspose1d(6, 2, groups=3)
    t(fg.ones(1, 9, 4))
    assert t.weight.shape == (9, 2, 2)
    t = nn.LazyConvTranspose1d(4, 3, stride=2)
    assert t(fg.ones(2, 3, 6), output_size=[14]).shape == (2, 4, 14)


def test_lazy_conv_errors_leave_it_lazy():
    m = nn.LazyConv2d(4, 3, groups=2)
    with pytest.raises(ValueError, match="^in_channels must be divisible by groups$"):
        m(fg.ones(1, 3, 5, 5))
    assert m.has_uninitialized_params() and type(m) is nn.LazyConv2d
    m = nn.LazyConv2d(4, 3)
    # torch: RuntimeError "Expected 3D (unbatched) or 4D (batched) input to LazyConv2d, but
    # got input of size: torch.Size([3, 5])"
    with pytest.raises(RuntimeError, match=r"Expected 3D \(unbatched\) or 4D \(batched\)"):
        m(fg.ones(3, 5))
    assert m.has_uninitialized_params()
    assert m(fg.ones(2, 5, 5)).shape == (4, 3, 3)


def test_lazy_conv_optimizer_built_before_and_state_dicts():
    m = nn.LazyConv1d(2, 1, bias=False)
    opt = fg.optim.SGD(m.parameters(), lr=0.1)
    m(fg.ones(1, 3, 4)).sum().backward()
    before = m.weight.numpy().copy()
    opt.step()
    # d(sum)/dw = 4 (the length) for each weight
    np.testing.assert_allclose(m.weight.numpy() - before, -0.4, rtol=1e-5)
    source = nn.Conv2d(5, 4, 3)
    target = nn.LazyConv2d(4, 3)
    target.load_state_dict(source.state_dict())
    assert repr(target) == "Conv2d(5, 4, kernel_size=(3, 3), stride=(1, 1))"
    np.testing.assert_array_equal(target.weight.numpy(), source.weight.numpy())
    bad = nn.LazyConv2d(4, 3)
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        bad.load_state_dict(nn.Conv2d(5, 4, 2).state_dict())
    assert bad.has_uninitialized_params()
    transposed = nn.LazyConvTranspose2d(4, 3, groups=2)
    transposed.load_state_dict(nn.ConvTranspose2d(6, 4, 3, groups=2).state_dict())
    assert transposed.in_channels == 6 and transposed.weight.shape == (6, 2, 3, 3)


NORMS = [
    (nn.LazyBatchNorm1d, {}, (4, 3), "BatchNorm1d"),
    (nn.LazyBatchNorm1d, {}, (4, 3, 5), "BatchNorm1d"),
    (nn.LazyBatchNorm2d, {}, (2, 3, 4, 4), "BatchNorm2d"),
    (nn.LazyBatchNorm3d, {}, (2, 3, 2, 2, 2), "BatchNorm3d"),
    (nn.LazyInstanceNorm1d, {}, (2, 3, 5), "InstanceNorm1d"),
    (nn.LazyInstanceNorm2d, {}, (2, 3, 4, 4), "InstanceNorm2d"),
    (nn.LazyInstanceNorm3d, {}, (2, 3, 2, 2, 2), "InstanceNorm3d"),
]


@pytest.mark.parametrize("cls, kwargs, shape, concrete", NORMS)
def test_lazy_norms_take_num_features_from_the_first_input(cls, kwargs, shape, concrete):
    m = cls(**kwargs)
    tail = "eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)"
    assert repr(m) == f"{cls.__name__}(0, {tail}"
    assert [type(t).__name__ for _, t in m.named_buffers()] == [
        "UninitializedBuffer",
        "UninitializedBuffer",
        "Tensor",
    ]
    assert list(m.state_dict()) == [
        "weight",
        "bias",
        "running_mean",
        "running_var",
        "num_batches_tracked",
    ]
    mean = m.running_mean
    x = fg.randn(*shape)
    y = m(x)
    assert repr(m) == f"{concrete}(3, {tail}" and type(m) is getattr(nn, concrete)
    assert m.running_mean is mean and type(mean) is nn.Buffer and mean.shape == (3,)
    assert m.weight.tolist() == [1.0] * 3 and m.bias.tolist() == [0.0] * 3
    # (torch's instance norms leave the count alone)
    assert m.num_batches_tracked.item() == (1 if "Batch" in concrete else 0)
    # the concrete layer's values and running statistics
    twin = getattr(nn, concrete)(3, affine=True, track_running_stats=True)
    np.testing.assert_allclose(y.numpy(), twin(x).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.running_var.numpy(), twin.running_var.numpy(), rtol=1e-6)


def test_lazy_norm_options_and_unbatched_instance_norm():
    m = nn.LazyBatchNorm2d(affine=False)
    assert repr(m) == (
        "LazyBatchNorm2d(0, eps=1e-05, momentum=0.1, affine=False, bias=False, "
        "track_running_stats=True)"
    )
    assert list(m.state_dict()) == ["running_mean", "running_var", "num_batches_tracked"]
    m = nn.LazyBatchNorm3d(track_running_stats=False, bias=False)
    assert list(m.state_dict()) == ["weight"]
    m(fg.ones(2, 4, 1, 1, 1))
    assert m.weight.shape == (4,) and m.running_mean is None
    # an unbatched (C, L) input gives C (torch's lazy instance norm reads L and then fails)
    m = nn.LazyInstanceNorm1d()
    assert m(fg.randn(3, 5)).shape == (3, 5) and m.num_features == 3


def test_lazy_norm_errors():
    m = nn.LazyBatchNorm1d()
    with pytest.raises(IndexError, match="no dim 1"):  # torch: IndexError
        m(fg.ones(3))
    with pytest.raises(IndexError):
        nn.LazyInstanceNorm2d()(fg.ones(()))
    m = nn.LazyBatchNorm2d()
    with pytest.raises(ValueError, match=r"^expected 4D input \(got 3D input\)$"):
        m(fg.ones(2, 3, 4))
    assert m.has_uninitialized_params()


def test_lazy_norm_optimizer_load_state_dict_and_dtype():
    m = nn.LazyBatchNorm1d()
    opt = fg.optim.SGD(m.parameters(), lr=0.5)
    m(fg.tensor([[1.0, 2.0], [3.0, 6.0]])).pow(2).sum().backward()
    opt.step()
    # the normalized columns are +-1: d/dbias of sum((w z + b)^2) = 2 sum(z) = 0, and
    # d/dw = 2 sum(z^2) = 4 (to the eps)
    np.testing.assert_allclose(m.bias.numpy(), [0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(m.weight.numpy(), [-1.0, -1.0], atol=1e-4)
    source = nn.BatchNorm1d(5)
    source.running_mean.copy_(fg.arange(5.0))
    target = nn.LazyBatchNorm1d()
    target.load_state_dict(source.state_dict())
    assert repr(target).startswith("BatchNorm1d(5,")
    assert target.running_mean.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    m = nn.LazyBatchNorm1d(dtype=fg.float64)
    assert m(fg.ones(2, 3, dtype=fg.float64)).dtype == fg.float64
    assert m.running_var.dtype == fg.float64 and m.weight.dtype == fg.float64


def test_uninitialized_buffer():
    b = nn.UninitializedBuffer(persistent=False)
    assert repr(b) == "<UninitializedBuffer>" and not b.requires_grad
    assert isinstance(b, fg.Tensor) and b.persistent is False and b.dtype == fg.float32
    owner = nn.Module()
    owner.stats = b
    assert [n for n, _ in owner.named_buffers()] == ["stats"] and list(owner.state_dict()) == []
    twin = copy.deepcopy(b)
    assert type(twin) is nn.UninitializedBuffer and twin is not b and not twin.persistent
    again = pickle.loads(pickle.dumps(nn.UninitializedBuffer(dtype=fg.float64)))
    assert type(again) is nn.UninitializedBuffer and again.dtype == fg.float64
    b.materialize((2, 3))
    assert type(b) is nn.Buffer and b.shape == (2, 3) and b.tolist() == [[0.0] * 3] * 2
    assert owner.stats is b
    c = nn.UninitializedBuffer(requires_grad=True)
    c.materialize(4, dtype=fg.float64)
    assert c.shape == (4,) and c.dtype == fg.float64 and c.requires_grad
