"""The hook-based nn.utils.weight_norm / remove_weight_norm and nn.utils.spectral_norm /
remove_spectral_norm: torch's parameter and buffer names, values and gradients (torch
2.13's, float64, written in as literals), the weight recomputed before each forward, the
power iteration in training mode only, and torch's errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn


def fill(*shape, phase=0.3):
    """The tests' deterministic weights: sin(0.7 i + phase), float64."""
    n = int(np.prod(shape))
    return np.sin(np.arange(n) * 0.7 + phase).reshape(shape)


def unit(a):
    return a / np.linalg.norm(a)


def weight_norm(*args, **kwargs):
    with pytest.warns(FutureWarning, match="parametrizations.weight_norm"):
        return nn.utils.weight_norm(*args, **kwargs)


# ---------------------------------------------------------------- weight_norm

# Linear(4, 3) of weight fill(3, 4), bias fill(3, phase=1.0), weight_norm(dim=None), g * 1.5;
# y = m(fill(2, 4, phase=2.0)); (y ** 2).sum().backward()
LWN_G = 2.5072146842251337
LWN_Y = [
    [0.5747955153332436, 2.1151997367175532, -1.1751007660711483],
    [-0.028169851496091525, 0.9323642935440167, 1.6568525605438247],
]
LWN_GRAD_G = 3.1870912590308733
LWN_GRAD_V = [
    [1.088681898917937, -0.8078835614163791, -2.3244887592877075, -2.747850572527256],
    [2.904388082330323, 1.9051809331695146, 0.00993742186582458, -1.8899798142178599],
    [-7.4441518377444496, -5.6076043110923415, -1.1337128556991432, 3.8733814704813936],
]


def linear64(w, b):
    m = nn.Linear(w.shape[1], w.shape[0]).double()
    m.weight.data, m.bias.data = fg.tensor(w), fg.tensor(b)
    return m


def test_weight_norm_names_values_and_gradients_are_torchs():
    m = weight_norm(linear64(fill(3, 4), fill(3, phase=1.0)), dim=None)
    assert list(m.state_dict()) == ["bias", "weight_g", "weight_v"]
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight_g", "weight_v"]
    assert m.weight_g.shape == () and m.weight_g.item() == pytest.approx(LWN_G, rel=1e-12)
    assert "weight" not in m._parameters and isinstance(m.weight, fg.Tensor)
    m.weight_g.data = m.weight_g * 1.5
    y = m(fg.tensor(fill(2, 4, phase=2.0)))  # the hook recomputes the weight first
    (y**2).sum().backward()
    np.testing.assert_allclose(y.numpy(), LWN_Y, rtol=1e-12)
    assert m.weight_g.grad.item() == pytest.approx(LWN_GRAD_G, rel=1e-10)
    np.testing.assert_allclose(m.weight_v.grad.numpy(), LWN_GRAD_V, rtol=1e-10)


def test_weight_norm_dim_and_remove():
    conv = nn.Conv2d(2, 3, 2).double()
    w = conv.weight.numpy().copy()
    weight_norm(conv)  # dim 0: a norm per output channel
    assert conv.weight_g.shape == (3, 1, 1, 1)
    np.testing.assert_allclose(
        conv.weight_g.numpy().reshape(-1), np.linalg.norm(w.reshape(3, -1), axis=1)
    )
    np.testing.assert_allclose(conv.weight.numpy(), w, rtol=1e-12)
    conv.weight_g.data = fg.ones(3, 1, 1, 1, dtype=fg.float64)
    assert nn.utils.remove_weight_norm(conv) is conv
    assert list(conv.state_dict()) == ["bias", "weight"]
    assert isinstance(conv.weight, nn.Parameter) and conv.weight.requires_grad
    np.testing.assert_allclose(
        conv.weight.numpy().reshape(3, -1),
        w.reshape(3, -1) / np.linalg.norm(w.reshape(3, -1), axis=1, keepdims=True),
    )
    assert not conv.__dict__["_hooks"]


