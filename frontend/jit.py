"""`fusegrad.jit`: record a step function's kernels once, then replay them without Python.

A training step written with lazy tensors spends its time in two places: the
kernels, and the Python that builds the graph, differentiates it and looks
its schedule up (hundreds of nodes a step). The graph is the same every step,
so after a few calls only the kernels need to run:

>>> import fusegrad as fg
>>> from fusegrad import nn, optim
>>> model = nn.Linear(3, 1)
>>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
>>> @fg.jit
... def step(x, y):
...     loss = ((model(x) - y) ** 2).mean()
...     opt.zero_grad()
...     loss.backward()
...     opt.step()
...     return loss
>>> for i in range(5):
...     loss = step(fg.ones(4, 3), fg.zeros(4, 1))   # calls 4 and 5 only run kernels
>>> step.replays
2

How it works. The first call runs eagerly (optimizer state is created then);
the second and third run eagerly too while every `realize` they make is
recorded. Comparing the two recordings tells where each kernel input comes
from: an argument of the call, a value computed earlier in the same call, a
tensor the optimizer declared as state (`track`: parameters, momentum), or a
buffer that is the same every call (frozen weights, optimizer scalars). From
then on a call binds its arguments and the state tensors' current buffers,
runs the recorded schedules as native programs, and points each state tensor
at its new value; returned tensors are fresh each call. Several jitted
functions (or eager steps) can update the same parameters in any order.

What a replay does not redo is Python: the function body does not run. So:

- Arguments are tensors (or numpy arrays, converted before the call) of the
  same shapes and dtypes as when recorded; other arguments must be equal to
  the recorded ones, of the same type (a new shape or value records again;
  1, 1.0 and True are three recordings, as are 0.0 and -0.0). Results are
  tensors, tuples or lists of tensors, or None, and carry no gradient graph
  (on every call alike): do the backward pass inside the function.
- Host work that must happen every step is redone by hooks the library
  registers while recording: optimizers recompute their scalars (learning
  rate changes, Adam's step count, SGD's first step), and random keys
  (dropout) are drawn from the generator as eager calls would. Guards catch
  what would change the graph: a dropout module switched by `eval()`, an
  optimizer option that adds or removes terms (momentum, weight decay, ...),
  `no_grad()` around the call; the call then runs eagerly and is recorded
  again. So does a changed Python value the function read (a module attribute,
  or a global, closure variable or argument, directly or through constant
  attribute and subscript reads such as `cfg.lr`, `state["scale"]`, `vals[0]`,
  `vals[i]`: see `jitguards`). A value the function's own bytecode does not
  read that way is not guarded, and replays keep the recorded one: one returned
  by a call (`cfg.get_lr()`), read through a local alias, or read by another
  function it calls (other than a module's attributes); pass such a value as an
  argument. A learning-rate scheduler stepped inside the function steps on every
  replay (a hook, as the optimizer's); `ReduceLROnPlateau.step` is refused. Your own
  Python side effects (printing, appending to lists, reading `.item()`)
  happen only on the recorded calls. Likewise a tensor the function stores
  somewhere (say `p.grad`) keeps the value of the last recorded call: return
  what you need instead.
- A value carried from one call to the next must be optimizer state, or a
  parameter the function updates in place itself (a hand-written update under
  `no_grad()` or through `.data`: `jithooks.track` makes it replay state, as an
  optimizer's); other carried values are refused when recording. Parameters (trained or frozen)
  are always read at their current value, so a jitted evaluation sees
  training elsewhere and `load_state_dict` takes effect; any other tensor the
  step only reads is read from the buffer it had when recorded: after giving
  it a new value, call `step.reset()`.
- The function must compute the same graph each call. A tensor made from
  host data inside the function (`fg.tensor(np_array)`) is a new buffer each
  call: recording fails with an error naming it; pass it as an argument.
- Recording is per thread: threads may each train their own model, jitted or
  eager, at once; one thread's optimizer hooks, tracked tensors, guards and
  random keys only enter its own recordings, and a replay reads and updates only
  the tensors its kernels use. (Random keys come from the one global generator,
  as in torch, so threads drawing at once interleave their draws.)
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import autograd, autograd_state, jithooks
from .autocast import state_key as autocast_state
from .carried import own_values_only
from .creation import from_numpy
from .errors import JitError  # (raised by the Tensor too: see host_read)
from .ir import node as N
from .ir.sites import site_of
from .jitguards import NOT_A_VALUE, read_guard, snapshot, unwrap
from .jithooks import _local
from .manualstep import flush
from .runtime import forksafe
from .runtime.buffer import Buffer
from .runtime.config import config
from .runtime.engine import engine
from .tensor import Tensor, realize

# the hooks the library calls while a function records are jithooks.py's; nn and users
# know them as fusegrad.jit's
guard, on_replay, track, recording = (
    jithooks.guard,
    jithooks.on_replay,
    jithooks.track,
    jithooks.recording,
)
host_read_refused, note_write, key_buffer = (
    jithooks.host_read_refused,
    jithooks.note_write,
    jithooks.key_buffer,
)


@dataclass
class _Recording:
    """One eager call with every realize it made, and the hooks the library registered."""

    args: list[Buffer]
    realizes: list[tuple] = field(default_factory=list)  # (plan, requested nodes, leaves)
    hooks: list[Callable[[], None]] = field(default_factory=list)
    keys: int = 0  # random keys drawn (each also a hook)
    state: list[tuple[Tensor, Buffer]] = field(default_factory=list)  # (tensor, value before)
    guards: list[Callable[[], bool]] = field(default_factory=list)
    # what this thread wrote during the call: tensors given a value in place (by id), and
    # module attributes it assigned ((id(module), name)); see note_write
    written: set = field(default_factory=set)


@dataclass
class _Replay:
    """What a replay runs: each plan with where each of its inputs comes from."""

    plans: list[tuple[object, list[tuple]]]  # (plan, [(kind, a, b) per leaf])
    state: list[Tensor]  # tensors a call reads and updates (parameters, optimizer state)
    updates: list[tuple[int, int, int]]  # (state index, realize, output): a state's new value
    results: object  # the returned structure, with _Result in place of tensors
    hooks: list[Callable[[], None]]
    guards: list[Callable[[], bool]]  # all true, or the recording no longer holds


# every nn.Parameter, trained or frozen: a replay reads each at its current value; and
# every module (see note_module). Shared by all threads (a model may be built in one and
# trained in another), so guarded by a lock: a weak collection cannot be iterated while
# another thread adds to it.
_parameters: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_modules: weakref.WeakSet = weakref.WeakSet()
_registry_lock = forksafe.Lock()


def note_parameter(t: Tensor) -> None:
    """Remember a module parameter (frozen ones too), so replays read its current value."""
    with _registry_lock:
        _parameters[id(t)] = t


def note_module(m) -> None:
    """Remember a module: a replay reads its tensor attributes (buffers such as running
    statistics, or any tensor assigned to it) at their current values and writes the new
    values a call gives them; a change of its Python-number attributes records again."""
    with _registry_lock:
        _modules.add(m)


def _live_modules() -> list:
    with _registry_lock:
        return list(_modules)


def _live_parameters() -> list[Tensor]:
    with _registry_lock:
        return list(_parameters.values())


class _Attr:
    """A module's tensor attribute as replay state: whatever tensor the module holds under
    `name` now is read, and takes the new value (the function may reassign the attribute,
    as a hand-written running mean does, or update it in place)."""

    def __init__(self, module, name: str):
        self.module, self.name = module, name

    @property
    def tensor(self) -> Tensor:
        return getattr(self.module, self.name)

    @property
    def node(self):
        return self.tensor.node

    @node.setter
    def node(self, value) -> None:
        self.tensor.node = value

    @property
    def _strides(self):
        return self.tensor._strides

    @_strides.setter
    def _strides(self, value) -> None:
        self.tensor._strides = value

    @property
    def shape(self):
        return self.tensor.shape

    @property
    def dtype(self):
        return self.tensor.dtype


def _module_tensors() -> list[tuple[_Attr, Tensor]]:
    """Every live module's tensor attributes (registered buffers and plain attributes)."""
    out = []
    for m in _live_modules():
        names = [k for k, v in vars(m).items() if isinstance(v, Tensor)]
        names += [k for k, v in m.__dict__.get("_buffers", {}).items() if isinstance(v, Tensor)]
        out.extend((_Attr(m, k), getattr(m, k)) for k in names)
    return out


