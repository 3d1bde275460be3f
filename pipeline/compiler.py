"""Compile LLVM IR to machine code in process, with a memory and an on-disk cache.

Source text goes through llvmlite's O3 pipeline (loop and SLP vectorization on,
for the host CPU and its features) and is emitted as an object file, which an
MCJIT engine loads. Object files are cached on disk under a key made of the
code, llvmlite's and LLVM's versions and the host CPU, written atomically
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

What is compiled is a kernel's code, not its name: its comment lines (the header that
names its shapes) are dropped and its function is renamed after a hash of the rest
(`code_of`), so two kernels that differ only in name compile once and share their
machine code. A gather over 16 x 20 rows and one over 16 x 33 are such a pair: the rows
are the parallel loop's range, an argument. Every cache below is keyed by that code;
a `CompiledKernel` keeps its own name and source for what reports it.

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
import gc
import hashlib
import mmap
import os
import pickle
import re
import select
import signal
import struct
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llvmlite
import llvmlite.binding as llvm

from ..runtime import compile_servers, forksafe
from ..runtime.config import config, warn_unusable_folder
from . import cache_bound, templates

if TYPE_CHECKING:
    import numpy

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


# the level of IR that went through the O3 pipeline already (a dumped kernel's optimized
# .ll, replayed: fusegrad/replay.py): emitted as O3's machine code, no pass run again, so
# the code is the run's (passes run twice may vectorize or reassociate a sum anew)
AS_OPTIMIZED = -3


@functools.cache
def _machine(opt: int):
    """The target machine that optimizes and emits code at `opt`: 3 for kernels, 0 for a
    schedule's program (runtime/program.py: control flow around calls, which O3 takes
    seconds over and makes no faster); AS_OPTIMIZED emits as 3 does."""
    tm, new_machine, _ = _target()
    if opt in (3, AS_OPTIMIZED):
        return tm
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=opt,
        reloc="static",
        jit=True,
    )


@contextlib.contextmanager
def _optimized(source: str, opt: int = 3):
    """`source` parsed and through the pipeline of level `opt` (O3 for kernels), in an
    LLVM context of its own, freed on leaving: constants and types are interned in their
    context, and every new shape's kernel brings new ones (its loop bounds), which the
    global context would keep for ever."""
    tm = _machine(opt)
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
        if opt != AS_OPTIMIZED:
            pto = llvm.create_pipeline_tuning_options(speed_level=opt)
            pto.loop_vectorization = opt >= 2
            pto.slp_vectorization = opt >= 2
            pto.loop_unrolling = opt >= 2
            pb = llvm.create_pass_builder(tm, pto)
            mpm = pb.getModulePassManager()
            try:
                mpm.run(mod, pb)
            finally:
                _dispose_pass_manager(mpm)
            if opt >= 2 and VECTOR_FORMS in source:
                _inline_vector_forms(mod, pb)
        yield mod
    finally:
        mod.close()  # the module before its context
        context.close()


VECTOR_FORMS = '"vector-function-abi-variant"'  # a call naming a function's vector forms


def _inline_vector_forms(mod, pb) -> None:
    """Inline the vector forms of a function (pipeline/llvm_math.py `vector_variants`)
    that LLVM's loop vectorizer called: it runs after the inliner, so each of its calls
    stays one (a sine's polynomial called four times a loop iteration, not interleaved),
    then tidy what that leaves."""
    mpm = llvm.create_new_module_pass_manager()
    try:
        mpm.add_always_inliner_pass()
        mpm.add_instruction_combine_pass()
        mpm.add_simplify_cfg_pass()
        mpm.run(mod, pb)
    finally:
        _dispose_pass_manager(mpm)


def _emit(source: str, opt: int) -> tuple[bytes, float]:
    """`source` compiled to an object file, and the seconds that took.

    On the main thread, LLVM runs on a thread of its own while this one waits in Python
    (`_Compile`): Python runs its SIGINT handler only between calls into C, and LLVM can
    take seconds over one large kernel (a chain of 320 transcendental functions: 3 s of
    O3), so Ctrl-C would wait for it. A program (O0: control flow around calls) compiles
    in milliseconds and is compiled here, and so is everything in a forked child of
    `side_by_side` (its parent kills it at a Ctrl-C)."""
    main = threading.current_thread() is threading.main_thread()
    if opt == 0 or not main or _in_compile_child:
        return _emit_here(source, opt)
    compiling = _compiling.get((source, opt))  # the same kernel, left by a Ctrl-C
    return (compiling or _Compile(source, opt)).wait()


def _emit_here(source: str, opt: int) -> tuple[bytes, float]:
    t0 = time.perf_counter()
    with _optimized(source, opt) as mod:
        obj = _machine(opt).emit_object(mod)
    return obj, time.perf_counter() - t0


class _Compile:
    """`_emit_here(source, opt)` on a thread of its own, which the main thread waits for.

    When the wait raises (KeyboardInterrupt), the compile goes on there, since LLVM
    cannot be stopped midway: its object file is then saved to the disk cache (a rerun
    finds it), and an `_emit` of the same source meanwhile waits for it rather than
    compiling it again. llvmlite lets one call into LLVM run at a time (its lock), so a
    compile or load started after the interrupt waits for the call under way to end;
    that wait, in Python, can be interrupted too. Not a daemon thread: the interpreter
    waits for it at exit rather than unloading LLVM under it."""

    def __init__(self, source: str, opt: int):
        self.job = (source, opt)
        self.done = forksafe.Event()
        self.result: tuple[bytes, float] | None = None
        self.error: BaseException | None = None
        self.left = False  # the waiting thread was interrupted: the thread saves the object
        _compiling[self.job] = self
        forksafe.Thread(target=self._run, name="fusegrad-compile").start()

    def _run(self) -> None:
        try:
            self.result = _emit_here(*self.job)
        except BaseException as e:  # raised where it is waited for
            self.error = e
        finally:
            _compiling.pop(self.job, None)
            self.done.set()
        if self.left and self.result is not None:  # (only a lost chance if set just after)
            _save_object(*self.job, self.result[0], warn=False)  # (a thread: no warning)

    def wait(self) -> tuple[bytes, float]:
        try:
            while not self.done.wait(0.05):  # (a signal another thread took shows here)
                pass
        except BaseException:
            self.left = True
            raise
        if self.error is not None:
            raise self.error
        return self.result


# a forked child of `side_by_side`: compiles on its main thread (see `_emit`)
_in_compile_child = False
# (source, level) -> its compile on a thread of its own, while it runs (see `_emit`)
_compiling: dict[tuple[str, int], _Compile] = {}


@forksafe.at_fork
def _no_compiles_after_fork() -> None:
    """A forked child has none of those threads: it would wait for them for ever."""
    _compiling.clear()


def _save_object(source: str, opt: int, obj: bytes, warn: bool = True) -> None:
    """Save `source`'s object file in the disk cache, if there is one. A folder that cannot
    be written only costs speed: said once (`warn`), the kernels in it still read."""
    key = _key(source, opt)
    path = _disk_path(key)
    if not path:
        return
    try:
        write_atomic(path, obj + _seal(key, obj))
    except OSError as e:
        if warn:
            warn_unusable_folder(
                "FUSEGRAD_CACHE",
                config.cache,
                e,
                "kernels compiled now are not saved (those in it are still read)",
            )


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

    def load_many(self, items: list[tuple[bytes, str]]) -> list[int]:
        """`load` for each (object file, symbol), the objects added first and their
        relocations resolved once (a plan read from disk loads dozens: one by one, each
        finalize cost three times what adding it did); the address of each symbol (0 if
        absent). Raises where an object does not load: the engine is then unusable."""
        for obj, _ in items:
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()
        out = []
        for _, symbol in items:
            address = self.engine.get_function_address(symbol)
            if address:
                self.addresses[symbol] = address
                _live[symbol] = self
            out.append(address)
        return out

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
    opt: int = field(default=3, repr=False)  # the optimization level it was compiled at
    # the symbol its machine code is loaded under (`code_of`): shared by the kernels whose
    # code is the same
    code_symbol: str = field(default="", repr=False, compare=False)
    # a kernel run through a generic kernel (pipeline/templates.py): the generic's source,
    # which is what is compiled and run, and the literals this kernel passes it
    generic: str = field(default="", repr=False, compare=False)
    literals: tuple = field(default=(), repr=False, compare=False)
    # where they stand in its code (`templates.shape_of`): positions, a group to a literal
    groups: tuple = field(default=(), repr=False, compare=False)
    # the literals' words (`templates.words`), passed to the generic kernel after the
    # buffers, before the cancel word (`arity` counts it; `nparams` is the source's own)
    lits: numpy.ndarray | None = field(default=None, repr=False, compare=False)
    language = "LLVM IR"  # what `source` is written in (KernelRecord.llvm_ir, cuda_c read it)

    @property
    def arity(self) -> int:
        """The parameters the code at `address` takes after its loop's range: `nparams`,
        and the array of literals where it runs a generic kernel."""
        return self.nparams + (self.lits is not None)

    @functools.cached_property
    def lits_address(self) -> int:
        """Where the literals a generic kernel is given lie (0: not a generic's run)."""
        return 0 if self.lits is None else self.lits.ctypes.data

    @functools.cached_property
    def fn(self):
        argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * self.arity
        return ctypes.CFUNCTYPE(None, *argtypes)(self.address)

    def _texts_now(self) -> dict:
        with _lock:
            return self._make_texts()

    def _make_texts(self) -> dict:
        if not self._texts:
            with _optimized(self.generic or self.source, self.opt) as mod:
                self._texts["ir"] = str(mod)
                self._texts["asm"] = _machine(self.opt).emit_assembly(mod)
            if self.generic:  # what runs is the generic kernel, given these literals
                said = f"runs the generic kernel below with %fg.lits = [{', '.join(self.literals)}]"
                self._texts["ir"] = f"; {said}\n" + self._texts["ir"]
                self._texts["asm"] = f"# {said}\n" + self._texts["asm"]
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
# and llvmlite's own lock, taken around each call into LLVM, after it: a fork while another
# thread is in LLVM outside a compile (host features, say) would leave it held in the child
forksafe.hold_across_fork(llvm.ffi.lib._lock._lock)


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


def entry_path(kind: str, key: str) -> str | None:
    """Where a disk cache of pickled entries (`kind`: "items", "plans") keeps `key`'s:
    `<cache>/<kind>/<key[:2]>/<key>.pkl`, beside the object files; None without a cache."""
    path = _disk_path(key)  # <cache>/<key[:2]>/<key>.o
    if path is None:
        return None
    return os.path.join(os.path.dirname(os.path.dirname(path)), kind, key[:2], key + ".pkl")


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


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename: a reader sees the
    old file or the new one, never half of it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        cache_bound.wrote(len(data))
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
            cache_bound.used(f.fileno())
    except OSError:
        return None
    obj, digest = data[:-32], data[-32:]
    if len(data) <= 32 or _seal(key, obj) != digest:
        return None
    return obj


def compile_kernel(source: str, symbol: str, nparams: int, opt: int = 3) -> CompiledKernel:
    """Machine code for `source` (which defines `symbol`), from a cache when possible,
    optimized at level `opt`."""
    return compile_kernels([(source, symbol, nparams, opt)])[0]


_COMMENT_LINES = re.compile(r"^;.*\n?", re.MULTILINE)


def code_of(source: str, symbol: str, opt: int) -> tuple[str, str]:
    """What is compiled for `source`, which defines `symbol`, at level `opt`: the source
    without its comment lines, the function renamed after a hash of the rest and the
    level; and that name. Kernels that differ only in their names and headers get the
    same code and name, so they are compiled and loaded once.

    >>> body = "(i64 %start) {", "  ret void", "}"
    >>> a = "\\n".join(["; kernel e_4x5", "define void @e_4x5_1" + body[0], *body[1:]])
    >>> b = "\\n".join(["; kernel e_7x5", "define void @e_7x5_2" + body[0], *body[1:]])
    >>> code_of(a, "e_4x5_1", 3) == code_of(b, "e_7x5_2", 3)
    True
    >>> code_of(a, "e_4x5_1", 3)[1] == code_of(a, "e_4x5_1", 2)[1]
    False
    """
    start = 0  # (the header: comment and blank lines, skipped without the expression)
    while source.startswith((";", "\n"), start):
        start = source.find("\n", start) + 1 or len(source)
    body = source[start:]
    if "\n;" in body:  # comment lines further down
        body = _COMMENT_LINES.sub("", body)
    anonymous = body.replace(f"@{symbol}(", "@__fusegrad_code__(")
    digest = hashlib.sha256(f"O{opt}\n{anonymous}".encode()).hexdigest()[:24]
    code_symbol = f"fg_code_{digest}"
    return anonymous.replace("@__fusegrad_code__(", f"@{code_symbol}("), code_symbol


def compile_kernels(
    jobs: list[tuple[str, str, int, int]],
    made: dict[int, tuple[bytes, float]] | None = None,
    shared: dict[int, tuple] | None = None,
) -> list[CompiledKernel]:
    """Machine code for each (source, symbol, number of parameters, optimization level),
    as `_compile_kernels`; in a plan whose sizes vary (`templates.active()`), a kernel
    whose code is not at hand and that a generic kernel can run (pipeline/templates.py)
    runs that, compiled once for all the sizes. `shared`: job index -> (its shape, the
    generic kernel, its code) of jobs that run a generic kernel shared with other jobs of
    the batch (`shared_forms`); `made` then holds objects of `run_jobs`' jobs."""
    if not shared and not (templates.active() and config.size_templates):
        return _compile_kernels(jobs, made)
    with _lock:
        generic = shared or _registry_generics(jobs, made)
        out = _compile_kernels(run_jobs(jobs, generic), made)
        if generic:
            _bind_generics(jobs, out, generic)
    return out


def _registry_generics(jobs: list, made: dict | None) -> dict[int, tuple]:
    """In a plan whose sizes vary: job index -> (its shape, the generic kernel, its code)
    of the jobs whose code is not at hand and that a generic kernel of the registry runs;
    the others' shapes noted as seen (under `_lock`)."""
    generic: dict[int, tuple] = {}
    for i, (source, symbol, _, opt) in enumerate(jobs):
        code, code_symbol = code_of(source, symbol, opt)
        shape = templates.shape_of(code)
        at_hand = (made and i in made) or _at_hand(code, code_symbol, opt)
        g = None if at_hand else templates.registry.generic_for(code, shape, opt)
        if g is None:
            templates.registry.note(shape, opt)
        else:
            generic[i] = (shape, g, code)
    return generic


def shared_forms(jobs: list[tuple[str, str, int, int]], shareable: list[bool]) -> dict[int, tuple]:
    """The jobs of one batch (a new plan's kernels) that run one generic kernel between
    them: the `shareable` jobs whose code has the shape of another's with other literals
    (`templates.shared`), as job index -> (its shape, the generic kernel, its code), for
    `compile_kernels`."""
    candidates = []
    for i, ((source, symbol, _, opt), ok) in enumerate(zip(jobs, shareable, strict=True)):
        if ok:
            code = code_of(source, symbol, opt)[0]
            candidates.append((i, code, templates.shape_of(code), opt))
    return templates.shared(candidates)


def run_jobs(jobs: list[tuple[str, str, int, int]], shared: dict[int, tuple]) -> list:
    """`jobs` with those of `shared` replaced by their generic kernel's job: what is
    compiled for them (its parameters one more, the literals' array)."""
    out = list(jobs)
    for i, (_, g, _) in shared.items():
        source, symbol, nparams, opt = jobs[i]
        out[i] = (g.code, templates.GENERIC_SYMBOL, nparams + 1, opt)
    return out


def _at_hand(code: str, code_symbol: str, opt: int) -> bool:
    """Whether `code`'s machine code is loaded, in memory or on disk (under `_lock`)."""
    if code_symbol in _live or code_symbol in _memory:
        return True
    path = _disk_path(_key(code, opt))
    return bool(path) and os.path.exists(path)


def _bind_generics(jobs: list, out: list, generic: dict[int, tuple]) -> None:
    """Each job of `generic` as a kernel that runs its generic kernel (compiled in `out`)
    with its own literals (`_through`)."""
    for i, (shape, g, _) in generic.items():
        literals = tuple(shape.literals[group[0]] for group in g.groups)
        words = templates.words(shape, g.groups)
        out[i] = _through(jobs[i], out[i], g.code, literals, g.groups, words)


def _through(job: tuple, k: CompiledKernel, code: str, literals, groups, words) -> CompiledKernel:
    """The kernel of `job` (source, symbol, parameters, level) run through the generic
    kernel `k` (compiled from `code`): the generic's address, called with `words` after the
    job's buffers (`CompiledKernel.lits`, which the launches and programs pass)."""
    source, symbol, nparams, opt = job
    return CompiledKernel(
        symbol,
        source,
        k.address,
        nparams,
        k.compile_seconds,
        k.cache,
        {},
        k.library,
        opt,
        k.code_symbol,
        code,
        literals,
        groups,
        words,
    )


def run_through_generics(jobs: list, generics: list) -> list[CompiledKernel]:
    """Each job (source, symbol, parameters, level) as a kernel run through the generic
    kernel given for it as (its code, the literals' groups, the literals, their words): a
    plan read from disk runs its kernels as they ran, nothing parsed again; the generics'
    machine code comes from the caches (or is compiled where it has gone)."""
    inner = [
        (code, templates.GENERIC_SYMBOL, nparams + 1, opt)
        for (_, _, nparams, opt), (code, *_) in zip(jobs, generics, strict=True)
    ]
    out = _compile_kernels(inner)
    return [
        _through(job, k, code, literals, groups, words)
        for job, k, (code, groups, literals, words) in zip(jobs, out, generics)
    ]


def _compile_kernels(
    jobs: list[tuple[str, str, int, int]], made: dict[int, tuple[bytes, float]] | None = None
) -> list[CompiledKernel]:
    """Machine code for each (source, symbol, number of parameters, optimization level),
    from the caches where possible; those compiled anew are compiled side by side in
    other processes (`_compile_objects`), then loaded here, one at a time. Jobs whose code
    is the same (`code_of`) are compiled once. `made`: job index -> (object file,
    seconds) of jobs compiled already (`new_object`, run side by side with their
    lowering: `side_by_side`), saved and loaded as if compiled here."""
    out: list[CompiledKernel | None] = [None] * len(jobs)
    with _lock:
        _dispose_retired()
        todo: dict[str, list[int]] = {}  # code symbol -> the jobs that want it compiled
        codes: dict[str, str] = {}  # code symbol -> its code
        made_for: dict[str, tuple[bytes, float]] = {}  # code symbol -> its object, made
        # code symbol -> (its object file from memory or disk, where from, the jobs)
        found: dict[str, tuple[bytes, str, list[int]]] = {}
        for i, (source, symbol, _, opt) in enumerate(jobs):
            code, code_symbol = code_of(source, symbol, opt)
            if made and i in made:
                made_for[code_symbol] = made[i]
            if code_symbol in todo:
                todo[code_symbol].append(i)
                continue
            if code_symbol in found:
                found[code_symbol][2].append(i)
                continue
            hit = _cached(code, code_symbol, jobs[i])
            if isinstance(hit, CompiledKernel):
                out[i] = hit
            elif hit is not None:
                found[code_symbol] = (*hit, [i])
                codes[code_symbol] = code  # (compiled if it does not load)
            else:
                todo[code_symbol] = [i]
                codes[code_symbol] = code
        for code_symbol in _load_found(jobs, found, out):  # (one that did not load: compiled)
            todo[code_symbol] = found[code_symbol][2]
        firsts = [cs for cs in todo if cs not in made_for]
        compiled = iter(_compile_objects([(codes[cs], jobs[todo[cs][0]][3]) for cs in firsts]))
        for code_symbol, indices in todo.items():
            obj, seconds = made_for[code_symbol] if code_symbol in made_for else next(compiled)
            source, symbol, nparams, opt = jobs[indices[0]]
            _save_object(codes[code_symbol], opt, obj)
            stats["compiled"] += 1
            t0 = time.perf_counter()
            library = _library_for_load()
            address = library.load(obj, code_symbol)
            if not address:
                raise RuntimeError(f"kernel {symbol} did not load from its object file")
            seconds += time.perf_counter() - t0
            _remember(code_symbol, obj)
            _give_kernels(jobs, indices, out, (address, library, code_symbol), seconds, "compiled")
    return out


def _give_kernels(jobs: list, indices: list[int], out: list, code: tuple, seconds, how) -> None:
    """Set `out` for the jobs at `indices`, which share one code, loaded as `code`
    (address, library, code symbol): the first compiled or found `how` (in `seconds`),
    the others taking it from memory (the same code twice in one batch: made once)."""
    address, library, code_symbol = code
    for k, i in enumerate(indices):
        source, symbol, nparams, opt = jobs[i]
        if k:
            stats["memory_hits"] += 1
        out[i] = CompiledKernel(
            symbol,
            source,
            address,
            nparams,
            0.0 if k else seconds,
            "memory" if k else how,
            {},
            library,
            opt,
            code_symbol,
        )


def _key(source: str, opt: int) -> str:
    """The disk cache's key: the source, for this LLVM and host CPU, at this level."""
    _, _, fingerprint = _target()
    level = "" if opt == 3 else f"\n-O{opt}"  # (O3's keys are those from before levels)
    return hashlib.sha256((fingerprint + level + "\n" + source).encode()).hexdigest()


def _remember(symbol: str, obj: bytes) -> None:
    _memory[symbol] = obj
    _memory.move_to_end(symbol)
    while len(_memory) > max(1, config.kernel_cache_size):
        _memory.popitem(last=False)


def _load_found(jobs: list, found: dict, out: list) -> list[str]:
    """Load the object files `_cached` found (code symbol -> (object, "memory" or "disk",
    the jobs that want it)) into this batch's library at once, and set `out` for their
    jobs; the code symbols of those that did not load (under `_lock`)."""
    if not found:
        return []
    items = [(obj, code_symbol) for code_symbol, (obj, _, _) in found.items()]
    t0 = time.perf_counter()
    library = _library_for_load()
    try:
        addresses = library.load_many(items)
    except Exception:  # an object that does not load: each alone, in a library of its own
        if getattr(_batch, "library", None) is library:
            _batch.library = None  # (its engine is spoilt: the batch takes a new one)
        addresses = []
        for obj, code_symbol in items:
            try:
                addresses.append(_library_for_load().load(obj, code_symbol))
            except Exception:  # any failure to load a cached object is a miss
                addresses.append(0)
        library = None
    seconds = (time.perf_counter() - t0) / len(items)
    failed = []
    for (code_symbol, (obj, how, indices)), address in zip(found.items(), addresses):
        if not address:
            failed.append(code_symbol)
            continue
        stats["memory_hits" if how == "memory" else "disk_hits"] += 1
        _remember(code_symbol, obj)
        lib = library or _live[code_symbol]
        _give_kernels(jobs, indices, out, (address, lib, code_symbol), seconds, how)
    return failed


def _cached(code: str, code_symbol: str, job: tuple) -> CompiledKernel | tuple | None:
    """The kernel of `job` (source, symbol, parameters, level), whose code is `code`
    (`code_of`), loaded already; else (its object file, "memory" or "disk") where one is
    at hand, for `_load_found` to load; None if it must be compiled (under `_lock`)."""
    source, symbol, nparams, opt = job
    library = _live.get(code_symbol)
    obj = _memory.get(code_symbol)
    if obj is not None:
        _memory.move_to_end(code_symbol)
    if library is not None:  # loaded, in a library something still uses
        stats["memory_hits"] += 1
        address = library.addresses[code_symbol]
        return CompiledKernel(
            symbol, source, address, nparams, 0.0, "memory", {}, library, opt, code_symbol
        )
    how = "memory"
    if obj is None:
        key = _key(code, opt)
        path = _disk_path(key)
        obj, how = (_read_cached(path, key) if path else None), "disk"
        if obj is None:
            return None
    return obj, how


def new_object(
    source: str, symbol: str, opt: int = 3, claimed: set[str] | None = None
) -> tuple[bytes, float] | None:
    """`source` compiled to an object file (and the seconds that took), or None where
    `compile_kernels` would find it without compiling (loaded, in memory or on disk): the
    compiling part of `compile_kernels`, for `side_by_side` to run in a forked child.

    `claimed`: the code symbols this process has compiled for the same batch of jobs. A
    job whose code is among them is left uncompiled too: `compile_kernels` compiles jobs
    of the same code once and gives them all that one object (a recurrence's time steps
    are many kernels of one code)."""
    code, code_symbol = code_of(source, symbol, opt)
    if claimed is not None:
        if code_symbol in claimed:
            return None
        claimed.add(code_symbol)
    with _lock:  # (held across a fork: a process forked meanwhile gets LLVM whole)
        if code_symbol in _live or code_symbol in _memory:
            return None
        path = _disk_path(_key(code, opt))
        if path and os.path.exists(path):
            return None
        if templates.active() and config.size_templates:
            if templates.registry.would_serve(templates.shape_of(code), opt):
                return None  # `compile_kernels` runs it through a generic kernel
        return _emit(code, opt)


def side_by_side(count: int, make, workers: int, forked=None) -> list:
    """`[make(i) for i in range(count)]`, made by this process and `workers - 1` forked
    copies of it (a new plan's kernels lowered, rendered and compiled: `make` must return
    something `pickle` can carry, its side effects stay in the process that ran it); by
    this process alone while another thread than fusegrad's runs (`forksafe.may_fork`:
    a fork would hang a numpy matmul on it), which the caller may check first to hand
    the LLVM work to `compile_kernels` instead (`_compile_objects` spawns compilers).

    The processes claim indices one at a time, the children from the front, this one
    from the back, from two counters in shared memory (a byte in a pipe is the lock), so
    the work splits by what each index costs, not by a guess made beforehand. A child
    sends its results (pickled) once nothing is left to claim. `forked()`, if given, is
    called here once the children are forked (a thread started before the fork would
    hold it up: the fork waits for the compile lock). An index whose result
    does not come back (the child failed, said nothing for `CHILD_PATIENCE_S`, raised, or
    made something `pickle` cannot carry) is made here, where an error raises as usual.

    >>> side_by_side(5, lambda i: i * i, 2)
    [0, 1, 4, 9, 16]
    """
    if workers <= 1 or count < 2 or not forksafe.may_fork():
        if forked is not None:
            forked()
        return [make(i) for i in range(count)]
    claims = _Claims(count)
    children = []
    for _ in range(workers - 1):
        child = _fork(lambda: _made_in_child(claims, make))
        if child is not None:
            children.append(child)
    if forked is not None:
        forked()
    out: dict[int, object] = {}
    t0 = time.perf_counter()
    try:
        while (i := claims.take(front=not children)) is not None:
            out[i] = make(i)
    except BaseException:  # (an error of `make` here, Ctrl-C): the children stop now
        for pid, fd in children:
            os.kill(pid, signal.SIGKILL)
            _read_child(pid, fd, CHILD_PATIENCE_S)
        raise
    finally:
        claims.close_here()
    patience = max(CHILD_PATIENCE_S, 10 * (time.perf_counter() - t0))
    for pid, fd in children:
        out.update(_results_of(pid, fd, patience))
    return [out[i] if i in out else make(i) for i in range(count)]


class _Claims:
    """Indices 0..count-1 for processes to claim: the front and back counters in shared
    memory, guarded by a token byte in a pipe (taken by reading it, given back by writing
    it: a lock across forked processes without a semaphore)."""

    def __init__(self, count: int):
        self.words = mmap.mmap(-1, 16)  # anonymous, shared with forked children
        struct.pack_into("<qq", self.words, 0, 0, count)
        self.token_r, self.token_w = os.pipe()
        os.write(self.token_w, b"t")

    def take(self, front: bool) -> int | None:
        """The next index from the front (or the back), or None when none is left or the
        token did not come back for `CHILD_PATIENCE_S` (a child killed holding it)."""
        ready, _, _ = select.select([self.token_r], [], [], CHILD_PATIENCE_S)
        if not ready or not os.read(self.token_r, 1):
            return None
        try:
            lo, hi = struct.unpack_from("<qq", self.words, 0)
            if lo >= hi:
                return None
            i = lo if front else hi - 1
            struct.pack_into("<qq", self.words, 0, lo + front, hi - (not front))
            return i
        finally:
            os.write(self.token_w, b"t")

    def close_here(self) -> None:
        """Close this process's ends (the children keep their copies until they exit)."""
        for fd in (self.token_r, self.token_w):
            os.close(fd)
        self.words.close()


def _made_in_child(claims: _Claims, make) -> bytes:
    """What a forked child of `side_by_side` sends back: each (index, result) it made,
    pickled one by one (one that cannot be pickled is left out: the parent makes it)."""
    records = []
    while (i := claims.take(front=True)) is not None:
        try:
            result = make(i)
            data = pickle.dumps((i, result), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            continue
        records.append(struct.pack("<Q", len(data)) + data)
    return b"".join(records)


def _results_of(pid: int, fd: int, patience: float) -> dict[int, object]:
    """The (index -> result) a child of `side_by_side` sent; what is whole of it if it
    failed midway, nothing if it said nothing for `patience` seconds (it is killed)."""
    data = _read_child(pid, fd, patience) or b""
    out, at = {}, 0
    while at + 8 <= len(data):
        (size,) = struct.unpack_from("<Q", data, at)
        at += 8
        if at + size > len(data):
            break
        try:
            i, result = pickle.loads(data[at : at + size])
        except Exception:
            break
        out[i] = result
        at += size
    return out


def _fork(body) -> tuple[int, int] | None:
    """A forked child that runs `body()` and writes the bytes it returns into a pipe, as
    (pid, the pipe to read); None if fork failed. The child writes nothing until `body`
    returns (a full pipe would stall it while this process is still busy), then leaves by
    `os._exit`, running no Python clean-up of the parent's, and never returns from here,
    whatever is raised in it (a Ctrl-C pending at the fork, say): a child that did would
    go on running its parent's program.

    No other thread is inside LLVM at the fork, nor forks meanwhile: every fork takes the
    compile lock, then llvmlite's, across it (`runtime/forksafe.py`), and the child gets
    them free."""
    parent = os.getpid()
    r, w = os.pipe()
    try:
        with warnings.catch_warnings():  # (3.12 warns about forking with threads running)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; its work is checked by the parent
            status = 1
            try:
                global _in_compile_child
                _in_compile_child = True  # (`_emit`: the parent takes the Ctrl-C)
                os.close(r)
                # collections leave the parent's objects alone (a full one writes to every
                # object's header: every page of the heap copied, for a child that lives
                # briefly)
                gc.freeze()
                view = memoryview(body())
                while view:
                    view = view[os.write(w, view) :]
                status = 0
            finally:
                os._exit(status)
    except BaseException as e:
        if os.getpid() != parent:  # pragma: no cover - the child: never back to its caller
            os._exit(1)
        os.close(r)
        os.close(w)
        if isinstance(e, OSError):
            return None
        raise
    os.close(w)
    return pid, r


def _read_child(pid: int, fd: int, patience: float) -> bytes | None:
    """All a forked child wrote, once it has exited; None if it failed or said nothing
    for `patience` seconds (it is killed then)."""
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], patience)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                chunks = None
                break
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    if chunks is None or status != 0:
        return None
    return b"".join(chunks)


# A forked compiler that has said nothing for this long (and this many times the parent's
# own share took) is taken to be stuck: killed, and its share compiled here instead.
CHILD_PATIENCE_S = 30.0
_RECORD = struct.Struct("<Qd")  # a compiled object's length and seconds, before its bytes


def compile_workers(n: int) -> int:
    """How many processes compile `n` new kernels: this one and forked copies of it (or
    spawned helpers, `_compile_objects`), up to `config.compile_workers`; one where
    forking is not possible or wise (no `os.fork`, an MPI rank: Open MPI warns about
    forks and some interconnects break)."""
    if n < 2 or config.compile_workers <= 1 or not hasattr(os, "fork"):
        return 1
    if "mpi4py.MPI" in sys.modules:
        return 1
    return min(n, config.compile_workers)


def _compile_objects(items: list[tuple[str, int]]) -> list[tuple[bytes, float]]:
    """Object files (and seconds each took) for (source, level) items, in order.

    llvmlite serializes every call into LLVM behind one lock, so threads cannot compile
    side by side; other processes can. Each forked child compiles its share (balanced by
    source size) and writes the objects back through a pipe, while this process compiles
    its own; a child that fails or goes quiet costs only time: its share is compiled
    here. While another thread than fusegrad's runs, this process must not fork
    (`forksafe.may_fork`): spawned helpers, kept for later, compile instead
    (`runtime/compile_servers.py`)."""
    workers = compile_workers(len(items))
    if workers == 1:
        return [_emit(source, opt) for source, opt in items]
    if not forksafe.may_fork():
        return compile_servers.compile_objects(items, workers - 1, _emit, CHILD_PATIENCE_S)
    shares: list[list[int]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for i in sorted(range(len(items)), key=lambda i: -len(items[i][0])):
        w = loads.index(min(loads))
        shares[w].append(i)
        loads[w] += len(items[i][0])
    children = []
    for share in shares[1:]:
        child = _fork_compiler([items[i] for i in share])
        if child is None:  # no fork now: this process compiles that share too
            shares[0] += share
        else:
            children.append((child, share))
    results: dict[int, tuple[bytes, float]] = {}
    t0 = time.perf_counter()
    for i in shares[0]:
        results[i] = _emit(*items[i])
    patience = max(CHILD_PATIENCE_S, 10 * (time.perf_counter() - t0))
    for (pid, fd), share in children:
        got = _collect(pid, fd, len(share), patience)
        if got is None:
            got = [_emit(*items[i]) for i in share]
        results.update(zip(share, got))
    return [results[i] for i in range(len(items))]


def _fork_compiler(items: list[tuple[str, int]]) -> tuple[int, int] | None:
    """A forked child compiling `items`, as (pid, the pipe to read); None if fork failed."""
    return _fork(
        lambda: b"".join(_RECORD.pack(len(obj), s) + obj for obj, s in map(_emit_pair, items))
    )


def _emit_pair(item: tuple[str, int]) -> tuple[bytes, float]:
    return _emit(*item)


def _collect(pid: int, fd: int, count: int, patience: float) -> list[tuple[bytes, float]] | None:
    """The `count` objects a forked compiler wrote, or None if it failed, wrote something
    else, or said nothing for `patience` seconds (it is killed then)."""
    data = _read_child(pid, fd, patience)
    if data is None:
        return None
    at, out = 0, []
    for _ in range(count):
        if at + _RECORD.size > len(data):
            return None
        size, seconds = _RECORD.unpack_from(data, at)
        at += _RECORD.size
        out.append((data[at : at + size], seconds))
        at += size
    return out if at == len(data) else None


def disk_cached(key: str, ext: str, make) -> tuple[bytes, str]:
    """`make()`'s bytes, cached in the compile cache folder's `cuda/` under a hash of `key`
    (a cubin or PTX; the LLVM objects have their own path below)."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    path = os.path.join(config.cache, "cuda", digest + ext) if config.cache else None
    data = _read_cached(path, digest) if path else None
    if data is not None:
        return data, "disk"
    data = make()
    if path:
        try:
            write_atomic(path, data + _seal(digest, data))
        except OSError:
            pass  # a read-only cache folder only costs speed
    return data, "compiled"
