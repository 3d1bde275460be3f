"""Realize nodes: schedule, lower, render, compile, launch, and report.

This is the one place the layers meet at run time: the scheduler (ir) cuts the
graph, codegen turns each kernel into loop IR and LLVM IR, the compiler turns
that into machine code and the launcher runs it. Each kernel run leaves a
`KernelRecord`, which is what `fusegrad.kernels()`, `FUSEGRAD_DEBUG` and
`FUSEGRAD_DUMP` show.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

from ..codegen.cuda import render_cuda
from ..codegen.llvm import render_llvm
from ..codegen.loopir import Kernel
from ..codegen.lower import kernel_symbol, lower
from ..ir.node import Node
from ..ir.schedule import ScheduleItem, schedule
from .buffer import Buffer
from .compiler import CompiledKernel, compile_kernel
from .config import config
from .launch import launch

_dump_counter = 0
_manifest: list[dict] = []


@dataclass
class KernelRecord:
    """One kernel that ran: what it fused, why it is a kernel, and its code at every level."""

    name: str
    ops: list[str]
    lines: list[str]  # the user's file:line of the ops inside
    reason: str  # why this kernel's output is materialized
    shape: tuple[int, ...]
    input_shapes: list[tuple[int, ...]]
    bytes: int  # bytes read and written
    flops: int
    seconds: float
    compile_seconds: float
    cache: str  # "compiled", "disk" or "memory"
    loop: Kernel = field(repr=False)
    compiled: CompiledKernel = field(repr=False)

    @property
    def loop_ir(self) -> str:
        return str(self.loop)

    @property
    def llvm_ir(self) -> str:
        return self.compiled.source

    @property
    def llvm_ir_optimized(self) -> str:
        return self.compiled.optimized_ir

    @property
    def asm(self) -> str:
        return self.compiled.asm

    @functools.cached_property
    def cuda_c(self) -> str:
        return render_cuda(self.loop, self.compiled.symbol)

    def summary(self) -> str:
        ms = self.seconds * 1e3
        gbs = self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0
        gfl = self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0
        shape = "x".join(map(str, self.shape)) or "scalar"
        cache = (
            self.cache
            if self.cache == "memory"
            else f"{self.cache} {self.compile_seconds * 1e3:.1f} ms"
        )
        rate = f"{gbs:7.1f} GB/s {gfl:7.1f} GFLOP/s"
        return f"{self.name:<40} {shape:>16} {ms:9.3f} ms {rate}  [{cache}]"


def _log(msg: str) -> None:
    print(f"fusegrad: {msg}", file=sys.stderr)


def realize(nodes: list[Node]) -> list[KernelRecord]:
    """Compute every node in `nodes` that has no buffer yet; return the kernels that ran."""
    todo = [n for n in nodes if n.realized is None]
    if not todo:
        return []
    items = schedule(todo)
    if config.debug >= 2:
        _log(f"schedule: {len(items)} kernel(s)")
        for i, item in enumerate(items):
            _log(f"  [{i}] {' '.join(item.ops)} -> {item.root.shape} ({item.reason})")
            for site in item.sites:
                _log(f"        from {site}")
    last_read = {}
    for i, item in enumerate(items):
        for n in item.inputs:
            last_read[id(n)] = i
    wanted = {id(n) for n in todo}
    made_here: set[int] = set()
    records = []
    for i, item in enumerate(items):
        records.append(_run(item))
        made_here.add(id(item.root))
        # memory planning: an intermediate's buffer goes back to the pool after its last reader
        for n in item.inputs:
            if last_read[id(n)] == i and id(n) in made_here and id(n) not in wanted:
                n.realized = None
    for n in todo:
        n.realized.kernels = records
    _dump(records)
    return records


def _run(item: ScheduleItem) -> KernelRecord:
    loop = lower(item)
    source = render_llvm(loop, "KERNEL")
    symbol = kernel_symbol(source, loop.name)
    source = source.replace("@KERNEL(", f"@{symbol}(")
    compiled = compile_kernel(source, symbol, len(loop.params))
    root = item.root
    out = Buffer(root.numel, root.dtype)
    inputs = [n.realized for n in item.inputs]
    ptrs = [out.ptr] + [b.ptr for b in inputs]
    work = root.numel * (
        math.prod(item.reduce.srcs[0].shape) // item.reduce.numel if item.reduce else 1
    )
    t0 = time.perf_counter()
    launch(compiled.fn, loop.parallel_extent, work, ptrs)
    seconds = time.perf_counter() - t0
    root.realized = out
    nbytes = out.size * out.dtype.itemsize + sum(b.size * b.dtype.itemsize for b in inputs)
    rec = KernelRecord(
        name=loop.name,
        ops=item.ops,
        lines=item.sites,
        reason=item.reason,
        shape=root.shape,
        input_shapes=[n.shape for n in item.inputs],
        bytes=nbytes,
        flops=loop.flops,
        seconds=seconds,
        compile_seconds=compiled.compile_seconds,
        cache=compiled.cache,
        loop=loop,
        compiled=compiled,
    )
    if config.debug >= 1:
        _log(rec.summary())
    if config.debug >= 3:
        _log(f"loop IR:\n{rec.loop_ir}\nLLVM IR:\n{rec.llvm_ir}")
    return rec


def _dump(records: list[KernelRecord]) -> None:
    global _dump_counter
    if not config.dump:
        return
    os.makedirs(config.dump, exist_ok=True)
    for rec in records:
        stem = f"{_dump_counter:03d}_{rec.name}"
        _dump_counter += 1
        for ext, text in ((".loop", rec.loop_ir), (".ll", rec.llvm_ir), (".cu", rec.cuda_c)):
            with open(os.path.join(config.dump, stem + ext), "w") as f:
                f.write(text)
        _manifest.append(
            {
                "file": stem,
                "name": rec.name,
                "ops": rec.ops,
                "lines": rec.lines,
                "reason": rec.reason,
                "shape": list(rec.shape),
                "input_shapes": [list(s) for s in rec.input_shapes],
                "bytes": rec.bytes,
                "flops": rec.flops,
                "compile_ms": round(rec.compile_seconds * 1e3, 3),
                "cache": rec.cache,
            }
        )
    with open(os.path.join(config.dump, "manifest.json"), "w") as f:
        json.dump(_manifest, f, indent=1)
