"""`python -m fusegrad.replay dir/NNN_name`: run one dumped kernel alone, check it, time it.

A `FUSEGRAD_DUMP=dir` folder holds, beside each kernel's code, `NNN_name.json`: its
symbol, its parameters (each output's and input's shape, dtype and strides: every one
is a contiguous buffer) and its loop's extent (`runtime/dump.py`). Under
`FUSEGRAD_DUMP_INPUTS=1` it also holds the input values of the run that dumped it
(`NNN_name.in<k>.npy`) and the kernel's nodes (`NNN_name.graph.pkl`).

Replay compiles `NNN_name.ll` (the optimized LLVM IR; edit it and replay runs the
edited code, or name another file: `--ll other.ll`) with llvmlite as the runtime does
(`pipeline/compiler.py`), to machine code as it is (`AS_OPTIMIZED`: no optimization pass
runs on it again, so the code is the run's), calls it as the runtime launches a kernel
(`runtime/launch.py`: `kernel(start, stop, *outputs, *inputs)`, over the threads), and

- checks its outputs against the reference evaluator (`ir/reference.py`) run on the
  kernel's nodes over the same inputs, where the graph was dumped, saying which
  elements differ;
- times it: the median of `--runs` calls (10).

`--cu` replays the kernel's CUDA C instead (`NNN_name.cu`, or an edited copy: `--cu
other.cu`), written for every kernel, a CPU run's too: compiled and launched with the
grid, block, shared memory and scratch buffers the `.json` records (those the cuda
backend uses for it: `runtime/cuda_replay.py`), on the GPU where PyCUDA has one, else
(or with `--emulate`) on the CPU emulator of CUDA C (`runtime/cuda_emulator.py`), whose
time is the emulator's, not a GPU's. A kernel that ran on a cuda device has no LLVM IR:
its CUDA C is what replays. A CPU tile kernel (AMX, vdpbf16ps) has no CUDA C, and replay
says so.

Without dumped values the inputs are random (normal floats, small integers) and there
is nothing to check against.

>>> import fusegrad as fg, tempfile, glob
>>> folder = tempfile.mkdtemp()
>>> x = fg.randn(64).realize()
>>> with fg.config.override(dump=folder, dump_inputs=True):
...     _ = (x.exp() * 3).realize()
>>> (stem,) = [p[:-5] for p in glob.glob(folder + "/0*.json")]  # (not manifest.json)
>>> result = replay(stem)
>>> result.matches, len(result.outputs)
(True, 1)
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .ir import node as N
from .ir.dtypes import to_dtype
from .ir.ops import Ops
from .ir.reference import evaluate_many
from .pipeline.compiler import AS_OPTIMIZED, compile_kernel
from .runtime.buffer import Buffer
from .runtime.cuda_replay import CudaReplayError, run_cuda_source
from .runtime.dump import GRAPH_FORMAT
from .runtime.launch import launch

USAGE = (
    "usage: python -m fusegrad.replay dir/NNN_name [--ll file.ll | --cu [file.cu] [--emulate]] "
    "[--runs N]"
)
_EXTENSIONS = (".raw.ll", ".graph.pkl", ".json", ".loop", ".ll", ".s", ".cu")


class ReplayError(ValueError):
    """A dumped kernel that cannot be replayed: files missing, code that does not compile,
    or code of a kind it lacks (a tile kernel's CUDA C, a CUDA run's LLVM IR)."""


@dataclass
class Replay:
    """What one replay found: the kernel's outputs, the reference's (None where no graph
    was dumped), a line per output that differs, and the median time of a call."""

    name: str
    source: str  # the .ll or .cu file that ran
    outputs: list[np.ndarray]
    reference: list[np.ndarray] | None
    mismatches: list[str] = field(default_factory=list)
    seconds: float = 0.0
    inputs_dumped: bool = False
    device: str = "the CPU (LLVM IR through llvmlite)"  # what ran it
    emulated: bool = False  # CUDA C on the CPU emulator: `seconds` is the emulator's

    @property
    def matches(self) -> bool | None:
        """Whether every output equals the reference's (within float tolerance); None
        where there is no reference."""
        return None if self.reference is None else not self.mismatches

    def report(self) -> str:
        where = "dumped" if self.inputs_dumped else "random (no values dumped)"
        lines = [
            f"kernel {self.name}, from {self.source}",
            f"  ran on: {self.device}",
            f"  inputs: {where}",
            f"  time: {self.seconds * 1e3:.4f} ms a call (median)"
            + (" on the emulator, not a GPU's time" if self.emulated else ""),
        ]
        if self.reference is None:
            lines.append("  check: none (dump with FUSEGRAD_DUMP_INPUTS=1 for the kernel's graph)")
        elif self.mismatches:
            lines += ["  check: MISMATCH against the reference evaluator"]
            lines += [f"    {m}" for m in self.mismatches]
        else:
            lines.append(
                f"  check: matches the reference evaluator ({len(self.outputs)} output(s))"
            )
        return "\n".join(lines)


def replay(
    path: str,
    ll: str | None = None,
    runs: int = 10,
    cu: str | bool | None = None,
    emulate: bool = False,
) -> Replay:
    """Run the dumped kernel `path` (`dir/NNN_name`, or any of its files) alone: its `.ll`
    (or `ll`) compiled, called on the dumped inputs (or random ones) `runs` times, its
    outputs checked against the reference evaluator where its graph was dumped.

    `cu=True` runs its CUDA C instead (`dir/NNN_name.cu`; or `cu="edited.cu"`), with the
    launches the dump recorded, on the GPU where PyCUDA has one, else (or with `emulate`)
    on the CPU emulator; a kernel that ran on a cuda device (or a `path` ending in `.cu`)
    runs its CUDA C without being asked."""
    stem = _stem(path)
    if ll is None and path.endswith(".ll") and not path.endswith(".raw.ll"):
        ll = path
    if cu is None and path.endswith(".cu"):
        cu = path
    meta = _read_json(stem + ".json")
    if cu is None and ll is None and meta.get("language") == "CUDA C":
        cu = True
    if cu and ll is not None:
        raise ReplayError("replay runs a kernel's .ll or its .cu, not both")
    values = _inputs(stem, meta)
    if cu:
        result = _run_cuda(stem, meta, values, stem + ".cu" if cu is True else cu, runs, emulate)
    else:
        result = _run_llvm(stem, meta, values, ll, runs)
    result.inputs_dumped = all(
        os.path.exists(f"{stem}.in{k}.npy") for k in range(len(meta["inputs"]))
    )
    graph_path = stem + ".graph.pkl"
    if os.path.exists(graph_path):
        with open(graph_path, "rb") as f:
            graph = pickle.load(f)
        result.reference = _reference(graph, values, meta)
        result.mismatches = [
            m
            for k, (a, b) in enumerate(zip(result.outputs, result.reference))
            if (m := _difference(k, a, b)) is not None
        ]
    return result


def _read_source(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise ReplayError(f"cannot read {path}: {e}") from None


def _run_llvm(stem: str, meta: dict, values: list, ll: str | None, runs: int) -> Replay:
    """The kernel's LLVM IR compiled with llvmlite and called over the CPU's threads."""
    if meta.get("language") != "LLVM IR":
        raise ReplayError(
            f"{stem}: kernel {meta.get('name')} ran as {meta.get('language')}; it has no "
            "LLVM IR to replay (replay its CUDA C: --cu)"
        )
    source_path = ll or stem + ".ll"
    source = _read_source(source_path)
    symbol = meta["name"]
    if f"@{symbol}(" not in source:
        raise ReplayError(f"{source_path} defines no function @{symbol}, the dumped kernel")
    # renamed for this text: the compiler keeps one kernel per name, and the name of an
    # edited file's kernel is the dumped one's
    own = f"{symbol}_replay_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    # (the .ll went through O3's passes in the run: emitted as it is, not optimized again)
    kernel = compile_kernel(
        source.replace(f"@{symbol}(", f"@{own}("), own, meta["parameters"], AS_OPTIMIZED
    )
    ins = [
        Buffer.from_numpy(v.reshape(-1), to_dtype(p["dtype"]))
        for v, p in zip(values, meta["inputs"])
    ]
    outs = [Buffer(p["elements"], to_dtype(p["dtype"])) for p in meta["outputs"]]
    ptrs = [b.ptr for b in outs] + [b.ptr for b in ins]
    times = []
    for _ in range(max(1, runs)):
        t0 = time.perf_counter()
        launch(kernel, meta["extent"], meta["work"], ptrs)
        times.append(time.perf_counter() - t0)
    got = [b.numpy().reshape(p["shape"]).copy() for b, p in zip(outs, meta["outputs"])]
    return Replay(symbol, source_path, got, None, seconds=statistics.median(times))


def _run_cuda(
    stem: str, meta: dict, values: list, source_path: str, runs: int, emulate: bool
) -> Replay:
    """The kernel's CUDA C compiled and launched as the cuda backend would launch it
    (`runtime/cuda_replay.py`), on the GPU or the emulator."""
    if "cuda_launches" not in meta:
        raise ReplayError(
            f"{stem}.json records no CUDA launches: dump the kernel again with this version "
            "of fusegrad to replay its .cu"
        )
    record = meta["cuda_launches"]
    if record is None:
        raise ReplayError(f"{stem}: kernel {meta['name']} has no CUDA C to replay: "
                          f"{meta.get('cuda_note', 'none was rendered')}")  # fmt: skip
    source = _read_source(source_path)
    for ln in record["launches"]:
        if not re.search(rf"__global__[^(]*\b{re.escape(ln['symbol'])}\s*\(", source):
            raise ReplayError(
                f"{source_path} defines no __global__ function {ln['symbol']}, which the "
                "dumped kernel launches"
            )
    try:
        run = run_cuda_source(
            source,
            record,
            [(v, to_dtype(p["dtype"])) for v, p in zip(values, meta["inputs"])],
            [(p["elements"], to_dtype(p["dtype"])) for p in meta["outputs"]],
            runs,
            emulate,
        )
    except CudaReplayError as e:
        raise ReplayError(f"{source_path}: {e}") from None
    got = [v.reshape(p["shape"]) for v, p in zip(run.outputs, meta["outputs"])]
    result = Replay(meta["name"], source_path, got, None, seconds=run.seconds)
    result.device, result.emulated = run.device, run.emulated
    return result


def _stem(path: str) -> str:
    for ext in _EXTENSIONS:
        if path.endswith(ext):
            return path[: -len(ext)]
    if ".in" in os.path.basename(path) and path.endswith(".npy"):
        return path[: path.rindex(".in")]
    return path


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ReplayError(
            f"{path} not found: replay reads a FUSEGRAD_DUMP folder's dir/NNN_name "
            "(dumped by this version of fusegrad)"
        ) from None


def _inputs(stem: str, meta: dict) -> list[np.ndarray]:
    """The dumped input values, or random ones of each input's shape and dtype."""
    rng = np.random.default_rng(0)
    out = []
    for k, p in enumerate(meta["inputs"]):
        dtype = to_dtype(p["dtype"])
        name = f"{stem}.in{k}.npy"
        if os.path.exists(name):
            array = np.load(name, allow_pickle=False)
            if array.dtype != dtype.np:  # (a 16-bit float numpy stores as raw bytes)
                array = array.view(dtype.np)
        elif dtype.is_float:
            array = rng.standard_normal(p["elements"]).astype(dtype.np)
        elif dtype.is_bool:
            array = rng.integers(0, 2, p["elements"]).astype(dtype.np)
        else:
            array = rng.integers(0, 4, p["elements"]).astype(dtype.np)
        out.append(array.reshape(p["shape"]))
    return out


