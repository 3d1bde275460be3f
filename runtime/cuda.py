"""The CUDA device: device buffers, host<->device copies, compiled kernels, launches.

One interface, two implementations, chosen by `FUSEGRAD_CUDA` (`config.cuda`):

- `pycuda` (the default): a real GPU through PyCUDA (the `[cuda]` extra). PyCUDA is
  imported the first time a CUDA device is used, never by `import fusegrad`.
- `emulate`: the CPU emulator of the generated CUDA C (`runtime/cuda_emulator.py`):
  the same source, compiled by the host C++ compiler, each block's threads run as
  real threads. Device memory is host numpy memory. It makes every CUDA kernel
  testable where there is no GPU.

The engine asks for a `CudaDevice` only when a plan's device is "cuda:N"; the
frontend never sees which implementation runs.

>>> from fusegrad.runtime import cuda
>>> isinstance(cuda.why_unavailable(), (str, type(None)))
True
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import heapq
import operator
import os
import struct
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from ..ir.dtypes import DType, uint8
from ..pipeline import cuda_templates, templates
from ..pipeline.compiler import disk_cached
from ..pipeline.cuda import STATIC_SHARED, cuda_kernel
from ..pipeline.lower import kernel_symbol
from . import cuda_emulator, cuda_graphs, forksafe, phases, tensor_map
from .backend_registry import forget_plans
from .buffer import BLOCK_VIEWS, Buffer, BufferView, quarter_class
from .config import config
from .cuda_asm import DEFAULT_ARCH, NO_LLVM_IR, build_arch, kernel_asm


class CudaUnavailable(RuntimeError):
    """The cuda device cannot run here; the message says exactly why."""


_HINT = "set FUSEGRAD_CUDA=emulate to run the CUDA kernels on the CPU emulator instead"


# nvcc's warnings about generated code a user cannot act on: a value declared and never
# read (#177) or set and never read (#550), which a split reduction's partial pass leaves
_NVCC_OPTIONS = ["--diag-suppress", "177,550"]


@functools.lru_cache(maxsize=4096)  # (asked at every allocation and free)
def _pool_bytes(nbytes: int) -> int:
    """The size class a device allocation of `nbytes` is rounded up to: four classes per
    power of two (at most 25% unused), 256 bytes at least."""
    return 256 if nbytes <= 256 else quarter_class(nbytes)


class _PyCudaBackend:
    """A GPU through PyCUDA: fusegrad's own pool of device allocations, cubins compiled
    by nvcc and cached on disk.

    The pool is fusegrad's, not PyCUDA's `DeviceMemoryPool`: PyCUDA's pool needs a
    current CUDA context on whichever thread frees a block into an empty pool, and
    throws from a C++ destructor (ending the process) when there is none, which a
    Python thread dropping the last reference to a tensor can do at any time. Here a
    freed block goes onto a Python list; only allocating, copying, compiling and
    launching call CUDA.

    Every call into CUDA runs with the GPU's primary context pushed for its duration
    (`_Active`), on whichever thread makes it, and popped after: CUDA contexts are
    current per thread, and PyCUDA aborts the process when a thread ends with a context
    still pushed, so none is left pushed between calls.
    """

    name = "pycuda"
    host_memory = False  # device buffers are GPU memory (counted in `live_buffers` here)

    def __init__(self, driver=None):
        """`driver`: an object standing in for `pycuda.driver` (runtime/cuda_stub.py), the
        one place the driver comes from; PyCUDA's when None."""
        drv = driver
        if drv is None:
            try:
                import pycuda  # noqa: F401
            except ImportError as e:
                raise CudaUnavailable(
                    f"PyCUDA is not installed ({e}); install the extra: pip install "
                    f"'fusegrad[cuda]' (or {_HINT})"
                ) from None
        try:
            if drv is None:
                import pycuda.driver as drv

            drv.init()
            count = drv.Device.count()
        except Exception as e:  # no libcuda (ImportError), pycuda's own RuntimeErrors
            raise CudaUnavailable(
                f"the CUDA driver could not be initialised ({e}): no NVIDIA driver? ({_HINT})"
            ) from None
        if count == 0:
            raise CudaUnavailable(f"the CUDA driver found no CUDA device ({_HINT})")
        self.drv = drv
        self.count = count
        self.context = drv.Device(0).retain_primary_context()
        self.active = _Active(self.context)  # `with self.active:` around each CUDA call
        self._held: dict[int, list] = {}  # size class -> free device allocations
        self._held_lock = forksafe.Lock()
        # blocks freed and not yet held (`free`), as (size class, heap entry)
        self._freed_later: list[tuple[int, tuple]] = []
        atexit.register(self.close)
        major, minor = drv.Device(0).compute_capability()
        self.arch = f"sm_{major}{minor}"
        # shared memory a block may use, dynamic included, once a kernel opts in (functions)
        self.shared_limit = drv.Device(0).get_attribute(
            drv.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        )
        self.stream = self.capture = None
        self.graphs = config.cuda_graphs and self._start_capture()
        self.description = f"{drv.Device(0).name()} ({self.arch})"

    def _start_capture(self) -> bool:
        """Whether cached plans may be captured as CUDA graphs: where the driver module's
        streams capture (a stand-in's `begin_capture`), or else libcuda's capture entry
        points can be reached through ctypes with the stream's handle (PyCUDA 2026.1 has no
        graph API: runtime/cuda_graphs.py). A stand-in driver brings its own library
        (`libcuda`, None for none), so a stub never reaches a real one.

        A graph is launched on a stream of its own (blocking: the legacy default stream
        the plain launches, copies and frees use waits for it, and it for them). A capture
        forbids this thread's other CUDA calls meanwhile, and another thread's call could
        land in it: every CUDA call then takes one lock with the context."""
        drv = self.drv
        if getattr(drv, "Stream", None) is None:
            return False
        with self.active:
            stream = drv.Stream()
        if hasattr(stream, "begin_capture"):
            capture = stream
        else:
            library = drv.libcuda if hasattr(drv, "libcuda") else cuda_graphs.load_libcuda()
            capture = cuda_graphs.driver_capture(stream, library)
        if capture is None:
            return False
        self.stream, self.capture = stream, capture
        self.active = _ActiveLocked(self.context, forksafe.RLock())
        return True

    def alloc(self, size: int, dtype: DType):
        """A device allocation of at least `size` elements: the held one of its size class
        at the lowest address, else a new one (after giving every held block back to CUDA,
        if memory is short).

        Lowest address first, rather than the last one freed: which blocks a step gets then
        depends on which are free, not on the order they were freed in, so a training
        loop's steps settle on a few sets of addresses, and a cached plan's arguments stay
        bound (`LaunchList`)."""
        nbytes = _pool_bytes(size * dtype.itemsize)
        with self._held_lock:
            if self._freed_later:
                self._hold_freed_later()
            held = self._held.get(nbytes)
            if held:
                return heapq.heappop(held)[1]
        return self._new(nbytes)

    def alloc_many(self, classes: list[int]) -> list:
        """Allocations of these size classes (bytes), as `alloc`: the held ones taken under
        one lock (a cached plan's buffers, all at once)."""
        out = []
        with self._held_lock:
            if self._freed_later:
                self._hold_freed_later()
            held = self._held
            for nbytes in classes:
                blocks = held.get(nbytes)
                out.append(heapq.heappop(blocks)[1] if blocks else None)
        for i, mem in enumerate(out):
            if mem is None:
                out[i] = self._new(classes[i])
        return out

    def _new(self, nbytes: int):
        try:
            with self.active:
                return self.drv.mem_alloc(nbytes)
        except self.drv.MemoryError:
            self.release_held()
            with self.active:
                return self.drv.mem_alloc(nbytes)

    def free(self, mem, size: int, dtype: DType) -> None:
        """Hold `mem` (from `alloc(size, dtype)`) for the next allocation of its class; no
        CUDA call, so any thread may free. A DeviceBuffer's finalizer calls it, and never
        waits for the lock: a cyclic collection may start at any allocation, under the
        lock too, and run the finalizers on the thread that holds it, which would wait for
        itself. The block goes into `_freed_later` (`list.append`: atomic, no collection),
        held here where the lock is free, else by the lock's next holder."""
        self._freed_later.append((_pool_bytes(size * dtype.itemsize), (int(mem), mem)))
        if self._held_lock.acquire(blocking=False):
            try:
                self._hold_freed_later()
            finally:
                self._held_lock.release()

    def _hold_freed_later(self) -> None:
        """Hold the blocks `free` left in `_freed_later` (under `_held_lock`)."""
        later, held = self._freed_later, self._held
        while later:
            nbytes, entry = later.pop()
            blocks = held.get(nbytes)
            if blocks is None:
                blocks = held[nbytes] = []
            heapq.heappush(blocks, entry)

    def release_held(self) -> None:
        """Give every held block back to CUDA."""
        with self._held_lock:
            if self._freed_later:
                self._hold_freed_later()
            held, self._held = self._held, {}
        with self.active:
            cuda_graphs.destroy_released()
            for blocks in held.values():
                for _, mem in blocks:
                    mem.free()

    def close(self) -> None:
        """At exit: give the held blocks back while CUDA is still up (not in a forked
        child, where the blocks are the parent's)."""
        if not getattr(self, "forked", False):
            self.release_held()

    def upload(self, mem, host: np.ndarray) -> None:
        if host.nbytes:
            with self.active:
                self.drv.memcpy_htod(mem, host)

    def download(self, host: np.ndarray, mem) -> None:
        if host.nbytes:
            with self.active:
                self.drv.memcpy_dtoh(host, mem)

    def arg(self, mem):
        return int(mem)

    def view(self, mem, start: int, size: int, dtype: DType) -> int:
        """Elements `start`..`start + size` of `mem`, in its memory: their address (PyCUDA's
        copies take one), held by nothing (`DeviceBufferView` keeps `mem`'s buffer alive)."""
        return int(mem) + start * dtype.itemsize

    @property
    def builds_apart(self) -> bool:
        """Whether `build` makes code apart from loading it (not for a stand-in driver)."""
        return not hasattr(self.drv, "compile")

    def build(self, source: str):
        """`source`'s cubin and where it came from, (bytes, "compiled" or "disk"): nvcc's,
        cached on disk under a key of the source, the GPU's compute capability and the CUDA
        toolkit's version. Touches no CUDA context, so builds may run side by side on
        threads (`compile_loops`). None for a stand-in driver, which compiles as it loads."""
        if not self.builds_apart:
            return None
        from pycuda.compiler import compile as nvcc_compile
        from pycuda.compiler import get_nvcc_version

        arch = build_arch(self.arch)  # (sm_90 as sm_90a: the dumps' PTX is the same code's)
        key = "|".join([get_nvcc_version("nvcc") or "", arch, source])
        return disk_cached(
            key,
            ".cubin",
            lambda: nvcc_compile(source, options=_NVCC_OPTIONS, no_extern_c=True, arch=arch),
        )

    def compile(self, source: str, built=None):
        """The loaded module and where its code came from; `built`: `build(source)`'s
        answer where it was made already."""
        if not self.builds_apart:  # a stand-in driver compiles for itself
            with self.active:
                return self.drv.module_from_buffer(self.drv.compile(source, self.arch)), "compiled"
        cubin, how = built or self.build(source)
        with self.active:
            return _Module(self.drv.module_from_buffer(cubin), cubin), how

    def functions(self, module, kernel, nargs: int) -> list:
        """Each launch's function, prepared for `nargs` pointer arguments (PyCUDA's prepared
        calls skip the per-call argument inspection of a plain call); one that takes tensor
        maps after them (built for sm_90a: `CudaKernel.tensor_maps`) as a `_MapsFunction`."""
        with self.active:
            functions = []
            for ln in kernel.launches:
                fn = module.get_function(ln.symbol).prepare("P" * nargs)
                if ln.shared_bytes > STATIC_SHARED:  # past 48 KiB a kernel must opt in
                    attribute = self.drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES
                    fn.set_attribute(attribute, ln.shared_bytes)
                maps = getattr(kernel, "tensor_maps", ())
                if maps and self.sm_90a:  # (a stand-in driver encodes its own maps)
                    launch = fn._launch_kernel  # (a stand-in's module has no cubin)
                    if isinstance(module, _Module):  # the driver's kernelParams launch
                        launch = tensor_map.ParamsLaunch(
                            module.cubin, ln.symbol, nargs, len(maps), ln.shared_bytes
                        )
                    encode = getattr(self.drv, "encode_tensor_map", None)
                    fn = _MapsFunction(launch, maps, encode)
                functions.append(fn)
            return functions

    @property
    def sm_90a(self) -> bool:
        """Kernels are built for sm_90a here (`compile`): their tensor maps are parameters."""
        return build_arch(self.arch) == "sm_90a"

    def launch(self, functions: list, launches, args: list) -> None:
        with self.active:
            _launch_each(functions, launches, args)

    def timed_launch(self, functions: list, launches, args: list) -> float | None:
        """`launch`, waited for: the seconds the GPU took from an event recorded before the
        launches to one recorded after them (the kernels' own time, without the host's
        launch and wait); None where the driver has no events (the launches waited for
        all the same)."""
        event = getattr(self.drv, "Event", None)
        if event is None:
            self.launch(functions, launches, args)
            self.synchronize()
            return None
        with self.active:
            start, end = event(), event()
            start.record()
            _launch_each(functions, launches, args)
            end.record()
            end.synchronize()
            return start.time_till(end) / 1e3

    def bind(self, fn, grid, block, shared: int, ptrs: list[int]) -> tuple:
        """One launch with its arguments packed once (PyCUDA's `prepared_call` packs them on
        every call): what `run_bound` calls."""
        if isinstance(fn, _MapsFunction):
            with self.active:  # (the driver encodes a tensor map only in a current context)
                return (fn.launch, grid, block, fn.pack(ptrs), shared)
        return (fn._launch_kernel, grid, block, struct.pack("P" * len(ptrs), *ptrs), shared)

    def run_bound(self, bound: _Bound) -> None:
        """A cached plan's launches: its captured CUDA graph when it has one, else each
        launch in turn; the context pushed once for all of them. A graph the driver
        refuses to launch is dropped, graphs go off, and this run launches plainly."""
        with self.active:
            if bound.graph is not None:
                try:
                    bound.graph.launch(self.stream)
                    return
                except Exception:  # (the driver's error, in whatever type it raises)
                    bound.graph, self.graphs = None, False
            for launch_kernel, grid, block, args, shared in bound.calls:
                launch_kernel(grid, block, args, shared, None)
        bound.runs += 1
        if bound.runs == GRAPH_AFTER_RUNS and self.graphs:
            self._capture(bound)

    def _capture(self, bound: _Bound) -> None:
        """Capture `bound`'s launches into a CUDA graph (stream capture, which launches
        nothing); a driver that refuses turns graphs off for good (plain launches). The
        capture ends whatever happens, so the stream never stays in capture mode; a graph
        is used only when every step of it succeeded."""
        with self.active:
            cuda_graphs.destroy_released()
            try:
                self.capture.begin_capture()
            except Exception:  # the driver's refusal, in whatever type it raises
                self.graphs = False
                return
            # (failures are flags, not the exceptions: a kept traceback would keep this
            # run's frames, and so its buffers, alive until the garbage collector runs)
            graph, failed = None, False
            try:
                for launch_kernel, grid, block, args, shared in bound.calls:
                    launch_kernel(grid, block, args, shared, self.stream)
            except Exception:
                failed = True
            finally:
                try:
                    graph = self.capture.end_capture()
                except Exception:
                    failed = True
            if not failed:
                try:
                    bound.graph = graph.instantiate()  # (which destroys the graph either way)
                except Exception:
                    failed = True
            elif graph is not None and hasattr(graph, "discard"):
                graph.discard()
            if failed:
                self.graphs = False

    def synchronize(self) -> None:
        with self.active:
            self.drv.Context.synchronize()


