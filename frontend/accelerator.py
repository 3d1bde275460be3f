"""`fusegrad.accelerator`: the device-neutral accelerator API of `torch.accelerator`.

fusegrad's one accelerator is the cuda device (a GPU through PyCUDA, or the emulator
under FUSEGRAD_CUDA=emulate); the CPU is not an accelerator. The cuda backend is always
part of fusegrad, so, as a CUDA build of torch on a machine without a GPU,
`current_accelerator()` names cuda even where `is_available()` is False.

>>> import fusegrad as fg
>>> fg.accelerator.current_accelerator()
device(type='cuda')
>>> fg.accelerator.is_available() == fg.cuda.is_available()
True
"""

from __future__ import annotations

from . import cuda
from .devices import device
from .errors import DeviceError, fail


def is_available() -> bool:
    """True if an accelerator (the cuda device) can run tensors here."""
    return cuda.is_available()


def current_accelerator(check_available: bool = False) -> device | None:
    """The accelerator's device type, `device(type='cuda')`; with `check_available`,
    None where it cannot run here."""
    if check_available and not is_available():
        return None
    return device("cuda")


def device_count() -> int:
    """How many accelerator devices can run here (0 without one)."""
    return cuda.device_count() if is_available() else 0


def current_device_index() -> int:
    """The index of the accelerator device in use: 0 (fusegrad selects no other)."""
    return cuda.current_device()


current_device_idx = current_device_index  # torch's earlier name


def set_device_index(index) -> None:
    """Select accelerator device `index`: fusegrad names devices per tensor (`cuda:N`)
    instead, so only the current one, 0, is accepted."""
    index = index.index if isinstance(index, device) else index
    if index not in (None, 0, -1):
        fail(
            DeviceError,
            "set_device_index",
            f"fusegrad selects no current accelerator device: put tensors on 'cuda:{index}' "
            "instead",
        )


set_device_idx = set_device_index  # torch's earlier name


def synchronize(device=None) -> None:
    """Wait for every kernel launched so far on the accelerator."""
    cuda.synchronize()
