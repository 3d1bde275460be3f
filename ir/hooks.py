"""What the layers above install into the IR: the one place where ir calls code it
does not import (ir imports nothing of the others).

- `hooks.timed(phase)`: a context manager timing a block as a compile phase
  (`runtime/phases.py` installs its `timed`, so `fusegrad.compile_times()` counts the
  backward graphs ir/autodiff.py builds); a no-op until then;
- `hooks.capture(depth)`: the site of the user's line `depth` frames up, or None
  (`runtime/attribution.py` installs its `capture`, for ir/sites.py's `note_new`);
- `hooks.mixed_devices(op, a, b)`: raises for an op whose sources sit on devices `a`
  and `b` (device names; a constant's None is usable anywhere); the frontend installs
  one that names the user's line.

>>> with hooks.timed("autodiff"):
...     pass
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager


def _untimed(phase: str) -> AbstractContextManager:
    return contextlib.nullcontext()


def _no_site(depth: int = 1, api=None):
    return None


def _mixed_devices(op, a: str, b: str):
    raise RuntimeError(
        f"{op.name.lower()}: Expected all tensors to be on the same device, but found at least "
        f"two devices, {a} and {b}!"
    )


class Hooks:
    """The installed hooks (one instance, `hooks`)."""

    def __init__(self):
        self.timed: Callable[[str], AbstractContextManager] = _untimed
        self.capture: Callable[..., object] = _no_site
        self.mixed_devices: Callable[..., None] = _mixed_devices


hooks = Hooks()
