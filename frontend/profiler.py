"""`fusegrad.profile()`: where a training loop's time goes, kernel by kernel and phase by phase.

>>> import fusegrad as fg
>>> w = fg.randn(64, 64).realize()
>>> with fg.profile() as prof:
...     for _ in range(3):
...         x = fg.randn(256, 64)  # new numbers, the same graph
...         _ = (x @ w).relu().sum().item()
>>> {k.calls for k in prof.kernels}
{3}
>>> list(prof.phases())
['trace', 'autodiff', 'schedule', 'compile', 'run', 'python']

`prof.table()` is the report (one row per kernel: its name, the user-level ops it
holds, calls, total and mean time, GB/s and GFLOP/s with the share of this
machine's measured limits; then the phases; `table(by="line")` and `table(by="module")`
total the time per user line and per module path instead, as `prof.by_line()` and
`prof.by_module()` do), and `prof.export_chrome_trace(path)`
writes a trace for chrome://tracing or https://ui.perfetto.dev (one track per
Python thread that ran kernels, one for compile phases).

Inside the block a cached schedule runs as it does outside, as one native program per
thread, which reads the cycle counter as each kernel starts (after the barrier that
ends the one before; `runtime/program.py`): a kernel's time is what it takes in the
training loop, the wait for the slowest thread included. (A kernel launched on its own
from Python would find the worker threads asleep and its output memory fresh: a small
one would run at one thread's speed, a large one would pay for page faults.) A cuda plan
is launched kernel by kernel, each waited for and timed on the GPU by events recorded
around its launches (PyCUDA's `Event`; the emulator's kernels, by the host's clock).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from dataclasses import dataclass, field

from .runtime import attribution as sites
from .runtime import engine as engine_module
from .runtime import forksafe
from .runtime import phases as _phases
from .runtime.attribution import is_stdlib
from .runtime.backend import HOST, get_backend
from .runtime.config import config
from .runtime.engine import NO_LINE, engine

# phase of the report -> the compile-time phases (fusegrad.runtime.phases) it sums
_PHASE_GROUPS = {
    "autodiff": ("autodiff",),
    "schedule": ("key", "schedule"),
    "compile": ("lower", "render", "llvm", "program"),
}


@dataclass
class KernelStats:
    """One kernel's runs inside the profile."""

    name: str
    user_ops: list[str]
    roles: list[str]
    bytes: int
    flops: int
    calls: int = 0
    seconds: float = 0.0

    @property
    def mean_seconds(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0

    @property
    def gbs(self) -> float:
        return self.bytes * self.calls / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gflops(self) -> float:
        return self.flops * self.calls / self.seconds / 1e9 if self.seconds > 0 else 0.0


NO_MODULE = "(no module)"


@dataclass
class PlaceStats:
    """Kernel time spent on one user line or one module path (`Profile.by_line`)."""

    name: str  # "models.py:90" or "ResNet.layer1.0.conv1"
    seconds: float
    runs: int  # kernel runs that held an op of it


def machine_limits() -> dict[str, float]:
    """This machine's measured limits, as the host's backend measures them once per
    process: memory bandwidth (GB/s, a 64 MB copy by numpy, bytes read plus written) and
    arithmetic (GFLOP/s, numpy's float32 matrix product of 1024 x 1024, a practical peak)."""
    host = get_backend(HOST)
    return {"GB/s": host.bandwidth, "GFLOP/s": host.peak}


@dataclass
class Profile:
    """What ran inside one `with fusegrad.profile():` block (see the module docstring)."""

    wall: float = 0.0
    by_name: dict[str, KernelStats] = field(default_factory=dict)
    events: list[tuple] = field(default_factory=list)  # (name, thread, start, seconds, rec)
    spans: list[tuple] = field(default_factory=list)  # (phase, thread, start, end)
    threads: dict[int, tuple[int, str]] = field(default_factory=dict)  # ident -> track, name
    # "line" / "module" -> key -> [seconds, runs]: each run's time shared among its places
    places: dict[str, dict[str, list]] = field(default_factory=lambda: {"line": {}, "module": {}})
    _phases: dict[str, float] = field(default_factory=dict)
    _start: float = 0.0

    # ---------------------------------------------------------------- collecting
    def __enter__(self) -> Profile:
        self._lock = forksafe.Lock()
        self._before = _phases.snapshot()
        self._override = config.override(kernel_times=True)  # each kernel's own time
        self._override.__enter__()
        self._listener = _phases.listener
        _phases.listener = self._span
        engine.observers.append(self._observe)
        self._sampler = _TraceSampler(threading.get_ident())
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self._start
        self._trace_share = self._sampler.stop()
        engine.observers.remove(self._observe)
        _phases.listener = self._listener
        self._override.__exit__(*exc)
        after = _phases.snapshot()
        self._phases = {k: after[k] - self._before.get(k, 0.0) for k in after}

    def _thread(self) -> int:
        """The calling thread's track number (1, 2, ...: the order threads first ran)."""
        ident = threading.get_ident()
        track = self.threads.get(ident)
        if track is None:
            with self._lock:
                track = self.threads.setdefault(
                    ident, (len(self.threads) + 1, threading.current_thread().name)
                )
        return track[0]

    def _span(self, phase: str, start: float, end: float) -> None:
        if phase != "key":  # every realize hashes its graph: too many to draw
            self.spans.append((phase, self._thread(), start, end))

    def _observe(self, plan, records) -> None:
        tid = self._thread()
        with self._lock:  # several threads may realize at once
            for rec in records:
                stats = self.by_name.get(rec.name)
                if stats is None:
                    stats = self.by_name[rec.name] = KernelStats(
                        rec.name, rec.user_ops, rec.roles, rec.bytes, rec.flops
                    )
                stats.calls += 1
                if rec.seconds is not None:
                    stats.seconds += rec.seconds
                    self._share(rec)
                    if rec.started is not None:
                        self.events.append((rec.name, tid, rec.started, rec.seconds, rec))

    def _share(self, rec) -> None:
        """Share one timed run among the kernel's user lines and modules, in proportion to
        the primitives each contributed (forward and backward of a line count together)."""
        places = rec.places or [(NO_LINE, "", 1)]
        total = sum(w for _, _, w in places) or 1
        for by, index in (("line", 0), ("module", 1)):
            table = self.places[by]
            seen = set()
            for place in places:
                key = place[index] or NO_MODULE
                row = table.setdefault(key, [0.0, 0])
                row[0] += rec.seconds * place[2] / total
                if key not in seen:
                    seen.add(key)
                    row[1] += 1

    # ---------------------------------------------------------------- reading
    def by_line(self) -> list[PlaceStats]:
        """Kernel time per user line (`models.py:90`), the most first: a kernel's time is
        shared among the lines whose ops it fused, in proportion to their primitives, and a
        line's backward counts with its forward. The rows sum to the kernels' total time."""
        return self._totals("line")

    def by_module(self) -> list[PlaceStats]:
        """Kernel time per module path (`ResNet.layer1.0.conv1`: the outermost module's
        class, then the names `named_modules()` gives), shared as `by_line` shares it; ops
        made outside any module's forward (the loss written inline, the optimizer) are
        "(no module)". The rows sum to the kernels' total time."""
        return self._totals("module")

    def _totals(self, by: str) -> list[PlaceStats]:
        with getattr(self, "_lock", None) or contextlib.nullcontext():
            rows = [PlaceStats(k, s, n) for k, (s, n) in self.places[by].items()]
        return sorted(rows, key=lambda r: -r.seconds)

    @property
    def kernels(self) -> list[KernelStats]:
        """Every kernel that ran, the most time first."""
        return sorted(self.by_name.values(), key=lambda k: -k.seconds)

    def phases(self) -> dict[str, float]:
        """Seconds per phase: trace (building graphs in fusegrad's Python: tensor ops,
        modules, the optimizer; estimated by sampling the profiled thread's stack every
        `SAMPLE_SECONDS`), autodiff, schedule (structure keys and cutting into kernels),
        compile (lower, render, LLVM), run (the kernels, timed), and python: the rest of
        the block's wall time (your code, launching kernels, waiting)."""
        measured = {
            group: sum(self._phases.get(p, 0.0) for p in ps) for group, ps in _PHASE_GROUPS.items()
        }
        measured["run"] = sum(k.seconds for k in self.by_name.values())
        trace = min(self.wall * getattr(self, "_trace_share", 0.0), self.wall)
        out = {"trace": trace, **measured}
        out["python"] = max(0.0, self.wall - sum(out.values()))
        return out

    def table(self, rows: int = 25, by: str = "kernel") -> str:
        """The report: kernels by total time, then the phases. `by="line"` or
        `by="module"` lists time per user line or per module path instead of per kernel
        (`by_line`, `by_module`), with the total."""
        if by in ("line", "module"):
            return self._place_table(by, rows)
        if by != "kernel":
            raise ValueError(f"Profile.table: by must be 'kernel', 'line' or 'module', not {by!r}")
        limits = machine_limits()
        head = (
            f"{'kernel':<44} {'calls':>5} {'total ms':>9} {'mean ms':>8} "
            f"{'GB/s':>7} {'%mem':>5} {'GFLOP/s':>8} {'%peak':>5}  user ops"
        )
        lines = [head, "-" * len(head)]
        for k in self.kernels[:rows]:
            ops = ", ".join(k.user_ops) or "-"
            lines.append(
                f"{k.name:<44} {k.calls:>5} {k.seconds * 1e3:>9.3f} {k.mean_seconds * 1e3:>8.3f} "
                f"{k.gbs:>7.2f} {100 * k.gbs / limits['GB/s']:>5.1f} {k.gflops:>8.2f} "
                f"{100 * k.gflops / limits['GFLOP/s']:>5.1f}  {ops[:90]}"
            )
        if len(self.by_name) > rows:
            lines.append(f"... and {len(self.by_name) - rows} more kernel(s)")
        lines.append(
            f"this machine: {limits['GB/s']:.1f} GB/s (numpy copy), "
            f"{limits['GFLOP/s']:.1f} GFLOP/s (numpy float32 matmul)"
        )
        lines.append("")
        lines.append(f"{'phase':<10} {'ms':>9} {'share':>6}")
        for name, sec in self.phases().items():
            share = 100 * sec / self.wall if self.wall > 0 else 0.0
            lines.append(f"{name:<10} {sec * 1e3:>9.2f} {share:>5.1f}%")
        lines.append(f"{'wall':<10} {self.wall * 1e3:>9.2f}")
        return "\n".join(lines)

    def _place_table(self, by: str, rows: int) -> str:
        totals = self._totals(by)
        run = sum(k.seconds for k in self.by_name.values())
        head = f"{by:<48} {'kernel runs':>11} {'total ms':>9} {'share':>6}"
        lines = [head, "-" * len(head)]
        for r in totals[:rows]:
            share = 100 * r.seconds / run if run > 0 else 0.0
            lines.append(f"{r.name:<48} {r.runs:>11} {r.seconds * 1e3:>9.3f} {share:>5.1f}%")
        if len(totals) > rows:
            rest = sum(r.seconds for r in totals[rows:])
            lines.append(f"... and {len(totals) - rows} more: {rest * 1e3:.3f} ms")
        lines.append(f"{'total (kernels)':<48} {'':>11} {run * 1e3:>9.3f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def chrome_trace(self) -> dict:
        """The profile as a Chrome trace (JSON object format): kernels and compile phases
        as complete events, one track per thread, times in microseconds from the start."""

        def us(t: float) -> float:
            return round((t - self._start) * 1e6, 3)

        events: list[dict] = []
        for tid, name in self.threads.values():
            meta = {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid}
            events.append({**meta, "args": {"name": name}})
        compile_tid = 0  # compile phases on a track of their own
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": 1,
                "tid": compile_tid,
                "args": {"name": "compile"},
            }
        )
        for name, tid, start, seconds, rec in self.events:
            events.append(
                {
                    "name": name,
                    "cat": "kernel," + ",".join(rec.roles),
                    "ph": "X",
                    "pid": 1,
                    "tid": tid,
                    "ts": us(start),
                    "dur": round(seconds * 1e6, 3),
                    "args": {
                        "user ops": rec.user_ops,
                        "shape": list(rec.shape),
                        "bytes": rec.bytes,
                        "flops": rec.flops,
                        "reason": rec.reason,
                    },
                }
            )
        for phase, tid, start, end in self.spans:
            events.append(
                {
                    "name": phase,
                    "cat": "compile",
                    "ph": "X",
                    "pid": 1,
                    "tid": compile_tid,
                    "ts": us(start),
                    "dur": round((end - start) * 1e6, 3),
                    "args": {"thread": tid},
                }
            )
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path: str) -> None:
        """Write `chrome_trace()` to `path` (open it in chrome://tracing or Perfetto)."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)


SAMPLE_SECONDS = 0.002  # how often the profiled thread's stack is sampled for "trace"


class _TraceSampler:
    """Samples one thread's innermost frame: the share of samples in fusegrad's graph
    building (frontend, nn) is the trace phase's share of the wall time. Frames in
    the runtime and the pipeline are timed exactly elsewhere and count as neither."""

    def __init__(self, ident: int):
        import importlib.util
        import os

        spec = importlib.util.find_spec(__package__ + ".pipeline")  # its folder, not imported
        timed = [os.path.dirname(os.path.abspath(m.__file__)) for m in (_phases, engine_module)]
        timed += list(spec.submodule_search_locations or []) if spec else []
        self.timed = tuple(os.path.abspath(d) + os.sep for d in timed)
        # fusegrad's other folders (the frontend, nn) build graphs
        self.building = tuple(d for d in sites.library_dirs() if d not in self.timed)
        self.ident, self.samples, self.trace = ident, 0, 0
        self._stop = forksafe.Event()
        self._thread = forksafe.Thread(target=self._run, name="fusegrad-profile", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            name = self._sample()
            if name is None:
                continue
            self.samples += 1
            if name.startswith(self.timed):
                continue
            self.trace += name.startswith(self.building)

    def _sample(self) -> str | None:
        """The file of the profiled thread's innermost frame outside the standard library.
        No frame outlives the call: a frame held until the next sample would keep its
        function's locals alive after the function returned (a step's lazy tensors,
        which the next optimizer step would then find alive and compute: a plan with
        other outputs than the loop's own)."""
        frame = sys._current_frames().get(self.ident)
        while frame is not None and is_stdlib(frame.f_code.co_filename):
            frame = frame.f_back  # a with block's or a lock's frames: look at the caller
        return None if frame is None else frame.f_code.co_filename

    def stop(self) -> float:
        """Stop sampling; the share of samples spent building graphs."""
        self._stop.set()
        self._thread.join()
        return self.trace / self.samples if self.samples else 0.0


def profile() -> Profile:
    """Profile the block: `with fusegrad.profile() as prof: ...; print(prof.table())`."""
    return Profile()
