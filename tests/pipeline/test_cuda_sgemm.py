"""The contraction kernels (sgemm): tiles, vector and asynchronous copies, TF32 tensor cores.

Small shapes on the CUDA emulator (on and off the tile grid, transposed operands, a
batch, gradients through the frontend, a misaligned buffer's scalar path), with
`fg.backends.cuda.matmul.allow_tf32` off (fp32, numpy's answer to fp32 rounding) and on
(WMMA m16n16k8: the emulator rounds inputs to TF32 as the GPU does); then nvcc's PTX for
sm_80 and sm_90: `cp.async` and 16-byte loads, no local memory or spills, `mma` with
`.tf32` exactly when TF32 is allowed. 16-bit inputs (float16, bfloat16) always take the
tensor cores (warp-level `mma.sync` m16n8k16 fed by `ldmatrix`, fp32 accumulation, the
output rounded once): on the emulator (which runs both lane by lane: test_cuda_mma.py)
against numpy's product of the same 16-bit values, and in the PTX (`.f16` / `.bf16`).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)
from test_cuda_emulated import EMULATED
from test_cuda_memory import ARCHS, NVCC, _misaligned, _nvcc

import fusegrad as fg
from fusegrad.ir.ops import Ops
from fusegrad.pipeline import gpu
from fusegrad.pipeline.cuda import HALF_PRELUDE, PRELUDE, cuda_kernel
from fusegrad.pipeline.loopir import Alu
from fusegrad.pipeline.lower import lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.cuda_emulator import EmulatedModule
from fusegrad.runtime.engine import engine

RNG = np.random.default_rng(2828)


def rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def tf32(x: np.ndarray) -> np.ndarray:
    """`x` rounded to TF32 (10-bit mantissa, to nearest, ties away), as cvt.rna.tf32.f32."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.fixture(autouse=True, scope="module")
def _no_amx_packing():
    # these graphs are built on the CPU and lowered for the GPU: the CPU's packing of a
    # bfloat16 right operand for AMX or vdpbf16ps tiles (frontend/reduce.py) is not what
    # they test
    with fg.config.override(amx=False, dpbf16=False):
        yield


def kernel_of(expr, tf32_allowed=False):
    (item,) = schedule([expr.node], engine.has_value_predicate())
    return cuda_kernel(lower(item, tile=False), "k", tf32_allowed)


def on_device(a: np.ndarray, b: np.ndarray, how) -> np.ndarray:
    return how(fg.tensor(a, device="cuda"), fg.tensor(b, device="cuda")).cpu().numpy()


# (a shape, b shape, product): ragged edges, k not a multiple of 4 (the scalar copies),
# transposed operands (the backward's A^T B and A B^T), a batch
SHAPES = {
    "64x64 tiles, k=64": ((200, 64), (64, 300), lambda a, b: a @ b),
    "ragged, k=31": ((65, 31), (31, 70), lambda a, b: a @ b),
    "A^T B": ((40, 72), (40, 66), lambda a, b: a.T @ b),
    "A B^T": ((72, 36), (68, 36), lambda a, b: a @ b.T),
    "batched": ((3, 33, 40), (3, 40, 36), lambda a, b: a @ b),
}


