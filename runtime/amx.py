"""Whether this process runs bfloat16 matmuls on AMX tiles (`codegen/amx.py`): the host has
AMX-BF16 (LLVM's host features, as the F16C choice in `runtime/compiler.py`) and Linux has
granted the process the tile state, which it asks for here once (`arch_prctl`
ARCH_REQ_XCOMP_PERM for XTILEDATA; without it the first tile instruction kills the process).

>>> from fusegrad.runtime.amx import amx_ready
>>> amx_ready() in (True, False)
True
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
