"""`fusegrad.data`: datasets and a batching, shuffling DataLoader that yields fusegrad tensors.

Samples are gathered on the host with numpy and each batch becomes realized
tensors (`fg.from_numpy`): to the compiler a batch is data, so every
full-size batch runs the same cached schedule.

>>> import numpy as np
>>> from fusegrad.data import DataLoader, TensorDataset
>>> ds = TensorDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
>>> [tuple(x.shape) for x, y in DataLoader(ds, batch_size=2)]
[(2, 2), (2, 2), (1, 2)]
"""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..nnapi import Tensor, distributed, from_numpy, host_rng, randperm
from .data_workers import WorkerInfo, WorkerIterator, WorkerPool, get_worker_info
from .samplers import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "IterableDataset",
    "DistributedSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "StackDataset",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "WorkerInfo",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "random_split",
]


class Dataset:
    """A map-style dataset: subclasses define `__getitem__(i)` and `__len__()`.

    A subclass may also define `__getitems__(indices)` returning the list of those
    samples at once; the DataLoader then uses it (and collates the list, as torch's).
    """

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: subclasses define `__iter__` (as torch's). With
    `num_workers=N` each worker iterates its own copy, so a dataset that should not repeat
    itself splits the stream by `get_worker_info()`."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __len__(self) -> int:  # a stream has no length unless its class gives one
        raise TypeError(f"object of type '{type(self).__name__}' has no len()")


class ConcatDataset(Dataset):
    """The samples of several datasets one after the other, as torch's ConcatDataset.

    >>> import numpy as np
    >>> ds = ConcatDataset([TensorDataset(np.arange(3)), TensorDataset(np.arange(10, 12))])
    >>> len(ds), ds[3][0].item(), ds[-1][0].item(), ds.cumulative_sizes
    (5, 10, 11, [3, 5])
    """

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        self.cumulative_sizes, total = [], 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1] if self.cumulative_sizes else 0

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """The streams of several IterableDatasets one after the other, as torch's
    ChainDataset (made once; each iteration chains them anew).

    >>> class Count(IterableDataset):
    ...     def __init__(self, n):
    ...         self.n = n
    ...     def __iter__(self):
    ...         return iter(range(self.n))
    ...     def __len__(self):
    ...         return self.n
    >>> ds = ChainDataset([Count(2), Count(3)])
    >>> list(ds), len(ds)
    ([0, 1, 0, 1, 2], 5)
    """

    def __init__(self, datasets):
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            total += len(d)
        return total


class StackDataset(Dataset):
    """Samples of several datasets of one length side by side, as torch's StackDataset: a
    tuple per index from datasets given by position, or a dict from datasets given by
    name.

    >>> ds = StackDataset(a=[1, 2], b=["x", "y"])
    >>> ds[1], len(ds)
    ({'a': 2, 'b': 'y'}, 2)
    """

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError(
                "Supported either ``tuple``- (via ``args``) or``dict``- (via ``kwargs``) like "
                "input/output, but both types are given."
            )
        if not args and not kwargs:
            raise ValueError("At least one dataset should be passed")
        self.datasets = args or kwargs
        parts = args or list(kwargs.values())
        self._length = len(parts[0])
        if any(len(d) != self._length for d in parts):
            raise ValueError("Size mismatch between datasets")

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices: list):
        """The samples at `indices` (each dataset's own `__getitems__` where it has one)."""
        return [self[i] for i in indices]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order (as torch's Subset)."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        if isinstance(index, list):  # as torch's: the dataset is asked for the list
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Dataset, lengths: Sequence, generator=None) -> list[Subset]:
    """Split `dataset` at random into Subsets of the given lengths (or fractions summing
    to 1, the remainder dealt one by one from the first, as torch's). The permutation is
    drawn from `generator` (an fg.Generator or a numpy Generator) or else the
    `fg.manual_seed` stream.

    >>> import numpy as np
    >>> a, b = random_split(TensorDataset(np.arange(10)), [0.7, 0.3])
    >>> len(a), len(b)
    (7, 3)
    """
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, f in enumerate(lengths):
            if f < 0 or f > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
        for i, k in enumerate(lengths):
            if k == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.",
                    stacklevel=2,
                )
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    if isinstance(generator, np.random.Generator):
        order = generator.permutation(n)
    else:  # None or a fusegrad Generator
        order = randperm(n, generator=generator).numpy()
    out, start = [], 0
    for k in lengths:
        out.append(Subset(dataset, order[start : start + k].tolist()))
        start += k
    return out