def _launch_each(functions: list, launches, args: list) -> None:
    """PyCUDA's launches of a kernel's functions on `args`, in a pushed context: a tensor-map
    function's own call (`_MapsFunction`), else the prepared call."""
    for fn, ln in zip(functions, launches):
        if isinstance(fn, _MapsFunction):
            fn.launch(ln.grid, ln.block, fn.pack(args), ln.shared_bytes, None)
        else:
            fn.prepared_call(ln.grid, ln.block, *args, shared_size=ln.shared_bytes)


class _Module:
    """A loaded module and the cubin it was loaded from (a kernel with tensor maps loads
    it again for its `tensor_map.ParamsLaunch`)."""

    __slots__ = ("module", "cubin")

    def __init__(self, module, cubin: bytes):
        self.module, self.cubin = module, cubin

    def get_function(self, name: str):
        return self.module.get_function(name)


class _MapsFunction:
    """A function whose launches pass tensor maps after the pointers (`runtime/
    tensor_map.py` encodes them for each set of addresses): `launch(grid, block, params,
    shared, stream)` with `pack`'s bytes, a `tensor_map.ParamsLaunch` on a GPU."""

    __slots__ = ("launch", "maps", "encode")

    def __init__(self, launch, maps, encode=None):
        self.launch, self.maps, self.encode = launch, maps, encode or tensor_map.encode

    def pack(self, ptrs: list[int]):
        return tensor_map.host_aligned(tensor_map.pack(list(ptrs), self.maps, self.encode))


