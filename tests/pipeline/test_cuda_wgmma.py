"""Hopper's warpgroup tensor cores (`wgmma.mma_async`, sm_90a) for large 16-bit matmuls.

A `HALF_TILE` contraction whose sides are each one plain 16-byte load renders a wgmma
pipeline beside its `mma.sync` one (pipeline/cuda_wgmma.py's `wgmma_pipeline`), taken where nvcc
compiles for sm_90a, as the runtime does for sm_90 GPUs. Checked here: which contractions
render it; its staging offsets against the 128-byte swizzle's canonical layouts (written
out again below from the PTX ISA's description, not taken from the renderer); nvcc's
sm_90a build (ptxas: no spills, no serialized wgmma) and sm_90 build (the branch left out);
and, on a Hopper GPU (`FUSEGRAD_TEST_DEVICE=cuda` with PyCUDA), its answers against the
float64 products of the same 16-bit values: every operand layout, ragged edges, a batch and
buffers that are not 16-byte aligned (the copies one value at a time).

The emulator compiles without sm_90a's features, so it runs the `mma.sync` pipeline
beside it (test_cuda_sgemm.py checks that one).
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from _emulated import ON_GPU, emulated  # noqa: F401  (a fixture)
from _ptx import NVCC, build, one_unit, spills

import fusegrad as fg
from fusegrad.pipeline import cuda_wgmma, gpu
from fusegrad.pipeline.cuda import cuda_kernel
from fusegrad.pipeline.lower import lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.engine import engine

H100_SHARED = 227 * 1024  # an H100's shared memory per block, dynamic included
HALVES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# (a's stored shape, b's stored shape, the product, (A, B) MN-major): the tensor cores'
# operand layouts; 1040 x 200 x 2200 cuts the 128 x 256 tiles and the 64 steps at every edge
LAYOUTS = {
    "a @ b": ((1040, 200), (200, 2200), lambda a, b: a @ b, (0, 1)),
    "a @ b.T": ((1040, 200), (2200, 200), lambda a, b: a @ b.T, (0, 0)),
    "a.T @ b": ((200, 1040), (200, 2200), lambda a, b: a.T @ b, (1, 1)),
    "a.T @ b.T": ((200, 1040), (2200, 200), lambda a, b: a.T @ b.T, (1, 0)),
}


@pytest.fixture
def tma(monkeypatch):
    """The Tensor Memory Accelerator's pipeline on (`pipeline.cuda_wgmma.WGMMA_TMA`: off by default
    until it launches on a GPU)."""
    monkeypatch.setattr(cuda_wgmma, "WGMMA_TMA", True)


def rand16(dtype: str, *shape: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape, dtype=np.float32).astype(HALVES[dtype])


def dev(a: np.ndarray) -> fg.Tensor:
    """`a` on the cuda device (the emulator's, or the GPU the suite runs on): kernels are
    scheduled for the device of their tensors."""
    return fg.tensor(a, device="cuda")


def render(expr, shared_limit: int = H100_SHARED):
    """The kernel of `expr`'s product (the last the schedule runs)."""
    items = schedule([expr.node], engine.has_value_predicate())
    return cuda_kernel(lower(items[-1], tile=False), "k", False, shared_limit)


def wgmma_call(source: str) -> str | None:
    m = re.search(r"fg_wgmma_64x256<(true|false), (\d), (\d)>\(", source)
    return m.group(0) if m else None


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_large_16bit_matmul_renders_a_wgmma_pipeline(dtype, layout):
    sa, sb, how, (ta, tb) = LAYOUTS[layout]
    a, b = dev(rand16(dtype, *sa)), dev(rand16(dtype, *sb))
    k = render(how(a, b))
    bf16 = "true" if dtype == "bfloat16" else "false"
    assert wgmma_call(k.source) == f"fg_wgmma_64x256<{bf16}, {ta}, {tb}>(", layout
    assert "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)" in k.source
    assert "fg_mma_16816<" in k.source  # the mma.sync pipeline beside it
    # 4 buffers of 128 x 64 + 256 x 64 16-bit values, and 1 KiB to align them
    assert k.launches[0].shared_bytes == 4 * 48 * 1024 + 1024
    assert k.block == (16, 16, 1)  # two warpgroups


@pytest.mark.usefixtures("emulated")
def test_only_large_16bit_matmuls_of_plain_loads_on_big_enough_blocks_take_it():
    a, b = rand16("bfloat16", 1040, 200), rand16("bfloat16", 200, 2200)
    fa, fb = dev(a), dev(b)
    assert wgmma_call(render(fa @ fb).source)
    # an A100's 163 KiB a block: the mma.sync pipeline alone
    assert wgmma_call(render(fa @ fb, 163 * 1024).source) is None
    # a small product takes smaller tiles
    assert wgmma_call(render(fa[:100] @ fb[:, :200]).source) is None
    # float32: no 16-bit tensor cores
    f32 = dev(a.astype(np.float32)) @ dev(b.astype(np.float32))
    assert wgmma_call(render(f32).source) is None


@pytest.mark.usefixtures("emulated", "tma")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_side_has_a_tensor_map_of_its_buffer(layout):
    sa, sb, how, (ta, tb) = LAYOUTS[layout]
    k = render(how(dev(rand16("bfloat16", *sa)), dev(rand16("bfloat16", *sb))))
    assert "FG_TMAP_PARAMS) {" in k.source
    ma, mb = k.tensor_maps
    # (the kernel's parameters: the output, then a, then b)
    assert (ma.param, mb.param, ma.dtype, ma.offset, mb.offset) == (1, 2, "bfloat16", 0, 0)
    # rows along each buffer's contiguous axis: K-major, the 64 steps of the side's rows
    # (128 or 256 of them); MN-major, 64 positions (128 bytes) of 64 steps
    for m, mn, shape, rows in ((ma, ta, sa, 128), (mb, tb, sb, 256)):
        assert m.dims == shape[::-1] and m.strides == (shape[1] * 2,)
        assert m.box == ((64, 64) if mn else (64, rows))


@pytest.mark.usefixtures("emulated", "tma")
def test_a_batch_is_a_third_dimension_of_the_maps():
    a, b = rand16("float16", 3, 1040, 136), rand16("float16", 3, 136, 2200)
    k = render(dev(a) @ dev(b))
    ma, mb = k.tensor_maps
    assert ma.dims == (136, 1040, 3) and ma.strides == (272, 1040 * 272) and ma.box == (64, 128, 1)
    assert mb.dims == (2200, 136, 3) and mb.strides == (4400, 136 * 4400) and mb.box == (64, 64, 1)
    assert "fg_tma_3d(" in k.source
    # a broadcast batch (each side steps along a loop of its own): no maps, no parameters
    a4, b4 = rand16("float16", 2, 1, 1040, 136), rand16("float16", 1, 2, 136, 2200)
    k4 = render(dev(a4) @ dev(b4))
    assert k4.tensor_maps == () and "FG_TMAP_PARAMS) {" not in k4.source


def test_a_launch_packs_the_maps_after_the_pointers_64_byte_aligned():
    from fusegrad.pipeline.cuda import TensorMap
    from fusegrad.runtime import tensor_map

    specs = [TensorMap(1, "bfloat16", 0, (200, 1040), (400,), (64, 128)),
             TensorMap(2, "bfloat16", 8, (2200, 200), (4400,), (64, 64))]  # fmt: skip
    seen = []

    def encoder(spec, address):
        seen.append((spec.param, address))
        return bytes([len(seen)]) * 128

    packed = tensor_map.pack([0x1000, 0x2000, 0x3000], specs, encoder)
    assert len(packed) == 64 + 256 and packed[:24] == bytes.fromhex(
        "001000000000000000200000000000000030000000000000"
    )
    assert packed[24:64] == bytes(40) and packed[64:192] == b"\1" * 128
    assert packed[192:] == b"\2" * 128 and seen == [(1, 0x2000), (2, 0x3000)]
    # a view that does not start 16-byte aligned gets zeros (the kernel copies it another
    # way), without asking the driver
    assert tensor_map.encode(specs[1], 0x3000 + 2) == bytes(128)


@pytest.mark.usefixtures("emulated")
def test_the_pipeline_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(gpu, "WGMMA_STAGES", 0)
    a, b = rand16("bfloat16", 1040, 200), rand16("bfloat16", 200, 2200)
    k = render(dev(a) @ dev(b))
    assert wgmma_call(k.source) is None and "fg_mma_16816<true>(" in k.source


def canonical_k_major(at: int, kk: int) -> int:
    """The byte of element (at, kk) of a K-major operand, 64 16-bit steps a row, in the
    128-byte swizzle's canonical layout: rows of 128 bytes, 8-row core groups 1024 bytes
    apart (the descriptor's stride offset), a row's 16-byte chunk c at chunk c ^ (row % 8)."""
    return (at // 8) * 1024 + (at % 8) * 128 + ((kk // 8) ^ (at % 8)) * 16 + (kk % 8) * 2


def canonical_mn_major(at: int, kk: int, lbo: int, sbo: int) -> int:
    """The byte of element (at, kk) of an MN-major operand in the 128-byte swizzle's canonical
    layout: 64 consecutive positions (128 bytes) a row, one row per step, the 8-step groups
    `sbo` bytes apart and the 64-position column blocks `lbo` apart; swizzled as above."""
    row = kk % 8
    chunk = ((at % 64) // 8) ^ row
    return (at // 64) * lbo + (kk // 8) * sbo + row * 128 + chunk * 16 + (at % 8) * 2


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("mn_major", [False, True])
def test_the_staged_bytes_are_the_canonical_layouts_the_descriptors_name(side, mn_major):
    shape = ((200, 1040) if mn_major else (1040, 200)), ((200, 2200) if mn_major else (2200, 200))
    a, b = dev(rand16("bfloat16", *shape[0])), dev(rand16("bfloat16", *shape[1]))
    b = b if mn_major else b.T
    a = a.T if mn_major else a
    c = gpu.map_to_gpu(lower(schedule([(a @ b).node], engine.has_value_predicate())[0],
                             tile=False), False, H100_SHARED).contraction  # fmt: skip
    assert c.k_inner(side) != mn_major
    width = 16 * (c.ra if side == "a" else c.rb)
    offset = cuda_wgmma.WgmmaPipeline.wgmma_offset(c, side, "at", "kk")
    lbo, sbo = cuda_wgmma.WgmmaPipeline.wgmma_strides(c, side)
    seen = set()
    for at in range(width):
        for kk in range(c.kc):
            got = eval(offset, {}, {"at": at, "kk": kk})  # the C expression, in Python
            want = (canonical_mn_major(at, kk, lbo, sbo) if mn_major
                    else canonical_k_major(at, kk))  # fmt: skip
            assert got == want, (at, kk)
            seen.add(got)
    if not mn_major:
        assert sbo == 1024
    assert seen == set(range(0, width * c.kc * 2, 2))  # every value its own two bytes


@pytest.mark.usefixtures("emulated")
def test_the_tensor_memory_accelerator_stages_by_default_and_can_be_turned_off(monkeypatch):
    # (1.7x the cp.async staging on an H200: pipeline/cuda_wgmma.py's WGMMA_TMA)
    a, b = rand16("bfloat16", 1040, 200), rand16("bfloat16", 200, 2200)
    k = render(dev(a) @ dev(b))
    assert wgmma_call(k.source) and len(k.tensor_maps) == 2 and "fg_tma_2d(fg_s" in k.source
    monkeypatch.setattr(cuda_wgmma, "WGMMA_TMA", False)
    k = render(dev(a) @ dev(b))
    assert wgmma_call(k.source) and k.tensor_maps == () and "fg_tma_2d(fg_s" not in k.source


@pytest.mark.usefixtures("emulated")
@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
@pytest.mark.parametrize("with_tma", [False, True])
def test_nvcc_builds_the_pipeline_for_sm_90a_and_leaves_it_out_for_sm_90(
    tmp_path, monkeypatch, with_tma
):
    monkeypatch.setattr(cuda_wgmma, "WGMMA_TMA", with_tma)
    sources = []
    for dtype in ("bfloat16", "float16"):
        for sa, sb, how, _ in LAYOUTS.values():
            a, b = dev(rand16(dtype, *sa)), dev(rand16(dtype, *sb))
            sources.append(render(how(a, b)).source)
    unit = one_unit(sources)
    for arch, wgmma in (("sm_90a", True), ("sm_90", False)):
        text, report = build(unit, tmp_path, arch)
        # 8 kernels, each with the cp.async pipeline (and the Tensor Memory Accelerator's)
        per_kernel = 8 if with_tma else 4
        assert text.count("wgmma.mma_async.sync.aligned.m64n256k16") == 8 * per_kernel * wgmma
        assert ("cp.async.bulk.tensor.2d" in text) == (wgmma and with_tma)
        assert ("mbarrier.try_wait.parity" in text) == (wgmma and with_tma)
        if report is not None:
            assert "serialized" not in report  # ptxas's "wgmma ... serialized" warning
            assert not spills(report), report


on_hopper = pytest.mark.skipif(not ON_GPU, reason="needs a Hopper GPU (FUSEGRAD_TEST_DEVICE=cuda)")


def _check(dtype: str, got: fg.Tensor, want: np.ndarray) -> None:
    """Products of 16-bit values are exact in fp32, the sum is fp32, one rounding at the end."""
    eps = float(ml_dtypes.finfo(HALVES[dtype]).eps)
    out = got.cpu().float().numpy()
    np.testing.assert_allclose(out, want, rtol=eps, atol=1e-5 * np.abs(want).max())
    assert np.mean(out == want.astype(HALVES[dtype]).astype(np.float64)) > 0.95


@pytest.fixture(params=["cp.async", "TMA"])
def staging(request, monkeypatch):
    """The pipeline's steps staged by every thread's cp.async, then by the Tensor Memory
    Accelerator (`pipeline.cuda_wgmma.WGMMA_TMA`); plans cached the other way are forgotten
    before and after, so each runs kernels rendered its own way."""
    monkeypatch.setattr(cuda_wgmma, "WGMMA_TMA", request.param == "TMA")
    engine.forget_plans(lambda key: True)
    yield request.param
    engine.forget_plans(lambda key: True)


def _hopper() -> bool:
    from fusegrad.runtime import cuda as runtime_cuda

    return getattr(runtime_cuda.backend(), "arch", "") == "sm_90"


@on_hopper
@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_pipeline_on_a_hopper_gpu(dtype, layout, staging):
    if not _hopper():
        pytest.skip("not an sm_90 GPU")
    sa, sb, how, _ = LAYOUTS[layout]
    a, b = rand16(dtype, *sa), rand16(dtype, *sb, seed=1)
    got = how(dev(a), dev(b))
    source = render(how(dev(a), dev(b))).source
    assert wgmma_call(source) and ("FG_TMAP_PARAMS) {" in source) == (staging == "TMA")
    _check(dtype, got, how(a.astype(np.float64), b.astype(np.float64)))


@on_hopper
@pytest.mark.usefixtures("emulated")
def test_a_batch_and_unaligned_buffers_on_a_hopper_gpu(staging):
    if not _hopper():
        pytest.skip("not an sm_90 GPU")
    a, b = rand16("bfloat16", 3, 1040, 136), rand16("bfloat16", 3, 136, 2200, seed=1)
    got = dev(a) @ dev(b)
    assert wgmma_call(render(dev(a) @ dev(b)).source)
    _check("bfloat16", got, a.astype(np.float64) @ b.astype(np.float64))
    # views 1 element into their buffers: not 16-byte aligned, so copied a value at a time
    ra, rb = rand16("float16", 1040 * 200 + 1), rand16("float16", 200 * 2200 + 1, seed=1)
    fa, fb = dev(ra)[1:].reshape(1040, 200), dev(rb)[1:].reshape(200, 2200)
    want = ra[1:].reshape(1040, 200).astype(np.float64) @ rb[1:].reshape(200, 2200)
    _check("float16", fa @ fb, want)


@pytest.mark.usefixtures("emulated")
@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_dump_of_an_sm_90_kernel_shows_the_code_that_runs():
    # (an sm_90 GPU's kernels are built for sm_90a: the dump's PTX is that build's)
    from fusegrad.runtime.cuda_asm import build_arch, kernel_asm

    assert (build_arch("sm_90"), build_arch("sm_80")) == ("sm_90a", "sm_80")
    a, b = rand16("bfloat16", 1040, 200), rand16("bfloat16", 200, 2200)
    text = kernel_asm(render(dev(a) @ dev(b)), "sm_90")
    assert "nvcc -ptx -arch=sm_90a" in text and "wgmma.mma_async" in text


@on_hopper
@pytest.mark.usefixtures("emulated")
def test_the_launches_replay_right_from_a_cuda_graph(staging):
    # a plan run GRAPH_AFTER_RUNS times with the same buffers is captured as a CUDA graph:
    # the TMA kernel's launches (tensor_map.ParamsLaunch) are captured too, and replay right
    from fusegrad.runtime import cuda as runtime_cuda

    if not _hopper():
        pytest.skip("not an sm_90 GPU")
    a, b = rand16("bfloat16", 1040, 200), rand16("bfloat16", 200, 2200, seed=1)
    fa, fb = dev(a), dev(b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for _ in range(runtime_cuda.GRAPH_AFTER_RUNS + 4):
        _check("bfloat16", fa @ fb, want)
    assert runtime_cuda.backend().graphs  # (a capture the driver refused turns them off)
