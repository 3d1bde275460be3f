"""fg.histc against torch.histc's rules: equal bins over [min, max], elements outside (and
NaN) left out, max in the last bin, the data's range where min == max, errors where
torch raises."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg


def test_bins_edges_and_outside_elements():
    x = fg.tensor([0.0, 1.0, 2.0, 2.0, 3.0, math.nan, -1.0, 5.0])
    assert fg.histc(x, bins=4, min=0, max=3).tolist() == [1.0, 1.0, 2.0, 1.0]
    assert x.histc(4, 0, 3).dtype == fg.float32
    # (x - min) * bins / (max - min) rounded down, in the input's dtype: 0.3 * 10 is 3.0
    x64 = fg.tensor([0.1, 0.2, 0.3, 0.7, 1.0], dtype=fg.float64)
    got = fg.histc(x64, bins=10, min=0, max=1).tolist()
    assert got == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0]


def test_zero_d_signed_zeros_and_the_ends():
    # (values checked against torch 2.13's: a 0-d input widened by 1 each way, -0.0 and 0.0
    # in one bin, -1 and 1 at the ends of [-1, 1] in the first and the last)
    assert fg.histc(fg.tensor(1.0), bins=3).tolist() == [0.0, 1.0, 0.0]
    assert fg.histc(fg.tensor([-0.0, 0.0]), bins=2, min=-1, max=1).tolist() == [0.0, 2.0]
    assert fg.histc(fg.tensor([-1.0, 1.0]), bins=2, min=-1, max=1).tolist() == [1.0, 1.0]
    assert fg.histc(fg.tensor([0.5, 0.5]), bins=1, min=0, max=1).tolist() == [2.0]


def test_the_range_of_the_data_where_min_equals_max():
    assert fg.histc(fg.tensor([1.0, 2.0, 1.0]), bins=4).tolist() == [2.0, 0.0, 0.0, 1.0]
    # one value: widened by 1 each way
    assert fg.histc(fg.tensor([2.0, 2.0]), bins=4).tolist() == [0.0, 0.0, 2.0, 0.0]
    assert fg.histc(fg.tensor([]), bins=3).tolist() == [0.0, 0.0, 0.0]
    assert fg.histc(fg.tensor([[1.0, 2.0], [3.0, 4.0]]), bins=2).tolist() == [2.0, 2.0]


def test_refusals_as_torchs():
    with pytest.raises(RuntimeError, match="range of \\[nan, nan\\] is not finite"):
        fg.histc(fg.tensor([1.0, math.nan]), bins=3)
    with pytest.raises(RuntimeError, match="range of \\[1.0, inf\\] is not finite"):
        fg.histc(fg.tensor([1.0, math.inf]), bins=3)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        fg.histc(fg.tensor([1.0]), bins=3, min=2, max=1)
    with pytest.raises(RuntimeError, match="bins must be a positive int"):
        fg.histc(fg.tensor([1.0]), bins=0)
    with pytest.raises(NotImplementedError, match="not implemented for int64"):
        fg.histc(fg.tensor([1, 2]), bins=3)
    # an infinite element inside a given range is counted where it falls
    assert fg.histc(fg.tensor([1.0, math.inf]), bins=2, min=0, max=2).tolist() == [0.0, 1.0]


def test_against_torch_on_random_data():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for trial in range(200):
        dt = (np.float32, np.float64)[trial % 2]
        n = int(rng.integers(0, 50))
        x = (rng.integers(-20, 20, n) / rng.choice([1, 3, 7, 10])).astype(dt)
        if trial % 5 == 0 and n:
            x[0] = np.nan
        bins = int(rng.integers(1, 13))
        lo, hi = [(0.0, 0.0), (-1.0, 1.0), (-2.0, 3.0), (0.1, 0.7)][trial % 4]
        try:
            want = torch.histc(torch.from_numpy(x), bins=bins, min=lo, max=hi).numpy()
        except RuntimeError:
            with pytest.raises(RuntimeError):
                fg.histc(fg.tensor(x), bins=bins, min=lo, max=hi)
            continue
        got = fg.histc(fg.tensor(x), bins=bins, min=lo, max=hi).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
