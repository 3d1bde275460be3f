"""soft_margin_loss, multilabel_soft_margin_loss, multi_margin_loss, multilabel_margin_loss
and triplet_margin_with_distance_loss (F forms and modules): values, shapes and gradients
(of sum(y * w), w = arange % 3 - 1) as torch 2.14's, written in as literals (float64),
at the hinges' kinks, at +-inf and NaN, for every reduction; and torch's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

NAN, INF = math.nan, math.inf
X = [[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, -0.0, 3.0], [-2.0, 0.5, 0.5, 1.5]]
T = [[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, 1.0, -1.0], [1.0, 1.0, -1.0, 0.0]]
Y = [[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0], [0.5, 1.0, 0.0, 0.25]]
W = [1.0, 2.0, 0.5, -1.0]
TG = [2, 3, 1]
K = [[0.0, 1.5, -1.5, 1.5], [2.0, 0.5, 0.5, 0.5]]  # x[y] - x[i] == margin: z == 0
TM = [[2, 0, -1, 1], [3, -1, 0, 0], [1, 1, 3, -1]]  # after a -1 ignored; 1 listed twice
KM = [[0.0, 1.0, 0.5, -1.0], [2.0, 1.0, 1.0, 1.0]]
A = [[0.0, 1.0], [1.0, 1.0], [2.0, 0.0]]
P = [[1.0, 1.0], [1.0, 2.0], [0.0, 0.0]]
N = [[0.0, 3.0], [3.0, 1.0], [2.0, 1.0]]


def _c(a, dtype=fg.float64):
    return fg.tensor(a, dtype=dtype)


def _l1(u, v):
    return (u - v).abs().sum(-1)


def _cos(u, v):
    return 1.0 - F.cosine_similarity(u, v)


# name -> (the loss of fusegrad tensors, its inputs): the calls the torch oracle made
CASES = {
    **{
        f"sml_{r}": (lambda x, r=r: F.soft_margin_loss(x, _c(T), reduction=r), [X])
        for r in ("none", "mean", "sum")
    },
    "sml_bcast": (lambda x: nn.SoftMarginLoss(reduction="none")(x, _c([1.0, -1, 1, -1])), [X]),
    "sml_extreme": (
        lambda x: F.soft_margin_loss(x, _c([1.0, 1, 1, 1, -1]), reduction="none"),
        [[-1000.0, 1000.0, INF, NAN, -800.0]],
    ),
    "sml_0d": (lambda x: F.soft_margin_loss(x, _c(-1.0)), [0.25]),
    **{
        f"mlsml_{r}": (lambda x, y, r=r: F.multilabel_soft_margin_loss(x, y, reduction=r), [X, Y])
        for r in ("none", "mean", "sum")
    },
    **{
        f"mlsml_w_{r}": (
            lambda x, y, r=r: nn.MultiLabelSoftMarginLoss(_c(W), reduction=r)(x, y),
            [X, Y],
        )
        for r in ("none", "mean", "sum")
    },
    "mlsml_1d": (
        lambda x, y: F.multilabel_soft_margin_loss(x, y, reduction="none"),
        [X[0], Y[0]],
    ),
    "mlsml_3d": (
        lambda x, y: F.multilabel_soft_margin_loss(x, y, reduction="none"),
        [[X, X], [Y, Y]],
    ),
    "mlsml_extreme": (
        lambda x, y: F.multilabel_soft_margin_loss(x, y, reduction="none"),
        [[-1000.0, 1000.0, INF], [1.0, 0.0, 1.0]],
    ),
    **{
        f"mm_p{p}_{r}": (
            lambda x, p=p, r=r: F.multi_margin_loss(x, fg.tensor(TG), p=p, reduction=r),
            [X],
        )
        for p in (1, 2)
        for r in ("none", "mean", "sum")
    },
    **{
        f"mm_p{p}_w": (
            lambda x, p=p: nn.MultiMarginLoss(p, 0.5, _c(W), reduction="none")(x, fg.tensor(TG)),
            [X],
        )
        for p in (1, 2)
    },
    "mm_kink": (
        lambda x: F.multi_margin_loss(x, fg.tensor([1, 0]), margin=1.5, reduction="none"),
        [K],
    ),
    "mm_kink_p2": (
        lambda x: F.multi_margin_loss(x, fg.tensor([1, 0]), p=2, margin=1.5, reduction="none"),
        [K],
    ),
    "mm_1d": (lambda x: F.multi_margin_loss(x, fg.tensor(1), reduction="none"), [X[0]]),
    "mm_1d_t1": (lambda x: F.multi_margin_loss(x, fg.tensor([1]), reduction="none"), [X[0]]),
    "mm_0d": (lambda x: F.multi_margin_loss(x, fg.tensor(0), reduction="none"), [0.5]),
    "mm_nan": (
        lambda x: F.multi_margin_loss(x, fg.tensor([0]), reduction="none"),
        [[0.0, NAN, INF, -INF]],
    ),
    **{
        f"mlm_{r}": (lambda x, r=r: F.multilabel_margin_loss(x, fg.tensor(TM), reduction=r), [X])
        for r in ("none", "mean", "sum")
    },
    "mlm_kink": (
        lambda x: nn.MultiLabelMarginLoss(reduction="none")(
            x, fg.tensor([[1, -1, 0, 0], [0, 3, -1, 2]])
        ),
        [KM],
    ),
    "mlm_1d": (
        lambda x: F.multilabel_margin_loss(x, fg.tensor([3, 0, -1, 1]), reduction="none"),
        [X[0]],
    ),
    "mlm_0d": (lambda x: F.multilabel_margin_loss(x, fg.tensor(0), reduction="none"), [0.5]),
    "mlm_0d_none": (lambda x: F.multilabel_margin_loss(x, fg.tensor(-1), reduction="none"), [0.5]),
    "mlm_all_or_none": (
        lambda x: F.multilabel_margin_loss(
            x, fg.tensor([[0, 1, 2, 3], [-1, 0, 1, 2]]), reduction="none"
        ),
        [KM],
    ),
    **{
        f"tmwd_{r}": (
            lambda a, p, n, r=r: F.triplet_margin_with_distance_loss(a, p, n, reduction=r),
            [A, P, N],
        )
        for r in ("none", "mean", "sum")
    },
    "tmwd_swap": (
        lambda a, p, n: nn.TripletMarginWithDistanceLoss(margin=1.5, swap=True, reduction="none")(
            a, p, n
        ),
        [A, P, N],
    ),
    "tmwd_l1": (
        lambda a, p, n: F.triplet_margin_with_distance_loss(
            a, p, n, distance_function=_l1, margin=2.0, reduction="none"
        ),
        [A, P, N],
    ),
    "tmwd_cos_swap": (
        lambda a, p, n: nn.TripletMarginWithDistanceLoss(
            distance_function=_cos, margin=0.5, swap=True, reduction="none"
        )(a, p, n),
        [A, P, N],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_as_torchs(name):
    fn, inputs = CASES[name]
    shape, value, *grads = EXPECTED[name]
    ins = [fg.tensor(a, dtype=fg.float64, requires_grad=True) for a in inputs]
    y = fn(*ins)
    assert tuple(y.shape) == shape and y.dtype == fg.float64
    w = (np.arange(y.numel()) % 3 - 1).reshape(shape).astype(np.float64)
    (y * fg.tensor(w)).sum().backward()
    np.testing.assert_allclose(y.numpy().ravel(), value, rtol=1e-12, atol=1e-15)
    for t, want in zip(ins, grads):
        got = np.zeros(len(want)) if t.grad is None else t.grad.numpy().ravel()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


EXPECTED = {
    "sml_none": (
        (3, 4),
        [
            0.4740769841801067,
            0.31326168751822286,
            0.1269280110429725,
            0.6931471805599453,
            1.3132616875182228,
            0.31326168751822286,
            0.6931471805599453,
            3.048587351573742,
            2.1269280110429727,
            0.4740769841801067,
            0.9740769841801067,
            0.6931471805599453,
        ],
        [
            0.37754066879814546,
            0.0,
            -0.11920292202211755,
            -0.5,
            0.0,
            -0.2689414213699951,
            0.5,
            0.0,
            -0.8807970779778824,
            0.37754066879814546,
            0.0,
            -0.0,
        ],
    ),
    "sml_mean": (
        (),
        [0.936991744202876],
        [
            0.03146172239984545,
            -0.02241178511416626,
            0.009933576835176462,
            -0.041666666666666664,
            -0.06092154821916707,
            0.02241178511416626,
            0.041666666666666664,
            -0.07938117723520276,
            0.07339975649815687,
            0.03146172239984545,
            -0.05187161093348788,
            0.0,
        ],
    ),
    "sml_sum": (
        (),
        [11.243900930434512],
        [
            0.37754066879814546,
            -0.2689414213699951,
            0.11920292202211755,
            -0.5,
            -0.7310585786300049,
            0.2689414213699951,
            0.5,
            -0.9525741268224333,
            0.8807970779778824,
            0.37754066879814546,
            -0.6224593312018546,
            0.0,
        ],
    ),
    "sml_bcast": (
        (3, 4),
        [
            0.4740769841801067,
            0.31326168751822286,
            0.1269280110429725,
            0.6931471805599453,
            0.31326168751822286,
            1.3132616875182228,
            0.6931471805599453,
            3.048587351573742,
            2.1269280110429727,
            0.9740769841801067,
            0.4740769841801067,
            1.7014132779827524,
        ],
        [
            0.37754066879814546,
            0.0,
            -0.11920292202211755,
            -0.5,
            -0.0,
            0.7310585786300049,
            0.5,
            0.0,
            -0.8807970779778824,
            -0.6224593312018546,
            -0.0,
            0.8175744761936437,
        ],
    ),
    "sml_extreme": (
        (5,),
        [INF, 0.0, 0.0, NAN, 0.0],
        [NAN, -0.0, -0.0, NAN, 0.0],
    ),
    "sml_0d": (
        (),
        [0.8259394198788436],
        [-0.5621765008857981],
    ),
    "mlsml_none": (
        (3,),
        [0.4018534658253118, 0.8420644767925333, 0.9753738143464846],
        [
            0.09438516719953637,
            -0.06723535534249878,
            0.029800730505529387,
            -0.125,
            0.0,
            0.0,
            0.0,
            0.0,
            -0.0951992694944706,
            -0.09438516719953637,
            0.15561483280046362,
            0.1418936190484109,
        ],
        [0.125, -0.25, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, -0.125, -0.125, -0.375],
    ),
    "mlsml_w_none": (
        (3,),
        [0.1177292960445234, 1.0594428253152248, 0.3089267983776217],
        [
            0.09438516719953637,
            -0.13447071068499755,
            0.014900365252764693,
            0.125,
            0.0,
            0.0,
            0.0,
            0.0,
            -0.0951992694944706,
            -0.18877033439907273,
            0.07780741640023181,
            -0.1418936190484109,
        ],
        [0.125, -0.5, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, -0.25, -0.0625, 0.375],
    ),
    "mlsml_mean": (
        (),
        [0.7397639189881099],
        [
            0.03146172239984545,
            -0.022411785114166256,
            0.009933576835176462,
            -0.041666666666666664,
            -0.06092154821916707,
            -0.06092154821916707,
            0.041666666666666664,
            0.003952156098130565,
            0.0317330898314902,
            0.03146172239984545,
            -0.05187161093348787,
            -0.04729787301613697,
        ],
        [
            0.04166666666666667,
            -0.08333333333333333,
            0.16666666666666669,
            0.0,
            0.08333333333333333,
            0.08333333333333333,
            0.0,
            0.24999999999999997,
            -0.16666666666666669,
            0.04166666666666667,
            0.04166666666666667,
            0.125,
        ],
    ),
    "mlsml_w_mean": (
        (),
        [0.49536630657912334],
        [
            0.03146172239984545,
            -0.04482357022833251,
            0.004966788417588231,
            0.041666666666666664,
            -0.06092154821916707,
            -0.12184309643833414,
            0.020833333333333332,
            -0.003952156098130565,
            0.0317330898314902,
            0.0629234447996909,
            -0.025935805466743934,
            0.04729787301613697,
        ],
        [
            0.04166666666666667,
            -0.16666666666666666,
            0.08333333333333334,
            0.0,
            0.08333333333333333,
            0.16666666666666666,
            0.0,
            -0.24999999999999997,
            -0.16666666666666669,
            0.08333333333333334,
            0.020833333333333336,
            -0.125,
        ],
    ),
    "mlsml_sum": (
        (),
        [2.2192917569643296],
        [
            0.09438516719953637,
            -0.06723535534249878,
            0.029800730505529387,
            -0.125,
            -0.18276464465750122,
            -0.18276464465750122,
            0.125,
            0.011856468294391697,
            0.0951992694944706,
            0.09438516719953637,
            -0.15561483280046362,
            -0.1418936190484109,
        ],
        [0.125, -0.25, 0.5, 0.0, 0.25, 0.25, 0.0, 0.75, -0.5, 0.125, 0.125, 0.375],
    ),
    "mlsml_w_sum": (
        (),
        [1.48609891973737],
        [
            0.09438516719953637,
            -0.13447071068499755,
            0.014900365252764693,
            0.125,
            -0.18276464465750122,
            -0.36552928931500245,
            0.0625,
            -0.011856468294391697,
            0.0951992694944706,
            0.18877033439907273,
            -0.07780741640023181,
            0.1418936190484109,
        ],
        [0.125, -0.5, 0.25, 0.0, 0.25, 0.5, 0.0, -0.75, -0.5, 0.25, 0.0625, -0.375],
    ),
    "mlsml_1d": (
        (),
        [0.4018534658253118],
        [0.09438516719953637, -0.06723535534249878, 0.029800730505529387, -0.125],
        [0.125, -0.25, 0.5, 0.0],
    ),
    "mlsml_3d": (
        (2, 3),
        [
            0.4018534658253118,
            0.8420644767925333,
            0.9753738143464846,
            0.4018534658253118,
            0.8420644767925333,
            0.9753738143464846,
        ],
        [
            0.09438516719953637,
            -0.06723535534249878,
            0.029800730505529387,
            -0.125,
            0.0,
            0.0,
            0.0,
            0.0,
            -0.0951992694944706,
            -0.09438516719953637,
            0.15561483280046362,
            0.1418936190484109,
            0.09438516719953637,
            -0.06723535534249878,
            0.029800730505529387,
            -0.125,
            0.0,
            0.0,
            0.0,
            0.0,
            -0.0951992694944706,
            -0.09438516719953637,
            0.15561483280046362,
            0.1418936190484109,
        ],
        [
            0.125,
            -0.25,
            0.5,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.5,
            -0.125,
            -0.125,
            -0.375,
            0.125,
            -0.25,
            0.5,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.5,
            -0.125,
            -0.125,
            -0.375,
        ],
    ),
    "mlsml_extreme": (
        (),
        [NAN],
        [0.3333333333333333, -0.3333333333333333, 0.0],
        [-333.3333333333333, 333.3333333333333, INF],
    ),
    "mm_p1_none": (
        (3,),
        [0.0, 0.0, 0.75],
        [-0.0, -0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5, 0.25, 0.25],
    ),
    "mm_p1_mean": (
        (),
        [0.25],
        [
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            0.16666666666666666,
            -0.08333333333333333,
            -0.08333333333333333,
        ],
    ),
    "mm_p1_sum": (
        (),
        [0.75],
        [-0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, 0.5, -0.25, -0.25],
    ),
    "mm_p1_w": (
        (3,),
        [0.0, 0.0, 1.0],
        [-0.0, -0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.5, 0.5],
    ),
    "mm_p2_none": (
        (3,),
        [0.0, 0.0, 1.25],
        [-0.0, -0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.5, 0.5, 1.0],
    ),
    "mm_p2_mean": (
        (),
        [0.4166666666666667],
        [
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            0.5,
            -0.16666666666666666,
            -0.3333333333333333,
        ],
    ),
    "mm_p2_sum": (
        (),
        [1.25],
        [-0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, 1.5, -0.5, -1.0],
    ),
    "mm_p2_w": (
        (3,),
        [0.0, 0.0, 1.25],
        [-0.0, -0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -2.0, 0.5, 1.5],
    ),
    "mm_kink": (
        (2,),
        [0.375, 0.0],
        [-0.0, 0.25, -0.0, -0.25, 0.0, 0.0, 0.0, 0.0],
    ),
    "mm_kink_p2": (
        (2,),
        [0.5625, 0.0],
        [-0.0, 0.75, -0.0, -0.75, 0.0, 0.0, 0.0, 0.0],
    ),
    "mm_1d": (
        (),
        [2.125],
        [-0.25, 0.75, -0.25, -0.25],
    ),
    "mm_1d_t1": (
        (1,),
        [2.125],
        [-0.25, 0.75, -0.25, -0.25],
    ),
    "mm_0d": (
        (),
        [0.0],
        [-0.0],
    ),
    "mm_nan": (
        (1,),
        [INF],
        [0.25, -0.0, -0.25, -0.0],
    ),
    "mlm_none": (
        (3,),
        [0.125, 0.0, 0.5],
        [0.25, -0.0, -0.0, -0.25, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5, 0.5, 0.0],
    ),
    "mlm_mean": (
        (),
        [0.20833333333333334],
        [
            0.08333333333333333,
            -0.0,
            -0.0,
            -0.08333333333333333,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            -0.0,
            0.16666666666666666,
            -0.16666666666666666,
            -0.0,
        ],
    ),
    "mlm_sum": (
        (),
        [0.625],
        [0.25, -0.0, -0.0, -0.25, -0.0, -0.0, -0.0, -0.0, -0.0, 0.5, -0.5, -0.0],
    ),
    "mlm_kink": (
        (2,),
        [0.125, 0.5],
        [-0.0, 0.25, -0.25, -0.0, 0.0, 0.0, 0.0, -0.0],
    ),
    "mlm_1d": (
        (),
        [1.375],
        [0.25, -0.0, -0.5, 0.25],
    ),
    "mlm_0d": (
        (),
        [0.0],
        [-0.0],
    ),
    "mlm_0d_none": (
        (),
        [0.0],
        [-0.0],
    ),
    "mlm_all_or_none": (
        (2,),
        [0.0, 0.0],
        [-0.0, -0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "tmwd_none": (
        (3,),
        [2.498001805406602e-13, 2.498001805406602e-13, 2.0000019999997503],
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
            -0.0,
            0.0,
            1.0000010000005002e-06,
            -0.9999999999995001,
        ],
    ),
    "tmwd_mean": (
        (),
        [0.6666673333334167],
        [
            0.3333334999999167,
            -0.3333336666669583,
            -0.3333336666669583,
            0.3333334999999167,
            -0.33333299999962496,
            -0.33333349999975,
        ],
        [
            -0.33333333333316667,
            3.3333366666683335e-07,
            3.3333366666683335e-07,
            -0.33333333333316667,
            0.3333333333332916,
            1.6666658333335412e-07,
        ],
        [
            -1.666667500000208e-07,
            0.3333333333332916,
            0.3333333333332916,
            -1.666667500000208e-07,
            -3.3333366666683335e-07,
            0.33333333333316667,
        ],
    ),
    "tmwd_sum": (
        (),
        [2.00000200000025],
        [
            1.00000049999975,
            -1.000001000000875,
            -1.000001000000875,
            1.00000049999975,
            -0.999998999998875,
            -1.00000049999925,
        ],
        [
            -0.9999999999995001,
            1.0000010000005002e-06,
            1.0000010000005002e-06,
            -0.9999999999995001,
            0.999999999999875,
            4.999997500000624e-07,
        ],
        [
            -5.000002500000624e-07,
            0.999999999999875,
            0.999999999999875,
            -5.000002500000624e-07,
            -1.0000010000005002e-06,
            0.9999999999995001,
        ],
    ),
    "tmwd_swap": (
        (3,),
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
    "tmwd_l1": (
        (3,),
        [1.0, 1.0, 3.0],
        [1.0, -1.0, 0.0, -0.0, 1.0, 1.0],
        [-1.0, 0.0, -0.0, 0.0, -1.0, -0.0],
        [-0.0, 1.0, -0.0, 0.0, 0.0, -1.0],
    ),
    "tmwd_cos_swap": (
        (3,),
        [0.7928932188134525, 0.4457438929494021, 1.3944271909999157],
        [0.7071067811865475, 0.0, 0.0, 0.0, 0.0, 0.22360679774997896],
        [-0.3535533905932737, 0.3535533905932738, 0.0, 0.0, -100000000.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.08944271909999163, -0.17888543819998315],
    ),
}


def test_empty_batches_as_torchs():
    e, cls = fg.zeros(0, 3), fg.zeros(0, dtype=fg.int64)
    assert math.isnan(F.soft_margin_loss(fg.zeros(0), fg.zeros(0)).item())
    assert F.soft_margin_loss(fg.zeros(0), fg.zeros(0), reduction="sum").item() == 0.0
    assert math.isnan(F.multilabel_soft_margin_loss(e, e).item())
    assert F.multi_margin_loss(e, cls, reduction="none").shape == (0,)
    assert F.multi_margin_loss(e, cls, reduction="sum").item() == 0.0
    assert F.multilabel_margin_loss(e, fg.zeros(0, 3, dtype=fg.int64)).item() == 0.0
    assert F.multilabel_margin_loss(e, e.long(), reduction="none").shape == (0,)


def test_float32_and_module_forms():
    x = fg.tensor(X)
    got = nn.MultiMarginLoss()(x, fg.tensor(TG))
    assert got.dtype == fg.float32
    assert got.item() == pytest.approx(EXPECTED["mm_p1_mean"][1][0], rel=1e-6)
    got = nn.MultiLabelSoftMarginLoss()(x, fg.tensor(Y))
    assert got.item() == pytest.approx(EXPECTED["mlsml_mean"][1][0], rel=1e-6)
    loss = nn.TripletMarginWithDistanceLoss()
    assert isinstance(loss.distance_function, nn.PairwiseDistance)
    for m in (nn.SoftMarginLoss(), nn.MultiLabelMarginLoss(), nn.MultiMarginLoss(2, 0.5)):
        assert repr(m) == f"{type(m).__name__}()"
    weighted = nn.MultiMarginLoss(weight=fg.ones(4))
    assert "weight" in dict(weighted.named_buffers())
    assert nn.MultiLabelSoftMarginLoss().weight is None


def test_deprecated_size_average_and_reduce():
    x, t = fg.tensor(X), fg.tensor(T)
    with pytest.warns(UserWarning, match="reduction='sum'"):
        got = F.soft_margin_loss(x, t, size_average=False)
    assert got.item() == pytest.approx(EXPECTED["sml_sum"][1][0], rel=1e-6)
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert F.multi_margin_loss(x, fg.tensor(TG), reduce=False).shape == (3,)
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert F.multilabel_margin_loss(x, fg.tensor(TM), reduce=False).shape == (3,)
    with pytest.warns(UserWarning, match="reduction='sum'"):
        assert nn.MultiLabelSoftMarginLoss(size_average=False).reduction == "sum"


def test_refusals_as_torchs():
    x, tg, tm = fg.tensor(X), fg.tensor(TG), fg.tensor(TM)
    for f, args in [
        (F.soft_margin_loss, (x, fg.tensor(T))),
        (F.multi_margin_loss, (x, tg)),
        (F.multilabel_margin_loss, (x, tm)),
    ]:
        with pytest.raises(ValueError, match="x is not a valid value for reduction"):
            f(*args, reduction="x")
    with pytest.raises(ValueError, match="^x is not valid$"):
        F.multilabel_soft_margin_loss(x, x, reduction="x")
    with pytest.raises(IndexError, match="Dimension specified as -1 but tensor has no dim"):
        F.multilabel_soft_margin_loss(fg.tensor(0.5), fg.tensor(1.0))
    with pytest.raises(RuntimeError, match=r"output with shape \[4\] doesn't match the broad"):
        F.soft_margin_loss(x[0], fg.tensor(T))
    t = fg.tensor(T, requires_grad=True)
    with pytest.raises(RuntimeError, match="not differentiable with respect to argument 'target'"):
        F.soft_margin_loss(x, t)
    with fg.no_grad():
        F.soft_margin_loss(x, t)
    w = fg.ones(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="not differentiable with respect to argument 'weight'"):
        F.multi_margin_loss(x, tg, weight=w)

    with pytest.raises(ValueError, match="only p == 1 and p == 2 supported"):
        F.multi_margin_loss(x, tg, p=3)
    with pytest.raises(ValueError, match="only p == 1 and p == 2 supported"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(ValueError, match="^weight must be one-dimensional$"):
        F.multi_margin_loss(x, tg, weight=fg.ones(1, 4))
    with pytest.raises(ValueError, match="expected weight to be None or 1D tensor, got 2D"):
        nn.MultiMarginLoss(weight=fg.ones(1, 4))
    with pytest.raises(RuntimeError, match="inconsistent weight size, expected 4 but got \\[3\\]"):
        F.multi_margin_loss(x, tg, weight=fg.ones(3))
    for bad in (fg.zeros(2, 0), fg.zeros(2, 3, 4), fg.zeros(0)):
        for f in (F.multi_margin_loss, F.multilabel_margin_loss):
            with pytest.raises(RuntimeError, match="Expected non-empty vector or matrix"):
                f(bad, fg.zeros(2, dtype=fg.int64))
    with pytest.raises(RuntimeError, match=r"Expected target size \[3\], but got \[3, 1\]"):
        F.multi_margin_loss(x, tg[:, None])
    with pytest.raises(RuntimeError, match=r"Expected target size \[3\], but got \[2\]"):
        F.multi_margin_loss(x, tg[:2])
    for bad in ([0, 4, 1], [0, -1, 1]):
        with pytest.raises(IndexError, match="target out of range"):
            F.multi_margin_loss(x, fg.tensor(bad))
    for f, t in ((F.multi_margin_loss, tg), (F.multilabel_margin_loss, tm)):
        with pytest.raises(TypeError, match="expected scalar type Long but found float32"):
            f(x, t.float())
    with pytest.raises(RuntimeError, match=r"inconsistent target size: \[3, 2\] for input of size"):
        F.multilabel_margin_loss(x, tm[:, :2])
    with pytest.raises(RuntimeError, match=r"inconsistent target size: \[3\] for input of size"):
        F.multilabel_margin_loss(x[0], tm[0, :3])
    for bad in ([[1, -1, 4, 0]], [[-2, 0, 1, 2]]):  # checked after a -1 too, as torch's
        with pytest.raises(IndexError, match="argument #2 'target' is out of range"):
            F.multilabel_margin_loss(x[:1], fg.tensor(bad))

    a = fg.tensor(A)
    with pytest.raises(ValueError, match="x is not a valid value for reduction"):
        F.triplet_margin_with_distance_loss(a, a, a, reduction="x")
    with pytest.raises(ValueError, match="margin must be greater than 0, got 0.0"):
        F.triplet_margin_with_distance_loss(a, a, a, margin=0.0)
    with pytest.raises(ValueError, match="expected margin to be greater than 0, got -1"):
        nn.TripletMarginWithDistanceLoss(margin=-1)
    with pytest.raises(RuntimeError, match="anchor 2D, positive 1D, and negative 2D inputs"):
        F.triplet_margin_with_distance_loss(a, a[0], a)
    with pytest.raises(TypeError):
        F.triplet_margin_with_distance_loss(a, a, a, _l1)  # keyword-only, as torch's
