"""bfloat16 matmuls on `vdpbf16ps` register tiles (pipeline/dpbf16.py), where the host has
AVX512-BF16 and AMX is not used (an AMD Zen 4/5): the kernels' assembly, the answers
against float64 on the same bfloat16 inputs, bit for bit against the FMA tiles where every
sum is exact, the special points (subnormals flushed, each pair's second product added
first, as `vdpbf16ps` does), and the shapes that take the FMA tiles instead. Skipped,
saying so, elsewhere; tests/frontend/test_bf16_contractions.py checks every shape on
every host."""

from __future__ import annotations

import numpy as np
import pytest
from _bf16_tiles import bf16, check_close, host, ran_on

import fusegrad as fg
from fusegrad.runtime.amx import dpbf16_ready

pytestmark = pytest.mark.skipif(
    not dpbf16_ready(),
    reason="vdpbf16ps tiles are off here: no AVX512-BF16, AMX is used, or FUSEGRAD_DPBF16=0",
)


def on_dpbf16(t: fg.Tensor) -> bool:
    return ran_on(t, "vdpbf16ps")


@pytest.mark.parametrize(
    "m, k, n",
    [(32, 32, 32), (64, 96, 128), (96, 2048, 64), (32, 64, 160), (256, 512, 256), (160, 64, 32)],
    ids=str,
)
def test_a_bfloat16_matmul_runs_on_vdpbf16ps(m, k, n):
    rng = np.random.default_rng(k + n)
    a, b = bf16(rng.standard_normal((m, k))), bf16(rng.standard_normal((k, n)))
    y = a @ b
    (kernel,) = [k for k in fg.kernels(y) if "vdpbf16ps" in k.asm]
    assert "dot_pairs(" in str(kernel.loop)
    check_close(y, host(a), host(b))


def test_batched_transposed_and_a_fused_epilogue_run_on_vdpbf16ps():
    rng = np.random.default_rng(2)
    x, w, bias = (bf16(rng.standard_normal(s)) for s in ((64, 96), (32, 96), (32,)))
    y = fg.nn.functional.linear(x, w, bias).relu()  # B = w.T, a view: packed in pairs
    assert on_dpbf16(y)
    exact = np.maximum(host(x) @ host(w).T + host(bias), 0)
    assert np.allclose(host(y), exact, rtol=2**-7, atol=96 * 2**-20)
    a, b = bf16(rng.standard_normal((3, 32, 64))), bf16(rng.standard_normal((64, 32)))
    y = a @ b
    assert on_dpbf16(y)
    check_close(y, host(a), host(b))
    # A a transposed view: copied into AMX's 16 x 32 tiles first, K still adjacent
    a = bf16(rng.standard_normal((64, 96))).T
    b = bf16(rng.standard_normal((64, 128)))
    y = a @ b
    assert on_dpbf16(y)
    check_close(y, host(a), host(b))


def test_gradients_of_a_linear_layer_run_on_vdpbf16ps():
    rng = np.random.default_rng(6)
    x, w, gy = (bf16(rng.standard_normal(s)) for s in ((64, 96), (32, 96), (64, 32)))
    x.requires_grad_()
    w.requires_grad_()
    (fg.nn.functional.linear(x, w) * gy).sum().backward()
    assert on_dpbf16(x.grad) and on_dpbf16(w.grad)
    check_close(x.grad, host(gy), host(w))
    check_close(w.grad, host(gy).T, host(x))


def test_gradients_of_strided_operands_on_vdpbf16ps():
    # A sliced from a wider buffer (copied into 16 x 32 tiles), B transposed: both
    # gradients on the tiles
    rng = np.random.default_rng(9)
    wide = bf16(rng.standard_normal((64, 160))).requires_grad_()
    bt = bf16(rng.standard_normal((128, 96))).requires_grad_()
    g = bf16(rng.standard_normal((64, 128)))
    a, b = wide[:, 32:128], bt.T
    y = a @ b
    assert on_dpbf16(y)
    check_close(y, host(a), host(b))
    (y * g).sum().backward()
    assert on_dpbf16(wide.grad) and on_dpbf16(bt.grad)
    got_a = host(wide.grad)  # zero outside the slice
    assert (got_a[:, :32] == 0).all() and (got_a[:, 128:] == 0).all()
    check_close(wide.grad[:, 32:128], host(g), host(b).T)
    check_close(bt.grad, host(g).T, host(a))  # b = bt.T: bt's gradient is (A^T G)^T


