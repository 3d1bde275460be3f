"""What the CUDA renderer hands the runtime: a `CudaKernel` (source, buffers, launches) with
its `CudaLaunch`es and, for Hopper's Tensor Memory Accelerator, its `TensorMap`s.

    >>> launch = CudaLaunch("E_add_4", (1, 1, 1), (256, 1, 1))
    >>> launch.shared_bytes
    0
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .gpu import Traffic
from .loopir import Param

# the head of a rendered `__global__` function: its name (group 1) and its parameters
# (group 2), `__launch_bounds__` on either side of `void`
KERNEL_HEAD = re.compile(
    r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+'
    r"(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(([^)]*)\)"
)


@dataclass(frozen=True)
class CudaLaunch:
    """One kernel launch: `module.get_function(symbol)(*buffers, grid=, block=, shared=)`."""

    symbol: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic shared memory to ask for at launch


@dataclass(frozen=True)
class TensorMap:
    """A tensor map the host encodes for a launch (`cuTensorMapEncodeTiled`) and passes by
    value after the buffers (`FG_TMAP_PARAMS`, on sm_90a): the Tensor Memory Accelerator's
    view of buffer `param` (its index among the kernel's parameters) from element `offset`
    on, `dims` elements along each dimension (innermost first), `strides` bytes between the
    steps of dimensions 1.. (dimension 0 is contiguous), copied `box` elements at a time
    into shared memory in the 128-byte swizzle; reads outside `dims` give zeros.
    `realign`: a view whose start is not 16-byte aligned (but is a whole number of values
    past such an address) gets a map from the aligned address before it, its dimension 0 as
    many values longer; the kernel adds that shift to its coordinates along dimension 0.
    Else such a view gets a map of zeros (the kernel copies it another way)."""

    param: int
    dtype: str
    offset: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    realign: bool = False


@dataclass
class CudaKernel:
    """A kernel rendered for the GPU, with its launch configuration.

    Buffers are passed as `(*params, *scratch)`: the CPU kernel's parameters in
    their order (outputs first), then `scratch` buffers of `(dtype, count)` that
    the caller allocates (a long reduction's partials), then `lits`, where the source
    is a generic kernel's (pipeline/cuda_templates.py: the literals it reads, as
    64-bit words). The launches run in order, each with the same arguments."""

    name: str
    source: str
    params: list[Param]
    launches: tuple[CudaLaunch, ...]
    scratch: list = field(default_factory=list)
    static_shared_bytes: int = 0  # the `__shared__` arrays the source declares, per block
    traffic: Traffic | None = None  # global-memory bytes and FLOPs (`pipeline/gpu.py`)
    tensor_maps: tuple[TensorMap, ...] = ()  # passed after the buffers where built for sm_90a
    lits: tuple[int, ...] = ()  # a generic kernel's literals, passed after the scratch

    @property
    def symbol(self) -> str:
        return self.launches[0].symbol

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.launches[0].grid

    @property
    def block(self) -> tuple[int, int, int]:
        return self.launches[0].block

    @property
    def shared_bytes(self) -> int:
        return self.launches[0].shared_bytes
