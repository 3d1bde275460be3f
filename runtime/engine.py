"""The engine: the one runtime object that computes values of IR nodes.

Everything that outlives a single call lives here, in one place:

- `values`: node -> buffer, for the nodes computed so far. Weak in the node: when
  the last reference to a node goes, so does its entry (nodes themselves never
  change after they are made).
- `plans`: compiled schedules keyed by graph structure, least recently used first,
  bounded by `config.plan_cache_size` plans and `config.kernel_cache_size` kernels in
  them (kernels: `pipeline/compiler.py`, bounded too). A
  plan holds its kernels' machine code: an evicted kernel's code is freed once no
  cached plan (and no run in progress) uses it.
- the observers of every run, called with the plan and its kernels' records
  (`FUSEGRAD_DUMP` writes kernels through one, `fusegrad.profile` collects through one).
- `recompiles`: per user line, the last structure compiled there, to say what changed.
- per-thread recording of the realizes a call makes (`fusegrad.jit`).

Realizing is one path: find the graph's structural key, compile a plan on a miss
(`compile_plan`, `pipeline/driver.py`: schedule -> lower -> render -> compile every
kernel), then `execute(plan, leaves)`.
A plan runs kernel by kernel (under `FUSEGRAD_DEBUG`, and the first, timed run where
the backend cannot time kernels inside its fast run) or as one native program per
thread (`runtime/program.py`; a CPU plan's first run too, each kernel timed by the
program's cycle counter readings). A plan names its device, and the
device's backend (`runtime/backend.py`) lowers, compiles and runs its kernels: the CPU's
(`runtime/cpu_backend.py`) or cuda's (`runtime/cuda_backend.py`). The engine never tests
a device's name.

>>> import fusegrad as fg
>>> from fusegrad.runtime.engine import engine
>>> y = fg.ones(3) * 2
>>> _ = engine.realize([y.node])
>>> engine.value(y.node).numpy().tolist()
[2.0, 2.0, 2.0]
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import hashlib
import importlib
import json
import os
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..ir import node as N
from ..ir import sites
from ..ir.node import Node
from ..ir.ops import Ops
from ..pipeline import cuda_templates, plan_store, templates
from ..pipeline.compiler import batch as compiler_batch
from ..pipeline.compiler import code_of, write_atomic

# NO_LINE, expand_for, kernel_names and lowering_steps: the frontend's debug views read
# them here
from ..pipeline.driver import (  # noqa: F401
    NO_LINE,
    cached_records,
    compile_plan,
    expand_for,
    finish_plan,
    item_record,
    kernel_names,
    lowering_steps,
)
from ..pipeline.plan import KernelRecord, Plan, Step, timed_copy
from ..pipeline.schedule import const_family, const_key, structural_key
from . import backend_registry, buffer, forksafe, phases
from .attribution import capture
from .backend import HOST, get_backend
from .buffer import Buffer
from .config import config
from .dump import dump_new_plans, kernel_header, wants_inputs
from .launch import effective_threads, prewake
from .recompile import RecompileLog
from .recompile import warn as warn_recompile

_BUFFER = Ops.BUFFER  # (a global: an enum member read through its class costs four times as much)


def _log(msg: str) -> None:
    print(f"fusegrad: {msg}", file=sys.stderr)


class _ValueRef(weakref.ref):
    """A weak reference to a computed node that knows the node's key in `Engine._values`."""

    __slots__ = ("key",)


def _forget(values: dict, ref: _ValueRef) -> None:
    """A computed node died: drop its value, unless the key is another node's by now."""
    e = values.get(ref.key)
    if e is not None and e[0] is ref:
        del values[ref.key]


class _ThreadState(threading.local):
    """A thread's engine state: `recording`, its `_Recording` while `fusegrad.jit` records
    a call there, else None (a class default: reading it costs a seventh of `getattr` with a
    default on a plain `threading.local`, and every realize reads it)."""

    recording = None


@dataclass
class _Recording:
    """A thread's realizes while `fusegrad.jit` records a call."""

    realizes: list = field(default_factory=list)  # (plan, requested nodes, leaves)
    fresh: set = field(default_factory=set)  # ids of the nodes computed during the call