def test_a_b_used_again_is_packed_in_each_products_graph():
    # B's packed copy is made when the plan is compiled (pipeline/layout.py), from the
    # graph alone: each product packs it in its own plan, the same answer to the bit
    rng = np.random.default_rng(11)
    a, w = bf16(rng.standard_normal((64, 96))), bf16(rng.standard_normal((96, 128)))
    answers, kernels = [], []
    for _ in range(4):
        y = a @ w
        kernels.append(len(fg.kernels(y)))
        answers.append(y.float().numpy())
        assert on_dpbf16(y)
    assert kernels == [2, 2, 2, 2]
    for got in answers[1:]:
        np.testing.assert_array_equal(got, answers[0])
    check_close(y, host(a), host(w))


@pytest.mark.parametrize(
    "m, k, n",
    [(33, 32, 32), (32, 48, 32), (32, 32, 40), (32, 33, 32), (32, 1, 32), (5, 7, 3)],
    ids=["M % 32", "K % 32", "N % 32", "K odd", "K = 1", "small"],
)
def test_other_shapes_take_the_fma_tiles(m, k, n):
    rng = np.random.default_rng(m * k * n)
    a, b = bf16(rng.standard_normal((m, k))), bf16(rng.standard_normal((k, n)))
    y = a @ b
    assert not on_dpbf16(y)
    check_close(y, host(a), host(b))


@pytest.mark.parametrize(
    "m, k, n", [(32, 1056, 512), (64, 256, 256), (96, 288, 64), (128, 96, 32)], ids=str
)
def test_the_switch_gives_the_fma_tiles_the_same_bits_where_sums_are_exact(m, k, n):
    # small integers: every product and partial sum exact in float32, so both paths give
    # the exact answer rounded once to bfloat16 (a block summed twice or missed would differ;
    # at N = 32 the threads split M's blocks, elsewhere groups of N's)
    rng = np.random.default_rng(m + k + n)
    a, b = bf16(rng.integers(-3, 4, (m, k))), bf16(rng.integers(-3, 4, (k, n)))
    bias = bf16(rng.integers(-3, 4, (n,)))
    y = ((a @ b) + bias).relu()
    assert on_dpbf16(y)
    with fg.config.override(dpbf16=False):
        z = ((a @ b) + bias).relu().realize()
        assert not on_dpbf16(z)
        assert len(fg.kernels(z)) == 1  # no packing either
    assert np.array_equal(host(y), host(z))
    assert np.array_equal(host(y), host(bf16(np.maximum(host(a) @ host(b) + host(bias), 0))))


def test_group_sizes_keep_the_panels_in_l2():
    from fusegrad.pipeline.dpbf16 import n_group_size

    assert [n_group_size(64, 2048), n_group_size(16, 1056), n_group_size(2, 288)] == [4, 4, 1]


INF, NAN, SUB = np.inf, np.nan, 2.0**-130

# (name, a row, b column, the answer on vdpbf16ps): as in test_bf16_contractions.py's table,
# except that subnormal inputs read as 0, subnormal results are flushed to 0, and each
# pair's second product is added before its first
DOTS = [
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
    # 1 + 0, then -1 (the second pair's second product) + 2^-30: in order, 1 + 2^-30 = 1
    ("a pair's second product first", [1.0, 0.0, 2.0**-30, -1.0], [1.0] * 4, 2.0**-30),
]


def test_special_points_on_vdpbf16ps():
    # row r of A holds case r's vector (zeros after it), column r of B the other one, so
    # output (r, r) is case r's dot product
    a, b = np.zeros((32, 64)), np.zeros((64, 64))
    for r, (_, x, y, _) in enumerate(DOTS):
        a[r, : len(x)], b[: len(y), r] = x, y
    out = bf16(a) @ bf16(b)
    assert on_dpbf16(out)
    got = np.diag(host(out[:, :32]))
    for r, (name, _, _, want) in enumerate(DOTS):
        if np.isnan(want):
            assert np.isnan(got[r]), name
        else:
            assert got[r] == want and np.signbit(got[r]) == np.signbit(want), (name, got[r])


def test_a_vdpbf16ps_kernel_prints_and_dumps(tmp_path):
    rng = np.random.default_rng(7)
    a, b = bf16(rng.standard_normal((64, 64))), bf16(rng.standard_normal((64, 64)))
    with fg.config.override(dump=str(tmp_path)):
        y = (a @ b).realize()
    (kernel,) = [k for k in fg.kernels(y) if "vdpbf16ps" in k.asm]
    assert "tdpbf16ps" not in kernel.asm and "ldtilecfg" not in kernel.asm
    (cu,) = [p for p in tmp_path.iterdir() if p.name.endswith(kernel.name + ".cu")]
    assert "a vdpbf16ps kernel: CUDA C has no such instructions" in cu.read_text()
    assert "dot_pairs(" in (tmp_path / cu.name.replace(".cu", ".loop")).read_text()
