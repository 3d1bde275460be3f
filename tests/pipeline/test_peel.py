"""pipeline/peel.py: a tiled kernel's edges peeled off its loops so its interior runs with no
bounds test. Values are the convolutions' tests' (tests/nn/test_depthwise_conv.py); these
check where the loops are cut, what is left alone, and the bound on the copies."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir.symbolic import Var, lin
from fusegrad.nn import functional as F
from fusegrad.pipeline.loopir import Load, Loop
from fusegrad.pipeline.peel import PEEL_MAX_COPIES, interior_of, peel_guarded_loops

pytestmark = pytest.mark.cpu_device  # the CPU lowering's peeled loops


def test_the_interior_is_where_every_guard_on_the_variable_holds():
    o, t, r = Var("o", 0, 6), Var("t", 0, 15), Var("r", 0, 2)
    assert interior_of(o, [o * 8 + r - 1, o * -8 - r + 56]) == (1, 6)  # -8o - 2 + 56 >= 0
    assert interior_of(o, [o * 16 + t - 1]) == (1, 6)
    assert interior_of(o, [o * -16 - t + 55]) == (0, 2)  # the ragged last column
    assert interior_of(o, [t - 3]) is None  # no guard on o
    assert interior_of(o, [(lin(o) * 3 + t) // 4 - 1]) is None  # inside a division
    assert interior_of(o, [o - 7]) == (7, 6)  # empty: never all true


def _loads(body):
    for s in body:
        if isinstance(s, Loop):
            yield from _loads(s.body)
        elif isinstance(s, Load):
            yield s


def _lowered(t):
    (kernel,) = [k for k in fg.kernels(t) if k.name.startswith("r_pad_sum")]
    return kernel.loop


def test_a_depthwise_kernel_has_an_unguarded_interior_within_the_copy_bound():
    x, w = fg.randn(2, 8, 20, 56).realize(), fg.randn(8, 1, 3, 3).realize()
    loop = _lowered(F.conv2d(x, w, None, 1, 1, 1, 8))
    loads = [ld for ld in _loads(loop.body) if ld.param.name == "in0"]
    plain = [ld for ld in loads if not ld.valid]
    assert plain and len(plain) < len(loads)
    # 9 taps, each one load statement in the unpeeled tile
    assert len(loads) <= 9 * PEEL_MAX_COPIES


def test_a_kernel_without_guarded_taps_is_left_alone():
    a, b = fg.randn(40, 64).realize(), fg.randn(64, 17).realize()  # a ragged matmul
    (k,) = fg.kernels(a @ b)
    assert peel_guarded_loops(k.loop) is k.loop
    np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)


def test_a_depthwise_weight_gradient_takes_a_grid_of_taps_and_wide_lanes():
    """Peeled, its lanes along the sum take 16 over 56-pixel rows (the ragged vector is an
    iteration of its own) and its tile is every tap at once, 3 x 3 accumulators sharing each
    load of the output gradient; a dense convolution's weight gradient keeps its grid of
    output channels by kernel columns, its lanes as wide (the last vector masked)."""
    from fusegrad.pipeline.tile_choice import wide_registers

    x, gy = fg.randn(2, 8, 20, 56).realize(), fg.randn(2, 8, 20, 56).realize()
    w = fg.randn(8, 1, 3, 3).realize().requires_grad_()
    (dw,) = fg.grad(F.conv2d(x, w, None, 1, 1, 1, 8), [w], grad_outputs=gy)
    (tiled,) = [k for k in fg.kernels(dw) if k.name.startswith("r_pad_sum")]
    lanes = 16 if wide_registers() else 8
    assert f"3 x 3 rows x {lanes} lanes along the sum" in tiled.loop.tile_note
    wd = fg.randn(8, 8, 3, 3).realize().requires_grad_()
    (dwd,) = fg.grad(F.conv2d(x, wd, None, 1, 1), [wd], grad_outputs=gy)
    notes = [k.loop.tile_note for k in fg.kernels(dwd) if "along the sum" in k.loop.tile_note]
    assert notes and all(f" x {lanes} lanes along the sum" in n for n in notes), notes
    xd, gd = x.numpy().astype(np.float64), gy.numpy().astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(xd, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)
    )
    want = np.einsum("nohw,nchwij->ocij", gd, windows)
    np.testing.assert_allclose(dwd.numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_depthwise_1d_forward_streams_rows_in_order_with_lanes_along_them():
    """Each row tile of a 1-D depthwise convolution is its own channels (no vector load the
    rows share): the batch stays the parallel loop and each tile walks its rows in order,
    not the columns outermost as for a matmul's shared panel; a 7-tap window (a short sum)
    still puts its lanes along the output row, not along the taps."""
    x = fg.randn(4, 64, 1024).realize()
    for k in (3, 7):
        y = F.conv1d(x, fg.randn(64, 1, k).realize(), None, 1, k // 2, 1, 64)
        (kernel,) = fg.kernels(y)
        assert "along the sum" not in kernel.loop.tile_note, kernel.loop.tile_note
        assert kernel.loop.parallel_extent == 4  # the batch
        assert kernel.loop_ir.splitlines()[1].strip() == "parallel for o0 in 0..4:"


def _padded_kernel(t):
    (kernel,) = [k for k in fg.kernels(t) if k.name.startswith("e_pad")]
    return kernel.loop


def test_a_padded_copy_has_an_unguarded_interior_at_special_points():
    """A padded copy (no sum) is peeled too: guarded per element, LLVM vectorized it with
    masked gathers (a conv's padded input at under half a plain copy's bandwidth). Its
    interior is a plain copy; the values, -0.0, inf and NaN included, are numpy's pad."""
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.5], np.float32)
    xn = np.resize(special, (2, 3, 5, 7)).astype(np.float32)
    xn[1, 2] = -0.0
    x = fg.tensor(xn)
    for pads in ([1, 1, 1, 1], [2, 0, 0, 3], [0, 0, 1, 2], [3, 1, 0, 0, 1, 1]):
        y = F.pad(x, pads)
        loads = [ld for ld in _loads(_padded_kernel(y).body)]
        assert any(not ld.valid for ld in loads), pads
        assert len(loads) <= PEEL_MAX_COPIES
        width = [(0, 0)] * (4 - len(pads) // 2) + [
            (pads[k], pads[k + 1]) for k in range(len(pads) - 2, -1, -2)
        ]
        want = np.pad(xn, width)
        got = y.numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 kept, pads +0


