"""aminmax, sum_to_size, tensordot and logspace against PyTorch: values, dtypes, gradients
at the special points (ties, -0.0, NaN, inf), empty and 0-d inputs, and torch's refusals."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg

try:
    import torch
except ImportError:  # the tests against torch skip; the others run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="compares with PyTorch")

NAN, INF = float("nan"), float("inf")
ROWS = [[1.0, 3.0, 3.0, -0.0], [0.0, -0.0, NAN, 2.0], [-INF, INF, 1.0, 1.0]]


def _both(data, dtype="float64", grad=True):
    f = fg.tensor(data, dtype=getattr(fg, dtype), requires_grad=grad)
    t = torch.tensor(data, dtype=getattr(torch, dtype), requires_grad=grad)
    return f, t


def _same(f, t):
    f, t = f.detach().numpy(), t.detach().numpy()
    assert f.shape == t.shape and str(f.dtype) == str(t.dtype)
    np.testing.assert_array_equal(f, t)
    if f.dtype.kind == "f":  # the signs of zeros (a NaN's sign is not compared: docs/NUMERICS.md)
        keep = ~np.isnan(f)
        np.testing.assert_array_equal(np.signbit(f[keep]), np.signbit(t[keep]))


@needs_torch
@pytest.mark.parametrize("dim, keepdim", [(None, False), (None, True), (0, False), (1, True)])
def test_aminmax_values_and_gradients_as_torchs(dim, keepdim):
    f, t = _both(ROWS)
    kw = {} if dim is None else {"dim": dim}
    got, want = f.aminmax(keepdim=keepdim, **kw), t.aminmax(keepdim=keepdim, **kw)
    assert got._fields == ("min", "max")
    _same(got.min, want.min)
    _same(got.max, want.max)
    gf = fg.grad(got.min.sum() + 2 * got.max.sum(), [f])[0]
    (gt,) = torch.autograd.grad(want.min.sum() + 2 * want.max.sum(), [t])
    _same(gf, gt)  # ties share the gradient; NaN rows give it to the NaN


@needs_torch
def test_aminmax_of_ints_bools_and_0d_and_its_refusals():
    for data, dtype in [([[3, -1], [2, 7]], "int32"), ([True, False], "bool"), (2.5, "float32")]:
        f, t = _both(data, dtype, grad=False)
        got, want = fg.aminmax(f), torch.aminmax(t)
        _same(got.min, want.min)
        _same(got.max, want.max)
    f, t = _both([[1.0, 2.0]], grad=False)
    _same(f.aminmax(dim=-1).max, t.aminmax(dim=-1).max)
    with pytest.raises(RuntimeError, match="empty dimension"):
        fg.zeros(0).aminmax()
    with pytest.raises(IndexError):
        fg.zeros(2, 0).aminmax(dim=1)
    _same(fg.zeros(2, 0).aminmax(dim=0).min, torch.zeros(2, 0).aminmax(dim=0).min)
    with pytest.raises(TypeError, match="dim"):
        fg.zeros(2).aminmax(dim=(0,))


@pytest.mark.parametrize(
    "shape, size", [((2, 3), (1, 3)), ((2, 3), (3,)), ((2, 3), (2, 1)), ((4, 1, 3), (1, 1, 1))]
)
@needs_torch
def test_sum_to_size_as_torchs(shape, size):
    data = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) - 2.5
    data.reshape(-1)[0] = -0.0
    f, t = _both(data.tolist())
    got, want = f.sum_to_size(*size), t.sum_to_size(*size)
    _same(got, want)
    _same(f.sum_to_size(size), want)  # a tuple too
    w = np.arange(np.prod(size), dtype=np.float64).reshape(size) + 1
    (gf,) = fg.grad((got * fg.tensor(w)).sum(), [f])
    (gt,) = torch.autograd.grad((want * torch.tensor(w)).sum(), [t])
    _same(gf, gt)


def test_sum_to_size_dtypes_identity_and_refusal():
    i = fg.ones(2, 3, dtype=fg.int32)
    assert i.sum_to_size(1, 3).dtype == fg.int64  # as torch's (a sum)
    assert fg.ones(2, 3, dtype=fg.bool).sum_to_size(1, 3).tolist() == [[2, 2, 2]]
    x = fg.ones(2, 3)
    assert x.sum_to_size(2, 3) is x  # torch returns the tensor itself too
    with pytest.raises(RuntimeError, match=r"size \[4\] is not expandable to size \[2, 3\]"):
        x.sum_to_size(4)
    with pytest.raises(RuntimeError, match="not expandable"):
        x.sum_to_size(1, 2, 3, 4)


@needs_torch
@pytest.mark.parametrize("dims", [2, 1, 0, ([1, 2], [1, 0]), ([0], [2]), [[2], [0]]])
def test_tensordot_values_and_gradients_as_torchs(dims):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4))
    b = rng.standard_normal((4, 3, 2)) if dims != 2 else rng.standard_normal((3, 4, 5))
    if dims == 1:
        b = rng.standard_normal((4, 5))
    if dims == 0:
        b = rng.standard_normal((2,))
    a.reshape(-1)[:3] = [0.0, -0.0, 1.0]
    fa, ta = _both(a.tolist())
    fb, tb = _both(b.tolist())
    got, want = fg.tensordot(fa, fb, dims=dims), torch.tensordot(ta, tb, dims=dims)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    w = rng.standard_normal(tuple(want.shape))
    gf = fg.grad((got * fg.tensor(w)).sum(), [fa, fb])
    gt = torch.autograd.grad((want * torch.tensor(w)).sum(), [ta, tb])
    for x, y in zip(gf, gt):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-12, atol=1e-15)


def test_tensordot_refusals():
    a, b = fg.ones(2, 3), fg.ones(4, 3)
    with pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        fg.tensordot(a, b, dims=1)
    with pytest.raises(RuntimeError, match="same dtype"):
        fg.tensordot(a, b.double(), dims=([1], [1]))
    with pytest.raises(RuntimeError, match="same length"):
        fg.tensordot(a, b, dims=([0, 1], [1]))
    with pytest.raises(RuntimeError, match="dims >= 0"):
        fg.tensordot(a, b, dims=-1)
    assert fg.tensordot(a, b, dims=([1], [1])).shape == (2, 4)


@pytest.mark.parametrize(
    "args, kw",
    [
        ((0, 2, 5), {}),
        ((0, 2, 5), {"base": 2, "dtype": "int64"}),
        ((-1, 1, 1), {}),
        ((2, 0, 3), {"dtype": "float64"}),
        ((0, 3, 4), {"base": 0.5}),
        ((0, 1, 0), {}),
        ((-2, 2, 7), {"base": 3.0}),
    ],
)
@needs_torch
def test_logspace_as_torchs(args, kw):
    kf = {k: getattr(fg, v) if k == "dtype" else v for k, v in kw.items()}
    kt = {k: getattr(torch, v) if k == "dtype" else v for k, v in kw.items()}
    got, want = fg.logspace(*args, **kf).numpy(), torch.logspace(*args, **kt).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_logspace_refusals():
    with pytest.raises(RuntimeError, match="non-negative"):
        fg.logspace(0, 1, -1)
    with pytest.raises(RuntimeError, match="bool"):
        fg.logspace(0, 1, 3, dtype=fg.bool)


QUANTILE_ROWS = [[3.0, 1.0, 2.0, NAN, 5.0], [4.0, 0.5, -1.0, 2.0, -0.0], [1.0, 1.0, 1.0, 1.0, 1.0]]


@needs_torch
@pytest.mark.parametrize("op", ["quantile", "nanquantile"])
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("q", [0.0, 0.4, 0.5, 0.625, 1.0, [0.0, 0.125, 0.375, 0.5, 0.875, 1.0]])
def test_quantile_values_as_torchs(op, interpolation, q):
    """Ranks falling between elements, on them and halfway (nearest rounds half to even),
    rows holding a NaN (NaN, or left out by nanquantile), ties, -0.0, q a number or a
    1-D tensor; along a dim and over every element, with and without keepdim."""
    f, t = _both(QUANTILE_ROWS, grad=False)
    qf, qt = (
        (q, q)
        if isinstance(q, float)
        else (fg.tensor(q, dtype=fg.float64), torch.tensor(q, dtype=torch.float64))
    )
    for kw in ({"dim": 1}, {"dim": 0, "keepdim": True}, {}, {"keepdim": True}, {"dim": -1}):
        got = getattr(fg, op)(f, qf, interpolation=interpolation, **kw)
        want = getattr(torch, op)(t, qt, interpolation=interpolation, **kw)
        _same(got, want)


@needs_torch
@pytest.mark.parametrize("op", ["quantile", "nanquantile"])
def test_quantile_gradients_as_torchs(op):
    rng = np.random.default_rng(7)
    data = rng.standard_normal((3, 7))  # no ties: torch's sort breaks them its own way
    data[1, 2] = NAN
    f, t = _both(data.tolist())
    qs = [0.1, 0.5, 0.9]
    for interpolation in ("linear", "midpoint", "nearest"):
        got = getattr(fg, op)(f, fg.tensor(qs, dtype=fg.float64), 1, interpolation=interpolation)
        want = getattr(torch, op)(
            t, torch.tensor(qs, dtype=torch.float64), 1, interpolation=interpolation
        )
        w = rng.standard_normal(tuple(want.shape))
        (gf,) = fg.grad((got * fg.tensor(w)).nansum(), [f])
        (gt,) = torch.autograd.grad((want * torch.tensor(w)).nansum(), [t])
        np.testing.assert_allclose(gf.numpy(), gt.numpy(), rtol=1e-12, atol=1e-15)


def test_quantile_refusals_are_torchs():
    x = fg.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="either float or double"):
        fg.quantile(fg.tensor([1, 2]), 0.5)
    with pytest.raises(RuntimeError, match="either float or double"):
        fg.quantile(x.bfloat16(), 0.5)
    with pytest.raises(RuntimeError, match=r"q must be in the range \[0, 1\] but got 1.5"):
        fg.quantile(x, 1.5)
    with pytest.raises(RuntimeError, match="same dtype as the input"):
        fg.quantile(x, fg.tensor([0.5], dtype=fg.float64))
    with pytest.raises(RuntimeError, match="non-empty"):
        fg.quantile(fg.zeros(0), 0.5)
    with pytest.raises(RuntimeError, match="interpolation must be one of"):
        fg.quantile(x, 0.5, interpolation="x")
    with pytest.raises(RuntimeError, match="scalar or 1D"):
        fg.quantile(fg.ones(2, 2), fg.ones(2, 2) * 0.5)
    assert fg.nanquantile(fg.tensor([NAN, NAN]), 0.5).isnan().item()
    assert x.quantile(0.5).item() == 1.5 and x.nanquantile(0.25).item() == 1.25


def test_quantile_rank_is_torch_2_14s_float64_product_of_float32_q():
    """The rank q (n - 1) is computed as torch 2.14 does: q rounded to float32, times n - 1
    in float64, the weight rounded to float32. Torch 2.13's rank rounded to float32 (rank
    33.0287208 here, the answer 1.0351269); without torch, so that CI checks it."""
    row = np.concatenate([-np.arange(33, 0, -1), [1.0301552, 1.203259, 5.0]]).astype(np.float32)
    q = 0.9436777652291878
    got = fg.quantile(fg.tensor(row), q).item()
    assert got == np.float32(1.0351271629333496)  # torch 2.14.1's bits
    assert fg.nanquantile(fg.tensor(np.append(row, np.float32(NAN))), q).item() == got


@pytest.mark.skipif(
    torch is None or tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 14),
    reason="compares with PyTorch 2.14 or later (2.13 rounds the rank to float32)",
)
def test_quantile_is_torchs_bit_for_bit():
    """The same bits as torch for random rows, q and interpolations, float32 and float64,
    rows with a NaN or all NaN, and q on the eighths (ranks at ties for 'nearest')."""
    rng = np.random.default_rng(0)
    for k in range(60):
        n = int(rng.integers(1, 40))
        x = rng.standard_normal((3, n)).astype(np.float32 if k % 3 else np.float64)
        x[0, min(1, n - 1)] = NAN
        if k % 7 == 0:
            x[2] = NAN
        q = float(rng.random()) if k % 4 else int(rng.integers(0, 9)) / 8
        for op in ("quantile", "nanquantile"):
            for interpolation in ("linear", "lower", "higher", "midpoint", "nearest"):
                got = getattr(fg, op)(fg.tensor(x), q, 1, interpolation=interpolation)
                want = getattr(torch, op)(torch.tensor(x), q, 1, interpolation=interpolation)
                np.testing.assert_array_equal(got.numpy(), want.numpy())


# torch.quantile and torch.nanquantile of QUANTILE_ROWS at q (0.125, 0.4, 0.5, 0.875)
QUANTILES_FROM_TORCH = {
    "quantile": {
        "linear": [
            [NAN, -0.5, 1.0],
            [NAN, 0.30000000000000004, 1.0],
            [NAN, 0.5, 1.0],
            [NAN, 3.0, 1.0],
        ],
        "lower": [[NAN, -1.0, 1.0], [NAN, -0.0, 1.0], [NAN, 0.5, 1.0], [NAN, 2.0, 1.0]],
        "higher": [[NAN, -0.0, 1.0], [NAN, 0.5, 1.0], [NAN, 0.5, 1.0], [NAN, 4.0, 1.0]],
        "midpoint": [[NAN, -0.5, 1.0], [NAN, 0.25, 1.0], [NAN, 0.5, 1.0], [NAN, 3.0, 1.0]],
        "nearest": [[NAN, -1.0, 1.0], [NAN, 0.5, 1.0], [NAN, 0.5, 1.0], [NAN, 4.0, 1.0]],
    },
    "nanquantile": {
        "linear": [
            [1.375, -0.5, 1.0],
            [2.2, 0.30000000000000004, 1.0],
            [2.5, 0.5, 1.0],
            [4.25, 3.0, 1.0],
        ],
        "lower": [[1.0, -1.0, 1.0], [2.0, -0.0, 1.0], [2.0, 0.5, 1.0], [3.0, 2.0, 1.0]],
        "higher": [[2.0, -0.0, 1.0], [3.0, 0.5, 1.0], [3.0, 0.5, 1.0], [5.0, 4.0, 1.0]],
        "midpoint": [[1.5, -0.5, 1.0], [2.5, 0.25, 1.0], [2.5, 0.5, 1.0], [4.0, 3.0, 1.0]],
        "nearest": [[1.0, -1.0, 1.0], [2.0, 0.5, 1.0], [3.0, 0.5, 1.0], [5.0, 4.0, 1.0]],
    },
}


@pytest.mark.parametrize("op", ["quantile", "nanquantile"])
def test_quantile_values_are_torchs_without_torch(op):
    """torch's values, computed once (here where torch is not installed, as in CI)."""
    x = fg.tensor(QUANTILE_ROWS, dtype=fg.float64)
    q = fg.tensor([0.125, 0.4, 0.5, 0.875], dtype=fg.float64)
    for interpolation, want in QUANTILES_FROM_TORCH[op].items():
        got = getattr(fg, op)(x, q, dim=1, interpolation=interpolation).numpy()
        want = np.array(want)
        np.testing.assert_array_equal(got, want, err_msg=interpolation)
        keep = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[keep]), np.signbit(want[keep]))