_SCALARS = (int, float, bool, str, type(None))


def _python_values(fn) -> list[tuple[object, str, object]]:
    """The Python numbers (and flags, strings) a call may have baked into its graph: the
    function's closure cells and the globals it names, and every live module's attributes.
    A replay checks they are unchanged; a changed one records the function again."""
    out = []
    fn = unwrap(fn)[0]  # a bound method's or a functools.partial's function
    code = getattr(fn, "__code__", None)
    if code is not None:
        names, stack = set(), [code]
        while stack:  # the names of nested functions and comprehensions too
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
        g = getattr(fn, "__globals__", {})
        out += [(g, k, g[k]) for k in sorted(names) if k in g and isinstance(g[k], _SCALARS)]
        for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(v, _SCALARS):
                out.append((cell, name, v))
    for m in _live_modules():
        out += [(m, k, v) for k, v in vars(m).items() if isinstance(v, _SCALARS)]
    return out


def _current(holder, name):
    if isinstance(holder, dict):
        return holder.get(name, _MISSING)
    if type(holder).__name__ == "cell":
        try:
            return holder.cell_contents
        except ValueError:
            return _MISSING
    return getattr(holder, name, _MISSING)


_MISSING = object()


def _unchanged(values) -> Callable[[], bool]:
    """A guard: every (holder, name, value) of `values` still holds `value` (`_same`).

    It runs before every replay, over every live module's Python attributes (dozens), so
    the common case is checked in C: per holder whose attributes live in a dict (a
    module's `__dict__`, a function's globals), the current values of its names as one
    tuple, equal to the recorded tuple with the same types. Anything else (a NaN, a
    class-level property, a closure cell, a mismatch) takes the exact check."""
    by_holder: dict[int, tuple] = {}
    slow = []
    for h, k, v in values:
        if isinstance(h, dict) or (
            hasattr(h, "__dict__")
            and type(h).__getattribute__ is object.__getattribute__
            and not _data_descriptor(getattr(type(h), k, None))
        ):
            by_holder.setdefault(id(h), (h, [], []))
            by_holder[id(h)][1].append(k)
            by_holder[id(h)][2].append(v)
        else:
            slow.append((h, k, v))
    groups = [
        (h, isinstance(h, dict), tuple(ks), tuple(vs), tuple(map(type, vs)), (_MISSING,) * len(ks))
        for h, ks, vs in by_holder.values()
    ]

    def exact(h, names, recorded) -> bool:
        return all(_same(_current(h, k), v) for k, v in zip(names, recorded))

    def holds() -> bool:
        for h, is_dict, names, recorded, types, missing in groups:
            d = h if is_dict else h.__dict__
            now = tuple(map(d.get, names, missing))
            if now != recorded or tuple(map(type, now)) != types:
                if not exact(h, names, recorded):
                    return False
        return all(_same(_current(h, k), v) for h, k, v in slow)

    return holds


