"""User errors: raised where the op is written, naming the op, the shapes or dtypes, and the line.

Every case is a one-line lambda holding the offending op, so the line the
message must end with is the lambda's own line (`co_firstlineno`).
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import fusegrad as fg

FILE = "test_errors.py"


def raises_here(kind, op: str, fn, *fragments: str) -> str:
    """Call `fn` (a one-line lambda): it must raise `kind` with a message that starts with
    `op:` (a regex), names every fragment, and ends with this file and the lambda's line."""
    line = fn.__code__.co_firstlineno
    with pytest.raises(kind) as info:
        fn()
    assert isinstance(info.value, fg.FusegradError)
    message = str(info.value)
    assert re.match(rf"({op}): ", message), f"message does not start with the op {op!r}: {message}"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    assert message.endswith(f" at {FILE}:{line}"), f"expected {FILE}:{line} at the end: {message}"
    return message


X = fg.ones(3, 4)


# ---------------------------------------------------------------- broadcasting


def test_mismatched_broadcast_shapes():
    y = fg.ones(5)
    raises_here(fg.ShapeError, "add", lambda: X + y, "(3, 4)", "(5,)")
    raises_here(fg.ShapeError, "add", lambda: y + X, "(3, 4)", "(5,)")
    raises_here(fg.ShapeError, "mul", lambda: fg.ones(2, 3) * fg.ones(3, 2), "(2, 3)", "(3, 2)")
    raises_here(fg.ShapeError, "sub", lambda: X - fg.ones(4, 3), "(3, 4)", "(4, 3)")
    raises_here(fg.ShapeError, "div", lambda: X / fg.ones(2, 4), "(3, 4)", "(2, 4)")
    raises_here(fg.ShapeError, "maximum", lambda: X.maximum(y), "(3, 4)", "(5,)")
    raises_here(fg.ShapeError, "lt", lambda: X < y, "(3, 4)", "(5,)")
    raises_here(fg.ShapeError, "where", lambda: fg.where(fg.ones(3) > 0, y, 0.0), "(3,)", "(5,)")


def test_the_line_is_the_users_even_inside_a_helper():
    def normalize(t):
        return t / t.sum(1)  # (3, 4) / (3,): the line of this op is reported

    line = inspect.getsourcelines(normalize)[1] + 1
    with pytest.raises(fg.ShapeError) as info:
        normalize(X)
    assert str(info.value).endswith(f" at {FILE}:{line}")


def test_the_error_comes_when_the_op_is_written_not_when_it_runs():
    a = fg.ones(3, 4) * 2  # lazy: nothing has run
    with pytest.raises(fg.ShapeError) as info:
        line = inspect.currentframe().f_lineno + 1
        _ = a + fg.ones(5)
    assert str(info.value).endswith(f" at {FILE}:{line}")


# ---------------------------------------------------------------- dims


@pytest.mark.parametrize(
    "op, fn, fragments",
    [
        ("sum", lambda: X.sum(dim=3), ["3", "(3, 4)"]),
        ("sum", lambda: X.sum(dim=(0, -2)), ["(0, -2)"]),
        ("sum", lambda: X.sum(dim=(0, 5)), ["5", "(3, 4)"]),
        ("mean", lambda: X.mean(-3), ["-3", "(3, 4)"]),
        ("a?max", lambda: X.amax(2), ["2", "(3, 4)"]),
        ("max", lambda: X.max(2), ["2", "(3, 4)"]),
        ("argmax", lambda: X.argmax(7), ["7", "(3, 4)"]),
        ("softmax", lambda: X.softmax(5), ["5", "(3, 4)"]),
        ("log_softmax", lambda: X.log_softmax(-3), ["-3", "(3, 4)"]),
        ("transpose", lambda: X.transpose(0, 4), ["4", "(3, 4)"]),
        ("squeeze", lambda: X.squeeze(3), ["3", "(3, 4)"]),
        ("unsqueeze", lambda: X.unsqueeze(4), ["4", "(3, 4)"]),
        ("flatten", lambda: X.flatten(0, 5), ["5", "(3, 4)"]),
        ("permute", lambda: X.permute(0, 0), ["(0, 0)", "(3, 4)"]),
        ("permute", lambda: X.permute(1, 0, 2), ["(3, 4)"]),
        ("cat", lambda: fg.cat([X, X], dim=2), ["2", "(3, 4)"]),
        ("cat", lambda: fg.cat([X, fg.ones(3, 5)], dim=0), ["(3, 4)", "(3, 5)"]),
        ("stack", lambda: fg.stack([X, fg.ones(4, 3)]), ["(3, 4)", "(4, 3)"]),
        ("expand", lambda: X.expand(3, 5), ["(3, 4)", "(3, 5)"]),
        ("t", lambda: fg.ones(2, 2, 2).t(), ["(2, 2, 2)"]),
        ("pad", lambda: X.pad((1, 1, 1, 1, 1, 1)), ["(1, 1, 1, 1, 1, 1)"]),
        ("pad", lambda: X.pad((-3, -2)), ["(-3, -2)", "(3, 4)"]),
    ],
)
def test_bad_dims_and_shapes(op, fn, fragments):
    raises_here(fg.ShapeError, op, fn, *fragments)


