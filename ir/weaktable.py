"""Tables whose values hold weak references: dropping the dead entries, safely under threads.

The sites table (ir/sites.py) maps keys to weak references without callbacks (a node's
death runs no Python code for it) and sweeps its dead entries once it has doubled since
the last sweep. (The hash-consing table, ir/node.py, drops each entry as its node dies.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def sweep(table: dict, dead: Callable[[object], bool], lock: threading.Lock) -> bool:
    """Drop the entries of `table` whose value `dead` says is dead. One thread sweeps at a
    time: one that finds `lock` taken (another thread, or a finalizer building entries
    mid-sweep) skips it and returns False. Other threads insert meanwhile.

    It walks a private copy: `dict.copy()` runs no Python code while it copies, whereas
    `list(d.items())` allocates a tuple per entry, so a garbage collection (finalizers,
    weakref callbacks: Python code, a thread switch) could run mid-walk while another
    thread inserts ("dictionary changed size during iteration").
    """
    if not lock.acquire(blocking=False):
        return False
    try:
        entries = table.copy()
        for key, value in [(k, v) for k, v in entries.items() if dead(v)]:
            if table.get(key) is value:
                now = table.pop(key, None)
                if now is not None and now is not value:  # replaced meanwhile: put it back
                    table.setdefault(key, now)
        return True
    finally:
        lock.release()
