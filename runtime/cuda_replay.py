"""Run one dumped kernel's CUDA C alone: `python -m fusegrad.replay dir/NNN_name --cu`.

A dump records beside each kernel's `.cu` how the cuda backend launches it
(`runtime/dump.py`, `cuda_launch_record`: each launch's grid, block and shared memory, the
scratch buffers, the tensor maps of an sm_90a build). `run_cuda_source` compiles a CUDA C
text (the dumped `.cu`, or a person's edit of it) for the GPU PyCUDA drives where one is
present, else for the CPU emulator (`runtime/cuda_emulator.py`), and launches it with those
settings on given inputs as `runtime/cuda.py` launches a kernel: outputs, inputs, then
scratch, each launch in order. `frontend/replay.py` checks what it returns.

The emulator runs every thread of a block as an OS thread: its times are the emulator's
on the CPU, nothing like a GPU's (`CudaRun.emulated` says which one ran).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import DType, to_dtype
from ..pipeline.cuda import CudaKernel, CudaLaunch, TensorMap
from . import cuda
from .config import config
from .cuda_emulator import EmulatorError

EMULATOR = "the CUDA emulator on the CPU (runtime/cuda_emulator.py)"


class CudaReplayError(ValueError):
    """CUDA C that cannot run here: it does not compile, or lacks a launch's kernel."""


@dataclass
class CudaRun:
    """What a run of CUDA C found: each output's values (flat), the median seconds of a
    launch (synchronized), and what ran it."""

    outputs: list[np.ndarray]
    seconds: float
    device: str  # the cuda backend's description
    emulated: bool  # the CPU emulator ran it: `seconds` is no GPU's time


def kernel_from_record(record: dict, source: str, name: str = "replay") -> CudaKernel:
    """The `CudaKernel` a dump's `cuda_launch_record` describes, over `source`.

    >>> rec = {"launches": [{"symbol": "k", "grid": [4, 1, 1], "block": [256, 1, 1],
    ...        "shared_bytes": 0}], "scratch": [], "tensor_maps": []}
    >>> kernel_from_record(rec, "...").launches[0].grid
    (4, 1, 1)
    """
    launches = tuple(
        CudaLaunch(ln["symbol"], tuple(ln["grid"]), tuple(ln["block"]), ln["shared_bytes"])
        for ln in record["launches"]
    )
    scratch = [(to_dtype(s["dtype"]), s["elements"]) for s in record["scratch"]]
    maps = tuple(
        TensorMap(**{k: tuple(v) if isinstance(v, list) else v for k, v in m.items()})
        for m in record["tensor_maps"]
    )
    return CudaKernel(name, source, [], launches, scratch, tensor_maps=maps)


def _implementation(emulate: bool) -> str:
    """ "pycuda" where a GPU runs (and FUSEGRAD_CUDA allows it), else "emulate"."""
    if emulate or config.cuda != "pycuda":
        return "emulate"
    return "pycuda" if cuda.why_unavailable() is None else "emulate"


def run_cuda_source(
    source: str,
    record: dict,
    inputs: list[tuple[np.ndarray, DType]],
    outputs: list[tuple[int, DType]],
    runs: int = 10,
    emulate: bool = False,
) -> CudaRun:
    """Compile `source` and launch it `runs` times as `record` (a dump's "cuda_launches") says, on
    `inputs` (values and dtypes, in the kernel's order) into new `outputs` (elements and
    dtypes), on the GPU where PyCUDA has one (unless `emulate`), else on the emulator."""
    kernel = kernel_from_record(record, source)
    kind = _implementation(emulate)
    with config.override(cuda=kind):
        b = cuda.backend()
        try:
            module, how = b.compile(source)
        except Exception as e:  # nvcc's or g++'s complaint about (edited) source
            raise CudaReplayError(f"the CUDA C did not compile ({b.description}):\n{e}") from e
        compiled = cuda.CompiledCudaKernel(kernel.symbol, source, module, kernel, 0.0, how)
        ins = [cuda.DeviceBuffer.from_numpy(v.reshape(-1), dt) for v, dt in inputs]
        outs = [cuda.DeviceBuffer(n, dt) for n, dt in outputs]
        times = []
        for _ in range(max(1, runs)):
            t0 = time.perf_counter()
            try:
                took = cuda.launch(compiled, outs + ins, wait=True)  # (a GPU's events)
            except EmulatorError as e:
                raise CudaReplayError(str(e)) from e
            times.append(time.perf_counter() - t0 if took is None else took)
        values = [o.numpy() for o in outs]
        emulated = kind == "emulate"
        device = EMULATOR if emulated else b.description
        return CudaRun(values, statistics.median(times), device, emulated)
