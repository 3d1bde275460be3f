"""NaN, inf and empty inputs of reductions, scans, sorting and ranges, as PyTorch treats them.

Every expected value below is PyTorch 2.13's answer, checked by hand and written out
literally (torch is not installed in CI). When torch imports, each case is also checked
against it live, so a table entry that drifts from torch fails too.
"""

from __future__ import annotations

import math

import pytest

import fusegrad as fg
from fusegrad.errors import ArgumentError, DTypeError

try:
    import torch
except ImportError:  # the literal tables are the oracle
    torch = None

NAN, INF = math.nan, math.inf
X = [1.0, NAN, 3.0, 5.0, 0.0]
Y = [2.0, -INF, NAN, INF, 1.0, NAN, -1.0]
ROWS = [[1.0, NAN, 3.0], [NAN, NAN, 2.0]]


def same(got, want) -> bool:
    """Equal, NaN equal to NaN, floats to a relative 1e-6, nested lists and tuples alike."""
    if isinstance(want, (list, tuple)):
        return (
            isinstance(got, (list, tuple))
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want))
        )
    if isinstance(want, float):
        if math.isnan(want):
            return isinstance(got, float) and math.isnan(got)
        return got == want or abs(got - want) <= 1e-6 * max(1.0, abs(want))
    return got == want


def plain(v):
    """Tensors, (values, indices) pairs and numbers as nested Python lists and numbers."""
    if isinstance(v, tuple):
        return tuple(plain(x) for x in v)
    return v.tolist() if hasattr(v, "tolist") else v


