"""Why the wgmma pipeline's Tensor Memory Accelerator staging would not launch: a probe for
an sm_90 GPU (one short device call).

On an H200 every launch of that kernel failed with "too many resources
requested for launch" (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), while the same pipeline staged
by cp.async launched. The kernel takes two 128-byte, 64-byte aligned `__grid_constant__`
tensor maps after its pointers. Each line below is one way to pass a map; it prints ok or
the driver's error:

1. `echo`: a kernel that copies its map parameter out, launched by PyCUDA (its `extra`
   buffer: all the parameters in one buffer);
2. the same launched by ctypes' `cuLaunchKernel` with `kernelParams` (one pointer per
   parameter: the driver lays them out);
3. `tma_param`: a TMA copy of a 32 x 32 float box through a map parameter, by PyCUDA;
4. the same by `kernelParams`;
5. `tma_global`: the map in global memory instead (a pointer parameter), by PyCUDA;
6. fusegrad's own wgmma kernel with TMA staging (a 4096 x 256 by 256 x 4096 bfloat16
   product), its function attributes printed, launched by PyCUDA's `extra` buffer;
7. the same kernel launched by ctypes' `cuLaunchKernel` with `kernelParams`;
8. the same product staged by cp.async (`WGMMA_TMA` off), by PyCUDA, its parameter
   buffer packed as the maps' kernels' are (the pointers padded to 64 bytes).

What it found (H200, driver 580.159.04): 1, 3 and 6 fail ("too many
resources"), 2, 4, 5 and 7 run and give the right values. The driver refuses a
`__grid_constant__` kernel's parameters in one `extra` buffer, whatever the kernel does, so
fusegrad launches such kernels with `kernelParams` (`runtime/tensor_map.py`'s
`ParamsLaunch`). 8 fails too, with the same error: its buffer is 64 bytes where the
kernel's parameters are 24 (the runtime's own launches of that kernel pass 24 and run).

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


def wgmma_kernel(tma: bool):
    """fusegrad's kernel of a 4096 x 256 by 256 x 4096 bfloat16 product, the wgmma
    pipeline staged by TMA or by cp.async, with its inputs (numpy) and its maps' specs."""
    import ml_dtypes

    import fusegrad as fg
    from fusegrad.pipeline import cuda as cuda_gen
    from fusegrad.pipeline import cuda_wgmma
    from fusegrad.pipeline.lower import lower
    from fusegrad.pipeline.schedule import schedule
    from fusegrad.runtime.engine import engine

    cuda_wgmma.WGMMA_TMA = tma
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4096, 256), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 4096), dtype=np.float32).astype(ml_dtypes.bfloat16)
    expr = fg.tensor(a, device="cuda") @ fg.tensor(b, device="cuda")
    items = schedule([expr.node], engine.has_value_predicate())
    k = cuda_gen.cuda_kernel(lower(items[-1], tile=False), "k", False, 227 * 1024)
    return k, a, b


def kernel_check(tma: bool, how: str) -> None:
    """Checks 6-8: fusegrad's wgmma kernel launched `how` ("pycuda" or "ctypes")."""
    import pycuda.autoinit  # noqa: F401  (a context on device 0)
    import pycuda.driver as drv
    from pycuda.compiler import compile as nvcc_compile

    from fusegrad.runtime import tensor_map

    k, a, b = wgmma_kernel(tma)
    print(f"  maps {len(k.tensor_maps)}, grid {k.grid}, block {k.block}, "
          f"dynamic shared {k.shared_bytes}, static {k.static_shared_bytes}")  # fmt: skip
    cubin = nvcc_compile(k.source, arch="sm_90a", no_extern_c=True,
                         options=["--diag-suppress", "177,550"])  # fmt: skip
    fn = drv.module_from_buffer(cubin).get_function("k")
    fa = drv.function_attribute
    for name in ("NUM_REGS", "MAX_THREADS_PER_BLOCK", "SHARED_SIZE_BYTES", "CONST_SIZE_BYTES",
                 "LOCAL_SIZE_BYTES", "MAX_DYNAMIC_SHARED_SIZE_BYTES"):  # fmt: skip
        print(f"  {name} = {fn.get_attribute(getattr(fa, name))}")
    fn.set_attribute(fa.MAX_DYNAMIC_SHARED_SIZE_BYTES, k.shared_bytes)
    print(f"  set to {fn.get_attribute(fa.MAX_DYNAMIC_SHARED_SIZE_BYTES)}")
    out = drv.mem_alloc(4096 * 4096 * 2)
    da, db = drv.to_device(a.view(np.uint16)), drv.to_device(b.view(np.uint16))
    ptrs = [int(out), int(da), int(db)]
    params = tensor_map.pack(ptrs, k.tensor_maps)
    print(f"  parameter bytes {len(params)}")
    if how == "pycuda":
        fn._launch_kernel(k.grid, k.block, tensor_map.host_aligned(params), k.shared_bytes, None)
    else:
        lib = ctypes.CDLL("libcuda.so.1")
        module, cfn = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
        check(lib.cuModuleGetFunction(ctypes.byref(cfn), module, b"k"), "GetFunction")
        check(lib.cuFuncSetAttribute(cfn, 8, k.shared_bytes), "cuFuncSetAttribute")  # 8: dynamic
        raw = ctypes.create_string_buffer(len(params) + 64)
        at = ctypes.addressof(raw) + (-ctypes.addressof(raw) % 64)
        ctypes.memmove(at, params, len(params))
        offsets = [0, 8, 16] + [64 + 128 * i for i in range(len(k.tensor_maps))]
        pointers = (ctypes.c_void_p * len(offsets))(*[at + o for o in offsets])
        u = ctypes.c_uint
        status = lib.cuLaunchKernel(cfn, *map(u, k.grid), *map(u, k.block), u(k.shared_bytes),
                                    None, pointers, None)  # fmt: skip
        check(status, "cuLaunchKernel")
    drv.Context.synchronize()
    import ml_dtypes

    got = drv.from_device(out, (4096, 4096), np.uint16).view(ml_dtypes.bfloat16)
    got = got.astype(np.float32)
    want = a.astype(np.float32) @ b.astype(np.float32)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"  relative error {err:.2e}: {'ok' if err < 1e-2 else 'WRONG VALUES'}")


def check(status: int, what: str) -> None:
    if status:
        raise RuntimeError(f"{what}: CUresult {status}")


def main(number: int) -> None:
    if number >= 6:
        tma, how = {6: (True, "pycuda"), 7: (True, "ctypes"), 8: (False, "pycuda")}[number]
        print(f"{number} fusegrad's wgmma kernel, {'TMA' if tma else 'cp.async'}, {how}")
        try:
            kernel_check(tma, how)
        except Exception as e:  # (the driver's error, in whatever type PyCUDA raises)
            print(f"  failed: {type(e).__name__}: {e}")
        return
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
        for n in range(1, 9):
            r = subprocess.run([sys.executable, __file__, str(n)], capture_output=True, text=True,
                               timeout=120)  # fmt: skip
            print(r.stdout.strip() or f"{n} crashed: {r.stderr.strip()[-500:]}", flush=True)
