"""`torch.profiler` under its names, on `fusegrad.profile()` (`import torch.profiler` in a
script run by `python -m fusegrad` gets this module).

>>> import fusegrad as fg
>>> from fusegrad.torch_profiler import ProfilerActivity, profile, record_function
>>> w = fg.randn(32, 32).realize()
>>> with profile(activities=[ProfilerActivity.CPU]) as prof:
...     with record_function("forward"):
...         _ = (fg.randn(8, 32) @ w).relu().sum().item()
>>> [e.key for e in prof.key_averages() if e.key == "forward"]
['forward']
>>> e = next(e for e in prof.key_averages() if e.key == "forward"); e.count
1

What it records is what `fusegrad.profile()` records: each kernel's runs and time (on the
CPU or the GPU it ran on), the compile phases, and the `record_function` regions, which
are wall time on the thread that ran them. `key_averages()` lists kernels and regions, not
torch's operators: a fused kernel holds many of them (`prof.table()` says which).

- `activities` is accepted; every kernel is timed on the device it ran on. `record_shapes`
  keeps each kernel's input shapes (`key_averages(group_by_input_shape=True)`);
  `profile_memory`, `with_stack`, `with_flops`, `with_modules` and the rest are accepted
  and add nothing (`prof.table(by="line")` and `by="module"` are fusegrad's per-line and
  per-module times; each kernel's FLOPs are `flops`).
- `schedule` (`schedule(wait=, warmup=, active=, repeat=, skip_first=)`) and `prof.step()`
  record the active steps of each cycle alone; `on_trace_ready` is called with the
  profile at each cycle's end (without a schedule, at the block's end), as torch calls it;
  `tensorboard_trace_handler(dir)` writes each as a Chrome trace file there.
"""

from __future__ import annotations

import contextlib
import enum
import gzip
import json
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterable

from . import cuda
from . import profiler as _profiler
from .runtime import phases as _phases
from .runtime.backend import get_backend

__all__ = [
    "ProfilerAction",
    "ProfilerActivity",
    "profile",
    "record_function",
    "schedule",
    "supported_activities",
    "tensorboard_trace_handler",
]


class ProfilerActivity(enum.Enum):
    """torch.profiler.ProfilerActivity: accepted by `profile(activities=...)`."""

    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


class ProfilerAction(enum.Enum):
    """What a `schedule` says a step does."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities() -> set[ProfilerActivity]:
    """The activities fusegrad times: the CPU, and CUDA where the cuda device runs."""
    return {ProfilerActivity.CPU} | ({ProfilerActivity.CUDA} if cuda.is_available() else set())


def schedule(
    *, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0,
    skip_first_wait: int = 0,
) -> Callable[[int], ProfilerAction]:  # fmt: skip
    """torch.profiler.schedule: after `skip_first` steps, cycles of `wait` idle steps,
    `warmup` steps and `active` recorded ones (the last of which saves), `repeat` times
    (0: without end); `skip_first_wait` skips the first cycle's wait."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError("Invalid profiler schedule arguments")
    if warmup == 0:
        warnings.warn(
            "Profiler won't be using warmup, this can skew profiler results", stacklevel=2
        )

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:
            step += wait
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < wait:
            return ProfilerAction.NONE
        if at < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def tensorboard_trace_handler(
    dir_name: str, worker_name: str | None = None, use_gzip: bool = False,
    use_python_export: bool = False,
) -> Callable:  # fmt: skip
    """torch.profiler.tensorboard_trace_handler: an `on_trace_ready` that writes each saved
    cycle to `dir_name/<worker>.<ms>.pt.trace.json` (`.gz` with `use_gzip`), a Chrome trace
    (`Profile.chrome_trace`); the worker is `<host>_<pid>` unless named."""

    def handler(prof: profile) -> None:
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(dir_name, f"{worker}.{time.time_ns() // 1_000_000}.pt.trace.json")
        data = json.dumps(prof.chrome_trace()).encode()
        if use_gzip:
            with gzip.open(path + ".gz", "wb") as f:
                f.write(data)
        else:
            with open(path, "wb") as f:
                f.write(data)

    return handler


_ACTIVE: list[profile] = []  # the profiles in force, innermost last


class record_function(contextlib.ContextDecorator):
    """torch.profiler.record_function: a named region of the profiled code (a `with` block
    or a decorator); each profile recording at its end counts its wall time."""

    def __init__(self, name: str, args: str | None = None):
        self.name, self.args = name, args

    def __enter__(self) -> record_function:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        end = time.perf_counter()
        for prof in list(_ACTIVE):
            prof._region(self.name, self._start, end)