# (name, function of (module, input tensor), input, torch's answer)
VALUES = [
    ("cummax", lambda m, x: x.cummax(0), X, ([1.0, NAN, NAN, NAN, NAN], [0, 1, 1, 1, 1])),
    ("cummin", lambda m, x: x.cummin(0), X, ([1.0, NAN, NAN, NAN, NAN], [0, 1, 1, 1, 1])),
    (
        "cummax, two NaNs",
        lambda m, x: x.cummax(0),
        Y,
        ([2.0, 2.0, NAN, NAN, NAN, NAN, NAN], [0, 0, 2, 2, 2, 5, 5]),
    ),
    (
        "cummin, two NaNs",
        lambda m, x: x.cummin(0),
        Y,
        ([2.0, -INF, NAN, NAN, NAN, NAN, NAN], [0, 1, 2, 2, 2, 5, 5]),
    ),
    ("cummax, all NaN", lambda m, x: x.cummax(0), [NAN, NAN], ([NAN, NAN], [0, 1])),
    ("cummin, all NaN", lambda m, x: x.cummin(0), [NAN, NAN], ([NAN, NAN], [0, 1])),
    (
        "cummax, ties",
        lambda m, x: x.cummax(0),
        [1.0, 3.0, 3.0, 2.0],
        ([1.0, 3.0, 3.0, 3.0], [0, 1, 2, 2]),
    ),
    ("sort", lambda m, x: x.sort(), X, ([0.0, 1.0, 3.0, 5.0, NAN], [4, 0, 2, 3, 1])),
    (
        "sort descending",
        lambda m, x: x.sort(descending=True),
        X,
        ([NAN, 5.0, 3.0, 1.0, 0.0], [1, 3, 2, 0, 4]),
    ),
    (
        "sort descending, two NaNs",
        lambda m, x: x.sort(descending=True),
        Y,
        ([NAN, NAN, INF, 2.0, 1.0, -1.0, -INF], [2, 5, 3, 0, 4, 6, 1]),
    ),
    (
        "sort, two NaNs",
        lambda m, x: x.sort(),
        Y,
        ([-INF, -1.0, 1.0, 2.0, INF, NAN, NAN], [1, 6, 4, 0, 3, 2, 5]),
    ),
    ("argsort descending", lambda m, x: x.argsort(descending=True), X, [1, 3, 2, 0, 4]),
    ("argsort", lambda m, x: x.argsort(), X, [4, 0, 2, 3, 1]),
    ("msort", lambda m, x: x.msort(), X, [0.0, 1.0, 3.0, 5.0, NAN]),
    ("topk", lambda m, x: x.topk(2), X, ([NAN, 5.0], [1, 3])),
    ("topk smallest", lambda m, x: x.topk(2, largest=False), X, ([0.0, 1.0], [4, 0])),
    (
        "topk rows",
        lambda m, x: x.topk(2, dim=1),
        ROWS,
        ([[NAN, 3.0], [NAN, NAN]], [[1, 2], [0, 1]]),
    ),
    (
        "sort rows descending",
        lambda m, x: x.sort(dim=1, descending=True),
        ROWS,
        ([[NAN, 3.0, 1.0], [NAN, NAN, 2.0]], [[1, 2, 0], [0, 1, 2]]),
    ),
    ("kthvalue 4", lambda m, x: x.kthvalue(4), X, (5.0, 3)),
    ("kthvalue 5", lambda m, x: x.kthvalue(5), X, (NAN, 1)),
    ("median", lambda m, x: x.median(), X, NAN),
    ("median(0)", lambda m, x: x.median(0), X, (NAN, 1)),
    ("median rows", lambda m, x: x.median(1), ROWS, ([NAN, NAN], [1, 0])),
    ("max(dim) rows", lambda m, x: x.max(1), ROWS, ([NAN, NAN], [1, 0])),
    ("min(dim) rows", lambda m, x: x.min(1), ROWS, ([NAN, NAN], [1, 0])),
    ("argmax", lambda m, x: x.argmax(), Y, 2),
    ("argmin", lambda m, x: x.argmin(), Y, 2),
    ("amax", lambda m, x: x.amax(), [INF, -INF], INF),
    ("amin", lambda m, x: x.amin(), [INF, -INF], -INF),
    ("sum", lambda m, x: x.sum(), [INF, -INF], NAN),
    ("prod", lambda m, x: x.prod(), [INF, 0.0], NAN),
    ("mean", lambda m, x: x.mean(), [INF, 1.0], INF),
    ("cumsum", lambda m, x: x.cumsum(0), [1.0, INF, -INF, 2.0], [1.0, INF, NAN, NAN]),
    ("cumprod", lambda m, x: x.cumprod(0), [2.0, INF, 0.0, 2.0], [2.0, INF, NAN, NAN]),
    ("norm", lambda m, x: x.norm(), [INF, NAN], NAN),
    ("norm inf", lambda m, x: x.norm(INF), [1.0, -INF], INF),
    ("logsumexp [inf, 1]", lambda m, x: x.logsumexp(0), [INF, 1.0], INF),
    ("logsumexp [-inf, -inf]", lambda m, x: x.logsumexp(0), [-INF, -INF], -INF),
    ("logsumexp [inf, -inf]", lambda m, x: x.logsumexp(0), [INF, -INF], INF),
    ("logsumexp [inf, inf]", lambda m, x: x.logsumexp(0), [INF, INF], INF),
    ("logsumexp [-inf, 1]", lambda m, x: x.logsumexp(0), [-INF, 1.0], 1.0),
    ("logsumexp [nan, 1]", lambda m, x: x.logsumexp(0), [NAN, 1.0], NAN),
    (
        "logsumexp rows",
        lambda m, x: x.logsumexp(1),
        [[-INF, -INF], [1.0, INF], [1.0, 2.0]],
        [-INF, INF, 2.3132617],
    ),
    ("logsumexp of ints", lambda m, x: x.logsumexp(0), [1, 2], 2.3132617),
    ("logsumexp empty", lambda m, x: x.logsumexp(0), [], -INF),
    ("logsumexp empty rows", lambda m, x: x.reshape(2, 0).logsumexp(1), [], [-INF, -INF]),
    ("softmax [-inf, -inf]", lambda m, x: x.softmax(0), [-INF, -INF], [NAN, NAN]),
    ("log_softmax [-inf, -inf]", lambda m, x: x.log_softmax(0), [-INF, -INF], [NAN, NAN]),
    ("softmax [inf, 1]", lambda m, x: x.softmax(0), [INF, 1.0], [NAN, NAN]),
    ("var of one", lambda m, x: x.var(), [3.0], NAN),
    ("std of one", lambda m, x: x.std(), [3.0], NAN),
    ("sum empty", lambda m, x: x.sum(), [], 0.0),
    ("prod empty", lambda m, x: x.prod(), [], 1.0),
    ("mean empty", lambda m, x: x.mean(), [], NAN),
    ("median empty", lambda m, x: x.median(), [], NAN),
    ("clamp", lambda m, x: x.clamp(0.5, 2.0), X, [1.0, NAN, 2.0, 2.0, 0.5]),
    ("clamp min=nan", lambda m, x: x.clamp(min=NAN), [1.0, 2.0], [NAN, NAN]),
    ("clamp max=nan", lambda m, x: x.clamp(0.5, NAN), [1.0, -INF], [NAN, NAN]),
    ("clamp nan, 2", lambda m, x: x.clamp(NAN, 2.0), [1.0, INF], [NAN, NAN]),
    (
        "clamp by a tensor with a NaN",
        lambda m, x: x.clamp(min=m.tensor([0.0, 0.0, NAN, 0.0, 0.0])),
        X,
        [1.0, NAN, NAN, 5.0, 0.0],
    ),
    (
        "clamp max by a tensor with a NaN",
        lambda m, x: x.clamp(max=m.tensor([9.0, 9.0, NAN, 9.0, 9.0])),
        X,
        [1.0, NAN, NAN, 5.0, 0.0],
    ),
    ("maximum", lambda m, x: m.maximum(x, x.flip(0)), X, [1.0, NAN, 3.0, NAN, 1.0]),
    ("minimum", lambda m, x: m.minimum(x, x.flip(0)), X, [0.0, NAN, 3.0, NAN, 0.0]),
]


