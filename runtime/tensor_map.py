"""Tensor maps for the Tensor Memory Accelerator (sm_90): the 128-byte descriptors a kernel's
bulk copies read (`pipeline.cuda.TensorMap` says what each covers), encoded by the driver's
`cuTensorMapEncodeTiled` for a launch's buffer addresses and packed after its pointer
arguments, as `__grid_constant__` parameters are laid out (64-byte aligned).

PyCUDA does not wrap the call, so it goes through ctypes to the driver library PyCUDA has
already loaded (`libcuda.so.1`). A buffer that is not 16-byte aligned gets a map of zeros:
the kernel tests the alignment itself and copies such buffers another way, never reading
the map.

Such a kernel is launched through ctypes as well (`ParamsLaunch`): `cuLaunchKernel` with
`kernelParams`, one pointer per parameter. PyCUDA's launches hand the driver all the
parameters as one `extra` buffer, and for a kernel with a `__grid_constant__` parameter the
driver refuses that with "too many resources requested for launch" (an H200 with driver
580.159; `scripts/gpu_tma_probe.py` shows it, and that the same kernel launched with
`kernelParams` runs and gives the right values).
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct

# cuda.h's CUtensorMapDataType, CUtensorMapSwizzle and CUtensorMapL2promotion values
DATA_TYPE = {"float16": 6, "float32": 7, "bfloat16": 9}
DATA_SIZE = {"float16": 2, "float32": 4, "bfloat16": 2}  # bytes a value
SWIZZLE_NONE, SWIZZLE_128B = 0, 3
_L2_PROMOTION_256B = 3
MAP_BYTES = 128


class TensorMapError(RuntimeError):
    """The driver refused to encode a tensor map (a kernel that needs it cannot run)."""


@functools.lru_cache(maxsize=1)
def _encoder():
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    u32, p = ctypes.c_uint32, ctypes.c_void_p
    fn.argtypes = [p, ctypes.c_int, u32, p, p, p, p, p, ctypes.c_int, ctypes.c_int,
                   ctypes.c_int, ctypes.c_int]  # fmt: skip
    fn.restype = ctypes.c_int
    return fn


def encode(spec, address: int) -> bytes:
    """The 128 bytes of `spec`'s map (a `pipeline.cuda.TensorMap`) over the buffer at
    `address`: where the view's start is not 16-byte aligned, zeros, or with `realign` a map
    from the aligned address before it (`realigned`)."""
    start, dims = realigned(spec, address)
    if start % 16:
        return bytes(MAP_BYTES)
    return encode_tiled(start, spec.dtype, dims, spec.strides, spec.box, SWIZZLE_128B)


def realigned(spec, address: int) -> tuple[int, tuple]:
    """(start, dims) of `spec`'s map over the buffer at `address`: the view's own, or with
    `spec.realign` and a start a whole number of values s past a 16-byte boundary, that
    boundary and dimension 0 longer by s (the kernel reads its coordinate s further on, so
    the s values before the view are never read, and reads past its end are still zeros)."""
    size = DATA_SIZE[spec.dtype]
    start, dims = address + spec.offset * size, tuple(spec.dims)
    shift = start % 16
    if shift and spec.realign and shift % size == 0:
        start, dims = start - shift, (dims[0] + shift // size, *dims[1:])
    return start, dims


def encode_tiled(start: int, dtype: str, dims, strides, box, swizzle: int) -> bytes:
    """`cuTensorMapEncodeTiled`'s 128 bytes for a `dtype` tensor at `start` (16-byte
    aligned): `dims` elements along each dimension (innermost first), `strides` bytes
    between the steps of dimensions 1.., copied `box` elements at a time, `swizzle` one of
    cuda.h's CUtensorMapSwizzle values; reads outside `dims` give zeros."""
    rank = len(dims)
    out = ctypes.create_string_buffer(MAP_BYTES + 64)
    aligned = -ctypes.addressof(out) % 64  # the driver writes a 64-byte aligned CUtensorMap
    c_dims = (ctypes.c_uint64 * rank)(*dims)
    c_strides = (ctypes.c_uint64 * max(rank - 1, 1))(*strides)
    c_box = (ctypes.c_uint32 * rank)(*box)
    ones = (ctypes.c_uint32 * rank)(*([1] * rank))
    status = _encoder()(
        ctypes.addressof(out) + aligned, DATA_TYPE[dtype], rank, start,
        ctypes.addressof(c_dims), ctypes.addressof(c_strides), ctypes.addressof(c_box),
        ctypes.addressof(ones), 0, swizzle, _L2_PROMOTION_256B, 0,
    )  # fmt: skip
    if status != 0:
        raise TensorMapError(
            f"cuTensorMapEncodeTiled refused a {dtype} map of dims {tuple(dims)}, strides "
            f"{tuple(strides)} bytes, box {tuple(box)} (CUresult {status})"
        )
    return out.raw[aligned : aligned + MAP_BYTES]