def _data_descriptor(attr) -> bool:
    """Whether a class attribute takes precedence over the instance's `__dict__`."""
    return hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")


def _same(a, b) -> bool:
    return type(a) is type(b) and (a == b or (a != a and b != b))  # NaN equals NaN here


@dataclass
class _Entry:
    calls: int = 0
    last: _Recording | None = None
    replay: _Replay | None = None
    key_slots: list[Buffer] = field(default_factory=list)


class jit:
    """Wrap a step function so that its later calls replay its kernels (see the module doc).

    `step.replays` counts the calls that were replayed, `step.reset()` forgets
    the recordings (say, after adding parameters to the optimizer).
    """

    def __init__(self, fn: Callable):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.replays = 0
        self._entries: dict[tuple, _Entry] = {}

    def reset(self) -> None:
        self._entries.clear()

    def __call__(self, *args):
        flush()  # hand-written updates left deferred before the call are computed outside it
        args, tensors, signature = _prepare(args)
        entry = self._entries.setdefault(signature, _Entry())
        broken = entry.replay and next((h for h in entry.replay.guards if not h()), None)
        if broken:
            if config.debug >= 1:  # (a read that changes every call never lets it replay)
                what = getattr(broken, "changed", None) or "what the recording assumed"
                print(
                    f"fusegrad: jit records {self.__qualname__} again: {what} changed",
                    file=sys.stderr,
                )
            entry.calls, entry.last, entry.replay = 1, None, None  # record again from the next call
        if entry.replay is not None:
            self.replays += 1
            if config.debug >= 1:
                kernels = sum(len(plan.steps) for plan, _ in entry.replay.plans)
                print(
                    f"fusegrad: jit replay of {self.__qualname__}: {kernels} kernel(s), no Python",
                    file=sys.stderr,
                )
            return _run_replay(entry.replay, [engine.value(t.node) for t in tensors])
        entry.calls += 1
        if entry.calls == 1:  # the first call creates state (optimizer buffers): not recorded
            return _results(self.fn(*args), Tensor.detach)
        out, recording = self._record(entry, args, tensors)
        if entry.last is not None:
            entry.replay = _plan_replay(self.fn, entry.last, recording, out)
        entry.last = recording
        return _results(out, Tensor.detach)

    def _record(self, entry: _Entry, args, tensors):
        if engine.recording():
            raise JitError("fusegrad.jit: a jitted function cannot call another while recording")
        recording = _Recording([engine.value(t.node) for t in tensors])
        attrs = _module_tensors()
        before = {(id(a.module), a.name): t.node for a, t in attrs}  # (an in-place write
        # changes the node of the same tensor: taken now, not after the call)
        recording.state.extend((a, engine.value(t.node)) for a, t in attrs if t._has_value())
        shapes = [(a, t.shape, t.dtype) for a, t in attrs]
        recording.guards.append(
            lambda: all(
                isinstance(a.tensor, Tensor) and a.shape == s and a.dtype == d for a, s, d in shapes
            )
        )
        recording.guards.append(_unchanged(_python_values(self.fn)))
        recording.guards.append(read_guard(self.fn, args))
        captured = engine.start_recording()
        recording.realizes = captured.realizes
        _local.recording, _local.entry = recording, entry
        try:
            with own_values_only():
                out = self.fn(*args)
            pending = []
            fresh = engine.has_value_predicate()
            _results(out, lambda t: not fresh(t.node) and pending.append(t))
            # module attributes the call gave new values (running statistics): computed in
            # the call, so that a replay computes them too and the module sees them
            written = recording.written
            for a, t in _module_tensors():
                key = (id(a.module), a.name)
                changed = before.get(key) is not t.node and not fresh(t.node)
                if changed and (key in written or id(t) in written):
                    pending.append(t)
            if pending:
                realize(*pending)
        finally:
            engine.stop_recording()
            _local.recording = _local.entry = None
        return out, recording