def _reference(graph: dict, values: list[np.ndarray], meta: dict) -> list[np.ndarray]:
    """The kernel's outputs as the reference evaluator computes them from its nodes."""
    if graph.get("format") != GRAPH_FORMAT:
        raise ReplayError(
            f"a graph of format {graph.get('format')}; this fusegrad reads {GRAPH_FORMAT}"
        )
    inputs = [
        N.buffer(
            Buffer.from_numpy(v.reshape(-1), to_dtype(p["dtype"])),
            tuple(p["shape"]),
            to_dtype(p["dtype"]),
        )
        for v, p in zip(values, meta["inputs"])
    ]
    nodes: list[N.Node] = []

    def get(ref) -> N.Node:
        kind, k = ref
        return inputs[k] if kind == "in" else nodes[k]

    for op, arg, shape, dtype, srcs in graph["nodes"]:
        srcs = tuple(get(s) for s in srcs)
        nodes.append(N.make(Ops[op], srcs, arg, tuple(shape), to_dtype(dtype)))
    return evaluate_many([get(r) for r in graph["outputs"]])


def _difference(k: int, got: np.ndarray, want: np.ndarray) -> str | None:
    """None if output k matches the reference, else where and by how much it differs."""
    dtype = got.dtype
    if np.issubdtype(dtype, np.floating) or dtype.itemsize == 2 and dtype.kind == "V":
        a, b = got.astype(np.float64), want.astype(np.float64)
        rtol = 1e-4 if got.dtype.itemsize >= 4 else 1e-2
        atol = rtol * max(1.0, float(np.nanmax(np.abs(b), initial=0.0)))
        bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    else:
        a, b = got, want
        bad = a != b
    if not bad.any():
        return None
    err = np.where(bad, np.abs(a.astype(np.float64) - b.astype(np.float64)), -1)
    worst = np.unravel_index(int(np.nanargmax(err)), got.shape) if got.shape else ()
    return (
        f"output {k}: {int(bad.sum())} of {bad.size} elements differ; at {tuple(map(int, worst))} "
        f"the kernel gives {a[worst]!r}, the reference {b[worst]!r}"
    )


