"""Where each node was written: a side table from nodes to the site (the user's source
line) that first asked for it.

Nodes carry no source information (two equal nodes are one node whoever built
them, so a site cannot be part of a node). Instead this table maps a node to the
site that first asked for it, weakly: an entry goes when its node does. The
frontend fills it when it wraps a node in a tensor (`note_new`), autodiff marks the
gradient nodes it builds with the forward op they differentiate (`site.backward()`),
and kernels report the sites of the nodes inside them.

What a site is, and how the user's line is found, are not IR: runtime/attribution.py
(`Site`, `capture`) installs `hooks.capture`, which `note_new` calls. Here a site is
any value with a `backward()` method.

>>> from fusegrad.ir import node as N
>>> from fusegrad.ir.dtypes import float32
>>> x = N.const(12345.5, (3, 5, 7), float32)  # (a node no other code made: nodes are shared)
>>> note(x, "a site"); site_of(x)
'a site'
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Protocol

from .hooks import hooks
from .weaktable import sweep


class Site(Protocol):
    """What ir needs of a site (runtime/attribution.py's `Site` is one)."""

    def backward(self) -> Site:
        """The site of the gradients of this site's op."""
        ...


# the site of every op built inside a `fixed(site)` block, per thread (None: find it)
class _Ambient(threading.local):
    site = None  # (a class default: a thread that never set it reads None, no exception)


ambient = _Ambient()


class fixed:
    """Within this block every capture returns `site` (one stack walk for a whole
    backward() or optimizer step instead of one per node). Nested blocks keep the outer
    site."""

    __slots__ = ("site", "outer", "replace")

    def __init__(self, site, replace: bool = False):
        self.site, self.replace = site, replace  # replace: the inner site wins

    def __enter__(self):
        self.outer = ambient.site
        ambient.site = (self.site or self.outer) if self.replace else (self.outer or self.site)
        return ambient.site

    def __exit__(self, *exc):
        ambient.site = self.outer


# ---------------------------------------------------------------- the side table

# id(node) -> (weak reference to the node, its site). The reference has no callback
# (CPython shares one such reference per object, so it is cheap); dead entries are swept
# when the table has doubled since the last sweep.
_table: dict[int, tuple[weakref.ref, object]] = {}
_sweep_at = [4096]

# Tensors made since the table was last read: (weak reference to the node, its site), in
# order. Walking a new tensor's subgraph to note its nodes waits until something reads
# the table (a schedule naming its kernels' lines, autodiff, a recompile warning): by
# then most graphs of a training loop are dead and are never walked. The queue is noted
# in order, so the first tensor to ask for a node still gives it its site.
#
# A training step whose schedule is cached reads nothing, so its tensors' entries would
# wait for thousands more; the queue drops its dead entries once it has doubled since it
# was last compacted (`_compact`, from PENDING_COMPACT entries up). Entries that lingered
# were promoted to the garbage collector's oldest generation, and its full collections
# (a walk of every object of the program) came every hundred steps of a small model.
_pending: deque = deque()
PENDING_MAX = 4096
PENDING_COMPACT = 256
_compact_at = [PENDING_COMPACT]


def _flush() -> None:
    """Note the queued tensors' subgraphs (those still alive), oldest first."""
    pop = _pending.popleft
    while _pending:
        try:
            ref, site = pop()
        except IndexError:  # another thread took the last one
            return
        n = ref()
        if n is not None:
            _note_walk(n, site)


def note(node, site) -> None:
    """Record `site` as where `node` was written, unless the node has a site already."""
    if site is None:
        return
    if _pending:
        _flush()
    e = _table.get(id(node))
    if e is not None and e[0]() is node:
        return
    _table[id(node)] = (weakref.ref(node), site)
    if len(_table) > _sweep_at[0]:
        _sweep()


def note_new(node) -> None:
    """If `node` has no site yet, queue the caller's user line for it and for the sources
    under it that have none (`note_with_sources`, when the table is next read); one
    table lookup when it has one."""
    e = _table.get(id(node))
    if e is not None and e[0]() is node:
        return
    site = hooks.capture(2)
    if site is None:
        return
    _pending.append((weakref.ref(node), site))
    if len(_pending) > _compact_at[0]:
        _compact()


def _compact() -> None:
    """Drop the queue's dead entries, keeping the live ones in order; note them all once
    more than PENDING_MAX are alive. (Entries other threads queue meanwhile may land
    before some of the kept ones: their order is arbitrary anyway.)"""
    pop, push = _pending.popleft, _pending.append
    for _ in range(len(_pending)):
        try:
            entry = pop()
        except IndexError:  # another thread is compacting or flushing too
            break
        if entry[0]() is not None:
            push(entry)
    if len(_pending) > PENDING_MAX:
        _flush()
    # (next when the live ones have doubled, and never past PENDING_MAX: a queue of live
    # entries one longer than that is noted at once, whatever it held before)
    _compact_at[0] = min(max(PENDING_COMPACT, 2 * len(_pending)), PENDING_MAX)


def note_with_sources(node, site) -> None:
    """Record `site` for `node` and for the sources under it that have none yet.

    An op built straight from nodes (a binary operator's casts and broadcasts, matmul's
    multiply and sum) wraps only its result in a tensor; the nodes under it are the same
    user line's work. The walk stops at noted nodes, so each node is visited once.
    """
    if site is None:
        return
    if _pending:
        _flush()
    _note_walk(node, site)


def _note_walk(node, site) -> None:
    stack = [node]
    while stack:
        n = stack.pop()
        e = _table.get(id(n))
        if e is not None and e[0]() is n:
            continue
        _table[id(n)] = (weakref.ref(n), site)
        stack.extend(n.srcs)
    if len(_table) > _sweep_at[0]:
        _sweep()


def noted(node) -> bool:
    if _pending:
        _flush()
    e = _table.get(id(node))
    return e is not None and e[0]() is node


def site_of(node) -> object | None:
    """Where `node` was first written, or None (a node no user line made)."""
    if _pending:
        _flush()
    e = _table.get(id(node))
    return e[1] if e is not None and e[0]() is node else None


_sweeping = threading.Lock()


def _sweep() -> None:
    """Drop dead entries (`weaktable.sweep`: one thread at a time, on a private copy)."""
    if sweep(_table, _dead_entry, _sweeping):
        _sweep_at[0] = max(4096, 2 * len(_table))


def _dead_entry(entry: tuple[weakref.ref, object]) -> bool:
    return entry[0]() is None
