"""nn.utils.parametrizations: weight_norm and spectral_norm as parametrizations, against
PyTorch's values written in as literals (torch 2.13, float64, from the same weights and,
for the spectral norm, the same power-iteration vectors) and a numpy power iteration."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn.utils import parametrizations as PZ
from fusegrad.nn.utils import parametrize as P


def fill(*shape, phase=0.3):
    """The tests' deterministic weights: sin(0.7 i + phase), float64."""
    n = int(np.prod(shape))
    return np.sin(np.arange(n) * 0.7 + phase).reshape(shape)


def unit(a):
    return a / np.linalg.norm(a)


# ---------------------------------------------------------------- weight_norm

G0 = [[1.49501010544703], [1.4533259406799346], [1.3924489102125726]]
WN_Y = [
    [4.780974289042528, 0.15054545159349098, 1.7629637169249261],
    [4.178008922213192, -0.2437330294643545, 5.53890148574489],
]
WN_GRAD_G = [[29.230348041583614], [0.480224179612632], [20.722720546942355]]
WN_GRAD_V = [
    [18.765988547146648, -0.5150204802751442, -6.913157951723231, 2.580720159280153],
    [0.2796314585340118, 0.24420445715961403, 0.050096709814411805, -0.21139987690792944],
    [24.677287701871084, 7.316758734081473, 0.2517690045711422, 6.805093576638512],
]


def linear64(w, b=None):
    m = nn.Linear(w.shape[1], w.shape[0], bias=b is not None).double()
    m.weight.data = fg.tensor(w)
    if b is not None:
        m.bias.data = fg.tensor(b)
    return m


def test_weight_norm_keys_values_and_gradients_are_torchs():
    m = PZ.weight_norm(linear64(fill(3, 4), fill(3, phase=1.0)))
    assert type(m).__name__ == "ParametrizedLinear"
    assert list(m.state_dict()) == [
        "bias",
        "parametrizations.weight.original0",
        "parametrizations.weight.original1",
    ]
    g, v = m.parametrizations.weight.original0, m.parametrizations.weight.original1
    np.testing.assert_allclose(g.numpy(), G0, rtol=1e-12)
    np.testing.assert_array_equal(v.numpy(), fill(3, 4))
    np.testing.assert_allclose(m.weight.numpy(), fill(3, 4), rtol=1e-12)  # unchanged at first
    g.data = g * fg.tensor([[1.5], [0.5], [2.0]], dtype=fg.float64)
    y = m(fg.tensor(fill(2, 4, phase=2.0) + 1))
    (y**2).sum().backward()
    np.testing.assert_allclose(y.numpy(), WN_Y, rtol=1e-12)
    np.testing.assert_allclose(g.grad.numpy(), WN_GRAD_G, rtol=1e-10)
    np.testing.assert_allclose(v.grad.numpy(), WN_GRAD_V, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("dim", "g_shape"),
    [(0, (3, 1, 1, 1)), (1, (1, 2, 1, 1)), (-2, (1, 1, 2, 1)), (None, ()), (-1, ())],
)
def test_weight_norm_dims(dim, g_shape):
    """g's shape keeps the weight's dims, the norm taken over all but `dim`; None and
    -1 (torch's reading of None) take it over the whole weight."""
    w = fill(3, 2, 2, 2)
    conv = nn.Conv2d(2, 3, 2).double()
    conv.weight.data = fg.tensor(w)
    PZ.weight_norm(conv, dim=dim)
    g = conv.parametrizations.weight.original0.numpy()
    assert g.shape == g_shape
    if dim is None or dim == -1:
        np.testing.assert_allclose(g, np.linalg.norm(w), rtol=1e-12)
    else:
        axes = tuple(a for a in range(4) if a != dim % 4)
        np.testing.assert_allclose(g, np.sqrt((w**2).sum(axes, keepdims=True)), rtol=1e-12)
    np.testing.assert_allclose(conv.weight.numpy(), w, rtol=1e-12)


