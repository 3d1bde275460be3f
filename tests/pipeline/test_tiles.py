"""Register tiles with a ragged edge: vectors of 8 or 16 lanes over axes they do not divide.

An output axis of 28 gets two 16-lane vectors, the second masked past the
end (its loads read nothing there and its store writes nothing); a summed
axis of 28 gets lanes that add zero past the end. These check the values
against numpy over many sizes, and that the tiles really are ragged.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad.pipeline.tile_choice import _vector_width

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def only_kernel(t):
    (k,) = fg.kernels(t)
    return k


def with_special_points(*arrays) -> None:
    """0, -0.0, 1 and -1 written over every 5th, 7th, 9th and 11th element, in place."""
    for x in arrays:
        x.reshape(-1)[::5] = 0.0
        x.reshape(-1)[1::7] = -0.0
        x.reshape(-1)[2::9] = 1.0
        x.reshape(-1)[3::11] = -1.0


@pytest.fixture
def host(monkeypatch, tmp_path):
    """`host(wide)`: kernels lowered from here on as on a host with (True) or without
    (False) 32 vector registers, from an empty cache, so that no plan or kernel lowered
    under the other is reused."""
    from fusegrad.pipeline import tile_choice
    from fusegrad.runtime.engine import engine

    def pin(wide: bool) -> None:
        monkeypatch.setattr(tile_choice, "wide_registers", lambda: wide)
        engine.forget_plans(lambda key: True)

    with fg.config.override(cache=str(tmp_path)):
        yield pin
    engine.forget_plans(lambda key: True)


def test_vector_widths_are_powers_of_two():
    assert _vector_width(400, True) == 16
    assert _vector_width(64, True) == 32
    assert _vector_width(28, True) == 16  # two vectors, the second 12 lanes full
    assert _vector_width(10, True) == 16  # one masked vector beats two
    assert _vector_width(10, True, along_sum=True) == 8
    assert _vector_width(28, False) is None  # a max cannot pad with zeros
    assert _vector_width(5, True) is None


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 40), n=st.integers(1, 40))
def test_matmul_with_bias_and_relu_any_size(m, k, n):
    a, b, bias = f32(m, k), f32(k, n), f32(n)
    y = ((fg.tensor(a) @ fg.tensor(b)) + fg.tensor(bias)).relu()
    want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 70), n=st.integers(1, 9))
def test_rows_times_rows_any_size(m, k, n):
    """a @ b.T with both operands contiguous along k: lanes run along the sum."""
    a, b = f32(m, k), f32(n, k)
    y = fg.tensor(a) @ fg.tensor(b).T
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ b.T, rtol=1e-4, atol=1e-4)
    m_ = fg.tensor(a)[:, None, :] + fg.tensor(b)[None, :, :]
    np.testing.assert_array_equal(m_.amax(2).numpy(), (a[:, None, :] + b[None]).max(2))


def test_ragged_output_tile_masks_its_loads_and_store():
    a, b = f32(6, 20), f32(20, 28)
    y = fg.tensor(a) @ fg.tensor(b)
    k = only_kernel(y)
    ir = k.llvm_ir_optimized
    assert "vector for t in 0..16" in k.loop_ir
    assert "llvm.masked.store" in ir and "llvm.masked.load" in ir
    assert "gather" not in ir  # the broadcast operand is read unmasked, as a scalar
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_ragged_lanes_of_a_sum():
    a, b = f32(8, 28), f32(4, 28)
    y = fg.tensor(a) @ fg.tensor(b).T
    k = only_kernel(y)
    assert "vector for t in 0..16" in k.loop_ir and "add over" in k.loop_ir
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ b.T, rtol=1e-4, atol=1e-4)


def test_tile_rows_live_in_registers():
    """Each row of a tile is one vector value in the optimized IR, not an array in memory."""
    a, b = f32(64, 150), f32(150, 28)
    k = only_kernel(fg.tensor(a) @ fg.tensor(b))
    ir = k.llvm_ir_optimized
    assert "alloca" not in ir, "a tile accumulator was left in memory"


@pytest.mark.parametrize("width", [28, 14, 10])
def test_conv_weight_gradient_at_mnist_widths(width):
    from fusegrad.nn import functional as F

    x = fg.tensor(f32(4, 3, width, width))
    w = fg.tensor(f32(5, 3, 5, 5), requires_grad=True)
    y = F.conv2d(x, w, padding=2)
    (y * y).sum().backward()
    xd, wd = x.numpy().astype(np.float64), w.numpy().astype(np.float64)
    xp = np.pad(xd, ((0, 0), (0, 0), (2, 2), (2, 2)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (5, 5), axis=(2, 3))
    out = np.einsum("nchwij,ocij->nohw", windows, wd)
    grad = np.einsum("nohw,nchwij->ocij", 2 * out, windows)
    np.testing.assert_allclose(y.numpy(), out, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(w.grad.numpy(), grad, rtol=1e-3, atol=1e-2)


def test_weight_gradient_gets_a_grid_of_rows():
    """A conv weight gradient's tile: kernel columns x output channels, lanes along the sum."""
    from fusegrad.nn import functional as F

    x = fg.tensor(f32(8, 6, 14, 14))
    w = fg.tensor(f32(16, 6, 5, 5), requires_grad=True)
    g = f32(8, 16, 10, 10)
    (F.conv2d(x, w) * fg.tensor(g)).sum().backward()
    (k,) = [k for k in fg.kernels(w.grad) if "unrolled for j" in k.loop_ir]
    assert "vector for t in 0..8" in k.loop_ir
    xd = x.numpy().astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(xd, (5, 5), axis=(2, 3))
    want = np.einsum("nohw,nchwij->ocij", g, windows)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("wide", [False, True])
