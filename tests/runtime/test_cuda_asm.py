"""A cuda kernel's dump says what it is on the GPU (runtime/cuda_asm.py): `.s` / `asm` hold
the PTX nvcc emits under a header of launches, registers, shared memory and occupancy;
`.ll` / `llvm_ir_optimized` say there is no LLVM IR instead of repeating the CUDA C.
All on the emulated device: nothing here needs a GPU (nvcc compiles for an
architecture)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad.runtime import cuda_asm
from fusegrad.runtime.cuda_asm import occupancy, parse_ptxas

HAVE_NVCC = shutil.which("nvcc") is not None and shutil.which("ptxas") is not None


def test_occupancy_as_the_occupancy_calculator_counts_it():
    # full: 8 blocks of 8 warps, registers (32 a thread) allow exactly as many
    o = occupancy("sm_90", threads=256, registers=32, shared_bytes=0)
    assert (o.blocks, o.warps, o.fraction, o.limiter) == (8, 64, 1.0, "threads")
    # 64 registers x 1024 threads = 65536: one block
    o = occupancy("sm_80", threads=1024, registers=64, shared_bytes=0)
    assert (o.blocks, o.warps, o.fraction, o.limiter) == (1, 32, 0.5, "registers")
    # 255 registers round up to 8192 a warp: 8 warps, one block of 256 threads
    o = occupancy("sm_90", threads=256, registers=255, shared_bytes=0)
    assert (o.blocks, o.warps, o.limiter) == (1, 8, "registers")
    # 48 KB of shared memory (+1 KB the system reserves): 3 blocks on an A100, 4 on an H100
    o80 = occupancy("sm_80", threads=128, registers=32, shared_bytes=48 * 1024)
    o90 = occupancy("sm_90", threads=128, registers=32, shared_bytes=48 * 1024)
    assert (o80.blocks, o80.limiter, o90.blocks) == (3, "shared memory", 4)
    assert o80.fraction == pytest.approx(12 / 64)
    # tiny blocks: the 32-block limit
    o = occupancy("sm_90", threads=32, registers=16, shared_bytes=0)
    assert (o.blocks, o.warps, o.limiter) == (32, 32, "blocks")
    # more shared memory than a block may have
    assert occupancy("sm_80", 256, 32, 200 * 1024).limiter == "block too large"
    # an architecture without a row: the nearest one below
    assert occupancy("sm_100", 256, 32, 0) == occupancy("sm_90", 256, 32, 0)


def test_ptxas_report_gives_each_entry_its_registers_shared_memory_and_spills():
    report = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a_final' for 'sm_90'
ptxas info    : Function properties for a_final
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 1 barriers, 128 bytes smem
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    24 bytes stack frame, 20 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 380 bytes cmem[0]
"""
    got = parse_ptxas(report)
    assert got["a_final"] == cuda_asm.Resources(16, 128, 0, 0, 0)
    assert got["a"] == cuda_asm.Resources(255, 0, 20, 12, 24)


def dumped(tmp_path, build):
    folder = tmp_path / "dump"
    with fg.config.override(dump=str(folder)):
        build().realize()
    files = sorted(p.name for p in folder.iterdir())
    return folder, [f[: -len(".cu")] for f in files if f.endswith(".cu")]


@pytest.mark.usefixtures("emulated")
@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc and ptxas are not installed (the next test)")
def test_a_dumped_cuda_kernel_s_file_is_its_ptx_with_launches_and_occupancy(tmp_path):
    x = fg.tensor(np.ones(1 << 20, np.float32), device="cuda")
    folder, stems = dumped(tmp_path, lambda: (x * 2).sum())
    assert stems
    for stem in stems:
        s = (folder / f"{stem}.s").read_text()
        cu = (folder / f"{stem}.cu").read_text().split("\n\n", 1)[1]
        assert ".version" in s and ".entry" in s and ".target sm_" in s  # PTX
        assert cu not in s and "__global__" not in s  # not the CUDA C again
        for word in ("grid ", "block ", "threads)", "registers: ", "per thread", "occupancy: "):
            assert word in s, word
        assert "spills: " in s and "shared memory: " in s
        ll = (folder / f"{stem}.ll").read_text()
        assert "no LLVM IR" in ll and "__global__" not in ll and cu not in ll
    # the split sum: two launches, each with its own line
    sums = [st for st in stems if "sum" in st]
    assert sums and (folder / f"{sums[0]}.s").read_text().count("// launch ") == 2


@pytest.mark.usefixtures("emulated")
def test_without_nvcc_the_s_file_says_so_and_still_gives_the_launches(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda_asm.shutil, "which", lambda name: None)
    cuda_asm.nvcc_version.cache_clear()
    cuda_asm._gpu_code.cache_clear()
    try:
        x = fg.tensor(np.arange(1000, dtype=np.float32), device="cuda")
        folder, stems = dumped(tmp_path, lambda: (x + 1).exp())
        s = (folder / f"{stems[0]}.s").read_text()
        assert "no PTX: nvcc is not installed" in s
        assert "grid " in s and "block " in s and "occupancy: " in s
        assert "registers: unknown" in s
    finally:
        cuda_asm.nvcc_version.cache_clear()
        cuda_asm._gpu_code.cache_clear()


def test_docstring_examples():
    import doctest

    from fusegrad.runtime import cuda_stub

    for module in (cuda_asm, cuda_stub):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
