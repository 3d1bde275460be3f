"""Tensor maps for the Tensor Memory Accelerator (sm_90): the 128-byte descriptors a kernel's
bulk copies read (`codegen.cuda.TensorMap` says what each covers), encoded by the driver's
`cuTensorMapEncodeTiled` for a launch's buffer addresses and packed after its pointer
arguments, as `__grid_constant__` parameters are laid out (64-byte aligned).

PyCUDA does not wrap the call, so it goes through ctypes to the driver library PyCUDA has
already loaded (`libcuda.so.1`). A buffer that is not 16-byte aligned gets a map of zeros:
the kernel tests the alignment itself and copies such buffers another way, never reading
the map.
"""

from __future__ import annotations

import ctypes
import functools
import struct

# cuda.h's CUtensorMapDataType, CUtensorMapSwizzle and CUtensorMapL2promotion values
DATA_TYPE = {"float16": 6, "float32": 7, "bfloat16": 9}
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
    """The 128 bytes of `spec`'s map (a `codegen.cuda.TensorMap`) over the buffer at
    `address`: zeros where the view's start is not 16-byte aligned."""
    start = address + spec.offset * 2  # (16-bit values)
    if start % 16:
        return bytes(MAP_BYTES)
    return encode_tiled(start, spec.dtype, spec.dims, spec.strides, spec.box, SWIZZLE_128B)


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
