"""Where each node was written: a side table from nodes to the user's source line.

Nodes carry no source information (two equal nodes are one node whoever built
them, so a site cannot be part of a node). Instead this table maps a node to the
`Site` that first asked for it, weakly: an entry goes when its node does. The
frontend fills it when it wraps a node in a tensor (`note`), autodiff marks the
gradient nodes it builds with the forward op they differentiate (`Site.backward`),
and kernels report the sites of the nodes inside them.

A site is cheap to take (`capture`: the innermost frame outside the registered
library folders): a code object, a line number and the code object of the
library function the user called. Names are worked out only when printed:

>>> site = Site(compile("y = x @ w", "train.py", "exec"), 12)
>>> str(site), site.backward().role
('train.py:12', 'backward')
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
import threading
import weakref
from collections import deque

from .weaktable import sweep

_LIBRARY_DIRS: tuple[str, ...] = ()
# code object -> 0: the user's; 1: a library function whose name labels an op;
# 2: a library frame that only passes calls on (Module.__call__, contextlib, containers)
_kind: dict = {}
_PASS_THROUGH = {"__call__", "_call_impl", "__enter__", "__exit__", "helper", "inner", "wrapper"}
_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "_NoParamModule"}


def _dirs(*keys: str) -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.abspath(paths[k]) + os.sep for k in keys if paths.get(k)})


_STDLIB = _dirs("stdlib", "platstdlib")
_SITE_PACKAGES = _dirs("purelib", "platlib")  # inside the stdlib folder outside a venv


def is_stdlib(name: str) -> bool:
    """Whether a file is part of the standard library (site-packages are not)."""
    return (name.startswith(_STDLIB) and not name.startswith(_SITE_PACKAGES)) or (
        name[:7] == "<frozen"
    )


def register_library_dirs(dirs) -> None:
    """The folders whose frames are fusegrad's own, not the user's (the frontend says which)."""
    global _LIBRARY_DIRS
    _LIBRARY_DIRS = tuple(os.path.abspath(d) + os.sep for d in dirs)
    _kind.clear()
    _sites.clear()  # a site's library call depends on which frames are the library's


def library_dirs() -> tuple[str, ...]:
    return _LIBRARY_DIRS


def _kind_of(code) -> int:
    name = code.co_filename
    stdlib = is_stdlib(name)
    if not (stdlib or name.startswith(_LIBRARY_DIRS)):
        k = 0
    elif stdlib or code.co_name in _PASS_THROUGH:
        k = 2
    else:
        qual = getattr(code, "co_qualname", code.co_name)
        k = 2 if qual.rpartition(".")[0] in _CONTAINERS else 1
    _kind[code] = k
    return k


class Site:
    """A user's source line, and the library call made on it (the op's label).

    `str(site)` is `file:line`; `site.label` the user-level op (`linear`, `conv2d`,
    `cross_entropy`, `sgd update`); `site.role` is "forward", "backward" (a gradient
    of the op at that line) or "optimizer".
    """

    __slots__ = ("code", "line", "api", "_label", "role", "_backward", "_text")

    def __init__(self, code, line: int, api=None, label: str | None = None, role="forward"):
        self.code, self.line, self.api, self._label, self.role = code, line, api, label, role
        self._backward: Site | None = None
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = f"{os.path.basename(self.code.co_filename)}:{self.line}"
        return self._text

    __repr__ = __str__

    @property
    def path(self) -> str:
        """The full file name."""
        return self.code.co_filename

    @property
    def label(self) -> str:
        if self._label is None:
            self._label = _label_of(self.api) if self.api is not None else "op"
            if self.role == "backward":
                self._label += " backward"
        return self._label

    def with_label(self, label: str, role: str) -> Site:
        return Site(self.code, self.line, self.api, label, role)

    def backward(self) -> Site:
        """The site of gradients of this site's op: the same line, role "backward"."""
        if self.role == "backward":
            return self
        if self._backward is None:
            self._backward = Site(self.code, self.line, self.api, None, "backward")
            if self._label is not None:  # an explicit label (an optimizer's) carries over
                self._backward._label = self._label + " backward"
        return self._backward

    def describe(self) -> str:
        """`label (file:line)`, as kernels list their ops."""
        return f"{self.label} ({self})"


