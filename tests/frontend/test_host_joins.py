"""Joins of computed pieces in host memory (frontend/movement.py, `_host_values`): `cat` and
`stack` of many pieces, or of few bytes, whose values are all computed, of one dtype and
needing no gradient, are copied by numpy at once, without a kernel; any other join stays
in the graph. Values, bits and dtypes are torch.cat's and torch.stack's either way."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import movement
from fusegrad.ir.ops import Ops
from fusegrad.runtime.engine import engine

# on the CPU whatever the test device: joins of pieces in host memory, not a device's
pytestmark = pytest.mark.cpu_device

NEG0 = np.float32(-0.0)


def sentences(count: int, seed: int = 0) -> list[np.ndarray]:
    """`count` int64 pieces of 5..29 token ids: a dataset's lines before they are joined."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, size=int(rng.integers(5, 30))) for _ in range(count)]


def scheduled() -> int:
    return engine.stats["scheduled"]


@pytest.mark.parametrize("count", [1, 2, 8, 300])
def test_a_dataset_s_lines_join_without_a_kernel(count):
    """The word language model's `torch.cat([torch.tensor(ids) for line in file])`: 1,500
    pieces made one kernel that took a second to compile, and another at each new
    set of lengths."""
    lines = sentences(count)
    before = scheduled()
    out = fg.cat([fg.tensor(a) for a in lines])
    assert out.node.op is Ops.BUFFER and scheduled() == before
    np.testing.assert_array_equal(out.numpy(), np.concatenate(lines))
    assert out.dtype is fg.int64 and out.is_leaf and not out.requires_grad


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack_of_computed_pieces_along_each_axis(dim):
    rng = np.random.default_rng(1)
    pieces = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(10)]
    pieces[0][0, 0], pieces[9][2, 3] = NEG0, np.nan
    out = fg.stack([fg.tensor(p) for p in pieces], dim)
    want = np.stack(pieces, dim)
    assert out.node.op is Ops.BUFFER and out.shape == want.shape
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_array_equal(np.signbit(out.numpy()), np.signbit(want))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "bool", "uint8", "float64"])
def test_joins_on_the_host_keep_each_dtype_s_bits(dtype):
    values = np.array([NEG0, 0.0, -1.0, 1.0, np.inf, -np.inf, np.nan, 2.5], np.float32)
    pieces = [fg.tensor(values * (k + 1)).to(getattr(fg, dtype)).realize() for k in range(9)]
    out = fg.cat(pieces)
    assert out.node.op is Ops.BUFFER and out.dtype is getattr(fg, dtype)
    want = np.concatenate([p.float().numpy() for p in pieces])
    got = out.float().numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_columns_of_rows_join_along_the_second_axis():
    pieces = [np.arange(6 * k, 6 * k + 6).reshape(2, 3) for k in range(8)]
    out = fg.cat([fg.tensor(p) for p in pieces], dim=1)
    assert out.node.op is Ops.BUFFER
    np.testing.assert_array_equal(out.numpy(), np.concatenate(pieces, 1))


def test_the_joined_copy_does_not_follow_later_writes_to_a_piece():
    pieces = [fg.tensor([float(k), -float(k)]) for k in range(8)]
    out = fg.cat(pieces)
    pieces[3].add_(100.0)
    pieces[0].zero_()
    assert out.tolist()[:8] == [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0]
    out[0] = 7.0  # and writes to the join stay there
    assert pieces[0].tolist() == [0.0, 0.0]


def test_pieces_needing_a_gradient_stay_in_the_graph():
    xs = [fg.tensor([1.0, -2.0], requires_grad=True) for _ in range(8)]
    out = fg.cat(xs)
    assert out.node.op is not Ops.BUFFER and out.requires_grad
    (out * fg.arange(16.0)).sum().backward()
    for k, x in enumerate(xs):
        assert x.grad.tolist() == [2.0 * k, 2.0 * k + 1]


def test_under_no_grad_pieces_that_require_grad_join_on_the_host():
    xs = [fg.tensor([1.0, -0.0], requires_grad=True) for _ in range(8)]
    with fg.no_grad():
        out = fg.stack(xs)
    assert out.node.op is Ops.BUFFER and not out.requires_grad and out.grad_fn is None
    assert out.shape == (8, 2) and np.signbit(out.numpy()[:, 1]).all()


def test_joins_that_stay_in_the_graph():
    """Lazy pieces, mixed dtypes (promoted by the kernel, as torch), empty results and
    large joins of few pieces (a launch is cheaper than numpy's one-thread copy there)."""
    a = fg.tensor([1.0, 2.0])
    lazy = fg.cat([a * 2] * 8)
    assert lazy.node.op is not Ops.BUFFER and lazy.tolist() == [2.0, 4.0] * 8
    mixed = fg.cat([fg.tensor([1, 2])] * 7 + [fg.tensor([0.5])])
    assert mixed.node.op is not Ops.BUFFER and mixed.dtype is fg.float32
    assert mixed.tolist() == [1.0, 2.0] * 7 + [0.5]
    empty = fg.cat([fg.tensor(np.zeros((0, 3), np.float32))] * 9)
    assert empty.shape == (0, 3)
    big = np.arange(movement.HOST_JOIN_BYTES // 4, dtype=np.float32)
    halves = fg.cat([fg.tensor(big), fg.tensor(-big)])
    assert halves.node.op is not Ops.BUFFER
    np.testing.assert_array_equal(halves.numpy(), np.concatenate([big, -big]))


def test_a_jit_recording_keeps_its_joins_in_the_graph():
    pieces = [fg.tensor([float(k)]) for k in range(8)]

    @fg.jit
    def joined(scale):
        return fg.cat(pieces) * scale

    for s in (1.0, 2.0, 3.0):  # (a join copied on the host while recording: refused)
        np.testing.assert_array_equal(joined(fg.tensor(s)).numpy(), np.arange(8.0) * s)
    pieces[2].fill_(-5.0)
    joined.reset()  # (the step reads the pieces' buffers as recorded until reset)
    assert joined(fg.tensor(1.0)).tolist()[2] == -5.0


def test_a_zero_dimensional_piece_is_refused_as_torch():
    with pytest.raises(RuntimeError, match=r"zero-dimensional tensor \(at position 1\)"):
        fg.cat([fg.tensor([1.0]), fg.tensor(2.0)])
    assert fg.stack([fg.tensor(1.0), fg.tensor(NEG0)]).tolist() == [1.0, -0.0]
