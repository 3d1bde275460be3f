"""One interface per device, and the registry that finds a device's backend by name.

A backend is one module implementing `Backend` (`runtime/cpu_backend.py` for "cpu",
`runtime/cuda_backend.py` for "cuda:N") and registering it under its device type. The
engine, the frontend, `nn` and the pipeline never test a device's name: they ask the
backend of a node's device (`get_backend("cuda:0")`) to allocate, copy, lower, compile,
run and synchronize, and read its capabilities (`is_host`, `supports_fork`, ...) where
behaviour differs. A third device is one module calling `register_backend`, imported by
`runtime/backend.py` (or by its user). The backends import this module, never
`runtime/backend.py`, which imports them.

>>> from fusegrad.runtime.backend_registry import get_backend, backend_names
>>> backend_names()
['cpu', 'cuda']
>>> get_backend("cpu").is_host
True
>>> get_backend("cuda:0").name
'cuda'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from ..ir.dtypes import DType
from . import phases

HOST = "cpu"  # the device of host memory: where values without a device are computed


class Backend(ABC):
    """What the engine needs from a device.

    Buffers are the backend's own objects with the fields the engine reads (`size`,
    `dtype`, `device`, `kernels`, `numpy()`, `write(host)`, `write_scalar(value)`); they
    give their memory back when their last reference goes. Compiled kernels have
    `symbol`, `source`, `language` ("LLVM IR", "CUDA C"), `optimized_ir`, `asm`,
    `compile_seconds` and `cache`.
    """

    name: str  # the device type the backend is registered under: "cpu", "cuda"
    indexed: bool = True  # device names carry an index ("cuda:0"); the CPU has none
    is_host: bool = False  # the device is the host: a tensor's value is a numpy array
    is_host_memory: bool = False  # buffers are host memory (counted in buffer.live_buffers)
    supports_fork: bool = True  # a forked child can keep using the device
    uses_worker_pool: bool = False  # plans run on the CPU worker pool (runtime/launch.py)
    # a convolution's windows read a padded input through bounds checks in the contraction's
    # tiles, so nn/correlate.py makes no padded copy first (the GPU's shared-memory staging)
    guards_windows_in_tiles: bool = False
    # a bfloat16 matmul's right operand is packed in pairs along the reduction (the VNNI
    # layout) for the backend's AMX or `vdpbf16ps` kernels (pipeline/amx.py, pipeline/dpbf16.py):
    # the CPU's, where it has AMX or AVX512-BF16
    packs_bf16_pairs: bool = False
    # a matmul's right operand too big for cache is first copied into panels of columns
    # (frontend/reduce.py) that the CPU's kernels stream in order; a GPU's contraction tiles
    # stage it through shared memory as it is, with 16-byte copies the panels' index forbids
    packs_panels: bool = False
    # a value can be stored from inside a reduction's loops, at its source's coordinates,
    # each element once (pipeline/schedule.py, rule 8): the CPU's and the GPU's can; a backend
    # that says nothing gets schedules without it
    stores_at_source: bool = False
    # a reduction into few outputs is still shared among the device's threads (the GPU
    # splits a long one over blocks); the CPU's kernels are parallel over their outputs
    # only, so rule 8 moves no large value into a sum of few outputs there
    splits_reductions: bool = False

    @property
    def schedule_options(self) -> dict:
        """What `pipeline.schedule.schedule` is told of this backend (its keyword arguments)."""
        return {
            "stores_at_source": self.stores_at_source,
            "splits_reductions": self.splits_reductions,
        }

    # ---------------------------------------------------------------- properties
    @property
    def description(self) -> str:
        """The device in words (a GPU's name, "CUDA emulator on the CPU", ...)."""
        return self.name

    @property
    @abstractmethod
    def bandwidth(self) -> float:
        """Memory bandwidth in GB/s (bytes read plus written), measured or rated."""

    @property
    @abstractmethod
    def peak(self) -> float:
        """Arithmetic peak in float32 GFLOP/s, measured or rated."""

    def why_unavailable(self) -> str | None:
        """None if the device can run here, else the reason in words."""
        return None

    def device_count(self) -> int:
        """Devices of this type usable here."""
        return 1

    def plan_key(self, device: str, key: tuple) -> tuple:
        """The plan cache's key for a plan of structure `key` on `device`: the device, and
        whatever else a plan built here depends on (the implementation behind it)."""
        return (device, key)

    def disk_plan_key(self, key: tuple, device: str) -> str | None:
        """Where a plan of structure `key` is kept on disk (`pipeline/plan_store.py`), or None:
        a backend that says nothing keeps its plans in memory only."""
        return None

    def load_plan(self, disk_key: str):
        """The plan kept on disk under `disk_key`, its kernels loaded, or None."""
        return None

    def store_plan(self, disk_key: str, plan) -> None:
        """Keep `plan` on disk under `disk_key` for the next process (nothing, here)."""
        return None

    def plans_used(self) -> list[str]:
        """The disk keys of the plans this process read or kept, first used first (none,
        here): what the next run of the program reads ahead (`load_ahead`)."""
        return []

    def load_ahead(self, disk_keys: list[str]) -> int:
        """Read the plans of `disk_keys` now, for `load_plan` to find in memory; how many
        (none, here)."""
        return 0

    def rebuild(self, plan) -> None:
        """Make `plan` ready again after some of its kernels were replaced (`prepare` once
        more, by default)."""
        self.prepare(plan)

    def copy_key(self, device: str):
        """What a copy of host data on `device` is kept under (`HostTable.on`)."""
        return device

    # ---------------------------------------------------------------- memory
    @abstractmethod
    def alloc(self, size: int, dtype: DType, device: str):
        """A new buffer of `size` elements of `dtype` on `device`."""

    def free(self) -> None:
        """Give memory held for reuse back to the device (buffers themselves are freed when
        their last reference goes)."""
        return None

    @abstractmethod
    def from_host(self, array: np.ndarray, dtype: DType, device: str):
        """A buffer on `device` holding a copy of host data, converted to `dtype`."""

    def to_host(self, buf) -> np.ndarray:
        """The buffer's value as a host array (a copy when the device is not the host)."""
        return buf.numpy()

    # ---------------------------------------------------------------- kernels
    @abstractmethod
    def lower(self, item):
        """A schedule item's loop IR (`pipeline/lower.py`) as this device wants it."""

    @abstractmethod
    def kernel_symbol(self, loop) -> str:
        """The name a loop-IR kernel runs under here (a hash of its rendered code)."""

    @abstractmethod
    def compile(self, loop):
        """Render and compile a loop-IR kernel; the compiled kernel. Sets `loop.name` to
        its symbol, so the listing, launch line, dump and profile share one name."""

    def compile_many(self, loops: list) -> list:
        """`compile` for each of a new plan's kernels; a backend that can compile several
        side by side does so here (the CPU's forks processes)."""
        return [self.compile(loop) for loop in loops]

    def lower_and_compile(self, items: list) -> tuple[list, list]:
        """A new plan's schedule items lowered and compiled: (their loop IR, their compiled
        kernels). A backend with a cache of lowered kernels starts from it here (the CPU's
        disk cache of scheduled kernels, `pipeline/item_cache.py`)."""
        with phases.timed("lower"):
            loops = [self.lower(item) for item in items]
        return loops, self.compile_many(loops)

    def first_touch(self, outs: list) -> None:
        """Make a kernel's output buffers resident before the kernel is timed on its own
        (the step loop: a first run, `fusegrad.profile`, FUSEGRAD_DEBUG), so that its time
        is the kernel's, as in a cached plan's run over memory already in use, not the
        system's page faults on a fresh allocation. A device whose memory is resident
        when allocated does nothing."""
        return None

    def prepare(self, plan) -> None:
        """Called once on a new plan before it is cached (the CPU builds its native
        program here, so that later runs compile nothing)."""
        return None

    def run(self, plan, leaves: list):
        """Run a cached plan the fastest way the device has, untimed: `(outputs, records)`,
        or None for the engine's kernel-by-kernel loop (which calls `begin`, `launch` and
        `synchronize`)."""
        return None

    def run_first(self, plan, leaves: list):
        """A new plan's first run, each kernel's time measured and its record the one its
        compile made: `(outputs, records)`, or None for the engine's kernel-by-kernel loop."""
        return None

    def arena_layout(self, plan) -> list[tuple[int | None, int, int]] | None:
        """How a cached run of `plan` (`run`) holds the values that die inside it: one
        arena, allocated for the whole run, as `(slot, byte offset, bytes reserved)` per
        value (slot None: a kernel's own scratch array), laid end to end; the plan's
        returned outputs are buffers of their own. None: the run is the engine's
        kernel-by-kernel loop, each value a buffer allocated before the kernel that
        writes it and dropped after its last reader. (`fusegrad.memory_report` reads it.)"""
        return None

    def begin(self, plan, leaves: list) -> list:
        """The plan's inputs as its kernels read them, before a kernel-by-kernel run."""
        return leaves

    @abstractmethod
    def launch(self, step, outs: list, inputs: list, timed: bool) -> float | None:
        """Run one step's kernel on these buffers; `timed`: wait until it has finished. May
        return the kernel's seconds as the device measured them (a GPU's events), which
        the engine then records instead of the host's time around the call."""

    def synchronize(self) -> None:
        """Wait for everything launched so far."""
        return None


# device type -> the factory of its backend (called once, on first use)
_factories: dict[str, Callable[[], Backend]] = {}
_instances: dict[str, Backend] = {}  # device type -> its backend
_by_device: dict[str, Backend] = {}  # device name ("cuda:0") -> its backend, as looked up


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make `factory()` the backend of devices named `name` or `name:N`: a module of a new
    device ends with `register_backend("tpu", TpuBackend)`, and `fg.device("tpu:0")`,
    `fg.zeros(3, device="tpu")` and every plan on it then go through `TpuBackend`."""
    _factories[name] = factory
    _instances.pop(name, None)
    _by_device.clear()


def backend_names() -> list[str]:
    """The registered device types, in registration order."""
    return list(_factories)


def device_type(device: str) -> str:
    """The type part of a device name: "cuda" for "cuda:1"."""
    return device.partition(":")[0]


def get_backend(device: str) -> Backend:
    """The backend of a device name ("cpu", "cuda", "cuda:1"); KeyError for a type no
    backend is registered under."""
    b = _by_device.get(device)
    if b is not None:
        return b
    kind = device_type(device)
    b = _instances.get(kind)
    if b is None:
        factory = _factories.get(kind)
        if factory is None:
            raise KeyError(f"no backend for device {device!r} (registered: {list(_factories)})")
        b = _instances.setdefault(kind, factory())  # two threads may both make one
    _by_device[device] = b
    return b


# The caches of plans built through backends (the engine's `forget_plans`, registered by
# runtime/engine.py): a backend that goes tells them which keys were its (`forget_plans`).
plan_caches: list[Callable[[Callable[[tuple], bool]], None]] = []


def forget_plans(drop: Callable[[tuple], bool]) -> None:
    """Drop, from every plan cache, the plans whose keys `drop` picks."""
    for forget in plan_caches:
        forget(drop)


def to_device(buf, device: str):
    """A copy of a realized buffer (of any device) on `device`, through the host."""
    host = get_backend(buf.device or HOST).to_host(buf)  # a host table's device is None
    return get_backend(device).from_host(host, buf.dtype, device)
