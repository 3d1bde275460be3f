"""What the library calls while a jitted function records (`jit.py` is the recorder).

A `fusegrad.jit` call records every realize its eager run makes; code the
recording must know about tells it here: a tensor's value read on the host
(refused), a tensor or module attribute written, a hook a replay must rerun
(an optimizer's scalars), a guard, the tensors a step updates in place, the
buffer of a random key. Each is a no-op when this thread records nothing.
Creation, `Tensor` and nn call these, below the recorder, which converts its
numpy arguments with creation's `from_numpy`: `jit.py` re-exports them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .errors import JitError, user_site
from .ir.dtypes import int32
from .runtime.backend import HOST, get_backend
from .runtime.engine import engine

if TYPE_CHECKING:
    from .runtime.buffer import Buffer


class _Local(threading.local):
    """What a thread is recording: `.recording` (its _Recording) and `.entry` (the jit entry
    whose call it is), both None when it records nothing. Per thread, as the engine's
    recording is: another thread's eager step (its optimizer hooks, tracked tensors,
    guards, random keys) must not land in this thread's recording."""

    recording = None
    entry = None


_local = _Local()


def _recording_now():
    """This thread's recording (jit.py's `_Recording`, above this module), or None."""
    return _local.recording


def host_read_refused(what: str) -> None:
    """Raise if a jitted function is being recorded: its Python reads a tensor's value
    (`.item()`, `bool()`, ...), which a replay would not redo, so a branch on it would be
    frozen at the recorded value."""
    if _recording_now() is not None:
        raise JitError(
            f"fusegrad.jit: {what} reads a tensor's value inside a jitted function at "
            f"{user_site()}; a replay does not run the function's Python, so anything "
            "decided from the value would be frozen at the recorded one. Return the tensor "
            "and read it after the call, or use fusegrad.where for a data-dependent choice"
        )


def note_write(target, name: str | None = None) -> None:
    """While this thread records: tensor `target` was given a new value in place, or (with
    `name`) module `target` had its attribute `name` assigned. The call's module attributes
    that change are computed in the call (so replays compute them too) when this thread
    changed them: another thread's model, updated meanwhile, is none of the call's business.
    """
    rec = _recording_now()
    if rec is not None:
        rec.written.add(id(target) if name is None else (id(target), name))


def recording() -> bool:
    """Whether this thread is recording a jitted function now (the hooks below then listen)."""
    return _recording_now() is not None


def on_replay(hook: Callable[[], None]) -> None:
    """Have `hook()` run before every replay of the function being recorded (if any).

    For host-side work a step must redo each call, like an optimizer writing its
    step's scalars: register it each time the work is done, and a replay does it
    as many times, in the same order.
    """
    rec = _recording_now()
    if rec is not None:
        rec.hooks.append(hook)


def guard(holds: Callable[[], bool]) -> None:
    """While recording: `holds()` must stay true for a replay to be valid (say, a dropout
    module still in training mode). When one is false, the call runs eagerly and the
    function is recorded again."""
    rec = _recording_now()
    if rec is not None:
        rec.guards.append(holds)


def track(tensors) -> None:
    """Declare tensors a step reads and then updates in place (an optimizer's parameters and
    state), while a call is recorded. A replay reads each one's value when it runs and
    points the tensor at its new value, so parameters stay right across several
    jitted functions (one per batch shape, say) and eager steps mixed in any order.
    Call it before the update is built."""
    rec = _recording_now()
    if rec is None:
        return
    for t in tensors:
        buf = engine.value(t.node)
        if buf is not None:
            rec.state.append((t, buf))


def key_buffer(draw: Callable[[], int], device: str = HOST) -> Buffer | None:
    """While recording: the buffer (on `device`) for the call's next random key, the same
    every call.

    `draw()` gives a key from the generator; a replay draws the call's keys again,
    in order, into the same buffers, so its random numbers are those eager calls get.
    """
    entry, rec = _local.entry, _recording_now()
    if entry is None:
        return None
    k = rec.keys
    rec.keys += 1
    slots = entry.key_slots
    if k == len(slots):
        slots.append(None)
    if slots[k] is None or slots[k].device != device:
        slots[k] = get_backend(device).from_host(np.zeros(1, np.int32), int32, device)
    slot = slots[k]

    def refill():
        slot.write_scalar(draw())

    refill()
    rec.hooks.append(refill)
    return slot
