"""nn.ParameterDict against torch 2.14's: registration, conversion of tensors to
Parameters, order, dict methods, state_dict names, repr and errors."""

from __future__ import annotations

import copy
from collections import OrderedDict

import pytest

import fusegrad as fg
from fusegrad import nn

# ---------------------------------------------------------------- ParameterDict


def test_parameter_dict_registers_and_converts_tensors():
    given = nn.Parameter(fg.ones(3))
    pd = nn.ParameterDict({"b": fg.zeros(2), "a": given, "c": fg.ones(1)})
    # a plain dict is taken in sorted order, as torch's update takes it
    assert list(pd) == list(pd.keys()) == ["a", "b", "c"]
    assert [type(v).__name__ for v in pd.values()] == ["Parameter"] * 3
    assert pd["a"] is given and pd["b"].requires_grad and pd["b"].is_leaf
    assert [n for n, _ in pd.named_parameters()] == ["a", "b", "c"]
    assert list(pd.state_dict()) == ["a", "b", "c"]
    assert len(pd) == 3 and "a" in pd and "zz" not in pd
    assert [k for k, _ in pd.items()] == ["a", "b", "c"]
    assert list(reversed(pd)) == ["c", "b", "a"]


def test_parameter_dict_keeps_the_order_of_ordered_inputs():
    pairs = [("z", fg.zeros(1)), ("y", fg.zeros(2))]
    assert list(nn.ParameterDict(OrderedDict(pairs))) == ["z", "y"]
    assert list(nn.ParameterDict(pairs)) == ["z", "y"]
    pd = nn.ParameterDict({"a": fg.zeros(1)})
    pd.update(nn.ParameterDict(OrderedDict([("m", fg.zeros(1)), ("k", fg.zeros(1))])))
    assert list(pd) == ["a", "m", "k"]


def test_parameter_dict_in_a_module_names_its_entries_by_key():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            frozen = nn.Parameter(fg.zeros(1), requires_grad=False)
            self.p = nn.ParameterDict({"w": fg.ones(2), "v": frozen})

        def forward(self, x):
            return x * self.p["w"] + self.p["v"]

    m = Model()
    assert list(m.state_dict()) == ["p.v", "p.w"]
    assert [n for n, _ in m.named_parameters()] == ["p.v", "p.w"]
    assert not m.p["v"].requires_grad
    m.load_state_dict({"p.w": fg.full((2,), 3.0), "p.v": fg.full((1,), 4.0)})
    assert m.p["w"].tolist() == [3.0, 3.0] and m.p["v"].tolist() == [4.0]
    m(fg.tensor([1.0, 2.0])).sum().backward()
    assert m.p["w"].grad.tolist() == [1.0, 2.0] and m.p["v"].grad is None
    twin = copy.deepcopy(m)
    assert twin.p["w"] is not m.p["w"] and twin.p["w"].tolist() == [3.0, 3.0]
    assert list(twin.p) == ["v", "w"]


def test_parameter_dict_parameters_train_with_an_optimizer():
    pd = nn.ParameterDict({"w": fg.tensor([1.0, -2.0])})
    opt = fg.optim.SGD(pd.parameters(), lr=0.5)
    (pd["w"] * pd["w"]).sum().backward()  # gradient 2w
    opt.step()
    assert pd["w"].tolist() == [0.0, 0.0]


def test_parameter_dict_converts_a_non_leaf_into_a_leaf():
    y = fg.ones(2, requires_grad=True) * 2
    pd = nn.ParameterDict({"y": y})
    assert pd["y"].is_leaf and pd["y"].requires_grad and pd["y"].grad_fn is None
    assert pd["y"].tolist() == [2.0, 2.0]


@pytest.mark.cpu_device  # torch's CPU spelling: a cuda one names its device too
def test_parameter_dict_holds_other_objects_as_they_are():
    pd = nn.ParameterDict({"a": fg.zeros(2)})
    pd["s"], pd["t"], pd["n"] = 3, "x", None
    assert list(pd) == ["a", "s", "t", "n"]
    assert pd["s"] == 3 and pd["t"] == "x" and pd["n"] is None
    assert [n for n, _ in pd.named_parameters()] == ["a"]
    assert repr(pd) == (
        "ParameterDict(\n"
        "    (a): Parameter containing: [fusegrad.FloatTensor of size 2]\n"
        "    (s): Object of type: int\n"
        "    (t): Object of type: str\n"
        "    (n): Object of type: NoneType\n"
        ")"
    )


@pytest.mark.cpu_device  # torch's CPU spelling: a cuda one names its device too
def test_parameter_dict_repr_as_torch():
    # torch: "ParameterDict(  (a): Parameter containing: [torch.DoubleTensor of size 2x3])"
    assert repr(nn.ParameterDict({"a": fg.zeros(2, 3, dtype=fg.float64)})) == (
        "ParameterDict(  (a): Parameter containing: [fusegrad.DoubleTensor of size 2x3])"
    )
    assert repr(nn.ParameterDict()) == "ParameterDict()"


