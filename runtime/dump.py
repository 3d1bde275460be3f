"""`FUSEGRAD_DUMP=dir/`: every new schedule's kernels as files a person can read and diff.

An observer of the engine (`runtime/engine.py`): it sees every run and writes a
plan's kernels the first time the plan runs while a dump folder is set, so a
training loop writes its step's kernels once, not once per step.

Each kernel comes with what running it alone takes (`NNN_name.json`: its symbol, its
parameters' shapes, dtypes and strides, its loop's extent, and the launches of its
`.cu`: each grid, block, shared memory, scratch buffer and tensor map the cuda backend
would use, `cuda_launch_record`) and, under
`FUSEGRAD_DUMP_INPUTS=1`, its input values as they were on that run
(`NNN_name.in<k>.npy`) and its nodes (`NNN_name.graph.pkl`, `kernel_graph`), so that
`python -m fusegrad.replay dir/NNN_name` (`frontend/replay.py`) runs it, times it and
checks it against the reference evaluator (`--cu`: its CUDA C, on a GPU or the emulator).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..pipeline.cuda import CudaKernel, cuda_kernel
from . import forksafe
from .config import config, warn_unusable_folder

if TYPE_CHECKING:
    from ..pipeline.plan import KernelRecord, Plan


GRAPH_FORMAT = 1  # the layout of `kernel_graph`'s description (replay checks it)
# why a kernel has no CUDA C to replay (`NNN_name.json`'s "cuda_note", its "cuda_launches" null)
NO_CUDA_C = "an AMX or vdpbf16ps tile kernel: CUDA C has no such instructions (its .cu says so)"


def kernel_graph(item) -> dict:
    """A schedule item's nodes without their buffers, for the replay's reference check:
    `{"format", "nodes": [(op name, arg, shape, dtype name, sources)], "outputs"}`, each
    source ("in", k) for the kernel's k-th input or ("node", j) for an earlier node, each
    output ("node", j) (or ("in", k): an output the kernel copies from an input). Plain
    data (pickled by the dump): `frontend/replay.py` builds it again over the inputs'
    values."""
    where: dict[int, tuple[str, int]] = {id(n): ("in", k) for k, n in enumerate(item.inputs)}
    nodes = []
    for n in item.nodes:
        if id(n) in where:
            continue
        nodes.append((n.op.name, n.arg, n.shape, n.dtype.name, [where[id(s)] for s in n.srcs]))
        where[id(n)] = ("node", len(nodes) - 1)
    return {
        "format": GRAPH_FORMAT,
        "nodes": nodes,
        "outputs": [where[id(n)] for n in item.outputs],
    }


def wants_inputs(plan: Plan) -> bool:
    """Whether the dump has yet to write `plan`'s kernels (with FUSEGRAD_DUMP_INPUTS, their
    input values, which the engine then copies as each kernel runs)."""
    if not config.dump or not config.dump_inputs:
        return False
    folder = _dump_folders.get(os.path.abspath(config.dump))
    ref = folder.plans.get(id(plan)) if folder is not None else None
    return ref is None or ref() is not plan


def kernel_header(rec: KernelRecord, comment: str = "//") -> str:
    """The comment block a dumped kernel file begins with: its name, the user's lines and
    ops inside (with their primitives), forward/backward/optimizer, why it is a kernel of
    its own, bytes and FLOPs. Nothing that changes from run to run (no times)."""
    shape = "x".join(map(str, rec.shape)) or "scalar"
    inputs = ", ".join("x".join(map(str, s)) or "scalar" for s in rec.input_shapes) or "none"
    lines = [
        f"kernel {rec.name}",
        f"  part of: {', '.join(rec.roles) or 'no user line'}",
        f"  why a kernel: {rec.reason}",
        f"  output {shape}, inputs {inputs}",
        f"  {rec.bytes} bytes read and written, {rec.flops} FLOPs",
        *([f"  {rec.loop.tile_note}"] if getattr(rec.loop, "tile_note", "") else []),
        "  user ops (primitives):",
    ]
    lines += [f"    {op}: {' '.join(prims)}" for op, prims in rec.op_groups]
    return "".join(f"{comment} {line}".rstrip() + "\n" for line in lines) + "\n"


class _DumpFolder:
    """What has been written into one FUSEGRAD_DUMP folder: each plan is written once, the
    first time it runs, and each kernel once whatever plans share it."""

    def __init__(self):
        self.plans: dict[int, weakref.ref] = {}
        self.files: dict[str, str] = {}  # kernel name -> its file stem
        self.manifest: list[dict] = []
        self.schedules = 0
        self.launches: list[dict] = []  # schedules.json: each schedule's kernels in order


_dump_folders: dict[str, _DumpFolder] = {}
_dump_lock = forksafe.Lock()

# (extension, comment marker, text of a record): the files written per kernel
_DUMP_FILES = (
    (".loop", "//", lambda r: r.loop_ir),
    (".ll", ";", lambda r: r.llvm_ir_optimized),
    (".raw.ll", ";", lambda r: r.llvm_ir),
    (".s", "#", lambda r: r.asm),
    (".cu", "//", lambda r: r.cuda_c),
)


def dump_new_plans(plan: Plan, records: list[KernelRecord]) -> None:
    """The FUSEGRAD_DUMP observer: each new schedule's kernels and a manifest.json.

    Every kernel is written as loop IR (`.loop`), optimized LLVM IR (`.ll`), the IR before
    LLVM's passes (`.raw.ll`), assembly (`.s`) and CUDA C (`.cu`), each file beginning with
    `kernel_header`. manifest.json lists each kernel once (its name, schedule and position,
    ops, lines, user ops, roles, reason, shapes, bytes, FLOPs, and `this_run`: compile time,
    cache and its time in ms); schedules.json lists each schedule's kernels in launch order
    (a kernel that runs twice appears twice) with their bytes and `this_run` times
    (`python -m fusegrad.schedule_diff` compares two folders). A kernel that ran on a cuda
    device has PTX in its `.s`, under its launches, registers, shared memory and occupancy
    (runtime/cuda_asm.py; SASS too where cuobjdump or nvdisasm exists), and a `.ll` that
    says it has no LLVM IR (its `.raw.ll` is its loop nest as LLVM IR, or a note where
    the nest holds a statement only the CUDA C renderer has). Two runs of
    one script write byte-identical files; in manifest.json and schedules.json only the
    `this_run` fields (compile time, cache, time) can differ.
    """
    if not config.dump:
        return
    folder_name = os.path.abspath(config.dump)
    if folder_name in _unusable:
        return
    try:
        _dump(folder_name, plan, records)
    except OSError as e:  # a dump folder that cannot be written never stops the run
        _unusable.add(folder_name)
        warn_unusable_folder("FUSEGRAD_DUMP", config.dump, e, "kernels are not dumped")


_unusable: set[str] = set()  # dump folders that could not be written: not tried again


def _dump(folder_name: str, plan: Plan, records: list[KernelRecord]) -> None:
    with _dump_lock:
        folder = _dump_folders.setdefault(folder_name, _DumpFolder())
        ref = folder.plans.get(id(plan))
        if ref is not None and ref() is plan:
            return  # a schedule already written: later steps add nothing
        folder.plans[id(plan)] = weakref.ref(plan)
        schedule_index = folder.schedules
        folder.schedules += 1
        os.makedirs(folder_name, exist_ok=True)
        for k, rec in enumerate(records):
            values, rec.input_values = rec.input_values, None
            if rec.name in folder.files:
                continue
            stem = f"{len(folder.files):03d}_{rec.name}"
            folder.files[rec.name] = stem
            gpu = gpu_kernel(rec)
            for ext, comment, text in _DUMP_FILES:
                # (the .cu is the source of the launches the .json records: rendered once)
                body = gpu.source if ext == ".cu" and gpu is not None else text(rec)
                with open(os.path.join(folder_name, stem + ext), "w") as f:
                    f.write(kernel_header(rec, comment) + body)
            step = plan.steps[k] if k < len(plan.steps) else None
            _write_replay_files(os.path.join(folder_name, stem), rec, step, values, gpu)
            folder.manifest.append(
                {
                    "file": stem,
                    "name": rec.name,
                    "schedule": schedule_index,
                    "position": k,
                    "ops": rec.ops,
                    "lines": rec.lines,
                    "user_ops": rec.user_ops,
                    "roles": rec.roles,
                    "reason": rec.reason,
                    "shape": list(rec.shape),
                    "input_shapes": [list(s) for s in rec.input_shapes],
                    "bytes": rec.bytes,
                    "flops": rec.flops,
                    "this_run": {
                        "compile_ms": round(rec.compile_seconds * 1e3, 3),
                        "cache": rec.cache,
                        "ms": _ms(rec),
                    },
                }
            )
        with open(os.path.join(folder_name, "manifest.json"), "w") as f:
            json.dump(folder.manifest, f, indent=1)
        folder.launches.append(
            {
                "schedule": schedule_index,
                "kernels": [
                    {"name": r.name, "bytes": r.bytes, "this_run": {"ms": _ms(r)}} for r in records
                ],
            }
        )
        with open(os.path.join(folder_name, "schedules.json"), "w") as f:
            json.dump(folder.launches, f, indent=1)


def gpu_kernel(rec: KernelRecord) -> CudaKernel | None:
    """The kernel as the cuda backend launches it: the one that ran, on a cuda device; else
    rendered as the cuda backend's defaults render it (no TF32, 48 KiB of shared memory a
    block: `KernelRecord.cuda_c`'s text). None for a tile kernel, which has no CUDA C."""
    if rec.compiled.language == "CUDA C":  # (its own rendering, where a generic one runs)
        return rec.compiled.own or rec.compiled.kernel
    if rec.loop.uses_tiles:
        return None
    return cuda_kernel(rec.loop, rec.compiled.symbol)


