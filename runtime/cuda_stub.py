"""A stand-in for `pycuda.driver` whose GPU does nothing: the host side of the cuda device
measured, and tested, on a machine without a GPU.

`runtime.cuda.use_driver(StubDriver())` runs the cuda device's PyCUDA path through it:
device memory is host memory (numpy), copies are real copies, a kernel launch is
counted and does nothing, and "compiling" returns the source. Everything fusegrad does on
the host around a launch (plans, buffers, argument binding) runs as on a GPU, so
`benchmarks/host_cost.py` measures it on every machine. Values computed this way are
meaningless (no kernel runs).

It imitates the part of PyCUDA fusegrad calls, PyCUDA's Python work included: a
`prepared_call` packs its arguments with `struct` each call, as PyCUDA's does.
With `graphs=True` its streams also capture launches into graphs (`begin_capture`,
`end_capture`, `instantiate`, `launch`), the interface `runtime/cuda.py` replays CUDA
graphs through where a driver offers it.

>>> from fusegrad.runtime.cuda_stub import StubDriver
>>> drv = StubDriver()
>>> fn = drv.module_from_buffer(b"").get_function("k").prepare("PP")
>>> fn.prepared_call((1, 1, 1), (32, 1, 1), 16, 32)
>>> drv.launches, drv.packs
(1, 1)
"""

from __future__ import annotations

import struct

import numpy as np


class StubDriver:
    """The `pycuda.driver` module's surface that runtime/cuda.py uses, for one fake GPU.

    Counters: `launches` (kernels launched, captured ones excluded), `packs` (argument
    tuples `prepared_call` packed), `prepares`, `allocations`, `copies` (host to device),
    `synchronizes`, `captures` and `graph_launches`.
    """

    def __init__(self, graphs: bool = False, arch: tuple[int, int] = (9, 0)):
        self.launches = self.packs = self.prepares = self.allocations = 0
        self.synchronizes = self.captures = self.graph_launches = self.copies = 0
        self.arch = arch
        driver = self

        class Device:
            def __init__(self, ordinal: int):
                self.ordinal = ordinal

            @staticmethod
            def count() -> int:
                return 1

            def retain_primary_context(self):
                return _Context()

            def compute_capability(self) -> tuple[int, int]:
                return driver.arch

            def name(self) -> str:
                return "stub GPU (no kernel runs)"

        class Context:
            @staticmethod
            def synchronize() -> None:
                driver.synchronizes += 1

        self.Device, self.Context = Device, Context
        self.MemoryError = type("MemoryError", (Exception,), {})
        if graphs:

            class Stream(_Stream):
                def __init__(self, flags: int = 0):
                    super().__init__(driver)

            self.Stream = Stream

    def init(self) -> None:
        pass

    def mem_alloc(self, nbytes: int) -> _Allocation:
        self.allocations += 1
        return _Allocation(nbytes)

    def memcpy_htod(self, mem: _Allocation, host: np.ndarray) -> None:
        self.copies += 1
        mem.data[: host.nbytes] = host.view(np.uint8).reshape(-1)

    def memcpy_dtoh(self, host: np.ndarray, mem: _Allocation) -> None:
        host.view(np.uint8).reshape(-1)[:] = mem.data[: host.nbytes]

    def module_from_buffer(self, cubin: bytes) -> _Module:
        return _Module(self)

    def compile(self, source: str, arch: str) -> bytes:
        """Stands in for nvcc (runtime/cuda.py asks the driver object first)."""
        return source.encode()


class _Context:
    def push(self) -> None:
        pass

    def pop(self) -> None:
        pass


class _Allocation:
    """Device memory: host bytes, with the address pycuda's `int(allocation)` gives."""

    def __init__(self, nbytes: int):
        self.data = np.zeros(nbytes, np.uint8)
        self.address = self.data.ctypes.data

    def __int__(self) -> int:
        return self.address

    def free(self) -> None:
        pass


class _Module:
    def __init__(self, driver: StubDriver):
        self.driver = driver

    def get_function(self, name: str) -> _Function:
        return _Function(self.driver, name)


class _Function:
    """A kernel: `prepare`, `prepared_call` (packing its arguments each call, as PyCUDA's
    does) and `_launch_kernel` (PyCUDA's launch of packed arguments)."""

    def __init__(self, driver: StubDriver, name: str):
        self.driver, self.name, self.arg_format = driver, name, ""

    def prepare(self, arg_types: str) -> _Function:
        self.driver.prepares += 1
        self.arg_format = arg_types
        return self

    def prepared_call(self, grid, block, *args, shared_size: int = 0) -> None:
        self.driver.packs += 1
        self._launch_kernel(grid, block, struct.pack(self.arg_format, *args), shared_size, None)

    def _launch_kernel(self, grid, block, args: bytes, shared_size: int, stream) -> None:
        if stream is not None and stream.capturing is not None:
            stream.capturing.append((self.name, grid, block, args, shared_size))
        else:
            self.driver.launches += 1


class _Stream:
    """A stream that can capture launches into a graph (CUDA's stream capture)."""

    def __init__(self, driver: StubDriver):
        self.driver, self.capturing = driver, None

    def begin_capture(self) -> None:
        self.capturing = []

    def end_capture(self) -> _Graph:
        nodes, self.capturing = self.capturing, None
        self.driver.captures += 1
        return _Graph(self.driver, nodes)

    def synchronize(self) -> None:
        self.driver.synchronizes += 1


class _Graph:
    def __init__(self, driver: StubDriver, nodes: list):
        self.driver, self.nodes = driver, nodes

    def instantiate(self) -> _Graph:
        return self

    def launch(self, stream=None) -> None:
        self.driver.graph_launches += 1