class _Active:
    """`with` it: the context is current on this thread inside, and as before after."""

    __slots__ = ("context",)

    def __init__(self, context):
        self.context = context

    def __enter__(self):
        self.context.push()

    def __exit__(self, *exc):
        self.context.pop()


class _ActiveLocked:
    """`_Active` that also holds `lock` inside: one thread's CUDA calls at a time."""

    __slots__ = ("context", "lock")

    def __init__(self, context, lock):
        self.context, self.lock = context, lock

    def __enter__(self):
        self.lock.acquire()
        self.context.push()

    def __exit__(self, *exc):
        try:
            self.context.pop()
        finally:
            self.lock.release()


class _EmulatedBackend:
    """The CPU emulator of CUDA C: device memory is host memory, a CPU `Buffer` (so it
    comes from, and goes back to, the CPU's buffer pool)."""

    name = "emulate"
    host_memory = True  # device buffers are CPU `Buffer`s (counted in buffer.live_buffers)
    count = 1
    shared_limit = cuda_emulator.MAX_SHARED  # an H100's, so its kernels are the ones emulated
    description = "CUDA emulator on the CPU (FUSEGRAD_CUDA=emulate)"

    def __init__(self):
        self.emulator = cuda_emulator

    @property
    def guards(self) -> bool:
        """Every buffer between guard pages (FUSEGRAD_EMU_GUARD): each value and scratch
        array of a cached plan gets its own then, rather than a place in one arena."""
        return config.emu_guard != 0

    def alloc(self, size: int, dtype: DType):
        if config.emu_guard and size:
            before = config.emu_guard == 2
            guarded = cuda_emulator.guarded_array(size * dtype.itemsize, dtype.np, before)
            if guarded is not None:
                return Buffer(size, dtype, guarded)
        return Buffer(size, dtype)

    def free(self, mem, size: int, dtype: DType) -> None:
        pass  # a CPU Buffer goes back to the CPU's pool when its last reference goes

    def upload(self, mem, host: np.ndarray) -> None:
        mem.array[: host.size] = host.reshape(-1)

    def download(self, host: np.ndarray, mem) -> None:
        host.reshape(-1)[:] = mem.array[: host.size]

    def arg(self, mem):
        return mem.ptr

    def view(self, mem, start: int, size: int, dtype: DType) -> BufferView:
        """Elements `start`..`start + size` of `mem`, in its memory."""
        return BufferView(mem, start, size)

    builds_apart = True  # `build` makes the whole module, off the loading thread

    def build(self, source: str):
        """The module, built by the host C++ compiler (the emulator caches the library);
        builds may run side by side on threads (`compile_loops`)."""
        return self.emulator.EmulatedModule(source)

    def compile(self, source: str, built=None):
        """The module and where its code came from; `built`: `build(source)`'s answer
        where it was made already."""
        module = built or self.build(source)
        return module, "compiled" if module.built else "disk"

    def functions(self, module, kernel, nargs: int) -> list:
        return [module.get_function(ln.symbol) for ln in kernel.launches]

    def launch(self, functions: list, launches, args: list) -> None:
        for fn, ln in zip(functions, launches):
            fn(*args, grid=ln.grid, block=ln.block, shared=ln.shared_bytes)

    def timed_launch(self, functions: list, launches, args: list) -> None:
        """`launch` (the emulator runs a kernel before returning): no GPU time to read, so
        None, and the caller's clock times it."""
        self.launch(functions, launches, args)

    def bind(self, fn, grid, block, shared: int, ptrs: list[int]) -> tuple:
        return (fn, tuple(ptrs), {"grid": grid, "block": block, "shared": shared})

    def run_bound(self, bound: _Bound) -> None:
        for fn, args, how in bound.calls:
            fn(*args, **how)
        bound.runs += 1

    def synchronize(self) -> None:
        pass


