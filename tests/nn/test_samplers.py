"""Random samplers draw lazily (torch's semantics): RandomSampler with replacement and
WeightedRandomSampler take any num_samples (makemore's 10**10) in bounded memory, and
draw indices with the probabilities torch's documented formulas give."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.data import DataLoader, RandomSampler, TensorDataset, WeightedRandomSampler
from fusegrad.nn import samplers

HUGE = 10**10


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _first(sampler, k: int) -> list[int]:
    return list(itertools.islice(iter(sampler), k))


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomSampler(range(7), replacement=True, num_samples=HUGE),
        lambda: RandomSampler(range(7), replacement=False, num_samples=HUGE),
        lambda: WeightedRandomSampler([1.0, 2.0, 0.0, 4.0], HUGE),
    ],
    ids=["random-replacement", "random-permutations", "weighted"],
)
def test_ten_billion_samples_in_bounded_memory(make):
    sampler = make()
    assert len(sampler) == HUGE
    out = []
    peak = _peak_bytes(lambda: out.extend(_first(sampler, 3 * samplers.CHUNK + 5)))
    assert len(out) == 3 * samplers.CHUNK + 5
    assert peak < 2_000_000  # 10**10 int64 indices would be 80 GB


def test_makemore_loader_yields_batches():
    """makemore's `InfiniteDataLoader`: a DataLoader over a RandomSampler of 10**10."""
    x = np.arange(20.0).reshape(10, 2)
    ds = TensorDataset(x, np.arange(10))
    sampler = RandomSampler(ds, replacement=True, num_samples=HUGE)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    assert len(loader) == HUGE // 4
    batches = iter(loader)
    for _ in range(3):
        xb, yb = next(batches)
        assert tuple(xb.shape) == (4, 2)
        np.testing.assert_array_equal(xb.numpy(), x[yb.numpy()])


def test_replacement_draws_are_uniform_and_reproducible():
    n, k = 5, 50_000
    draws = np.array(list(RandomSampler(range(n), True, k, fg.Generator().manual_seed(1))))
    assert draws.min() == 0 and draws.max() == n - 1
    freq = np.bincount(draws, minlength=n) / k
    np.testing.assert_allclose(freq, np.full(n, 1 / n), atol=0.01)  # ~4.5 sigma
    again = list(RandomSampler(range(n), True, k, fg.Generator().manual_seed(1)))
    assert again == draws.tolist()


def test_each_pass_draws_anew():
    sampler = RandomSampler(range(100), True, 50, fg.Generator().manual_seed(3))
    assert list(sampler) != list(sampler)


def test_permutations_cover_the_data_each_round():
    n = 6
    order = list(RandomSampler(range(n), num_samples=3 * n + 2))
    for r in range(3):
        assert sorted(order[r * n : (r + 1) * n]) == list(range(n))
    assert len(set(order[3 * n :])) == 2


def test_weighted_frequencies_follow_the_weights():
    w = np.array([0.5, 0.0, 3.0, 1.5, 5.0])
    k = 60_000
    sampler = WeightedRandomSampler(fg.tensor(w), k, generator=fg.Generator().manual_seed(0))
    draws = np.array(list(sampler))
    freq = np.bincount(draws, minlength=len(w)) / k
    assert freq[1] == 0.0  # a zero weight is never drawn
    np.testing.assert_allclose(freq, w / w.sum(), atol=0.01)


def test_weighted_without_replacement_is_distinct_and_follows_the_weights():
    w = np.array([10.0, 1.0, 1.0, 1.0, 0.0])
    g = fg.Generator().manual_seed(0)
    firsts = []
    for _ in range(2000):
        draws = list(WeightedRandomSampler(w, 3, replacement=False, generator=g))
        assert len(set(draws)) == 3 and 4 not in draws
        firsts.append(draws[0])
    # the first draw is proportional to the weights: P(0) = 10 / 13
    assert abs(np.mean(np.array(firsts) == 0) - 10 / 13) < 0.04


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (([1.0, 2.0], 0), ValueError, "num_samples should be a positive integer"),
        (([1.0, 2.0], 2.5), ValueError, "num_samples should be a positive integer"),
        (([1.0, 2.0], 2, 1), ValueError, "replacement should be a boolean"),
        (([[1.0, 2.0]], 2), ValueError, "weights should be a 1d sequence"),
        (([0.0, 0.0], 2), RuntimeError, "invalid multinomial distribution"),
        (([1.0, -1.0], 2), RuntimeError, "invalid multinomial distribution"),
        (([1.0, 0.0, 2.0], 3, False), RuntimeError, "without replacement"),
    ],
)
def test_weighted_refuses_bad_arguments(args, error, words):
    with pytest.raises(error, match=words):
        WeightedRandomSampler(*args)


def test_torch_home_names_weighted_sampler():
    assert fg.utils.data.WeightedRandomSampler is WeightedRandomSampler


def test_samplers_at_their_boundaries():
    # torch's refusals of zero or negative counts, and of an empty dataset
    for make in (
        lambda: RandomSampler(range(3), num_samples=0),
        lambda: RandomSampler([]),
        lambda: RandomSampler(range(3), replacement=True, num_samples=-1),
        lambda: WeightedRandomSampler([1.0, 2.0], 0),
    ):
        with pytest.raises(ValueError, match="num_samples should be a positive integer"):
            make()
    # one item: every draw is it; a zero weight is never drawn; all-zero weights refused
    assert list(RandomSampler(range(1), replacement=True, num_samples=3)) == [0, 0, 0]
    assert list(WeightedRandomSampler([0.0, 1.0], 5)) == [1] * 5
    with pytest.raises(RuntimeError, match="not all zero"):
        list(WeightedRandomSampler([0.0, 0.0], 5))
    with pytest.raises(RuntimeError, match="without replacement"):
        list(WeightedRandomSampler([1.0, 0.0, 2.0], 3, replacement=False))
    # equal weights (ties) draw every index, each about as often
    counts = np.bincount(list(WeightedRandomSampler([1.0, 1.0, 1.0], 30_000)), minlength=3)
    assert counts.min() > 9_000
