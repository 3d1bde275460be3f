"""Ops that return a new tensor in torch return a new tensor here too, also where their
result equals their input (an integer tensor's floor, a scan along one element, a pool
to the same size, x ** 1, a roll by a whole turn): a write into the result leaves the
input as it was, as in PyTorch. Views stay views (`test_views_alias_their_base`)."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F


def _ints():
    return fg.arange(6).reshape(2, 3)


def _floats():
    return fg.arange(6.0).reshape(2, 3)


def _column():
    return fg.arange(6.0).reshape(6, 1)


def _image():
    return fg.arange(6.0).reshape(1, 1, 2, 3)


NEW = {
    "floor of ints": (_ints, lambda x: x.floor()),
    "ceil of ints": (_ints, lambda x: x.ceil()),
    "round of ints": (_ints, lambda x: x.round()),
    "trunc of ints": (_ints, lambda x: x.trunc()),
    "fix of ints": (_ints, lambda x: fg.fix(x)),
    "nan_to_num of ints": (_ints, lambda x: x.nan_to_num()),
    "cumsum along one": (_column, lambda x: x.cumsum(1)),
    "cumprod along one": (_column, lambda x: x.cumprod(1)),
    "logcumsumexp along one": (_column, lambda x: x.logcumsumexp(1)),
    "cumsum of 0-d": (lambda: fg.tensor(3.0), lambda x: x.cumsum(0)),
    "adaptive_avg_pool2d to its size": (_image, lambda x: F.adaptive_avg_pool2d(x, (2, 3))),
    "adaptive_avg_pool1d to its size": (_column, lambda x: F.adaptive_avg_pool1d(x.T, 6)),
    "x ** 1": (_floats, lambda x: x**1),
    "ints ** 1": (_ints, lambda x: x**1),
    "bools ** 1": (lambda: _ints() > 2, lambda x: x**1),
    "roll by a whole turn": (_floats, lambda x: x.roll(3, 1)),
    "clone": (_floats, lambda x: x.clone()),
    "repeat once": (_floats, lambda x: x.repeat(1, 1)),
    "cat of one": (_floats, lambda x: fg.cat([x])),
    "flip of no dims": (_floats, lambda x: x.flip([])),
    "pad by nothing": (_floats, lambda x: F.pad(x, (0, 0))),
    "interpolate by 1": (_image, lambda x: F.interpolate(x, scale_factor=1.0)),
    "max_pool2d of 1": (_image, lambda x: F.max_pool2d(x, 1)),
    "sort along one": (_column, lambda x: x.sort(1).values),
    "where with both the input": (_floats, lambda x: fg.where(x > 100, x, x)),
    "diag of a matrix": (_floats, lambda x: x.diag()),
    "sign of bools": (lambda: _ints() > 2, lambda x: x.sign()),
    "sgn of bools": (lambda: _ints() > 2, lambda x: x.sgn()),
}


@pytest.mark.parametrize("name", list(NEW))
def test_a_write_into_a_new_result_leaves_the_input(name):
    make, op = NEW[name]
    x = make()
    before = x.numpy().copy()
    y = op(x)
    y[(0,) * y.ndim] = False if y.dtype == fg.bool else 100
    np.testing.assert_array_equal(x.numpy(), before)
    assert y.numpy().ravel()[0] == (False if y.dtype == fg.bool else 100)


VIEWS = {
    "view": lambda x: x.view(6),
    "reshape": lambda x: x.reshape(3, 2),
    "T": lambda x: x.T,
    "narrow": lambda x: x.narrow(1, 0, 2),
    "slice": lambda x: x[:, ::2],
    "detach": lambda x: x.detach(),
    "squeeze": lambda x: x.unsqueeze(0).squeeze(0),
    "contiguous": lambda x: x.contiguous(),
    "flatten": lambda x: x.flatten(),
    "unbind": lambda x: x.unbind(0)[0],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_alias_their_base(name):
    x = _floats()
    y = VIEWS[name](x)
    y[(0,) * y.ndim] = 100.0
    assert x.numpy()[0, 0] == 100.0
