"""Whether this process runs bfloat16 matmuls on AMX tiles (`pipeline/amx.py`) or on
`vdpbf16ps` register tiles (`pipeline/dpbf16.py`, `dpbf16_ready`). AMX: the host has
AMX-BF16 (LLVM's host features, as the F16C choice in `pipeline/compiler.py`) and Linux has
granted the process the tile state, which it asks for here once (`arch_prctl`
ARCH_REQ_XCOMP_PERM for XTILEDATA; without it the first tile instruction kills the process).

>>> from fusegrad.runtime.amx import amx_ready, dpbf16_ready
>>> amx_ready() in (True, False), dpbf16_ready() and amx_ready()
(True, False)
"""

from __future__ import annotations

import ctypes
import functools
import platform

import llvmlite.binding as llvm

from .config import config

SYS_ARCH_PRCTL = 158  # x86-64 Linux
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


def amx_ready() -> bool:
    """True where bfloat16 contractions use AMX here: the host can (`amx_available`) and
    `config.amx` (FUSEGRAD_AMX) is on."""
    return config.amx and amx_available()


def dpbf16_ready() -> bool:
    """True where bfloat16 contractions use `vdpbf16ps` register tiles here: the host has
    AVX512-BF16 (LLVM's host features), AMX is not used (`amx_ready`: where it is, as on
    an Intel Xeon, `vdpbf16ps` runs at half the FMA's rate and the tiles are far faster),
    and `config.dpbf16` (FUSEGRAD_DPBF16) is on."""
    return config.dpbf16 and not amx_ready() and _host_has_avx512bf16()


@functools.lru_cache(maxsize=1)
def _host_has_avx512bf16() -> bool:
    if platform.machine() != "x86_64":
        return False
    return "+avx512bf16" in llvm.get_host_cpu_features().flatten().split(",")


@functools.lru_cache(maxsize=1)
def amx_available() -> bool:
    """Whether the host has AMX-BF16 and Linux grants it: asks for the tile state once."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    features = llvm.get_host_cpu_features().flatten().split(",")
    if "+amx-bf16" not in features or "+amx-tile" not in features:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False
