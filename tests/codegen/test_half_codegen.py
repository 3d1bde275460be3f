"""The CPU kernels' float16 and bfloat16 (issue 30): 16-bit storage, float32 registers,
float32 accumulators, F16C conversions where the host has them, half the bytes moved."""

from __future__ import annotations

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
    x = fg.tensor(np.ones(4096, np.float32)).half().realize()
    (k,) = fg.kernels(_chain(x))
    found = set(re.findall(r"\bvcvtp[hs]2p[hs]\b", k.asm))
    assert found == {"vcvtph2ps", "vcvtps2ph"}
    assert re.search(r"vcvtph2ps\s[^\n]*%ymm", k.asm)  # 8 lanes at a time
