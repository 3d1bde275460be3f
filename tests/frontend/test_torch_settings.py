"""torch's constants, type objects, promotion queries and process settings
(frontend/torch_settings.py), against PyTorch 2.14.1's answers written here as literals."""

from __future__ import annotations

import math
import pickle
import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import torch_settings
from fusegrad.torch_shim import TorchShim


def test_constants_are_torchs():
    assert (fg.pi, fg.e) == (math.pi, math.e)
    assert fg.inf == math.inf and math.isnan(fg.nan) and fg.newaxis is None
    x = fg.arange(3.0)
    assert x[:, fg.newaxis].shape == (3, 1)


def test_type_objects():
    assert isinstance(fg.float32, fg.dtype) and isinstance(fg.bool, fg.dtype)
    assert not isinstance(float, fg.dtype)
    assert repr(fg.strided) == "fusegrad.strided" and fg.zeros(2).layout is fg.strided
    assert isinstance(fg.strided, fg.layout)
    for fmt in (fg.contiguous_format, fg.preserve_format, fg.channels_last, fg.channels_last_3d):
        assert isinstance(fmt, fg.memory_format)
        assert pickle.loads(pickle.dumps(fmt)) is fmt
    assert repr(fg.channels_last) == "fusegrad.channels_last"
    assert pickle.loads(pickle.dumps(fg.strided)) is fg.strided


# (type1, type2) -> torch.promote_types
PROMOTIONS = [
    (fg.int32, fg.float16, fg.float16),
    (fg.uint8, fg.int8, fg.int16),
    (fg.bool, fg.int8, fg.int8),
    (fg.bfloat16, fg.float16, fg.float32),
    (fg.int64, fg.float32, fg.float32),
    (fg.uint8, fg.bool, fg.uint8),
]


@pytest.mark.parametrize("a, b, want", PROMOTIONS)
def test_promote_types(a, b, want):
    assert fg.promote_types(a, b) is want and fg.promote_types(b, a) is want


def test_promote_types_refuses_other_arguments():
    with pytest.raises(TypeError, match=r"argument 'type1' \(position 1\) must be torch.dtype"):
        fg.promote_types(1, fg.float32)


def test_result_type():
    i64 = fg.tensor([1, 2])
    assert fg.result_type(i64, 1.0) is fg.float32
    assert fg.result_type(i64, fg.tensor([1.0])) is fg.float32
    half = fg.tensor([1.0], dtype=fg.float16)
    assert fg.result_type(half, fg.tensor(1.0, dtype=fg.float64)) is fg.float16
    assert fg.result_type(i64, True) is fg.int64
    assert fg.result_type(2, 3.0) is fg.float32
    assert fg.result_type(2, 3) is fg.int64
    assert fg.result_type(True, False) is fg.bool
    assert fg.result_type(i64, fg.tensor(2.5, dtype=fg.float64)) is fg.float64
    assert fg.result_type(fg.tensor([1], dtype=fg.uint8), fg.tensor(5)) is fg.uint8
    assert fg.result_type(fg.tensor([True]), 5) is fg.int64
    i8 = fg.tensor(1, dtype=fg.int8)
    assert fg.result_type(i8, fg.tensor(1.0, dtype=fg.float16)) is fg.float16
    assert fg.result_type(i8, 1.0) is fg.float32
    assert fg.result_type(i64, np.float64(2.0)) is fg.float32
    with pytest.raises(TypeError, match="result_type"):
        fg.result_type(i64, "x")
    with pytest.raises(TypeError, match="result_type"):
        fg.result_type(i64, None)


def test_result_type_follows_the_default_dtype():
    before = fg.get_default_dtype()
    fg.set_default_dtype(fg.float64)
    try:
        assert fg.result_type(2, 3.0) is fg.float64
        assert fg.result_type(fg.tensor([1]), 2.0) is fg.float64
        assert fg.scalar_tensor(3).dtype is fg.float64
    finally:
        fg.set_default_dtype(before)


