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

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..nnapi import (
    Tensor,
    distributed,
    from_numpy,
    host_rng,
    randperm,
)


class Dataset:
    """A map-style dataset: subclasses define `__getitem__(i)` and `__len__()`.

    A subclass may also define `__getitems__(indices)` returning a whole batch
    at once (as `TensorDataset` does); the DataLoader then uses it.
    """

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order (as torch's Subset)."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        if isinstance(index, (list, tuple)):
            return [self.dataset[self.indices[i]] for i in index]
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
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
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


def default_collate(samples: list):
    """Stack a list of samples into a batch: tensors, arrays and numbers stack along a new dim 0;
    tuples, lists and dicts are collated field by field."""
    first = samples[0]
    if isinstance(first, (str, bytes)):  # text stays a list, as torch's default_collate
        return list(samples)
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(default_collate(list(field)) for field in zip(*samples))
    if isinstance(first, Tensor):
        return from_numpy(np.stack([s.numpy() for s in samples]))
    return _to_tensor(np.stack([np.asarray(s) for s in samples]))


class DataLoader:
    """Iterate over a dataset in batches of fusegrad tensors.

    `shuffle=True` draws a new permutation each epoch from `generator` (an
    fg.Generator or a numpy Generator), or from `seed`, or else from the `fg.manual_seed` stream,
    so runs are reproducible. `drop_last` drops a final short batch. A
    `sampler` (an iterable of indices with a length, such as a
    `DistributedSampler`) chooses the samples and their order instead.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        collate_fn: Callable | None = None,
        generator=None,
        seed: int | None = None,
        sampler=None,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
    ):
        # torch's worker and pinning options are accepted so that torch code runs unchanged:
        # batches are gathered in this process (numpy fancy indexing, no kernels), and
        # fusegrad has no pinned memory; the batches are the same
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative")
        if batch_size is not None and batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer, got {batch_size}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        self.sampler = sampler  # an iterable of indices (a DistributedSampler, say)
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        if generator is None and seed is not None:
            generator = np.random.default_rng(seed)
        self.generator = generator

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _order(self) -> np.ndarray:
        if self.sampler is not None:
            return np.fromiter(iter(self.sampler), dtype=np.int64)
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        rng = host_rng(self.generator)
        return rng.permutation(n)

    def __iter__(self) -> Iterator:
        order = self._order()
        if self.batch_size is None:  # no batching: samples one by one, as torch does
            for i in order:
                yield self.dataset[int(i)]
            return
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            if self.drop_last and len(idx) < self.batch_size:
                return
            yield self._fetch(idx)

    def _fetch(self, idx: np.ndarray):
        if self.collate_fn is None and hasattr(self.dataset, "__getitems__"):
            return self.dataset.__getitems__(idx)
        samples = [self.dataset[int(i)] for i in idx]
        return (self.collate_fn or default_collate)(samples)


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
