"""What a CUDA kernel is on the GPU: the PTX nvcc emits for it, its SASS where cuobjdump
or nvdisasm is installed, and its launches' configuration, registers, shared memory,
spills and occupancy. A cuda kernel's `asm` (and a dump's `.s` file) is this text.

Nothing here needs a GPU: nvcc and ptxas compile for an architecture, not a device. The
architecture is the GPU's when PyCUDA runs one, else `DEFAULT_ARCH`; occupancy is
computed from the architecture's per-SM limits (`ARCH_LIMITS`, the CUDA C Programming
Guide's table of compute capabilities), as the CUDA Occupancy Calculator does. The
text is cached on disk (the compile cache's `cuda/` folder) under a key of the source,
the architecture and nvcc's version, so a dump costs nvcc once per kernel.

>>> limits = ARCH_LIMITS["sm_90"]
>>> occupancy("sm_90", threads=256, registers=32, shared_bytes=0).warps
64
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from ..pipeline.compiler import disk_cached

DEFAULT_ARCH = "sm_90"  # an H100's, when no GPU says otherwise


def build_arch(arch: str) -> str:
    """The architecture nvcc builds a GPU's code for: sm_90 (Hopper) as sm_90a, its own
    features (the warpgroup tensor cores) included, since a cubin is for the one GPU model
    that runs it; others as they are."""
    return "sm_90a" if arch == "sm_90" else arch


# nvcc's warnings about generated code a user cannot act on (as runtime/cuda.py compiles)
NVCC_OPTIONS = ["--diag-suppress", "177,550"]


@dataclass(frozen=True)
class SmLimits:
    """One streaming multiprocessor's limits on what is resident at once."""

    threads: int  # threads per SM
    blocks: int  # blocks per SM
    registers: int  # 32-bit registers per SM
    shared: int  # shared memory per SM usable by blocks, bytes
    shared_per_block: int  # the most one block may have, bytes
    shared_reserved: int = 1024  # bytes the system takes per block (sm_80 on)
    shared_unit: int = 128  # shared memory is allocated in these
    register_unit: int = 256  # registers are allocated per warp in these
    warp_unit: int = 4  # warps are given registers in groups of this many

    @property
    def warps(self) -> int:
        return self.threads // 32


ARCH_LIMITS = {
    "sm_80": SmLimits(2048, 32, 65536, 167936, 166912),  # A100: 164 KB usable per SM
    "sm_86": SmLimits(1536, 16, 65536, 102400, 101376),
    "sm_89": SmLimits(1536, 24, 65536, 102400, 101376),
    "sm_90": SmLimits(2048, 32, 65536, 233472, 232448),  # H100: 228 KB usable per SM
}


@dataclass(frozen=True)
class Occupancy:
    """Blocks and warps resident per SM for one launch, and what limits them."""

    blocks: int
    warps: int
    fraction: float  # resident warps / the SM's most
    limiter: str  # "threads", "blocks", "registers", "shared memory" or "block too large"


