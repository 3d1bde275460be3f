"""`progress`: the examples' progress bar, which keeps redirected logs clean.

A tqdm bar redraws itself with carriage returns; in a file or a pipe
(`python examples/lenet_mnist.py > train.log 2>&1`) every redraw is kept, and
the log fills with thousands of half-lines. So the bar is shown only when its
stream is a terminal, and never with `enabled=False` (the examples'
`--no-progress`). Off, it is still a tqdm object (tqdm's `disable=True`):
iterating it yields the items, and `update`, `set_postfix`, `close` do
nothing, so the caller's loop is the same either way. Lines a loop prints
go through `tqdm.write`, which prints them plainly when there is no bar.

>>> import io
>>> bar = progress(range(3), desc="epoch 1", file=io.StringIO())  # not a terminal: off
>>> list(bar), bar.disable
([0, 1, 2], True)
"""

from __future__ import annotations

import sys

from tqdm import tqdm


def progress(iterable=None, total=None, desc=None, *, enabled: bool = True, file=None, **kw):
    """A tqdm bar over `iterable` (or one updated by hand, given `total`) on `file`
    (stderr by default), drawn only if `enabled` and `file` is a terminal; any other
    keyword goes to tqdm (`unit`, `leave`, ...)."""
    file = sys.stderr if file is None else file
    shown = enabled and _is_terminal(file)
    kw.setdefault("mininterval", 0.5)
    return tqdm(iterable, total=total, desc=desc, file=file, disable=not shown, **kw)


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False
