"""How this rank is leaving, for the notice the others read: which exit, and its code.

An `atexit` handler runs after the interpreter has taken the exit code out of
the SystemExit that ended the script, so it cannot see the code. While a
process group exists, this module therefore hands out a SystemExit of its own
that remembers itself when created: `sys.exit(n)` raises it, and so does
`raise SystemExit(n)` (and `exit(n)`), because the name `SystemExit` is looked
up in `builtins`, where this class stands in for the built-in one (a subclass:
`except SystemExit` and `isinstance` are unchanged).

A SystemExit that someone catches is forgotten again when it is freed while
Python code runs (the end of its `except` block); the one that ends the
script is freed by the interpreter itself, with no Python frame running, and
stays remembered. No record at exit means the script ran to its end (code 0).

>>> install()
>>> try:
...     raise SystemExit(5)
... except SystemExit:
...     pass
>>> last_exit() is None                      # caught: not how the rank leaves
True
>>> uninstall()
"""

from __future__ import annotations

import builtins
import sys

from .liveness import BY_INTERRUPT, BY_SYS_EXIT, BY_SYSTEM_EXIT

_BUILTIN_SYSTEM_EXIT = builtins.SystemExit
_builtin_sys_exit = sys.exit
_last: tuple[int, int, int] | None = None  # (id of the SystemExit, exit code, how)


def exit_code(status) -> int:
    """The process's exit code for SystemExit(status), by Python's rule: None is 0, an int
    itself, anything else (a message, printed) 1."""
    if status is None:
        return 0
    return status if isinstance(status, int) else 1


class SystemExit(_BUILTIN_SYSTEM_EXIT):  # noqa: A001 - it stands in for the built-in
    """The built-in SystemExit, remembering itself as the way this rank is leaving."""

    __module__ = "builtins"  # tracebacks print 'SystemExit: ...', as always
    _how = BY_SYSTEM_EXIT

    def __init__(self, *args):
        global _last
        super().__init__(*args)
        _last = (id(self), exit_code(self.code), self._how)

    def __del__(self):
        global _last
        if _last is None or _last[0] != id(self):
            return
        try:
            sys._getframe(1)  # Python code runs: this one was caught, and is dropped
        except ValueError:  # the interpreter ending the script: keep the record
            return
        except Exception:  # pragma: no cover - the interpreter's own teardown
            return
        _last = None


class _SysExit(SystemExit):
    __module__ = "builtins"
    _how = BY_SYS_EXIT


_SysExit.__name__ = _SysExit.__qualname__ = "SystemExit"  # (repr and tracebacks)


def _sys_exit(status=None):
    """sys.exit while a process group exists: as the built-in, remembering the code."""
    raise _SysExit(status)


def install(*namespaces: dict) -> None:
    """Stand in for builtins.SystemExit and sys.exit (init_process_group), also where a
    script took its own name for them first (`from sys import exit`): in `namespaces`,
    the globals of __main__ and of init_process_group's caller."""
    global _last
    _last = None
    builtins.SystemExit = SystemExit
    sys.exit = _sys_exit
    for names in namespaces:
        for name, value in list(names.items()):
            if value is _builtin_sys_exit:
                names[name] = _sys_exit
            elif value is _BUILTIN_SYSTEM_EXIT:
                names[name] = SystemExit


def uninstall() -> None:
    """Put back what install replaced, where it is still ours (destroy_process_group)."""
    if builtins.SystemExit is SystemExit:
        builtins.SystemExit = _BUILTIN_SYSTEM_EXIT
    if sys.exit is _sys_exit:
        sys.exit = _builtin_sys_exit


def interrupted() -> None:
    """Record a KeyboardInterrupt that nobody caught: Python then exits by SIGINT (130)."""
    global _last
    _last = (0, 130, BY_INTERRUPT)


def last_exit() -> tuple[int, int] | None:
    """(exit code, how) of the exit under way, or None when the script just ended."""
    return None if _last is None else (_last[1], _last[2])