def test_weight_norm_refusals_are_torchs():
    m = weight_norm(nn.Linear(2, 2))
    with pytest.raises(
        RuntimeError, match="Cannot register two weight_norm hooks on the same parameter weight"
    ):
        weight_norm(m)
    with pytest.raises(ValueError, match="weight_norm of 'bias' not found in Linear"):
        nn.utils.remove_weight_norm(m, "bias")
    with pytest.raises(ValueError, match="can't have uninitialized parameters"):
        weight_norm(nn.LazyLinear(2))


# ---------------------------------------------------------------- spectral_norm

# ConvTranspose2d(2, 3, 2) of weight fill(2, 3, 2, 2) (dim 1: the output channels), bias
# fill(3, phase=1.1), weight_u
# = unit(fill(3, phase=0.1)), weight_v = unit(fill(8, phase=0.9)); y = m(fill(1, 2, 2, 2,
# phase=0.5)) in training mode, then (y * fill(y.shape, phase=2.2)).sum().backward()
LSN_Y = [
    0.9069443837226103, 0.9646822568590505, 1.215935656471399, 0.9721267142934656,
    1.8615022402326027, 1.649043114365639, 1.554393856507485, 2.0001506969389355,
    1.3604561302612805, 1.0408832069237433, 1.1708682199341338, 0.8469454806775383,
    1.1411557953343439, 0.44749466515040504, 0.3323872303396249, 0.4425611981801786,
    -0.06629241658086205, 0.4990348421667033, 0.4564102857033655, 0.1537228461459329,
    0.5128839296898904, 0.20226980921822768, 0.6200603107046461, 1.0494330298831664,
    0.9364655400223596, 1.4496151875066197, 1.023981808222421,
]  # fmt: skip
LSN_U = [0.3459875177158001, -0.5764380873231165, 0.7402781700605023]
LSN_V = [
    -0.37008528536699165, -0.05210322022068896, 0.2903838035306775, 0.49629878710947367,
    0.4985568916830735, 0.4651353641243045, 0.21295340687732855, -0.13938386511282655,
]  # fmt: skip
LSN_GRAD = [
    [-0.29586256883328493, -0.6284572993439385, -0.3769573767049657, 0.06796630864910327,
     -0.36611878334693715, -0.6411373018771457, -0.31995772474381745, 0.15998309484061402,
     -0.2902167916480996, -0.6330734260296377, -0.3774680011153026, 0.056089613531127264],
    [0.5416167312778667, 0.6849273772231408, 0.06776768187997115, -0.3870634554374444,
     0.629794443158667, 0.7597624080080551, 0.09044431572918074, -0.4196740082423216,
     0.5210378948318218, 0.6508162874116258, 0.029053007719017747, -0.3971578633146414],
]  # fmt: skip


def spectral_transposed():
    m = nn.ConvTranspose2d(2, 3, 2).double()
    m.weight.data = fg.tensor(fill(2, 3, 2, 2))
    m.bias.data = fg.tensor(fill(3, phase=1.1))
    nn.utils.spectral_norm(m)
    m.weight_u.data = fg.tensor(unit(fill(3, phase=0.1)))
    m.weight_v.data = fg.tensor(unit(fill(8, phase=0.9)))
    return m


