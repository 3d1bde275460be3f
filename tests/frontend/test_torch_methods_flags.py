"""torch's flags of kinds of tensor fusegrad does not have, data_ptr, is_set_to and the
adjoints H / mH / adjoint() (frontend/torch_methods.py), against torch 2.14.1's answers."""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import pytest

import fusegrad as fg


def test_flags_of_layouts_fusegrad_does_not_have_are_false():
    t = fg.arange(6.0)
    flags = ("is_sparse", "is_sparse_csr", "is_quantized", "is_meta", "is_nested", "is_mkldnn")
    assert [getattr(t, f) for f in flags] == [False] * 6
    assert t.name is None and t.output_nr == 0
    assert t.to_dense() is t
    assert t.to_dense(fg.float64).dtype is fg.float64


def test_data_ptr_is_the_realized_buffers_address():
    assert fg.empty(0).data_ptr() == 0
    t = fg.arange(6.0) * 2  # lazy: data_ptr computes it
    p = t.data_ptr()
    assert isinstance(p, int) and p != 0 and t.data_ptr() == p
    # the address is where the values are: read them back through it
    got = np.ctypeslib.as_array((ctypes.c_float * 6).from_address(p))
    assert got.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_is_set_to_compares_storage_shape_strides_and_offset():
    a = fg.arange(6.0)
    # torch: (True, True, False, False, True, True)
    got = (
        a.is_set_to(a),
        a.is_set_to(a[:]),
        a.is_set_to(a.view(2, 3)),
        a.is_set_to(a.clone()),
        a[1:].is_set_to(a[1:]),
        a.is_set_to(a.detach()),
    )
    assert got == (True, True, False, False, True, True)
    assert not a[1:].is_set_to(a[:5])
    with pytest.raises(TypeError, match="must be Tensor, not int"):
        a.is_set_to(3)


def test_adjoints_transpose_the_last_two_dims():
    m = fg.arange(6.0).reshape(2, 3)
    want = [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert m.H.tolist() == want and m.mH.tolist() == want and m.adjoint().tolist() == want
    assert fg.ones(2, 3, 4).mH.shape == (2, 4, 3) and fg.ones(2, 3, 4).adjoint().shape == (2, 4, 3)
    x = fg.tensor([[1.0, 2.0]], requires_grad=True)
    (x.mH * fg.tensor([[3.0], [4.0]])).sum().backward()
    assert x.grad.tolist() == [[3.0, 4.0]]


def test_adjoints_refuse_what_torch_refuses():
    with pytest.raises(RuntimeError, match=r"only supported on matrices \(2-D tensors\). Got 1-D"):
        _ = fg.ones(3).H
    with pytest.raises(RuntimeError, match="Got 3-D tensor. For batches of matrices"):
        _ = fg.ones(2, 3, 4).H
    with pytest.raises(RuntimeError, match="mH is only supported on matrices or batches"):
        _ = fg.ones(3).mH
    with pytest.raises(RuntimeError, match=r"adjoint\(\) is only supported on matrices"):
        fg.ones(3).adjoint()
    s = fg.tensor(1.0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert s.H is s and s.mH is s
    assert [str(x.message)[:30] for x in w] == [
        "Tensor.H is deprecated on 0-D ",
        "Tensor.mH is deprecated on 0-D",
    ]