def test_large_matmul_packs_its_right_operand_and_walks_panels_outermost(host, wide):
    """A panel is one 32-lane tile's columns with 32 vector registers (AVX-512); with 16
    (`NARROW_TILE_COLS`) two 16-lane tiles share a panel."""
    host(wide)
    a, b = f32(96, 512), f32(512, 1024)  # b is 2 MiB: packed into 32-column panels
    ta, tb = fg.tensor(a, requires_grad=True), fg.tensor(b, requires_grad=True)
    y = ta @ tb
    ks = fg.kernels(y)
    assert [k.reason for k in ks][0].startswith("matmul: a large right operand packed")
    mm = ks[-1].loop_ir
    assert mm.splitlines()[1].strip().startswith("parallel for o1")  # panels outermost
    if wide:
        assert "vector for t in 0..32" in mm and "%" not in mm and "//" not in mm
    else:
        assert "register tile 6 rows x 16 lanes" in ks[-1].loop.tile_note
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    g = f32(96, 1024)
    (y * fg.tensor(g)).sum().backward()
    np.testing.assert_allclose(tb.grad.numpy(), a.T.astype(np.float64) @ g, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ta.grad.numpy(), g.astype(np.float64) @ b.T, rtol=1e-4, atol=1e-3)


def _lowered(t, monkeypatch, wide: bool):
    """t's one kernel lowered as on a host with (wide) or without 32 vector registers."""
    from fusegrad.ir.ops import Ops
    from fusegrad.pipeline import lower as L
    from fusegrad.pipeline import tile_choice
    from fusegrad.pipeline.schedule import schedule

    monkeypatch.setattr(tile_choice, "wide_registers", lambda: wide)
    (item,) = schedule([t.node], lambda n: n.op is Ops.BUFFER)
    return L.lower(item)


