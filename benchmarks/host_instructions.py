"""Host path cost as user-space instructions per call: a measure that load does not move.

Run:  .venv/bin/python benchmarks/host_instructions.py [--calls 200] [--only chain]
      .venv/bin/python benchmarks/host_instructions.py --against REF   (before and after)

Time per call on a shared machine moves with the load; the instructions the process
executes do not (to a fraction of a percent). Each workload runs in a child process: it is
set up and warmed up (compiled, its plans cached, `--warmup` calls), then a counter is
switched on around exactly `--calls` further calls, and the count divided by the calls is
printed. The counter is, whichever the machine has:

- `perf stat -e instructions:u`, switched on and off by the child through perf's control
  fifo (`--delay=-1 --control fifo:...`), when the CPU's counters are visible (not in
  many virtual machines);
- else valgrind's callgrind, switched by the child with callgrind's client requests (the
  magic instruction sequence of valgrind.h, compiled with llvmlite): every guest
  instruction of every thread while collection is on. Roughly 50x slower, same count.
  Valgrind (3.19) does not decode every AVX-512 instruction: a workload whose kernels
  hold one (compiled for this CPU, from the compile cache: the MLP step's on an AVX-512
  machine) stops with SIGILL and is reported "not counted"; the others still are.

Workloads (each a loop body, the count per body):

- **chain .item()**: `(x * 2 + 1).sum().item()` on 1000 float32s: graph building, the
  plan lookup, one kernel, the host copy of the scalar;
- **chain .realize()**: the same without `.item()`, `.realize()`d;
- **one-kernel realize**: `t.realize()` of a prebuilt `x_i * 2 + 1`, each on an input of
  its own (a new graph of the same structure each call, built outside the count): the
  structural key, the cached plan's lookup and run;
- **MLP b64 step**: a 784-128-64-10 ReLU MLP (benchmarks/lenet_step.py's), cross entropy,
  backward, SGD with momentum, `loss.item()`, batch 64.

The kernels' own instructions are in the counts (the small ones here are a few thousand;
the MLP's matmuls dominate its count, so the step shows host changes less). The children run
with FUSEGRAD_THREADS=1 (change it with `--threads`): worker threads that spin or wake by
timing would make the count depend on the schedule. Wall time per call of the same loop, run
without a counter, is printed beside: it is NOT comparable between runs on a loaded machine.

`--against REF` runs every workload on fusegrad at git REF too (extracted into a temporary
folder, as benchmarks/host_cost.py's `--against` does) and prints both counts and their
ratio: the before and after of a change, counted on the same machine.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WORKLOADS = ("chain .item()", "chain .realize()", "one-kernel realize", "MLP b64 step")


def workload(name: str):
    """A loop body for `name`, set up; a body with a `refill(n)` attribute needs it called
    before n bodies run (the one-kernel realize's prebuilt graphs)."""
    import numpy as np

    import fusegrad as fg

    rng = np.random.default_rng(0)
    x = fg.tensor(rng.random(1000).astype(np.float32))
    if name == "chain .item()":
        return lambda: (x * 2 + 1).sum().item()
    if name == "chain .realize()":
        return lambda: (x * 2 + 1).sum().realize()
    if name == "one-kernel realize":
        pending = []

        def body():
            pending.pop().realize()

        def refill(n):  # inputs of their own: equal graphs would be one node, realized once
            data = rng.random((n, 1000)).astype(np.float32)
            pending[:] = [fg.tensor(row) * 2 + 1 for row in data]

        body.refill = refill
        return body
    if name == "MLP b64 step":
        from lenet_step import batches, make_fusegrad_train

        _, train = make_fusegrad_train("mlp")
        data = [(fg.tensor(a), fg.tensor(b)) for a, b in batches("mlp", 2)]
        i = [0]

        def step():
            a, b = data[i[0] % 2]
            i[0] += 1
            return train(a, b).item()

        return step
    raise SystemExit(f"unknown workload {name!r}: one of {', '.join(WORKLOADS)}")


class PerfCounter:
    """Switches `perf stat --control fifo:CTL,ACK` on and off (the paths from the parent)."""

    def __init__(self, ctl: str, ack: str):
        self.ctl = open(ctl, "w")
        self.ack = open(ack)

    def _say(self, word: str) -> None:
        self.ctl.write(word + "\n")
        self.ctl.flush()
        assert self.ack.readline().startswith("ack"), "perf did not acknowledge"

    def start(self) -> None:
        self._say("enable")

    def stop(self) -> None:
        self._say("disable")


class CallgrindCounter:
    """Callgrind's ZERO_STATS and TOGGLE_COLLECT client requests (valgrind.h's amd64 magic
    sequence; outside valgrind the sequence does nothing)."""

    _BASE = (ord("C") << 24) | (ord("T") << 16)  # VG_USERREQ_TOOL_BASE('C', 'T')
    # rdx = request(rax: the address of six words); rdx's value going in is the answer
    # outside valgrind
    _MAGIC = r"rolq $$3, %rdi ; rolq $$13, %rdi\0A\09rolq $$61, %rdi ; rolq $$51, %rdi\0A\09"
    _IR = (
        "define i64 @client_request(i64* %args) {\n"
        f'  %r = call i64 asm sideeffect "{_MAGIC}xchgq %rbx, %rbx", '
        '"={dx},{ax},0,~{cc},~{memory},~{rdi}"(i64* %args, i64 0)\n'
        "  ret i64 %r\n}\n"
    )

    def __init__(self):
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()  # the inline asm
        module = llvm.parse_assembly(self._IR)
        machine = llvm.Target.from_default_triple().create_target_machine()
        self._engine = llvm.create_mcjit_compiler(module, machine)  # keeps the code alive
        self._engine.finalize_object()
        address = self._engine.get_function_address("client_request")
        self._call = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.POINTER(ctypes.c_int64))(address)

    def request(self, offset: int) -> int:
        """Callgrind's request VG_USERREQ_TOOL_BASE('C','T') + offset; 0 outside valgrind."""
        return self._call((ctypes.c_int64 * 6)(self._BASE + offset, 0, 0, 0, 0, 0))

    def start(self) -> None:
        self.request(1)  # ZERO_STATS
        self.request(2)  # TOGGLE_COLLECT: on

    def stop(self) -> None:
        self.request(2)  # off