# ---------------------------------------------------------------- reshape and view


def test_impossible_reshape():
    raises_here(fg.ShapeError, "reshape", lambda: X.reshape(5, 5), "(3, 4)", "(5, 5)")
    raises_here(fg.ShapeError, "reshape", lambda: X.reshape(5, -1), "(3, 4)", "(5, -1)")
    raises_here(fg.ShapeError, "reshape", lambda: X.reshape(-1, -1), "(-1, -1)")
    raises_here(fg.ShapeError, "view", lambda: X.view(2, 7), "(3, 4)", "(2, 7)")


def test_view_of_a_non_contiguous_tensor():
    t = X.T  # shape (4, 3), strides (1, 4)
    raises_here(fg.ShapeError, "view", lambda: t.view(12), "(4, 3)", "(12,)")
    raises_here(fg.ShapeError, "view", lambda: X[:, 1:3].view(6), "(3, 2)", "(6,)")
    assert t.reshape(12).shape == (12,)  # reshape copies instead
    assert X[:, ::2].view(6).stride() == (2,)  # evenly spaced: a view, as in PyTorch


# ---------------------------------------------------------------- indexing


def test_bad_index():
    raises_here(fg.IndexingError, "index", lambda: X[3], "3", "size 3")
    raises_here(fg.IndexingError, "index", lambda: X[-4], "-4", "size 3")
    raises_here(fg.IndexingError, "index", lambda: X[:, 4], "4", "size 4")
    raises_here(fg.IndexingError, "index", lambda: X[0, 0, 0], "(3, 4)")
    raises_here(fg.IndexingError, "index", lambda: X[None, 1, 2, 3], "(3, 4)")
    raises_here(fg.IndexingError, "index", lambda: X[[0, 3]], "3", "size 3")
    raises_here(fg.IndexingError, "index", lambda: X[..., fg.tensor([-5])], "-5", "size 4")
    raises_here(fg.IndexingError, "index", lambda: X[fg.tensor([True, False])], "(2,)", "(3,)")
    raises_here(fg.IndexingError, "index", lambda: X[fg.tensor([0.5])], "float32")
    # a zero step is torch's ValueError ("step must be greater than zero"), not an IndexError
    assert issubclass(fg.ShapeError, ValueError)
    raises_here(fg.ShapeError, "index", lambda: X[:, 1:3:0], "0")
    raises_here(fg.IndexingError, "index", lambda: X[..., ...], "ellipsis")
    raises_here(fg.IndexingError, "index", lambda: X[1.5], "1.5")


# ---------------------------------------------------------------- matmul


def test_matmul_inner_dimension_mismatch():
    a, b = fg.ones(2, 3), fg.ones(4, 5)
    raises_here(fg.ShapeError, "matmul", lambda: a @ b, "(2, 3)", "(4, 5)")
    raises_here(fg.ShapeError, "matmul", lambda: fg.matmul(a, b), "(2, 3)", "(4, 5)")
    raises_here(fg.ShapeError, "matmul", lambda: fg.ones(3) @ fg.ones(4), "(3,)", "(4,)")
    raises_here(fg.ShapeError, "matmul", lambda: a @ fg.ones(2, 2, 3), "(2, 3)", "(2, 2, 3)")
    raises_here(fg.ShapeError, "matmul", lambda: fg.tensor(2.0) @ fg.ones(3), "()", "(3,)")
    raises_here(fg.ShapeError, "dot", lambda: a.dot(a), "(2, 3)")


def test_matmul_of_mixed_dtypes():
    a, b = fg.ones(2, 3), fg.ones(3, 2, dtype=fg.float64)
    raises_here(fg.DTypeError, "matmul", lambda: a @ b, "float32", "float64")
    i = fg.ones(3, 2, dtype=fg.int64)
    raises_here(fg.DTypeError, "matmul", lambda: a.matmul(i), "float32", "int64")
    raises_here(fg.DTypeError, "matmul", lambda: fg.tensor([True]) @ fg.tensor([True]), "bool")