@pytest.mark.parametrize("wide", [False, True])
def test_tile_loop_order_streams_the_smaller_operand(monkeypatch, wide):
    """x @ W.T (x 64x784, W 128x784, a linear layer) in 4 x 2 tiles (16 vector registers):
    with x's row tiles outermost the inner loop would stream all of W once per tile of x
    (12.8 MB); W's tiles go outermost instead, so x (half W's size) is what streams. In
    the 4 x 4 tiles of a host with 32 registers both orders stream as much: the groups'
    own order stays. Bit for bit the same sums either way."""
    x, w = f32(64, 784), f32(128, 784)
    y = fg.tensor(x) @ fg.tensor(w).T
    kernel = _lowered(y, monkeypatch, wide)
    parallel = kernel.body[0]
    assert parallel.var.name == ("o0" if wide else "o1"), kernel
    assert parallel.extent == (16 if wide else 32)
    np.testing.assert_allclose(y.numpy(), x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("wide", [False, True])
def test_wide_registers_give_a_row_tile_twice_the_rows(monkeypatch, wide):
    """A column-vector tile of one 16-lane register per row (a weight gradient, dW = g.T @ x
    with the batch summed) takes 8 rows with 32 vector registers; with 16, 6 rows (of two
    registers: 16 lanes), the last of the 22 tiles over 128 rows shifted back."""
    x, g = f32(64, 784), f32(64, 128)
    dw = fg.tensor(g).T @ fg.tensor(x)
    text = str(_lowered(dw, monkeypatch, wide))
    assert f"unrolled for i in 0..{8 if wide else 6}" in text, text
    np.testing.assert_allclose(dw.numpy(), g.T.astype(np.float64) @ x, rtol=1e-4, atol=1e-3)


def test_weight_gradient_fused_with_its_update_keeps_row_order():
    """A weight gradient whose epilogue reads and writes arrays of its own shape (an SGD
    step fused after it) keeps the rows outermost: those streams then run in order."""
    x, g = f32(64, 784), f32(64, 128)
    w = fg.tensor(f32(128, 784), requires_grad=True)
    opt = fg.optim.SGD([w], lr=0.1, momentum=0.9)
    ((fg.tensor(x) @ w.T) * fg.tensor(g)).sum().backward()
    opt.step()
    (k,) = [k for k in fg.kernels(w) if k.shape == (128, 784)]
    assert k.loop_ir.splitlines()[1].strip().startswith("parallel for o0"), k.loop_ir


@pytest.mark.parametrize("wide", [False, True])
def test_an_output_axis_of_8_mod_16_takes_masked_16_lane_vectors_on_avx512(monkeypatch, wide):
    """With 32 registers of 16 lanes, an output axis of 56 (a convolution's row of pixels)
    is 16, 16, 16 and 8 masked lanes rather than 7 vectors of 8: twice the FLOPs per
    instruction; so do lanes along a sum of 56 (a weight gradient's summed pixels). Below
    `RAGGED_16_FROM` (LeNet's 24), 8 lanes stay."""
    from fusegrad.pipeline import tile_choice

    monkeypatch.setattr(tile_choice, "wide_registers", lambda: wide)
    assert tile_choice._vector_width(56, True) == (16 if wide else 8)
    assert tile_choice._vector_width(40, True) == (16 if wide else 8)
    assert tile_choice._vector_width(24, True) == 8
    assert tile_choice._vector_width(56, True, along_sum=True) == (16 if wide else 8)
    assert tile_choice._vector_width(24, True, along_sum=True) == 8
    assert tile_choice._vector_width(56, False) == 8  # a max cannot mask: no ragged vector
    assert tile_choice._vector_width(48, True) == 16 and tile_choice._vector_width(64, True) == 32


@pytest.mark.parametrize("wide", [False, True])
def test_matmul_of_56_columns_on_either_host(monkeypatch, wide):
    a, b, bias = f32(9, 30), f32(30, 56), f32(56)
    y = ((fg.tensor(a) @ fg.tensor(b)) + fg.tensor(bias)).relu()
    text = str(_lowered(y, monkeypatch, wide))
    assert f"vector for t in 0..{16 if wide else 8}" in text, text
    want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("full_width", [False, True])
def test_a_two_register_row_tile_takes_8_rows_where_avx512_runs_full_width(monkeypatch, full_width):
    """A matmul tile of 32 lanes (two AVX-512 registers a row) takes 8 rows on a host whose
    multiply-adds run on full 512-bit units (Intel's, AMD's Zen 5), 4 on AMD's Zen 4 (its
    tile, tuned there, is kept). The values are the same sums either way."""
    from fusegrad.pipeline import tile_choice

    monkeypatch.setattr(tile_choice, "full_width_fma", lambda: full_width)
    a, b = f32(96, 384), f32(384, 128)
    y = fg.tensor(a) @ fg.tensor(b)
    text = str(_lowered(y, monkeypatch, True))
    assert "vector for t in 0..32" in text, text
    assert f"unrolled for i in 0..{8 if full_width else 4}" in text, text
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("full_width", [False, True])
def test_row_tiles_of_either_host_give_numpys_values_and_gradients(monkeypatch, host, full_width):
    """Forward and both gradients of a matmul with a 32-lane tile, run (not only lowered)
    with either host's rows, on inputs holding 0, -0, +-1 and ties; each size is its own so
    no kernel cached under the other setting is reused."""
    from fusegrad.pipeline import tile_choice

    host(True)
    monkeypatch.setattr(tile_choice, "full_width_fma", lambda: full_width)
    m = 104 if full_width else 88
    a, b, g = f32(m, 256), f32(256, 64), f32(m, 64)
    with_special_points(a, b)
    ta, tb = fg.tensor(a, requires_grad=True), fg.tensor(b, requires_grad=True)
    y = ta @ tb
    rows = 8 if full_width else 4
    assert any(f"register tile {rows} rows x 32 lanes" in k.loop.tile_note for k in fg.kernels(y))
    (y * fg.tensor(g)).sum().backward()
    a64, b64, g64 = (x.astype(np.float64) for x in (a, b, g))
    assert_float32_sum(y.numpy(), a64, b64)
    assert_float32_sum(ta.grad.numpy(), g64, b64.T)
    assert_float32_sum(tb.grad.numpy(), a64.T, g64)


def assert_float32_sum(got: np.ndarray, left: np.ndarray, right: np.ndarray) -> None:
    """`got` is `left @ right` summed in float32 in any order: within the bound of such a
    sum's rounding, K float32 epsilons of the sum of |terms| (a result near 0 from large
    terms that cancel may be off by more than any fixed tolerance, depending on the data)."""
    k = left.shape[1]
    bound = k * 2.0**-23 * (np.abs(left) @ np.abs(right))
    err = np.abs(got.astype(np.float64) - left @ right)
    assert np.all(err <= bound), (err.max(), np.unravel_index(np.argmax(err - bound), err.shape))


def test_full_width_fma_is_not_claimed_for_zen_4(monkeypatch):
    """Zen 4 keeps its tile (256-bit halves); Zen 5 runs 512-bit FMAs whole, as Intel's
    server cores do; a host without AVX-512 has no 512-bit FMA."""
    import llvmlite.binding as llvm

    from fusegrad.pipeline import tile_choice

    for name, wide, want in [
        ("znver4", True, False),
        ("znver5", True, True),
        ("sapphirerapids", True, True),
        ("skylake", False, False),
    ]:
        monkeypatch.setattr(llvm, "get_host_cpu_name", lambda name=name: name)
        monkeypatch.setattr(tile_choice, "wide_registers", lambda wide=wide: wide)
        tile_choice.full_width_fma.cache_clear()
        try:
            assert tile_choice.full_width_fma() is want, name
        finally:
            tile_choice.full_width_fma.cache_clear()


@pytest.mark.parametrize("rows, tile", [(50, 5), (10, 5), (14, 7), (13, 1)])
def test_an_odd_row_count_takes_rows_of_its_largest_small_divisor(host, rows, tile):
    """A row axis that 4 does not divide (a 1-D convolution's input gradient over 50
    word-vector channels) is unrolled by its largest divisor up to 8, so each vector loaded
    along the columns serves several rows; a prime count keeps one row (with 32 vector
    registers: `test_narrow_tiles_hold_at_most_twelve_accumulators` has 16)."""
    host(True)
    a, b = f32(rows, 40), f32(40, 48)
    y = fg.tensor(a) @ fg.tensor(b)
    ir = only_kernel(y).loop_ir
    assert f"unrolled for i in 0..{tile or 1}:" in ir, ir
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_sentiment_conv1d_input_gradient_takes_row_tiles():
    """The sentiment CNN's conv1d (50 word-vector channels -> 100 maps, k = 5): its input
    gradient's tile unrolls 5 of the 50 channels (66 -> 208-227 GFLOP/s on the Intel Xeon)."""
    from fusegrad.nn import functional as F

    x = fg.tensor(f32(10, 50, 52), requires_grad=True)
    w = fg.tensor(f32(100, 50, 5))
    g = f32(10, 100, 48)
    (F.conv1d(x, w) * fg.tensor(g)).sum().backward()
    (k,) = [k for k in fg.kernels(x.grad) if k.loop_ir.count("reduce") or "acc" in k.loop_ir]
    assert "unrolled for i in 0..5" in k.loop_ir, k.loop_ir
    gp = np.pad(g.astype(np.float64), ((0, 0), (0, 0), (4, 4)))
    windows = np.lib.stride_tricks.sliding_window_view(gp, 5, axis=2)  # n o l j
    want = np.einsum("nolj,ocj->ncl", windows, w.numpy()[:, :, ::-1].astype(np.float64))
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-3)


