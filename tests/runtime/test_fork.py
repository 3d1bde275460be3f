"""fork() while other threads compile and compute: the child must not inherit a held lock.

DataLoader workers fork while the parent's threads are busy. A lock another thread held
at the fork stays held for ever in the child (that thread does not exist there), so every
lock of fusegrad's is made afresh in a child (`runtime/forksafe.py`), and the compile lock
is taken across the fork so LLVM is never forked mid-compile.

The scenario runs in a fresh interpreter, so the first forks land while the very first
compiles (LLVM's start, the worker pool's code) are running.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from fusegrad.runtime import forksafe

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

_SCENARIO = r"""
import faulthandler, json, os, signal, sys, threading, time
import numpy as np
import fusegrad as fg

FORKS, SPACING, DEADLINE = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
stop = threading.Event()
errors = []

def busy(k):
    # a new shape every iteration: every one compiles (FUSEGRAD_CACHE=off)
    n = 100 + k
    try:
        while not stop.is_set():
            x = fg.ones(n, 3) * (k + 1)
            got = (x.exp() + x).sum(0).numpy()
            want = n * (np.exp(np.float32(k + 1)) + (k + 1))
            if not np.allclose(got, want, rtol=1e-5):
                errors.append((n, got.tolist()))
            n += 2
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=busy, args=(k,), daemon=True) for k in range(2)]
for t in threads:
    t.start()

children = []
for i in range(FORKS):
    time.sleep(0 if i < 3 else SPACING)  # the first forks land during the first compiles
    pid = os.fork()
    if pid == 0:
        code = 3
        faulthandler.register(signal.SIGUSR1)  # where it hangs, if it does
        try:
            n = 10_000 + i  # a shape no thread made: the child compiles it
            got = (fg.ones(n) * 3).sum().item()
            code = 0 if got == 3 * n else 2
        finally:
            os._exit(code)
    children.append(pid)

stop.set()
end = time.monotonic() + DEADLINE
codes = {}
while len(codes) < len(children) and time.monotonic() < end:
    for pid in children:
        if pid not in codes:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[pid] = os.waitstatus_to_exitcode(status)
    time.sleep(0.02)
hung = [pid for pid in children if pid not in codes]
for pid in hung:
    os.kill(pid, signal.SIGUSR1)
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
for t in threads:
    t.join(timeout=DEADLINE)
print(json.dumps({"codes": sorted(codes.values()), "hung": len(hung), "errors": errors[:3]}))
"""


def _run_scenario(forks: int, spacing: float, deadline: float, threads: int) -> dict:
    env = dict(os.environ, FUSEGRAD_CACHE="off", FUSEGRAD_THREADS=str(threads))
    env.pop("FUSEGRAD_TEST_DEVICE", None)
    out = subprocess.run(
        [sys.executable, "-c", _SCENARIO, str(forks), str(spacing), str(deadline)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr[-6000:]}


@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="needs os.fork")
def test_forks_while_threads_compile_and_run_leave_no_child_hung():
    """14 forks, the first three while the first kernels compile, the rest while two
    threads compile a new shape each iteration: every child compiles and computes its
    own kernel and exits 0 within the deadline (a hung child is killed and counted)."""
    # a generous deadline: on a loaded machine a child takes seconds; a hung one never ends
    got = _run_scenario(forks=14, spacing=0.12, deadline=30.0, threads=2)
    assert got["hung"] == 0, f"{got['hung']} of 14 forked children hung: {got}\n{got['stderr']}"
    assert got["codes"] == [0] * 14, got
    assert not got["errors"], got["errors"]


# A user's thread inside a numpy matmul at a fork: OpenBLAS shuts its pool down at every
# fork, and that matmul, then every later one in the process, waited for ever (issue 55).
_MATMUL_BESIDE = r"""
import faulthandler, sys, threading, time
faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)  # (every thread's stack, then out)
import numpy as np
import fusegrad as fg
from fusegrad.runtime import compile_servers, forksafe

if sys.argv[2] == "fork anyway":  # the old behaviour, to see the test fail
    forksafe.may_fork = lambda: True
A, B = np.random.rand(256, 512), np.random.rand(512, 64)
done = [0]

def matmuls():
    while True:
        A @ B
        done[0] += 1

threading.Thread(target=matmuls, daemon=True).start()
x = fg.randn(64, 48)
for k in range(int(sys.argv[1])):  # a new plan of several kernels each time
    fg.stack([(x * (k + j / 7)).exp().sum(1) for j in range(6)]).numpy()