# ---------------------------------------------------------------- dtypes


def test_where_needs_a_bool_condition():
    ints = fg.ones(3, 4, dtype=fg.int32)
    raises_here(fg.DTypeError, "where", lambda: fg.where(X, X, 0.0), "float32")
    raises_here(fg.DTypeError, "where", lambda: X.where(ints, 1.0), "int32")


def test_bool_tensors_refuse_arithmetic_negation():
    b = fg.tensor([True, False])
    raises_here(fg.DTypeError, "neg", lambda: -b, "bool")
    raises_here(fg.DTypeError, "sub", lambda: b - b, "bool")
    raises_here(fg.DTypeError, "invert", lambda: ~X, "float32")
    raises_here(fg.DTypeError, "mean", lambda: fg.arange(3).mean(), "int64")


def test_subtraction_with_any_bool_operand_raises_as_pytorchs():
    # promoted first, these were numbers: mask - 1.5 a float, 1 - mask an int
    b, i = fg.tensor([True, False]), fg.tensor([1, 2])
    raises_here(fg.DTypeError, "sub", lambda: b - X[0, :2], "bool", "logical_not")
    raises_here(fg.DTypeError, "sub", lambda: X[0, :2] - b, "bool")
    raises_here(fg.DTypeError, "sub", lambda: 1.5 - b, "bool")
    raises_here(fg.DTypeError, "sub", lambda: b - 1, "bool")
    raises_here(fg.DTypeError, "sub", lambda: X - True, "bool")
    raises_here(fg.DTypeError, "sub", lambda: True - X, "bool")
    raises_here(fg.DTypeError, "sub", lambda: i.sub(b), "bool")
    raises_here(fg.DTypeError, "sub", lambda: i.clone().sub_(b), "bool")
    raises_here(fg.DTypeError, "sub", lambda: i - np.array([True, False]), "bool")
    assert (X[0, :2] - np.bool_(True)).tolist() == [0.0, 0.0]  # a number to PyTorch too
    assert (i - 1).tolist() == [0, 1] and (1.5 - i).tolist() == [0.5, -0.5]


@pytest.mark.parametrize(
    "op", ["floor", "ceil", "round", "trunc", "abs", "median", "nanmedian", "kthvalue"]
)
def test_ops_pytorch_has_no_bool_kernel_for_raise_not_implemented(op):
    b = fg.tensor([[True, False, True]])
    args = (1,) if op == "kthvalue" else ()
    with pytest.raises(NotImplementedError) as info:
        getattr(b, op)(*args)
    assert isinstance(info.value, fg.DTypeNotImplementedError), info.value
    assert isinstance(info.value, fg.DTypeError) and "bool" in str(info.value)
    if op in ("median", "nanmedian"):
        with pytest.raises(fg.DTypeNotImplementedError):
            getattr(b, op)(1)
    # integers are their own floor, ceil, round and trunc, as in PyTorch
    i = fg.tensor([[-2, 0, 3]])
    want = {"abs": [[2, 0, 3]], "median": 0, "nanmedian": 0, "kthvalue": [-2]}
    got = getattr(i, op)(*args)
    got = got.values if op == "kthvalue" else got
    assert got.tolist() == want.get(op, [[-2, 0, 3]]) and got.dtype == fg.int64


def test_bool_inputs_refused_where_pytorch_refuses_them():
    b = fg.tensor([True, False])
    raises_here(fg.DTypeError, "topk", lambda: b.topk(1), "bool")
    raises_here(fg.DTypeError, "argmax", lambda: b.argmax(), "bool")
    raises_here(fg.DTypeError, "argmin", lambda: b.argmin(0), "bool")
    raises_here(fg.DTypeError, "relu", lambda: b.relu(), "bool")
    raises_here(fg.DTypeError, "relu", lambda: fg.nn.functional.relu(b), "bool")
    # what PyTorch allows of bools stays: max and min along a dim (their index), sort
    assert b.max(0).indices.item() == 0 and b.min(0).indices.item() == 1
    assert b.sort().values.tolist() == [False, True] and b.sign().tolist() == [True, False]


