"""functional_call (torch.func's, fg.func.functional_call; and the deprecated
nn.utils.stateless.functional_call): the module called with tensors standing in for its
parameters and buffers, gradients to those tensors, its own restored, tied weights, the
write-back of reassigned buffers, and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn.utils import parametrize as P


class Tied(nn.Module):
    """Two linear layers sharing one weight, and a counter reassigned by each call."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2, bias=False)
        self.b = nn.Linear(2, 2, bias=False)
        self.b.weight = self.a.weight
        self.register_buffer("count", fg.zeros(()))

    def forward(self, x):
        self.count = self.count + 1
        return self.b(self.a(x))


def test_the_call_reads_the_given_tensors_and_restores_the_modules():
    lin = nn.Linear(2, 1)
    weight, bias = lin.weight, lin.bias
    w = fg.tensor([[1.0, 2.0]], requires_grad=True)
    y = fg.func.functional_call(
        lin, {"weight": w, "bias": fg.tensor([0.5])}, fg.tensor([[1.0, 1.0]])
    )
    assert y.tolist() == [[3.5]]
    assert lin.weight is weight and lin.bias is bias and "weight" in lin._parameters
    y.sum().backward()
    assert w.grad.tolist() == [[1.0, 1.0]] and lin.weight.grad is None
    # a partial dict: the rest is the module's own
    y = fg.func.functional_call(lin, {"bias": fg.tensor([0.0])}, (fg.tensor([[1.0, 0.0]]),))
    np.testing.assert_allclose(y.numpy(), [[weight.numpy()[0, 0]]])


def test_kwargs_and_a_sequence_of_dicts():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = nn.Parameter(fg.ones(1))
            self.register_buffer("shift", fg.zeros(1))

        def forward(self, x, *, times=1.0):
            return x * self.s * times + self.shift

    m = Scale()
    y = fg.func.functional_call(
        m, ({"s": fg.tensor([2.0])}, {"shift": fg.tensor([1.0])}), fg.ones(1), {"times": 3.0}
    )
    assert y.tolist() == [7.0]
    with pytest.raises(ValueError, match=r"\['s'\] appeared in multiple dictionaries"):
        fg.func.functional_call(m, ({"s": fg.ones(1)}, {"s": fg.ones(1)}), fg.ones(1))
    with pytest.raises(ValueError, match="Expected all elements of parameter_and_buffer_dicts"):
        fg.func.functional_call(m, ({"s": fg.ones(1)}, 3), fg.ones(1))
    with pytest.raises(ValueError, match="to be a dict, or a list/tuple of dicts"):
        fg.func.functional_call(m, 3, fg.ones(1))


def test_tied_weights_and_buffer_write_back():
    m = Tied()
    x = fg.ones(1, 2)
    given = {"a.weight": fg.eye(2), "count": fg.zeros(())}
    assert fg.func.functional_call(m, given, x).tolist() == [[1.0, 1.0]]  # both layers read eye
    assert given["count"].item() == 1.0 and m.count.item() == 0.0  # the reassigned buffer
    assert m.b.weight is m.a.weight
    untied = fg.func.functional_call(m, {"a.weight": fg.eye(2)}, x, tie_weights=False)
    np.testing.assert_allclose(untied.numpy(), m.b(x).numpy())
    with pytest.raises(ValueError, match=r"multiple values for keys \['a.weight', 'b.weight'\]"):
        fg.func.functional_call(m, {"a.weight": fg.eye(2), "b.weight": 2 * fg.eye(2)}, x)
    # the same tensor under both names is fine
    same = fg.eye(2)
    assert fg.func.functional_call(m, {"a.weight": same, "b.weight": same}, x).tolist() == [
        [1.0, 1.0]
    ]


def test_strict_names_missing_and_unexpected_keys():
    m = Tied()
    with pytest.raises(RuntimeError) as e:
        fg.func.functional_call(
            m, {"a.weight": fg.eye(2), "nope": fg.eye(2)}, fg.ones(1, 2), strict=True
        )
    assert str(e.value) == (
        "Error(s) in reparametrizing for Tied:\n"
        "\tUnexpected key(s): 'nope'.\n\tMissing key(s): 'count'."
    )
    full = {"a.weight": fg.eye(2), "count": fg.zeros(())}
    assert fg.func.functional_call(m, full, fg.ones(1, 2), strict=True).tolist() == [[1.0, 1.0]]


def test_a_parametrization_reads_a_given_original():
    class Double(nn.Module):
        def forward(self, X):
            return 2 * X

    m = P.register_parametrization(nn.Linear(2, 1, bias=False), "weight", Double())
    given = {"parametrizations.weight.original": fg.tensor([[1.0, 1.0]])}
    assert fg.func.functional_call(m, given, fg.ones(1, 2)).tolist() == [[4.0]]


def test_the_module_is_restored_when_the_call_raises():
    class Fails(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(fg.ones(1))

        def forward(self, x):
            raise ValueError("no")

    m = Fails()
    w = m.w
    with pytest.raises(ValueError, match="no"):
        fg.func.functional_call(m, {"w": fg.zeros(1)}, fg.ones(1))
    assert m.w is w


def test_stateless_functional_call_is_deprecated():
    lin = nn.Linear(1, 1, bias=False)
    with pytest.warns(FutureWarning, match="torch.func.functional_call"):
        y = nn.utils.stateless.functional_call(lin, {"weight": fg.ones(1, 1)}, fg.ones(1, 1))
    assert y.tolist() == [[1.0]]