def test_weight_norm_loads_the_hook_based_state_dict():
    """A checkpoint of `nn.utils.weight_norm` (weight_g, weight_v) loads, as torch's."""
    with pytest.warns(FutureWarning, match="deprecated"):
        old = nn.utils.weight_norm(linear64(fill(3, 4), fill(3)), name="weight")
    old.weight_g.data = old.weight_g * 3
    new = PZ.weight_norm(linear64(np.zeros((3, 4)), np.zeros(3)))
    result = new.load_state_dict(old.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    np.testing.assert_allclose(new.weight.numpy(), 3 * fill(3, 4), rtol=1e-12)


def test_weight_norm_remove_leaves_the_weight():
    m = PZ.weight_norm(linear64(fill(3, 4)))
    m.parametrizations.weight.original0.data = fg.ones(3, 1, dtype=fg.float64)
    P.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and list(m.state_dict()) == ["weight"]
    np.testing.assert_allclose(
        m.weight.numpy(), fill(3, 4) / np.linalg.norm(fill(3, 4), axis=1, keepdims=True)
    )


# ---------------------------------------------------------------- spectral_norm

# a Conv2d(2, 3, 2) weight fill(3, 2, 2, 2); _u = unit(fill(3, phase=0.1)), _v = unit(fill(8,
# phase=0.9)); one read in training mode (one power-iteration step), then in eval mode the
# gradient of sum(weight * fill(3, 2, 2, 2, phase=1.7)) (rows: the weight as a 3 x 8 matrix)
SN_W = [
    [0.13132704039147658, 0.37394361373319596, 0.4406886625060503, 0.3001709473520107,
     0.018478145357887384, -0.27190521712703614, -0.4344073073608994, -0.3926008531415147],
    [-0.16614808313212523, 0.13844672650971543, 0.3779278773842614, 0.43966364223900944,
     0.29461872621483626, 0.011010019707240495, -0.27777687110497334, -0.43592095905317935],
    [-0.38904460850579764, -0.15919449958844456, 0.1455272699680272, 0.3818052905322163,
     0.43851431708687283, 0.28898320834035873, 0.003538781224185425, -0.2835699899967042],
]  # fmt: skip
SN_U = [0.87334859808437, 0.33518802805196335, -0.3534278031998917]
SN_V = [
    0.19650261959776075, 0.4292525783365809, 0.4601183422271525, 0.27458326022087576,
    -0.040092619549071784, -0.3359123138806296, -0.4737471982194368, -0.38877137273147494,
]  # fmt: skip
SN_GRAD = [
    [0.3544738019422322, 0.1118378286195342, -0.18339722301720746, -0.39237769500829867,
     -0.4168168059663785, -0.2452204601362195, 0.04170689977138853, 0.3090188530282273],
    [0.3448389262317121, 0.36738207354664554, 0.21713969116934254, -0.03522688086616887,
     -0.27102570039512386, -0.3793568981348655, -0.3092706190667347, -0.09372953536479246],
    [0.18041680759262524, 0.4580201726187081, 0.5202094936995982, 0.33773616139600604,
     -0.003579764885222286, -0.3432120718055607, -0.5214263785191898, -0.4544057119033332],
]  # fmt: skip


def spectral_conv():
    conv = nn.Conv2d(2, 3, 2).double()
    conv.weight.data = fg.tensor(fill(3, 2, 2, 2))
    PZ.spectral_norm(conv)
    sn = conv.parametrizations.weight[0]
    sn._u.data = fg.tensor(unit(fill(3, phase=0.1)))
    sn._v.data = fg.tensor(unit(fill(8, phase=0.9)))
    return conv, sn


def test_spectral_norm_keys_values_vectors_and_gradient_are_torchs():
    conv, sn = spectral_conv()
    assert list(conv.state_dict()) == [
        "bias",
        "parametrizations.weight.original",
        "parametrizations.weight.0._u",
        "parametrizations.weight.0._v",
    ]
    np.testing.assert_allclose(conv.weight.numpy().reshape(3, -1), SN_W, rtol=1e-12)
    np.testing.assert_allclose(sn._u.numpy(), SN_U, rtol=1e-12)
    np.testing.assert_allclose(sn._v.numpy(), SN_V, rtol=1e-12)
    conv.eval()
    (conv.weight * fg.tensor(fill(3, 2, 2, 2, phase=1.7))).sum().backward()
    grad = conv.parametrizations.weight.original.grad.numpy().reshape(3, -1)
    np.testing.assert_allclose(grad, SN_GRAD, rtol=1e-10, atol=1e-13)


def numpy_spectral(w, u, v, steps, dim=0):
    """torch's parametrized spectral norm in numpy: (weight / sigma, u, v)."""
    mat = np.moveaxis(w, dim, 0).reshape(w.shape[dim], -1)
    for _ in range(steps):
        u = unit(mat @ v)
        v = unit(mat.T @ u)
    return w / (u @ mat @ v), u, v


def test_spectral_norm_iterates_in_training_mode_only():
    conv, sn = spectral_conv()
    w, u, v = fill(3, 2, 2, 2), unit(fill(3, phase=0.1)), unit(fill(8, phase=0.9))
    for _ in range(3):  # each read in training mode: one step, the vectors updated
        got = conv.weight.numpy()
        want, u, v = numpy_spectral(w, u, v, 1)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(sn._u.numpy(), u, rtol=1e-12)
    conv.eval()
    for _ in range(2):  # eval: the vectors as they are
        np.testing.assert_allclose(conv.weight.numpy(), numpy_spectral(w, u, v, 0)[0], rtol=1e-12)
        np.testing.assert_allclose(sn._v.numpy(), v, rtol=1e-12)


def test_spectral_norm_of_a_forward_pass_and_a_training_step():
    conv, sn = spectral_conv()
    conv.bias.data = fg.zeros(3, dtype=fg.float64)
    opt = fg.optim.SGD(conv.parameters(), lr=0.1)
    x = fill(1, 2, 2, 2, phase=0.5)
    w, u, v = fill(3, 2, 2, 2), unit(fill(3, phase=0.1)), unit(fill(8, phase=0.9))
    for _ in range(3):
        b = conv.bias.numpy()
        opt.zero_grad()
        y = conv(fg.tensor(x))
        y.sum().backward()
        opt.step()  # computes the forward, the vectors' update and the step together
        want, u, v = numpy_spectral(w, u, v, 1)
        np.testing.assert_allclose(
            y.numpy().reshape(-1), want.reshape(3, -1) @ x.reshape(-1) + b, rtol=1e-12
        )
        w = conv.parametrizations.weight.original.numpy()
    np.testing.assert_allclose(sn._u.numpy(), u, rtol=1e-12)


def test_spectral_norm_after_registration_is_near_the_largest_singular_value():
    fg.manual_seed(0)
    w = fill(6, 5)
    m = PZ.spectral_norm(linear64(w), n_power_iterations=3).eval()
    sigma = np.linalg.svd(w, compute_uv=False)[0]
    np.testing.assert_allclose(m.weight.numpy(), w / sigma, rtol=1e-6)


def test_spectral_norm_dims_and_one_dimensional_weights():
    t = nn.ConvTranspose2d(3, 2, 2).double()  # weight (3, 2, 2, 2): output channels are dim 1
    PZ.spectral_norm(t)
    sn = t.parametrizations.weight[0]
    assert sn.dim == 1 and sn._u.shape == (2,) and sn._v.shape == (12,)
    c = nn.Conv2d(3, 2, 2)
    PZ.spectral_norm(c, dim=-1)
    assert c.parametrizations.weight[0].dim == 3
    b = PZ.spectral_norm(nn.Linear(2, 3), name="bias")  # 1-D: normalized exactly
    np.testing.assert_allclose(np.linalg.norm(b.bias.numpy()), 1.0, rtol=1e-6)
    assert not hasattr(b.parametrizations.bias[0], "_u")


def test_spectral_norm_refusals_are_torchs():
    with pytest.raises(ValueError, match="has no parameter or buffer with name 'nope'"):
        PZ.spectral_norm(nn.Linear(2, 2), name="nope")
    with pytest.raises(IndexError, match=r"expected to be in range of \[-2, 1\] but got 2"):
        PZ.spectral_norm(nn.Linear(2, 2), dim=2)
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive"):
        PZ.spectral_norm(nn.Linear(2, 2), n_power_iterations=0)


def test_torchs_live_values_where_torch_imports():
    torch = pytest.importorskip("torch")
    tm = torch.nn.Conv2d(2, 3, 2).double()
    tm.weight.data = torch.tensor(fill(3, 2, 2, 2))
    torch.nn.utils.parametrizations.spectral_norm(tm)
    tsn = tm.parametrizations.weight[0]
    tsn._u.data = torch.tensor(unit(fill(3, phase=0.1)))
    tsn._v.data = torch.tensor(unit(fill(8, phase=0.9)))
    conv, _ = spectral_conv()
    for _ in range(2):
        np.testing.assert_allclose(conv.weight.numpy(), tm.weight.detach().numpy(), rtol=1e-12)
    tw = torch.nn.utils.parametrizations.weight_norm(
        torch.nn.Linear(4, 3, bias=False).double(), dim=1
    )
    tw.parametrizations.weight.original1.data = torch.tensor(fill(3, 4))
    tw.parametrizations.weight.original0.data = torch.tensor(fill(1, 4, phase=2.0))
    w = PZ.weight_norm(linear64(np.zeros((3, 4))), dim=1)
    w.parametrizations.weight.original1.data = fg.tensor(fill(3, 4))
    w.parametrizations.weight.original0.data = fg.tensor(fill(1, 4, phase=2.0))
    np.testing.assert_allclose(w.weight.numpy(), tw.weight.detach().numpy(), rtol=1e-12)


# ---------------------------------------------------------------- orthogonal


def orthogonal_module(shape, orthogonal_map=None, use_trivialization=True, phase=0.3):
    m = nn.Module()
    m.weight = nn.Parameter(fg.tensor(fill(*shape, phase=phase)))
    return PZ.orthogonal(m, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization)


def gram_error(q):
    """|Q^T Q - I| (|Q Q^T - I| for a wide Q), the largest over a batch."""
    if q.shape[-2] < q.shape[-1]:
        q = np.swapaxes(q, -1, -2)
    return np.abs(np.swapaxes(q, -1, -2) @ q - np.eye(q.shape[-1])).max()


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3)])
def test_orthogonal_reads_orthogonal_matrices(shape, orthogonal_map):
    m = orthogonal_module(shape, orthogonal_map)
    assert list(m.state_dict()) == [
        "parametrizations.weight.original",
        "parametrizations.weight.0.base",
    ]
    q = m.weight.numpy()
    assert q.shape == shape and gram_error(q) < 1e-12
    if shape[-1] == shape[-2]:  # the weight's own QR (R's diagonal positive) at first
        w = fill(*shape)
        want, r = np.linalg.qr(w)
        want = want * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
        np.testing.assert_allclose(q, want, atol=1e-12)
    # the original is -Id: the map of it is the identity, the weight the base
    original = m.parametrizations.weight.original.numpy()
    np.testing.assert_array_equal(original, -np.broadcast_to(np.eye(*shape[-2:]), shape))


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
def test_orthogonal_gradient_against_central_differences(orthogonal_map):
    m = orthogonal_module((4, 3), orthogonal_map, use_trivialization=False)
    original = m.parametrizations.weight.original
    C = fg.tensor(fill(4, 3, phase=1.3))
    (m.weight * C).sum().backward()
    x0 = original.numpy().copy()
    numeric = np.zeros_like(x0)
    h = 1e-6
    for idx in np.ndindex(*x0.shape):
        values = []
        for sign in (1, -1):
            x = x0.copy()
            x[idx] += sign * h
            original.data = fg.tensor(x)
            values.append((m.weight * C).sum().item())
        numeric[idx] = (values[0] - values[1]) / (2 * h)
    grad = original.grad.numpy()
    if orthogonal_map == "householder":
        # the diagonal (its signs) is read as integers: no gradient, a step in the values
        assert not np.diagonal(grad).any()
        grad, numeric = np.tril(grad, -1), np.tril(numeric, -1)
    np.testing.assert_allclose(grad, numeric, atol=1e-7)


