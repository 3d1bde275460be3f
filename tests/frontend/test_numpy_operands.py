"""numpy arrays and scalars as operands, on either side of every operator, and numpy data
fusegrad cannot hold refused loudly (never converted silently).

The array is a tensor of its own dtype, with dimensions unless it is 0-d, as torch's
`tensor + ndarray` converts it (torch 2.13: int64 + int32 array is int64, float32 +
float64 array is float64, int64 + 0-d float64 array is float64). torch raises for
`ndarray + tensor`; fusegrad gives the same result as `tensor + ndarray` instead.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import fusegrad as fg

OPERATORS = [
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.pow,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
    operator.eq,
    operator.ne,
]


@pytest.mark.parametrize("op", OPERATORS, ids=lambda f: f.__name__)
def test_an_array_on_either_side(op):
    t = fg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    a = np.array([2.0, 0.5, 3.0], dtype=np.float32)
    for got, want in [
        (op(t, a), op(t.numpy(), a)),
        (op(a, t), op(a, t.numpy())),
    ]:
        assert isinstance(got, fg.Tensor), type(got)
        assert got.dtype.np == want.dtype.name
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_the_array_keeps_its_dtype_as_torch_converts_it():
    ints, floats = fg.tensor([1, 2]), fg.tensor([1.0, 2.0])
    assert (ints + np.array([1, 2], dtype=np.int32)).dtype is fg.int64
    assert (fg.tensor([1, 2], dtype=fg.int32) + np.array([1, 2])).dtype is fg.int64
    assert (np.array([1, 2], dtype=np.int32) + fg.tensor([1, 2], dtype=fg.int32)).dtype is fg.int32
    assert (floats + np.array([1.0, 2.0])).dtype is fg.float64  # an array has dims: it widens
    assert (np.array([1.0, 2.0]) * floats).dtype is fg.float64
    assert (floats + np.array([1, 2], dtype=np.uint8)).dtype is fg.float32
    assert (fg.tensor([1, 2], dtype=fg.uint8) + np.array([1, 2], dtype=np.int8)).dtype is fg.int16


def test_a_zero_d_array_is_a_zero_d_tensor():
    ints, floats = fg.tensor([1, 2]), fg.tensor([1.0, 2.0])
    assert (ints + np.array(2.5)).dtype is fg.float64  # a higher kind: its own dtype
    np.testing.assert_array_equal((ints + np.array(2.5)).numpy(), [3.5, 4.5])
    assert (floats + np.array(2.0)).dtype is fg.float32  # the same kind: the dims win
    assert (np.array(2.0) * floats).dtype is fg.float32
    assert (fg.tensor([250], dtype=fg.uint8) + np.array(10)).dtype is fg.uint8


def test_numpy_scalars_are_numbers_on_either_side():
    floats, ints = fg.tensor([1.0, 2.0]), fg.tensor([1, 2])
    for got in (np.float64(2.0) * floats, floats * np.float64(2.0)):
        assert isinstance(got, fg.Tensor) and got.dtype is fg.float32
        np.testing.assert_array_equal(got.numpy(), [2.0, 4.0])
    assert (np.float64(2.0) * ints).dtype is fg.float32  # as torch: a float lifts to float32
    assert (np.int32(3) + ints).dtype is fg.int64
    got = np.float32(1.5) < floats
    assert isinstance(got, fg.Tensor)
    np.testing.assert_array_equal(got.numpy(), [False, True])


def test_comparisons_with_an_array_give_bool_tensors():
    t = fg.tensor([1.0, 2.0, 3.0])
    a = np.array([1.0, 0.0, 3.0])
    for got in (a == t, t == a, a != t, a < t, a >= t):
        assert isinstance(got, fg.Tensor) and got.dtype is fg.bool
    np.testing.assert_array_equal((a == t).numpy(), [True, False, True])
    np.testing.assert_array_equal((a < t).numpy(), [False, True, False])


def test_bool_arrays_with_bool_tensors():
    m = fg.tensor([True, False, True])
    a = np.array([True, True, False])
    np.testing.assert_array_equal((a & m).numpy(), [True, False, False])
    np.testing.assert_array_equal((m | a).numpy(), [True, True, True])


def test_gradients_flow_through_an_array_operand():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    (np.array([3.0, 4.0], dtype=np.float32) * w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 4.0])


def test_numpy_functions_still_read_tensors():
    t = fg.tensor([1.0, 2.0])
    assert isinstance(np.asarray(t), np.ndarray)
    np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
    np.testing.assert_allclose(np.exp(t), np.exp([1.0, 2.0]), rtol=1e-6)


def test_lists_are_refused_as_torch_does():
    t = fg.tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="list"):
        t + [1, 2]
    with pytest.raises(TypeError):
        [1, 2] + t


def test_broadcast_errors_name_both_shapes():
    with pytest.raises(ValueError, match=r"\(2,\) and \(3,\)"):
        fg.tensor([1.0, 2.0]) + np.zeros(3, dtype=np.float32)


# ---------------------------------------------------------------- refused, never converted


@pytest.mark.parametrize(
    "make, dtype, want",
    [
        (lambda a: fg.tensor(a), "float16", [1.0, 2.0]),
        (lambda a: fg.from_numpy(a), "float16", [1.0, 2.0]),
        (lambda a: fg.tensor([1.0, 2.0]) + a, "float32", [2.0, 4.0]),  # the wider type wins
        (lambda a: a * fg.tensor([1.0, 2.0]), "float32", [1.0, 4.0]),
    ],
    ids=["tensor", "from_numpy", "tensor+array", "array*tensor"],
)
def test_float16_arrays_are_float16_tensors(make, dtype, want):
    got = make(np.array([1.0, 2.0], dtype=np.float16))
    assert got.dtype.name == dtype
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", [np.float16, "float16", "half", "bfloat16"])
def test_half_precision_requests_are_granted(dtype):
    want = "bfloat16" if dtype == "bfloat16" else "float16"
    assert fg.tensor([1.0, 2.0], dtype=dtype).dtype.name == want
    assert fg.tensor([1.0, 2.0]).to(dtype=dtype).dtype.name == want


def test_an_explicit_conversion_of_float16_data_is_allowed():
    got = fg.tensor(np.array([1.5, 2.0], dtype=np.float16), dtype=fg.float32)
    assert got.dtype is fg.float32
    np.testing.assert_array_equal(got.numpy(), [1.5, 2.0])


@pytest.mark.parametrize(
    "array, words",
    [
        (np.array([1 + 2j, 3j]), "complex"),
        (np.array([object(), 1]), "object"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"),
        (np.array([1], dtype="timedelta64[s]"), "timedelta64"),
    ],
    ids=["complex", "object", "datetime", "timedelta"],
)
def test_other_numpy_dtypes_are_refused(array, words):
    for make in (fg.tensor, fg.from_numpy, lambda a: fg.tensor([1.0]) + a):
        with pytest.raises(TypeError, match=words):
            make(array)
