"""The worker pool's native half: threads that wait for kernels without Python.

Each worker is a Python thread that calls `fg_pool_worker` once and never comes back
to Python: it waits in native code for a job, runs its slice, and waits again, so
handing it a kernel costs no GIL hand-over, no Python on the worker, and no lock
object. A caller hands over a job in one native call, `fg_pool_run`, which also runs
the caller's own slice and waits for the workers' (spinning, then yielding).

A worker that has nothing to do spins for a short while (`JOB_SPIN_US`: a training
step's next kernel usually comes within it), then sleeps on a futex. Waking a
sleeping thread of a virtual machine's idle CPU takes tens to hundreds of
microseconds, so the engine calls `fg_pool_prewake` as soon as it knows that the
plan it is about to run has a parallel kernel: the workers wake while the caller's
Python prepares the run, and spin (at most `WAKE_SPIN_US`) until it arrives.

The memory the three functions share is one array of 64-bit words (`Layout`): the
futex word, settings, the job's arguments (one set for all threads: only each
thread's slice differs), the cancel word, and a slot per worker (the job's sequence
number, the one it has finished, whether it sleeps, the function, the thread count, the
loop length, its thread id and the fewest and the most iterations a chunk holds).

A nonzero cancel word stops a job early: every thread looks at it before claiming a
chunk (one load per chunk) and claims no more once it is set, and a program skips its
remaining kernels (runtime/program.py). The caller sets it when Ctrl-C interrupts a
long run (runtime/launch.py) and clears it once the threads have returned; the
outputs are then incomplete, and the caller raises instead of using them.

A null function is the pool closing: the worker returns to Python, and its thread
ends. A job's function is called as `fn(start, end, a0, ..., a61)`: a kernel's own
signature is `(start, end, ptr...)` with at most MAX_ARGS pointers, and reads only
those (the C calling conventions of x86-64 and AArch64 let a caller pass more
arguments than the callee reads). A program (runtime/program.py) is called as
`fn(tid, nthreads, buffers, kernels, barrier, cancel)`: `extent` -1 selects that form.

The functions' LLVM IR is the text of `runtime/pool.ll` (package data), its placeholders
filled by `render` (the `Layout` offsets, the machine's spin-wait pause, the arguments'
loads and `claim_loop_ir`'s chunk loop).

Linux only (futexes); elsewhere `available()` is False and kernels run on the
calling thread.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.resources
import platform
import string
import sys
import threading
import time

from ..pipeline.compiler import compile_kernel
from . import forksafe

MAX_ARGS = 62  # pointer arguments a kernel run by the pool may take (64 in all)
MAX_WORKERS = 255
JOB_SPIN_US = 50  # a worker spins this long after a job before it sleeps
WAKE_SPIN_US = 1000  # and this long after a pre-wake, waiting for the job it announced
# a kernel's loop is claimed in about this many chunks per thread (a late thread then
# holds the others up by at most a chunk), each at least CHUNK_MIN_WORK inner iterations
# (so claiming costs little next to running one)
CHUNKS_PER_THREAD = 32
CHUNK_MIN_WORK = 1 << 14
# and at most this many (where a row of the loop is shorter), so that a cancelled run
# stops within a few milliseconds even when 1/CHUNKS_PER_THREAD of its loop takes seconds
CHUNK_MAX_WORK = 1 << 24
CALLER_SPINS = 4000  # pauses the caller spins waiting for a worker before it yields


class Layout:
    """Word offsets in the shared array."""

    GEN = 0  # the futex word (its low 32 bits): bumped to wake sleeping workers
    PLACED_CPU = 1  # the CPU the caller ran on when the workers were placed off it
    JOB_SPIN = 2  # cycles a worker spins after a job
    WAKE_SPIN = 3  # cycles a worker spins after being woken
    SYSCALL = 4  # libc's syscall(), sched_getcpu() and sched_yield() addresses
    GETCPU = 5
    YIELD = 6
    FUTEX_NR = 7  # the futex system call's number on this architecture
    ARGS = 8  # MAX_ARGS words: the job's arguments
    CANCEL = 70  # nonzero: claim no more chunks (read-mostly, beside the arguments)
    NEXT = 72  # the next chunk of a kernel's loop to claim (a cache line of its own)
    SLOTS = 80  # then a slot per worker
    SLOT_WORDS = 16  # 128 bytes, so two workers' slots never share a cache line
    SEQ, DONE, SLEEPING, FN, N, EXTENT, TID, LEAST, MOST = range(9)
    WORDS = SLOTS + SLOT_WORDS * MAX_WORKERS


_FUTEX_NR = {"x86_64": 202, "aarch64": 98}
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129


def available() -> bool:
    """Whether this platform has the native pool (Linux on x86-64 or AArch64)."""
    return sys.platform.startswith("linux") and platform.machine() in _FUTEX_NR


def claim_loop_ir(
    p: str, counter: str, extent, least, most, n, call: str, done: str, cancel: str, tid
) -> list[str]:
    """Blocks {p}claim, {p}size and {p}run, for `n` threads sharing a loop of `extent`:
    cut the loop into chunks of one size, about CHUNKS_PER_THREAD per thread but at least
    `least` (>= 1) and at most `most` (>= least) iterations each, the last cut at the
    loop's end; claim them from the shared counter at `counter`, run each (`call`: the
    call's text, with `{}` where the chunk's start and end go), and branch to `done` once
    none is left, or before a claim once the word at `cancel` is nonzero. Shared by the
    pool's launches and the programs' kernels (runtime/program.py).

    Threads of even id (`tid`) claim chunks from the loop's start, odd ones from its end:
    the counter word holds how many each end has given, the front's in its low half and
    the back's in its high half, claimed by compare-and-swap. With two threads each takes
    the same end of a loop run after run, so a kernel run over and over (a recurrent
    cell's product, every time step) and the kernels that read what it wrote find their
    half in their core's own cache; from one counter, whoever came first, the halves
    changed hands from run to run. Where the threads meet depends on their speeds, but
    the chunks do not: they are the same whichever thread runs them, and so is every
    value a kernel computes (its tiles and its sums' order follow the chunks). A loop of
    2^31 chunks or more is claimed from the front only (the whole word counts them)."""
    return [
        f"  %{p}parts = mul i64 {n}, {CHUNKS_PER_THREAD}",
        f"  %{p}c0 = udiv i64 {extent}, %{p}parts",
        f"  %{p}big = icmp ugt i64 %{p}c0, {least}",
        f"  %{p}c1 = select i1 %{p}big, i64 %{p}c0, i64 {least}",
        f"  %{p}huge = icmp ugt i64 %{p}c1, {most}",
        f"  %{p}chunk = select i1 %{p}huge, i64 {most}, i64 %{p}c1",
        f"  %{p}k0 = add i64 {extent}, %{p}chunk",
        f"  %{p}k1 = sub i64 %{p}k0, 1",
        f"  %{p}chunks = udiv i64 %{p}k1, %{p}chunk",
        f"  %{p}halves = icmp ult i64 %{p}chunks, 2147483648",
        f"  %{p}odd = trunc i64 {tid} to i1",
        f"  %{p}back = and i1 %{p}odd, %{p}halves",
        f"  %{p}inc = select i1 %{p}back, i64 4294967296, i64 1",
        f"  br label %{p}claim",
        f"{p}claim:",
        f"  %{p}stop = load atomic i64, ptr {cancel} monotonic, align 8",
        f"  %{p}halt = icmp ne i64 %{p}stop, 0",
        f"  br i1 %{p}halt, label %{done}, label %{p}load",
        f"{p}load:",
        f"  %{p}s0 = load atomic i64, ptr {counter} monotonic, align 8",
        f"  br label %{p}try",
        f"{p}try:",
        f"  %{p}s = phi i64 [%{p}s0, %{p}load], [%{p}seen, %{p}size]",
        f"  %{p}lo32 = and i64 %{p}s, 4294967295",
        f"  %{p}hi32 = lshr i64 %{p}s, 32",
        f"  %{p}f = select i1 %{p}halves, i64 %{p}lo32, i64 %{p}s",
        f"  %{p}b = select i1 %{p}halves, i64 %{p}hi32, i64 0",
        f"  %{p}used = add i64 %{p}f, %{p}b",
        f"  %{p}left = icmp ult i64 %{p}used, %{p}chunks",
        f"  br i1 %{p}left, label %{p}size, label %{done}",
        f"{p}size:",
        f"  %{p}s1 = add i64 %{p}s, %{p}inc",
        f"  %{p}pair = cmpxchg ptr {counter}, i64 %{p}s, i64 %{p}s1 monotonic monotonic",
        f"  %{p}seen = extractvalue {{ i64, i1 }} %{p}pair, 0",
        f"  %{p}won = extractvalue {{ i64, i1 }} %{p}pair, 1",
        f"  br i1 %{p}won, label %{p}run, label %{p}try",
        f"{p}run:",
        f"  %{p}last = sub i64 %{p}chunks, 1",
        f"  %{p}fromback = sub i64 %{p}last, %{p}b",
        f"  %{p}idx = select i1 %{p}back, i64 %{p}fromback, i64 %{p}f",
        f"  %{p}lo = mul i64 %{p}idx, %{p}chunk",
        f"  %{p}hi0 = add i64 %{p}lo, %{p}chunk",
        f"  %{p}over = icmp ugt i64 %{p}hi0, {extent}",
        f"  %{p}hi = select i1 %{p}over, i64 {extent}, i64 %{p}hi0",
        "  " + call.format(f"%{p}lo", f"%{p}hi"),
        f"  br label %{p}claim",
    ]


@functools.lru_cache(maxsize=1)
def _template() -> string.Template:
    """runtime/pool.ll, its comment lines (those starting with ";") left out."""
    text = importlib.resources.files(__package__).joinpath("pool.ll").read_text("utf-8")
    return string.Template("".join(line + "\n" for line in text.splitlines() if line[:1] != ";"))


def render() -> str:
    """The LLVM IR of fg_pool_worker, fg_pool_run, fg_pool_prewake, fg_pool_close and
    fg_pool_cycles: runtime/pool.ll with its placeholders filled for this machine (x86's
    `pause` or a fence) and `Layout`.

    >>> text = render()
    >>> all(f"@fg_pool_{name}(" in text for name in ("worker", "run", "prewake", "close"))
    True
    """
    x86 = platform.machine() == "x86_64"
    declarations = ["declare i64 @llvm.readcyclecounter()"]
    if x86:
        declarations.append("declare void @llvm.x86.sse2.pause()")
    signature = ", ".join(["i64"] * (MAX_ARGS + 2))  # fn(start, end, a0, ..., a61)
    arguments = ", ".join(f"i64 %a{k}" for k in range(MAX_ARGS))
    call = f"call void ({signature}) %fn(i64 {{}}, i64 {{}}, {arguments})"
    chunks = claim_loop_ir(
        "c.", "%next", "%ext", "%least", "%most", "%n", call, "done", "%cancel", "%tid"
    )
    body = _template().substitute(
        {name: word for name, word in vars(Layout).items() if name.isupper()},
        SLOT_SLEEPING=Layout.SLOTS + Layout.SLEEPING,
        pause="call void @llvm.x86.sse2.pause()" if x86 else "fence seq_cst",
        argument_loads="\n".join(_argument_loads()),
        signature=signature,
        arguments=arguments,
        claim_chunks="\n".join(chunks),
        FUTEX_WAIT_PRIVATE=FUTEX_WAIT_PRIVATE,
        FUTEX_WAKE_PRIVATE=FUTEX_WAKE_PRIVATE,
        CALLER_SPINS=CALLER_SPINS,
    )
    return "\n".join(declarations) + "\n" + body


def _argument_loads() -> list[str]:
    """fg_pool_do's loads of the job's MAX_ARGS argument words, %a0 .. %a61."""
    lines = []
    for k in range(MAX_ARGS):
        lines.append(f"  %a{k}.at = getelementptr inbounds i64, ptr %pool, i64 {Layout.ARGS + k}")
        lines.append(f"  %a{k} = load i64, ptr %a{k}.at")
    return lines


_kept = []  # the pool's compiled code: its workers run it as long as the process lives


def functions() -> dict[str, int]:
    """The five functions' addresses (compiled once per process, or read from the cache)."""
    with _functions_lock:  # (one compile, if `compile_ahead`'s thread is at it)
        return _functions()


def compile_ahead() -> None:
    """Compile the pool's code on a thread of its own, once per process, while this one
    goes on (a new plan's lowering and rendering: LLVM runs without the GIL), so a cold
    first step does not wait for it when its first kernel starts the pool. A failure is
    left for `functions()` to raise where it is needed."""
    global _ahead
    if _ahead is None:
        # not a daemon: the interpreter waits for it at exit rather than unloading LLVM
        # under a thread still inside it
        _ahead = forksafe.Thread(target=_compile_quietly, name="fusegrad-pool-compile")
        _ahead.start()


def _compile_quietly() -> None:
    try:
        functions()
    except Exception:  # said again, where it matters, by the pool's own call
        pass


_functions_lock = forksafe.Lock()
_ahead: threading.Thread | None = None


@functools.lru_cache(maxsize=1)
def _functions() -> dict[str, int]:
    source = render()
    compiled = compile_kernel(source, "fg_pool_run", 2)
    # the workers live until the process ends, parked in this code: its library must never
    # be disposed of, not even when the interpreter clears module globals at exit (a worker
    # still spinning there would jump into unmapped memory)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(compiled))
    _kept.append(compiled)
    out = {"fg_pool_run": compiled.address}
    for name in ("fg_pool_worker", "fg_pool_prewake", "fg_pool_close", "fg_pool_cycles"):
        out[name] = compiled.library.address_of(name)
        if not out[name]:
            raise RuntimeError(f"the worker pool's {name} did not load")
    return out


@functools.lru_cache(maxsize=1)
def cycles_per_us() -> float:
    """How fast the cycle counter the workers time their spinning with ticks."""
    cycles = ctypes.CFUNCTYPE(ctypes.c_uint64)(functions()["fg_pool_cycles"])
    t0, c0 = time.perf_counter(), cycles()
    while time.perf_counter() - t0 < 2e-3:
        pass
    t1, c1 = time.perf_counter(), cycles()
    return max((c1 - c0) / ((t1 - t0) * 1e6), 1.0)


def libc_addresses() -> tuple[int, int, int, int]:
    """(syscall, sched_getcpu, sched_yield, the futex call's number) for the shared words."""
    libc = ctypes.CDLL(None)

    def address(name):
        return ctypes.cast(getattr(libc, name), ctypes.c_void_p).value

    nr = _FUTEX_NR[platform.machine()]
    return address("syscall"), address("sched_getcpu"), address("sched_yield"), nr
