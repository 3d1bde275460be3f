"""Compile LLVM IR to machine code in process, with a memory and an on-disk cache.

Source text goes through llvmlite's O3 pipeline (loop and SLP vectorization on,
for the host CPU and its features) and is emitted as an object file, which an
MCJIT engine loads. Object files are cached on disk under a key made of the
source, llvmlite's and LLVM's versions and the host CPU, written atomically
(temporary file + rename), so a second process that builds the same kernels
compiles nothing and concurrent processes cannot corrupt the cache.

Machine code is freed with the kernels that use it. An MCJIT engine cannot unload
one object file, so kernels are loaded in batches, one engine (a `Library`) per
batch: the kernels a new plan compiles (`batch()`), or one kernel alone. Every
`CompiledKernel` holds its library, and whatever runs a kernel holds the kernel
(plans hold their kernels' records, a plan being run is held by its caller), so a
library is dropped, and its engine disposed of, only once nothing can call into it:
not a cached plan (`config.plan_cache_size`), not a record a user kept. The engine is
disposed of then, or at the next load if another thread is compiling.

The memory cache (`config.kernel_cache_size` kernels, least recently used first)
keeps object files, a few KB each, not loaded code: a kernel still loaded is found
through the library it is in (`_live`), one whose library was dropped is loaded again
from its object file without compiling. Loaded code costs about 40 KB a library (its
engine and target machine) whatever its kernels, so what stays loaded is what cached
plans use (at most `config.kernel_cache_size` kernels, `runtime/engine.py`), no more.

Each compile's O3 pipeline is freed by hand (`_dispose_pass_manager`: llvmlite's own
`close()` leaves it, about 70 KB a kernel), and each compile parses into an LLVM
context of its own, freed with it (the global one keeps every constant ever parsed:
1 to 3 KB a kernel). What llvmlite 0.50 still never frees is each pass builder's
instrumentation callbacks (`new PassInstrumentationCallbacks` in its C++, which no
call of its API deletes): about 1.5 KB per kernel *compiled* (a kernel loaded from the
disk cache costs nothing), so 10,000 new kernels leave about 15 MB.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import llvmlite
import llvmlite.binding as llvm

from . import forksafe
from .config import config, warn_unusable_folder

stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0, "libraries": 0}


@functools.lru_cache(maxsize=1)
def _target():
    """(a target machine for optimizing and emitting, a maker of new ones (each engine
    owns its own), the host's description for cache keys)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    if "+f16c" not in features.split(","):
        register_soft_half()

    def new_machine():
        # static relocations: position-independent code reaches outside symbols through a
        # GOT, which MCJIT patched wrongly once several object files were loaded
        return target.create_target_machine(
            cpu=cpu, features=features, opt=3, reloc="static", jit=True
        )

    fingerprint = "|".join(
        [llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)), cpu, features]
    )
    return new_machine(), new_machine, fingerprint


def register_soft_half() -> bool:
    """Give the JIT libgcc's float <-> float16 conversions, which LLVM calls for `fptrunc`
    and `fpext` of `half` where the CPU has no F16C (an unresolved call would jump to 0).
    False where libgcc has none (before GCC 12): float16 kernels then refuse to compile."""
    global _soft_half
    if _soft_half is None:
        try:
            lib = ctypes.CDLL("libgcc_s.so.1")
            for name in ("__truncsfhf2", "__extendhfsf2"):
                llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
            _soft_half = True
        except (OSError, AttributeError):
            _soft_half = False
    return _soft_half


_soft_half: bool | None = None  # None: not looked up (the host has F16C, or not yet)


def host_description() -> str:
    with _lock:
        return _target()[2]


@contextlib.contextmanager
def _optimized(source: str):
    """`source` parsed and through O3, in an LLVM context of its own, freed on leaving:
    constants and types are interned in their context, and every new shape's kernel
    brings new ones (its loop bounds), which the global context would keep for ever."""
    tm, _, _ = _target()
    if _soft_half is False and " half" in source:
        raise NotImplementedError(
            "float16 kernels need a CPU with F16C or libgcc's float16 conversions (GCC 12 "
            "or later); use bfloat16 or float32"
        )
    context = llvm.create_context()
    mod = llvm.parse_assembly(source, context=context)
    try:
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pb = llvm.create_pass_builder(tm, pto)
        mpm = pb.getModulePassManager()
        try:
            mpm.run(mod, pb)
        finally:
            _dispose_pass_manager(mpm)
        yield mod
    finally:
        mod.close()  # the module before its context
        context.close()


