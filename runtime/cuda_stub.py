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
graphs through where a driver offers it. PyCUDA's streams do not: there the graphs come
from libcuda's entry points through ctypes (runtime/cuda_graphs.py), which
`StubLibcuda` imitates (`StubDriver(libcuda=True)`), failures included.

>>> from fusegrad.runtime.cuda_stub import StubDriver
>>> drv = StubDriver()
>>> fn = drv.module_from_buffer(b"").get_function("k").prepare("PP")
>>> fn.prepared_call((1, 1, 1), (32, 1, 1), 16, 32)
>>> drv.launches, drv.packs
(1, 1)
"""

from __future__ import annotations

import ctypes
import struct
import threading
import time
import types

import numpy as np

# shared memory per block a kernel may opt in to, by compute capability (the CUDA guide's table)
SHARED_OPTIN = {(7, 0): 96 * 1024, (7, 5): 64 * 1024, (8, 0): 163 * 1024, (8, 6): 99 * 1024,
                (8, 9): 99 * 1024, (9, 0): 227 * 1024}  # fmt: skip


class StubDriver:
    """The `pycuda.driver` module's surface that runtime/cuda.py uses, for one fake GPU.

    Counters: `launches` (kernels launched, captured ones excluded), `packs` (argument
    tuples `prepared_call` packed), `prepares`, `allocations`, `copies` (host to device),
    `synchronizes`, `captures` and `graph_launches`. With `log=True`, `ran` lists every
    kernel run as (name, grid, block, packed arguments, shared bytes), a graph's as its
    captured launches, so a test can check a graph replays exactly the plain launches.

    Streams, as PyCUDA's, have a `handle`; `graphs=True` gives them `begin_capture` too.
    Events (`Event`) time the host's clock between their records.
    `libcuda`: the driver library runtime/cuda.py may reach through ctypes: None (none,
    the default: a stub never reaches a real one), True (a `StubLibcuda`) or one given.
    """

    def __init__(
        self,
        graphs: bool = False,
        arch: tuple[int, int] = (9, 0),
        libcuda=None,
        log: bool = False,
    ):
        self.launches = self.packs = self.prepares = self.allocations = 0
        self.synchronizes = self.captures = self.graph_launches = self.copies = 0
        self.arch = arch
        self.tensor_maps: list = []  # (spec, address) of each map encoded
        self.capturing: dict[int, list] = {}  # stream handle -> launches captured so far
        self.ran: list | None = [] if log else None
        self.libcuda = StubLibcuda(self) if libcuda is True else libcuda
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

            def get_attribute(self, attribute: str) -> int:
                if attribute != "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN":
                    raise NotImplementedError(f"the stub driver has no {attribute}")
                return SHARED_OPTIN.get(driver.arch, 48 * 1024)

            def name(self) -> str:
                return "stub GPU (no kernel runs)"

        class Context:
            @staticmethod
            def synchronize() -> None:
                driver.synchronizes += 1

        self.Device, self.Context = Device, Context
        # PyCUDA's enums, by name
        self.device_attribute = types.SimpleNamespace(
            MAX_SHARED_MEMORY_PER_BLOCK_OPTIN="MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"
        )
        self.function_attribute = types.SimpleNamespace(
            MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC_SHARED_SIZE_BYTES"
        )
        self.MemoryError = type("MemoryError", (Exception,), {})
        base = _CapturingStream if graphs else _Stream

        class Stream(base):
            def __init__(self, flags: int = 0):
                super().__init__(driver)

        self.Stream = Stream
        self.Event = _Event

    def init(self) -> None:
        pass

    def mem_alloc(self, nbytes: int) -> _Allocation:
        self.allocations += 1
        return _Allocation(nbytes)

    def memcpy_htod(self, mem: _Allocation | int, host: np.ndarray) -> None:
        """A copy to device memory: an allocation, or an address inside one (as PyCUDA)."""
        self.copies += 1
        host = np.ascontiguousarray(host)
        if isinstance(mem, int):
            ctypes.memmove(mem, host.ctypes.data, host.nbytes)
        else:
            mem.data[: host.nbytes] = host.view(np.uint8).reshape(-1)

    def memcpy_dtoh(self, host: np.ndarray, mem: _Allocation | int) -> None:
        if isinstance(mem, int):
            ctypes.memmove(host.ctypes.data, mem, host.nbytes)
        else:
            host.view(np.uint8).reshape(-1)[:] = mem.data[: host.nbytes]

    def module_from_buffer(self, cubin: bytes) -> _Module:
        return _Module(self)

    def compile(self, source: str, arch: str) -> bytes:
        """Stands in for nvcc (runtime/cuda.py asks the driver object first)."""
        return source.encode()

    def encode_tensor_map(self, spec, address: int) -> bytes:
        """Stands in for `cuTensorMapEncodeTiled` (runtime/tensor_map.py): 128 bytes that
        say which view of which address they are, for tests to read back. Like the
        driver's, it needs a current context (CUDA_ERROR_INVALID_CONTEXT, 201, without)."""
        if not getattr(_current, "depth", 0):
            raise RuntimeError("cuTensorMapEncodeTiled: no current context (CUresult 201)")
        self.tensor_maps.append((spec, address))
        return struct.pack("<QQ", address, len(self.tensor_maps)).ljust(128, b"\0")


_current = threading.local()  # how deep this thread's context pushes are


class _Context:
    def push(self) -> None:
        _current.depth = getattr(_current, "depth", 0) + 1

    def pop(self) -> None:
        _current.depth -= 1