def test_can_cast():
    assert fg.can_cast(fg.float64, fg.float32) is True
    assert fg.can_cast(fg.float32, fg.int32) is False
    assert fg.can_cast(fg.int32, fg.uint8) is True
    assert fg.can_cast(fg.bool, fg.uint8) is True
    assert fg.can_cast(fg.float32, fg.bool) is False
    assert fg.can_cast(fg.int64, fg.bool) is False
    assert fg.can_cast(fg.uint8, fg.bool) is False
    with pytest.raises(TypeError, match=r"argument 'to' \(position 2\) must be torch.dtype"):
        fg.can_cast(fg.float32, "x")


def test_typename():
    assert fg.typename(fg.tensor([1, 2])) == "fusegrad.LongTensor"
    assert fg.typename(fg.zeros(1)) == "fusegrad.FloatTensor"
    assert fg.typename(fg.zeros(1, dtype=fg.bool)) == "fusegrad.BoolTensor"
    assert fg.typename(3) == "int" and fg.typename("s") == "str"
    assert fg.typename(fg.nn.Linear(1, 1)) == "fusegrad.nn.layers.Linear"


def test_matmul_precision_is_allow_tf32():
    before = fg.config.allow_tf32
    try:
        fg.set_float32_matmul_precision("highest")
        assert fg.get_float32_matmul_precision() == "highest"
        assert fg.backends.cuda.matmul.allow_tf32 is False
        fg.set_float32_matmul_precision("high")
        assert fg.backends.cuda.matmul.allow_tf32 is True
        assert fg.get_float32_matmul_precision() == "high"
        fg.set_float32_matmul_precision("medium")
        assert fg.config.allow_tf32 and fg.get_float32_matmul_precision() == "medium"
        fg.backends.cuda.matmul.allow_tf32 = False
        assert fg.get_float32_matmul_precision() == "highest"
        with pytest.warns(UserWarning, match="low is not one of 'highest', 'high', or 'medium'"):
            fg.set_float32_matmul_precision("low")
        assert fg.get_float32_matmul_precision() == "highest"
        with pytest.raises(RuntimeError, match="expects a str, but got int"):
            fg.set_float32_matmul_precision(3)
    finally:
        fg.config.allow_tf32 = before


def test_cpu_matmuls_stay_float32_at_medium_precision():
    a = fg.tensor(np.full((4, 4), 1 + 2**-20, np.float32))
    fg.set_float32_matmul_precision("medium")
    try:
        got = (a @ a).numpy()
    finally:
        fg.set_float32_matmul_precision("highest")
    # bfloat16 (8 bits) or TF32 (10 bits) inputs would round 1 + 2^-20 to 1
    assert got[0, 0] == np.float32(4 * (1 + 2**-20) ** 2)


def test_deterministic_algorithms_turn_the_autotuner_off():
    before = fg.config.autotune
    fg.config.autotune = True
    try:
        assert fg.are_deterministic_algorithms_enabled() is False
        fg.use_deterministic_algorithms(True, warn_only=True)
        assert fg.are_deterministic_algorithms_enabled() is True
        assert fg.is_deterministic_algorithms_warn_only_enabled() is True
        assert fg.config.autotune is False
        fg.use_deterministic_algorithms(False)
        assert fg.are_deterministic_algorithms_enabled() is False
        assert fg.is_deterministic_algorithms_warn_only_enabled() is False
        assert fg.config.autotune is True
        with pytest.raises(TypeError, match=r"argument 'mode' \(position 1\) must be bool"):
            fg.use_deterministic_algorithms("yes")
        with pytest.raises(TypeError, match="argument 'warn_only' must be bool, not int"):
            fg.use_deterministic_algorithms(True, warn_only=1)
        assert fg.are_deterministic_algorithms_enabled() is False
    finally:
        fg.use_deterministic_algorithms(False)
        fg.config.autotune = before


