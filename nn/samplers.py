"""Samplers: the order in which a DataLoader visits a dataset, as torch.utils.data's.

A sampler is an iterable of indices with a length; a batch sampler yields lists of
indices. Random ones draw from `generator` (an `fg.Generator` or a numpy Generator) or
else from the `fg.manual_seed` stream, one fresh draw per pass.

>>> import fusegrad as fg
>>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
[[0, 1], [2, 3], [4]]
>>> g = fg.Generator().manual_seed(0)
>>> sorted(RandomSampler(range(4), generator=g))
[0, 1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ..nnapi import host_rng


class Sampler:
    """Base class of samplers: subclasses define `__iter__` (and usually `__len__`)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices (or `num_samples` draws with `replacement`);
    each pass draws anew. Without replacement, `num_samples` beyond the length repeats
    whole permutations, as torch's."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got {replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(
                f"num_samples should be a positive integer value, but got "
                f"num_samples={self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        # drawn now, not at the first next(): the DataLoader draws its workers' seed after
        rng = host_rng(self.generator)
        n, k = len(self.data_source), self.num_samples
        if self.replacement:
            order = rng.integers(0, n, size=k)
        else:
            order = np.concatenate([rng.permutation(n) for _ in range(-(-k // n))])[:k]
        return iter(order.tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order, drawn anew each pass."""

    def __init__(self, indices: Sequence[int], generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        order = host_rng(self.generator).permutation(len(self.indices))
        return iter([self.indices[i] for i in order.tolist()])

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of `batch_size` (the last one shorter
    unless `drop_last`)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        return self._batches(iter(self.sampler))  # a random sampler draws now

    def _batches(self, indices) -> Iterator[list[int]]:
        batch = []
        for i in indices:
            batch.append(int(i))
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
