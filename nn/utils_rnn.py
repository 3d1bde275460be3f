"""`fusegrad.nn.utils.rnn`: padding and packing variable-length sequences, as torch's.

A batch of sequences of different lengths is either *padded*, (T, B, *) with
the short ones filled up (`pad_sequence`), or *packed*: a `PackedSequence`
whose `data` holds only the real time steps, time-major, the longest sequence
first at every step, and whose `batch_sizes[t]` says how many sequences are
still running at step t. Packing and unpacking are one gather each (its
gradient a scatter-add), with the row order computed on the host from the
lengths, which are always host data (as torch requires them on the CPU).

>>> import fusegrad as fg
>>> from fusegrad.nn.utils import rnn
>>> padded = fg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]])  # batch_first, lengths 3 and 2
>>> packed = rnn.pack_padded_sequence(padded, [3, 2], batch_first=True)
>>> packed.data.tolist(), packed.batch_sizes.tolist()
([1.0, 4.0, 2.0, 5.0, 3.0], [2, 2, 1])
>>> out, lengths = rnn.pad_packed_sequence(packed, batch_first=True)
>>> out.tolist(), lengths.tolist()
([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]], [3, 2])
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..nnapi import Tensor, cat, full, gather_rows, host_table, stack, tensor

__all__ = [
    "PackedSequence",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
]


class PackedSequence(NamedTuple):
    """Variable-length sequences packed time-major (see the module's docstring).

    `sorted_indices[j]` is the batch position of the j-th longest sequence and
    `unsorted_indices` its inverse; both are None when the batch was given
    sorted (`enforce_sorted=True`).
    """

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args, **kwargs) -> PackedSequence:
        return self._replace(data=self.data.to(*args, **kwargs))


def _host_lengths(lengths) -> np.ndarray:
    if isinstance(lengths, Tensor):
        lengths = lengths.numpy()
    return np.asarray(lengths, dtype=np.int64).reshape(-1)


def _rows(t: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """`t` as a 2-D table (first axis kept, the rest flattened) and the shape of a row."""
    rest = tuple(t.shape[1:])
    return t.reshape(t.shape[0], math.prod(rest)), rest


def _order(lengths: np.ndarray, enforce_sorted: bool):
    if enforce_sorted:
        if np.any(lengths[:-1] < lengths[1:]):
            raise RuntimeError(
                "`lengths` array must be sorted in decreasing order when `enforce_sorted` is "
                "True. You can pass `enforce_sorted=False` to pack_padded_sequence and/or "
                "pack_sequence to sidestep this requirement if you do not need ONNX "
                "exportability."
            )
        return np.arange(len(lengths)), None
    order = np.argsort(-lengths, kind="stable")
    return order, np.argsort(order, kind="stable")


def pack_padded_sequence(
    input: Tensor, lengths, batch_first: bool = False, enforce_sorted: bool = True
) -> PackedSequence:
    """Pack a padded (T, B, *) batch (B, T, * with `batch_first`) of sequences of `lengths`.

    The lengths must be sorted longest first unless `enforce_sorted=False`, which
    sorts them here and records the order in `sorted_indices`.
    """
    lengths = _host_lengths(lengths)
    if lengths.size and lengths.min() <= 0:
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in "
            "'lengths' that is <= 0"
        )
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    if len(lengths) != batch:
        raise ValueError(
            f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} "
            f"(batch_size={batch})"
        )
    order, inverse = _order(lengths, enforce_sorted)
    batch_sizes = np.array([(lengths > t).sum() for t in range(lengths.max())], dtype=np.int64)
    if lengths.max() > steps:
        raise RuntimeError(
            f"pack_padded_sequence: a length of {lengths.max()} exceeds the {steps} time steps "
            f"of the input {input.shape}"
        )
    data = pack_rows(input, lengths, order, batch_first)
    as_tensor = tensor
    return PackedSequence(
        data,
        as_tensor(batch_sizes),
        None if inverse is None else as_tensor(order.astype(np.int64)),
        None if inverse is None else as_tensor(inverse.astype(np.int64)),
    )


def pack_rows(input: Tensor, lengths: np.ndarray, order: np.ndarray, batch_first: bool):
    """The packed data of a padded batch: at each step t, the rows of the sequences still
    running, in `order` (longest first); one gather."""
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    index = []  # the packed rows, as rows of the input seen as (T * B, ...) or (B * T, ...)
    for t in range(int(lengths.max())):
        for b in order[lengths[order] > t]:
            index.append(b * steps + t if batch_first else t * batch + b)
    table, rest = _rows(input.reshape(steps * batch, *input.shape[2:]))
    return gather_rows(table, host_table(np.array(index, np.int64))).reshape(-1, *rest)


def packed_lengths(sequence: PackedSequence) -> np.ndarray:
    """Each sequence's length, in the batch's own (unsorted) order, as host data."""
    batch_sizes = _host_lengths(sequence.batch_sizes)
    sorted_lengths = np.array(
        [(batch_sizes > j).sum() for j in range(batch_sizes[0] if len(batch_sizes) else 0)],
        dtype=np.int64,
    )
    if sequence.unsorted_indices is None:
        return sorted_lengths
    return sorted_lengths[_host_lengths(sequence.unsorted_indices)]


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The padded batch of a `PackedSequence` and the (B,) lengths, the inverse of packing.

    The batch comes back in its original order; `total_length` pads to that many steps.
    """
    batch_sizes = _host_lengths(sequence.batch_sizes)
    lengths = packed_lengths(sequence)
    steps, batch = len(batch_sizes), len(lengths)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(
                "Expected total_length to be at least the length of the longest sequence in "
                f"input, but got total_length={total_length} and max sequence length being "
                f"{steps}"
            )
        steps = total_length
    rank = (  # the position of each batch entry among the sequences at every step
        np.arange(batch)
        if sequence.unsorted_indices is None
        else _host_lengths(sequence.unsorted_indices)
    )
    starts = np.concatenate([[0], np.cumsum(batch_sizes)])
    pad_row = int(starts[-1])  # the extra row of padding appended below
    index = np.full((steps, batch), pad_row, dtype=np.int64)
    for t in range(len(batch_sizes)):
        running = lengths > t
        index[t, running] = starts[t] + rank[running]
    if batch_first:
        index = index.T
    table, rest = _rows(sequence.data)
    padding = full((1, table.shape[1]), padding_value, dtype=table.dtype)
    padded = gather_rows(cat([table, padding.to(table.device)]), host_table(index))
    return padded.reshape(*index.shape, *rest), tensor(lengths)


def pad_sequence(
    sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"
) -> Tensor:
    """Stack tensors of shapes (L_i, *) into (max L, B, *) (B first with `batch_first`),
    filling with `padding_value` after each (before, with `padding_side="left"`)."""
    if padding_side not in ("left", "right"):
        raise ValueError(
            f"Expected padding_side to be one of left or right, but got {padding_side}."
        )
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        fill = longest - s.shape[0]
        ends = (0, fill) if padding_side == "right" else (fill, 0)
        padded.append(s.pad([0, 0] * (s.ndim - 1) + list(ends), value=padding_value))
    return stack(padded, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) tensors: `pack_padded_sequence(pad_sequence(...), lengths)`."""
    sequences = list(sequences)
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)
