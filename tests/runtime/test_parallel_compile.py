"""A new plan's kernels compile side by side in forked processes (pipeline/compiler.py):
the same machine code as one process makes, a failed or stuck child costing only time,
and a schedule's program compiled at O0."""

from __future__ import annotations

import ctypes
import os
import threading
import time
import uuid

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline import compiler
from fusegrad.runtime import forksafe

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forking compilers need fork")


@pytest.fixture(autouse=True)
def _no_users_thread():
    """fusegrad forks only while no thread but its own runs (runtime/forksafe.py)."""
    assert forksafe.may_fork(), f"a thread another test left running: {threading.enumerate()}"


def _sources(n: int, tag: str) -> list[tuple[str, str, int, int]]:
    """n kernels `out[i] = i * k` for i in [start, end), each one distinct (tag)."""
    jobs = []
    for k in range(n):
        symbol = f"pc_{tag}_{k}"
        # (the tag in the code too, not only in the name: code the same as an earlier
        # run's is found in the caches, compiled by none)
        source = f"""
@{symbol}_tag = private unnamed_addr constant i8 {k}
define void @{symbol}(i64 %start, i64 %end, ptr %out) {{
entry:
  br label %loop
loop:
  %i = phi i64 [%start, %entry], [%next, %loop]
  %f = sitofp i64 %i to float
  %v = fmul float %f, {float(k + 1):e}
  %at = getelementptr inbounds float, ptr %out, i64 %i
  store float %v, ptr %at
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""
        jobs.append((source, symbol, 1, 3))
    return jobs


def _run(kernel, n: int = 37) -> np.ndarray:
    out = np.zeros(n, np.float32)
    kernel.fn(0, n, out.ctypes.data)
    return out


def _check(kernels) -> None:
    for k, kernel in enumerate(kernels):
        np.testing.assert_array_equal(_run(kernel), np.arange(37, dtype=np.float32) * (k + 1))


@pytest.fixture
def no_disk_cache():
    with fg.config.override(cache=None):
        yield


@pytest.mark.usefixtures("no_disk_cache")
def _record_forks(monkeypatch) -> list[int]:
    """The pids os.fork returns to this process from now on, in a list that fills."""
    forked = []
    fork = os.fork

    def recording_fork():
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recording_fork)
    return forked


def test_forked_compilers_make_the_same_code_as_one_process():
    tag = uuid.uuid4().hex[:8]
    with fg.config.override(compile_workers=3):
        assert compiler.compile_workers(5) == 3 and compiler.compile_workers(1) == 1
        before = compiler.stats["compiled"]
        kernels = compiler.compile_kernels(_sources(5, tag))
    assert compiler.stats["compiled"] - before == 5
    assert [k.cache for k in kernels] == ["compiled"] * 5
    _check(kernels)
    # (what is compiled is each kernel's code: `compiler.code_of`)
    codes = [compiler.code_of(source, symbol, 3)[0] for source, symbol, *_ in _sources(5, tag)]
    alone = [compiler._emit(code, 3)[0] for code in codes]
    assert [compiler._memory[k.code_symbol] for k in kernels] == alone  # byte for byte


@pytest.mark.usefixtures("no_disk_cache")
def test_a_kernel_twice_in_one_batch_is_compiled_once():
    (job,) = _sources(1, uuid.uuid4().hex[:8])
    before = compiler.stats["compiled"]
    with fg.config.override(compile_workers=2):
        a, b = compiler.compile_kernels([job, job])
    assert compiler.stats["compiled"] - before == 1
    assert (a.cache, b.cache) == ("compiled", "memory") and a.address == b.address


@pytest.mark.usefixtures("no_disk_cache")
def test_a_child_that_fails_costs_only_time(monkeypatch):
    parent = os.getpid()
    emit = compiler._emit_pair

    def failing_in_children(item):
        if os.getpid() != parent:
            raise RuntimeError("a child's compile failed")
        return emit(item)

    monkeypatch.setattr(compiler, "_emit_pair", failing_in_children)  # forked children see it
    with fg.config.override(compile_workers=2):
        kernels = compiler.compile_kernels(_sources(4, uuid.uuid4().hex[:8]))
    _check(kernels)


@pytest.mark.usefixtures("no_disk_cache")
def test_a_stuck_child_is_killed_and_its_share_compiled_here(monkeypatch):
    parent = os.getpid()
    emit = compiler._emit_pair

    def stuck_in_children(item):
        if os.getpid() != parent:
            time.sleep(3600)
        return emit(item)

    monkeypatch.setattr(compiler, "_emit_pair", stuck_in_children)
    monkeypatch.setattr(compiler, "CHILD_PATIENCE_S", 1.0)
    forked = _record_forks(monkeypatch)
    t0 = time.monotonic()
    with fg.config.override(compile_workers=2):
        kernels = compiler.compile_kernels(_sources(4, uuid.uuid4().hex[:8]))
    assert time.monotonic() - t0 < 30
    _check(kernels)
    assert forked
    for pid in forked:
        with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
            os.waitpid(pid, os.WNOHANG)


def test_one_worker_or_an_mpi_rank_compiles_in_this_process(monkeypatch):
    with fg.config.override(compile_workers=1):
        assert compiler.compile_workers(8) == 1
    monkeypatch.setitem(__import__("sys").modules, "mpi4py.MPI", object())
    with fg.config.override(compile_workers=4):
        assert compiler.compile_workers(8) == 1


def test_the_setting_comes_from_the_environment(monkeypatch):
    from fusegrad.runtime.config import Config, ConfigError

    monkeypatch.setenv("FUSEGRAD_COMPILE_WORKERS", "3")
    assert Config.from_env().compile_workers == 3
    monkeypatch.setenv("FUSEGRAD_COMPILE_WORKERS", "0")  # one per core, at most 8
    assert 1 <= Config.from_env().compile_workers <= 8
    monkeypatch.setenv("FUSEGRAD_COMPILE_WORKERS", "many")
    with pytest.raises(ConfigError, match="FUSEGRAD_COMPILE_WORKERS"):
        Config.from_env()


def test_a_plan_compiled_side_by_side_computes_what_one_process_does():
    x = fg.tensor(np.linspace(-2, 2, 48, dtype=np.float32).reshape(6, 8), requires_grad=True)
    tag = float(uuid.uuid4().int % 1000) / 7 + 1  # new constants: new kernels, not cached
    with fg.config.override(compile_workers=2, cache=None):
        y = ((x * tag).tanh().softmax(-1) * x).sum(0).exp().sum()
        y.backward()
        got = y.item(), x.grad.numpy()
    with fg.config.override(compile_workers=1, cache=None):
        x.grad = None
        y = ((x * tag).tanh().softmax(-1) * x).sum(0).exp().sum()
        y.backward()
        np.testing.assert_array_equal(got[1], x.grad.numpy())
        assert got[0] == y.item()


def test_a_schedules_program_is_compiled_at_O0():
    from fusegrad.runtime.program import compile_program

    program = compile_program([(10, 10, [0, 1]), (20, 20, [1, 2])])
    assert program.opt == 0
    assert "define void @program_" in program.optimized_ir  # its dump says what it ran
    assert ctypes.cast(program.address, ctypes.c_void_p).value


# ------------------------------------------------ lowering and compiling side by side


def _pid_after(seconds: float):
    def make(i):
        time.sleep(seconds)
        return i, os.getpid()

    return make


def test_side_by_side_makes_each_index_once_across_the_processes():
    got = compiler.side_by_side(40, _pid_after(0.01), 3)
    assert [i for i, _ in got] == list(range(40))
    assert os.getpid() in {pid for _, pid in got}
    assert len({pid for _, pid in got}) >= 2  # the children took their share


def test_side_by_side_remakes_here_what_a_child_could_not_send(monkeypatch):
    """An index whose make raised in a child, or made something pickle cannot carry, is
    made again here; an error of make in this process is raised."""
    parent = os.getpid()

    def make(i):
        time.sleep(0.005)
        if os.getpid() != parent and i % 3 == 0:
            raise RuntimeError("a child's lowering failed")
        if os.getpid() != parent and i % 3 == 1:
            return lambda: i  # cannot be pickled
        return i

    got = compiler.side_by_side(30, make, 2)
    assert [g if isinstance(g, int) else g() for g in got] == list(range(30))

    def failing(i):
        if i == 7:
            raise ValueError("index 7")
        return i

    with pytest.raises(ValueError, match="index 7"):
        compiler.side_by_side(10, failing, 1)
    with pytest.raises(ValueError, match="index 7"):  # made here at the latest
        compiler.side_by_side(10, failing, 2)


def test_side_by_side_kills_a_stuck_child_and_makes_its_indices_here(monkeypatch):
    parent = os.getpid()
    monkeypatch.setattr(compiler, "CHILD_PATIENCE_S", 1.0)
    forked = _record_forks(monkeypatch)

    def make(i):
        if os.getpid() != parent:
            time.sleep(3600)
        time.sleep(0.01)
        return i * 2

    t0 = time.monotonic()
    assert compiler.side_by_side(6, make, 2) == [i * 2 for i in range(6)]
    assert time.monotonic() - t0 < 30 and forked
    for pid in forked:
        with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
            os.waitpid(pid, os.WNOHANG)


def test_a_new_plans_repeated_kernels_are_lowered_once(monkeypatch):
    """Two layers' identical kernels (the same item key) are lowered, rendered and
    compiled once; the plan still computes both."""
    from fusegrad.runtime.cpu_backend import CpuBackend

    lowered = []
    lower = CpuBackend.lower

    def counting(self, item):
        lowered.append(os.getpid())
        return lower(self, item)

    monkeypatch.setattr(CpuBackend, "lower", counting)
    tag = float(uuid.uuid4().int % 1000) / 1000 + 0.5  # new constants: new kernels
    a = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    b = a[::-1].copy()
    with fg.config.override(compile_workers=1, cache=None):
        x, y = fg.tensor(a), fg.tensor(b)
        u, v = (x * tag).exp().sum(1), (y * tag).exp().sum(1)  # the same kernel twice
        kernels = fg.kernels(u, v)
        got = u.numpy(), v.numpy()
    for t, array in zip(got, (a, b)):
        np.testing.assert_allclose(t, np.exp(array * np.float32(tag)).sum(1), rtol=1e-5)
    assert len(kernels) == 2 and kernels[0].name == kernels[1].name
    assert len(lowered) == 1  # lowered (and compiled) once


def _lstm_reference(x, w_ih, w_hh, b_ih, b_hh):
    """torch's LSTM (gates i, f, g, o) over x of (time, batch, input), in float64."""
    h = np.zeros((x.shape[1], w_hh.shape[1]))
    c = np.zeros_like(h)
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    out = []
    for x_t in x:
        i, f, g, o = np.split(x_t @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.stack(out)


@pytest.mark.usefixtures("no_disk_cache")
def test_a_new_plans_kernels_of_one_code_are_compiled_once(monkeypatch):
    """An LSTM's time steps are kernels of one code whose items differ (each step's own
    key): the new plan compiles each code once (`new_object`'s `claimed`), where each
    item compiled it again. The plan still computes torch's LSTM and its gradient."""
    emitted = []
    emit = compiler._emit_here

    def counting(source, opt):
        if opt > 0:  # (a schedule's program is O0)
            emitted.append(source)
        return emit(source, opt)

    monkeypatch.setattr(compiler, "_emit_here", counting)
    hidden = 9 + uuid.uuid4().int % 40  # sizes no other test compiled
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((12, 3, 5))
    with fg.config.override(compile_workers=1):
        lstm = fg.nn.LSTM(5, hidden, dtype=fg.float64)
        x = fg.tensor(x0, requires_grad=True)
        out, _ = lstm(x)
        loss = (out * out).sum()
        loss.backward()
        got, grad = out.numpy(), x.grad.numpy()
        kernels = fg.kernels(out, x.grad)
    codes = [k.compiled.code_symbol for k in kernels]
    assert len(codes) > len(set(codes)), "no two kernels of one code: nothing tested"
    assert emitted and len(emitted) == len(set(emitted))
    weights = [p.detach().numpy() for p in lstm.parameters()]
    np.testing.assert_allclose(got, _lstm_reference(x0, *weights), rtol=1e-10, atol=1e-12)
    # the gradient at a few points, by central differences of the reference
    for t, b, i in ((0, 0, 0), (11, 2, 4), (5, 1, 2)):
        step = np.zeros_like(x0)
        step[t, b, i] = 1e-6
        plus = (_lstm_reference(x0 + step, *weights) ** 2).sum()
        minus = (_lstm_reference(x0 - step, *weights) ** 2).sum()
        assert grad[t, b, i] == pytest.approx((plus - minus) / 2e-6, rel=1e-5, abs=1e-8)


def test_a_forked_child_never_returns_to_its_parents_program(monkeypatch):
    """A Ctrl-C pending at the fork is raised in the child as soon as it runs Python: the
    child leaves (`os._exit`) instead of returning from `side_by_side` into the caller's
    program, which it would run on as a copy of it; its items are made here."""
    parent = os.getpid()
    escaped_r, escaped_w = os.pipe()
    fork = os.fork

    def fork_then_interrupted():
        pid = fork()
        if pid == 0:
            raise KeyboardInterrupt  # as a signal delivered right after the fork would
        return pid

    monkeypatch.setattr(os, "fork", fork_then_interrupted)
    try:
        got = compiler.side_by_side(6, lambda i: i + 1, 2)
    finally:
        if os.getpid() != parent:  # a child got back here: say so, and leave
            os.write(escaped_w, b"escaped")
            os._exit(0)
    os.close(escaped_w)
    assert got == [1, 2, 3, 4, 5, 6]
    with os.fdopen(escaped_r, "rb") as escaped:
        assert escaped.read() == b""


def test_a_kernel_that_only_moves_values_is_compiled_at_O2_and_one_that_computes_at_O3():
    """O3's unroller took 563 ms over LeNet's padded-copy kernel (short peeled loops) and
    O2 28 ms, the kernel as fast; arithmetic keeps O3. The copy's values are the same."""
    from fusegrad.runtime.cpu_backend import MOVEMENT_OPT

    x = fg.tensor(np.arange(2 * 3 * 5 * 5, dtype=np.float32).reshape(2, 3, 5, 5))
    padded = fg.nn.functional.pad(x, (2, 2, 2, 2))
    (copy,) = fg.kernels(padded)
    assert copy.flops == 0 and copy.compiled.opt == MOVEMENT_OPT == 2
    np.testing.assert_array_equal(padded.numpy(), np.pad(x.numpy(), ((0, 0),) * 2 + ((2, 2),) * 2))
    (scaled,) = fg.kernels(x * 3.0 + 1.0)
    assert scaled.compiled.opt == 3
