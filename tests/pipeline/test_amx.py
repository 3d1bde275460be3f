"""bfloat16 matmuls on AMX tiles (pipeline/amx.py), where the host has AMX-BF16 and Linux
grants the tile state: the kernels' assembly, the answers against float64 on the same
bfloat16 inputs, the special points (subnormals flushed, as `tdpbf16ps` does), and the
shapes and layouts that take the register tiles instead. Skipped, saying so, elsewhere;
tests/frontend/test_bf16_contractions.py checks every shape on every host."""

from __future__ import annotations

import numpy as np
import pytest
from _bf16_tiles import HALF_ULP, bf16, check_close, host, ran_on

import fusegrad as fg
from fusegrad.runtime.amx import amx_ready

pytestmark = pytest.mark.skipif(
    not amx_ready(),
    reason="AMX tiles are off here: no AMX-BF16, Linux refused its tile state, or FUSEGRAD_AMX=0",
)


def on_amx(t: fg.Tensor) -> bool:
    return ran_on(t, "tdpbf16ps")


@pytest.mark.parametrize(
    "m, k, n", [(32, 32, 32), (64, 96, 128), (96, 2048, 64), (32, 64, 160)], ids=str
)
def test_a_bfloat16_matmul_runs_on_amx_tiles(m, k, n):
    rng = np.random.default_rng(k)
    a, b = bf16(rng.standard_normal((m, k))), bf16(rng.standard_normal((k, n)))
    y = a @ b
    assert on_amx(y)
    (kernel,) = [k for k in fg.kernels(y) if "tdpbf16ps" in k.asm]
    assert "tileloadd" in kernel.asm and "ldtilecfg" in kernel.asm and "tilerelease" in kernel.asm
    check_close(y, host(a), host(b))


def test_linear_batched_and_a_fused_epilogue_run_on_amx_tiles():
    rng = np.random.default_rng(2)
    x, w, bias = (bf16(rng.standard_normal(s)) for s in ((64, 96), (32, 96), (32,)))
    y = fg.nn.functional.linear(x, w, bias).relu()
    assert on_amx(y)
    exact = np.maximum(host(x) @ host(w).T + host(bias), 0)
    assert np.allclose(host(y), exact, rtol=2**-7, atol=96 * 2**-20)
    a, b = bf16(rng.standard_normal((3, 32, 64))), bf16(rng.standard_normal((64, 32)))
    y = a @ b
    assert on_amx(y)
    check_close(y, host(a), host(b))


def test_both_gradients_of_matmul_and_linear_run_on_amx_tiles():
    rng = np.random.default_rng(6)
    a, b, g = (bf16(rng.standard_normal(s)) for s in ((64, 96), (96, 128), (64, 128)))
    a.requires_grad_()
    b.requires_grad_()
    ((a @ b) * g).sum().backward()
    assert on_amx(a.grad) and on_amx(b.grad)
    check_close(a.grad, host(g), host(b).T)
    check_close(b.grad, host(a).T, host(g))
    x, w, gy = (bf16(rng.standard_normal(s)) for s in ((64, 96), (32, 96), (64, 32)))
    x.requires_grad_()
    w.requires_grad_()
    (fg.nn.functional.linear(x, w) * gy).sum().backward()
    assert on_amx(x.grad) and on_amx(w.grad)
    check_close(x.grad, host(gy), host(w))
    check_close(w.grad, host(gy).T, host(x))


def test_other_shapes_take_the_register_tiles():
    rng = np.random.default_rng(3)
    cases = [
        (rng.standard_normal((33, 32)), rng.standard_normal((32, 32))),  # M % 32
        (rng.standard_normal((32, 48)), rng.standard_normal((48, 32))),  # K % 32
    ]
    for a_values, b_values in cases:
        a, b = bf16(a_values), bf16(b_values)
        y = a @ b
        assert not on_amx(y)
        check_close(y, host(a), host(b))
    # float32 never does
    a = fg.tensor(rng.standard_normal((32, 32)).astype(np.float32))
    assert not on_amx(a @ a)