class TensorDataset(Dataset):
    """Samples are rows of the given tensors (or numpy arrays), which share their first dim.

    `ds[i]` is a tuple of tensors, one row of each; the data is kept as numpy
    arrays so that batches are gathered without running kernels.
    """

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        self.arrays = [np.asarray(t.numpy() if isinstance(t, Tensor) else t) for t in tensors]
        # a tensor's rows keep its dtype (float64, uint8), as torch's; numpy data is converted
        self._dtype_kept = [isinstance(t, Tensor) for t in tensors]
        n = len(self.arrays[0]) if self.arrays[0].ndim else None
        if n is None or any(a.ndim == 0 or len(a) != n for a in self.arrays):
            raise ValueError("Size mismatch between tensors")
        self.tensors = tuple(tensors)

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index):
        return tuple(
            _to_tensor(np.asarray(a[index]), keep) for a, keep in zip(self.arrays, self._dtype_kept)
        )

    _getitems_collates = True  # __getitems__ gives the batch itself, not a list of samples

    def __getitems__(self, indices: Sequence[int]):
        idx = np.asarray(indices, dtype=np.int64)
        return tuple(_to_tensor(a[idx], keep) for a, keep in zip(self.arrays, self._dtype_kept))


def _to_tensor(a: np.ndarray, keep_dtype: bool = False) -> Tensor:
    # np.ascontiguousarray makes a 0-d array 1-d: keep ds[i]'s scalar labels of shape ()
    if keep_dtype:
        return from_numpy(np.ascontiguousarray(a).reshape(a.shape))
    if a.dtype == np.float64 or a.dtype == np.float16:
        a = a.astype(np.float32)  # fusegrad's default float, as fg.tensor does for Python floats
    elif a.dtype.kind in "iu" and a.dtype != np.int32:
        a = a.astype(np.int64)
    return from_numpy(np.ascontiguousarray(a).reshape(a.shape))


def _numeric_array(a) -> bool:
    """Whether `a` is a numpy array or scalar a tensor can hold (not text nor objects)."""
    return isinstance(a, (np.ndarray, np.generic)) and np.asarray(a).dtype.kind not in "OSUV"


def _as_tensor(a) -> Tensor:
    """A numpy array or scalar as a tensor of its own dtype (torch.as_tensor's)."""
    a = np.asarray(a)
    return from_numpy(np.ascontiguousarray(a).reshape(a.shape))


