"""The connectionist temporal classification loss, as torch's `F.ctc_loss` / `nn.CTCLoss`.

The forward variables alpha (log probabilities of the target's prefixes, with a blank
between and around its labels) are computed step by step over time, each step a
log-sum-exp of three shifted copies of the last, all in the graph: the gradient is
autodiff's, the exact derivative torch's backward formula computes. Log-sum-exp is taken
so that an unreachable state (log probability -inf) gives no NaN to the gradient.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> log_probs = fg.full((2, 1, 2), 0.5).log()  # two frames, blank and one label, 1/2 each
>>> round(F.ctc_loss(log_probs, fg.tensor([[1]]), [2], [1]).item(), 6)  # 3 of 4 paths
0.287682
"""

from __future__ import annotations

import numpy as np

from ..nnapi import ShapeError, Tensor, cat, tensor, where
from ..nnapi import fail as _fail
from .loss_functions import check_reduction
from .module import Module

_INF = float("inf")


def _lengths(lengths, n: int, what: str) -> np.ndarray:
    values = np.asarray(lengths.numpy() if isinstance(lengths, Tensor) else lengths, np.int64)
    if values.shape != (n,):
        _fail(ShapeError, "ctc_loss", f"{what} must have one length per batch element ({n})")
    return values.reshape(-1)


def _logsumexp3(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """log(e^a + e^b + e^c), -inf where all three are, with no NaN in its gradient."""
    m = a.maximum(b).maximum(c).detach()
    none = m == -_INF
    m = where(none, 0.0, m)
    total = (a - m).exp() + (b - m).exp() + (c - m).exp()
    return where(none, -_INF, where(none, 1.0, total).log() + m)


def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """CTC's negative log likelihood of each target given `log_probs` (T, N, C) (log-softmax
    outputs), as torch's: `targets` padded (N, S) or concatenated (sum of lengths);
    'mean' divides each loss by its target length, then averages; an impossible
    alignment is inf (0, with no gradient, under `zero_infinity`)."""
    check_reduction(reduction)
    if log_probs.ndim != 3:
        _fail(ShapeError, "ctc_loss", f"log_probs must be (T, N, C), got {log_probs.shape}")
    t_max, n, classes = log_probs.shape
    in_len = _lengths(input_lengths, n, "input_lengths")
    tg_len = _lengths(target_lengths, n, "target_lengths")
    if np.any(in_len > t_max) or np.any(in_len < 0) or np.any(tg_len < 0):
        _fail(ShapeError, "ctc_loss", f"input_lengths must be within [0, {t_max}]")
    labels = np.asarray(targets.numpy(), np.int64)
    if labels.ndim == 2:
        rows = [labels[i, : tg_len[i]] for i in range(n)]
    else:
        ends = np.cumsum(tg_len)
        rows = [labels[e - k : e] for e, k in zip(ends, tg_len)]
    longest = max(int(tg_len.max()) if n else 0, 0)
    s = 2 * longest + 1
    ext = np.full((n, s), blank, np.int64)  # blank, l1, blank, l2, ..., blank
    skip = np.zeros((n, s), bool)
    for i, row in enumerate(rows):
        ext[i, 1 : 2 * len(row) : 2] = row
        for k in range(3, 2 * len(row), 2):  # a label may follow the one before the blank
            skip[i, k] = row[(k - 1) // 2] != row[(k - 3) // 2]
    index = tensor(np.broadcast_to(ext, (t_max, n, s)).copy(), device=log_probs.device)
    picked = log_probs.gather(2, index)  # (T, N, S): each state's label's log probability
    ninf = -_INF
    start = np.full((n, s), ninf)
    start[:, 0] = 0.0
    start[:, 1] = np.where(tg_len > 0, 0.0, ninf)
    alpha = picked[0] + tensor(start, dtype=log_probs.dtype, device=log_probs.device)
    skip_t = tensor(skip, device=log_probs.device)
    pad = tensor(np.full((n, 1), ninf), dtype=alpha.dtype, device=alpha.device)
    for t in range(1, t_max):
        one = cat([pad, alpha[:, :-1]], 1)
        two = where(skip_t, cat([pad, pad, alpha[:, :-2]], 1), ninf)
        new = _logsumexp3(alpha, one, two) + picked[t]
        running = tensor((in_len > t).reshape(-1, 1), device=log_probs.device)
        alpha = where(running, new, alpha)
    last = tensor(np.stack([2 * tg_len, np.maximum(2 * tg_len - 1, 0)], 1), device=log_probs.device)
    final = alpha.gather(1, last)  # the last blank and the last label
    has_label = tensor(tg_len > 0, device=log_probs.device)
    label_end = where(has_label, final[:, 1], ninf)  # (an empty target has one state)
    nothing = tensor(np.full(n, ninf), dtype=alpha.dtype, device=alpha.device)
    loss = -_logsumexp3(final[:, 0], label_end, nothing)
    if zero_infinity:
        loss = where(loss == _INF, 0.0, loss)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    divisor = tensor(np.maximum(tg_len, 1), dtype=loss.dtype, device=loss.device)
    return (loss / divisor).mean()


class CTCLoss(Module):
    """`F.ctc_loss` as a module (blank, reduction, zero_infinity), as torch.nn.CTCLoss."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__()
        check_reduction(reduction)
        self.blank, self.reduction, self.zero_infinity = blank, reduction, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank,
                        self.reduction, self.zero_infinity)  # fmt: skip