class Engine:
    """Computes node values, keeps them, and caches the plans that computed them."""

    def __init__(self):
        self._values: dict[int, tuple[weakref.ref, Buffer]] = {}
        # a value's entry goes when its node dies (made once: `bind` runs every realize)
        self._forget = functools.partial(_forget, self._values)
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()
        # every plan still alive, by key: one evicted from `plans` while something holds it
        # comes back as the same plan (a jit recording compares plans by identity)
        self._held: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        # a graph's size-free key (`_size_free`) -> [its first plan, weakly; whether its
        # kernels were given to a plan of other sizes], most recent last
        self._families: OrderedDict[tuple, list] = OrderedDict()
        # values whose sizes are to vary (`mark_dynamic`), and the values plans of varying
        # sizes computed from them: node -> the dimensions marked (None: derived)
        # (a value's Buffer once it has one: a realized tensor's node becomes its buffer's)
        self._dynamic: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._marks_used = False  # whether anything was ever marked (`bind` asks)
        self._oversized: Plan | None = None  # the last plan larger than the kernel bound
        self._plans_lock = forksafe.Lock()
        self._tune_lock = forksafe.Lock()  # one thread tunes waiting plans at a time
        self.stats = {"scheduled": 0, "schedule_hits": 0, "plans_from_disk": 0}
        # called after every run with the plan and its kernels' records
        self.observers: list[Callable[[Plan, list[KernelRecord]], None]] = [dump_new_plans]
        self._local = _ThreadState()
        self.recompiles = RecompileLog()  # what changed when a user line compiles again
        # where nodes of no device (fusegrad's own constants) are computed: the frontend's
        # default device (`fusegrad.set_default_device`)
        self.default_device = HOST
        self.last_parallel = False  # whether the last CPU plan run had a parallel kernel
        self._has_value = _predicate(self._values)  # made once: every realize asks
        self.freeze_pending = False  # a big plan was compiled: `settle_collector` is due
        # graphs that differ only in constants' values (`lift_constants`): family key ->
        # [the first graph's constant values, the positions lifted to parameters]
        self._const_families: OrderedDict[tuple, list] = OrderedDict()
        # called with (todo, leaves, plan) each time `plan_for` finds or compiles a plan, by
        # `fusegrad.debug.stages` while it looks; None otherwise (an optimizer's cached step,
        # which builds no graph, is not taken while it is set: frontend/stepcache.py)
        self.plan_observer: Callable[[list[Node], list[Node], Plan], None] | None = None

    # ---------------------------------------------------------------- values
    def value(self, n: Node) -> Buffer | None:
        """The buffer holding n's value, or None if it has not been computed."""
        if n.op is _BUFFER:
            return n.arg
        e = self._values.get(id(n))
        return e[1] if e is not None else None

    def bind(self, n: Node, buf: Buffer) -> None:
        """Record `buf` as n's value (for as long as n lives)."""
        if n.op is _BUFFER:
            return
        ref = _ValueRef(n, self._forget)
        ref.key = key = id(n)
        self._values[key] = (ref, buf)
        if self._marks_used and n in self._dynamic:  # (the mark goes with the value)
            self._dynamic[buf] = self._dynamic[n]

    def has_value_predicate(self) -> Callable[[Node], bool]:
        """Whether a node is an input to kernels (its value is in memory) rather than
        something to compute. Constants are always computed inline. While a jit call is
        recorded, only values computed during the call count, so the recording holds
        every kernel a replay must run."""
        return self._predicate_for(self._local.recording)

    def _predicate_for(self, rec: _Recording | None) -> Callable[[Node], bool]:
        return self._has_value if rec is None else _predicate(rec.fresh)

    def forget_plans(self, drop: Callable[[tuple], bool]) -> None:
        """Drop the cached plans whose keys `drop` picks (those of a backend that went)."""
        with self._plans_lock:
            for key in [k for k in self.plans if drop(k)]:
                del self.plans[key]
            for key in [k for k in list(self._held.keys()) if drop(k)]:
                self._held.pop(key, None)
            if self._oversized is not None and self._oversized not in self.plans.values():
                self._oversized = None

    # ---------------------------------------------------------------- realize
    def realize(self, nodes: list[Node]) -> list[KernelRecord]:
        """Compute every node in `nodes` that has no value yet; return the kernels that ran.

        Scheduling and compiling happen once per graph *structure*: the plan is
        cached under the graph's structural key (values already in memory are its
        parameters), so the second step of a training loop only runs kernels.
        """
        if self.freeze_pending:
            self.freeze_pending = False
            settle_collector()
        rec = self._local.recording
        has_value = self._has_value if rec is None else _predicate(rec.fresh)
        if len(nodes) == 1:  # the usual case, without the dictionary
            todo = [] if has_value(nodes[0]) else list(nodes)
        else:
            todo = list({id(n): n for n in nodes if not has_value(n)}.values())
        if len(todo) != 1 or 0 in todo[0].shape:  # (the usual case has none, or is not one)
            for n in [n for n in todo if 0 in n.shape]:  # nothing to compute
                device = n.device or self.default_device
                self.bind(n, get_backend(device).alloc(0, n.dtype, device))
                todo.remove(n)
            if not todo:
                return []
        # wake sleeping workers while this thread prepares the run (runtime/pool.py): at
        # once when the last plan run was parallel (a loop runs one plan over and over),
        # else as soon as the plan says so
        woken = self.last_parallel
        if woken:
            prewake(effective_threads())
        for group in [todo] if len(todo) == 1 else self._by_device(todo):
            plan, leaves, fresh = self.plan_for(group, has_value, lift=rec is None)
            if plan.backend.uses_worker_pool:
                self.last_parallel = plan.parallel
                if plan.parallel and not woken:
                    prewake(effective_threads())
            self.run(plan, [self.value(x) for x in leaves], group, range(len(group)), timed=fresh)
            if rec is not None:
                rec.realizes.append((plan, group, leaves))
                rec.fresh.update(id(n) for n in group)
        return self.value(todo[0]).kernels

    def _by_device(self, todo: list[Node]) -> list[list[Node]]:
        """`todo` split into one list per device (a plan runs on one device)."""
        first = todo[0].device
        if len(todo) == 1 or all(n.device == first for n in todo):  # the usual case
            return [todo]
        groups: dict[str, list[Node]] = {}
        for n in todo:
            groups.setdefault(n.device or self.default_device, []).append(n)
        return list(groups.values())

    def run(self, plan: Plan, leaves: list[Buffer], nodes, targets, timed=False) -> list[Buffer]:
        """Execute `plan` on `leaves`; node `nodes[k]` takes output `targets[k]` as its value.
        Returns the plan's output buffers; the observers see the kernels' records."""
        outs, records = self.execute(plan, leaves, timed=timed)
        for out in outs:
            out.kernels = records
        buffer = _BUFFER
        for n, j in zip(nodes, targets):
            if n.op is not buffer:  # (a buffer node is its own value: a step's parameters)
                self.bind(n, outs[j])
        for observe in self.observers:
            observe(plan, records)
        return outs

    def plan_for(
        self, todo: list[Node], has_value=None, lift: bool = False, origin=None
    ) -> tuple[Plan, list[Node], bool]:
        """The plan computing `todo`, the nodes it takes as inputs, and whether it is new
        (compiled now: its first run times each kernel; not a plan read from disk).
        `lift`: a graph that differs from one planned before only in the values of some
        constants is planned with those constants as inputs (`lift_constants`); the
        inputs returned then include the buffers that hold their values (`origin`: the
        graph as built, which a recompile's explanation compares)."""
        has_value = has_value or self.has_value_predicate()
        device = todo[0].device or self.default_device
        backend = get_backend(device)
        t0 = time.perf_counter()  # (phases.timed, written out: this runs every realize)
        key, leaves = structural_key(todo, has_value)
        phases.add("key", t0, time.perf_counter())
        key = backend.plan_key(device, key)
        if config.disable_rules or config.dump_inputs:  # (a plan compiled otherwise differs)
            key = (key, config.disable_rules, config.dump_inputs)
        with self._plans_lock:
            plan = self.plans.get(key)
            if plan is None:
                # evicted, but still held (a jit recording or replay, an optimizer's cached
                # step, a run in progress): the same plan again, nothing compiled
                plan = self._held.get(key)
                if plan is not None:
                    self._store(key, plan)
            else:
                self.plans.move_to_end(key)
        if plan is not None:
            self.stats["schedule_hits"] += 1
            if config.debug >= 1:
                _log(f"schedule cache hit: {len(plan.steps)} kernel(s), nothing compiled")
            if self.plan_observer is not None:
                self.plan_observer(todo, leaves, plan)
            return plan, leaves, False
        if lift and config.lift_constants and device == HOST:
            lifted = self.lift_constants(todo, has_value, device)
            if lifted is not None:
                return self.plan_for(lifted, has_value, origin=todo)
        self.stats["scheduled"] += 1
        if config.debug >= 1 or config.recompile_warning > 0:
            said = self.recompiles.explain(key, origin or todo, has_value)
            if said is not None:
                text, count, site = said
                if config.debug >= 1:
                    _log(text)
                if self.recompiles.should_warn(count, config.recompile_warning):
                    warn_recompile(f"fusegrad: {text}", site)
        before = phases.snapshot() if config.debug >= 1 else None
        # one engine for the plan's new kernels, freed with them; no cyclic collection while
        # the plan's objects are made (they live on: see `_collector_paused`)
        family = _size_free(key)
        varying, sizes = self._varying(family, leaves)
        with compiler_batch(), _collector_paused(), templates.varying(varying, *sizes):
            # a warm start reads the plan itself from the disk cache (pipeline/plan_store.py)
            disk_key = backend.disk_plan_key(key, device)
            plan = backend.load_plan(disk_key) if disk_key is not None else None
            # (one read from disk runs as a cached plan, not timed, unless a dump wants times)
            fresh = plan is None or bool(config.dump)
            if plan is None:
                plan = compile_plan(todo, leaves, has_value, device)
                if disk_key is not None:  # (kept once its tiles are final: `tune`)
                    backend.store_plan(disk_key, plan)
            else:
                self.stats["plans_from_disk"] += 1
                # its first run reports how its kernels were loaded (the steps' records,
                # not timed), later ones "memory"
                finish_plan(plan, records=[s.record for s in plan.steps])
                plan.from_disk = plan.counting = True
                if config.debug >= 1:
                    _log(f"plan read from the disk cache: {len(plan.steps)} kernel(s)")
            backend.prepare(plan)
            if 0 < config.gc_freeze <= len(plan.steps):
                if fresh:  # (scheduling left garbage: collected at the next realize)
                    self.freeze_pending = True
                else:  # a plan read from disk made only objects that live on: now
                    settle_collector()
        plan.key = key
        self._note_family(family, plan, leaves)
        if varying is not None and self._dynamic:  # (what it computes varies as well)
            for n in todo:
                self._dynamic.setdefault(n, None)
        if before is not None:
            _log_phases(before, [s.record for s in plan.steps])
        with self._plans_lock:
            # another thread may have compiled the same structure meanwhile: keep one plan
            # per structure (`fusegrad.jit` tells two recorded calls apart by their plans)
            plan = self.plans.get(key) or self._held.get(key) or plan
            self._store(key, plan)
        if self.plan_observer is not None:
            self.plan_observer(todo, leaves, plan)
        return plan, leaves, fresh

    def lift_constants(self, todo: list[Node], has_value, device: str) -> list[Node] | None:
        """`todo` with the constants whose values vary between graphs of one family read
        from buffers, or None to plan it as it is.

        A graph is planned with its constants in the code (folded, specialised). A graph
        that differs from the first of its family (`const_family`: the same but for the
        constants' values) at some positions has the constants there replaced by 1-element
        buffers holding their values, expanded to their shapes: that graph's plan serves
        every later value, as torch.compile's automatic dynamic shapes make a size that
        changed an input. A learning rate that a hand-written update anneals, an EMA's
        decay warming up or a KL weight ramped every step compile once more, not once a
        value. Positions only ever grow, so a family compiles at most once more per
        constant. Not for a graph with steering requests on its nodes (they name them),
        nor for 16-bit float constants (`_in_code_only`), nor for a constant that is a
        root."""
        t0 = time.perf_counter()
        family, uses = const_family(todo, has_value)
        if not uses:
            return None
        fkey = (device, family)
        consts = [todo[k] if user is None else user.srcs[k] for user, k in uses]
        values = [(const_key(c.arg), c.device) for c in consts]
        with self._plans_lock:
            entry = self._const_families.get(fkey)
            if entry is None:
                self._const_families[fkey] = [values, frozenset()]
                if len(self._const_families) > CONST_FAMILIES:
                    self._const_families.popitem(last=False)
                return None
            self._const_families.move_to_end(fkey)
            base, lifted = entry
            differ = {k for k, (a, b) in enumerate(zip(base, values)) if a != b}
            if any(_in_code_only(consts[k]) for k in differ - lifted):
                return None  # (compiled for its values, as a graph of a new family)
            if not differ <= lifted:
                entry[1] = lifted = lifted | differ
                if config.debug >= 1:
                    said = ", ".join(sorted({repr(consts[k].arg) for k in differ}))
                    _log(
                        f"{len(differ)} constant(s) read from buffers from now on: their"
                        f" values changed (now {said}), so this graph's plan serves any value"
                    )
        # (a root that is a constant stays one: its value is the plan's to fill)
        lift = {(id(uses[k][0]), uses[k][1]) for k in lifted if uses[k][0] is not None}
        if not lift:
            return None
        out = _with_constants_read(todo, lift, has_value)
        phases.add("key", t0, time.perf_counter())
        return out

    def mark_dynamic(self, n: Node, dims: tuple[int, ...]) -> None:
        """Plan every graph that reads n's value as one whose sizes vary, from its first
        plan (`fusegrad.mark_dynamic`), and the values those plans compute likewise."""
        buf = self.value(n)
        key = n if buf is None else buf
        with self._plans_lock:
            self._marks_used = True
            self._dynamic[key] = tuple(sorted(set(self._dynamic.get(key) or ()) | set(dims)))

    def mark_static(self, n: Node) -> None:
        """Undo `mark_dynamic` on n (`fusegrad.mark_static`)."""
        with self._plans_lock:
            self._dynamic.pop(n, None)
            buf = self.value(n)
            if buf is not None:
                self._dynamic.pop(buf, None)

    def _varying(
        self, family: tuple, leaves: list[Node]
    ) -> tuple[list[tuple[str, int]] | None, tuple[set[int], set[int]]]:
        """None for a graph whose plans so far all had these sizes and that reads no value
        marked dynamic; else the code of the kernels of the first plan of the graph still
        alive, to compare with (none where they were given before, or for a first plan):
        a plan of the same graph with other sizes compiles its kernels through
        `pipeline/templates.py`, and a first plan of marked sizes lowers to the forms that
        serve every size, so that the second compiles nothing a size changes. Beside it,
        the sizes of this plan's inputs that differ from the first plan's and those that do
        not (`_sizes_changed`; none for a first plan)."""
        if not config.size_templates:
            return None, (set(), set())
        with self._plans_lock:
            entry = self._families.get(family)
            if entry is None:
                marked = self._marked(leaves) if self._dynamic else None
                if marked is not None and config.debug >= 1:
                    _log(
                        f"{marked}: this graph's kernels take the forms that serve every"
                        " size, and its next sizes run them as generic kernels"
                    )
                if marked is None:
                    return None, (set(), set())
                return [], self._marked_sizes(leaves)
            self._families.move_to_end(family)
            ref, given, shapes = entry
            entry[1] = True
        plan = None if given else ref()
        if not given and config.debug >= 1:
            changed = _dims_changed(shapes, leaves)
            _log(
                f"this graph was compiled before with other sizes ({changed}):"
                " kernels that differ only in their sizes now run generic kernels"
                " (FUSEGRAD_SIZE_TEMPLATES=0: not)"
            )
        sizes = _sizes_changed(shapes, leaves)
        if plan is None:
            return [], sizes
        codes = []
        for s in plan.steps:
            k = s.record.compiled
            language = getattr(k, "language", "")
            if language == "LLVM IR":
                codes.append((code_of(k.source, k.symbol, k.opt)[0], k.opt))
            elif language == "CUDA C":  # (pipeline/cuda_templates.py)
                code = cuda_templates.code_of(k.source, k.symbol)
                if code is not None:
                    codes.append((cuda_templates.shape_of(code), cuda_templates.CUDA))
        return codes, sizes

    def forget_sizes(self) -> None:
        """Forget which graphs were met at which sizes: the next plan of each compiles its
        kernels for its own sizes, as the first did."""
        with self._plans_lock:
            self._families.clear()

    def _marked_sizes(self, leaves: list[Node]) -> tuple[set[int], set[int]]:
        """`_sizes_changed` for a first plan of marked sizes: the sizes of the dimensions
        marked dynamic, and those of the other dimensions of `leaves` but the marked sizes
        (a batch's labels have its size, unmarked)."""
        marked, kept = set(), set()
        for n in leaves:
            key = n if n in self._dynamic else self.value(n)
            dims = self._dynamic.get(key) if key is not None else None
            for d, size in enumerate(n.shape):
                (marked if dims is not None and d in dims else kept).add(size)
        return marked - {0, 1}, kept - marked - {0, 1}

    def _marked(self, leaves: list[Node]) -> str | None:
        """Words for the first of `leaves` marked dynamic (or computed from one), or None."""
        for n in leaves:
            key = n if n in self._dynamic else self.value(n)
            if key in self._dynamic:
                dims = self._dynamic[key]
                if dims is None:
                    return f"{_input_words(n)} was computed from sizes that vary"
                said = ", ".join(str(d) for d in dims)
                return f"{_input_words(n)} has dim {said} marked dynamic (shape {n.shape})"
        return None

    def _note_family(self, family: tuple, plan: Plan, leaves: list[Node]) -> None:
        """Remember the first plan of each graph (by its size-free key) and its inputs'
        shapes, most recent last."""
        with self._plans_lock:
            if family not in self._families:
                shapes = [n.shape for n in leaves]
                self._families[family] = [weakref.ref(plan), False, shapes]
                while len(self._families) > FAMILIES_MAX:
                    self._families.popitem(last=False)

    def _store(self, key: tuple, plan: Plan) -> None:
        """Keep `plan` as the most recently used, then evict the least recently used others
        down to the bounds: `config.plan_cache_size` plans, `config.kernel_cache_size`
        kernels in them (what they keep loaded: pipeline/compiler.py). The plan stored is
        never evicted, nor is the last plan larger than the kernel bound on its own: it does
        not count against the bound (said once, naming FUSEGRAD_KERNEL_CACHE), so a step's
        big plan and its small ones do not evict each other on every call. Under
        `_plans_lock`."""
        self.plans[key] = plan
        self.plans.move_to_end(key)
        self._held[key] = plan
        bound = config.kernel_cache_size
        if len(plan.steps) > bound:
            self._oversized = plan
            _warn_oversized(len(plan.steps), bound)
        exempt = self._oversized
        if exempt is not None and len(exempt.steps) <= bound:  # the bound was raised
            exempt = self._oversized = None
        kernels = sum(len(p.steps) for p in self.plans.values() if p is not exempt)
        for old in list(self.plans):
            if len(self.plans) <= max(1, config.plan_cache_size) and kernels <= bound:
                break
            dropped = self.plans[old]
            if dropped is plan or (dropped is exempt and len(self.plans) <= config.plan_cache_size):
                continue
            del self.plans[old]
            if dropped is exempt:
                self._oversized = None
            else:
                kernels -= len(dropped.steps)

    # ---------------------------------------------------------------- execute
    def execute(
        self, plan: Plan, leaves: list[Buffer], timed: bool = False
    ) -> tuple[list[Buffer], list[KernelRecord]]:
        """Run `plan` on these input buffers; its outputs' buffers and the kernels' records.

        Kernel by kernel (each timed) under FUSEGRAD_DEBUG, with FUSEGRAD_PROGRAM=0, or
        when `timed` (a new plan's first run) and the backend cannot time its kernels
        inside its fast run (`Backend.run_first`) or a dump wants them; otherwise as one
        native program per thread.
        """
        if config.dump_inputs and wants_inputs(plan):
            timed = True  # kernel by kernel, each one's inputs copied for the dump
        if config.debug == 0 and not (timed and config.dump):
            run = plan.backend.run_first if timed else plan.backend.run
            done = run(plan, leaves)
            if done is not None:
                if plan.counting:
                    self._count_run(plan)
                return done
        done = self._execute_steps(plan, leaves, timed)
        if plan.counting:
            self._count_run(plan)
        return done

    def _count_run(self, plan: Plan) -> None:
        """After a run of a plan that is watched (`Plan.counting`): after the first run of
        a plan read from disk its records say "memory"; a plan with kernels left to tune is
        tuned at its `tune_at`-th run."""
        if plan.from_disk:
            plan.from_disk = False
            plan.records = cached_records(plan)
        plan.runs += 1
        if plan.tune_at and plan.runs >= plan.tune_at:
            plan.tune_at = 0
            self.tune(plan)
        plan.counting = plan.tune_at > 0

    def tune(self, plan: Plan) -> None:
        """Lower the plan's kernels that have a provisional tile again, the autotuner
        timing their candidate tiles now (runtime/autotune.py), and put the new kernels in
        their steps; the other cached plans waiting to be tuned too (a training step's
        first plan, run once, shares its shape classes with the step's later one). A plan
        whose kernels all have their tuned tiles then is kept on disk."""
        with self._tune_lock:  # (two threads at a plan's tenth run: one tunes, once)
            self._tune_waiting(plan)

    def _tune_waiting(self, plan: Plan) -> None:
        with self._plans_lock:
            waiting = [p for p in self.plans.values() if p.tune_items and p is not plan]
        plans = [p for p in [plan, *waiting] if p.tune_items]
        if not plans:
            return
        if config.debug >= 1:
            count = sum(len(p.tune_items) for p in plans)
            _log(f"autotuning {count} kernel(s) of {len(plans)} plan(s), one run {plan.runs} times")
        for p in plans:
            items, p.tune_items = p.tune_items, {}
            p.tune_at = 0
            backend = p.backend
            with compiler_batch():
                loops = [backend.lower(item) for item in items.values()]
                compiled = backend.compile_many(loops)
            for (k, item), loop, kernel in zip(items.items(), loops, compiled):
                rec, extent, work = item_record(item, loop, kernel)
                old = p.steps[k]
                p.retired.append(old.record.compiled)
                p.steps[k] = Step(rec, extent, work, old.outs, old.inputs, old.frees)
            finish_plan(p)
            backend.rebuild(p)
        for p in plans:
            if p.key is not None:
                disk_key = p.backend.disk_plan_key(p.key, p.device)
                if disk_key is not None:
                    p.backend.store_plan(disk_key, p)

    def _execute_steps(self, plan, leaves, timed):
        device, backend = plan.device, plan.backend
        leaves = backend.begin(plan, leaves)
        bufs: list = [None] * plan.slots
        records = []
        keep_inputs = timed and config.dump_inputs and wants_inputs(plan)
        for k, step in enumerate(plan.steps):
            outs = [backend.alloc(size, dtype, device) for _, size, dtype in step.outs]
            inputs = [leaves[i] if kind == "leaf" else bufs[i] for kind, i in step.inputs]
            seen = [b.numpy().copy() for b in inputs] if keep_inputs else None
            backend.first_touch(outs)
            t0 = time.perf_counter()
            took = backend.launch(step, outs, inputs, timed or config.debug >= 1)
            seconds = time.perf_counter() - t0 if took is None else took  # (a GPU's events)
            # a cached plan's record says nothing was compiled for this run
            rec = timed_copy(step.record if timed else plan.records[k], seconds, t0)
            if seen is not None:  # (the dump writes them, then drops them)
                rec.input_values = seen
            records.append(rec)
            if config.debug >= 1:
                _log(rec.summary())
                if config.debug >= 3 and timed:
                    code = (
                        ("optimized LLVM IR", rec.llvm_ir_optimized)
                        if rec.compiled.language == "LLVM IR"
                        else ("CUDA C", rec.cuda_c)
                    )
                    _log(f"\n{kernel_header(rec)}loop IR:\n{rec.loop_ir}\n{code[0]}:\n{code[1]}")
            for (g, _, _), out in zip(step.outs, outs):
                bufs[g] = out
            for f in step.frees:
                bufs[f] = None
        backend.synchronize()
        return [bufs[k] for k in plan.outputs], records

    # ---------------------------------------------------------------- recording
    def start_recording(self) -> _Recording:
        """Record this thread's realizes (see `fusegrad.jit`) until `stop_recording`."""
        if self._local.recording is not None:
            raise RuntimeError("already recording on this thread")
        rec = self._local.recording = _Recording()
        return rec

    def stop_recording(self) -> None:
        self._local.recording = None

    def recording(self) -> bool:
        return self._local.recording is not None


