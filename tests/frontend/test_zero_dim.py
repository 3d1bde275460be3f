"""Ops on 0-d tensors, as PyTorch treats them: a 0-d tensor takes dim 0 or -1 and is
handled as a row of one element, the result staying 0-d. Values and shapes are
torch 2.13's (checked by hand against it, written here so no torch is needed)."""

from __future__ import annotations

import pytest

import fusegrad as fg
from fusegrad.nn import functional as F


def scalar(v=2.5, **kw):
    return fg.tensor(v, **kw)


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize(
    "op, value",
    [
        (lambda x, d: F.log_softmax(x, dim=d), 0.0),
        (lambda x, d: x.log_softmax(d), 0.0),
        (lambda x, d: F.softmax(x, dim=d), 1.0),
        (lambda x, d: x.softmax(d), 1.0),
        (lambda x, d: F.softmin(x, dim=d), 1.0),
        (lambda x, d: x.logsumexp(d), 2.5),
    ],
)
def test_softmax_family_of_a_0d_tensor(op, value, dim):
    x = scalar(requires_grad=True)
    y = op(x, dim)
    assert y.shape == () and y.item() == pytest.approx(value)
    y.backward()
    # torch: d log_softmax = d softmax = 0 for a single element, d logsumexp = 1
    assert x.grad.item() == pytest.approx(1.0 if value == 2.5 else 0.0)


def test_nonzero_of_a_0d_tensor():
    assert scalar().nonzero().shape == (1, 0)
    assert scalar(0.0).nonzero().shape == (0, 0)
    assert scalar(3).nonzero().dtype is fg.int64
    (i,) = scalar().nonzero(as_tuple=True)
    assert i.tolist() == [0]
    (i,) = scalar(0.0).nonzero(as_tuple=True)
    assert i.tolist() == []
    assert scalar(True).argwhere().shape == (1, 0)


@pytest.mark.parametrize("keepdim", [False, True])
def test_arg_and_value_reductions_along_dim_of_a_0d_tensor(keepdim):
    x = scalar(requires_grad=True)
    for op in ("argmax", "argmin"):
        i = getattr(x, op)(0, keepdim=keepdim)
        assert i.shape == () and i.item() == 0 and i.dtype is fg.int64
    for op in ("max", "min"):
        v, i = getattr(x, op)(-1, keepdim=keepdim)
        assert v.shape == i.shape == () and v.item() == 2.5 and i.item() == 0
    v, i = x.max(0)
    v.backward()
    assert x.grad.item() == 1.0
    v, i = x.kthvalue(1, 0, keepdim=keepdim)
    assert v.shape == i.shape == () and v.item() == 2.5 and i.item() == 0


def test_sort_topk_and_friends_of_a_0d_tensor():
    x = scalar()
    for v, i in (x.topk(1), x.topk(1, 0, largest=False), x.sort(), x.sort(0, descending=True)):
        assert v.shape == i.shape == () and v.item() == 2.5 and i.item() == 0
    assert x.argsort().shape == () and x.argsort().item() == 0
    v, i = x.cummax(0)
    assert v.item() == 2.5 and i.item() == 0


def test_shape_ops_of_a_0d_tensor():
    x = scalar()
    assert x.flip(0).shape == () and x.flip(-1).item() == 2.5 and x.flip([]).item() == 2.5
    assert x.unsqueeze(0).shape == (1,) and x.unsqueeze(-1).shape == (1,)
    assert x.squeeze(0).shape == () and x.flatten().shape == (1,)
    assert x.cumsum(0).item() == 2.5 and x.cumprod(0).shape == ()
    assert x.roll(1).item() == 2.5
    with pytest.raises(IndexError, match="no dimensions"):
        x.roll(1, 0)  # as torch


def test_statistics_of_a_0d_tensor():
    x = scalar()
    assert x.mean(0).item() == 2.5 and x.sum(0).shape == () and x.prod(0).item() == 2.5
    assert x.norm().item() == 2.5 and x.norm(dim=0).item() == 2.5
    assert x.std(0, correction=0).item() == 0.0


def test_gather_scatter_and_index_select_of_a_0d_tensor():
    x = scalar()
    zero = fg.tensor(0)
    assert x.gather(0, zero).shape == () and x.gather(0, zero).item() == 2.5
    assert x.gather(0, fg.tensor([0, 0])).tolist() == [2.5, 2.5]
    assert x.index_select(0, zero).shape == () and x.index_select(0, zero).item() == 2.5
    with pytest.raises(IndexError, match="only 1 value"):
        x.index_select(0, fg.tensor([0, 0]))
    with pytest.raises(IndexError, match="out of"):
        x.index_select(0, fg.tensor([1]))
    assert x.scatter(0, fg.tensor([0]), 5.0).shape == ()
    assert x.scatter(0, zero, 5.0).item() == 5.0
    assert x.scatter(0, zero, fg.tensor(7.0)).item() == 7.0
    assert x.scatter_add(0, zero, fg.tensor(7.0)).item() == 9.5
    assert x.scatter_reduce(0, zero, fg.tensor(7.0), "amax").item() == 7.0
    assert x.index_add(0, fg.tensor([0]), fg.tensor(1.0)).item() == 3.5
    assert x.masked_fill(fg.tensor(True), 1.0).item() == 1.0
    assert x.take(zero).item() == 2.5
    assert x.index_copy(0, fg.tensor([0]), fg.tensor(4.0)).item() == 4.0
    assert x.index_fill(0, fg.tensor([0]), -1.0).item() == -1.0
