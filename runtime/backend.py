"""The device backends, registered: `runtime/backend_registry.py`'s interface and
registry, with the backends that come with fusegrad (`runtime/cpu_backend.py`,
`runtime/cuda_backend.py`) imported so that they have registered themselves.

Import `get_backend` from here; a backend's own module imports
`runtime/backend_registry.py` instead (this module imports the backends).

>>> from fusegrad.runtime.backend import get_backend
>>> get_backend("cpu").is_host
True
"""

from __future__ import annotations

from . import cpu_backend, cuda_backend  # noqa: F401  (each registers itself)
from .backend_registry import (
    HOST,
    Backend,
    backend_names,
    device_type,
    get_backend,
    register_backend,
    to_device,
)

__all__ = [
    "HOST",
    "Backend",
    "backend_names",
    "device_type",
    "get_backend",
    "register_backend",
    "to_device",
]
