"""The disk cache of whole plans: a graph's structural key -> its compiled schedule.

A warm start (a new process, a filled `FUSEGRAD_CACHE`) finds every kernel's object file
on disk, and every kernel's loop IR in the cache of scheduled kernels
(`pipeline/item_cache.py`), but it would still expand the graph's macros, schedule it and
describe each of its kernels again: for a 2-layer LSTM language model's step (2,400
kernels) that is most of a two-second first step. This cache keeps the plan itself,
under the key the engine's plan cache already uses in memory, so a warm first step
reads one file, loads its kernels' object files and runs.

The key (`plan_key`) is a hash of:

- the graph's structural key (`pipeline/schedule.py`, `structural_key`) spelled exactly
  (`_spelled`: marshalled, in C, after ops, dtypes and types are replaced by bytes naming
  them, or where it holds other values, as pickle writes it, `_KeyPickler`; a big model's
  key has tens of thousands of elements): ops, shapes, dtypes by name, devices, and
  arguments that are None, bools, ints, floats (their bits: -0.0 and each nan's payload
  too), strings, bytes, types or containers of those, and the steering requests on its
  nodes (`ir/steering.py`). A graph whose key holds anything else (a function, an array)
  gets no key: it is compiled as before;
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
import io
import marshal
import os
import pickle
from dataclasses import fields

from ..ir.dtypes import DType, float32
from ..ir.ops import Ops
from ..runtime import forksafe
from ..runtime.config import config
from . import compiler, item_cache, templates
from .compiler import _read_cached, _seal, entry_path, write_atomic
from .plan import KernelRecord, Plan, Step

FORMAT = "plan-cache 5"
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


_BY_NAME = float32.__reduce__()[0]  # the function a dtype is unpickled by, from its name


class _KeyPickler(pickle.Pickler):
    """A structural key pickled, refusing anything but plain values, containers of them,
    ops, dtypes and types (`reducer_override` sees every other object), without the memo
    (`fast`), so that equal keys pickle alike however their parts are shared. Pickling is
    exact: two keys pickle alike only if they are equal."""

    def reducer_override(self, obj):
        kind = type(obj)
        if kind is Ops or kind is DType or kind is type or obj is _BY_NAME or obj is Ops:
            return NotImplemented  # pickled by name or value
        raise _Unspellable(kind.__name__)


_SPELLING = {}  # an op, dtype or type -> the bytes `_spelled` writes for it (filled as met)
_PLAIN = frozenset({int, float, str, bool, type(None)})


def _spelling_of(v) -> bytes:
    """The bytes standing for an op, a dtype or a type in `_spelled`'s values."""
    kind = type(v)
    if kind is Ops:
        said = b"op:" + v.name.encode()
    elif kind is DType:
        said = b"dtype:" + v.name.encode()
    elif kind is type:
        said = b"type:" + f"{v.__module__}.{v.__qualname__}".encode()
    else:
        raise _Unspellable(kind.__name__)
    _SPELLING[v] = said
    return said


def _plain(key: tuple) -> tuple:
    """`key` with each op, dtype and type replaced by its bytes (`_spelling_of`); raises
    `_Unspellable` at anything but those, tuples and plain values (bytes included: the
    key's own would read as a spelling)."""
    out = []
    spelling, plain = _SPELLING, _PLAIN
    for v in key:
        kind = type(v)
        if kind in plain:
            out.append(v)
        elif kind is tuple:
            out.append(_plain(v))
        else:
            said = spelling.get(v) if kind is Ops or kind is DType or kind is type else None
            out.append(said if said is not None else _spelling_of(v))
    return tuple(out)


def _spelled(key: tuple) -> bytes:
    """`key` as bytes, exactly: two keys are spelled alike only if they are equal. A key of
    plain values, tuples, ops, dtypes and types (what `structural_key` makes) is marshalled
    after `_plain` (format 2: no references, so sharing cannot change the bytes; a quarter
    of pickling's time, where `_KeyPickler` calls back into Python at every op and dtype);
    any other through `_pickled`. A byte in front tells the two apart."""
    try:
        return b"m" + marshal.dumps(_plain(key), 2)
    except _Unspellable:
        return b"p" + _pickled(key)


def _pickled(key: tuple) -> bytes:
    """`key` as `_KeyPickler` writes it (raises `_Unspellable`)."""
    out = io.BytesIO()
    pickler = _KeyPickler(out, protocol=5)
    pickler.fast = True  # no memo: an object met twice is written twice, as an equal one is
    try:
        pickler.dump(key)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise _Unspellable(str(e)) from None
    return out.getvalue()


_prefetch = None  # the thread `prefetch_versions` started, while it may run


def prefetch_versions() -> None:
    """Hash the package's and the code generator's sources (`package_version`,
    `item_cache.code_version`: about 150 files, 8-10 ms) on a thread of fusegrad's own,
    started at import, while the program builds its model, so that a warm first step
    finds its plan on disk without reading them first. Only where plans are kept on disk;
    `plan_key` waits for it (a thread that has ended: not at all)."""
    global _prefetch
    if config.cache and config.disk_plans and _prefetch is None:
        _prefetch = forksafe.Thread(target=_versions, name="fusegrad-versions", daemon=True)
        _prefetch.start()


def _versions() -> None:
    package_version()
    item_cache.code_version()


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
    if _prefetch is not None:
        _prefetch.join()  # (hashing what `package_version` reads: not twice)
    version = package_version()
    if not version:
        return None
    try:
        spelled = _spelled(key)
    except _Unspellable:
        return None
    parts = [FORMAT, version, item_cache.code_version(), compiler.host_description(), options]
    parts += [_settings(), device]
    h = hashlib.sha256("\n".join(parts).encode())
    h.update(spelled)
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
