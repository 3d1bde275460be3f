"""Wrong argument types to the indexing ops raise a TypeError naming the argument (as
PyTorch's argument parser does) at the user's line, never an internal AttributeError or
numpy's complaint about converting a string."""

from __future__ import annotations

import os
import re
import sys

import pytest

import fusegrad as fg

HERE = os.path.basename(__file__)


def test_scatter_add_with_a_number_as_src_names_the_argument_as_torch():
    x, i = fg.zeros(3), fg.tensor([0, 1])
    # torch 2.13: "scatter_add(): argument 'src' (position 3) must be Tensor, not int"
    with pytest.raises(
        TypeError, match=r"scatter_add\(\): argument 'src' \(position 3\) must be Tensor, not int"
    ):
        x.scatter_add(0, i, 1)
    try:
        x.scatter_add(0, i, 1.5)
    except TypeError as e:
        assert "not float" in str(e)
        assert int(re.search(rf"{HERE}:(\d+)", str(e)).group(1)) == sys._getframe().f_lineno - 3
    with pytest.raises(
        TypeError,
        match=r"scatter_reduce\(\): argument 'src' \(position 3\) must be Tensor, not float",
    ):
        x.scatter_reduce(0, i, 2.0, "sum")
    with pytest.raises(TypeError, match=r"scatter_add\(\): argument 'src'"):
        fg.scatter_add(x, 0, i, 1)


@pytest.mark.parametrize(
    "call, words",
    [
        (
            lambda x, i: x.index_add(0, i, 1.0),
            r"index_add\(\): argument 'source' \(position 3\) must be Tensor, not float",
        ),
        (
            lambda x, i: x.index_add(0, i, fg.ones(2), alpha="a"),
            r"index_add\(\): argument 'alpha' must be Number, not str",
        ),
        (
            lambda x, i: x.scatter(0, i, "a"),
            r"scatter\(\): argument 'value' must be Number .*not str",
        ),
        (
            lambda x, i: x.scatter(0, i, None),
            r"scatter\(\): argument 'value' must be Number .*not NoneType",
        ),
        (
            lambda x, i: x.masked_fill(x > 0, "a"),
            r"masked_fill\(\): argument 'value' must be Number .*not str",
        ),
        (
            lambda x, i: x.masked_fill(x > 0, [1.0]),
            r"masked_fill\(\): argument 'value' must be Number .*not list",
        ),
        (
            lambda x, i: x.index_fill(0, i, "a"),
            r"index_fill\(\): argument 'value' must be Number .*not str",
        ),
        (
            lambda x, i: x.index_put_(i, fg.ones(2)),
            r"argument 'indices' \(position 1\) must be tuple of Tensors, not Tensor",
        ),
        (
            lambda x, i: x.index_put_((i,), fg.ones(2), accumulate="x"),
            r"argument 'accumulate' must be bool, not str",
        ),
    ],
)
def test_wrong_argument_types_are_type_errors_naming_the_argument(call, words):
    with pytest.raises(TypeError, match=words + rf".*{HERE}"):
        call(fg.zeros(3), fg.tensor([0, 1]))


def test_the_right_types_still_work():
    x, i = fg.zeros(3), fg.tensor([0, 2])
    assert x.scatter(0, i, 1.5).tolist() == [1.5, 0.0, 1.5]  # a number value, as torch
    assert x.index_fill(0, i, fg.tensor(2.0)).tolist() == [2.0, 0.0, 2.0]
    with pytest.raises(ValueError, match=r"index \(2,\) and src \(\) must have the same number"):
        x.scatter(0, i, fg.tensor(2.0))  # a RuntimeError in torch: src must match index
    assert x.masked_fill(fg.tensor([True, False, False]), fg.tensor(3.0)).tolist() == [3.0, 0, 0]
    assert x.index_add(0, i, fg.ones(2), alpha=2).tolist() == [2.0, 0.0, 2.0]
    assert x.index_put((i,), fg.ones(2), accumulate=True).tolist() == [1.0, 0.0, 1.0]