def _dispose_pass_manager(mpm) -> None:
    """Free an O3 pipeline (about 70 KB once it has run). llvmlite's `close()` does not:
    `ModulePassManager` inherits `ObjectRef._dispose`, which does nothing, ahead of
    `NewPassManager._dispose`, which frees it (llvmlite 0.50)."""
    llvm.NewPassManager._dispose(mpm)
    mpm.detach()


class Library:
    """One MCJIT engine and the addresses of the kernels loaded into it. Its machine
    code lives exactly as long as this object: every kernel loaded here holds it."""

    def __init__(self):
        _, new_machine, _ = _target()
        empty = llvm.parse_assembly("")
        engine = llvm.create_mcjit_compiler(empty, new_machine())
        # an engine generates code for its modules at every finalize: without its empty
        # one, loading an object file costs a tenth
        engine.remove_module(empty)
        self.engine = engine
        self.addresses: dict[str, int] = {}
        # not at exit: threads (the worker pool, a program's helpers) may still be inside
        # the code when the interpreter shuts down, and the process frees it anyway
        weakref.finalize(self, _retire, engine).atexit = False
        stats["libraries"] += 1

    def load(self, obj: bytes, symbol: str) -> int:
        """Add an object file; the address of `symbol` in it (0 if absent)."""
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()
        address = self.engine.get_function_address(symbol)
        if address:
            self.addresses[symbol] = address
            _live[symbol] = self
        return address

    def address_of(self, symbol: str) -> int:
        """The address of another function the object files loaded here define."""
        with _lock:
            return self.engine.get_function_address(symbol)


@dataclass
class CompiledKernel:
    """A loaded kernel: its entry point and, on request, its optimized IR and assembly.
    It holds the library its machine code lives in."""

    symbol: str
    source: str  # LLVM IR
    address: int
    nparams: int
    compile_seconds: float
    cache: str  # "compiled", "disk", or "memory"
    _texts: dict = field(default_factory=dict, repr=False)
    library: Library | None = field(default=None, repr=False, compare=False)
    language = "LLVM IR"  # what `source` is written in (KernelRecord.llvm_ir, cuda_c read it)

    @functools.cached_property
    def fn(self):
        argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * self.nparams
        return ctypes.CFUNCTYPE(None, *argtypes)(self.address)

    def _texts_now(self) -> dict:
        with _lock:
            return self._make_texts()

    def _make_texts(self) -> dict:
        if not self._texts:
            tm, _, _ = _target()
            with _optimized(self.source) as mod:
                self._texts["ir"] = str(mod)
                self._texts["asm"] = tm.emit_assembly(mod)
        return self._texts

    @property
    def optimized_ir(self) -> str:
        return self._texts_now()["ir"]

    @property
    def asm(self) -> str:
        return self._texts_now()["asm"]


# symbol -> its object file, most recently used last; bounded by config.kernel_cache_size
_memory: OrderedDict[str, bytes] = OrderedDict()
# symbol -> the library it is loaded in, while that library lives: a kernel something
# still uses is found here instead of being loaded a second time
_live: weakref.WeakValueDictionary[str, Library] = weakref.WeakValueDictionary()
_retired: list = []  # engines of dropped libraries, disposed of at the next load
_batch = threading.local()  # .open, .library: this thread's batch and its library
# llvmlite's engines and pass managers are not thread-safe: one compile at a time. Held
# across a fork (runtime/forksafe.py), so a child never inherits an engine mid-change.
_lock = forksafe.RLock(held_across_fork=True)


@contextlib.contextmanager
def batch():
    """Load the kernels this thread compiles inside into one library (one engine), which
    lives while any of them is used: `with batch(): compile the kernels of a plan`."""
    if getattr(_batch, "open", False):  # nested: the outer batch takes them
        yield
        return
    _batch.open, _batch.library = True, None  # the library is made on the first load
    try:
        yield
    finally:
        _batch.open, _batch.library = False, None


def _library_for_load() -> Library:
    if not getattr(_batch, "open", False):  # outside a batch: a library of its own
        return Library()
    if _batch.library is None:
        _batch.library = Library()
    return _batch.library