def default_convert(data):
    """torch's `default_convert` (a DataLoader's `collate_fn` where `batch_size=None`): each
    numpy array or scalar in `data` (inside dicts, namedtuples, lists and tuples) becomes a
    tensor of its dtype; a tuple becomes a list, as torch's; anything else stays as it is.

    >>> import numpy as np
    >>> default_convert({"x": np.array([1, 2]), "n": 3})
    {'x': tensor([1, 2]), 'n': 3}
    """
    if isinstance(data, Tensor):
        return data
    if _numeric_array(data):
        return _as_tensor(data)
    if isinstance(data, dict):
        return type(data)({k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple stays one
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        converted = [default_convert(d) for d in data]
        try:
            return type(data)(converted)
        except TypeError:  # a sequence that cannot be made from a list
            return converted
    return data


def default_collate(samples: list):
    """torch's `default_collate`: a list of samples as one batch. Tensors and numpy arrays
    stack along a new dim 0 in their dtype, Python floats as float64, ints as int64 and bools
    as bool (torch.tensor's dtypes), strings stay a list; dicts, namedtuples and sequences
    are collated field by field (a tuple's fields as a list, as torch's).

    >>> default_collate([(1.5, 1), (2.5, 2)])
    [tensor([1.5000, 2.5000], dtype=fusegrad.float64), tensor([1, 2])]
    """
    first = samples[0]
    if isinstance(first, Tensor):
        shapes = {tuple(s.shape) for s in samples}
        if len(shapes) > 1:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {sorted(shapes)} "
                "(collating a batch: give the DataLoader a collate_fn that pads them)"
            )
        return from_numpy(np.stack([s.numpy() for s in samples]))
    if _numeric_array(first):
        return _as_tensor(np.stack([np.asarray(s) for s in samples]))
    if isinstance(first, (str, bytes)):  # text stays a list, as torch's default_collate
        return list(samples)
    if isinstance(first, bool):  # (a bool is an int: torch.tensor keeps it bool)
        return from_numpy(np.array(samples, dtype=np.bool_))
    if isinstance(first, float):
        return from_numpy(np.array(samples, dtype=np.float64))
    if isinstance(first, int):
        return from_numpy(np.array(samples, dtype=np.int64))
    if isinstance(first, dict):
        return type(first)({k: default_collate([s[k] for s in samples]) for k in first})
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple stays one
        return type(first)(*(default_collate(list(field)) for field in zip(*samples)))
    if isinstance(first, Sequence):
        if len({len(s) for s in samples}) > 1:
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(field)) for field in zip(*samples)]
        if isinstance(first, tuple):
            return fields
        try:
            return type(first)(fields)
        except TypeError:
            return fields
    raise TypeError(
        "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        f"found {type(first).__name__}"
    )


class DataLoader:
    """Iterate over a dataset in batches of fusegrad tensors, as torch's DataLoader.

    `shuffle=True` draws a new permutation each epoch from `generator` (an
    fg.Generator or a numpy Generator), or from `seed`, or else from the `fg.manual_seed`
    stream, so runs are reproducible. `drop_last` drops a final short batch. A
    `sampler` (an iterable of indices with a length, such as a `DistributedSampler`)
    chooses the samples and their order instead, or a `batch_sampler` the whole batches.

    `num_workers=N` gathers the batches in N worker processes (see data_workers.py:
    `prefetch_factor` batches per worker in flight, `persistent_workers` keeps them
    across epochs, `worker_init_fn(worker_id)` runs in each, `timeout` bounds a wait);
    the batches and their order are those of `num_workers=0`. fusegrad has no pinned
    memory: `pin_memory` is accepted and changes nothing.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable | None = None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: int | None = None,
    ):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; use num_workers=0 to disable "
                "multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor "
                "to None."
            )
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if batch_size is not None and (isinstance(batch_size, bool) or batch_size <= 0):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        if generator is None and seed is not None:
            generator = np.random.default_rng(seed)
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            for name, given in (("shuffle", shuffle), ("sampler", sampler)):
                if given:
                    raise ValueError(
                        f"DataLoader with IterableDataset: expected unspecified {name} option, "
                        f"but got {name}={given}"
                    )
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified batch_sampler "
                    f"option, but got batch_sampler={batch_sampler}"
                )
        elif sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else None
            sampler = sampler or SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn
        self.generator = generator
        self.num_workers = num_workers
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.persistent_workers = persistent_workers
        self.worker_init_fn = worker_init_fn
        self.timeout = timeout
        self.multiprocessing_context = multiprocessing_context
        self.pin_memory = pin_memory
        self.in_order = in_order
        self._pool = None

    def __len__(self) -> int:
        if self._iterable:  # the dataset's length if it has one (TypeError if not), as torch
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)

    def _index_batches(self) -> Iterator:
        """The epoch's batches of indices (single indices when batch_size is None); for an
        IterableDataset, the epoch's number for each batch, which resets the workers'
        streams."""
        if self._iterable:
            self._epochs = getattr(self, "_epochs", 0) + 1
            return itertools.repeat(self._epochs)
        if self.batch_sampler is not None:
            return iter(self.batch_sampler)
        return iter(self.sampler)

    def __iter__(self) -> Iterator:
        batches = self._index_batches()
        # the workers' base seed, drawn after the order and whatever num_workers is (as
        # torch's), so that the batches of every epoch are those of num_workers=0
        seed = int(host_rng(self.generator).integers(2**62))
        if self.num_workers == 0:
            if self._iterable:
                return self._fetcher.batches()
            return (self._fetcher(indices) for indices in batches)
        pool = self._pool
        if pool is None or pool.closed:
            pool = WorkerPool(
                self._fetcher,
                self.dataset,
                self.num_workers,
                seed,
                self.worker_init_fn,
                self.timeout,
                self.multiprocessing_context,
            )
            if self.persistent_workers:
                self._pool = pool
        return WorkerIterator(
            pool, batches, self.prefetch_factor, self.persistent_workers, self.in_order
        )

    @property
    def _fetcher(self):
        if self._iterable:
            return _StreamFetcher(self.dataset, self.collate_fn, self.batch_size, self.drop_last)
        return _Fetcher(self.dataset, self.collate_fn, self.batch_sampler is not None)

    def __del__(self):
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown()


class _Fetcher:
    """Turns a batch's indices into the batch (in the main process or in a worker)."""

    def __init__(self, dataset, collate_fn, batched: bool):
        self.dataset, self.collate_fn, self.batched = dataset, collate_fn, batched

    def __call__(self, indices):
        if not self.batched:  # no batching: samples one by one, as torch does
            sample = self.dataset[int(indices)]
            return (self.collate_fn or default_convert)(sample)
        collate = self.collate_fn or default_collate
        getitems = getattr(self.dataset, "__getitems__", None)
        if getattr(self.dataset, "_getitems_collates", False):
            if self.collate_fn is None:  # TensorDataset's batch is one gather per tensor
                return list(getitems(np.asarray(indices, dtype=np.int64)))
        elif callable(getitems):  # torch's habit: a list of samples, then collated
            return collate(getitems(list(indices)))
        return collate([self.dataset[int(i)] for i in indices])