def host_aligned(data: bytes):
    """`data` in a 64-byte aligned host buffer (the maps' alignment, in case the driver reads
    a launch's parameter buffer as laid out in memory)."""
    import numpy as np  # (numpy is imported by then: the runtime's buffers are numpy's)

    raw = np.empty(len(data) + 64, np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start : start + len(data)]
    out[:] = np.frombuffer(data, np.uint8)
    return out


def pack(ptrs: list[int], specs, encoder=encode) -> bytes:
    """A launch's parameter bytes: the pointers, then each map 64-byte aligned
    (`encoder(spec, address)`: its 128 bytes)."""
    head = struct.pack("P" * len(ptrs), *ptrs)
    head += bytes(-len(head) % 64)
    return head + b"".join(encoder(m, ptrs[m.param]) for m in specs)


class LaunchFailed(RuntimeError):
    """`cuLaunchKernel` (or loading the kernel's module for it) returned an error."""


def _driver_calls(library):
    """libcuda's module, attribute and launch entry points, typed."""
    p, u = ctypes.c_void_p, ctypes.c_uint
    signatures = {
        "cuModuleLoadData": [ctypes.POINTER(p), ctypes.c_char_p],
        "cuModuleGetFunction": [ctypes.POINTER(p), p, ctypes.c_char_p],
        "cuFuncSetAttribute": [p, ctypes.c_int, ctypes.c_int],
        "cuLaunchKernel": [p, u, u, u, u, u, u, u, p, ctypes.POINTER(p), ctypes.POINTER(p)],
        "cuModuleUnload": [p],
    }
    calls = {}
    for name, argtypes in signatures.items():
        fn = getattr(library, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        calls[name] = fn
    return calls


_MAX_DYNAMIC_SHARED = 8  # cuda.h's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class ParamsLaunch:
    """A kernel that takes tensor maps (`pack`'s layout: `pointers` pointers, then `maps`
    128-byte maps 64-byte aligned), launched by the driver's `cuLaunchKernel` with one
    pointer per parameter (`kernelParams`) into the packed bytes. Called as PyCUDA's
    `Function._launch_kernel(grid, block, params, shared, stream)` is, so a launch list
    or a stream capture takes either. Its own module is loaded from the kernel's `cubin`
    into the current context (PyCUDA's functions have no handle to pass the driver)."""

    __slots__ = ("calls", "module", "function", "offsets", "pid")

    def __init__(self, cubin: bytes, symbol: str, pointers: int, maps: int, shared: int,
                 library=None):  # fmt: skip
        self.calls = _driver_calls(library or ctypes.CDLL("libcuda.so.1"))
        self.pid = os.getpid()  # (a forked child must not call CUDA: runtime/cuda.py)
        self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        self._check("cuModuleLoadData", ctypes.byref(self.module), cubin)
        self._check("cuModuleGetFunction", ctypes.byref(self.function), self.module,
                    symbol.encode())  # fmt: skip
        if shared:  # past 48 KiB a kernel must opt in
            self._check("cuFuncSetAttribute", self.function, _MAX_DYNAMIC_SHARED, shared)
        head = 8 * pointers + -(8 * pointers) % 64
        self.offsets = [8 * i for i in range(pointers)]
        self.offsets += [head + MAP_BYTES * i for i in range(maps)]

    def _check(self, name: str, *args) -> None:
        status = self.calls[name](*args)
        if status != 0:
            raise LaunchFailed(f"{name} returned CUresult {status}")

    def __call__(self, grid, block, params, shared: int, stream) -> None:
        """Launch on `stream` (a PyCUDA stream, or None: the legacy default stream) with
        `params`, `pack`'s bytes in a buffer that stays alive through the call (the driver
        copies them at launch, so a captured graph keeps its own)."""
        base = params.ctypes.data if hasattr(params, "ctypes") else ctypes.addressof(params)
        pointers = (ctypes.c_void_p * len(self.offsets))(*[base + o for o in self.offsets])
        handle = None if stream is None else stream.handle
        grid, block = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
        self._check("cuLaunchKernel", self.function, *grid, *block, shared, handle, pointers,
                    None)  # fmt: skip

    def __del__(self):
        # (a module of the context: unloading after the context is gone returns an error
        # code, which there is no one to tell; in a forked child, CUDA is not called)
        if getattr(self, "module", None) and self.module.value and self.pid == os.getpid():
            self.calls["cuModuleUnload"](self.module)