COV_ROWS = [[0.0, 1.0, 2.0, -0.0], [2.0, 1.0, 0.5, 4.0], [1.0, 1.0, 1.0, 1.0]]


def test_cov_and_corrcoef_without_torch():
    x = fg.tensor(COV_ROWS, dtype=fg.float64)
    c = fg.cov(x)
    want = np.cov(np.array(COV_ROWS))
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fg.cov(x, correction=0).numpy(), np.cov(COV_ROWS, ddof=0))
    assert fg.cov(x[0]).shape == () and fg.cov(fg.ones(2, 1)).isnan().all().item()
    r = fg.corrcoef(x[:2]).numpy()
    np.testing.assert_allclose(r, np.corrcoef(np.array(COV_ROWS[:2])), rtol=1e-12)
    with pytest.raises(RuntimeError, match="two or fewer dimensions"):
        fg.cov(fg.ones(2, 2, 2))


@needs_torch
def test_cov_weights_corrcoef_and_gradients_as_torchs():
    f, t = _both(COV_ROWS)
    fw, aw = [1, 2, 1, 3], [0.5, 1.0, 2.0, 0.25]
    for kw_f, kw_t in [
        ({}, {}),
        ({"correction": 0}, {"correction": 0}),
        ({"fweights": fg.tensor(fw)}, {"fweights": torch.tensor(fw)}),
        (
            {"fweights": fg.tensor(fw), "aweights": fg.tensor(aw, dtype=fg.float64)},
            {"fweights": torch.tensor(fw), "aweights": torch.tensor(aw, dtype=torch.float64)},
        ),
        (
            {"aweights": fg.tensor(aw, dtype=fg.float64), "correction": 2},
            {"aweights": torch.tensor(aw, dtype=torch.float64), "correction": 2},
        ),
    ]:
        got, want = fg.cov(f, **kw_f), torch.cov(t, **kw_t)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
        (gf,) = fg.grad((got * got).sum(), [f])
        (gt,) = torch.autograd.grad((want * want).sum(), [t])
        np.testing.assert_allclose(gf.numpy(), gt.numpy(), rtol=1e-10, atol=1e-12)
    f2, t2 = _both(COV_ROWS[:2])
    got, want = fg.corrcoef(f2), torch.corrcoef(t2)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)


