"""Whether operations record gradients (`fusegrad.no_grad()` turns it off)."""

from __future__ import annotations

import contextlib
import threading

_state = threading.local()


def enabled() -> bool:
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def no_grad():
    """Within this block, results never require grad (as `torch.no_grad()`)."""
    old = enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = old


@contextlib.contextmanager
def enable_grad():
    old = enabled()
    _state.enabled = True
    try:
        yield
    finally:
        _state.enabled = old
