"""What the layers above install into the IR: the one place where ir calls code it
does not import (ir imports nothing of the others).

- `hooks.timed(phase)`: a context manager timing a block as a compile phase
  (`runtime/phases.py` installs its `timed`, so `fusegrad.compile_times()` counts the
  backward graphs ir/autodiff.py builds); a no-op until then.

>>> with hooks.timed("autodiff"):
...     pass
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager


def _untimed(phase: str) -> AbstractContextManager:
    return contextlib.nullcontext()


class Hooks:
    """The installed hooks (one instance, `hooks`)."""

    def __init__(self):
        self.timed: Callable[[str], AbstractContextManager] = _untimed


hooks = Hooks()
