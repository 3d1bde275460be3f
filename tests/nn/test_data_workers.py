"""DataLoader worker processes (torch's semantics), samplers, ConcatDataset.

The worker tests are few and small: each starts a pool of forked processes.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    TensorDataset,
    get_worker_info,
)


def _labels(loader):
    return [b[-1].tolist() for b in loader]


def _no_workers_left():
    return not multiprocessing.active_children()


def test_workers_give_the_batches_of_one_process_in_order_across_persistent_epochs():
    x = fg.tensor(np.arange(26.0).reshape(13, 2), dtype=fg.float64)
    ds = TensorDataset(x, np.arange(13))

    def epochs(**kw):
        g = fg.Generator().manual_seed(7)
        loader = DataLoader(ds, batch_size=3, shuffle=True, generator=g, **kw)
        return [[(b[0].numpy().copy(), b[1].tolist()) for b in loader] for _ in range(2)]

    alone = epochs()
    for kw in ({"num_workers": 2}, {"num_workers": 3, "persistent_workers": True}):
        got = epochs(prefetch_factor=1, **kw)
        assert [[y for _, y in e] for e in got] == [[y for _, y in e] for e in alone]
        for e_got, e_alone in zip(got, alone):
            for (xg, _), (xa, _) in zip(e_got, e_alone):
                assert xg.dtype == np.float64  # a tensor's dtype survives the trip
                np.testing.assert_array_equal(xg, xa)
    assert [y for _, y in alone[0]] != [y for _, y in alone[1]]  # a new order each epoch
    assert sorted(sum((y for _, y in alone[0]), [])) == list(range(13))
    assert _no_workers_left()


class _Info(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        info = get_worker_info()
        # a fusegrad op in the worker: its kernels run in the forked process
        return {"i": fg.tensor(float(i)) * 2, "id": info.id, "n": info.num_workers, "tag": _tag}


_tag = "parent"


def _set_tag(worker_id):
    global _tag
    _tag = f"init{worker_id}"


def test_worker_info_init_fn_and_collate_fn():
    assert get_worker_info() is None
    loader = DataLoader(
        _Info(),
        batch_size=2,
        num_workers=2,
        worker_init_fn=_set_tag,
        collate_fn=lambda samples: [(s["i"].item(), s["id"], s["n"], s["tag"]) for s in samples],
    )
    assert list(loader) == [
        [(0.0, 0, 2, "init0"), (2.0, 0, 2, "init0")],
        [(4.0, 1, 2, "init1"), (6.0, 1, 2, "init1")],
    ]
    default = list(DataLoader(_Info(), batch_size=2, num_workers=1, pin_memory=True))
    assert default[1]["i"].tolist() == [4.0, 6.0] and default[1]["id"].tolist() == [0, 0]
    assert _tag == "parent" and _no_workers_left()


class _Failing(Dataset):
    def __init__(self, kind):
        self.kind = kind

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            if self.kind == "key":
                raise KeyError("missing")
            if self.kind == "sleep":
                time.sleep(0.8)
            if self.kind == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError(f"bad sample {i}")
        return np.float32(i)


def test_a_worker_error_is_raised_again_with_its_traceback():
    it = iter(DataLoader(_Failing("value"), batch_size=2, num_workers=2))
    assert next(it).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError) as e:
        next(it)
    text = str(e.value)
    assert text.startswith("Caught ValueError in DataLoader worker process 1.\nOriginal Traceback")
    assert "in __getitem__" in text and text.rstrip().endswith("ValueError: bad sample 2")
    with pytest.raises(StopIteration):
        next(it)
    with pytest.raises(KeyError, match="Caught KeyError in DataLoader worker process 0"):
        list(DataLoader(_Failing("key"), batch_size=1, num_workers=1))
    assert _no_workers_left()


def test_timeout_and_a_dead_worker_raise_and_leave_no_process():
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0.2 seconds"):
        list(DataLoader(_Failing("sleep"), batch_size=2, num_workers=2, timeout=0.2))
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+\) exited"):
        list(DataLoader(_Failing("die"), batch_size=2, num_workers=2))
    it = iter(DataLoader(_Failing("value"), batch_size=1, num_workers=2))
    next(it)
    del it  # an abandoned epoch stops its workers
    assert _no_workers_left()


def test_loader_argument_checks():
    ds = TensorDataset(np.arange(4))
    with pytest.raises(ValueError, match="prefetch_factor option could only be specified"):
        DataLoader(ds, prefetch_factor=2)
    with pytest.raises(ValueError, match="persistent_workers option needs num_workers > 0"):
        DataLoader(ds, persistent_workers=True)
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        DataLoader(ds, num_workers=-1)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(ds, batch_size=2, batch_sampler=[[0, 1]])


def test_samplers_and_batch_sampler():
    assert list(SequentialSampler(range(3))) == [0, 1, 2]
    g = fg.Generator().manual_seed(3)
    first, second = (
        list(RandomSampler(range(6), generator=g)),
        list(RandomSampler(range(6), generator=g)),
    )
    assert sorted(first) == sorted(second) == list(range(6)) and first != second
    g.manual_seed(3)
    assert list(RandomSampler(range(6), generator=g)) == first  # the generator decides
    many = list(RandomSampler(range(3), num_samples=7, generator=g))
    assert len(many) == 7 and sorted(many[:3]) == sorted(many[3:6]) == [0, 1, 2]
    drawn = list(RandomSampler(range(3), replacement=True, num_samples=20, generator=g))
    assert len(drawn) == 20 and set(drawn) <= {0, 1, 2}
    assert sorted(SubsetRandomSampler([5, 7, 9], generator=g)) == [5, 7, 9]
    bs = BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=True)
    assert list(bs) == [[0, 1], [2, 3]] and len(bs) == 2
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        BatchSampler(range(3), 0, False)
    ds = TensorDataset(np.arange(10, 15))
    loader = DataLoader(ds, batch_sampler=[[4, 0], [1, 2, 3]])
    assert _labels(loader) == [[14, 10], [11, 12, 13]] and len(loader) == 2
    s = RandomSampler(ds, generator=fg.Generator().manual_seed(1))
    assert sorted(sum(_labels(DataLoader(ds, batch_size=2, sampler=s)), [])) == list(range(10, 15))


def test_concat_dataset():
    a, b = TensorDataset(np.arange(3)), TensorDataset(np.arange(10, 12))
    ds = ConcatDataset([a, b])
    assert len(ds) == 5 and ds.cumulative_sizes == [3, 5]
    assert [ds[i][0].item() for i in (0, 2, 3, 4, -1, -5)] == [0, 2, 10, 11, 11, 0]
    with pytest.raises(ValueError, match="absolute value of index should not exceed"):
        ds[-6]
    with pytest.raises(IndexError):
        ds[5]
    assert len(a + b) == 5 and isinstance(a + b, ConcatDataset)
    assert _labels(DataLoader(ds, batch_size=2)) == [[0, 1], [2, 10], [11]]


class _Many(Dataset):
    """torch's habit: __getitems__ returns a list of samples, which the loader collates."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        return (np.float32(i), i * 10)

    def __getitems__(self, indices):
        return [(np.float32(i), i * 10) for i in indices]