def test_orthogonal_assignment():
    q, _ = np.linalg.qr(fill(4, 4, phase=2.0))
    m = orthogonal_module((4, 4))
    m.weight = fg.tensor(q)  # orthogonal already: kept as it is
    np.testing.assert_allclose(m.weight.numpy(), q, atol=1e-12)
    m.weight = fg.tensor(fill(4, 4, phase=2.0))  # not orthogonal: its QR's Q
    assert gram_error(m.weight.numpy()) < 1e-12
    h = orthogonal_module((5, 3), "householder", use_trivialization=False)
    q, _ = np.linalg.qr(fill(5, 3, phase=2.0))
    h.weight = fg.tensor(q)
    np.testing.assert_allclose(h.weight.numpy(), q, atol=1e-12)
    e = orthogonal_module((3, 3), "matrix_exp", use_trivialization=False)
    with pytest.raises(NotImplementedError, match="use_trivialization=False"):
        e.weight = fg.tensor(q[:3])
    with pytest.raises(ValueError, match=r"Expected a matrix or batch of matrices of shape"):
        orthogonal_module((3, 3)).weight = fg.eye(2, dtype=fg.float64)


def test_householder_product_is_torchs_definition():
    A = fg.tensor([[1.0, 0.0], [0.5, 1.0], [0.25, -1.0]], dtype=fg.float64)
    tau = fg.tensor([0.5, 1.5], dtype=fg.float64)
    a, t = A.numpy(), tau.numpy()
    q = np.eye(3)
    for i in range(2):
        v = np.concatenate([np.zeros(i), [1.0], a[i + 1 :, i]])
        q = q @ (np.eye(3) - t[i] * np.outer(v, v))
    np.testing.assert_allclose(PZ.householder_product(A, tau).numpy(), q[:, :2], rtol=1e-12)


