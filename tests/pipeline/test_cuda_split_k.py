"""Contractions of few output tiles and long reductions on the cuda device: split reductions.

A contraction whose output tiles would leave most multiprocessors idle (a convolution's
weight gradient: 64 x 576 outputs summed over the 131072 pixels of a batch, 9 tiles) splits
its reduction into chunks of whole steps (`gpu.Contraction.split`), one block each, which
store partial tiles; a second launch sums each output's partials in the chunks' order and
runs the epilogue. Checked: which contractions split and into what, the launches and their
scratch, the partials' traffic, and on the emulator the values against float64 (fp32 with a
ragged last chunk, a bias and an activation after the sum, a batch; bfloat16 and TF32 on the
tensor cores; NaN and infinities through the partials) and a convolution's weight gradient
against the CPU device's.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad.pipeline import gpu
from fusegrad.pipeline.cuda import cuda_kernel
from fusegrad.pipeline.lower import lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.engine import engine

H100_SHARED = 227 * 1024

pytestmark = pytest.mark.usefixtures("emulated")


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def dev(a: np.ndarray) -> fg.Tensor:
    return fg.tensor(a, device="cuda")


def mapped(expr, tf32: bool = False) -> gpu.GpuKernel:
    """The GPU mapping of `expr`'s last kernel (its contraction), as an H100 gets it."""
    item = schedule([expr.node], engine.has_value_predicate())[-1]
    return gpu.map_to_gpu(lower(item, tile=False), tf32, H100_SHARED)


def kernel_of(expr, tf32: bool = False):
    item = schedule([expr.node], engine.has_value_predicate())[-1]
    return cuda_kernel(lower(item, tile=False), "k", tf32, H100_SHARED)


