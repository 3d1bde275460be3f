"""Why the wgmma pipeline's Tensor Memory Accelerator staging would not launch: a probe for
an sm_90 GPU (one short device call), run before turning `codegen.cuda.WGMMA_TMA` on.

On an H200 (session 28) every launch of that kernel failed with "too many resources
requested for launch" (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, which the CUDA docs say usually
means too many arguments), while the same pipeline staged by cp.async launched. The kernel
takes two 128-byte, 64-byte aligned `__grid_constant__` tensor maps after its pointers, in
the parameter buffer PyCUDA hands `cuLaunchKernel` through its `extra` argument. Each line
below is one way to pass a map; it prints ok or the driver's error:

1. `echo`: a kernel that copies its map parameter out, launched by PyCUDA (`extra` buffer);
2. the same launched by ctypes' `cuLaunchKernel` with `kernelParams` (one pointer per
   parameter: the driver lays them out);
3. `tma_param`: a TMA copy of a 32 x 32 float box through a map parameter, by PyCUDA;
4. the same by `kernelParams`;
5. `tma_global`: the map in global memory instead (a pointer parameter), by PyCUDA.

Run:  python3 scripts/gpu_tma_probe.py
      (an sm_90 GPU, with fusegrad and PyCUDA installed as scripts/gpu.sh installs them)
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np

SOURCE = r"""
struct __align__(64) tmap { unsigned long long q[16]; };
__device__ __forceinline__ unsigned smem(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ void tma_box(float* out, const tmap* m) {
  __shared__ __align__(128) float box[32 * 32];
  __shared__ __align__(8) unsigned long long bar;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 4096;"
                 :: "r"(smem(&bar)) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem(box)), "l"(m), "r"(8), "r"(4), "r"(smem(&bar)) : "memory");
  }
  unsigned done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(smem(&bar)) : "memory");
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) out[i] = box[i];
}
extern "C" __global__ void echo(unsigned long long* out, const __grid_constant__ tmap m) {
  if (threadIdx.x < 16) out[threadIdx.x] = m.q[threadIdx.x];
}
extern "C" __global__ void tma_param(float* out, const __grid_constant__ tmap m) {
  tma_box(out, &m);
}
extern "C" __global__ void tma_global(float* out, const tmap* m) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" :: "l"(m) : "memory");
  tma_box(out, m);
}
"""


def encode_float_map(address: int, width: int, height: int) -> bytes:
    """A 2-D float32 map over a width x height row-major buffer, 32 x 32 boxes, no swizzle
    (fusegrad's encoder, `runtime/tensor_map.py`)."""
    from fusegrad.runtime import tensor_map  # (fusegrad is installed where the probe runs)

    strides = (width * 4,)
    return tensor_map.encode_tiled(address, "float32", (width, height), strides, (32, 32),
                                   tensor_map.SWIZZLE_NONE)  # fmt: skip


def ctypes_launch(cubin: bytes, name: str, out_ptr: int, map_bytes: bytes) -> None:
    """`name`(out, map) launched by the driver's cuLaunchKernel with kernelParams."""
    lib = ctypes.CDLL("libcuda.so.1")
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
    check(lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), "GetFunction")
    out_arg = ctypes.c_uint64(out_ptr)
    raw = ctypes.create_string_buffer(128 + 64)
    at = ctypes.addressof(raw) + (-ctypes.addressof(raw) % 64)
    ctypes.memmove(at, map_bytes, 128)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(out_arg), at)
    u = ctypes.c_uint
    status = lib.cuLaunchKernel(fn, u(1), u(1), u(1), u(128), u(1), u(1), u(0), None, params,
                                None)  # fmt: skip
    check(status, "cuLaunchKernel")
    check(lib.cuCtxSynchronize(), "cuCtxSynchronize")


def check(status: int, what: str) -> None:
    if status:
        raise RuntimeError(f"{what}: CUresult {status}")


def main(number: int) -> None:
    import pycuda.autoinit  # noqa: F401  (a context on device 0)
    import pycuda.driver as drv
    from pycuda.compiler import compile as nvcc_compile

    cubin = nvcc_compile(SOURCE, arch="sm_90a", no_extern_c=True)
    module = drv.module_from_buffer(cubin)
    width, height = 64, 64
    data = np.arange(width * height, dtype=np.float32)
    src = drv.to_device(data)
    want = data.reshape(height, width)[4:36, 8:40].reshape(-1)  # the box at (x 8, y 4)
    tmap = encode_float_map(int(src), width, height)
    pattern = struct.pack("16Q", *range(100, 116))

    def pycuda_launch(name: str, arg: bytes, out) -> None:
        buf = struct.pack("P", int(out)) + bytes(56) + arg
        module.get_function(name)._launch_kernel((1, 1, 1), (128, 1, 1), buf, 0, None)
        drv.Context.synchronize()

    def run(label: str, call, out, want_values) -> None:
        try:
            call()
            got = drv.from_device(out, want_values.shape, want_values.dtype)
            ok = np.array_equal(got, want_values)
            print(f"{label:58} {'ok' if ok else 'WRONG VALUES'}")
        except Exception as e:  # (the driver's error, in whatever type PyCUDA raises)
            print(f"{label:58} failed: {e}")

    words = np.arange(100, 116, dtype=np.uint64)
    out = drv.mem_alloc(32 * 32 * 4)
    gmap = drv.to_device(np.frombuffer(tmap, np.uint8).copy())

    def global_launch() -> None:
        buf = struct.pack("PP", int(out), int(gmap))
        module.get_function("tma_global")._launch_kernel((1, 1, 1), (128, 1, 1), buf, 0, None)
        drv.Context.synchronize()

    checks = {
        1: ("echo, map parameter, PyCUDA extra buffer",
            lambda: pycuda_launch("echo", pattern, out), words),
        2: ("echo, map parameter, ctypes kernelParams",
            lambda: ctypes_launch(cubin, "echo", int(out), pattern), words),
        3: ("TMA, map parameter, PyCUDA extra buffer",
            lambda: pycuda_launch("tma_param", tmap, out), want),
        4: ("TMA, map parameter, ctypes kernelParams",
            lambda: ctypes_launch(cubin, "tma_param", int(out), tmap), want),
        5: ("TMA, map in global memory, PyCUDA extra buffer", global_launch, want),
    }  # fmt: skip
    label, call, values = checks[number]
    run(f"{number} {label}", call, out, values)


if __name__ == "__main__":
    import subprocess
    import sys

    if len(sys.argv) > 1:
        main(int(sys.argv[1]))
    else:  # each check in a process of its own: a fault in one leaves the others' context
        for n in range(1, 6):
            r = subprocess.run([sys.executable, __file__, str(n)], capture_output=True, text=True,
                               timeout=120)  # fmt: skip
            print(r.stdout.strip() or f"{n} crashed: {r.stderr.strip()[-500:]}", flush=True)
