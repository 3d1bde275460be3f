"""Bags of embeddings, as torch's `F.embedding_bag` and `nn.EmbeddingBag` (text
classifiers' first layer): the rows an index tensor picks, summed, averaged or maxed per
bag, without the (indices, dim) tensor in between being kept.

Bags are the rows of a 2-d input, or runs of a 1-d input that `offsets` starts (read on
the host: they decide the shape). Here the picked rows are gathered (`F.embedding`) and
added into their bags (`index_add`, or `scatter_reduce` for max), so the gradient is the
gather's scatter into the weight, as torch's.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> bag = nn.EmbeddingBag.from_pretrained(fg.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]))
>>> bag(fg.tensor([0, 1, 2, 2]), fg.tensor([0, 3])).tolist()  # bags [0, 1, 2] and [2]
[[1.0, 1.0], [2.0, 2.0]]
"""

from __future__ import annotations

import numpy as np

from ..nnapi import ShapeError, Tensor, tensor, where, zeros
from ..nnapi import fail as _fail
from . import dense, init
from .module import Module, Parameter, place, placeholder_parameter

_MODES = ("sum", "mean", "max")


def _bags(input: Tensor, offsets, include_last_offset: bool) -> tuple[Tensor, np.ndarray, int]:
    """The 1-d indices, the bag of each (numpy) and the number of bags."""
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a "
                "mini-batch of fixed length sequences. However, found offsets of type "
                f"{type(offsets).__name__}"
            )
        b, length = input.shape
        return input.reshape(-1), np.repeat(np.arange(b), length), b
    if input.ndim != 1:
        raise ValueError(
            f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}"
        )
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    if offsets.ndim != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    starts = np.asarray(offsets.numpy(), dtype=np.int64)
    n = input.shape[0]
    if len(starts) and starts[0] != 0:
        _fail(
            ShapeError,
            "embedding_bag",
            "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to "
            f"start from position 0. However, got {int(starts[0])}",
        )
    ends = starts[1:] if include_last_offset else np.append(starts[1:], n)
    if include_last_offset:
        starts = starts[:-1]
    if np.any(ends < starts) or (len(ends) and ends[-1] > n):
        _fail(
            ShapeError, "embedding_bag", f"offsets {list(map(int, starts))} do not fit {n} indices"
        )
    return input, np.repeat(np.arange(len(starts)), ends - starts), len(starts)


def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """The sum, mean or max of each bag's rows of `weight` (a (bags, dim) tensor), as
    torch.nn.functional.embedding_bag: an empty bag gives zeros, `padding_idx` entries
    are left out of their bag (and of its count), and `per_sample_weights` (mode 'sum')
    scale each row."""
    if mode not in _MODES:
        raise ValueError("mode has to be one of sum, mean or max")
    dense.refuse_embedding_options("embedding_bag", scale_grad_by_freq, sparse)
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            "embedding_bag: per_sample_weights was not None. per_sample_weights is only "
            f"supported for mode='sum' (got mode='{mode}')."
        )
    if per_sample_weights is not None and per_sample_weights.shape != input.shape:
        raise ValueError(
            f"embedding_bag: If per_sample_weights ({tuple(per_sample_weights.shape)}) is not "
            f"None, then it must have the same shape as the input ({tuple(input.shape)})"
        )
    flat, bag_of, bags = _bags(input, offsets, include_last_offset)
    if padding_idx is not None:
        padding_idx %= weight.shape[0]
    rows = dense.embedding(flat, weight, None, max_norm, norm_type)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1).to(rows.dtype)
    bag = tensor(bag_of, device=weight.device)
    out = zeros(bags, weight.shape[1], dtype=rows.dtype, device=weight.device)
    if not len(bag_of):
        return out
    keep = (flat != padding_idx) if padding_idx is not None else None
    if mode == "max":
        if keep is not None:
            rows = where(keep.reshape(-1, 1), rows, float("-inf"))
        index = bag.reshape(-1, 1).expand(rows.shape)
        out = out.scatter_reduce(0, index, rows, "amax", include_self=False)
        return where(out == float("-inf"), 0.0, out)  # (a bag of padding alone)
    if keep is not None:
        rows = where(keep.reshape(-1, 1), rows, 0.0)
    out = out.index_add(0, bag, rows)
    if mode == "mean":
        ones = keep.to(rows.dtype) if keep is not None else rows.new_ones(rows.shape[0])
        counts = zeros(bags, dtype=rows.dtype, device=weight.device).index_add(0, bag, ones)
        out = out / counts.clamp(min=1).reshape(-1, 1)
    return out


class EmbeddingBag(Module):
    """`num_embeddings` vectors of size `embedding_dim` reduced per bag (`mode` 'sum',
    'mean' or 'max'), as torch.nn.EmbeddingBag: N(0, 1) weights, the `padding_idx` row
    zero; called with a 1-d input and `offsets`, or a 2-d input of equal bags."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight=None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        dense.refuse_embedding_options("EmbeddingBag", scale_grad_by_freq, sparse)
        if mode not in _MODES:
            raise ValueError("mode has to be one of sum, mean or max")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.mode = max_norm, norm_type, mode
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        self.include_last_offset = include_last_offset
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = placeholder_parameter(num_embeddings, embedding_dim, dtype=dtype)
            self.reset_parameters()
            place(self, device)
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise AssertionError(
                    "Shape of weight does not match num_embeddings and embedding_dim"
                )
            self.weight = Parameter(_weight)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            w = self.weight.numpy().copy()
            w[self.padding_idx] = 0
            self.weight.assign_(tensor(w))

    def forward(self, input, offsets=None, per_sample_weights=None):
        return embedding_bag(
            input,
            self.weight,
            offsets,
            self.max_norm,
            self.norm_type,
            self.scale_grad_by_freq,
            self.mode,
            self.sparse,
            per_sample_weights,
            self.include_last_offset,
            self.padding_idx,
        )

    @classmethod
    def from_pretrained(
        cls,
        embeddings,
        freeze: bool = True,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
    ):
        """An EmbeddingBag holding `embeddings` (2-d); frozen (no gradient) by default."""
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                  embeddings, include_last_offset, padding_idx)  # fmt: skip
        bag.weight.requires_grad = not freeze
        return bag

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        s += f", mode='{self.mode}'"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s
