"""Test-session options shared by every test folder.

`--nvcc-all` (`scripts/test.sh` passes it wherever `nvcc` is on PATH): render every
kernel the session compiles as CUDA C, from the GPU's loop nest (`lower(item, tile=False)`,
what the CUDA device runs) and from the CPU's (the plan's, with register tiles), and compile
them with `nvcc --ptx` for sm_80 and sm_90 in units of 500 kernels of distinct forms (those
that differ only in integer literals, as sizes do, once: `_nvcc_all.form`), in
background threads while the tests run (`tests/_nvcc_all.py`). At the end the session
fails, naming each kernel nvcc refused with nvcc's messages, if any does not compile.
cicc's optimizer is off (`-Xcicc -O0`: a sixth of the time, the same parsing, checking and
PTX generation); `--nvcc-optimize` turns it back on. Under pytest-xdist (`scripts/test.sh`
runs a worker a core) each worker collects and compiles its own tests' kernels, and the
controller's summary gives each worker's findings under its name; a kernel refused in any
worker fails the run.

Where `mpiexec` is missing the distributed tests are skipped, and the summary says so
("distributed tests NOT run: mpiexec not found ...").

`FUSEGRAD_TEST_DEVICE=cuda` (with FUSEGRAD_CUDA=emulate where there is no GPU) makes
"cuda" the default device for the whole session, so the op, autodiff and nn tests
build and run their graphs there. Values are read back with `.numpy()` as on the CPU
(PyTorch refuses that for device tensors; the tests of that refusal turn it back on).

The `backend` fixture runs a test once per registered backend (`runtime/backend.py`:
"cpu", and "cuda" on the GPU when the suite runs on one, else on the CPU emulator of the
CUDA C), with that device the default one and `.numpy()` reading device values. A module
takes it for all its tests with `pytestmark = pytest.mark.usefixtures("backend")`. The
emulator is slow, so by default only the tests marked `backend_slice` (a representative
slice) run on the other backends; `--all-backends` (or FUSEGRAD_TEST_ALL_BACKENDS=1) runs
every test of the parametrization on every backend. The others are deselected, not skipped.

The suite's kernels are cached in `~/.cache/fusegrad-tests` (under XDG_CACHE_HOME where it
is set), never in the user's FUSEGRAD_CACHE; FUSEGRAD_TEST_CACHE names another folder, or
"off". Tests of the cache itself give their child processes folders of their own.

The markers `slow`, `emulator`, `nvcc`, `mpi` and `torch` (pyproject.toml) are given at
collection by folder, file and fixture (tests/_markers.py), so that `-m "not slow"` and
`scripts/test.sh --quick` can leave them out (docs/TESTING.md). Where torch is missing the
summary counts the cross-checks with it that did not run ("torch cross-checks NOT run").

`FUSEGRAD_TEST_FAILURES=path` appends each failing or erroring test to `path` as it is
reported, its node id and the error's last line: a run cut by a time limit (a GPU
machine lent for minutes, `scripts/gpu.sh`) prints no summary, and under `-q` its
progress dots name no test.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time

import _failures
import pytest
from _markers import apply_markers, torch_line
from _nvcc_all import ARCHS, FAST, SYMBOL, NvccAll

# (nothing above imports fusegrad, which reads its settings once, at import)
# the suite's kernels go to a cache of its own, not the user's FUSEGRAD_CACHE: beside it
# (~/.cache/fusegrad-tests, kept from run to run and clone to clone, bounded as every
# fusegrad cache is); FUSEGRAD_TEST_CACHE names another folder, or "off"
_XDG = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
os.environ["FUSEGRAD_CACHE"] = os.environ.get("FUSEGRAD_TEST_CACHE") or os.path.join(
    _XDG, "fusegrad-tests"
)

# pytest-xdist workers that fill the cores (scripts/test.sh: one a core) compile each new
# plan's kernels in their own process: forked compilers beside a busy sibling worker find no
# idle core, and each fork copies the worker's page tables and faults its pages back in. The
# processes the tests start inherit it; tests of forked compiling set compile_workers
# themselves. A FUSEGRAD_COMPILE_WORKERS of the caller's own is kept.
_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
if _XDIST_WORKERS and _XDIST_WORKERS >= (_CORES or 1):
    os.environ.setdefault("FUSEGRAD_COMPILE_WORKERS", "1")

# kernels are the same on every run: the fixed register tiles, not timed ones
# (runtime/autotune.py; tests/runtime/test_autotune.py turns the autotuner on itself)
os.environ["FUSEGRAD_AUTOTUNE"] = "0"
TEST_DEVICE = os.environ.get("FUSEGRAD_TEST_DEVICE", "cpu").strip() or "cpu"
ALL_BACKENDS_ENV = os.environ.get("FUSEGRAD_TEST_ALL_BACKENDS", "") not in ("", "0")
_nvcc: NvccAll | None = None  # the --nvcc-all collector, once configured
_render_seconds = 0.0  # spent rendering CUDA C inside the tests


def pytest_addoption(parser):
    parser.addoption(
        "--nvcc-all",
        action="store_true",
        help="compile every kernel the tests generate with nvcc for sm_80 and sm_90",
    )
    parser.addoption(
        "--exhaustive",
        action="store_true",
        help="also run the sweeps marked exhaustive (the special-points sweep's float64 "
        "cases; FUSEGRAD_TEST_EXHAUSTIVE=1 too), which are deselected by default",
    )
    parser.addoption(
        "--all-backends",
        action="store_true",
        help="run every test that takes the `backend` fixture on every registered backend "
        "(default: the CPU, and the others for the tests marked backend_slice)",
    )
    parser.addoption(
        "--nvcc-optimize",
        action="store_true",
        help="--nvcc-all at nvcc's default optimization (cicc -O3: about 6x the time) "
        "instead of -Xcicc -O0",
    )


def _backend_params() -> list[str]:
    from fusegrad.runtime.backend import backend_names

    return backend_names()


@pytest.fixture(params=_backend_params())
def backend(request):
    """Run the test on this backend's device: the default device for creation ops, and
    `.numpy()` reading its values. The cuda backend is the emulator unless the suite runs
    on a GPU (tests/_emulated.py)."""
    from _emulated import BACKEND as CUDA_IMPLEMENTATION

    import fusegrad as fg
    from fusegrad import devices
    from fusegrad.runtime.backend import get_backend

    name = request.param
    b = get_backend(name)
    before, reads = fg.get_default_device(), devices.numpy_reads_devices
    with fg.config.override(cuda=CUDA_IMPLEMENTATION):
        why = b.why_unavailable()
        if why is not None:
            pytest.skip(f"the {name} backend cannot run here: {why}")
        fg.set_default_device(name)
        devices.numpy_reads_devices = True
        try:
            yield b
        finally:
            devices.numpy_reads_devices = reads
            fg.set_default_device(before)


@pytest.fixture(autouse=True)
def _sizes_met_per_test():
    """Each test starts with no plan of other sizes met (pipeline/templates.py): whether a
    kernel runs as a generic kernel depends on the sizes met before in the process, and a
    test's bits should not depend on which tests ran before it
    (tests/pipeline/test_templates.py tests the generic kernels themselves)."""
    from fusegrad.pipeline import templates
    from fusegrad.runtime.engine import engine

    templates.registry.clear()
    engine.forget_sizes()
    yield


@pytest.fixture(autouse=True)
def _cpu_device_marked(request):
    """A test marked `cpu_device` checks the CPU device's own behaviour (torch's CPU
    semantics, the CPU lowering): under FUSEGRAD_TEST_DEVICE it still runs on the CPU."""
    if TEST_DEVICE == "cpu" or request.node.get_closest_marker("cpu_device") is None:
        yield
        return
    import fusegrad as fg
    from fusegrad import devices

    before, reads = fg.get_default_device(), devices.numpy_reads_devices
    fg.set_default_device("cpu")
    devices.numpy_reads_devices = False
    try:
        yield
    finally:
        devices.numpy_reads_devices = reads
        fg.set_default_device(before)


def pytest_collection_modifyitems(config, items):
    """Mark the tests by where they live and what they use (tests/_markers.py); then,
    outside --all-backends, a test of the `backend` parametrization runs on the host's
    backend alone unless it is marked `backend_slice`."""
    apply_markers(items)
    if not (config.getoption("--exhaustive") or os.environ.get("FUSEGRAD_TEST_EXHAUSTIVE") == "1"):
        swept = [item for item in items if item.get_closest_marker("exhaustive")]
        if swept:
            config.hook.pytest_deselected(items=swept)
            items[:] = [item for item in items if not item.get_closest_marker("exhaustive")]
    if config.getoption("--all-backends") or ALL_BACKENDS_ENV:
        return
    from fusegrad.runtime.backend import get_backend

    keep, drop = [], []
    for item in items:
        spec = getattr(item, "callspec", None)
        name = spec.params.get("backend") if spec is not None else None
        on_host = name is None or get_backend(name).is_host
        (keep if on_host or item.get_closest_marker("backend_slice") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _worker_id(config) -> str | None:
    """This process's name as a pytest-xdist worker ("gw0"), or None: not a worker."""
    return getattr(config, "workerinput", {}).get("workerid")