before = done[0]
time.sleep(1.0)
print(done[0] - before, len(compile_servers._helpers))
"""


HANG_SECONDS = 75  # (a run takes about 3 s; a hung child prints its stacks and exits)


def _matmuls_after_compiles(plans: int, how: str = "") -> tuple[int, int]:
    """(numpy matmuls another thread did in the second after `plans` new plans
    compiled, compile helpers spawned), in a fresh interpreter that compiles side by side."""
    env = dict(os.environ, FUSEGRAD_CACHE="off", FUSEGRAD_COMPILE_WORKERS="2")
    env.pop("FUSEGRAD_TEST_DEVICE", None)
    code = _MATMUL_BESIDE.replace("HANG_SECONDS", str(HANG_SECONDS))
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, str(plans), how],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS + 30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("hung: compiling beside a thread's numpy matmuls blocked them for ever")
    if "Timeout (" in out.stderr:  # the child's own alarm: its threads' stacks, to see where
        pytest.fail(
            "hung: compiling beside a thread's numpy matmuls blocked them for ever; the"
            f" stacks after {HANG_SECONDS} s:\n{out.stderr[-8000:]}"
        )
    assert out.returncode == 0, out.stderr[-3000:]
    matmuls, helpers = map(int, out.stdout.split())
    return matmuls, helpers


@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="needs os.fork")
def test_compiling_beside_a_thread_in_numpy_matmuls_never_blocks_them():
    matmuls, helpers = _matmuls_after_compiles(6)
    assert matmuls > 0, "the thread's matmuls stopped after fusegrad compiled"
    assert helpers == 1, "the kernels were compiled by a spawned helper, not a fork"


# ---------------------------------------------------------------- the audit


_LOCK_TYPES = ("Lock", "RLock", "Condition", "Event", "Semaphore", "BoundedSemaphore")


def _lock_calls(path: str):
    """(line, text) of every threading.Lock/RLock/Condition/Event/Semaphore made in a file."""
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "threading"
            and node.func.attr in _LOCK_TYPES
        ):
            yield node.lineno, ast.unparse(node)


def test_every_lock_outside_ir_is_made_by_forksafe():
    """A lock made with `threading` directly would keep a held state into a forked child;
    `forksafe.Lock()` and its kin are made afresh there. (ir/ imports nothing of the
    runtime: its module-level locks are listed in forksafe instead, tested below.)"""
    bad = []
    for folder in ("frontend", "pipeline", "runtime", "nn"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                path = os.path.join(dirpath, name)
                if not name.endswith(".py") or path.endswith(
                    os.path.join("runtime", "forksafe.py")
                ):
                    continue
                bad += [
                    f"{os.path.relpath(path, ROOT)}:{line}: {text}"
                    for line, text in _lock_calls(path)
                ]
    assert not bad, "locks a forked child would inherit held:\n" + "\n".join(bad)


def test_every_reset_after_a_fork_goes_through_forksafe():
    """One registry (`forksafe.at_fork`), run after the locks are free again."""
    scattered = []
    for folder in ("frontend", "ir", "pipeline", "runtime", "nn"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                where = os.path.relpath(os.path.join(dirpath, name), ROOT)
                if name.endswith(".py") and where != os.path.join("runtime", "forksafe.py"):
                    if "register_at_fork(" in open(os.path.join(ROOT, where)).read():
                        scattered.append(where)
    assert not scattered, scattered


def test_the_ir_locks_are_made_afresh_in_a_child():
    import importlib

    for name in os.listdir(os.path.join(ROOT, "ir")):
        if not name.endswith(".py"):
            continue
        module = importlib.import_module(f"fusegrad.ir.{name[:-3]}")
        tree = ast.parse(open(module.__file__).read())
        for stmt in tree.body:  # module-level `NAME = threading.Lock()`
            if isinstance(stmt, ast.Assign) and list(_lock_calls_of(stmt)):
                for target in stmt.targets:
                    assert forksafe.tracked(getattr(module, target.id)), f"ir/{name}: {target.id}"


def _lock_calls_of(stmt):
    call = stmt.value
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "threading"
        and call.func.attr in _LOCK_TYPES
    ):
        yield call


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_lock_held_by_another_thread_at_the_fork_is_free_in_the_child():
    import threading

    lock = forksafe.Lock()
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if lock.acquire(timeout=2) else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        t.join()
    assert os.waitstatus_to_exitcode(status) == 0
