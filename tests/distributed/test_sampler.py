"""DistributedSampler: equal shards that partition the dataset (padded or trimmed as
PyTorch's), the same shuffle on every rank, a new one per epoch; DataLoader(sampler=)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.data import DataLoader, DistributedSampler, TensorDataset


def shards(n, replicas, **kw):
    return [list(DistributedSampler(range(n), replicas, r, **kw)) for r in range(replicas)]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 60),
    replicas=st.integers(1, 7),
    shuffle=st.booleans(),
    seed=st.integers(0, 5),
    epoch=st.integers(0, 3),
)
def test_shards_are_equal_and_cover_the_dataset(n, replicas, shuffle, seed, epoch):
    parts = []
    for r in range(replicas):
        s = DistributedSampler(range(n), replicas, r, shuffle=shuffle, seed=seed)
        s.set_epoch(epoch)
        parts.append(list(s))
        assert len(parts[-1]) == len(s) == math.ceil(n / replicas)
    counts = Counter(i for p in parts for i in p)
    assert set(counts) == set(range(n))  # every sample is seen
    padding = replicas * math.ceil(n / replicas) - n
    assert sum(counts.values()) == n + padding
    if padding <= n:  # padding repeats each of the first samples at most once
        assert max(counts.values()) <= 2
    if padding == 0:  # an exact partition
        assert sorted(i for p in parts for i in p) == list(range(n))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), replicas=st.integers(1, 7), shuffle=st.booleans())
def test_drop_last_gives_disjoint_equal_shards(n, replicas, shuffle):
    parts = shards(n, replicas, shuffle=shuffle, drop_last=True)
    want = n // replicas
    assert all(len(p) == want for p in parts)
    flat = [i for p in parts for i in p]
    assert len(set(flat)) == len(flat) == want * replicas
    assert set(flat) <= set(range(n))


def test_padding_and_order_as_pytorch():
    # torch: indices 0..4 padded with the first ones to 6, rank r takes indices[r::2]
    assert shards(5, 2, shuffle=False) == [[0, 2, 4], [1, 3, 0]]
    assert shards(5, 2, shuffle=False, drop_last=True) == [[0, 2], [1, 3]]
    # a dataset smaller than the padding: repeated several times over
    assert shards(2, 5, shuffle=False) == [[0], [1], [0], [1], [0]]


def test_the_shuffle_is_shared_by_the_ranks_and_changes_with_the_epoch():
    a, b = DistributedSampler(range(20), 2, 0, seed=3), DistributedSampler(range(20), 2, 1, seed=3)
    first = list(a) + list(b)
    assert sorted(first) == list(range(20)) and first != list(range(20))
    assert list(a) == list(DistributedSampler(range(20), 2, 0, seed=3))  # reproducible
    a.set_epoch(1)
    b.set_epoch(1)
    second = list(a) + list(b)
    assert sorted(second) == list(range(20)) and second != first
    assert list(DistributedSampler(range(20), 2, 0, seed=4)) != list(
        DistributedSampler(range(20), 2, 0, seed=3)
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="rank"):
        DistributedSampler(range(4), 2, 2)
    with pytest.raises(ValueError, match="num_replicas"):
        DistributedSampler(range(4), 0, 0)
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedSampler(range(4))  # no process group to ask


def test_dataloader_takes_the_samplers_indices():
    ds = TensorDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
    sampler = DistributedSampler(ds, 2, 1, shuffle=False)
    loader = DataLoader(ds, batch_size=2, sampler=sampler)
    assert len(loader) == 2
    assert [y.tolist() for _, y in loader] == [[1, 3], [0]]
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, sampler=sampler, shuffle=True)
