"""Run CUDA C on the CPU: the same source nvcc would compile, built by the host g++.

The source is compiled against `cuda_emu.h` (next to this file), which gives it
`threadIdx`/`blockIdx`/`blockDim`/`gridDim`, `__shared__` memory per block,
`__syncthreads()` as a real barrier and the warp shuffles; `cuda_emu_runtime.cpp`
(built once per cache, loaded first) runs every thread of a block as an OS
thread, the blocks one after another. The header a kernel includes is light
(C headers only), so a module compiles in well under a second. It is slow
and exact: the tool that makes every CUDA kernel fusegrad renders testable on a
machine without a GPU (`FUSEGRAD_CUDA=emulate`).

The interface mirrors PyCUDA's, so a runtime can hold either kind of module:

>>> import numpy as np
>>> from fusegrad.runtime.cuda_emulator import EmulatedModule
>>> mod = EmulatedModule('''
... extern "C" __global__ void twice(float* out, const float* x, long long n) {
...   long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
...   if (i < n) out[i] = 2 * x[i];
... }''')
>>> x = np.arange(5, dtype=np.float32); out = np.empty_like(x)
>>> mod.get_function("twice")(out, x, np.int64(5), grid=(1, 1, 1), block=(32, 1, 1))
>>> out.tolist()
[0.0, 2.0, 4.0, 6.0, 8.0]

Device memory is host memory here: a pointer argument is a numpy array, an
object with an integer `ptr` (a fusegrad Buffer) or a raw address; a scalar
argument is a number, converted to the parameter's C type. `shared=` bytes of
dynamic shared memory are what `fg_emu_dynamic_shared()` returns in the kernel
(the GPU's `extern __shared__` array; pipeline/cuda_prelude.py's `FG_DYNAMIC_SHARED`).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import mmap
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from ..pipeline import cache_bound
from ..pipeline.cuda_types import KERNEL_HEAD
from . import forksafe
from .config import config

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "cuda_emu.h")  # what a kernel sees
RUNTIME_SOURCE = os.path.join(HERE, "cuda_emu_runtime.cpp")  # threads and barriers, built once
# no strict aliasing: a kernel reads a float buffer through a float4 pointer, as CUDA allows
CXX_FLAGS = ["-O2", "-fno-strict-aliasing", "-pthread", "-std=c++20", "-shared", "-fPIC", "-w"]

_SCALARS = {
    "bool": ctypes.c_bool,
    "char": ctypes.c_char,
    "signed char": ctypes.c_byte,
    "unsigned char": ctypes.c_ubyte,
    "short": ctypes.c_short,
    "unsigned short": ctypes.c_ushort,
    "int": ctypes.c_int,
    "unsigned int": ctypes.c_uint,
    "unsigned": ctypes.c_uint,
    "long": ctypes.c_long,
    "unsigned long": ctypes.c_ulong,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
}
_MAX_THREADS = 1024
MAX_SHARED = 227 * 1024  # an H100's shared memory per block (dynamic, opted in)


class EmulatorError(RuntimeError):
    """The emulated source did not compile, or a launch was malformed."""


@functools.lru_cache(maxsize=1)
def _compiler_id() -> str:
    try:
        out = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise EmulatorError(f"the CUDA emulator needs the host C++ compiler g++: {e}") from e
    return out.stdout.splitlines()[0]


def _param_type(decl: str) -> str:
    """The C type of one parameter declaration, without its name and `__restrict__`."""
    decl = decl.replace("__restrict__", " ").strip()
    m = re.match(r"(.*?)(\w+)\s*$", decl)
    if m is None or not m.group(1).strip():
        raise EmulatorError(f"cannot read the parameter {decl!r}")
    return " ".join(m.group(1).replace("*", " * ").split()).replace(" *", "*")


def _kernels(source: str) -> dict[str, list[str]]:
    """symbol -> parameter C types, for every `extern "C" __global__` function."""
    out = {}
    for m in KERNEL_HEAD.finditer(source):
        # (the tensor maps sm_90a kernels take after their buffers are not the emulator's)
        params = [p for p in m.group(2).replace("FG_TMAP_PARAMS", "").split(",") if p.strip()]
        out[m.group(1)] = [_param_type(p) for p in params]
    return out


def _launchers(kernels: dict[str, list[str]]) -> str:
    """One `fg_launch_<symbol>(args, grid, block)` per kernel, unpacking `void** args`."""
    parts = []
    for name, types in kernels.items():
        unpack = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
        parts.append(
            f'extern "C" void fg_launch_{name}(void** args, unsigned gx, unsigned gy, '
            "unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared) {\n"
            f"  fg_emu_launch([](void** a) {{ {name}({unpack}); }}, args, "
            "dim3{gx, gy, gz}, dim3{bx, by, bz}, shared);\n}"
        )
    return "\n".join(parts)


def _compile(cmd: list[str], out: str, text: str | None = None) -> None:
    """Run g++ `cmd` writing `-o` to a temporary file, renamed to `out` once it is whole."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=os.path.dirname(out))
    os.close(fd)
    try:
        r = subprocess.run([*cmd, "-o", tmp], input=text, capture_output=True, text=True)
        if r.returncode:
            lines = (text or "").splitlines()
            numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(lines))
            raise EmulatorError(f"g++ could not compile the CUDA source:\n{r.stderr}\n{numbered}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _copy_atomic(src: str, dst: str) -> None:
    """Copy `src` to `dst` through a temporary file of this call's own, renamed into place:
    processes sharing a cache folder may copy at once, and none may see a partial file or
    move another's temporary away."""
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=os.path.dirname(dst))
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_runtimes: dict[str, ctypes.CDLL] = {}
_include_dirs: dict[str, list[str]] = {}  # cache folder -> g++'s -I options for a kernel


