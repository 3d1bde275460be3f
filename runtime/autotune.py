"""A bounded autotuner of register tiles: `FUSEGRAD_AUTOTUNE=1` (the default outside tests).

Where a float32 contraction of at least 2^26 multiply-adds could take several register
tiles (`pipeline.tile_tuning.tuning_space`: the same vector of columns with 4, 8, 12 or 16 rows,
or for 16 lanes grids of rows along a second axis, those that sum as the fixed choice
does), the first kernel of each shape class that a
process lowers has every candidate compiled and timed on random inputs of the kernel's
sizes (the fastest of three runs after a warm-up; one run where it is already clearly
slower than the best so far), and takes the fastest. The choice is written to the disk
cache (FUSEGRAD_CACHE/autotune/, one file per host: `host_key` names the CPU model, its
features, LLVM's version and the threads kernels run on, so a different CPU or thread
count never reads it) and read back by later processes without timing anything.

The timing is bounded: a process spends at most FUSEGRAD_AUTOTUNE_BUDGET seconds (10 by
default) timing candidates. A tuner that runs past it stops, keeps the best candidate
timed so far (the fixed choice where none was), and saves nothing, so a later run
finishes the job. Every candidate computes each output as the same sum in the same
order (an epilogue's multiply-add may round once in one and twice in another: the last
bit); a candidate whose output differs from the first one's beyond float32 rounding on the
same inputs is dropped with a warning (a code-generation bug: never chosen).

`FUSEGRAD_AUTOTUNE=0` (the tests' setting, so their kernels are the same on every run)
keeps `choose_tile`'s fixed choice for the host. The kernel dump's header (`fg dump`,
FUSEGRAD_DUMP) says which tile a kernel took and how it was chosen (`Kernel.tile_note`).

>>> space_key = "float32 sum out[rows2048,lanes2048] k2048 lanes32 reads[2,3]"
>>> Autotuner(folder=None, budget_s=0.0).choice(space_key) is None  # nothing tuned yet
True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable

import numpy as np

from ..pipeline import compiler
from ..pipeline.compiler import write_atomic
from .config import config
from .launch import effective_threads, launch

FORMAT = "autotune 2"  # the file's layout and the candidate set's version
TIMED_RUNS = 3  # runs of each candidate after one untimed warm-up; the fastest counts
CLEARLY_SLOWER = 1.25  # a candidate whose run takes this much of the best time is not rerun


def cpu_model() -> str:
    """The CPU as /proc/cpuinfo names it (vendor, family, model, stepping, model name):
    LLVM's CPU name alone can be the same for different parts."""
    wanted = ("vendor_id", "cpu family", "model", "stepping", "model name")
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in wanted and name not in found:
                    found[name] = value.strip()
                if not line.strip() and found:
                    break
    except OSError:
        pass
    return "|".join(found.get(k, "?") for k in wanted)


def host_key() -> str:
    """What a tuned choice is valid for: this tuner's format, the CPU model, LLVM's
    description of the host (versions, CPU name, features) and the threads kernels run
    on. Two hosts share a tuning file only if all of these are equal."""
    return "\n".join(
        [FORMAT, cpu_model(), compiler.host_description(), f"threads={effective_threads()}"]
    )


