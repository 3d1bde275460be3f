"""The cuda backend: devices "cuda:N", through `runtime/cuda.py`, whose implementation
`FUSEGRAD_CUDA` chooses (PyCUDA on a GPU, or the CPU emulator of the generated CUDA C).

Kernels are lowered to the plain loop nest (`pipeline/gpu.py` tiles contractions through
shared memory itself) and rendered as CUDA C; a first (timed) run launches kernel by kernel
and synchronizes once at its end (after each kernel when timed); a cached plan runs from
its prepared launch list without synchronizing.
"""

from __future__ import annotations

import numpy as np

from ..pipeline.lower import lower
from . import cuda
from .backend_registry import HOST, Backend, get_backend, register_backend
from .config import config

# FP32 lanes per multiprocessor, by compute capability major (rated peak = 2 x lanes x
# SMs x clock); sm_80 has 64, every later one 128
_LANES_PER_SM = {7: 64, 8: 64}


class CudaBackend(Backend):
    """A CUDA device; what it runs on is `cuda.backend()`, started on first use."""

    name = "cuda"
    indexed = True
    is_host = False
    guards_windows_in_tiles = True  # pipeline/gpu.py stages conv tiles with bounds checks
    # a value stored inside a reduction's loops (pipeline/schedule.py, rule 8): each thread of a
    # block, warp or split stores the elements of its own share (pipeline/cuda.py,
    # `_Renderer.cooperative`); a store there keeps the kernel off the shared-memory
    # contraction (pipeline/gpu.py, `_contraction`)
    stores_at_source = True
    splits_reductions = True  # a long sum of few outputs: split over blocks (pipeline/gpu.py)

    @property
    def is_host_memory(self) -> bool:  # the emulator's device memory is the CPU's
        try:
            return cuda.backend().host_memory
        except cuda.CudaUnavailable:
            return False

    @property
    def supports_fork(self) -> bool:  # CUDA does not survive a fork; the emulator does
        return self.is_host_memory

    @property
    def description(self) -> str:
        return cuda.backend().description

    @property
    def bandwidth(self) -> float:
        """Rated from the GPU's memory clock and bus width (the emulator: the host's)."""
        gpu = _gpu()
        if gpu is None:
            return get_backend(HOST).bandwidth
        attr, dev = gpu
        khz = dev.get_attribute(attr.MEMORY_CLOCK_RATE)
        bits = dev.get_attribute(attr.GLOBAL_MEMORY_BUS_WIDTH)
        return 2 * khz * 1e3 * bits / 8 / 1e9  # double data rate

    @property
    def peak(self) -> float:
        """Rated float32 GFLOP/s (one fused multiply-add per lane per clock)."""
        gpu = _gpu()
        if gpu is None:
            return get_backend(HOST).peak
        attr, dev = gpu
        sms = dev.get_attribute(attr.MULTIPROCESSOR_COUNT)
        khz = dev.get_attribute(attr.CLOCK_RATE)
        lanes = _LANES_PER_SM.get(dev.compute_capability()[0], 128)
        return 2 * lanes * sms * khz * 1e3 / 1e9

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        """The GPU's (major, minor) compute capability, None on the emulator."""
        gpu = _gpu()
        return None if gpu is None else tuple(gpu[1].compute_capability())

    def why_unavailable(self) -> str | None:
        return cuda.why_unavailable()

    def device_count(self) -> int:
        return cuda.device_count()

    def plan_key(self, device: str, key: tuple) -> tuple:
        # a device plan's kernels belong to the implementation they were built by, and
        # to the fp32 contraction's precision (`fg.backends.cuda.matmul.allow_tf32`)
        return (device, config.cuda, config.allow_tf32, key)

    def copy_key(self, device: str):
        # a copy made on the GPU is no use to the emulator, nor the other way round
        return (device, config.cuda)

    def alloc(self, size: int, dtype, device: str) -> cuda.DeviceBuffer:
        return cuda.DeviceBuffer(size, dtype, device)

    def free(self) -> None:
        cuda.empty_cache()

    def from_host(self, array: np.ndarray, dtype, device: str) -> cuda.DeviceBuffer:
        return cuda.DeviceBuffer.from_numpy(array, dtype, device)

    def lower(self, item):
        return lower(item, tile=False)

    def kernel_symbol(self, loop) -> str:
        return cuda.symbol_of(loop)

    def compile(self, loop) -> cuda.CompiledCudaKernel:
        compiled = cuda.compile_loop(loop)
        loop.name = compiled.symbol  # one name everywhere, as on the CPU
        return compiled

    def compile_many(self, loops: list) -> list[cuda.CompiledCudaKernel]:
        """A new plan's kernels, their code built side by side (`cuda.compile_loops`)."""
        compiled = cuda.compile_loops(loops)
        for loop, kernel in zip(loops, compiled):
            loop.name = kernel.symbol
        return compiled

    def begin(self, plan, leaves: list) -> list:
        leaves = [b if b.device == plan.device else _on_device(b, plan.device) for b in leaves]
        cuda.check_backend(leaves)  # once per run, not per kernel: only inputs can be foreign
        return leaves

    def run(self, plan, leaves: list):
        """A cached plan through its prepared launch list (`runtime/cuda.py` `LaunchList`):
        arguments bound once per set of buffer addresses, no synchronize at the end. With
        `program` off (FUSEGRAD_PROGRAM=0), or `kernel_times` on (inside `fg.profile()`),
        None: the engine then launches kernel by kernel, each waited for, so each has its
        own time."""
        if not config.program or config.kernel_times:
            return None
        return cuda.run_plan(plan, self.begin(plan, leaves)), plan.records

    def arena_layout(self, plan) -> list[tuple[int | None, int, int]] | None:
        """A cached plan's launch list (`runtime/cuda.py` `LaunchList`) puts every value
        that dies inside it, and each kernel's scratch arrays, in one arena; none where
        program is off (or kernels are timed), or on an emulator that keeps each value
        between guard pages."""
        if not config.program or config.kernel_times:
            return None
        return cuda.arena_layout(plan)

    def launch(self, step, outs: list, inputs: list, timed: bool) -> float | None:
        """One kernel of a plan run kernel by kernel; waited for wherever its time is read
        (a first run, program off, inside `fg.profile()`): a launch returns before the GPU
        has run it. Returns its seconds on the GPU (events around it) where measured."""
        wait = timed or not config.program or config.kernel_times
        return cuda.launch(step.record.compiled, outs + inputs, wait)

    def synchronize(self) -> None:
        cuda.synchronize()


def _gpu():
    """The driver's attribute names and the GPU (device 0), or None on the emulator, whose
    figures are the host's."""
    b = cuda.backend()
    return None if b.host_memory else (b.drv.device_attribute, b.drv.Device(0))


def _on_device(buf, device: str):
    """A leaf for a `device` plan: a host table's copy there; anything else is a bug (the
    frontend refuses ops mixing devices when they are written)."""
    if buf.device is None:
        return buf.on(device)
    raise RuntimeError(f"a {buf.device} buffer given to a {device} plan")


register_backend("cuda", CudaBackend)
