"""Compile CUDA kernels with `nvcc --ptx` in the background while the tests run (`--nvcc-all`).

`NvccAll.add(name, body)` takes one kernel's `__global__` function(s), written with the
placeholder symbol `SYMBOL`; bodies already seen are skipped: the same text under another
name, or the same but for the values of its decimal integer literals (`form`: a kernel of
another size; a literal's class, zero, an `int`, a 64-bit or a larger one, still counts,
and hexadecimal and floating-point literals are text). Every `unit_size` new kernels
make one translation unit (the shared `__device__` prelude once, then the kernels, each
under its own name), compiled for each architecture by a thread pool at once, so nvcc
overlaps with the tests. `finish()` compiles the rest, waits, and returns what failed: per
kernel, nvcc's messages about its lines.

    collector = NvccAll("/usr/local/bin/nvcc", prelude=PRELUDE)
    collector.add("E_add_4_0123456789ab", 'extern "C" __global__ void SYMBOL(...) {...}')
    failures = collector.finish()  # [] when everything compiles
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ARCHS = ("sm_80", "sm_90")
# what makes a kernel's code differ between architectures: inline PTX (mma.sync, wgmma,
# cp.async, ldmatrix) or code under `__CUDA_ARCH__`; a kernel without either is plain CUDA C,
# which every architecture from the first of ARCHS takes alike, so it is compiled for that
# one alone (half the sweep's nvcc time), the others for each
_ARCH_SPECIFIC = re.compile(r"\basm\b|__CUDA_ARCH__")
SYMBOL = "FG_NVCC_SYMBOL"  # the placeholder `add` expects where the kernel's name goes
# Each nvcc run costs about 0.4 s before it reads a kernel (the host preprocessor over
# cuda_runtime.h, then cicc's start), then about 1.5 ms a kernel at -O0: a unit of this many
# kernels spends most of its time on them yet is done a second or two after it fills.
UNIT_SIZE = 500
# cicc's optimizer is most of nvcc's time (a unit of 200 suite kernels: 2-10 s at nvcc's
# default -O3, 0.6-0.9 s at -O0). Without it nvcc still parses and type-checks every
# kernel and generates its PTX for the architecture, which is what fails when the renderer
# is wrong; tests/pipeline/test_cuda.py compiles its representative kernels fully optimized.
FAST = ("-Xcicc", "-O0")
_LINE = re.compile(r"\.cu\((\d+)\): ")
_ERROR = re.compile(r"\.cu\(\d+\): (catastrophic )?error")  # not a warning


# a decimal integer literal, with any unsigned or long suffix, not part of a name, a hexadecimal
# literal or a floating-point one
_INTEGER = re.compile(r"(?<![\w.])(\d+)[uU]?[lL]{0,2}(?![\w.])")


def _integer_class(match: re.Match) -> str:
    value = int(match.group(1))
    if value == 0:
        return "<0>"
    return "<int>" if value < 1 << 31 else "<int64>" if value < 1 << 63 else "<huge>"


def form(body: str) -> str:
    """`body` with each decimal integer literal replaced by its class: kernels of one form
    differ only in sizes, strides and trip counts, which nvcc parses, checks and lowers the
    same way whatever their values (many of the suite's kernels are of a form met
    before, at another size), so one of each form is compiled.

    >>> form("a[i * 64 + 7ll] = b[0] * 1.5f + 0x10 + k2;")
    'a[i * <int> + <int>] = b[<0>] * 1.5f + 0x10 + k2;'
    """
    return _INTEGER.sub(_integer_class, body)


@dataclass
class Failure:
    """A kernel nvcc refused (or, when nvcc's messages name no line, a whole unit)."""

    kernel: str
    arch: str
    message: str


class NvccAll:
    """Collects kernels and compiles them in units with nvcc, in the background. Kernel
    names must be distinct C identifiers: they name the functions in the units."""

    def __init__(
        self,
        nvcc: str,
        prelude: str,
        archs: tuple[str, ...] = ARCHS,
        unit_size: int = UNIT_SIZE,
        workers: int = 2,
        flags: tuple[str, ...] = FAST,
    ):
        self.nvcc = nvcc
        self.prelude = prelude
        self.archs = archs
        self.unit_size = unit_size
        self.flags = flags
        self.folder = Path(tempfile.mkdtemp(prefix="fusegrad_nvcc_all_"))
        # niced so that, on a small machine, the tests keep their core and nvcc takes the rest
        self.nice = [shutil.which("nice"), "-n", "10"] if shutil.which("nice") else []
        # nvcc runs on background threads while tests set environment variables; a child
        # spawned without `env` executes with the C library's `environ`, which a setenv on
        # another thread may move meanwhile (seen once in CI: "[Errno 14] Bad address:
        # '/usr/bin/nice'"). A copy taken now is handed to every child instead.
        self.env = dict(os.environ)
        # its threads only wait for nvcc: fusegrad may fork beside them (forksafe.may_fork;
        # imported here, once conftest.py has set the tests' environment)
        from fusegrad.runtime import forksafe

        self._pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="nvcc", initializer=forksafe.own
        )
        self._futures: list[Future] = []
        # kernels waiting for a unit: plain CUDA C (compiled for the first arch) and those
        # whose code depends on the architecture (`_ARCH_SPECIFIC`, compiled for each)
        self._pending: list[tuple[str, str]] = []
        self._pending_arch: list[tuple[str, str]] = []
        self._every_arch = False  # a unit went to every arch (the prelude checked on each)
        self.arch_specific = 0  # distinct kernels compiled for every arch
        self._bodies: set[str] = set()
        self._lock = threading.Lock()
        self.offered = 0  # kernels add() was given
        self.units = 0
        self.nvcc_seconds = 0.0  # summed over nvcc runs (they overlap one another and the tests)

    @property
    def kernels(self) -> int:
        """Kernels of distinct forms collected so far (`form`)."""
        return len(self._bodies)

    def add(self, name: str, body: str) -> None:
        """Collect one kernel (`body` names it `SYMBOL`) unless its `form` was seen already."""
        key = form(body)
        with self._lock:
            self.offered += 1
            if key in self._bodies:
                return
            self._bodies.add(key)
            specific = _ARCH_SPECIFIC.search(body) is not None
            self.arch_specific += specific
            pending = self._pending_arch if specific else self._pending
            pending.append((name, body))
            if len(pending) >= self.unit_size:
                self._submit(specific)

    def _submit(self, specific: bool) -> None:
        if specific:
            unit, self._pending_arch = self._pending_arch, []
            self._every_arch = True
        else:
            unit, self._pending = self._pending, []
        index = self.units
        self.units += 1
        for arch in self.archs if specific else self.archs[:1]:
            self._futures.append(self._pool.submit(self.compile_unit, unit, arch, f"unit{index}"))

    def _submit_prelude(self) -> None:
        """The prelude alone for the archs after the first, where no kernel went to every
        arch (the plain units checked it on the first)."""
        index = self.units
        self.units += 1
        for arch in self.archs[1:]:
            self._futures.append(self._pool.submit(self.compile_unit, [], arch, f"unit{index}"))

    def finish(self) -> list[Failure]:
        """Compile what is left, wait for every unit, and return the failures."""
        with self._lock:
            if self._pending:
                self._submit(False)
            if self._pending_arch:
                self._submit(True)
            elif not self._every_arch and len(self.archs) > 1:
                self._submit_prelude()
        failures = [f for future in self._futures for f in future.result()]
        self._pool.shutdown()
        if not failures:
            shutil.rmtree(self.folder, ignore_errors=True)
        return failures

    def cancel(self) -> None:
        """Drop the units not started, wait for those running, remove the folder (an
        interrupted session)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.folder, ignore_errors=True)

    def compile_unit(self, unit: list[tuple[str, str]], arch: str, name: str) -> list[Failure]:
        """Compile these kernels as one translation unit for `arch`; the failures, each
        pinned to the kernel whose lines nvcc complains about."""
        lines = [self.prelude]
        starts: list[int] = []  # first line (1-based) of each kernel
        line = self.prelude.count("\n") + 1
        for kernel, body in unit:
            starts.append(line)
            text = body.replace(SYMBOL, kernel) + "\n"
            lines.append(text)
            line += text.count("\n")
        cu = self.folder / f"{name}.{arch}.cu"
        cu.write_text("".join(lines))
        t0 = time.perf_counter()
        r = subprocess.run(
            [
                *self.nice,
                self.nvcc,
                "--ptx",
                f"-arch={arch}",
                *self.flags,
                "-o",
                str(cu.with_suffix(".ptx")),
                str(cu),
            ],
            capture_output=True,
            text=True,
            env=self.env,
        )
        with self._lock:
            self.nvcc_seconds += time.perf_counter() - t0
        if r.returncode == 0:
            return []
        messages: dict[int, list[str]] = {}
        k = -1  # the kernel a message is about; a line naming no line goes with the one before
        for text in r.stderr.splitlines():
            m = _LINE.search(text)
            if m:
                k = bisect.bisect_right(starts, int(m.group(1))) - 1
            messages.setdefault(k, []).append(text)
        broken = [k for k, msgs in messages.items() if k >= 0 and any(map(_ERROR.search, msgs))]
        if not broken:  # nothing points into a kernel (the prelude, a crash): blame the unit
            names = ", ".join(n for n, _ in unit)
            return [Failure(f"{name} ({len(unit)} kernels: {names})", arch, r.stderr)]
        return [Failure(unit[k][0], arch, "\n".join(messages[k])) for k in sorted(broken)]