def _load_runtime(base: str, fingerprint: str) -> list[str]:
    """Build (once per cache) and load the emulator's runtime library, globally, so that the
    kernel modules loaded after it find `threadIdx`, `fg_emu_launch`, ... in it.

    Also builds the header precompiled (`cuda_emu.h.gch`, in a folder searched before
    this one): parsing the C++ math headers is most of a kernel's compile (0.45 s of
    g++ without it, 0.19 s with it, measured on the 2-core CI machine). Returns the
    `-I` options a kernel module compiles with."""
    digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
    path = os.path.join(base, f"runtime-{digest}.so")
    if path in _runtimes:
        return _include_dirs[path]
    if not os.path.exists(path):
        with open(RUNTIME_SOURCE) as f:
            _compile(["g++", *CXX_FLAGS, "-I", HERE, "-x", "c++", "-"], path, f.read())
    pch_dir = os.path.join(base, f"pch-{digest}")
    pch = os.path.join(pch_dir, "cuda_emu.h.gch")
    if not os.path.exists(pch):
        # g++ takes a .gch only next to its header (an invalid one falls back to the copy)
        os.makedirs(pch_dir, exist_ok=True)
        copy = os.path.join(pch_dir, "cuda_emu.h")
        _copy_atomic(HEADER, copy)
        _compile(["g++", *CXX_FLAGS, "-x", "c++-header", copy], pch)
    _runtimes[path] = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    _include_dirs[path] = ["-I", pch_dir, "-I", HERE]
    return _include_dirs[path]


_build_lock = forksafe.Lock()
_scratch_dir: str | None = None


def _cache_dir() -> str:
    global _scratch_dir
    if config.cache:
        return os.path.join(config.cache, "cuda_emu")
    if _scratch_dir is None:  # the cache is off: this process's own folder, removed at exit
        _scratch_dir = tempfile.mkdtemp(prefix="fusegrad_cuda_emu_")
        atexit.register(shutil.rmtree, _scratch_dir, ignore_errors=True)
    return _scratch_dir


class EmulatedModule:
    """CUDA C source compiled for the CPU emulator, like `pycuda.compiler.SourceModule`.

    The shared library is cached on disk (in fusegrad's cache folder) under a hash
    of the source, the header and the compiler, so a source compiles once.
    """

    def __init__(self, source: str):
        self.source = source
        self.kernels = _kernels(source)
        if not self.kernels:
            raise EmulatorError('no `extern "C" __global__` function in the source')
        with open(HEADER) as f, open(RUNTIME_SOURCE) as g:
            fingerprint = "\0".join([f.read(), g.read(), _compiler_id(), *CXX_FLAGS])
        text = f'#include "cuda_emu.h"\n{source}\n{_launchers(self.kernels)}\n'
        key = hashlib.sha256(f"{text}\0{fingerprint}".encode()).hexdigest()
        with _build_lock:  # (modules build on several threads: one scratch folder, made once)
            base = _cache_dir()
            includes = _load_runtime(base, fingerprint)
        path = os.path.join(base, key[:2], key + ".so")
        self.built = not os.path.exists(path)  # False: loaded from the disk cache
        if not self.built:
            try:
                self.library = ctypes.CDLL(path)
                cache_bound.touched(path)  # (used now: the last to be trimmed)
            except OSError:  # trimmed from the cache since (pipeline/cache_bound.py)
                self.built = True
        if self.built:  # (outside the lock: modules may build side by side; each lands whole)
            _compile(["g++", *CXX_FLAGS, *includes, "-x", "c++", "-"], path, text)
            self.library = ctypes.CDLL(path)
            cache_bound.wrote(os.path.getsize(path))

    def get_function(self, symbol: str) -> EmulatedFunction:
        """The kernel named `symbol`, to call with arguments and `grid=`, `block=`."""
        if symbol not in self.kernels:
            raise EmulatorError(f"no kernel {symbol!r}; the module has {sorted(self.kernels)}")
        entry = getattr(self.library, f"fg_launch_{symbol}")
        entry.restype = None
        entry.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7
        return EmulatedFunction(symbol, self.kernels[symbol], entry)