class FunctionEventAvg:
    """One row of `key_averages()`: a kernel (or a kernel and its input shapes) or a
    `record_function` region. Times in microseconds, as torch's; a kernel's time is
    `self_cpu_time_total` on the CPU and `self_device_time_total` on a GPU."""

    def __init__(self, key: str, count: int, seconds: float, self_seconds: float,
                 on_device: bool, input_shapes=None, flops: int = 0):  # fmt: skip
        self.key, self.count, self.input_shapes, self.flops = key, count, input_shapes, flops
        us, self_us = seconds * 1e6, self_seconds * 1e6
        self.cpu_time_total = 0.0 if on_device else us
        self.self_cpu_time_total = 0.0 if on_device else self_us
        self.device_time_total = us if on_device else 0.0
        self.self_device_time_total = self_us if on_device else 0.0
        self.cuda_time_total = self.device_time_total  # (torch's older names)
        self.self_cuda_time_total = self.self_device_time_total
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0
        self.device_memory_usage = self.self_device_memory_usage = 0
        self.cuda_memory_usage = self.self_cuda_memory_usage = 0

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count if self.count else 0.0

    cuda_time = device_time

    def __repr__(self) -> str:
        return (
            f"<FunctionEventAvg key={self.key} count={self.count} "
            f"cpu_time_total={self.cpu_time_total:.3f}us "
            f"device_time_total={self.device_time_total:.3f}us>"
        )


