"""torch's top-level forms of nn.functional ops (`fg.conv2d`, `fg.dropout(x, p, train)`,
`fg.batch_norm` in torch's top-level order, ...): each equals the F function called
with the same arguments in F's order, and takes its arguments in torch's top-level
positional order (a permuted order would give another value or fail). The reduction
enum, its default (torch's binding reads it as 0), and its TypeError for a string, as
torch 2.14's."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad.nn import toplevel


def _t(*shape, seed=0, positive=False):
    data = np.random.default_rng(seed).standard_normal(shape)
    return fg.tensor(np.abs(data) + 0.1 if positive else data, dtype=fg.float64)


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
        return
    assert a.shape == b.shape
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


X1, W1 = _t(2, 3, 9), _t(4, 3, 3, seed=1)
X2, W2 = _t(2, 3, 6, 5), _t(4, 3, 3, 2, seed=1)
X3, W3 = _t(1, 2, 4, 5, 4), _t(3, 2, 2, 3, 2, seed=1)
B4 = _t(4, seed=2)
W9, B9, W3_, B3_ = _t(9, seed=4), _t(9, seed=5), _t(3, seed=4), _t(3, seed=5)
WT1, WT2, WT3 = _t(3, 4, 3, seed=3), _t(3, 4, 3, 2, seed=3), _t(2, 3, 2, 2, 2, seed=3)

# (fg.<name>(*args), F.<name>(*f_args)): the same call in each one's order
SAME = {
    "conv1d": ((X1, W1, B4, 2, 1, 1, 1), (X1, W1, B4, 2, 1, 1, 1)),
    "conv1d_same": ((X1, W1, None, 1, "same", 2), (X1, W1, None, 1, "same", 2)),
    "conv2d": ((X2, W2, B4, (2, 1), (1, 0), 1, 1), (X2, W2, B4, (2, 1), (1, 0), 1, 1)),
    "conv3d": ((X3, W3, None, 1, 1, (1, 2, 1)), (X3, W3, None, 1, 1, (1, 2, 1))),
    "conv_transpose1d": ((X1, WT1, B4, 2, 1, 1, 1, 2), (X1, WT1, B4, 2, 1, 1, 1, 2)),
    "conv_transpose2d": ((X2, WT2, None, 2, 0, 1), (X2, WT2, None, 2, 0, 1)),
    "conv_transpose3d": ((X3, WT3, None, 1, 1, 0, 1, 2), (X3, WT3, None, 1, 1, 0, 1, 2)),
    "max_pool1d": ((X1, 3, 2, 1, 2, True), (X1, 3, 2, 1, 2, True)),
    "max_pool1d_empty_stride": ((X1, 3, ()), (X1, 3)),
    "max_pool2d": ((X2, (2, 3), (), (1, 1)), (X2, (2, 3), None, (1, 1))),
    "max_pool3d": ((X3, 2, 1, 0, 2), (X3, 2, 1, 0, 2)),
    "avg_pool1d": ((X1, 3, 2, 1, True, False), (X1, 3, 2, 1, True, False)),
    "adaptive_avg_pool1d": ((X1, 4), (X1, 4)),
    "layer_norm": ((X1, (9,), W9, B9, 0.1, True), (X1, (9,), W9, B9, 0.1)),
    "group_norm": ((X2, 3, W3_, B3_, 0.1, False), (X2, 3, W3_, B3_, 0.1)),
    "pixel_shuffle": ((_t(1, 8, 2, 3), 2),) * 2,
    "pixel_unshuffle": ((_t(1, 2, 4, 6), 2),) * 2,
    "cosine_similarity": ((X2, _t(2, 3, 6, 5, seed=6), 2, 0.5),) * 2,
    "pairwise_distance": ((X2, _t(2, 3, 6, 5, seed=6), 3.0, 0.1, True),) * 2,
    "pdist": ((_t(4, 3), 1.5),) * 2,
    "prelu": ((X1, _t(3, seed=7)),) * 2,
    "selu": ((X1,),) * 2,
    "celu": ((X1, 0.5),) * 2,
    "threshold": ((X1, 0.25, -7.0),) * 2,
    "rrelu": ((X1, 0.1, 0.4, False), (X1, 0.1, 0.4, False)),
    "bilinear": ((_t(5, 3), _t(5, 2, seed=1), _t(4, 3, 2, seed=2), B4),) * 2,
    "channel_shuffle": ((_t(1, 6, 2), 3),) * 2,
    "rms_norm": ((X1, (9,), _t(9, seed=4), 0.5),) * 2,
}


def _name(key: str) -> str:
    return key.removesuffix("_same").removesuffix("_empty_stride")


@pytest.mark.parametrize("key", sorted(SAME))
def test_the_top_level_form_is_fs(key):
    args, f_args = SAME[key]
    _same(getattr(fg, _name(key))(*args), getattr(F, _name(key))(*f_args))


def test_every_name_is_fusegrads_and_torchs_name():
    for name in toplevel.__all__:
        # (fg's is the same function taking torch's out= too: frontend/out_arguments.py)
        assert getattr(fg, name).__wrapped__ is getattr(toplevel, name)
        assert getattr(fg, name).__name__ == name
        assert name in fg.__all__


def test_max_pool_with_indices_forms_return_pairs():
    values, indices = fg.max_pool1d_with_indices(X1, 3, (), 1)
    _same((values, indices), F.max_pool1d(X1, 3, None, 1, return_indices=True))
    assert fg.max_pool1d(X1, 3).shape == values.shape  # (no indices)
    _same(fg.adaptive_max_pool1d(X1, 4), F.adaptive_max_pool1d(X1, 4, return_indices=True))


def test_dropouts_take_train_positionally_and_require_it():
    x = _t(4, 6)
    assert fg.dropout(x, 0.5, False) is x
    assert fg.alpha_dropout(x, 0.5, False) is x and fg.feature_alpha_dropout(x, 0.5, False) is x
    fg.manual_seed(3)
    a = fg.dropout(x, 0.5, True)
    fg.manual_seed(3)
    _same(a, F.dropout(x, 0.5, True))
    kept = a.numpy() != 0
    assert 0 < kept.sum() < x.numel()
    np.testing.assert_allclose(a.numpy()[kept], 2 * x.numpy()[kept])
    for fn in (fg.dropout, fg.alpha_dropout, fg.feature_alpha_dropout):
        with pytest.raises(TypeError):
            fn(x, 0.5)
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        fg.dropout(x, 1.5, True)
    y = _t(4, 6)
    fg.manual_seed(3)
    assert fg.dropout_(y, 0.5, True) is y
    _same(y, a)
    for fn in (fg.alpha_dropout_, fg.feature_alpha_dropout_):
        z = _t(4, 6)
        fg.manual_seed(5)
        want = getattr(F, fn.__name__[:-1])(z, 0.5, True)
        fg.manual_seed(5)
        assert fn(z, 0.5, True) is z
        _same(z, want)


def test_batch_norm_takes_weight_and_bias_first():
    w, b = _t(3, seed=1, positive=True), _t(3, seed=2)
    rm, rv = fg.zeros(3, dtype=fg.float64), fg.ones(3, dtype=fg.float64)
    rm2, rv2 = fg.zeros(3, dtype=fg.float64), fg.ones(3, dtype=fg.float64)
    out = fg.batch_norm(X1, w, b, rm, rv, True, 0.3, 1e-3, True)
    _same(out, F.batch_norm(X1, rm2, rv2, w, b, True, 0.3, 1e-3))
    _same(rm, rm2)
    _same(rv, rv2)
    # eval: the running statistics normalize, the weight scales, the bias shifts
    evaluated = fg.batch_norm(X1, w, b, rm, rv, False, 0.3, 0.0, False).numpy()
    want = (X1.numpy() - rm.numpy()[:, None]) / np.sqrt(rv.numpy()[:, None])
    np.testing.assert_allclose(evaluated, want * w.numpy()[:, None] + b.numpy()[:, None])
    with pytest.raises(TypeError):
        fg.batch_norm(X1, w, b, rm, rv, True, 0.3, 1e-3)  # cudnn_enabled is required


def test_instance_norm_takes_weight_and_bias_first():
    w, b = _t(3, seed=1, positive=True), _t(3, seed=2)
    out = fg.instance_norm(X1, w, b, None, None, True, 0.1, 1e-5, False)
    _same(out, F.instance_norm(X1, None, None, w, b, True, 0.1, 1e-5))
    normed = (out.numpy() - b.numpy()[:, None]) / w.numpy()[:, None]
    np.testing.assert_allclose(normed.mean(-1), 0, atol=1e-12)


def test_embedding_takes_the_weight_first_and_negative_padding_is_none():
    weight = fg.tensor(np.arange(10.0).reshape(5, 2), requires_grad=True)
    idx = fg.tensor([[4, 0], [0, 2]])
    out = fg.embedding(weight, idx)
    _same(out, F.embedding(idx, weight))
    out.sum().backward()
    np.testing.assert_array_equal(weight.grad.numpy()[:, 0], [2, 0, 1, 0, 1])
    for padding_idx, want in ((0, [0, 0, 1, 0, 1]), (-1, [2, 0, 1, 0, 1]), (7, [2, 0, 1, 0, 1])):
        weight.grad = None
        padded = fg.embedding(weight, idx, padding_idx)
        np.testing.assert_array_equal(padded.numpy(), out.numpy())  # the row is read as any
        padded.sum().backward()
        np.testing.assert_array_equal(weight.grad.numpy()[:, 0], want)
    weight.grad = None
    fg.embedding(weight, idx, -1, True).sum().backward()  # scale_grad_by_freq: 0 is seen twice
    np.testing.assert_array_equal(weight.grad.numpy()[:, 0], [1, 0, 1, 0, 1])


def test_inplace_activations():
    for name, args in (("selu_", ()), ("celu_", (0.5,)), ("threshold_", (0.1, 3.0))):
        x = _t(7)
        want = getattr(F, name[:-1])(_t(7), *args)
        assert getattr(fg, name)(x, *args) is x
        _same(x, want)
    x = _t(7)
    assert fg.rrelu_(x, 0.2, 0.2) is x
    _same(x, F.leaky_relu(_t(7), 0.2))


def test_rrelu_refuses_a_generator():
    with pytest.raises(TypeError, match="global stream"):
        fg.rrelu(X1, generator=fg.Generator())
    fg.manual_seed(1)
    a = fg.rrelu(X1, 0.1, 0.3, True)
    fg.manual_seed(1)
    _same(a, F.rrelu(X1, 0.1, 0.3, True))


# ---------------------------------------------------------------- losses: the int enum
A, P, N = _t(3, 4), _t(3, 4, seed=1), _t(3, 4, seed=2)
T01 = fg.tensor((np.random.default_rng(3).random((3, 4)) > 0.5) * 1.0, dtype=fg.float64)
SIGN = fg.tensor([1.0, -1.0, 1.0], dtype=fg.float64)
LP = fg.tensor(np.random.default_rng(4).standard_normal((6, 2, 4)), dtype=fg.float64)
LP = LP.log_softmax(2)

# name -> (the args before the reduction, F's args before it, the args after it, F's
# keyword of the reduction or its position)
LOSSES = {
    "binary_cross_entropy_with_logits": ((A, T01, None, P.abs()), (A, T01), {}),
    "kl_div": ((A, P.abs()), (A, P.abs()), {}),
    "margin_ranking_loss": ((A[:, 0], P[:, 0], SIGN, 0.3), (A[:, 0], P[:, 0], SIGN, 0.3), {}),
    "hinge_embedding_loss": ((A[:, 0], SIGN, 0.5), (A[:, 0], SIGN, 0.5), {}),
    "cosine_embedding_loss": ((A, P, SIGN, 0.2), (A, P, SIGN, 0.2), {}),
    "triplet_margin_loss": ((A, P, N, 0.7, 3.0, 1e-4, True), (A, P, N, 0.7, 3.0, 1e-4, True), {}),
    "poisson_nll_loss": ((A, P.abs(), True, True, 1e-3), (A, P.abs(), True, True), {}),
    "ctc_loss": (
        (LP, fg.tensor([[1, 2, 2], [3, 1, 0]]), [6, 5], [3, 2], 0),
        (LP, fg.tensor([[1, 2, 2], [3, 1, 0]]), [6, 5], [3, 2], 0),
        {},
    ),
}
F_KEYWORDS = {
    "binary_cross_entropy_with_logits": {"pos_weight": P.abs()},
    "poisson_nll_loss": {"eps": 1e-3},
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("enum, how", [(0, "none"), (1, "mean"), (2, "sum"), (5, "none")])
def test_losses_take_torchs_reduction_enum(name, enum, how):
    args, f_args, _ = LOSSES[name]
    if name == "kl_div" and how == "mean":
        want = F.kl_div(*f_args, reduction="none").mean()  # (not F's warning)
    else:
        want = getattr(F, name)(*f_args, reduction=how, **F_KEYWORDS.get(name, {}))
    _same(getattr(fg, name)(*args, enum), want)


@pytest.mark.parametrize("name", sorted(set(LOSSES) - {"poisson_nll_loss"}))
def test_an_omitted_reduction_reduces_nothing_as_torchs_binding(name):
    args, _, _ = LOSSES[name]
    _same(getattr(fg, name)(*args), getattr(fg, name)(*args, 0))


def test_a_string_reduction_is_torchs_type_error():
    with pytest.raises(TypeError, match=r"kl_div\(\): argument 'reduction' \(position 3\) "):
        fg.kl_div(A, P, "mean")
    with pytest.raises(TypeError, match="must be int, not bool"):
        fg.margin_ranking_loss(A, P, A, 0.0, True)
    with pytest.raises(TypeError):
        fg.poisson_nll_loss(A, P, True, True, 1e-3)  # every argument is required


def test_kl_div_mean_is_torchs_top_level_value_without_a_warning():
    import warnings  # (this test only)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fg.kl_div(fg.tensor([-1.0, -2.0]), fg.tensor([0.5, 0.5]), 1, log_target=False)
    assert abs(got.item() - 0.4034264087677002) < 1e-6  # torch 2.14's
