"""Failing tests written down as they fail (`FUSEGRAD_TEST_FAILURES`, tests/conftest.py).

A run cut by a time limit (a GPU machine lent for minutes, `scripts/gpu.sh`) prints no
summary, and under `-q` its progress dots name no test; this file then still does.
"""

from __future__ import annotations


def append(report, path: str) -> None:
    """A failed report's node id, phase and error (the crash's message, else the report's
    last line), appended to `path` in one write; nothing for a report that did not fail,
    nor for pytest-xdist's controller's copy of a worker's report (`report.node`): each
    worker appends its own."""
    if not report.failed or hasattr(report, "node"):
        return
    crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
    text = (crash or str(report.longrepr or "")).strip().splitlines()
    why = (text[0] if crash else text[-1]) if text else ""
    with open(path, "a") as f:
        f.write(f"{report.nodeid} [{report.when}] {why}\n")