def _guard(symbol: str) -> None:
    """Name the kernel a guard-page fault will report (FUSEGRAD_EMU_GUARD)."""
    for library in _runtimes.values():
        library.fg_emu_guard(symbol.encode())


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PROT_NONE = 0


def guarded_array(nbytes: int, dtype: np.dtype, before: bool = False) -> np.ndarray | None:
    """A new array of `nbytes` bytes (FUSEGRAD_EMU_GUARD) that ends where a page no access is
    allowed to begins, give or take the up to 15 bytes that keep it 16-byte aligned (the
    kernels' vector loads want that): a kernel that reads or writes past its end stops
    there with SIGSEGV, and the emulator's runtime names the kernel. `before`: the array
    starts where such a page ends instead (FUSEGRAD_EMU_GUARD=2), for an access before its
    first element. Each array has pages
    of its own (two mappings: Linux allows `vm.max_map_count`, 65530 by default, in all),
    never shared with a forked process nor put in the CPU buffers' pool; the memory goes
    when the array does. None where the system refuses more mappings
    (the caller then allocates as usual; `guard_refusals` counts them).

    >>> a = guarded_array(40, np.dtype(np.float32))
    >>> a.size, a.ctypes.data % 16
    (10, 0)
    """
    global guard_refusals
    page = mmap.PAGESIZE
    body = -(-max(nbytes, 1) // page) * page
    try:
        # private: a forked process (a DataLoader worker) must not share it with this one
        region = mmap.mmap(-1, body + page, flags=mmap.MAP_PRIVATE)
    except OSError:
        guard_refusals += 1
        return None
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    if _libc.mprotect(base if before else base + body, page, PROT_NONE) != 0:
        guard_refusals += 1
        return None
    start = page if before else (body - nbytes) & ~15
    return np.frombuffer(region, np.uint8, nbytes, start).view(dtype)


guard_refusals = 0  # guarded arrays the system refused (too many mappings): plain instead


def _dims(value, what: str) -> tuple[int, int, int]:
    dims = tuple(int(v) for v in value) + (1,) * (3 - len(value))
    if len(dims) != 3 or min(dims) < 1:
        raise EmulatorError(f"{what}={value!r}: expected up to three positive sizes")
    return dims


def _address(arg, symbol: str, i: int) -> int:
    if isinstance(arg, np.ndarray):
        return arg.ctypes.data
    ptr = getattr(arg, "ptr", None)
    if ptr is not None:
        return int(ptr)
    if isinstance(arg, (int, np.integer)) and not isinstance(arg, bool):
        return int(arg)
    raise EmulatorError(
        f"{symbol}: argument {i} is a pointer; pass an array, a buffer or an address, "
        f"not {type(arg).__name__}"
    )


class EmulatedFunction:
    """One kernel of an `EmulatedModule`: `f(*args, grid=(gx, gy, gz), block=(bx, by, bz))`."""

    def __init__(self, symbol: str, types: list[str], entry):
        self.symbol, self.types, self.entry = symbol, types, entry

    def __call__(self, *args, grid=(1, 1, 1), block=(1, 1, 1), shared: int = 0) -> None:
        if len(args) != len(self.types):
            raise EmulatorError(
                f"{self.symbol} takes {len(self.types)} arguments ({', '.join(self.types)}), "
                f"got {len(args)}"
            )
        if not 0 <= shared <= MAX_SHARED:
            raise EmulatorError(f"shared={shared}: at most {MAX_SHARED} bytes of shared memory")
        grid, block = _dims(grid, "grid"), _dims(block, "block")
        if block[0] * block[1] * block[2] > _MAX_THREADS or block[2] > 64:
            raise EmulatorError(f"block={block}: at most {_MAX_THREADS} threads (z at most 64)")
        if grid[1] > 65535 or grid[2] > 65535 or grid[0] >= 2**31:
            raise EmulatorError(f"grid={grid} is beyond CUDA's limits")
        slots = []
        for i, (arg, t) in enumerate(zip(args, self.types)):
            if t.endswith("*"):
                slots.append(ctypes.c_void_p(_address(arg, self.symbol, i)))
                continue
            base = t.removeprefix("const ").strip()
            ctype = _SCALARS.get(base)
            if ctype is None:
                raise EmulatorError(f"{self.symbol}: parameter type {t!r} is not supported")
            integral = ctype not in (ctypes.c_float, ctypes.c_double)
            if integral and isinstance(arg, (float, np.floating)):
                raise EmulatorError(f"{self.symbol}: argument {i} is {t}, got the float {arg!r}")
            slots.append(ctype(arg.item() if isinstance(arg, np.generic) else arg))
        pointers = (ctypes.c_void_p * max(1, len(slots)))(
            *[ctypes.cast(ctypes.pointer(s), ctypes.c_void_p) for s in slots]
        )
        if config.emu_guard:
            _guard(self.symbol)
        self.entry(pointers, *grid, *block, shared)
