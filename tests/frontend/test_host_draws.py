"""fg.poisson and fg.binomial: their distributions (fixed seeds, tolerant bounds),
dtypes, gradients and torch's errors (frontend/host_draws.py)."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg


def test_poisson_mean_and_variance_follow_the_rates():
    fg.manual_seed(0)
    rates = fg.tensor([0.5, 3.0, 40.0]).expand(20000, 3)
    draws = fg.poisson(rates).numpy()
    assert draws.dtype == np.float32 and draws.shape == (20000, 3)
    assert np.all(draws == np.round(draws)) and np.all(draws >= 0)
    np.testing.assert_allclose(draws.mean(0), [0.5, 3.0, 40.0], rtol=0.05)
    np.testing.assert_allclose(draws.var(0), [0.5, 3.0, 40.0], rtol=0.08)


def test_poisson_of_zero_rates_is_zero_and_float64_stays():
    assert fg.poisson(fg.zeros(5)).tolist() == [0.0] * 5
    assert fg.poisson(fg.ones(3, dtype=fg.float64)).dtype == fg.float64


def test_poisson_repeats_with_the_seed_and_the_generator():
    fg.manual_seed(7)
    a = fg.poisson(fg.full((50,), 4.0)).tolist()
    fg.manual_seed(7)
    assert fg.poisson(fg.full((50,), 4.0)).tolist() == a
    g = fg.Generator().manual_seed(3)
    b = fg.poisson(fg.full((50,), 4.0), generator=g).tolist()
    assert fg.poisson(fg.full((50,), 4.0), generator=g.manual_seed(3)).tolist() == b


def test_poisson_gradient_is_zero_as_torch():
    rates = fg.tensor([1.0, 2.0], requires_grad=True)
    out = fg.poisson(rates)
    assert out.requires_grad
    (out * 3).sum().backward()
    assert rates.grad.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("bad", [[-1.0], [float("nan")]])
def test_poisson_refuses_negative_and_nan_rates(bad):
    with pytest.raises(RuntimeError, match="expected rate to be non-negative"):
        fg.poisson(fg.tensor(bad))


def test_poisson_refuses_integer_rates():
    with pytest.raises(NotImplementedError, match="not implemented for 'int64'"):
        fg.poisson(fg.tensor([1, 2]))


def test_binomial_mean_and_variance():
    fg.manual_seed(1)
    count = fg.tensor([20.0, 5.0, 100.0]).expand(20000, 3)
    prob = fg.tensor([0.3, 0.9, 0.01]).expand(20000, 3)
    draws = fg.binomial(count, prob).numpy()
    assert draws.dtype == np.float32 and np.all(draws == np.round(draws))
    assert np.all((draws >= 0) & (draws <= np.array([20, 5, 100])))
    np.testing.assert_allclose(draws.mean(0), [6.0, 4.5, 1.0], rtol=0.05)
    np.testing.assert_allclose(draws.var(0), [4.2, 0.45, 0.99], rtol=0.1)


def test_binomial_edges_and_broadcasting():
    # torch: p >= 1 gives count, a negative count 0, p of shape (1,) broadcasts
    assert fg.binomial(fg.tensor([2.0]), fg.tensor([1.5])).tolist() == [2.0]
    assert fg.binomial(fg.tensor([-2.0]), fg.tensor([0.5])).tolist() == [0.0]
    assert fg.binomial(fg.tensor([2.0, 3.0]), fg.tensor([1.0])).tolist() == [2.0, 3.0]
    assert fg.binomial(fg.tensor([4.0]), fg.tensor([0.0])).tolist() == [0.0]


def test_binomial_errors_as_torch():
    with pytest.raises(ValueError, match="floating-point dtypes for count, got: int64"):
        fg.binomial(fg.tensor([1, 2]), fg.tensor([0.5, 0.5]))
    with pytest.raises(RuntimeError, match="Found dtype float64 but expected float32"):
        fg.binomial(fg.tensor([2.0]), fg.tensor([0.5], dtype=fg.float64))


def test_binomial_backward_raises_as_torch():
    count = fg.tensor([10.0, 5.0], requires_grad=True)
    prob = fg.tensor([0.5, 0.2], requires_grad=True)
    out = fg.binomial(count, prob)
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="derivative for aten::binomial is not implemented"):
        out.sum().backward()


def test_jit_refuses_host_draws():
    @fg.jit
    def f(x):
        return fg.poisson(x)

    with pytest.raises(fg.JitError, match="poisson"):
        for _ in range(3):  # (the jit records from a later call on)
            f(fg.ones(3))