class _Event:
    """PyCUDA's `Event`: `record` notes the host's clock (no kernel runs here), `time_till`
    gives the milliseconds from this event to another."""

    def __init__(self, flags: int = 0):
        self.at = None

    def record(self, stream=None) -> _Event:
        self.at = time.perf_counter()
        return self

    def synchronize(self) -> _Event:
        return self

    def time_till(self, end: _Event) -> float:
        return (end.at - self.at) * 1e3


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
        self.attributes: dict[str, int] = {}  # set_attribute's (the dynamic shared memory)

    def prepare(self, arg_types: str) -> _Function:
        self.driver.prepares += 1
        self.arg_format = arg_types
        return self

    def set_attribute(self, attribute: str, value: int) -> None:
        self.attributes[attribute] = value

    def prepared_call(self, grid, block, *args, shared_size: int = 0) -> None:
        self.driver.packs += 1
        self._launch_kernel(grid, block, struct.pack(self.arg_format, *args), shared_size, None)

    def _launch_kernel(self, grid, block, args: bytes, shared_size: int, stream) -> None:
        driver = self.driver
        captured = driver.capturing.get(stream.handle) if stream is not None else None
        if captured is not None:
            captured.append((self.name, grid, block, args, shared_size))
            return
        driver.launches += 1
        if driver.ran is not None:
            driver.ran.append((self.name, grid, block, args, shared_size))


class _Stream:
    """A stream, with its handle (PyCUDA's `Stream.handle`: the `CUstream`)."""

    _handles = iter(range(0x5000, 1 << 62, 16))

    def __init__(self, driver: StubDriver):
        self.driver, self.handle = driver, next(_Stream._handles)

    def synchronize(self) -> None:
        self.driver.synchronizes += 1


class _CapturingStream(_Stream):
    """A stream that can capture launches into a graph (CUDA's stream capture)."""

    def begin_capture(self) -> None:
        self.driver.capturing[self.handle] = []

    def end_capture(self) -> _Graph:
        nodes = self.driver.capturing.pop(self.handle)
        self.driver.captures += 1
        return _Graph(self.driver, nodes)


class _Graph:
    def __init__(self, driver: StubDriver, nodes: list):
        self.driver, self.nodes = driver, nodes

    def instantiate(self) -> _Graph:
        return self

    def launch(self, stream=None) -> None:
        self.driver.graph_launches += 1
        if self.driver.ran is not None:
            self.driver.ran.extend(self.nodes)


class StubLibcuda:
    """libcuda's stream-capture and graph entry points (the ones runtime/cuda_graphs.py
    calls through ctypes), over a `StubDriver`'s streams: launches on a capturing stream
    are recorded, a graph launch counts as one and "runs" the recorded launches.

    `fail`: the entry point that returns an error (a CUresult other than 0) instead,
    `missing`: one the library does not have. Counters: `live_graphs`, `live_execs`
    (created and not destroyed), `destroyed_execs`.
    """

    INVALIDATED = 901  # CUDA_ERROR_STREAM_CAPTURE_INVALIDATED

    def __init__(self, driver: StubDriver, fail: str | None = None, missing: str | None = None):
        self.driver, self.fail, self.missing = driver, fail, missing
        self.graphs: dict[int, list] = {}  # handle -> captured launches
        self.execs: dict[int, list] = {}
        self.live_graphs = self.live_execs = self.destroyed_execs = 0
        self._next = 0x9000

    def __getattr__(self, name: str):
        if name == self.missing or not name.startswith("cu"):
            raise AttributeError(name)
        entry = getattr(self, "_" + name, None)
        if entry is None:
            raise AttributeError(name)

        def call(*args):
            if name != self.fail:
                return entry(*args)
            if name == "cuStreamEndCapture":  # a failed capture ends all the same
                self.driver.capturing.pop(args[0], None)
            return self.INVALIDATED

        self.__dict__[name] = call  # (ctypes sets argtypes and restype on it)
        return call

    def _handle(self) -> int:
        self._next += 16
        return self._next

    def _cuStreamBeginCapture_v2(self, stream: int, mode: int) -> int:
        if stream in self.driver.capturing:
            return self.INVALIDATED
        self.driver.capturing[stream] = []
        return 0

    def _cuStreamEndCapture(self, stream: int, graph_out) -> int:
        nodes = self.driver.capturing.pop(stream, None)
        if nodes is None:
            return self.INVALIDATED
        self.driver.captures += 1
        handle = self._handle()
        self.graphs[handle] = nodes
        self.live_graphs += 1
        graph_out._obj.value = handle
        return 0

    def _cuGraphInstantiateWithFlags(self, exec_out, graph, flags: int) -> int:
        nodes = self.graphs.get(graph.value)
        if nodes is None:
            return 400  # CUDA_ERROR_INVALID_HANDLE
        handle = self._handle()
        self.execs[handle] = list(nodes)
        self.live_execs += 1
        exec_out._obj.value = handle
        return 0

    def _cuGraphLaunch(self, exe, stream: int) -> int:
        nodes = self.execs.get(exe.value)
        if nodes is None:
            return 400
        self.driver.graph_launches += 1
        if self.driver.ran is not None:
            self.driver.ran.extend(nodes)
        return 0

    def _cuGraphExecDestroy(self, exe) -> int:
        if self.execs.pop(exe.value, None) is None:
            return 400
        self.live_execs -= 1
        self.destroyed_execs += 1
        return 0

    def _cuGraphDestroy(self, graph) -> int:
        if self.graphs.pop(graph.value, None) is None:
            return 400
        self.live_graphs -= 1
        return 0