def test_cross_without_torch():
    a = fg.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, -0.0]])
    b = fg.tensor([[0.0, 1.0, 0.0], [3.0, 0.0, 0.0]])
    assert fg.cross(a, b, dim=1).tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, -6.0]]
    assert fg.linalg.cross(a, b).tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, -6.0]]
    assert a.cross(b, dim=-1).tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, -6.0]]
    with pytest.warns(UserWarning, match="without specifying the dim"):
        assert fg.cross(a.T, b.T).shape == (3, 2)
    with pytest.raises(RuntimeError, match="must have length 3"):
        fg.cross(fg.ones(2, 4), fg.ones(2, 4), dim=1)


@needs_torch
def test_cross_values_and_gradients_as_torchs():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((4, 3, 2)), rng.standard_normal((1, 3, 2))
    fa, ta = _both(a.tolist())
    fb, tb = _both(b.tolist())
    got, want = fg.linalg.cross(fa, fb, dim=1), torch.linalg.cross(ta, tb, dim=1)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    gf = fg.grad((got * got).sum(), [fa, fb])
    gt = torch.autograd.grad((want * want).sum(), [ta, tb])
    for x, y in zip(gf, gt):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-12, atol=1e-14)


def test_init_eye_and_dirac():
    w = fg.zeros(2, 3)
    fg.nn.init.eye_(w)
    assert w.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    conv = fg.nn.Conv2d(2, 4, 3, bias=False)
    fg.nn.init.dirac_(conv.weight)
    x = fg.randn(1, 2, 5, 5)
    y = conv(fg.nn.functional.pad(x, (1, 1, 1, 1)))
    np.testing.assert_allclose(y[:, :2].detach().numpy(), x.numpy(), rtol=1e-6)
    assert (y[:, 2:].detach().numpy() == 0).all()  # channels past the input's: zero
    g = fg.zeros(4, 1, 3)
    fg.nn.init.dirac_(g, groups=2)
    assert g[:, 0, 1].tolist() == [1.0, 0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="2 dimensions"):
        fg.nn.init.eye_(fg.zeros(2))
    with pytest.raises(ValueError, match="3, 4, or 5"):
        fg.nn.init.dirac_(fg.zeros(2, 2))


