"""The compiler pipeline: an IR graph in, a `Plan` of compiled kernels out (`compile_plan`).

The stages in the order a graph goes through them, file by file:

1. drive: `driver.py` (`compile_plan`) expands the graph's macros under the device's
   layout options (`layout.py`: the CPU's packed and padded copies), runs the stages
   below and builds the plan.
2. schedule: `schedule.py` cuts the graph into kernels (`ScheduleItem`s), saying why at
   every cut.
3. lower: `lower.py` turns one kernel into loop IR (`loopir.py`) and picks its strategy:
   the plain loop nest (`loop_nest.py`, with `coords.py`), a register tile
   (`tile_choice.py`, `tile_tuning.py`, `tiling.py`, built by `contraction.py`), a cascaded
   or lane-wise sum (`reductions.py`, `cascade.py`, `row_patterns.py`), AMX or `vdpbf16ps`
   tiles (`amx.py`, `dpbf16.py`); its edges are peeled off (`peel.py`) and it is named
   (`kernel_names.py`).
4. render: `llvm.py` (with `llvm_math.py`) writes LLVM IR for the CPU; `gpu.py` maps a
   kernel onto a CUDA grid and `cuda.py` (with `cuda_*.py`) writes CUDA C; both spell
   elementwise ops from one table (`optable.py`).
5. compile: `compiler.py` turns LLVM IR into machine code, cached in memory and on disk;
   `item_cache.py` keeps each kernel's loop IR and LLVM IR on disk, `plan_store.py` whole
   plans, `cache_bound.py` keeps the disk cache under its bound; `plan.py` holds what a
   compile produces (`Plan`, `Step`, `KernelRecord`).

The runtime (`runtime/engine.py`) calls `compile_plan` and runs the plan. The pipeline
imports only the runtime's base modules (tests/test_layering.py names them).

`compile_plan` is read from `driver.py` when first asked for, so that importing a stage
(`fusegrad.pipeline.schedule`, as `runtime/config.py` does) does not import the driver,
which imports the runtime's base modules in turn.

>>> from fusegrad.pipeline import compile_plan
>>> compile_plan.__module__
'fusegrad.pipeline.driver'
"""

__all__ = ["compile_plan"]


def __getattr__(name: str):
    if name == "compile_plan":
        # the driver imports runtime modules that import stages of this package
        from .driver import compile_plan

        return compile_plan
    raise AttributeError(f"module 'fusegrad.pipeline' has no attribute {name!r}")