def test_interop_threads_set_once(monkeypatch):
    monkeypatch.setattr(torch_settings, "_interop_threads", [None])
    assert fg.get_num_interop_threads() >= 1
    with pytest.raises(RuntimeError, match="expects a positive integer"):
        fg.set_num_interop_threads(0)
    with pytest.raises(RuntimeError, match="expects an int, but got float"):
        fg.set_num_interop_threads(2.5)
    fg.set_num_interop_threads(3)
    assert fg.get_num_interop_threads() == 3
    with pytest.raises(RuntimeError, match="set_num_interop_threads called"):
        fg.set_num_interop_threads(4)
    assert fg.get_num_interop_threads() == 3


def test_warn_always_and_flush_denormal():
    assert fg.is_warn_always_enabled() is False
    fg.set_warn_always(True)
    try:
        assert fg.is_warn_always_enabled() is True
    finally:
        fg.set_warn_always(False)
    with pytest.raises(RuntimeError, match="expects a bool, but got int"):
        fg.set_warn_always(1)
    assert fg.set_flush_denormal(False) is True
    assert fg.set_flush_denormal(True) is False  # not flushed: a denormal survives
    tiny = fg.tensor([1e-40]) * 1.0
    assert tiny.item() != 0.0
    with pytest.raises(RuntimeError, match="flush_denormal expects a bool, but got int"):
        fg.set_flush_denormal(1)


def test_memory_formats_are_checked_and_change_nothing():
    x = fg.arange(120.0).reshape(2, 3, 4, 5)
    assert x.contiguous(memory_format=fg.channels_last) is x
    assert x.to(memory_format=fg.channels_last) is x
    assert x.contiguous(memory_format=fg.contiguous_format) is x
    assert fg.zeros_like(x, memory_format=fg.preserve_format).shape == (2, 3, 4, 5)
    assert fg.empty_like(x, memory_format=fg.channels_last).shape == (2, 3, 4, 5)
    for like in (fg.ones_like, fg.rand_like, fg.randn_like):
        assert like(x, memory_format=fg.contiguous_format).shape == x.shape
    assert fg.full_like(x, 2.0, memory_format=fg.channels_last).sum().item() == 240.0
    assert fg.randint_like(x, 5, memory_format=fg.channels_last).shape == x.shape
    np.testing.assert_array_equal(x.clone(memory_format=fg.channels_last).numpy(), x.numpy())
    # torch's answers for a row-major 4-d tensor; fusegrad's strides stay row-major
    assert x.is_contiguous(memory_format=fg.contiguous_format) is True
    assert x.is_contiguous(memory_format=fg.channels_last) is False
    assert fg.zeros(2).is_contiguous(memory_format=fg.contiguous_format) is True


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: x.contiguous(memory_format=fg.channels_last), "required rank 4 tensor"),
        (lambda x: x.to(memory_format=fg.channels_last), "required rank 4 tensor"),
        (lambda x: fg.empty_like(x, memory_format=fg.channels_last), "required rank 4 tensor"),
        (
            lambda x: x.reshape(1, 2, 3).unsqueeze(0).to(memory_format=fg.channels_last_3d),
            "required rank 5 tensor to use channels_last_3d format",
        ),
    ],
)
def test_channels_last_needs_its_rank(call, message):
    with pytest.raises(RuntimeError, match=message):
        call(fg.zeros(2, 3))


def test_memory_format_must_be_one():
    with pytest.raises(TypeError, match="argument 'memory_format' must be torch.memory_format"):
        fg.zeros(2).contiguous(memory_format=3)


def test_concatenate_and_row_stack():
    t = fg.tensor([1, 2])
    assert fg.concatenate([t, t]).tolist() == [1, 2, 1, 2]
    assert fg.concatenate((t, t), axis=0).tolist() == [1, 2, 1, 2]
    assert fg.concat([t, t], axis=0).tolist() == [1, 2, 1, 2]
    assert fg.row_stack([t, t]).tolist() == [[1, 2], [1, 2]]
    assert fg.row_stack([fg.tensor(1), fg.tensor(2)]).tolist() == [[1], [2]]
    a = fg.ones(2, requires_grad=True)
    (fg.concatenate([a, a * 3]).sum()).backward()
    assert a.grad.tolist() == [4.0, 4.0]