def occupancy(arch: str, threads: int, registers: int | None, shared_bytes: int) -> Occupancy:
    """Theoretical occupancy of blocks of `threads` threads using `registers` per thread
    (None: unknown, not counted) and `shared_bytes` of shared memory per block.

    >>> o = occupancy("sm_80", threads=1024, registers=64, shared_bytes=0)
    >>> o.blocks, o.warps, o.limiter
    (1, 32, 'registers')
    """
    sm = ARCH_LIMITS.get(arch) or ARCH_LIMITS[_nearest(arch)]
    warps = -(-threads // 32)
    limits = {"blocks": sm.blocks, "threads": sm.warps // max(warps, 1)}
    if registers:
        per_warp = -(-registers * 32 // sm.register_unit) * sm.register_unit
        by_registers = sm.registers // per_warp // sm.warp_unit * sm.warp_unit
        limits["registers"] = by_registers // max(warps, 1)
    per_block = -(-(shared_bytes + sm.shared_reserved) // sm.shared_unit) * sm.shared_unit
    limits["shared memory"] = sm.shared // per_block
    if shared_bytes > sm.shared_per_block or threads > 1024:
        return Occupancy(0, 0, 0.0, "block too large")
    limiter = min(limits, key=lambda k: (limits[k], k != "threads"))
    blocks = limits[limiter]
    return Occupancy(blocks, blocks * warps, blocks * warps / sm.warps, limiter)


def _nearest(arch: str) -> str:
    """The known architecture at or below `arch` (sm_80 for anything older)."""
    number = int(re.sub(r"\D", "", arch) or 0)
    known = sorted(ARCH_LIMITS, key=lambda a: int(a[3:]))
    below = [a for a in known if int(a[3:]) <= number]
    return below[-1] if below else known[0]


# ---------------------------------------------------------------- nvcc, ptxas


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one entry function."""

    registers: int
    shared_bytes: int  # static shared memory
    spill_stores: int
    spill_loads: int
    stack_bytes: int


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(report: str) -> dict[str, Resources]:
    """`ptxas -v`'s report as entry name -> its resources.

    >>> parse_ptxas('''ptxas info    : Compiling entry function 'k' for 'sm_90'
    ... ptxas info    : Function properties for k
    ...     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
    ... ptxas info    : Used 40 registers, used 1 barriers, 128 bytes smem''')["k"]
    Resources(registers=40, shared_bytes=128, spill_stores=4, spill_loads=4, stack_bytes=8)
    """
    out, name, frame = {}, None, (0, 0, 0)
    for line in report.splitlines():
        m = _ENTRY.search(line)
        if m:
            name, frame = m.group(1), (0, 0, 0)
            continue
        m = _FRAME.search(line)
        if m:
            frame = tuple(int(g) for g in m.groups())
            continue
        m = _USED.search(line)
        if m and name is not None:
            smem = _SMEM.search(line)
            out[name] = Resources(
                int(m.group(1)), int(smem.group(1)) if smem else 0, frame[1], frame[2], frame[0]
            )
            name = None
    return out


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str | None:
    """nvcc's version line, or None where there is no nvcc."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    try:
        r = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln for ln in r.stdout.splitlines() if "release" in ln]
    return lines[-1].strip() if lines else r.stdout.strip() or None


def gpu_code(source: str, arch: str) -> dict:
    """The PTX nvcc emits for `source` on `arch`, ptxas's resource report, the SASS (where
    cuobjdump or nvdisasm exists) and the tool versions, as a dict; "error" says what could
    not be made. Cached on disk, and in memory for the process."""
    return _gpu_code(source, arch)


@functools.lru_cache(maxsize=256)
def _gpu_code(source: str, arch: str) -> dict:
    version = nvcc_version()
    if version is None:
        return {"error": "nvcc is not installed here (install the CUDA toolkit to see PTX)"}
    sass_tool = shutil.which("cuobjdump") or shutil.which("nvdisasm")
    key = "|".join(["gpu code 1", version, build_arch(arch), str(sass_tool), source])
    data, _ = disk_cached(key, ".ptx.json", lambda: json.dumps(_compile(source, arch)).encode())
    return json.loads(data)


def _compile(source: str, arch: str) -> dict:
    """nvcc -ptx, then ptxas -v on that PTX (the cubin it writes feeds the disassembler)."""
    nvcc, ptxas = shutil.which("nvcc"), shutil.which("ptxas")
    with tempfile.TemporaryDirectory(prefix="fusegrad-ptx-") as tmp:
        cu, ptx, cubin = (os.path.join(tmp, "kernel" + ext) for ext in (".cu", ".ptx", ".cubin"))
        with open(cu, "w") as f:
            f.write(source)
        r = _run([nvcc, "-ptx", f"-arch={build_arch(arch)}", *NVCC_OPTIONS, "-o", ptx, cu])
        if r.returncode != 0:
            return {"error": f"nvcc -ptx failed:\n{r.stderr.strip()}"}
        with open(ptx) as f:
            out = {"ptx": f.read(), "ptxas": "", "sass": None}
        if ptxas is None:
            out["error"] = "ptxas is not installed here: no registers or spills"
            return out
        r = _run([ptxas, "-v", f"-arch={build_arch(arch)}", "-o", cubin, ptx])
        out["ptxas"] = r.stderr + r.stdout
        if r.returncode != 0:
            out["error"] = f"ptxas failed:\n{r.stderr.strip()}"
            return out
        out["sass"] = _sass(cubin)
    return out


def _sass(cubin: str) -> str | None:
    cuobjdump, nvdisasm = shutil.which("cuobjdump"), shutil.which("nvdisasm")
    for command in ([cuobjdump, "-sass", cubin], [nvdisasm, "-c", cubin]):
        if command[0] is not None:
            r = _run(command)
            if r.returncode == 0:
                return r.stdout
    return None


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------- the text


def kernel_asm(kernel, arch: str) -> str:
    """A cuda kernel's `asm`: a header of its launches (grid, block, dynamic and static
    shared memory, registers per thread, spills, occupancy on `arch`), then its PTX and
    SASS. `kernel` is pipeline.cuda's CudaKernel (source and launches)."""
    code = gpu_code(kernel.source, arch)
    used = parse_ptxas(code.get("ptxas", ""))
    known = "" if arch in ARCH_LIMITS else f" (limits of {_nearest(arch)})"
    lines = [f"CUDA kernel for {arch}{known}: {len(kernel.launches)} launch(es)"]
    for ln in kernel.launches:
        threads = ln.block[0] * ln.block[1] * ln.block[2]
        res = used.get(ln.symbol)
        static = res.shared_bytes if res else kernel.static_shared_bytes
        lines += [
            f"launch {ln.symbol}",
            f"  grid {_dims(ln.grid)}, block {_dims(ln.block)} ({threads} threads)",
            f"  shared memory: {static} bytes static, {ln.shared_bytes} bytes dynamic per block",
        ]
        if res is not None:
            lines.append(
                f"  registers: {res.registers} per thread; spills: {res.spill_stores} bytes "
                f"stored, {res.spill_loads} bytes loaded; stack frame {res.stack_bytes} bytes"
            )
        else:
            lines.append("  registers: unknown (no ptxas report), not counted in occupancy")
        o = occupancy(arch, threads, res.registers if res else None, static + ln.shared_bytes)
        lines.append(
            f"  occupancy: {o.blocks} block(s), {o.warps} warps per SM ({o.fraction:.0%}), "
            f"limited by {o.limiter}"
        )
    head = "".join(f"// {line}\n" for line in lines)
    if "ptx" not in code:
        return f"{head}//\n// no PTX: {code['error']}\n"
    body = f"{head}//\n// PTX (nvcc -ptx -arch={build_arch(arch)}):\n{code['ptx']}"
    if code.get("error"):
        body += f"\n// {code['error']}\n"
    if code.get("sass"):
        body += f"\n// SASS:\n{code['sass']}"
    else:
        body += "\n// SASS: not shown (neither cuobjdump nor nvdisasm is installed here)\n"
    return body


NO_LLVM_IR = (
    "; CUDA kernels have no LLVM IR here: nvcc compiles the CUDA C (the .cu file, or\n"
    "; `cuda_c`) to PTX through NVVM. The PTX, with registers, shared memory and occupancy,\n"
    "; is the .s file (`asm`).\n"
)


def _dims(d) -> str:
    return "x".join(map(str, d))
