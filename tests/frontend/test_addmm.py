"""The addmm family (addmm, addmv, baddbmm, addbmm) and their in-place forms against
PyTorch's semantics: beta * input + alpha * product, input broadcast to the product's
shape; beta 0 ignores input and alpha 0 the product, NaN and inf included in the value;
what is ignored gets a zero cotangent, as in torch."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg

NAN, INF = float("nan"), float("inf")


def _np(t):
    return np.asarray(t.detach().numpy(), np.float64)


CASES = {
    # name: (function, input shape, operand shapes, numpy product)
    "addmm": (fg.addmm, (3,), [(2, 4), (4, 3)], lambda a, b: a @ b),
    "addmv": (fg.addmv, (2,), [(2, 4), (4,)], lambda a, b: a @ b),
    "baddbmm": (fg.baddbmm, (1, 2, 3), [(5, 2, 4), (5, 4, 3)], lambda a, b: a @ b),
    "addbmm": (fg.addbmm, (2, 3), [(5, 2, 4), (5, 4, 3)], lambda a, b: (a @ b).sum(0)),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, -2.0), (0, 1), (1, 0), (0, 0)])
def test_values_and_gradients_with_nan_and_inf_where_ignored(name, beta, alpha):
    fn, in_shape, shapes, product = CASES[name]
    rng = np.random.default_rng(3)
    inp = rng.standard_normal(in_shape)
    mats = [rng.standard_normal(s) for s in shapes]
    inp.flat[0], mats[0].flat[1] = NAN, INF  # ignored where beta or alpha is 0
    leaves = [fg.tensor(a, dtype=fg.float64, requires_grad=True) for a in (inp, *mats)]
    y = fn(*leaves, beta=beta, alpha=alpha)
    with np.errstate(invalid="ignore"):
        term = alpha * product(*mats) if alpha else 0.0
        want = (beta * inp if beta else 0.0) + term + np.zeros(y.shape)
    np.testing.assert_allclose(_np(y), want, rtol=1e-12)
    assert y.shape == want.shape and y.dtype == fg.float64
    g = np.linspace(-1, 1, y.numel()).reshape(y.shape)
    grads = fg.grad((y * fg.tensor(g)).sum(), leaves)
    # the input's gradient: beta * g summed over what it broadcast along (0 where beta is 0)
    gin = beta * g
    while gin.ndim > inp.ndim:
        gin = gin.sum(0)
    gin = gin.sum(tuple(i for i, s in enumerate(inp.shape) if s == 1), keepdims=True)
    np.testing.assert_allclose(_np(grads[0]), gin.reshape(inp.shape), rtol=1e-12, atol=1e-15)
    if alpha == 0:  # the product ignored: its operands get its backward of a zero
        # cotangent, as torch's (0 @ ..., so NaN only beside the infinite operand)
        zero = fg.grad(
            fn(*leaves, beta=beta, alpha=1),
            leaves[1:],
            grad_outputs=fg.zeros(y.shape, dtype=fg.float64),
        )
        for gr, want_g in zip(grads[1:], zero):
            assert np.array_equal(_np(gr), _np(want_g), equal_nan=True)
    finite = [np.nan_to_num(a, posinf=1.0) for a in mats]
    xs = [fg.tensor(a, dtype=fg.float64) for a in (np.nan_to_num(inp), *finite)]
    assert fg.testing.gradcheck(lambda *t: fn(*t, beta=beta, alpha=alpha), xs)


def test_integers_and_refusals_are_torchs():
    i = fg.tensor([1, 2])
    assert fg.addmm(i, fg.tensor([[1, 2]]), fg.tensor([[3, 1], [4, 1]])).tolist() == [[12, 5]]
    assert fg.addmm(i, fg.tensor([[1, 2]]), fg.tensor([[3, 1], [4, 1]]), beta=2).tolist() == [
        [13, 7]
    ]
    with pytest.raises(fg.DTypeError, match="beta=0.5 with int64"):  # torch truncates it
        fg.addmm(i, fg.tensor([[1, 2]]), fg.tensor([[3, 1], [4, 1]]), beta=0.5)
    with pytest.raises(fg.DTypeError, match="addmm: expects tensors of one dtype"):
        fg.addmm(fg.ones(2), fg.tensor([[1, 2]]), fg.ones(2, 2))
    with pytest.raises(fg.ShapeError, match="cannot be multiplied"):
        fg.addmm(fg.zeros(3), fg.ones(2, 3), fg.ones(2, 3))
    with pytest.raises(fg.ShapeError, match="mat1 must be a matrix"):
        fg.addmm(fg.zeros(3), fg.ones(3), fg.ones(3, 3))
    with pytest.raises(fg.ShapeError):  # the input must broadcast to the product
        fg.addmm(fg.zeros(3, 3), fg.ones(2, 3), fg.ones(3, 3))
    with pytest.raises(fg.ShapeError, match="batch1 and batch2"):
        fg.baddbmm(fg.zeros(1), fg.ones(2, 1, 3), fg.ones(3, 3, 1))
    # an empty inner dimension: the product is zeros, input comes through
    assert fg.addmm(fg.ones(2, 2), fg.ones(2, 0), fg.ones(0, 2)).tolist() == [[1.0] * 2] * 2
    assert fg.addmv(fg.zeros(0), fg.ones(0, 3), fg.ones(3)).shape == (0,)


def test_in_place_forms_and_methods():
    x = fg.ones(2, 2)
    x.addmm_(fg.eye(2), fg.eye(2), beta=0.5)
    assert x.tolist() == [[1.5, 0.5], [0.5, 1.5]]
    b = fg.zeros(2, 1, 1)
    assert b.baddbmm(fg.ones(2, 1, 3), fg.ones(2, 3, 1), alpha=2).tolist() == [[[6.0]], [[6.0]]]
    v = fg.tensor([NAN, 1.0])
    v.addmv_(fg.eye(2), fg.tensor([1.0, 2.0]), beta=0)
    assert v.tolist() == [1.0, 2.0]


@pytest.mark.cpu_device  # (autocast("cpu") casts the CPU's ops only, as torch's)
def test_autocast_runs_them_in_the_low_type_as_torch_lists_them():
    a, b, c = fg.ones(2, 3), fg.ones(3, 4), fg.zeros(4)
    with fg.autocast("cpu", dtype=fg.bfloat16):
        assert fg.addmm(c, a, b).dtype == fg.bfloat16
        assert fg.baddbmm(fg.zeros(1, 2, 4), a[None], b[None]).dtype == fg.bfloat16
    assert fg.addmm(c, a, b).dtype == fg.float32