def test_spectral_norm_names_values_vectors_and_gradient_are_torchs():
    m = spectral_transposed()
    assert list(m.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight_orig"]
    y = m(fg.tensor(fill(1, 2, 2, 2, phase=0.5)))
    np.testing.assert_allclose(y.numpy().reshape(-1), LSN_Y, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(m.weight_u.numpy(), LSN_U, rtol=1e-12)
    np.testing.assert_allclose(m.weight_v.numpy(), LSN_V, rtol=1e-12)
    (y * fg.tensor(fill(*y.shape, phase=2.2))).sum().backward()
    grad = m.weight_orig.grad.numpy().reshape(2, -1)
    np.testing.assert_allclose(grad, LSN_GRAD, rtol=1e-10, atol=1e-13)


def numpy_legacy_spectral(w, u, v, steps, dim=0):
    """torch's hook-based spectral norm in numpy (v first, then u): (w / sigma, u, v)."""
    mat = np.moveaxis(w, dim, 0).reshape(w.shape[dim], -1)
    for _ in range(steps):
        v = unit(mat.T @ u)
        u = unit(mat @ v)
    return w / (u @ mat @ v), u, v


def test_spectral_norm_iterates_before_each_training_forward_only():
    m = spectral_transposed()
    w, u, v = fill(2, 3, 2, 2), unit(fill(3, phase=0.1)), unit(fill(8, phase=0.9))
    x = fg.tensor(fill(1, 2, 2, 2, phase=0.5))
    for _ in range(3):
        m(x)
        want, u, v = numpy_legacy_spectral(w, u, v, 1, dim=1)
        np.testing.assert_allclose(m.weight.numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(m.weight_v.numpy(), v, rtol=1e-12)
    m.eval()
    m(x)
    np.testing.assert_allclose(m.weight_u.numpy(), u, rtol=1e-12)  # not updated
    np.testing.assert_allclose(m.weight.numpy(), numpy_legacy_spectral(w, u, v, 0, dim=1)[0])


def test_spectral_norm_trains_with_an_optimizer():
    fg.manual_seed(1)
    m = nn.utils.spectral_norm(nn.Linear(4, 3).double(), n_power_iterations=2)
    opt = fg.optim.SGD(m.parameters(), lr=0.05)
    u, v = m.weight_u.numpy(), m.weight_v.numpy()
    x = fg.tensor(fill(5, 4))
    for _ in range(3):
        w = m.weight_orig.numpy()
        opt.zero_grad()
        (m(x) ** 2).mean().backward()
        opt.step()
        _, u, v = numpy_legacy_spectral(w, u, v, 2)
        np.testing.assert_allclose(m.weight_u.numpy(), u, rtol=1e-10)
        np.testing.assert_allclose(m.weight_v.numpy(), v, rtol=1e-10)


def test_remove_spectral_norm_leaves_the_normalized_weight():
    m = spectral_transposed()
    m.eval()
    want = numpy_legacy_spectral(
        fill(2, 3, 2, 2), unit(fill(3, phase=0.1)), unit(fill(8, phase=0.9)), 0, dim=1
    )[0]
    assert nn.utils.remove_spectral_norm(m) is m
    assert list(m.state_dict()) == ["bias", "weight"]
    assert isinstance(m.weight, nn.Parameter)
    np.testing.assert_allclose(m.weight.numpy(), want, rtol=1e-12)


def test_spectral_norm_refusals_are_torchs():
    m = nn.utils.spectral_norm(nn.Linear(2, 2))
    with pytest.raises(
        RuntimeError, match="Cannot register two spectral_norm hooks on the same parameter weight"
    ):
        nn.utils.spectral_norm(m)
    with pytest.raises(ValueError, match="spectral_norm of 'bias' not found in Linear"):
        nn.utils.remove_spectral_norm(m, "bias")
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive"):
        nn.utils.spectral_norm(nn.Linear(2, 2), n_power_iterations=0)
    with pytest.raises(ValueError, match="cannot be applied as parameter `bias` is None"):
        nn.utils.spectral_norm(nn.Linear(2, 2, bias=False), name="bias")
    with pytest.raises(KeyError):
        nn.utils.spectral_norm(nn.Linear(2, 2), name="nope")


def test_torchs_live_values_where_torch_imports():
    torch = pytest.importorskip("torch")
    tm = torch.nn.ConvTranspose2d(2, 3, 2).double()
    tm.weight.data = torch.tensor(fill(2, 3, 2, 2))
    tm.bias.data = torch.tensor(fill(3, phase=1.1))
    torch.nn.utils.spectral_norm(tm)
    tm.weight_u.data = torch.tensor(unit(fill(3, phase=0.1)))
    tm.weight_v.data = torch.tensor(unit(fill(8, phase=0.9)))
    m = spectral_transposed()
    x = fill(1, 2, 2, 2, phase=0.5)
    for _ in range(2):
        np.testing.assert_allclose(
            m(fg.tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-12, atol=1e-15
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        tw = torch.nn.utils.weight_norm(torch.nn.Linear(4, 3).double(), dim=1)
    assert list(tw.state_dict()) == list(weight_norm(nn.Linear(4, 3), dim=1).state_dict())