_REVERSED = {"radd", "rsub", "rmul", "rtruediv", "rfloordiv", "rmatmul", "rpow", "rmod"}
_DUNDER = {"truediv": "div", "getitem": "index", "setitem": "index_put", "neg": "neg"}


def _snake(name: str) -> str:
    """`MaxPool2d` -> `max_pool2d`; a base class's `_PoolNd` -> `pool`."""
    name = name.lstrip("_")
    name = name[:-2] if name.endswith("Nd") else name
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])", "_", name).lower()  # ReLU -> relu


def _label_of(code) -> str:
    """The user-level name of the library function `code` (`Linear.forward` -> `linear`)."""
    qual = getattr(code, "co_qualname", code.co_name)
    owner, _, name = qual.rpartition(".")
    owner = owner.rpartition(".")[2]
    if name == "forward" and owner:
        return _snake(owner)
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name in _REVERSED:
            name = name[1:]
        if name.startswith("i") and name[1:] in ("add", "sub", "mul", "truediv"):
            name = name[1:]
        return _DUNDER.get(name, name)
    return name.rstrip("_") or name


_fixed = threading.local()
_sites: dict[tuple, Site] = {}  # (code, line, library code) -> its Site


def capture(depth: int = 1, api=None) -> Site | None:
    """The site of the innermost frame outside the library, `depth` frames above the caller
    (`api`: the library function being entered there, if the walk finds no outer one).

    Inside `fixed(site)` it is that site, without walking the stack.
    """
    site = getattr(_fixed, "site", None)
    if site is not None:
        return site
    f = sys._getframe(depth + 1)
    kind = _kind
    while f is not None:
        code = f.f_code
        k = kind.get(code)
        if k is None:
            k = _kind_of(code)
        if k == 0:  # one Site per (line, call): nodes share it, its text is made once
            key = (code, f.f_lineno, api)
            site = _sites.get(key)
            if site is None:
                site = _sites[key] = Site(code, f.f_lineno, api)
            return site
        if k == 1:
            api = code
        f = f.f_back
    return None


def one_site(fn):
    """Decorator for a library op that makes many tensors (`cross_entropy`, `linear`,
    `log_softmax`): the user's line is found once, on entry, instead of once per tensor
    the op makes. The site is the same either way (the user's line, labelled by the
    outermost library call made on it)."""
    api = fn.__code__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if getattr(_fixed, "site", None) is not None:
            return fn(*args, **kwargs)
        _fixed.site = capture(1, api)
        try:
            return fn(*args, **kwargs)
        finally:
            _fixed.site = None

    return wrapper


class fixed:
    """Within this block every capture returns `site` (one stack walk for a whole
    backward() or optimizer step instead of one per node). Nested blocks keep the outer
    site."""

    __slots__ = ("site", "outer", "replace")

    def __init__(self, site: Site | None, replace: bool = False):
        self.site, self.replace = site, replace  # replace: the inner site wins

    def __enter__(self):
        self.outer = getattr(_fixed, "site", None)
        _fixed.site = (self.site or self.outer) if self.replace else (self.outer or self.site)
        return _fixed.site

    def __exit__(self, *exc):
        _fixed.site = self.outer


# ---------------------------------------------------------------- the side table

# id(node) -> (weak reference to the node, its site). The reference has no callback
# (CPython shares one such reference per object, so it is cheap); dead entries are swept
# when the table has doubled since the last sweep.
_table: dict[int, tuple[weakref.ref, Site]] = {}
_sweep_at = [4096]

# Tensors made since the table was last read: (weak reference to the node, its site), in
# order. Walking a new tensor's subgraph to note its nodes waits until something reads
# the table (a schedule naming its kernels' lines, autodiff, a recompile warning): by
# then most graphs of a training loop are dead and are never walked. The queue is noted
# in order, so the first tensor to ask for a node still gives it its site.
_pending: deque = deque()
PENDING_MAX = 4096


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


def note(node, site: Site | None) -> None:
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
    site = capture(2)
    if site is None:
        return
    _pending.append((weakref.ref(node), site))
    if len(_pending) > PENDING_MAX:
        _flush()


def note_with_sources(node, site: Site | None) -> None:
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


def _note_walk(node, site: Site) -> None:
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


def site_of(node) -> Site | None:
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


def _dead_entry(entry: tuple[weakref.ref, Site]) -> bool:
    return entry[0]() is None
