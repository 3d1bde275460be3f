"""`nn.AdaptiveLogSoftmaxWithLoss`: torch's adaptive softmax (Grave et al., "Efficient
softmax approximation for GPUs"): the frequent classes below `cutoffs[0]` (the shortlist)
and one entry per cluster share the head; each cluster's classes get their own smaller
projection (the tail), whose log-probabilities add to the head's entry for the cluster.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> fg.manual_seed(0)
>>> asm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs=[4, 8])
>>> out = asm(fg.randn(3, 8), fg.tensor([0, 5, 9]))
>>> out.output.shape, out.loss.shape, asm.log_prob(fg.randn(2, 8)).shape
((3,), (), (2, 10))
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence

import numpy as np

from ..nnapi import Tensor, cat, tensor, where
from .activations import log_softmax
from .containers import ModuleList, Sequential
from .layers import Linear
from .module import Module

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0,
    head_bias=False): `head` a Linear(in_features, cutoffs[0] + number of clusters), `tail`
    a ModuleList of one Sequential(Linear(in_features, in_features // div_value ** (i+1),
    bias=False), Linear(that, cluster size, bias=False)) per cluster, as torch's.

    `forward(input, target)` gives (output, loss): output the log-probability of each
    row's target class, loss the mean of its negation; a 1-D input with a 0-d target is
    one row. `log_prob(input)` gives every class's log-probability, `predict(input)` the
    most probable class. The targets are read on the host (the rows each cluster sees
    depend on them).

    Where fusegrad differs: `predict` computes the full distribution for every row whose
    head picks a cluster alongside those it does not (the same classes as torch's).
    """

    def __init__(
        self,
        in_features: int,
        n_classes: int,
        cutoffs: Sequence[int],
        div_value: float = 4.0,
        head_bias: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (
            cutoffs != sorted(cutoffs)
            or min(cutoffs) <= 0
            or max(cutoffs) > n_classes - 1
            or len(set(cutoffs)) != len(cutoffs)
            or any(int(c) != c for c in cutoffs)
        ):
            raise ValueError(
                "cutoffs should be a sequence of unique, positive integers sorted in an "
                "increasing order, where each value is between 1 and n_classes-1"
            )
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        factory = {"device": device, "dtype": dtype}
        self.head = Linear(in_features, self.head_size, bias=head_bias, **factory)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(
                Sequential(
                    Linear(in_features, hidden, bias=False, **factory),
                    Linear(hidden, size, bias=False, **factory),
                )
            )

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_: Tensor, target_: Tensor) -> _ASMoutput:
        if target_.ndim == 1:
            if input_.shape[0] != target_.shape[0]:
                raise RuntimeError(
                    "Input and target should have the same size in the batch dimension."
                )
            if input_.ndim != 2:
                raise RuntimeError(
                    "1D target tensor expects 2D input tensors, but found inputs with size "
                    f"{list(input_.shape)}"
                )
        elif target_.ndim == 0:
            if input_.ndim != 1:
                raise RuntimeError(
                    "0D target tensor expects 1D input tensors, but found inputs with size "
                    f"{list(input_.shape)}"
                )
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = target_.ndim > 0
        input = input_ if batched else input_.unsqueeze(0)
        targets = np.asarray(target_.numpy(), dtype=np.int64).reshape(-1)
        if targets.size and (targets.min() < 0 or targets.max() >= self.n_classes):
            raise RuntimeError(
                f"Target values should be in [0, {self.n_classes - 1}], but values in range "
                f"[{targets.min()}, {targets.max()}] were found. "
            )
        # each row's head entry: its class in the shortlist, else its cluster's
        clusters = np.searchsorted(self.cutoffs, targets, side="right")
        head_index = np.where(clusters == 0, targets, self.shortlist_size + clusters - 1)
        head_logprob = log_softmax(self.head(input), dim=1)
        output = head_logprob.gather(1, _index(head_index).unsqueeze(1)).squeeze(1)
        for i in range(self.n_clusters):
            rows = np.nonzero(clusters == i + 1)[0]
            if rows.size == 0:
                continue
            relative = targets[rows] - self.cutoffs[i]
            cluster_logprob = log_softmax(self.tail[i](input.index_select(0, _index(rows))), 1)
            local = cluster_logprob.gather(1, _index(relative).unsqueeze(1)).squeeze(1)
            output = output.index_add(0, _index(rows), local)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _full_log_prob(self, input: Tensor, head_output: Tensor) -> Tensor:
        head_logprob = log_softmax(head_output, dim=1)
        parts = [head_logprob[:, : self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = log_softmax(self.tail[i](input), dim=1)
            parts.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(parts, dim=1)

    def log_prob(self, input: Tensor) -> Tensor:
        """The log-probability of each of the `n_classes` classes, (N, n_classes)."""
        return self._full_log_prob(input, self.head(input))

    def predict(self, input: Tensor) -> Tensor:
        """The most probable class of each row (int64, (N,)): the head's pick where it is
        in the shortlist, else the full distribution's, as torch's."""
        head_output = self.head(input)
        picked = head_output.argmax(dim=1)
        if picked.numel() == 0:
            return picked
        in_shortlist = picked < self.shortlist_size
        return where(in_shortlist, picked, self._full_log_prob(input, head_output).argmax(dim=1))


def _index(values: np.ndarray) -> Tensor:
    return tensor(np.asarray(values, dtype=np.int64))
