"""nn, losses and data habits found missing or different by probing fusegrad against
PyTorch 2.13: L1 / smooth L1 / Huber losses, Module.double(), random_split and Subset,
TensorDataset keeping a tensor's dtype, DataLoader's worker options. Expected values are
PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.data import DataLoader, Subset, TensorDataset, random_split

F = nn.functional

X = [0.5, -2.0, 1.0, 3.0, -0.2]
Y = [0.0, 0.0, 1.0, 1.5, 0.1]


def loss_and_grad(fn, x=X, y=Y):
    x = fg.tensor(x, requires_grad=True)
    loss = fn(x, fg.tensor(y))
    (loss.sum() if loss.ndim else loss).backward()
    return loss.tolist(), x.grad.tolist()


def test_l1_loss_values_and_gradients_as_torch():
    loss, grad = loss_and_grad(F.l1_loss)
    assert loss == pytest.approx(0.86)
    assert grad == pytest.approx([0.2, -0.2, 0.0, 0.2, -0.2])  # 0 at a tie, as torch's sign
    assert F.l1_loss(fg.tensor(X), fg.tensor(Y), reduction="sum").item() == pytest.approx(4.3)
    assert nn.L1Loss(reduction="none")(fg.tensor(X), fg.tensor(Y)).tolist() == pytest.approx(
        [0.5, 2.0, 0.0, 1.5, 0.3]
    )


def test_smooth_l1_and_huber_as_torch():
    loss, grad = loss_and_grad(F.smooth_l1_loss)
    assert loss == pytest.approx(0.534)
    assert grad == pytest.approx([0.1, -0.2, 0.0, 0.2, -0.06])
    loss, grad = loss_and_grad(lambda a, b: F.smooth_l1_loss(a, b, beta=0.5))
    assert loss == pytest.approx(0.668)
    assert grad == pytest.approx([0.2, -0.2, 0.0, 0.2, -0.12])
    # at |d| == beta the linear branch's gradient, as torch (|d| < beta is the square)
    loss, grad = loss_and_grad(
        lambda a, b: F.smooth_l1_loss(a, b, beta=0.5, reduction="none"),
        y=[0.0, -1.5, 1.0, 2.0, 0.3],
    )
    assert loss == pytest.approx([0.25, 0.25, 0.0, 0.75, 0.25])
    assert grad == pytest.approx([1.0, -1.0, 0.0, 1.0, -1.0])
    loss, grad = loss_and_grad(lambda a, b: F.huber_loss(a, b, delta=1.5))
    assert loss == pytest.approx(0.634)
    assert grad == pytest.approx([0.1, -0.3, 0.0, 0.3, -0.06])
    assert nn.SmoothL1Loss(beta=2.0)(fg.tensor(X), fg.tensor(Y)).item() == pytest.approx(0.3295)
    assert nn.HuberLoss(delta=0.3)(fg.tensor(X), fg.tensor(Y)).item() == pytest.approx(0.222)
    with pytest.raises(RuntimeError):
        F.huber_loss(fg.tensor(X), fg.tensor(Y), delta=0)
    with pytest.raises(ValueError):
        F.l1_loss(fg.tensor(X), fg.tensor(Y), reduction="avg")


def test_module_double_and_float():
    m = nn.Linear(2, 1).double()
    assert m.weight.dtype == fg.float64 and m(fg.ones(1, 2, dtype=fg.float64)).dtype == fg.float64
    assert m.float().weight.dtype == fg.float32


def test_random_split_and_subset():
    fg.manual_seed(0)
    a, b = random_split(TensorDataset(fg.arange(10)), [7, 3])
    assert len(a) == 7 and len(b) == 3
    seen = sorted([a[i][0].item() for i in range(7)] + [b[i][0].item() for i in range(3)])
    assert seen == list(range(10))
    assert [len(s) for s in random_split(TensorDataset(fg.arange(10)), [0.5, 0.25, 0.25])] == [
        6,
        2,
        2,
    ]
    with pytest.raises(ValueError):
        random_split(TensorDataset(fg.arange(10)), [5, 4])
    s = Subset(TensorDataset(fg.arange(10) * 10), [3, 1])
    assert len(s) == 2 and s[0][0].item() == 30
    assert [y.tolist() for (y,) in DataLoader(s, batch_size=2)] == [[30, 10]]


def test_tensor_dataset_keeps_a_tensors_dtype():
    x = fg.tensor([[1.0], [2.0]], dtype=fg.float64)
    u = fg.tensor([1, 2], dtype=fg.uint8)
    (xb, ub) = next(iter(DataLoader(TensorDataset(x, u), batch_size=2)))
    assert xb.dtype == fg.float64 and ub.dtype == fg.uint8
    assert TensorDataset(x)[0][0].dtype == fg.float64
    # numpy data is still converted to fusegrad's defaults (documented in nn/data.py)
    assert TensorDataset(np.array([[1.0]]))[0][0].dtype == fg.float32


def test_dataloader_takes_torch_worker_options_and_collates_text():
    ds = TensorDataset(fg.arange(5))
    loader = DataLoader(ds, batch_size=2, num_workers=2, pin_memory=True, persistent_workers=False)
    assert [y.tolist() for (y,) in loader] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError):
        DataLoader(ds, num_workers=-1)
    assert next(iter(DataLoader(["a", "b"], batch_size=2))) == ["a", "b"]
    batch = next(iter(DataLoader([("x", 1), ("y", 2)], batch_size=2)))
    assert batch[0] == ["x", "y"] and batch[1].tolist() == [1, 2]


# ---------------------------------------------------------------- inplace=True writes the input

INPLACE = {  # torch 2.13's values for [-1, 2, -4, 5], written into the input
    "silu": [-0.268941, 1.761594, -0.071945, 4.966536],
    "elu": [-0.632121, 2.0, -0.981684, 5.0],
    "selu": [-1.111331, 2.101402, -1.725899, 5.253505],
    "celu": [-0.632121, 2.0, -0.981684, 5.0],
    "relu6": [0.0, 2.0, 0.0, 5.0],
    "hardsigmoid": [0.333333, 0.833333, 0.0, 1.0],
    "hardswish": [-0.333333, 1.666667, -0.0, 5.0],
    "mish": [-0.303401, 1.943959, -0.072592, 4.999552],
    "relu": [0.0, 2.0, 0.0, 5.0],
    "hardtanh": [-1.0, 1.0, -1.0, 1.0],
    "leaky_relu": [-0.01, 2.0, -0.04, 5.0],
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_functional_inplace_writes_the_input(name):
    x = fg.tensor([-1.0, 2.0, -4.0, 5.0])
    out = getattr(F, name)(x, inplace=True)
    assert out is x
    assert x.tolist() == pytest.approx(INPLACE[name], abs=1e-6)
    y = fg.tensor([-1.0, 2.0, -4.0, 5.0])
    getattr(F, name)(y)  # without it the input is left alone
    assert y.tolist() == [-1.0, 2.0, -4.0, 5.0]


def test_inplace_modules_write_the_input_and_keep_gradients():
    x = fg.tensor([-1.0, 2.0])
    nn.ReLU(inplace=True)(x)
    assert x.tolist() == [0.0, 2.0]
    w = fg.tensor([-1.0, 2.0], requires_grad=True)
    y = w * 2
    z = nn.LeakyReLU(0.1, inplace=True)(y)
    z.sum().backward()
    assert y is z and w.grad.tolist() == pytest.approx([0.2, 2.0])
    with pytest.raises(RuntimeError):  # a leaf that requires grad, as torch
        nn.ReLU(inplace=True)(fg.tensor([-1.0], requires_grad=True))
    d = fg.ones(4)
    nn.Dropout(1.0, inplace=True)(d)
    assert d.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)" and repr(nn.ReLU()) == "ReLU()"
    assert repr(nn.ELU(inplace=True)) == "ELU(alpha=1.0, inplace=True)"
    assert repr(nn.Dropout(0.2, inplace=True)) == "Dropout(p=0.2, inplace=True)"


def test_a_model_with_inplace_activations_trains_as_without():
    def losses(inplace):
        fg.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=inplace), nn.Linear(8, 3))
        opt = fg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        x, y = fg.randn(16, 4), fg.randint(0, 3, (16,))
        out = []
        for _ in range(4):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    assert losses(True) == losses(False)


# ---------------------------------------------------------------- adaptive pooling, PReLU, ...


def test_adaptive_avg_pool2d_with_overlapping_cells_and_its_gradient():
    x = fg.arange(35.0).reshape(1, 1, 5, 7).requires_grad_()
    y = F.adaptive_avg_pool2d(x, (2, 3))
    (y * y).sum().backward()
    assert y.tolist() == [[[[8.0, 10.0, 12.0], [22.0, 24.0, 26.0]]]]
    g = x.grad.tolist()[0][0]
    assert g[0] == pytest.approx([16 / 9, 16 / 9, 4.0, 20 / 9, 44 / 9, 8 / 3, 8 / 3])
    assert g[2] == pytest.approx([60 / 9, 60 / 9, 128 / 9, 68 / 9, 16.0, 76 / 9, 76 / 9])


def test_adaptive_avg_pool_shapes_as_torch():
    assert F.adaptive_avg_pool2d(fg.arange(16.0).reshape(1, 4, 4), (3, None)).tolist() == [
        [[2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0], [10.0, 11.0, 12.0, 13.0]]
    ]
    assert F.adaptive_avg_pool1d(fg.arange(5.0).reshape(1, 1, 5), 3).tolist() == [[[0.5, 2.0, 3.5]]]
    up = F.adaptive_avg_pool2d(fg.arange(6.0).reshape(1, 1, 2, 3), 4)  # more cells than input
    assert up.tolist() == [
        [[[0.0, 0.5, 1.5, 2.0], [0.0, 0.5, 1.5, 2.0], [3.0, 3.5, 4.5, 5.0], [3.0, 3.5, 4.5, 5.0]]]
    ]
    assert nn.AdaptiveAvgPool2d((1, 1))(fg.ones(2, 3, 4, 4)).shape == (2, 3, 1, 1)
    assert repr(nn.AdaptiveAvgPool2d((1, 1))) == "AdaptiveAvgPool2d(output_size=(1, 1))"
    with pytest.raises(RuntimeError):
        F.adaptive_avg_pool2d(fg.ones(4, 4), 2)


def test_prelu_per_channel_values_and_gradients():
    m = nn.PReLU(3, init=0.1)
    x = (fg.arange(12.0).reshape(2, 3, 2) - 5).requires_grad_()
    y = m(x)
    (y * y).sum().backward()
    assert y.reshape(-1).tolist() == pytest.approx(
        [-0.5, -0.4, -0.3, -0.2, -0.1, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    )
    assert x.grad[0].reshape(-1).tolist() == pytest.approx([-0.1, -0.08, -0.06, -0.04, -0.02, 0.0])
    assert m.weight.grad.tolist() == pytest.approx([8.2, 2.6, 0.2])
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    assert F.prelu(fg.tensor([-2.0, 3.0]), fg.tensor([0.5])).tolist() == [-1.0, 3.0]
    with pytest.raises(RuntimeError):
        nn.PReLU(4)(fg.ones(2, 3, 2))


def test_dropout2d_drops_whole_channels():
    fg.manual_seed(0)
    y = nn.Dropout2d(0.5)(fg.ones(8, 16, 3, 3))
    assert set(y.sum((2, 3)).reshape(-1).tolist()) == {0.0, 18.0}  # a channel: all or nothing
    assert nn.Dropout2d(0.5).eval()(fg.ones(1, 2, 2, 2)).tolist() == fg.ones(1, 2, 2, 2).tolist()
    assert F.dropout2d(fg.ones(1, 2, 2, 2), 1.0).sum().item() == 0.0
    assert repr(nn.Dropout2d(0.3)) == "Dropout2d(p=0.3, inplace=False)"


def test_forward_hooks():
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    seen = []
    handle = m[1].register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    m(fg.ones(4, 2))
    handle.remove()
    m(fg.ones(4, 2))
    assert seen == [(4, 3)]
    lin = nn.Linear(2, 1)
    with lin.register_forward_hook(lambda mod, args, out: out * 0):
        assert lin(fg.ones(1, 2)).tolist() == [[0.0]]
    lin.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    assert lin(fg.ones(1, 2)).tolist() == [[lin.bias.item()]]


# ---------------------------------------------------------------- schedulers, init, utils


def scheduled_lrs(make, steps):
    opt = fg.optim.SGD([nn.Parameter(fg.ones(1))], lr=1.0)
    sched = make(opt)
    lrs = [round(opt.param_groups[0]["lr"], 6)]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(round(opt.param_groups[0]["lr"], 6))
    return lrs


def test_warmup_and_restart_schedulers_as_torch():
    S = fg.optim.lr_scheduler
    assert scheduled_lrs(lambda o: S.LinearLR(o, 0.1, 0.5, total_iters=4), 6) == [
        0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5
    ]  # fmt: skip
    assert scheduled_lrs(lambda o: S.ConstantLR(o, factor=0.5, total_iters=3), 5) == [
        0.5, 0.5, 0.5, 1.0, 1.0, 1.0
    ]  # fmt: skip
    assert scheduled_lrs(
        lambda o: S.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2, eta_min=0.1), 8
    ) == [1.0, 0.55, 1.0, 0.868198, 0.55, 0.231802, 1.0, 0.965746, 0.868198]
    warm_cosine = lambda o: S.SequentialLR(  # noqa: E731
        o, [S.LinearLR(o, 0.1, total_iters=3), S.CosineAnnealingLR(o, T_max=5)], milestones=[3]
    )
    assert scheduled_lrs(warm_cosine, 9) == [
        0.1, 0.4, 0.7, 1.0, 0.904508, 0.654508, 0.345492, 0.095492, 0.0, 0.095492
    ]  # fmt: skip
    opt = fg.optim.SGD([nn.Parameter(fg.ones(1))], lr=1.0)
    with pytest.raises(ValueError):
        S.LinearLR(opt, start_factor=0)
    with pytest.raises(ValueError):
        S.SequentialLR(opt, [S.ConstantLR(opt), S.ExponentialLR(opt, 0.9)], milestones=[])


def test_trunc_normal_and_orthogonal_init():
    fg.manual_seed(0)
    t = nn.init.trunc_normal_(fg.empty(1000), std=0.02, a=-0.04, b=0.04)
    assert t.abs().max().item() <= 0.04 and 0.01 < t.std().item() < 0.02
    for shape in [(4, 4), (3, 5), (5, 3), (4, 2, 3)]:
        w = nn.init.orthogonal_(fg.empty(*shape)).reshape(shape[0], -1).numpy()
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        np.testing.assert_allclose(gram, np.eye(gram.shape[0]), atol=1e-5)
    with pytest.raises(ValueError):
        nn.init.orthogonal_(fg.empty(3))


def test_parameters_to_vector_and_back():
    m = nn.Linear(2, 2)
    with fg.no_grad():
        m.weight.copy_(fg.tensor([[1.0, 2.0], [3.0, 4.0]]))
        m.bias.copy_(fg.tensor([5.0, 6.0]))
    v = nn.utils.parameters_to_vector(m.parameters())
    assert v.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    nn.utils.vector_to_parameters(v * 2, m.parameters())
    assert m.weight.tolist() == [[2.0, 4.0], [6.0, 8.0]] and m.bias.tolist() == [10.0, 12.0]
    assert m.weight.is_leaf and m.weight.requires_grad


def test_cosine_similarity_and_kl_div_as_torch():
    x = fg.tensor([[1.0, 0.0], [3.0, 4.0]], requires_grad=True)
    y = fg.tensor([[1.0, 1.0], [-3.0, 4.0]], requires_grad=True)
    c = F.cosine_similarity(x, y)
    c.sum().backward()
    assert c.tolist() == pytest.approx([0.7071068, 0.28])
    assert x.grad.reshape(-1).tolist() == pytest.approx([0.0, 0.7071068, -0.1536, 0.1152])
    zero = F.cosine_similarity(fg.zeros(1, 2), fg.ones(1, 2))
    assert zero.tolist() == [0.0]  # the norm clamped at eps: no NaN
    assert nn.CosineSimilarity(dim=0)(fg.tensor([1.0, 0.0]), fg.tensor([1.0, 1.0])).item() == (
        pytest.approx(0.7071068)
    )
    x = fg.tensor([[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.1]], requires_grad=True)
    t = fg.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])  # a 0 target contributes 0, not NaN
    loss = F.kl_div(x, t, reduction="batchmean")
    loss.backward()
    assert loss.item() == pytest.approx(-0.2514001)
    assert x.grad.reshape(-1).tolist() == pytest.approx([-0.25, -0.25, 0.0, -0.1, -0.15, -0.25])
    module = nn.KLDivLoss(reduction="batchmean")
    assert module(fg.tensor([[-1.0, -0.5]]), fg.tensor([[0.5, 0.5]])).item() == pytest.approx(
        0.0568528
    )
