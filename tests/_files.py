"""Load a script or an example (not a package module) by its path, for the tests that call
its functions: the examples, scripts/ulp_tables.py."""

from __future__ import annotations

import importlib.util
import os
import types


def load_file(name: str, path: str | os.PathLike) -> types.ModuleType:
    """The module that the Python file at `path` defines, run once, under `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
