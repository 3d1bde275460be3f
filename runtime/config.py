"""Every setting fusegrad reads from the environment, in one place.

| variable            | meaning                                                        | default |
|---------------------|----------------------------------------------------------------|---------|
| FUSEGRAD_DEBUG      | 1: a line per kernel launched; 2: + the schedule; 3: + code     | 0       |
| FUSEGRAD_DUMP       | folder to write every kernel and a manifest.json into          | unset   |
| FUSEGRAD_DUMP_INPUTS | 1: the dump also holds each kernel's input values (.npy) and  | 0       |
|                     | its graph, for `python -m fusegrad.replay`; kernels run one by |         |
|                     | one                                                            |         |
| FUSEGRAD_DISABLE_RULES | scheduling rules to schedule without, by name, comma-     | none    |
|                     | separated (`fusegrad.debug.schedule_rules()` lists them)       |         |
| FUSEGRAD_THREADS    | threads that run kernels                                       | cores   |
| FUSEGRAD_CACHE      | on-disk compile cache folder ("off" disables it)   | ~/.cache/fusegrad |
| FUSEGRAD_CACHE_LIMIT | megabytes the disk cache may hold; the entries used least | 4096 |
|                     | recently go beyond it (pipeline/cache_bound.py); 0: no bound |         |
| FUSEGRAD_COMPILE_WORKERS | processes that compile a new schedule's kernels side by | cores, |
|                     | side (forked copies of this one, or spawned helpers while | at most 8 |
|                     | a user's thread runs; 1: compile in this one)      |         |
| FUSEGRAD_PROGRAM    | 0: launch a cached schedule's kernels one by one   | 1       |
| FUSEGRAD_PLAN_CACHE | schedules (compiled plans) kept in memory, LRU     | 512     |
| FUSEGRAD_KERNEL_CACHE | compiled kernels' object files kept in memory, LRU; | 2048 |
|                     | machine code is freed once no cached plan uses it; |         |
|                     | one plan larger than it is kept (and said once)    |         |
| FUSEGRAD_SIZE_TEMPLATES | 0: a plan whose sizes vary compiles every kernel for its  | 1       |
|                     | sizes; 1: a kernel the same as one compiled before but for |         |
|                     | its sizes runs one generic kernel (pipeline/templates.py) |         |
| FUSEGRAD_LIFT_CONSTANTS | 0: a graph whose constants' values changed compiles anew  | 1       |
|                     | for each value; 1: from its second value a constant is read |         |
|                     | from a buffer (runtime/engine.py `lift_constants`)          |         |
| FUSEGRAD_RECOMPILE_WARNING | N: warn when one line has compiled N schedules (0: never) | 0 |
| FUSEGRAD_CUDA       | the `cuda` device: "pycuda" (a GPU), "emulate" (the CPU      | pycuda  |
|                     | emulator of the generated CUDA C) or "off"                     |         |
| FUSEGRAD_CUDA_GRAPHS | 0: never replay a cached plan as a CUDA graph (stream       | 1       |
|                     | capture through libcuda; plain launches instead)               |         |
| FUSEGRAD_AMX        | 0: bfloat16 matmuls never use AMX tiles, even where the CPU  | 1       |
|                     | has them (read when a graph is built and when it is lowered)   |         |
| FUSEGRAD_AUTOTUNE   | 0: a float32 contraction takes the fixed register tile for    | 1       |
|                     | the CPU; 1: the tiles are timed once per CPU and shape class, |         |
|                     | the choice kept in FUSEGRAD_CACHE (runtime/autotune.py)       |         |
| FUSEGRAD_AUTOTUNE_BUDGET | seconds a process may spend timing tiles               | 10      |

A number setting outside the values this table gives (FUSEGRAD_DEBUG=4, a sign, a word)
raises ConfigError at import, naming the variable and what it expects.
A FUSEGRAD_CACHE or FUSEGRAD_DUMP folder that cannot be used is said once (a UserWarning
naming the variable, the path and what happens instead); the run carries on.

Read or change them from Python too:

>>> import fusegrad as fg
>>> with fg.config.override(debug=2):
...     pass
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, fields

from ..pipeline.schedule import RULES
from .attribution import capture


def _default_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fusegrad")


def _usable_cpus() -> int:
    """The CPUs this process may run on (taskset, cgroups' cpusets), else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


class ConfigError(ValueError):
    """An environment variable fusegrad reads holds a value it cannot use."""


def _int_env(name: str, default: int, meaning: str, allowed=None, most=None) -> int:
    """An integer setting from the environment, or an error that names the variable: a
    plain decimal number ("+3", "1_000" and "0x10" are not), one of `allowed` where the
    setting has a few values, at most `most` where it has a bound. `FUSEGRAD_DEBUG=7`,
    read with allowed=(0, 1, 2, 3), raises "FUSEGRAD_DEBUG='7' is not valid: expected a
    level: 0, 1, 2 or 3"."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    # (int() also reads signs, underscores and other scripts' digits, and refuses more
    # than 4300 digits)
    value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 4300 else None
    if (
        value is None
        or (allowed is not None and value not in allowed)
        or (most is not None and value > most)
    ):
        raise ConfigError(f"{name}={raw!r} is not valid: expected {meaning}")
    return value


CUDA_BACKENDS = ("pycuda", "emulate", "off")


def rule_names(text: str, where: str = "FUSEGRAD_DISABLE_RULES") -> frozenset[str]:
    """The scheduling rules a comma-separated list names ("sibling_reductions,row_fusion"),
    or a ConfigError naming the unknown ones and the rules there are (pipeline/schedule.py's
    `RULES`)."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - set(RULES))
    if unknown:
        raise ConfigError(
            f"{where}={text!r} is not valid: no scheduling rule {', '.join(unknown)}; "
            f"the rules are {', '.join(RULES)}"
        )
    return names


@dataclass
class Config:
    debug: int = 0
    dump: str | None = None
    # the dump holds each kernel's input values and graph too (python -m fusegrad.replay)
    dump_inputs: bool = False
    # scheduling rules to schedule without (pipeline/schedule.py's RULES; fusegrad.debug)
    disable_rules: frozenset = frozenset()
    threads: int = 1
    cache: str | None = None
    # megabytes the disk cache may hold (pipeline/cache_bound.py); 0: no bound
    cache_limit_mb: int = 4096
    # processes that compile a new schedule's kernels side by side (pipeline/compiler.py)
    compile_workers: int = 1
    program: bool = True  # run cached schedules as one native call per thread
    # a cached plan's run reports each kernel's time (`fusegrad.profile` sets it): a CPU
    # program reads the cycle counter between its kernels; a cuda plan is launched kernel
    # by kernel, each waited for
    kernel_times: bool = False
    # new plans are kept in the disk cache and a new process reads them from there, not
    # scheduling them again (pipeline/plan_store.py)
    disk_plans: bool = True
    plan_cache_size: int = 512  # compiled schedules kept in memory (least recently used go)
    # compiled kernels' object files kept in memory; machine code is freed once no cached
    # plan uses it (pipeline/compiler.py)
    kernel_cache_size: int = 2048
    # a RecompileWarning saying what changed once one user line has compiled this many
    # schedules (0: never; FUSEGRAD_DEBUG=1 says it at every recompile anyway)
    recompile_warning: int = 0
    # a plan of a graph compiled before with other sizes runs the kernels that differ
    # from that plan's only in their sizes as generic kernels, compiled once for all
    # sizes (pipeline/templates.py)
    size_templates: bool = True
    # a new plan's kernels that are the same up to their sizes, compute no reduction and
    # are not register-tiled (a network's normalizations at each stage's sizes) compile
    # once, as one generic kernel (pipeline/compiler.py `shared_forms`)
    share_forms: bool = True
    # a graph planned before with other values of some constants reads those constants
    # from buffers, so later values reuse its plan (runtime/engine.py `lift_constants`)
    lift_constants: bool = True
    cuda: str = "pycuda"  # what backs the "cuda" device: "pycuda", "emulate" or "off"
    # fp32 contractions on the cuda device may use TF32 tensor cores (PyTorch's
    # torch.backends.cuda.matmul.allow_tf32, off by default; set through fg.backends)
    allow_tf32: bool = False
    # a cached plan's launches, once they repeat, are captured and replayed as a CUDA graph
    # where the driver allows it (runtime/cuda.py, runtime/cuda_graphs.py)
    cuda_graphs: bool = True
    # bfloat16 matmuls may run on AMX tiles where the CPU has them (runtime/amx.py)
    amx: bool = True
    # bfloat16 matmuls may run on `vdpbf16ps` register tiles where the CPU has AVX512-BF16
    # and AMX is not used (runtime/amx.py, pipeline/dpbf16.py)
    dpbf16: bool = True
    # float32 contractions' register tiles are timed once per CPU and shape class
    # (runtime/autotune.py); off: the fixed choice for the CPU (the tests' setting)
    autotune: bool = True
    autotune_budget: float = 10.0  # seconds a process may spend timing tiles
    # a new plan's untuned contractions run with the fixed tile until the plan has run this
    # many times, then are tuned and replaced (a first step times nothing); 0: tuned while
    # the plan is compiled
    autotune_after: int = 10
    # the CUDA emulator ends every device buffer where a page no access is allowed to
    # begins (1), or starts it where one ends (2): a kernel reading or writing past that
    # end stops at the access, with its name (runtime/cuda_emulator.py `guarded_array`)
    emu_guard: int = 0
    # a new plan of at least this many kernels has the cyclic garbage collector collect
    # once and then leave every object alive by then out of its later scans (`gc.freeze`,
    # runtime/engine.py's `settle_collector`: at the next realize after a compile, at once
    # after a read from disk); importing fusegrad does the same for what the import made;
    # 0: never
    gc_freeze: int = 256

    @classmethod
    def from_env(cls) -> Config:
        cache = os.environ.get("FUSEGRAD_CACHE", _default_cache())
        threads = _int_env("FUSEGRAD_THREADS", 0, "a number of threads (0: all cores)")
        program = _int_env("FUSEGRAD_PROGRAM", 1, "0 or 1", (0, 1))
        cuda = os.environ.get("FUSEGRAD_CUDA", "").strip().lower() or "pycuda"
        if cuda not in CUDA_BACKENDS:
            raise ConfigError(
                f"FUSEGRAD_CUDA={cuda!r} is not valid: expected one of {', '.join(CUDA_BACKENDS)}"
            )
        return cls(
            debug=_int_env("FUSEGRAD_DEBUG", 0, "a level: 0, 1, 2 or 3", (0, 1, 2, 3)),
            dump=os.environ.get("FUSEGRAD_DUMP") or None,
            dump_inputs=_int_env("FUSEGRAD_DUMP_INPUTS", 0, "0 or 1", (0, 1)) != 0,
            disable_rules=rule_names(os.environ.get("FUSEGRAD_DISABLE_RULES", "")),
            threads=threads if threads > 0 else _usable_cpus(),
            cache=None if cache.lower() in ("off", "0", "") else cache,
            program=program != 0,
            cache_limit_mb=_int_env(
                "FUSEGRAD_CACHE_LIMIT", 4096, "a number of megabytes (0: no bound)"
            ),
            disk_plans=_int_env("FUSEGRAD_DISK_PLANS", 1, "0 or 1", (0, 1)) != 0,
            compile_workers=_int_env(
                "FUSEGRAD_COMPILE_WORKERS", 0, "a number of processes (0: one per core, up to 8)"
            )
            or min(_usable_cpus(), 8),
            plan_cache_size=_int_env("FUSEGRAD_PLAN_CACHE", 512, "a number of schedules") or 512,
            kernel_cache_size=_int_env("FUSEGRAD_KERNEL_CACHE", 2048, "a number of kernels")
            or 2048,
            recompile_warning=_int_env(
                "FUSEGRAD_RECOMPILE_WARNING", 0, "a number of schedules (0: never warn)"
            ),
            size_templates=_int_env("FUSEGRAD_SIZE_TEMPLATES", 1, "0 or 1", (0, 1)) != 0,
            share_forms=_int_env("FUSEGRAD_SHARE_FORMS", 1, "0 or 1", (0, 1)) != 0,
            lift_constants=_int_env("FUSEGRAD_LIFT_CONSTANTS", 1, "0 or 1", (0, 1)) != 0,
            cuda=cuda,
            cuda_graphs=_int_env("FUSEGRAD_CUDA_GRAPHS", 1, "0 or 1", (0, 1)) != 0,
            amx=_int_env("FUSEGRAD_AMX", 1, "0 or 1", (0, 1)) != 0,
            dpbf16=_int_env("FUSEGRAD_DPBF16", 1, "0 or 1", (0, 1)) != 0,
            autotune=_int_env("FUSEGRAD_AUTOTUNE", 1, "0 or 1", (0, 1)) != 0,
            gc_freeze=_int_env("FUSEGRAD_GC_FREEZE", 256, "a number of kernels (0: never)"),
            autotune_budget=float(
                _int_env("FUSEGRAD_AUTOTUNE_BUDGET", 10, "seconds (at most 10**9)", most=10**9)
            ),
            autotune_after=_int_env(
                "FUSEGRAD_AUTOTUNE_AFTER", 10, "a number of runs (0: while compiling)"
            ),
            emu_guard=_int_env("FUSEGRAD_EMU_GUARD", 0, "0, 1 or 2", (0, 1, 2)),
        )

    @contextlib.contextmanager
    def override(self, **changes):
        """Temporarily change settings: `with fg.config.override(threads=1): ...`."""
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise TypeError(f"unknown setting(s) {sorted(unknown)}; settings are {sorted(names)}")
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            yield self
        finally:
            for k, v in old.items():
                setattr(self, k, v)


config = Config.from_env()

_warned_folders: set[tuple[str, str]] = set()


def warn_unusable_folder(variable: str, path: str, error: BaseException, instead: str) -> None:
    """Say once per folder, at the user's line, that the folder a setting names cannot be
    used and what fusegrad does instead (it carries on): a UserWarning such as
    "FUSEGRAD_CACHE='/x' cannot be used as a folder (NotADirectoryError: ...): compiling
    without the disk cache"."""
    if (variable, path) in _warned_folders:
        return
    _warned_folders.add((variable, path))
    import warnings

    why = f"{type(error).__name__}: {error}"
    message = f"{variable}={path!r} cannot be used as a folder ({why}): {instead}"
    site = capture()
    if site is None:
        warnings.warn(message, UserWarning, stacklevel=3)
    else:
        warnings.warn_explicit(message, UserWarning, site.path, site.line)
