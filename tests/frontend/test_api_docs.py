"""The examples in the docstrings of the tensor API modules run and print what they say."""

from __future__ import annotations

import doctest

import pytest

import fusegrad
from fusegrad import extend, indexing, mathops, searching, shapeops, testing


@pytest.mark.cpu_device  # the examples print CPU tensors
@pytest.mark.parametrize(
    "module", [extend, indexing, mathops, searching, shapeops, testing, fusegrad]
)
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