def _prepare(args) -> tuple[list, list[Tensor], tuple]:
    """The arguments to call with (numpy arrays become tensors), the tensor arguments
    (realized), and the signature the call's recording is kept under."""
    signature = [("grad mode", autograd_state.enabled()), ("autocast", autocast_state())]
    call_args, tensors = [], []
    for a in args:
        if isinstance(a, np.ndarray):  # converted here, outside the function: an argument
            a = from_numpy(a)
        call_args.append(a)
        if isinstance(a, Tensor):
            if engine.value(a.node) is None:
                realize(a)
            tensors.append(a)
            signature.append(("tensor", a.shape, a.dtype.name, a.requires_grad))
        else:
            try:
                hash(a)
            except TypeError:
                raise JitError(
                    f"fusegrad.jit: argument of type {type(a).__name__} is neither a tensor "
                    "nor hashable (non-tensor arguments are part of what a recording is for)"
                ) from None
            # a Python value by its type and bits too: 1, 1.0 and True are equal keys, and
            # 0.0 and -0.0, but `x * 1` and `x * 1.0` may differ in dtype
            value = snapshot(a)
            signature.append(("value", a if value is NOT_A_VALUE else value))
    return call_args, tensors, tuple(signature)


def _results(out, f, leaf=None):
    """`out` (None, a tensor, or a tuple or list of them) with `f` applied to each tensor.

    Replays rebuild the same structure around `_Result`s (`leaf`; None: Tensor). Results
    are values without a gradient graph on every call, eager or replayed (`f` = detach).
    """
    leaf = Tensor if leaf is None else leaf
    if out is None:
        return None
    if isinstance(out, leaf):
        return f(out)
    if isinstance(out, (tuple, list)) and all(isinstance(t, leaf) for t in out):
        return type(out)(f(t) for t in out)
    raise JitError(
        "fusegrad.jit: a jitted function returns a tensor, a tuple or list of tensors, or "
        f"None; got {type(out).__name__} (a Python number would not change on replay)"
    )


