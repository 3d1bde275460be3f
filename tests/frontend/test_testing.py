"""fusegrad.testing.assert_close (torch.testing's): what it accepts and how it reports a
mismatch, as torch's; the cross-check against torch's own messages needs torch (it skips
without it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.testing import assert_allclose, assert_close

T = fg.tensor


def _message(fn, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_close_values_pass_by_the_dtypes_tolerances():
    assert_close(T([1.0, 2.0]), T([1.0, 2.0 + 2e-6]))  # (float32: 1e-5 + 1.3e-6 |e|)
    assert_close(T([1.0], dtype=fg.float64), T([1.0 + 1e-7], dtype=fg.float64))
    assert_close(T([1, 2]), T([1, 2]))
    assert_close([T(1.0), {"a": (T([2.0]),)}], [T(1.0), {"a": [T([2.0])]}])
    assert_close(1.0, 1.0 + 1e-8)
    assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    assert_close(T([math.nan]), T([math.nan]), equal_nan=True)
    assert_close(T([math.inf, -math.inf]), T([math.inf, -math.inf]))
    assert_close(T([1.0]), T([1.5]), rtol=0.0, atol=0.5)  # (the bound itself passes)


def test_a_mismatch_reports_count_and_greatest_differences_as_torch():
    text = _message(assert_close, T([1.0, 2.0, 3.0]), T([1.0, 2.5, 3.0]))
    assert text == (
        "Tensor-likes are not close!\n\nMismatched elements: 1 / 3 (33.3%)\n"
        "Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)\n"
        "Greatest relative difference: 0.20000000298023224 at index (1,) (up to 1.3e-06 "
        "allowed)"
    )
    text = _message(assert_close, T([1, 2]), T([1, 3]))
    assert text.startswith("Tensor-likes are not equal!") and "difference: 1 at index (1,)" in text
    text = _message(assert_close, T([[1.0, 2.0], [3.0, 4.0]]), T([[1.0, 2.0], [3.0, 5.0]]))
    assert "at index (1, 1)" in text
    text = _message(assert_close, 1, 2)
    assert text == (
        "Scalars are not equal!\n\nExpected 2 but got 1.\nAbsolute difference: 1\n"
        "Relative difference: 0.5"
    )
    text = _message(assert_close, {"a": T(1.0)}, {"a": T(1.5)})
    assert text.endswith("The failure occurred for item ['a']") and "Expected 1.5" in text
    assert "Greatest absolute difference: nan" in _message(assert_close, T([math.nan]), T([1.0]))


def test_shape_dtype_and_types_are_checked_naming_the_attribute():
    assert "'shape' do not match: (2,) != (3,)" in _message(
        assert_close, T([1.0, 2]), T([1.0, 2, 3])
    )
    text = _message(assert_close, T([1.0]), T([1.0], dtype=fg.float64))
    assert "'dtype' do not match: fusegrad.float32 != fusegrad.float64" in text
    assert_close(T([1.0]), T([1.0], dtype=fg.float64), check_dtype=False)
    assert "(d)types do not match" in _message(assert_close, 1, 1.0)
    assert "length of the sequences mismatch: 2 != 3" in _message(assert_close, [1, 2], [1, 2, 3])
    with pytest.raises(TypeError, match="No comparison pair"):
        assert_close(T([1.0]), [1.0])
    with pytest.raises(TypeError, match="No comparison pair"):
        assert_close(T([1.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol'"):
        assert_close(T([1.0]), T([1.0]), rtol=1e-3)


def test_msg_replaces_or_rewrites_the_report():
    assert _message(assert_close, T([1.0]), T([2.0]), msg="custom") == "custom"
    text = _message(assert_close, T([1.0]), T([2.0]), msg=lambda m: "X: " + m.split("\n")[0])
    assert text == "X: Tensor-likes are not close!"


def test_assert_allclose_matches_nan_and_ignores_dtypes():
    assert_allclose(T([math.nan, 1.0]), T([math.nan, 1.0], dtype=fg.float64))
    with pytest.raises(AssertionError):
        assert_allclose(T([1.0]), T([1.1]))


@pytest.mark.parametrize(
    "actual, expected",
    [
        ([1.0, 2.0, 3.0], [1.0, 2.5, 3.0]),
        ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 5.0]]),
        ([0.0], [1e-6 * 20]),
        ([1.0], [0.0]),
    ],
)
def test_the_report_is_torchs_word_for_word(actual, expected):
    """(cross-check: needs torch)"""
    torch = pytest.importorskip("torch")
    want = _message(torch.testing.assert_close, torch.tensor(actual), torch.tensor(expected))
    assert _message(assert_close, T(actual), T(expected)) == want


def test_empty_zero_d_and_signed_zero_inputs_as_torch():
    assert_close(T([]), T([]))
    assert_close(fg.zeros(0, 3), fg.zeros(0, 3))
    assert_close(T(-0.0), T(0.0))  # (equal values: the sign of zero is not compared)
    assert_close(np.array(1.0), np.array(1.0))
    text = _message(assert_close, T(1.0), T([1.0]))
    assert text == "The values for attribute 'shape' do not match: () != (1,)."
    assert _message(assert_close, np.array(1.0), np.array(2.0)).startswith("Scalars are not close!")
