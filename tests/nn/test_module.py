"""Module, Parameter, containers, state_dict/save/load and init, with PyTorch's semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn import init


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(fg.ones(3))
        self.fc = nn.Linear(2, 3)
        self.register_buffer("running", fg.zeros(3))
        self.register_buffer("scratch", fg.zeros(1), persistent=False)

    def forward(self, x):
        return self.fc(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(Block(), nn.ReLU())
        self.head = nn.Linear(3, 1)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.head(self.drop(self.body(x)))


# ---------------------------------------------------------------- Parameter


def test_parameter_is_a_leaf_tensor_requiring_grad():
    p = nn.Parameter(fg.tensor([1.0, 2.0]) * 3)
    assert isinstance(p, fg.Tensor) and p.is_leaf and p.requires_grad
    np.testing.assert_array_equal(p.numpy(), [3.0, 6.0])
    frozen = nn.Parameter(fg.tensor([1.0]), requires_grad=False)
    assert not frozen.requires_grad
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [6.0, 12.0])
    assert repr(nn.Parameter(fg.tensor([1.0]))).startswith("Parameter containing:\ntensor(")


# ---------------------------------------------------------------- the module tree


def test_named_parameters_buffers_children_and_modules():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == [
        "body.0.scale",
        "body.0.fc.weight",
        "body.0.fc.bias",
        "head.weight",
        "head.bias",
    ]
    assert [n for n, _ in net.named_buffers()] == ["body.0.running", "body.0.scratch"]
    assert [type(m).__name__ for m in net.children()] == ["Sequential", "Linear", "Dropout"]
    kinds = [type(m).__name__ for m in net.modules()]
    assert kinds == ["Net", "Sequential", "Block", "Linear", "ReLU", "Linear", "Dropout"]
    assert [n for n, _ in net.named_modules()][:4] == ["", "body", "body.0", "body.0.fc"]
    assert len(list(net.parameters(recurse=False))) == 0
    assert net.get_submodule("body.0.fc") is net.body[0].fc


def test_shared_parameters_are_listed_once():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    b.weight = a.weight  # tied weights
    model = nn.Sequential(a, b)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.bias"]


def test_attribute_registration_rules():
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="parameter 'weight'"):
        m.weight = fg.zeros(2, 2)  # a plain tensor cannot replace a parameter
    m.bias = None
    assert m.bias is None and "bias" not in dict(m.named_parameters())
    m.note = "plain attribute"
    assert m.note == "plain attribute"
    del m.weight
    assert "weight" not in dict(m.named_parameters())
    del m.note  # a plain attribute goes as on any object (it raised AttributeError)
    assert not hasattr(m, "note")
    with pytest.raises(AttributeError, match="no attribute 'note'"):
        del m.note

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(fg.zeros(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        _ = m.missing
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


def test_train_and_eval_are_recursive():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    x = fg.ones(4, 2)
    np.testing.assert_array_equal(net(x).numpy(), net(x).numpy())  # Dropout off in eval
    net.train()
    assert all(m.training for m in net.modules())


def test_zero_grad_and_requires_grad():
    net = Net()
    net(fg.ones(2, 2)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_repr_is_torch_style():
    model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Sequential(nn.Dropout(0.1), nn.Softmax(1)))
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=4, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): Dropout(p=0.1, inplace=False)\n"
        "    (1): Softmax(dim=1)\n"
        "  )\n"
        ")"
    )
    assert repr(nn.Embedding(10, 3, padding_idx=0)) == "Embedding(10, 3, padding_idx=0)"
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"


def test_containers():
    layers = [nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3 and seq[-1] is layers[2] and list(seq) == layers
    assert isinstance(seq[:2], nn.Sequential) and len(seq[:2]) == 2
    with pytest.raises(IndexError):
        seq[3]
    seq.append(nn.Sigmoid())
    x = fg.tensor(np.random.default_rng(0).standard_normal((5, 2)).astype(np.float32))
    expected = layers[2](layers[1](layers[0](x))).sigmoid()
    np.testing.assert_allclose(seq(x).numpy(), expected.numpy(), rtol=1e-6, atol=1e-7)
    stack = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    holder = nn.Sequential()
    holder.blocks = stack
    assert len(list(holder.parameters())) == 6 and len(stack) == 3


# ---------------------------------------------------------------- state


def test_state_dict_round_trip_reproduces_outputs():
    fg.manual_seed(1)
    source = Net().eval()
    fg.manual_seed(2)
    target = Net().eval()
    x = fg.tensor(np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32))
    assert not np.allclose(source(x).numpy(), target(x).numpy())
    state = source.state_dict()
    assert list(state) == [
        "body.0.scale",
        "body.0.running",
        "body.0.fc.weight",
        "body.0.fc.bias",
        "head.weight",
        "head.bias",
    ]  # torch's order: a module's own parameters, its buffers, then its children
    assert not any(v.requires_grad for v in state.values())
    result = target.load_state_dict(state)
    assert result.missing_keys == [] and result.unexpected_keys == []
    np.testing.assert_array_equal(source(x).numpy(), target(x).numpy())
    assert target.head.weight.is_leaf and target.head.weight.requires_grad


def _state_dict_habits(lib):
    """What PyTorch users do with a state_dict's values, run on `lib` (torch or fusegrad):
    write into them (weights ported by hand, a buffer reset), keep one across a training
    step (it reads the new values), keep a deep copy (a snapshot), and an exponential
    moving average of a model kept by copying into its state_dict's values (timm's
    ModelEmaV2)."""
    import copy

    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(3, 2), lib.nn.BatchNorm1d(2))
    sd = model.state_dict()
    w = lib.tensor([[1.0, -0.0, 2.0], [0.5, -1.0, 0.0]])
    sd["0.weight"].copy_(w)
    sd["0.bias"].zero_()
    sd["0.bias"][1] = -0.0
    sd["1.running_var"].fill_(4.0)
    snapshot = copy.deepcopy(model.state_dict())
    ema = copy.deepcopy(model)
    opt = (lib.optim if lib is not fg else fg.optim).SGD(model.parameters(), lr=0.5)
    x = lib.tensor([[1.0, 2.0, -1.0], [0.0, 1.0, 3.0], [2.0, -2.0, 1.0]])
    for _ in range(2):
        opt.zero_grad()
        (model(x) ** 2).mean().backward()
        opt.step()
        with lib.no_grad():
            for e, m in zip(ema.state_dict().values(), model.state_dict().values()):
                if e.dtype.is_floating_point:
                    e.copy_(e * 0.9 + m * 0.1)
    got = [sd["0.weight"], sd["0.bias"], sd["1.running_mean"], sd["1.running_var"]]
    got += [snapshot["0.weight"], snapshot["0.bias"], snapshot["1.running_var"]]
    got += list(ema.state_dict().values())
    got += [model[0].weight, model[0].bias]
    return [np.array(v.detach().numpy(), dtype=np.float64) for v in got]


def test_a_state_dicts_values_share_the_modules_values_as_torchs_do():
    torch = pytest.importorskip("torch")
    got, want = _state_dict_habits(fg), _state_dict_habits(torch)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    # the written zeros keep their signs; the snapshot kept the values before training
    assert np.signbit(got[5][1]) and not np.signbit(got[5][0])
    assert got[4].tolist() == [[1.0, -0.0, 2.0], [0.5, -1.0, 0.0]]
    assert not np.allclose(got[0], got[4])  # the kept state_dict read the trained weight


def test_a_state_dict_value_is_not_a_leaf_to_train():
    net = nn.Linear(2, 2)
    sd = net.state_dict()
    assert not sd["weight"].requires_grad and sd["weight"].is_leaf
    assert net.state_dict(keep_vars=True)["weight"] is net.weight
    sd["weight"].mul_(0.0)  # under grad mode too, as torch's (no history)
    assert net.weight.tolist() == [[0.0, 0.0], [0.0, 0.0]] and net.weight.requires_grad
    import copy

    snapshot = copy.deepcopy(net.state_dict())
    with fg.no_grad():
        net.bias.fill_(3.0)
    assert sd["bias"].tolist() == [3.0, 3.0]  # a kept state_dict reads the module
    assert snapshot["bias"].tolist() != [3.0, 3.0]  # a deep copy does not


def test_load_state_dict_errors():
    net = Net()
    state = net.state_dict()
    del state["head.bias"]
    state["extra"] = fg.zeros(1)
    with pytest.raises(RuntimeError, match="Missing key.*head.bias"):
        net.load_state_dict(state)
    with pytest.raises(RuntimeError, match="Unexpected key.*extra"):
        net.load_state_dict(state)
    result = net.load_state_dict(state, strict=False)
    assert result.missing_keys == ["head.bias"] and result.unexpected_keys == ["extra"]
    bad = net.state_dict()
    bad["head.weight"] = np.zeros((2, 3), np.float32)
    with pytest.raises(RuntimeError, match=r"size mismatch for head.weight.*\(2, 3\).*\(1, 3\)"):
        net.load_state_dict(bad)


def test_save_and_load_npz(tmp_path):
    fg.manual_seed(3)
    source = Net()
    path = tmp_path / "net"
    source.save(path)
    assert (tmp_path / "net.npz").exists()
    with np.load(tmp_path / "net.npz") as archive:
        assert sorted(archive.files) == sorted(source.state_dict())
        np.testing.assert_array_equal(archive["head.weight"], source.head.weight.numpy())
    fg.manual_seed(4)
    target = Net()
    target.load(tmp_path / "net.npz")
    for (name, a), (_, b) in zip(source.state_dict().items(), target.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    loaded = nn.load(tmp_path / "net")  # the suffix is optional, as numpy adds it on save
    assert set(loaded) == set(source.state_dict())


# ---------------------------------------------------------------- initialisation


def test_models_are_reproducible_under_manual_seed():
    fg.manual_seed(42)
    a = [p.numpy() for p in Net().parameters()]
    fg.manual_seed(42)
    b = [p.numpy() for p in Net().parameters()]
    fg.manual_seed(43)
    c = [p.numpy() for p in Net().parameters()]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], c[1])


def test_linear_default_init_is_torchs():
    """weight: kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)); bias: the same bound."""
    fg.manual_seed(0)
    layer = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound  # the std of U(-b, b) is b/sqrt(3)
    assert abs(w.mean()) < 0.01 * bound
    assert np.abs(b).max() > 0.9 * bound


def test_calculate_gain_and_fans():
    assert init.calculate_gain("linear") == 1 and init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01**2)))
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    assert init.calculate_gain("selu") == 0.75
    assert init._calculate_fan_in_and_fan_out(fg.zeros(8, 3, 5, 5)) == (75, 200)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(fg.zeros(5))
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("swish")


@pytest.mark.parametrize(
    "fill, bound, std",
    [
        # (fan_in, fan_out) of a (64, 32, 3, 3) tensor: (288, 576)
        (
            lambda t: init.kaiming_uniform_(t),
            math.sqrt(3) * math.sqrt(2) / math.sqrt(288),
            None,
        ),
        (
            lambda t: init.kaiming_uniform_(t, mode="fan_out", nonlinearity="relu"),
            math.sqrt(6 / 576),
            None,
        ),
        (lambda t: init.kaiming_normal_(t, nonlinearity="relu"), None, math.sqrt(2 / 288)),
        (
            lambda t: init.kaiming_normal_(t, mode="fan_out", nonlinearity="tanh"),
            None,
            5 / 3 / math.sqrt(576),
        ),
        (lambda t: init.xavier_uniform_(t, gain=2.0), 2 * math.sqrt(6 / (288 + 576)), None),
        (lambda t: init.xavier_normal_(t), None, math.sqrt(2 / (288 + 576))),
        (lambda t: init.uniform_(t, -0.3, 0.3), 0.3, None),
        (lambda t: init.normal_(t, 0.0, 0.05), None, 0.05),
    ],
)
def test_init_distributions(fill, bound, std):
    fg.manual_seed(0)
    t = fg.zeros(64, 32, 3, 3)
    assert fill(t) is t
    values = t.numpy()
    if bound is not None:
        assert np.abs(values).max() <= bound * (1 + 1e-6)
        assert np.abs(values).max() > 0.99 * bound
        std = bound / math.sqrt(3)
    assert abs(values.std() - std) < 0.02 * std
    assert abs(values.mean()) < 0.02 * std


def test_constant_inits_keep_parameters_leaves():
    p = nn.Parameter(fg.zeros(2, 3))
    init.ones_(p)
    np.testing.assert_array_equal(p.numpy(), np.ones((2, 3)))
    init.constant_(p, 0.5)
    np.testing.assert_array_equal(p.numpy(), np.full((2, 3), 0.5))
    init.zeros_(p)
    np.testing.assert_array_equal(p.numpy(), np.zeros((2, 3)))
    assert p.is_leaf and p.requires_grad
    (p * 2).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), np.full((2, 3), 2.0))


def _modules_of(*tensors) -> set[str]:
    return {m for k in fg.kernels(*tensors) for _, m, _ in k.places}


def test_ops_carry_the_path_of_the_module_whose_forward_made_them():
    from fusegrad.runtime.attribution import module_scope

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x) * 2  # the multiply: Inner's own op

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(Inner(), Inner())
            self.helper = None

        def forward(self, x):
            x = self.blocks(x)
            return nn.Tanh()(x)  # a module no parent holds: named by its class

    model = Outer()
    x = fg.randn(3, 4).realize()
    y = model(x)
    assert module_scope.top is None  # the scope ends with the outermost call
    found = _modules_of(y)
    assert {"Outer.blocks.0.fc", "Outer.blocks.1", "Outer.blocks.1.fc", "Outer.Tanh"} <= found
    inner = model.blocks[1]
    # the same module called at the top: its class, not its old path (a new input: nodes
    # equal to earlier ones are shared, and keep the site of the op that made them first)
    alone = inner(fg.randn(3, 4).realize())
    assert _modules_of(alone) == {"Inner", "Inner.fc"}

    class Failing(nn.Module):
        def forward(self, x):
            raise ValueError("no")

    with pytest.raises(ValueError):
        Failing()(x)
    assert module_scope.top is None  # and ends when a forward raises
