"""The plain training loop at replay speed: optimizer steps cached by graph structure.

`opt.zero_grad(); loss = f(model(x), y); loss.backward(); opt.step()` builds the
same graphs every step. The forward graph must be built (it is the user's code),
but the backward graph and the update are functions of the forward graph's
structure and the optimizer's options alone. So `backward()` only notes which
leaves get a gradient (`autograd.PendingGrads`), and `step()` looks the step up:

    key = (optimizer options, the forward graph's structural key,
           where each parameter sits among the forward graph's inputs, ...)

- **Miss**: the gradients and the update are built as graphs and realized in one
  plan, as always; the plan is kept with, for each of its inputs, where a later
  step finds it (an input of the forward graph, an optimizer state tensor, one
  of the step's scalars, or a shared read-only index table such as the `arange`
  that max_pool's gradient compares with), and for each output, which tensor takes it.
- **Hit**: nothing is built. The step binds this step's buffers to the plan's
  inputs, runs it (one native program), and gives the parameters, the optimizer's
  state and the loss their new buffers.

Gradients accumulated over several backward() calls before the step (micro-batches, a
GAN's discriminator on the real and the fake batch) are sums of their unbuilt
gradients (`LazyGrad._terms`): the key then holds every call's forward graph and, per
parameter, which calls' gradients it sums, in order.

A hit computes exactly what the miss would: the plan is the one the miss compiled
for the same structure, on this step's buffers. Anything that does not fit the
pattern (a gradient read or changed before the step, an input that is none of the
four kinds) takes the miss path, so it is never wrong, only slower.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from .autograd import graph_consumed, realize
from .carried import with_carried
from .ir import node as N
from .ir.ops import MOVEMENT, Ops
from .pipeline.schedule import structural_key
from .runtime import phases
from .runtime.config import config
from .runtime.engine import LIFTED, Plan, engine

CACHE_SIZE = 32  # step structures kept per optimizer (batch shapes, train/eval variants)


@dataclass
class _Entry:
    plan: Plan
    # per plan input: ("fwd" | "state" | "scalar", index), or ("table", buffer) for a
    # read-only index table the backward built (`arange` in max_pool's gradient)
    sources: list[tuple[str, object]]
    targets: list[int]  # per requested tensor: the plan output that holds its new value
    nstates: int  # the optimizer state tensors the step updates (part of the key)

    def __post_init__(self):
        # `sources` regrouped for a hit, once: the inputs list with the tables in place
        # (a hit fills in a copy), and (input position, index) for the forward graph's
        # leaves and for the step's tensors (states, then scalars, in one list)
        self.template: list = [None] * len(self.sources)
        self.fwd: list[tuple[int, int]] = []
        self.tensors: list[tuple[int, int]] = []
        for k, (kind, i) in enumerate(self.sources):
            if kind == "table":
                self.template[k] = i
            elif kind == "fwd":
                self.fwd.append((k, i))
            else:
                self.tensors.append((k, i if kind == "state" else self.nstates + i))


_UNCACHEABLE = object()


def _live_clip_results(grads: list) -> list:
    """The results (`LazyNorm`) of deferred clips of these gradients' backward() call that
    are still alive (`tensor.clip_when_built`)."""
    for g in grads:
        pending = getattr(g, "pending", None)  # (a gradient backward() has not built)
        if pending is not None:
            results = (clip.result() for clip in pending.clips if clip.result is not None)
            return [t for t in results if t is not None]
    return []


class StepCache:
    """One optimizer's cached steps (see the module docstring)."""

    def __init__(self):
        self.entries: OrderedDict = OrderedDict()
        self.hits = 0

    def step(self, opt_key, params, states, scalars, pending, extra, build) -> None:
        """Update `params` (and their optimizer `states`) and compute `pending` / `extra`.

        `build()` builds the update as lazy graph (assigning each parameter and state
        tensor its new value) for a miss; `scalars` are the step's 0-d input tensors.
        """
        grads = [p.grad for p in params]
        # a deferred clip's result still alive: computed with the step, which builds the
        # gradients for it, as the eager clip's lazy result
        extra = [*extra, *_live_clip_results(grads)]
        extra = with_carried(params[0] if params else None, pending, extra)
        first = grads[0] if grads else None
        lazy = params[0]._lazy_grad if params else None  # (tensor.LazyGrad)
        record = first.pending if type(first) is lazy and not first.built else None
        terms = None
        usable = (
            record is not None
            and not engine.recording()
            and engine.plan_observer is None  # (fg.debug.stages sees the step's graph)
            and all(
                type(g) is lazy
                and g.pending is record
                and not g.built
                and g.base is None  # (`zeros + g`: built, as the plan does not add them)
                and record.targets[g.index] is p.node
                for g, p in zip(grads, params)
            )
            and all(t.node is record.root for t in pending)
        )
        if not usable and record is not None:  # accumulated over several backward() calls?
            terms = _accumulated(grads, params, pending, lazy)
            usable = (
                terms is not None
                and not engine.recording()
                and engine.plan_observer is None
                and not any(r.clips for r in terms[0])  # (a clip of one call's: built)
            )
        if not usable:
            _realize_all(build(), pending, extra)
            return
        records = [record] if terms is None else terms[0]
        self.run(records, terms, opt_key, params, states, scalars, pending, extra, build)

    def run(self, records, terms, opt_key, params, states, scalars, pending, extra, build):
        """`step` once it is known that every parameter's gradient is `records`' (one
        backward() call's, or the sum of several: `terms`), unbuilt, and that the pending
        losses are their roots: the cached plan, or a miss."""
        has_value = engine.has_value_predicate()
        read = [r.root for r in records if has_value(r.root)]
        if read:
            # the loss was read (`loss.item()`) before the step: the step computes it again
            # with the backward, from the forward graph still behind it, rather than take
            # it as an input and lose every activation the backward needs
            computed, read_ids = has_value, {id(n) for n in read}

            def has_value(n, computed=computed, read_ids=read_ids):
                return id(n) not in read_ids and computed(n)

        roots = [n for r in records for n in (r.root, r.root_grad)]
        if extra:
            roots += [e.node for e in extra]
        t0 = time.perf_counter()  # (phases.timed, written out: this runs every step)
        fkey, fleaves = structural_key(roots, has_value)
        phases.add("key", t0, time.perf_counter())
        where = {id(n): i for i, n in enumerate(fleaves)}
        at = where.get
        positions = tuple([at(id(p.node)) for p in params])
        if None in positions:
            _realize_all(build(), pending, extra)
            return
        flat_states = [t for s in states for t in s]
        flat_scalars = [t for h in scalars for t in h]
        key = (
            opt_key,
            fkey,
            positions,
            tuple(map(len, states)),
            tuple(map(len, scalars)),
            len(pending),
            config.disable_rules,  # (a step recorded under other rules ran other plans)
            None if terms is None else terms[1],
            tuple(clip.key for r in records for clip in r.clips),  # (the plan clips so)
        )
        entry = self.entries.get(key)
        if entry is None:
            entry = self._record(
                params, flat_states, flat_scalars, pending, extra, build, where, has_value
            )
            self.entries[key] = entry
            while len(self.entries) > CACHE_SIZE:
                self.entries.popitem(last=False)
            return
        if len(self.entries) > 1:  # (one structure, the usual loop: no second hash of the key)
            self.entries.move_to_end(key)
        if entry is _UNCACHEABLE:
            _realize_all(build(), pending, extra)
            return
        self.hits += 1
        engine.stats["schedule_hits"] += 1
        inputs = entry.template[:]
        value, buffer = engine.value, Ops.BUFFER
        for k, i in entry.fwd:
            node = fleaves[i]
            inputs[k] = node.arg if node.op is buffer else value(node)
        tensors = flat_states + flat_scalars
        for k, i in entry.tensors:
            node = tensors[i].node  # (realized: a buffer node, unless a user assigned one)
            inputs[k] = node.arg if node.op is buffer else value(node)
        requested = [*params, *flat_states, *pending, *extra]
        outs = engine.run(entry.plan, inputs, [t.node for t in requested], entry.targets)
        _take_values(requested, outs, entry.targets, len(params) + len(flat_states))

    def _record(self, params, flat_states, flat_scalars, pending, extra, build, where, has_value):
        """A miss: build and realize the step, and work out where a hit finds each input
        (`has_value`: the values the step takes as inputs, as its key was made with)."""
        state_at = {id(t.node): i for i, t in enumerate(flat_states)}
        scalar_at = {id(t.node): i for i, t in enumerate(flat_scalars)}
        build()
        requested = [*params, *flat_states, *pending, *extra]
        nodes = [t.node for t in requested]
        todo = list({id(n): n for n in nodes}.values())
        if any(has_value(n) or n.numel == 0 for n in todo):
            _realize_all([*params, *flat_states], pending, extra)
            return _UNCACHEABLE
        plan, leaves, fresh = engine.plan_for(todo, has_value, lift=not engine.recording())
        sources = []
        for leaf in leaves:
            k = id(leaf)
            if k in where:
                sources.append(("fwd", where[k]))
            elif k in state_at:
                sources.append(("state", state_at[k]))
            elif k in scalar_at:
                sources.append(("scalar", scalar_at[k]))
            elif (
                _is_table(engine.value(leaf))
                or engine.value(leaf) in LIFTED
                or _constant_expression(leaf)
            ):
                # the backward of the same structure asks for the same table (its size is a
                # shape of the graph), and shared tables are one buffer per size: keep it.
                # So with a constant the engine lifted into a buffer (`lift_constants`: the
                # same graph was planned before with another value there, by another
                # optimizer, say), and with a constant's expansion that has a value because
                # the same node was computed before, elsewhere (nodes are shared): the key
                # fixes the constants the step would build, and values do not change
                sources.append(("table", engine.value(leaf)))
            else:
                sources = None
                break
        position = {id(n): j for j, n in enumerate(todo)}
        targets = [position[id(n)] for n in nodes]
        outs = engine.run(plan, [engine.value(x) for x in leaves], nodes, targets, timed=fresh)
        _take_values(requested, outs, targets, len(params) + len(flat_states))
        if sources is None:
            return _UNCACHEABLE
        return _Entry(plan, sources, targets, len(flat_states))