@contextlib.contextmanager
def _collector_paused():
    """The cyclic garbage collector off while a plan is read from disk or compiled: the
    tens of thousands of objects made then (the kernels' records and loop IR) are the
    plan's and live on, and each full collection they set off walked every object of the
    program (15-35 ms for an LSTM language model's plan of 2,284 kernels, in its first
    step). A big plan's objects are then left out of later scans (`settle_collector`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def settle_collector() -> None:
    """Collect cyclic garbage once, then leave every object alive now out of the cyclic
    collector's later scans (`gc.freeze`): done at the realize after a plan of at least
    `config.gc_freeze` kernels was compiled. Such a plan, its kernels' records and loop
    IR and the model it was compiled for are hundreds of thousands of objects that live
    on, and each full collection, which the new objects of every step of a big model set
    off about once a step, walked them all. The trade: a frozen object is still freed when
    its last reference goes, but a reference cycle among frozen objects stays until
    `gc.unfreeze()`, so the collection first clears the cycles already garbage."""
    gc.collect()
    gc.freeze()


_said_oversized: list[int] = []  # the kernel bound FUSEGRAD_KERNEL_CACHE was said to be under


def _warn_oversized(kernels: int, bound: int) -> None:
    """Say once per bound, at the user's line, that one plan has more kernels than the
    kernel cache keeps (it is kept all the same)."""
    if bound in _said_oversized:
        return
    _said_oversized.append(bound)
    message = (
        f"fusegrad: a schedule of {kernels} kernels is larger than FUSEGRAD_KERNEL_CACHE="
        f"{bound}; it is kept (the plans beside it share the bound), but raise "
        f"FUSEGRAD_KERNEL_CACHE (or fusegrad.config.kernel_cache_size) above {kernels} "
        "so that the other plans stay cached too"
    )
    site = capture()
    if site is None:
        warnings.warn(message, UserWarning, stacklevel=4)
    else:
        warnings.warn_explicit(message, UserWarning, site.path, site.line)


def _predicate(values) -> Callable[[Node], bool]:
    """`has_value` over `values` (ids of computed nodes), for `has_value_predicate`."""
    buffer, const = Ops.BUFFER, Ops.CONST

    def has_value(n: Node) -> bool:
        return n.op is buffer or (n.op is not const and id(n) in values)

    has_value.values = values  # structural_key tests ids against it inline
    return has_value


def _log_phases(before: dict[str, float], records: list[KernelRecord]) -> None:
    """One line: the compile time a new schedule cost, phase by phase."""
    spent = {k: v - before[k] for k, v in phases.seconds.items() if k not in ("autodiff", "key")}
    how = {c: sum(r.cache == c for r in records) for c in ("compiled", "disk", "memory")}
    parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in spent.items())
    _log(
        f"new schedule, {len(records)} kernel(s) ({how['compiled']} compiled, {how['disk']} "
        f"from disk, {how['memory']} in memory): {parts}"
    )


# ---------------------------------------------------------------- a warm start's memory


def _sizes_path() -> str | None:
    """Where the sizes of this program's buffers are kept: `<cache>/pool/<hash>.json`,
    by the command line that started the process (`sys.orig_argv`: the script and its
    arguments, which set its sizes); None without plans on disk."""
    if not (config.cache and config.disk_plans):
        return None
    command = "\0".join(getattr(sys, "orig_argv", sys.argv))
    name = hashlib.sha256(command.encode(errors="replace")).hexdigest()[:32]
    return os.path.join(config.cache, "pool", name + ".json")


_OWNER = os.getpid()  # (a forked child that returns from its fork saves nothing)


def _save_sizes() -> None:
    """At exit: the sizes this run had to allocate (`buffer.first_sizes`) and the plans it
    used on disk (`plans_used`), for the next run of the same command to make and read
    ahead (`_prefill`); only where it used plans on disk (a program that warm starts)."""
    path = _sizes_path()
    plans = get_backend(HOST).plans_used()
    if not plans or path is None or os.getpid() != _OWNER:
        return
    sizes, peak = buffer.first_sizes()
    said = {"sizes": sizes, "peak": peak, "plans": plans}
    try:
        write_atomic(path, json.dumps(said).encode())
    except OSError:
        pass  # (the next run faults its pages in, as before)


def _prefill() -> None:
    """Read the plans an earlier run of this command read or kept on disk, and make the
    buffers it had to allocate, their pages faulted in, before its first step asks for
    them (`CpuBackend.load_ahead`, `buffer.prefill`)."""
    try:
        with open(_sizes_path()) as f:
            said = json.load(f)
        sizes, peak, plans = said["sizes"], said["peak"], said.get("plans", [])
    except (OSError, TypeError, ValueError, KeyError):
        return  # none yet, or not what `_save_sizes` wrote: nothing made ahead
    if not (type(plans) is list and all(type(k) is str and k.isalnum() for k in plans)):
        return
    if not (type(sizes) is list and all(type(n) is int and n > 0 for n in sizes)):
        return
    if not _fusegrad_imported():
        return
    read = get_backend(HOST).load_ahead(plans)
    made = buffer.prefill(sizes, peak) if type(peak) is int else 0
    if config.debug >= 1:
        _log(
            f"{read} plan(s) read and {made / 2**20:.1f} MiB of buffers made ahead, as this"
            " command's last run used them"
        )


def _fusegrad_imported() -> bool:
    """Wait until the package's import is done (a plan read ahead unpickles classes of its
    modules; importing one here while the import thread holds another's lock could
    deadlock); False where it failed (the program has its own error to show)."""
    try:
        importlib.import_module(__name__.split(".")[0])
    except Exception:  # noqa: BLE001 (whatever the import raised, the program raises too)
        return False
    return True


def _start_prefill() -> None:
    """At import, on a thread of fusegrad's own (`buffer.prefill` faults pages in without
    the GIL, while the program builds its model); at exit, `_save_sizes`."""
    path = _sizes_path()
    if path is None:
        return
    atexit.register(_save_sizes)
    if os.path.exists(path):
        # not a daemon: the interpreter waits for it at exit rather than unloading LLVM
        # under a thread still loading a plan's kernels
        forksafe.Thread(target=_prefill, name="fusegrad-prefill").start()


engine = Engine()
plan_store.prefetch_versions()  # (the sources' hashes, read while the model is built)
_start_prefill()  # (the first step's buffers, made while the model is built)
backend_registry.plan_caches.append(engine.forget_plans)
stats = engine.stats


FAMILIES_MAX = 256  # graphs whose first plan the engine remembers (`Engine._note_family`)


CONST_FAMILIES = 512  # graph families whose constants' values are followed, most recent kept


def _in_code_only(c: Node) -> bool:
    """Whether a constant keeps its place in the code: a 16-bit float one, which a kernel
    computes with at float32 (`h * 0.1` in bfloat16 multiplies by 0.1, not by 0.1 rounded
    to bfloat16: docs/NUMERICS.md), where a buffer of its dtype would round it."""
    return c.dtype.is_float and c.dtype.itemsize < 4


# the 1-element buffers `_with_constants_read` makes: each holds one constant's value for
# good (a cached optimizer step may pass it again: frontend/stepcache.py)
LIFTED: weakref.WeakSet = weakref.WeakSet()


def _with_constants_read(todo: list[Node], lift: set[tuple[int, int]], has_value) -> list[Node]:
    """`todo` rebuilt with each constant use in `lift` (`(id(user), k)`: source k of node
    `user`) replaced by a 1-element host buffer holding its value, reshaped and expanded to
    its shape (one buffer a use); the nodes above them rebuilt, the rest shared."""
    new: dict[int, Node] = {}
    stop = Ops.BUFFER
    for n in N.toposort(todo, stop=lambda m: m.op is stop or has_value(m)):
        srcs = n.srcs
        if not srcs:
            continue
        built, changed = [], False
        for j, s in enumerate(srcs):
            if (id(n), j) in lift:
                buf = Buffer(1, s.dtype)  # (the host's: `lift_constants` lifts on it alone)
                with np.errstate(over="ignore"):  # (past the dtype's range: inf, silently)
                    buf.array[0] = s.arg
                LIFTED.add(buf)
                m = N.buffer(buf, (), s.dtype)
                if s.shape:
                    m = N.expand(N.reshape(m, (1,) * len(s.shape)), s.shape)
                built.append(m)
                changed = True
            else:
                m = new.get(id(s), s)
                built.append(m)
                changed = changed or m is not s
        if changed:
            m = new[id(n)] = N.make(n.op, tuple(built), n.arg, n.shape, n.dtype)
            sites.note(m, sites.site_of(n))  # (its kernels name the user's line, as before)
    return [new.get(id(n), n) for n in todo]


def _input_words(n: Node) -> str:
    """An input of a plan in words: "the input made at train.py:21", or "the input of
    shape (16, 37)" where no user line made it."""
    site = sites.site_of(n)
    return f"the input made at {site}" if site is not None else f"the input of shape {n.shape}"


