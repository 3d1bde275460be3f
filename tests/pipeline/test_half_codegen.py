"""The CPU kernels' float16 and bfloat16 (issue 30): 16-bit storage, float32 registers,
float32 accumulators, F16C conversions where the host has them, half the bytes moved."""

from __future__ import annotations

import ctypes
import platform
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import fusegrad as fg

HALVES = [fg.float16, fg.bfloat16]


def _chain(x):
    return (x * 2 + 1).relu() * x


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_a_memory_bound_kernel_moves_half_the_bytes(dt):
    x32 = fg.tensor(np.linspace(-1, 1, 4096, dtype=np.float32)).realize()
    x16 = x32.to(dt).realize()
    (k32,), (k16,) = fg.kernels(_chain(x32)), fg.kernels(_chain(x16))
    assert k16.bytes * 2 == k32.bytes
    assert f"out0: {dt.name}[4096], in0: {dt.name}[4096]" in k16.loop_ir  # the dump's types


@pytest.mark.parametrize("dt, n", [(fg.float16, 4096), (fg.bfloat16, 1024)], ids=str)
def test_sums_and_matmuls_accumulate_in_float32(dt, n):
    # a 16-bit accumulator stops counting at 2048 (float16) or 256 (bfloat16): 2048 + 1
    # rounds back to 2048. In float32 the count is exact, and n is exact in 16 bits
    ones = fg.tensor(np.ones(n, np.float32)).to(dt).realize()
    assert ones.sum().item() == n
    assert (ones.reshape(1, n) @ ones.reshape(n, 1)).item() == n


@pytest.mark.skipif(
    "f16c" not in llvm.get_host_cpu_features().flatten(), reason="the host has no F16C"
)
def test_float16_converts_with_f16c_vectors():
    """Both conversions are vector instructions, 8 lanes or more at a time: F16C's
    `vcvtph2ps` / `vcvtps2ph`, or on a host with AVX512-FP16 (which LLVM prefers there)
    their `x` forms, 16 lanes in a zmm register."""
    x = fg.tensor(np.ones(4096, np.float32)).half().realize()
    (k,) = fg.kernels(_chain(x))
    found = set(re.findall(r"\bvcvtp[hs]2p[hs]x?\b", k.asm))
    assert found in ({"vcvtph2ps", "vcvtps2ph"}, {"vcvtph2psx", "vcvtps2phx"}), found
    assert re.search(r"vcvtph2psx?\s[^\n]*%[yz]mm", k.asm)  # 8 or 16 lanes at a time
    assert re.search(r"vcvtps2phx?\s[^\n]*%[yz]mm", k.asm)


# ---------------------------------------------------------------- the cuda backend (emulated)

from _emulated import emulated  # noqa: E402, F401  (a fixture)

# float32 values at the special points (tests/frontend/test_half.py has torch's bits for them)
SPECIAL = [0.0, -0.0, 65520.0, 1e5, 6e-8, 2.9e-8, 1e-40, np.inf, np.nan]
SPECIAL += [1.00048828125, 1.00146484375, 1.00390625, 1.01171875, 3.4e38]


@pytest.mark.usefixtures("emulated")
def test_the_cuda_backend_stores_16_bits_and_computes_as_the_cpu():
    # few kernels (the emulator compiles each with g++, about 0.7 s here): both
    # conversions, a bfloat16 matmul on shared-memory tiles, a float16 sum split over blocks
    rng = np.random.default_rng(0)
    a = rng.standard_normal((20, 40)).astype(np.float32)
    b = rng.standard_normal((40, 16)).astype(np.float32)
    big = rng.standard_normal(1 << 15).astype(np.float32)
    xs = [fg.tensor(v) for v in (np.array(SPECIAL, np.float32), a, b, big)]
    outs = []
    for dev in ("cuda", "cpu"):
        s, x, w, v = (t.to(dev) for t in xs)
        bf = fg.bfloat16
        got = [s.half(), s.bfloat16(), x.to(bf) @ w.to(bf), v.half().sum()]
        fg.realize(*got)
        outs.append([t.cpu()._host() for t in got])
    for g, c in zip(*outs):
        assert g.dtype == c.dtype and g.dtype.itemsize == 2
        # the same float32 arithmetic: the same bits (NaN's too)
        assert g.view(np.uint16).tolist() == c.view(np.uint16).tolist()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 test")
def test_float16_converts_in_software_where_the_cpu_has_no_f16c():
    # LLVM calls libgcc's conversions for `half` without F16C: registered, they run (an
    # unresolved call would jump to address 0)
    from fusegrad.pipeline.compiler import register_soft_half

    assert register_soft_half()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    source = """
    define void @f(ptr %a, ptr %b) {
      %x = load half, ptr %a
      %y = fpext half %x to float
      %z = fmul float %y, 3.0
      %w = fptrunc float %z to half
      store half %w, ptr %b
      ret void
    }"""
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu="x86-64", features="-f16c,-avx512fp16"
    )
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(source), machine)
    engine.finalize_object()
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(engine.get_function_address("f"))
    a, b = np.array([1.5, 0], np.float16), np.zeros(1, np.float16)
    f(a.ctypes.data, b.ctypes.data)
    assert b[0] == 4.5


def test_a_bfloat16_tiles_one_lane_ragged_store_writes_one_element():
    """A register tile whose last column vector keeps one lane (17 outputs a row: 16 + 1)
    stores that lane alone. LLVM 22 wrote the `trunc (lshr v, 16)` form of a rounded
    bfloat16 lane 4 bytes wide there, zeroing the first element of the next row, which an
    earlier tile had stored (a grouped convolution's odd channels lost their first output)."""
    rng = np.random.default_rng(0)
    x = fg.tensor(rng.standard_normal((2, 3, 9, 17)).astype(np.float32)).to(fg.bfloat16)
    w = fg.tensor(rng.standard_normal((6, 1, 3, 3)).astype(np.float32)).to(fg.bfloat16)
    x, w = x.realize(), w.realize()
    got = fg.nn.functional.conv2d(x, w, None, 1, 1, 1, 3).float().numpy()
    want = fg.nn.functional.conv2d(x.float(), w.float(), None, 1, 1, 1, 3).numpy()
    np.testing.assert_allclose(got, want, rtol=2**-7, atol=2**-7 * np.abs(want).max())
