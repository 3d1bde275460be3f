"""TF32 matmuls on Hopper's warpgroup tensor cores (`wgmma ... .tf32`, sm_90a), with
`fg.backends.cuda.matmul.allow_tf32` on.

A large fp32 contraction whose sides are each one plain 16-byte load takes `gpu.TF32_TILE`
(128 x 256 outputs, 32 steps a buffer) and renders the wgmma pipeline, staged by the Tensor
Memory Accelerator, beside its WMMA one (taken below sm_90a, and by the emulator). wgmma
reads TF32 operands K-major only, so a side contiguous along its outputs is first copied
K-major into a scratch buffer by a launch of its own (`cuda_wgmma.transpose_kernel`); a K-major
side whose view does not start 16-byte aligned gets a map from the aligned address before
it (`TensorMap.realign`), so every buffer takes the TMA pipeline. Checked here: which
contractions render it, the maps and launches, the staged bytes against the 128-byte
swizzle's canonical K-major layout for 4-byte values, the transposing launch's copy (run on
the emulator), the realigned maps, the WMMA pipeline at the new tile on the emulator,
nvcc's sm_90a and sm_90 builds, and on a Hopper GPU the answers within TF32's error of the
float64 products, in every operand layout, a batch, unaligned views and special values.
"""

from __future__ import annotations

import numpy as np
import pytest
from _emulated import ON_GPU, emulated  # noqa: F401  (a fixture)
from _ptx import NVCC, build, one_unit, spills

import fusegrad as fg
from fusegrad.pipeline import cuda_wgmma, gpu
from fusegrad.pipeline.cuda import PRELUDE, cuda_kernel
from fusegrad.pipeline.cuda_wgmma import transpose_kernel
from fusegrad.pipeline.lower import lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.engine import engine

H100_SHARED = 227 * 1024
CALL = "fg_wgmma_64x256_tf32(fg_d"
# (a's stored shape, b's stored shape, the product, which sides are copied K-major first)
LAYOUTS = {
    "a @ b": ((1040, 200), (200, 2200), lambda a, b: a @ b, "b"),
    "a @ b.T": ((1040, 200), (2200, 200), lambda a, b: a @ b.T, ""),
    "a.T @ b": ((200, 1040), (200, 2200), lambda a, b: a.T @ b, "ab"),
    "a.T @ b.T": ((200, 1040), (2200, 200), lambda a, b: a.T @ b.T, "a"),
}


@pytest.fixture(autouse=True)
def tf32_wgmma(monkeypatch):
    """The pipeline on (`gpu.TF32_WGMMA`, its default, whatever a test before set), plans
    cached without it forgotten before and after."""
    engine.forget_plans(lambda key: True)
    monkeypatch.setattr(gpu, "TF32_WGMMA", True)
    yield
    engine.forget_plans(lambda key: True)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def dev(a: np.ndarray) -> fg.Tensor:
    return fg.tensor(a, device="cuda")


def contraction_item(expr):
    return schedule([expr.node], engine.has_value_predicate())[-1]


def render(expr, tf32: bool = True, shared_limit: int = H100_SHARED):
    """The CUDA kernel of `expr`'s product, as an H100 would get it."""
    return cuda_kernel(lower(contraction_item(expr), tile=False), "k", tf32, shared_limit)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_large_tf32_matmul_renders_the_wgmma_pipeline_in_every_layout(layout):
    sa, sb, how, transposed = LAYOUTS[layout]
    k = render(how(dev(rand(*sa)), dev(rand(*sb))))
    assert k.source.count(CALL) == 4  # 32 steps a buffer, 8 a product
    assert "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)" in k.source
    assert "wmma::mma_sync" in k.source  # the WMMA pipeline beside it
    # a launch per side copied K-major, then the contraction
    assert [ln.symbol for ln in k.launches] == [f"k_t{s}" for s in transposed] + ["k"]
    assert len(k.scratch) == len(transposed)
    assert k.launches[-1].block == (16, 16, 1)
    for m, side, rows in zip(k.tensor_maps, "ab", (128, 256)):
        assert (
            m.dtype == "float32"
            and m.box == (32, rows)
            and m.dims == (200, 1040 if side == "a" else 2200)
        )
        assert m.strides == (800,)
        if side in transposed:  # the scratch buffers follow the three parameters
            assert m.param == 3 + transposed.index(side) and m.offset == 0
        else:
            assert m.param == (1 if side == "a" else 2)