def test_orthogonal_refusals_are_torchs():
    with pytest.raises(ValueError, match="has no parameter or buffer with name 'w'"):
        PZ.orthogonal(nn.Linear(2, 2), "w")
    with pytest.raises(ValueError, match="Got a tensor of 1 dimensions"):
        PZ.orthogonal(nn.Linear(2, 2), "bias")
    with pytest.raises(ValueError, match='orthogonal_map has to be one of "matrix_exp"'):
        PZ.orthogonal(nn.Linear(2, 2), orthogonal_map="qr")


def test_orthogonal_against_torch_where_torch_imports():
    torch = pytest.importorskip("torch")
    for shape, orthogonal_map, trivial in [
        ((4, 4), "matrix_exp", True),
        ((5, 3), "cayley", False),
        ((3, 5), "householder", False),
        ((2, 4, 3), "householder", True),
    ]:
        tm = torch.nn.Module()
        tm.weight = torch.nn.Parameter(torch.tensor(fill(*shape)))
        torch.nn.utils.parametrizations.orthogonal(
            tm, orthogonal_map=orthogonal_map, use_trivialization=trivial
        )
        m = orthogonal_module(shape, orthogonal_map, trivial)
        assert list(m.state_dict()) == list(tm.state_dict())
        m.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
        np.testing.assert_allclose(m.weight.numpy(), tm.weight.detach().numpy(), atol=1e-12)
        C = fill(*shape, phase=1.3)
        (m.weight * fg.tensor(C)).sum().backward()
        (tm.weight * torch.tensor(C)).sum().backward()
        np.testing.assert_allclose(
            m.parametrizations.weight.original.grad.numpy(),
            tm.parametrizations.weight.original.grad.numpy(),
            atol=1e-12,
        )