def test_a_transposed_left_operand_is_packed_into_tiles_and_runs_on_amx():
    # A a transposed view: the frontend copies both operands into AMX's layouts, so the
    # kernel reads A's 16 x 32 tiles whole whatever A's strides were
    rng = np.random.default_rng(4)
    a = bf16(rng.standard_normal((64, 96))).T  # (96, 64), columns adjacent
    b = bf16(rng.standard_normal((64, 128)))
    y = a @ b
    assert on_amx(y)
    check_close(y, host(a), host(b))


@pytest.mark.parametrize(
    "m, k, n", [(32, 1056, 512), (64, 1024, 320), (96, 288, 64), (64, 256, 256)]
)
def test_blocked_loops_cover_every_block_once(m, k, n):
    # reduction chunks (96 at K = 1056 and 288, 256 at K = 1024, one of 256) and groups of N
    # blocks (8 at N = 512, 5 at N = 320, 4 at N = 256): each output block summed over the
    # whole of K once, the first chunk apart from the others' loop
    from fusegrad.pipeline.amx import k_chunk_size, n_group_size

    chunks = {1056: 96, 1024: 256, 288: 96, 256: 256}[k]
    groups = {(512, 1056): 8, (320, 1024): 5, (64, 288): 1, (256, 256): 4}[(n, k)]
    assert (k_chunk_size(k), n_group_size(n // 32, k)) == (chunks, groups)
    rng = np.random.default_rng(m + k + n)
    a, b = bf16(rng.integers(-3, 4, (m, k))), bf16(rng.integers(-3, 4, (k, n)))
    y = a @ b
    assert on_amx(y)
    # small integers: every product and partial sum exact in float32, so the answer is the
    # exact one rounded once to bfloat16 (a block summed twice or missed would differ)
    assert np.array_equal(host(y), host(bf16(host(a) @ host(b))))


INF, NAN, SUB = np.inf, np.nan, 2.0**-130

# (name, a row, b column, the answer on AMX tiles): as in test_bf16_contractions.py's table,
# except that subnormal inputs read as 0 and subnormal results are flushed to 0
AMX_DOTS = [
    ("zeros", [0.0, 0.0], [0.0, 0.0], 0.0),
    ("negative zeros", [-0.0, -0.0, 0.0], [1.0, 1.0, -0.0], 0.0),
    ("ones, odd count", [1.0] * 5, [1.0] * 5, 5.0),
    ("cancellation", [1.0, 1.0, -1.0], [256.0, 1.0, 256.0], 1.0),
    ("inf", [INF, 1.0], [1.0, 1.0], INF),
    ("inf times zero", [INF, 1.0], [0.0, 1.0], NAN),
    ("inf minus inf", [INF, INF], [1.0, -1.0], NAN),
    ("NaN", [1.0, NAN, 1.0], [1.0, 1.0, 1.0], NAN),
    ("subnormal input reads as 0", [SUB, 0.0], [2.0**100, 1.0], 0.0),
    ("subnormal result flushed", [2.0**-70, 2.0**-70], [2.0**-60, 0.0], 0.0),
    ("overflow to inf", [2.0**127, 2.0**127], [2.0, 2.0], INF),
    ("a tie rounds to even", [1.0, 1.0], [1.0, 2.0**-8], 1.0),
]


@pytest.mark.parametrize("n", [32, 128])
@pytest.mark.parametrize("a_layout", ["in place", "copied into tiles"])
def test_special_points_on_amx_tiles(a_layout, n):
    # row r of A holds case r's vector (zeros after it), column r of B the other one, so
    # output (r, r) is case r's dot product; 32 x 64 x n runs on the tiles, A read where
    # it is or (a transposed view) copied into tiles first; at n = 128 two N blocks share
    # each chunk of A, the second reading the first's copy of it (`stage`) when in place
    a, b = np.zeros((32, 64)), np.zeros((64, n))
    for r, (_, x, y, _) in enumerate(AMX_DOTS):
        a[r, : len(x)], b[: len(y), r] = x, y
    left = bf16(a) if a_layout == "in place" else bf16(a.T).T
    out = left @ bf16(b)
    assert on_amx(out) and amx_kernels_and_copies(out)[1] == (1 if a_layout == "in place" else 2)
    (kernel,) = [k for k in fg.kernels(out) if "tdpbf16ps" in k.asm]
    assert ("scratch0" in str(kernel.loop)) == (a_layout == "in place" and n > 32)
    got = np.diag(host(out[:, :32]))
    for r, (name, _, _, want) in enumerate(AMX_DOTS):
        if np.isnan(want):
            assert np.isnan(got[r]), name
        else:
            assert got[r] == want and np.signbit(got[r]) == np.signbit(want), (name, got[r])


def test_config_amx_off_keeps_the_register_tiles():
    rng = np.random.default_rng(4)
    a, b = bf16(rng.standard_normal((32, 64))), bf16(rng.standard_normal((64, 32)))
    # (and vdpbf16ps off: where the CPU has it, its pair packing is a kernel of its own)
    with fg.config.override(amx=False, dpbf16=False):
        y = a @ b
        assert not on_amx(y)
        assert len(fg.kernels(y)) == 1  # no packing either
    check_close(y, host(a), host(b))
    assert on_amx(a @ b)


def test_an_amx_kernel_prints_and_dumps(tmp_path):
    # the loop IR names every tile statement; the dump's CUDA C says there is none
    rng = np.random.default_rng(7)
    a, b = bf16(rng.standard_normal((64, 64))), bf16(rng.standard_normal((64, 64)))
    with fg.config.override(dump=str(tmp_path)):
        y = (a @ b).realize()
    (kernel,) = [k for k in fg.kernels(y) if "tdpbf16ps" in k.asm]
    text = str(kernel.loop)
    assert "+= dot(tile4, tile6)" in text and "tile0 = 0" in text and "store tile0 into acc" in text
    (cu,) = [p for p in tmp_path.iterdir() if p.name.endswith(kernel.name + ".cu")]
    assert "an AMX tile kernel: CUDA C has no such instructions" in cu.read_text()
    assert (tmp_path / cu.name.replace(".cu", ".loop")).read_text().count("dot(tile") == 4


def amx_kernels_and_copies(t: fg.Tensor) -> tuple[int, int]:
    """(kernels on the tiles, copies made for them) among the kernels that computed t."""
    kernels = fg.kernels(t)
    return sum("tdpbf16ps" in (k.asm or "") for k in kernels), len(kernels) - 1


def test_a_row_major_left_operand_is_read_in_place_anything_else_copied_first():
    # a buffer (or a copy the graph makes anyway) is read where it is, rows K apart: only B
    # is packed; a view with other strides or a computed value is copied into tiles first
    rng = np.random.default_rng(8)
    wide = bf16(rng.standard_normal((64, 160)))
    cases = {
        "buffer": (bf16(rng.standard_normal((64, 64))), 1),
        "batched buffer": (bf16(rng.standard_normal((2, 32, 64))), 1),
        "made contiguous": (wide[:, :64].T.contiguous(), 2),
        "transposed": (wide[:, 96:].T, 2),
        "columns sliced (odd offset, row stride 160)": (wide[:, 33:97], 2),
        "computed": (wide[:, :64] * 2, 2),
    }
    for name, (a, copies) in cases.items():
        b = bf16(rng.standard_normal((64, 96)))
        y = a @ b
        assert amx_kernels_and_copies(y) == (1, copies), name
        check_close(y, host(a), host(b))


def test_gradients_of_strided_operands_on_amx_tiles():
    # A sliced from a wider buffer, B transposed: both gradients on the tiles, each operand
    # copied as its strides need
    rng = np.random.default_rng(9)
    wide = bf16(rng.standard_normal((64, 160))).requires_grad_()
    bt = bf16(rng.standard_normal((128, 96))).requires_grad_()
    g = bf16(rng.standard_normal((64, 128)))
    a, b = wide[:, 32:128], bt.T
    ((a @ b) * g).sum().backward()
    assert on_amx(wide.grad) and on_amx(bt.grad)
    got_a = host(wide.grad)  # zero outside the slice
    assert (got_a[:, :32] == 0).all() and (got_a[:, 128:] == 0).all()
    check_close(wide.grad[:, 32:128], host(g), host(b).T)
    check_close(bt.grad, host(g).T, host(a))  # b = bt.T: bt's gradient is (A^T G)^T


@pytest.mark.parametrize(
    "m, k, n", [(64, 64, 96), (64, 64, 80), (96, 64, 64), (80, 64, 64), (64, 80, 64)]
)
def test_the_multiple_of_32_boundary(m, k, n):
    # on the tiles at multiples of 32, on the register tiles just off them: same answers
    rng = np.random.default_rng(m * k + n)
    a, b = bf16(rng.standard_normal((m, k))), bf16(rng.standard_normal((k, n)))
    y = a @ b
    assert on_amx(y) == (m % 32 == 0 and k % 32 == 0 and n % 32 == 0)
    check_close(y, host(a), host(b))


def test_b_is_packed_k_step_by_k_step():
    # the copy's shape is B's layout: K's steps of 32 outermost (the parallel loop of the
    # copy), then 32-column blocks, 16 pairs, 32 columns, the pair: a step of a block, both
    # of its 32 x 16 tiles, is 2 KiB in one piece
    rng = np.random.default_rng(10)
    a, b = bf16(rng.standard_normal((32, 96))), bf16(rng.standard_normal((96, 160)))
    y = a @ b
    (copy,) = [k for k in fg.kernels(y) if "tdpbf16ps" not in k.asm]
    assert copy.shape == (3, 5, 16, 32, 2)
    check_close(y, host(a), host(b))


@pytest.mark.parametrize("transposed", [False, True], ids=["b", "w.T"])
def test_a_b_used_again_is_packed_in_each_products_graph(transposed):
    # B's packed copy is made when the plan is compiled (pipeline/layout.py), from the
    # graph alone: each product packs B in its own plan, the same answer to the bit
    rng = np.random.default_rng(11)
    a = bf16(rng.standard_normal((64, 96)))
    w = bf16(rng.standard_normal((128, 96) if transposed else (96, 128)))
    answers, copies = [], []
    for _ in range(3):
        b = w.T if transposed else w
        y = a @ b
        copies.append(amx_kernels_and_copies(y))
        answers.append(y.float().numpy())
    assert copies == [(1, 1)] * 3
    for got in answers[1:]:
        np.testing.assert_array_equal(got, answers[0])
    check_close(y, host(a), host(b))


def test_gradients_through_a_frozen_b_and_a_b_that_requires_grad():
    # A's gradient through a frozen B and a trained one, both packed in the graph: the same
    # every call, within the rounding of two bfloat16 products
    rng = np.random.default_rng(13)
    a = bf16(rng.standard_normal((64, 96))).requires_grad_()
    frozen = bf16(rng.standard_normal((96, 64)))
    trained = bf16(rng.standard_normal((96, 64))).requires_grad_()
    g = bf16(rng.standard_normal((64, 64)))
    grads = []
    for _ in range(3):
        a.grad = trained.grad = None
        ((a @ frozen) * g + (a @ trained) * g).sum().backward()
        grads.append((a.grad.float().numpy(), trained.grad.float().numpy()))
        assert on_amx(a.grad) and on_amx(trained.grad)
    for ga, gb in grads[1:]:
        np.testing.assert_array_equal(ga, grads[0][0])
        np.testing.assert_array_equal(gb, grads[0][1])
    exact = host(g) @ (host(frozen) + host(trained)).T
    size = np.abs(host(g)) @ (np.abs(host(frozen)) + np.abs(host(trained))).T
    bound = 4 * HALF_ULP * size  # two products rounded to bfloat16, their sum rounded
    assert (np.abs(host(a.grad) - exact) <= bound).all()
    check_close(trained.grad, host(a).T, host(g))


def test_a_jit_replay_reads_the_calls_b_not_a_kept_copy():
    # recorded with one B, replayed with another: the replay packs the B it is given
    rng = np.random.default_rng(14)
    x = bf16(rng.standard_normal((32, 64)))
    w1, w2 = (bf16(rng.standard_normal((64, 32))) for _ in range(2))

    @fg.jit
    def product(x, w):
        return (x @ w).float()

    for _ in range(4):
        got = product(x, w1)
    check_close(got, host(x), host(w1))
    got = product(x, w2)
    assert product.replays >= 2
    check_close(got, host(x), host(w2))
    np.testing.assert_array_equal(got.numpy(), (x @ w2).float().numpy())


@pytest.mark.parametrize("n", [32, 64, 96, 128, 2048], ids=str)
def test_b_steps_are_padded_to_an_odd_multiple_of_2_kib(n):
    # an even number of 32-column blocks gets one unused block after each step (so that a
    # block's steps fall in every L2 set)
    rng = np.random.default_rng(n)
    a, b = bf16(rng.standard_normal((64, 64))), bf16(rng.standard_normal((64, n)))
    y = a @ b
    (copy,) = [k for k in fg.kernels(y) if "tdpbf16ps" not in k.asm]
    blocks = n // 32 + (1 - (n // 32) % 2)
    assert copy.shape == (2, blocks, 16, 32, 2)
    check_close(y, host(a), host(b))


def test_each_operand_tile_is_loaded_just_before_its_first_product():
    # a step: load A0, load B0, product, load B1, product, load A1, product, product (the
    # first product waits for two loads, not four)
    rng = np.random.default_rng(15)
    a, b = bf16(rng.standard_normal((64, 128))), bf16(rng.standard_normal((128, 96)))
    y = a @ b
    (kernel,) = [k for k in fg.kernels(y) if "tdpbf16ps" in k.asm]
    ops = {"tileloadd": "L", "tdpbf16ps": "D"}
    seq = "".join(ops.get(line.split()[0], "") for line in kernel.asm.splitlines() if line.split())
    assert "LLDLDLDD" in seq and "LLLLDDDD" not in seq
    check_close(y, host(a), host(b))


def test_the_first_chunk_starts_its_tiles_at_zero_with_no_accumulator_round_trip():
    # K = 768: three chunks of 256; the first zeroes the four tiles and stores them after its
    # steps (no zeros stored to memory and read back), the loop over the other two reads them
    rng = np.random.default_rng(16)
    a, b = bf16(rng.standard_normal((64, 768))), bf16(rng.standard_normal((768, 128)))
    y = a @ b
    (kernel,) = [k for k in fg.kernels(y) if "tdpbf16ps" in k.asm]
    text = str(kernel.loop)
    first, rest = text.split("for rk in 0..2:")
    assert "tile0 = 0" in first and "load acc" not in first
    assert first.index("dot(tile4, tile6)") < first.index("store tile0 into acc")
    assert "tile0 = 0" not in rest and "tile0 = load acc" in rest
    check_close(y, host(a), host(b))


@pytest.mark.parametrize("m, k, n", [(64, 2048, 256), (32, 544, 512)], ids=str)
def test_a_copied_chunk_of_a_gives_the_same_bits_as_a_copied_into_tiles(m, k, n):
    # A read in place: the group's first N block copies each chunk of A's 32 rows into the
    # thread's 16 x 32 tiles (a tile store beside its products), the other blocks read the
    # copy; a transposed A is copied into tiles by its own kernel before. Same sums, same
    # order: the same bits, special values included
    rng = np.random.default_rng(k + n)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    a[0, :4], a[1, :2], a[2, 5] = [INF, -0.0, SUB, -SUB], [NAN, 2.0**-70], -INF
    b[:4, 3], b[7, :] = [0.0, -0.0, 2.0**100, 1.0], 2.0**-70
    in_place, tiled = bf16(a), bf16(a.T).T
    right = bf16(b)
    y, z = in_place @ right, tiled @ right
    (kernel,) = [k for k in fg.kernels(y) if "tdpbf16ps" in k.asm]
    text = str(kernel.loop)
    assert "scratch0: bfloat16" in text and "as 16 rows of 32 into scratch0" in text
    assert text.count("load 16 rows of 32 from scratch0") > 0
    (tiled_kernel,) = [k for k in fg.kernels(z) if "tdpbf16ps" in k.asm]
    assert "scratch0" not in str(tiled_kernel.loop)
    got, want = y.float().numpy(), z.float().numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def bf16_round_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, to nearest even (a NaN quieted): docs/NUMERICS.md's rounding."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.where(np.isnan(x), (bits | 0x400000) >> 16, rounded).astype(np.uint16)


def test_the_epilogue_rounds_each_sum_to_nearest_even_in_one_instruction():
    # out[i, j] = hi[i] * 1 + lo[i] * s[j]: float32 sums with bits below bfloat16's (ties both
    # ways, round up, round down, a carry into the exponent, overflow to inf, NaN, +-0), each
    # exact in float32, so the answer is that sum rounded once to nearest even. Where the host
    # has AVX512-BF16 the sums leave the tiles by `vcvtne2ps2bf16` (none is subnormal: the
    # tiles flush), a fused epilogue's values by the integer rounding
    from fusegrad.pipeline.llvm_math import host_converts_bf16

    rng = np.random.default_rng(17)
    hi = np.ldexp(1 + rng.integers(0, 128, 32) / 128, rng.integers(-100, 100, 32))
    hi *= rng.choice([-1.0, 1.0], 32)
    hi[:6] = [1.0, 1.0 + 2**-7, -(1.0 + 2**-7), 3.3895313892515355e38, INF, NAN]
    lo = hi * 2.0**-8
    lo[6:8] = [0.0, -0.0]
    hi[6:8] = [-0.0, -0.0]
    s = np.array([k / 16 for k in range(-16, 16)])  # 32 scales: below, at and past a tie
    a, b = np.zeros((32, 64)), np.zeros((64, 128))
    a[:, 0], a[:, 1] = hi, lo
    b[0, :], b[1, :32] = 1.0, s
    left, right = bf16(a), bf16(b)
    y = left @ right
    (kernel,) = [k for k in fg.kernels(y) if "tdpbf16ps" in k.asm]
    assert ("vcvtne2ps2bf16" in kernel.asm) == host_converts_bf16()
    ha, hb = host(left), host(right)
    with np.errstate(invalid="ignore", over="ignore"):
        pairs = (ha[:, :1] * hb[:1, :] + ha[:, 1:2] * hb[1:2, :]).astype(np.float32)
    exact = np.float32(0.0) + pairs  # the accumulator starts at +0: -0 + +0 is +0
    got = (y.float().numpy().view(np.uint32) >> 16).astype(np.uint16)  # exact: bf16 -> f32
    want = bf16_round_bits(exact)
    nan = np.isnan(exact)
    assert np.array_equal(got[~nan], want[~nan]) and np.isnan(y.float().numpy()[nan]).all()
    fused = (left @ right + 0.0).relu()  # another value: the integer rounding, as before
    (kernel,) = [k for k in fg.kernels(fused) if "tdpbf16ps" in k.asm]
    assert "vcvtne2ps2bf16" not in kernel.asm