class Autotuner:
    """Times the candidate tiles of a `TuningSpace` and remembers the fastest.

    Called by `pipeline.lower.lower` as `tuner(space, lowered)`, where `lowered(tile)` is
    the kernel with that tile; `compile(kernel)` gives machine code (the CPU backend's).
    `folder` is where choices are kept (None: in memory only), `budget_s` the seconds
    this tuner may spend timing, `clock` its clock (tests pass a fake one).
    """

    def __init__(
        self,
        folder: str | None,
        budget_s: float,
        compile: Callable | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.folder = folder
        self.budget_s = budget_s
        self.compile = compile
        self.clock = clock
        self.spent = 0.0  # seconds spent timing candidates, by this tuner
        self.key = host_key() if folder is not None else ""
        self._table: dict | None = None
        # while set (`deferred`), an untuned kernel gets the fixed tile, marked `tune_later`
        self.deferring = False

    @property
    def path(self) -> str | None:
        if self.folder is None:
            return None
        digest = hashlib.sha256(self.key.encode()).hexdigest()[:24]
        return os.path.join(self.folder, "autotune", digest + ".json")

    def _choices(self) -> dict:
        """shape class -> {"tile": label, "ms": {label: best ms}}, from the file once
        (a label is `Tile.label`: "8" rows, "8x2" a grid)."""
        if self._table is None:
            self._table = {}
            path = self.path
            if path is not None:
                try:
                    with open(path) as f:
                        data = json.load(f)
                    if data.get("host") == self.key:  # never another host's choices
                        self._table = dict(data.get("choices", {}))
                except (OSError, ValueError, AttributeError):
                    pass
        return self._table

    def digest(self) -> str:
        """A hash of this host's choices: part of the key of the disk cache of lowered
        kernels, so a kernel lowered under other choices is not loaded."""
        text = json.dumps(self._choices(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def choice(self, shape_class: str) -> str | None:
        """The tile (`Tile.label`) chosen for `shape_class` on this host, or None if not
        tuned yet."""
        entry = self._choices().get(shape_class)
        return entry.get("tile") if isinstance(entry, dict) else None

    def _save(self, shape_class: str, tile: str, ms: dict) -> None:
        table = self._choices()
        table[shape_class] = {"tile": tile, "ms": ms}
        path = self.path
        if path is None:
            return
        try:  # another process may have added choices since we read the file
            with open(path) as f:
                data = json.load(f)
            if data.get("host") == self.key:
                table = {**data.get("choices", {}), **table}
        except (OSError, ValueError, AttributeError):
            pass
        self._table = table
        text = json.dumps({"host": self.key, "choices": table}, indent=1, sort_keys=True)
        try:
            write_atomic(path, text.encode())
        except OSError:
            pass  # an unusable cache folder: the choice stays in this process

    def __call__(self, space, lowered):
        """The kernel of `space` with the tile this host runs fastest (see the module)."""
        by_label = {t.label: t for t in space.candidates}
        label = self.choice(space.shape_class)
        if label in by_label:
            kernel = lowered(by_label[label])
            kernel.tile_note += f": autotuned for {space.shape_class}"
            return kernel
        if label is not None:  # tuned on a size of the class whose axes it divides
            kernel = lowered(space.default)
            kernel.tile_note += (
                f": the fixed choice ({label} rows, tuned for its class, do not fit)"
            )
            return kernel
        if self.deferring:  # kernels are being made side by side: time them later, alone
            kernel = lowered(space.default)
            kernel.tile_note += ": the fixed choice (to be autotuned)"
            kernel.tile_provisional = kernel.tune_later = True
            return kernel
        ms: dict[str, float] = {}
        best = None  # (seconds, kernel, tile)
        reference = None  # the first candidate's output
        arrays: list[np.ndarray] = []  # the kernels' arguments, shared by the candidates
        start = self.clock()
        finished = True
        for tile in space.candidates:
            if self.spent + (self.clock() - start) >= self.budget_s:
                finished = False
                break
            kernel = lowered(tile)
            if not arrays:  # random inputs, the same for every candidate
                rng = np.random.default_rng(0)
                arrays = [rng.standard_normal(p.size, dtype=np.float32) for p in kernel.params]
            for param, array in zip(kernel.params, arrays):
                if param.output:  # an output a candidate leaves unwritten shows as nan
                    array.fill(np.nan)
            try:
                beat = best[0] if best is not None else None
                seconds, output = self._time(kernel, space.work, start, arrays, beat)
            except Exception as e:
                if tile == space.default:  # it fails as it would untuned
                    raise
                warnings.warn(
                    f"autotune: kernel {kernel.name} with tile {tile.label} x {tile.cols} "
                    f"failed ({type(e).__name__}: {e}): a code generation bug, that tile is "
                    "not used",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            if reference is None:
                reference = output
            elif not np.allclose(output, reference, rtol=1e-4, atol=1e-4, equal_nan=True):
                warnings.warn(
                    f"autotune: kernel {kernel.name} with tile {tile.label} x {tile.cols} "
                    f"gave other values than with {space.default.label} x {space.default.cols} "
                    "on the same inputs: a code generation bug, that tile is not used",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            ms[tile.label] = round(seconds * 1e3, 4)
            if best is None or seconds < best[0]:
                best = (seconds, kernel, tile)
        self.spent += self.clock() - start
        if best is None:
            kernel = lowered(space.default)
            kernel.tile_note += ": the fixed choice (autotune budget spent before timing it)"
            kernel.tile_provisional = True
            return kernel
        _, kernel, tile = best
        # (the note is the same whether this process timed the tiles or read the choice,
        # so that two runs dump the same header; the times are in the tuning file)
        if finished:
            self._save(space.shape_class, tile.label, ms)
            kernel.tile_note += f": autotuned for {space.shape_class}"
        else:
            kernel.tile_provisional = True
            timed = ", ".join(f"{r} rows" for r in ms)
            kernel.tile_note += f": the best of {timed} before the autotune budget ran out"
        return kernel

    def _time(self, kernel, work: int, start: float, arrays, beat) -> tuple[float, np.ndarray]:
        """(the fastest of up to TIMED_RUNS runs, in seconds, and the output) of `kernel`
        on `arrays` (its outputs, then its inputs): at least one timed run, more while the
        budget lasts and while it could still beat `beat` (the best time so far)."""
        compiled = self.compile(kernel)
        ptrs = [a.ctypes.data for a in arrays]
        launch(compiled, kernel.parallel_extent, work, ptrs)  # warm-up: caches, pages
        best = None
        for _ in range(TIMED_RUNS):
            if best is not None and self.spent + (self.clock() - start) >= self.budget_s:
                break
            if best is not None and beat is not None and best >= CLEARLY_SLOWER * beat:
                break
            t0 = self.clock()
            launch(compiled, kernel.parallel_extent, work, ptrs)
            seconds = self.clock() - t0
            best = seconds if best is None else min(best, seconds)
        return best, arrays[0].copy()


_tuners: dict[tuple, Autotuner] = {}


@contextlib.contextmanager
def deferred(tuner: Autotuner | None):
    """Within the block `tuner` times nothing: an untuned contraction is lowered with the
    fixed tile and marked `tune_later`. The CPU backend makes a new plan's kernels in forked
    copies of the process side by side (`compiler.side_by_side`), where a candidate's time
    would be the other copies' load; it makes the marked ones again after, alone."""
    if tuner is None:
        yield
        return
    before, tuner.deferring = tuner.deferring, True
    try:
        yield
    finally:
        tuner.deferring = before


def tuner_for_config(compile: Callable | None) -> Autotuner | None:
    """The process's autotuner for the current settings (FUSEGRAD_AUTOTUNE,
    FUSEGRAD_AUTOTUNE_BUDGET, FUSEGRAD_CACHE), or None when autotuning is off;
    `compile` (the CPU backend's) is what it compiles candidates with.

    Off in an MPI process (mpi4py loaded): ranks tuning apart could choose different
    tiles, and an optimizer update fused into a weight gradient could then round a last
    bit differently on each rank, so the replicas' parameters would drift apart."""
    if not config.autotune or "mpi4py.MPI" in sys.modules:
        return None
    folder = config.cache if config.cache and compiler._usable_cache(config.cache) else None
    key = (folder, float(config.autotune_budget), effective_threads())
    if key not in _tuners:
        _tuners[key] = Autotuner(folder, float(config.autotune_budget), compile)
    tuner = _tuners[key]
    if compile is not None:
        tuner.compile = compile
    return tuner
