"""Where compile time goes: seconds accumulated per phase, for `fusegrad.compile_times()`.

The phases, in the order a new graph meets them:

- `autodiff`: building the backward graph (`backward()`, `fusegrad.grad`);
- `key`: hashing a graph's structure to look its schedule up (every realize);
- `schedule`: cutting a new graph into kernels;
- `lower`: each kernel to loop IR (register tiles decided here);
- `render`: loop IR to LLVM IR text;
- `llvm`: LLVM's O3 pipeline and machine code, or loading it from the disk cache (a new
  plan made side by side, `pipeline/compiler.py`'s `side_by_side`: this process's own
  share, and its wait for the forked copies' items; their lowering is not counted);
- `program`: stringing a cached schedule's kernels into one native program;
- `cuda`: compiling CUDA C (nvcc through PyCUDA, or the emulator's C++ compiler).

Only `autodiff` and `key` are paid again by a step whose graph was seen
before (`fusegrad.jit` skips those too).

>>> from fusegrad.runtime import phases
>>> with phases.timed("schedule"):
...     pass
>>> phases.seconds["schedule"] >= 0.0
True
"""

from __future__ import annotations

import time

from ..ir.hooks import hooks

PHASES = ("autodiff", "key", "schedule", "lower", "render", "llvm", "program", "cuda")
seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
# called with (phase, start, end) after each timed block while set (`fusegrad.profile`)
listener = None


class timed:
    """Add the time spent inside the block to `seconds[phase]`. A plain class, not a
    `contextmanager` generator: the `key` phase wraps every realize."""

    __slots__ = ("phase", "t0")

    def __init__(self, phase: str):
        self.phase = phase

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc) -> None:
        add(self.phase, self.t0, time.perf_counter())


def add(phase: str, t0: float, t1: float) -> None:
    """Count the time from t0 to t1 (time.perf_counter()) in `phase`: `timed` without
    the block, for a path too hot for a context manager."""
    seconds[phase] += t1 - t0
    if listener is not None:
        listener(phase, t0, t1)


def snapshot() -> dict[str, float]:
    return dict(seconds)


def reset() -> None:
    for k in seconds:
        seconds[k] = 0.0


# ir/autodiff.py times the backward graphs it builds through this
hooks.timed = timed