def _dims_changed(before: list[tuple], leaves: list[Node]) -> str:
    """Which inputs' dimensions differ from the first plan's: "dim 1 of the input made at
    train.py:21 is 37, was 12", the first three."""
    said = []
    for old, n in zip(before, leaves):
        for d, (a, b) in enumerate(zip(old, n.shape)):
            if a != b:
                said.append(f"dim {d} of {_input_words(n)} is {b}, was {a}")
    more = f" and {len(said) - 3} more" if len(said) > 3 else ""
    return (
        "; ".join(said[:3]) + more
    ) or "its inputs' shapes are the same; a view's or a constant's differ"


def _sizes_changed(before: list[tuple], leaves: list[Node]) -> tuple[set[int], set[int]]:
    """The sizes of `leaves`' dimensions that differ from `before` (the first plan's
    shapes), but 0 and 1 (broadcast) and any size some other dimension has unchanged; and
    the sizes of the dimensions unchanged (a flattened batch is a product of both)."""
    changed, kept = set(), set()
    for old, n in zip(before, leaves):
        for a, b in zip(old, n.shape):
            (kept if a == b else changed).add(b)
    return changed - kept - {0, 1}, kept - {0, 1}


def _size_free(key) -> tuple:
    """A plan key with every tuple of numbers (a shape, a view's argument, a constant's
    value) replaced by its length: plans of one graph at other sizes have the same."""
    if type(key) is not tuple:
        return key
    numbers = _NUMBERS
    for v in key:
        if type(v) not in numbers:
            break
    else:
        return ("#", len(key))
    # (a walk of a plan's whole key, thousands of nodes: a call only for what is a tuple)
    return tuple([_size_free(v) if type(v) is tuple else v for v in key])


_NUMBERS = {int, float, str, bool, type}


def realize(nodes: list[Node]) -> list[KernelRecord]:
    """`engine.realize(nodes)`."""
    return engine.realize(nodes)
