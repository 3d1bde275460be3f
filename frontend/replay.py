"""`python -m fusegrad.replay dir/NNN_name`: run one dumped kernel alone, check it, time it.

A `FUSEGRAD_DUMP=dir` folder holds, beside each kernel's code, `NNN_name.json`: its
symbol, its parameters (each output's and input's shape, dtype and strides: every one
is a contiguous buffer) and its loop's extent (`runtime/dump.py`). Under
`FUSEGRAD_DUMP_INPUTS=1` it also holds the input values of the run that dumped it
(`NNN_name.in<k>.npy`) and the kernel's nodes (`NNN_name.graph.pkl`).

Replay compiles `NNN_name.ll` (the optimized LLVM IR; edit it and replay runs the
edited code, or name another file: `--ll other.ll`) with llvmlite as the runtime does
(`runtime/compiler.py`), calls it as the runtime launches a kernel (`runtime/launch.py`:
`kernel(start, stop, *outputs, *inputs)`, over the threads), and

- checks its outputs against the reference evaluator (`ir/reference.py`) run on the
  kernel's nodes over the same inputs, where the graph was dumped, saying which
  elements differ;
- times it: the median of `--runs` calls (10).

Without dumped values the inputs are random (normal floats, small integers) and there
is nothing to check against. A kernel that ran on a cuda device (CUDA C) cannot be
replayed here: only the CPU's LLVM IR is.

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
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .ir import node as N
from .ir.dtypes import to_dtype
from .ir.ops import Ops
from .ir.reference import evaluate_many
from .runtime.buffer import Buffer
from .runtime.compiler import compile_kernel
from .runtime.dump import GRAPH_FORMAT
from .runtime.launch import launch

USAGE = "usage: python -m fusegrad.replay dir/NNN_name [--ll file.ll] [--runs N]"
_EXTENSIONS = (".raw.ll", ".graph.pkl", ".json", ".loop", ".ll", ".s", ".cu")


class ReplayError(ValueError):
    """A dumped kernel that cannot be replayed: files missing, or not CPU LLVM IR."""


@dataclass
class Replay:
    """What one replay found: the kernel's outputs, the reference's (None where no graph
    was dumped), a line per output that differs, and the median time of a call."""

    name: str
    source: str  # the .ll file that ran
    outputs: list[np.ndarray]
    reference: list[np.ndarray] | None
    mismatches: list[str] = field(default_factory=list)
    seconds: float = 0.0
    inputs_dumped: bool = False

    @property
    def matches(self) -> bool | None:
        """Whether every output equals the reference's (within float tolerance); None
        where there is no reference."""
        return None if self.reference is None else not self.mismatches

    def report(self) -> str:
        where = "dumped" if self.inputs_dumped else "random (no values dumped)"
        lines = [
            f"kernel {self.name}, from {self.source}",
            f"  inputs: {where}",
            f"  time: {self.seconds * 1e3:.4f} ms a call (median)",
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


def replay(path: str, ll: str | None = None, runs: int = 10) -> Replay:
    """Run the dumped kernel `path` (`dir/NNN_name`, or any of its files) alone: its `.ll`
    (or `ll`) compiled, called on the dumped inputs (or random ones) `runs` times, its
    outputs checked against the reference evaluator where its graph was dumped."""
    stem = _stem(path)
    if ll is None and path.endswith(".ll") and not path.endswith(".raw.ll"):
        ll = path
    meta = _read_json(stem + ".json")
    if meta.get("language") != "LLVM IR":
        raise ReplayError(
            f"{stem}: kernel {meta.get('name')} ran as {meta.get('language')}; replay runs "
            "the CPU's LLVM IR only (dump it from a run on the cpu device)"
        )
    source_path = ll or stem + ".ll"
    try:
        with open(source_path) as f:
            source = f.read()
    except OSError as e:
        raise ReplayError(f"cannot read {source_path}: {e}") from None
    symbol = meta["name"]
    if f"@{symbol}(" not in source:
        raise ReplayError(f"{source_path} defines no function @{symbol}, the dumped kernel")
    values = _inputs(stem, meta)
    dumped = all(os.path.exists(f"{stem}.in{k}.npy") for k in range(len(meta["inputs"])))
    # renamed for this text: the compiler keeps one kernel per name, and the name of an
    # edited file's kernel is the dumped one's
    own = f"{symbol}_replay_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    kernel = compile_kernel(source.replace(f"@{symbol}(", f"@{own}("), own, meta["parameters"])
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
    result = Replay(symbol, source_path, got, None, seconds=statistics.median(times))
    result.inputs_dumped = dumped
    graph_path = stem + ".graph.pkl"
    if os.path.exists(graph_path):
        with open(graph_path, "rb") as f:
            graph = pickle.load(f)
        result.reference = _reference(graph, values, meta)
        result.mismatches = [
            m
            for k, (a, b) in enumerate(zip(got, result.reference))
            if (m := _difference(k, a, b)) is not None
        ]
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
    ll, runs, paths = None, 10, []
    try:
        it = iter(argv)
        for a in it:
            if a == "--ll":
                ll = next(it)
            elif a == "--runs":
                runs = int(next(it))
            elif a.startswith("-"):
                raise ValueError(a)
            else:
                paths.append(a)
    except (StopIteration, ValueError):
        paths = []
    if len(paths) != 1:
        print(USAGE + "\n\n" + __doc__.split("\n\n", 1)[1].split(">>>")[0].strip(), file=sys.stderr)
        return 2
    try:
        result = replay(paths[0], ll=ll, runs=runs)
    except ReplayError as e:
        print(f"python -m fusegrad.replay: {e}", file=sys.stderr)
        return 2
    print(result.report())
    return 1 if result.matches is False else 0


if __name__ == "__main__":
    sys.exit(main())