_lock = forksafe.Lock()
_backend = None
_failure: str | None = None
_backend_kind: str | None = None


def backend():
    """The implementation behind the cuda device, started on first use; `CudaUnavailable`
    (saying why) when it cannot run here."""
    global _backend, _failure, _backend_kind
    kind = config.cuda
    with _lock:
        if kind != _backend_kind:  # FUSEGRAD_CUDA changed (tests switch it): start again
            _backend, _failure, _backend_kind = None, None, kind
        if _backend is not None:
            return _backend
        if _failure is None:
            try:
                if kind == "off":
                    raise CudaUnavailable("the cuda device is turned off (FUSEGRAD_CUDA=off)")
                _backend = _EmulatedBackend() if kind == "emulate" else _PyCudaBackend()
            except CudaUnavailable as e:
                _failure = str(e)
        if _backend is None:
            raise CudaUnavailable(_failure)
        return _backend


_FORKED = (
    "CUDA cannot be used in a process forked after its parent used the GPU (as in PyTorch): "
    "use multiprocessing's 'spawn' start method, or fork before the first cuda tensor"
)


@forksafe.at_fork
def _after_fork_in_child() -> None:
    """A forked child inherits the parent's GPU state but cannot use it (CUDA does not
    survive fork): every later use says so instead of failing inside the driver."""
    global _backend, _failure
    b = _backend
    if b is not None and not b.host_memory:
        b.forked = True  # its exit handler must not call CUDA
        _backend, _failure = None, _FORKED


