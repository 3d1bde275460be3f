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


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the cuda device computes bfloat16, as torch.cuda.is_bf16_supported: False
    where it is not available (torch's answer on a machine without a GPU); else True
    (fusegrad computes bfloat16 in float32 registers on every GPU and on the emulator),
    or with `including_emulation=False` a GPU of compute capability 8.0 or later."""
    if not is_available():
        return False
    capability = _backend().compute_capability  # (the emulator: None)
    return including_emulation or capability is None or capability >= (8, 0)


def _memory_stat(name: str) -> int:
    if not is_available():
        return 0  # (torch's answer where no GPU is)
    raise NotImplementedError(
        f"torch.cuda.{name} on a GPU is not in fusegrad: its memory pool counts no bytes "
        "(fusegrad.memory_report says what a step holds)"
    )


def memory_allocated(device=None) -> int:
    """Bytes of GPU memory tensors hold, as torch.cuda.memory_allocated: 0 where the cuda
    device is not available; on a GPU it raises, naming itself (not counted yet)."""
    return _memory_stat("memory_allocated")


def memory_reserved(device=None) -> int:
    """As `memory_allocated`, for the pool's bytes (torch.cuda.memory_reserved)."""
    return _memory_stat("memory_reserved")


def max_memory_allocated(device=None) -> int:
    """As `memory_allocated`, for the peak (torch.cuda.max_memory_allocated)."""
    return _memory_stat("max_memory_allocated")


def reset_peak_memory_stats(device=None) -> None:
    """torch.cuda.reset_peak_memory_stats: nothing to reset where the cuda device is not
    available; on a GPU it raises, as `memory_allocated` does."""
    _memory_stat("reset_peak_memory_stats")
