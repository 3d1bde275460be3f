"""What every benchmark prints about the run: the CPU, the load, the commit measured.

Kept free of torch (and of anything heavy), so a benchmark that measures fusegrad's own
host cost can import it without loading another framework into the process.
"""

from __future__ import annotations

import os
import platform
import subprocess


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, or "unknown"."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def source_version(folder: str | None = None) -> str:
    """The git commit of the tree at `folder` (default: the fusegrad being measured),
    marked + when the tree has local edits."""
    if folder is None:
        import fusegrad

        folder = os.path.dirname(os.path.abspath(fusegrad.__file__))
    try:
        commit = subprocess.run(
            ["git", "-C", folder, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", folder, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown commit"
    return (commit + ("+" if dirty else "")) if commit else "unknown commit"