def test_softmax_of_integers_needs_a_float_dtype():
    i = fg.tensor([[1, 2], [3, 5]])
    for fn in (
        lambda: i.softmax(1),
        lambda: i.log_softmax(0),
        lambda: fg.nn.functional.softmax(i, 1),
        lambda: fg.softmax(fg.tensor([True, False]), 0),
        lambda: X.softmax(1, dtype=fg.int32),
    ):
        with pytest.raises(fg.DTypeNotImplementedError) as info:
            fn()
        assert isinstance(info.value, NotImplementedError)
        assert re.match(r"(log_)?softmax: not implemented for (int64|bool|int32)", str(info.value))
    # with dtype= the input is cast first, as torch's softmax(..., dtype=)
    x = np.array([[1.0, 2.0], [3.0, 5.0]])
    e = np.exp(x - x.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    got = fg.nn.functional.softmax(i, 1, dtype=fg.float64)
    assert got.dtype == fg.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-15)
    got = i.log_softmax(1, dtype=fg.float32)
    assert got.dtype == fg.float32
    np.testing.assert_allclose(got.numpy(), np.log(want), rtol=1e-6)
    half = X.softmax(1, dtype=fg.bfloat16)
    assert half.dtype == fg.bfloat16 and half.float().numpy()[0, 0] == 0.25


def test_lerp_of_integers_raises():
    i = fg.tensor([1, 2])
    with pytest.raises(fg.DTypeNotImplementedError, match="lerp: not implemented for int64"):
        i.lerp(i, 0.5)
    with pytest.raises(NotImplementedError):
        X[0].lerp(fg.tensor([1, 2, 3, 4]), 0.5)
    assert X[0].lerp(X[0] * 3, 0.5).tolist() == [2.0] * 4


def test_requires_grad_on_int_tensors():
    op = "requires_grad"
    raises_here(fg.DTypeError, op, lambda: fg.tensor([1, 2], requires_grad=True), "int64")
    raises_here(fg.DTypeError, op, lambda: fg.ones(2, dtype=fg.int32, requires_grad=True), "int32")
    raises_here(fg.DTypeError, op, lambda: fg.tensor([True], requires_grad=True), "bool")
    raises_here(fg.DTypeError, "requires_grad_", lambda: fg.arange(3).requires_grad_(), "int64")


def test_unsupported_dtypes():
    raises_here(fg.DTypeError, "zeros|full|dtype", lambda: fg.zeros(2, dtype="uint32"), "uint32")
    raises_here(fg.DTypeError, "cast|dtype", lambda: X.cast("complex64"), "complex64")
    raises_here(fg.DTypeError, "rand", lambda: fg.rand(3, dtype=fg.int32), "int32")
    raises_here(fg.DTypeError, "add", lambda: X + "a", "str")


def test_tensor_of_strings():
    raises_here(fg.DTypeError, "tensor", lambda: fg.tensor(["a", "b"]))
    raises_here(fg.DTypeError, "tensor", lambda: fg.tensor("abc"))
    raises_here(fg.ShapeError, "tensor", lambda: fg.tensor([[1, 2], [3]]))
    raises_here(fg.DTypeError, "full", lambda: fg.full((2,), "a"))


# ---------------------------------------------------------------- devices and conversions


def test_cuda_device():
    from fusegrad.runtime import cuda

    cuda.reset()
    with fg.config.override(cuda="off"):  # the device unavailable, whatever this machine has
        off = "cuda:0 is not available: the cuda device is turned off (FUSEGRAD_CUDA=off)"
        raises_here(fg.DeviceError, "full", lambda: fg.zeros(3, device="cuda"), off)
        raises_here(fg.DeviceError, "tensor", lambda: fg.tensor([1.0], device="cuda:0"), off)
        raises_here(fg.DeviceError, "randn", lambda: fg.randn(2, device="cuda"), off)
    cuda.reset()
    raises_here(fg.DeviceError, "device", lambda: fg.ones(2, device="tpu"), "tpu")
    x, y = fg.ones(2, device="cpu"), fg.ones(2, device="cpu")  # whatever the default device
    raises_here(fg.DeviceError, "device", lambda: x.to("cuda:x"), "cuda:x")
    assert y.to("cpu") is y


def test_scalar_conversions_of_many_elements():
    raises_here(fg.ShapeError, "item", lambda: X.item(), "(3, 4)")
    raises_here(fg.ShapeError, "bool", lambda: bool(X), "12")


def test_error_classes_are_the_builtin_kinds_too():
    assert issubclass(fg.ShapeError, ValueError)
    assert issubclass(fg.DTypeError, TypeError)
    assert issubclass(fg.IndexingError, IndexError)
    assert issubclass(fg.DeviceError, RuntimeError)
    assert issubclass(fg.DTypeNotImplementedError, NotImplementedError)
    assert issubclass(fg.DTypeNotImplementedError, fg.DTypeError)
    for kind in (fg.ShapeError, fg.DTypeError, fg.IndexingError, fg.DeviceError):
        assert issubclass(kind, fg.FusegradError)