def _strided_conv():
    """A 3x3 convolution at stride 2 over 30-pixel rows (15 outputs: one masked 16-lane
    vector), unpadded so that its forward and weight gradient are one kernel each."""
    x, w = f32(2, 4, 31, 31), f32(16, 4, 3, 3)
    g = f32(2, 16, 15, 15)
    xd = x.astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(xd, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    want_y = np.einsum("nchwij,ocij->nohw", windows, w)
    want_dw = np.einsum("nohw,nchwij->ocij", g, windows)
    return x, w, g, want_y, want_dw


@pytest.mark.parametrize("wide", [False, True])
def test_a_strided_convolution_tiles_its_shuffled_windows(monkeypatch, wide):
    """Forward: lanes along the output pixels (the windows' index moves by 2 per lane: a
    shuffled vector), rows along the output channels that share it. Weight gradient: lanes
    along the summed pixels; with 32 registers a grid of 8 output channels (sharing each
    shuffled window) by the 3 kernel columns, and its ragged lanes (15 of 16) add the
    product of two masked loads with no select."""
    from fusegrad.nn import functional as F

    x, w, g, want_y, want_dw = _strided_conv()
    y = F.conv2d(fg.tensor(x), fg.tensor(w), None, stride=2)
    forward = str(_lowered(y, monkeypatch, wide))
    assert "vector for t in 0..16" in forward and "t*2]" in forward, forward
    assert "unrolled for i in 0.." in forward and "load in1[i*36" in forward, forward
    wt = fg.tensor(w, requires_grad=True)
    (dw,) = fg.grad(F.conv2d(fg.tensor(x), wt, None, stride=2), [wt], fg.tensor(g))
    weight_grad = str(_lowered(dw, monkeypatch, wide))
    assert "vector for t in 0..16" in weight_grad and "t*2]" in weight_grad, weight_grad
    if wide:
        assert "unrolled for i in 0..8" in weight_grad and "unrolled for j in 0..3" in weight_grad
    assert " else 0" not in weight_grad, weight_grad  # no select past the ragged edge
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dw.numpy(), want_dw, rtol=1e-4, atol=1e-3)


