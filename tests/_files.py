"""Load a script or an example (not a package module) by its path, for the tests that call
its functions: the examples, scripts/ulp_tables.py; and run a test's script in a fresh
process on a given compile cache (the disk caches' tests)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np


def load_file(name: str, path: str | os.PathLike) -> types.ModuleType:
    """The module that the Python file at `path` defines, run once, under `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_in_child(script: str, tmp_path: Path, cache: Path, tag: str) -> tuple[dict, dict]:
    """Run `script` (which saves arrays with `np.savez(sys.argv[1], ...)` and prints a JSON
    line last) in a fresh process with `FUSEGRAD_CACHE=cache` and no other FUSEGRAD_
    setting: (the JSON, the arrays)."""
    path = tmp_path / "child.py"
    path.write_text(script)
    out = tmp_path / f"{tag}.npz"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGRAD_")}
    env["FUSEGRAD_CACHE"] = str(cache)
    proc = subprocess.run(
        [sys.executable, str(path), str(out)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as saved:
        values = {k: saved[k] for k in saved.files}
    return json.loads(proc.stdout.strip().splitlines()[-1]), values
