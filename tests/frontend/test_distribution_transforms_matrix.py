"""StickBreakingTransform, LowerCholeskyTransform, PositiveDefiniteTransform,
CorrCholeskyTransform and vec_to_tril_matrix / tril_matrix_to_vec
(frontend/distribution_transforms_matrix.py): values against numpy, round trips, log |det
Jacobian| against the log determinant of a numerical Jacobian (float64 central
differences), torch 2.14.1's values (literals), shapes and errors."""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.distribution import tril_matrix_to_vec, vec_to_tril_matrix
from fusegrad.distribution_transforms import (
    CorrCholeskyTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    SoftplusTransform,
    StickBreakingTransform,
)
from fusegrad.distributions import constraints


def t64(values, grad=False):
    return fg.tensor(np.asarray(values, dtype=np.float64), requires_grad=grad)


def numeric_jacobian(fn, x: np.ndarray, h=1e-6) -> np.ndarray:
    """d fn(x) / dx of a vector map, by central differences."""
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        cols.append((fn(x + e) - fn(x - e)) / (2 * h))
    return np.stack(cols, -1)


def test_stick_breaking_values_round_trip_and_log_det():
    x = np.array([0.3, -1.2, 0.5])
    t = StickBreakingTransform()
    y = t(t64(x)).numpy()
    # numpy: z_k = sigmoid(x_k - log(K - k)), y_k = z_k prod_{j<k} (1 - z_j)
    z = 1 / (1 + np.exp(-(x - np.log(3 - np.arange(3)))))
    want = np.append(z, 1) * np.concatenate([[1], np.cumprod(1 - z)])
    assert np.allclose(y, want, rtol=1e-14) and abs(y.sum() - 1) < 1e-14
    assert np.allclose(t.inv(t64(y)).numpy(), x, rtol=1e-12)
    # the map onto the first K coordinates is a bijection of R^K: its log |det|
    jac = numeric_jacobian(lambda v: t(t64(v)).numpy()[:-1], x)
    want_log_det = np.log(abs(np.linalg.det(jac)))
    got = t.log_abs_det_jacobian(t64(x), t64(y)).item()
    assert abs(got - want_log_det) < 1e-8 and abs(got + 6.046880919685938) < 1e-12
    assert t.forward_shape((2, 3)) == (2, 4) and t.inverse_shape((2, 4)) == (2, 3)
    assert t.domain.event_dim == 1 and t.codomain is constraints.simplex and t.bijective
    assert StickBreakingTransform() == t


def test_lower_cholesky_and_positive_definite():
    x = np.array([[0.3, -1.2, 0.5], [2.0, 0.1, -3.0], [0.7, 0.2, -0.4]])
    lower = LowerCholeskyTransform()(t64(x)).numpy()
    want = np.tril(x, -1) + np.diag(np.exp(np.diag(x)))
    assert np.allclose(lower, want, rtol=1e-14)
    assert np.allclose(LowerCholeskyTransform().inv(t64(lower)).numpy(), np.tril(x), rtol=1e-14)
    pd = PositiveDefiniteTransform()(t64(x)).numpy()
    assert np.allclose(pd, want @ want.T, rtol=1e-14)
    back = PositiveDefiniteTransform().inv(t64(pd)).numpy()
    assert np.allclose(back, np.tril(x), rtol=1e-10)
    assert PositiveDefiniteTransform().codomain is constraints.positive_definite
    assert bool(constraints.positive_definite.check(t64(pd)))


def test_corr_cholesky_values_round_trip_and_log_det():
    x = np.array([0.3, -1.2, 0.5])
    t = CorrCholeskyTransform()
    y = t(t64(x)).numpy()
    want = [
        [1.0, 0.0, 0.0],
        [0.2913126124515909, 0.9566279119002483, 0.0],
        [-0.8336546070121552, 0.2552209076091072, 0.48977779096912166],
    ]  # torch's
    assert np.allclose(y, want, rtol=1e-14)
    assert np.allclose((y**2).sum(-1), 1) and bool(constraints.corr_cholesky.check(t64(y)))
    assert np.allclose(t.inv(t64(y)).numpy(), x, rtol=1e-12)
    # the strict lower triangle is a bijection of R^3 (the diagonal follows from it)
    jac = numeric_jacobian(lambda v: t(t64(v)).numpy()[np.tril_indices(3, -1)], x)
    got = t.log_abs_det_jacobian(t64(x), t64(y)).item()
    assert abs(got - np.log(abs(np.linalg.det(jac)))) < 1e-8
    assert abs(got + 2.109977468550449) < 1e-12
    assert t.forward_shape((5, 6)) == (5, 4, 4) and t.inverse_shape((4, 4)) == (6,)
    with pytest.raises(ValueError, match="Input is not a flattened lower-diagonal number"):
        t.forward_shape((5,))
    with pytest.raises(ValueError, match="Input is not square"):
        t.inverse_shape((2, 3))


def test_tril_vectors():
    m = vec_to_tril_matrix(t64([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
    assert m.tolist() == [[1, 0, 0], [2, 3, 0], [4, 5, 6]]
    strict = vec_to_tril_matrix(t64([[1.0, 2.0, 3.0]]), diag=-1)
    assert strict.tolist() == [[[0, 0, 0], [1, 0, 0], [2, 3, 0]]]
    assert tril_matrix_to_vec(m).tolist() == [1, 2, 3, 4, 5, 6]
    assert tril_matrix_to_vec(m, diag=-1).tolist() == [2, 4, 5]
    v = t64([1.0, 2.0, 3.0], grad=True)
    (vec_to_tril_matrix(v) * t64([[1.0, 9.0], [2.0, 3.0]])).sum().backward()
    assert v.grad.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="cannot be expressed"):
        vec_to_tril_matrix(t64([1.0, 2.0]))


def test_softplus_transform():
    x = np.array([-30.0, -1.5, 0.3, 25.0])
    t = SoftplusTransform()
    y = t(t64(x)).numpy()
    assert np.allclose(y, np.logaddexp(0, x), rtol=1e-14)
    assert np.allclose(t.inv(t64(y)).numpy(), x, rtol=1e-9)
    assert np.allclose(t.log_abs_det_jacobian(t64(x), t64(y)).numpy(), -np.logaddexp(0, -x))
    assert t.sign == 1 and t.codomain is constraints.positive
