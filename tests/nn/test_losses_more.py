"""kl_div at zero and negative targets, pairwise_distance, cosine_embedding_loss,
margin_ranking_loss and triplet_margin_loss: values and gradients (of sum(y * w), w =
arange % 3 - 1) as torch 2.13's, written in as literals (float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

NAN, INF = math.nan, math.inf
A = [[0.5, -1.0, 2.0], [1.0, 1.0, 0.0]]
B = [[0.5, 1.0, 1.0], [-1.0, 2.0, 0.5]]

EXPECTED = {
    "kl": (
        [0.0, 0.2554128118829954, 0.0, 2.3025850929940455, NAN, 0.0],
        [0.0, -0.0, -0.5, 1.0, 0.0, -0.0],
        [NAN, 0.0, 1.0, -3.3025850929940455, 0.0, NAN],
    ),
    "pd2.0": (
        [2.2360675302868205, 2.2912880656964547],
        [-4.4721368494256965e-07, 0.8944269226714544, -0.44721413215625455, 0.0, -0.0, -0.0],
        [4.4721368494256965e-07, -0.8944269226714544, 0.44721413215625455, -0.0, 0.0, 0.0],
    ),
    "pd1.0": (
        [3.000001, 3.499999],
        [-1.0, 1.0, -1.0, 0.0, -0.0, -0.0],
        [1.0, -1.0, 1.0, -0.0, 0.0, 0.0],
    ),
    "pdinf": (
        [1.999999, 2.000001],
        [-0.0, 1.0, -0.0, 0.0, -0.0, -0.0],
        [0.0, -1.0, 0.0, -0.0, 0.0, 0.0],
    ),
    "ce": (
        [0.6363035162734615, 0.8086066999240773],
        [0.11084083313571357, 0.36023270769103444, 0.15240614556162346, -0.0, 0.0, 0.0],
        [0.06465715266253165, -0.4526000686373983, 0.4202714923062941, 0.0, 0.0, 0.0],
    ),
    "mr": ([1.5, 1.5, 0.5, 1.0], [1.0, 0.0, -1.0, -1.0], [-1.0, -0.0, 1.0, 1.0]),
    "tr": (
        [0.5000000000002498, 0.5000000000002498, 2.5000019999997503],
        [1.00000049999975, -1.000001000000875, 0.0, -0.0, 0.999998999998875, 1.00000049999925],
        [
            -0.9999999999995001,
            1.0000010000005002e-06,
            -0.0,
            0.0,
            -0.999999999999875,
            -4.999997500000624e-07,
        ],
        [
            -5.000002500000624e-07,
            0.999999999999875,
            0.0,
            0.0,
            1.0000010000005002e-06,
            -0.9999999999995001,
        ],
    ),
}


def _t(a):
    return fg.tensor(a, dtype=fg.float64, requires_grad=True)


def _check(y, inputs, key):
    w = (np.arange(y.numel()) % 3 - 1).reshape(y.shape).astype(np.float64)
    (y * fg.tensor(w)).sum().backward()
    for got, want in zip([y] + [t.grad for t in inputs], EXPECTED[key]):
        got = np.zeros(len(want)) if got is None else got.numpy().ravel()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_kl_div_zero_and_negative_targets_as_torch():
    # torch's xlogy(target, target): 0 at a zero target (its gradient NaN), NaN below zero
    lp = _t(np.log([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]))
    tg = _t([[0.0, 0.5, 0.5], [1.0, -0.5, 0.0]])
    _check(F.kl_div(lp, tg, reduction="none"), [lp, tg], "kl")


@pytest.mark.parametrize("p", [2.0, 1.0, INF])
def test_pairwise_distance(p):
    a, b = _t(A), _t(B)
    _check(nn.PairwiseDistance(p=p)(a, b), [a, b], f"pd{p}")
    assert F.pairwise_distance(a[0], b[0], keepdim=True).shape == (1,)


def test_cosine_embedding_loss():
    a, b = _t(A), _t(B)
    target = fg.tensor([1.0, -1.0], dtype=fg.float64)
    _check(nn.CosineEmbeddingLoss(-0.5, reduction="none")(a, b, target), [a, b], "ce")
    with pytest.raises(RuntimeError, match="0D or 1D target tensor expected"):
        F.cosine_embedding_loss(a, b, fg.ones(2, 1))


def test_margin_ranking_loss_passes_the_gradient_at_the_kink():
    x1, x2 = _t([1.0, 2.0, 3.0, 0.5]), _t([2.0, 1.0, 3.0, 0.0])
    y = fg.tensor([1.0, -1.0, 1.0, -1.0], dtype=fg.float64)
    _check(nn.MarginRankingLoss(0.5, reduction="none")(x1, x2, y), [x1, x2], "mr")
    with pytest.raises(RuntimeError, match="All input tensors should have same dimension"):
        F.margin_ranking_loss(fg.ones(2, 3), fg.ones(2, 3), fg.ones(2))


def test_triplet_margin_loss_with_swap():
    an, po = _t([[0.0, 1.0], [1.0, 1.0], [2.0, 0.0]]), _t([[1.0, 1.0], [1.0, 2.0], [0.0, 0.0]])
    ne = _t([[0.0, 3.0], [3.0, 1.0], [2.0, 1.0]])
    loss = nn.TripletMarginLoss(margin=1.5, swap=True, reduction="none")
    _check(loss(an, po, ne), [an, po, ne], "tr")
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        F.triplet_margin_loss(an, po, ne, margin=0.0)
    with pytest.raises(ValueError, match="expected margin to be greater than 0"):
        nn.TripletMarginLoss(margin=-1.0)
