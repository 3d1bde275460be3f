"""torch's smaller Tensor methods (frontend/torch_methods.py), against PyTorch 2.14.1's
values, gradients and errors written here as literals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg


def _x():
    return fg.arange(6.0).reshape(2, 3)


@pytest.mark.cpu_device  # (a CPU tensor's answers: a cuda one's are torch's too)
def test_queries():
    x = _x()
    assert (x.ndimension(), x.nbytes, x.itemsize, x.get_device()) == (2, 24, 4, -1)
    assert fg.zeros(3, dtype=fg.int16).nbytes == 6 and x[:, :2].nbytes == 16
    assert x.expand(4, 2, 3).nbytes == 96 and fg.zeros(0, 3).nbytes == 0
    assert fg.zeros(2, dtype=fg.float64).itemsize == 8
    assert x.is_signed() and fg.tensor([1], dtype=fg.int8).is_signed()
    assert not fg.zeros(1, dtype=fg.uint8).is_signed() and not fg.tensor([True]).is_signed()
    assert (x.is_complex(), x.is_inference(), x.is_conj(), x.is_neg(), x.is_pinned()) == (
        False,
        False,
        False,
        False,
        False,
    )
    assert x.is_same_size(fg.ones(2, 3)) and not x.is_same_size(fg.ones(3, 2))
    with pytest.raises(TypeError, match=r"argument 'other' \(position 2\) must be Tensor"):
        x.is_same_size(3)


def test_is_nonzero():
    assert fg.tensor([0.0]).is_nonzero() is False
    assert fg.tensor([1]).is_nonzero() is True
    assert fg.tensor(False).is_nonzero() is False
    assert fg.tensor(math.nan).is_nonzero() is True
    assert fg.tensor([-0.0]).is_nonzero() is False
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with no values is ambiguous"):
        fg.tensor([]).is_nonzero()
    with pytest.raises(RuntimeError, match="with more than one value is ambiguous"):
        fg.tensor([1, 2]).is_nonzero()


def test_real_tensors_are_their_own_conjugate_real_and_positive():
    x = fg.arange(3.0)
    assert x.conj() is x and x.resolve_conj() is x and x.resolve_neg() is x
    assert x.real is x and fg.real(x) is x and x.positive() is x
    x.conj().add_(1)
    x.real.mul_(2)
    x.positive().sub_(1)
    assert x.tolist() == [1.0, 3.0, 5.0]  # torch's: every write reached x
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex"):
        x.imag  # noqa: B018
    with pytest.raises(NotImplementedError, match="The `\\+` operator, on a bool tensor"):
        fg.tensor([True]).positive()


def test_select_is_a_view():
    x = _x()
    assert x.select(1, -1).tolist() == [2.0, 5.0]
    x.select(0, 1).mul_(10)
    assert x.tolist() == [[0.0, 1.0, 2.0], [30.0, 40.0, 50.0]]
    with pytest.raises(IndexError, match="index 3 out of range"):
        x.select(1, 3)
    with pytest.raises(IndexError):
        x.select(2, 0)
    b = _x().requires_grad_()
    (b.select(1, 1) * 3).sum().backward()
    assert b.grad.tolist() == [[0.0, 3.0, 0.0], [0.0, 3.0, 0.0]]


def test_narrow_copy_is_a_copy():
    m = _x()
    n = m.narrow_copy(1, 1, 2)
    assert n.tolist() == [[1.0, 2.0], [4.0, 5.0]]
    n.fill_(9)
    assert m.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    b = _x().requires_grad_()
    (b.narrow_copy(0, 1, 1) * 5).sum().backward()
    assert b.grad.tolist() == [[0.0, 0.0, 0.0], [5.0, 5.0, 5.0]]


def test_split_with_sizes():
    x = _x()
    a, b = x.split_with_sizes([1, 2], 1)
    assert a.tolist() == [[0.0], [3.0]] and b.tolist() == [[1.0, 2.0], [4.0, 5.0]]
    with pytest.raises(RuntimeError, match=r"expects split_sizes to sum exactly to 3 \(input"):
        x.split_with_sizes([1, 1], 1)
    g = _x().requires_grad_()
    (g.split_with_sizes([1, 2], 1)[0] * 2).sum().backward()
    assert g.grad.tolist() == [[2.0, 0.0, 0.0], [2.0, 0.0, 0.0]]


def test_hsplit_vsplit_dsplit():
    assert fg.arange(16.0).reshape(4, 4).hsplit([1, 3])[1].tolist() == [
        [1.0, 2.0],
        [5.0, 6.0],
        [9.0, 10.0],
        [13.0, 14.0],
    ]
    assert fg.arange(12.0).reshape(4, 3).vsplit(2)[1].tolist() == [
        [6.0, 7.0, 8.0],
        [9.0, 10.0, 11.0],
    ]
    with pytest.raises(RuntimeError, match="the size of the dimension 3 is not divisible by"):
        fg.arange(6.0).reshape(3, 2).vsplit(2)
    a, b = fg.arange(12.0).reshape(2, 3, 2).dsplit(2)
    assert a.reshape(-1).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert b.reshape(-1).tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    pieces = fg.arange(12.0).reshape(2, 2, 3).dsplit([1, 2])
    assert [p.reshape(-1).tolist() for p in pieces] == [
        [0.0, 3.0, 6.0, 9.0],
        [1.0, 4.0, 7.0, 10.0],
        [2.0, 5.0, 8.0, 11.0],
    ]
    with pytest.raises(RuntimeError, match="at least 3 dimension, but got a tensor with 2"):
        fg.arange(6.0).reshape(3, 2).dsplit(2)
    with pytest.raises(RuntimeError, match="dimension 2, but the size of the dimension 3 is not"):
        fg.arange(12.0).reshape(2, 2, 3).dsplit(2)


def test_inner_and_mv():
    x = _x()
    assert x.inner(x).tolist() == [[5.0, 14.0], [14.0, 50.0]]
    assert fg.tensor([1.0, 2.0]).inner(fg.tensor([3.0, 4.0])).item() == 11.0
    assert fg.tensor(2.0).inner(fg.tensor([1.0, 2.0])).tolist() == [2.0, 4.0]
    assert x.mv(fg.ones(3)).tolist() == [3.0, 12.0]
    with pytest.raises(RuntimeError):
        fg.ones(2, 3).mv(fg.ones(2))


def test_deg2rad_rad2deg():
    assert np.allclose(fg.tensor([180, 90]).deg2rad().numpy(), [3.1416, 1.5708], atol=1e-4)
    assert fg.tensor([180.0]).deg2rad().dtype is fg.float32
    assert fg.tensor([1.0], dtype=fg.float64).deg2rad().dtype is fg.float64
    assert np.allclose(fg.tensor([True]).deg2rad().numpy(), [0.0175], atol=1e-4)
    assert np.allclose(fg.tensor([3.14159]).rad2deg().numpy(), [179.9999], atol=1e-4)
    with pytest.raises(RuntimeError, match="result type float32 can't be cast to the desired"):
        fg.tensor([180]).deg2rad_()
    t = fg.tensor([180.0, 90.0])
    assert t.deg2rad_() is t and np.allclose(t.numpy(), [math.pi, math.pi / 2])
    t.rad2deg_()
    assert np.allclose(t.numpy(), [180.0, 90.0])
    a = fg.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    a.deg2rad().sum().backward()
    assert np.allclose(a.grad.numpy(), [0.01745329238474369] * 3)


def test_hardshrink():
    a = fg.tensor([-1.0, -0.5, 0.0, 0.5, 0.7, math.nan], requires_grad=True)
    y = a.hardshrink()
    y.sum().backward()
    np.testing.assert_array_equal(
        y.detach().numpy(), np.float32([-1.0, 0.0, 0.0, 0.0, 0.7, math.nan])
    )
    assert a.grad.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert _x().hardshrink(2.0).tolist() == [[0.0, 0.0, 0.0], [3.0, 4.0, 5.0]]


def test_multinomial_method():
    fg.manual_seed(0)
    a = fg.tensor([0.0, 0.3, 0.7]).multinomial(2)
    fg.manual_seed(0)
    b = fg.multinomial(fg.tensor([0.0, 0.3, 0.7]), 2)
    assert a.dtype is fg.int64 and a.tolist() == b.tolist()
    assert sorted(a.tolist()) == [1, 2]  # without replacement: both nonzero weights
    rows = fg.tensor([[1.0, 0.0], [0.0, 1.0]]).multinomial(3, replacement=True)
    assert rows.tolist() == [[0, 0, 0], [1, 1, 1]]
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size"):
        fg.tensor([0.5, 0.5]).multinomial(3)


def test_fill_diagonal():
    assert fg.zeros(3, 4).fill_diagonal_(5).tolist() == [
        [5.0, 0.0, 0.0, 0.0],
        [0.0, 5.0, 0.0, 0.0],
        [0.0, 0.0, 5.0, 0.0],
    ]
    tall = [[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0], [0.0, 0.0, 0.0]]
    assert fg.zeros(7, 3).fill_diagonal_(5, wrap=True).tolist() == tall + tall[:3]
    assert fg.zeros(7, 3).fill_diagonal_(5).tolist() == tall + [[0.0] * 3] * 3
    assert fg.zeros(5, 2).fill_diagonal_(1, wrap=True).tolist() == [
        [1.0, 0.0],
        [0.0, 1.0],
        [0.0, 0.0],
        [1.0, 0.0],
        [0.0, 1.0],
    ]
    assert fg.zeros(2, 5).fill_diagonal_(1, wrap=True).tolist() == [
        [1.0, 0.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0, 0.0],
    ]
    assert fg.zeros(2, 2, 2).fill_diagonal_(1).tolist() == [[[1, 0], [0, 0]], [[0, 0], [0, 1]]]
    assert fg.zeros(3, 3, 3).fill_diagonal_(1).sum().item() == 3.0
    assert fg.zeros(2, 3, dtype=fg.int64).fill_diagonal_(2.7).tolist() == [[2, 0, 0], [0, 2, 0]]
    with pytest.raises(RuntimeError, match="all dimensions of input must be of equal length"):
        fg.zeros(2, 3, 2).fill_diagonal_(1)
    with pytest.raises(RuntimeError, match="dimensions must larger than 1"):
        fg.zeros(3).fill_diagonal_(1)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        fg.zeros(3, 3, requires_grad=True).fill_diagonal_(1)
    a = fg.ones(3, 3, requires_grad=True)
    b = a * 2
    b.fill_diagonal_(0)
    b.sum().backward()
    assert a.grad.tolist() == [[0.0, 2.0, 2.0], [2.0, 0.0, 2.0], [2.0, 2.0, 0.0]]
    v = fg.zeros(4, 4)
    v[1:, 1:].fill_diagonal_(3)  # through a view: lands in v
    assert v.diagonal().tolist() == [0.0, 3.0, 3.0, 3.0]


def test_new():
    x = _x()
    n = x.new(2, 3)
    assert n.shape == (2, 3) and n.dtype is fg.float32 and n.sum().item() == 0.0
    assert x.new([1, 2]).dtype is fg.float32 and x.new().shape == (0,)
    assert x.new(fg.Size([2])).shape == (2,)
    assert fg.ones(2, dtype=fg.int64).new([1.5, 2]).tolist() == [1, 2]
    assert fg.ones(2, dtype=fg.float64).new(2).dtype is fg.float64
    assert x.new((1.0, 2.0)).tolist() == [1.0, 2.0]
    same = fg.arange(4.0)
    assert x.new(same).tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(TypeError, match=r"new\(\): data must be a sequence \(got float\)"):
        x.new(2.5)
    with pytest.raises(TypeError, match="expected a tensor of dtype float32"):
        x.new(fg.tensor([1, 2]))
    with pytest.raises(TypeError, match="unexpected keyword argument 'dtype'"):
        x.new([1, 2], dtype=fg.int64)
    with pytest.raises(TypeError, match="a tuple of ints is data in torch"):
        x.new((2, 3))


def test_storage_offset():
    x = fg.arange(24.0).reshape(2, 3, 4)
    offsets = [
        x[1, :, 2:],
        x.permute(2, 0, 1)[1],
        x.select(2, 3),
        x.narrow(1, 1, 2)[0][1],
        x.view(6, 4)[3:],
        x.unsqueeze(0)[0, 1, 2],
        x[1][::2, 1:],
        x[:, 1].t()[2],
        x.split_with_sizes([1, 2], 1)[1],
        x[1] + 1,
        x[1].contiguous(),
        x.unbind(1)[2],
        x.chunk(2, 2)[1],
    ]
    assert [t.storage_offset() for t in offsets] == [14, 1, 3, 8, 12, 20, 13, 6, 4, 0, 12, 8, 2]
    assert x.storage_offset() == 0 and x[0, :0].storage_offset() == 0


@pytest.mark.cpu_device  # (a CPU tensor's answers: a cuda one's are torch's too)
def test_pin_memory_and_share_memory():
    x = _x()
    assert x.share_memory_() is x
    if fg.cuda.is_available():
        pinned = x.pin_memory()
        assert pinned is not x and pinned.tolist() == x.tolist()
    else:  # torch raises too without a GPU
        with pytest.raises(RuntimeError, match="pinned memory needs the cuda device"):
            x.pin_memory()


def test_angle_of_real_tensors_is_torchs():
    """torch 2.14: pi for negatives (and -inf), 0 at +-0, NaN at NaN; gradient zeros."""
    x = fg.tensor([-1.5, 0.0, -0.0, 2.0, float("nan"), float("-inf")], requires_grad=True)
    a = x.angle()
    pi = np.float32(math.pi)
    np.testing.assert_array_equal(a.numpy(), np.array([pi, 0, 0, 0, np.nan, pi], np.float32))
    assert not np.signbit(a.numpy()[2])
    a.sum().backward()
    assert x.grad.tolist() == [0.0] * 6
    assert fg.angle(fg.tensor([-3, 0, 2])).dtype == fg.float32
    assert fg.tensor([True, False]).angle().tolist() == [0.0, 0.0]
    assert fg.tensor([-1.0], dtype=fg.float16).angle().dtype == fg.float16


def test_all_and_any_of_uint8_are_uint8_as_torchs():
    u = fg.tensor([1, 2, 0], dtype=fg.uint8)
    assert u.all().dtype == fg.uint8 and u.all().item() == 0 and u.any().item() == 1
    assert fg.tensor([[1, 0]], dtype=fg.uint8).any(1).tolist() == [1]
    assert fg.tensor([], dtype=fg.uint8).all().item() == 1
    assert fg.tensor([1, 0]).all().dtype == fg.bool and fg.tensor([3.0]).any().dtype == fg.bool


@pytest.mark.parametrize("keepdim", [False, True])
def test_all_and_any_against_numpy_at_nan_signed_zeros_and_every_axis(keepdim):
    """all/any are one max over 0/1 values (not through amin and amax): numpy's answers,
    NaN counting as nonzero and -0.0 as zero, over each axis, several and all."""
    a = np.array([[[0.0, -0.0], [np.nan, 1.0]], [[2.0, 3.0], [-1.0, 0.0]]], dtype=np.float32)
    x = fg.tensor(a)
    for dim in (None, 0, 1, 2, -1, (0, 2)):
        for name in ("all", "any"):
            want = getattr(np, name)(a, axis=dim, keepdims=keepdim)
            got = (
                getattr(x, name)()
                if dim is None and not keepdim
                else getattr(x, name)(dim if dim is not None else (0, 1, 2), keepdim=keepdim)
            )
            assert got.dtype == fg.bool and got.tolist() == want.tolist(), (name, dim)


def test_put_writes_flat_positions_as_torchs():
    x = fg.arange(60.0).reshape(3, 4, 5)
    x.put_(fg.tensor([0, 0, 59]), fg.tensor([1.0, 2.0, 3.0]), accumulate=True)
    assert x.reshape(-1)[:2].tolist() == [3.0, 1.0] and x.reshape(-1)[-1].item() == 62.0
    y = fg.zeros(2, 3)
    assert y.put(fg.tensor([-1, 1]), fg.tensor([5.0, 6.0])).tolist() == [
        [0.0, 6.0, 0.0],
        [0.0, 0.0, 5.0],
    ]
    assert y.tolist() == [[0.0] * 3] * 2  # (put is out of place)
    w = fg.zeros(2, 2, requires_grad=True)  # torch's gradient: 0 where written, else 1
    w.put(fg.tensor([0]), fg.tensor([9.0])).sum().backward()
    assert w.grad.tolist() == [[0.0, 1.0], [1.0, 1.0]]
    with pytest.raises(ValueError, match="same number of elements"):
        fg.zeros(3).put_(fg.tensor([0, 1]), fg.tensor([1.0]))