@pytest.mark.parametrize("transposed", [False, True])
def test_a_right_operand_packed_in_panels_copies_all_but_its_last_panel_unguarded(transposed):
    """A product's right operand of 600 columns packed in panels of 32, the last one padded
    with zeros: the pack's guards depend on the panel, its parallel loop, so that loop is
    cut into a range of the 18 whole panels, a plain copy, and the last (`Loop.first`).
    Read along its rows (a gradient's) or down its columns (a linear layer's weight); the
    product's values at special points are the operand's."""
    special = np.array([0.0, -0.0, 1.0, -1.0, 3e38, -3e38, 0.5, 2.0], np.float32)
    w0 = np.resize(special, (600, 1024)).astype(np.float32)  # 2.4 MB: packed
    x0 = np.eye(1024, dtype=np.float32)  # each product one of w's values
    x = fg.tensor(x0)
    y = F.linear(x, fg.tensor(w0)) if transposed else x @ fg.tensor(w0.T.copy())
    pack = _padded_kernel(y)
    ranges = [s for s in pack.body if isinstance(s, Loop) and s.kind == "parallel"]
    assert [(r.first, r.extent) for r in ranges] == [(0, 18), (18, 1)], pack
    assert not any(ld.valid for ld in _loads(ranges[0].body))
    np.testing.assert_array_equal(y.numpy(), w0.T)


def test_an_im2col_copy_loops_over_its_digits_with_an_unguarded_interior():
    """A 3x3 convolution's windows gathered into a matrix (im2col: 8x8 images' 1024 pixels
    by 256 channels' 2304 taps): the pixel and tap loops read as digits (`o // 64`, `o //
    8 % 8`, `o % 8`; `o // 9`, `o // 3 % 3`, `o % 3`) become one loop a digit
    (`split_digits`), so no index divides and the edges peel off; the convolution's values
    are numpy's, windows at every border and special values in the input."""
    special = np.array([0.0, -0.0, 1.0, -1.0, 1e30, -1e30, 0.5, 2.0], np.float32)
    xn = np.resize(special, (16, 256, 8, 8)).astype(np.float32)
    wn = np.random.default_rng(5).standard_normal((256, 256, 3, 3)).astype(np.float32) * 1e-30
    y = F.conv2d(fg.tensor(xn), fg.tensor(wn), padding=1)
    (pack,) = [k for k in fg.kernels(y) if k.name.startswith("e_pad_1024x2304")]
    loops = [s for s in pack.loop.body if isinstance(s, Loop)]
    assert [(s.kind, s.extent) for s in loops] == [("parallel", 16)]  # the batch digit
    text = str(pack.loop)
    assert "//" not in text and "%" not in text
    assert any(not ld.valid for ld in _loads(pack.loop.body))
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(xn.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)
    )  # (16, 256, 8, 8, 3, 3)
    want = np.einsum("ncyxij,ocij->noyx", windows, wn.astype(np.float64))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_a_padded_producer_and_a_crop_keep_their_values():
    """relu's gradient written into a padded buffer (a conv's input gradient reads it): the
    producer is peeled with its pad; a negative pad (a crop) is a plain view, no guards."""
    xn = np.array([[-1.0, 0.0, -0.0, 2.0, np.nan, np.inf]], np.float32).repeat(3, 0)
    gn = np.arange(18, dtype=np.float32).reshape(3, 6) - 9
    x, g = fg.tensor(xn), fg.tensor(gn)
    y = F.pad(fg.where(x > 0, g, fg.zeros_like(g)), [2, 1, 1, 0])
    want = np.pad(np.where(xn > 0, gn, 0), [(1, 0), (2, 1)])
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(F.pad(x, [-1, -2]).numpy(), xn[:, 1:-2])