@contextlib.contextmanager
def use_driver(driver):
    """Run the cuda device through `driver`, an object standing in for `pycuda.driver`
    (runtime/cuda_stub.py's `StubDriver`), inside the block: FUSEGRAD_CUDA reads "pycuda".
    Afterwards the plans and modules made through it are forgotten, so that nothing built
    for the stand-in runs on a real GPU.

    >>> from fusegrad.runtime.cuda_stub import StubDriver
    >>> with use_driver(StubDriver()) as b:
    ...     b.description
    'stub GPU (no kernel runs) (sm_90)'
    """
    global _backend, _failure, _backend_kind
    with config.override(cuda="pycuda"):
        b = _PyCudaBackend(driver)
        with _lock:
            _backend, _failure, _backend_kind = b, None, "pycuda"
        try:
            yield b
        finally:
            reset()
            _forget_backend(b)


def _forget_backend(b) -> None:
    """Drop every cached module and device plan made while `b` ran."""
    with _modules_lock:
        for key in [k for k in _modules if k[0] == b.name]:
            del _modules[key]
    forget_plans(lambda key: _device_plan_of(key, b.name))


def _device_plan_of(key, name: str) -> bool:
    """Whether an engine plan key is a cuda plan's built by backend `name`: (device,
    FUSEGRAD_CUDA, allow_tf32, structure), as `CudaBackend.plan_key` makes it."""
    if type(key) is not tuple or len(key) != 4:
        return False
    return str(key[0]).startswith("cuda") and key[1] == name


def reset() -> None:
    """Forget the backend (and why it failed): the next use starts it again."""
    global _backend, _failure, _backend_kind
    with _lock:
        _backend, _failure, _backend_kind = None, None, None


def empty_cache() -> None:
    """Give the held device blocks of the running backend back to CUDA (if it holds any)."""
    b = _backend
    if b is not None and not b.host_memory:
        b.release_held()


def why_unavailable() -> str | None:
    """None if the cuda device can run here, else the reason in words."""
    try:
        backend()
    except CudaUnavailable as e:
        return str(e)
    return None


def device_count() -> int:
    """CUDA devices usable here (the emulator is one; 0 when none can run)."""
    try:
        return backend().count
    except CudaUnavailable:
        return 0


# ---------------------------------------------------------------- buffers

live_buffers = 0  # GPU buffers allocated and not yet freed, as buffer.live_buffers for the CPU


class DeviceBuffer:
    """`size` elements of `dtype` in device memory (from the backend's pool).

    The engine's CPU `Buffer` has the same fields the engine reads (`size`, `dtype`,
    `device`, `kernels`); `numpy()` copies the value to the host.
    """

    __slots__ = (
        "size",
        "dtype",
        "mem",
        "ptr",
        "kernels",
        "device",
        "owner",
        "counted",
        "scalar",
        "scalar_value",
        "__weakref__",
    )

    def __init__(self, size: int, dtype: DType, device: str = "cuda:0"):
        global live_buffers
        self.size, self.dtype, self.device = size, dtype, device
        b = _backend  # (`backend()` without its lock when it is the current one)
        if b is None or _backend_kind != config.cuda:
            b = backend()
        self.owner = b  # the backend whose memory this is
        self.mem = b.alloc(size, dtype)
        self.ptr = b.arg(self.mem)  # the address a kernel is passed
        # element 0 as write_scalar last wrote it: its bits, and the Python value given
        self.scalar = self.scalar_value = None
        self.kernels: list = []
        self.counted = not b.host_memory
        if self.counted:
            live_buffers += 1

    def __del__(self):
        global live_buffers
        if getattr(self, "counted", False):  # not set when the allocation failed
            try:
                live_buffers -= 1
                self.owner.free(self.mem, self.size, self.dtype)
            except Exception:  # at interpreter exit the pool, or this module's globals
                pass  # (the count, None then), may be gone already

    @classmethod
    def from_numpy(cls, a: np.ndarray, dtype: DType, device: str = "cuda:0") -> DeviceBuffer:
        """A device copy of host data."""
        host = np.ascontiguousarray(a, dtype=dtype.np).reshape(-1)
        buf = cls(host.size, dtype, device)
        backend().upload(buf.mem, host)
        return buf

    def numpy(self) -> np.ndarray:
        """The value, copied to a new host array."""
        host = np.empty(self.size, self.dtype.np)
        backend().download(host, self.mem)
        return host

    def write_scalar(self, value) -> None:
        """Overwrite element 0 (an optimizer's per-step scalar) from the host. The same bits
        as the last write_scalar are not copied again: a GPU copy from the host waits for
        the kernels before it, and most of a step's scalars (a constant learning rate,
        momentum) do not change. No kernel writes a buffer it did not allocate, so what
        this buffer last received still holds."""
        last = self.scalar_value
        if value is last and value is not None:  # the very object last written
            return
        # an equal nonzero number of the same type has the same bits (only zeros, -0.0, and
        # NaNs, which equal nothing, differ in bits while comparing equal or not)
        if type(value) is type(last) and value == last and value != 0:
            self.scalar_value = value
            return
        host = np.array([value], dtype=self.dtype.np)
        bits = host.tobytes()
        if bits != self.scalar:
            backend().upload(self.mem, host)
            self.scalar = bits
        self.scalar_value = value

    def write(self, host: np.ndarray) -> None:
        """Overwrite the whole value from host data of `size` elements."""
        host = np.ascontiguousarray(host, dtype=self.dtype.np).reshape(-1)
        if host.size != self.size:
            raise ValueError(f"write: {host.size} elements into a buffer of {self.size}")
        backend().upload(self.mem, host)
        self.scalar = self.scalar_value = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.size} x {self.dtype.name} on {self.device}>"