class EventList(list):
    """`key_averages()`'s rows, with torch's `table()`."""

    def table(self, sort_by: str | None = None, row_limit: int = 100,
              max_name_column_width: int = 55, header: str | None = None,
              top_level_events_only: bool = False, **_) -> str:  # fmt: skip
        """The rows as text, sorted by the attribute `sort_by` (largest first; torch's
        names: "cpu_time_total", "self_cpu_time_total", "cuda_time_total", "count", ...)."""
        rows = list(self)
        if sort_by is not None:
            rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        width = max([len("Name"), *(min(len(e.key), max_name_column_width) for e in rows)])
        cpu = sum(e.self_cpu_time_total for e in self) or 1.0
        dev = sum(e.self_device_time_total for e in self) or 1.0
        cols = ["Self CPU %", "Self CPU", "CPU total", "CPU time avg", "Self CUDA",
                "Self CUDA %", "CUDA total", "# of Calls"]  # fmt: skip
        shapes = any(e.input_shapes is not None for e in rows)
        head = f"{'Name':<{width}}  " + "  ".join(f"{c:>12}" for c in cols)
        head += "  Input Shapes" if shapes else ""
        rule = "-" * len(head)
        lines = ([header] if header else []) + [rule, head, rule]
        for e in rows:
            cells = [
                f"{100 * e.self_cpu_time_total / cpu:.2f}%",
                _us(e.self_cpu_time_total),
                _us(e.cpu_time_total),
                _us(e.cpu_time),
                _us(e.self_device_time_total),
                f"{100 * e.self_device_time_total / dev:.2f}%",
                _us(e.device_time_total),
                str(e.count),
            ]
            line = f"{e.key[:width]:<{width}}  " + "  ".join(f"{c:>12}" for c in cells)
            lines.append(line + (f"  {e.input_shapes or '[]'}" if shapes else ""))
        lines.append(rule)
        lines.append(f"Self CPU time total: {_us(sum(e.self_cpu_time_total for e in self))}")
        if any(e.self_device_time_total for e in self):
            lines.append(f"Self CUDA time total: {_us(dev)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _us(us: float) -> str:
    """A time as torch's tables print it."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class profile(_profiler.Profile):
    """torch.profiler.profile on `fusegrad.profile()` (see the module docstring): a
    `Profile` (`table()`, `by_line()`, `export_chrome_trace()`) with torch's arguments,
    `step()`, `key_averages()` and `events()`."""

    def __init__(
        self, *, activities: Iterable | None = None, schedule: Callable | None = None,
        on_trace_ready: Callable | None = None, record_shapes: bool = False,
        profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
        with_modules: bool = False, experimental_config=None, execution_trace_observer=None,
        acc_events: bool = False, custom_trace_id_callback=None,
        post_processing_timeout_s: float | None = None, use_cuda: bool | None = None,
    ):  # fmt: skip
        super().__init__()
        for a in activities or ():
            if not isinstance(a, (ProfilerActivity, dict)):
                raise TypeError(f"profile: activities holds {a!r}, not a ProfilerActivity")
        self.activities = set(activities) if activities else supported_activities()
        self.schedule, self.on_trace_ready = schedule, on_trace_ready
        self.record_shapes = record_shapes
        self.step_num = 0
        self.regions: list[tuple] = []  # (name, thread track, start, end)
        self.devices: dict[str, str] = {}  # kernel name -> the device it ran on
        self.shapes: dict[tuple, list] = {}  # (kernel, input shapes) -> [runs, seconds]
        self._action = schedule(0) if schedule else ProfilerAction.RECORD
        self._recording = self._action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

    # ---------------------------------------------------------------- the block
    def __enter__(self) -> profile:
        super().__enter__()
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self)
        super().__exit__(*exc)
        if self.schedule is None:
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        elif self._recording and self.on_trace_ready is not None:
            self._close_cycle()  # a cycle cut short by the block's end is saved too
            self.on_trace_ready(self)

    def start(self) -> None:
        """torch's `prof.start()`: as entering the `with` block."""
        self.__enter__()

    def stop(self) -> None:
        """torch's `prof.stop()`: as leaving it."""
        self.__exit__(None, None, None)

    def step(self) -> None:
        """End a training step: the schedule says what the next one does; a cycle's last
        recorded step hands the profile to `on_trace_ready`, and the next cycle starts
        from nothing."""
        before = self._action
        self.step_num += 1
        if self.schedule is None:
            return
        self._action = self.schedule(self.step_num)
        if before is ProfilerAction.RECORD_AND_SAVE:
            self._close_cycle()
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        recording = self._action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        if recording and not self._recording or before is ProfilerAction.RECORD_AND_SAVE:
            self._open_cycle()
        self._recording = recording

    def _open_cycle(self) -> None:
        """Start recording afresh (the cycle's kernels, regions, phases and wall time)."""
        self.by_name.clear()
        self.events.clear()
        self.spans.clear()
        self.regions.clear()
        self.shapes.clear()
        for table in self.places.values():
            table.clear()
        self._before = _phases.snapshot()
        self._start = time.perf_counter()
        self._sampler.samples = self._sampler.trace = 0

    def _close_cycle(self) -> None:
        """The cycle's wall time and phases, as a block's end sets them."""
        self.wall = time.perf_counter() - self._start
        after = _phases.snapshot()
        self._phases = {k: after[k] - self._before.get(k, 0.0) for k in after}
        samples = self._sampler.samples
        self._trace_share = self._sampler.trace / samples if samples else 0.0

    # ---------------------------------------------------------------- collecting
    def _observe(self, plan, records) -> None:
        if not self._recording:
            return
        super()._observe(plan, records)
        with self._lock:
            for rec in records:
                self.devices.setdefault(rec.name, plan.device)
                if self.record_shapes and rec.seconds is not None:
                    row = self.shapes.setdefault((rec.name, str(rec.input_shapes)), [0, 0.0])
                    row[0] += 1
                    row[1] += rec.seconds

    def _span(self, phase: str, start: float, end: float) -> None:
        if self._recording:
            super()._span(phase, start, end)

    def _region(self, name: str, start: float, end: float) -> None:
        if self._recording:
            self.regions.append((name, self._thread(), start, end))

    # ---------------------------------------------------------------- reading
    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False) -> EventList:  # fmt: skip
        """Per kernel (per kernel and input shapes where `group_by_input_shape`, which
        needs `record_shapes=True`) and per `record_function` name: calls and times."""
        if group_by_input_shape and not self.record_shapes:
            raise RuntimeError(
                "key_averages: group_by_input_shape needs profile(record_shapes=True)"
            )
        rows = EventList()
        on_gpu = {name: not get_backend(dev).is_host for name, dev in self.devices.items()}
        if group_by_input_shape:
            for (name, shapes), (runs, seconds) in self.shapes.items():
                flops = self.by_name[name].flops * runs
                gpu = on_gpu.get(name, False)
                rows.append(FunctionEventAvg(name, runs, seconds, seconds, gpu, shapes, flops))
        else:
            for k in self.kernels:
                gpu = on_gpu.get(k.name, False)
                rows.append(
                    FunctionEventAvg(k.name, k.calls, k.seconds, k.seconds, gpu, None,
                                     k.flops * k.calls)
                )  # fmt: skip
        totals: dict[str, list] = {}
        for name, tid, start, end in self.regions:
            inside = sum(
                s for _, t, at, s, _ in self.events if t == tid and start <= at and at + s <= end
            )
            row = totals.setdefault(name, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += end - start
            row[2] += max(0.0, end - start - inside)
        for name, (count, seconds, own) in totals.items():
            rows.append(FunctionEventAvg(name, count, seconds, own, False))
        return rows

    def events(self) -> EventList:
        """torch's per-call events, here `key_averages()`'s rows (fusegrad keeps each
        kernel's total, and each run's time in `chrome_trace()`)."""
        return self.key_averages()

    def chrome_trace(self) -> dict:
        """`Profile.chrome_trace` with the `record_function` regions on their threads."""
        trace = super().chrome_trace()
        for name, tid, start, end in self.regions:
            trace["traceEvents"].append(
                {
                    "name": name,
                    "cat": "user_annotation",
                    "ph": "X",
                    "pid": 1,
                    "tid": tid,
                    "ts": round((start - self._start) * 1e6, 3),
                    "dur": round((end - start) * 1e6, 3),
                }
            )
        return trace