def test_an_interleave_is_split_into_its_phases_at_special_points():
    """A stack along a new last axis, flattened into the one before it, is an interleave:
    element o of a row is piece o % s at o // s. Split into its phases (`split_phases`),
    its loop IR divides nothing, and each piece's bits come through (-0.0, NaNs of either
    sign, infinities), for strides 2 to 4 and along the rows as well as the columns."""
    from fusegrad.pipeline.peel import PHASE_MAX_COPIES

    special = np.array([-0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan], np.float32)
    for s in (2, 3, 4):
        pieces = [np.resize(special * (k + 1), (5, 7)).astype(np.float32) for k in range(s)]
        for axis in (-1, 1):
            y = fg.stack([fg.tensor(p) for p in pieces], axis)
            y = y.reshape(5, 7 * s) if axis == -1 else y.reshape(5 * s, 7)
            want = np.stack(pieces, axis).reshape(y.shape)
            (kernel,) = fg.kernels(y)
            body = kernel.loop_ir.split("\n", 9)[-1]
            assert "//" not in body and "%" not in body, kernel.loop_ir
            got = y.numpy()
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # two axes, each of stride 4: 16 copies, the most allowed; values still numpy's
    a = np.arange(4 * 4 * 3 * 5, dtype=np.float32).reshape(4, 4, 3, 5)
    y = fg.tensor(a).permute(2, 0, 3, 1).reshape(12, 20) * 2
    assert PHASE_MAX_COPIES == 16
    np.testing.assert_array_equal(y.numpy(), a.transpose(2, 0, 3, 1).reshape(12, 20) * 2)


def test_a_kernel_with_a_sum_or_mixed_divisors_is_not_split():
    """Only a kernel with no sum is split, and only a loop whose every division is by one
    stride of 2 to 4 (`o // 3` beside `o % 2` is no interleave)."""
    from fusegrad.ir.dtypes import float32
    from fusegrad.pipeline.loopir import Kernel, Param, Store
    from fusegrad.pipeline.peel import split_phases

    o = Var("o", 0, 11)
    src, out = Param("in0", float32, 12, False), Param("out0", float32, 12, True)
    mixed = [Load("v", float32, src, lin(o) // 3 + (lin(o) % 2) * 4), Store(out, lin(o), "v")]
    kernel = Kernel("k", [out, src], [Loop(o, 12, mixed)], 1)
    assert split_phases(kernel) is kernel
    wide = [Load("v", float32, src, lin(o) // 6), Store(out, lin(o), "v")]  # stride 6
    kernel = Kernel("k", [out, src], [Loop(o, 12, wide)], 1)
    assert split_phases(kernel) is kernel
    ragged = [Load("v", float32, src, lin(o) // 2), Store(out, lin(o), "v")]
    kernel = Kernel("k", [out, src], [Loop(Var("o", 0, 10), 11, ragged)], 1)  # 11: odd
    assert split_phases(kernel) is kernel
    even = [Load("v", float32, src, lin(o) // 2), Store(out, lin(o), "v")]
    assert split_phases(Kernel("k", [out, src], [Loop(o, 12, even)], 1)).body[0].extent == 6


@pytest.mark.parametrize("width", [8, 16, 32])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "bool"])
def test_a_padded_copy_of_short_rows_copies_each_row_as_one_vector(width, dtype):
    """A padded copy's interior row of 8, 16 or 32 elements is one vector loop
    (`SHORT_ROW_LANES`): left to LLVM it was unrolled and vectorized across the rows with
    gathers. The values, -0.0, inf and NaN included, are numpy's pad, for every dtype."""
    from fusegrad.pipeline.peel import SHORT_ROW_LANES

    assert width in SHORT_ROW_LANES
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.5], np.float32)
    xn = np.resize(special, (3, 4, 5, width))
    if dtype in ("int32", "bool"):
        xn = np.nan_to_num(xn, posinf=7, neginf=-7)
    xn = xn.astype(dtype)
    y = F.pad(fg.tensor(xn), [1, 1, 1, 1])
    loop = _padded_kernel(y)
    assert any(s.kind == "vector" and s.extent == width for s in _loops(loop.body))
    want = np.pad(xn, [(0, 0), (0, 0), (1, 1), (1, 1)])
    got = y.numpy()
    np.testing.assert_array_equal(got, want)
    if dtype.startswith("float"):
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _loops(body):
    for s in body:
        if isinstance(s, Loop):
            yield s
            yield from _loops(s.body)
