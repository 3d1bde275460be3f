"""Views (frontend/movement.py): a computed tensor's slice that is one block of its memory
is a buffer over that block, so slicing data at a new offset each step compiles nothing
new; values, writes through the view and gradients stay as before."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir.ops import Ops
from fusegrad.runtime.engine import engine

A = np.arange(60.0).reshape(5, 3, 4)

BLOCKS = [
    np.s_[1:3],
    np.s_[2],
    np.s_[2, 1:3],
    np.s_[0, 0],
    np.s_[4:],
    np.s_[1:2, 0:1],
    np.s_[2, None],
    np.s_[-2:],
    np.s_[0, 2, 1:],
]
NOT_BLOCKS = [
    np.s_[1:3, 0:1],
    np.s_[:, 1],
    np.s_[1:4, :, 2],
    np.s_[..., 1:2],
    np.s_[::2],
    np.s_[0:0],
]


@pytest.mark.parametrize("index", BLOCKS + NOT_BLOCKS, ids=str)
def test_a_slice_of_a_computed_tensor_reads_the_right_values(index):
    x = fg.tensor(A).realize()
    y = x[index]
    assert y.shape == A[index].shape
    np.testing.assert_array_equal(y.numpy(), A[index])


@pytest.mark.parametrize("index", BLOCKS, ids=str)
def test_a_block_of_memory_is_a_buffer_over_it(index):
    # on every device: its address inside the base's memory, at the block's first element
    x = fg.tensor(A).realize()
    y = x[index]
    leaf = y.node
    while leaf.op is Ops.RESHAPE:
        leaf = leaf.srcs[0]
    assert leaf.op is Ops.BUFFER and leaf.arg.device == x.node.arg.device
    first = int(np.asarray(A[index]).flat[0])  # (A's values are their places)
    assert leaf.arg.ptr == x.node.arg.ptr + first * x.element_size()
    assert leaf.arg.size == A[index].size


def test_slices_at_new_offsets_compile_no_new_schedule():
    # a language model's get_batch: source[i : i + bptt], i moving every step
    source = fg.tensor(np.arange(400.0).reshape(100, 4)).realize()
    w = fg.tensor(np.ones((4, 2)))
    out = [(source[i : i + 10] @ w).sum().item() for i in range(0, 40, 10)]
    before = engine.stats["scheduled"]
    out += [(source[i : i + 10] @ w).sum().item() for i in range(40, 90, 10)]
    assert engine.stats["scheduled"] == before  # (on every device)
    want = [float(np.arange(400.0).reshape(100, 4)[i : i + 10].sum() * 2) for i in range(0, 90, 10)]
    assert out == want


def test_writes_through_a_block_view_land_in_the_base():
    x = fg.arange(10.0).realize()
    v = x[2:5]
    v[0] = -1.0
    v += 100.0
    assert x.tolist() == [0.0, 1.0, 99.0, 103.0, 104.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert v.tolist() == [99.0, 103.0, 104.0]


def test_a_parameter_s_slice_stays_in_the_graph():
    # a tensor that requires grad is sliced as a view in the graph: its gradient flows
    w = fg.tensor(A, requires_grad=True)
    (w[1:3] * 2.0).sum().backward()
    want = np.zeros_like(A)
    want[1:3] = 2.0
    np.testing.assert_array_equal(w.grad.numpy(), want)


def test_the_block_keeps_its_memory_alive_after_the_base_is_gone():
    x = fg.tensor(np.arange(1 << 16, dtype=np.float32)).realize()
    y = x[100:200]
    del x
    for _ in range(3):  # allocations that would reuse freed memory of that size
        fg.tensor(np.zeros(1 << 16, dtype=np.float32)).realize()
    np.testing.assert_array_equal(y.numpy(), np.arange(100, 200, dtype=np.float32))


@pytest.mark.parametrize(
    "values",
    [
        np.array([[0.0, -0.0], [np.nan, np.inf], [-np.inf, 1.0], [-1.0, 0.5]], np.float32),
        np.array([[0, -1], [2**31 - 1, -(2**31)], [7, 7], [1, 0]], np.int32),
        np.array([[True, False], [False, False], [True, True], [False, True]]),
    ],
    ids=["float-special", "int32-ends", "bool"],
)
def test_block_views_keep_every_bit_at_the_ends(values):
    # -0.0, NaN, infinities, int32's ends and bools read back exactly, for the first row,
    # the last, a single element (0-d) and the whole block of the last rows
    x = fg.tensor(values).realize()
    for index in (np.s_[0], np.s_[-1], np.s_[3:4], np.s_[1, 0], np.s_[2:], np.s_[0, 1:]):
        got, want = x[index].numpy(), values[index]
        assert got.shape == want.shape and got.dtype == want.dtype
        assert got.tobytes() == want.tobytes(), index


def test_a_gradient_through_a_product_with_a_block_view():
    # the view is data; the gradient of what multiplies it is that data, -0.0 included
    data = fg.tensor(np.array([[1.0, -0.0], [2.0, -3.0], [0.5, 4.0]])).realize()
    w = fg.tensor([1.0, 1.0], requires_grad=True)
    (data[1:3] * w).sum().backward()
    assert w.grad.tolist() == [2.5, 1.0]
    w.grad = None
    (data[0] * w).sum().backward()
    assert w.grad.tolist() == [1.0, -0.0] and np.signbit(w.grad.numpy()[1])


def test_iterating_a_computed_tensor_gives_its_rows_as_indexing_does():
    """`for row in x` over a value in host memory: each row what `x[k]` is (its values,
    shape, strides, a buffer over its block, and writes landing in `x`), built at once."""
    x = (fg.arange(24).reshape(2, 3, 4) + 0).realize()
    rows = list(x)
    for k, row in enumerate(rows):
        want = x[k]
        assert row.tolist() == want.tolist() and row.shape == want.shape == (3, 4)
        assert row.stride() == want.stride() and row.node.op is want.node.op
    inner = [[int(v) for v in r] for r in rows[1]]  # a row of a row: a reshape of a buffer
    assert inner == x[1].tolist()
    rows[1][2].add_(100)
    assert x[1, 2].tolist() == [120, 121, 122, 123] and x[0, 2].tolist() == [8, 9, 10, 11]


def test_iterating_a_tensor_with_a_gradient_or_no_elements_per_row_takes_its_slices():
    w = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    rows = list(w)
    assert all(r.requires_grad for r in rows)
    (rows[0] * 2 + rows[2]).backward()
    assert w.grad.tolist() == [2.0, 0.0, 1.0]
    empty = fg.zeros(3, 0)
    assert [r.shape for r in empty] == [(0,), (0,), (0,)]
    assert [float(v) for v in fg.tensor([-0.0, 1.5])] == [-0.0, 1.5]
    assert str(float(list(fg.tensor([-0.0]))[0])) == "-0.0"
