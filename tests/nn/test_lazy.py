"""nn.LazyLinear and nn.UninitializedParameter against torch 2.14's behaviour: in_features
inferred at the first forward, the module a Linear after it, the parameters the same
objects (an optimizer built before works), state dicts, copies, dtypes and errors."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn


def test_before_the_first_forward():
    m = nn.LazyLinear(3)
    assert repr(m) == "LazyLinear(in_features=0, out_features=3, bias=True)"
    assert type(m) is nn.LazyLinear and isinstance(m, nn.Linear) and m.in_features == 0
    assert type(m.weight) is nn.UninitializedParameter and isinstance(m.weight, nn.Parameter)
    assert repr(m.weight) == "<UninitializedParameter>"
    assert m.has_uninitialized_params() and m.weight.requires_grad
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    assert list(m.state_dict()) == ["weight", "bias"]
    m.reset_parameters()  # nothing to initialise yet, as torch's
    assert m.has_uninitialized_params()


def test_the_first_forward_infers_in_features_and_makes_a_linear():
    fg.manual_seed(0)
    m = nn.LazyLinear(3)
    weight, bias = m.weight, m.bias
    y = m(fg.ones(5, 4))
    assert y.shape == (5, 3)
    assert type(m) is nn.Linear and repr(m) == "Linear(in_features=4, out_features=3, bias=True)"
    assert m.weight is weight and m.bias is bias  # the same objects, now plain Parameters
    assert type(weight) is nn.Parameter and type(bias) is nn.Parameter
    assert weight.shape == (3, 4) and bias.shape == (3,) and m.in_features == 4
    assert not m.__dict__.get("_hooks")
    # torch's Linear init: U(-1/sqrt(in), 1/sqrt(in)) for both
    bound = 1 / math.sqrt(4)
    for p in (weight, bias):
        values = p.numpy()
        assert np.all(np.abs(values) <= bound) and len(np.unique(values)) == values.size
    np.testing.assert_allclose(y.numpy(), np.tile(weight.numpy().sum(1) + bias.numpy(), (5, 1)))
    # torch: "mat1 and mat2 shapes cannot be multiplied (5x6 and 4x3)"
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        m(fg.ones(5, 6))


def test_leading_axes_no_bias_dtype_and_empty_inputs():
    m = nn.LazyLinear(2, bias=False)
    assert repr(m) == "LazyLinear(in_features=0, out_features=2, bias=False)"
    assert m(fg.ones(2, 7, 3)).shape == (2, 7, 2) and m.bias is None
    assert repr(m) == "Linear(in_features=3, out_features=2, bias=False)"
    m = nn.LazyLinear(2, dtype=fg.float64)
    assert m(fg.ones(1, 3, dtype=fg.float64)).dtype == fg.float64
    assert m.weight.dtype == fg.float64
    m = nn.LazyLinear(2)
    m.to(fg.float64)  # before the first forward: the parameters get the dtype, as torch's
    m(fg.ones(1, 2, dtype=fg.float64))
    assert m.weight.dtype == fg.float64
    m = nn.LazyLinear(2)
    assert m(fg.zeros(4, 0)).shape == (4, 2)
    assert repr(m) == "Linear(in_features=0, out_features=2, bias=True)"


def test_dtype_mismatch_still_makes_the_linear_as_torch():
    m = nn.LazyLinear(2)
    # torch: RuntimeError "mat1 and mat2 must have the same dtype, but got Double and
    # Float", after which the module is Linear(in_features=3, ...)
    with pytest.raises(RuntimeError, match="same dtype"):
        m(fg.ones(1, 3, dtype=fg.float64))
    assert repr(m) == "Linear(in_features=3, out_features=2, bias=True)"


def test_a_0d_input_raises_an_index_error_at_the_users_line():
    m = nn.LazyLinear(2)
    with pytest.raises(IndexError, match="0-d input") as info:  # torch: IndexError
        m(fg.ones(()))
    assert "test_lazy.py" in str(info.value)
    assert m.has_uninitialized_params()


@pytest.mark.parametrize("make", [fg.optim.SGD, fg.optim.Adam])
def test_an_optimizer_built_before_the_first_forward_updates_the_layer(make):
    m = nn.LazyLinear(2)
    opt = make(m.parameters(), lr=0.1)
    m(fg.ones(1, 3)).sum().backward()
    before = m.weight.numpy().copy()
    opt.step()
    assert opt.param_groups[0]["params"][0] is m.weight
    # d(sum)/dW = 1 everywhere: SGD and Adam's first step both move each weight by -0.1
    np.testing.assert_allclose(m.weight.numpy() - before, -0.1, rtol=1e-5)
    opt.zero_grad()
    m(fg.ones(4, 3)).pow(2).sum().backward()
    opt.step()
    assert m.weight.shape == (2, 3)


def test_sequential_of_lazy_layers():
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.LazyLinear(1))
    assert model(fg.ones(2, 3)).shape == (2, 1)
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Linear(in_features=3, out_features=4, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=4, out_features=1, bias=True)\n"
        ")"
    )
    assert [n for n, _ in model.named_parameters()] == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    ]


def test_load_state_dict_gives_the_checkpoints_shapes():
    source = nn.Sequential(nn.Linear(7, 2))
    target = nn.Sequential(nn.LazyLinear(2))
    target.load_state_dict(source.state_dict())
    # torch's stays a LazyLinear with in_features=0 until its first forward
    assert repr(target[0]) == "Linear(in_features=7, out_features=2, bias=True)"
    np.testing.assert_array_equal(target[0].weight.numpy(), source[0].weight.numpy())
    np.testing.assert_array_equal(target[0].bias.numpy(), source[0].bias.numpy())
    x = fg.ones(3, 7)
    np.testing.assert_allclose(target(x).numpy(), source(x).numpy())


def test_load_state_dict_of_another_out_features_is_refused():
    # torch 2.14 takes a (3, 7) weight into LazyLinear(2) without a word; fusegrad refuses
    m = nn.LazyLinear(2)
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        m.load_state_dict(nn.Linear(7, 3).state_dict())
    assert m.has_uninitialized_params()


def test_copies_before_and_after_the_first_forward():
    m = nn.LazyLinear(3, dtype=fg.float64)
    twin = copy.deepcopy(m)
    assert type(twin.weight) is nn.UninitializedParameter and twin.weight is not m.weight
    assert twin.weight.dtype == fg.float64
    again = pickle.loads(pickle.dumps(m))
    assert type(again.weight) is nn.UninitializedParameter and again.weight.requires_grad
    assert twin(fg.ones(1, 5, dtype=fg.float64)).shape == (1, 3)
    assert repr(twin) == "Linear(in_features=5, out_features=3, bias=True)"
    assert m.has_uninitialized_params()  # the original is untouched
    after = copy.deepcopy(twin)
    np.testing.assert_array_equal(after.weight.numpy(), twin.weight.numpy())


def test_uninitialized_parameter_materialize():
    p = nn.UninitializedParameter(dtype=fg.float64)
    p.materialize((2, 3))
    assert type(p) is nn.Parameter and p.shape == (2, 3) and p.dtype == fg.float64
    assert p.requires_grad and p.is_leaf and p.tolist() == [[0.0] * 3] * 2
    q = nn.UninitializedParameter(requires_grad=False)
    q.materialize(4, dtype=fg.float64)
    assert q.shape == (4,) and q.dtype == fg.float64 and not q.requires_grad
