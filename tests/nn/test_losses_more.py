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


def test_hinge_poisson_gaussian_options_and_refusals_as_torchs():
    """The values at the special points are swept against torch's in
    tests/frontend/test_special_points.py; here torch's options, deprecated arguments,
    module reprs and refusals."""
    x, t = fg.tensor([0.3, 2.0, -1.0]), fg.tensor([1, -1, -1])
    with pytest.warns(UserWarning, match="please use reduction='sum' instead"):
        got = F.hinge_embedding_loss(x, t, size_average=False)
    assert got.item() == pytest.approx(2.299999952316284)
    with pytest.warns(UserWarning, match="reduction='none'"):
        got = F.poisson_nll_loss(x, fg.tensor([1.0, 3.0, 0.0]), reduce=False)
    want = [1.049858808517456, 1.3890562057495117, 0.3678794503211975]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    with pytest.warns(UserWarning):
        assert nn.PoissonNLLLoss(reduce=False).reduction == "none"
    for m in (nn.HingeEmbeddingLoss(2.0, reduction="sum"), nn.PoissonNLLLoss(False, True)):
        assert repr(m) == f"{type(m).__name__}()"
    assert repr(nn.GaussianNLLLoss(full=True, eps=1e-3)) == "GaussianNLLLoss()"
    with pytest.raises(TypeError):
        nn.GaussianNLLLoss(True)  # keyword-only, as torch's
    for f in (F.hinge_embedding_loss, F.poisson_nll_loss):
        with pytest.raises(ValueError, match="x is not a valid value for reduction"):
            f(x, x, reduction="x")
    with pytest.raises(ValueError, match="x is not valid"):
        F.gaussian_nll_loss(x, x, fg.ones(3), reduction="x")
    with pytest.raises(ValueError, match="var has negative entry/entries"):
        F.gaussian_nll_loss(x, x, fg.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="var has negative entry/entries"):
        F.gaussian_nll_loss(x, x, -1.0)
    big = fg.ones(2, 3, 4)
    for shape in [(3, 2), (1, 1, 3), (2, 1, 2)]:
        with pytest.raises(ValueError, match="var is of incorrect size"):
            F.gaussian_nll_loss(big, big, fg.ones(*shape))
    for shape in [(2, 3), (2, 3, 1), (1, 3, 4)]:  # one per row, or broadcast along one dim
        assert (
            F.gaussian_nll_loss(big, big * 2, fg.ones(*shape), reduction="none").shape == big.shape
        )


def test_gaussian_nll_loss_clamps_var_for_the_value_only():
    # torch: var.clamp_(min=eps) under no_grad, so the gradient is the clamped value's, passed
    # through the clamp as if it were not there
    v = fg.tensor([0.0, 1e-9, 2.0], dtype=fg.float64, requires_grad=True)
    x, t = fg.ones(3, dtype=fg.float64), fg.zeros(3, dtype=fg.float64)
    loss = F.gaussian_nll_loss(x, t, v, reduction="sum")
    loss.backward()
    assert loss.item() == pytest.approx(999986.7810630323, rel=1e-12)
    assert v.grad.tolist() == pytest.approx([-499999500000.0, -499999500000.0, 0.125], rel=1e-12)
    m = nn.GaussianNLLLoss(full=True)
    want = 0.5 * (math.log(4.0) + 0.25) + 0.5 * math.log(2 * math.pi)
    assert m(fg.tensor([1.0]), fg.tensor([2.0]), fg.tensor([4.0])).item() == pytest.approx(want)
