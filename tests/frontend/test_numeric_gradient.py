"""`fg.gradient` (torch.gradient): numpy.gradient's values inside and at both ends, for
even steps, a step per dimension and sample coordinates, edge orders 1 and 2, at special
points (0, -0, ties, infinities, NaN), with torch's dtypes and refusals; the gradient
through it, against the transpose of its linear map."""

from __future__ import annotations

import numpy as np
import pytest
from _special_rows import special_values

import fusegrad as fg
from fusegrad.errors import ArgumentError, DTypeNotImplementedError, ShapeError


@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("shape", [(3,), (7,), (4, 5), (3, 4, 6)])
def test_values_are_numpys_for_every_dimension(shape, edge_order):
    rng = np.random.default_rng(len(shape) * 10 + edge_order)
    x = special_values(rng, *shape).astype(np.float64)
    got = fg.gradient(fg.tensor(x), edge_order=edge_order)
    want = np.gradient(x, edge_order=edge_order)
    want = [want] if len(shape) == 1 else want
    assert len(got) == len(shape)
    for g, w in zip(got, want):
        assert g.dtype is fg.float64 and g.shape == x.shape
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("edge_order", [1, 2])
def test_steps_and_coordinates_per_dimension(edge_order):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 6))
    ys = np.cumsum(rng.uniform(0.1, 2.0, 6))  # uneven samples along dim 1
    got = fg.gradient(fg.tensor(x), spacing=[0.5, fg.tensor(ys)], dim=[0, 1], edge_order=edge_order)
    want = np.gradient(x, 0.5, ys, edge_order=edge_order)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12, atol=1e-12)
    (only,) = fg.gradient(fg.tensor(x), spacing=2.0, dim=-1)  # one number for every dim
    np.testing.assert_allclose(only.numpy(), np.gradient(x, 2.0, axis=-1), rtol=1e-12)


def test_torchs_documented_examples():
    t = fg.tensor([1, 2, 4, 7, 11, 16])
    (g,) = fg.gradient(t)  # integers: the default float dtype
    assert g.dtype is fg.float32 and g.tolist() == [1.0, 1.5, 2.5, 3.5, 4.5, 5.0]
    coords = fg.tensor([0.0, 1.0, 1.5, 3.5, 4.0, 6.0])
    (g,) = fg.gradient(t.float(), spacing=(coords,))
    np.testing.assert_allclose(g.numpy(), [1.0, 3.0, 3.5, 6.7, 6.9, 2.5], rtol=1e-6)
    x = fg.arange(12.0).reshape(3, 4) ** 2
    a, b = fg.gradient(x, spacing=[1.0, 2.0], dim=[0, 1])
    assert a.tolist()[0] == [16.0, 24.0, 32.0, 40.0] and b.tolist()[0] == [0.5, 1.0, 2.0, 2.5]


def test_dtypes_follow_torch():
    x = fg.tensor([1.0, 2.0, 4.0], dtype=fg.float64)
    (g,) = fg.gradient(x, spacing=(fg.tensor([0.0, 1.0, 3.0]),))  # float32 coordinates
    assert g.dtype is fg.float64
    (g,) = fg.gradient(x.float(), spacing=(fg.tensor([0.0, 1.0, 3.0], dtype=fg.float64),))
    assert g.dtype is fg.float64
    (g,) = fg.gradient(fg.tensor([1, 2, 4]), spacing=(fg.tensor([0, 1, 3]),))
    assert g.dtype is fg.float32 and g.tolist() == [1.0, 1.0, 1.0]


def test_infinities_and_nan_spread_as_numpys():
    x = np.array([0.0, -0.0, np.inf, 1.0, np.nan, 2.0, 3.0])
    (g,) = fg.gradient(fg.tensor(x))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(g.numpy(), np.gradient(x))


def test_a_0d_input_has_no_dimensions_to_differentiate():
    assert fg.gradient(fg.tensor(3.0)) == ()


def test_an_empty_dimension_is_refused_and_the_others_need_not_be_asked():
    with pytest.raises(ShapeError, match="at least edge_order\\+1"):
        fg.gradient(fg.ones(0))
    x = np.arange(12.0).reshape(3, 4)
    (g,) = fg.gradient(fg.tensor(x).reshape(3, 4, 1)[..., 0], dim=1)
    np.testing.assert_array_equal(g.numpy(), np.gradient(x, axis=1))


def test_the_smallest_sizes_each_edge_order_takes():
    # two samples: one difference at both ends; three with edge order 2: the parabola's
    for x, order in (([1.0, 4.0], 1), ([1.0, -0.0, 1.0], 2), ([-1.0, 0.0, 1.0], 1)):
        (g,) = fg.gradient(fg.tensor(x, dtype=fg.float64), edge_order=order)
        np.testing.assert_array_equal(g.numpy(), np.gradient(np.array(x), edge_order=order))


def test_bad_arguments_raise_at_the_users_line():
    with pytest.raises(ShapeError, match="at least edge_order\\+1.*test_numeric_gradient.py"):
        fg.gradient(fg.ones(2), edge_order=2)
    with pytest.raises(ShapeError, match="at least edge_order\\+1"):
        fg.gradient(fg.ones(1))
    with pytest.raises(ArgumentError, match="only supports edge_order=1 and edge_order=2"):
        fg.gradient(fg.ones(5), edge_order=3)
    with pytest.raises(ArgumentError, match="a list of length equal to 'self.dim\\(\\) = 2'"):
        fg.gradient(fg.ones(3, 4), spacing=[1.0, 2.0, 3.0])
    with pytest.raises(ArgumentError, match="appears multiple times"):
        fg.gradient(fg.ones(3, 4), dim=[1, 1])
    with pytest.raises(ShapeError, match="coordinates of dim 1 to be a 1-d tensor of its size 4"):
        fg.gradient(fg.ones(3, 4), spacing=(fg.tensor([0.0, 1.0]),), dim=1)
    with pytest.raises(IndexError):
        fg.gradient(fg.ones(3, 4), dim=2)
    with pytest.raises(DTypeNotImplementedError, match="bool"):
        fg.gradient(fg.tensor([True, False, True]))
    with pytest.raises(TypeError, match="spacing"):
        fg.gradient(fg.ones(3), spacing="1")


@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("coordinates", [False, True])
def test_the_gradient_through_it_is_the_transpose_of_its_map(edge_order, coordinates):
    """gradient is linear in x: the gradient of sum(w * gradient(x)) is J^T w, J the
    matrix numpy.gradient applies (its columns: numpy.gradient of the unit vectors)."""
    n = 6
    rng = np.random.default_rng(edge_order)
    ys = np.cumsum(rng.uniform(0.2, 1.5, n)) if coordinates else None
    spacing = (fg.tensor(ys),) if coordinates else 0.5
    w = rng.standard_normal(n)
    x = fg.tensor(rng.standard_normal(n), requires_grad=True)
    (g,) = fg.gradient(x, spacing=spacing, edge_order=edge_order)
    (g * fg.tensor(w)).sum().backward()
    step = ys if coordinates else 0.5
    jac = np.stack([np.gradient(np.eye(n)[i], step, edge_order=edge_order) for i in range(n)], 1)
    np.testing.assert_allclose(x.grad.numpy(), jac.T @ w, rtol=1e-10, atol=1e-12)
