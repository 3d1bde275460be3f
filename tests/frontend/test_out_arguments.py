"""torch's `out=` keyword on the top-level functions (frontend/out_arguments.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusegrad as fg


def test_out_receives_the_result_and_is_returned():
    a, b = fg.tensor([1.0, 2.0, 3.0]), fg.tensor([0.5, 0.25, 2.0])
    cases = {
        "add": (lambda o: fg.add(a, b, out=o), [1.5, 2.25, 5.0]),
        "mul": (lambda o: fg.mul(a, b, out=o), [0.5, 0.5, 6.0]),
        "exp": (lambda o: fg.exp(fg.zeros(2), out=o), [1.0, 1.0]),
        "cat": (lambda o: fg.cat([a, b], out=o), [1.0, 2.0, 3.0, 0.5, 0.25, 2.0]),
        "sum": (lambda o: fg.sum(a, 0, out=o), 6.0),
        "clamp": (lambda o: fg.clamp(a, 1.5, 2.5, out=o), [1.5, 2.0, 2.5]),
        "arange": (lambda o: fg.arange(3.0, out=o), [0.0, 1.0, 2.0]),
        "matmul": (lambda o: fg.matmul(a[None], b[:, None], out=o), [[7.0]]),
    }
    for name, (call, want) in cases.items():
        out = fg.empty(0)
        assert call(out) is out, name
        assert out.tolist() == want, name


def test_out_of_the_same_shape_is_written_in_place_through_views():
    x = fg.zeros(2, 3)
    row = x[1]
    fg.add(fg.ones(3), 2, out=row)
    assert x.tolist() == [[0.0, 0.0, 0.0], [3.0, 3.0, 3.0]]


def test_out_casts_as_torch_allows_and_refuses_the_rest():
    out = fg.zeros(2, dtype=fg.float64)
    fg.add(fg.tensor([1.0, 2.0]), 0.5, out=out)
    assert out.dtype == fg.float64 and out.tolist() == [1.5, 2.5]
    ints = fg.zeros(2, dtype=fg.int64)
    with pytest.raises(RuntimeError, match="result type float32 can't be cast to the desired"):
        fg.add(fg.tensor([1.0, 2.0]), 0.5, out=ints)


def test_out_of_another_shape_is_resized_with_torchs_warning():
    out = fg.zeros(2)
    with pytest.warns(UserWarning, match=r"resized since it had shape \[2\].*shape \[3\]"):
        fg.add(fg.ones(3), 1, out=out)
    assert out.shape == (3,) and out.tolist() == [2.0, 2.0, 2.0]
    empty = fg.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no elements: resized silently, as torch
        fg.mul(fg.ones(2, 2), 3, out=empty)
    assert empty.shape == (2, 2)


def test_functions_with_several_results_take_a_tuple():
    x = fg.tensor([[3.0, 1.0], [2.0, 5.0]])
    values, indices = fg.empty(0), fg.empty(0, dtype=fg.int64)
    got = fg.max(x, 1, out=(values, indices))
    assert got[0] is values and got[1] is indices and got.values is values
    assert values.tolist() == [3.0, 5.0] and indices.tolist() == [0, 1]
    s, i = fg.empty(0), fg.empty(0, dtype=fg.int64)
    fg.sort(fg.tensor([2.0, 0.5, 1.0]), out=(s, i))
    assert s.tolist() == [0.5, 1.0, 2.0] and i.tolist() == [1, 2, 0]
    with pytest.raises(TypeError, match="tuple of 2 Tensors"):
        fg.max(x, 1, out=values)


def test_out_does_not_differentiate_and_refuses_where_torch_does():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        fg.mul(w, 2, out=fg.empty(2))
    with fg.no_grad():
        out = fg.empty(2)
        fg.mul(w, 2, out=out)
    assert out.tolist() == [2.0, 4.0] and not out.requires_grad
    with pytest.raises(TypeError, match="unexpected keyword argument 'out'"):
        fg.is_tensor(w, out=fg.empty(1))
    with pytest.raises(TypeError, match="argument 'out' must be Tensor, not ndarray"):
        fg.add(w.detach(), 1, out=np.zeros(2))
