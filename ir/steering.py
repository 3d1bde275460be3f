"""A user's requests to the scheduler about single values: cut here, or fuse this.

A side table from nodes to requests, weak in the node (as `ir/sites.py`'s): an entry goes
when its node does. The frontend fills it (`fusegrad.debug.cut`, `fuse`, `no_fusion`);
the scheduler (`pipeline/schedule.py`) reads it, and `structural_key` folds the requests of a
graph's nodes into the graph's key, so a plan cached before a request is not reused
after it. Nodes are shared (hash-consing): a request on `x * 2` holds for every `x * 2`
built from the same `x`.

- `CUT`: store the value in a kernel of its own; its readers load it.
- `FUSE`: compute the value inside the kernels that read it instead of storing it, where
  the scheduler can (an elementwise value it would store for reuse, rule 4); the
  schedule says why where it cannot.

>>> from fusegrad.ir import node as N
>>> from fusegrad.ir.dtypes import float32
>>> c = N.const(4321.5, (3,), float32)
>>> x = N.add(c, c)
>>> request(x, CUT, "here.py:3"); request_of(x)
('cut', 'here.py:3')
"""

from __future__ import annotations

import threading
import weakref

CUT = "cut"
FUSE = "fuse"

# id(node) -> (weak reference to the node, kind, where it was asked: the user's line)
_table: dict[int, tuple[weakref.ref, str, object]] = {}
_lock = threading.Lock()


def request(node, kind: str, where) -> None:
    """Ask the scheduler to `kind` (CUT or FUSE) `node`; `where` names the user's line.
    A later request on the same node replaces an earlier one."""
    assert kind in (CUT, FUSE), kind
    with _lock:
        if len(_table) > 64:  # (requests are few: drop the dead ones as they come)
            for k in [k for k, e in _table.items() if e[0]() is None]:
                del _table[k]
        _table[id(node)] = (weakref.ref(node), kind, where)


def request_of(node) -> tuple[str, object] | None:
    """(kind, where) of the request on `node`, or None."""
    e = _table.get(id(node))
    if e is None or e[0]() is not node:
        return None
    return e[1], e[2]


def any_requests() -> bool:
    """Whether any request may be alive (the scheduler's and the key's fast test)."""
    return bool(_table)


def requests_in(index: dict[int, int]) -> tuple:
    """The requests on the nodes of `index` (node id -> position in a structural key), as
    ((position, kind), ...) in position order: what `structural_key` adds to a key."""
    with _lock:
        entries = list(_table.items())
    found = []
    for k, (ref, kind, _) in entries:
        position = index.get(k)
        if position is not None and ref() is not None:
            found.append((position, kind))
    return tuple(sorted(found))