class NoCounter:
    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def child(name: str, calls: int, warmup: int, counter) -> float:
    """Runs `name`'s warm-up, then `calls` bodies between counter.start and .stop; the
    wall seconds per call of those."""
    import gc

    body = workload(name)
    refill = getattr(body, "refill", None)
    if refill:
        refill(warmup)
    for _ in range(warmup):
        body()
    if refill:
        refill(calls)
    gc.collect()
    counter.start()
    t0 = time.perf_counter()
    for _ in range(calls):
        body()
    wall = time.perf_counter() - t0
    counter.stop()
    return wall / calls


def perf_works() -> bool:
    """Whether `perf stat` can count user-space instructions here."""
    try:
        out = subprocess.run(
            ["perf", "stat", "-x,", "-e", "instructions:u", "true"],
            capture_output=True,
            text=True,
        ).stderr
    except OSError:
        return False
    return any(ln.split(",")[0].isdigit() for ln in out.splitlines())


class CountFailed(Exception):
    """A workload's child did not run to its end under the counter (valgrind 3.19 does not
    decode every AVX-512 instruction a kernel compiled for this CPU may hold)."""


def count_instructions(name: str, tool: str, argv: list[str], env: dict) -> int:
    """Runs the child `argv` under `tool` (perf or callgrind); the instructions counted."""
    with tempfile.TemporaryDirectory(prefix="fusegrad-instructions-") as tmp:
        report = os.path.join(tmp, "report")
        if tool == "perf":
            ctl, ack = os.path.join(tmp, "ctl"), os.path.join(tmp, "ack")
            os.mkfifo(ctl)
            os.mkfifo(ack)
            env = dict(env, HOST_INSTRUCTIONS_PERF=f"{ctl}:{ack}")
            cmd = ["perf", "stat", "-x,", "-e", "instructions:u", "--delay=-1"]
            cmd += ["--control", f"fifo:{ctl},{ack}", "-o", report, "--"] + argv
        else:
            cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no"]
            cmd += [f"--callgrind-out-file={report}"] + argv
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise CountFailed(f"{name}: the child failed under {tool}:\n{done.stderr[-3000:]}")
        with open(report) as f:
            lines = f.read().splitlines()
    if tool == "perf":
        counts = [ln.split(",")[0] for ln in lines if "instructions" in ln]
        return int(counts[0])
    return int(next(ln.split()[1] for ln in lines if ln.startswith("summary:")))


