"""Building rendered CUDA kernels with nvcc and reading ptxas's report, for the tests that
check which instructions a pipeline compiles to (test_cuda_wgmma.py, test_cuda_wgmma_tf32.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

NVCC = shutil.which("nvcc")
_SYMBOL = re.compile(r'(extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?k)')


def one_unit(sources: list[str]) -> str:
    """Kernels rendered as `k` (and `k_t<side>`, their launches') as one compile unit: the
    first source's prelude once, each kernel's symbols renamed `k<n>_...`."""
    parts = []
    for n, source in enumerate(sources):
        at = source.index('extern "C"')
        body = _SYMBOL.sub(rf"\g<1>{n}_", source[at:])
        parts.append(source[:at] + body if n == 0 else body)
    return "\n".join(parts)


def build(unit: str, folder, arch: str) -> tuple[str, str | None]:
    """(the PTX nvcc makes of `unit` for `arch`, ptxas's -v report of it, or None where
    ptxas is missing)."""
    cu, ptx = folder / f"{arch}.cu", folder / f"{arch}.ptx"
    cu.write_text(unit)
    subprocess.run([NVCC, "--ptx", f"-arch={arch}", "-o", str(ptx), str(cu)],
                   capture_output=True, text=True, timeout=600, check=True)  # fmt: skip
    ptxas = shutil.which("ptxas", path=os.path.dirname(NVCC)) or shutil.which("ptxas")
    if ptxas is None:
        return ptx.read_text(), None
    r = subprocess.run([ptxas, f"-arch={arch}", "-v", str(ptx), "-o", os.devnull],
                       capture_output=True, text=True, timeout=600, check=True)  # fmt: skip
    return ptx.read_text(), r.stderr


def spills(report: str) -> bool:
    """Whether ptxas's report says some function spills registers to local memory."""
    return re.search(r"[1-9]\d* bytes spill", report) is not None
