"""Compile LLVM IR to machine code in process, with a memory and an on-disk cache.

Source text goes through llvmlite's O3 pipeline (loop and SLP vectorization on,
for the host CPU and its features) and is emitted as an object file, which the
process-wide MCJIT engine loads. Object files are cached on disk under a key
made of the source, llvmlite's and LLVM's versions and the host CPU, written
atomically (temporary file + rename), so a second process that builds the same
kernels compiles nothing and concurrent processes cannot corrupt the cache.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import llvmlite
import llvmlite.binding as llvm

from .config import config

stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}


@functools.lru_cache(maxsize=1)
def _target():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    # static relocations: position-independent code reaches outside symbols through a GOT,
    # which MCJIT patched wrongly once several object files were loaded
    tm = target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="static", jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    fingerprint = "|".join(
        [llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)), cpu, features]
    )
    return tm, engine, fingerprint


def host_description() -> str:
    tm, _, fingerprint = _target()
    return fingerprint


def _optimize(source: str):
    tm, _, _ = _target()
    mod = llvm.parse_assembly(source)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


@dataclass
class CompiledKernel:
    """A loaded kernel: its entry point and, on request, its optimized IR and assembly."""

    symbol: str
    source: str
    address: int
    nparams: int
    compile_seconds: float
    cache: str  # "compiled", "disk", or "memory"
    _texts: dict = field(default_factory=dict, repr=False)

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
            mod = _optimize(self.source)
            self._texts["ir"] = str(mod)
            self._texts["asm"] = tm.emit_assembly(mod)
        return self._texts

    @property
    def optimized_ir(self) -> str:
        return self._texts_now()["ir"]

    @property
    def asm(self) -> str:
        return self._texts_now()["asm"]


# symbol -> the kernel, most recently used last; bounded by config.kernel_cache_size. The
# machine code itself stays loaded in the one MCJIT engine (it cannot unload an object
# file), so `_addresses` remembers where every symbol ever loaded lives: a kernel evicted
# here and needed again is found there instead of being loaded a second time.
_memory: OrderedDict[str, CompiledKernel] = OrderedDict()
_addresses: dict[str, int] = {}
# llvmlite's engine and pass managers are not thread-safe: one compile at a time
_lock = threading.RLock()


def _disk_path(key: str) -> str | None:
    if not config.cache:
        return None
    return os.path.join(config.cache, key[:2], key + ".o")


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


def _add_object(engine, obj: bytes, symbol: str) -> int:
    """Add an object file to the engine; the address of `symbol` in it (0 if absent)."""
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine.get_function_address(symbol)


def compile_kernel(source: str, symbol: str, nparams: int) -> CompiledKernel:
    """Machine code for `source` (which defines `symbol`), from a cache when possible."""
    with _lock:
        hit = _memory.get(symbol)
        if hit is not None:
            _memory.move_to_end(symbol)
            stats["memory_hits"] += 1
            return CompiledKernel(symbol, source, hit.address, nparams, 0.0, "memory", hit._texts)
        address = _addresses.get(symbol)
        if address is not None:  # evicted from the memory cache, still loaded
            k = CompiledKernel(symbol, source, address, nparams, 0.0, "memory")
        else:
            k = _load(source, symbol, nparams)
        _memory[symbol] = k
        while len(_memory) > max(1, config.kernel_cache_size):
            _memory.popitem(last=False)
        return k


def _load(source: str, symbol: str, nparams: int) -> CompiledKernel:
    tm, engine, fingerprint = _target()
    key = hashlib.sha256((fingerprint + "\n" + source).encode()).hexdigest()
    path = _disk_path(key)
    t0 = time.perf_counter()
    obj, how = _read_cached(path, key) if path else None, "disk"
    texts = {}
    address = 0
    if obj is not None:
        try:
            address = _add_object(engine, obj, symbol)
            stats["disk_hits"] += 1
        except Exception:  # any failure to load a cached object is a miss: compile instead
            address = 0
    if not address:
        how = "compiled"
        mod = _optimize(source)
        obj = tm.emit_object(mod)
        if path:
            try:
                _write_atomic(path, obj + _seal(key, obj))
            except OSError:
                pass  # a read-only cache folder only costs speed
        stats["compiled"] += 1
        address = _add_object(engine, obj, symbol)
    if not address:
        raise RuntimeError(f"kernel {symbol} did not load from its object file")
    _addresses[symbol] = address
    return CompiledKernel(symbol, source, address, nparams, time.perf_counter() - t0, how, texts)
