"""Two-input losses, distances, fmax/fmin and prelu at their special points (ties, kinks,
boundaries, zero vectors, NaN), values and gradients, against torch 2.13's (float64, written in).

Zero signs of the gradients are not compared here: smooth_l1_loss and huber_loss give
-0.0 where torch gives +0.0 at a zero difference (and the reverse for the target).
kl_div's gradient with respect to a zero target is torch's NaN (log 0) but fusegrad's
finite: only the input's gradient is compared for it.
(atol 1e-12: the zero vector case's ~1e-16 entries are rounding.)
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F

NAN = math.nan

# name -> (the op on (a, b), a, b, value, d sum / d a, d sum / d b or None: not compared)
CASES = {
    "l1_loss at ties": (
        lambda a, b: F.l1_loss(a, b),
        [0.0, -0.0, 1.0, -1.0], [0.0, 0.0, 1.0, 2.0],
        0.75, [0.0, 0.0, 0.0, -0.25], [0.0, 0.0, 0.0, 0.25],
    ),
    "smooth_l1_loss at |d| = beta": (
        lambda a, b: F.smooth_l1_loss(a, b, beta=1.0),
        [1.0, -1.0, 0.0, -0.0, 2.0], [0.0, 0.0, 0.0, 0.0, 1.0],
        0.3, [0.2, -0.2, 0.0, 0.0, 0.2], [-0.2, 0.2, 0.0, 0.0, -0.2],
    ),
    "huber_loss at |d| = delta": (
        lambda a, b: F.huber_loss(a, b, delta=1.5),
        [1.5, -1.5, 0.0, 3.0], [0.0, 0.0, 0.0, 1.5],
        0.84375, [0.375, -0.375, 0.0, 0.375], [-0.375, 0.375, 0.0, -0.375],
    ),
    "kl_div with zero targets": (
        lambda a, b: F.kl_div(a, b, reduction="sum"),
        [-1.0, 0.0, -0.0, -2.0], [0.0, 0.5, 0.0, 0.5],
        0.30685281944005466, [0.0, -0.5, 0.0, -0.5], None,
    ),
    "cosine_similarity of a zero vector": (
        lambda a, b: F.cosine_similarity(a, b, dim=1).sum(),
        [[0.0, 0.0], [1.0, -1.0]], [[1.0, 2.0], [-1.0, 1.0]],
        -0.9999999999999998,
        [[44721359.549995795, 89442719.09999159],
         [-1.1102230246251565e-16, 1.1102230246251565e-16]],
        [[0.0, 0.0], [1.1102230246251565e-16, -1.1102230246251565e-16]],
    ),
    "cdist at a zero distance": (
        lambda a, b: fg.cdist(a, b).sum(),
        [[0.0, 1.0], [2.0, -1.0]], [[0.0, 1.0], [2.0, 0.0]],
        6.06449510224598,
        [[-0.8944271909999159, 0.4472135954999579], [0.7071067811865475, -1.7071067811865475]],
        [[-0.7071067811865475, 0.7071067811865475], [0.8944271909999159, 0.5527864045000421]],
    ),
    "fmax at NaN and ties": (
        lambda a, b: fg.fmax(a, b),
        [NAN, 1.0, 0.0, 2.0, NAN], [1.0, NAN, 0.0, 2.0, NAN],
        [1.0, 1.0, 0.0, 2.0, NAN], [0.0, 1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "fmin at NaN and ties": (
        lambda a, b: fg.fmin(a, b),
        [NAN, 1.0, 0.0, 2.0, NAN], [1.0, NAN, 0.0, 2.0, NAN],
        [1.0, 1.0, 0.0, 2.0, NAN], [0.0, 1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "prelu at 0 and -0": (
        lambda a, b: F.prelu(a, b),
        [0.0, -0.0, -2.0, 3.0], [0.25],
        [0.0, -0.0, -0.5, 3.0], [0.25, 0.25, 0.25, 1.0], [-2.0],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_added_op_at_special_points_as_torch(name):
    op, a, b, value, grad_a, grad_b = CASES[name]
    ta = fg.tensor(a, dtype=fg.float64, requires_grad=True)
    tb = fg.tensor(b, dtype=fg.float64, requires_grad=True)
    y = op(ta, tb)
    y.sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), value, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.grad.numpy(), grad_a, rtol=1e-9, atol=1e-12)
    if grad_b is not None:
        np.testing.assert_allclose(tb.grad.numpy(), grad_b, rtol=1e-9, atol=1e-12)
