"""The in-place functional forms F.relu_, F.elu_, F.leaky_relu_, F.hardtanh_, F.selu_,
F.celu_ and F.threshold_ against torch 2.14's: each writes into its input and returns it;
values and gradients (of sum(y * w) through `y = f_(x * 1)`) at special points, zero signs
included, as torch's (written in as literals, float64); torch's errors."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F

inf, nan = math.inf, math.nan
X = [-inf, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, inf, nan]
W = [((i % 3) - 1) * 0.5 + 1.0 for i in range(len(X))]

CASES = {
    "relu_": lambda a: F.relu_(a),
    "elu_": lambda a: F.elu_(a),
    "elu_a2": lambda a: F.elu_(a, 2.0),
    "leaky_relu_": lambda a: F.leaky_relu_(a),
    "leaky_relu_0.2": lambda a: F.leaky_relu_(a, 0.2),
    "hardtanh_": lambda a: F.hardtanh_(a),
    "hardtanh_m": lambda a: F.hardtanh_(a, -0.5, 1.0),
    "selu_": lambda a: F.selu_(a),
    "celu_": lambda a: F.celu_(a),
    "celu_a05": lambda a: F.celu_(a, 0.5),
    "threshold_": lambda a: F.threshold_(a, 0.5, -3.0),
    "threshold_up": lambda a: F.threshold_(a, 0.5, 2.0),
}

# torch 2.14.1: (f_(x * 1), the gradient of sum(f_(x * 1) * W) with respect to x)
EXPECTED = {
    "relu_": (
        [0.0, 0.0, 0.0, 0.0, -0.0, 0.0, 0.5, 1.0, 2.0, inf, nan],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 0.5, 1.0],
    ),
    "elu_": (
        [
            -1.0,
            -0.8646647167633873,
            -0.6321205588285577,
            -0.3934693402873666,
            -0.0,
            0.0,
            0.5,
            1.0,
            2.0,
            inf,
            nan,
        ],
        [
            0.0,
            0.1353352832366127,
            0.5518191617571635,
            0.3032653298563167,
            1.0,
            1.5,
            0.5,
            1.0,
            1.5,
            0.5,
            1.0,
        ],
    ),
    "elu_a2": (
        [
            -2.0,
            -1.7293294335267746,
            -1.2642411176571153,
            -0.7869386805747332,
            -0.0,
            0.0,
            0.5,
            1.0,
            2.0,
            inf,
            nan,
        ],
        [
            0.0,
            0.2706705664732254,
            1.103638323514327,
            0.6065306597126334,
            2.0,
            3.0,
            0.5,
            1.0,
            1.5,
            0.5,
            1.0,
        ],
    ),
    "leaky_relu_": (
        [-inf, -0.02, -0.01, -0.005, -0.0, 0.0, 0.5, 1.0, 2.0, inf, nan],
        [0.005, 0.01, 0.015, 0.005, 0.01, 0.015, 0.5, 1.0, 1.5, 0.5, 0.01],
    ),
    "leaky_relu_0.2": (
        [-inf, -0.4, -0.2, -0.1, -0.0, 0.0, 0.5, 1.0, 2.0, inf, nan],
        [0.1, 0.2, 0.30000000000000004, 0.1, 0.2, 0.30000000000000004, 0.5, 1.0, 1.5, 0.5, 0.2],
    ),
    "hardtanh_": (
        [-1.0, -1.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.0, 1.0, nan],
        [0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 0.5, 0.0, 0.0, 0.0, 1.0],
    ),
    "hardtanh_m": (
        [-0.5, -0.5, -0.5, -0.5, -0.0, 0.0, 0.5, 1.0, 1.0, 1.0, nan],
        [0.0, 0.0, 0.0, 0.0, 1.0, 1.5, 0.5, 0.0, 0.0, 0.0, 1.0],
    ),
    "selu_": (
        [
            -1.7580993408473766,
            -1.5201664685956948,
            -1.1113307378125625,
            -0.6917581878028713,
            -0.0,
            0.0,
            0.5253504936777402,
            1.0507009873554805,
            2.101401974710961,
            inf,
            nan,
        ],
        [
            0.0,
            0.2379328722516818,
            0.9701529045522211,
            0.5331705765222526,
            1.7580993408473766,
            2.637149011271065,
            0.5253504936777402,
            1.0507009873554805,
            1.5760514810332207,
            0.5253504936777402,
            1.0507009873554805,
        ],
    ),
    "celu_": (
        [
            -1.0,
            -0.8646647167633873,
            -0.6321205588285577,
            -0.3934693402873666,
            -0.0,
            0.0,
            0.5,
            1.0,
            2.0,
            inf,
            nan,
        ],
        [
            0.0,
            0.1353352832366127,
            0.5518191617571635,
            0.3032653298563167,
            1.0,
            1.5,
            0.5,
            1.0,
            1.5,
            0.5,
            1.0,
        ],
    ),
    "celu_a05": (
        [
            -0.5,
            -0.4908421805556329,
            -0.43233235838169365,
            -0.31606027941427883,
            -0.0,
            0.0,
            0.5,
            1.0,
            2.0,
            inf,
            nan,
        ],
        [
            0.0,
            0.01831563888873422,
            0.20300292485491905,
            0.18393972058572117,
            1.0,
            1.5,
            0.5,
            1.0,
            1.5,
            0.5,
            1.0,
        ],
    ),
    "threshold_": (
        [-3.0, -3.0, -3.0, -3.0, -3.0, -3.0, -3.0, 1.0, 2.0, inf, nan],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.5, 0.5, 1.0],
    ),
    "threshold_up": (
        [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 2.0, inf, nan],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.5, 0.5, 1.0],
    ),
}


def same(actual, expected):
    """Equal to 1e-14 relative, NaN where torch has NaN, and zeros of torch's sign."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    np.testing.assert_allclose(actual, expected, rtol=1e-14, atol=0)
    assert np.array_equal(np.signbit(actual), np.signbit(expected)), (actual, expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_as_torch(name):
    x = fg.tensor(X, dtype=fg.float64, requires_grad=True)
    a = x * 1.0
    out = CASES[name](a)
    assert out is a  # written into its input, which is returned
    (out * fg.tensor(W, dtype=fg.float64)).sum().backward()
    values, grads = EXPECTED[name]
    same(out.detach().numpy(), values)
    same(x.grad.numpy(), grads)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_input_holds_the_result_without_autograd(name):
    x = fg.tensor(X, dtype=fg.float64)
    assert CASES[name](x) is x
    same(x.numpy(), EXPECTED[name][0])


def test_float32_and_0d_inputs():
    x = fg.tensor([-2.0, 0.5], requires_grad=True)
    a = x * 1
    F.elu_(a).sum().backward()
    # torch: [-0.8646647334098816, 0.5], gradient [0.1353352665901184, 1.0] (float32)
    assert a.dtype == fg.float32
    np.testing.assert_allclose(a.tolist(), [-0.8646647334098816, 0.5], rtol=1e-6)
    np.testing.assert_allclose(x.grad.tolist(), [0.1353352665901184, 1.0], rtol=1e-6)
    s = fg.tensor(-2.0, dtype=fg.float64, requires_grad=True)
    b = s * 1
    F.selu_(b).backward()
    assert b.shape == ()
    np.testing.assert_allclose(b.item(), -1.5201664685956948, rtol=1e-14)
    np.testing.assert_allclose(s.grad.item(), 0.2379328722516818, rtol=1e-14)
    assert F.relu_(fg.tensor(-2.0)).item() == 0.0


@pytest.mark.parametrize("name", sorted(CASES))
def test_empty_inputs(name):
    x = fg.zeros(0, 3)
    assert CASES[name](x) is x and x.shape == (0, 3)


def test_a_view_writes_into_its_base():
    base = fg.tensor([[-1.0, 2.0], [3.0, -4.0]])
    F.relu_(base[0])
    assert base.tolist() == [[0.0, 2.0], [3.0, -4.0]]


def test_a_leaf_that_requires_grad_refuses_but_not_under_no_grad():
    p = fg.tensor([-1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad") as info:
        F.relu_(p)
    assert "test_activations_inplace.py" in str(info.value)
    with fg.no_grad():
        F.elu_(p)
    # torch: tensor([-0.6321, 2.0000], requires_grad=True)
    np.testing.assert_allclose(p.tolist(), [-0.6321205588285577, 2.0], rtol=1e-6)
    assert p.requires_grad and p.is_leaf


def test_integer_inputs_as_torch():
    # torch: relu_ and threshold_ keep an int64 tensor; elu_, leaky_relu_, selu_, celu_
    # raise NotImplementedError (a RuntimeError), "elu_cpu" not implemented for 'Long'
    x = fg.tensor([-1, 2])
    assert F.relu_(x) is x and x.tolist() == [0, 2] and x.dtype == fg.int64
    y = fg.tensor([-1, 2])
    assert F.threshold_(y, 0, 5).tolist() == [5, 2]
    assert F.hardtanh_(fg.tensor([-3, 2, 5]), -1, 3).tolist() == [-1, 2, 3]
    for f in (F.elu_, F.leaky_relu_, F.selu_, F.celu_):
        with pytest.raises(RuntimeError):
            f(fg.tensor([-1, 2]))
    with pytest.raises(RuntimeError, match="[Bb]ool"):  # torch: NotImplementedError
        F.relu_(fg.tensor([True, False]))


def test_negative_slopes_give_the_out_of_place_gradient():
    # torch's in-place backward refuses these ("In-place leakyReLu backward calculation is
    # triggered with a negative slope which is not supported"); fusegrad's gives what
    # torch's F.leaky_relu(x, -0.1) and F.elu(x, -1.0) give
    w = fg.tensor([1.0, 2.0, 3.0, 4.0], dtype=fg.float64)
    x = fg.tensor([-2.0, -0.0, 0.0, 3.0], dtype=fg.float64, requires_grad=True)
    a = x * 1
    (F.leaky_relu_(a, -0.1) * w).sum().backward()
    np.testing.assert_allclose(a.tolist(), [0.2, 0.0, -0.0, 3.0], rtol=1e-14)
    np.testing.assert_allclose(x.grad.tolist(), [-0.1, -0.2, -0.30000000000000004, 4.0])
    x = fg.tensor([-2.0, -0.0, 0.0, 3.0], dtype=fg.float64, requires_grad=True)
    a = x * 1
    (F.elu_(a, -1.0) * w).sum().backward()
    np.testing.assert_allclose(a.tolist(), [0.8646647167633873, -0.0, 0.0, 3.0], rtol=1e-14)
    np.testing.assert_allclose(x.grad.tolist(), [-0.1353352832366127, -2.0, -3.0, 4.0])


def test_functional_names_and_signatures():
    params = {
        "relu_": ["input"],
        "elu_": ["input", "alpha"],
        "leaky_relu_": ["input", "negative_slope"],
        "hardtanh_": ["input", "min_val", "max_val"],
        "selu_": ["input"],
        "celu_": ["input", "alpha"],
        "threshold_": ["input", "threshold", "value"],
    }
    for name, expected in params.items():
        assert list(inspect.signature(getattr(F, name)).parameters) == expected