def test_getitems_samples_are_collated_and_subset_and_random_split_as_torch():
    batches = list(DataLoader(_Many(), batch_size=3))
    assert [b[1].tolist() for b in batches] == [[0, 10, 20], [30, 40]]
    assert batches[0][0].dtype == fg.float32
    sub = fg.data.Subset(TensorDataset(np.arange(10, 20)), [3, 1, 4])
    assert sub[[0, 2]][0].tolist() == [13, 14]  # the dataset is asked for the list
    with pytest.raises(ValueError, match="Fraction at index 0 is not between 0 and 1"):
        fg.data.random_split(range(10), [1.5, -0.5])
    with pytest.warns(UserWarning, match="Length of split at index 0 is 0"):
        parts = fg.data.random_split(range(10), [0.0, 1.0])
    assert [len(p) for p in parts] == [0, 10]


class _Stream(fg.data.IterableDataset):
    def __iter__(self):
        info = get_worker_info()  # each worker takes every num_workers-th number
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 11, step))


def test_iterable_dataset_in_workers_interleaves_as_torch():
    # torch's batches: each worker batches its own stream; the loader takes them in turn
    # and drops a worker once its stream is done
    two = DataLoader(_Stream(), batch_size=3, num_workers=2, persistent_workers=True)
    for _ in range(2):
        assert [b.tolist() for b in two] == [[0, 2, 4], [1, 3, 5], [6, 8, 10], [7, 9]]
    three = DataLoader(_Stream(), batch_size=2, num_workers=3, drop_last=True)
    assert [b.tolist() for b in three] == [[0, 3], [1, 4], [2, 5], [6, 9], [7, 10]]
    alone = DataLoader(_Stream(), batch_size=4)
    assert [b.tolist() for b in alone] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        DataLoader(_Stream(), shuffle=True)
    with pytest.raises(TypeError):
        len(alone)
    del two
    assert _no_workers_left()


def test_default_collate_keeps_a_namedtuple():
    import collections

    pair = collections.namedtuple("pair", "x y")
    batch = fg.data.default_collate([pair(np.float32(1), 2), pair(np.float32(3), 4)])
    assert type(batch) is pair and batch.x.tolist() == [1.0, 3.0] and batch.y.tolist() == [2, 4]


@pytest.mark.parametrize(
    "name, args", [("rand_like", ()), ("randn_like", ()), ("randint_like", (9,))]
)
def test_the_like_draws_take_a_generator(name, args):
    x = fg.zeros(5)
    g = fg.Generator().manual_seed(3)
    first = getattr(fg, name)(x, *args, generator=g).tolist()
    g.manual_seed(3)
    fg.rand(2)  # the global stream moves; the generator's does not
    assert getattr(fg, name)(x, *args, generator=g).tolist() == first
    assert getattr(fg, name)(x, *args, generator=g).tolist() != first  # and it advances