def numpy_of(case, a, b):
    return {"A^T B": lambda: a.T @ b, "A B^T": lambda: a @ b.T}.get(case, lambda: a @ b)()


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("case", list(SHAPES))
def test_fp32_sgemm_on_the_emulator(case):
    sa, sb, how = SHAPES[case]
    a, b = rand(*sa), rand(*sb)
    got = on_device(a, b, how)
    want = numpy_of(case, a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.usefixtures("emulated")
def test_the_128x128_tile_with_8x8_per_thread(monkeypatch):
    # 128x128 tiles are taken when they still fill the GPU: pretend it has one multiprocessor
    monkeypatch.setattr(gpu, "SMS", 1)
    a, b = rand(130, 24), rand(24, 257)
    k = kernel_of(fg.from_numpy(a) @ fg.from_numpy(b))
    c = gpu.map_to_gpu(
        lower(
            schedule([(fg.from_numpy(a) @ fg.from_numpy(b)).node], engine.has_value_predicate())[0],
            tile=False,
        )
    ).contraction
    assert (c.ra, c.rb, c.kc) == (8, 8, gpu.SIMT_BIG_K) and k.grid == (3, 2, 1)
    np.testing.assert_allclose(on_device(a, b, lambda x, y: x @ y), a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("k_inner", [True, False])
@pytest.mark.parametrize("how", ["a @ b", "a @ b.T", "a.T @ b"])
def test_the_simt_pipeline_in_every_layout(monkeypatch, k_inner, how):
    # the fp32 SIMT path's 128x128 tile with its steps in SIMT_STAGES buffers: a side
    # contiguous along the reduction staged [at][kk] by cp.async (or stored transposed), a
    # reduction of 52 (three whole steps of 16 unrolled, then a ragged one of 4), ragged
    # tiles, and each thread's rows and columns in groups of 4 (`cuda_simt.simt_at`)
    from fusegrad.pipeline import cuda_simt

    monkeypatch.setattr(gpu, "SMS", 1)
    monkeypatch.setattr(gpu, "SIMT_K_INNER", k_inner)
    monkeypatch.setattr(gpu, "SIMT_BIG_K", 16)
    monkeypatch.setattr(cuda_simt, "SIMT_STAGES", 3)
    a = rand(52, 132) if how.startswith("a.T") else rand(132, 52)
    b = rand(200, 52) if how.endswith("b.T") else rand(52, 200)
    product = eval(f"lambda a, b: {how}")
    (item,) = schedule(
        [product(fg.from_numpy(a), fg.from_numpy(b)).node], engine.has_value_predicate()
    )
    k = cuda_kernel(lower(item, tile=False), "k", False, 227 * 1024)
    src = k.source
    assert "fg_copy_wait<1>()" in src  # 3 buffers, 2 steps ahead: in dynamic shared memory
    assert k.launches[0].shared_bytes >= 3 * 2 * (16 * 132) * 4  # past 48 KiB: dynamic
    assert "(i >> 2) * 64 + threadIdx.y * 4 + (i & 3)" in src
    assert "(j >> 2) * 64 + threadIdx.x * 4 + (j & 3)" in src
    assert "if (fg_left >= 16) {\n          #pragma unroll\n" in src
    k_side = {"a @ b": "a", "a @ b.T": "b", "a.T @ b": None}[how]
    for side in "ab":
        staged_k_inner = f"fg_copy16_async(&{side}_v" in src and "][at][kk]" in src
        assert (staged_k_inner and side == k_side) == (k_inner and side == k_side), side
    if not k_inner and k_side:  # read 16 bytes at a time, stored transposed
        assert "__ldg((const float4*)" in src
    want = product(a.astype(np.float64), b.astype(np.float64))
    got = product(fg.tensor(a, device="cuda"), fg.tensor(b, device="cuda")).cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_tile_shapes_by_problem_size():
    # 1024 blocks of 128x128
    assert gpu._tile_shape(4096, 4096, 1, False) == (8, 8, gpu.SIMT_BIG_K)
    assert gpu._tile_shape(512, 512, 1, False) == (4, 4, 16)  # 16 would not fill 132 SMs
    assert gpu._tile_shape(512, 20, 1, False) == (4, 1, 16)
    assert gpu._tile_shape(4096, 4096, 1, "tf32") == (8, 8, 16)
    assert gpu._tile_shape(20, 20, 1, "tf32") == (2, 4, 16)  # a fragment per warp at least
    # 16-bit inputs: 32 steps staged at a time (two k16 rounds of mma per barrier)
    assert gpu._tile_shape(4096, 4096, 1, "bfloat16") == (8, 8, 32)
    assert gpu._tile_shape(20, 20, 1, "float16") == (2, 4, 32)
    # ... and where the device gives a block 96 KiB of shared memory (an H100's 227, an
    # A100's 163, 99 on sm_86 and sm_89), a large one takes 128 x 256 outputs, 64 steps in
    # two buffers; not where it gives 64 KiB (sm_75), nor where a side is narrower
    assert gpu._tile_shape(4096, 4096, 1, "bfloat16", 227 * 1024) == (8, 16, 64)
    assert gpu._tile_shape(4096, 4096, 1, "float16", 99 * 1024) == (8, 16, 64)
    assert gpu._tile_shape(4096, 4096, 1, "float16", 64 * 1024) == (8, 8, 32)
    assert gpu._tile_shape(16384, 200, 1, "bfloat16", 227 * 1024) == (8, 8, 32)
    assert gpu._tile_shape(4096, 4096, 1, "tf32", 227 * 1024) == (8, 8, 16)


def test_vector_copies_where_the_layout_allows():
    nn = kernel_of(fg.from_numpy(rand(64, 32)) @ fg.from_numpy(rand(32, 64)))
    assert "fg_copy16_async(" in nn.source and "__ldg((const float4*)" in nn.source
    assert "fg_aligned16(in0) && fg_aligned16(in1)" in nn.source
    odd = kernel_of(fg.from_numpy(rand(64, 31)) @ fg.from_numpy(rand(31, 65)))
    assert "fg_vec" not in odd.source  # no 16-byte groups: the scalar copies only


def test_a_misaligned_buffer_takes_the_scalar_copies():
    a, b = rand(96, 40), rand(40, 72)
    k = kernel_of(fg.from_numpy(a) @ fg.from_numpy(b))
    module = EmulatedModule(k.source)
    for x, y in ((a, b), (_misaligned(a), b), (a, _misaligned(b))):
        out = np.full(96 * 72, 7, np.float32)
        EMULATED.launch(EMULATED.functions(module, k, 3), k.launches, [out, x, y])
        np.testing.assert_allclose(out.reshape(96, 72), a @ b, rtol=1e-5, atol=1e-4)


def _grads(device: str, data):
    a = fg.tensor(data[0], device=device, requires_grad=True)
    b = fg.tensor(data[1], device=device, requires_grad=True)
    w = fg.tensor(data[2], device=device)
    loss = ((a @ b).relu() * w).sum()
    loss.backward()
    return [t.detach().cpu().numpy() for t in (loss, a.grad, b.grad)]


@pytest.mark.usefixtures("emulated")
def test_gradients_through_the_frontend_on_the_emulated_device():
    data = rand(70, 36), rand(36, 68), rand(70, 68)
    for got, want in zip(_grads("cuda", data), _grads("cpu", data)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------- TF32


def test_allow_tf32_is_pytorchs_flag_and_off_by_default():
    assert fg.backends.cuda.matmul.allow_tf32 is False
    x = fg.from_numpy(rand(64, 32)) @ fg.from_numpy(rand(32, 64))
    assert "wmma" not in kernel_of(x).source
    assert "nvcuda::wmma::mma_sync" in kernel_of(x, True).source
    y = (fg.from_numpy(rand(64, 32)) @ fg.from_numpy(rand(32, 64))).relu()
    assert "mma_sync" in kernel_of(y, True).source  # the epilogue runs after the mma
    # a reduction that is not a plain sum of products stays fp32 even when TF32 is allowed
    cdist = ((fg.from_numpy(rand(64, 1, 32)) - fg.from_numpy(rand(1, 64, 32))) ** 2).sum(-1)
    assert "mma_sync" not in kernel_of(cdist, True).source


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("case", ["ragged, k=31", "A^T B", "batched"])
def test_tf32_sgemm_on_the_emulator(case):
    sa, sb, how = SHAPES[case]
    a, b = rand(*sa), rand(*sb)
    try:
        fg.backends.cuda.matmul.allow_tf32 = True
        got = on_device(a, b, how)
    finally:
        fg.backends.cuda.matmul.allow_tf32 = False
    exact = numpy_of(case, a.astype(np.float64), b.astype(np.float64))
    rounded = numpy_of(case, tf32(a).astype(np.float64), tf32(b).astype(np.float64))
    np.testing.assert_allclose(got, rounded, rtol=1e-5, atol=1e-4)  # the GPU's rounding
    assert not np.allclose(got, exact, rtol=1e-6, atol=1e-6)  # ... which fp32 does not do
    np.testing.assert_allclose(got, exact, rtol=1e-2, atol=2e-2)  # TF32's tolerance
    # the flag is part of the plan: turned off again, the same product is fp32
    np.testing.assert_allclose(on_device(a, b, how), exact, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------- 16-bit tensor cores

HALVES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
MMA_CALL = {"float16": "fg_mma_16816<false>(", "bfloat16": "fg_mma_16816<true>("}


def rand16(dtype: str, *shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(HALVES[dtype])


@pytest.mark.parametrize("dtype", list(HALVES))
def test_16bit_contractions_take_the_tensor_cores(dtype):
    a, b = fg.from_numpy(rand16(dtype, 64, 32)), fg.from_numpy(rand16(dtype, 32, 64))
    k = kernel_of(a @ b)  # without allow_tf32: PyTorch uses the tensor cores for 16-bit always
    body = k.source[k.source.index('extern "C"') :]
    assert MMA_CALL[dtype] in body and "fg_ldmatrix_x4<" in body
    assert "wmma" not in body and "fg_out" not in body  # the epilogue from the registers
    assert "__float_to_tf32" not in k.source  # 16-bit values go in as they are
    storage = {"float16": "__half", "bfloat16": "__nv_bfloat16"}[dtype]
    # staged in 16 bits, 4 buffers of 32 steps (3 in flight while one is read): A
    # (contiguous along the reduction) as [at][kk], read without .trans; B (contiguous
    # along its columns) as [kk][at], read with .trans; unpadded, the 16-byte chunks of a
    # row swizzled (4 a row of A, 8 of B)
    assert f"__shared__ __align__(32) {storage} a_v1[4][64][32];" in body
    assert f"__shared__ __align__(32) {storage} b_v2[4][32][64];" in body
    assert "fg_copy_wait<2>();" in body and "const int fg_buf = kt % 4;" in body
    assert "fg_swizzle<4>(" in body and "fg_swizzle<8>(" in body
    assert "fg_ldmatrix_x4<false>(fg_a[i]" in body and "fg_ldmatrix_x4<true>(fg_b[i]" in body
    c = gpu.map_to_gpu(_lowered(a @ b)).contraction
    assert c.mma == dtype
    # a side value computed in the fp32 registers (the scheduler stores such prologues today,
    # so the contraction sees loads: build one) is not a 16-bit number: the fp32 path
    (load,), ((name, t),) = c.a_stmts, c.a_exports
    raw = dataclasses.replace(load, dst="raw")
    for op, args, kind in ((Ops.MUL, ("raw", "raw"), None), (Ops.CAST, ("raw",), dtype)):
        side = [raw, Alu(name, t, op, args)]  # ... but a cast to the 16-bit type rounds it
        parts = (c.consts, side, c.b_stmts, c.terms, c.a_exports, c.b_exports)
        assert gpu._mma_kind(c.red, parts, tf32=True) == kind, op


def _lowered(expr):
    (item,) = schedule([expr.node], engine.has_value_predicate())
    return lower(item, tile=False)


def _as_f32(t) -> np.ndarray:
    return t.cpu().float().numpy()  # rounded on the device (a fused `.float()` would not be)


HALF_SHAPES = {
    **SHAPES,
    "16-byte": ((40, 48), (48, 72), lambda a, b: a @ b),  # k=48: 1.5 staged steps of 32
    "k=16": ((33, 16), (16, 65), lambda a, b: a @ b),  # half a staged step
    "k=200, tall": ((150, 200), (200, 24), lambda a, b: a @ b),
    "k=9, wide": ((20, 9), (9, 130), lambda a, b: a @ b),
    "batched 16-byte": ((2, 40, 64), (2, 64, 48), lambda a, b: a @ b),
}


def _check_16bit(dtype, got, want):
    """`got` (16-bit, on the device) against the exact `want`: products of 16-bit values are
    exact in fp32, the sum is fp32, one rounding at the end."""
    eps = float(ml_dtypes.finfo(HALVES[dtype]).eps)
    np.testing.assert_allclose(_as_f32(got), want, rtol=eps, atol=1e-5 * np.abs(want).max())
    # most outputs are the exact product rounded once (fp32 sums in another order aside)
    rounded = want.astype(HALVES[dtype]).astype(np.float64)
    assert np.mean(_as_f32(got) == rounded) > 0.95


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize(
    "dtype, case",
    [("float16", "ragged, k=31"), ("bfloat16", "16-byte"), ("float16", "64x64 tiles, k=64"),
     ("bfloat16", "A^T B"), ("float16", "A B^T"), ("bfloat16", "batched"), ("float16", "k=16"),
     ("bfloat16", "k=200, tall"), ("float16", "k=9, wide"), ("bfloat16", "batched 16-byte")],
)  # fmt: skip
def test_16bit_gemm_on_the_emulator(dtype, case):
    # (a float16 convolution: test_cuda_conv.py)
    sa, sb, how = HALF_SHAPES[case]
    a, b = rand16(dtype, *sa), rand16(dtype, *sb)
    source = kernel_of(how(fg.from_numpy(a), fg.from_numpy(b))).source
    assert MMA_CALL[dtype] in source, case
    if case in ("16-byte", "batched 16-byte"):
        # rows of multiples of 8: both sides go straight to shared memory, 16 bytes at a time
        assert "fg_copy16_async(&a_" in source and "fg_copy16_async(&b_" in source
    got = how(fg.tensor(a, device="cuda"), fg.tensor(b, device="cuda"))
    assert got.dtype == getattr(fg, dtype)
    _check_16bit(dtype, got, numpy_of(case, a.astype(np.float64), b.astype(np.float64)))


@pytest.mark.usefixtures("emulated")
def test_a_big_right_operand_is_staged_as_it_is_on_the_gpu():
    # the CPU copies a B too big for its cache into 32-column panels first; on the GPU that
    # copy would only cost a kernel and make B's tile copies scalar (a panel's index)
    a, b = rand16("bfloat16", 64, 1024), rand16("bfloat16", 1024, 1024)  # B: 2 MiB
    for device, kernels in (("cpu", 2), ("cuda", 1)):
        x, y = fg.tensor(a, device=device), fg.tensor(b, device=device)
        items = schedule([(x @ y).node], engine.has_value_predicate())
        assert len(items) == kernels, device
    c = gpu.map_to_gpu(lower(items[0], tile=False)).contraction
    assert (c.a_vector, c.b_vector) == ("k", "m")  # both sides by cp.async


@pytest.mark.usefixtures("emulated")
def test_the_16bit_128x128_tile(monkeypatch):
    # 64 x 32 outputs per warp (4 x 4 mma per 16 steps); pretend the GPU has one
    # multiprocessor so that a small problem takes the big tile
    monkeypatch.setattr(gpu, "SMS", 1)
    a, b = rand16("bfloat16", 130, 40), rand16("bfloat16", 40, 257)
    expr = fg.from_numpy(a) @ fg.from_numpy(b)
    c = gpu.map_to_gpu(_lowered(expr)).contraction
    assert (c.ra, c.rb, c.kc) == (8, 8, 32) and kernel_of(expr).grid == (3, 2, 1)
    source = kernel_of(expr).source
    assert "float acc1_frag[4][4][4];" in source
    # three buffers of 32 steps fill the 48 KiB of static shared memory
    assert "a_v1[3][128][32];" in source and "b_v2[3][32][128];" in source
    assert "fg_copy_wait<1>();" in source and kernel_of(expr).static_shared_bytes == 48 * 1024
    got = fg.tensor(a, device="cuda") @ fg.tensor(b, device="cuda")
    _check_16bit("bfloat16", got, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("dtype", list(HALVES))
def test_the_16bit_128x256_tile_in_dynamic_shared_memory(monkeypatch, dtype):
    # 64 x 64 outputs per warp, 64 steps staged in two buffers of 48 KiB: past the 48 KiB of
    # static shared memory, so carved from the launch's dynamic shared memory; the emulated
    # device gives a block an H100's 227 KiB, as the GPU does. Ragged at every edge (130 x
    # 136 x 260: a partial step of 8, a tile cut in both directions), with special values:
    # a row of zeros, a NaN that takes its whole row, an infinity times positive values, a
    # row of -0.0, and rows of +1 and -1 in the last (partial) step that pick B's last row
    monkeypatch.setattr(gpu, "SMS", 1)
    a, b = rand16(dtype, 130, 136), rand16(dtype, 136, 260)
    a[0] = 0
    a[1, 3] = np.nan
    a[2, 4], b[4] = np.inf, 1
    a[3] = -0.0
    a[5:7] = 0
    a[5, 135], a[6, 135] = 1, -1
    expr = fg.from_numpy(a) @ fg.from_numpy(b)
    c = gpu.map_to_gpu(_lowered(expr), shared_limit=227 * 1024).contraction
    assert (c.ra, c.rb, c.kc) == (8, 16, 64)
    k = cuda_kernel(_lowered(expr), "k", shared_limit=227 * 1024)
    storage = {"float16": "__half", "bfloat16": "__nv_bfloat16"}[dtype]
    assert "FG_DYNAMIC_SHARED(fg_dynamic);" in k.source
    assert f"auto& a_v1 = *reinterpret_cast<{storage} (*)[2][128][64]>(fg_dynamic + 0);" in k.source
    assert f"auto& b_v2 = *reinterpret_cast<{storage} (*)[2][64][256]>(fg_dynamic + 32768);" in (
        k.source
    )
    assert "float acc1_frag[4][8][4];" in k.source and "fg_copy_wait<0>();" in k.source
    assert k.launches[0].shared_bytes == 96 * 1024 and k.static_shared_bytes == 0
    assert k.grid == (2, 2, 1)
    # a device of 48 KiB gets the static 128 x 128 tile
    small = cuda_kernel(_lowered(expr), "k")
    assert "FG_DYNAMIC_SHARED" not in small.source[small.source.index('extern "C"') :]
    assert small.launches[0].shared_bytes == 0
    got = fg.tensor(a, device="cuda") @ fg.tensor(b, device="cuda")
    want = a.astype(np.float64) @ b.astype(np.float64)
    g = _as_f32(got)
    assert (g[0] == 0).all() and (g[3] == 0).all()
    assert not np.signbit(g[3]).any()  # -0.0 times anything, summed from +0: +0, as PyTorch's
    assert np.isnan(g[1]).all() and (g[2] == np.inf).all()
    last = b[135].astype(np.float32)
    np.testing.assert_array_equal(g[5], last)  # exact: one product, no rounding
    np.testing.assert_array_equal(g[6], -last)
    _check_16bit(dtype, fg.from_numpy(g[4:].astype(HALVES[dtype])), want[4:])


@pytest.mark.usefixtures("emulated")
def test_registers_for_two_16bit_blocks_a_multiprocessor(monkeypatch):
    # `cuda.HALF_MIN_BLOCKS` (benchmarks/gpu_tiles.py's fifth number): nvcc is told to leave
    # registers for that many blocks; the kernel computes the same
    from fusegrad.pipeline import cuda

    monkeypatch.setattr(cuda, "HALF_MIN_BLOCKS", 2)
    monkeypatch.setattr(cuda, "SIMT_MIN_BLOCKS", 1)
    a, b = rand16("float16", 40, 48), rand16("float16", 48, 72)
    k = kernel_of(fg.from_numpy(a) @ fg.from_numpy(b))
    assert 'extern "C" __global__ void __launch_bounds__(256, 2) k(' in k.source
    x = fg.from_numpy(np.ones((40, 48), np.float32))
    assert "__launch_bounds__" not in kernel_of(x @ x.T).source  # fp32: SIMT_MIN_BLOCKS
    got = fg.tensor(a, device="cuda") @ fg.tensor(b, device="cuda")
    _check_16bit("float16", got, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.usefixtures("emulated")
def test_a_16bit_gemm_with_a_fused_epilogue_on_the_emulator():
    a, b, bias = rand16("float16", 70, 48), rand16("float16", 48, 90), rand16("float16", 90)
    y = (fg.from_numpy(a) @ fg.from_numpy(b) + fg.from_numpy(bias)).relu()
    k = kernel_of(y)  # one kernel: the bias and the ReLU after the mma, lane by lane
    assert MMA_CALL["float16"] in k.source and "fg_max(" in k.source
    x_dev, w_dev = fg.tensor(a, device="cuda"), fg.tensor(b, device="cuda")
    got = (x_dev @ w_dev + fg.tensor(bias, device="cuda")).relu()
    # the product rounded to float16 (the matmul's output type), then the bias, then ReLU
    x, w = a.astype(np.float64), b.astype(np.float64)
    want = np.maximum((x @ w).astype(np.float16).astype(np.float64) + bias, 0)
    np.testing.assert_allclose(_as_f32(got), want, rtol=2e-3, atol=2e-3)


def test_one_block_walks_every_16bit_tile(monkeypatch):
    # a grid smaller than the tiles (past the GPU's grid limits): each block loops over
    # tiles, and a tile's first steps are staged only once every warp is done with the last
    monkeypatch.setattr(gpu, "MAX_GRID_X", 1)
    monkeypatch.setattr(gpu, "MAX_GRID_Y", 1)
    a, b = rand16("float16", 2, 100, 40), rand16("float16", 2, 40, 136)
    k = kernel_of(fg.from_numpy(a) @ fg.from_numpy(b))
    assert k.grid == (1, 1, 1)  # 2 batches x 2 x 3 tiles of 64x64
    out = np.zeros(2 * 100 * 136, np.float16)
    EMULATED.launch(EMULATED.functions(EmulatedModule(k.source), k, 3), k.launches, [out, a, b])
    want = a.astype(np.float64) @ b.astype(np.float64)
    _check_16bit("float16", fg.from_numpy(out.reshape(want.shape)), want)


@pytest.mark.usefixtures("emulated")
def test_a_misaligned_16bit_buffer_takes_the_scalar_copies():
    a, b = rand16("bfloat16", 96, 40), rand16("bfloat16", 40, 72)
    k = kernel_of(fg.from_numpy(a) @ fg.from_numpy(b))
    module = EmulatedModule(k.source)
    want = a.astype(np.float64) @ b.astype(np.float64)
    eps = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)
    for x, y in ((a, b), (_misaligned(a), b), (a, _misaligned(b))):
        out = np.zeros(96 * 72, ml_dtypes.bfloat16)
        EMULATED.launch(EMULATED.functions(module, k, 3), k.launches, [out, x, y])
        got = out.reshape(96, 72).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=eps, atol=1e-5 * np.abs(want).max())


@pytest.mark.usefixtures("emulated")
def test_16bit_gemm_gradients_on_the_emulator():
    dtype = "bfloat16"
    data = rand16(dtype, 20, 24), rand16(dtype, 24, 36), rand16(dtype, 20, 36)

    def run(device):
        a = fg.tensor(data[0], device=device, requires_grad=True)
        b = fg.tensor(data[1], device=device, requires_grad=True)
        loss = ((a @ b) * fg.tensor(data[2], device=device)).float().sum()
        loss.backward()
        return a.grad, b.grad

    ga, gb = run("cuda")
    assert ga.dtype == gb.dtype == fg.bfloat16
    x, y, w = (d.astype(np.float64) for d in data)
    eps = float(ml_dtypes.finfo(HALVES[dtype]).eps)
    for got, want in ((ga, w @ y.T), (gb, x.T @ w)):
        np.testing.assert_allclose(_as_f32(got), want, rtol=eps, atol=1e-5)
    # the backward's contractions ran on the tensor cores
    sources = [r.cuda_c for r in fg.kernels(ga, gb)]
    assert sum(MMA_CALL[dtype] in s for s in sources) >= 2


# ---------------------------------------------------------------- PTX


@pytest.fixture(scope="module")
def sgemm_ptx(tmp_path_factory):
    if NVCC is None or shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    a, b = fg.from_numpy(rand(256, 128)), fg.from_numpy(rand(128, 256))
    kernels = {
        "nn": kernel_of(a @ b),
        "tn": kernel_of(fg.from_numpy(rand(128, 256)).T @ b),
        # (128 rows: from 256 the host packs a B read along K in panels first, a kernel
        # of its own: frontend/reduce.py PACK_FROM_ROWS)
        "nt": kernel_of(fg.from_numpy(rand(128, 128)) @ fg.from_numpy(rand(256, 128)).T),
        "tf32": kernel_of(a @ b, True),
    }
    # (float16: test_cuda_conv.py's convolution)
    x, y = (fg.from_numpy(rand16("bfloat16", *s)) for s in ((256, 128), (128, 256)))
    kernels["bfloat16"] = kernel_of(x @ y)
    # the 128x128 tile, 64 x 32 outputs per warp: 64 fp32 accumulators per lane; built on
    # the cuda device, whose matmul copies no big right operand into panels first (the
    # CPU's does: `Backend.packs_panels`), so both sides go by cp.async
    with fg.config.override(cuda="emulate"):
        from fusegrad.runtime import cuda as runtime_cuda

        runtime_cuda.reset()
        x, y = (fg.tensor(np.ones((4096, 4096), ml_dtypes.bfloat16), device="cuda") for _ in "xy")
        kernels["bfloat16_4096"] = kernel_of(x @ y)
        # where the device gives a block 96 KiB (sm_80 and sm_90 do): 128 x 256 outputs, 64
        # steps in two buffers of dynamic shared memory, 64 x 64 outputs per warp
        (item,) = schedule([(x @ y).node], engine.has_value_predicate())
        kernels["bfloat16_big"] = cuda_kernel(lower(item, tile=False), "k", False, 227 * 1024)
        # the fp32 SIMT path's 128x128 tile, its steps in SIMT_STAGES buffers of dynamic
        # shared memory
        x, y = (fg.tensor(np.ones((4096, 4096), np.float32), device="cuda") for _ in "xy")
        (item,) = schedule([(x @ y).node], engine.has_value_predicate())
        kernels["fp32_4096"] = cuda_kernel(lower(item, tile=False), "k", False, 227 * 1024)
    runtime_cuda.reset()
    assert kernels["bfloat16_4096"].grid == (32, 32, 1)
    assert "fg_copy16_async(&b_" in kernels["bfloat16_4096"].source
    sources = {}
    for name, k in kernels.items():
        sources[name] = k.source[k.source.index('extern "C"') :].replace(" k(", f" sgemm_{name}(")
    text = PRELUDE + HALF_PRELUDE + "\n".join(sources.values())
    folder = tmp_path_factory.mktemp("sgemm_ptx")
    with ThreadPoolExecutor(len(ARCHS)) as pool:
        done = dict(zip(ARCHS, pool.map(lambda arch: _nvcc(arch, text, folder), ARCHS)))
    return done


def _entries(ptx_text: str) -> dict[str, str]:
    """entry -> body (any directives between the parameters and the body skipped)"""
    pattern = r"(?ms)^\.visible \.entry (\w+)\(.*?\)[^{]*?^\{(.*?)^\}"
    return {m.group(1): m.group(2) for m in re.finditer(pattern, ptx_text)}


@pytest.mark.parametrize("arch", ARCHS)
def test_sgemm_ptx(sgemm_ptx, arch):
    text, report = sgemm_ptx[arch]
    entries = _entries(text)
    names = ("nn", "tn", "nt", "tf32", "bfloat16", "bfloat16_4096", "bfloat16_big", "fp32_4096")
    assert {f"sgemm_{n}" for n in names} <= set(entries)
    for symbol, body in entries.items():
        assert ".local" not in body, f"{symbol} uses local memory"
    # a side contiguous along its outputs goes global -> shared asynchronously, and so does
    # a side contiguous along the reduction (staged [at][kk]: WMMA reads it as a row-major
    # A or a column-major B), fp32, TF32 or 16-bit
    for name in ("nn", "tn", "nt", "tf32", "bfloat16", "bfloat16_4096", "bfloat16_big",
                 "fp32_4096"):  # fmt: skip
        assert "cp.async.cg.shared.global" in entries[f"sgemm_{name}"], name
        assert "cp.async.wait_group" in entries[f"sgemm_{name}"], name
    mma = re.compile(r"\b(w?mma\.\S*sync\S*)")
    tf32_ops = mma.findall(entries["sgemm_tf32"])
    assert tf32_ops and all(".tf32" in op for op in tf32_ops), tf32_ops
    # bfloat16 inputs, fp32 accumulators: warp-level mma.sync fed by ldmatrix, no WMMA
    # the big tile's staging is the dynamic shared memory the launch asks for
    assert ".extern .shared .align 128 .b8 fg_dynamic[]" in text
    for name, per_step in (
        ("bfloat16", 2 * 2 * 2),
        ("bfloat16_4096", 2 * 4 * 4),
        ("bfloat16_big", 4 * 4 * 8),
    ):
        body = entries[f"sgemm_{name}"]
        ops = mma.findall(body)
        want = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
        assert ops and all(op == want for op in ops), ops
        assert len(ops) == per_step, (name, len(ops))  # two k16 rounds, unrolled
        assert "wmma" not in body
        # A (contiguous along k) is read as stored, B (along its columns) transposed
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in body, name
        assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body, name
    for name in ("nn", "tn", "nt", "fp32_4096"):
        assert not mma.search(entries[f"sgemm_{name}"]), name
    # the SIMT tile's threads read their 4 neighbouring rows or columns 16 bytes at a time
    assert "ld.shared.v4.f32" in entries["sgemm_fp32_4096"]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert len(spills) >= len(entries) and all(s == ("0", "0") for s in spills), report