def _controller(config) -> bool:
    """Whether this process hands the tests to pytest-xdist workers and runs none itself."""
    return _worker_id(config) is None and config.getoption("dist", default="no") != "no"


class _ExecnetThread:
    """execnet's I/O thread in a pytest-xdist worker (started with `_thread`, so not in
    `threading.enumerate()`), shaped for `forksafe.own`: it only moves pickled reports
    between the controller's pipe and this process, calling into no library that a fork
    breaks. Owned, it leaves fusegrad forking its compilers in a worker as in a plain run
    (tests/runtime/test_parallel_compile.py asserts that it may)."""

    def __init__(self, ident: int):
        self.ident = ident

    def is_alive(self) -> bool:
        return self.ident in sys._current_frames()


_execnet_threads: list[_ExecnetThread] = []  # (forksafe holds them weakly)


def _own_execnet_threads() -> None:
    from fusegrad.runtime import forksafe

    known = {thread.ident for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident in known:
            continue
        files = []
        while frame is not None:
            files.append(frame.f_code.co_filename)
            frame = frame.f_back
        if any(f"{os.sep}execnet{os.sep}" in name for name in files):
            _execnet_threads.append(forksafe.own(_ExecnetThread(ident)))


def pytest_configure(config):
    # (the markers are registered in pyproject.toml, with --strict-markers)
    import fusegrad as fg

    if _worker_id(config) is not None:
        _own_execnet_threads()

    # in this process no plan comes from or goes to the disk (pipeline/plan_store.py): tests
    # that patch the scheduler or lowering and forget the plans in memory get fresh plans,
    # and no plan made under a patch reaches the disk (tests/pipeline/test_plan_store.py
    # turns it on itself; programs run in child processes use it)
    fg.config.disk_plans = False
    # nor in the processes the tests start (a test of a plan's first, timed run
    # would otherwise meet a plan an earlier run of the suite left in FUSEGRAD_CACHE);
    # tests/_files.run_in_child clears it, for the tests of warm starts
    os.environ["FUSEGRAD_DISK_PLANS"] = "0"
    if TEST_DEVICE != "cpu":
        from fusegrad import devices

        fg.set_default_device(TEST_DEVICE)
        devices.numpy_reads_devices = True
    # (with pytest-xdist each worker collects and compiles the kernels its own tests make;
    # the controller gathers what they found: pytest_testnodedown)
    if config.getoption("--nvcc-all") and not _controller(config):
        _start_nvcc_all(() if config.getoption("--nvcc-optimize") else FAST)


def _start_nvcc_all(flags: tuple[str, ...]) -> None:
    """Wrap the engine's per-kernel compile so that each new kernel is rendered as CUDA C
    from both loop nests and handed to the nvcc collector."""
    global _nvcc
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return  # said in the header and the summary; the session fails at its end
    from fusegrad.pipeline import driver
    from fusegrad.pipeline.cuda import HALF_PRELUDE, PRELUDE, cuda_kernel
    from fusegrad.pipeline.lower import lower

    # (a kernel's source adds HALF_PRELUDE where it has 16-bit floats: here every unit has it)
    _nvcc = collector = NvccAll(nvcc, PRELUDE + HALF_PRELUDE, flags=flags)
    make_record = driver.item_record
    seen: set[tuple[str, str]] = set()
    lock = threading.Lock()

    def record_and_render(item, loop, compiled):
        global _render_seconds
        record, extent, work = make_record(item, loop, compiled)
        symbol = record.compiled.symbol
        device = "cpu" if compiled.language == "LLVM IR" else "cuda"
        with lock:
            if (device, symbol) in seen:
                return record, extent, work
            seen.add((device, symbol))
        t0 = time.perf_counter()
        if device == "cpu":  # the plan's loop nest is the CPU's
            loops = (("", record.loop), ("_gpu", lower(item, tile=False)))
        else:
            loops = (("_cpu", lower(item)), ("", record.loop))
        for suffix, loop in loops:
            if loop.uses_tiles:  # AMX and vdpbf16ps tiles exist on the CPU only
                continue
            source = cuda_kernel(loop, SYMBOL).source
            collector.add(symbol + suffix, source[source.index('extern "C"') :])
        if getattr(compiled, "own", None) is not None:  # the generic kernel it launched
            source, generic = compiled.kernel.source, compiled.kernel.symbol
            text = source[source.index('extern "C"') :].replace(generic, SYMBOL)
            collector.add(symbol + "_generic", text)
        _render_seconds += time.perf_counter() - t0
        return record, extent, work

    driver.item_record = record_and_render  # (compile_plan looks it up at each call)


def pytest_report_header(config):
    return [f"fusegrad test device: {TEST_DEVICE} (FUSEGRAD_TEST_DEVICE)", _nvcc_line(config)]


def _nvcc_line(config) -> str:
    if not config.getoption("--nvcc-all"):
        return "nvcc: the CUDA kernels are NOT compiled (no --nvcc-all; scripts/test.sh passes it)"
    if _controller(config):
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            return "nvcc: --nvcc-all, but nvcc is not on PATH: the CUDA kernels are NOT compiled"
        return f"nvcc: each pytest-xdist worker compiles the CUDA kernels of its tests ({nvcc})"
    if _nvcc is None:
        return "nvcc: --nvcc-all, but nvcc is not on PATH: the CUDA kernels are NOT compiled"
    flags = " ".join(_nvcc.flags) or "optimized"
    return f"nvcc: compiling every CUDA kernel for {', '.join(ARCHS)} ({_nvcc.nvcc}, {flags})"


_summary: list[tuple[str, bool]] = []  # (line, red): what --nvcc-all found, for the summary
_nvcc_failed = False  # a kernel was refused (here, or in a pytest-xdist worker), or no nvcc


def pytest_sessionfinish(session, exitstatus):
    """Wait for nvcc (it has been compiling since the first unit filled); fail the session
    if a kernel does not compile. A pytest-xdist worker hands its findings to the
    controller, which fails the session for it."""
    global _nvcc_failed
    config = session.config
    if not config.getoption("--nvcc-all"):
        return
    if not _controller(config):  # (the controller heard from its workers: pytest_testnodedown)
        _nvcc_failed = _finish_nvcc(exitstatus)
    if _worker_id(config) is not None:
        config.workeroutput["nvcc"] = {"lines": _summary, "failed": _nvcc_failed}
    if _nvcc_failed:
        session.exitstatus = 1


def _finish_nvcc(exitstatus) -> bool:
    """Put what nvcc found in the summary; whether the session fails for it."""
    if _nvcc is None:
        return True
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        _nvcc.cancel()
        return False
    t0 = time.perf_counter()
    failures = _nvcc.finish()
    waited = time.perf_counter() - t0
    for f in failures:
        _summary.append((f"{f.kernel} does not compile for {f.arch}:", True))
        _summary.append((f.message[:4000], False))
    verdict = f"{len(failures)} failed (units in {_nvcc.folder})" if failures else "all compile"
    _summary.append(
        (
            f"{_nvcc.kernels} kernels of distinct forms ({_nvcc.offered} rendered in "
            f"{_render_seconds:.1f} s), {_nvcc.units} unit(s); {_nvcc.arch_specific} with inline "
            f"PTX or __CUDA_ARCH__ for each of {', '.join(ARCHS)}, the others for {ARCHS[0]} "
            f"(nvcc {' '.join(_nvcc.flags) or 'optimized'}: {_nvcc.nvcc_seconds:.0f} s in all, "
            f"{waited:.1f} s after the tests): {verdict}",
            bool(failures),
        )
    )
    return bool(failures)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(pytest-xdist, in the controller) A worker is done: its nvcc findings go to the
    summary, under its name; a worker that ended without them counts as failed."""
    global _nvcc_failed
    if not node.config.getoption("--nvcc-all"):
        return
    worker = node.gateway.id
    found = getattr(node, "workeroutput", {}).get("nvcc")
    if found is None:
        _summary.append((f"{worker}: ended without nvcc's findings ({error or 'no report'})", True))
        _nvcc_failed = True
        return
    _summary.extend((f"{worker}: {line}", red) for line, red in found["lines"])
    _nvcc_failed = _nvcc_failed or found["failed"]


def pytest_runtest_logreport(report):
    path = os.environ.get("FUSEGRAD_TEST_FAILURES")
    if path:
        _failures.append(report, path)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    terminalreporter.write_sep("-", "nvcc")
    if not _summary:
        terminalreporter.write_line(_nvcc_line(config), red=config.getoption("--nvcc-all"))
    for line, red in _summary:
        terminalreporter.write_line(line, red=red)
    mpi = _mpi_line(terminalreporter.stats.get("skipped", []))
    if mpi:
        terminalreporter.write_sep("-", "mpi")
        terminalreporter.write_line(mpi, red=True)
    torch = torch_line(terminalreporter.stats)
    if torch:
        terminalreporter.write_sep("-", "torch")
        terminalreporter.write_line(torch, red=True)


def _mpi_line(skipped) -> str | None:
    """What the summary says when tests were skipped because MPI is missing
    (tests/distributed/_mpi.py), as it says when nvcc is: a green run must not hide it."""
    count, why = 0, None
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        if "mpiexec not found" in reason:
            count += 1
            why = reason.removeprefix("Skipped: ")
    if not count:
        return None
    return f"distributed tests NOT run: {why} ({count} skipped)"
