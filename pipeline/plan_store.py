"""The disk cache of whole plans: a graph's structural key -> its compiled schedule.

A warm start (a new process, a filled `FUSEGRAD_CACHE`) finds every kernel's object file
on disk, and every kernel's loop IR in the cache of scheduled kernels
(`pipeline/item_cache.py`), but it would still expand the graph's macros, schedule it and
describe each of its kernels again: for a 2-layer LSTM language model's step (2,400
kernels) that is most of a two-second first step. This cache keeps the plan itself,
under the key the engine's plan cache already uses in memory, so a warm first step
reads one file, loads its kernels' object files and runs.

The key (`plan_key`) is a hash of:

- the graph's structural key (`pipeline/schedule.py`, `structural_key`) spelled exactly: ops
  by name, shapes, dtypes by name, devices, and arguments that are None, bools, ints,
  floats (by `repr`: -0.0 and nan included), strings or tuples of those, and the
  steering requests on its nodes (`ir/steering.py`). A graph whose key holds anything
  else gets no key: it is compiled as before;
- the code: every source file of the package (frontend, ir, pipeline, runtime, nn: macro
  expansions are registered by the frontend and nn), so an edited fusegrad never loads a
  plan made by the old one;
- the host (`compiler.host_description`), the backend's lowering and scheduling
  options, and the settings that can change a plan (`config`, less those that only
  report or bound caches). Not the autotuner's choices: a plan is kept only once every
  kernel has its final tile (tuned, or the fixed choice where nothing is tuned), so its
  kernels stay right and as fast whatever other shape classes are tuned later;
- `FORMAT`, this file's entry layout.

An entry ends with a checksum of its key and bytes (as the object files do): a damaged,
truncated or foreign file is a miss, never a wrong plan. Plans with a kernel whose tile
the autotuner left provisional are not stored (a later run tunes it).

>>> len(package_version())  # the source's version, a sha256
64
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
from dataclasses import fields

from ..ir.dtypes import DType
from ..ir.ops import Ops
from ..runtime.config import config
from . import compiler, item_cache, templates
from .compiler import _read_cached, _seal, entry_path, write_atomic
from .plan import KernelRecord, Plan, Step

FORMAT = "plan-cache 3"
_PLAIN = frozenset((type(None), bool, int, float, str))
# settings that report, bound a cache or say where it is: they never change a plan
_NOT_IN_KEY = frozenset(
    {
        "debug",
        "dump",
        "cache",
        "compile_workers",
        "plan_cache_size",
        "kernel_cache_size",
        "recompile_warning",
        "gc_freeze",
        "autotune_budget",
        "autotune_after",
        "disk_plans",
    }
)
# a record's fields that describe one run or one compile, not the plan
_PER_RUN = frozenset(
    {"loop", "compiled", "seconds", "started", "cache", "compile_seconds", "graph", "input_values"}
)


class _Unspellable(Exception):
    """A structural key holding something this cache cannot spell exactly."""


def _spell(value, out: list[str]) -> None:
    """Append an exact spelling of one element of a structural key: a word for each plain
    value, op, dtype and type, and a tuple's words between "(" and ")", except that a
    tuple of ints only (a shape, the positions of a node's sources: most of a key) is one
    word, its `repr`. The loop spells a tuple's plain elements inline: a big model's key
    has tens of thousands (this runs at every warm plan lookup)."""
    kind = type(value)
    if kind is not tuple:
        out.append(_word(value, kind))
        return
    if all(type(v) is int for v in value):
        out.append(repr(value))
        return
    out.append("(")
    for v in value:
        kind = type(v)
        if kind in _PLAIN:
            out.append(repr(v))
        elif kind is tuple:
            _spell(v, out)
        else:
            out.append(_word(v, kind))
    out.append(")")


def _word(value, kind: type) -> str:
    if kind in _PLAIN:
        return repr(value)
    if kind is Ops:
        return "op:" + value.name
    if kind is DType:
        return "dt:" + value.name
    if kind is type:  # a constant's type (`const_key`)
        return "ty:" + value.__name__
    raise _Unspellable(kind.__name__)


@functools.cache
def package_version() -> str:
    """A hash of every source file of the package: what scheduling, macro expansion,
    lowering and rendering depend on."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    h = hashlib.sha256()
    for folder in ("frontend", "ir", "pipeline", "runtime", "nn"):
        path = os.path.join(root, folder)
        if not os.path.isdir(path):  # an installed package names its folders otherwise
            return ""
        for name in sorted(os.listdir(path)):
            if name.endswith(".py"):
                with open(os.path.join(path, name), "rb") as f:
                    h.update(f"{folder}/{name}".encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def _settings() -> str:
    return repr(
        sorted(
            (f.name, repr(getattr(config, f.name)))
            for f in fields(config)
            if f.name not in _NOT_IN_KEY
        )
    )


def plan_key(key: tuple, device: str, options: str) -> str | None:
    """The disk key of the plan cached in memory under `key` on `device`, or None where it
    has none (see the module's docstring). `options`: the backend's words to lowering and
    scheduling besides the graph."""
    if not (config.cache and config.disk_plans) or config.dump_inputs:
        return None
    version = package_version()
    if not version:
        return None
    out: list[str] = []
    try:
        _spell(key, out)
    except _Unspellable:
        return None
    parts = [FORMAT, version, item_cache.code_version(), compiler.host_description(), options]
    parts += [_settings(), device]
    h = hashlib.sha256("\n".join(parts).encode())
    h.update(" ".join(out).encode())
    return h.hexdigest()


def store(disk_key: str, plan: Plan) -> None:
    """Save `plan` under `disk_key` (a read-only folder only costs speed)."""
    path = _entry_path(disk_key)
    if path is None or any(s.record.loop.tile_provisional for s in plan.steps):
        return
    kernels: dict[int, int] = {}  # id(loop) -> its index in `loops`
    loops: list = []
    steps = []
    records: dict[bytes, dict] = {}
    for s in plan.steps:
        loop = s.record.loop
        if id(loop) not in kernels:
            kernels[id(loop)] = len(loops)
            k = s.record.compiled
            # (a kernel that ran through a generic kernel: that kernel's code and which of
            # its literals it read, with their values, so a load parses nothing)
            through = (k.generic, k.groups, k.literals, k.lits) if k.generic else None
            loops.append((loop, k.source, k.opt, through))
        record = {f.name: getattr(s.record, f.name) for f in fields(KernelRecord)}
        for name in _PER_RUN:
            record.pop(name)
        steps.append((kernels[id(loop)], record, s.extent, s.work, s.outs, s.inputs, s.frees))
    entry = (loops, steps, plan.outputs, plan.slots, plan.nleaves, plan.device)
    entry += (plan.scratch_layout,)  # (the backend's, where it made one: not made again)
    try:
        # one object for equal records, pickled once: a recurrence's thousands of steps
        # have a few dozen different records (an LSTM language model's 2,284: 129)
        for i, (k, record, *rest) in enumerate(steps):
            shared = records.setdefault(pickle.dumps(record, pickle.HIGHEST_PROTOCOL), record)
            steps[i] = (k, shared, *rest)
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
        write_atomic(path, data + _seal(disk_key, data))
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass  # not kept: the next process compiles it again


def load(disk_key: str, nparams) -> Plan | None:
    """The plan saved under `disk_key`, its kernels loaded (from the object cache, or
    compiled again where an object file has gone), or None (missing, damaged, foreign).
    `nparams(loop, source)`: the compile job's parameter count for a kernel."""
    path = _entry_path(disk_key)
    data = _read_cached(path, disk_key) if path else None
    if data is None:
        return None
    try:
        loops, steps, outputs, slots, nleaves, device, layout = pickle.loads(data)
    except Exception:  # passed its checksum but not unpickling: a miss
        return None
    jobs = [(source, loop.name, nparams(loop, source), opt) for loop, source, opt, _ in loops]
    # each kernel as it ran: its own code, or through the generic kernel it ran through
    through = {i: at for i, (*_, at) in enumerate(loops) if at is not None}
    plain = [i for i in range(len(jobs)) if i not in through]
    compiled: list = [None] * len(jobs)
    if plain:
        for i, kernel in zip(plain, compiler.compile_kernels([jobs[i] for i in plain])):
            compiled[i] = kernel
    if through:
        kernels = compiler.run_through_generics([jobs[i] for i in through], list(through.values()))
        for (i, (_, groups, _, _)), kernel in zip(through.items(), kernels):
            compiled[i] = kernel
            source, symbol, _, opt = jobs[i]  # (a later plan of other sizes may share it)
            templates.registry.adopt_later(compiler.code_of(source, symbol, opt)[0], opt, groups)
    plan_steps, seen = [], set()
    for k, record, extent, work, outs, inputs, frees in steps:
        kernel = compiled[k]
        again = k in seen  # a kernel the plan runs twice was loaded once, for the first
        seen.add(k)
        rec = KernelRecord(
            **record,
            loop=loops[k][0],
            compiled=kernel,
            seconds=None,
            compile_seconds=0.0 if again else kernel.compile_seconds,
            cache="memory" if again else kernel.cache,
        )
        plan_steps.append(Step(rec, extent, work, outs, inputs, frees))
    return Plan(plan_steps, outputs, slots, nleaves, device, scratch_layout=layout)


def _entry_path(key: str) -> str | None:
    return entry_path("plans", key)
