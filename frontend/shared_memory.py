"""Host tensors in memory shared between processes: `Tensor.share_memory_()`, as torch's.

torch.multiprocessing's Hogwild pattern trains one model from several processes at once:
`model.share_memory()`, then processes started with the model, each running its own
optimizer over it, every update landing in the one copy all of them read:

>>> import fusegrad as fg
>>> t = fg.zeros(3).share_memory_()
>>> t.is_shared()
True

A shared tensor's values live in an anonymous shared mapping (`mmap`, MAP_SHARED), which
a forked child maps too (fusegrad.multiprocessing starts its processes by fork). Its node
reads a buffer of its process's own, its *home*, into which the shared values are copied
as every computation or host read starts (`refresh`, from `autograd.realize`,
`Tensor.item` and an optimizer step): a plan reads one consistent copy, as torch reads the
memory when its ops run. Where torch
writes an update into the memory, fusegrad computes the new value into a new buffer (a
plan's output), so it is written back: an optimizer step adds its change (the new value
less the home's, which the step read) to the shared values, so that what another process
added meanwhile stays, as torch's in-place update keeps it; any other write (`copy_`,
`add_`, `out[i] = v`: through `assign_`) stores the elements it changed. The tensor then
reads its home again. A lazy value computed from a shared tensor reads the shared values
as they are when it is computed, not when it was made.

A device tensor is left as it is (torch's CUDA tensors are shared already, through the
driver; fusegrad's are not shared between processes).
"""

from __future__ import annotations

import contextlib
import mmap
import threading
import weakref

import numpy as np

from .devices import is_host
from .errors import JitError, fail
from .ir import node as N
from .ir.ops import Ops
from .jithooks import recording
from .runtime.buffer import Buffer
from .runtime.engine import engine


class _Entry:
    """A shared tensor (weakly), its shared values and its home buffer."""

    __slots__ = ("ref", "memory", "home")

    def __init__(self, ref, memory: np.ndarray, home: Buffer):
        self.ref, self.memory, self.home = ref, memory, home


_shared: dict[int, _Entry] = {}  # id(tensor) -> its entry, while it lives


class _Stepping(threading.local):
    depth = 0  # optimizer steps under way on this thread (their writes are added after)


_stepping = _Stepping()


def share(t):
    """`t.share_memory_()`: a host tensor's values moved into shared memory (computed
    first where lazy), `t` reading them from then on; `t` itself, returned."""
    if not is_host(t.node.device) or is_shared(t):
        return t
    values = np.ascontiguousarray(t.detach().numpy()).reshape(-1)
    mapping = mmap.mmap(-1, max(values.nbytes, 1))  # (MAP_SHARED | MAP_ANONYMOUS)
    memory = np.frombuffer(memoryview(mapping), np.uint8)[: values.nbytes].view(values.dtype)
    memory[...] = values
    home = Buffer(values.size, t.dtype)
    home.array[...] = values
    key = id(t)
    ref = weakref.ref(t, lambda _, key=key: _shared.pop(key, None))
    _shared[key] = _Entry(ref, memory, home)
    t.node = N.buffer(home, t.shape, t.dtype)
    return t


def is_shared(t) -> bool:
    """Whether `t` was moved into shared memory by `share`."""
    entry = _shared.get(id(t))
    return entry is not None and entry.ref() is t


def _entry(t) -> _Entry | None:
    entry = _shared.get(id(t))
    return entry if entry is not None and entry.ref() is t else None


def refresh() -> None:
    """Copy each shared tensor's shared values into its home, where it reads its home: what
    a computation or read starting now reads (`autograd.realize`, `Tensor.item`, an
    optimizer step)."""
    for entry in list(_shared.values()):
        t = entry.ref()
        if t is not None:
            node = t.node
            if node.op is Ops.BUFFER and node.arg is entry.home:
                entry.home.array[...] = entry.memory


@contextlib.contextmanager
def optimizer_step(params):
    """Around an optimizer step over `params`: the shared ones read their shared values as
    the step starts, and afterwards each one's change is added to its shared memory
    (module docstring)."""
    stepped = []
    if _shared:
        refresh()
        for p in params:
            entry = _entry(p)
            if entry is not None:
                node = p.node
                if node.op is Ops.BUFFER and node.arg is entry.home:
                    stepped.append((p, entry, entry.home.array.copy()))
        if stepped and recording():  # (a replay runs the plan alone: no write-back)
            fail(
                JitError,
                "fusegrad.jit",
                "an optimizer step over tensors in shared memory (share_memory_) is not "
                "recorded: its replay would not add its change to the shared values; call "
                "the step without fusegrad.jit",
            )
    _stepping.depth += 1
    try:
        yield
    finally:
        _stepping.depth -= 1
    for p, entry, before in stepped:
        _write_back(p, entry, before)


def written(t) -> None:
    """After a write into `t` (`assign_`): where `t` is shared, the elements it changed
    stored in its shared memory (an optimizer step's writes are added when the step ends
    instead)."""
    if _stepping.depth:
        return
    entry = _entry(t)
    if entry is not None:
        _write_back(t, entry, None)


def _write_back(t, entry: _Entry, before) -> None:
    node = t.node
    if node.op is Ops.BUFFER and node.arg is entry.home:
        return
    if engine.value(node) is None:
        t.realize()
    values = np.asarray(t.detach().numpy()).reshape(-1)
    if before is None:  # a write: the elements it changed stored (`out[i] = v` one)
        changed = values != entry.home.array
        entry.memory[changed] = values[changed]
    else:
        entry.memory[...] += values - before
    entry.home.array[...] = entry.memory
    t.node = N.buffer(entry.home, t.shape, t.dtype)
