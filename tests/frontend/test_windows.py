"""torch's signal windows (frontend/windows.py) against torch 2.14.1's values (literals
here, to 1e-6) and numpy's formulas."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg

WINDOWS = ("hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window")

TORCH_5 = {  # torch.<window>(5) (periodic, float32)
    "hann_window": [0.0, 0.3454915, 0.9045085, 0.9045085, 0.3454915],
    "hamming_window": [0.08, 0.3978522, 0.9121478, 0.9121478, 0.3978522],
    "blackman_window": [-2.9802e-08, 0.2007701, 0.8492299, 0.8492299, 0.2007701],
    "bartlett_window": [0.0, 0.4, 0.8, 0.8, 0.4],
    "kaiser_window": [5.2773437e-05, 0.10171971, 0.79293942, 0.79293942, 0.10171971],
}
TORCH_5_SYMMETRIC = {  # torch.<window>(5, False, dtype=torch.float64)
    "hann_window": [0.0, 0.5, 1.0, 0.5, 0.0],
    "hamming_window": [0.08, 0.54, 1.0, 0.54, 0.08],
    "blackman_window": [0.0, 0.34, 1.0, 0.34, 0.0],
    "bartlett_window": [0.0, 0.5, 1.0, 0.5, 0.0],
    "kaiser_window": [5.2773441e-05, 0.21567274, 1.0, 0.21567274, 5.2773441e-05],
}


@pytest.mark.parametrize("name", WINDOWS)
def test_values_as_torch(name):
    f = getattr(fg, name)
    got = f(5)
    assert got.dtype is fg.float32 and not got.requires_grad
    assert np.allclose(got.numpy(), TORCH_5[name], atol=1e-6, rtol=0)
    got = f(5, False, dtype=fg.float64)
    assert got.dtype is fg.float64
    assert np.allclose(got.numpy(), TORCH_5_SYMMETRIC[name], atol=1e-6, rtol=0)
    # periodic is the symmetric window one longer, its last point left out
    assert np.allclose(f(6).numpy(), f(7, periodic=False).numpy()[:6], atol=1e-7)
    assert f(0).shape == (0,) and f(1).tolist() == [1.0] and f(1, periodic=False).tolist() == [1.0]
    assert f(4, requires_grad=True).requires_grad and f(3, dtype=fg.float16).dtype is fg.float16


@pytest.mark.parametrize("name", WINDOWS)
def test_errors_as_torch(name):
    f = getattr(fg, name)
    with pytest.raises(RuntimeError, match=f"{name} requires non-negative window_length, got"):
        f(-1)
    with pytest.raises(RuntimeError, match=f"{name} expects floating point dtypes"):
        f(3, dtype=fg.int64)
    with pytest.raises(TypeError, match="must be int, not float"):
        f(3.0)


def test_the_windows_parameters():
    got = fg.hamming_window(5, True, 0.5, 0.3)
    assert np.allclose(got.numpy(), [0.2, 0.4072949, 0.7427051, 0.7427051, 0.4072949], atol=1e-6)
    got = fg.kaiser_window(5, True, 3.0)
    assert np.allclose(got.numpy(), [0.2049, 0.6247, 0.9522, 0.9522, 0.6247], atol=1e-4)
    assert np.allclose(fg.kaiser_window(9, False, 5.0, dtype=fg.float64).numpy(), np.kaiser(9, 5.0))
    assert np.allclose(fg.hann_window(9, False, dtype=fg.float64).numpy(), np.hanning(9))
    assert np.allclose(fg.hamming_window(9, False, dtype=fg.float64).numpy(), np.hamming(9))
    assert np.allclose(fg.bartlett_window(9, False, dtype=fg.float64).numpy(), np.bartlett(9))
    assert np.allclose(
        fg.blackman_window(9, False, dtype=fg.float64).numpy(), np.blackman(9), atol=1e-15
    )
