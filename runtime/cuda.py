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
import hashlib
import os
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import DType
from . import forksafe
from .config import config


class CudaUnavailable(RuntimeError):
    """The cuda device cannot run here; the message says exactly why."""


_HINT = "set FUSEGRAD_CUDA=emulate to run the CUDA kernels on the CPU emulator instead"


# nvcc's warnings about generated code a user cannot act on: a value declared and never
# read (#177) or set and never read (#550), which a split reduction's partial pass leaves
_NVCC_OPTIONS = ["--diag-suppress", "177,550"]


def _pool_bytes(nbytes: int) -> int:
    """The size class a device allocation of `nbytes` is rounded up to: four classes per
    power of two (at most 25% unused), 256 bytes at least."""
    if nbytes <= 256:
        return 256
    step = 1 << max(nbytes.bit_length() - 3, 0)
    return -(-nbytes // step) * step


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

    def __init__(self):
        try:
            import pycuda  # noqa: F401
        except ImportError as e:
            raise CudaUnavailable(
                f"PyCUDA is not installed ({e}); install the extra: pip install 'fusegrad[cuda]' "
                f"(or {_HINT})"
            ) from None
        try:
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
        atexit.register(self.close)
        major, minor = drv.Device(0).compute_capability()
        self.arch = f"sm_{major}{minor}"
        self.description = f"{drv.Device(0).name()} ({self.arch})"

    def alloc(self, size: int, dtype: DType):
        """A device allocation of at least `size` elements: a held one of its size class,
        else a new one (after giving every held block back to CUDA, if memory is short)."""
        nbytes = _pool_bytes(size * dtype.itemsize)
        with self._held_lock:
            held = self._held.get(nbytes)
            if held:
                return held.pop()
        try:
            with self.active:
                return self.drv.mem_alloc(nbytes)
        except self.drv.MemoryError:
            self.release_held()
            with self.active:
                return self.drv.mem_alloc(nbytes)

    def free(self, mem, size: int, dtype: DType) -> None:
        """Hold `mem` (from `alloc(size, dtype)`) for the next allocation of its class; no
        CUDA call, so any thread may free."""
        nbytes = _pool_bytes(size * dtype.itemsize)
        with self._held_lock:
            self._held.setdefault(nbytes, []).append(mem)

    def release_held(self) -> None:
        """Give every held block back to CUDA."""
        with self._held_lock:
            held, self._held = self._held, {}
        with self.active:
            for blocks in held.values():
                for mem in blocks:
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

    def compile(self, source: str):
        """The loaded module; its cubin is cached on disk under a key of the source, the
        GPU's compute capability and the CUDA toolkit's version."""
        from pycuda.compiler import compile as nvcc_compile
        from pycuda.compiler import get_nvcc_version

        key = "|".join([get_nvcc_version("nvcc") or "", self.arch, source])
        cubin, how = _disk_cached(
            key,
            ".cubin",
            lambda: nvcc_compile(source, options=_NVCC_OPTIONS, no_extern_c=True, arch=self.arch),
        )
        with self.active:
            return self.drv.module_from_buffer(cubin), how

    def functions(self, module, kernel, nargs: int) -> list:
        """Each launch's function, prepared for `nargs` pointer arguments (PyCUDA's prepared
        calls skip the per-call argument inspection of a plain call)."""
        with self.active:
            return [module.get_function(ln.symbol).prepare("P" * nargs) for ln in kernel.launches]

    def launch(self, functions: list, launches, args: list) -> None:
        with self.active:
            for fn, ln in zip(functions, launches):
                fn.prepared_call(ln.grid, ln.block, *args, shared_size=ln.shared_bytes)

    def synchronize(self) -> None:
        with self.active:
            self.drv.Context.synchronize()


class _Active:
    """`with` it: the context is current on this thread inside, and as before after."""

    __slots__ = ("context",)

    def __init__(self, context):
        self.context = context

    def __enter__(self):
        self.context.push()

    def __exit__(self, *exc):
        self.context.pop()


class _EmulatedBackend:
    """The CPU emulator of CUDA C: device memory is host memory, a CPU `Buffer` (so it
    comes from, and goes back to, the CPU's buffer pool)."""

    name = "emulate"
    host_memory = True  # device buffers are CPU `Buffer`s (counted in buffer.live_buffers)
    count = 1
    description = "CUDA emulator on the CPU (FUSEGRAD_CUDA=emulate)"

    def __init__(self):
        from . import cuda_emulator

        self.emulator = cuda_emulator

    def alloc(self, size: int, dtype: DType):
        from .buffer import Buffer

        return Buffer(size, dtype)

    def free(self, mem, size: int, dtype: DType) -> None:
        pass  # a CPU Buffer goes back to the CPU's pool when its last reference goes

    def upload(self, mem, host: np.ndarray) -> None:
        mem.array[: host.size] = host.reshape(-1)

    def download(self, host: np.ndarray, mem) -> None:
        host.reshape(-1)[:] = mem.array[: host.size]

    def arg(self, mem):
        return mem.ptr

    def compile(self, source: str):
        """The module, built by the host C++ compiler (the emulator caches the library)."""
        module = self.emulator.EmulatedModule(source)
        return module, "compiled" if module.built else "disk"

    def functions(self, module, kernel, nargs: int) -> list:
        return [module.get_function(ln.symbol) for ln in kernel.launches]

    def launch(self, functions: list, launches, args: list) -> None:
        for fn, ln in zip(functions, launches):
            fn(*args, grid=ln.grid, block=ln.block, shared=ln.shared_bytes)

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

    __slots__ = ("size", "dtype", "mem", "kernels", "device", "owner", "counted", "__weakref__")

    def __init__(self, size: int, dtype: DType, device: str = "cuda:0"):
        global live_buffers
        self.size, self.dtype, self.device = size, dtype, device
        self.owner = b = backend()  # the backend whose memory this is
        self.mem = b.alloc(size, dtype)
        self.kernels: list = []
        self.counted = not b.host_memory
        if self.counted:
            live_buffers += 1

    def __del__(self):
        global live_buffers
        if getattr(self, "counted", False):  # not set when the allocation failed
            live_buffers -= 1
            try:
                self.owner.free(self.mem, self.size, self.dtype)
            except Exception:  # at interpreter exit the pool may be gone already
                pass

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
        """Overwrite element 0 (an optimizer's per-step scalar) from the host."""
        backend().upload(self.mem, np.array([value], dtype=self.dtype.np))

    def write(self, host: np.ndarray) -> None:
        """Overwrite the whole value from host data of `size` elements."""
        host = np.ascontiguousarray(host, dtype=self.dtype.np).reshape(-1)
        if host.size != self.size:
            raise ValueError(f"write: {host.size} elements into a buffer of {self.size}")
        backend().upload(self.mem, host)

    def __repr__(self) -> str:
        return f"<DeviceBuffer {self.size} x {self.dtype.name} on {self.device}>"


def to_device(buf, device: str):
    """A copy of a realized buffer (CPU `Buffer` or `DeviceBuffer`) on `device`."""
    if device == "cpu":
        from .buffer import Buffer

        return Buffer.from_numpy(buf.numpy(), buf.dtype)
    return DeviceBuffer.from_numpy(buf.numpy(), buf.dtype, device)


# ---------------------------------------------------------------- kernels


@dataclass
class CompiledCudaKernel:
    """A compiled CUDA kernel and how to launch it: the part `CompiledKernel` plays on
    the CPU (`source` is the CUDA C; `kernel` the codegen's launches and scratch)."""

    symbol: str
    source: str
    module: object  # the backend's module (pycuda SourceModule-like)
    kernel: object  # codegen.cuda.CudaKernel: launches, scratch buffers
    compile_seconds: float
    cache: str  # "compiled", "disk" or "memory"
    address: int = 0  # no host address: the CPU program never strings CUDA kernels
    functions: list | None = None  # the backend's launchable function per launch, once made

    @property
    def optimized_ir(self) -> str:
        return self.source

    @property
    def asm(self) -> str:
        return self.source


# (backend, symbol) -> loaded module, most recently used last; bounded as the CPU's kernel
# cache is (config.kernel_cache_size)
_modules: OrderedDict[tuple[str, str], object] = OrderedDict()
_modules_lock = forksafe.Lock()


def symbol_of(loop) -> str:
    """The name a loop-IR kernel runs under on a CUDA device (its CUDA C's hash)."""
    from ..codegen.cuda import cuda_kernel
    from ..codegen.lower import kernel_symbol

    return kernel_symbol(cuda_kernel(loop, "KERNEL", config.allow_tf32).source, loop.name)


def compile_loop(loop) -> CompiledCudaKernel:
    """Render a loop-IR kernel as CUDA C and compile it for the current backend."""
    from ..codegen.cuda import cuda_kernel
    from ..ir import phases

    with phases.timed("render"):
        symbol = symbol_of(loop)
        kernel = cuda_kernel(loop, symbol, config.allow_tf32)
    b = backend()
    t0 = time.perf_counter()
    with phases.timed("cuda"), _modules_lock:
        module = _modules.get((b.name, symbol))
        how = "memory"
        if module is None:
            module, how = b.compile(kernel.source)
            _modules[(b.name, symbol)] = module
            while len(_modules) > max(1, config.kernel_cache_size):
                _modules.popitem(last=False)
        else:
            _modules.move_to_end((b.name, symbol))
    seconds = time.perf_counter() - t0 if how != "memory" else 0.0
    return CompiledCudaKernel(symbol, kernel.source, module, kernel, seconds, how)


def launch(compiled: CompiledCudaKernel, buffers: list, wait: bool = False) -> None:
    """Launch a kernel on these buffers (outputs first, then inputs, as its parameters);
    `wait`: until it has finished (to time it)."""
    b = backend()
    k = compiled.kernel
    args = [b.arg(x.mem) for x in buffers]
    scratch = [DeviceBuffer(count, dt) for dt, count in k.scratch]  # alive through the call
    args += [b.arg(x.mem) for x in scratch]
    functions = compiled.functions
    if functions is None:
        functions = compiled.functions = b.functions(compiled.module, k, len(args))
    b.launch(functions, k.launches, args)
    if wait:
        b.synchronize()


def check_backend(buffers) -> None:
    """Refuse buffers whose memory another backend owns (FUSEGRAD_CUDA changed since they
    were made). A plan's inputs are the only buffers that can be: everything else it
    touches it allocates itself, and plans are keyed by backend."""
    b = backend()
    for x in buffers:
        if x.owner.name != b.name:
            raise CudaUnavailable(
                f"a tensor's device memory belongs to the {x.owner.name} backend, but "
                f"FUSEGRAD_CUDA is now {b.name}: tensors do not survive a change of backend"
            )


def synchronize() -> None:
    """Wait for every kernel launched so far."""
    backend().synchronize()


def _disk_cached(key: str, ext: str, make) -> tuple[bytes, str]:
    """`make()`'s bytes, cached in the compile cache folder under a hash of `key`."""
    from .compiler import _read_cached, _seal, _write_atomic

    digest = hashlib.sha256(key.encode()).hexdigest()
    path = os.path.join(config.cache, "cuda", digest + ext) if config.cache else None
    data = _read_cached(path, digest) if path else None
    if data is not None:
        return data, "disk"
    data = make()
    if path:
        try:
            _write_atomic(path, data + _seal(digest, data))
        except OSError:
            pass  # a read-only cache folder only costs speed
    return data, "compiled"