def _retire(engine) -> None:
    """Dispose of a dropped library's engine now if the compile lock is free, else at the
    next load: disposing touches LLVM, and the last reference to a library may go on any
    thread at any time (a garbage collection)."""
    if _lock.acquire(blocking=False):
        try:
            engine.close()
        finally:
            _lock.release()
    else:
        _retired.append(engine)


def _dispose_retired() -> None:
    """Free the machine code of the libraries nothing uses any more (under `_lock`)."""
    while _retired:
        _retired.pop().close()


def _disk_path(key: str) -> str | None:
    folder = config.cache
    if not folder or not _usable_cache(folder):
        return None
    return os.path.join(folder, key[:2], key + ".o")


_cache_folders: dict[str, bool] = {}  # folder -> whether it can hold the disk cache


def _usable_cache(folder: str) -> bool:
    """Whether `folder` can hold the disk cache (made if missing). One that cannot (a
    file, a path through a file, no permission to make it) is said once, naming
    FUSEGRAD_CACHE, and the process compiles without the disk cache."""
    usable = _cache_folders.get(folder)
    if usable is None:
        try:
            os.makedirs(folder, exist_ok=True)
            usable = True
        except OSError as e:
            warn_unusable_folder("FUSEGRAD_CACHE", folder, e, "compiling without the disk cache")
            usable = False
        _cache_folders[folder] = usable
    return usable


def _write_atomic(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _seal(key: str, obj: bytes) -> bytes:
    """The checksum a cache file ends with: of its key and its object, so that a file
    copied or renamed from another kernel's key fails the check like a damaged one."""
    return hashlib.sha256(key.encode() + b"\n" + obj).digest()


def _read_cached(path: str, key: str) -> bytes | None:
    """The object file cached for `key`, or None if it is missing, damaged or another's.

    Loading a truncated, corrupted or foreign object file would crash the process
    inside LLVM or bind the wrong code, so anything that fails the check is a miss.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    obj, digest = data[:-32], data[-32:]
    if len(data) <= 32 or _seal(key, obj) != digest:
        return None
    return obj


def compile_kernel(source: str, symbol: str, nparams: int) -> CompiledKernel:
    """Machine code for `source` (which defines `symbol`), from a cache when possible."""
    with _lock:
        _dispose_retired()
        library = _live.get(symbol)
        obj = _memory.get(symbol)
        if obj is not None:
            _memory.move_to_end(symbol)
        if library is not None:  # loaded, in a library something still uses
            stats["memory_hits"] += 1
            address = library.addresses[symbol]
            return CompiledKernel(symbol, source, address, nparams, 0.0, "memory", {}, library)
        if obj is not None:  # compiled before: only loading it again
            t0 = time.perf_counter()
            library = _library_for_load()
            address = library.load(obj, symbol)
            stats["memory_hits"] += 1
            seconds = time.perf_counter() - t0
            return CompiledKernel(symbol, source, address, nparams, seconds, "memory", {}, library)
        k, obj = _load(source, symbol, nparams)
        _memory[symbol] = obj
        while len(_memory) > max(1, config.kernel_cache_size):
            _memory.popitem(last=False)
        return k


def _load(source: str, symbol: str, nparams: int) -> tuple[CompiledKernel, bytes]:
    """The kernel loaded from the disk cache or compiled, and its object file."""
    tm, _, fingerprint = _target()
    key = hashlib.sha256((fingerprint + "\n" + source).encode()).hexdigest()
    path = _disk_path(key)
    t0 = time.perf_counter()
    obj, how = _read_cached(path, key) if path else None, "disk"
    library = _library_for_load()
    address = 0
    if obj is not None:
        try:
            address = library.load(obj, symbol)
            stats["disk_hits"] += 1
        except Exception:  # any failure to load a cached object is a miss: compile instead
            address = 0
    if not address:
        how = "compiled"
        with _optimized(source) as mod:
            obj = tm.emit_object(mod)
        if path:
            try:
                _write_atomic(path, obj + _seal(key, obj))
            except OSError as e:  # a read-only cache folder only costs speed
                warn_unusable_folder(
                    "FUSEGRAD_CACHE",
                    config.cache,
                    e,
                    "kernels compiled now are not saved (those in it are still read)",
                )
        stats["compiled"] += 1
        address = library.load(obj, symbol)
    if not address:
        raise RuntimeError(f"kernel {symbol} did not load from its object file")
    seconds = time.perf_counter() - t0
    return CompiledKernel(symbol, source, address, nparams, seconds, how, {}, library), obj