class DeviceBufferView(DeviceBuffer):
    """Elements `start`..`start + size` of another device buffer, in its memory (a slice of
    a computed tensor along its first axes: `source[i : i + bptt]` of a language model's
    batches, a buffer whose offset is data rather than part of the graph's structure). It
    keeps that buffer alive, so its memory is not reused while the view reads it, and
    gives nothing to the pool when it goes. Its address need not be 16-byte aligned: the
    kernels test their buffers' alignment before their vector paths."""

    __slots__ = ("base",)

    def __init__(self, base: DeviceBuffer, start: int, size: int):
        b = base.owner
        self.size, self.dtype, self.device, self.owner = size, base.dtype, base.device, b
        self.mem = b.view(base.mem, start, size, base.dtype)
        self.ptr = b.arg(self.mem)
        self.scalar = self.scalar_value = None
        self.kernels: list = []
        self.counted = False  # (nothing to free: the base's memory)
        self.base = base


BLOCK_VIEWS[DeviceBuffer] = BLOCK_VIEWS[DeviceBufferView] = DeviceBufferView


# ---------------------------------------------------------------- kernels


@dataclass
class CompiledCudaKernel:
    """A compiled CUDA kernel and how to launch it: the part `CompiledKernel` plays on
    the CPU (`source` is the CUDA C; `kernel` the renderer's launches and scratch)."""

    symbol: str
    source: str
    module: object  # the backend's module (pycuda SourceModule-like)
    kernel: object  # pipeline.cuda.CudaKernel: launches, scratch buffers
    compile_seconds: float
    cache: str  # "compiled", "disk" or "memory"
    address: int = 0  # no host address: the CPU program never strings CUDA kernels
    functions: list | None = None  # the backend's launchable function per launch, once made
    # where `kernel` is a generic kernel's (pipeline/cuda_templates.py): this kernel's own
    # rendering, which `source` is the code of (what dumps show and a replay builds)
    own: object = None
    language = "CUDA C"  # what `source` is written in

    @property
    def optimized_ir(self) -> str:
        """No LLVM IR: a note saying so, and where the PTX is (not the CUDA C again)."""
        return NO_LLVM_IR

    @property
    def asm(self) -> str:
        """The PTX nvcc emits (and SASS where cuobjdump or nvdisasm exists), under a header
        of each launch's grid, block, shared memory, registers, spills and occupancy
        (`runtime/cuda_asm.py`): for the GPU PyCUDA runs, else for `DEFAULT_ARCH`."""
        return kernel_asm(self.kernel, getattr(_backend, "arch", None) or DEFAULT_ARCH)


# (backend, symbol) -> loaded module, most recently used last; bounded as the CPU's kernel
# cache is (config.kernel_cache_size)
_modules: OrderedDict[tuple[str, str], object] = OrderedDict()
_modules_lock = forksafe.Lock()


def symbol_of(loop) -> str:
    """The name a loop-IR kernel runs under on a CUDA device (its CUDA C's hash)."""
    source = cuda_kernel(loop, "KERNEL", config.allow_tf32, backend().shared_limit).source
    return kernel_symbol(source, loop.name)


def _rendered(b, loop) -> tuple[str, object]:
    """(symbol, `pipeline.cuda.CudaKernel`) of a loop-IR kernel on backend `b`."""
    with phases.timed("render"):
        symbol = symbol_of(loop)
        return symbol, cuda_kernel(loop, symbol, config.allow_tf32, b.shared_limit)


def compile_loop(loop) -> CompiledCudaKernel:
    """Render a loop-IR kernel as CUDA C and compile it for the current backend."""
    return compile_loops([loop])[0]


# builds (nvcc, the emulator's g++) of one plan's new kernels that may run at once
COMPILE_THREADS = max(1, min(16, os.cpu_count() or 1))


def compile_loops(loops: list) -> list[CompiledCudaKernel]:
    """`compile_loop` for each of a new plan's kernels, the code of those not yet loaded
    built side by side, `COMPILE_THREADS` at a time: nvcc and g++ are processes of their
    own, so a model's first step waits for about its slowest build, not for their sum.
    The modules are then loaded one by one, in order, as `compile_loop` loads them."""
    b = backend()
    rendered = [_rendered(b, loop) for loop in loops]
    # in a plan whose sizes vary, a kernel a generic kernel runs builds that instead
    generic = [_generic(b, symbol, kernel) for symbol, kernel in rendered]
    runs = [g[:2] if g else r for r, g in zip(rendered, generic)]  # (symbol, kernel) built
    with _modules_lock:
        todo = {sym: k.source for sym, k in runs if (b.name, sym) not in _modules}
    built: dict[str, tuple] = {}
    if len(todo) > 1 and COMPILE_THREADS > 1 and b.builds_apart:

        def timed_build(source: str) -> tuple:
            t0 = time.perf_counter()
            try:
                return b.build(source), time.perf_counter() - t0
            except Exception as e:  # (a generic one's: its kernel is then built on its own)
                return e, 0.0

        with phases.timed("cuda"), ThreadPoolExecutor(min(len(todo), COMPILE_THREADS)) as pool:
            built = dict(zip(todo, pool.map(timed_build, todo.values())))
    out = []
    for (symbol, kernel), g, (run_symbol, run) in zip(rendered, generic, runs):
        made = built.get(run_symbol)
        if g is None:
            if made is not None and isinstance(made[0], Exception):
                raise made[0]
            out.append(_loaded(b, symbol, kernel, made))
            continue
        try:
            if made is not None and isinstance(made[0], Exception):
                raise made[0]
            through = _loaded(b, run_symbol, run, made)
        except Exception:  # a literal where C wants a constant: this shape, never again
            templates.registry.refuse(g[2], cuda_templates.CUDA, g[3])
            out.append(_loaded(b, symbol, kernel))
            continue
        out.append(replace(through, symbol=symbol, source=kernel.source, own=kernel))
    return out