def test_zero_d_and_empty_inputs_as_torchs():
    """0-d and empty inputs, torch's results written down (and checked live where torch
    is installed): quantile of a 0-d tensor is itself, its gradient 1; sum_to_size of an
    empty axis gives zeros; a contraction over an empty axis is zeros; cov of one
    observation or of none is NaN; corrcoef of a constant row is NaN."""
    x = fg.tensor(3.0, requires_grad=True)
    for kw in ({}, {"dim": 0}, {"dim": -1, "keepdim": True}):
        q = fg.quantile(x, 0.5, **kw)
        assert q.shape == () and q.item() == 3.0
        assert fg.quantile(x, fg.tensor([0.2, 0.5]), **kw).tolist() == [3.0, 3.0]
    assert fg.grad(fg.quantile(x, 0.3), [x])[0].item() == 1.0
    assert fg.nanquantile(fg.tensor(NAN), 0.5).isnan().item()
    with pytest.raises(IndexError):
        fg.quantile(x, 0.5, dim=1)
    assert fg.zeros(0, 3).sum_to_size(1, 3).tolist() == [[0.0, 0.0, 0.0]]
    assert fg.tensor(-0.0).sum_to_size(()).tolist() == -0.0
    with pytest.raises(RuntimeError, match="not expandable"):
        fg.tensor(2.0).sum_to_size(1)
    assert fg.tensordot(fg.ones(2, 0), fg.ones(0, 3), dims=1).tolist() == [[0.0] * 3] * 2
    assert fg.tensordot(fg.tensor(2.0), fg.tensor(3.0), dims=0).tolist() == 6.0
    assert fg.cross(fg.zeros(0, 3), fg.zeros(0, 3), dim=1).shape == (0, 3)
    assert fg.cov(fg.tensor(2.0)).isnan().item() and fg.cov(fg.zeros(2, 0)).isnan().all().item()
    r = fg.corrcoef(fg.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]])).numpy()
    assert np.isnan(r[0]).all() and np.isnan(r[:, 0]).all() and r[1, 1] == 1.0
    assert fg.tensor(-0.0).aminmax().max.tolist() == -0.0
    with pytest.raises(IndexError):
        fg.zeros(0, 3).aminmax(dim=0)
    if torch is None:
        return
    t = torch.tensor(3.0, requires_grad=True)
    assert torch.autograd.grad(torch.quantile(t, 0.3), [t])[0].item() == 1.0
    assert torch.corrcoef(torch.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]]))[1, 1].item() == 1.0