def test_parameter_dict_replacing_and_deleting_entries():
    pd = nn.ParameterDict({"a": fg.zeros(2), "b": fg.zeros(1)})
    pd["a"] = fg.ones(3)
    assert pd["a"].shape == (3,) and isinstance(pd["a"], nn.Parameter)
    assert list(pd) == ["a", "b"]
    del pd["a"]
    assert list(pd) == ["b"] and [n for n, _ in pd.named_parameters()] == ["b"]
    pd["b"] = None  # a parameter slot set to None, as torch allows
    assert list(pd) == ["b"] and list(pd.named_parameters()) == []
    with pytest.raises(KeyError, match="zz"):
        del pd["zz"]


def test_parameter_dict_dict_methods():
    pd = nn.ParameterDict({"a": fg.zeros(2), "b": fg.ones(1)})
    assert pd.get("zz") is None and pd.get("zz", 4) == 4 and pd.get("a") is pd["a"]
    assert pd.setdefault("a", fg.ones(5)).shape == (2,)
    created = pd.setdefault("c", fg.ones(5))
    assert isinstance(created, nn.Parameter) and pd["c"] is created
    assert pd.setdefault("n") is None and list(pd) == ["a", "b", "c", "n"]
    assert pd.popitem() == ("n", None) and list(pd) == ["a", "b", "c"]
    c = pd.pop("c")
    assert isinstance(c, nn.Parameter) and list(pd) == ["a", "b"]
    twin = pd.copy()
    assert type(twin) is nn.ParameterDict and twin["a"] is pd["a"] and list(twin) == ["a", "b"]
    made = pd.fromkeys(["x", "y"], fg.zeros(1))
    assert list(made) == ["x", "y"] and made["x"] is not made["y"]  # a Parameter each
    assert list(pd.fromkeys(["x"])) == ["x"] and pd.fromkeys(["x"])["x"] is None
    shared = nn.Parameter(fg.zeros(1))
    both = pd.fromkeys(["x", "y"], shared)
    assert both["x"] is shared and both["y"] is shared
    assert [n for n, _ in both.named_parameters()] == ["x"]  # a shared parameter once
    merged = pd | nn.ParameterDict({"z": fg.zeros(1)})
    assert list(merged) == ["a", "b", "z"] and list(pd) == ["a", "b"]
    as_dict = {"r": fg.zeros(1)} | pd
    assert type(as_dict) is dict and list(as_dict) == ["r", "a", "b"]
    pd |= {"q": fg.zeros(1)}
    assert list(pd) == ["a", "b", "q"]
    pd.clear()
    assert list(pd) == [] and len(pd) == 0 and list(pd.named_parameters()) == []
    with pytest.raises(KeyError, match="dictionary is empty"):
        pd.popitem()


@pytest.mark.parametrize(
    "action, error, message",
    [
        (lambda pd: pd[1], TypeError, "not a string \\(type is 'int'\\)"),
        (lambda pd: pd.__setitem__(1, fg.zeros(1)), TypeError, "not a string"),
        (lambda pd: pd["nope"], AttributeError, "'ParameterDict' object has no attribute 'nope'"),
        (lambda pd: pd.pop("nope"), AttributeError, "no attribute 'nope'"),
        (
            lambda pd: pd.update(5),
            TypeError,
            "ParametersDict.update should be called with an iterable of key/value pairs, "
            "but got int",
        ),
        (lambda pd: pd.update([1]), TypeError, "element #0 should be Iterable"),
        (lambda pd: pd.update([(1, 2, 3)]), ValueError, "element #0 has length 3; 2 is required"),
        (lambda pd: pd.update(["ab"]), TypeError, "cannot assign 'str' as parameter 'a'"),
        (lambda pd: pd(1), RuntimeError, "ParameterDict should not be called."),
        (lambda pd: pd.__setitem__("keys", fg.zeros(1)), KeyError, "attribute 'keys' already"),
        (lambda pd: pd.__setitem__("x.y", fg.zeros(1)), KeyError, "parameter name can.*contain"),
        (lambda pd: pd.__setitem__("", fg.zeros(1)), KeyError, "be empty string"),
        (lambda pd: pd.__setitem__("i", fg.zeros(2, dtype=fg.int64)), RuntimeError, "float"),
    ],
)
def test_parameter_dict_errors_as_torch(action, error, message):
    pd = nn.ParameterDict({"a": fg.zeros(2), "b": fg.ones(1)})
    with pytest.raises(error, match=message):
        action(pd)