@pytest.mark.usefixtures("emulated")
def test_the_pipeline_is_on_by_default_and_off_leaves_the_wmma_one(monkeypatch):
    monkeypatch.undo()  # (the module's fixture turns it on)
    assert gpu.TF32_WGMMA
    monkeypatch.setattr(gpu, "TF32_WGMMA", False)
    k = render(dev(rand(1040, 200)) @ dev(rand(200, 2200)))
    assert CALL not in k.source and len(k.launches) == 1 and "wmma::mma_sync" in k.source


@pytest.mark.usefixtures("emulated")
def test_only_large_tf32_products_of_plain_loads_with_the_tma_on_hopper_blocks_take_it(
    monkeypatch,
):
    a, b = dev(rand(1040, 200)), dev(rand(200, 2200))
    assert CALL in render(a @ b).source
    assert CALL not in render(a @ b, tf32=False).source  # fp32 unless TF32 is allowed
    assert CALL not in render(a @ b, shared_limit=163 * 1024).source  # an A100's blocks
    assert CALL not in render(a[:100] @ b[:, :200]).source  # small: small tiles
    strided = dev(rand(1040, 400))[:, ::2]  # a side no 16-byte load reads: WMMA
    assert CALL not in render(strided @ b).source
    monkeypatch.setattr(cuda_wgmma, "WGMMA_TMA", False)  # TF32 wgmma is staged by TMA only
    k = render(a @ b)
    assert CALL not in k.source and len(k.launches) == 1 and "wmma::mma_sync" in k.source