def test_a_product_of_one_tile_and_a_long_reduction_splits_into_chunks_of_whole_steps():
    g = mapped(dev(rand(64, 8197)) @ dev(rand(8197, 48)))
    c = g.contraction
    assert c is not None and c.split > 1 and c.chunk % c.kc == 0
    assert (c.split - 1) * c.chunk < c.red.length <= c.split * c.chunk  # every step, once
    tiles = -(-64 // (16 * c.ra)) * -(-48 // (16 * c.rb))  # (64 x 48 outputs)
    # toward SPLIT_K_BLOCKS blocks, each chunk at least SPLIT_K_MIN_STEPS steps long
    assert tiles * c.split <= gpu.SPLIT_K_BLOCKS and c.chunk >= gpu.SPLIT_K_MIN_STEPS * c.kc
    assert tiles * c.split > 40
    assert g.grid_dims[2] == c.split
    k = kernel_of(dev(rand(64, 8197)) @ dev(rand(8197, 48)))
    assert [ln.symbol for ln in k.launches] == ["k", "k_final"]
    assert k.scratch == [(fg.float32, c.split * 64 * 48)]
    assert "fg_partial[((fg_part * 1LL + ic) * 64LL + ia) * 48LL + ib]" in k.source


@pytest.mark.parametrize(
    "shape",
    # many tiles; 128 of 64 x 64 (nearly one a multiprocessor) over 2048 steps; too few
    # steps to split
    [(1024, 512, 1024), (512, 2048, 1024), (64, 64, 64), (64, 100, 48)],
)
def test_products_of_many_tiles_or_short_reductions_do_not_split(shape):
    m, k, n = shape
    g = mapped(dev(rand(m, k)) @ dev(rand(k, n)))
    assert g.contraction is not None and g.contraction.split == 1
    assert len(kernel_of(dev(rand(m, k)) @ dev(rand(k, n))).launches) == 1


def test_nearly_enough_tiles_split_only_a_long_reduction():
    # 128 tiles of 64 x 64 leave 4 of 132 multiprocessors idle: worth splitting 4096 terms
    # an output (a few partials against a long sum), not 2048
    assert mapped(dev(rand(512, 2048)) @ dev(rand(2048, 1024))).contraction.split == 1
    c = mapped(dev(rand(512, 4096)) @ dev(rand(4096, 1024))).contraction
    assert c.split == 3 and gpu.SPLIT_K_LONG == 4096


def test_the_partials_count_in_the_traffic(monkeypatch):
    a, b = dev(rand(64, 8192)), dev(rand(8192, 64))
    split = mapped(a @ b)
    monkeypatch.setattr(gpu, "SPLIT_K_BLOCKS", 0)
    whole = mapped(a @ b)
    assert whole.contraction.split == 1
    extra = split.contraction.split * 64 * 64 * 4
    t_split, t_whole = gpu.traffic(split), gpu.traffic(whole)
    more = (t_split.bytes_read - t_whole.bytes_read, t_split.bytes_written - t_whole.bytes_written)
    assert more == (extra, extra)


def test_a_ragged_last_chunk_with_a_bias_and_an_activation_after_the_sum():
    a, b, bias = rand(64, 8197), rand(8197, 48, seed=1), rand(48, seed=2)
    assert mapped((dev(a) @ dev(b) + dev(bias)).relu()).contraction.split > 1
    got = (dev(a) @ dev(b) + dev(bias)).relu().cpu().numpy()
    want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_batch_of_products_splits_each_batchs_reduction():
    a, b = rand(3, 32, 4001), rand(3, 4001, 40, seed=1)
    assert mapped(dev(a) @ dev(b)).contraction.split > 1
    got = (dev(a) @ dev(b)).cpu().numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_nan_and_infinities_go_through_the_partials():
    a, b = rand(64, 4096), rand(4096, 64, seed=1)
    a[0, 3000], a[1, 10], a[2, 4000] = np.nan, np.inf, -np.inf
    b[:, 7] = 0.0
    assert mapped(dev(a) @ dev(b)).contraction.split > 1
    got = (dev(a) @ dev(b)).cpu().numpy()
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    assert np.array_equal(np.sign(got[np.isinf(got)]), np.sign(want[np.isinf(want)]))
    fine = np.isfinite(want)
    np.testing.assert_allclose(got[fine], want[fine], rtol=1e-4, atol=1e-3)


def test_a_bfloat16_product_splits_on_the_tensor_cores():
    bf16 = ml_dtypes.bfloat16
    a, b = rand(64, 8192).astype(bf16), rand(8192, 64, seed=1).astype(bf16)
    fa, fb = fg.tensor(a, device="cuda"), fg.tensor(b, device="cuda")
    c = mapped(fa @ fb).contraction
    assert c.mma == "bfloat16" and c.split > 1
    got = (fa @ fb).float().cpu().numpy()
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=0.5)  # (the output rounded to bf16)


def test_a_tf32_product_splits_within_tf32s_error():
    a, b = rand(64, 8192), rand(8192, 64, seed=1)
    with fg.config.override(allow_tf32=True):
        c = mapped(dev(a) @ dev(b), tf32=True).contraction
        assert c.mma == "tf32" and c.split > 1
        got = (dev(a) @ dev(b)).cpu().numpy()
    want = a.astype(np.float64) @ b
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    assert np.all(np.abs(got - want) <= 2.0**-9 * scale)


def test_a_convolutions_weight_gradient_splits_and_matches_the_cpu():
    x, w, g = rand(8, 16, 32, 32), rand(16, 16, 3, 3, seed=1), rand(8, 16, 32, 32, seed=2)
    grads = {}
    for device in ("cuda", "cpu"):
        wt = fg.tensor(w, device=device, requires_grad=True)
        out = F.conv2d(fg.tensor(x, device=device), wt, padding=1)
        (out * fg.tensor(g, device=device)).sum().backward()
        grads[device] = wt.grad
    split = [r for r in fg.kernels(grads["cuda"]) if len(r.compiled.kernel.launches) == 2]
    assert [r.shape for r in split] == [(16, 16, 3, 3)]
    np.testing.assert_allclose(
        grads["cuda"].cpu().numpy(), grads["cpu"].numpy(), rtol=1e-4, atol=1e-3
    )
