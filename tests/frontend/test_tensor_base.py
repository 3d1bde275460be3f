"""frontend/tensor_base.py: the op families under tensor.py build their results through the
class of the tensors they hold (`x._plain`), test `isinstance(x, TensorBase)`, and make a
tensor from data only with a tensor at hand to take the class from."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.creation_nodes import host_table, index_arange, tensor_like
from fusegrad.errors import DTypeError
from fusegrad.extend import custom_gradient
from fusegrad.tensor import DataView, LazyGrad
from fusegrad.tensor_base import TensorBase, as_tensor_like, where


def test_every_tensor_class_builds_plain_tensors_with_the_class_itself():
    for cls in (fg.Tensor, fg.nn.Parameter, LazyGrad, DataView):
        assert cls._plain is fg.Tensor  # the class, not a method: no call in between
        assert issubclass(cls, TensorBase)
    assert fg.Tensor._lazy_grad is LazyGrad and fg.Tensor._data_view is DataView


def test_ops_on_a_subclass_give_plain_tensors():
    p = fg.nn.Parameter(fg.tensor([1.0, -2.0, 3.0]))
    results = [
        p * 2,  # tensor.py
        p.exp(),  # mathops.py
        p.cumsum(0),  # shapeops.py
        p[fg.tensor([2, 0])],  # indexing.py
        p.argmax(),  # reduce.py (an index table of p's class)
        p.new_zeros(2),  # creation_nodes.py
        p.new_tensor([4.0]),
        fg.where(p > 0, p, 0.0),
        p.data,
    ]
    assert [type(r) for r in results[:-1]] == [fg.Tensor] * (len(results) - 1)
    assert type(results[-1]) is DataView
    assert results[0].tolist() == [2.0, -4.0, 6.0]
    assert results[3].tolist() == [3.0, 1.0]
    assert results[7].tolist() == [1.0, 0.0, 3.0]


def test_data_becomes_a_tensor_of_the_class_of_another_argument():
    t = fg.tensor([1.0, 2.0])
    out = as_tensor_like([[1, 2], [3, 4]], t)
    assert type(out) is fg.Tensor and out.dtype is fg.int64
    np.testing.assert_array_equal(out.numpy(), [[1, 2], [3, 4]])
    assert as_tensor_like(t, None) is t
    assert tensor_like(fg.Tensor, np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]
    assert index_arange(t, 2, 7, 2).tolist() == [2, 4, 6]
    assert host_table(t, np.array([5, 6])).tolist() == [5, 6]


def test_an_op_with_no_tensor_argument_is_a_type_error_naming_it():
    with pytest.raises(DTypeError, match=r"atan2: expects a tensor among its arguments.*float"):
        fg.atan2(1.0, 2.0)
    with pytest.raises(TypeError, match="tensor"):
        as_tensor_like([1.0], 2.0, "copysign")


def test_where_takes_the_class_from_any_tensor_argument():
    assert where(np.array([True, False]), fg.tensor([1.0, 2.0]), 0.0).tolist() == [1.0, 0.0]
    assert where(fg.tensor([False, True]), 1, 2).tolist() == [2, 1]
    assert fg.where(True, 1.0, 2.0).tolist() == 1.0  # fg.where: tensor.py makes the condition


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x.cumprod(0),  # shapeops' rule
        lambda x: x.prod(0),
        lambda x: x.max(0).values,  # reduce's rule
        lambda x: custom_gradient(x * 1, [x], lambda g, a: [g * 3]),  # extend's rule
    ],
)
def test_gradient_rules_hold_the_class_not_the_tensors(op):
    """A rule lives as long as its node: holding a tensor would keep it alive."""
    x = fg.tensor([1.0, 2.0, 4.0], requires_grad=True)
    mid = x * 1  # a tensor the rule is built from, and nothing else holds
    y = op(mid)
    ref = weakref.ref(mid)
    del mid
    gc.collect()
    assert ref() is None
    y.sum().backward()
    assert x.grad is not None
