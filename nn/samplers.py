"""Samplers: the order in which a DataLoader visits a dataset, as torch.utils.data's.

A sampler is an iterable of indices with a length; a batch sampler yields lists of
indices. Random ones draw from `generator` (an `fg.Generator` or a numpy Generator) or
else from the `fg.manual_seed` stream, one fresh draw per pass. Draws with replacement
come `CHUNK` indices at a time, as they are consumed, so `num_samples` may be any size
(makemore's endless loader asks for 10**10): memory stays that of one chunk.

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

from ..nnapi import Tensor, host_rng

CHUNK = 1024  # indices drawn at once by a sampler with replacement


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
        # the stream is seeded now, not at the first next(): the DataLoader draws its
        # workers' seed after; the indices are drawn as they are consumed
        rng = host_rng(self.generator)
        n, k = len(self.data_source), self.num_samples
        if self.replacement:
            return _chunks(k, lambda size: rng.integers(0, n, size=size))
        return _chunks(k, lambda size: rng.permutation(n)[:size], chunk=n)  # whole rounds

    def __len__(self) -> int:
        return self.num_samples


def _chunks(total: int, draw, chunk: int = CHUNK) -> Iterator[int]:
    """`total` indices, `draw(size)` giving each next `size` (at most `chunk`) at a time.
    The first chunk is drawn now: with a numpy Generator shared with the DataLoader, the
    order comes before the workers' seed, as when the whole order was drawn at once."""
    first = draw(min(chunk, total)).tolist()

    def rest() -> Iterator[int]:
        yield from first
        left = total - len(first)
        while left > 0:
            size = min(chunk, left)
            left -= size
            yield from draw(size).tolist()

    return rest()


class WeightedRandomSampler(Sampler):
    """`num_samples` indices drawn with probabilities proportional to `weights` (a 1-d
    sequence, need not sum to one), as torch.utils.data.WeightedRandomSampler; with
    replacement (the default) the draws come a chunk at a time, as they are consumed.

    >>> import fusegrad as fg
    >>> g = fg.Generator().manual_seed(0)
    >>> draws = list(WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 8, generator=g))
    >>> sorted(set(draws))
    [1, 3]
    """

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(
                f"num_samples should be a positive integer value, but got num_samples={num_samples}"
            )
        if not isinstance(replacement, bool):
            raise ValueError(
                f"replacement should be a boolean value, but got replacement={replacement}"
            )
        w = np.asarray(weights.numpy() if isinstance(weights, Tensor) else weights, np.float64)
        if w.ndim != 1:
            raise ValueError(
                f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}"
            )
        if not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
            raise RuntimeError(
                "invalid multinomial distribution: weights must be finite, non-negative and "
                "not all zero"
            )
        if not replacement and num_samples > np.count_nonzero(w):
            raise RuntimeError(
                f"cannot sample {num_samples} indices without replacement from "
                f"{np.count_nonzero(w)} non-zero weights"
            )
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        rng = host_rng(self.generator)  # seeded now, as RandomSampler's
        if not self.replacement:  # at most len(weights) indices: drawn at once
            p = self.weights / self.weights.sum()
            return iter(rng.choice(len(p), self.num_samples, replace=False, p=p).tolist())
        cdf = np.cumsum(self.weights)
        last = int(np.flatnonzero(self.weights)[-1])  # where rounding at the top may land

        def draw(size: int) -> np.ndarray:
            found = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
            return np.minimum(found, last)

        return _chunks(self.num_samples, draw)

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