def _index_texts(body):
    from fusegrad.pipeline.loopir import Load, Loop, Store

    for s in body:
        if isinstance(s, Loop):
            yield from _index_texts(s.body)
        elif isinstance(s, (Load, Store)):
            yield str(s.index)


def test_a_tile_over_merged_axes_addresses_its_lanes_contiguously():
    """A column sum over (64, 32, 3, 3) (a weight gradient's partial sums added): the output
    axes merge into one loop of 18432 tiled by 32 lanes. Its addresses are that loop's, not
    each axis's division of it (which read the contiguous lanes as gathers, 2.5x slower);
    the values at special points (ties, -0.0, inf, NaN) are numpy's, and so is a merged
    tile under a guard (a padded operand's sum)."""
    an = f32(64, 64, 32, 3, 3)
    an[:, 0, 0, 0, 0] = -0.0
    an[3, 1, 2, 1, 1] = np.inf
    an[5, 2, 3, 2, 2] = np.nan
    an[:, 4, 5] = 1.0
    a = fg.tensor(an)
    total = a.sum(0)
    assert not any("//" in i or "%" in i for i in _index_texts(only_kernel(total).loop.body))
    got = total.numpy()
    np.testing.assert_allclose(got, an.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    # a sum of -0.0s is +0.0, as PyTorch's (its identity is +0.0)
    assert not np.signbit(got[0, 0, 0, 0])
    assert got[1, 2, 1, 1] == np.inf and np.isnan(got[2, 3, 2, 2])
    bn = f32(16, 6, 5, 3)
    padded = fg.nn.functional.pad(fg.tensor(bn), [1, 1, 0, 2]).sum(0)  # (6, 7, 5): guarded
    want = np.pad(bn, [(0, 0), (0, 0), (0, 2), (1, 1)]).astype(np.float64).sum(0)
    np.testing.assert_allclose(padded.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch, channels", [(32, 16), (4, 64)])
def test_a_convolutions_images_go_outside_its_column_tiles(host, batch, channels):
    """A convolution's windows (its vector operand, over 2 MiB here) move with the image,
    so a column tile's panel is one image's: with images enough to share among the
    threads the images' loop is outermost, then the column tiles, then the output
    channels' tiles, which reuse the image's windows while they are in cache. With few
    images (4) the column tiles stay outermost, the parallel loop needing their count."""
    from fusegrad.nn import functional as F

    host(True)  # (AVX-512's tile)
    x, w = f32(batch, channels, 58, 58), f32(32, channels, 3, 3)  # rows of 56 pixels out
    y = F.conv2d(fg.tensor(x), fg.tensor(w))
    (k,) = fg.kernels(y)
    loops = re.findall(r"for (o\d) in", k.loop_ir)
    if batch == 32:
        assert k.loop_ir.splitlines()[1].strip() == "parallel for o0 in 0..32:", k.loop_ir
        assert loops[:3] == ["o0", "o2", "o1"], k.loop_ir
    else:
        assert loops[:3] == ["o2", "o0", "o1"], k.loop_ir
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3))
    want = np.einsum("nchwij,ocij->nohw", windows, w)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("wide", [False, True])