def measure(name: str, tool: str, args, env: dict, tree: str | None = None) -> dict:
    """One workload's instructions per call (under `tool`) and wall us per call (without);
    `tree`: the folder the child must import fusegrad from (`--against`)."""
    base = [sys.executable, os.path.abspath(__file__), "--child", name]
    base += ["--calls", str(args.calls), "--warmup", str(args.warmup)]
    plain = subprocess.run(base, env=env, capture_output=True, text=True)
    if plain.returncode != 0:
        raise SystemExit(f"{name}: the child failed:\n{plain.stderr[-3000:]}")
    said = json.loads(plain.stdout.splitlines()[-1])
    assert tree is None or said["fusegrad"].startswith(tree), "the child did not import REF's tree"
    wall_us = said["wall"] * 1e6
    count = count_instructions(name, tool, base + ["--counter", tool], env)
    return {"instructions": count / args.calls, "wall_us": wall_us}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calls", type=int, default=200, help="counted calls per workload")
    ap.add_argument("--warmup", type=int, default=100, help="calls before the count")
    ap.add_argument("--only", help="only the workloads whose name contains this")
    ap.add_argument("--tool", choices=["auto", "perf", "callgrind"], default="auto")
    ap.add_argument("--threads", default="1", help="FUSEGRAD_THREADS for the children")
    ap.add_argument("--against", metavar="REF", help="also count fusegrad at git REF")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--counter", default="none", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        if args.counter == "perf":
            counter = PerfCounter(*os.environ["HOST_INSTRUCTIONS_PERF"].split(":"))
        elif args.counter == "callgrind":
            counter = CallgrindCounter()
        else:
            counter = NoCounter()
        wall = child(args.child, args.calls, args.warmup, counter)
        import fusegrad

        print(json.dumps({"wall": wall, "fusegrad": os.path.abspath(fusegrad.__file__)}))
        return {}

    from machine import cpu_name, load_average, source_version

    tool = args.tool
    if tool == "auto":
        tool = "perf" if perf_works() else "callgrind"
    names = [n for n in WORKLOADS if not args.only or args.only in n]
    root = os.path.dirname(HERE)
    print(f"host instructions per call | {cpu_name()} | counter: {tool}")
    print(f"fusegrad at {source_version(root)} | {args.calls} calls after {args.warmup} warm-up")
    print(f"FUSEGRAD_THREADS={args.threads} | load average {load_average()}")
    print("(wall times: without the counter, and NOT comparable between runs under load)")
    env = dict(os.environ, FUSEGRAD_THREADS=args.threads, PYTHONHASHSEED="0")
    before_env = path = None
    if args.against:
        from host_cost import importable_tree

        path = importable_tree(args.against, root)
        before_env = dict(env, PYTHONPATH=path + os.pathsep + env.get("PYTHONPATH", ""))
        print(f"before: {args.against} | after: this tree")
    figures = {}
    try:
        for name in names:
            try:
                after = measure(name, tool, args, env)
                before = measure(name, tool, args, before_env, path) if before_env else None
            except CountFailed as e:
                print(f"  {name:<20}not counted: {str(e).splitlines()[0]}", flush=True)
                print("\n".join(str(e).splitlines()[-12:]), file=sys.stderr)
                continue
            figures[name] = after
            line = f"  {name:<20}{after['instructions']:12,.0f} instructions/call"
            if before is not None:
                figures[name] = {"before": before, "after": after}
                ratio = before["instructions"] / after["instructions"]
                line = (
                    f"  {name:<20}{before['instructions']:12,.0f} -> "
                    f"{after['instructions']:,.0f} instructions/call ({ratio:.2f}x fewer)"
                    f"   wall {before['wall_us']:.1f} -> {after['wall_us']:.1f} us"
                )
            else:
                line += f"   {after['wall_us']:8.1f} us/call wall"
            print(line, flush=True)
    finally:
        if path is not None:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": tool, "figures": figures}, f)
    return figures


if __name__ == "__main__":
    main()