def canonical_k_major_fp32(at: int, kk: int) -> int:
    """The byte of element (at, kk) of a K-major operand of 32 4-byte steps a row in the
    128-byte swizzle's canonical layout: rows of 128 bytes, 8-row groups 1024 bytes apart,
    a row's 16-byte chunk c at chunk c ^ (row % 8)."""
    return (at // 8) * 1024 + (at % 8) * 128 + ((kk // 4) ^ (at % 8)) * 16 + (kk % 4) * 4


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("side", ["a", "b"])
def test_the_staged_fp32_bytes_are_the_canonical_k_major_layout(side):
    a, b = dev(rand(1040, 200)), dev(rand(200, 2200))  # b along its outputs: copied K-major
    kernel = lower(contraction_item(a @ b), tile=False)
    c = gpu.map_to_gpu(kernel, True, H100_SHARED).contraction
    assert (c.ra, c.rb, c.kc) == gpu.TF32_TILE
    width = 16 * (c.ra if side == "a" else c.rb)
    offset = cuda_wgmma.WgmmaPipeline.wgmma_offset(c, side, "at", "kk")
    assert cuda_wgmma.WgmmaPipeline.wgmma_strides(c, side) == (16, 1024)
    seen = set()
    for at in range(width):
        for kk in range(c.kc):
            got = eval(offset, {}, {"at": at, "kk": kk})  # the C expression, in Python
            assert got == canonical_k_major_fp32(at, kk), (at, kk)
            seen.add(got)
    assert seen == set(range(0, width * c.kc * 4, 4))  # every value its own four bytes


def _run_transpose(expr, side: str, *inputs: np.ndarray) -> tuple[np.ndarray, tuple]:
    """Run `side`'s transposing launch of `expr`'s kernel on the emulator, its sm_90a guard
    taken away: (the scratch buffer, its launch)."""
    from fusegrad.runtime.cuda_emulator import EmulatedModule

    kernel = lower(contraction_item(expr), tile=False)
    g = gpu.map_to_gpu(kernel, True, H100_SHARED)
    head = (
        ", ".join(
            f"{'' if p.output else 'const '}float* __restrict__ {p.name}" for p in kernel.params
        )
        + f", float* __restrict__ fg_t{side}"
    )
    source, launch, count = transpose_kernel(kernel, g.contraction, side, "t", head)
    source = source.replace("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)", "#if 1")
    module = EmulatedModule(PRELUDE + source)
    out = np.zeros(1, np.float32)  # (the product's output: not touched)
    scratch = np.full(count, np.nan, np.float32)
    module.get_function("t")(out, *inputs, scratch, grid=launch.grid, block=launch.block)
    return scratch, launch


@pytest.mark.usefixtures("emulated")
def test_the_transposing_launch_copies_a_side_k_major_its_rows_padded_with_zeros():
    # a.T @ b: both sides along their outputs; 202 steps, rows of 204 (16-byte multiples)
    a, b = rand(202, 300), rand(202, 520, seed=1)
    expr = dev(a).T @ dev(b)
    for side, x in (("a", a), ("b", b)):
        scratch, launch = _run_transpose(expr, side, a, b)
        got = scratch.reshape(x.shape[1], 204)
        np.testing.assert_array_equal(got[:, :202], x.T)  # a copy: exact
        np.testing.assert_array_equal(got[:, 202:], 0.0)
        assert launch.block == (32, 8, 1) and launch.grid == (7, -(-x.shape[1] // 32), 1)


@pytest.mark.usefixtures("emulated")
def test_the_transposing_launch_of_a_batch_and_of_a_view_into_its_buffer():
    # a batch of 3 products, b along its outputs; b a view 4 values into its buffer
    a, raw = rand(3, 512, 64), rand(4 + 3 * 64 * 1024, seed=1)
    b = raw[4:].reshape(3, 64, 1024)
    # (requiring grad: a SHRINK of the buffer in the kernel, not a view of its memory)
    fb = dev(raw).requires_grad_()[4:].reshape(3, 64, 1024)
    scratch, _ = _run_transpose(dev(a) @ fb, "b", a, raw)
    np.testing.assert_array_equal(scratch.reshape(3, 1024, 64), b.transpose(0, 2, 1))


@pytest.mark.usefixtures("emulated")
def test_a_k_major_view_off_16_bytes_gets_a_map_from_the_boundary_before_it():
    from fusegrad.runtime import tensor_map

    a, b = dev(rand(1040, 200)), dev(rand(2200, 200))
    k = render(a @ b.T)
    ma, mb = k.tensor_maps
    assert ma.realign and mb.realign and "fg_shift_a = (int)" in k.source
    assert "fg_k + fg_shift_b" in k.source  # the shift added to the steps' coordinate
    # aligned: the view's own map; 1..3 values past a boundary: from it, 200 + s steps
    assert tensor_map.realigned(ma, 0x1000) == (0x1000, (200, 1040))
    for s in (1, 2, 3):
        assert tensor_map.realigned(ma, 0x1000 + 4 * s) == (0x1000, (200 + s, 1040))
    # a transposed side's copy (always aligned) is not realigned
    mt = render(a @ dev(rand(200, 2200))).tensor_maps[1]
    assert not mt.realign and tensor_map.realigned(mt, 0x2004) == (0x2004, (200, 2200))


def _tf32_round(x: np.ndarray) -> np.ndarray:
    """`x` rounded to TF32 (10-bit mantissa, to nearest, ties away), as cvt.rna.tf32.f32."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.usefixtures("emulated")
def test_the_wmma_pipeline_at_the_tf32_tile_on_the_emulator():
    # what GPUs below sm_90a run for such a product (and the emulator): right at the new tile
    a, b = rand(5, 512, 44), rand(5, 44, 1024, seed=1)
    fa, fb = dev(a), dev(b)
    with fg.config.override(allow_tf32=True):
        c = gpu.map_to_gpu(lower(contraction_item(fa @ fb), tile=False), True, H100_SHARED)
        assert (c.contraction.ra, c.contraction.rb, c.contraction.kc) == gpu.TF32_TILE
        got = (fa @ fb).cpu().numpy()
    if ON_GPU and _hopper():  # (a Hopper GPU runs the wgmma pipeline: its operands truncated)
        _check_tf32(got, a, b, lambda x, y: x @ y)
        return
    want = _tf32_round(a).astype(np.float64) @ _tf32_round(b).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.usefixtures("emulated")
@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_nvcc_builds_the_tf32_pipeline_for_sm_90a_and_leaves_it_out_for_sm_90(tmp_path):
    sources = [
        render(how(dev(rand(*sa)), dev(rand(*sb)))).source for sa, sb, how, _ in LAYOUTS.values()
    ]
    unit = one_unit(sources)
    for arch, wgmma in (("sm_90a", True), ("sm_90", False)):
        text, report = build(unit, tmp_path, arch)
        assert text.count("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32") == 4 * 4 * wgmma
        assert ("cp.async.bulk.tensor.2d" in text) == wgmma
        if report is not None:
            assert "serialized" not in report
            if wgmma:  # (the WMMA pipeline at this tile, run by no Hopper, spills a few bytes)
                assert not spills(report), report


on_hopper = pytest.mark.skipif(not ON_GPU, reason="needs a Hopper GPU (FUSEGRAD_TEST_DEVICE=cuda)")


def _hopper() -> bool:
    from fusegrad.runtime import cuda as runtime_cuda

    return getattr(runtime_cuda.backend(), "arch", "") == "sm_90"


def _check_tf32(got: np.ndarray, a: np.ndarray, b: np.ndarray, how) -> None:
    """Within TF32's error of the float64 product: each operand keeps 10 of its 23 mantissa
    bits (truncated on wgmma, rounded on WMMA: under 2^-10 relative), so each product is
    within 2^-9 of its value, and the fp32 sum adds its own rounding."""
    want = how(a.astype(np.float64), b.astype(np.float64))
    scale = how(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    steps = max(a.shape + b.shape)  # (at least the reduction's length)
    bound = (2.0**-9 + 2.0**-22 * steps) * scale + 1e-30
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))
    # and not the fp32 product: TF32 was used (its error is far above fp32's here)
    assert np.max(np.abs(got - want) / scale) > 2.0**-16


@pytest.fixture
def tf32_on():
    engine.forget_plans(lambda key: True)
    with fg.config.override(allow_tf32=True):
        yield
    engine.forget_plans(lambda key: True)


@on_hopper
@pytest.mark.usefixtures("emulated", "tf32_on")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_tf32_products_on_a_hopper_gpu(layout):
    if not _hopper():
        pytest.skip("not an sm_90 GPU")
    sa, sb, how, _ = LAYOUTS[layout]
    a, b = rand(*sa), rand(*sb, seed=1)
    assert CALL in render(how(dev(a), dev(b))).source
    _check_tf32(how(dev(a), dev(b)).cpu().numpy(), a, b, how)


@on_hopper
@pytest.mark.usefixtures("emulated", "tf32_on")
def test_tf32_batch_unaligned_views_and_special_values_on_a_hopper_gpu():
    if not _hopper():
        pytest.skip("not an sm_90 GPU")
    a, b = rand(3, 1040, 136), rand(3, 136, 2200, seed=1)
    _check_tf32((dev(a) @ dev(b)).cpu().numpy(), a, b, lambda x, y: x @ y)
    # views 1 value into their buffers: not 16-byte aligned (a realigned map, a transposed copy)
    ra, rb = rand(1040 * 200 + 1), rand(200 * 2200 + 1, seed=1)
    fa, fb = dev(ra)[1:].reshape(1040, 200), dev(rb)[1:].reshape(200, 2200)
    a2, b2 = ra[1:].reshape(1040, 200), rb[1:].reshape(200, 2200)
    _check_tf32((fa @ fb).cpu().numpy(), a2, b2, lambda x, y: x @ y)
    # NaN, infinities, zeros of both signs and a zero row go through as in fp32
    a3, b3 = rand(1040, 200), rand(200, 2200, seed=1)
    a3[0, 0], a3[1, 1], a3[2] = np.nan, np.inf, -0.0
    b3[:, 5] = 0.0
    got = (dev(a3) @ dev(b3)).cpu().numpy()
    want = a3.astype(np.float64) @ b3.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    assert np.all(got[2] == 0.0) and np.all(got[3:, 5] == 0.0)


@on_hopper
@pytest.mark.usefixtures("emulated", "tf32_on")
def test_the_copy_and_the_product_replay_right_from_a_cuda_graph():
    # the plan's two launches (the copy of b into its scratch, then the product) captured
    # as a CUDA graph once they repeat, and replayed with the scratch in the plan's arena
    from fusegrad.runtime import cuda as runtime_cuda

    if not _hopper():
        pytest.skip("not an sm_90 GPU")
    a, b = rand(1040, 200), rand(200, 2200, seed=1)
    fa, fb = dev(a), dev(b)
    for _ in range(runtime_cuda.GRAPH_AFTER_RUNS + 4):
        _check_tf32((fa @ fb).cpu().numpy(), a, b, lambda x, y: x @ y)
    assert runtime_cuda.backend().graphs
