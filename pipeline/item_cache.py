"""The disk cache of scheduled kernels: a schedule item -> its loop IR and LLVM IR.

A warm start (a new process, a filled `FUSEGRAD_CACHE`) would otherwise lower and
render every kernel again only to find its object file on disk under a hash of the
rendered text. This cache keys each kernel by the schedule item itself, so a warm start
skips lowering and rendering: it reads the item's loop IR (pickled) and LLVM source, and
the object file is then found in the object cache (`pipeline/compiler.py`) as before.

The key (`item_key`) is a hash of everything the code depends on:

- the item described node by node (`describe`): each node's op, argument, shape and
  dtype and which nodes it reads, the inputs' shapes and dtypes in parameter order, the
  root, the extra outputs, the outputs stored at the reduction's source coordinates
  (`at_source`), the reduction and the order of the item's node list (the
  kernel's name and its row-statistics test read it);
- the code that lowers and renders it: a hash of every source file of `pipeline/` (the
  compiler and this module among them) and `ir/`, and of the CPU backend
  (`runtime/cpu_backend.py`) (`code_version`), so an edited lowering never loads an entry
  made by the old one;
- the host: llvmlite's and LLVM's versions, the CPU and its features
  (`compiler.host_description`: the register tile and vector widths depend on them);
- `FORMAT`, this file's entry layout.

An item with anything the description cannot spell exactly (an argument that is not
None, a bool, an int, a float, a string or a tuple of those; a buffer that is not one
of the item's inputs) gets no key and is lowered as before. An entry ends with a checksum
of its key and its bytes (as the object files do), so a damaged, truncated or renamed
file is a miss, never a wrong kernel.

>>> len(code_version())  # the code generator's version, a sha256
64
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle

from ..ir import ops as ir_ops
from ..ir.ops import Ops
from . import compiler
from . import lower as lowering
from .compiler import _read_cached, _seal, entry_path, write_atomic

FORMAT = "item-cache 1"
_PLAIN = (type(None), bool, int, float, str)


class _Unspellable(Exception):
    """An item the description cannot spell exactly: it gets no key."""


def _spell(value) -> str:
    """`repr` of a plain argument (exact: floats round-trip, -0.0 and nan included)."""
    if isinstance(value, tuple):
        return "(" + ",".join(_spell(v) for v in value) + ")"
    if type(value) not in _PLAIN:
        raise _Unspellable(type(value).__name__)
    return repr(value)


def describe(item) -> str | None:
    """A text that two schedule items share only if they lower to the same kernel; None
    where an argument or a buffer cannot be spelled exactly.

    Inputs are numbered as the kernel's parameters (`in0`, `in1`, ...), the nodes
    computed inside in the order met (`n0`, `n1`, ...)."""
    root = item.root
    inputs = {id(n): i for i, n in enumerate(item.inputs) if n is not root}
    number: dict[int, int] = {}
    lines = [f"in{i} {n.shape} {n.dtype!r}" for i, n in enumerate(item.inputs)]

    def ref(n) -> str:
        return f"in{inputs[id(n)]}" if id(n) in inputs else f"n{number[id(n)]}"

    def visit(start) -> None:
        stack = [start]
        while stack:
            n = stack[-1]
            if id(n) in number or id(n) in inputs:
                stack.pop()
                continue
            waiting = [s for s in n.srcs if id(s) not in number and id(s) not in inputs]
            if waiting:
                stack.extend(reversed(waiting))
                continue
            stack.pop()
            if n.op is Ops.BUFFER:  # a buffer read inside but not a parameter
                raise _Unspellable("buffer")
            srcs = " ".join(ref(s) for s in n.srcs)
            number[id(n)] = len(number)
            lines.append(f"{n.op.name} {_spell(n.arg)} {n.shape} {n.dtype!r} <- {srcs}")

    try:
        extra = [root, *item.extra, *item.at_source]
        extra += [item.reduce] if item.reduce is not None else []
        for n in [*item.nodes, *extra]:
            visit(n)
    except _Unspellable:
        return None
    lines.append("nodes " + " ".join(ref(n) for n in item.nodes))
    lines.append("root " + ref(root))
    lines.append("extra " + " ".join(ref(n) for n in item.extra))
    lines.append("at_source " + " ".join(ref(n) for n in item.at_source))
    lines.append("reduce " + (ref(item.reduce) if item.reduce is not None else "-"))
    return "\n".join(lines)


@functools.cache
def code_version() -> str:
    """A hash of the source of everything that turns a schedule item into LLVM IR."""
    files = []
    for folder in _source_folders():
        files += [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".py")]
    # the CPU backend, read from the runtime's folder beside this one (never imported here)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files.append(os.path.join(root, "runtime", "cpu_backend.py"))
    h = hashlib.sha256()
    for path in files:
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def _source_folders() -> list[str]:
    """The folders of `pipeline/` and `ir/`: every file in them is in the code version."""
    return [os.path.dirname(os.path.abspath(m.__file__)) for m in (lowering, ir_ops)]


def item_key(item, options: str = "") -> str | None:
    """The cache key of a schedule item's CPU kernel, or None if it has none (`describe`).

    Items that differ in anything their kernel's code depends on get different keys;
    so do the same items under another version of the code generator or another CPU,
    and under other lowering `options` (the backend's words to `lower` besides the item,
    such as whether AMX tiles may be used)."""
    return key_of(describe(item), options)


def key_of(text: str | None, options: str = "") -> str | None:
    """`item_key` of an item whose description (`describe`) is `text`."""
    if text is None:
        return None
    parts = [FORMAT, code_version(), compiler.host_description(), options, text]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def load(key: str):
    """(loop IR, LLVM source) cached under `key`, or None (missing, damaged, another's)."""
    path = _entry_path(key)
    data = _read_cached(path, key) if path else None
    if data is None:
        return None
    try:
        loop, source = pickle.loads(data)
    except Exception:  # a file that passed its checksum but not unpickling: a miss
        return None
    return loop, source


def store(key: str, loop, source: str) -> None:
    """Save a lowered, rendered kernel under `key` (a read-only folder only costs speed)."""
    path = _entry_path(key)
    if not path:
        return
    data = pickle.dumps((loop, source), protocol=pickle.HIGHEST_PROTOCOL)
    try:
        write_atomic(path, data + _seal(key, data))
    except OSError:
        pass  # compiler.compile_kernels has said so for the object files


def _entry_path(key: str) -> str | None:
    return entry_path("items", key)