def test_asarray():
    assert fg.asarray([1, 2]).dtype is fg.int64
    assert fg.asarray([1.0, 2]).dtype is fg.float32 and fg.asarray(3).shape == ()
    assert fg.asarray([1, 2], dtype=fg.float64).tolist() == [1.0, 2.0]
    assert fg.asarray(np.array([1, 2], np.int32)).dtype is fg.int32
    assert fg.asarray(np.float32(2.5)).dtype is fg.float32
    x = fg.ones(2)
    assert fg.asarray(x) is x
    assert fg.asarray(x, dtype=fg.float64).dtype is fg.float64
    copied = fg.asarray(x, copy=True)
    assert copied is not x and copied.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="can't alias tensor"):
        fg.asarray(x, dtype=fg.float64, copy=False)
    with pytest.raises(ValueError, match="can't alias arbitrary sequence into a tensor"):
        fg.asarray([1, 2], copy=False)
    with pytest.raises(ValueError, match="can't alias a numpy array"):
        fg.asarray(np.ones(2), copy=False)


def test_asarray_requires_grad_as_torch():
    x = fg.ones(2, requires_grad=True)
    with pytest.warns(UserWarning, match="unspecified requires_grad now defaults"):
        y = fg.asarray(x, copy=True)
    assert y.requires_grad and not y.is_leaf  # a differentiable copy
    (y * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fg.asarray(x, requires_grad=False).requires_grad is False
    z = fg.ones(2)
    w = fg.asarray(z, dtype=fg.float64, requires_grad=True)
    assert w.requires_grad and w.is_leaf
    assert fg.asarray(z, requires_grad=True) is z and z.requires_grad


def test_scalar_tensor():
    t = fg.scalar_tensor(3)
    assert t.shape == () and t.dtype is fg.float32 and t.item() == 3.0
    assert fg.scalar_tensor(True).dtype is fg.float32
    assert fg.scalar_tensor(2, dtype=fg.int64).item() == 2
    assert fg.scalar_tensor(2.5, dtype=fg.int64).item() == 2
    assert fg.scalar_tensor(2.5, dtype=fg.bool).item() is True
    assert fg.scalar_tensor(np.int64(3)).dtype is fg.float32
    assert fg.scalar_tensor(fg.tensor(2.0)).item() == 2.0
    assert fg.scalar_tensor(3, requires_grad=True).requires_grad
    assert fg.scalar_tensor(float("inf")).item() == math.inf
    for bad, name in (([2.0], "list"), (fg.tensor([1.0, 2.0]), "Tensor"), (None, "NoneType")):
        with pytest.raises(TypeError, match=f"must be Number, not {name}"):
            fg.scalar_tensor(bad)
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8_t"):
        fg.scalar_tensor(300, dtype=fg.uint8)


def test_the_names_resolve_through_the_torch_shim():
    torch = TorchShim().module("torch")
    for name in (
        "pi e inf nan newaxis dtype layout strided memory_format contiguous_format "
        "preserve_format channels_last channels_last_3d promote_types result_type can_cast "
        "is_complex is_nonzero is_same_size typename set_float32_matmul_precision "
        "get_float32_matmul_precision use_deterministic_algorithms "
        "are_deterministic_algorithms_enabled is_deterministic_algorithms_warn_only_enabled "
        "set_num_interop_threads get_num_interop_threads set_warn_always "
        "is_warn_always_enabled set_flush_denormal concatenate row_stack asarray "
        "scalar_tensor real conj"
    ).split():
        assert hasattr(torch, name), name
    assert torch.is_nonzero(fg.tensor([1])) is True
    assert torch.is_complex(fg.zeros(1)) is False
