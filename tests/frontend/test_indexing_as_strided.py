"""`fg.as_strided` / `Tensor.as_strided` (frontend/indexing.py): windows over a tensor's
storage, read through an index table; values and gradients against numpy's
`as_strided` and `np.add.at`, errors as torch 2.14.1's messages."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided as np_as_strided

import fusegrad as fg


def _windows(storage: np.ndarray, size, stride, offset=0) -> np.ndarray:
    item = storage.itemsize
    return np_as_strided(storage[offset:], size, tuple(s * item for s in stride)).copy()


@pytest.mark.parametrize(
    ("size", "stride", "offset"),
    [((3, 3), (1, 1), 0), ((2, 2), (1, 2), 1), ((4,), (3,), 2), ((2, 3), (0, 1), 1), ((), (), 5)],
)
def test_values_are_the_storage_windows(size, stride, offset):
    data = np.arange(12, dtype=np.float64) * 1.5 - 4
    got = fg.tensor(data).as_strided(size, stride, offset)
    assert got.shape == size and got.stride() == stride
    assert got.numpy().tolist() == _windows(data, size, stride, offset).tolist()
    assert fg.as_strided(fg.tensor(data), size, stride, offset).numpy().tolist() == (
        got.numpy().tolist()
    )


def test_gradient_adds_up_over_overlapping_windows():
    data = np.arange(6, dtype=np.float64)
    weights = np.arange(9, dtype=np.float64).reshape(3, 3) - 2
    y = fg.tensor(data, requires_grad=True)
    (y.as_strided((3, 3), (1, 1)) * fg.tensor(weights)).sum().backward()
    want = np.zeros(6)
    np.add.at(want, (np.arange(3)[:, None] + np.arange(3)[None, :]).reshape(-1), weights.ravel())
    assert y.grad.tolist() == want.tolist() == [-2.0, 0.0, 6.0, 8.0, 6.0, 0.0]


def test_gradient_through_an_op_and_an_offset():
    y = fg.arange(6.0, dtype=fg.float64, requires_grad=True)
    z = (y * 2).as_strided((2, 2), (1, 2), 1)
    (z * fg.arange(4.0, dtype=fg.float64).reshape(2, 2)).sum().backward()
    assert y.grad.tolist() == [0.0, 0.0, 4.0, 2.0, 6.0, 0.0]  # torch 2.14.1's


def test_a_view_reads_its_base_storage_as_torch_counts_it():
    x = fg.arange(16.0).reshape(4, 4)
    tail = x[1:].as_strided((2,), (1,))  # the default offset is the view's own: 4
    assert tail.tolist() == [4.0, 5.0] and tail.storage_offset() == 4
    t = x[1:].t().as_strided((2, 2), (1, 4))
    assert t.tolist() == [[4.0, 8.0], [5.0, 9.0]] and t.stride() == (1, 4)
    assert x.t().as_strided((2, 2), (4, 1), 1).tolist() == [[1.0, 2.0], [5.0, 6.0]]
    assert fg.ones(3).expand(2, 3).as_strided((3,), (1,)).tolist() == [1.0, 1.0, 1.0]


def test_a_place_outside_the_tensor_but_in_its_base_raises():
    x = fg.arange(16.0).reshape(4, 4)
    with pytest.raises(IndexError, match="storage place 0 is not an element"):
        x[1:].as_strided((2,), (1,), 0)


def test_writes_land_in_the_tensor():
    w = fg.zeros(6)
    w.as_strided((2, 2), (1, 2), 1).fill_(3.0)
    assert w.tolist() == [0.0, 3.0, 3.0, 3.0, 3.0, 0.0]


def test_empty_and_zero_d():
    x = fg.arange(16.0)
    assert x.as_strided((0, 3), (100, 100), 100).shape == (0, 3)
    assert fg.tensor(5.0).as_strided((2,), (0,)).tolist() == [5.0, 5.0]
    assert x.as_strided([], []).item() == 0.0


@pytest.mark.parametrize(
    ("size", "stride", "offset", "message"),
    [
        (
            (3, 3),
            (5, 5),
            0,
            "setStorage: sizes [3, 3], strides [5, 5], storage offset 0, and itemsize 4 "
            "requiring a storage size of 84 are out of bounds for storage of size 64",
        ),
        (
            (2,),
            (1,),
            15,
            "setStorage: sizes [2], strides [1], storage offset 15, and itemsize 4 requiring a "
            "storage size of 68 are out of bounds for storage of size 64",
        ),
        ((3,), (1, 1), 0, "mismatch in length of strides and shape"),
        (
            (3,),
            (-1,),
            0,
            "as_strided: Negative strides are not supported at the moment, got strides: [-1]",
        ),
        ((-1,), (1,), 0, "Storage size calculation overflowed with sizes=[-1] and strides=[1]"),
        ((2,), (1,), -1, "Tensor: invalid storage offset -1"),
    ],
)
def test_torchs_errors(size, stride, offset, message):
    with pytest.raises(RuntimeError) as info:
        fg.arange(16.0).reshape(4, 4).as_strided(size, stride, offset)
    assert message in str(info.value)


def test_as_strided_in_place_gives_the_tensor_the_strided_view():
    x = fg.arange(6.0)
    assert x.as_strided_((2, 2), (1, 2)) is x
    assert x.shape == (2, 2) and x.tolist() == [[0.0, 2.0], [1.0, 3.0]]
