"""Sums whose answers are exact: counts of broadcast elements are integers, not float
accumulations of ones (a sum over an expand is the smaller sum times the count)."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg


def test_sum_of_an_expanded_one_is_the_exact_count():
    assert fg.ones(1).expand(3_000_000_000).sum().item() == 3e9
    assert fg.ones(1).expand(10**12).sum().item() == float(np.float32(1e12))
    assert fg.ones(1).expand(10**12).mean().item() == 1.0
    assert fg.ones(1, dtype="float64").expand(2**40 + 1).sum().item() == 2**40 + 1


def test_sum_over_some_expanded_axes_and_its_gradient():
    a = np.array([[1.0], [2.0], [3.0]])
    x = fg.tensor(a, dtype="float64", requires_grad=True)
    y = x.expand(3, 4)
    np.testing.assert_array_equal(y.sum(1).numpy(), np.broadcast_to(a, (3, 4)).sum(1))
    np.testing.assert_array_equal(y.sum(0).numpy(), np.broadcast_to(a, (3, 4)).sum(0))
    assert y.sum(1, keepdim=True).shape == (3, 1)
    s = y.sum()
    assert s.item() == 24.0
    s.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[4.0], [4.0], [4.0]])


def test_integer_sum_of_a_broadcast():
    t = fg.tensor([1, 2]).reshape(2, 1).expand(2, 3)
    assert t.sum().item() == 9 and t.sum().dtype == fg.int64
    assert fg.tensor(7, dtype="int32").expand(5).sum().tolist() == 35


# ---------------------------------------------------------------- float accuracy
# Float32 sums are cascaded (a tree of vector accumulators, each adding at most 16 values
# before passing its total up), as PyTorch's are: the error of a long sum stays within
# about one unit in the last place of the float32 result. A plain loop (one accumulator
# per vector lane) errs by 1-20 ulp on these sums and by 0.6% on the mean of 0.1s.


def ulps(got, want) -> float:
    """|got - want| in units in the last place of float32 at `want` (float64)."""
    return float(abs(np.float64(got) - want) / np.spacing(np.float32(want)))


def test_mean_of_twenty_million_tenths_is_a_tenth():
    m = fg.tensor(np.full(20_000_000, 0.1, np.float32)).mean().item()
    assert abs(m - 0.1) / 0.1 < 1e-6  # PyTorch: 0.09999994 (6e-7); a plain loop 0.1006


def test_sum_of_2_24_uniform_values_within_one_ulp():
    for seed in range(3):
        x = np.random.default_rng(seed).random(1 << 24, dtype=np.float32)
        assert ulps(fg.tensor(x).sum().item(), x.astype(np.float64).sum()) <= 1.0, seed


def test_long_row_sums_within_one_ulp():
    a = np.random.default_rng(1).random((4, 1 << 20), dtype=np.float32)
    t = fg.tensor(a)
    got = t.sum(1).numpy()
    # the cuda device's order (strided shares, a shuffle tree, 64 partials) lands within
    # 1.1 ulp on these rows, as PyTorch's CUDA order would (docs/NUMERICS.md)
    bound = 1.0 if t.device == "cpu" else 1.5
    for g, w in zip(got, a.astype(np.float64).sum(1)):
        assert ulps(g, w) <= bound
    tenths = fg.tensor(np.full((3, 1 << 20), 0.1, np.float32)).sum(1).numpy()
    np.testing.assert_allclose(tenths, 0.1 * (1 << 20), rtol=1e-6)


def test_sum_over_a_long_first_axis_into_few_outputs():
    a = np.random.default_rng(2).standard_normal((1 << 20, 4), dtype=np.float32) + 1
    got = fg.tensor(a).sum(0).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64).sum(0), rtol=2e-7)


def test_long_column_sums_are_cascaded_too():
    a = np.random.default_rng(9).random((1 << 16, 64), dtype=np.float32)
    got = fg.tensor(a).sum(0).numpy()
    worst = max(ulps(g, w) for g, w in zip(got, a.astype(np.float64).sum(0)))
    assert worst <= 4.0  # one accumulator per column: 120 ulp


def test_var_and_mean_of_a_long_vector():
    x = np.random.default_rng(3).standard_normal(1 << 22).astype(np.float32) * 3 + 5
    t = fg.tensor(x)
    x64 = x.astype(np.float64)
    assert abs(t.mean().item() - x64.mean()) / x64.mean() < 2e-7
    assert abs(t.var().item() - x64.var(ddof=1)) / x64.var(ddof=1) < 2e-7
    np.testing.assert_allclose(
        fg.tensor(x.reshape(4, -1)).var(1).numpy(), x64.reshape(4, -1).var(1, ddof=1), rtol=2e-7
    )


def test_softmax_of_long_rows():
    r = np.random.default_rng(4).standard_normal((2, 1 << 20)).astype(np.float32)
    got = fg.tensor(r).softmax(1).numpy().astype(np.float64)
    e = np.exp(r.astype(np.float64) - r.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    np.testing.assert_allclose(got.sum(1), 1.0, rtol=1e-6)


def test_float64_sums_are_cascaded_too():
    x = np.random.default_rng(5).random(1 << 21)
    got = fg.tensor(x, dtype="float64").sum().item()
    assert got == pytest.approx(np.sum(x), rel=1e-15)


# ---------------------------------------------------------------- how long sums run


def test_full_sum_runs_as_parts_then_a_tiny_sum():
    x = fg.tensor(np.random.default_rng(6).random(1 << 21, dtype=np.float32))
    records = fg.kernels(x.sum())
    assert [r.shape for r in records] == [(64, 1), ()]
    # every thread takes some parts: on the CPU two at a time, each a cascaded sum (a cuda
    # block splits each part)
    assert records[0].loop.parallel_extent == (32 if x.device == "cpu" else 64)
    if x.device == "cpu":
        assert "(in order)" in str(records[0].loop)
        assert "unrolled for i in 0..2" in str(records[0].loop)


def test_parts_do_not_depend_on_the_thread_count():
    x = np.random.default_rng(7).random(1 << 21, dtype=np.float32)
    with fg.config.override(threads=1):
        one = fg.tensor(x).sum().item()
    with fg.config.override(threads=2):
        two = fg.tensor(x).sum().item()
    assert one == two


def test_short_sums_are_one_kernel_of_plain_loops():
    # (shorter than `cascade_min()`, 512 or 1024 as the host's vectors hold 8 or 16 floats)
    x = fg.tensor(np.arange(500, dtype=np.float32))
    (record,) = fg.kernels(x.sum())
    assert "(in order)" not in str(record.loop)
    assert x.sum().item() == 124750.0


def test_split_sum_keeps_shapes_gradients_and_integers():
    a = np.random.default_rng(8).random((2048, 1024), dtype=np.float32)
    x = fg.tensor(a, requires_grad=True)
    s = x.sum(dim=(0, 1), keepdim=True)
    assert s.shape == (1, 1)
    (x.mean() * 2).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(a.shape, 2 / a.size), rtol=1e-6)
    n = 1 << 21
    assert fg.arange(n).sum().item() == n * (n - 1) // 2
    assert fg.arange(n, dtype="int32").reshape(2048, 1024).sum().item() == n * (n - 1) // 2


@pytest.mark.parametrize(
    ("shape", "paired"),
    [
        ((16, 1025), True),
        ((64, 4096), True),
        ((32, 3000), True),
        ((16, 1 << 16), True),
        ((10, 3000), False),
    ],  # 5 pairs: too few to share among threads, one row at a time
)
def test_rows_summed_two_at_a_time_equal_one_at_a_time_bit_for_bit(shape, paired, monkeypatch):
    """A CPU thread streams two rows of a long sum at once (pipeline/lower.py,
    `_lane_cascade`); each row's tree of partial sums is the one-row cascade's, so the
    sums are the same bits (a ragged last vector included)."""
    from fusegrad.pipeline import lower as L
    from fusegrad.runtime.engine import engine

    a = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    x = fg.tensor(a)
    two = x.sum(1)
    if x.device == "cpu":
        assert ("unrolled for i in 0..2" in str(fg.kernels(two)[0].loop)) == paired
    two = two.numpy()
    monkeypatch.setattr(L, "cascade_rows", lambda *args: None)
    engine.plans.clear()
    one = fg.tensor(a).sum(1).numpy()
    np.testing.assert_array_equal(two, one)
    np.testing.assert_allclose(two, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
