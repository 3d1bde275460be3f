"""The dropout family against torch 2.14's semantics: which elements share a draw
(elements, channels, (N, C) entries for odd ranks), the values a drop leaves (the input
times the noise: a dropped NaN stays NaN, a dropped negative is -0.0), alpha dropout's
two values, the gradient (the noise), torch's warnings and errors, and the modules.
Random streams differ from torch's, so draws are checked by their structure and rate."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn

NAN, INF = math.nan, math.inf
ALPHA = 1.7580993408473766


def _alpha_values(p: float, x: float = 1.0) -> tuple[float, float]:
    a = 1.0 / math.sqrt((ALPHA * ALPHA * p + 1.0) * (1.0 - p))
    return a * x + ALPHA * a * p, ALPHA * a * (p - 1.0)


def test_alpha_dropout_keeps_or_sets_torchs_two_values():
    fg.manual_seed(0)
    out = F.alpha_dropout(fg.ones(100_000), 0.3, True).numpy()
    kept, dropped = _alpha_values(0.3)
    # torch 2.14 at x = 1, p = 0.3: 1.315044641494751 and -1.059548258781433
    assert kept == pytest.approx(1.315044641494751, rel=1e-7)
    assert dropped == pytest.approx(-1.059548258781433, rel=1e-7)
    values = np.unique(out)
    np.testing.assert_allclose(values, [dropped, kept], rtol=1e-6)
    assert abs((out == values[0]).mean() - 0.3) < 0.01
    # on unit normal values the mean and variance stay 0 and 1
    fg.manual_seed(1)
    z = fg.randn(200_000)
    y = F.alpha_dropout(z, 0.2, True).numpy()
    assert abs(y.mean()) < 0.01 and abs(y.var() - 1.0) < 0.02


def test_alpha_dropout_is_off_by_default_and_at_p0():
    x = fg.tensor([1.0, -2.0])
    assert F.alpha_dropout(x) is x  # training=False by default, as torch's function
    assert F.alpha_dropout(x, 0.0, True) is x
    assert F.feature_alpha_dropout(x, 0.5) is x


@pytest.mark.parametrize(
    "fn", [F.dropout, F.alpha_dropout, F.dropout1d, F.dropout2d, F.feature_alpha_dropout]
)
def test_p1_is_the_input_times_zero(fn):
    """torch: 0.0, -0.0, nan, nan for 1.5, -2, nan, inf (the input times zeros)."""
    x = fg.tensor([[[1.5, -2.0, NAN, INF]]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fn(x, 1.0, True).numpy().ravel()
    assert y[0] == 0 and math.copysign(1, y[0]) == 1
    assert y[1] == 0 and math.copysign(1, y[1]) == -1
    assert np.isnan(y[2]) and np.isnan(y[3])


def test_a_dropped_nan_stays_nan_and_a_dropped_negative_is_minus_zero():
    fg.manual_seed(0)
    x = fg.tensor(np.where(np.arange(4000) % 2 == 0, NAN, -3.0).astype(np.float32))
    y = F.dropout(x, 0.5, True).numpy()
    assert np.isnan(y[::2]).all()
    odd = y[1::2]
    assert set(np.unique(odd)) <= {-6.0, 0.0}
    assert (np.signbit(odd[odd == 0])).all() and (odd == 0).any()


def _channels_whole(y: np.ndarray, axes: int) -> bool:
    """Whether each entry over the first `axes` axes is all dropped or all kept."""
    flat = y.reshape(*y.shape[:axes], -1)
    return bool(((flat == 0).all(-1) | (flat != 0).all(-1)).all())


@pytest.mark.parametrize(
    "fn, shape, axes",
    [
        (F.dropout1d, (4, 6, 5), 2),  # (N, C, L): per (N, C)
        (F.dropout1d, (6, 5), 1),  # (C, L): per channel
        (F.dropout2d, (4, 6, 3, 3), 2),
        (F.dropout2d, (4, 6, 5), 2),  # a 3-d input is (N, C, L), with torch's warning
        (F.dropout3d, (2, 6, 2, 2, 2), 2),
        (F.dropout3d, (6, 2, 2, 2), 1),  # (C, D, H, W)
        (F.dropout3d, (6, 2, 2), 1),  # another rank: without a batch axis, as torch
    ],
)
def test_feature_dropouts_drop_whole_channels(fn, shape, axes):
    fg.manual_seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fn(fg.ones(*shape), 0.5, True).numpy()
    assert _channels_whole(y, axes)
    assert set(np.unique(y)) == {0.0, 2.0}


def test_dropout2d_of_a_2d_input_drops_elements_with_torchs_warning():
    """torch 2.14 warns and draws per (N, C) entry: each element of an (N, C) input."""
    fg.manual_seed(0)
    with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
        y = F.dropout2d(fg.ones(64, 32), 0.5, True).numpy()
    assert not _channels_whole(y, 1)  # rows are not dropped whole
    assert abs((y == 0).mean() - 0.5) < 0.05
    with pytest.warns(UserWarning, match="interpreted as shape \\(N, C, L\\)"):
        F.dropout2d(fg.ones(2, 3, 4), 0.5, True)


def test_torchs_errors():
    with pytest.raises(RuntimeError, match="Expected 2D or 3D input, but received a 1D input"):
        F.dropout1d(fg.ones(4), 0.5, True)
    with pytest.raises(RuntimeError, match="but received a 4D input"):
        F.dropout1d(fg.ones(2, 3, 4, 5), 0.5, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="Feature dropout requires at least 2 dimensions"):
            F.dropout2d(fg.ones(4), 0.5, True)
        x = fg.ones(4)
        assert F.dropout2d(x, 0.5, False) is x  # not training: torch returns it, no error
    with pytest.raises(RuntimeError, match="Feature dropout requires at least 2 dimensions"):
        F.feature_alpha_dropout(fg.ones(4), 0.5, True)
    for fn in (F.dropout1d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout):
        with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
            fn(fg.ones(2, 3, 4, 5, 6), 1.5, True)
    for cls in (nn.Dropout1d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout):
        with pytest.raises(ValueError, match="between 0 and 1, but got -0.1"):
            cls(-0.1)


@pytest.mark.parametrize("alpha", [False, True])
def test_the_gradient_is_the_noise(alpha):
    fg.manual_seed(4)
    x = fg.tensor(np.linspace(-2, 2, 4000).astype(np.float32), requires_grad=True)
    fn = F.feature_alpha_dropout if alpha else F.dropout1d
    y = fn(x.reshape(4, 10, 100), 0.25, True).reshape(40, 100)  # (N, C, L): a draw per (N, C)
    y.sum().backward()
    g, out, xv = x.grad.numpy().reshape(40, 100), y.numpy(), x.numpy().reshape(40, 100)
    kept = (g != 0).all(-1)
    assert ((g == 0).all(-1) | kept).all() and 0 < kept.sum() < 40
    if alpha:
        a = 1.0 / math.sqrt((ALPHA * ALPHA * 0.25 + 1.0) * 0.75)
        np.testing.assert_allclose(g[kept], a, rtol=1e-6)
        np.testing.assert_allclose(out[kept], a * xv[kept] + ALPHA * a * 0.25, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[~kept], ALPHA * a * -0.75, rtol=1e-6)
    else:
        np.testing.assert_allclose(g[kept], 1 / 0.75, rtol=1e-6)


def test_modules_follow_train_and_eval():
    x = fg.ones(2, 4, 3)
    for m in (
        nn.Dropout1d(0.5),
        nn.Dropout2d(0.5),
        nn.Dropout3d(0.5),
        nn.AlphaDropout(0.5),
        nn.FeatureAlphaDropout(0.5),
    ):
        assert repr(m) == f"{type(m).__name__}(p=0.5, inplace=False)"
        with warnings.catch_warnings():  # (dropout2d's and dropout3d's, of this rank)
            warnings.simplefilter("ignore")
            m.eval()
            assert m(x) is x
            m.train()
            y = m(x).numpy()
        assert y.shape == (2, 4, 3) and not np.array_equal(y, np.ones((2, 4, 3)))


def test_inplace_writes_into_the_input():
    fg.manual_seed(0)
    x = fg.ones(3, 8, 2)
    y = F.dropout1d(x, 0.5, True, inplace=True)
    assert y is x and set(np.unique(x.numpy())) == {0.0, 2.0}


def test_empty_inputs_pass_through():
    x = fg.ones(0, 3, 4)
    assert F.dropout1d(x, 0.5, True).shape == (0, 3, 4)
    assert F.alpha_dropout(fg.ones(0), 0.5, True).shape == (0,)
