"""nn.utils.parametrize: torch's register_parametrization / remove_parametrizations,
the injected class and property, the originals' names in the state dict, gradients to
the originals, right inverses, caching, and torch's errors."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn.utils import parametrize as P


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(0, 1)

    def right_inverse(self, A):
        return A.triu()


class Double(nn.Module):
    def forward(self, X):
        return 2 * X

    def right_inverse(self, A):
        return A / 2


class Plain(nn.Module):
    """No right_inverse: the original is the tensor as it was."""

    def forward(self, X):
        return X + 1


class RankOne(nn.Module):
    """Two originals: x y^T from a vector pair."""

    def forward(self, x, y):
        return x.unsqueeze(-1) * y.unsqueeze(-2)

    def right_inverse(self, Z):
        return Z[:, 0], fg.ones(Z.shape[1], dtype=Z.dtype)


def test_register_moves_the_tensor_under_parametrizations_with_torchs_keys():
    m = nn.Linear(3, 3)
    w, b = m.weight, m.bias
    assert P.register_parametrization(m, "weight", Symmetric()) is m
    assert type(m).__name__ == "ParametrizedLinear"
    assert isinstance(m, nn.Linear) and P.type_before_parametrizations(m) is nn.Linear
    assert P.is_parametrized(m) and P.is_parametrized(m, "weight")
    assert not P.is_parametrized(m, "bias") and not P.is_parametrized(nn.Linear(2, 2))
    assert list(m.state_dict()) == ["bias", "parametrizations.weight.original"]
    assert [n for n, _ in m.named_parameters()] == ["bias", "parametrizations.weight.original"]
    # the same Parameter object: an optimizer built before still updates it
    assert m.parametrizations.weight.original is w and m.bias is b
    assert "weight" not in m._parameters
    # only this module's class changed
    assert type(nn.Linear(2, 2)) is nn.Linear
    np.testing.assert_allclose(m.weight.numpy(), m.weight.numpy().T)
    np.testing.assert_allclose(m.weight.numpy(), Symmetric()(w).numpy())


def test_repr_shows_the_parametrizations():
    m = P.register_parametrization(nn.Linear(2, 2), "weight", Double())
    assert repr(m) == (
        "ParametrizedLinear(\n"
        "  in_features=2, out_features=2, bias=True\n"
        "  (parametrizations): ModuleDict(\n"
        "    (weight): ParametrizationList(\n"
        "      (0): Double()\n"
        "    )\n"
        "  )\n"
        ")"
    )


def test_right_inverse_sets_the_original_at_registration_and_on_assignment():
    m = nn.Linear(2, 2)
    w = m.weight.numpy().copy()
    P.register_parametrization(m, "weight", Double())
    np.testing.assert_allclose(m.parametrizations.weight.original.numpy(), w / 2, rtol=1e-6)
    np.testing.assert_allclose(m.weight.numpy(), w, rtol=1e-6)  # forward(right_inverse(w))
    target = fg.tensor([[1.0, 2.0], [3.0, 4.0]])
    m.weight = target
    assert m.parametrizations.weight.original.tolist() == [[0.5, 1.0], [1.5, 2.0]]
    assert m.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_a_parametrization_without_right_inverse_keeps_the_value_and_refuses_assignment():
    m = nn.Linear(2, 2)
    w = m.weight.numpy().copy()
    P.register_parametrization(m, "weight", Plain())
    np.testing.assert_array_equal(m.parametrizations.weight.original.numpy(), w)
    with pytest.raises(
        RuntimeError, match="parametrization Plain does not implement right_inverse"
    ):
        m.weight = fg.zeros(2, 2)


def test_gradients_flow_to_the_original_and_an_earlier_optimizer_updates_it():
    m = nn.Linear(3, 2, bias=False)
    w0 = m.weight.numpy().copy()
    opt = fg.optim.SGD(m.parameters(), lr=0.1)  # built before the registration
    P.register_parametrization(m, "weight", Plain())
    x = fg.tensor([[1.0, 2.0, 3.0]])
    m(x).sum().backward()
    original = m.parametrizations.weight.original
    assert original.grad.tolist() == [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    opt.step()
    np.testing.assert_allclose(original.numpy(), w0 - 0.1 * np.array([[1, 2, 3]] * 2), rtol=1e-6)
    # each read is computed anew from the updated original
    np.testing.assert_allclose(m.weight.numpy(), original.numpy() + 1, rtol=1e-6)


def test_gradient_of_a_symmetric_parametrization():
    m = nn.Linear(2, 2, bias=False)
    P.register_parametrization(m, "weight", Symmetric())
    (m.weight * fg.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    # the upper triangle reads twice off the diagonal, the lower not at all
    assert m.parametrizations.weight.original.grad.tolist() == [[1.0, 5.0], [0.0, 4.0]]


def test_several_originals_are_original0_original1():
    m = nn.Linear(2, 3, bias=False)
    P.register_parametrization(m, "weight", RankOne())
    assert list(m.state_dict()) == [
        "parametrizations.weight.original0",
        "parametrizations.weight.original1",
    ]
    entry = m.parametrizations.weight
    assert not entry.is_tensor and entry.ntensors == 2
    assert isinstance(entry.original0, nn.Parameter) and entry.original1.tolist() == [1.0, 1.0]
    m.weight = fg.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    assert m.weight.tolist() == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
    m.weight.sum().backward()
    assert entry.original0.grad.tolist() == [2.0, 2.0, 2.0]
    assert entry.original1.grad.tolist() == [6.0, 6.0]
    with pytest.raises(ValueError, match="Cannot leave unparametrized"):
        P.remove_parametrizations(m, "weight", leave_parametrized=False)
    P.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and isinstance(m.weight, nn.Parameter)
    assert m.weight.tolist() == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]


def test_parametrizations_stack_in_registration_order():
    m = nn.Linear(2, 2, bias=False)
    w = m.weight.numpy().copy()
    P.register_parametrization(m, "weight", Plain())
    P.register_parametrization(m, "weight", Double())
    assert len(m.parametrizations.weight) == 2
    # original = w (Plain has no right inverse); read: Double(Plain(original))
    np.testing.assert_allclose(m.weight.numpy(), 2 * (w + 1), rtol=1e-6)


def test_remove_leaves_the_parametrized_value_in_the_same_parameter():
    m = nn.Linear(2, 2)
    original = m.weight
    P.register_parametrization(m, "weight", Double())
    m.weight = fg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert P.remove_parametrizations(m, "weight") is m
    assert type(m) is nn.Linear and not hasattr(m, "parametrizations")
    assert m.weight is original and m.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    # re-registered at the end, as torch's
    assert list(m.state_dict()) == ["bias", "weight"]


def test_remove_without_leaving_parametrized_keeps_the_original():
    m = nn.Linear(2, 2)
    P.register_parametrization(m, "weight", Double())
    m.weight = fg.tensor([[2.0, 2.0], [2.0, 2.0]])
    P.remove_parametrizations(m, "weight", leave_parametrized=False)
    assert m.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_two_parametrized_tensors_share_the_class_until_both_are_removed():
    m = nn.Linear(2, 2)
    P.register_parametrization(m, "weight", Double())
    P.register_parametrization(m, "bias", Double())
    cls = type(m)
    P.remove_parametrizations(m, "weight")
    assert type(m) is cls and P.is_parametrized(m, "bias") and not P.is_parametrized(m, "weight")
    P.remove_parametrizations(m, "bias")
    assert type(m) is nn.Linear


def test_a_buffer_can_be_parametrized():
    m = nn.BatchNorm1d(2)
    P.register_parametrization(m, "running_var", Double())
    assert "parametrizations.running_var.original" in m.state_dict()
    assert m.running_var.tolist() == [1.0, 1.0]
    assert m.parametrizations.running_var.original.tolist() == [0.5, 0.5]
    assert [n for n, _ in m.named_buffers()][-1] == "parametrizations.running_var.original"


def test_state_dict_round_trip():
    a = P.register_parametrization(nn.Linear(2, 2), "weight", Double())
    b = P.register_parametrization(nn.Linear(2, 2), "weight", Double())
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(b.weight.numpy(), a.weight.numpy())


def test_cached_returns_one_tensor_inside():
    m = P.register_parametrization(nn.Linear(2, 2), "weight", Double())
    with P.cached():
        first = m.weight
        assert m.weight is first
        with P.cached():  # nested: the same cache
            assert m.weight is first
        assert m.weight is first
    assert m.weight is not first


def test_training_mode_follows_the_module():
    m = nn.Linear(2, 2).eval()
    p = Double()
    P.register_parametrization(m, "weight", p)
    assert not p.training
    m.train()
    assert p.training


def test_deepcopy_copies_the_parametrization_and_pickle_refuses():
    m = P.register_parametrization(nn.Linear(2, 2), "weight", Double())
    c = copy.deepcopy(m)
    assert type(c) is type(m)
    assert c.parametrizations.weight.original is not m.parametrizations.weight.original
    np.testing.assert_array_equal(c.weight.numpy(), m.weight.numpy())
    with pytest.raises(RuntimeError, match="only supported through state_dict"):
        pickle.dumps(m)


def test_transfer_shares_the_originals():
    a = P.register_parametrization(nn.Linear(2, 2), "weight", Double())
    b = nn.Linear(2, 2)
    P.transfer_parametrizations_and_params(a, b)
    assert P.is_parametrized(b, "weight")
    assert b.parametrizations.weight.original is a.parametrizations.weight.original
    np.testing.assert_array_equal(b.weight.numpy(), a.weight.numpy())


def test_torchs_errors():
    m = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a parametrized"):
        P.register_parametrization(m, "nothing", Double())
    with pytest.raises(ValueError, match="does not have a parametrization on weight"):
        P.remove_parametrizations(m, "weight")

    class Widen(nn.Module):
        def forward(self, X):
            return fg.cat([X, X], 1)

    with pytest.raises(ValueError, match="may not change the shape"):
        P.register_parametrization(nn.Linear(2, 2), "weight", Widen())
    unsafe = P.register_parametrization(nn.Linear(2, 2), "weight", Widen(), unsafe=True)
    assert unsafe.weight.shape == (2, 4)

    class ToDouble(nn.Module):
        def forward(self, X):
            return X.double()

    with pytest.raises(ValueError, match="may not change the dtype"):
        P.register_parametrization(nn.Linear(2, 2), "weight", ToDouble())

    class NotATensor(nn.Module):
        def forward(self, X):
            return X

        def right_inverse(self, X):
            return 3

    with pytest.raises(ValueError, match="must return a Tensor or a Sequence"):
        P.register_parametrization(nn.Linear(2, 2), "weight", NotATensor())

    m = P.register_parametrization(nn.Linear(2, 2), "weight", Double())
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):
        m.weight = nn.Parameter(fg.zeros(2, 2))
    with pytest.raises(ValueError, match="may not change the shape"):
        P.register_parametrization(m, "weight", Widen())


def test_torchs_values_and_errors_where_torch_imports():
    torch = pytest.importorskip("torch")
    tP = torch.nn.utils.parametrize

    class TSym(torch.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(0, 1)

        def right_inverse(self, A):
            return A.triu()

    w = np.arange(9, dtype=np.float32).reshape(3, 3) / 7
    m, tm = nn.Linear(3, 3, bias=False), torch.nn.Linear(3, 3, bias=False)
    m.weight.data, tm.weight.data = fg.tensor(w), torch.tensor(w)
    P.register_parametrization(m, "weight", Symmetric())
    tP.register_parametrization(tm, "weight", TSym())
    assert list(m.state_dict()) == list(tm.state_dict())
    x = np.ones((2, 3), np.float32)
    (m(fg.tensor(x)) ** 2).sum().backward()
    (tm(torch.tensor(x)) ** 2).sum().backward()
    np.testing.assert_allclose(
        m.parametrizations.weight.original.grad.numpy(),
        tm.parametrizations.weight.original.grad.numpy(),
        rtol=1e-6,
    )