class _StreamFetcher:
    """The next batch of an IterableDataset's stream (in the main process or in a worker,
    which keeps the stream between calls); StopIteration when it runs out."""

    def __init__(self, dataset, collate_fn, batch_size, drop_last: bool):
        self.dataset, self.collate_fn = dataset, collate_fn
        self.batch_size, self.drop_last = batch_size, drop_last
        self.stream, self.epoch = None, None

    def __call__(self, epoch):
        if self.stream is None or epoch != self.epoch:
            self.stream, self.epoch = iter(self.dataset), epoch
        if self.batch_size is None:
            return (self.collate_fn or default_convert)(next(self.stream))
        samples = list(itertools.islice(self.stream, self.batch_size))
        if not samples or (self.drop_last and len(samples) < self.batch_size):
            raise StopIteration
        return (self.collate_fn or default_collate)(samples)

    def batches(self) -> Iterator:
        while True:
            try:
                yield self(None)
            except StopIteration:
                return


class DistributedSampler:
    """The indices of this rank's shard of a dataset, for data-parallel training.

    As torch.utils.data.DistributedSampler: each epoch the indices are shuffled
    (with `seed + epoch`, the same order on every rank; call `set_epoch(e)` at
    the start of each epoch), padded by repeating the first ones until every
    rank gets `ceil(len / num_replicas)` (or, with `drop_last`, trimmed to
    `floor(len / num_replicas)` each), and rank r takes every
    `num_replicas`-th index starting at r. So the shards have equal lengths and
    together cover the dataset. `num_replicas` and `rank` default to the
    process group's.

    >>> s = DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False)
    >>> list(s), len(s)
    ([1, 3, 0], 3)
    """

    def __init__(
        self,
        dataset,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        if num_replicas is None or rank is None:
            if not distributed.is_initialized():
                raise RuntimeError(
                    "DistributedSampler: pass num_replicas and rank, or call "
                    "fusegrad.distributed.init_process_group() first"
                )
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"num_replicas should be a positive integer, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            indices = np.arange(n)
        if not self.drop_last:
            padding = self.total_size - n
            if padding > 0:  # repeat from the start (several times over for a tiny dataset)
                indices = np.concatenate([indices, np.resize(indices, padding)])
        else:
            indices = indices[: self.total_size]
        return iter(indices[self.rank : self.total_size : self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` in the next shuffle, so each epoch has a new order (same on every rank)."""
        self.epoch = epoch