def _generic(b, symbol: str, kernel) -> tuple | None:
    """In a plan whose sizes vary (`templates.active()`), for a kernel a generic kernel
    runs (pipeline/cuda_templates.py): (its symbol, the kernel to build and launch: the
    generic source with this kernel's launches and literals, the kernel's shape, the
    registry's `Generic`); else None, the kernel's shape noted (built for its sizes)."""
    if not (templates.active() and config.size_templates):
        return None
    code = cuda_templates.code_of(kernel.source, symbol)
    if code is None:
        return None
    shape = cuda_templates.shape_of(code)
    with _modules_lock:
        loaded = (b.name, symbol) in _modules
    registry = templates.registry
    g = None
    if not loaded:
        g = registry.generic_for(code, shape, cuda_templates.CUDA, cuda_templates.generic_source)
    if g is None:
        registry.note(shape, cuda_templates.CUDA)
        return None
    run_symbol, source = cuda_templates.named(g.code)
    launches = tuple(
        replace(ln, symbol=ln.symbol.replace(symbol, run_symbol)) for ln in kernel.launches
    )
    lits = cuda_templates.words(shape, g.groups)
    return run_symbol, replace(kernel, source=source, launches=launches, lits=lits), shape, g


def _loaded(b, symbol: str, kernel, built: tuple | None = None) -> CompiledCudaKernel:
    """The compiled kernel of a rendered one, its module from the loaded ones, else loaded
    from `built` (`b.build`'s answer and its seconds) where given, else built here."""
    t0 = time.perf_counter()
    with phases.timed("cuda"), _modules_lock:
        module = _modules.get((b.name, symbol))
        how = "memory"
        if module is None:
            module, how = b.compile(kernel.source, built[0] if built else None)
            _modules[(b.name, symbol)] = module
            while len(_modules) > max(1, config.kernel_cache_size):
                _modules.popitem(last=False)
        else:
            _modules.move_to_end((b.name, symbol))
    seconds = 0.0 if how == "memory" else built[1] if built else time.perf_counter() - t0
    return CompiledCudaKernel(symbol, kernel.source, module, kernel, seconds, how)


def launch(compiled: CompiledCudaKernel, buffers: list, wait: bool = False) -> float | None:
    """Launch a kernel on these buffers (outputs first, then inputs, as its parameters);
    `wait`: until it has finished (to time it), and return its seconds on the GPU where
    the backend measures them (events between its launches: `timed_launch`), else None."""
    b = backend()
    k = compiled.kernel
    args = [b.arg(x.mem) for x in buffers]
    scratch = [DeviceBuffer(count, dt) for dt, count in k.scratch]  # alive through the call
    args += [b.arg(x.mem) for x in scratch]
    args += k.lits  # (a generic kernel's literals)
    functions = compiled.functions
    if functions is None:
        functions = compiled.functions = b.functions(compiled.module, k, len(args))
    if wait:
        return b.timed_launch(functions, k.launches, args)
    b.launch(functions, k.launches, args)
    return None


# ---------------------------------------------------------------- cached plans

ARENA_ALIGN = 256  # bytes: each value in a plan's arena starts where cudaMalloc's would
BINDINGS_KEPT = 4  # pointer sets a plan keeps bound (a training loop's alternate: 2)
GRAPH_AFTER_RUNS = 2  # a pointer set launched this often is captured as a CUDA graph


class _Bound:
    """A launch list's launches bound to one set of buffers: the backend's calls with
    their arguments packed, and the CUDA graph captured from them (once they repeat)."""

    __slots__ = ("calls", "runs", "graph")

    def __init__(self, calls: list):
        self.calls, self.runs, self.graph = calls, 0, None