def test_a_long_sums_grid_of_two_register_rows(monkeypatch, wide):
    """A 1-D convolution's weight gradient sums 1024 positions an image in 32 lanes (two
    registers a row on AVX-512): with 32 registers its grid is 3 taps x 4 output channels,
    24 registers of accumulators, each loaded vector of x serving 4 rows, not 2 (the grid
    before); with 16 registers, rows of 16 lanes (one pair of registers), 3 taps x 2
    output channels: 12 registers. The sums are numpy's either way."""
    from fusegrad.ir.ops import Ops
    from fusegrad.nn import functional as F
    from fusegrad.pipeline import lower as L
    from fusegrad.pipeline import tile_choice
    from fusegrad.pipeline.schedule import schedule

    monkeypatch.setattr(tile_choice, "wide_registers", lambda: wide)
    x, g = f32(2, 8, 1026), f32(2, 16, 1024)
    w = fg.tensor(f32(16, 8, 3), requires_grad=True)
    (dw,) = fg.grad(F.conv1d(fg.tensor(x), w), [w], grad_outputs=fg.tensor(g))
    items = schedule([dw.node], lambda n: n.op is Ops.BUFFER)
    notes = [L.lower(item).tile_note for item in items if item.reduce is not None]
    grid = "3 x 4 rows x 32 lanes" if wide else "3 x 2 rows x 16 lanes"
    assert any(f"register tile {grid} along the sum" in n for n in notes), notes
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), 3, axis=2)
    np.testing.assert_allclose(
        dw.numpy(), np.einsum("nol,ncli->oci", g, windows), rtol=1e-4, atol=1e-3
    )


@pytest.mark.parametrize(
    "m, k, n, rows, lanes",
    [(96, 512, 1024, 6, 16), (44, 256, 64, 4, 16), (5, 40, 48, 5, 16), (104, 256, 64, 6, 16)],
)
def test_narrow_tiles_hold_at_most_twelve_accumulators(host, m, k, n, rows, lanes):
    """With 16 vector registers (AVX2) a matmul's tile is 16 lanes (two registers) by 6
    rows (104 rows: the last tile shifted back, rows 98..103), or 4 where 6 do not divide
    fewer than 48 rows, or a short axis whole: at most 12 registers of accumulators
    (`NARROW_TILE_COLS`). A 32-lane tile of 4 rows held all 16 and spilled every step (a
    1024^3 matmul on Zen 3: 77 GFLOP/s, with this tile 155). Values and both gradients
    against float64, with 0, -0.0 and +-1 in the operands."""
    host(False)
    a, b, g = f32(m, k), f32(k, n), f32(m, n)
    with_special_points(a, b)
    ta, tb = fg.tensor(a, requires_grad=True), fg.tensor(b, requires_grad=True)
    y = ta @ tb
    notes = [k.loop.tile_note for k in fg.kernels(y)]
    assert any(f"register tile {rows} rows x {lanes} lanes" in note for note in notes), notes
    (y * fg.tensor(g)).sum().backward()
    a64, b64, g64 = (x.astype(np.float64) for x in (a, b, g))
    np.testing.assert_allclose(y.numpy(), a64 @ b64, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ta.grad.numpy(), g64 @ b64.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tb.grad.numpy(), a64.T @ g64, rtol=1e-4, atol=1e-4)
