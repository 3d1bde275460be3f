"""Test-session options shared by every test folder.

`--nvcc-all`: render every kernel the session compiles as CUDA C (from the GPU's
loop nest and from the CPU's) and, at the end, compile them all with `nvcc --ptx`
for sm_80 and sm_90; the session fails if any does not compile. Slow (minutes):
for a full check, e.g. `pytest -q --nvcc-all tests/frontend`.

`FUSEGRAD_TEST_DEVICE=cuda` (with FUSEGRAD_CUDA=emulate where there is no GPU) makes
"cuda" the default device for the whole session, so the op, autodiff and nn tests
build and run their graphs there. Values are read back with `.numpy()` as on the CPU
(PyTorch refuses that for device tensors; the tests of that refusal turn it back on).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ARCHS = ("sm_80", "sm_90")
KERNELS_PER_UNIT = 150  # kernels compiled in one nvcc run
_rendered: dict[str, str] = {}  # symbol -> the kernel's __global__ functions (prelude cut off)
TEST_DEVICE = os.environ.get("FUSEGRAD_TEST_DEVICE", "cpu").strip() or "cpu"


def pytest_addoption(parser):
    parser.addoption(
        "--nvcc-all",
        action="store_true",
        help="compile every kernel the tests generate with nvcc for sm_80 and sm_90",
    )


def pytest_configure(config):
    if TEST_DEVICE != "cpu":
        import fusegrad as fg
        from fusegrad import devices

        fg.set_default_device(TEST_DEVICE)
        devices.numpy_reads_devices = True
    if not config.getoption("--nvcc-all"):
        return
    from fusegrad.codegen.cuda import cuda_kernel
    from fusegrad.codegen.lower import lower
    from fusegrad.runtime import engine as engine_module

    compile_item = engine_module._compile_item

    def compile_and_render(item, device="cpu"):
        record, extent, work = compile_item(item, device)
        symbol = record.compiled.symbol
        for suffix, loop in (("", record.loop), ("_gpu", lower(item, tile=False))):
            source = cuda_kernel(loop, symbol + suffix).source
            _rendered[symbol + suffix] = source[source.index('extern "C"') :]
        return record, extent, work

    engine_module._compile_item = compile_and_render


def pytest_report_header(config):
    return f"fusegrad test device: {TEST_DEVICE} (FUSEGRAD_TEST_DEVICE)"


def _nvcc(nvcc: str, text: str, arch: str, folder: Path, name: str) -> str:
    """nvcc's complaints about one translation unit, or "" if it compiles."""
    cu = folder / f"{name}.{arch}.cu"
    cu.write_text(text)
    r = subprocess.run(
        [nvcc, "--ptx", f"-arch={arch}", "-o", str(cu.with_suffix(".ptx")), str(cu)],
        capture_output=True,
        text=True,
    )
    return r.stderr if r.returncode else ""


def pytest_sessionfinish(session, exitstatus):
    if not session.config.getoption("--nvcc-all"):
        return
    from fusegrad.codegen.cuda import PRELUDE

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        reporter.write_line("--nvcc-all: nvcc is not installed", red=True)
        session.exitstatus = 1
        return
    symbols = sorted(_rendered)
    units = [symbols[i : i + KERNELS_PER_UNIT] for i in range(0, len(symbols), KERNELS_PER_UNIT)]
    folder = Path(tempfile.mkdtemp(prefix="fusegrad_nvcc_all_"))
    jobs = [(unit, arch, f"unit{k}") for k, unit in enumerate(units) for arch in ARCHS]

    def compile_unit(job):
        unit, arch, name = job
        text = PRELUDE + "\n".join(_rendered[s] for s in unit)
        return job, _nvcc(nvcc, text, arch, folder, name)

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [(job, err) for job, err in pool.map(compile_unit, jobs) if err]
    for (unit, arch, name), err in failures:
        reporter.write_line(f"--nvcc-all: {name} ({arch}, {len(unit)} kernels) failed:", red=True)
        reporter.write_line(err[:4000])
    verdict = (
        f"{len(failures)} of {len(jobs)} units failed (sources in {folder})"
        if failures
        else "all compile"
    )
    reporter.write_line(
        f"--nvcc-all: {len(symbols)} kernels, {len(units)} units x {len(ARCHS)} archs: {verdict}"
    )
    if failures:
        session.exitstatus = 1
    else:
        shutil.rmtree(folder, ignore_errors=True)
