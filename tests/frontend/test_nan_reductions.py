"""nansum, nanmean and nanmedian at NaN, inf, empty and all-NaN rows, values and gradients
(faults a probe found: each test failed before its fix). Expected values are torch 2.13's,
written in."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg

NAN, INF = math.nan, math.inf
ROWS = [[NAN, NAN, NAN], [1.0, NAN, 0.0], [3.0, 2.0, 1.0], [NAN, 5.0, NAN], [2.0, 2.0, NAN]]


def same(got, want):
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), np.asarray(want, np.float64))


def test_nansum_counts_nans_as_zero():
    x = fg.tensor(ROWS)
    same(x.nansum(1).tolist(), [0.0, 1.0, 6.0, 5.0, 4.0])
    same(fg.nansum(x, 0).tolist(), [6.0, 9.0, 1.0])
    assert x.nansum().item() == 16.0
    assert x.nansum(1, keepdim=True).shape == (5, 1)
    ints = fg.tensor([1, 2])
    assert ints.nansum().item() == 3 and ints.nansum().dtype == fg.int64
    assert fg.empty(0).nansum().item() == 0.0
    same(fg.tensor([INF, NAN, -1.0]).nansum().item(), INF)


def test_nanmean_leaves_nans_out_and_is_nan_where_all_are():
    x = fg.tensor(ROWS)
    same(x.nanmean(1).tolist(), [NAN, 0.5, 2.0, 5.0, 2.0])
    assert x.nanmean().item() == 2.0
    assert math.isnan(fg.empty(0).nanmean().item())
    with pytest.raises(fg.DTypeError, match="nanmean"):
        fg.tensor([1, 2]).nanmean()


def test_nanmedian_is_the_lower_median_of_the_rest():
    x = fg.tensor(ROWS)
    r = x.nanmedian(1)
    same(r.values.tolist(), [NAN, 0.0, 2.0, 5.0, 2.0])
    assert r.indices.tolist() == [0, 2, 1, 1, 0]
    assert x.nanmedian().item() == 2.0
    assert math.isnan(fg.tensor([NAN, NAN]).nanmedian().item())
    assert math.isnan(fg.empty(0).nanmedian().item())
    inf_row = fg.tensor([INF, 2.0, NAN, 1.0]).nanmedian(0)
    assert (inf_row.values.item(), inf_row.indices.item()) == (2.0, 1)
    assert fg.tensor([1, 2]).nanmedian().item() == 1  # integers: the median
    zero_d = fg.tensor(3.0).nanmedian(0)
    assert (zero_d.values.item(), zero_d.indices.item(), zero_d.values.shape) == (3.0, 0, ())


@pytest.mark.parametrize(
    "reduce, want",
    [
        (  # all NaN: 1 / 0 times 0 is NaN, as torch's
            lambda t: t.nanmean(1).sum(),
            [[NAN] * 3, [0.5, 0.0, 0.5], [1 / 3] * 3, [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]],
        ),
        (
            lambda t: t.nansum(),
            [[0.0] * 3, [1.0, 0.0, 1.0], [1.0] * 3, [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]],
        ),
        (
            lambda t: t.nanmedian(1).values.sum(),
            [[1.0, 0, 0], [0, 0, 1.0], [0, 1.0, 0], [0, 1.0, 0], [1.0, 0, 0]],
        ),
    ],
)
def test_nan_reduction_gradients(reduce, want):
    x = fg.tensor(ROWS, requires_grad=True)
    reduce(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.array(want, np.float32), rtol=1e-6)


def test_full_nanmedian_gradient_is_shared_by_ties():
    for values, want in (
        ([NAN, 2.0, 1.0, 2.0, NAN, 3.0], [0.0, 0.5, 0.0, 0.5, 0.0, 0.0]),
        ([NAN, NAN], [0.5, 0.5]),
    ):
        x = fg.tensor(values, requires_grad=True)
        x.nanmedian().backward()
        assert x.grad.tolist() == want


def test_against_torch_when_it_is_here():
    torch = pytest.importorskip("torch")
    a = np.array(ROWS + [[INF, -INF, 1.0], [-INF, NAN, 4.0]], np.float32)
    for dim in (0, 1):
        got, want = fg.tensor(a).nanmedian(dim), torch.tensor(a).nanmedian(dim)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        for name in ("nansum", "nanmean"):
            np.testing.assert_allclose(
                getattr(fg.tensor(a), name)(dim).numpy(),
                getattr(torch.tensor(a), name)(dim).numpy(),
                rtol=1e-6,
            )