class LaunchList:
    """A cached plan's kernels as one prepared list of launches.

    Made once per plan (`run_plan`): each launch's function, grid, block and shared memory,
    and where its arguments come from in a table of addresses (the plan's inputs, its
    kernels' outputs, each kernel's scratch). Per run, only the outputs the plan returns
    are new buffers; every value that dies inside the plan (and every scratch array) lies
    in one arena, allocated from the pool per run, so two runs usually get the same arena.
    The arguments are bound (packed) once per set of addresses, and the last
    `BINDINGS_KEPT` sets are kept: a training loop whose buffers alternate between two
    sets binds twice and then only launches. A set launched `GRAPH_AFTER_RUNS` times is
    captured as a CUDA graph where the driver offers stream capture, and replayed as one
    launch from then on.
    """

    def __init__(self, plan, b):
        n = plan.nleaves
        returned = set(plan.outputs)
        apart = getattr(b, "guards", False)  # no arena: each value between its guard pages
        self.backend, self.device, self.nleaves = b, plan.device, n
        self.outs: list[tuple[int, int, DType]] = []  # (table index, size, dtype): new per run
        arena: list[tuple[int, int]] = []  # (table index, byte offset) of values in the arena
        nbytes, table = 0, n + plan.slots  # scratch arrays take table entries past the slots
        self.constants: list[tuple[int, int]] = []  # (table index, word) of generics' literals
        self.entries = []  # (function, grid, block, shared bytes, table indices)
        for s in plan.steps:
            for g, numel, dtype in s.outs:
                if g in returned or apart:
                    self.outs.append((n + g, numel, dtype))
                else:
                    arena.append((n + g, nbytes))
                    nbytes += _aligned(numel * dtype.itemsize)
            compiled = s.record.compiled
            k = compiled.kernel
            where = [n + g for g, _, _ in s.outs]
            where += [i if kind == "leaf" else n + i for kind, i in s.inputs]
            for dtype, count in k.scratch:
                if apart:
                    self.outs.append((table, count, dtype))
                else:
                    arena.append((table, nbytes))
                    nbytes += _aligned(count * dtype.itemsize)
                where.append(table)
                table += 1
            for word in k.lits:  # a generic kernel's literals: the same in every binding
                self.constants.append((table, word))
                where.append(table)
                table += 1
            if compiled.functions is None:
                compiled.functions = b.functions(compiled.module, k, len(where))
            for fn, ln in zip(compiled.functions, k.launches):
                self.entries.append((fn, ln.grid, ln.block, ln.shared_bytes, where))
        self.arena, self.arena_bytes, self.table_size = arena, nbytes, table
        # what each run allocates: (size, dtype, pool size class) of each output, then the
        # arena's
        self.specs = [
            (size, dtype, _pool_bytes(size * dtype.itemsize)) for _, size, dtype in self.outs
        ]
        if nbytes:
            self.specs.append((nbytes, uint8, _pool_bytes(nbytes)))
        position = {t: j for j, (t, _, _) in enumerate(self.outs)}
        self.returned = [position[n + g] for g in plan.outputs]  # plan output -> self.outs
        self.bindings: dict[tuple, _Bound] = {}
        self.binds = 0  # argument sets bound so far (what tests count)
        self._lock = forksafe.Lock()

    def run(self, leaves: list) -> list:
        """Launch the plan's kernels on `leaves`; its outputs' new buffers."""
        bufs = _new_buffers(self.backend, self.specs, self.device)  # the outputs, the arena
        key = tuple(map(_PTR, leaves)) + tuple(map(_PTR, bufs))
        bound = self.bindings.get(key)
        if bound is None:
            bound = self._bind(key)
        self.backend.run_bound(bound)
        # the arena goes back to the pool now: its next user is launched after these
        # kernels on the same stream, so it cannot overwrite what they still read
        return [bufs[j] for j in self.returned]

    def _bind(self, key: tuple) -> _Bound:
        n = self.nleaves
        table = [0] * self.table_size
        table[:n] = key[:n]
        for (t, _, _), ptr in zip(self.outs, key[n:]):
            table[t] = ptr
        base = key[-1]  # the arena's (unused when there is none)
        for t, offset in self.arena:
            table[t] = base + offset
        for t, word in self.constants:
            table[t] = word
        bind = self.backend.bind
        bound = _Bound(
            [
                bind(fn, grid, block, shared, [table[i] for i in where])
                for fn, grid, block, shared, where in self.entries
            ]
        )
        with self._lock:
            self.binds += 1
            self.bindings[key] = bound
            while len(self.bindings) > BINDINGS_KEPT:  # the oldest set goes
                del self.bindings[next(iter(self.bindings))]
        return bound


_PTR = operator.attrgetter("ptr")


def _new_buffers(b, specs: list, device: str) -> list:
    """New DeviceBuffers of (size, dtype, size class) each: from the pool all at once where
    the backend can (`alloc_many`), one by one where it cannot."""
    global live_buffers
    many = getattr(b, "alloc_many", None)
    if many is None:
        return [DeviceBuffer(size, dtype, device) for size, dtype, _ in specs]
    out = []
    new, arg = DeviceBuffer.__new__, b.arg
    for (size, dtype, _), mem in zip(specs, many([c for _, _, c in specs])):
        x = new(DeviceBuffer)
        x.size, x.dtype, x.device, x.owner, x.mem, x.ptr = size, dtype, device, b, mem, arg(mem)
        x.kernels, x.counted, x.scalar, x.scalar_value = [], True, None, None
        out.append(x)
    live_buffers += len(out)
    return out


def _aligned(nbytes: int) -> int:
    return -(-max(nbytes, 1) // ARENA_ALIGN) * ARENA_ALIGN


def arena_layout(plan) -> list[tuple[int | None, int, int]] | None:
    """(slot or None for a kernel's scratch array, byte offset, bytes reserved) of what a
    `LaunchList` of `plan` puts in its arena (None: no arena on this backend), read from
    the launch list once the plan has run cached, else laid out as it will be."""
    if getattr(backend(), "guards", False):
        return None
    launches = plan.__dict__.get("launch_list")
    if launches is not None:
        n, ends = plan.nleaves, [off for _, off in launches.arena[1:]] + [launches.arena_bytes]
        return [
            (t - n if t < n + plan.slots else None, off, end - off)
            for (t, off), end in zip(launches.arena, ends)
        ]
    returned, layout, nbytes = set(plan.outputs), [], 0
    for s in plan.steps:
        sizes = [(g, numel * dtype.itemsize) for g, numel, dtype in s.outs if g not in returned]
        k = s.record.compiled.kernel
        sizes += [(None, count * dtype.itemsize) for dtype, count in k.scratch]
        for g, size in sizes:
            layout.append((g, nbytes, _aligned(size)))
            nbytes += _aligned(size)
    return layout


def run_plan(plan, leaves: list) -> list:
    """Run a cached plan on `leaves` (buffers of the current backend) through its launch
    list (made on its first run here); the plan's output buffers. Launches are
    asynchronous on a GPU, as PyTorch's: `synchronize()` waits for them."""
    b = _backend
    if b is None or _backend_kind != config.cuda:
        b = backend()
    launches = plan.__dict__.get("launch_list")
    if launches is None or launches.backend is not b:
        launches = plan.__dict__["launch_list"] = LaunchList(plan, b)
    return launches.run(leaves)


def check_backend(buffers) -> None:
    """Refuse buffers whose memory another backend owns (FUSEGRAD_CUDA changed since they
    were made). A plan's inputs are the only buffers that can be: everything else it
    touches it allocates itself, and plans are keyed by backend."""
    b = backend()
    for x in buffers:
        if x.owner is not b and x.owner.name != b.name:
            raise CudaUnavailable(
                f"a tensor's device memory belongs to the {x.owner.name} backend, but "
                f"FUSEGRAD_CUDA is now {b.name}: tensors do not survive a change of backend"
            )


def synchronize() -> None:
    """Wait for every kernel launched so far."""
    backend().synchronize()