def cuda_launch_record(kernel: CudaKernel) -> dict:
    """What launching `kernel`'s CUDA C takes, as plain data (`NNN_name.json`'s
    "cuda_launches"): its launches in order (symbol, grid, block, dynamic shared memory in
    bytes), each given `(*outputs, *inputs, *scratch)`; the scratch buffers (dtype,
    elements) the caller allocates; and the tensor maps a build for sm_90a takes after
    them (`TensorMap`'s fields). `runtime/cuda_replay.py` reads it back (`kernel_from_record`)."""
    return {
        "launches": [
            {
                "symbol": ln.symbol,
                "grid": list(ln.grid),
                "block": list(ln.block),
                "shared_bytes": ln.shared_bytes,
            }
            for ln in kernel.launches
        ],
        "scratch": [{"dtype": dt.name, "elements": count} for dt, count in kernel.scratch],
        "tensor_maps": [dataclasses.asdict(m) for m in kernel.tensor_maps],
        "call": "each launch in order: f(*outputs, *inputs, *scratch[, tensor maps]): "
        "runtime/cuda.py launch",
    }


def _write_replay_files(base: str, rec: KernelRecord, step, values, gpu: CudaKernel | None) -> None:
    """`base.json`, what running the kernel alone takes (on the CPU, and its `.cu`: `gpu`'s
    launches), and where the record has them, its input values (`base.in<k>.npy`) and its
    nodes (`base.graph.pkl`)."""

    def param(shape, dtype: str) -> dict:
        strides, size = [], 1
        for s in reversed(shape):
            strides.insert(0, size)
            size *= s
        return {"shape": list(shape), "dtype": dtype, "strides": strides, "elements": size}

    compiled = rec.compiled
    have_values = values is not None and len(values) == len(rec.input_shapes)
    if have_values:
        for k, array in enumerate(values):
            np.save(f"{base}.in{k}.npy", array)
    if rec.graph is not None:
        with open(base + ".graph.pkl", "wb") as f:
            pickle.dump(rec.graph, f)
    meta = {
        "name": rec.name,
        "language": compiled.language,
        "parameters": getattr(compiled, "nparams", None),
        "extent": rec.loop.parallel_extent,
        "work": step.work if step is not None else rec.loop.parallel_extent,
        "call": "kernel(start, stop, *outputs, *inputs[, cancel word]): runtime/launch.py",
        "outputs": [param(shape, dtype) for shape, dtype in rec.outputs],
        "inputs": [param(s, d) for s, d in zip(rec.input_shapes, rec.input_dtypes)],
        "input_values": have_values,
        "graph": rec.graph is not None,
        "cuda_launches": cuda_launch_record(gpu) if gpu is not None else None,
    }
    if gpu is None:
        meta["cuda_note"] = NO_CUDA_C
    with open(base + ".json", "w") as f:
        json.dump(meta, f, indent=1)


def _ms(rec: KernelRecord) -> float | None:
    """A kernel's time on the run that dumped it (a new schedule's first run launches
    kernel by kernel, each timed), in milliseconds; None if it was not timed alone."""
    return None if rec.seconds is None else round(rec.seconds * 1e3, 4)
