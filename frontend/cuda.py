"""`fusegrad.cuda`: whether the cuda device can run here, as `torch.cuda`.

>>> import fusegrad as fg
>>> isinstance(fg.cuda.is_available(), bool)
True
"""

from __future__ import annotations

from . import cuda_amp as amp  # noqa: F401  (fg.cuda.amp: torch.cuda.amp's spellings)
from .creation import manual_seed as seed_all_devices
from .runtime.backend import get_backend


def _backend():
    return get_backend("cuda")


def is_available() -> bool:
    """True if tensors can be put on "cuda" (a GPU through PyCUDA, or FUSEGRAD_CUDA=emulate)."""
    return _backend().why_unavailable() is None


def device_count() -> int:
    """The CUDA devices usable here (0 if none)."""
    return _backend().device_count()


def why_unavailable() -> str | None:
    """None if `is_available()`, else why not (no PyCUDA, no driver, no device, turned off)."""
    return _backend().why_unavailable()


def current_device() -> int:
    return 0


def get_device_name(device=None) -> str:
    """The GPU's name (or the emulator's description)."""
    return _backend().description


def manual_seed(seed: int) -> None:
    """Seed the random stream (as torch.cuda.manual_seed): fusegrad has one stream for
    every device, so this is `fg.manual_seed(seed)`."""
    seed_all_devices(seed)


manual_seed_all = manual_seed


def empty_cache() -> None:
    """Give the GPU memory fusegrad holds for reuse (freed tensors' blocks) back to CUDA,
    as torch.cuda.empty_cache; tensors still alive keep theirs. Nothing to do on the
    emulator (its memory is the CPU's buffer pool) or where the cuda device never ran."""
    _backend().free()


def synchronize() -> None:
    """Wait for every kernel launched so far (fusegrad already waits when a value is read)."""
    if is_available():
        _backend().synchronize()