def _plan_replay(fn, a: _Recording, b: _Recording, out) -> _Replay:
    """Compare two recorded calls and say where each kernel input comes from."""
    name = getattr(fn, "__qualname__", "the function")
    if [p for p, _, _ in a.realizes] != [p for p, _, _ in b.realizes]:
        raise JitError(
            f"fusegrad.jit: {name} computed different graphs on two calls "
            f"({len(a.realizes)} and {len(b.realizes)} realizes): it cannot be replayed"
        )
    produced = _outputs(b)
    b_args = {id(buf): i for i, buf in enumerate(b.args)}
    # tensors whose current value a replay reads: the state the optimizer declared, and every
    # parameter (a function that only reads the weights, like an evaluation, must see them
    # change when something else trains them)
    state = list({id(t): t for t, _ in b.state}.values())
    index = {id(t): k for k, t in enumerate(state)}
    before = {id(buf): index[id(t)] for t, buf in b.state}
    for t in autograd._live_leaves() + _live_parameters():
        buf = engine.value(t.node)
        if buf is not None and id(buf) not in before:
            before[id(buf)] = len(state)
            state.append(t)
    plans = []
    for (plan, _, leaves_a), (_, _, leaves_b) in zip(a.realizes, b.realizes):
        sources = []
        for la, lb in zip(leaves_a, leaves_b):
            buf = engine.value(lb)
            if id(buf) in b_args:
                sources.append(("arg", b_args[id(buf)], 0))
            elif id(buf) in produced:
                sources.append(("now",) + produced[id(buf)])
            elif id(buf) in before:
                sources.append(("state", before[id(buf)], 0))
            elif buf is engine.value(la):
                sources.append(("fixed", buf, 0))
            else:
                raise JitError(
                    f"fusegrad.jit: {name} reads a {lb.dtype.name} tensor of shape {lb.shape} "
                    f"(made at {site_of(lb) or 'an unknown place'}) that is a new buffer every "
                    "call; if it is an input, pass it as an argument (a value carried from "
                    "call to call other than an optimizer's cannot be replayed)"
                )
        plans.append((plan, sources))
    updates = [
        (k, *produced[id(engine.value(t.node))])
        for k, t in enumerate(state)
        if id(engine.value(t.node)) in produced
    ]
    results = _sources_of(out, produced, b_args, name)
    # keep only the state the replay reads or updates: the candidates are every live
    # parameter and module tensor, other threads' included, and a replay must not touch
    # (or realize) tensors of a model it does not use
    read = {k for _, sources in plans for kind, k, _ in sources if kind == "state"}
    used = sorted(read | {k for k, _, _ in updates})
    new_index = {k: i for i, k in enumerate(used)}
    plans = [
        (plan, [(kind, new_index[a], c) if kind == "state" else (kind, a, c) for kind, a, c in src])
        for plan, src in plans
    ]
    updates = [(new_index[k], r, j) for k, r, j in updates]
    state = [state[k] for k in used]
    return _Replay(plans, state, updates, results, b.hooks, b.guards)


def _outputs(rec: _Recording) -> dict[int, tuple[int, int]]:
    return {
        id(engine.value(n)): (r, j)
        for r, (_, todo, _) in enumerate(rec.realizes)
        for j, n in enumerate(todo)
    }


@dataclass(frozen=True)
class _Result:
    """A returned tensor: output `index` of realize `r` ("now"), or argument `r` ("arg")."""

    kind: str
    r: int
    index: int
    shape: tuple
    dtype: object


def _sources_of(out, produced, args, name):
    def one(t: Tensor) -> _Result:
        buf = engine.value(t.node)
        if id(buf) in produced:
            return _Result("now", *produced[id(buf)], t.shape, t.dtype)
        if id(buf) in args:
            return _Result("arg", args[id(buf)], 0, t.shape, t.dtype)
        raise JitError(
            f"fusegrad.jit: {name} returns a tensor it did not compute (shape {t.shape}); "
            "return only the step's results"
        )

    return _results(out, one)


def _run_replay(replay: _Replay, args: list[Buffer]):
    for hook in replay.hooks:
        hook()
    value = engine.value
    current = [value(t.node) for t in replay.state]
    if None in current:  # a parameter given a lazy value outside the step: compute it first
        realize(*[getattr(t, "tensor", t) for t, v in zip(replay.state, current) if v is None])
        current = [value(t.node) for t in replay.state]
    outs: list[list[Buffer]] = []
    for plan, sources in replay.plans:
        # each leaf: an argument, an output of an earlier plan of this call ("now"), a
        # state tensor's current value, or a buffer fixed at recording (_plan_replay)
        leaves = [
            args[a]
            if kind == "arg"
            else outs[a][b]
            if kind == "now"
            else current[a]
            if kind == "state"
            else a
            for kind, a, b in sources
        ]
        bufs, records = engine.execute(plan, leaves)
        for b in bufs:
            b.kernels = records
        for observe in engine.observers:  # dumps, fusegrad.profile
            observe(plan, records)
        outs.append(bufs)
    buffer, state = N.buffer, replay.state
    for k, r, j in replay.updates:  # parameters and optimizer state take their new values
        t = state[k]
        old = t.node
        t.node, t._strides = buffer(outs[r][j], old.shape, old.dtype), None

    def result(s: _Result) -> Tensor:
        buf = args[s.r] if s.kind == "arg" else outs[s.r][s.index]
        return Tensor(N.buffer(buf, s.shape, s.dtype))

    return _results(replay.results, result, leaf=_Result)