def _accumulated(grads, params, pending, lazy) -> tuple[list, tuple] | None:
    """For gradients each the sum of several backward() calls' (`LazyGrad._terms`), all
    unbuilt and each term `p`'s own, with the pending losses among their roots: the
    backward calls in the order first met, and per parameter the (call, index) of each
    of its terms, for the key. None where the step does not fit."""
    records: list = []
    at: dict[int, int] = {}
    layout = []
    for g, p in zip(grads, params):
        terms = g._terms() if type(g) is lazy else None
        if terms is None:
            return None
        row = []
        for record, index in terms:
            if record.targets[index] is not p.node:
                return None
            k = at.get(id(record))
            if k is None:
                k = at[id(record)] = len(records)
                records.append(record)
            row.append((k, index))
        layout.append(tuple(row))
    roots = {id(r.root) for r in records}
    if not all(id(t.node) in roots for t in pending):
        return None
    return records, tuple(layout)


_CONSTANT_MOVES = frozenset(MOVEMENT | {Ops.CAST})


def _constant_expression(node) -> bool:
    """Whether `node` is a constant, moved or cast: its value is the node's own."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.op is Ops.CONST:
            continue
        if n.op not in _CONSTANT_MOVES:
            return False
        stack.extend(n.srcs)
    return True


def _is_table(buf) -> bool:
    """A shared read-only table from `creation._shared` (arange): never written, never freed."""
    array = getattr(buf, "array", None)
    return array is not None and not array.flags.writeable


def _take_values(requested, outs, targets, updated: int) -> None:
    """Point the first `updated` tensors (parameters, optimizer state) at their new buffers,
    and the others (losses, requested outputs) too where their graph is no longer needed,
    as `fusegrad.realize` does."""
    buffer = N.buffer
    for k, (t, j) in enumerate(zip(requested, targets)):
        if k < updated or t._is_leaf or not t.requires_grad or graph_consumed(t):
            node = t.node
            t.node, t._strides = buffer(outs[j], node.shape, node.dtype), None


def _realize_all(outputs, pending, extra) -> None:
    if outputs or pending or extra:
        realize(*outputs, *pending, *extra)