def main(argv: list[str] | None = None) -> int:
    """Replay one kernel and print what it found; the exit status is 0 (it matches, or
    there is nothing to check), 1 (it differs from the reference) or 2 (a bad command
    line, or a kernel that cannot be replayed)."""
    argv = sys.argv[1:] if argv is None else argv
    ll, cu, emulate, runs, paths = None, None, False, 10, []
    try:
        args = list(argv)
        while args:
            a = args.pop(0)
            if a == "--ll":
                ll = args.pop(0)
            elif a == "--cu":  # an edited file may follow
                cu = args.pop(0) if args and args[0].endswith(".cu") else True
            elif a == "--emulate":
                emulate = True
            elif a == "--runs":
                runs = int(args.pop(0))
            elif a.startswith("-"):
                raise ValueError(a)
            else:
                paths.append(a)
    except (IndexError, ValueError):
        paths = []
    if len(paths) != 1:
        print(USAGE + "\n\n" + __doc__.split("\n\n", 1)[1].split(">>>")[0].strip(), file=sys.stderr)
        return 2
    try:
        result = replay(paths[0], ll=ll, runs=runs, cu=cu, emulate=emulate)
    except ReplayError as e:
        print(f"python -m fusegrad.replay: {e}", file=sys.stderr)
        return 2
    print(result.report())
    return 1 if result.matches is False else 0


if __name__ == "__main__":
    sys.exit(main())