@pytest.mark.parametrize("name,fn,data,want", VALUES, ids=[v[0] for v in VALUES])
def test_values_as_torch(name, fn, data, want):
    got = plain(fn(fg, fg.tensor(data)))
    assert same(got, want), f"{name}: got {got}, torch gives {want}"
    if torch is not None:
        live = plain(fn(torch, torch.tensor(data)))
        assert same(live, want), f"{name}: the table says {want}, torch {torch.__version__} {live}"


# (values, torch's gradient of logsumexp there)
LOGSUMEXP_GRADS = [
    ([INF, 1.0], [NAN, 0.0]),
    ([-INF, -INF], [NAN, NAN]),
    ([INF, -INF], [NAN, 0.0]),
    ([-INF, 1.0], [0.0, 1.0]),
    ([1.0, 2.0], [0.26894143, 0.7310586]),
]


@pytest.mark.parametrize("data,want", LOGSUMEXP_GRADS)
def test_logsumexp_gradient_as_torch(data, want):
    x = fg.tensor(data, requires_grad=True)
    x.logsumexp(0).backward()
    assert same(x.grad.tolist(), want)


def test_cummax_and_sort_gradients_follow_the_nan():
    x = fg.tensor(X, requires_grad=True)
    x.cummax(0).values.sum().backward()
    assert x.grad.tolist() == [1.0, 4.0, 0.0, 0.0, 0.0]  # torch's
    x = fg.tensor(X, requires_grad=True)
    x.sort(descending=True).values[0].backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]


# (arguments, torch's answer: a list of values, or the error fusegrad raises where torch does)
RANGES = [
    ((2**63,), ArgumentError),
    ((0, 5, 2**63), ArgumentError),
    ((0, 5, 10**30), ArgumentError),
    ((2**63 - 2, 2**63 + 1), ArgumentError),
    ((0, 5, -1), ArgumentError),
    ((5, 0, 1), ArgumentError),
    ((0.0, -1.0, 0.5), ArgumentError),
    ((0, math.nan), ArgumentError),
    ((0, math.inf), ArgumentError),
    ((-math.inf, 0), ArgumentError),
    ((0, 5, math.nan), ArgumentError),
    ((0, 5, -math.inf), ArgumentError),
    ((0, 5, math.inf), []),
    ((0, -5, -math.inf), []),
    ((5, 0, -2), [5, 3, 1]),
    ((3, 3), []),
    ((-(2**63), -(2**63) + 3), [-(2**63), -(2**63) + 1, -(2**63) + 2]),
    ((0, 2**62, 2**60), [0, 2**60, 2**61, 3 * 2**60]),
]


@pytest.mark.parametrize("args,want", RANGES)
def test_arange_as_torch(args, want):
    if isinstance(want, list):
        assert fg.arange(*args).tolist() == want
        if torch is not None:
            assert torch.arange(*args).tolist() == want
    else:
        with pytest.raises(want):
            fg.arange(*args)
        if torch is not None:
            with pytest.raises((RuntimeError, OverflowError, ValueError)):
                torch.arange(*args)


def test_arange_and_linspace_refuse_what_torch_refuses():
    with pytest.raises(DTypeError):
        fg.arange(3, dtype=fg.bool)
    with pytest.raises(ArgumentError, match="non-negative"):
        fg.linspace(0, 1, -1)
    with pytest.raises(DTypeError):
        fg.linspace(0, 1, 2.5)
    assert fg.linspace(0, 1, 0).tolist() == []
    assert fg.linspace(0, 10, 4, dtype=fg.int64).tolist() == [0, 3, 6, 10]
